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
 * Fast path of RVMA puts, on lanes that can put with notification (hcr).
 *
 * An RVMA window is named by a virtual address only the target translates,
 * and the target moves on to its next posted buffer whenever a threshold is
 * reached: an initiator cannot know which buffer, let alone which address,
 * its put belongs to. So the target leases every initiator a ring of
 * registered memory (the "eager RDMA" region of MVAPICH and of older UCX rc
 * transports) and translates on arrival:
 *
 *   initiator                                 target
 *   lease request (AM)      ---------->       allocates, registers a ring
 *                           <----------       its address, rkey and id (AM)
 *   put: header, data and trailer
 *   into the local staging mirror,
 *   then ONE RDMA_WRITE_WITH_IMM ----->       progress polls the ring for the
 *     (immediate: ring id, position)          next record's trailer (or takes
 *                                             the receive completion): look
 *                                             up the window, copy into the
 *                                             posted buffer, count, complete
 *                           <----------       ack: records handled, ring
 *                                             space free (in the header of
 *                                             the target's next fast put to
 *                                             the initiator, or an AM one
 *                                             progress round later); the
 *                                             failed ones (AM, at once)
 *
 * The put is one network operation, nothing else is on the path of the
 * target's notification, not even the receive completion of the write
 * (UCX_HCR_RVMA_RING_POLL): a record's trailer, its last 8 bytes, lands last
 * and holds its sequence number and length, and the target clears the
 * header and trailer words of the ring space it takes back
 * (ucp_rvma_ring_clear()). The completion still comes,
 * and wakes a target that sleeps. The target's verdict (unknown, closed, full
 * window) still reaches the initiator's request, through the ack. The ack
 * waits a progress round for a put going back, which would carry it: in a
 * request-reply exchange (a halo, a ping-pong) every ack then rides on a
 * reply, and none costs a network operation of its own, or the latency of
 * one on the reply's path. Records
 * of one ring arrive in order (one RC QP), so the ring frees in order: a
 * record that does not fit before the end of the ring starts again at 0, and
 * the target, seeing a position behind its own, knows the rest was skipped.
 *
 * A put larger than UCX_HCR_RVMA_FAST_MAX, and of up to
 * UCX_HCR_RVMA_READ_MAX bytes, is a record that names the initiator's
 * buffer instead of holding the data, and the target reads the data from
 * there (rvma_read.c).
 *
 * Whatever the fast path cannot take (no lease yet, a ring or the window of
 * unacknowledged records full, larger than both limits, a buffer that cannot
 * be registered, transport resources busy) takes the active message path.
 * The two paths need no order between them: RVMA counts puts in any order.
 */


typedef enum {
    UCP_RVMA_LEASE_REQUESTED,
    UCP_RVMA_LEASE_READY,
    UCP_RVMA_LEASE_REFUSED  /* no fast path on this endpoint */
} ucp_rvma_lease_state_t;


/* Initiator: the registration of a read record's buffer, kept until the
 * target acknowledges the record */
typedef struct ucp_rvma_lease_read {
    uint32_t  seq;
    uct_mem_h memh;
} ucp_rvma_lease_read_t;


/* Initiator: a ring leased from the target of one endpoint */
struct ucp_rvma_lease {
    ucp_rvma_lease_state_t state;
    uct_ep_h               uct_ep;    /* the lane it was leased for */
    uct_md_h               md;        /* the lane's memory domain */
    uct_component_h        component;
    uct_rkey_bundle_t      rkey;      /* the target's ring */
    uint64_t               raddr;
    size_t                 size;
    uint16_t               ring_id;
    void                   *staging;  /* registered mirror of the ring */
    uct_mem_h              memh;
    uint64_t               head;      /* bytes written, skips included */
    uint64_t               tail;      /* bytes the target has consumed */
    uint32_t               seq;       /* records written */
    uint32_t               acked_seq; /* records acknowledged */
    uint64_t               puts;      /* sent by the fast path */
    size_t                 read_min;  /* puts read by the target: from */
    size_t                 read_max;  /* this size to this; 0: none */
    size_t                 rkey_size; /* packed, in a read record */
    ucp_rvma_lease_read_t  reads[UCP_RVMA_LEASE_READS];
    unsigned               reads_head;
    unsigned               reads_tail;
    ucp_rvma_ring_t        *ring;     /* the target leased us this one: its
                                         acks ride on our records */
    uint64_t               req_id[UCP_RVMA_LEASE_INFLIGHT];
};


/* Bytes a record of length data bytes takes in a ring */
static UCS_F_ALWAYS_INLINE size_t ucp_rvma_rec_size(size_t length)
{
    return ucs_align_up_pow2(sizeof(ucp_rvma_rec_hdr_t) + length +
                             sizeof(uint64_t), UCP_RVMA_RING_ALIGN);
}

/* A record's last 8 bytes. Never 0, which is what the target leaves where a
 * trailer could be (ucp_rvma_ring_clear()). */
