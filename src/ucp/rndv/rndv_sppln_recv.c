/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "rndv_sppln.h"
#include "proto_rndv.inl"

#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_worker.inl>
#include <ucp/dt/datatype_iter.inl>
#include <ucp/proto/proto_common.inl>
#include <uct/api/v2/uct_v2.h>
#include <errno.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older C libraries lack it */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
/* Whole pages of a destination filled by userfaultfd that may turn out to
 * be present (written by the application, though the first page was not)
 * before the rest is copied as usual: where many are, the rest likely is
 * too, and a failed UFFDIO_COPY per page costs more than the copy */
#define UCP_SPPLN_UFFD_MAX_PRESENT 32
/* UCX_RNDV_SPPLN_FRESH_UFFD_MIN=auto without a measured model: on the
 * benches' VM, side by side, 64 KiB lost 20-30 us to userfaultfd's fixed
 * cost and 256 KiB came out even, while 384 KiB gained 10-18% */
#define UCP_SPPLN_UFFD_MIN_DEFAULT (384 * UCS_KBYTE)

#if defined(__NR_userfaultfd) && defined(UFFD_USER_MODE_ONLY)
#define UCP_SPPLN_HAVE_UFFD 1
#else
#define UCP_SPPLN_HAVE_UFFD 0
#endif


/*
 * The receiver's side of rndv/sppln (see rndv_sppln.h): rndv/recv/sppln,
 * which UCX's protocol selection finds for the receive operation of a
 * staged RTS (UCP_OP_ID_RNDV_RECV_STAGED), as it finds its rendezvous
 * receivers for the others. Two stages:
 *  RTR - take a receive staging group (or wait for one) and an entry of the
 *        worker's table of receive transfers, send the RTR;
 *  ACK - send the ACKs the sub-block handler made owed; complete after the
 *        last one. A failed transfer sends an error ACK instead, then
 *        completes the receive with the error.
 * Each sub-block is copied out to the user's buffer when its notification
 * arrives, so completion never depends on the order in which bytes are
 * placed.
 */


typedef struct {
    ucp_lane_index_t lane; /* of the RTR and ACKs */
    int populate_ahead; /* fault in what the sender may put
                                    before an ACK, not just its first chunk
                                    (ucp_sppln_recv_populate()) */
    ucs_time_t collapse_max; /* a collapse that takes longer stops them
                                (ucp_sppln_recv_collapse()); 0: untimed */
    size_t uffd_min; /* the fewest bytes of whole pages filled by
                        userfaultfd (UCX_RNDV_SPPLN_FRESH_UFFD_MIN) */
    int have_fill; /* the model has the costs of filling untouched
                      destinations: it says what is faulted in ahead */
    ucs_calib_model_t model; /* of the lane's device */
} ucp_sppln_recv_priv_t;


static ucs_status_t ucp_sppln_recv_ack_progress(uct_pending_req_t *self);
static void ucp_sppln_recv_uffd_unregister(ucp_request_t *req);


/* The receive completes with this status, and the request goes */
static void ucp_sppln_recv_complete(ucp_request_t *req, ucs_status_t status)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;

    ucp_trace_req(req, "rndv/sppln receive done: %s",
                  ucs_status_string(status));
    if (xfer != NULL) {
        uct_worker_progress_unregister_safe(req->send.ep->worker->uct,
                                            &xfer->recv.populate_cb_id);
        ucp_sppln_recv_uffd_unregister(req);
        if (xfer->waiting) {
            ucp_sppln_group_wait_cancel(sw, UCP_SPPLN_SIDE_RECV, &xfer->waiter);
        }
        if (xfer->recv.rx_index >= 0) {
            ucp_sppln_rx_remove(sw, xfer->recv.rx_index);
        }
        if (xfer->group != NULL) {
            ucp_sppln_group_put(sw, xfer->group);
        }
        ucs_mpool_put(xfer);
        req->send.rndv.sppln_xfer = NULL;
    }

    if (req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) {
        ucp_send_request_id_release(req);
    }
    ucp_datatype_iter_cleanup(&req->send.state.dt_iter, UCP_DT_MASK_ALL);
    ucp_proto_rndv_recv_complete_status(req, status);
}

/* The transfer fails: the ACK stage tells the sender, then completes */
static void ucp_sppln_recv_fail(ucp_request_t *req, ucs_status_t status)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;

    if (xfer->status == UCS_INPROGRESS) {
        xfer->status = status;
    }
    if (!xfer->pending && !xfer->waiting) {
        ucp_proto_request_set_stage(req, UCP_PROTO_RNDV_SPPLN_STAGE_ACK);
        ucp_request_send(req);
    }
}

static void ucp_sppln_recv_kick(ucp_request_t *req)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;

    if (!xfer->pending && !xfer->waiting) {
        ucp_request_send(req);
    }
}

static ucs_status_t
ucp_sppln_recv_prepare_params(ucp_sppln_worker_t *sw, ucp_sppln_xfer_t *xfer,
                              const void *params, size_t params_length,
                              size_t length)
{
    ucp_sppln_rts_params_t *p = &xfer->recv.params;
    ucp_sppln_recv_slot_t *slot;
    unsigned s;

    if (params_length < sizeof(*p)) {
        ucs_error("rndv/sppln: an RTS with %zu bytes of parameters, "
                  "expected %zu",
                  params_length, sizeof(*p));
        return UCS_ERR_IO_ERROR;
    }

    memcpy(p, params, sizeof(*p));
    if (p->slot_size > sw->slot_size) {
        ucs_error("rndv/sppln: the sender's staging slots (%u bytes) are "
                  "larger than ours (%zu); set the same "
                  "UCX_RNDV_SPPLN_SLOT_SIZE on both sides",
                  p->slot_size, sw->slot_size);
        return UCS_ERR_UNSUPPORTED;
    } else if (!ucp_sppln_geometry_valid(p->slot_size, p->sub_size) ||
               (p->path == UCP_SPPLN_PATH_AUTO) ||
               (p->path >= UCP_SPPLN_PATH_LAST)) {
        ucs_error("rndv/sppln: an RTS with sub-blocks of %u bytes in slots "
                  "of %u bytes, path %u",
                  p->sub_size, p->slot_size, p->path);
        return UCS_ERR_IO_ERROR;
    }

    /* a chunk is at least a page and at most a slot, whatever C_0 and q
     * the peer sent: the schedule ends */
    ucp_sppln_sched_init(&xfer->sched, length, (ucp_sppln_path_t)p->path, p->c0,
                         p->q_1024 / UCP_SPPLN_Q_WIRE_SCALE, p->slot_size);
    xfer->n_chunks = ucp_sppln_sched_count(&xfer->sched);
    xfer->path     = (ucp_sppln_path_t)p->path;
    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        slot = &xfer->recv.slot[s];
        if (ucp_sppln_sched_next(&xfer->sched, &slot->offset, &slot->length)) {
            slot->chunk = s;
        }
    }
    return UCS_OK;
}

