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
#include <ucp/proto/proto_common.inl>
#include <ucp/rndv/proto_rndv.inl>
#include <ucp/tag/tag_rndv.h>
#include <ucp/am/ucp_am.inl>
#include <uct/api/v2/uct_v2.h>


/*
 * Sender side of rndv/sppln. Per message (first progress call):
 *  zcopy       - UCX's tag rendezvous (RTS with the registered buffer's rkey);
 *                if registration fails, fall back to sppln.
 *  sppln/bcopy - send an RTS flagged UCP_RNDV_RTS_FLAG_SPPLN carrying the
 *                chunk schedule, copy the first chunks into the local staging
 *                slots while it travels, then for each chunk i: wait until
 *                the receiver freed remote slot i % 3 (its ack of chunk i-3),
 *                put the chunk in sub-blocks, each notified to the receiver
 *                by the put itself (uct_ep_put_notify_zcopy) or by an active
 *                message sent after it on the same lane. The request
 *                completes when the receiver acknowledged the last chunk.
 */

extern ucp_proto_t ucp_tag_rndv_proto;
extern ucp_proto_t ucp_am_rndv_proto;
extern ucp_proto_t ucp_am_rndv_sppln_proto;
extern ucp_proto_t ucp_tag_rndv_sppln_proto;

static void ucp_sppln_send_done(ucp_sppln_xfer_t *xfer, ucs_status_t status)
{
    ucp_request_t *req = xfer->req;

    if (xfer->flags & UCP_SPPLN_XFER_FLAG_DONE) {
        return;
    }

    ucp_trace_req(req, "rndv/sppln send done: %s", ucs_status_string(status));
    xfer->flags |= UCP_SPPLN_XFER_FLAG_DONE;
    if (req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) {
        ucp_send_request_id_release(req);
    }
    ucp_datatype_iter_cleanup(&req->send.state.dt_iter, UCP_DT_MASK_ALL);
    ucp_request_complete_send(req, status);
    ucp_sppln_xfer_put(xfer);
}

static void ucp_sppln_slot_completed(uct_completion_t *comp)
{
    ucp_sppln_slot_t *slot = ucs_container_of(comp, ucp_sppln_slot_t, comp);
    ucp_sppln_xfer_t *xfer = slot->xfer;

    slot->filled = 0; /* the local slot can take the next chunk */
    if (ucs_unlikely(comp->status != UCS_OK)) {
        ucs_debug("rndv/sppln req %p: put of chunk %u failed: %s", xfer->req,
                  slot->chunk, ucs_status_string(comp->status));
        ucp_sppln_send_done(xfer, comp->status);
    } else {
        ucp_sppln_kick(xfer);
    }
    ucp_sppln_xfer_put(xfer);
}

static size_t ucp_sppln_rts_pack(void *dest, void *arg)
{
    ucp_sppln_xfer_t *xfer         = arg;
    ucp_request_t *req             = xfer->req;
    const ucp_sppln_priv_t *spriv  = req->send.proto_config->priv;
    ucp_rndv_rts_hdr_t *rts        = dest;
    ucp_sppln_rts_params_t *params = (void*)(rts + 1);
    size_t size;

    if (spriv->am) {
        ucp_am_fill_header(ucp_am_hdr_from_rts(rts), req);
        rts->opcode = UCP_RNDV_RTS_AM | UCP_RNDV_RTS_FLAG_SPPLN;
    } else {
        rts->opcode = UCP_RNDV_RTS_TAG_OK | UCP_RNDV_RTS_FLAG_SPPLN;
        ucp_tag_hdr_from_rts(rts)->tag = req->send.msg_proto.tag;
    }
    rts->sreq.req_id               = ucp_send_request_get_id(req);
    rts->sreq.ep_id                = ucp_send_request_get_ep_remote_id(req);
    rts->address                   = 0;
    rts->size                      = req->send.state.dt_iter.length;
    params->c0                     = xfer->sched.c0;
    params->q_1024 = (uint32_t)(xfer->sched.q * UCP_SPPLN_Q_WIRE_SCALE);
    params->slot_size              = xfer->worker->sppln->slot_size;
    params->sub_size               = xfer->sched.sub_size;
    params->path                   = xfer->path;
    size                           = sizeof(*rts) + sizeof(*params);
    if (spriv->am) {
        /* where UCX's AM RTS has it: after what stands for the rkey */
        ucp_am_pack_user_header(UCS_PTR_BYTE_OFFSET(rts, size), req);
        size += req->send.msg_proto.am.header_length;
    }
    return size;
}

