/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "proto_sppln.h"

#include <ucp/core/ucp_worker.inl>
#include <ucp/core/ucp_request.inl>
#include <ucp/dt/datatype_iter.inl>
#include <ucp/rndv/proto_rndv.inl>
#include <uct/api/v2/uct_v2.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#  define MADV_POPULATE_WRITE 23 /* Linux 5.14; older C libraries lack it */
#endif


/*
 * Receiver side of rndv/sppln, started by a matched RTS that carries
 * UCP_RNDV_RTS_FLAG_SPPLN: take a group of three receive staging slots, send
 * their addresses and the region's rkey (RTR), then copy every sub-block out
 * to the user's buffer when its notification arrives. A chunk's slot is
 * handed back to the sender (ACK) once all its sub-blocks are copied out, so
 * completion never depends on the order in which bytes are placed.
 */

static void ucp_sppln_recv_abort(ucp_request_t *req, ucs_status_t status);

/* The receiver's internal request is not selected by UCX's protocol
 * selection; it gets this configuration so that endpoint error handling
 * can abort it like any protocol request */
static ucp_proto_t ucp_sppln_recv_proto = {
    .name     = "rndv/sppln/recv",
    .desc     = "copy out of staging buffers",
    .flags    = 0,
    .init     = NULL,
    .query    = ucp_proto_default_query,
    .progress = {ucp_sppln_recv_progress},
    .abort    = ucp_sppln_recv_abort
};

static const ucp_proto_config_t ucp_sppln_recv_config = {
    .proto          = &ucp_sppln_recv_proto,
    .priv           = NULL,
    .ep_cfg_index   = UCP_WORKER_CFG_INDEX_NULL,
    .rkey_cfg_index = UCP_WORKER_CFG_INDEX_NULL
};

static void ucp_sppln_recv_done(ucp_sppln_xfer_t *xfer, ucs_status_t status)
{
    ucp_request_t *req  = xfer->req;
    ucp_request_t *rreq = ucp_request_get_super(req);

    if (xfer->flags & UCP_SPPLN_XFER_FLAG_DONE) {
        return;
    }

    ucp_trace_req(req, "rndv/sppln receive done: %s",
                  ucs_status_string(status));
    xfer->flags |= UCP_SPPLN_XFER_FLAG_DONE;
    ucp_send_request_id_release(req);
    ucp_datatype_iter_cleanup(&req->send.state.dt_iter, UCP_DT_MASK_ALL);
    if (rreq->flags & UCP_REQUEST_FLAG_RECV_AM) {
        ucp_request_complete_am_recv(rreq, status);
    } else {
        ucp_request_complete_tag_recv(rreq, status);
    }
    ucp_request_put(req);
    xfer->req = NULL;
    ucp_sppln_xfer_put(xfer);
}

static void ucp_sppln_recv_abort(ucp_request_t *req, ucs_status_t status)
{
    ucp_sppln_recv_done(req->send.rndv.sppln_xfer, status);
}

static size_t ucp_sppln_rtr_pack(void *dest, void *arg)
{
    ucp_sppln_xfer_t *xfer   = arg;
    ucp_sppln_worker_t *sw   = xfer->worker->sppln;
    ucp_sppln_rtr_hdr_t *rtr = dest;
    unsigned s;

    rtr->sreq_id   = xfer->remote_id;
    rtr->rreq_id   = ucp_send_request_get_id(xfer->req);
    rtr->slot_size = sw->slot_size;
    rtr->group     = xfer->group;
    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        rtr->slot_addr[s] = (uintptr_t)ucp_sppln_slot_ptr(sw,
                                                          UCP_SPPLN_SIDE_RECV,
                                                          xfer->group, s);
    }
    if (ucp_sppln_fault_take(UCP_SPPLN_FAULT_SHORT_RTR)) {
        return sizeof(*rtr);
    }
    memcpy(rtr + 1, sw->rkey_buf, sw->rkey_size);
    return sizeof(*rtr) + sw->rkey_size;
}

