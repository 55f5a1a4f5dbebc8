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

#include <ucp/am/ucp_am.inl>
#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_worker.inl>
#include <ucp/proto/proto_common.inl>
#include <ucp/proto/proto_select.inl>
#include <ucp/tag/tag_rndv.h>
#include <uct/api/v2/uct_v2.h>


/*
 * The sender's side of rndv/sppln (see rndv_sppln.h): tag/rndv/sppln and
 * am/rndv/sppln. A message whose path is zcopy becomes the request of the
 * protocol UCX selects without this one, found at initialization; a staged
 * message goes through two stages:
 *  RTS  - take a send staging group (or wait for one), send the RTS;
 *  DATA - copy chunks into the free local slots (the first ones while the
 *         RTS travels), and once the RTR arrived put chunk i in sub-blocks
 *         when the receiver acknowledged chunk i-3, with at most
 *         UCP_SPPLN_MAX_POSTED puts in flight. The RTR and ACK handlers,
 *         and the puts' completions, send the request again.
 * The transfer ends once every chunk is posted and every ACK owed came
 * (ucp_sppln_acks_owed()), at an error ACK, at an ATS (the receiver did
 * not take the message) or at an error; the request completes once the
 * puts and copies of its slots are done, since their memory is the staging
 * group's, and the puts' completions say that the receiver has the data.
 */


/* What a sender's protocol keeps (its private data) */
typedef struct {
    ucp_proto_rndv_ctrl_priv_t rts; /* UCX's RTS part: lane, costs */
    ucp_proto_select_elem_t ucx; /* UCX's choice without this
                                              protocol: the zcopy path */
    ucp_proto_select_elem_t eager; /* UCX's eager protocols: the
                                              zcopy path up to eager_max */
    size_t eager_max;
    ucp_lane_index_t rma_lane; /* lane of the staged data */
    ucp_md_index_t md_index; /* its memory domain */
    int put_notify; /* lane has put with
                                              notification */
    int am; /* active messages, not tags */
    ucp_sppln_lane_model_t lmodel;
} ucp_sppln_send_priv_t;


extern ucp_proto_t ucp_tag_rndv_sppln_proto;
extern ucp_proto_t ucp_am_rndv_sppln_proto;

unsigned ucp_sppln_faults = 0;

/* what the zero-copy sends timed and the staged ones checked take is
 * multiplied by (tests) */
static double ucp_sppln_zcopy_scale  = 1.0;
static double ucp_sppln_staged_scale = 1.0;

void ucp_proto_sppln_test_fault(unsigned faults)
{
    ucp_sppln_faults = faults;
}

/* Tests: the timed zero-copy sends count as @a scale times their time (a
 * host where zero-copy is slower or faster than staging) */
void ucp_proto_sppln_test_zcopy_scale(double scale)
{
    ucp_sppln_zcopy_scale = scale;
}

/* Tests: the staged sends of registered buffers count as @a scale times
 * their time in their check (one slowed by something else) */
void ucp_proto_sppln_test_staged_scale(double scale)
{
    ucp_sppln_staged_scale = scale;
}

static int ucp_sppln_send_is_ours(const ucp_request_t *req)
{
    return (req->send.proto_config->proto == &ucp_tag_rndv_sppln_proto) ||
           (req->send.proto_config->proto == &ucp_am_rndv_sppln_proto);
}

static unsigned ucp_sppln_send_busy(const ucp_sppln_xfer_t *xfer)
{
    unsigned s, busy = xfer->send.copies;

    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        busy += (xfer->send.slot[s].comp.count > 0);
    }
    return busy;
}

/* A registered buffer the model staged is done: whether staging it paid
 * (ucp_sppln_cached_staged_check()) */
static void
ucp_sppln_send_check_cached(ucp_request_t *req, const ucp_sppln_xfer_t *xfer)
{
    const ucp_sppln_send_priv_t *spriv = req->send.proto_config->priv;
    ucp_sppln_worker_t *sw             = req->send.ep->worker->sppln;
    ucs_time_t now                     = ucs_get_time();

    sw->stats.cached_backoff += ucp_sppln_cached_staged_check(
            &sw->staged, &spriv->lmodel, req->send.state.dt_iter.length,
            ucs_time_to_sec(now - xfer->send.start_time) *
                    ucp_sppln_staged_scale,
            ucs_time_to_sec(now - xfer->send.rtr_time) *
                    ucp_sppln_staged_scale);
}

/* Time a zero-copy send of a registered buffer handed to UCX's rendezvous,
 * from now to the ATS that completes it (ucp_proto_sppln_ats()), if no
 * staged transfer is in flight; any transfer that starts before stops it
 * (ucp_sppln_xfer_started()). A rendezvous that ends otherwise (a put from
 * the receiver's RTR, an error) gives no time. */
static void
ucp_sppln_zcopy_timer_start(ucp_sppln_worker_t *sw, const ucp_request_t *req)
{
    ucp_sppln_zcopy_timer_t *timer = &sw->zcopy_timer;

    if ((sw->groups_used[UCP_SPPLN_SIDE_SEND] > 0) ||
        (sw->groups_used[UCP_SPPLN_SIDE_RECV] > 0)) {
        return;
    }

    timer->req    = req;
    timer->buffer = req->send.state.dt_iter.type.contig.buffer;
    timer->length = req->send.state.dt_iter.length;
    timer->start  = ucs_get_time();
}

/* UCX's ATS for a request arrived: its zero-copy time, if it is the one
 * timed */
static void ucp_sppln_zcopy_timer_ats(ucp_sppln_worker_t *sw,
                                      const ucp_request_t *req,
                                      ucs_status_t status)
{
    ucp_sppln_zcopy_timer_t *timer = &sw->zcopy_timer;
    double seconds;

    if ((timer->req != req) ||
        (timer->buffer != req->send.state.dt_iter.type.contig.buffer) ||
        (timer->length != req->send.state.dt_iter.length)) {
        return;
    }

    timer->req = NULL;
    if (status != UCS_OK) {
        return;
    }

    seconds = ucs_time_to_sec(ucs_get_time() - timer->start) *
              ucp_sppln_zcopy_scale;
    ucs_trace_req("rndv/sppln req %p: a registered %zu-byte buffer went "
                  "zero-copy in %.1f us",
                  req, timer->length, seconds * 1e6);
    ucp_sppln_cached_zcopy_timed(&sw->staged, timer->length, seconds);
    ++sw->stats.zcopy_timed;
}

/* Complete the request once the transfer ended, is in no queue and not in
 * its progress function, and none of its slots is being put or copied
 * into */
static void ucp_sppln_send_try_complete(ucp_request_t *req)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_worker_h worker    = req->send.ep->worker;
    ucs_status_t status;

    if (!(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) ||
        (xfer->status == UCS_INPROGRESS) || xfer->pending ||
        xfer->progressing) {
        return; /* whoever holds it then completes it */
    }

    if (xfer->send.guarded) {
        /* the transfer ended while a chunk was being posted (a full window,
         * a full send queue): none of the rest will be, its puts in flight
         * alone hold the slot */
        xfer->send.guarded = 0;
        --xfer->send.slot[xfer->send.next_put % UCP_SPPLN_NUM_SLOTS].comp.count;
    }
    if (ucp_sppln_send_busy(xfer) > 0) {
        return; /* the last completion completes it */
    }

    status = xfer->status;
    ucp_trace_req(req, "rndv/sppln send done: %s", ucs_status_string(status));
    if ((status == UCS_OK) && xfer->send.cached_check &&
        (xfer->send.rtr_time != 0)) {
        ucp_sppln_send_check_cached(req, xfer);
    }
    uct_worker_progress_unregister_safe(worker->uct, &xfer->send.copy_cb_id);
    uct_worker_progress_unregister_safe(worker->uct, &xfer->send.idle_cb_id);
    if (xfer->waiting) {
        ucp_sppln_group_wait_cancel(worker->sppln, UCP_SPPLN_SIDE_SEND,
                                    &xfer->waiter);
    }
    if (xfer->send.rkey != NULL) {
        ucp_rkey_destroy(xfer->send.rkey);
    }
    if (xfer->group != NULL) {
        ucp_sppln_group_put(worker->sppln, xfer->group);
    }
    ucs_mpool_put(xfer);
    req->send.rndv.sppln_xfer = NULL;

    if (req->id != UCS_PTR_MAP_KEY_INVALID) { /* not released by an abort */
        ucp_send_request_id_release(req);
    }
    ucp_datatype_iter_cleanup(&req->send.state.dt_iter, UCP_DT_MASK_ALL);
    ucp_request_complete_send(req, status);
}

