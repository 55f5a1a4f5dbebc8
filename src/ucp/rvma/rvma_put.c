/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "rvma.h"

#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/proto/proto.h>
#include <ucp/proto/proto_select.h>
#include <ucp/wireup/wireup_ep.h>
#include <ucs/debug/log.h>


/*
 * The initiator. ucp_rvma_put_nbx() tries the fast path first (rvma_lease.c:
 * one write-with-immediate, the request completes with the target's ack).
 * Otherwise it sends one active message, and the request completes after two
 * events: the active message's local completion (the buffer may be reused)
 * and the target's reply (accepted or refused). The request is found again
 * by its UCP request id, which also puts it on the endpoint's list of
 * tracked requests: when the endpoint fails, UCP purges it through
 * ucp_rvma_put_abort(), so a dead peer completes it with an error instead of
 * leaving it pending.
 *
 * The request's send.state.uct_comp counts the events and holds the
 * first error.
 *
 * The header names the target's endpoint to the initiator, for the reply.
 * A put on an endpoint that does not know that id yet asks for it (a
 * wire-up round trip, as UCP does for its own reply messages), waits in
 * rw->deferred, and is sent from a progress callback once the id is there
 * and the lane connected.
 */

static void ucp_rvma_put_abort(ucp_request_t *req, ucs_status_t status);

static const ucp_proto_t ucp_rvma_put_proto = {
    .name  = "rvma/put",
    .desc  = "RVMA put (active message and reply)",
    .abort = ucp_rvma_put_abort
};

/* what UCP's endpoint purge looks at to abort the request (proto v2) */
static const ucp_proto_config_t ucp_rvma_put_proto_config = {
    .proto = &ucp_rvma_put_proto
};


static void ucp_rvma_put_complete(ucp_request_t *req)
{
    ucs_status_t status   = req->send.state.uct_comp.status;
    ucp_rvma_worker_t *rw = req->send.ep->worker->rvma;
    khiter_t iter;

    /* a reply that comes later is for no put */
    iter = kh_get(ucp_rvma_reply, &rw->replies, ucp_send_request_get_id(req));
    if (iter != kh_end(&rw->replies)) {
        kh_del(ucp_rvma_reply, &rw->replies, iter);
    }

    ucs_trace_req("rvma put request %p completed: %s", req,
                  ucs_status_string(status));
    ucp_send_request_id_release(req);
    ucp_request_complete_send(req, status);
}

static void ucp_rvma_put_abort(ucp_request_t *req, ucs_status_t status)
{
    ucs_debug("rvma put request %p aborted: %s", req,
              ucs_status_string(status));
    req->send.state.uct_comp.status = status;
    ucp_rvma_put_complete(req);
}

/* One of the events of a put (the active message path counts two, the send
 * and the reply; the fast path one, the ack); a failed send ends the
 * request at once, since no reply will come */
void ucp_rvma_put_event(ucp_worker_h worker, uint64_t req_id,
                               ucs_status_t status, int sent)
{
    ucp_request_t *req;

    UCP_SEND_REQUEST_GET_BY_ID(&req, worker, req_id, 0, return,
                               "RVMA put event %s",
                               ucs_status_string(status));

    if ((status != UCS_OK) && (req->send.state.uct_comp.status == UCS_OK)) {
        req->send.state.uct_comp.status = status;
    }

    if ((--req->send.state.uct_comp.count == 0) ||
        (sent && (status != UCS_OK))) {
        ucp_rvma_put_complete(req);
    }
}

static void ucp_rvma_put_sent(void *request, ucs_status_t status,
                              void *user_data)
{
    ucp_rvma_msg_t *msg = user_data;

    ucp_rvma_put_event(msg->put.rw->worker, msg->put.hdr.req_id, status, 1);
    ucs_mpool_put(msg);
    ucp_request_free(request);
}

