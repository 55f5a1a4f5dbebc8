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
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

/*
 * Initiator side of the fast path (the whole picture: rvma_fast.c): the
 * lease of a ring in the target of an endpoint, and the fast put.
 *
 *   initiator                                 target
 *   lease request (AM)      ---------->       (rvma_ring.c)
 *                           <----------       its address, rkey and id (AM)
 *   put: header, data and trailer
 *   into the local staging mirror,
 *   then ONE RDMA_WRITE_WITH_IMM ----->
 *     (immediate: ring id, position)
 *                           <----------       ack (rvma_ack.c): completes
 *                                             the requests, gives the ring
 *                                             space back
 *
 * The staging mirror is registered memory of the ring's size: a record is
 * written there at the place it takes in the target's ring, so the caller's
 * buffer is free once the write is posted. A put larger than
 * UCX_RVMA_FAST_MAX, of up to UCX_RVMA_READ_MAX bytes, is a record
 * that names the initiator's buffer instead (rvma_read.c). Whatever the
 * fast path cannot take (no lease yet, a ring or the window of
 * unacknowledged records full, larger than both limits, a buffer that
 * cannot be registered, transport resources busy) takes the active message
 * path.
 */


ucp_rvma_lease_t *ucp_rvma_lease_find(ucp_rvma_worker_t *rw, ucp_ep_h ep)
{
    khiter_t iter = kh_get(ucp_rvma_lease, &rw->leases, (uintptr_t)ep);

    return (iter == kh_end(&rw->leases)) ? NULL : kh_value(&rw->leases, iter);
}

/* The lease of the endpoint a control message names by its id, if it is in
 * the state the message expects */
ucp_rvma_lease_t *ucp_rvma_lease_by_id(ucp_rvma_worker_t *rw, uint64_t ep_id,
                                       ucp_rvma_lease_state_t state,
                                       ucp_ep_h *ep_p)
{
    ucp_rvma_lease_t *lease;

    if (ucp_rvma_worker_ep_by_id(rw, ep_id, ep_p) != UCS_OK) {
        return NULL;
    }

    lease = ucp_rvma_lease_find(rw, *ep_p);
    return ((lease != NULL) && (lease->state == state)) ? lease : NULL;
}

/* Deregister the buffers of the read records the target is done with:
 * those before record seq */
void ucp_rvma_lease_release_reads(ucp_rvma_lease_t *lease, uint32_t seq)
{
    ucp_rvma_lease_read_t *read;

    while (lease->reads_tail != lease->reads_head) {
        read = &lease->reads[lease->reads_tail % UCP_RVMA_LEASE_READS];
        if (!UCS_CIRCULAR_COMPARE32(read->seq, <, seq)) {
            break;
        }
        uct_md_mem_dereg(lease->md, read->memh);
        ++lease->reads_tail;
    }
}

void ucp_rvma_lease_free(ucp_rvma_lease_t *lease)
{
    ucp_rvma_lease_release_reads(lease, lease->seq);
    if (lease->ring != NULL) {
        lease->ring->lease = NULL;
    }
    if ((lease->state == UCP_RVMA_LEASE_READY) ||
        (lease->state == UCP_RVMA_LEASE_FAILED)) {
        uct_rkey_release(lease->component, &lease->rkey);
        uct_md_mem_dereg(lease->md, lease->memh);
        ucs_free(lease->staging);
    }
    ucs_free(lease);
}

/* The target broke the protocol of the lease (the caller said how): the
 * fast path puts it has not acknowledged fail, and the later ones take the
 * active message path. The ring and staging stay registered until the
 * endpoint goes, since writes may still be in flight from them. */
void ucp_rvma_lease_fail(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                         ucp_rvma_lease_t *lease)
{
    uint64_t req_id[UCP_RVMA_LEASE_INFLIGHT];
    unsigned i, count;

    ucs_assert(lease->state == UCP_RVMA_LEASE_READY);

    /* take everything from the lease first: a completion callback may put
     * again, or close the endpoint and so free the lease */
    count = lease->seq - lease->acked_seq;
    for (i = 0; i < count; ++i) {
        req_id[i] =
                lease->req_id[(lease->acked_seq + i) % UCP_RVMA_LEASE_INFLIGHT];
    }
    lease->acked_seq = lease->seq;
    lease->state     = UCP_RVMA_LEASE_FAILED;
    ucp_rvma_lease_release_reads(lease, lease->seq);

    ucs_debug("ep %p: RVMA fast path stopped, %u puts in flight fail", ep,
              count);
    for (i = 0; i < count; ++i) {
        ucp_rvma_put_event(rw->worker, req_id[i], UCS_ERR_IO_ERROR, 0);
    }
}