void ucp_proto_sppln_recv_prepare(ucp_worker_h worker, ucp_request_t *req,
                                  const void *params, size_t params_length)
{
    ucp_request_t *rreq = ucp_request_get_super(req);
    size_t length       = req->send.state.dt_iter.length;
    ucp_sppln_worker_t *sw;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;

    req->send.rndv.sppln_xfer = NULL;
    status                    = ucp_sppln_worker_state(worker, &sw);
    if (status != UCS_OK) {
        goto err;
    }

    ucp_sppln_xfer_started(sw);
    xfer = ucs_mpool_get(&sw->xfer_mp);
    if (xfer == NULL) {
        ucs_error("rndv/sppln: failed to allocate a receive transfer");
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    memset(xfer, 0, sizeof(*xfer));
    xfer->req                 = req;
    xfer->status              = UCS_INPROGRESS;
    xfer->waiter.req          = req;
    xfer->recv.rx_index       = -1;
    xfer->recv.populate_cb_id = UCS_CALLBACKQ_ID_NULL;
    req->send.rndv.sppln_xfer = xfer;

    status = ucp_sppln_recv_prepare_params(sw, xfer, params, params_length,
                                           length);
    if (status != UCS_OK) {
        xfer->status = status;
        return;
    }

    ++sw->stats.received[xfer->path];
    ucs_debug("rndv/sppln req %p: receive %zu bytes into %p, %u chunks", req,
              length, rreq->recv.buffer, xfer->n_chunks);
    return;

err:
    /* no transfer state: the protocol tells the sender with the status the
     * receive request keeps */
    rreq->status = status;
}

static size_t ucp_sppln_rtr_pack(void *dest, void *arg)
{
    ucp_request_t *req       = arg;
    ucp_sppln_xfer_t *xfer   = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw   = req->send.ep->worker->sppln;
    ucp_sppln_rtr_hdr_t *rtr = dest;

    rtr->sreq_id   = req->send.rndv.remote_req_id;
    rtr->ep_id     = ucp_ep_local_id(req->send.ep);
    rtr->rreq_id   = ucp_send_request_get_id(req);
    rtr->slot_addr = (uintptr_t)ucp_sppln_group_slot(sw, xfer->group, 0);
    rtr->slot_size = sw->slot_size;
    rtr->rx_tag = ucp_sppln_rx_tag(xfer->recv.rx_index, xfer->recv.generation);
    if (ucp_sppln_fault_pending(UCP_SPPLN_FAULT_SHORT_RTR)) {
        return sizeof(*rtr);
    }
    memcpy(rtr + 1, xfer->group->rkey_buf, xfer->group->rkey_size);
    return sizeof(*rtr) + xfer->group->rkey_size;
}

static size_t ucp_sppln_ack_pack(void *dest, void *arg)
{
    ucp_request_t *req       = arg;
    ucp_sppln_xfer_t *xfer   = req->send.rndv.sppln_xfer;
    ucp_sppln_ack_hdr_t *ack = dest;

    ack->sreq_id = req->send.rndv.remote_req_id;
    ack->ep_id   = ucp_ep_local_id(req->send.ep);
    if (xfer == NULL) {
        /* no transfer state: its failure is the receive request's */
        ack->chunk  = 0;
        ack->status = ucp_request_get_super(req)->status;
        return sizeof(*ack);
    }

    ack->chunk  = xfer->recv.acks_sent;
    ack->status = (xfer->status == UCS_INPROGRESS) ? UCS_OK : xfer->status;
    if (ucp_sppln_fault_pending(UCP_SPPLN_FAULT_ACK_AHEAD)) {
        ++ack->chunk;
    }
    return sizeof(*ack);
}

/* Send one control message; NO_RESOURCE leaves the request pending on the
 * lane */
static ucs_status_t
ucp_sppln_recv_send_ctrl(ucp_request_t *req, ucp_am_id_t am_id,
                         uct_pack_callback_t pack, size_t max_size)
{
    const ucp_sppln_recv_priv_t *rpriv = req->send.proto_config->priv;
    ucp_sppln_xfer_t *xfer             = req->send.rndv.sppln_xfer;
    ucs_status_t status;

    status = ucp_proto_am_bcopy_single_send(req, am_id, rpriv->lane, pack, req,
                                            max_size);
    if ((status == UCS_ERR_NO_RESOURCE) && (xfer != NULL)) {
        req->send.lane = rpriv->lane;
        xfer->pending  = 1;
    } else if (status == UCS_OK) {
        ucp_sppln_fault_sent((am_id == UCP_AM_ID_RNDV_SPPLN_RTR) ?
                                     UCP_SPPLN_FAULT_SHORT_RTR :
                                     UCP_SPPLN_FAULT_ACK_AHEAD);
    }
    return status;
}

/*
 * Is the destination contiguous host memory whose first page nobody touched
 * yet? Asked once the RTR is out, not when the RTS arrives: the answer is a
 * system call (mincore(), 0.9 us on a VM) that nothing before the first
 * sub-block needs, and the sender waits for the RTR.
 */
static void ucp_sppln_recv_check_fresh(ucp_request_t *req)
{
    ucp_sppln_xfer_t *xfer       = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw       = req->send.ep->worker->sppln;
    ucp_datatype_iter_t *dt_iter = &req->send.state.dt_iter;

    if ((dt_iter->dt_class != UCP_DATATYPE_CONTIG) ||
        (dt_iter->mem_info.type != UCS_MEMORY_TYPE_HOST)) {
        return;
    }

    xfer->recv.fresh_probed = 1;
    ++sw->stats.residency_probes;
    xfer->recv.fresh = (ucp_sppln_pages(dt_iter->type.contig.buffer) ==
                        UCS_CALIB_PAGES_NONRESIDENT);
    if (xfer->recv.fresh) {
        ucs_debug("rndv/sppln req %p: untouched pages, copy out with %s", req,
                  ucp_sppln_fresh_names[sw->fresh_copy]);
    }
}

/*
 * The size of the huge pages a piece of the destination at byte offset may
 * be collapsed into (UCX_RNDV_SPPLN_FRESH_COLLAPSE), or 0 where the piece
 * there is not one: it must start on a huge page boundary, and the message
 * must fill it whole, since a huge page is memory the application would
 * not have used otherwise where the message does not write all of it.
 */
static size_t ucp_sppln_recv_piece(ucp_request_t *req, size_t offset)
{
    uintptr_t addr = (uintptr_t)req->send.state.dt_iter.type.contig.buffer +
                     offset;
    ssize_t huge = ucs_get_huge_page_size();

    /* a refusal during other transfers ends this one's collapses too */
    if (!req->send.rndv.sppln_xfer->recv.collapse ||
        !req->send.ep->worker->sppln->fresh_collapse || (huge <= 0) ||
        (addr % huge) || ((offset + huge) > req->send.state.dt_iter.length)) {
        return 0;
    }
    return huge;
}

/*
 * Fault in a piece of an untouched destination as one transparent huge
 * page: the kernel collapses only a range that has a page already, so the
 * first page is faulted in, then the piece is collapsed. The mapping's
 * flags stay as they were (MADV_HUGEPAGE would split the mapping around
 * the piece, and the flag would outlive the buffer). Collapsing allocates
 * a huge page the way a fault under MADV_HUGEPAGE does, which may compact
 * memory, and it may wait for work it queues on the other cores (a core
 * that busy-polls in user space runs it at its next tick, 4 ms later on
 * the benches' VM). Collapses end in this worker when the kernel refuses
 * one for a reason other than a page it cannot move now. A collapse that
 * takes longer than the calibration's faults of the piece in small pages
 * ends collapses for the rest of its transfer and for as many of the next
 * transfers as the slow collapses in a row have doubled to, so that a busy
 * period costs few such waits and the worker tries again after it.
 * Returns 1 when the piece is in a huge page.
 */
static int ucp_sppln_recv_collapse(ucp_request_t *req, void *piece, size_t huge)
{
    const ucp_sppln_recv_priv_t *rpriv = req->send.proto_config->priv;
    ucp_sppln_worker_t *sw             = req->send.ep->worker->sppln;
    ucs_time_t start                   = ucs_get_time();
    const char *what;
    ucs_time_t elapsed;
    int err;

    if (madvise(piece, ucs_get_page_size(), MADV_POPULATE_WRITE) != 0) {
        what = "MADV_POPULATE_WRITE";
        goto err;
    }
    if (madvise(piece, huge, MADV_COLLAPSE) != 0) {
        what = "MADV_COLLAPSE";
        goto err;
    }

    ++sw->stats.collapsed;
    elapsed = ucs_get_time() - start;
    if (((rpriv->collapse_max == 0) || (elapsed <= rpriv->collapse_max)) &&
        !ucp_sppln_fault_take(UCP_SPPLN_FAULT_SLOW_COLLAPSE)) {
        sw->collapse_backoff = 0;
        return 1;
    }

    /* the rest of this transfer, and the next few, in small pages */
    ++sw->stats.collapse_slow;
    req->send.rndv.sppln_xfer->recv.collapse = 0;
    sw->collapse_backoff = ucs_min(ucs_max(1u, sw->collapse_backoff * 2),
                                   UCP_SPPLN_COLLAPSE_BACKOFF_MAX);
    sw->collapse_skip    = sw->collapse_backoff;
    ucs_debug("rndv/sppln req %p: collapsing %zu bytes took %.0f us, longer "
              "than faulting them in; the next %u transfers fault in small "
              "pages",
              req, huge, ucs_time_to_usec(elapsed), sw->collapse_skip);
    return 1;

err:
    err = errno;
    ++sw->stats.collapse_failed;
    if (err == EAGAIN) {
        /* a page of the piece that cannot move now: this piece only */
        ucs_debug("rndv/sppln req %p: madvise(%s, %p, %zu) failed: %s", req,
                  what, piece, huge, strerror(err));
        return 0;
    }

    /* a kernel without it (EINVAL), transparent huge pages disabled or not
     * for this mapping (EINVAL), no huge page to be had (ENOMEM): said once,
     * since the worker stops asking */
    ucs_diag("rndv/sppln: madvise(%s, %p, %zu) failed: %s; no more huge page "
             "collapses (UCX_RNDV_SPPLN_FRESH_COLLAPSE) in this worker",
             what, piece, huge, strerror(err));
    sw->fresh_collapse = 0;
    return 0;
}

/* Fault in the destination's pages up to byte end (from the part done
 * already): the pieces a huge page can back as one each, the rest in small
 * pages; on failure nothing more is faulted in ahead */
static void ucp_sppln_recv_populate_to(ucp_request_t *req, size_t end)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    void *buffer           = req->send.state.dt_iter.type.contig.buffer;
    size_t page            = ucs_get_page_size();
    ssize_t huge_size      = ucs_get_huge_page_size();
    uintptr_t start, stop;
    size_t huge, next;

    while (xfer->recv.populated < end) {
        huge = ucp_sppln_recv_piece(req, xfer->recv.populated);
        if ((huge != 0) &&
            ucp_sppln_recv_collapse(req,
                                    UCS_PTR_BYTE_OFFSET(buffer,
                                                        xfer->recv.populated),
                                    huge)) {
            xfer->recv.populated += huge;
            continue;
        }

        /* small pages up to end, or up to a piece that may be collapsed */
        stop = (uintptr_t)buffer + end;
        if (huge_size > 0) {
            next = ucs_align_up((uintptr_t)buffer + xfer->recv.populated + 1,
                                (size_t)huge_size) -
                   (uintptr_t)buffer;
            if ((next < end) && (ucp_sppln_recv_piece(req, next) != 0)) {
                stop = (uintptr_t)buffer + next;
            }
        }

        start = ucs_align_down((uintptr_t)buffer + xfer->recv.populated, page);
        stop  = ucs_align_up(stop, page);
        if (madvise((void *)start, stop - start, MADV_POPULATE_WRITE) != 0) {
            ucs_debug("rndv/sppln req %p: madvise(MADV_POPULATE_WRITE, %p, "
                      "%zu) failed: %s",
                      req, (void *)start, stop - start, strerror(errno));
            xfer->recv.populate_end = xfer->recv.populated;
            return;
        }
        xfer->recv.populated = ucs_min(stop - (uintptr_t)buffer, end);
    }
}