/* Has the copy engine finished staging this slot? A finished copy drops
 * the transfer reference it held (never the last one: the caller holds
 * another); a failed one fails the send. */
static int ucp_sppln_copy_test(ucp_sppln_xfer_t *xfer, ucp_sppln_slot_t *slot)
{
    ucs_status_t status;

    if (!slot->copying) {
        return 1;
    }

    status = ucs_copy_req_test(&slot->copy);
    if (status == UCS_INPROGRESS) {
        return 0;
    }

    slot->copying = 0;
    if (status != UCS_OK) {
        ucs_debug("rndv/sppln req %p: staging chunk %u failed: %s", xfer->req,
                  slot->chunk, ucs_status_string(status));
        ucp_sppln_send_done(xfer, status);
    }
    ucp_sppln_xfer_put(xfer);
    return 1;
}

/* Progress callback while the copy engine stages chunks of a transfer:
 * a finished copy lets the sender put that chunk */
static unsigned ucp_sppln_copy_progress(void *arg)
{
    ucp_sppln_xfer_t *xfer = arg;
    unsigned s, copying = 0, done = 0;

    ++xfer->refcount; /* the copies' references may all go below */
    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        if (!xfer->slot[s].copying) {
            continue;
        }
        if (ucp_sppln_copy_test(xfer, &xfer->slot[s])) {
            ++done;
        } else {
            ++copying;
        }
    }

    if (copying == 0) {
        uct_worker_progress_unregister_safe(xfer->worker->uct,
                                            &xfer->copy_cb_id);
    }
    if (done > 0) {
        ucp_sppln_kick(xfer);
    }
    ucp_sppln_xfer_put(xfer);
    return done;
}

/* Copy chunks into the local slots that are free: by this thread, or posted
 * to the copy engine (UCX_HCR_SPPLN_COPY_ASYNC), which a full engine turns
 * back into a copy by this thread */
static void ucp_sppln_copy_ahead(ucp_sppln_xfer_t *xfer)
{
    ucp_sppln_worker_t *sw = xfer->worker->sppln;
    const void *buffer     = xfer->req->send.state.dt_iter.type.contig.buffer;
    ucp_sppln_slot_t *slot;
    ucs_status_t status;
    const void *src;
    size_t offset;
    unsigned s;
    void *dst;

    while (xfer->next_copy < xfer->sched.n_chunks) {
        s    = xfer->next_copy % UCP_SPPLN_NUM_SLOTS;
        slot = &xfer->slot[s];
        if (slot->filled != 0) {
            break; /* still holds a chunk being sent */
        }

        ucs_assert(!slot->copying);
        offset       = xfer->sched.offset[xfer->next_copy];
        slot->chunk  = xfer->next_copy;
        slot->filled = xfer->sched.offset[xfer->next_copy + 1] - offset;
        dst          = ucp_sppln_slot_ptr(sw, UCP_SPPLN_SIDE_SEND, xfer->group,
                                          s);
        src          = UCS_PTR_BYTE_OFFSET(buffer, offset);
        ++xfer->next_copy;

        if (xfer->copy_engine != NULL) {
            status = ucs_copy_engine_post(xfer->copy_engine, dst, src,
                                          slot->filled, &slot->copy);
            if (status == UCS_INPROGRESS) {
                slot->copying = 1;
                ++xfer->refcount;
                ++sw->stats.async_copies;
                uct_worker_progress_register_safe(xfer->worker->uct,
                                                  ucp_sppln_copy_progress,
                                                  xfer, 0, &xfer->copy_cb_id);
                continue;
            } else if (status == UCS_OK) {
                continue; /* the engine copied it inline */
            }
        }

        ucs_memcpy_relaxed(dst, src, slot->filled);
    }
}

static UCS_F_ALWAYS_INLINE uint32_t ucp_sppln_notify_data(
        ucp_sppln_xfer_t *xfer, unsigned slot, size_t offset_in_chunk)
{
    return ((uint32_t)xfer->remote_group <<
            (UCP_SPPLN_SLOT_BITS + UCP_SPPLN_SUB_BITS)) |
           (slot << UCP_SPPLN_SUB_BITS) |
           (uint32_t)(offset_in_chunk / xfer->sched.sub_size);
}

/* Notification after a put, on lanes without put-with-notify: an active
 * message on the same endpoint, which RC (and tcp) order after the put */
