/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "rvma.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_worker.inl>
#include <ucs/debug/log.h>


/*
 * Fast path puts too large to copy through a ring (rvma_fast.c). Copying a
 * put into the initiator's staging ring and out of the target's ring costs
 * two passes over the data besides the transfer; above UCX_RVMA_FAST_MAX
 * bytes that is most of the put's time. Such a put is instead a small record
 * in the ring that names the initiator's buffer (its address, length and
 * packed remote key, registered through the memory domain's registration
 * cache), and the target, which alone knows which posted buffer the put
 * belongs to, reads the data straight into it at the put's offset:
 *
 *   initiator                                 target
 *   register the buffer (rcache)
 *   ONE RDMA_WRITE_WITH_IMM of the  ----->    takes the record, reserves the
 *     record: address, length, rkey           put's place in the window,
 *                                             registers the destination
 *                                  <=====     RDMA_READ(s) into the posted
 *                                             buffer; at their completion:
 *                                             count, complete, acknowledge
 *   the ack releases the buffer's    <-----
 *   registration, completes the request
 *
 * The initiator still issues one network operation per put, and nothing
 * else is on the path of the target's notification. The read is the
 * receiver managing its own buffers, which is what RVMA asks of it.
 *
 * A ring takes its records in order and one read at a time (the records
 * behind a read wait until it completes), so that its acks, which name the
 * last record handled, and their lists of failed records stay in record
 * order.
 */


/* Release what the read holds, account the put in its window, and give the
 * read's status */
static ucs_status_t ucp_rvma_read_finish(ucp_rvma_read_t *read)
{
    ucs_status_t status = read->comp.status;
    ucp_rvma_win_h win  = read->win;

    ucs_trace_data("worker %p: RVMA read of %zu bytes into %p done: %s",
                   read->rw->worker, read->length, read->dst,
                   ucs_status_string(status));
    uct_rkey_release(read->component, &read->rkey);
    uct_md_mem_dereg(read->md, read->memh);
    ucp_rvma_win_placed(win, read->buf, read->length, status);
    if ((--win->refcount == 0) && win->destroyed) {
        ucp_rvma_win_free(win);
    }
    ucs_mpool_put(read);
    return status;
}

/* The last read completed (from the transport's progress) */
static void ucp_rvma_read_completed(uct_completion_t *self)
{
    ucp_rvma_read_t *read = ucs_container_of(self, ucp_rvma_read_t, comp);
    ucp_rvma_ring_t *ring = read->ring;
    ucs_status_t status;

    status = ucp_rvma_read_finish(read);
    if (ring != NULL) {
        ucp_rvma_ring_read_done(ring, status);
    }
}

ucs_status_t ucp_rvma_read_progress(ucp_rvma_read_t *read)
{
    ucs_status_t status;
    uct_iov_t iov;
    size_t chunk;

    ucs_assert(read->issued < read->length);

    iov.memh   = read->memh;
    iov.stride = 0;
    iov.count  = 1;
    do {
        chunk      = ucs_min(read->length - read->issued, read->chunk);
        iov.buffer = UCS_PTR_BYTE_OFFSET(read->dst, read->issued);
        iov.length = chunk;
        status     = uct_ep_get_zcopy(read->uct_ep, &iov, 1,
                                      read->src + read->issued,
                                      read->rkey.rkey, &read->comp);
        if (status == UCS_INPROGRESS) {
            ++read->comp.count;
        } else if (status == UCS_ERR_NO_RESOURCE) {
            return UCS_INPROGRESS; /* the ring's progress issues the rest */
        } else if (UCS_STATUS_IS_ERR(status)) {
            /* the initiator is gone: the reads in flight fail too */
            ucs_debug("worker %p: RVMA read from 0x%" PRIx64 " failed: %s",
                      read->rw->worker, read->src + read->issued,
                      ucs_status_string(status));
            uct_completion_update_status(&read->comp, status);
            read->issued = read->length;
            break;
        }
        read->issued += chunk;
    } while (read->issued < read->length);

    /* all issued: drop the count that kept the reads from completing it */
    if (--read->comp.count > 0) {
        return UCS_INPROGRESS;
    }

    return ucp_rvma_read_finish(read);
}