/* Ask the target of a new endpoint for a ring; the puts meanwhile, and for
 * good if it refuses, take the active message path */
static void ucp_rvma_lease_request(ucp_rvma_worker_t *rw, ucp_ep_h ep)
{
    ucp_context_h context = rw->worker->context;
    uct_ep_h uct_ep       = ucp_ep_get_am_uct_ep(ep);
    const uct_iface_attr_t *iface_attr;
    ucp_rvma_lease_req_hdr_t req;
    ucp_rvma_lease_t *lease;
    ucp_md_index_t md_index;
    ucs_status_t status;
    size_t req_length;
    khiter_t iter;
    unsigned i;
    int ret;

    lease = ucs_calloc(1, sizeof(*lease), "rvma_lease");
    if (lease == NULL) {
        return;
    }

    iter = kh_put(ucp_rvma_lease, &rw->leases, (uintptr_t)ep, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_free(lease);
        return;
    }
    kh_value(&rw->leases, iter) = lease;

    /* a ring we leased to the peer before: our records will carry its acks */
    lease->ring = ucp_rvma_ring_find(rw, ep);
    if (lease->ring != NULL) {
        lease->ring->lease = lease;
    }

    md_index      = ucp_ep_md_index(ep, ep->am_lane);
    lease->state  = UCP_RVMA_LEASE_REFUSED;
    lease->uct_ep = uct_ep;
    lease->md     = context->tl_mds[md_index].md;
    lease->component =
            context->tl_cmpts[context->tl_mds[md_index].cmpt_index].cmpt;
    lease->rkey_size = context->tl_mds[md_index].attr.rkey_packed_size;
    /* the target reads with the same transport, so as this one could */
    iface_attr      = ucp_ep_get_iface_attr(ep, ep->am_lane);
    lease->read_min = ucs_max(rw->fast_max + 1, iface_attr->cap.get.min_zcopy);
    lease->read_max = (iface_attr->cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) ?
                              rw->read_max :
                              0;
    if (!rw->fast || !uct_iface_is_put_notify_supported(uct_ep->iface) ||
        !(context->tl_mds[md_index].attr.cap.flags & UCT_MD_FLAG_REG)) {
        return;
    }

    req.ep_id        = ucp_ep_remote_id(ep);
    req.initiator_ep = ucp_ep_local_id(ep);
    ucs_strncpy_zero(req.component,
                     ucp_rvma_md_component_name(context, md_index),
                     sizeof(req.component));
    req_length = sizeof(req);
    if (ucs_unlikely(ucp_rvma_faults & UCP_RVMA_FAULT_LEASE_REQ_SHORT)) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_LEASE_REQ_SHORT;
        req_length = sizeof(req) - 1; /* test only */
    }
    status = ucp_rvma_worker_send_ctl(rw, ep, UCP_RVMA_AM_LEASE_REQ, &req,
                                      req_length, NULL, 0);
    if (UCS_STATUS_IS_ERR(status)) {
        ucs_debug("ep %p: RVMA lease request failed: %s", ep,
                  ucs_status_string(status));
        return;
    }

    lease->state = UCP_RVMA_LEASE_REQUESTED;
    ucs_debug("ep %p: RVMA ring requested", ep);

    if (ucs_unlikely(ucp_rvma_faults & UCP_RVMA_FAULT_LEASE_REQ_AGAIN)) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_LEASE_REQ_AGAIN;
        for (i = 0; i < UCP_RVMA_MAX_RINGS; ++i) {
            (void)ucp_rvma_worker_send_ctl(rw, ep, UCP_RVMA_AM_LEASE_REQ, &req,
                                           sizeof(req), NULL, 0);
        }
    }
}