static UCS_F_ALWAYS_INLINE uint64_t ucp_rvma_rec_trailer(uint32_t seq,
                                                         size_t length)
{
    return UCS_BIT(63) | ((uint64_t)length << 32) | seq;
}


/* Acknowledgement owed by a ring: it waits a progress round for a record
 * going back to carry it */
typedef enum {
    UCP_RVMA_ACK_NONE,
    UCP_RVMA_ACK_OWED,     /* since this progress round */
    UCP_RVMA_ACK_OVERDUE   /* since the last one: send it */
} ucp_rvma_ack_state_t;


/* Target: a ring leased to the initiator of one endpoint */
struct ucp_rvma_ring {
    ucp_rvma_worker_t    *rw;
    uint16_t             id;
    ucp_ep_h             ep;             /* to the initiator, for the acks */
    uint64_t             initiator_ep;
    void                 *base;
    size_t               size;
    uct_md_h             md;
    uct_mem_h            memh;
    uint64_t             cons;           /* bytes consumed, skips included */
    uint64_t             acked_cons;
    uint32_t             seq;            /* records handled */
    uint32_t             notified;       /* notifications handled */
    uint32_t             acked_seq;
    uint8_t              n_err;
    ucp_rvma_ack_err_t   err[UCP_RVMA_ACK_MAX_ERR];
    ucp_rvma_lease_t     *lease;         /* our lease on the initiator's
                                            ring: our records carry its
                                            acks */
    int                  ack_in_records; /* they may */
    uint64_t             ack_msgs;       /* acks sent by message */
    uint64_t             ack_carried;    /* acks carried by our records */
    uint64_t             taken_polled;   /* records found by polling */
    uint64_t             taken_notified; /* records taken at completion */
    ucp_rvma_read_t      *read;          /* the record being read, which
                                            the records behind wait for */
    size_t               read_pos;       /* its place in the ring */
    size_t               read_rec_size;
    ucp_rvma_ack_state_t ack_owed;       /* not NONE: in rw->ack_list */
    ucs_list_link_t      list;
    unsigned dropped_reqs; /* lease requests dropped since */
};


static unsigned ucp_rvma_ring_progress(void *arg);


static const char *ucp_rvma_md_component_name(ucp_context_h context,
                                              ucp_md_index_t md_index)
{
    return context->tl_cmpts[context->tl_mds[md_index].cmpt_index].attr.name;
}


static ucp_rvma_lease_t *ucp_rvma_lease_find(ucp_rvma_worker_t *rw,
                                             ucp_ep_h ep)
{
    khiter_t iter = kh_get(ucp_rvma_lease, &rw->leases, (uintptr_t)ep);

    return (iter == kh_end(&rw->leases)) ? NULL :
                                           kh_value(&rw->leases, iter);
}


unsigned ucp_rvma_faults = 0;

void ucp_rvma_test_fault(unsigned faults)
{
    ucp_rvma_faults = faults;
}

unsigned ucp_rvma_test_num_rings(ucp_worker_h worker)
{
    ucp_rvma_worker_t *rw = worker->rvma;

    return (rw == NULL) ? 0 : rw->num_rings;
}

/* ---- target: rings and acknowledgements --------------------------------- */

/* The ring leased to the initiator of ep, if any (control path) */
static ucp_rvma_ring_t *ucp_rvma_ring_find(ucp_rvma_worker_t *rw, ucp_ep_h ep)
{
    unsigned id;

    for (id = 0; id < UCP_RVMA_MAX_RINGS; ++id) {
        if ((rw->rings[id] != NULL) && (rw->rings[id]->ep == ep)) {
            return rw->rings[id];
        }
    }

    return NULL;
}

/* Leave, in the space of a record taken, nothing that reads as a record:
 * on every UCP_RVMA_RING_ALIGN block (where a later record may start) a
 * length that does not fit in the ring and sequence number 2^32-1, and in
 * its last 8 bytes (where a later record may end) 0, which no trailer is.
 * A record's sequence number then matches only once its header has landed,
 * and its trailer only once the record has. */
static void ucp_rvma_ring_clear(ucp_rvma_ring_t *ring, size_t pos,
                                size_t rec_size)
{
    void *block = UCS_PTR_BYTE_OFFSET(ring->base, pos);
    void *end   = UCS_PTR_BYTE_OFFSET(block, rec_size);

    UCS_STATIC_ASSERT(ucs_offsetof(ucp_rvma_rec_hdr_t, seq) ==
                      (ucs_offsetof(ucp_rvma_rec_hdr_t, length) +
                       sizeof(uint32_t)));
    UCS_STATIC_ASSERT((ucs_offsetof(ucp_rvma_rec_hdr_t, length) %
                       sizeof(uint64_t)) == 0);
    for (; block < end; block = UCS_PTR_BYTE_OFFSET(block,
                                                    UCP_RVMA_RING_ALIGN)) {
        *(uint64_t*)UCS_PTR_BYTE_OFFSET(block,
                                        ucs_offsetof(ucp_rvma_rec_hdr_t,
                                                     length)) = UINT64_MAX;
        *(uint64_t*)UCS_PTR_BYTE_OFFSET(block, UCP_RVMA_RING_ALIGN -
                                               sizeof(uint64_t)) = 0;
    }
}