static size_t ucp_sppln_ack_pack(void *dest, void *arg)
{
    ucp_sppln_xfer_t *xfer   = arg;
    ucp_sppln_ack_hdr_t *ack = dest;

    ack->sreq_id = xfer->remote_id;
    ack->chunk   = xfer->acks_sent;
    ack->status  = xfer->status;
    if (ucp_sppln_fault_take(UCP_SPPLN_FAULT_ACK_AHEAD)) {
        ++ack->chunk;
    }
    return sizeof(*ack);
}

ucs_status_t ucp_sppln_recv_progress(uct_pending_req_t *self)
{
    ucp_request_t *req     = ucs_container_of(self, ucp_request_t, send.uct);
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw = xfer->worker->sppln;
    ucs_status_t status;
    int group;

    xfer->flags &= ~UCP_SPPLN_XFER_FLAG_PENDING;
    if (xfer->flags & UCP_SPPLN_XFER_FLAG_DONE) {
        return UCS_OK;
    }

    if (xfer->status != UCS_OK) {
        /* tell the sender why, then fail the receive */
        status = ucp_sppln_send_ctrl(xfer, xfer->am_lane,
                                     UCP_AM_ID_RNDV_SPPLN_ACK,
                                     ucp_sppln_ack_pack);
        if (status == UCS_ERR_NO_RESOURCE) {
            return status;
        }
        ucp_sppln_recv_done(xfer, xfer->status);
        return UCS_OK;
    }

    if (xfer->group < 0) {
        group = ucp_sppln_group_get(sw, UCP_SPPLN_SIDE_RECV);
        if (group < 0) {
            ucp_sppln_wait_group(sw, xfer);
            return UCS_OK;
        }
        xfer->group   = group;
        sw->rx[group] = xfer;
    }

    if (!(xfer->flags & UCP_SPPLN_XFER_FLAG_RTR)) {
        status = ucp_sppln_send_ctrl(xfer, xfer->am_lane,
                                     UCP_AM_ID_RNDV_SPPLN_RTR,
                                     ucp_sppln_rtr_pack);
        if (status != UCS_OK) {
            goto out;
        }
        xfer->flags |= UCP_SPPLN_XFER_FLAG_RTR;
        if (ucp_sppln_fault_take(UCP_SPPLN_FAULT_DUP_RTR)) {
            (void)ucp_sppln_send_ctrl(xfer, xfer->am_lane,
                                      UCP_AM_ID_RNDV_SPPLN_RTR,
                                      ucp_sppln_rtr_pack);
        }
    }

    while (xfer->acks_sent < xfer->acks) {
        status = ucp_sppln_send_ctrl(xfer, xfer->am_lane,
                                     UCP_AM_ID_RNDV_SPPLN_ACK,
                                     ucp_sppln_ack_pack);
        if (status != UCS_OK) {
            goto out;
        }
        if (ucp_sppln_fault_take(UCP_SPPLN_FAULT_DUP_ACK)) {
            (void)ucp_sppln_send_ctrl(xfer, xfer->am_lane,
                                      UCP_AM_ID_RNDV_SPPLN_ACK,
                                      ucp_sppln_ack_pack);
        }
        ++xfer->acks_sent;
    }

    if (xfer->acks_sent == xfer->sched.n_chunks) {
        ucs_assert(xfer->received == xfer->sched.length);
        ucp_sppln_recv_done(xfer, UCS_OK);
    }
    return UCS_OK;

out:
    if (status == UCS_ERR_NO_RESOURCE) {
        return status;
    }
    ucp_sppln_recv_done(xfer, status);
    return UCS_OK;
}

/*
 * Copy one sub-block into a destination whose pages were not resident when
 * the transfer started. memcpy would take a page fault per page, 10-12 us
 * each on these virtual machines (the hypervisor backs a page on its first
 * use); the kernel faults pages in without a trap per page when it writes
 * them itself, as it does for a zero-copy receive: under 1 us a page here.
 * Returns 1 when the sub-block is copied, 0 when the caller copies it.
 */