static ucs_status_t ucp_rvma_lease_setup(ucp_rvma_lease_t *lease,
                                         const ucp_rvma_lease_hdr_t *hdr,
                                         const void *rkey_buf)
{
    ucs_status_t status;

    if ((hdr->ring_size > UCP_RVMA_RING_MAX_SIZE) ||
        (hdr->ring_size < (4 * UCP_RVMA_RING_ALIGN)) ||
        ((hdr->ring_size % UCP_RVMA_RING_ALIGN) != 0)) {
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_rkey_unpack(lease->component, rkey_buf, &lease->rkey);
    if (status != UCS_OK) {
        return status;
    }

    status = ucs_posix_memalign(&lease->staging, ucs_get_page_size(),
                                hdr->ring_size, "rvma_lease_staging");
    if (status != UCS_OK) {
        goto err_rkey;
    }

    status = uct_md_mem_reg(lease->md, lease->staging, hdr->ring_size,
                            UCT_MD_MEM_ACCESS_LOCAL_READ, &lease->memh);
    if (status != UCS_OK) {
        goto err_free;
    }

    lease->raddr   = hdr->ring_addr;
    lease->size    = hdr->ring_size;
    lease->ring_id = hdr->ring_id;
    lease->state   = UCP_RVMA_LEASE_READY;
    if (ucs_unlikely(ucp_rvma_faults & UCP_RVMA_FAULT_NOTIFY_NO_RING)) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_NOTIFY_NO_RING;
        lease->ring_id = UCP_RVMA_MAX_RINGS - 1; /* test only */
    }
    return UCS_OK;

err_free:
    ucs_free(lease->staging);
err_rkey:
    uct_rkey_release(lease->component, &lease->rkey);
    return status;
}

ucs_status_t ucp_rvma_lease_handler(void *arg, const void *header,
                                    size_t header_length, void *data,
                                    size_t length,
                                    const ucp_am_recv_param_t *param)
{
    ucp_rvma_worker_t *rw           = arg;
    const ucp_rvma_lease_hdr_t *hdr = header;
    ucp_rvma_lease_t *lease;
    ucs_status_t status;
    ucp_ep_h ep;

    if (header_length != sizeof(*hdr)) {
        ucs_error("worker %p: malformed RVMA lease (header %zu bytes) dropped",
                  rw->worker, header_length);
        return UCS_OK;
    }

    lease = ucp_rvma_lease_by_id(rw, hdr->initiator_ep,
                                 UCP_RVMA_LEASE_REQUESTED, &ep);
    if (lease == NULL) {
        ucs_debug("worker %p: RVMA lease for no request dropped", rw->worker);
        return UCS_OK;
    }

    if (hdr->ring_id >= UCP_RVMA_MAX_RINGS) {
        ucs_debug("ep %p: RVMA ring refused by the target", ep);
        lease->state = UCP_RVMA_LEASE_REFUSED;
        return UCS_OK;
    }

    if (length < lease->rkey_size) {
        ucs_error("ep %p: RVMA lease with a %zu-byte rkey, %zu expected: not "
                  "used",
                  ep, length, lease->rkey_size);
        lease->state = UCP_RVMA_LEASE_REFUSED;
        return UCS_OK;
    }

    status = ucp_rvma_lease_setup(lease, hdr, data);
    if (status != UCS_OK) {
        /* the target keeps an unused ring until the endpoint goes */
        ucs_debug("ep %p: RVMA ring not usable: %s", ep,
                  ucs_status_string(status));
        lease->state = UCP_RVMA_LEASE_REFUSED;
        return UCS_OK;
    }

    ucs_debug("ep %p: RVMA ring %u of %zu bytes at 0x%" PRIx64 " leased", ep,
              lease->ring_id, lease->size, lease->raddr);
    return UCS_OK;
}