/*
 * Transparent huge pages for the 2 MiB-aligned pieces of an untouched
 * destination that the message fills whole (UCX_RNDV_SPPLN_FRESH_THP):
 * they would be written all over anyway, so the application's memory does
 * not grow, and a fault brings in 512 pages at once. Faulting in 4 MiB
 * (MADV_POPULATE_WRITE) took 100-120 us that way, against 1.6-1.9 ms in
 * small pages, on the virtual machine of the benches.
 */
static void ucp_sppln_recv_thp(ucp_request_t *req)
{
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;
    uintptr_t buffer = (uintptr_t)req->send.state.dt_iter.type.contig.buffer;
    ssize_t huge     = ucs_get_huge_page_size();
    uintptr_t start, end;

    if (huge <= 0) {
        return;
    }

    start = ucs_align_up(buffer, (size_t)huge);
    end = ucs_align_down(buffer + req->send.state.dt_iter.length, (size_t)huge);
    if (end <= start) {
        return;
    }

    if (madvise((void *)start, end - start, MADV_HUGEPAGE) != 0) {
        ucs_debug("rndv/sppln req %p: madvise(MADV_HUGEPAGE, %p, %zu) failed: "
                  "%s",
                  req, (void *)start, end - start, strerror(errno));
        return;
    }
    ++sw->stats.thp;
}

/* Progress callback: the next piece of what is faulted in ahead */
static unsigned ucp_sppln_recv_populate_progress(void *arg)
{
    ucp_request_t *req     = arg;
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;

    if ((xfer->status != UCS_INPROGRESS) ||
        (xfer->recv.populated >= xfer->recv.populate_end)) {
        uct_worker_progress_unregister_safe(req->send.ep->worker->uct,
                                            &xfer->recv.populate_cb_id);
        return 0;
    }

    ucp_sppln_recv_populate_to(req, ucs_min(xfer->recv.populated +
                                                    xfer->recv.params.sub_size,
                                            xfer->recv.populate_end));
    return 1;
}