/* The transfer ends with this status (the first one given counts) */
static void ucp_sppln_send_end(ucp_request_t *req, ucs_status_t status)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;

    if (xfer->status == UCS_INPROGRESS) {
        ucp_trace_req(req, "rndv/sppln send ends: %s",
                      ucs_status_string(status));
        xfer->status = status;
    }
    ucp_sppln_send_try_complete(req);
}

/* Progress the request again, unless a pending queue holds it already, or
 * it is in its progress function now (a put that completed at once) */
static void ucp_sppln_send_kick(ucp_request_t *req)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;

    if (!xfer->pending && !xfer->waiting && !xfer->progressing) {
        ucp_request_send(req);
    }
}

static void ucp_sppln_send_slot_completed(uct_completion_t *comp)
{
    ucp_sppln_send_slot_t *slot = ucs_container_of(comp, ucp_sppln_send_slot_t,
                                                   comp);
    ucp_sppln_xfer_t *xfer;
    ucp_request_t *req;
    unsigned s;

    /* the slot is one of the three of its transfer's */
    s    = slot->chunk % UCP_SPPLN_NUM_SLOTS;
    xfer = ucs_container_of(slot - s, ucp_sppln_xfer_t, send.slot[0]);
    req  = xfer->req;

    slot->length = 0; /* the local slot can take the next chunk */
    if (ucs_unlikely(comp->status != UCS_OK)) {
        ucs_debug("rndv/sppln req %p: put of chunk %u failed: %s", req,
                  slot->chunk, ucs_status_string(comp->status));
        ucp_sppln_send_end(req, comp->status);
    } else if (xfer->status != UCS_INPROGRESS) {
        ucp_sppln_send_try_complete(req);
    } else {
        ucp_sppln_send_kick(req);
    }
}

/* A put completed: it leaves the window (UCP_SPPLN_MAX_POSTED), and counts
 * for its chunk's slot, which the last one frees */
static void ucp_sppln_send_put_completed(uct_completion_t *comp)
{
    ucp_sppln_put_comp_t *pc    = ucs_container_of(comp, ucp_sppln_put_comp_t,
                                                   comp);
    ucp_sppln_xfer_t *xfer      = pc->xfer;
    ucp_sppln_send_slot_t *slot = &xfer->send.slot[pc->slot];
    int last                    = (slot->comp.count == 1);

    ucs_assert(xfer->send.posted > 0);
    --xfer->send.posted;
    /* the chunk's last completion may complete the request: nothing of the
     * transfer after it */
    ucp_invoke_uct_completion(&slot->comp, comp->status);
    if (!last && (xfer->status == UCS_INPROGRESS)) {
        ucp_sppln_send_kick(xfer->req); /* room for the next put */
    }
}

static size_t ucp_sppln_rts_pack(void *dest, void *arg)
{
    ucp_request_t *req                 = arg;
    ucp_sppln_xfer_t *xfer             = req->send.rndv.sppln_xfer;
    const ucp_sppln_send_priv_t *spriv = req->send.proto_config->priv;
    ucp_rndv_rts_hdr_t *rts            = dest;
    ucp_sppln_rts_params_t *params     = (void *)(rts + 1);
    size_t size;

    if (spriv->am) {
        ucp_am_fill_header(ucp_am_hdr_from_rts(rts), req);
        rts->opcode = UCP_RNDV_RTS_AM | UCP_RNDV_RTS_FLAG_SPPLN;
    } else {
        rts->opcode = UCP_RNDV_RTS_TAG_OK | UCP_RNDV_RTS_FLAG_SPPLN;
        ucp_tag_hdr_from_rts(rts)->tag = req->send.msg_proto.tag;
    }
    rts->sreq.req_id  = ucp_send_request_get_id(req);
    rts->sreq.ep_id   = ucp_send_request_get_ep_remote_id(req);
    rts->address      = 0;
    rts->size         = req->send.state.dt_iter.length;
    params->c0        = xfer->sched.next;
    params->q_1024    = (uint32_t)(xfer->sched.q * UCP_SPPLN_Q_WIRE_SCALE);
    params->slot_size = req->send.ep->worker->sppln->slot_size;
    params->sub_size  = xfer->send.sub_size;
    params->path      = xfer->path;
    size              = sizeof(*rts) + sizeof(*params);
    if (spriv->am) {
        /* where UCX's AM RTS has it: after what stands for the rkey */
        ucp_am_pack_user_header(UCS_PTR_BYTE_OFFSET(rts, size), req);
        size += req->send.msg_proto.am.header_length;
    }
    return size;
}

/* Has the copy engine finished staging this slot? A failed copy ends the
 * transfer */
static int ucp_sppln_copy_test(ucp_request_t *req, ucp_sppln_send_slot_t *slot)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucs_status_t status;

    if (!slot->copying) {
        return 1;
    }

    status = ucs_copy_req_test(&slot->copy);
    if (status == UCS_INPROGRESS) {
        return 0;
    }

    slot->copying = 0;
    slot->staged  = slot->length;
    --xfer->send.copies;
    if (status != UCS_OK) {
        ucs_debug("rndv/sppln req %p: staging chunk %u failed: %s", req,
                  slot->chunk, ucs_status_string(status));
        slot->length = 0;
        if (xfer->status == UCS_INPROGRESS) {
            xfer->status = status;
        }
    }
    return 1;
}

/* Progress callback while the copy engine stages chunks of a transfer: a
 * finished copy lets the sender put that chunk */
static unsigned ucp_sppln_copy_progress(void *arg)
{
    ucp_request_t *req     = arg;
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    unsigned s, done = 0;

    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        if (xfer->send.slot[s].copying &&
            ucp_sppln_copy_test(req, &xfer->send.slot[s])) {
            ++done;
        }
    }

    if (xfer->send.copies == 0) {
        uct_worker_progress_unregister_safe(req->send.ep->worker->uct,
                                            &xfer->send.copy_cb_id);
    }
    if (done > 0) {
        if (xfer->status != UCS_INPROGRESS) {
            ucp_sppln_send_try_complete(req);
        } else {
            ucp_sppln_send_kick(req);
        }
    }
    return done;
}

/*
 * Bytes of a message this thread stages before its RTR comes. Where the
 * network is slower than the copy, what it copies in the network's round
 * trip: a copy beyond that delays the first put, and with it the whole
 * transfer, while the rest of the copy hides behind the puts of what is
 * staged (a fresh 256 KiB at 25 Gb/s, one staged chunk, put its first
 * sub-block 9.3-14 us after its RTR came, and 4 us with this bound). The
 * rest it stages in short pieces while it waits for the RTR
 * (ucp_sppln_copy_idle()). Where the copy is the slower, all of it at
 * once: the thread has nothing better to do until the RTR.
 */
static size_t ucp_sppln_copy_before_rtr(ucp_request_t *req)
{
    const ucp_sppln_send_priv_t *spriv = req->send.proto_config->priv;
    const ucs_calib_model_t *model     = &spriv->lmodel.model;
    double copy_bw;

    if (!spriv->lmodel.have_model) {
        return SIZE_MAX;
    }

    copy_bw = ucs_calib_copy_bw(model, req->send.state.dt_iter.length);
    if (model->net_bw >= copy_bw) {
        return SIZE_MAX;
    }
    return (size_t)(2.0 * model->net_latency * copy_bw);
}