static ucs_status_t ucp_sppln_notify_am(ucp_sppln_xfer_t *xfer, uct_ep_h uct_ep,
                                        uint32_t notify_data, uint32_t length)
{
    uint64_t hdr = ((uint64_t)length << 32) | notify_data;

    return uct_ep_am_short(uct_ep, UCP_AM_ID_RNDV_SPPLN_DATA, hdr, NULL, 0);
}

/* Put the sub-blocks of chunk next_put, from put_offset on */
static ucs_status_t ucp_sppln_post_chunk(ucp_sppln_xfer_t *xfer,
                                         const ucp_sppln_priv_t *spriv)
{
    ucp_request_t *req     = xfer->req;
    ucp_sppln_worker_t *sw = xfer->worker->sppln;
    unsigned s             = xfer->next_put % UCP_SPPLN_NUM_SLOTS;
    ucp_sppln_slot_t *slot = &xfer->slot[s];
    uct_ep_h uct_ep        = req->send.ep->uct_eps[xfer->rma_lane];
    size_t size, length, advance, offset;
    uint32_t notify_data;
    ucs_status_t status;
    uct_iov_t iov;

    size = xfer->sched.offset[xfer->next_put + 1] -
           xfer->sched.offset[xfer->next_put];

    if (slot->comp.count == 0) {
        /* first visit of this chunk (not a retry after NO_RESOURCE): guard
         * the completion until all sub-blocks are posted, and hold the
         * transfer until it fires */
        slot->comp.count  = 1;
        slot->comp.status = UCS_OK;
        ++xfer->refcount;
    }

    while (xfer->put_offset < size) {
        length  = ucs_min(xfer->sched.sub_size, size - xfer->put_offset);
        advance = length;
        offset  = xfer->put_offset;
        if (ucs_unlikely(ucp_sppln_faults != 0) &&
            (xfer->next_put + 1 == xfer->sched.n_chunks)) {
            /* test only, in the last chunk: its second sub-block replaced
             * by the first again, or its last one a byte short */
            if ((offset == xfer->sched.sub_size) &&
                (length == xfer->sched.sub_size) &&
                ucp_sppln_fault_take(UCP_SPPLN_FAULT_DUP_SUB)) {
                offset = 0;
            } else if ((offset + length == size) && (length > 1) &&
                       ucp_sppln_fault_take(UCP_SPPLN_FAULT_SHORT_SUB)) {
                --length;
            }
        }
        notify_data = ucp_sppln_notify_data(xfer, s, offset);

        if (xfer->flags & UCP_SPPLN_XFER_FLAG_NOTIFY) {
            /* the put went out, its notification did not */
            status = ucp_sppln_notify_am(xfer, uct_ep, notify_data, length);
            if (status != UCS_OK) {
                goto out;
            }
            xfer->flags &= ~UCP_SPPLN_XFER_FLAG_NOTIFY;
            xfer->put_offset += advance;
            continue;
        }

        iov.buffer = UCS_PTR_BYTE_OFFSET(ucp_sppln_slot_ptr(sw,
                                                            UCP_SPPLN_SIDE_SEND,
                                                            xfer->group, s),
                                         offset);
        iov.length = length;
        iov.memh   = ucp_sppln_slot_memh(sw, UCP_SPPLN_SIDE_SEND,
                                         spriv->md_index);
        iov.stride = 0;
        iov.count  = 1;

        ++slot->comp.count;
        if (spriv->put_notify) {
            status = uct_ep_put_notify_zcopy(uct_ep, &iov, 1,
                                             xfer->remote_slot[s] + offset,
                                             xfer->tl_rkey,
                                             UCP_AM_ID_RNDV_SPPLN_DATA,
                                             notify_data, &slot->comp);
        } else {
            status = uct_ep_put_zcopy(uct_ep, &iov, 1,
                                      xfer->remote_slot[s] + offset,
                                      xfer->tl_rkey, &slot->comp);
        }

        if (status != UCS_INPROGRESS) {
            --slot->comp.count;
            if (status != UCS_OK) {
                goto out;
            }
        }

        if (!spriv->put_notify) {
            status = ucp_sppln_notify_am(xfer, uct_ep, notify_data, length);
            if (status != UCS_OK) {
                xfer->flags |= UCP_SPPLN_XFER_FLAG_NOTIFY;
                goto out;
            }
        }
        xfer->put_offset += advance;
    }

    /* chunk posted: drop the guard */
    ++xfer->next_put;
    xfer->put_offset = 0;
    ucp_invoke_uct_completion(&slot->comp, UCS_OK);
    return UCS_OK;

out:
    if (status == UCS_ERR_NO_RESOURCE) {
        req->send.lane = xfer->rma_lane;
        xfer->flags   |= UCP_SPPLN_XFER_FLAG_PENDING;
    }
    return status;
}