static void ucp_rvma_ring_destroy(ucp_rvma_ring_t *ring)
{
    ucp_rvma_worker_t *rw = ring->rw;

    ucs_debug("worker %p: RVMA ring %u of ep %p released", rw->worker,
              ring->id, ring->ep);
    if (ring->ack_owed != UCP_RVMA_ACK_NONE) {
        ucs_list_del(&ring->list);
    }
    if (ring->lease != NULL) {
        ring->lease->ring = NULL;
    }
    if (ring->read != NULL) {
        /* its completion, which destroying the endpoint brings, frees it */
        ring->read->ring = NULL;
    }
    uct_md_mem_dereg(ring->md, ring->memh);
    ucs_free(ring->base);
    rw->rings[ring->id] = NULL;
    ucs_free(ring);

    --rw->num_rings;
    if (rw->num_rings == 0) {
        uct_worker_progress_unregister_safe(rw->worker->uct, &rw->ring_cb_id);
    }
}

static ucs_status_t
ucp_rvma_ring_create(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                     const ucp_rvma_lease_req_hdr_t *req, uint8_t *rkey_buf,
                     size_t rkey_max, size_t *rkey_size_p,
                     ucp_rvma_ring_t **ring_p)
{
    ucp_context_h context = rw->worker->context;
    const ucp_tl_md_t *tl_md;
    ucp_rvma_ring_t *ring;
    ucs_status_t status;
    unsigned id;

    if (!rw->fast || (ep->am_lane == UCP_NULL_LANE)) {
        return UCS_ERR_UNSUPPORTED;
    }

    tl_md = &context->tl_mds[ucp_ep_md_index(ep, ep->am_lane)];
    if (!(tl_md->attr.cap.flags & UCT_MD_FLAG_REG) ||
        (tl_md->attr.rkey_packed_size > rkey_max) ||
        strncmp(ucp_rvma_md_component_name(context,
                                           ucp_ep_md_index(ep, ep->am_lane)),
                req->component, sizeof(req->component))) {
        return UCS_ERR_UNSUPPORTED;
    }

    for (id = 0; (id < UCP_RVMA_MAX_RINGS) && (rw->rings[id] != NULL); ++id) {
    }
    if (id == UCP_RVMA_MAX_RINGS) {
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    ring = ucs_calloc(1, sizeof(*ring), "rvma_ring");
    if (ring == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = ucs_posix_memalign(&ring->base, ucs_get_page_size(),
                                rw->ring_size, "rvma_ring_buf");
    if (status != UCS_OK) {
        goto err_free_ring;
    }

    /* no record anywhere yet */
    ring->size = rw->ring_size;
    ucp_rvma_ring_clear(ring, 0, ring->size);

    status = uct_md_mem_reg(tl_md->md, ring->base, rw->ring_size,
                            UCT_MD_MEM_ACCESS_REMOTE_PUT |
                            UCT_MD_MEM_ACCESS_LOCAL_WRITE,
                            &ring->memh);
    if (status != UCS_OK) {
        goto err_free_buf;
    }

    status = uct_md_mkey_pack(tl_md->md, ring->memh, rkey_buf);
    if (status != UCS_OK) {
        goto err_dereg;
    }

    ring->rw           = rw;
    ring->id           = id;
    ring->ep           = ep;
    ring->initiator_ep = req->initiator_ep;
    ring->md           = tl_md->md;
    rw->rings[id]      = ring;
    rw->rings_end      = ucs_max(rw->rings_end, id + 1);
    *rkey_size_p       = tl_md->attr.rkey_packed_size;
    *ring_p            = ring;
    ++rw->num_rings;
    if (rw->num_rings == 1) {
        uct_worker_progress_register_safe(rw->worker->uct,
                                          ucp_rvma_ring_progress, rw,
                                          UCS_CALLBACKQ_FLAG_FAST,
                                          &rw->ring_cb_id);
    }

    /* our lease on the initiator's ring, if we have one: our records will
     * carry this ring's acks */
    ring->ack_in_records = 1;
    ring->lease          = ucp_rvma_lease_find(rw, ep);
    if (ring->lease != NULL) {
        ring->lease->ring = ring;
    }
    ucs_debug("worker %p: RVMA ring %u of %zu bytes at %p leased to ep %p",
              rw->worker, id, ring->size, ring->base, ep);
    return UCS_OK;

err_dereg:
    uct_md_mem_dereg(tl_md->md, ring->memh);
err_free_buf:
    ucs_free(ring->base);
err_free_ring:
    ucs_free(ring);
    return status;
}

static ucs_status_t ucp_rvma_lease_req_handler(void *arg, const void *header,
                                               size_t header_length,
                                               void *data, size_t length,
                                               const ucp_am_recv_param_t *param)
{
    ucp_rvma_worker_t *rw                = arg;
    const ucp_rvma_lease_req_hdr_t *req  = header;
    ucp_rvma_ring_t *ring                = NULL;
    uint8_t rkey_buf[UCP_RVMA_CTL_MAX - sizeof(ucp_rvma_lease_hdr_t)];
    ucp_rvma_lease_hdr_t lease;
    size_t rkey_size = 0;
    ucs_log_level_t level;
    ucs_status_t status;
    ucp_ep_h ep;

    if (header_length != sizeof(*req)) {
        ucs_error("worker %p: malformed RVMA lease request (header %zu bytes) "
                  "dropped", rw->worker, header_length);
        return UCS_OK;
    }

    if (ucp_worker_get_ep_by_id(rw->worker, req->ep_id, &ep) != UCS_OK) {
        ucs_debug("worker %p: RVMA lease request from unknown endpoint id 0x%"
                  PRIx64 " dropped", rw->worker, req->ep_id);
        return UCS_OK;
    }

    /* one ring per initiator endpoint: asking again must not take (and pin)
     * every ring of the worker */
    ring = ucp_rvma_ring_find(rw, ep);
    if (ring != NULL) {
        /* told once per ring: the peer may ask as often as it likes */
        level = (ring->dropped_reqs++ == 0) ? UCS_LOG_LEVEL_ERROR :
                                              UCS_LOG_LEVEL_DEBUG;
        ucs_log(level,
                "worker %p: RVMA lease request from ep %p, which holds "
                "ring %u already, dropped",
                rw->worker, ep, ring->id);
        return UCS_OK;
    }

    lease.initiator_ep = req->initiator_ep;
    lease.ring_id      = UCP_RVMA_MAX_RINGS;
    lease.ring_addr    = 0;
    lease.ring_size    = 0;
    status = ucp_rvma_ring_create(rw, ep, req, rkey_buf, sizeof(rkey_buf),
                                  &rkey_size, &ring);
    if (status == UCS_OK) {
        lease.ring_id   = ring->id;
        lease.ring_addr = (uintptr_t)ring->base;
        lease.ring_size = ring->size;
    } else {
        ucs_debug("worker %p: no RVMA ring for ep %p: %s", rw->worker, ep,
                  ucs_status_string(status));
    }

    if ((ring != NULL) && (ucp_rvma_faults & UCP_RVMA_FAULT_LEASE_NO_RKEY)) {
        ucp_rvma_faults &= ~UCP_RVMA_FAULT_LEASE_NO_RKEY;
        rkey_size = 0; /* test only */
    }
    status = ucp_rvma_worker_send_ctl(rw, ep, UCP_RVMA_AM_LEASE, &lease,
                                      sizeof(lease), rkey_buf, rkey_size);
    if (UCS_STATUS_IS_ERR(status) && (ring != NULL)) {
        ucs_debug("worker %p: RVMA lease reply to ep %p failed: %s",
                  rw->worker, ep, ucs_status_string(status));
        ucp_rvma_ring_destroy(ring);
    }
    return UCS_OK;
}

/* The initiator has been told everything up to now */
static void ucp_rvma_ring_acked(ucp_rvma_ring_t *ring)
{
    ring->acked_cons = ring->cons;
    ring->acked_seq  = ring->seq;
    ring->n_err      = 0;
    if (ring->ack_owed != UCP_RVMA_ACK_NONE) {
        ring->ack_owed = UCP_RVMA_ACK_NONE;
        ucs_list_del(&ring->list);
    }
}

/* Send the ring's owed acknowledgement; on UCS_ERR_NO_MEMORY it stays owed */
static ucs_status_t ucp_rvma_ring_ack(ucp_rvma_ring_t *ring)
{
    ucp_rvma_ack_hdr_t ack;
    ucs_status_t status;

    ack.initiator_ep = ring->initiator_ep;
    ack.cons         = ring->cons;
    ack.seq          = ring->seq;
    ack.n_err        = ring->n_err;
    memcpy(ack.err, ring->err, ring->n_err * sizeof(ring->err[0]));
    status = ucp_rvma_worker_send_ctl(ring->rw, ring->ep, UCP_RVMA_AM_ACK,
                                      &ack,
                                      ucs_offsetof(ucp_rvma_ack_hdr_t, err) +
                                      (ring->n_err * sizeof(ring->err[0])),
                                      NULL, 0);
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
                      "on", ring->rw->worker, ring->id);
            ring->ack_in_records = 0;
        }
    }

    ucp_rvma_ring_acked(ring);
    return UCS_OK;
}