/* The slot this thread is copying a chunk into: the last chunk taken, until
 * all its bytes are staged */
static ucp_sppln_send_slot_t *ucp_sppln_copy_slot(ucp_sppln_xfer_t *xfer)
{
    ucp_sppln_send_slot_t *slot;
    unsigned chunk;

    if (xfer->sched.index == 0) {
        return NULL;
    }

    chunk = xfer->sched.index - 1;
    slot  = &xfer->send.slot[chunk % UCP_SPPLN_NUM_SLOTS];
    if ((slot->length == 0) || (slot->chunk != chunk) || slot->copying ||
        (slot->staged >= slot->length)) {
        return NULL;
    }
    return slot;
}

/*
 * Stage the next part of the message into a free local slot: a chunk posted
 * to the copy engine (UCX_RNDV_SPPLN_COPY_ASYNC), which a full engine turns
 * back into copies by this thread, or at most 'piece' bytes copied by this
 * thread (a sub-block, which the caller puts before it copies the next
 * once the RTR came). Returns the bytes staged or posted to the engine, 0
 * when no slot is free or everything is staged.
 */
static size_t ucp_sppln_copy_ahead(ucp_request_t *req, size_t piece)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_worker_h worker    = req->send.ep->worker;
    ucp_sppln_worker_t *sw = worker->sppln;
    const void *buffer     = req->send.state.dt_iter.type.contig.buffer;
    ucp_sppln_send_slot_t *slot;
    size_t offset, length;
    ucs_status_t status;
    void *dst;

    slot = ucp_sppln_copy_slot(xfer);
    if (slot == NULL) {
        slot = &xfer->send.slot[xfer->sched.index % UCP_SPPLN_NUM_SLOTS];
        if ((slot->length != 0) || (slot->comp.count != 0)) {
            return 0; /* still holds a chunk being sent */
        }

        if (!ucp_sppln_sched_next(&xfer->sched, &offset, &length)) {
            return 0; /* every chunk is staged */
        }

        slot->chunk  = xfer->sched.index - 1;
        slot->offset = offset;
        slot->length = length;
        slot->staged = 0;
        if (xfer->send.copy_engine != NULL) {
            dst    = ucp_sppln_group_slot(sw, xfer->group,
                                          slot->chunk % UCP_SPPLN_NUM_SLOTS);
            status = ucs_copy_engine_post(xfer->send.copy_engine, dst,
                                          UCS_PTR_BYTE_OFFSET(buffer, offset),
                                          length, &slot->copy);
            if (status == UCS_INPROGRESS) {
                slot->copying = 1;
                ++xfer->send.copies;
                ++sw->stats.async_copies;
                uct_worker_progress_register_safe(worker->uct,
                                                  ucp_sppln_copy_progress, req,
                                                  0, &xfer->send.copy_cb_id);
            }
            if ((status == UCS_INPROGRESS) || (status == UCS_OK)) {
                /* in flight (staged when it completes), or copied inline */
                slot->staged = (status == UCS_OK) ? length : 0;
                xfer->send.copied += length;
                return length;
            }
            /* else this thread copies it */
        }
    }

    length = ucs_min(piece, slot->length - slot->staged);
    offset = slot->offset + slot->staged;
    dst    = UCS_PTR_BYTE_OFFSET(ucp_sppln_group_slot(sw, xfer->group,
                                                      slot->chunk %
                                                              UCP_SPPLN_NUM_SLOTS),
                                 slot->staged);
    ucs_memcpy_relaxed(dst, UCS_PTR_BYTE_OFFSET(buffer, offset), length);
    slot->staged += length;
    xfer->send.copied += length;
    return length;
}

/*
 * Progress callback while a sender waits for its RTR beyond the round trip
 * it staged for (ucp_sppln_copy_before_rtr()): a receiver that posts its
 * receive late answers late, and a sender whose core also receives (an
 * all-to-all) has the copies it left for after the RTR on its path then:
 * the NAS IS-like exchange at 25 Gb/s, whose ranks reach it up to
 * milliseconds apart, took 7.15-7.71 ms (medians of 15) without these
 * copies against 6.77-7.13 with them, 7.07-7.11 when the sender staged
 * all it could before it looked for the RTR. UCP_SPPLN_IDLE_COPY bytes a
 * call, so that an RTR that comes meanwhile waits for that short a copy.
 */
static unsigned ucp_sppln_copy_idle(void *arg)
{
    ucp_request_t *req     = arg;
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;
    size_t copied;

    copied = ((xfer->status == UCS_INPROGRESS) && !xfer->send.rtr) ?
                     ucp_sppln_copy_ahead(req, UCP_SPPLN_IDLE_COPY) :
                     0;
    if (copied == 0) {
        uct_worker_progress_unregister_safe(req->send.ep->worker->uct,
                                            &xfer->send.idle_cb_id);
        return 0;
    }

    sw->stats.ahead_idle += copied;
    return 1;
}

/* Notification after a put, on lanes without put with notification: an
 * active message on the same endpoint, which RC (and tcp) order after the
 * put */
static ucs_status_t ucp_sppln_notify_am(ucp_sppln_xfer_t *xfer, uct_ep_h uct_ep,
                                        uint32_t notify_data, uint32_t length)
{
    uint64_t hdr = ((uint64_t)length << 32) | notify_data;

    return uct_ep_am_short(uct_ep, UCP_AM_ID_RNDV_SPPLN_DATA, hdr,
                           &xfer->send.rreq_id, sizeof(xfer->send.rreq_id));
}

/* Test only: the chunk whose data a fault breaks, the last one whose ACK
 * the sender waits for (the last one where none is owed), so that a broken
 * sender learns of its failure */
static unsigned ucp_sppln_fault_chunk(const ucp_sppln_xfer_t *xfer)
{
    unsigned owed = ucp_sppln_acks_owed(xfer->n_chunks);

    return (owed > 0) ? (owed - 1) : (xfer->n_chunks - 1);
}

