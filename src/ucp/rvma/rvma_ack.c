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
 * Acknowledgement of fast path records (the whole picture: rvma_fast.c):
 * the target tells the initiator up to which record it handled the ring,
 * how much of it is free again and which records failed; the initiator
 * completes its requests with that verdict.
 *
 *   initiator                                 target
 *   ONE RDMA_WRITE_WITH_IMM ----------->      record taken (rvma_ring.c)
 *                           <----------       ack: records handled, ring
 *                                             space free (in the header of
 *                                             the target's next fast put to
 *                                             the initiator, or an AM one
 *                                             progress round later); the
 *                                             failed ones (AM, at once)
 *
 * The ack waits a progress round for a put going back, which would carry
 * it: in a request-reply exchange (a halo, a ping-pong) every ack then rides
 * on a reply, and none costs a network operation of its own, or the latency
 * of one on the reply's path.
 */


/* ---- target: what the initiator is owed -------------------------------- */

/* The initiator has been told everything up to now */
void ucp_rvma_ring_acked(ucp_rvma_ring_t *ring)
{
    ring->acked_cons = ring->cons;
    ring->acked_seq  = ring->seq;
    ring->n_err      = 0;
    if (ring->ack_owed != UCP_RVMA_ACK_NONE) {
        ring->ack_owed = UCP_RVMA_ACK_NONE;
        ucs_list_del(&ring->list);
    }
}

/* Test only: break the ack message as ucp_rvma_faults says */
static void ucp_rvma_ring_ack_fault(ucp_rvma_ring_t *ring,
                                    ucp_rvma_ack_hdr_t *ack, size_t *length_p)
{
    static ucp_rvma_ack_hdr_t first;
    static size_t first_length = 0;
    ucp_rvma_ack_hdr_t other;

    if (ucp_rvma_faults & UCP_RVMA_FAULT_ACK_SHORT) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_ACK_SHORT;
        --*length_p;
    } else if (ucp_rvma_faults & UCP_RVMA_FAULT_ACK_AHEAD) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_ACK_AHEAD;
        ++ack->seq;
    } else if (ucp_rvma_faults & UCP_RVMA_FAULT_ACK_UNKNOWN_EP) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_ACK_UNKNOWN_EP;
        other = *ack;
        other.initiator_ep += 64; /* inside the endpoint, if it is its
                                     address */
        (void)ucp_rvma_worker_send_ctl(ring->rw, ring->ep, UCP_RVMA_AM_ACK,
                                       &other, *length_p, NULL, 0);
    } else if ((ucp_rvma_faults & UCP_RVMA_FAULT_ACK_REPLAY) &&
               (first_length == 0)) {
        first        = *ack;
        first_length = *length_p;
    } else if (ucp_rvma_faults & UCP_RVMA_FAULT_ACK_REPLAY) {
        /* this ack, then the first one again */
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_ACK_REPLAY;
        (void)ucp_rvma_worker_send_ctl(ring->rw, ring->ep, UCP_RVMA_AM_ACK, ack,
                                       *length_p, NULL, 0);
        *ack      = first;
        *length_p = first_length;
    }
}