static unsigned ucp_rvma_ack_progress(ucp_rvma_worker_t *rw)
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
static void ucp_rvma_ring_ack_owed(ucp_rvma_ring_t *ring)
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
                         UCP_RVMA_ACK_OWED : UCP_RVMA_ACK_OVERDUE;
        ucs_list_add_tail(&rw->ack_list, &ring->list);
    }
}

static void ucp_rvma_lease_ack(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                               ucp_rvma_lease_t *lease, uint64_t cons,
                               uint32_t seq, unsigned n_err,
                               const ucp_rvma_ack_err_t *err);

/* The record at pos if it is the next one and has landed whole: its header
 * names it, and its trailer, written last, is there. Its length and
 * sequence number are read in one load, and the length is returned: the
 * header may be landing while it is read. */
static const ucp_rvma_rec_hdr_t *
ucp_rvma_ring_landed(const ucp_rvma_ring_t *ring, size_t pos,
                     uint32_t *length_p)
{
    const void *rec = UCS_PTR_BYTE_OFFSET(ring->base, pos);
    const volatile uint64_t *trailer;
    struct {
        uint32_t length;
        uint32_t seq;
    } ls;
    size_t rec_size;
    uint64_t word;

    word = *(const volatile uint64_t*)
                   UCS_PTR_BYTE_OFFSET(rec, ucs_offsetof(ucp_rvma_rec_hdr_t,
                                                         length));
    memcpy(&ls, &word, sizeof(ls));
    if (ls.seq != ring->seq) {
        return NULL;
    }

    rec_size = ucp_rvma_rec_size(ls.length & ~UCP_RVMA_REC_LENGTH_READ);
    if ((pos + rec_size) > ring->size) {
        return NULL;
    }

    trailer = UCS_PTR_BYTE_OFFSET(ring->base,
                                  pos + rec_size - sizeof(*trailer));
    if (*trailer != ucp_rvma_rec_trailer(ls.seq, ls.length)) {
        return NULL;
    }

    ucs_memory_cpu_load_fence();
    *length_p = ls.length;
    return rec;
}