/*
 * Filling untouched pages with userfaultfd (UCX_RNDV_SPPLN_FRESH_COPY=uffd).
 * A page fault, or MADV_POPULATE_WRITE, gives the destination zeroed pages
 * that the copy out then writes again; UFFDIO_COPY allocates each page with
 * the data in it, one write per page and one system call per run of whole
 * pages. First sends into fresh buffers at 25 Gb/s on the benches' VM
 * (bench/choice-matrix.sh, two runs each way): 1 MiB 333-465 -> 328-393 us,
 * 4 MiB 1659-1975 -> 1557-1705, 16 MiB 7054-9164 -> 6098-6898; in the NAS
 * IS-like exchange the first touch of 8 MiB cost 2.1-3.8 ms (rc_verbs'
 * registration 2.6-3.5), where it cost 3.3 ms populated in an earlier run
 * (bench/sppln-nas-is.sh -p). The destination's whole pages are registered
 * for missing-page faults before the RTR (ucp_sppln_recv_fresh_prepare()),
 * but for those at its start that the receiver faults in while it waits for
 * the data, and unregistered when the receive completes, which merges the
 * application's mapping back.
 *
 * A page that the kernel has no page for yet must never be written other
 * than by UFFDIO_COPY while registered: the writer would wait for a fault
 * handler, and this thread is the only one. So the parts of a page that two
 * sub-blocks share go in through a bounce page with the rest zero, and a
 * page the kernel reports present (EEXIST: the other part came first, or
 * the application wrote it) is written with memcpy. Any other failure
 * unregisters the transfer's pages, and memcpy faults them in as usual.
 * The descriptor is user-mode only: a fault by the kernel (a system call
 * that writes the buffer) fails rather than waits, and an unprivileged
 * process may open it whatever vm.unprivileged_userfaultfd says.
 */

/* This process's id, for the checks that a forked child does not use its
 * parent's userfaultfd: they come once per sub-block filled, and getpid()
 * is a system call (glibc caches it no more; 1.1-1.5 us on a VM, 10 calls
 * per fresh 4 MiB at 25 Gb/s). A child learns its own id from the atfork
 * handler before it returns from fork(). */
static pid_t ucp_sppln_pid;
static pthread_once_t ucp_sppln_pid_once = PTHREAD_ONCE_INIT;

static void ucp_sppln_pid_update(void)
{
    ucp_sppln_pid = getpid();
}

static void ucp_sppln_pid_init(void)
{
    ucp_sppln_pid_update();
    pthread_atfork(NULL, NULL, ucp_sppln_pid_update);
}

static pid_t ucp_sppln_self(void)
{
    pthread_once(&ucp_sppln_pid_once, ucp_sppln_pid_init);
    return ucp_sppln_pid;
}

/* The worker's userfaultfd, opened at its first use; -1 where the kernel
 * refuses one (the worker populates untouched pages from then on) */
static int ucp_sppln_recv_uffd_fd(ucp_sppln_worker_t *sw)
{
#if UCP_SPPLN_HAVE_UFFD
    struct uffdio_api api = {.api = UFFD_API};
    int fd;

    if (sw->uffd >= 0) {
        if (sw->uffd_pid == ucp_sppln_self()) {
            return sw->uffd;
        }
        /* a forked child's copy serves its parent's address space */
        close(sw->uffd);
        sw->uffd = -1;
    }

    if (sw->uffd_page == NULL) {
        sw->uffd_page = ucs_malloc(ucs_get_page_size(), "sppln_uffd_page");
    }
    if (sw->uffd_page == NULL) {
        ucs_diag("rndv/sppln: no memory for a page: untouched destinations "
                 "are populated, not filled by userfaultfd");
        goto err;
    }

    fd = syscall(__NR_userfaultfd,
                 O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0) {
        ucs_diag("rndv/sppln: userfaultfd() failed: %m; untouched "
                 "destinations are populated instead");
        goto err;
    }

    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        ucs_diag("rndv/sppln: ioctl(UFFDIO_API) failed: %m; untouched "
                 "destinations are populated instead");
        close(fd);
        goto err;
    }

    sw->uffd     = fd;
    sw->uffd_pid = ucp_sppln_self();
    return fd;

err:
    ucs_free(sw->uffd_page);
    sw->uffd_page  = NULL;
    sw->fresh_copy = UCP_SPPLN_FRESH_POPULATE;
    return -1;
#else
    ucs_diag("rndv/sppln: built without userfaultfd: untouched destinations "
             "are populated instead");
    sw->fresh_copy = UCP_SPPLN_FRESH_POPULATE;
    return -1;
#endif
}

/* Register the destination's whole pages from byte offset ahead on;
 * returns 1 when they are, and the transfer's sub-blocks fill them, 0 when
 * it populates them instead */
static int ucp_sppln_recv_uffd_register(ucp_request_t *req, size_t ahead)
{
#if UCP_SPPLN_HAVE_UFFD
    const ucp_sppln_recv_priv_t *rpriv = req->send.proto_config->priv;
    ucp_sppln_xfer_t *xfer             = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw             = req->send.ep->worker->sppln;
    uintptr_t buffer = (uintptr_t)req->send.state.dt_iter.type.contig.buffer;
    size_t page      = ucs_get_page_size();
    struct uffdio_register reg;
    int fd;

    reg.range.start = ucs_align_up(buffer + ahead, page);
    reg.range.len   = ucs_align_down(buffer + req->send.state.dt_iter.length,
                                     page) -
                    reg.range.start;
    if (((ssize_t)reg.range.len <= 0) || (reg.range.len < rpriv->uffd_min)) {
        return 0;
    }

    fd = ucp_sppln_recv_uffd_fd(sw);
    if (fd < 0) {
        return 0;
    }

    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0) {
        /* EBUSY: the application's own userfaultfd has them; EINVAL: a
         * mapping userfaultfd does not serve */
        ucs_debug("rndv/sppln req %p: ioctl(UFFDIO_REGISTER, 0x%llx, %llu) "
                  "failed: %m; populating instead",
                  req, reg.range.start, reg.range.len);
        return 0;
    }
    if (!(reg.ioctls & UCS_BIT(_UFFDIO_COPY))) {
        ucs_debug("rndv/sppln req %p: no UFFDIO_COPY for 0x%llx; populating "
                  "instead",
                  req, reg.range.start);
        ioctl(fd, UFFDIO_UNREGISTER, &reg.range);
        return 0;
    }

    xfer->recv.uffd_start = reg.range.start;
    xfer->recv.uffd_end   = reg.range.start + reg.range.len;
    return 1;
#else
    /* says once that the worker populates instead */
    (void)ucp_sppln_recv_uffd_fd(req->send.ep->worker->sppln);
    (void)ahead;
    return 0;
#endif
}

static void ucp_sppln_recv_uffd_unregister(ucp_request_t *req)
{
#if UCP_SPPLN_HAVE_UFFD
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;
    struct uffdio_range range;

    if (xfer->recv.uffd_end == 0) {
        return;
    }

    range.start = xfer->recv.uffd_start;
    range.len   = xfer->recv.uffd_end - xfer->recv.uffd_start;
    if (sw->uffd_pid != ucp_sppln_self()) {
        /* a forked child: the registration is its parent's, and the
         * child's copy of the mapping has none */
    } else if (ioctl(sw->uffd, UFFDIO_UNREGISTER, &range) != 0) {
        /* the application unmapped its buffer during the receive */
        ucs_debug("rndv/sppln req %p: ioctl(UFFDIO_UNREGISTER, 0x%llx, %llu) "
                  "failed: %m",
                  req, range.start, range.len);
    }
    xfer->recv.uffd_start = 0;
    xfer->recv.uffd_end   = 0;
#endif
}