/* Put the sub-blocks of chunk next_put in slot s, from put_offset on */
static ucs_status_t ucp_sppln_post_subs(ucp_request_t *req,
                                        const ucp_sppln_send_priv_t *spriv,
                                        unsigned s)
{
    ucp_sppln_xfer_t *xfer      = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw      = req->send.ep->worker->sppln;
    ucp_sppln_send_slot_t *slot = &xfer->send.slot[s];
    uct_ep_h uct_ep             = req->send.ep->uct_eps[spriv->rma_lane];
    size_t sub_size             = xfer->send.sub_size;
    size_t length, advance, offset;
    ucp_sppln_put_comp_t *pc;
    uint32_t notify_data;
    ucs_status_t status;
    unsigned fault, i;
    uct_iov_t iov;

    while (xfer->send.put_offset < slot->length) {
        if (!xfer->send.notify_owed &&
            ((xfer->send.put_offset +
              ucs_min(sub_size, slot->length - xfer->send.put_offset)) >
             slot->staged)) {
            return UCS_INPROGRESS; /* its copy comes first */
        }
        if (!xfer->send.notify_owed &&
            (xfer->send.posted >= UCP_SPPLN_MAX_POSTED)) {
            ++sw->stats.window_full;
            return UCS_INPROGRESS; /* a completion sends the request again */
        }
        offset  = xfer->send.put_offset;
        length  = ucs_min(sub_size, slot->length - offset);
        advance = length;
        fault   = 0;
        if (ucs_unlikely(ucp_sppln_faults != 0)) {
            /* test only: committed once the put is posted */
            if ((xfer->send.next_put == ucp_sppln_fault_chunk(xfer)) &&
                (offset == sub_size) && (length == sub_size) &&
                ucp_sppln_fault_pending(UCP_SPPLN_FAULT_DUP_SUB)) {
                /* its second sub-block replaced by the first again */
                fault  = UCP_SPPLN_FAULT_DUP_SUB;
                offset = 0;
            } else if ((xfer->send.next_put == ucp_sppln_fault_chunk(xfer)) &&
                       (offset + length == slot->length) && (length > 1) &&
                       ucp_sppln_fault_pending(UCP_SPPLN_FAULT_SHORT_SUB)) {
                fault = UCP_SPPLN_FAULT_SHORT_SUB;
                --length;
            } else if ((offset == 0) &&
                       ucp_sppln_fault_pending(UCP_SPPLN_FAULT_FOREIGN)) {
                /* a notification of a transfer this sender does not own:
                 * another generation of the receiver's entry */
                status = ucp_sppln_notify_am(
                        xfer, uct_ep,
                        ucp_sppln_notify_data(xfer->send.rx_tag ^ 1, s, 0),
                        length);
                if (status != UCS_OK) {
                    return status;
                }
                ucp_sppln_fault_sent(UCP_SPPLN_FAULT_FOREIGN);
            }
        }
        notify_data = ucp_sppln_notify_data(xfer->send.rx_tag, s,
                                            offset / sub_size);

        if (xfer->send.notify_owed) {
            /* the put went out, its notification did not */
            status = ucp_sppln_notify_am(xfer, uct_ep, notify_data, length);
            if (status != UCS_OK) {
                return status;
            }
            xfer->send.notify_owed = 0;
            xfer->send.put_offset += advance;
            continue;
        }

        iov.buffer = UCS_PTR_BYTE_OFFSET(ucp_sppln_group_slot(sw, xfer->group,
                                                              s),
                                         offset);
        iov.length = length;
        iov.memh   = ucp_sppln_group_uct_memh(xfer->group, spriv->md_index);
        iov.stride = 0;
        iov.count  = 1;

        /* a free completion: fewer than UCP_SPPLN_MAX_POSTED are in use */
        i = 0;
        while (xfer->send.put_comp[i].comp.count != 0) {
            ++i;
            ucs_assert(i < UCP_SPPLN_MAX_POSTED);
        }
        pc              = &xfer->send.put_comp[i];
        pc->comp.count  = 1;
        pc->comp.status = UCS_OK;
        pc->slot        = s;
        ++slot->comp.count;
        ++xfer->send.posted;
        sw->stats.max_posted = ucs_max(sw->stats.max_posted, xfer->send.posted);
        if (spriv->put_notify) {
            status = uct_ep_put_notify_zcopy(
                    uct_ep, &iov, 1,
                    xfer->send.remote_slot + (s * sw->slot_size) + offset,
                    xfer->send.tl_rkey, UCP_AM_ID_RNDV_SPPLN_DATA, notify_data,
                    &pc->comp);
        } else {
            status = uct_ep_put_zcopy(uct_ep, &iov, 1,
                                      xfer->send.remote_slot +
                                              (s * sw->slot_size) + offset,
                                      xfer->send.tl_rkey, &pc->comp);
        }

        if (status != UCS_INPROGRESS) {
            pc->comp.count = 0;
            --xfer->send.posted;
            --slot->comp.count;
            if (status != UCS_OK) {
                return status;
            }
        }
        ++sw->stats.puts;
        if (ucs_unlikely(fault != 0)) {
            ucp_sppln_fault_sent(fault);
        }

        if (!spriv->put_notify) {
            status = ucp_sppln_notify_am(xfer, uct_ep, notify_data, length);
            if (status != UCS_OK) {
                xfer->send.notify_owed = 1;
                return status;
            }
        }
        xfer->send.put_offset += advance;
    }

    return UCS_OK;
}

/* Put chunk next_put; its slot's completion is guarded until all its
 * sub-blocks are posted */
static ucs_status_t
ucp_sppln_post_chunk(ucp_request_t *req, const ucp_sppln_send_priv_t *spriv)
{
    ucp_sppln_xfer_t *xfer      = req->send.rndv.sppln_xfer;
    unsigned s                  = xfer->send.next_put % UCP_SPPLN_NUM_SLOTS;
    ucp_sppln_send_slot_t *slot = &xfer->send.slot[s];
    ucs_status_t status;

    if (!xfer->send.guarded) {
        /* first visit of this chunk (not a retry after NO_RESOURCE or a
         * full window) */
        slot->comp.count   = 1;
        slot->comp.status  = UCS_OK;
        xfer->send.guarded = 1;
    }

    status = ucp_sppln_post_subs(req, spriv, s);
    if ((status == UCS_ERR_NO_RESOURCE) || (status == UCS_INPROGRESS)) {
        return status; /* the guard stays for the retry */
    } else if (status != UCS_OK) {
        /* the chunk is given up, the transfer ends: the puts in flight
         * alone hold the slot, else the transfer would never complete */
        xfer->send.guarded = 0;
        --slot->comp.count;
        return status;
    }

    /* chunk posted: drop the guard */
    ++xfer->send.next_put;
    xfer->send.put_offset = 0;
    xfer->send.guarded    = 0;
    ucp_invoke_uct_completion(&slot->comp, UCS_OK);
    return UCS_OK;
}

/* Put the staged chunks the receiver has room for */
static ucs_status_t ucp_sppln_put_staged(ucp_request_t *req)
{
    const ucp_sppln_send_priv_t *spriv = req->send.proto_config->priv;
    ucp_sppln_xfer_t *xfer             = req->send.rndv.sppln_xfer;
    ucp_sppln_send_slot_t *slot;
    ucs_status_t status;

    while (xfer->send.rtr && (xfer->send.next_put < xfer->n_chunks) &&
           (xfer->send.next_put < (xfer->send.acked + UCP_SPPLN_NUM_SLOTS))) {
        slot = &xfer->send.slot[xfer->send.next_put % UCP_SPPLN_NUM_SLOTS];
        if ((slot->length == 0) || (slot->chunk != xfer->send.next_put) ||
            !ucp_sppln_copy_test(req, slot)) {
            break; /* still being sent or staged: a completion kicks */
        }
        if (xfer->status != UCS_INPROGRESS) {
            break; /* its staging copy failed */
        }

        status = ucp_sppln_post_chunk(req, spriv);
        if (status == UCS_ERR_NO_RESOURCE) {
            req->send.lane = spriv->rma_lane;
            xfer->pending  = 1;
            return UCS_ERR_NO_RESOURCE;
        } else if (status == UCS_INPROGRESS) {
            /* the window is full (a put's completion kicks), or the rest
             * of the chunk is not staged yet */
            break;
        } else if (status != UCS_OK) {
            xfer->status = status;
            break;
        }
    }

    return UCS_OK;
}

/* The sender staged what it does before it looks for its RTR */
static void ucp_sppln_send_ahead_done(ucp_request_t *req)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_worker_t *sw = req->send.ep->worker->sppln;

    if (!xfer->send.ahead_done) {
        xfer->send.ahead_done = 1;
        sw->stats.max_ahead   = ucs_max(sw->stats.max_ahead, xfer->send.copied);
    }
}

/* Stage the message and put what is staged, in turns: the first copies
 * overlap the RTS/RTR round trip, the others the puts */
static ucs_status_t ucp_sppln_send_data(ucp_request_t *req)
{
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucs_status_t status;

    for (;;) {
        status = ucp_sppln_put_staged(req);
        if ((status != UCS_OK) || (xfer->status != UCS_INPROGRESS)) {
            return status;
        }
        if (!xfer->send.rtr && (xfer->send.copied >= xfer->send.ahead_max)) {
            /* the rest while the RTR is awaited */
            ucp_sppln_send_ahead_done(req);
            uct_worker_progress_register_safe(req->send.ep->worker->uct,
                                              ucp_sppln_copy_idle, req, 0,
                                              &xfer->send.idle_cb_id);
            return UCS_OK;
        }
        if (ucp_sppln_copy_ahead(req, xfer->send.sub_size) == 0) {
            if (!xfer->send.rtr) {
                ucp_sppln_send_ahead_done(req);
            }
            return UCS_OK;
        }
    }
}