/* The record at pos, rec_size bytes of the ring, has its verdict: give its
 * space back and note the verdict for the ack */
static void ucp_rvma_ring_taken(ucp_rvma_ring_t *ring, size_t pos,
                                size_t rec_size, ucs_status_t status)
{
    ucp_rvma_worker_t *rw = ring->rw;

    ring->cons += rec_size;
    if (rw->ring_poll) {
        /* before any ack gives the space back */
        ucp_rvma_ring_clear(ring, pos, rec_size);
    }

    if ((status != UCS_OK) && (ring->n_err == UCP_RVMA_ACK_MAX_ERR) &&
        (ucp_rvma_ring_ack(ring) != UCS_OK)) {
        /* no memory for an ack: the initiator sees this put succeed */
        ucs_error("worker %p: RVMA ring %u: verdict %s of record %u lost",
                  rw->worker, ring->id, ucs_status_string(status), ring->seq);
    } else if (status != UCS_OK) {
        ring->err[ring->n_err].seq    = ring->seq;
        ring->err[ring->n_err].status = status;
        ++ring->n_err;
    }

    ++ring->seq;
    ucp_rvma_ring_ack_owed(ring);
}

void ucp_rvma_ring_read_done(ucp_rvma_ring_t *ring, ucs_status_t status)
{
    ring->read = NULL;
    ucp_rvma_ring_taken(ring, ring->read_pos, ring->read_rec_size, status);
}

/* Take the next record, which landed whole at pos with length (its header's
 * length word): place its data or start reading it, and take the ack of our
 * own puts it may carry */
static void ucp_rvma_ring_take(ucp_rvma_ring_t *ring, size_t pos,
                               const ucp_rvma_rec_hdr_t *rec, uint32_t length)
{
    ucp_rvma_worker_t *rw = ring->rw;
    size_t body_length    = length & ~UCP_RVMA_REC_LENGTH_READ;
    size_t rec_size       = ucp_rvma_rec_size(body_length);
    int has_ack           = rec->flags & UCP_RVMA_REC_FLAG_ACK;
    uint64_t ack_cons     = rec->ack_cons;
    uint32_t ack_seq      = rec->ack_seq;
    ucp_rvma_lease_t *lease;
    ucp_rvma_read_t *read;
    ucs_status_t status;
    size_t cons_pos;

    /* a position behind ours: the initiator skipped the end of the ring */
    cons_pos    = ring->cons % ring->size;
    ring->cons += (pos >= cons_pos) ? (pos - cons_pos) :
                                      (ring->size - cons_pos + pos);

    if (length & UCP_RVMA_REC_LENGTH_READ) {
        status = ucp_rvma_read_start(rw, ring, ring->ep, rec, body_length,
                                     &read);
        if (status == UCS_INPROGRESS) {
            ring->read          = read;
            ring->read_pos      = pos;
            ring->read_rec_size = rec_size;
        } else {
            ucp_rvma_ring_taken(ring, pos, rec_size, status);
        }
    } else {
        status = ucp_rvma_target_place(rw, rec->vaddr, rec->offset, rec + 1,
                                       length);
        ucp_rvma_ring_taken(ring, pos, rec_size, status);
    }

    /* last: completing our requests may close the endpoint, and free the
     * ring with the lease */
    lease = ring->lease;
    if (has_ack && (lease != NULL) && (lease->state == UCP_RVMA_LEASE_READY)) {
        ucp_rvma_lease_ack(rw, ring->ep, lease, ack_cons, ack_seq, 0, NULL);
    }
}

/* Take the records of ring id that have landed whole, in order, up to one
 * being read; at a notification (a write's completion) or not. Without
 * UCX_HCR_RVMA_RING_POLL, only the records notified so far. */