ucs_status_t ucp_rvma_fast_put(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                               uint64_t req_id, uint64_t vaddr, uint64_t offset,
                               const void *buffer, size_t length)
{
    uct_mem_h read_memh = NULL;
    size_t rec_size, pos, body_length;
    ucp_rvma_lease_t *lease;
    ucp_rvma_ring_t *ring;
    ucp_rvma_rec_hdr_t *rec;
    ucs_status_t status;
    uint32_t notify;
    uct_iov_t iov;
    uint64_t head;
    int read;

    if (!rw->fast || (ep->flags & UCP_EP_FLAG_FAILED)) {
        return UCS_ERR_UNSUPPORTED;
    }

    lease = ucp_rvma_lease_find(rw, ep);
    if (ucs_unlikely(lease == NULL)) {
        ucp_rvma_lease_request(rw, ep);
        return UCS_ERR_UNSUPPORTED;
    }

    if ((lease->state != UCP_RVMA_LEASE_READY) ||
        (lease->uct_ep != ucp_ep_get_am_uct_ep(ep))) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* the data in the record, or where the target reads it from */
    read = length > rw->fast_max;
    if (!read) {
        body_length = length;
    } else if ((length < lease->read_min) || (length > lease->read_max)) {
        return UCS_ERR_UNSUPPORTED;
    } else if ((lease->reads_head - lease->reads_tail) ==
               UCP_RVMA_LEASE_READS) {
        return UCS_ERR_NO_RESOURCE;
    } else {
        body_length = sizeof(ucp_rvma_read_body_t) + lease->rkey_size;
    }

    rec_size = ucp_rvma_rec_size(body_length);
    if (rec_size > (lease->size / 2)) {
        return UCS_ERR_UNSUPPORTED;
    }

    head = lease->head;
    pos  = head % lease->size;
    if ((pos + rec_size) > lease->size) {
        head += lease->size - pos; /* skip to the start */
        pos = 0;
    }

    if (((head + rec_size - lease->tail) > lease->size) ||
        ((uint32_t)(lease->seq - lease->acked_seq) >=
         UCP_RVMA_LEASE_INFLIGHT)) {
        return UCS_ERR_NO_RESOURCE;
    }

    rec = UCS_PTR_BYTE_OFFSET(lease->staging, pos);
    if (read) {
        status = ucp_rvma_read_pack(lease->md, buffer, length, rec + 1,
                                    &read_memh);
        if (status != UCS_OK) {
            /* e.g. out of locked memory: the active message path copes */
            return UCS_ERR_UNSUPPORTED;
        }
        rec->length = body_length | UCP_RVMA_REC_LENGTH_READ;
    } else {
        memcpy(rec + 1, buffer, length);
        rec->length = length;
    }

    ring        = lease->ring;
    rec->vaddr  = vaddr;
    rec->offset = offset;
    rec->seq    = lease->seq;
    if ((ring != NULL) && ring->ack_in_records && (ring->n_err == 0)) {
        rec->ack_cons = ring->cons;
        rec->ack_seq  = ring->seq;
        rec->flags    = UCP_RVMA_REC_FLAG_ACK;
    } else {
        ring       = NULL; /* its failures go by message */
        rec->flags = 0;
    }
    *(uint64_t *)UCS_PTR_BYTE_OFFSET(rec, rec_size - sizeof(uint64_t)) =
            ucp_rvma_rec_trailer(rec->seq, rec->length);

    iov.buffer = rec;
    iov.length = rec_size;
    iov.memh   = lease->memh;
    iov.stride = 0;
    iov.count  = 1;
    notify     = ((uint32_t)lease->ring_id << UCP_RVMA_RING_POS_BITS) |
             (pos / UCP_RVMA_RING_ALIGN);
    status = uct_ep_put_notify_zcopy(lease->uct_ep, &iov, 1, lease->raddr + pos,
                                     lease->rkey.rkey, UCP_AM_ID_RVMA_NOTIFY,
                                     notify, NULL);
    if (UCS_STATUS_IS_ERR(status)) {
        if (read) {
            uct_md_mem_dereg(lease->md, read_memh);
        }
        return status;
    }

    /* the staging copy is what the network reads: the caller's buffer is
     * free now, unless the target reads it, and the ring space comes back
     * with the ack */
    if (read) {
        lease->reads[lease->reads_head % UCP_RVMA_LEASE_READS].seq = lease->seq;
        lease->reads[lease->reads_head % UCP_RVMA_LEASE_READS].memh = read_memh;
        ++lease->reads_head;
    }
    lease->req_id[lease->seq % UCP_RVMA_LEASE_INFLIGHT] = req_id;
    ++lease->seq;
    if (ring != NULL) {
        ++ring->ack_carried;
        ucp_rvma_ring_acked(ring);
    }
    ++lease->puts;
    lease->head = head + rec_size;
    ucs_trace_req("ep %p: RVMA put %u of %zu bytes to 0x%" PRIx64 "+%" PRIu64
                  " in ring %u at %zu%s",
                  ep, rec->seq, length, vaddr, offset, lease->ring_id, pos,
                  read ? " (read)" : "");
    return UCS_OK;
}