ucs_status_t ucp_rvma_put_reply_handler(void *arg, const void *header,
                                        size_t header_length, void *data,
                                        size_t length,
                                        const ucp_am_recv_param_t *param)
{
    ucp_rvma_worker_t *rw           = arg;
    const ucp_rvma_reply_hdr_t *hdr = header;
    ucs_status_t status;
    khiter_t iter;
    int awaited;

    if (header_length != sizeof(*hdr)) {
        ucs_error("worker %p: malformed RVMA reply (header %zu bytes) dropped",
                  rw->worker, header_length);
        return UCS_OK;
    }

    /* only the reply of a put that awaits it, once: the request id alone
     * may name another request of UCP's, or a later put at the same
     * address */
    iter    = kh_get(ucp_rvma_reply, &rw->replies, hdr->req_id);
    awaited = (iter != kh_end(&rw->replies)) &&
              (kh_value(&rw->replies, iter) == hdr->seq);
    if (!awaited) {
        ucs_debug("worker %p: RVMA reply for no put awaiting one (request "
                  "0x%" PRIx64 ", put %" PRIu64 ") dropped",
                  rw->worker, hdr->req_id, hdr->seq);
        return UCS_OK;
    }
    kh_del(ucp_rvma_reply, &rw->replies, iter);

    status = (ucs_status_t)hdr->status;
    if (!ucp_rvma_peer_status_valid(hdr->status)) {
        ucs_error("worker %p: RVMA reply to put %" PRIu64 " has status %d, "
                  "which UCX does not define: the put fails",
                  rw->worker, hdr->seq, hdr->status);
        status = UCS_ERR_IO_ERROR;
    }

    ucp_rvma_put_event(rw->worker, hdr->req_id, status, 0);
    return UCS_OK;
}

/* Send the put's active message; on failure the request is completed with
 * the error (it is already tracked, so it cannot just be dropped) */
static void ucp_rvma_put_send(ucp_rvma_msg_t *msg)
{
    ucp_worker_h worker = msg->put.rw->worker;
    ucp_request_param_t am_param;
    ucs_status_ptr_t sreq;

    am_param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                            UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_FLAGS;
    am_param.flags        = 0;
    am_param.cb.send      = ucp_rvma_put_sent;
    am_param.user_data    = msg;
    msg->put.hdr.ep_id = ucp_ep_remote_id(msg->put.ep);
    sreq = ucp_am_send_nbx(msg->put.ep, msg->put.rw->am_id + UCP_RVMA_AM_PUT,
                           &msg->put.hdr, sizeof(msg->put.hdr),
                           msg->put.buffer, msg->put.length, &am_param);
    if (UCS_PTR_IS_PTR(sreq)) {
        return; /* ucp_rvma_put_sent() releases the send request */
    }

    if (UCS_PTR_IS_ERR(sreq)) {
        ucs_debug("rvma put to 0x%" PRIx64 " on ep %p failed: %s",
                  msg->put.hdr.vaddr, msg->put.ep,
                  ucs_status_string(UCS_PTR_STATUS(sreq)));
    }
    /* sent at once, or failed: the callback is not called */
    ucp_rvma_put_event(worker, msg->put.hdr.req_id, UCS_PTR_STATUS(sreq), 1);
    ucs_mpool_put(msg);
}

/* The peer's endpoint id is known (a reply active message carries it) and
 * the active message lane is connected, no longer a wire-up proxy; or the
 * endpoint failed and a send returns the error at once */
static int ucp_rvma_put_ep_ready(ucp_ep_h ep)
{
    return (ep->flags & UCP_EP_FLAG_FAILED) ||
           ((ep->flags & UCP_EP_FLAG_REMOTE_ID) &&
            (ep->am_lane != UCP_NULL_LANE) &&
            !ucp_wireup_ep_test(ucp_ep_get_am_uct_ep(ep)));
}

static unsigned ucp_rvma_put_deferred_progress(void *arg)
{
    ucp_rvma_worker_t *rw = arg;
    ucs_queue_iter_t iter;
    ucp_rvma_msg_t *msg;
    ucp_request_t *req;
    unsigned count = 0;

    ucs_queue_for_each_safe(msg, iter, &rw->deferred, put.queue) {
        /* an endpoint that failed meanwhile has aborted the request */
        if (ucp_send_request_get_by_id(rw->worker, msg->put.hdr.req_id, &req,
                                       0) != UCS_OK) {
            ucs_queue_del_iter(&rw->deferred, iter);
            ucs_mpool_put(msg);
            continue;
        }

        if (!ucp_rvma_put_ep_ready(msg->put.ep)) {
            continue;
        }

        ucs_queue_del_iter(&rw->deferred, iter);
        ucp_rvma_put_send(msg);
        ++count;
    }

    if (ucs_queue_is_empty(&rw->deferred)) {
        uct_worker_progress_unregister_safe(rw->worker->uct,
                                            &rw->deferred_cb_id);
    }

    return count;
}

void ucp_rvma_put_cleanup(ucp_rvma_worker_t *rw)
{
    uct_worker_progress_unregister_safe(rw->worker->uct, &rw->deferred_cb_id);
    while (!ucs_queue_is_empty(&rw->deferred)) {
        ucs_mpool_put(ucs_queue_pull_elem_non_empty(&rw->deferred,
                                                    ucp_rvma_msg_t,
                                                    put.queue));
    }
}