#if UCP_SPPLN_HAVE_UFFD
/* UFFDIO_COPY of [dst, dst + len), whole pages from src; returns 0, or the
 * errno that stopped it with *copied_p the bytes it copied before */
static int ucp_sppln_recv_uffd_copy(int fd, uintptr_t dst, const void *src,
                                    size_t len, size_t *copied_p)
{
    struct uffdio_copy copy = {.dst  = dst,
                               .src  = (uintptr_t)src,
                               .len  = len,
                               .mode = 0};

    if (ioctl(fd, UFFDIO_COPY, &copy) == 0) {
        *copied_p = len;
        return 0;
    }
    *copied_p = (copy.copy > 0) ? copy.copy : 0;
    return errno;
}
#endif

/*
 * Copy a sub-block into a destination registered with the userfaultfd: its
 * parts outside the registered pages with memcpy, its whole pages with
 * UFFDIO_COPY, and a page it shares with another sub-block through the
 * bounce page.
 */
static void ucp_sppln_recv_uffd_fill(ucp_request_t *req, void *dst,
                                     const void *src, size_t length)
{
#if UCP_SPPLN_HAVE_UFFD
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;
    size_t page            = ucs_get_page_size();
    uintptr_t to = (uintptr_t)dst, end = to + length, page_start, stop;
    /* the source of destination byte 'to' is at 'to + from' */
    uintptr_t from = (uintptr_t)src - (uintptr_t)dst;
    size_t copied;
    int whole, err;

    if ((xfer->recv.uffd_end != 0) && (sw->uffd_pid != ucp_sppln_self())) {
        /* a transfer a forked child goes on with: its pages are not
         * registered, and the descriptor would fill its parent's */
        ucp_sppln_recv_uffd_unregister(req);
    }

    while (to < end) {
        page_start = ucs_align_down(to, page);
        stop       = ucs_min(end, page_start + page);
        if ((xfer->recv.uffd_end == 0) || (page_start >= xfer->recv.uffd_end)) {
            /* not registered: ordinary pages */
            stop = end;
            goto copy;
        } else if (page_start < xfer->recv.uffd_start) {
            stop = ucs_min(end, xfer->recv.uffd_start);
            goto copy;
        }

        whole = (to == page_start) && (stop == page_start + page);
        if (whole) {
            /* the whole pages from here */
            stop = ucs_min(ucs_align_down(end, page), xfer->recv.uffd_end);
            err  = ucp_sppln_recv_uffd_copy(sw->uffd, to, (void *)(to + from),
                                            stop - to, &copied);
            to += copied;
        } else {
            /* part of a page: the rest of it is zero until its own
             * sub-block lands, or present already */
            memset(sw->uffd_page, 0, page);
            memcpy(UCS_PTR_BYTE_OFFSET(sw->uffd_page, to - page_start),
                   (void *)(to + from), stop - to);
            err = ucp_sppln_recv_uffd_copy(sw->uffd, page_start, sw->uffd_page,
                                           page, &copied);
            if (err == 0) {
                to = stop;
            }
        }

        if ((err == 0) || ((err == EAGAIN) && (copied > 0))) {
            /* done, or stopped short of a page that the next call names
             * (a partial copy reports EAGAIN, not why it stopped) */
            continue;
        } else if ((err == EEXIST) &&
                   (!whole || (++xfer->recv.uffd_present <=
                               UCP_SPPLN_UFFD_MAX_PRESENT))) {
            /* the page at 'to' is present: written as usual */
            stop = ucs_min(end, ucs_align_down(to, page) + page);
        } else {
            ucs_debug("rndv/sppln req %p: ioctl(UFFDIO_COPY, 0x%lx) failed: "
                      "%s (%u whole pages present); the rest is copied as "
                      "usual",
                      req, to, strerror(err), xfer->recv.uffd_present);
            ucp_sppln_recv_uffd_unregister(req);
            stop = end;
        }
    copy:
        memcpy((void *)to, (void *)(to + from), stop - to);
        to = stop;
    }
#endif
}


/* Fault in the destination's first length bytes, a sub-block per progress
 * call */
static void ucp_sppln_recv_populate_ahead(ucp_request_t *req, size_t length)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;

    xfer->recv.populate_end = length;
    ++req->send.ep->worker->sppln->stats.populated;
    uct_worker_progress_register_safe(req->send.ep->worker->uct,
                                      ucp_sppln_recv_populate_progress, req, 0,
                                      &xfer->recv.populate_cb_id);
}

/*
 * The RTR is out: until the first sub-block lands, the receiver waits for
 * the sender to copy its first chunk and put it. Pages of an untouched
 * destination that the first chunk will fill are faulted in meanwhile, so
 * that their faults are not on the transfer's path when it lands (a fault
 * per page is microseconds; a first chunk of 256 KiB has 64 pages). Later
 * chunks land while the receiver copies out earlier ones, and fault in as
 * they are copied.
 *
 * Where the receiver faults pages in slower than the network delivers them
 * (populate_ahead), it is the transfer's bottleneck from the first byte:
 * it faults in the pages of as many bytes as its slots hold (what the
 * sender puts ahead of the ACKs when chunks are a slot each), so that its
 * work starts now and overlaps the sender's copies and puts, and costs
 * less than copying into untouched pages later (on softverbs 280 against
 * 315 us per MiB). A fresh 1 MiB on softverbs' default link: 312-325 us
 * against 348-383 with the first chunk alone. Where the wire is the
 * slower, faulting them in now would hold the ACKs back and idle the wire
 * (1 MiB at 25 Gb/s: 705 us against 587-607).
 *
 * It is done a sub-block at a time, one per progress call, and for a
 * sub-block that lands beyond it, up to that sub-block's end before it is
 * copied: done at once it kept the rank from everything else (1 MiB took
 * 250-490 us), and a rank that also sends (an all-to-all) put nothing on
 * the wire meanwhile.
 *
 * Done so, by pieces, it costs the ACKs little, and by default
 * (UCX_RNDV_SPPLN_FRESH_AHEAD) it goes on through the whole message,
 * whether the receiver faults pages in faster than the wire delivers them
 * or not: the faults move from the sub-blocks' arrival, where
 * they add to the copy out, to the moments the receiver waits for data.
 * Forced first sends, medians of 3-4 interleaved runs against the rules
 * above: 25 Gb/s superpipeline 256 KiB 190 -> 162 us, 1 MiB 614 -> 492,
 * 4 MiB 2385 -> 1858, one staged copy 4 MiB 2064 -> 1810; default link
 * superpipeline 16 MiB 6910 -> 6135; 100 Gb/s 2-6% faster, but for one
 * staged copy of 1 MiB (386 -> 413).
 */