static ucs_status_t ucp_sppln_xfer_create(ucp_request_t *req,
                                          ucp_sppln_worker_t *sw,
                                          ucp_sppln_path_t path)
{
    const ucp_sppln_priv_t *spriv = req->send.proto_config->priv;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    unsigned s;

    xfer = ucs_calloc(1, sizeof(*xfer), "sppln_xfer");
    if (xfer == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = ucp_sppln_sched_init(&xfer->sched, req->send.state.dt_iter.length,
                                  path, ucp_sppln_first_chunk(spriv,
                                          req->send.state.dt_iter.length),
                                  spriv->q, sw->slot_size, spriv->sub_size);
    if (status != UCS_OK) {
        ucs_free(xfer);
        return status;
    }

    xfer->req      = req;
    xfer->worker   = req->send.ep->worker;
    xfer->side     = UCP_SPPLN_SIDE_SEND;
    xfer->path     = path;
    xfer->group    = -1;
    xfer->refcount = 1;
    xfer->am_lane  = spriv->rts.lane;
    xfer->rma_lane = spriv->rma_lane;
    xfer->copy_cb_id = UCS_CALLBACKQ_ID_NULL;
    xfer->copy_engine = ucp_sppln_copy_engine(sw, spriv);
    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        xfer->slot[s].xfer      = xfer;
        xfer->slot[s].comp.func = ucp_sppln_slot_completed;
    }

    req->send.rndv.sppln_xfer = xfer;
    ++sw->stats.sent[path];
    ucs_debug("rndv/sppln req %p: %zu bytes path %s, %u chunks from %zu "
              "q %.2f", req, xfer->sched.length, ucp_sppln_path_names[path],
              xfer->sched.n_chunks, xfer->sched.c0, xfer->sched.q);
    return UCS_OK;
}

/* First call: choose the path of this message */
static ucs_status_t ucp_sppln_request_init(ucp_request_t *req)
{
    const ucp_sppln_priv_t *spriv = req->send.proto_config->priv;
    ucp_worker_h worker           = req->send.ep->worker;
    size_t length                 = req->send.state.dt_iter.length;
    ucp_sppln_worker_t *sw;
    ucp_sppln_path_t path;
    ucs_status_t status;

    /* the staging regions, and the table of buffers staged before */
    status = ucp_sppln_worker_get(worker, &sw);
    if (status != UCS_OK) {
        return status;
    }

    path = ucp_sppln_choose(worker, sw, spriv,
                            req->send.state.dt_iter.type.contig.buffer, length);
    if (path == UCP_SPPLN_PATH_ZCOPY) {
        req->send.rndv.sppln_xfer = NULL;
        status = ucp_proto_rndv_rts_request_init(req);
        if (status == UCS_OK) {
            ++sw->stats.sent[UCP_SPPLN_PATH_ZCOPY];
            ucs_debug("rndv/sppln req %p: %zu bytes path zcopy", req, length);
            req->send.uct.func = spriv->am ?
                                 ucp_am_rndv_proto.progress[0] :
                                 ucp_tag_rndv_proto.progress[0];
            return UCS_OK;
        }

        /* e.g. RLIMIT_MEMLOCK: the staging buffers are registered already */
        ucs_debug("rndv/sppln req %p: registering %zu bytes failed (%s), "
                  "sending through the superpipeline", req, length,
                  ucs_status_string(status));
        ++sw->stats.reg_fallback;
        path = UCP_SPPLN_PATH_SPPLN;
    }

    status = ucp_ep_resolve_remote_id(req->send.ep, spriv->rts.lane);
    if (status != UCS_OK) {
        return status;
    }

    status = ucp_sppln_xfer_create(req, sw, path);
    if (status != UCS_OK) {
        return status;
    }

    ucp_send_request_id_alloc(req);
    req->flags |= UCP_REQUEST_FLAG_PROTO_INITIALIZED;
    return UCS_OK;
}

