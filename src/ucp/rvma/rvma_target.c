/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "rvma.h"

#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_worker.inl>
#include <ucs/debug/log.h>


/*
 * A put arriving at the target. The window decides at arrival whether the
 * put fits and which buffer it goes to (rvma_win.c); an eager put is copied
 * into that buffer from the receive descriptor, a rendezvous put is fetched
 * by UCP straight into it. Either way the initiator gets one reply with the
 * verdict, sent after the data is placed. The fast path (rvma_fast.c) places
 * its records with ucp_rvma_target_place() too, or reads them
 * (rvma_read.c), and acknowledges them in batches instead.
 */

/* Test only: break the reply as ucp_rvma_faults says */
static void ucp_rvma_target_reply_fault(ucp_rvma_worker_t *rw,
                                        ucp_ep_h reply_ep,
                                        ucp_rvma_reply_hdr_t *reply)
{
    ucp_rvma_reply_hdr_t other = *reply;

    if (ucp_rvma_faults & UCP_RVMA_FAULT_REPLY_UNKNOWN_REQ) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_REPLY_UNKNOWN_REQ;
        other.req_id += 64; /* inside the request, if it is its address */
        (void)ucp_rvma_worker_send_ctl(rw, reply_ep, UCP_RVMA_AM_REPLY, &other,
                                       sizeof(other), NULL, 0);
    }

    if (ucp_rvma_faults & UCP_RVMA_FAULT_REPLY_STATUS) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_REPLY_STATUS;
        reply->status = UCS_INPROGRESS;
    }
}

static void ucp_rvma_target_reply(ucp_rvma_worker_t *rw, ucp_ep_h reply_ep,
                                  uint64_t req_id, uint64_t seq,
                                  ucs_status_t status)
{
    ucp_rvma_reply_hdr_t reply;
    ucs_status_t ret;

    reply.req_id = req_id;
    reply.seq    = seq;
    reply.status = status;
    if (ucs_unlikely(ucp_rvma_faults & (UCP_RVMA_FAULT_REPLY_STATUS |
                                        UCP_RVMA_FAULT_REPLY_UNKNOWN_REQ))) {
        ucp_rvma_target_reply_fault(rw, reply_ep, &reply);
    }
    ret = ucp_rvma_worker_send_ctl(rw, reply_ep, UCP_RVMA_AM_REPLY, &reply,
                                   sizeof(reply), NULL, 0);
    if (UCS_STATUS_IS_ERR(ret)) {
        /* the initiator is gone, or no memory: nobody gets the reply */
        ucs_debug("worker %p: RVMA reply to ep %p failed: %s", rw->worker,
                  reply_ep, ucs_status_string(ret));
    }
}

static void ucp_rvma_fetch_done(void *request, ucs_status_t status,
                                size_t length, void *user_data)
{
    ucp_rvma_msg_t *msg   = user_data;
    ucp_rvma_win_h win    = msg->fetch.win;
    ucp_rvma_worker_t *rw = win->rw;

    ucp_rvma_win_placed(win, msg->fetch.buf, msg->fetch.length, status);
    if (status == UCS_OK) {
        ucp_rvma_target_reply(rw, msg->fetch.reply_ep, msg->fetch.req_id,
                              msg->fetch.seq, UCS_OK);
    }

    if ((--win->refcount == 0) && win->destroyed) {
        ucp_rvma_win_free(win);
    }
    ucs_mpool_put(msg);
    if (request != NULL) {
        ucp_request_free(request);
    }
}

static ucs_status_t
ucp_rvma_target_fetch(ucp_rvma_worker_t *rw, ucp_rvma_win_h win,
                      ucp_rvma_buf_t *buf, const ucp_rvma_put_hdr_t *hdr,
                      void *data, size_t length, ucp_ep_h reply_ep)
{
    ucp_request_param_t param;
    ucs_status_ptr_t rreq;
    ucp_rvma_msg_t *msg;

    msg = ucs_mpool_get(&rw->msg_mp);
    if (msg == NULL) {
        ucp_rvma_win_placed(win, buf, length, UCS_ERR_NO_MEMORY);
        ucp_rvma_target_reply(rw, reply_ep, hdr->req_id, hdr->seq,
                              UCS_ERR_NO_MEMORY);
        return UCS_ERR_NO_MEMORY;
    }

    msg->fetch.win      = win;
    msg->fetch.buf      = buf;
    msg->fetch.reply_ep = reply_ep;
    msg->fetch.req_id   = hdr->req_id;
    msg->fetch.seq      = hdr->seq;
    msg->fetch.length   = length;
    ++win->refcount;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am   = ucp_rvma_fetch_done;
    param.user_data    = msg;
    rreq = ucp_am_recv_data_nbx(rw->worker, data,
                                UCS_PTR_BYTE_OFFSET(buf->buffer, hdr->offset),
                                length, &param);
    if (!UCS_PTR_IS_PTR(rreq)) {
        ucp_rvma_fetch_done(NULL, UCS_PTR_STATUS(rreq), length, msg);
    } /* else ucp_rvma_fetch_done() releases the request */

    /* the descriptor belongs to the receive operation now */
    return UCS_INPROGRESS;
}