/* Stage DATA */
static ucs_status_t ucp_sppln_send_data_progress(uct_pending_req_t *self)
{
    ucp_request_t *req     = ucs_container_of(self, ucp_request_t, send.uct);
    ucp_sppln_xfer_t *xfer = req->send.rndv.sppln_xfer;
    ucs_status_t status;

    xfer->pending = 0;
    if (xfer->status == UCS_INPROGRESS) {
        xfer->progressing = 1;
        status            = ucp_sppln_send_data(req);
        xfer->progressing = 0;
        if (status == UCS_ERR_NO_RESOURCE) {
            return status;
        }
        if ((xfer->status == UCS_INPROGRESS) &&
            (xfer->send.next_put == xfer->n_chunks) &&
            (xfer->send.acked == ucp_sppln_acks_owed(xfer->n_chunks))) {
            /* every chunk posted: done once their puts completed */
            xfer->status = UCS_OK;
        }
    }

    if (xfer->status != UCS_INPROGRESS) {
        /* may complete the request */
        ucp_sppln_send_try_complete(req);
    }
    return UCS_OK;
}

/* Whether the zcopy path can register the buffer: registering it now puts
 * it in UCP's cache, where UCX's protocol finds it */
static int
ucp_sppln_can_register(ucp_request_t *req, const ucp_sppln_send_priv_t *spriv)
{
    ucp_context_h context = req->send.ep->worker->context;
    ucs_status_t status;

    status = ucp_datatype_iter_mem_reg(context, &req->send.state.dt_iter,
                                       UCS_BIT(spriv->md_index),
                                       UCT_MD_MEM_ACCESS_RMA |
                                               UCT_MD_MEM_FLAG_HIDE_ERRORS,
                                       UCS_BIT(UCP_DATATYPE_CONTIG));
    if (status != UCS_OK) {
        ucs_debug("rndv/sppln req %p: registering %zu bytes failed (%s), "
                  "sending through the superpipeline",
                  req, req->send.state.dt_iter.length,
                  ucs_status_string(status));
        return 0;
    }

    ucp_datatype_iter_mem_dereg(context, &req->send.state.dt_iter,
                                UCS_BIT(UCP_DATATYPE_CONTIG));
    return 1;
}

/* First call of a message: choose its path; the zcopy path hands the
 * request to UCX's protocol (1 is returned), a staged one gets its state */
static ucs_status_t
ucp_sppln_send_request_init(ucp_request_t *req, int *handed_over)
{
    const ucp_sppln_send_priv_t *spriv = req->send.proto_config->priv;
    ucp_worker_h worker                = req->send.ep->worker;
    size_t length                      = req->send.state.dt_iter.length;
    const ucp_sppln_config_t *config   = &worker->context->config.sppln;
    ucp_sppln_worker_t *sw;
    ucp_sppln_path_t path;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    unsigned s;
    int busy, probed, eager, check;

    *handed_over = 0;
    status       = ucp_sppln_worker_state(worker, &sw);
    if (status != UCS_OK) {
        return status;
    }

    ucp_sppln_xfer_started(sw);
    busy = sw->groups_used[UCP_SPPLN_SIDE_SEND] >= sw->max_groups;
    path = ucp_sppln_choose(worker->context, &sw->staged, &spriv->lmodel,
                            req->send.state.dt_iter.type.contig.buffer, length,
                            busy, &probed, &check);
    sw->stats.residency_probes += probed;
    sw->stats.busy_zcopy += busy && (path == UCP_SPPLN_PATH_ZCOPY);
    if (path == UCP_SPPLN_PATH_ZCOPY) {
        if (ucp_sppln_can_register(req, spriv)) {
            ++sw->stats.sent[UCP_SPPLN_PATH_ZCOPY];
            /* a forced path (UCX_RNDV_SPPLN_PATH=zcopy) is UCX's
             * rendezvous, as the option says */
            eager = (config->path == UCP_SPPLN_PATH_AUTO) &&
                    (length <= spriv->eager_max);
            sw->stats.eager += eager;
            ucs_info("rndv/sppln req %p: %zu bytes path zcopy%s%s", req, length,
                     eager ? ", eager" : "",
                     busy ? ", every send staging group busy" : "");
            if (check && !eager) {
                ucp_sppln_zcopy_timer_start(sw, req);
            }
            ucp_proto_request_select_proto(req,
                                           eager ? &spriv->eager : &spriv->ucx,
                                           length);
            *handed_over = 1;
            return UCS_OK;
        }
        /* e.g. RLIMIT_MEMLOCK: the staging memory is registered already */
        ++sw->stats.reg_fallback;
        path = UCP_SPPLN_PATH_SPPLN;
    }

    status = ucp_ep_resolve_remote_id(req->send.ep, spriv->rts.lane);
    if (status != UCS_OK) {
        return status;
    }

    xfer = ucs_mpool_get(&sw->xfer_mp);
    if (xfer == NULL) {
        ucs_error("rndv/sppln: failed to allocate a transfer");
        return UCS_ERR_NO_MEMORY;
    }

    memset(xfer, 0, sizeof(*xfer));
    xfer->req        = req;
    xfer->status     = UCS_INPROGRESS;
    xfer->path       = path;
    xfer->waiter.req = req;
    ucp_sppln_sched_init(&xfer->sched, length, path,
                         ucp_sppln_first_chunk(config, &spriv->lmodel, length),
                         spriv->lmodel.q, sw->slot_size);
    xfer->n_chunks          = ucp_sppln_sched_count(&xfer->sched);
    xfer->send.copy_cb_id   = UCS_CALLBACKQ_ID_NULL;
    xfer->send.idle_cb_id   = UCS_CALLBACKQ_ID_NULL;
    xfer->send.copy_engine  = ucp_sppln_copy_engine(sw, &spriv->lmodel);
    xfer->send.cached_check = check;
    xfer->send.start_time   = check ? ucs_get_time() : 0;
    /* a registered buffer the model stages keeps the lane's sub-blocks (a
     * forced path cannot tell a buffer sent again from a first send) */
    xfer->send.sub_size = check ? spriv->lmodel.sub_size :
                                  ucp_sppln_first_send_sub(config,
                                                           &spriv->lmodel,
                                                           length);
    sw->stats.cached_staged += check;
    xfer->send.ahead_max = ucp_sppln_copy_before_rtr(req);
    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        xfer->send.slot[s].comp.func = ucp_sppln_send_slot_completed;
        xfer->send.slot[s].chunk     = s;
    }
    for (s = 0; s < UCP_SPPLN_MAX_POSTED; ++s) {
        xfer->send.put_comp[s].comp.func = ucp_sppln_send_put_completed;
        xfer->send.put_comp[s].xfer      = xfer;
    }

    req->send.rndv.sppln_xfer = xfer;
    ucp_send_request_id_alloc(req);
    req->flags |= UCP_REQUEST_FLAG_PROTO_INITIALIZED;
    ++sw->stats.sent[path];
    ucs_info("rndv/sppln req %p: %zu bytes path %s, %u chunks, the first "
             "%zu bytes, growing by %.2f up to %zu",
             req, length, ucp_sppln_path_names[path], xfer->n_chunks,
             (size_t)xfer->sched.next, xfer->sched.q, sw->slot_size);
    return UCS_OK;
}

/* Stage RTS: the message's path; a staged one takes a send group and sends
 * its RTS */