ucs_status_t ucp_sppln_send_progress(uct_pending_req_t *self)
{
    ucp_request_t *req = ucs_container_of(self, ucp_request_t, send.uct);
    const ucp_sppln_priv_t *spriv;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    int group, staged, failed;

    if (!(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED)) {
        status = ucp_sppln_request_init(req);
        if (status != UCS_OK) {
            ucp_proto_request_abort(req, status);
            return UCS_OK;
        }
        if (req->send.rndv.sppln_xfer == NULL) {
            return req->send.uct.func(self); /* zcopy: UCX's rendezvous */
        }
    }

    spriv        = req->send.proto_config->priv;
    xfer         = req->send.rndv.sppln_xfer;
    xfer->flags &= ~UCP_SPPLN_XFER_FLAG_PENDING;
    if (xfer->flags & UCP_SPPLN_XFER_FLAG_DONE) {
        return UCS_OK;
    }

    if (xfer->group < 0) {
        group = ucp_sppln_group_get(xfer->worker->sppln, UCP_SPPLN_SIDE_SEND);
        if (group < 0) {
            ucp_sppln_wait_group(xfer->worker->sppln, xfer);
            return UCS_OK;
        }
        xfer->group = group;
    }

    if (!(xfer->flags & UCP_SPPLN_XFER_FLAG_RTS_SENT)) {
        status = ucp_sppln_send_ctrl(xfer, xfer->am_lane, UCP_AM_ID_RNDV_RTS,
                                     ucp_sppln_rts_pack);
        if (status != UCS_OK) {
            goto out;
        }
        xfer->flags |= UCP_SPPLN_XFER_FLAG_RTS_SENT;
    }

    /* the first copies overlap the RTS/RTR round trip */
    ucp_sppln_copy_ahead(xfer);
    if (!(xfer->flags & UCP_SPPLN_XFER_FLAG_RTR)) {
        return UCS_OK;
    }

    while ((xfer->next_put < xfer->sched.n_chunks) &&
           (xfer->next_put < (xfer->acked + UCP_SPPLN_NUM_SLOTS))) {
        if (xfer->next_put >= xfer->next_copy) {
            ucp_sppln_copy_ahead(xfer);
            if (xfer->next_put >= xfer->next_copy) {
                break; /* local slot still being sent */
            }
        }

        /* a failed staging copy ends the send, and may free the transfer
         * when its reference goes: hold one across the test */
        ++xfer->refcount;
        staged = ucp_sppln_copy_test(xfer, &xfer->slot[xfer->next_put %
                                                       UCP_SPPLN_NUM_SLOTS]);
        failed = !!(xfer->flags & UCP_SPPLN_XFER_FLAG_DONE);
        ucp_sppln_xfer_put(xfer);
        if (failed) {
            return UCS_OK;
        } else if (!staged) {
            break; /* still being staged: ucp_sppln_copy_progress() kicks */
        }

        status = ucp_sppln_post_chunk(xfer, spriv);
        if (status != UCS_OK) {
            goto out;
        }
    }

    ucp_sppln_copy_ahead(xfer);
    return UCS_OK;

out:
    if (status == UCS_ERR_NO_RESOURCE) {
        return status;
    }
    ucp_sppln_send_done(xfer, status);
    return UCS_OK;
}

static void ucp_sppln_send_abort(ucp_request_t *req, ucs_status_t status)
{
    ucp_sppln_xfer_t *xfer;

    if (!(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) ||
        (req->send.rndv.sppln_xfer == NULL)) {
        ucp_proto_rndv_rts_abort(req, status);
        return;
    }

    xfer = req->send.rndv.sppln_xfer;
    ucp_sppln_send_done(xfer, status);
}

int ucp_proto_sppln_ats(ucp_worker_h worker, const ucp_reply_hdr_t *rephdr)
{
    ucp_request_t *req;

    UCP_SEND_REQUEST_GET_BY_ID(&req, worker, rephdr->req_id, 0, return 0,
                               "ATS %p", rephdr);
    if ((req->send.proto_config->proto != &ucp_am_rndv_sppln_proto) ||
        (req->send.rndv.sppln_xfer == NULL)) {
        return 0; /* UCX's rendezvous, our zcopy path included */
    }

    /* the receiver's application did not take the message, and UCX
     * answered the RTS for it */
    ucs_debug("rndv/sppln req %p: the receiver dropped the message (%s)",
              req, ucs_status_string(rephdr->status));
    ucp_sppln_send_done(req->send.rndv.sppln_xfer, rephdr->status);
    return 1;
}

/* The staged send that a peer's control message names, or NULL: the id
 * comes from the wire, and may name no request, or one of another
 * protocol, or our zcopy path (which takes UCX's own RTR) */