static void ucp_sppln_recv_populate(ucp_request_t *req)
{
    const ucp_sppln_recv_priv_t *rpriv = req->send.proto_config->priv;
    ucp_sppln_xfer_t *xfer             = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw             = req->send.ep->worker->sppln;
    size_t length;

    if (!xfer->recv.fresh_probed) {
        ucp_sppln_recv_check_fresh(req);
    }
    if (!xfer->recv.fresh || (sw->fresh_copy == UCP_SPPLN_FRESH_FAULT) ||
        (xfer->recv.slot[0].length == 0)) {
        return;
    }

    if (xfer->recv.uffd_end != 0) {
        /* up to the first page userfaultfd fills */
        length = xfer->recv.uffd_start -
                 (uintptr_t)req->send.state.dt_iter.type.contig.buffer;
        if (length > 0) {
            ucp_sppln_recv_populate_ahead(req, length);
        }
        return;
    }

    /* with UCX_RNDV_SPPLN_FRESH_THP, whole pieces fault in as huge pages
     * already */
    if (sw->collapse_skip > 0) {
        --sw->collapse_skip;
    } else {
        xfer->recv.collapse =
                sw->fresh_collapse &&
                !req->send.ep->worker->context->config.sppln.fresh_thp;
    }

    length = xfer->recv.slot[0].length;
    if (req->send.ep->worker->context->config.sppln.fresh_ahead) {
        length = req->send.state.dt_iter.length;
        if (req->send.ep->worker->context->config.sppln.fresh_thp) {
            ucp_sppln_recv_thp(req);
        }
    } else if (rpriv->populate_ahead) {
        length = ucs_min(req->send.state.dt_iter.length,
                         UCP_SPPLN_NUM_SLOTS * xfer->sched.slot_size);
    }

    ucp_sppln_recv_populate_ahead(req, length);
}

/*
 * Before the RTR: whether the destination is untouched, and how its pages
 * will be filled. Where userfaultfd fills them (but for those the receiver
 * can fault in while it waits for the first sub-block), they are
 * registered now, before the sender may put: registering changes the
 * process's memory map, and on softverbs, whose wire is a copy into this
 * process that holds the map, it waited for a put under way (a 64 KiB
 * message took 15 us longer when registered after the RTR).
 */
static void ucp_sppln_recv_fresh_prepare(ucp_request_t *req)
{
    const ucp_sppln_recv_priv_t *rpriv = req->send.proto_config->priv;
    ucp_sppln_xfer_t *xfer             = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw             = req->send.ep->worker->sppln;
    size_t ahead;

    if (xfer->recv.fresh_prepared) {
        return; /* an RTR sent again, for want of resources */
    }

    xfer->recv.fresh_prepared = 1;
    if ((sw->fresh_copy == UCP_SPPLN_FRESH_UFFD) && !sw->fresh_collapse &&
        !req->send.ep->worker->context->config.sppln.fresh_thp) {
        ahead = req->send.ep->worker->context->config.sppln.fresh_uffd_ahead;
        if (ahead == UCS_MEMUNITS_AUTO) {
            /* staged sends of this worker share the core with the
             * receiver: it does not keep up with the wire */
            ahead = rpriv->have_fill ?
                            ucs_calib_fill_ahead(
                                    &rpriv->model,
                                    req->send.state.dt_iter.length,
                                    xfer->recv.params.sub_size,
                                    sw->groups_used[UCP_SPPLN_SIDE_SEND] > 0) :
                            0;
        }
    } else {
        /* huge pages, where asked for, are faulted in ahead instead */
        ahead = SIZE_MAX;
    }

    if (ahead >= req->send.state.dt_iter.length) {
        /* all of it is faulted in ahead, if untouched: the residency probe
         * need not delay the RTR */
        return;
    }

    ucp_sppln_recv_check_fresh(req);
    if (xfer->recv.fresh && (xfer->recv.slot[0].length != 0) &&
        ucp_sppln_recv_uffd_register(req, ahead)) {
        ucs_debug("rndv/sppln req %p: %zu bytes faulted in ahead, the rest "
                  "filled by userfaultfd",
                  req, ahead);
    }
}

/* Stage RTR: a receive group and a table entry, then the RTR */
static ucs_status_t ucp_sppln_recv_rtr_progress(uct_pending_req_t *self)
{
    ucp_request_t *req     = ucs_container_of(self, ucp_request_t, send.uct);
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;
    ucs_status_t status;

    if ((xfer == NULL) || (xfer->status != UCS_INPROGRESS)) {
        /* the RTS could not be taken: tell the sender */
        ucp_proto_request_set_stage(req, UCP_PROTO_RNDV_SPPLN_STAGE_ACK);
        return ucp_sppln_recv_ack_progress(self);
    }

    xfer->pending = 0;
    xfer->waiting = 0;
    if (xfer->group == NULL) {
        xfer->group = ucp_sppln_group_get(sw, UCP_SPPLN_SIDE_RECV, &status);
        if (xfer->group == NULL) {
            if (status == UCS_INPROGRESS) {
                xfer->waiting = 1;
                ucp_sppln_group_wait(sw, UCP_SPPLN_SIDE_RECV, &xfer->waiter);
                return UCS_OK;
            }
            ucp_sppln_recv_fail(req, status);
            return UCS_OK;
        }
    }

    if (xfer->recv.rx_index < 0) {
        /* a transfer holds its group: no more transfers than groups, and no
         * more groups than entries */
        xfer->recv.rx_index = ucp_sppln_rx_add(sw, xfer,
                                               &xfer->recv.generation);
        if (xfer->recv.rx_index < 0) {
            ucs_error("rndv/sppln req %p: no free receive entry", req);
            ucp_sppln_recv_fail(req, UCS_ERR_NO_RESOURCE);
            return UCS_OK;
        }
        ucp_send_request_id_alloc(req);
        req->flags |= UCP_REQUEST_FLAG_PROTO_INITIALIZED;
    }

    ucp_sppln_recv_fresh_prepare(req);
    status = ucp_sppln_recv_send_ctrl(req, UCP_AM_ID_RNDV_SPPLN_RTR,
                                      ucp_sppln_rtr_pack,
                                      sizeof(ucp_sppln_rtr_hdr_t) +
                                              xfer->group->rkey_size);
    if (status == UCS_ERR_NO_RESOURCE) {
        return status;
    } else if (status != UCS_OK) {
        ucp_sppln_recv_complete(req, status);
        return UCS_OK;
    }

    if (ucp_sppln_fault_take(UCP_SPPLN_FAULT_DUP_RTR)) {
        (void)ucp_sppln_recv_send_ctrl(req, UCP_AM_ID_RNDV_SPPLN_RTR,
                                       ucp_sppln_rtr_pack,
                                       sizeof(ucp_sppln_rtr_hdr_t) +
                                               xfer->group->rkey_size);
    }

    /* the sub-block handler sends the request again when an ACK is owed */
    ucp_proto_request_set_stage(req, UCP_PROTO_RNDV_SPPLN_STAGE_ACK);
    ucp_sppln_recv_populate(req);
    return UCS_OK;
}