static int ucp_sppln_recv_copy_fresh(ucp_sppln_xfer_t *xfer, size_t offset,
                                     const void *src, size_t length)
{
    ucp_sppln_worker_t *sw = xfer->worker->sppln;
    size_t page            = ucs_get_page_size();
    struct iovec local, remote;
    uintptr_t start, end;
    ssize_t ret;
    void *dst;
    int err;

    dst = UCS_PTR_BYTE_OFFSET(xfer->req->send.state.dt_iter.type.contig.buffer,
                              offset);
    if (sw->fresh_copy == UCP_SPPLN_FRESH_KCOPY) {
        local.iov_base  = (void*)src;
        local.iov_len   = length;
        remote.iov_base = dst;
        remote.iov_len  = length;
        ret = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
        if (ret == (ssize_t)length) {
            ++sw->stats.fresh[UCP_SPPLN_FRESH_KCOPY];
            return 1;
        }
        /* a short copy stopped at a page it could not fault in */
        err = (ret < 0) ? errno : EFAULT;
        ucs_debug("rndv/sppln req %p: process_vm_writev(%p, %zu) failed: %s",
                  xfer->req, dst, length, strerror(err));
        if ((err != EPERM) && (err != ENOSYS)) {
            /* a bad buffer, which memcpy reports as usual */
            ++sw->stats.fresh[UCP_SPPLN_FRESH_FAULT];
            return 0;
        }
        /* not allowed here (seccomp, no cross-memory attach) */
        sw->fresh_copy = UCP_SPPLN_FRESH_POPULATE;
    }

    if (sw->fresh_copy == UCP_SPPLN_FRESH_POPULATE) {
        start = ucs_align_down((uintptr_t)dst, page);
        end   = ucs_align_up((uintptr_t)dst + length, page);
        if (madvise((void*)start, end - start, MADV_POPULATE_WRITE) == 0) {
            ++sw->stats.fresh[UCP_SPPLN_FRESH_POPULATE];
            return 0;
        }
        err = errno;
        ucs_debug("rndv/sppln req %p: madvise(MADV_POPULATE_WRITE, %p, %zu) "
                  "failed: %s", xfer->req, (void*)start, end - start,
                  strerror(err));
        if (err == EINVAL) {
            /* a kernel before 5.14 */
            sw->fresh_copy = UCP_SPPLN_FRESH_FAULT;
        }
    }

    ++sw->stats.fresh[UCP_SPPLN_FRESH_FAULT];
    return 0;
}

static ucs_status_t
ucp_sppln_handle_data(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker            = arg;
    ucp_sppln_worker_t *sw         = worker->sppln;
    const uct_put_notify_hdr_t *nh = data;
    unsigned group, s, sub;
    ucp_sppln_xfer_t *xfer;
    ucp_sppln_slot_t *slot;
    size_t offset, chunk_size;
    ucs_status_t status;
    const void *src;
    uint64_t *seen;

    group = nh->notify_data >> (UCP_SPPLN_SLOT_BITS + UCP_SPPLN_SUB_BITS);
    s     = (nh->notify_data >> UCP_SPPLN_SUB_BITS) &
            UCS_MASK(UCP_SPPLN_SLOT_BITS);
    sub   = nh->notify_data & UCS_MASK(UCP_SPPLN_SUB_BITS);
    if ((length < sizeof(*nh)) || (sw == NULL) || (group >= sw->groups) ||
        (s >= UCP_SPPLN_NUM_SLOTS) || ((xfer = sw->rx[group]) == NULL) ||
        (xfer->flags & UCP_SPPLN_XFER_FLAG_DONE)) {
        ucs_debug("rndv/sppln: dropped data for group %u slot %u (no "
                  "transfer)", group, s);
        return UCS_OK;
    }

    slot       = &xfer->slot[s];
    offset     = (size_t)sub * xfer->sched.sub_size;
    chunk_size = (slot->chunk < xfer->sched.n_chunks) ?
                 (xfer->sched.offset[slot->chunk + 1] -
                  xfer->sched.offset[slot->chunk]) : 0;
    /* every sub-block of the schedule exactly once: the chunk is complete
     * when its bytes add up, so a short, long or repeated one would leave
     * a hole behind a complete-looking chunk */
    if ((offset >= chunk_size) ||
        (nh->length != ucs_min(xfer->sched.sub_size, chunk_size - offset))) {
        ucs_error("rndv/sppln req %p: sub-block %u of %u bytes does not fit "
                  "chunk %u of %zu bytes in sub-blocks of %zu",
                  xfer->req, sub, nh->length, slot->chunk, chunk_size,
                  xfer->sched.sub_size);
        goto err;
    }
    seen = &xfer->sub_seen[(s * xfer->sub_words) + (sub / 64)];
    if (*seen & UCS_BIT(sub % 64)) {
        ucs_error("rndv/sppln req %p: sub-block %u of chunk %u arrived twice",
                  xfer->req, sub, slot->chunk);
        goto err;
    }
    *seen |= UCS_BIT(sub % 64);

    src    = UCS_PTR_BYTE_OFFSET(ucp_sppln_slot_ptr(sw, UCP_SPPLN_SIDE_RECV,
                                                    group, s), offset);
    offset = xfer->sched.offset[slot->chunk] + offset;
    if (!(xfer->flags & UCP_SPPLN_XFER_FLAG_FRESH) ||
        !ucp_sppln_recv_copy_fresh(xfer, offset, src, nh->length)) {
        status = ucp_datatype_iter_unpack(&xfer->req->send.state.dt_iter,
                                          worker, nh->length, offset, src);
        if (status != UCS_OK) {
            xfer->status = status;
            ucp_sppln_kick(xfer);
            return UCS_OK;
        }
    }

    xfer->received += nh->length;
    slot->filled   += nh->length;
    if (slot->filled == chunk_size) {
        /* chunk consumed: its slot takes chunk + 3 */
        slot->filled  = 0;
        slot->chunk  += UCP_SPPLN_NUM_SLOTS;
        memset(&xfer->sub_seen[s * xfer->sub_words], 0,
               xfer->sub_words * sizeof(*xfer->sub_seen));
        ++xfer->acks;
        ucp_sppln_kick(xfer);
    }
    return UCS_OK;

err:
    xfer->status = UCS_ERR_IO_ERROR;
    ucp_sppln_kick(xfer);
    return UCS_OK;
}