static ucp_sppln_xfer_t *
ucp_sppln_send_xfer(ucp_worker_h worker, uint64_t sreq_id, const char *what)
{
    ucp_sppln_xfer_t *xfer;
    ucp_request_t *req;

    UCP_SEND_REQUEST_GET_BY_ID(&req, worker, sreq_id, 0, return NULL,
                               "SPPLN %s", what);
    if (((req->send.proto_config->proto != &ucp_tag_rndv_sppln_proto) &&
         (req->send.proto_config->proto != &ucp_am_rndv_sppln_proto)) ||
        !(req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) ||
        ((xfer = req->send.rndv.sppln_xfer) == NULL) || (xfer->req != req) ||
        (xfer->flags & UCP_SPPLN_XFER_FLAG_DONE)) {
        ucs_error("rndv/sppln: %s for request id 0x%" PRIx64 ", which is "
                  "not a staged send",
                  what, sreq_id);
        return NULL;
    }
    return xfer;
}

static ucs_status_t
ucp_sppln_handle_rtr(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker            = arg;
    const ucp_sppln_rtr_hdr_t *rtr = data;
    const ucp_sppln_priv_t *spriv;
    ucp_md_index_t dst_md_index;
    ucp_sppln_xfer_t *xfer;
    ucs_status_t status;
    ucp_request_t *req;
    unsigned s;

    if (length < sizeof(*rtr)) {
        ucs_error("rndv/sppln: dropped an RTR of %zu bytes, shorter than "
                  "its header (%zu)",
                  length, sizeof(*rtr));
        return UCS_OK;
    }

    xfer = ucp_sppln_send_xfer(worker, rtr->sreq_id, "RTR");
    if (xfer == NULL) {
        return UCS_OK;
    }
    req   = xfer->req;
    spriv = req->send.proto_config->priv;

    if (xfer->flags & UCP_SPPLN_XFER_FLAG_RTR) {
        ucs_error("rndv/sppln req %p: a second RTR from the peer", req);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    if ((rtr->group >= UCP_SPPLN_MAX_GROUPS) ||
        !ucp_sppln_rkey_buf_valid(rtr + 1, length - sizeof(*rtr))) {
        ucs_error("rndv/sppln req %p: an RTR with group %u and a %zu-byte "
                  "rkey that does not unpack",
                  req, rtr->group, length - sizeof(*rtr));
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    if (rtr->slot_size < xfer->worker->sppln->slot_size) {
        ucs_error("rndv/sppln: the peer's staging slots (%u bytes) are "
                  "smaller than ours (%zu); set the same "
                  "UCX_HCR_SPPLN_SLOT_SIZE on both sides", rtr->slot_size,
                  xfer->worker->sppln->slot_size);
        status = UCS_ERR_UNSUPPORTED;
        goto err;
    }

    status = ucp_ep_rkey_unpack_reachable(req->send.ep, rtr + 1,
                                          length - sizeof(*rtr), &xfer->rkey);
    if (status != UCS_OK) {
        goto err;
    }

    dst_md_index = ucp_ep_config(req->send.ep)->key.lanes[xfer->rma_lane]
                           .dst_md_index;
    if (!(xfer->rkey->md_map & UCS_BIT(dst_md_index))) {
        ucs_error("rndv/sppln: the peer's staging rkey has no key for md %d",
                  dst_md_index);
        status = UCS_ERR_UNREACHABLE;
        goto err;
    }

    xfer->tl_rkey      = ucp_rkey_get_tl_rkey(xfer->rkey,
                                              ucs_bitmap2idx(xfer->rkey->md_map,
                                                             dst_md_index));
    xfer->remote_id    = rtr->rreq_id;
    xfer->remote_group = rtr->group;
    for (s = 0; s < UCP_SPPLN_NUM_SLOTS; ++s) {
        xfer->remote_slot[s] = rtr->slot_addr[s];
    }
    xfer->flags |= UCP_SPPLN_XFER_FLAG_RTR;
    ucp_trace_req(req, "rndv/sppln RTR: group %u, md %d", rtr->group,
                  spriv->md_index);
    ucp_sppln_kick(xfer);
    return UCS_OK;

err:
    ucp_sppln_send_done(xfer, status);
    return UCS_OK;
}

static ucs_status_t
ucp_sppln_handle_ack(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker            = arg;
    const ucp_sppln_ack_hdr_t *ack = data;
    ucp_sppln_xfer_t *xfer;

    if (length < sizeof(*ack)) {
        ucs_error("rndv/sppln: dropped an ACK of %zu bytes, shorter than "
                  "its header (%zu)",
                  length, sizeof(*ack));
        return UCS_OK;
    }

    xfer = ucp_sppln_send_xfer(worker, ack->sreq_id, "ACK");
    if (xfer == NULL) {
        return UCS_OK;
    }

    if (ack->status == UCS_ERR_MESSAGE_TRUNCATED) {
        /* the receive buffer was too small: the receive fails, the send
         * is done, as with UCX's rendezvous */
        ucp_sppln_send_done(xfer, UCS_OK);
        return UCS_OK;
    } else if (ack->status != UCS_OK) {
        ucp_sppln_send_done(xfer, (ucs_status_t)ack->status);
        return UCS_OK;
    }

    /* in order, and only for a chunk whose puts were all posted: the slot
     * it frees takes the next chunk */
    if ((ack->chunk != xfer->acked) || (xfer->acked >= xfer->next_put)) {
        ucs_error("rndv/sppln req %p: the peer acknowledged chunk %u, "
                  "expected chunk %u (%u of %u sent)",
                  xfer->req, ack->chunk, xfer->acked, xfer->next_put,
                  xfer->sched.n_chunks);
        ucp_sppln_send_done(xfer, UCS_ERR_IO_ERROR);
        return UCS_OK;
    }
    if (++xfer->acked == xfer->sched.n_chunks) {
        ucp_sppln_send_done(xfer, UCS_OK);
    } else {
        ucp_sppln_kick(xfer);
    }
    return UCS_OK;
}

static ucs_status_t
ucp_sppln_init(const ucp_proto_init_params_t *init_params, int am)
{
    const ucp_sppln_config_t *cfg  = ucp_sppln_config();
    ucp_worker_h worker            = init_params->worker;
    ucp_context_h context          = worker->context;
    const ucp_ep_config_key_t *key = init_params->ep_config_key;
    ucp_sppln_priv_t *spriv        = init_params->priv;
    const uct_iface_attr_t *iface_attr;
    const uct_md_attr_t *md_attr;
    ucp_rsc_index_t rsc_index;
    ucp_lane_index_t i, lane;
    ucs_status_t status;
    size_t thresh;

    if ((cfg == NULL) || (cfg->enable == UCS_NO) ||
        (init_params->select_param->dt_class != UCP_DATATYPE_CONTIG) ||
        !UCP_MEM_IS_HOST(init_params->select_param->mem_type)) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* a lane for the staged data: put zero-copy, on an enabled transport */
    spriv->rma_lane = UCP_NULL_LANE;
    for (i = 0; (i < UCP_MAX_LANES) && (key->rma_bw_lanes[i] != UCP_NULL_LANE);
         ++i) {
        lane       = key->rma_bw_lanes[i];
        rsc_index  = key->lanes[lane].rsc_index;
        iface_attr = ucp_proto_common_get_iface_attr(init_params, lane);
        md_attr    = &context->tl_mds[key->lanes[lane].dst_md_index].attr;
        if ((rsc_index != UCP_NULL_RESOURCE) &&
            (iface_attr->cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) &&
            (iface_attr->cap.put.max_zcopy >=
             ((cfg->sub_size == UCS_MEMUNITS_AUTO) ? UCP_SPPLN_SUB_MIN :
                                                     cfg->sub_size)) &&
            (md_attr->cap.flags & UCT_MD_FLAG_NEED_RKEY) &&
            ucp_sppln_lane_tl_enabled(context, rsc_index)) {
            spriv->rma_lane = lane;
            break;
        }
    }

    if (spriv->rma_lane == UCP_NULL_LANE) {
        return UCS_ERR_UNSUPPORTED;
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
    iface_attr        = ucp_proto_common_get_iface_attr(init_params,
                                                        spriv->rma_lane);
    ucp_sppln_priv_model(spriv, context->tl_mds[spriv->md_index].rsc.md_name,
                         iface_attr->cap.put.max_zcopy);

    /* from the measured size on, this protocol replaces UCX's rendezvous:
     * it includes it, as its zcopy path for buffers in the registration
     * cache or sent before. That size is C_0, the bytes copied during a
     * rendezvous round trip: from there on a staged first send hides its
     * first copy in the round trip a rendezvous costs anyway; but no less
     * than the smallest sub-block, below which eager protocols, with no
     * round trip, stay. */
    if (cfg->thresh != UCS_MEMUNITS_AUTO) {
        thresh = cfg->thresh;
    } else if (spriv->have_model) {
        thresh = ucs_max(spriv->derived.sp_c0, UCP_SPPLN_SUB_MIN);
        thresh = ucs_min(thresh, cfg->slot_size);
    } else {
        thresh = cfg->slot_size;
    }

    init_params->caps->cfg_thresh   = thresh;
    init_params->caps->cfg_priority = 61;
    init_params->caps->min_length   = ucs_max(init_params->caps->min_length,
                                              1);
    ucp_sppln_perf(spriv, init_params->caps, 2 * spriv->model.net_latency);
    spriv->am               = am;
    *init_params->priv_size = sizeof(*spriv);
    return UCS_OK;
}

static ucs_status_t
ucp_sppln_tag_init(const ucp_proto_init_params_t *init_params)
{
    UCP_RMA_PROTO_INIT_CHECK(init_params, UCP_OP_ID_TAG_SEND);
    return ucp_sppln_init(init_params, 0);
}

static ucs_status_t
ucp_sppln_am_init(const ucp_proto_init_params_t *init_params)
{
    /* not where the sender asked for eager (UCP_AM_SEND_FLAG_EAGER) */
    if (!ucp_am_check_init_params(init_params, UCP_AM_OP_ID_MASK_ALL,
                                  UCP_PROTO_SELECT_OP_FLAG_AM_EAGER)) {
        return UCS_ERR_UNSUPPORTED;
    }
    return ucp_sppln_init(init_params, 1);
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

static void ucp_sppln_query(const ucp_proto_query_params_t *params,
                            ucp_proto_query_attr_t *attr)
{
    const ucp_sppln_priv_t *spriv = params->priv;
    ucp_context_h context         = params->worker->context;
    char sp[16], zc[16], c0[16], sub[16];
    ucp_rsc_index_t rsc_index;

    rsc_index = params->ep_config_key->lanes[spriv->rma_lane].rsc_index;
    attr->max_msg_length = SIZE_MAX;
    attr->is_estimation  = 0;
    /* the choice for a buffer neither cached nor sent before, by size */
    ucp_sppln_size_str(spriv->have_model ? spriv->derived.sp_thresh : 0, sp,
                       sizeof(sp));
    ucp_sppln_size_str(spriv->have_model ?
                       spriv->derived.zcopy_thresh[
                               UCS_CALIB_PAGES_NONRESIDENT] :
                       SIZE_MAX, zc, sizeof(zc));
    ucp_sppln_size_str(spriv->c0, c0, sizeof(c0));
    ucp_sppln_size_str(spriv->sub_size, sub, sizeof(sub));
    ucs_snprintf_safe(attr->desc, sizeof(attr->desc),
                      "cached: zcopy, else bcopy <%s< sppln <%s< zcopy", sp,
                      zc);
    ucs_snprintf_safe(attr->config, sizeof(attr->config),
                      "%s/%s%s C0 %s q %.1f sub %s",
                      context->tl_rscs[rsc_index].tl_rsc.tl_name,
                      context->tl_rscs[rsc_index].tl_rsc.dev_name,
                      spriv->put_notify ? " put+notify" : " put,am", c0,
                      spriv->q, sub);
}

ucp_proto_t ucp_tag_rndv_sppln_proto = {
    .name     = "tag/rndv/sppln",
    .desc     = NULL,
    .flags    = 0,
    .init     = ucp_sppln_tag_init,
    .query    = ucp_sppln_query,
    .progress = {ucp_sppln_send_progress},
    .abort    = ucp_sppln_send_abort
};

ucp_proto_t ucp_am_rndv_sppln_proto = {
    .name     = "am/rndv/sppln",
    .desc     = NULL,
    .flags    = 0,
    .init     = ucp_sppln_am_init,
    .query    = ucp_sppln_query,
    .progress = {ucp_sppln_send_progress},
    .abort    = ucp_sppln_send_abort
};

UCP_DEFINE_AM(UCP_FEATURE_TAG | UCP_FEATURE_AM, UCP_AM_ID_RNDV_SPPLN_RTR,
              ucp_sppln_handle_rtr, NULL, 0);
UCP_DEFINE_AM(UCP_FEATURE_TAG | UCP_FEATURE_AM, UCP_AM_ID_RNDV_SPPLN_ACK,
              ucp_sppln_handle_ack, NULL, 0);