static ucs_status_t ucp_sppln_send_rts_progress(uct_pending_req_t *self)
{
    ucp_request_t *req = ucs_container_of(self, ucp_request_t, send.uct);
    const ucp_sppln_send_priv_t *spriv = req->send.proto_config->priv;
    ucp_worker_h worker                = req->send.ep->worker;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    int handed_over;

    if (!(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED)) {
        status = ucp_sppln_send_request_init(req, &handed_over);
        if (status != UCS_OK) {
            ucp_proto_request_abort(req, status);
            return UCS_OK;
        } else if (handed_over) {
            return req->send.uct.func(self); /* UCX's protocol */
        }
    }

    xfer          = req->send.rndv.sppln_xfer;
    xfer->pending = 0;
    xfer->waiting = 0;
    if (xfer->status != UCS_INPROGRESS) {
        ucp_sppln_send_try_complete(req);
        return UCS_OK;
    }

    if (xfer->group == NULL) {
        xfer->group = ucp_sppln_group_get(worker->sppln, UCP_SPPLN_SIDE_SEND,
                                          &status);
        if (xfer->group == NULL) {
            if (status == UCS_INPROGRESS) {
                xfer->waiting = 1;
                ucp_sppln_group_wait(worker->sppln, UCP_SPPLN_SIDE_SEND,
                                     &xfer->waiter);
            } else {
                ucp_sppln_send_end(req, status);
            }
            return UCS_OK;
        }
    }

    status = ucp_proto_am_bcopy_single_send(
            req, UCP_AM_ID_RNDV_RTS, spriv->rts.lane, ucp_sppln_rts_pack, req,
            sizeof(ucp_rndv_rts_hdr_t) + sizeof(ucp_sppln_rts_params_t) +
                    (spriv->am ? req->send.msg_proto.am.header_length : 0));
    if (status == UCS_ERR_NO_RESOURCE) {
        req->send.lane = spriv->rts.lane;
        xfer->pending  = 1;
        return UCS_ERR_NO_RESOURCE;
    } else if (status != UCS_OK) {
        ucp_sppln_send_end(req, status);
        return UCS_OK;
    }

    ucp_proto_request_set_stage(req, UCP_PROTO_RNDV_SPPLN_STAGE_DATA);
    return ucp_sppln_send_data_progress(self);
}

static void ucp_sppln_send_abort(ucp_request_t *req, ucs_status_t status)
{
    ucp_sppln_xfer_t *xfer;

    if (!(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED)) {
        /* nothing started */
        ucp_proto_request_bcopy_abort(req, status);
        return;
    }

    /* the request leaves its endpoint's list of requests now, even when
     * copies or puts in flight complete it later: ucp_ep_reqs_purge()
     * aborts the list's head until the list is empty, and the failed peer
     * has nothing more to say to it */
    if (req->id != UCS_PTR_MAP_KEY_INVALID) {
        ucp_send_request_id_release(req);
    }

    /* a purged pending queue let go of the request already */
    xfer          = req->send.rndv.sppln_xfer;
    xfer->pending = 0;
    ucp_sppln_send_end(req, status);
}

int ucp_proto_sppln_ats(ucp_worker_h worker, const ucp_reply_hdr_t *rephdr)
{
    ucp_request_t *req;

    if (rephdr->req_id == UCS_PTR_MAP_KEY_INVALID) {
        return 0;
    }

    UCP_SEND_REQUEST_GET_BY_ID(&req, worker, rephdr->req_id, 0, return 0,
                               "ATS %p", rephdr);
    if (worker->sppln != NULL) {
        ucp_sppln_zcopy_timer_ats(worker->sppln, req, rephdr->status);
    }
    if (!ucp_sppln_send_is_ours(req) ||
        !(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) ||
        (req->send.rndv.sppln_xfer == NULL)) {
        return 0; /* UCX's rendezvous, our zcopy path included */
    }

    /* the receiver did not take the message (an active message the
     * application dropped, a receive buffer too small): UCX answered the
     * RTS for it, with the status a rendezvous sender completes with */
    ucs_debug("rndv/sppln req %p: the receiver did not take the message (%s)",
              req, ucs_status_string(rephdr->status));
    ucp_sppln_send_end(req, rephdr->status);
    return 1;
}

/*
 * The staged send that a peer's control message names, or NULL: the ids
 * come from the wire, and may name no request, one of another protocol or
 * endpoint, or our zcopy path (which takes UCX's own messages). An error
 * ACK may also name a transfer that ended well: every ACK owed came, and
 * the receiver failed one of the last chunks (a broken sender's) while or
 * after their puts completed. It is taken while the request still waits
 * for them, and is only a debug line once the send completed.
 */
static ucp_request_t *ucp_sppln_send_request(ucp_worker_h worker,
                                             uint64_t sreq_id, uint64_t ep_id,
                                             const char *what, int error_ack)
{
    ucp_request_t *req;

    if (sreq_id == UCS_PTR_MAP_KEY_INVALID) {
        goto err;
    }

    UCP_SEND_REQUEST_GET_BY_ID(&req, worker, sreq_id, 0, goto err, "SPPLN %s",
                               what);
    if (!ucp_sppln_send_is_ours(req) ||
        !(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) ||
        (req->send.rndv.sppln_xfer == NULL) ||
        (req->send.rndv.sppln_xfer->req != req) ||
        ((req->send.rndv.sppln_xfer->status != UCS_INPROGRESS) &&
         !(error_ack && (req->send.rndv.sppln_xfer->status == UCS_OK)))) {
        goto err;
    }

    /* the receiver names its endpoint by the id the RTS gave it */
    if (ucp_send_request_get_ep_remote_id(req) != ep_id) {
        ucs_error("rndv/sppln req %p: %s from endpoint 0x%" PRIx64 ", the "
                  "request's peer is 0x%" PRIx64,
                  req, what, ep_id, ucp_send_request_get_ep_remote_id(req));
        return NULL;
    }
    return req;

err:
    if (error_ack) {
        ucs_debug("rndv/sppln: error %s for request id 0x%" PRIx64 ", not a "
                  "staged send in progress (maybe one that completed)",
                  what, sreq_id);
        return NULL;
    }
    ucs_error("rndv/sppln: %s for request id 0x%" PRIx64 ", which is not a "
              "staged send in progress",
              what, sreq_id);
    return NULL;
}

int ucp_sppln_rkey_buf_valid(const void *buffer, size_t length)
{
    const uint8_t *p   = buffer;
    const uint8_t *end = p + length;
    ucp_md_map_t md_map;
    unsigned md_index;

    /* md map, memory type, then a size byte and a key per md of the map */
    if (length < (sizeof(md_map) + 1)) {
        return 0;
    }
    memcpy(&md_map, p, sizeof(md_map));
    p += sizeof(md_map) + 1;
    ucs_for_each_bit(md_index, md_map) {
        if ((md_index > UCP_MD_INDEX_BITS) || (p >= end) ||
            (*p > (size_t)(end - p - 1))) {
            return 0;
        }
        p += 1 + *p;
    }
    return 1;
}