/* Stage ACK: the ACKs owed, or the error ACK; complete after the last */
static ucs_status_t ucp_sppln_recv_ack_progress(uct_pending_req_t *self)
{
    ucp_request_t *req     = ucs_container_of(self, ucp_request_t, send.uct);
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucs_status_t status;

    if ((xfer == NULL) || (xfer->status != UCS_INPROGRESS)) {
        status = ucp_sppln_recv_send_ctrl(req, UCP_AM_ID_RNDV_SPPLN_ACK,
                                          ucp_sppln_ack_pack,
                                          sizeof(ucp_sppln_ack_hdr_t));
        if (status == UCS_ERR_NO_RESOURCE) {
            return status;
        }
        ucp_sppln_recv_complete(req,
                                (xfer == NULL) ?
                                        ucp_request_get_super(req)->status :
                                        xfer->status);
        return UCS_OK;
    }

    xfer->pending = 0;
    while (xfer->recv.acks_sent < xfer->recv.acks) {
        status = ucp_sppln_recv_send_ctrl(req, UCP_AM_ID_RNDV_SPPLN_ACK,
                                          ucp_sppln_ack_pack,
                                          sizeof(ucp_sppln_ack_hdr_t));
        if (status == UCS_ERR_NO_RESOURCE) {
            return status;
        } else if (status != UCS_OK) {
            ucp_sppln_recv_complete(req, status);
            return UCS_OK;
        }
        if (ucp_sppln_fault_take(UCP_SPPLN_FAULT_DUP_ACK)) {
            (void)ucp_sppln_recv_send_ctrl(req, UCP_AM_ID_RNDV_SPPLN_ACK,
                                           ucp_sppln_ack_pack,
                                           sizeof(ucp_sppln_ack_hdr_t));
        }
        ++xfer->recv.acks_sent;
        ++req->send.ep->worker->sppln->stats.acks;
    }

    if (xfer->recv.received == req->send.state.dt_iter.length) {
        ucs_assert(xfer->recv.acks_sent == ucp_sppln_acks_owed(xfer->n_chunks));
        ucp_sppln_recv_complete(req, ucp_request_get_super(req)->status);
    }
    return UCS_OK;
}

static void ucp_sppln_recv_abort(ucp_request_t *req, ucs_status_t status)
{
    /* no operation of its own is in flight: its control messages are
     * copies; a purged pending queue let go of it already */
    ucp_sppln_recv_complete(req, status);
}

/*
 * Copy one sub-block into a destination whose pages were not resident when
 * the transfer started. memcpy would take a page fault per page, which a
 * hypervisor that backs a page at its first use makes cost ten microseconds
 * and more; the kernel faults pages in without a trap per page when it
 * writes them itself, as it does for a zero-copy receive. Returns 1 when
 * the sub-block is copied, 0 when the caller copies it.
 */
static int ucp_sppln_recv_copy_fresh(ucp_request_t *req, size_t offset,
                                     const void *src, size_t length)
{
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;
    size_t page            = ucs_get_page_size();
    struct iovec local, remote;
    uintptr_t start, end;
    ssize_t ret;
    void *dst;
    int err;

    dst = UCS_PTR_BYTE_OFFSET(req->send.state.dt_iter.type.contig.buffer,
                              offset);
    if (req->send.rndv.sppln_xfer->recv.uffd_end != 0) {
        ucp_sppln_recv_uffd_fill(req, dst, src, length);
        ++sw->stats.fresh[UCP_SPPLN_FRESH_UFFD];
        return 1;
    }

    if (sw->fresh_copy == UCP_SPPLN_FRESH_KCOPY) {
        local.iov_base  = (void *)src;
        local.iov_len   = length;
        remote.iov_base = dst;
        remote.iov_len  = length;
        ret = process_vm_writev(ucp_sppln_self(), &local, 1, &remote, 1, 0);
        if (ret == (ssize_t)length) {
            ++sw->stats.fresh[UCP_SPPLN_FRESH_KCOPY];
            return 1;
        }
        /* a short copy stopped at a page it could not fault in */
        err = (ret < 0) ? errno : EFAULT;
        ucs_debug("rndv/sppln req %p: process_vm_writev(%p, %zu) failed: %s",
                  req, dst, length, strerror(err));
        if ((err != EPERM) && (err != ENOSYS)) {
            /* a bad buffer, which memcpy reports as usual */
            ++sw->stats.fresh[UCP_SPPLN_FRESH_FAULT];
            return 0;
        }
        /* not allowed here (seccomp, no cross-memory attach) */
        sw->fresh_copy = UCP_SPPLN_FRESH_POPULATE;
    }

    if ((sw->fresh_copy == UCP_SPPLN_FRESH_POPULATE) ||
        (sw->fresh_copy == UCP_SPPLN_FRESH_UFFD)) {
        /* uffd: a transfer whose pages could not be registered */
        start = ucs_align_down((uintptr_t)dst, page);
        end   = ucs_align_up((uintptr_t)dst + length, page);
        if (madvise((void *)start, end - start, MADV_POPULATE_WRITE) == 0) {
            ++sw->stats.fresh[UCP_SPPLN_FRESH_POPULATE];
            return 0;
        }
        err = errno;
        ucs_debug("rndv/sppln req %p: madvise(MADV_POPULATE_WRITE, %p, %zu) "
                  "failed: %s",
                  req, (void *)start, end - start, strerror(err));
        if (err == EINVAL) {
            /* a kernel before 5.14 */
            sw->fresh_copy = UCP_SPPLN_FRESH_FAULT;
        }
    }

    ++sw->stats.fresh[UCP_SPPLN_FRESH_FAULT];
    return 0;
}

/* A chunk is consumed: its slot takes the chunk three later, and the
 * sender learns that it may put there (the last three chunks' slots take
 * none: no ACK, ucp_sppln_acks_owed()) */
static void
ucp_sppln_recv_chunk_done(ucp_sppln_xfer_t *xfer, ucp_sppln_recv_slot_t *slot)
{
    size_t offset, length;

    if (xfer->recv.acks < ucp_sppln_acks_owed(xfer->n_chunks)) {
        ++xfer->recv.acks;
    }
    memset(slot->seen, 0, sizeof(slot->seen));
    slot->filled = 0;
    if (ucp_sppln_sched_next(&xfer->sched, &offset, &length)) {
        slot->offset = offset;
        slot->length = length;
        slot->chunk += UCP_SPPLN_NUM_SLOTS;
    } else {
        slot->length = 0; /* no chunk left for it */
    }
    ucp_sppln_recv_kick(xfer->req);
}