static unsigned ucp_rvma_ring_poll(ucp_rvma_worker_t *rw, unsigned id,
                                   int notified)
{
    const ucp_rvma_rec_hdr_t *rec;
    ucp_rvma_ring_t *ring;
    unsigned count = 0;
    uint32_t length;
    size_t pos;

    while (((ring = rw->rings[id]) != NULL) && (ring->read == NULL) &&
           (rw->ring_poll || (ring->seq != ring->notified))) {
        /* where the last record ended, or at 0 after a skip */
        pos = ring->cons % ring->size;
        rec = ucp_rvma_ring_landed(ring, pos, &length);
        if ((rec == NULL) && (pos != 0)) {
            pos = 0;
            rec = ucp_rvma_ring_landed(ring, pos, &length);
        }
        if (rec == NULL) {
            break;
        }

        if (notified) {
            ++ring->taken_notified;
        } else {
            ++ring->taken_polled;
        }

        /* may free the ring */
        ucp_rvma_ring_take(ring, pos, rec, length);
        ++count;
    }

    return count;
}

/* Registered while this worker has rings: finds their records (without
 * RING_POLL, those notified while a read held the ring), issues the reads
 * that found no transport resources, and sends the acks owed since the last
 * round */
static unsigned ucp_rvma_ring_progress(void *arg)
{
    ucp_rvma_worker_t *rw = arg;
    unsigned count        = 0;
    ucp_rvma_ring_t *ring;
    ucs_status_t status;
    unsigned id;

    for (id = 0; id < rw->rings_end; ++id) {
        ring = rw->rings[id];
        if (ring == NULL) {
            continue;
        } else if (ring->read == NULL) {
            count += ucp_rvma_ring_poll(rw, id, 0);
        } else if (ring->read->issued < ring->read->length) {
            status = ucp_rvma_read_progress(ring->read);
            if (status != UCS_INPROGRESS) {
                ucp_rvma_ring_read_done(ring, status);
                ++count;
            }
        }
    }

    return count + ucp_rvma_ack_progress(rw);
}

/* A record landed in a ring: the notification of its write-with-immediate */
static ucs_status_t
ucp_rvma_notify_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker            = arg;
    ucp_rvma_worker_t *rw          = worker->rvma;
    const uct_put_notify_hdr_t *nh = data;
    ucp_rvma_ring_t *ring;
    unsigned id;
    uint32_t seq;
    size_t pos;

    if ((rw == NULL) || (length < sizeof(*nh))) {
        ucs_debug("worker %p: RVMA notification without rings dropped",
                  worker);
        return UCS_OK;
    }

    id   = nh->notify_data >> UCP_RVMA_RING_POS_BITS;
    pos  = (size_t)(nh->notify_data & UCS_MASK(UCP_RVMA_RING_POS_BITS)) *
           UCP_RVMA_RING_ALIGN;
    ring = (id < UCP_RVMA_MAX_RINGS) ? rw->rings[id] : NULL;
    if ((ring == NULL) || (nh->length < sizeof(ucp_rvma_rec_hdr_t)) ||
        ((pos + nh->length) > ring->size)) {
        ucs_debug("worker %p: RVMA notification 0x%x length %u for no ring "
                  "dropped", worker, nh->notify_data, nh->length);
        return UCS_OK;
    }

    /* each record has one notification, in order: this one says that record
     * number seq, and all before it, landed whole; take them, unless polling
     * did already or a read holds the ring */
    seq = ring->notified++;
    ucp_rvma_ring_poll(rw, id, 1);
    ring = rw->rings[id];
    if ((ring != NULL) && (ring->read == NULL) &&
        !UCS_CIRCULAR_COMPARE32(seq, <, ring->seq)) {
        ucs_error("worker %p: RVMA ring %u: record %u landed but does not "
                  "read as one", worker, id, seq);
        ring->notified = ring->seq; /* the next one names the next */
    }
    return UCS_OK;
}


/* ---- initiator: leases and puts ----------------------------------------- */

/* The lease of the endpoint a control message names by its id, if it is in
 * the state the message expects */
static ucp_rvma_lease_t *
ucp_rvma_lease_by_id(ucp_rvma_worker_t *rw, uint64_t ep_id,
                     ucp_rvma_lease_state_t state, ucp_ep_h *ep_p)
{
    ucp_rvma_lease_t *lease;

    if (ucp_worker_get_ep_by_id(rw->worker, ep_id, ep_p) != UCS_OK) {
        return NULL;
    }

    lease = ucp_rvma_lease_find(rw, *ep_p);
    return ((lease != NULL) && (lease->state == state)) ? lease : NULL;
}

/* Deregister the buffers of the read records the target is done with:
 * those before record seq */
static void ucp_rvma_lease_release_reads(ucp_rvma_lease_t *lease,
                                         uint32_t seq)
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