/* Send the ring's owed acknowledgement; on UCS_ERR_NO_MEMORY it stays owed */
ucs_status_t ucp_rvma_ring_ack(ucp_rvma_ring_t *ring)
{
    ucp_rvma_ack_hdr_t ack;
    ucs_status_t status;
    size_t length;

    ack.initiator_ep = ring->initiator_ep;
    ack.cons         = ring->cons;
    ack.seq          = ring->seq;
    ack.n_err        = ring->n_err;
    memcpy(ack.err, ring->err, ring->n_err * sizeof(ring->err[0]));
    length = ucs_offsetof(ucp_rvma_ack_hdr_t, err) +
             (ring->n_err * sizeof(ring->err[0]));
    if (ucs_unlikely(ucp_rvma_faults &
                     (UCP_RVMA_FAULT_ACK_SHORT | UCP_RVMA_FAULT_ACK_REPLAY |
                      UCP_RVMA_FAULT_ACK_AHEAD |
                      UCP_RVMA_FAULT_ACK_UNKNOWN_EP))) {
        ucp_rvma_ring_ack_fault(ring, &ack, &length);
    }
    status = ucp_rvma_worker_send_ctl(ring->rw, ring->ep, UCP_RVMA_AM_ACK, &ack,
                                      length, NULL, 0);
    if (status == UCS_ERR_NO_MEMORY) {
        return status;
    } else if (UCS_STATUS_IS_ERR(status)) {
        /* the initiator is gone: its requests were purged there */
        ucs_debug("worker %p: RVMA ack to ep %p failed: %s", ring->rw->worker,
                  ring->ep, ucs_status_string(status));
    } else {
        ++ring->ack_msgs;
        if ((status == UCS_INPROGRESS) && (ring->n_err > 0)) {
            /* the ack waits in a queue, which a record's header would
             * overtake, acknowledging the failed puts as done */
            ucs_debug("worker %p: RVMA ring %u acks only by message from now "
                      "on",
                      ring->rw->worker, ring->id);
            ring->ack_in_records = 0;
        }
    }

    ucp_rvma_ring_acked(ring);
    return UCS_OK;
}

unsigned ucp_rvma_ack_progress(ucp_rvma_worker_t *rw)
{
    ucp_rvma_ring_t *ring, *tmp;
    unsigned count = 0;

    ucs_list_for_each_safe(ring, tmp, &rw->ack_list, list) {
        if ((ring->ack_owed == UCP_RVMA_ACK_OWED) && (ring->n_err == 0)) {
            /* a put going back may still carry it; counted as progress, so
             * that a caller does not go to sleep with the ack owed */
            ring->ack_owed = UCP_RVMA_ACK_OVERDUE;
            ++count;
        } else if (ucp_rvma_ring_ack(ring) == UCS_OK) {
            ++count;
        }
    }

    return count;
}

/* Acknowledge at once when the initiator would soon run out of ring space,
 * record window or error slots; else in this progress round, so that a burst
 * of puts costs one ack. Where this worker puts to the initiator too (it
 * holds a lease back), wait one more round: a put going back, which a
 * request-reply exchange makes as soon as the round returns, then carries
 * the ack for free. A worker that only receives acks as before: it may stop
 * progressing after the last put it waits for. */
void ucp_rvma_ring_ack_owed(ucp_rvma_ring_t *ring)
{
    ucp_rvma_worker_t *rw = ring->rw;

    if ((ring->n_err == UCP_RVMA_ACK_MAX_ERR) ||
        ((ring->cons - ring->acked_cons) >= (ring->size / 4)) ||
        ((uint32_t)(ring->seq - ring->acked_seq) >=
         (UCP_RVMA_LEASE_INFLIGHT / 4))) {
        if (ucp_rvma_ring_ack(ring) == UCS_OK) {
            return;
        }
    }

    if (ring->ack_owed == UCP_RVMA_ACK_NONE) {
        ring->ack_owed = ((ring->lease != NULL) &&
                          (ring->lease->state == UCP_RVMA_LEASE_READY) &&
                          ring->ack_in_records) ?
                                 UCP_RVMA_ACK_OWED :
                                 UCP_RVMA_ACK_OVERDUE;
        ucs_list_add_tail(&rw->ack_list, &ring->list);
    }
}


/* ---- initiator: what the target says ---------------------------------- */

/* The target handled our records up to seq and consumed its ring up to cons;
 * the listed ones failed. Acks come by message and in records, which can
 * overtake a message held by UCP: an ack behind the last one is stale. One
 * beyond the records written, or whose list of failed records is not a
 * list of some of the records it acknowledges, in order, with an error
 * each, comes from a broken target: the lease fails. */