static ucs_status_t
ucp_sppln_handle_data(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker            = arg;
    ucp_sppln_worker_t *sw         = worker->sppln;
    const uct_put_notify_hdr_t *nh = data;
    unsigned index, generation, s, sub;
    ucp_sppln_recv_slot_t *slot;
    size_t offset, sub_size;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    ucp_request_t *req;
    const void *src;
    uint64_t bit;

    if (length < sizeof(*nh)) {
        ucs_error("rndv/sppln: dropped a sub-block notification of %zu "
                  "bytes",
                  length);
        return UCS_OK;
    }

    sub = nh->notify_data & UCS_MASK(UCP_SPPLN_SUB_BITS);
    s = (nh->notify_data >> UCP_SPPLN_SUB_BITS) & UCS_MASK(UCP_SPPLN_SLOT_BITS);
    generation = (nh->notify_data >>
                  (UCP_SPPLN_SUB_BITS + UCP_SPPLN_SLOT_BITS)) &
                 UCS_MASK(UCP_SPPLN_GEN_BITS);
    index = nh->notify_data >>
            (UCP_SPPLN_SUB_BITS + UCP_SPPLN_SLOT_BITS + UCP_SPPLN_GEN_BITS);
    xfer = (sw == NULL) ? NULL : ucp_sppln_rx_find(sw, index, generation);
    if ((xfer == NULL) || (xfer->status != UCS_INPROGRESS)) {
        /* an earlier transfer's, or a peer's that holds an old staging
         * rkey: it cannot count for the transfer that holds the entry now */
        ucs_diag("rndv/sppln: dropped a sub-block for entry %u generation "
                 "%u, which names no receive in progress",
                 index, generation);
        return UCS_OK;
    }
    req = xfer->req;

    /* an active message carries the receiver's request id too */
    if ((length >= sizeof(ucp_sppln_data_hdr_t)) &&
        (((const ucp_sppln_data_hdr_t *)data)->rreq_id !=
         ucp_send_request_get_id(req))) {
        ucs_error("rndv/sppln req %p: a sub-block for request 0x%" PRIx64
                  " in its entry",
                  req, ((const ucp_sppln_data_hdr_t *)data)->rreq_id);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    /* every sub-block of the schedule exactly once, with the length the
     * schedule gives it: the chunk is complete when its bytes add up, so a
     * short, long or repeated one would leave a hole behind a
     * complete-looking chunk */
    sub_size = xfer->recv.params.sub_size;
    slot     = &xfer->recv.slot[ucs_min(s, UCP_SPPLN_NUM_SLOTS - 1)];
    offset   = (size_t)sub * sub_size;
    if ((s >= UCP_SPPLN_NUM_SLOTS) || (offset >= slot->length) ||
        (nh->length != ucs_min(sub_size, slot->length - offset))) {
        ucs_error("rndv/sppln req %p: sub-block %u of %u bytes does not fit "
                  "slot %u (chunk %u of %zu bytes in sub-blocks of %zu)",
                  req, sub, nh->length, s, slot->chunk, slot->length, sub_size);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    bit = UCS_BIT(sub % 64);
    if (slot->seen[sub / 64] & bit) {
        ucs_error("rndv/sppln req %p: sub-block %u of chunk %u arrived twice",
                  req, sub, slot->chunk);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }
    slot->seen[sub / 64] |= bit;

    src = UCS_PTR_BYTE_OFFSET(ucp_sppln_group_slot(sw, xfer->group, s), offset);
    offset += slot->offset;
    if (xfer->recv.fresh && ((offset + nh->length) > xfer->recv.populated) &&
        ((offset + nh->length) <= xfer->recv.populate_end)) {
        /* ahead of the pieces faulted in so far */
        ucp_sppln_recv_populate_to(req, offset + nh->length);
    }
    if (!xfer->recv.fresh || ((offset + nh->length) <= xfer->recv.populated) ||
        !ucp_sppln_recv_copy_fresh(req, offset, src, nh->length)) {
        status = ucp_datatype_iter_unpack(&req->send.state.dt_iter, worker,
                                          nh->length, offset, src);
        if (status != UCS_OK) {
            goto err;
        }
    }

    xfer->recv.received += nh->length;
    slot->filled += nh->length;
    if (slot->filled == slot->length) {
        ucp_sppln_recv_chunk_done(xfer, slot);
    }
    return UCS_OK;

err:
    ucp_sppln_recv_fail(req, status);
    return UCS_OK;
}

static ucs_status_t
ucp_sppln_recv_init(const ucp_proto_init_params_t *init_params)
{
    ucp_context_h context        = init_params->worker->context;
    ucp_sppln_recv_priv_t *rpriv = init_params->priv;
    ucp_proto_caps_t *caps       = init_params->caps;
    ucp_rsc_index_t rsc_index, md_index;
    ucs_calib_derived_t derived;
    double collapse_time;
    const char *md_name;
    ssize_t huge_size;
    int have_model;

    if (init_params->select_param->op_id != UCP_OP_ID_RNDV_RECV_STAGED) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* whatever this worker's own settings: the sender chose to stage */
    rpriv->lane = init_params->ep_config_key->am_lane;
    if (rpriv->lane == UCP_NULL_LANE) {
        return UCS_ERR_UNSUPPORTED;
    }
    rsc_index = init_params->ep_config_key->lanes[rpriv->lane].rsc_index;
    md_index  = context->tl_rscs[rsc_index].md_index;
    md_name   = context->tl_mds[md_index].rsc.md_name;
    /* the device's model, found once for all that follows */
    have_model            = ucp_sppln_find_model(md_name, &rpriv->model);
    rpriv->populate_ahead = have_model && ucp_sppln_recv_bound(&rpriv->model);
    rpriv->collapse_max   = 0;
    huge_size             = ucs_get_huge_page_size();
    if (context->config.sppln.fresh_collapse && (huge_size > 0) && have_model) {
        /* the piece's faults in small pages, by the calibration */
        collapse_time = ucs_linear_func_apply(rpriv->model.copy_fault,
                                              huge_size);
        if (collapse_time > 0) {
            rpriv->collapse_max = ucs_time_from_sec(collapse_time);
        }
    }

    /* a model without them (a file from an older version): as without
     * one, nothing ahead, the fixed minimum */
    rpriv->have_fill = have_model && ucs_calib_fill_measured(&rpriv->model);
    rpriv->uffd_min  = context->config.sppln.fresh_uffd_min;
    if (rpriv->uffd_min == UCS_MEMUNITS_AUTO) {
        if (rpriv->have_fill) {
            ucs_calib_derive(&rpriv->model, &derived);
            rpriv->uffd_min = derived.fill_uffd_min;
        } else {
            rpriv->uffd_min = UCP_SPPLN_UFFD_MIN_DEFAULT;
        }
    }

    caps->cfg_thresh                                 = UCS_MEMUNITS_AUTO;
    caps->cfg_priority                               = 0;
    caps->min_length                                 = 0;
    caps->num_ranges                                 = 1;
    caps->ranges[0].name                             = "copy out";
    caps->ranges[0].max_length                       = SIZE_MAX;
    caps->ranges[0].perf[UCP_PROTO_PERF_TYPE_SINGLE] = ucs_linear_func_make(
            0, 1.0 / init_params->worker->context->config.ext.bcopy_bw);
    caps->ranges[0].perf[UCP_PROTO_PERF_TYPE_MULTI] =
            caps->ranges[0].perf[UCP_PROTO_PERF_TYPE_SINGLE];
    *init_params->priv_size = sizeof(*rpriv);
    return UCS_OK;
}

static void ucp_sppln_recv_query(const ucp_proto_query_params_t *params,
                                 ucp_proto_query_attr_t *attr)
{
    attr->max_msg_length = SIZE_MAX;
    attr->is_estimation  = 0;
    ucs_strncpy_safe(attr->desc, "copy out of staging slots",
                     sizeof(attr->desc));
    ucs_strncpy_safe(attr->config, "", sizeof(attr->config));
}

ucp_proto_t ucp_rndv_recv_sppln_proto = {
        .name  = "rndv/recv/sppln",
        .desc  = NULL,
        .flags = 0,
        .init  = ucp_sppln_recv_init,
        .query = ucp_sppln_recv_query,
        .progress =
                {
                        [UCP_PROTO_RNDV_SPPLN_STAGE_RTR] =
                                ucp_sppln_recv_rtr_progress,
                        [UCP_PROTO_RNDV_SPPLN_STAGE_ACK] =
                                ucp_sppln_recv_ack_progress,
                },
        .abort = ucp_sppln_recv_abort};

UCP_DEFINE_AM(UCP_FEATURE_TAG | UCP_FEATURE_AM, UCP_AM_ID_RNDV_SPPLN_DATA,
              ucp_sppln_handle_data, NULL, 0);