/* Find the window and reserve the put's place in its current buffer;
 * UCS_ERR_NO_PROGRESS: discarded without telling the initiator */
ucs_status_t ucp_rvma_target_accept(ucp_rvma_worker_t *rw, uint64_t vaddr,
                                    uint64_t offset, size_t length,
                                    ucp_rvma_win_h *win_p,
                                    ucp_rvma_buf_t **buf_p)
{
    ucp_rvma_win_h win = ucp_rvma_worker_find_win(rw, vaddr);
    ucs_status_t status;

    if (win == NULL) {
        status = UCS_ERR_NO_ELEM;
    } else {
        status = ucp_rvma_win_accept(win, offset, length, buf_p);
    }

    if (status != UCS_OK) {
        ucs_debug("worker %p: RVMA put of %zu bytes to 0x%" PRIx64 "+%" PRIu64
                  " refused: %s", rw->worker, length, vaddr, offset,
                  ucs_status_string(status));
        if ((status == UCS_ERR_CANCELED) &&
            (win->flags & UCP_RVMA_WIN_FLAG_SILENT_CLOSE)) {
            /* discarded without telling the initiator */
            status = UCS_ERR_NO_PROGRESS;
        }
    }

    *win_p = win;
    return status;
}

ucs_status_t ucp_rvma_target_place(ucp_rvma_worker_t *rw, uint64_t vaddr,
                                   uint64_t offset, const void *data,
                                   size_t length)
{
    ucp_rvma_buf_t *buf;
    ucp_rvma_win_h win;
    ucs_status_t status;

    status = ucp_rvma_target_accept(rw, vaddr, offset, length, &win, &buf);
    if (status != UCS_OK) {
        return (status == UCS_ERR_NO_PROGRESS) ? UCS_OK : status;
    }

    ucs_trace_data("worker %p: RVMA put of %zu bytes to 0x%" PRIx64 "+%" PRIu64
                   " epoch %" PRIu64, rw->worker, length, vaddr, offset,
                   buf->epoch);
    memcpy(UCS_PTR_BYTE_OFFSET(buf->buffer, offset), data, length);
    ucp_rvma_win_placed(win, buf, length, UCS_OK);
    return UCS_OK;
}

ucs_status_t ucp_rvma_target_put_handler(void *arg, const void *header,
                                         size_t header_length, void *data,
                                         size_t length,
                                         const ucp_am_recv_param_t *param)
{
    ucp_rvma_worker_t *rw         = arg;
    const ucp_rvma_put_hdr_t *hdr = header;
    int rndv = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    ucp_rvma_buf_t *buf;
    ucp_ep_h reply_ep;
    ucp_rvma_win_h win;
    ucs_status_t status;

    if (header_length != sizeof(*hdr)) {
        ucs_error("worker %p: malformed RVMA put (header %zu bytes) dropped",
                  rw->worker, header_length);
        return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }

    if (ucp_rvma_worker_ep_by_id(rw, hdr->ep_id, &reply_ep) != UCS_OK) {
        /* the initiator's endpoint is gone: nobody to answer or to fetch
         * from */
        ucs_debug("worker %p: RVMA put from unknown endpoint id 0x%" PRIx64
                  " dropped", rw->worker, hdr->ep_id);
        return UCS_OK;
    }

    if (!rndv) {
        status = ucp_rvma_target_place(rw, hdr->vaddr, hdr->offset, data,
                                       length);
        ucp_rvma_target_reply(rw, reply_ep, hdr->req_id, hdr->seq, status);
        return UCS_OK;
    }

    status = ucp_rvma_target_accept(rw, hdr->vaddr, hdr->offset, length, &win,
                                    &buf);
    if (status != UCS_OK) {
        /* a refused rendezvous is not fetched: UCP completes its send with
         * UCS_OK, and the reply alone carries the verdict, so that the
         * request sees exactly one error whichever arrives first */
        ucp_rvma_target_reply(rw, reply_ep, hdr->req_id, hdr->seq,
                              (status == UCS_ERR_NO_PROGRESS) ? UCS_OK :
                                                                status);
        return UCS_OK;
    }

    ucs_trace_data("worker %p: RVMA put of %zu bytes to 0x%" PRIx64 "+%" PRIu64
                   " epoch %" PRIu64 " (rndv)", rw->worker, length,
                   hdr->vaddr, hdr->offset, buf->epoch);
    return ucp_rvma_target_fetch(rw, win, buf, hdr, data, length, reply_ep);
}