static void ucp_rvma_lease_free(ucp_rvma_lease_t *lease)
{
    ucp_rvma_lease_release_reads(lease, lease->seq);
    if (lease->ring != NULL) {
        lease->ring->lease = NULL;
    }
    if (lease->state == UCP_RVMA_LEASE_READY) {
        uct_rkey_release(lease->component, &lease->rkey);
        uct_md_mem_dereg(lease->md, lease->memh);
        ucs_free(lease->staging);
    }
    ucs_free(lease);
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

    md_index         = ucp_ep_md_index(ep, ep->am_lane);
    lease->state     = UCP_RVMA_LEASE_REFUSED;
    lease->uct_ep    = uct_ep;
    lease->md        = context->tl_mds[md_index].md;
    lease->component =
            context->tl_cmpts[context->tl_mds[md_index].cmpt_index].cmpt;
    lease->rkey_size = context->tl_mds[md_index].attr.rkey_packed_size;
    /* the target reads with the same transport, so as this one could */
    iface_attr       = ucp_ep_get_iface_attr(ep, ep->am_lane);
    lease->read_min  = ucs_max(rw->fast_max + 1, iface_attr->cap.get.min_zcopy);
    lease->read_max  = (iface_attr->cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) ?
                       rw->read_max : 0;
    if (!rw->fast || !uct_iface_is_put_notify_supported(uct_ep->iface) ||
        !(context->tl_mds[md_index].attr.cap.flags & UCT_MD_FLAG_REG)) {
        return;
    }

    req.ep_id        = ucp_ep_remote_id(ep);
    req.initiator_ep = ucp_ep_local_id(ep);
    ucs_strncpy_zero(req.component,
                     ucp_rvma_md_component_name(context, md_index),
                     sizeof(req.component));
    status = ucp_rvma_worker_send_ctl(rw, ep, UCP_RVMA_AM_LEASE_REQ, &req,
                                      sizeof(req), NULL, 0);
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
    return UCS_OK;

err_free:
    ucs_free(lease->staging);
err_rkey:
    uct_rkey_release(lease->component, &lease->rkey);
    return status;
}

static ucs_status_t ucp_rvma_lease_handler(void *arg, const void *header,
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

/* The target handled our records up to seq and consumed its ring up to cons;
 * the listed ones failed. Acks come by message and in records, which can
 * overtake a message held by UCP: an ack behind the last one is stale. */
static void ucp_rvma_lease_ack(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                               ucp_rvma_lease_t *lease, uint64_t cons,
                               uint32_t seq, unsigned n_err,
                               const ucp_rvma_ack_err_t *err)
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
        ucs_error("ep %p: RVMA ack of record %u, ring %" PRIu64 " is out of "
                  "range (records %u..%u, ring %" PRIu64 "..%" PRIu64 "), "
                  "dropped", ep, seq, cons, lease->acked_seq, lease->seq,
                  lease->tail, lease->head);
        return;
    }

    /* take everything from the lease first: a completion callback may put
     * again, or close the endpoint and so free the lease */
    for (i = 0, e = 0; i < count; ++i) {
        req_id[i] = lease->req_id[(lease->acked_seq + i) %
                                  UCP_RVMA_LEASE_INFLIGHT];
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

static ucs_status_t ucp_rvma_ack_handler(void *arg, const void *header,
                                         size_t header_length, void *data,
                                         size_t length,
                                         const ucp_am_recv_param_t *param)
{
    ucp_rvma_worker_t *rw         = arg;
    const ucp_rvma_ack_hdr_t *ack = header;
    ucp_rvma_lease_t *lease;
    ucp_ep_h ep;

    if ((header_length < ucs_offsetof(ucp_rvma_ack_hdr_t, err)) ||
        (ack->n_err > UCP_RVMA_ACK_MAX_ERR) ||
        (header_length != (ucs_offsetof(ucp_rvma_ack_hdr_t, err) +
                           (ack->n_err * sizeof(ack->err[0]))))) {
        ucs_error("worker %p: malformed RVMA ack (header %zu bytes) dropped",
                  rw->worker, header_length);
        return UCS_OK;
    }

    lease = ucp_rvma_lease_by_id(rw, ack->initiator_ep, UCP_RVMA_LEASE_READY,
                                 &ep);
    if (lease == NULL) {
        ucs_debug("worker %p: RVMA ack for no lease dropped", rw->worker);
        return UCS_OK;
    }

    ucp_rvma_lease_ack(rw, ep, lease, ack->cons, ack->seq, ack->n_err,
                       ack->err);
    return UCS_OK;
}

ucs_status_t ucp_rvma_fast_put(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                               uint64_t req_id, uint64_t vaddr,
                               uint64_t offset, const void *buffer,
                               size_t length)
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
        pos   = 0;
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
        ring          = NULL; /* its failures go by message */
        rec->flags    = 0;
    }
    *(uint64_t*)UCS_PTR_BYTE_OFFSET(rec, rec_size - sizeof(uint64_t)) =
            ucp_rvma_rec_trailer(rec->seq, rec->length);

    iov.buffer = rec;
    iov.length = rec_size;
    iov.memh   = lease->memh;
    iov.stride = 0;
    iov.count  = 1;
    notify     = ((uint32_t)lease->ring_id << UCP_RVMA_RING_POS_BITS) |
                 (pos / UCP_RVMA_RING_ALIGN);
    status     = uct_ep_put_notify_zcopy(lease->uct_ep, &iov, 1,
                                         lease->raddr + pos,
                                         lease->rkey.rkey,
                                         UCP_AM_ID_RVMA_NOTIFY, notify, NULL);
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
        lease->reads[lease->reads_head % UCP_RVMA_LEASE_READS].seq  =
                lease->seq;
        lease->reads[lease->reads_head % UCP_RVMA_LEASE_READS].memh =
                read_memh;
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
                  " in ring %u at %zu%s", ep, rec->seq, length, vaddr, offset,
                  lease->ring_id, pos, read ? " (read)" : "");
    return UCS_OK;
}