static void ucp_sppln_recv_fail_early(ucp_request_t *req,
                                      ucp_sppln_xfer_t *xfer,
                                      ucs_status_t status)
{
    /* nothing was set up: only tell the sender, then fail the receive */
    xfer->status = status;
    ucp_send_request_id_alloc(req);
    ucp_request_send(req);
}

void ucp_proto_sppln_receive_start(ucp_worker_h worker, ucp_request_t *recv_req,
                                   const ucp_rndv_rts_hdr_t *rts,
                                   const void *params, size_t params_length)
{
    ucp_sppln_worker_t *sw = NULL;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    ucp_request_t *req;
    uint8_t sg_count;
    unsigned s;
    ucp_ep_h ep;

    UCP_WORKER_GET_VALID_EP_BY_ID(&ep, worker, rts->sreq.ep_id, return,
                                  "SPPLN RTS on non-existing endpoint");

    req  = ucp_request_get(worker);
    xfer = ucs_calloc(1, sizeof(*xfer), "sppln_xfer");
    if ((req == NULL) || (xfer == NULL)) {
        ucs_error("rndv/sppln: failed to allocate a receive transfer");
        if (req != NULL) {
            ucp_request_put(req);
        }
        ucs_free(xfer);
        return;
    }

    req->flags                = 0;
    req->send.ep              = ep;
    req->send.proto_config    = &ucp_sppln_recv_config;
    req->send.uct.func        = ucp_sppln_recv_progress;
    req->send.rndv.sppln_xfer = xfer;
    ucp_request_set_super(req, recv_req);

    xfer->req       = req;
    xfer->worker    = worker;
    xfer->side      = UCP_SPPLN_SIDE_RECV;
    xfer->group     = -1;
    xfer->refcount  = 1;
    xfer->remote_id = rts->sreq.req_id;
    xfer->am_lane   = ucp_ep_get_am_lane(ep);
    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        xfer->slot[s].xfer  = xfer;
        xfer->slot[s].chunk = s;
    }

    ucp_datatype_iter_init_null(&req->send.state.dt_iter, 0, &sg_count);
    if (params_length < sizeof(xfer->params)) {
        ucs_error("rndv/sppln: RTS of %zu bytes has %zu bytes of parameters, "
                  "expected %zu", rts->size, params_length,
                  sizeof(xfer->params));
        recv_req->status = UCS_ERR_INVALID_PARAM;
        ucp_sppln_recv_fail_early(req, xfer, UCS_ERR_INVALID_PARAM);
        return;
    }
    memcpy(&xfer->params, params, sizeof(xfer->params));

    if (rts->size > recv_req->recv.length) {
        recv_req->status = UCS_ERR_MESSAGE_TRUNCATED;
        ucp_request_recv_generic_dt_finish(recv_req);
        ucp_sppln_recv_fail_early(req, xfer, UCS_ERR_MESSAGE_TRUNCATED);
        return;
    }

    status = ucp_sppln_worker_get(worker, &sw);
    if ((status == UCS_OK) && (xfer->params.slot_size > sw->slot_size)) {
        ucs_error("rndv/sppln: the sender's staging slots (%u bytes) are "
                  "larger than ours (%zu); set the same "
                  "UCX_HCR_SPPLN_SLOT_SIZE on both sides",
                  xfer->params.slot_size, sw->slot_size);
        status = UCS_ERR_UNSUPPORTED;
    } else if ((status == UCS_OK) &&
               !ucp_sppln_geometry_valid(xfer->params.slot_size,
                                         xfer->params.sub_size)) {
        ucs_error("rndv/sppln: RTS with sub-blocks of %u bytes in slots of "
                  "%u bytes", xfer->params.sub_size, xfer->params.slot_size);
        status = UCS_ERR_INVALID_PARAM;
    }
    if (status == UCS_OK) {
        status = ucp_sppln_sched_init(&xfer->sched, rts->size,
                                      xfer->params.path, xfer->params.c0,
                                      xfer->params.q_1024 /
                                              UCP_SPPLN_Q_WIRE_SCALE,
                                      xfer->params.slot_size,
                                      xfer->params.sub_size);
    }
    if (status == UCS_OK) {
        /* at most a slot per chunk, in sub-blocks; the sizes are checked */
        xfer->sub_words = ucs_div_round_up(
                (xfer->params.slot_size / xfer->params.sub_size) + 1, 64);
        xfer->sub_seen = ucs_calloc(UCP_SPPLN_NUM_SLOTS * xfer->sub_words,
                                    sizeof(*xfer->sub_seen), "sppln_sub_seen");
        if (xfer->sub_seen == NULL) {
            ucs_error("rndv/sppln: failed to allocate the sub-block map");
            status = UCS_ERR_NO_MEMORY;
        }
    }
    if (status != UCS_OK) {
        recv_req->status = status;
        ucp_sppln_recv_fail_early(req, xfer, status);
        return;
    }

    recv_req->status = UCS_OK;
    ucp_datatype_iter_init_from_dt_state(worker->context, recv_req->recv.buffer,
                                         rts->size, recv_req->recv.datatype,
                                         &recv_req->recv.state,
                                         &req->send.state.dt_iter, &sg_count);
    if (xfer->params.path < UCP_SPPLN_PATH_LAST) {
        ++sw->stats.received[xfer->params.path];
    }
    /* contiguous host memory whose first page nobody touched yet */
    if ((req->send.state.dt_iter.dt_class == UCP_DATATYPE_CONTIG) &&
        (req->send.state.dt_iter.mem_info.type == UCS_MEMORY_TYPE_HOST) &&
        (rts->size > 0) &&
        (ucp_sppln_pages(req->send.state.dt_iter.type.contig.buffer) ==
         UCS_CALIB_PAGES_NONRESIDENT)) {
        xfer->flags |= UCP_SPPLN_XFER_FLAG_FRESH;
    }

    ucs_debug("rndv/sppln req %p: receive %zu bytes into %p, %u chunks%s%s",
              req, rts->size, recv_req->recv.buffer, xfer->sched.n_chunks,
              (xfer->flags & UCP_SPPLN_XFER_FLAG_FRESH) ?
              ", untouched pages: copy out with " : "",
              (xfer->flags & UCP_SPPLN_XFER_FLAG_FRESH) ?
              ucp_sppln_fresh_names[sw->fresh_copy] : "");
    ucp_send_request_id_alloc(req);
    ucp_request_send(req);
}

UCP_DEFINE_AM(UCP_FEATURE_TAG | UCP_FEATURE_AM, UCP_AM_ID_RNDV_SPPLN_DATA,
              ucp_sppln_handle_data, NULL, 0);