static ucs_status_t
ucp_sppln_handle_rtr(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker            = arg;
    const ucp_sppln_rtr_hdr_t *rtr = data;
    const ucp_sppln_send_priv_t *spriv;
    ucp_md_index_t dst_md_index;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    ucp_request_t *req;

    if (length < sizeof(*rtr)) {
        ucs_error("rndv/sppln: dropped an RTR of %zu bytes, shorter than its "
                  "header (%zu)",
                  length, sizeof(*rtr));
        return UCS_OK;
    }

    req = ucp_sppln_send_request(worker, rtr->sreq_id, rtr->ep_id, "RTR", 0);
    if (req == NULL) {
        return UCS_OK;
    }
    xfer  = req->send.rndv.sppln_xfer;
    spriv = req->send.proto_config->priv;

    if (xfer->send.rtr) {
        ucs_error("rndv/sppln req %p: a second RTR from the peer", req);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    if ((rtr->rreq_id == UCS_PTR_MAP_KEY_INVALID) ||
        (rtr->rx_tag >> (UCP_SPPLN_RX_BITS + UCP_SPPLN_GEN_BITS)) ||
        !ucp_sppln_rkey_buf_valid(rtr + 1, length - sizeof(*rtr))) {
        ucs_error("rndv/sppln req %p: an RTR with request id 0x%" PRIx64
                  ", notify tag 0x%x and a %zu-byte rkey that does not "
                  "unpack",
                  req, rtr->rreq_id, rtr->rx_tag, length - sizeof(*rtr));
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    if (rtr->slot_size < worker->sppln->slot_size) {
        ucs_error("rndv/sppln: the peer's staging slots (%u bytes) are "
                  "smaller than ours (%zu); set the same "
                  "UCX_RNDV_SPPLN_SLOT_SIZE on both sides",
                  rtr->slot_size, worker->sppln->slot_size);
        status = UCS_ERR_UNSUPPORTED;
        goto err;
    }

    status = ucp_ep_rkey_unpack_reachable(req->send.ep, rtr + 1,
                                          length - sizeof(*rtr),
                                          &xfer->send.rkey);
    if (status != UCS_OK) {
        goto err;
    }

    dst_md_index =
            ucp_ep_config(req->send.ep)->key.lanes[spriv->rma_lane].dst_md_index;
    if (!(xfer->send.rkey->md_map & UCS_BIT(dst_md_index))) {
        ucs_error("rndv/sppln: the peer's staging rkey has no key for md %d",
                  dst_md_index);
        status = UCS_ERR_UNREACHABLE;
        goto err;
    }

    /* the receiver's slots follow one another: the last ends at 3 slots */
    xfer->send.tl_rkey = ucp_rkey_get_tl_rkey(
            xfer->send.rkey,
            ucs_bitmap2idx(xfer->send.rkey->md_map, dst_md_index));
    xfer->send.rreq_id     = rtr->rreq_id;
    xfer->send.remote_slot = rtr->slot_addr;
    xfer->send.rx_tag      = rtr->rx_tag;
    xfer->send.rtr         = 1;
    if (xfer->send.cached_check) {
        xfer->send.rtr_time = ucs_get_time();
    }
    ucp_trace_req(req, "rndv/sppln RTR: slots at 0x%" PRIx64 ", tag 0x%x",
                  rtr->slot_addr, rtr->rx_tag);
    ucp_sppln_send_kick(req);
    return UCS_OK;

err:
    ucp_sppln_send_end(req, status);
    return UCS_OK;
}

static ucs_status_t
ucp_sppln_handle_ack(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker            = arg;
    const ucp_sppln_ack_hdr_t *ack = data;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    ucp_request_t *req;

    if (length < sizeof(*ack)) {
        ucs_error("rndv/sppln: dropped an ACK of %zu bytes, shorter than its "
                  "header (%zu)",
                  length, sizeof(*ack));
        return UCS_OK;
    }

    req = ucp_sppln_send_request(worker, ack->sreq_id, ack->ep_id, "ACK",
                                 ack->status != UCS_OK);
    if (req == NULL) {
        return UCS_OK;
    }
    xfer = req->send.rndv.sppln_xfer;

    if (ack->status != UCS_OK) {
        /* the receiver gave up, and said why; its word also replaces the
         * end of a transfer that ended well while its last puts complete */
        status = (ack->status < 0) ? (ucs_status_t)ack->status :
                                     UCS_ERR_IO_ERROR;
        if (xfer->status == UCS_OK) {
            xfer->status = status;
        }
        ucp_sppln_send_end(req, status);
        return UCS_OK;
    }

    /* in order, only for a chunk whose puts were all posted, and only where
     * the slot it frees takes a later chunk */
    if (!xfer->send.rtr || (ack->chunk != xfer->send.acked) ||
        (xfer->send.acked >= xfer->send.next_put) ||
        (xfer->send.acked >= ucp_sppln_acks_owed(xfer->n_chunks))) {
        ucs_error("rndv/sppln req %p: the peer acknowledged chunk %u, "
                  "expected chunk %u (%u of %u sent)",
                  req, ack->chunk, xfer->send.acked, xfer->send.next_put,
                  xfer->n_chunks);
        ucp_sppln_send_end(req, UCS_ERR_IO_ERROR);
        return UCS_OK;
    }

    ++xfer->send.acked;
    ucp_sppln_send_kick(req);
    return UCS_OK;
}

static ucs_status_t
ucp_sppln_send_init(const ucp_proto_init_params_t *init_params, int am)
{
    ucp_worker_h worker              = init_params->worker;
    ucp_context_h context            = worker->context;
    const ucp_sppln_config_t *config = &context->config.sppln;
    const ucp_ep_config_key_t *key   = init_params->ep_config_key;
    ucp_sppln_send_priv_t *spriv     = init_params->priv;
    const ucp_proto_select_elem_t *select_elem;
    const uct_iface_attr_t *iface_attr;
    ucp_worker_cfg_index_t rkey_cfg_index;
    ucp_proto_select_param_t sel_param;
    ucp_proto_select_t *proto_select;
    const uct_md_attr_t *md_attr;
    ucp_rsc_index_t rsc_index;
    ucp_lane_index_t i, lane;
    size_t thresh, min_sub;
    ucs_status_t status;

    if ((config->enable == UCS_NO) ||
        (init_params->select_param->op_flags &
         UCP_PROTO_SELECT_OP_FLAG_NO_STAGING) ||
        (init_params->select_param->dt_class != UCP_DATATYPE_CONTIG) ||
        !UCP_MEM_IS_HOST(init_params->select_param->mem_type)) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* a lane for the staged data: put zero-copy, on an enabled transport */
    min_sub = (config->sub_size == UCS_MEMUNITS_AUTO) ? UCP_SPPLN_SUB_MIN :
                                                        config->sub_size;
    spriv->rma_lane = UCP_NULL_LANE;
    for (i = 0; (i < UCP_MAX_LANES) && (key->rma_bw_lanes[i] != UCP_NULL_LANE);
         ++i) {
        lane       = key->rma_bw_lanes[i];
        rsc_index  = key->lanes[lane].rsc_index;
        iface_attr = ucp_proto_common_get_iface_attr(init_params, lane);
        md_attr    = &context->tl_mds[key->lanes[lane].dst_md_index].attr;
        if ((rsc_index != UCP_NULL_RESOURCE) &&
            (iface_attr->cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) &&
            (iface_attr->cap.put.max_zcopy >= min_sub) &&
            (md_attr->cap.flags & UCT_MD_FLAG_NEED_RKEY) &&
            ucp_sppln_lane_tl_enabled(context, rsc_index)) {
            spriv->rma_lane = lane;
            break;
        }
    }

    if (spriv->rma_lane == UCP_NULL_LANE) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* the zcopy path: what UCX selects for the message without the staged
     * protocols, found as rndv/ppln finds its fragments' protocol */
    proto_select = ucp_proto_select_get(worker, init_params->ep_cfg_index,
                                        init_params->rkey_cfg_index,
                                        &rkey_cfg_index);
    if (proto_select == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    sel_param = *init_params->select_param;
    sel_param.op_flags |= UCP_PROTO_SELECT_OP_FLAG_NO_STAGING;
    select_elem = ucp_proto_select_lookup_slow(worker, proto_select,
                                               init_params->ep_cfg_index,
                                               init_params->rkey_cfg_index,
                                               &sel_param);
    if (select_elem == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    spriv->ucx = *select_elem;

    /* and for a small registered buffer, what UCX selects with no
     * rendezvous at all; not where the sender asked for a rendezvous
     * (UCP_AM_SEND_FLAG_RNDV), whose receiver expects one */
    spriv->eager_max = 0;
    if (sel_param.op_flags & UCP_PROTO_SELECT_OP_FLAG_AM_RNDV) {
        select_elem = NULL;
    } else {
        sel_param.op_flags |= UCP_PROTO_SELECT_OP_FLAG_NO_RNDV;
        select_elem = ucp_proto_select_lookup_slow(worker, proto_select,
                                                   init_params->ep_cfg_index,
                                                   init_params->rkey_cfg_index,
                                                   &sel_param);
    }
    if (select_elem != NULL) {
        spriv->eager = *select_elem;
    }

    /* UCX's RTS part: lane, rkey map, and its estimate for zcopy */
    status = ucp_proto_rndv_rts_init(init_params);
    if (status != UCS_OK) {
        return status;
    }

    rsc_index         = key->lanes[spriv->rma_lane].rsc_index;
    spriv->md_index   = ucp_proto_common_get_md_index(init_params,
                                                      spriv->rma_lane);
    spriv->put_notify = uct_iface_is_put_notify_supported(
            ucp_worker_iface(worker, rsc_index)->iface);
    spriv->am  = am;
    iface_attr = ucp_proto_common_get_iface_attr(init_params, spriv->rma_lane);
    ucp_sppln_lane_model_init(&spriv->lmodel, config,
                              context->tl_mds[spriv->md_index].rsc.md_name,
                              iface_attr->cap.put.max_zcopy);
    if (select_elem != NULL) {
        iface_attr       = ucp_proto_common_get_iface_attr(init_params,
                                                           spriv->rts.lane);
        spriv->eager_max = ucp_sppln_eager_max(
                &spriv->lmodel, (iface_attr->cap.am.max_zcopy != 0) ?
                                        iface_attr->cap.am.max_zcopy :
                                        iface_attr->cap.am.max_bcopy);
        /* a UCX_RNDV_THRESH the user set holds for these too */
        if (context->config.ext.rndv_thresh != UCS_MEMUNITS_AUTO) {
            spriv->eager_max =
                    ucs_min(spriv->eager_max,
                            ucs_max(context->config.ext.rndv_thresh, 1) - 1);
        }
    }

    /* from the smallest sub-block on, below which eager protocols, with no
     * round trip, stay, this protocol replaces UCX's rendezvous: it
     * includes it, as its zcopy path for buffers in the registration cache
     * or sent before, and a first send of a size whose copy the round trip
     * does not hide (below C_0) still costs less copied through staging
     * than registered on both sides. A UCX_RNDV_THRESH the user set says
     * where any rendezvous starts, this one too (inf: eager protocols
     * only). */
    if (config->thresh != UCS_MEMUNITS_AUTO) {
        thresh = config->thresh;
    } else if (context->config.ext.rndv_thresh != UCS_MEMUNITS_AUTO) {
        thresh = context->config.ext.rndv_thresh;
    } else if (spriv->lmodel.have_model) {
        thresh = ucs_min(UCP_SPPLN_SUB_MIN, config->slot_size);
    } else {
        thresh = config->slot_size;
    }

    init_params->caps->cfg_thresh   = thresh;
    init_params->caps->cfg_priority = UCP_PROTO_SPPLN_PRIORITY;
    init_params->caps->min_length   = ucs_max(init_params->caps->min_length, 1);
    ucp_sppln_perf(&spriv->lmodel, init_params->caps,
                   2 * spriv->lmodel.model.net_latency);
    *init_params->priv_size = sizeof(*spriv);
    return UCS_OK;
}

static ucs_status_t
ucp_sppln_tag_init(const ucp_proto_init_params_t *init_params)
{
    UCP_RMA_PROTO_INIT_CHECK(init_params, UCP_OP_ID_TAG_SEND);
    return ucp_sppln_send_init(init_params, 0);
}

static ucs_status_t
ucp_sppln_am_init(const ucp_proto_init_params_t *init_params)
{
    /* not where the sender asked for eager (UCP_AM_SEND_FLAG_EAGER) */
    if (!ucp_am_check_init_params(init_params, UCP_AM_OP_ID_MASK_ALL,
                                  UCP_PROTO_SELECT_OP_FLAG_AM_EAGER)) {
        return UCS_ERR_UNSUPPORTED;
    }
    return ucp_sppln_send_init(init_params, 1);
}

/* A size for the protocol table, short: "inf", "64K", "1.4M" */
static const char *ucp_sppln_size_str(size_t size, char *buf, size_t max)
{
    if (size == SIZE_MAX) {
        ucs_strncpy_zero(buf, "inf", max);
    } else if (size < UCS_KBYTE) {
        ucs_snprintf_safe(buf, max, "%zu", size);
    } else if (size < UCS_MBYTE) {
        ucs_snprintf_safe(buf, max, "%zuK", size / (size_t)UCS_KBYTE);
    } else {
        ucs_snprintf_safe(buf, max, "%.1fM", (double)size / UCS_MBYTE);
    }
    return buf;
}

static void ucp_sppln_send_query(const ucp_proto_query_params_t *params,
                                 ucp_proto_query_attr_t *attr)
{
    const ucp_sppln_send_priv_t *spriv = params->priv;
    const ucp_sppln_lane_model_t *lm   = &spriv->lmodel;
    ucp_context_h context              = params->worker->context;
    char sp[16], zc[16], c0[16], sub[16], eg[16], cs[16];
    ucp_rsc_index_t rsc_index;

    rsc_index = params->ep_config_key->lanes[spriv->rma_lane].rsc_index;
    attr->max_msg_length = SIZE_MAX;
    attr->is_estimation  = 0;
    /* the choice for a buffer neither cached nor sent before, by size */
    ucp_sppln_size_str(lm->have_model ? lm->derived.sp_thresh : 0, sp,
                       sizeof(sp));
    ucp_sppln_size_str(
            lm->have_model ?
                    lm->derived.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT] :
                    SIZE_MAX,
            zc, sizeof(zc));
    ucp_sppln_size_str(lm->c0, c0, sizeof(c0));
    ucp_sppln_size_str(lm->sub_size, sub, sizeof(sub));
    ucp_sppln_size_str(spriv->eager_max + 1, eg, sizeof(eg));
    ucp_sppln_size_str(lm->have_model ? lm->derived.cached_staged_thresh :
                                        SIZE_MAX,
                       cs, sizeof(cs));
    ucs_snprintf_safe(attr->desc, sizeof(attr->desc),
                      "cached: eager <%s< zcopy, else bcopy <%s< sppln <%s< "
                      "zcopy",
                      eg, sp, zc);
    /* the desc has no room for it: a cached buffer staged from cs */
    ucs_snprintf_safe(attr->config, sizeof(attr->config),
                      "%s/%s%s C0 %s q %.1f sub %s cached-sppln %s",
                      context->tl_rscs[rsc_index].tl_rsc.tl_name,
                      context->tl_rscs[rsc_index].tl_rsc.dev_name,
                      spriv->put_notify ? " put+notify" : " put,am", c0, lm->q,
                      sub, cs);
}

ucp_proto_t ucp_tag_rndv_sppln_proto = {
        .name  = "tag/rndv/sppln",
        .desc  = NULL,
        .flags = 0,
        .init  = ucp_sppln_tag_init,
        .query = ucp_sppln_send_query,
        .progress =
                {
                        [UCP_PROTO_RNDV_SPPLN_STAGE_RTS] =
                                ucp_sppln_send_rts_progress,
                        [UCP_PROTO_RNDV_SPPLN_STAGE_DATA] =
                                ucp_sppln_send_data_progress,
                },
        .abort = ucp_sppln_send_abort};

ucp_proto_t ucp_am_rndv_sppln_proto = {
        .name  = "am/rndv/sppln",
        .desc  = NULL,
        .flags = 0,
        .init  = ucp_sppln_am_init,
        .query = ucp_sppln_send_query,
        .progress =
                {
                        [UCP_PROTO_RNDV_SPPLN_STAGE_RTS] =
                                ucp_sppln_send_rts_progress,
                        [UCP_PROTO_RNDV_SPPLN_STAGE_DATA] =
                                ucp_sppln_send_data_progress,
                },
        .abort = ucp_sppln_send_abort};

UCP_DEFINE_AM(UCP_FEATURE_TAG | UCP_FEATURE_AM, UCP_AM_ID_RNDV_SPPLN_RTR,
              ucp_sppln_handle_rtr, NULL, 0);
UCP_DEFINE_AM(UCP_FEATURE_TAG | UCP_FEATURE_AM, UCP_AM_ID_RNDV_SPPLN_ACK,
              ucp_sppln_handle_ack, NULL, 0);
