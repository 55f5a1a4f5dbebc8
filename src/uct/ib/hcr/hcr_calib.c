/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "hcr_calib.h"

#include <uct/ib/base/ib_device.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * The device part of the cost model, measured with the device's own verbs:
 * ibv_reg_mr/ibv_dereg_mr on resident and on never-touched pages, and
 * RDMA writes between two RC QPs of the device connected to each other
 * (latency, bandwidth and the gap between small messages). The result
 * replaces the IB md's constant reg_cost and feeds hcr's iface attributes.
 */

#define UCT_HCR_CALIB_REG_REPS     5
#define UCT_HCR_CALIB_LAT_ITERS    200
#define UCT_HCR_CALIB_GAP_MSGS     512
#define UCT_HCR_CALIB_BW_MSG       UCS_CALIB_NET_BW_SIZE
#define UCT_HCR_CALIB_BW_MSGS      16
#define UCT_HCR_CALIB_QP_DEPTH     64
#define UCT_HCR_CALIB_CPU_REPS     7
#define UCT_HCR_CALIB_WS_REPS      3
#define UCT_HCR_CALIB_WS_REPS_MAX  16
#define UCT_HCR_CALIB_WS_BYTES     (128 * UCS_MBYTE)
/* a staged sender's slots (as rndv/sppln's, UCP_SPPLN_NUM_SLOTS), and the
 * puts it keeps in flight */
#define UCT_HCR_CALIB_STAGE_SLOTS  3
#define UCT_HCR_CALIB_STAGE_PUTS   2
#define UCT_HCR_CALIB_TIMEOUT      5.0 /* seconds, for one completion */
/* the stream of fragment-sized sends: its messages, the receives posted
 * for it (as a UCT iface keeps a queue of them), and its repetitions */
#define UCT_HCR_CALIB_FRAG_MSGS  256
#define UCT_HCR_CALIB_FRAG_RECVS 16
#define UCT_HCR_CALIB_FRAG_REPS  5

static const size_t uct_hcr_calib_reg_sizes[] = {
    /* up to 4 MiB: registered twice with relaxed ordering, within the 8 MiB
     * an unprivileged process may pin by default (the loopback buffer is
     * registered only after these) */
    4 * UCS_KBYTE, 64 * UCS_KBYTE, 512 * UCS_KBYTE, UCS_MBYTE, 4 * UCS_MBYTE
};

typedef struct {
    uct_ib_md_t    *md;
    uint8_t        port;
    struct ibv_cq  *cq;
    struct ibv_qp  *qp[2];
    struct ibv_mr  *mr;
    void           *buf;
    size_t         buf_size;
} uct_hcr_calib_loop_t;


/* RDMA write (or read) of @a length bytes from (into) @a local (lkey
 * @a lkey) to (from) @a remote (rkey @a rkey) through the loopback QPs */