ucs_status_ptr_t ucp_rvma_put_nbx(ucp_ep_h ep, uint64_t vaddr, size_t offset,
                                  const void *buffer, size_t length,
                                  const ucp_request_param_t *param)
{
    ucp_worker_h worker = ep->worker;
    ucp_rvma_worker_t *rw;
    ucs_status_ptr_t ret;
    ucs_status_t status;
    ucp_rvma_msg_t *msg;
    ucp_request_t *req;
    khiter_t iter;
    int ready, kh_ret;

    if ((param->op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE) &&
        (param->datatype != ucp_dt_make_contig(1))) {
        ucs_error("RVMA put supports contiguous bytes only (datatype 0x%"
                  PRIx64 ")", param->datatype);
        return UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED);
    }

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);

    status = ucp_rvma_worker_get(worker, &rw);
    if (status != UCS_OK) {
        ret = UCS_STATUS_PTR(status);
        goto out;
    }

    req = ucp_request_get_param(worker, param, {
        ret = UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
        goto out;
    });

    /* tracked like a send of UCP's own: proto_config for proto v2's purge,
     * the flag and a contiguous, unregistered buffer for proto v1's */
    req->flags                          = UCP_REQUEST_FLAG_SEND_AM;
    req->send.ep                        = ep;
    req->send.buffer                    = (void*)buffer;
    req->send.length                    = length;
    req->send.datatype                  = ucp_dt_make_contig(1);
    req->send.state.dt.dt.contig.md_map = 0;
    req->send.proto_config              = &ucp_rvma_put_proto_config;
    req->send.state.uct_comp.func       = NULL;
    req->send.state.uct_comp.count      = 1;
    req->send.state.uct_comp.status     = UCS_OK;
    ucp_request_set_send_callback_param(param, req, send);
    ucp_send_request_id_alloc(req);
    ret   = req + 1;
    ready = ucp_rvma_put_ep_ready(ep) && ucs_queue_is_empty(&rw->deferred);

    if (ucs_likely(ready)) {
        status = ucp_rvma_fast_put(rw, ep, ucp_send_request_get_id(req), vaddr,
                                   offset, buffer, length);
        if (status == UCS_OK) {
            goto out; /* completes with the target's ack */
        } else if ((status != UCS_ERR_UNSUPPORTED) &&
                   (status != UCS_ERR_NO_RESOURCE)) {
            ucp_rvma_put_event(worker, ucp_send_request_get_id(req), status,
                               1);
            goto out;
        }
    }

    /* the active message path: local completion and reply */
    req->send.state.uct_comp.count = 2;
    msg = ucs_mpool_get(&rw->msg_mp);
    if (msg == NULL) {
        ucp_rvma_put_event(worker, ucp_send_request_get_id(req),
                           UCS_ERR_NO_MEMORY, 1);
        goto out;
    }

    msg->put.rw         = rw;
    msg->put.hdr.vaddr  = vaddr;
    msg->put.hdr.offset = offset;
    msg->put.hdr.req_id = ucp_send_request_get_id(req);
    msg->put.hdr.seq    = ++rw->put_seq;
    msg->put.ep         = ep;
    msg->put.buffer     = buffer;
    msg->put.length     = length;

    iter = kh_put(ucp_rvma_reply, &rw->replies, msg->put.hdr.req_id, &kh_ret);
    if (kh_ret == UCS_KH_PUT_FAILED) {
        ucp_rvma_put_event(worker, msg->put.hdr.req_id, UCS_ERR_NO_MEMORY, 1);
        ucs_mpool_put(msg);
        goto out;
    }
    kh_value(&rw->replies, iter) = msg->put.hdr.seq;

    ucs_trace_req("rvma put request %p: %zu bytes to 0x%" PRIx64 "+%zu on ep "
                  "%p", req, length, vaddr, offset, ep);

    if (ucs_likely(ready)) {
        ucp_rvma_put_send(msg);
        goto out;
    }

    /* ask the peer for its endpoint id (a wire-up round trip), as UCP would
     * on a reply send */
    status = ucp_ep_resolve_remote_id(ep, ep->am_lane);
    if (status != UCS_OK) {
        ucp_rvma_put_event(worker, msg->put.hdr.req_id, status, 1);
        ucs_mpool_put(msg);
    } else {
        /* keep the order of puts: once one waits, the later ones wait too */
        ucs_queue_push(&rw->deferred, &msg->put.queue);
        uct_worker_progress_register_safe(worker->uct,
                                          ucp_rvma_put_deferred_progress, rw,
                                          0, &rw->deferred_cb_id);
    }

out:
    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);
    return ret;
}