ucs_status_t ucp_rvma_ep_query(ucp_ep_h ep, ucp_rvma_ep_attr_t *attr)
{
    ucp_worker_h worker     = ep->worker;
    ucp_rvma_lease_t *lease = NULL;
    ucp_rvma_ring_t *ring   = NULL;

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);
    if (worker->rvma != NULL) {
        lease = ucp_rvma_lease_find(worker->rvma, ep);
        ring  = ucp_rvma_ring_find(worker->rvma, ep);
    }

    if (attr->field_mask & UCP_RVMA_EP_ATTR_FIELD_FAST) {
        attr->fast = (lease != NULL) &&
                     (lease->state == UCP_RVMA_LEASE_READY);
    }
    if (attr->field_mask & UCP_RVMA_EP_ATTR_FIELD_FAST_PUTS) {
        attr->fast_puts = (lease != NULL) ? lease->puts : 0;
    }
    if (attr->field_mask & UCP_RVMA_EP_ATTR_FIELD_ACKS) {
        attr->ack_msgs    = (ring != NULL) ? ring->ack_msgs : 0;
        attr->ack_carried = (ring != NULL) ? ring->ack_carried : 0;
    }
    if (attr->field_mask & UCP_RVMA_EP_ATTR_FIELD_TAKEN) {
        attr->taken_polled   = (ring != NULL) ? ring->taken_polled : 0;
        attr->taken_notified = (ring != NULL) ? ring->taken_notified : 0;
    }
    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);
    return UCS_OK;
}


/* ---- life cycle --------------------------------------------------------- */

ucs_status_t ucp_rvma_fast_init(ucp_rvma_worker_t *rw)
{
    static const struct {
        unsigned               id;
        ucp_am_recv_callback_t cb;
    } handlers[] = {
        {UCP_RVMA_AM_LEASE_REQ, ucp_rvma_lease_req_handler},
        {UCP_RVMA_AM_LEASE, ucp_rvma_lease_handler},
        {UCP_RVMA_AM_ACK, ucp_rvma_ack_handler}
    };
    ucs_status_t status;
    unsigned i;

    kh_init_inplace(ucp_rvma_lease, &rw->leases);
    ucs_list_head_init(&rw->ack_list);
    rw->ring_cb_id = UCS_CALLBACKQ_ID_NULL;

    for (i = 0; i < ucs_static_array_size(handlers); ++i) {
        status = ucp_rvma_worker_set_handler(rw, handlers[i].id,
                                             handlers[i].cb);
        if (status != UCS_OK) {
            kh_destroy_inplace(ucp_rvma_lease, &rw->leases);
            return status;
        }
    }

    return UCS_OK;
}

void ucp_rvma_fast_cleanup(ucp_rvma_worker_t *rw)
{
    ucp_rvma_lease_t *lease;
    unsigned id;

    for (id = 0; id < UCP_RVMA_MAX_RINGS; ++id) {
        if (rw->rings[id] != NULL) {
            ucp_rvma_ring_destroy(rw->rings[id]);
        }
    }

    kh_foreach_value(&rw->leases, lease, {
        ucp_rvma_lease_free(lease);
    })
    kh_destroy_inplace(ucp_rvma_lease, &rw->leases);
}

void ucp_rvma_ep_cleanup(ucp_ep_h ep)
{
    ucp_rvma_worker_t *rw = ep->worker->rvma;
    khiter_t iter;
    unsigned id;

    if (rw == NULL) {
        return;
    }

    iter = kh_get(ucp_rvma_lease, &rw->leases, (uintptr_t)ep);
    if (iter != kh_end(&rw->leases)) {
        ucp_rvma_lease_free(kh_value(&rw->leases, iter));
        kh_del(ucp_rvma_lease, &rw->leases, iter);
    }

    /* the connection is gone: nothing more can land in its ring */
    for (id = 0; id < UCP_RVMA_MAX_RINGS; ++id) {
        if ((rw->rings[id] != NULL) && (rw->rings[id]->ep == ep)) {
            ucp_rvma_ring_destroy(rw->rings[id]);
        }
    }
}

UCP_DEFINE_AM(UCP_FEATURE_AM, UCP_AM_ID_RVMA_NOTIFY, ucp_rvma_notify_handler,
              NULL, 0);