static ucs_status_t
uct_hcr_calib_post_rdma(uct_hcr_calib_loop_t *loop, enum ibv_wr_opcode opcode,
                        const void *local, uint32_t lkey, void *remote,
                        uint32_t rkey, size_t length, int flags, uint64_t wr_id)
{
    struct ibv_send_wr wr, *bad_wr;
    struct ibv_sge sge;

    sge.addr                = (uintptr_t)local;
    sge.length              = length;
    sge.lkey                = lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id                = wr_id;
    wr.sg_list              = &sge;
    wr.num_sge              = 1;
    wr.opcode               = opcode;
    wr.send_flags           = flags;
    wr.wr.rdma.remote_addr  = (uintptr_t)remote;
    wr.wr.rdma.rkey         = rkey;
    if (ibv_post_send(loop->qp[0], &wr, &bad_wr)) {
        ucs_error("hcr calib: ibv_post_send() failed: %m");
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

/* RDMA write from @a src (lkey @a lkey) to the second half of the buffer */
static ucs_status_t uct_hcr_calib_write_from(uct_hcr_calib_loop_t *loop,
                                             const void *src, uint32_t lkey,
                                             size_t length, int flags,
                                             uint64_t wr_id)
{
    return uct_hcr_calib_post_rdma(loop, IBV_WR_RDMA_WRITE, src, lkey,
                                   UCS_PTR_BYTE_OFFSET(loop->buf,
                                                       loop->buf_size / 2),
                                   loop->mr->rkey, length, flags, wr_id);
}

/* RDMA write from the first half of the buffer to the second */
static ucs_status_t uct_hcr_calib_write(uct_hcr_calib_loop_t *loop,
                                        size_t length, int flags,
                                        uint64_t wr_id)
{
    return uct_hcr_calib_write_from(loop, loop->buf, loop->mr->lkey, length,
                                    flags, wr_id);
}

/* The next completion of the loopback, a successful one, in *wc */
static ucs_status_t
uct_hcr_calib_poll(uct_hcr_calib_loop_t *loop, struct ibv_wc *wc)
{
    ucs_time_t deadline = ucs_get_time() +
                          ucs_time_from_sec(UCT_HCR_CALIB_TIMEOUT);
    int ret;

    while ((ret = ibv_poll_cq(loop->cq, 1, wc)) == 0) {
        if (ucs_get_time() > deadline) {
            ucs_error("hcr calib: loopback work request did not complete in "
                      "%.0f s",
                      UCT_HCR_CALIB_TIMEOUT);
            return UCS_ERR_TIMED_OUT;
        }
    }

    if (ret < 0) {
        ucs_error("hcr calib: ibv_poll_cq() failed: %d", ret);
        return UCS_ERR_IO_ERROR;
    } else if (wc->status != IBV_WC_SUCCESS) {
        ucs_error("hcr calib: loopback work request failed: %s",
                  ibv_wc_status_str(wc->status));
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

static ucs_status_t
uct_hcr_calib_wait(uct_hcr_calib_loop_t *loop, unsigned count)
{
    ucs_status_t status;
    struct ibv_wc wc;

    for (; count > 0; --count) {
        status = uct_hcr_calib_poll(loop, &wc);
        if (status != UCS_OK) {
            return status;
        }
    }
    return UCS_OK;
}

/*
 * Register and deregister one buffer the way the md does, and return the
 * times: with relaxed ordering (UCX_IB_PCI_RELAXED_ORDERING, on by default on
 * hosts that prefer it) the md registers every buffer twice, a relaxed and a
 * strict-order MR (uct_ib_mem_reg_internal()). With @a t_xfer, also time one
 * RDMA write of the buffer through the loopback QPs while it is registered:
 * a device that faults pages in on access rather than at registration takes
 * the faults there.
 */
static ucs_status_t uct_hcr_calib_reg_once(uct_ib_md_t *md,
                                           uct_hcr_calib_loop_t *loop,
                                           void *buf, size_t size,
                                           double *t_reg, double *t_xfer,
                                           double *t_dereg)
{
    uint64_t access     = UCT_IB_MEM_ACCESS_FLAGS;
    struct ibv_mr *mr[2] = {NULL, NULL};
    unsigned i, num_mrs = 1;
    ucs_status_t status = UCS_OK;
    ucs_time_t t0, t1;

    if (md->relaxed_order) {
        access |= IBV_ACCESS_RELAXED_ORDERING;
        num_mrs = 2;
    }

    t0    = ucs_get_time();
    mr[0] = ibv_reg_mr(md->pd, buf, size, access);
    if ((mr[0] != NULL) && (num_mrs > 1)) {
        mr[1] = ibv_reg_mr(md->pd, buf, size,
                           access & ~IBV_ACCESS_RELAXED_ORDERING);
    }
    t1 = ucs_get_time();

    for (i = 0; i < num_mrs; ++i) {
        if (mr[i] == NULL) {
            ucs_error("hcr calib: %s: ibv_reg_mr(%zu bytes) failed: %m",
                      uct_ib_device_name(&md->dev), size);
            status = UCS_ERR_IO_ERROR;
        }
    }
    *t_reg = ucs_time_to_sec(t1 - t0);

    if ((status == UCS_OK) && (t_xfer != NULL)) {
        status = uct_hcr_calib_write_from(loop, buf, mr[0]->lkey, size,
                                          IBV_SEND_SIGNALED, 0);
        if (status == UCS_OK) {
            status = uct_hcr_calib_wait(loop, 1);
        }
        t0      = ucs_get_time();
        *t_xfer = ucs_time_to_sec(t0 - t1);
        t1      = t0;
    }

    for (i = 0; i < num_mrs; ++i) {
        if (mr[i] != NULL) {
            ibv_dereg_mr(mr[i]);
        }
    }
    *t_dereg = ucs_time_to_sec(ucs_get_time() - t1);
    return status;
}

/* A buffer whose pages are all resident, or NULL */
static void *uct_hcr_calib_map_resident(size_t size)
{
    void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (buf == MAP_FAILED) {
        ucs_error("hcr calib: failed to map %zu bytes: %m", size);
        return NULL;
    }
    memset(buf, 0, size);
    return buf;
}

/*
 * UCT_HCR_CALIB_REG_REPS registrations of size bytes: of the resident
 * buffer, or of a fresh mapping each time (pages nobody touched: the
 * registration, or the transfer, faults them in). With loop, each also
 * times a transfer (uct_hcr_calib_reg_once()).
 */
static ucs_status_t uct_hcr_calib_reg_reps(uct_ib_md_t *md,
                                           uct_hcr_calib_loop_t *loop,
                                           void *resident, size_t size,
                                           ucs_calib_pages_t pages,
                                           double *reg, double *xfer,
                                           double *dereg)
{
    ucs_status_t status;
    unsigned r;
    void *buf;

    for (r = 0; r < UCT_HCR_CALIB_REG_REPS; ++r) {
        buf = resident;
        if (pages == UCS_CALIB_PAGES_NONRESIDENT) {
            buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (buf == MAP_FAILED) {
                ucs_error("hcr calib: failed to map %zu bytes: %m", size);
                return UCS_ERR_NO_MEMORY;
            }
        }

        status = uct_hcr_calib_reg_once(md, loop, buf, size, &reg[r],
                                        (xfer != NULL) ? &xfer[r] : NULL,
                                        &dereg[r]);
        if (buf != resident) {
            munmap(buf, size);
        }
        if (status != UCS_OK) {
            return status;
        }
    }
    return UCS_OK;
}

/* Registration and deregistration on resident and on never-touched pages */
static ucs_status_t uct_hcr_calib_measure_reg(uct_ib_md_t *md,
                                              ucs_calib_model_t *model)
{
    unsigned num_sizes = ucs_static_array_size(uct_hcr_calib_reg_sizes);
    size_t max_size    = uct_hcr_calib_reg_sizes[num_sizes - 1];
    double x[ucs_static_array_size(uct_hcr_calib_reg_sizes)];
    double y_reg[UCS_CALIB_PAGES_LAST][ucs_static_array_size(
            uct_hcr_calib_reg_sizes)];
    double y_dereg[ucs_static_array_size(uct_hcr_calib_reg_sizes)];
    double reg[UCT_HCR_CALIB_REG_REPS], dereg[UCT_HCR_CALIB_REG_REPS];
    ucs_status_t status = UCS_OK;
    unsigned i, pages;
    void *resident;

    resident = uct_hcr_calib_map_resident(max_size);
    if (resident == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (i = 0; i < num_sizes; ++i) {
        x[i] = uct_hcr_calib_reg_sizes[i];
        for (pages = 0; pages < UCS_CALIB_PAGES_LAST; ++pages) {
            status = uct_hcr_calib_reg_reps(md, NULL, resident,
                                            uct_hcr_calib_reg_sizes[i], pages,
                                            reg, NULL, dereg);
            if (status != UCS_OK) {
                goto out;
            }

            y_reg[pages][i] = ucs_calib_median(reg, UCT_HCR_CALIB_REG_REPS);
            if (pages == UCS_CALIB_PAGES_RESIDENT) {
                y_dereg[i] = ucs_calib_median(dereg, UCT_HCR_CALIB_REG_REPS);
            }
        }
    }

    for (pages = 0; pages < UCS_CALIB_PAGES_LAST; ++pages) {
        model->reg[pages] = ucs_calib_fit(x, y_reg[pages], num_sizes);
    }
    model->dereg = ucs_calib_fit(x, y_dereg, num_sizes);

out:
    munmap(resident, max_size);
    return status;
}

/*
 * What the first transfer from registered, never-touched pages costs more
 * than one from resident pages, at the registration sizes the loopback
 * buffer can take. A pass of its own after the registrations, so that the
 * loopback buffer is never pinned together with their largest size.
 */
static ucs_status_t uct_hcr_calib_measure_xfer(uct_ib_md_t *md,
                                               uct_hcr_calib_loop_t *loop,
                                               ucs_calib_model_t *model)
{
    size_t max_size = loop->buf_size / 2;
    double x[ucs_static_array_size(uct_hcr_calib_reg_sizes)];
    double y[ucs_static_array_size(uct_hcr_calib_reg_sizes)];
    double reg[UCT_HCR_CALIB_REG_REPS], dereg[UCT_HCR_CALIB_REG_REPS];
    double xfer[UCT_HCR_CALIB_REG_REPS];
    ucs_status_t status = UCS_OK;
    unsigned i, n = 0, pages;
    double t[UCS_CALIB_PAGES_LAST];
    void *resident;
    size_t size;

    resident = uct_hcr_calib_map_resident(max_size);
    if (resident == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (i = 0; i < ucs_static_array_size(uct_hcr_calib_reg_sizes); ++i) {
        size = uct_hcr_calib_reg_sizes[i];
        if (size > max_size) {
            continue;
        }
        for (pages = 0; pages < UCS_CALIB_PAGES_LAST; ++pages) {
            status = uct_hcr_calib_reg_reps(md, loop, resident, size, pages,
                                            reg, xfer, dereg);
            if (status != UCS_OK) {
                goto out;
            }
            t[pages] = ucs_calib_median(xfer, UCT_HCR_CALIB_REG_REPS);
        }
        x[n]   = size;
        y[n++] = t[UCS_CALIB_PAGES_NONRESIDENT] - t[UCS_CALIB_PAGES_RESIDENT];
        ucs_trace("hcr calib: first transfer of %zu bytes %.3f us, from "
                  "resident pages %.3f us", size,
                  t[UCS_CALIB_PAGES_NONRESIDENT] * 1e6,
                  t[UCS_CALIB_PAGES_RESIDENT] * 1e6);
    }

    model->xfer_fault = ucs_calib_fit(x, y, n);

out:
    munmap(resident, max_size);
    return status;
}

static ucs_status_t uct_hcr_calib_qp_connect(uct_hcr_calib_loop_t *loop,
                                             struct ibv_qp *qp,
                                             uint32_t dest_qpn)
{
    uct_ib_device_t *dev = &loop->md->dev;
    struct ibv_port_attr *port_attr;
    struct ibv_qp_attr attr;
    union ibv_gid gid;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = loop->port;
    attr.pkey_index      = 0;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        goto err;
    }

    port_attr = uct_ib_device_port_attr(dev, loop->port);
    memset(&attr, 0, sizeof(attr));
    attr.qp_state              = IBV_QPS_RTR;
    attr.path_mtu              = port_attr->active_mtu;
    attr.dest_qp_num           = dest_qpn;
    attr.rq_psn                = 0;
    attr.max_dest_rd_atomic    = 1;
    attr.min_rnr_timer         = 12;
    attr.ah_attr.dlid          = port_attr->lid;
    attr.ah_attr.port_num      = loop->port;
    if (!uct_ib_device_is_port_ib(dev, loop->port)) {
        /* RoCE: addressed by GID */
        if (uct_ib_device_query_gid(dev, loop->port, 0, &gid,
                                    UCS_LOG_LEVEL_ERROR) != UCS_OK) {
            return UCS_ERR_IO_ERROR;
        }
        attr.ah_attr.is_global      = 1;
        attr.ah_attr.grh.dgid       = gid;
        attr.ah_attr.grh.hop_limit  = 1;
    }
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        goto err;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = 14;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = 7;
    attr.sq_psn        = 0;
    attr.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT |
                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC)) {
        goto err;
    }
    return UCS_OK;

err:
    ucs_error("hcr calib: %s: ibv_modify_qp() failed: %m",
              uct_ib_device_name(dev));
    return UCS_ERR_IO_ERROR;
}

static void uct_hcr_calib_loop_close(uct_hcr_calib_loop_t *loop)
{
    int i;

    for (i = 0; i < 2; ++i) {
        if (loop->qp[i] != NULL) {
            ibv_destroy_qp(loop->qp[i]);
        }
    }
    if (loop->cq != NULL) {
        ibv_destroy_cq(loop->cq);
    }
    if (loop->mr != NULL) {
        ibv_dereg_mr(loop->mr);
    }
    if (loop->buf != NULL) {
        munmap(loop->buf, loop->buf_size);
    }
}

/* two RC QPs of the device, connected to each other, and a buffer */
static ucs_status_t uct_hcr_calib_loop_open(uct_ib_md_t *md,
                                            uct_hcr_calib_loop_t *loop)
{
    struct ibv_qp_init_attr qp_attr;
    ucs_status_t status;
    int i;

    memset(loop, 0, sizeof(*loop));
    loop->md       = md;
    loop->port     = md->dev.first_port;
    loop->buf_size = 2 * UCT_HCR_CALIB_BW_MSG;
    loop->buf      = mmap(NULL, loop->buf_size, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (loop->buf == MAP_FAILED) {
        loop->buf = NULL;
        ucs_error("hcr calib: failed to map %zu bytes: %m", loop->buf_size);
        return UCS_ERR_NO_MEMORY;
    }
    memset(loop->buf, 0, loop->buf_size);

    loop->mr = ibv_reg_mr(md->pd, loop->buf, loop->buf_size,
                          UCT_IB_MEM_ACCESS_FLAGS);
    loop->cq = ibv_create_cq(md->dev.ibv_context, 2 * UCT_HCR_CALIB_QP_DEPTH,
                             NULL, NULL, 0);
    if ((loop->mr == NULL) || (loop->cq == NULL)) {
        ucs_error("hcr calib: %s: failed to create the loopback resources: "
                  "%m", uct_ib_device_name(&md->dev));
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.send_cq          = loop->cq;
    qp_attr.recv_cq          = loop->cq;
    qp_attr.qp_type          = IBV_QPT_RC;
    qp_attr.cap.max_send_wr  = UCT_HCR_CALIB_QP_DEPTH;
    qp_attr.cap.max_recv_wr     = UCT_HCR_CALIB_FRAG_RECVS;
    qp_attr.cap.max_send_sge = 1;
    qp_attr.cap.max_recv_sge = 1;
    qp_attr.cap.max_inline_data = 8;
    for (i = 0; i < 2; ++i) {
        loop->qp[i] = ibv_create_qp(md->pd, &qp_attr);
        if (loop->qp[i] == NULL) {
            ucs_error("hcr calib: %s: ibv_create_qp() failed: %m",
                      uct_ib_device_name(&md->dev));
            status = UCS_ERR_IO_ERROR;
            goto err;
        }
    }

    for (i = 0; i < 2; ++i) {
        status = uct_hcr_calib_qp_connect(loop, loop->qp[i],
                                          loop->qp[1 - i]->qp_num);
        if (status != UCS_OK) {
            goto err;
        }
    }
    return UCS_OK;

err:
    uct_hcr_calib_loop_close(loop);
    return status;
}

/* Whether send number @a posted of a stream of @a count is signaled: one
 * per half queue, and the last, so that the stream's end is seen */
static int uct_hcr_calib_stream_signaled(unsigned posted, unsigned count)
{
    return (((posted + 1) % (UCT_HCR_CALIB_QP_DEPTH / 2)) == 0) ||
           ((posted + 1) == count);
}

static ucs_status_t uct_hcr_calib_measure_net(uct_hcr_calib_loop_t *loop,
                                              ucs_calib_model_t *model)
{
    double lat[UCT_HCR_CALIB_LAT_ITERS];
    ucs_status_t status;
    ucs_time_t start;
    unsigned i, posted, signaled, completed;
    int flags;

    /* latency: a signaled write completes when the target acks it, a round
     * trip; the one-way latency is half of it */
    for (i = 0; i < UCT_HCR_CALIB_LAT_ITERS; ++i) {
        start  = ucs_get_time();
        status = uct_hcr_calib_write(loop, 8, IBV_SEND_SIGNALED |
                                     IBV_SEND_INLINE, i);
        if (status == UCS_OK) {
            status = uct_hcr_calib_wait(loop, 1);
        }
        if (status != UCS_OK) {
            return status;
        }
        lat[i] = ucs_time_to_sec(ucs_get_time() - start) / 2;
    }
    model->net_latency = ucs_calib_median(lat, UCT_HCR_CALIB_LAT_ITERS);

    /* gap: back-to-back small writes, one signaled per half queue, with at
     * most two signaled ones outstanding */
    start = ucs_get_time();
    for (posted = 0, signaled = 0, completed = 0;
         posted < UCT_HCR_CALIB_GAP_MSGS; ++posted) {
        flags = IBV_SEND_INLINE;
        if (uct_hcr_calib_stream_signaled(posted, UCT_HCR_CALIB_GAP_MSGS)) {
            flags |= IBV_SEND_SIGNALED;
            ++signaled;
        }
        status = uct_hcr_calib_write(loop, 8, flags, posted);
        if ((status == UCS_OK) && (signaled - completed > 1)) {
            status = uct_hcr_calib_wait(loop, 1);
            ++completed;
        }
        if (status != UCS_OK) {
            return status;
        }
    }
    status = uct_hcr_calib_wait(loop, signaled - completed);
    if (status != UCS_OK) {
        return status;
    }
    model->net_gap = ucs_time_to_sec(ucs_get_time() - start) /
                     UCT_HCR_CALIB_GAP_MSGS;

    /* bandwidth: a window of large writes kept in flight */
    start = ucs_get_time();
    for (posted = 0; posted < UCT_HCR_CALIB_BW_MSGS; ++posted) {
        if (posted >= 4) {
            status = uct_hcr_calib_wait(loop, 1);
            if (status != UCS_OK) {
                return status;
            }
        }
        status = uct_hcr_calib_write(loop, UCT_HCR_CALIB_BW_MSG,
                                     IBV_SEND_SIGNALED, posted);
        if (status != UCS_OK) {
            return status;
        }
    }
    status = uct_hcr_calib_wait(loop, 4);
    if (status != UCS_OK) {
        return status;
    }
    model->net_bw = (double)UCT_HCR_CALIB_BW_MSG * UCT_HCR_CALIB_BW_MSGS /
                    ucs_time_to_sec(ucs_get_time() - start);

    return UCS_OK;
}

/* Receive slot @a slot of the fragment stream, in the second half of the
 * loopback buffer */
static void *uct_hcr_calib_frag_slot(uct_hcr_calib_loop_t *loop, unsigned slot)
{
    return UCS_PTR_BYTE_OFFSET(loop->buf, (loop->buf_size / 2) +
                                                  (slot * UCS_CALIB_FRAG_SIZE));
}

static ucs_status_t
uct_hcr_calib_post_frag_recv(uct_hcr_calib_loop_t *loop, unsigned slot)
{
    struct ibv_recv_wr wr, *bad_wr;
    struct ibv_sge sge;

    sge.addr   = (uintptr_t)uct_hcr_calib_frag_slot(loop, slot);
    sge.length = UCS_CALIB_FRAG_SIZE;
    sge.lkey   = loop->mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(loop->qp[1], &wr, &bad_wr)) {
        ucs_error("hcr calib: ibv_post_recv() failed: %m");
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

/*
 * Seconds per message of a stream of UCT_HCR_CALIB_FRAG_MSGS sends of
 * UCS_CALIB_FRAG_SIZE bytes, the way an eager protocol's fragments go: the
 * sender posts them as far ahead as the receiver has receives posted, the
 * receiver takes each off its queue, copies it out of the receive buffer
 * into @a out and posts the receive again. One thread does both sides, so
 * where each side's work takes a core (an emulated NIC) the time is their
 * sum, where a NIC moves the data at least its wire time.
 */
static ucs_status_t
uct_hcr_calib_frag_stream(uct_hcr_calib_loop_t *loop, void *out, double *t_p)
{
    unsigned posted = 0, received = 0, signaled = 0, completed = 0;
    ucs_time_t start = ucs_get_time();
    ucs_status_t status;
    struct ibv_wc wc;
    int flags;

    while (received < UCT_HCR_CALIB_FRAG_MSGS) {
        /* at most two signaled sends outstanding, as the gap's stream */
        while ((posted < UCT_HCR_CALIB_FRAG_MSGS) &&
               ((posted - received) < UCT_HCR_CALIB_FRAG_RECVS) &&
               ((signaled - completed) < 2)) {
            flags = 0;
            if (uct_hcr_calib_stream_signaled(posted,
                                              UCT_HCR_CALIB_FRAG_MSGS)) {
                flags = IBV_SEND_SIGNALED;
                ++signaled;
            }
            status = uct_hcr_calib_post_rdma(loop, IBV_WR_SEND, loop->buf,
                                             loop->mr->lkey, NULL, 0,
                                             UCS_CALIB_FRAG_SIZE, flags,
                                             posted);
            if (status != UCS_OK) {
                return status;
            }
            ++posted;
        }

        status = uct_hcr_calib_poll(loop, &wc);
        if (status != UCS_OK) {
            return status;
        }
        if (!(wc.opcode & IBV_WC_RECV)) {
            ++completed;
            continue;
        }
        if ((wc.wr_id >= UCT_HCR_CALIB_FRAG_RECVS) ||
            (wc.byte_len != UCS_CALIB_FRAG_SIZE)) {
            ucs_error("hcr calib: receive %" PRIu64 " of %u bytes, expected "
                      "one of %u slots of %zu bytes",
                      wc.wr_id, wc.byte_len, UCT_HCR_CALIB_FRAG_RECVS,
                      UCS_CALIB_FRAG_SIZE);
            return UCS_ERR_IO_ERROR;
        }
        memcpy(out, uct_hcr_calib_frag_slot(loop, wc.wr_id), wc.byte_len);
        ucs_compiler_fence();
        status = uct_hcr_calib_post_frag_recv(loop, wc.wr_id);
        if (status != UCS_OK) {
            return status;
        }
        ++received;
    }

    status = uct_hcr_calib_wait(loop, signaled - completed);
    *t_p   = ucs_time_to_sec(ucs_get_time() - start) / UCT_HCR_CALIB_FRAG_MSGS;
    return status;
}

/* net_frag_gap: the median of UCT_HCR_CALIB_FRAG_REPS streams, after one
 * untimed */
static ucs_status_t uct_hcr_calib_measure_net_frag(uct_hcr_calib_loop_t *loop,
                                                   ucs_calib_model_t *model)
{
    double t[UCT_HCR_CALIB_FRAG_REPS + 1];
    ucs_status_t status = UCS_OK;
    unsigned i, posted;
    void *out;

    out = ucs_malloc(UCS_CALIB_FRAG_SIZE, "hcr calib fragment");
    if (out == NULL) {
        ucs_error("hcr calib: failed to allocate %zu bytes",
                  UCS_CALIB_FRAG_SIZE);
        return UCS_ERR_NO_MEMORY;
    }

    for (posted = 0; posted < UCT_HCR_CALIB_FRAG_RECVS; ++posted) {
        status = uct_hcr_calib_post_frag_recv(loop, posted);
        if (status != UCS_OK) {
            goto out;
        }
    }

    for (i = 0; i <= UCT_HCR_CALIB_FRAG_REPS; ++i) {
        status = uct_hcr_calib_frag_stream(loop, out, &t[i]);
        if (status != UCS_OK) {
            goto out;
        }
    }

    model->net_frag_gap = ucs_calib_median(t + 1, UCT_HCR_CALIB_FRAG_REPS);
    ucs_debug("hcr calib: %zu-byte sends received and copied out: %.3f us "
              "each",
              UCS_CALIB_FRAG_SIZE, model->net_frag_gap * 1e6);
out:
    /* the receives still posted go with the QP */
    ucs_free(out);
    return status;
}

/* The buffers of the working-set measurements: a message's source and
 * destination of up to max_size bytes each, and the staging slots of both
 * sides, registered as one */
typedef struct {
    char *src;
    char *dst;
    char *slots;
    size_t max_size;
    size_t length;
    struct ibv_mr *mr;
} uct_hcr_calib_ws_t;

/* One zero-copy transfer of @a size bytes, source to destination, the way
 * UCX's rendezvous moves a registered buffer: the receiver reads it */
static ucs_status_t uct_hcr_calib_ws_zcopy(uct_hcr_calib_loop_t *loop,
                                           const uct_hcr_calib_ws_t *ws,
                                           size_t size)
{
    ucs_status_t status;

    status = uct_hcr_calib_post_rdma(loop, IBV_WR_RDMA_READ, ws->dst,
                                     ws->mr->lkey, ws->src, ws->mr->rkey, size,
                                     IBV_SEND_SIGNALED, 0);
    return (status == UCS_OK) ? uct_hcr_calib_wait(loop, 1) : status;
}

/* A staged sender's work for @a size bytes, as rndv/sppln's sender does
 * it on its own core: each slot-sized chunk copied into the next staging
 * slot, then put into the receiver's slot while the next chunk is copied */
static ucs_status_t uct_hcr_calib_ws_staged(uct_hcr_calib_loop_t *loop,
                                            const uct_hcr_calib_ws_t *ws,
                                            size_t size)
{
    size_t chunk      = UCT_HCR_CALIB_BW_MSG;
    unsigned inflight = 0;
    ucs_status_t status;
    size_t offset;
    char *slot;

    for (offset = 0; offset < size; offset += chunk) {
        if (inflight == UCT_HCR_CALIB_STAGE_PUTS) {
            status = uct_hcr_calib_wait(loop, 1);
            if (status != UCS_OK) {
                return status;
            }
            --inflight;
        }
        slot = ws->slots +
               (((offset / chunk) % UCT_HCR_CALIB_STAGE_SLOTS) * chunk);
        memcpy(slot, ws->src + offset, ucs_min(chunk, size - offset));
        status = uct_hcr_calib_post_rdma(
                loop, IBV_WR_RDMA_WRITE, slot, ws->mr->lkey,
                slot + (UCT_HCR_CALIB_STAGE_SLOTS * chunk), ws->mr->rkey,
                ucs_min(chunk, size - offset), IBV_SEND_SIGNALED, offset);
        if (status != UCS_OK) {
            return status;
        }
        ++inflight;
    }
    return uct_hcr_calib_wait(loop, inflight);
}

/* One run of @a func for @a size bytes after an untimed one, as the sends
 * of a reused buffer by one path follow each other: what one leaves in the
 * caches is what the next finds. Its seconds in *t_p. */
static ucs_status_t
uct_hcr_calib_ws_time(uct_hcr_calib_loop_t *loop, const uct_hcr_calib_ws_t *ws,
                      ucs_status_t (*func)(uct_hcr_calib_loop_t *,
                                           const uct_hcr_calib_ws_t *, size_t),
                      size_t size, double *t_p)
{
    ucs_status_t status;
    ucs_time_t start;

    status = func(loop, ws, size);
    if (status != UCS_OK) {
        return status;
    }
    start  = ucs_get_time();
    status = func(loop, ws, size);
    *t_p   = ucs_time_to_sec(ucs_get_time() - start);
    return status;
}

/*
 * The rates of zero-copy and of a staged sender for @a size bytes: the
 * medians of timed runs that move UCT_HCR_CALIB_WS_BYTES each (at least
 * UCT_HCR_CALIB_WS_REPS runs), the two paths in turn. The model compares
 * them, and this host's memory is slower for seconds or minutes at a time:
 * with the zero-copy runs first and the staged ones after, staged 16 MiB
 * came out at 5.5-7.4 GB/s from one measurement to the next, which moved
 * the size from which a registered buffer is staged from 7 to 27 MiB.
 */
static ucs_status_t
uct_hcr_calib_ws_rates(uct_hcr_calib_loop_t *loop, const uct_hcr_calib_ws_t *ws,
                       size_t size, double *net_bw_p, double *stage_bw_p)
{
    unsigned reps = ucs_min(ucs_max(UCT_HCR_CALIB_WS_BYTES / size,
                                    UCT_HCR_CALIB_WS_REPS),
                            UCT_HCR_CALIB_WS_REPS_MAX);
    double t_net[UCT_HCR_CALIB_WS_REPS_MAX], t_stage[UCT_HCR_CALIB_WS_REPS_MAX];
    ucs_status_t status;
    unsigned r;

    for (r = 0; r < reps; ++r) {
        status = uct_hcr_calib_ws_time(loop, ws, uct_hcr_calib_ws_zcopy, size,
                                       &t_net[r]);
        if (status == UCS_OK) {
            status = uct_hcr_calib_ws_time(loop, ws, uct_hcr_calib_ws_staged,
                                           size, &t_stage[r]);
        }
        if (status != UCS_OK) {
            return status;
        }
    }
    *net_bw_p   = size / ucs_calib_median(t_net, reps);
    *stage_bw_p = size / ucs_calib_median(t_stage, reps);
    return UCS_OK;
}

/*
 * The network where a message no longer fits the caches, at each of the
 * model's memcpy working sets above net_bw's transfer size: a zero-copy
 * transfer between two buffers of that size (net), and a staged sender's
 * copies and puts of it (stage). A device may move large buffers slower
 * than cache-sized ones (an HCA whose translation cache misses; softverbs,
 * whose kernel copy walks every page of every transfer: 16 MiB between
 * 4 KiB pages at about half the rate of 1 MiB), while a staged copy puts
 * chunks that stay in the cache; zero-copy from a registered buffer can
 * then lose to staging it. Not measured (net_bw and the model's
 * composition of copies and puts at every size) where the buffers cannot
 * be registered, e.g. within an unprivileged process' RLIMIT_MEMLOCK.
 */
static ucs_status_t uct_hcr_calib_measure_net_ws(uct_hcr_calib_loop_t *loop,
                                                 ucs_calib_model_t *model)
{
    ucs_status_t status = UCS_OK;
    uct_hcr_calib_ws_t ws;
    char *buf;
    size_t size;
    unsigned i;

    model->num_net   = 0;
    model->num_stage = 0;
    ws.max_size      = 0;
    for (i = 0; i < model->num_copy; ++i) {
        ws.max_size = ucs_max(ws.max_size, model->copy[i].size);
    }
    if (ws.max_size <= UCT_HCR_CALIB_BW_MSG) {
        return UCS_OK;
    }

    /* source, destination, and the slots of the sender and the receiver */
    ws.length = (2 * ws.max_size) +
                (2 * UCT_HCR_CALIB_STAGE_SLOTS * UCT_HCR_CALIB_BW_MSG);
    buf = uct_hcr_calib_map_resident(ws.length);
    if (buf == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ws.src   = buf;
    ws.dst   = buf + ws.max_size;
    ws.slots = buf + (2 * ws.max_size);

    ws.mr = ibv_reg_mr(loop->md->pd, buf, ws.length, UCT_IB_MEM_ACCESS_FLAGS);
    if (ws.mr == NULL) {
        ucs_debug("hcr calib: %s: cannot register %zu bytes (%m): network "
                  "bandwidth measured for cache-sized transfers only",
                  uct_ib_device_name(&loop->md->dev), ws.length);
        goto out_unmap;
    }

    for (i = 0; i < model->num_copy; ++i) {
        size = model->copy[i].size;
        if ((size <= UCT_HCR_CALIB_BW_MSG) ||
            (model->num_net == UCS_CALIB_MAX_NET_POINTS)) {
            continue;
        }
        model->net[model->num_net].size     = size;
        model->stage[model->num_stage].size = size;
        status = uct_hcr_calib_ws_rates(loop, &ws, size,
                                        &model->net[model->num_net].bw,
                                        &model->stage[model->num_stage].bw);
        if (status != UCS_OK) {
            break;
        }
        ucs_debug("hcr calib: %zu bytes: zero-copy %.0f MB/s, staged %.0f "
                  "MB/s (%zu bytes: %.0f MB/s)",
                  size, model->net[model->num_net].bw / UCS_MBYTE,
                  model->stage[model->num_stage].bw / UCS_MBYTE,
                  (size_t)UCT_HCR_CALIB_BW_MSG, model->net_bw / UCS_MBYTE);
        ++model->num_net;
        ++model->num_stage;
    }

    ibv_dereg_mr(ws.mr);
out_unmap:
    munmap(buf, ws.length);
    return status;
}

/* One 1 MiB write, and with @a copy_buf a 1 MiB memcpy while it is in
 * flight; returns the seconds both took in @a t_p */
static ucs_status_t uct_hcr_calib_write_copy(uct_hcr_calib_loop_t *loop,
                                             char *copy_buf, uint64_t wr_id,
                                             double *t_p)
{
    ucs_time_t start = ucs_get_time();
    ucs_status_t status;

    status = uct_hcr_calib_write(loop, UCT_HCR_CALIB_BW_MSG, IBV_SEND_SIGNALED,
                                 wr_id);
    if (status != UCS_OK) {
        return status;
    }
    if (copy_buf != NULL) {
        memcpy(copy_buf + UCT_HCR_CALIB_BW_MSG, copy_buf, UCT_HCR_CALIB_BW_MSG);
        ucs_compiler_fence();
    }
    status = uct_hcr_calib_wait(loop, 1);
    *t_p   = ucs_time_to_sec(ucs_get_time() - start);
    return status;
}

/*
 * net_cpu: the share of a large write's time that the posting thread
 * cannot spend copying. A 1 MiB write alone, a 1 MiB memcpy alone, then the
 * memcpy while the write is in flight: where a NIC moves the data the two
 * together take the longer of the two; where the transfer is a copy on the
 * poster's own core (an emulated NIC in a process bound to one core) they
 * take their sum. The superpipeline's model needs it: its sender copies
 * one chunk while the previous one is on the wire.
 */
static ucs_status_t uct_hcr_calib_measure_net_cpu(uct_hcr_calib_loop_t *loop,
                                                  ucs_calib_model_t *model)
{
    double t_put[UCT_HCR_CALIB_CPU_REPS], t_copy[UCT_HCR_CALIB_CPU_REPS];
    double t_both[UCT_HCR_CALIB_CPU_REPS], put, copy, both;
    ucs_status_t status = UCS_OK;
    ucs_time_t start;
    char *copy_buf;
    unsigned i;

    copy_buf = ucs_malloc(2 * UCT_HCR_CALIB_BW_MSG, "hcr calib copy");
    if (copy_buf == NULL) {
        ucs_error("hcr calib: failed to allocate %zu bytes",
                  (size_t)(2 * UCT_HCR_CALIB_BW_MSG));
        return UCS_ERR_NO_MEMORY;
    }
    memset(copy_buf, 1, 2 * UCT_HCR_CALIB_BW_MSG);

    for (i = 0; i < UCT_HCR_CALIB_CPU_REPS; ++i) {
        status = uct_hcr_calib_write_copy(loop, NULL, i, &t_put[i]);
        if (status != UCS_OK) {
            goto out;
        }
        start = ucs_get_time();
        memcpy(copy_buf + UCT_HCR_CALIB_BW_MSG, copy_buf, UCT_HCR_CALIB_BW_MSG);
        ucs_compiler_fence();
        t_copy[i] = ucs_time_to_sec(ucs_get_time() - start);
        status    = uct_hcr_calib_write_copy(loop, copy_buf, i, &t_both[i]);
        if (status != UCS_OK) {
            goto out;
        }
    }

    put            = ucs_calib_median(t_put, UCT_HCR_CALIB_CPU_REPS);
    copy           = ucs_calib_median(t_copy, UCT_HCR_CALIB_CPU_REPS);
    both           = ucs_calib_median(t_both, UCT_HCR_CALIB_CPU_REPS);
    model->net_cpu = (both - ucs_max(put, copy)) / ucs_min(put, copy);
    model->net_cpu = ucs_min(ucs_max(model->net_cpu, 0.0), 1.0);
    ucs_debug("hcr calib: 1 MiB write %.1f us, memcpy %.1f us, both %.1f us: "
              "net_cpu %.2f",
              put * 1e6, copy * 1e6, both * 1e6, model->net_cpu);
out:
    ucs_free(copy_buf);
    return status;
}

static ucs_status_t uct_hcr_calib_measure(void *arg, ucs_calib_model_t *model)
{
    uct_ib_md_t *md = arg;
    uct_hcr_calib_loop_t loop;
    ucs_status_t status;

    status = uct_hcr_calib_measure_reg(md, model);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_hcr_calib_loop_open(md, &loop);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_hcr_calib_measure_xfer(md, &loop, model);
    if (status == UCS_OK) {
        status = uct_hcr_calib_measure_net(&loop, model);
    }
    if (status == UCS_OK) {
        status = uct_hcr_calib_measure_net_frag(&loop, model);
    }
    if (status == UCS_OK) {
        status = uct_hcr_calib_measure_net_cpu(&loop, model);
    }
    if (status == UCS_OK) {
        status = uct_hcr_calib_measure_net_ws(&loop, model);
    }

    uct_hcr_calib_loop_close(&loop);
    return status;
}

/*
 * What the device says about itself: a model is measured again when any of
 * it changes. Firmware and hardware versions, vendor part and node GUID
 * name the device, each port's width, speed and MTU its link; an emulated
 * device reports its cost settings in these (softverbs: fw_ver), so that
 * nothing here knows an emulator.
 */
static void uct_hcr_calib_dev_key(uct_ib_md_t *md, char *key, size_t max)
{
    uct_ib_device_t *dev = &md->dev;
    struct ibv_port_attr *port_attr;
    size_t len;
    uint8_t port;

    /* relaxed ordering doubles the registrations (uct_hcr_calib_reg_once) */
    ucs_snprintf_safe(key, max, "%s|hw%u|%04x:%04x|%016llx|ro=%d",
                      IBV_DEV_ATTR(dev, fw_ver), IBV_DEV_ATTR(dev, hw_ver),
                      IBV_DEV_ATTR(dev, vendor_id),
                      IBV_DEV_ATTR(dev, vendor_part_id),
                      (unsigned long long)IBV_DEV_ATTR(dev, node_guid),
                      md->relaxed_order);
    for (port = dev->first_port; port < dev->first_port + dev->num_ports;
         ++port) {
        port_attr = uct_ib_device_port_attr(dev, port);
        len       = strlen(key);
        ucs_snprintf_safe(key + len, max - len, "|p%u:w%u:s%u:m%u", port,
                          port_attr->active_width, port_attr->active_speed,
                          port_attr->active_mtu);
    }
}

ucs_status_t uct_hcr_calib_get(uct_ib_md_t *md, ucs_calib_model_t *model,
                               ucs_calib_source_t *source_p)
{
    char key[UCS_CALIB_KEY_MAX];

    uct_hcr_calib_dev_key(md, key, sizeof(key));
    return ucs_calib_get(uct_ib_device_name(&md->dev), key,
                         uct_hcr_calib_measure, md, model, source_p);
}

void uct_hcr_calib_md_open(uct_ib_md_t *md)
{
    ucs_calib_source_t source;
    ucs_calib_model_t model;
    ucs_status_t status;

    status = uct_hcr_calib_get(md, &model, &source);
    if (status == UCS_ERR_UNSUPPORTED) {
        return; /* UCX_CALIB_MODE=off: UCX's constants stay */
    } else if (status != UCS_OK) {
        ucs_diag("hcr: %s: calibration failed (%s), keeping the constant "
                 "registration cost", uct_ib_device_name(&md->dev),
                 ucs_status_string(status));
        return;
    }

    if (md->rcache != NULL) {
        /* UCX 1.13's selection is per size, not per buffer: charging every
         * message the miss cost sends reused buffers (rcache hits) to copy
         * protocols (tag_bw 1 MiB fell from 9.5 to 3.0 GB/s on softverbs).
         * The md keeps the lookup cost; the miss cost stays in the model
         * for protocols that know whether a buffer is registered. */
        ucs_debug("hcr: %s uses a registration cache: reg_cost stays %.3f "
                  "us, a miss costs %.3f us + %.3f ns/KiB (%s)",
                  uct_ib_device_name(&md->dev), md->reg_cost.c * 1e6,
                  (model.reg[UCS_CALIB_PAGES_RESIDENT].c + model.dereg.c) *
                  1e6, (model.reg[UCS_CALIB_PAGES_RESIDENT].m +
                        model.dereg.m) * 1e9 * UCS_KBYTE,
                  ucs_calib_source_name(source));
        return;
    }

    /* direct registration: every zero-copy send registers now and
     * deregisters after */
    md->reg_cost = ucs_linear_func_add(
            model.reg[UCS_CALIB_PAGES_RESIDENT], model.dereg);
    ucs_debug("hcr: %s reg_cost %.3f us + %.3f ns/KiB (%s)",
              uct_ib_device_name(&md->dev), md->reg_cost.c * 1e6,
              md->reg_cost.m * 1e9 * UCS_KBYTE,
              ucs_calib_source_name(source));
}