void ucp_rvma_lease_ack(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                        ucp_rvma_lease_t *lease, uint64_t cons, uint32_t seq,
                        unsigned n_err, const ucp_rvma_ack_err_t *err)
{
    uint64_t req_id[UCP_RVMA_LEASE_INFLIGHT];
    ucs_status_t status[UCP_RVMA_LEASE_INFLIGHT];
    unsigned i, count, e;

    count = seq - lease->acked_seq;
    if (UCS_CIRCULAR_COMPARE32(seq, <, lease->acked_seq) ||
        (cons < lease->tail)) {
        ucs_trace("ep %p: stale RVMA ack of record %u ignored", ep, seq);
        return;
    } else if ((count > (uint32_t)(lease->seq - lease->acked_seq)) ||
               (cons > lease->head)) {
        ucs_error("ep %p: RVMA ack up to record %u, ring byte %" PRIu64
                  ", beyond what was written (records %u..%u, ring bytes "
                  "%" PRIu64 "..%" PRIu64 "): fast path puts fail",
                  ep, seq, cons, lease->acked_seq, lease->seq, lease->tail,
                  lease->head);
        ucp_rvma_lease_fail(rw, ep, lease);
        return;
    }

    for (e = 0; e < n_err; ++e) {
        if ((err[e].status == UCS_OK) ||
            !ucp_rvma_peer_status_valid(err[e].status) ||
            ((uint32_t)(err[e].seq - lease->acked_seq) >= count) ||
            ((e > 0) &&
             !UCS_CIRCULAR_COMPARE32(err[e - 1].seq, <, err[e].seq))) {
            ucs_error("ep %p: RVMA ack up to record %u says record %u failed "
                      "with status %d: not an error of one of the records it "
                      "acknowledges, in order; fast path puts fail",
                      ep, seq, err[e].seq, err[e].status);
            ucp_rvma_lease_fail(rw, ep, lease);
            return;
        }
    }

    /* take everything from the lease first: a completion callback may put
     * again, or close the endpoint and so free the lease */
    for (i = 0, e = 0; i < count; ++i) {
        req_id[i] =
                lease->req_id[(lease->acked_seq + i) % UCP_RVMA_LEASE_INFLIGHT];
        status[i] = UCS_OK;
        if ((e < n_err) && (err[e].seq == (uint32_t)(lease->acked_seq + i))) {
            status[i] = (ucs_status_t)err[e++].status;
        }
    }
    lease->acked_seq = seq;
    lease->tail      = cons;
    ucp_rvma_lease_release_reads(lease, seq);

    for (i = 0; i < count; ++i) {
        ucp_rvma_put_event(rw->worker, req_id[i], status[i], 0);
    }
}

/* The ack message is as long as its list of failed records says */
static int
ucp_rvma_ack_length_valid(const ucp_rvma_ack_hdr_t *ack, size_t header_length)
{
    return (header_length >= ucs_offsetof(ucp_rvma_ack_hdr_t, err)) &&
           (ack->n_err <= UCP_RVMA_ACK_MAX_ERR) &&
           (header_length == (ucs_offsetof(ucp_rvma_ack_hdr_t, err) +
                              (ack->n_err * sizeof(ack->err[0]))));
}

ucs_status_t ucp_rvma_ack_handler(void *arg, const void *header,
                                  size_t header_length, void *data,
                                  size_t length,
                                  const ucp_am_recv_param_t *param)
{
    ucp_rvma_worker_t *rw         = arg;
    const ucp_rvma_ack_hdr_t *ack = header;
    ucp_rvma_lease_t *lease;
    ucp_ep_h ep;

    if (header_length < sizeof(ack->initiator_ep)) {
        ucs_error("worker %p: malformed RVMA ack (header %zu bytes) dropped",
                  rw->worker, header_length);
        return UCS_OK;
    }

    lease = ucp_rvma_lease_by_id(rw, ack->initiator_ep, UCP_RVMA_LEASE_READY,
                                 &ep);
    if (lease == NULL) {
        ucs_debug("worker %p: RVMA ack for no lease (endpoint id 0x%" PRIx64
                  ") dropped",
                  rw->worker, ack->initiator_ep);
        return UCS_OK;
    }

    if (!ucp_rvma_ack_length_valid(ack, header_length)) {
        ucs_error("ep %p: malformed RVMA ack (header %zu bytes): fast path "
                  "puts fail",
                  ep, header_length);
        ucp_rvma_lease_fail(rw, ep, lease);
        return UCS_OK;
    }

    ucp_rvma_lease_ack(rw, ep, lease, ack->cons, ack->seq, ack->n_err,
                       ack->err);
    return UCS_OK;
}