ucs_status_t ucp_rvma_read_start(ucp_rvma_worker_t *rw, ucp_rvma_ring_t *ring,
                                 ucp_ep_h ep, const ucp_rvma_rec_hdr_t *rec,
                                 size_t body_length, ucp_rvma_read_t **read_p)
{
    const ucp_rvma_read_body_t *body = (const void*)(rec + 1);
    ucp_context_h context            = rw->worker->context;
    ucp_md_index_t md_index          = ucp_ep_md_index(ep, ep->am_lane);
    const ucp_tl_md_t *tl_md         = &context->tl_mds[md_index];
    const uct_iface_attr_t *iface_attr;
    ucp_rvma_read_t *read;
    ucp_rvma_buf_t *buf;
    ucp_rvma_win_h win;
    ucs_status_t status;
    size_t length;

    if (body_length != (sizeof(*body) + tl_md->attr.rkey_packed_size)) {
        ucs_error("worker %p: RVMA read record of %zu bytes from ep %p is "
                  "malformed", rw->worker, body_length, ep);
        return UCS_ERR_INVALID_PARAM;
    }

    iface_attr = ucp_ep_get_iface_attr(ep, ep->am_lane);
    length = body->length;
    if (!(iface_attr->cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) ||
        (length < iface_attr->cap.get.min_zcopy)) {
        /* the initiator's transport is configured otherwise */
        ucs_debug("worker %p: RVMA read record of %zu bytes from ep %p: the "
                  "lane cannot read it", rw->worker, length, ep);
        return UCS_ERR_UNSUPPORTED;
    }

    status = ucp_rvma_target_accept(rw, rec->vaddr, rec->offset, length, &win,
                                    &buf);
    if (status != UCS_OK) {
        return (status == UCS_ERR_NO_PROGRESS) ? UCS_OK : status;
    } else if (length == 0) {
        ucp_rvma_win_placed(win, buf, 0, UCS_OK);
        return UCS_OK;
    }

    read = ucs_mpool_get(&rw->msg_mp);
    if (read == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_placed;
    }

    read->component =
            context->tl_cmpts[context->tl_mds[md_index].cmpt_index].cmpt;
    status = uct_rkey_unpack(read->component, body + 1, &read->rkey);
    if (status != UCS_OK) {
        goto err_put;
    }

    read->dst = UCS_PTR_BYTE_OFFSET(buf->buffer, rec->offset);
    status    = uct_md_mem_reg(tl_md->md, read->dst, length,
                               UCT_MD_MEM_ACCESS_LOCAL_WRITE, &read->memh);
    if (status != UCS_OK) {
        ucs_debug("worker %p: RVMA read of %zu bytes into %p: registration "
                  "failed: %s", rw->worker, length, read->dst,
                  ucs_status_string(status));
        goto err_rkey;
    }

    read->comp.func   = ucp_rvma_read_completed;
    read->comp.count  = 1;
    read->comp.status = UCS_OK;
    read->rw          = rw;
    read->ring        = ring;
    read->uct_ep      = ucp_ep_get_am_uct_ep(ep);
    read->md          = tl_md->md;
    read->win         = win;
    read->buf         = buf;
    read->src         = body->address;
    read->length      = length;
    read->issued      = 0;
    /* reads of equal size: none smaller than the transport takes */
    read->chunk       = ucs_div_round_up(length,
                                         ucs_div_round_up(length,
                                                          iface_attr->cap.get
                                                                  .max_zcopy));
    ++win->refcount;
    ucs_trace_data("worker %p: RVMA put of %zu bytes to 0x%" PRIx64 "+%" PRIu64
                   " epoch %" PRIu64 " (read from 0x%" PRIx64 ")", rw->worker,
                   length, rec->vaddr, rec->offset, buf->epoch, read->src);

    *read_p = read;
    return ucp_rvma_read_progress(read);

err_rkey:
    uct_rkey_release(read->component, &read->rkey);
err_put:
    ucs_mpool_put(read);
err_placed:
    ucp_rvma_win_placed(win, buf, length, status);
    return status;
}

ucs_status_t ucp_rvma_read_pack(uct_md_h md, const void *buffer,
                                size_t length, void *body, uct_mem_h *memh_p)
{
    ucp_rvma_read_body_t *read_body = body;
    ucs_status_t status;

    status = uct_md_mem_reg(md, (void*)buffer, length,
                            UCT_MD_MEM_ACCESS_REMOTE_GET, memh_p);
    if (status != UCS_OK) {
        ucs_debug("RVMA put of %zu bytes from %p: registration failed: %s",
                  length, buffer, ucs_status_string(status));
        return status;
    }

    status = uct_md_mkey_pack(md, *memh_p, read_body + 1);
    if (status != UCS_OK) {
        uct_md_mem_dereg(md, *memh_p);
        return status;
    }

    read_body->address = (uintptr_t)buffer;
    read_body->length  = length;
    return UCS_OK;
}
