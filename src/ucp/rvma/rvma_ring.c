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
 * Target side of the fast path (the whole picture: rvma_fast.c): the rings
 * this worker leases to initiators, one per initiator endpoint, and the
 * records that land in them.
 *
 *   initiator                                 target
 *   lease request (AM)      ---------->       allocates, registers a ring
 *                           <----------       its address, rkey and id (AM)
 *   ONE RDMA_WRITE_WITH_IMM ----------->      progress polls the ring for the
 *     (immediate: ring id, position)          next record's trailer (or takes
 *                                             the receive completion): look
 *                                             up the window, copy into the
 *                                             posted buffer (or read the
 *                                             data, rvma_read.c), count,
 *                                             complete; the verdict goes to
 *                                             the ack (rvma_ack.c)
 *
 * A record's trailer, its last 8 bytes, lands last and holds its sequence
 * number and length, and the target clears the header and trailer words of
 * the ring space it takes back (ucp_rvma_ring_clear()): polling finds a
 * record only once it has landed whole, without waiting for the write's
 * receive completion (UCX_RVMA_RING_POLL). Records of one ring arrive in
 * order (one RC QP) and are taken in order: a record that does not fit
 * before the end of the ring starts again at 0, and the target, seeing a
 * position behind its own, knows the rest was skipped.
 *
 * A ring belongs to the worker, not to a window: every record names its
 * window, which the target checks on arrival as it does an active
 * message's, so a ring per window would pin memory per window and cost a
 * lease round trip before the first put to each new window, and keep no
 * peer from anything. An endpoint gets one ring, however often it asks, and
 * the worker at most UCX_RVMA_MAX_RINGS; an initiator refused one puts by
 * active message.
 */


static unsigned ucp_rvma_ring_progress(void *arg);


/* The ring leased to the initiator of ep, if any (control path) */
ucp_rvma_ring_t *ucp_rvma_ring_find(ucp_rvma_worker_t *rw, ucp_ep_h ep)
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
static void
ucp_rvma_ring_clear(ucp_rvma_ring_t *ring, size_t pos, size_t rec_size)
{
    void *block = UCS_PTR_BYTE_OFFSET(ring->base, pos);
    void *end   = UCS_PTR_BYTE_OFFSET(block, rec_size);

    UCS_STATIC_ASSERT(
            ucs_offsetof(ucp_rvma_rec_hdr_t, seq) ==
            (ucs_offsetof(ucp_rvma_rec_hdr_t, length) + sizeof(uint32_t)));
    UCS_STATIC_ASSERT(
            (ucs_offsetof(ucp_rvma_rec_hdr_t, length) % sizeof(uint64_t)) == 0);
    for (; block < end;
         block = UCS_PTR_BYTE_OFFSET(block, UCP_RVMA_RING_ALIGN)) {
        *(uint64_t *)UCS_PTR_BYTE_OFFSET(block,
                                         ucs_offsetof(ucp_rvma_rec_hdr_t,
                                                      length)) = UINT64_MAX;
        *(uint64_t *)UCS_PTR_BYTE_OFFSET(block, UCP_RVMA_RING_ALIGN -
                                                        sizeof(uint64_t)) = 0;
    }
}

void ucp_rvma_ring_destroy(ucp_rvma_ring_t *ring)
{
    ucp_rvma_worker_t *rw = ring->rw;

    ucs_debug("worker %p: RVMA ring %u of ep %p released", rw->worker, ring->id,
              ring->ep);
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

static ucs_status_t ucp_rvma_ring_create(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                                         const ucp_rvma_lease_req_hdr_t *req,
                                         uint8_t *rkey_buf, size_t rkey_max,
                                         size_t *rkey_size_p,
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

    if (rw->num_rings >= rw->max_rings) {
        return UCS_ERR_EXCEEDS_LIMIT;
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

    status = ucs_posix_memalign(&ring->base, ucs_get_page_size(), rw->ring_size,
                                "rvma_ring_buf");
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

ucs_status_t ucp_rvma_lease_req_handler(void *arg, const void *header,
                                        size_t header_length, void *data,
                                        size_t length,
                                        const ucp_am_recv_param_t *param)
{
    ucp_rvma_worker_t *rw               = arg;
    const ucp_rvma_lease_req_hdr_t *req = header;
    ucp_rvma_ring_t *ring               = NULL;
    uint8_t rkey_buf[UCP_RVMA_CTL_MAX - sizeof(ucp_rvma_lease_hdr_t)];
    ucp_rvma_lease_hdr_t lease;
    size_t rkey_size = 0;
    ucs_log_level_t level;
    ucs_status_t status;
    ucp_ep_h ep;

    if ((header_length != sizeof(*req)) || (length != 0)) {
        ucs_error("worker %p: malformed RVMA lease request (header %zu bytes, "
                  "data %zu) dropped",
                  rw->worker, header_length, length);
        return UCS_OK;
    }

    if (ucp_rvma_worker_ep_by_id(rw, req->ep_id, &ep) != UCS_OK) {
        ucs_debug("worker %p: RVMA lease request from unknown endpoint id "
                  "0x%" PRIx64 " dropped",
                  rw->worker, req->ep_id);
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
    } else if (status == UCS_ERR_EXCEEDS_LIMIT) {
        ucs_debug("worker %p: RVMA leases all its %u rings "
                  "(UCX_RVMA_MAX_RINGS): the puts of ep %p go by active "
                  "message",
                  rw->worker, rw->max_rings, ep);
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
        ucs_debug("worker %p: RVMA lease reply to ep %p failed: %s", rw->worker,
                  ep, ucs_status_string(status));
        ucp_rvma_ring_destroy(ring);
    }
    return UCS_OK;
}

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

    word = *(const volatile uint64_t *)UCS_PTR_BYTE_OFFSET(
            rec, ucs_offsetof(ucp_rvma_rec_hdr_t, length));
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
    cons_pos = ring->cons % ring->size;
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
 * UCX_RVMA_RING_POLL, only the records notified so far. */
static unsigned
ucp_rvma_ring_poll(ucp_rvma_worker_t *rw, unsigned id, int notified)
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

    if (length < sizeof(*nh)) {
        ucs_error("worker %p: malformed RVMA notification (%zu bytes) dropped",
                  worker, length);
        return UCS_OK;
    } else if (rw == NULL) {
        ucs_debug("worker %p: RVMA notification without rings dropped", worker);
        return UCS_OK;
    }

    id  = nh->notify_data >> UCP_RVMA_RING_POS_BITS;
    pos = (size_t)(nh->notify_data & UCS_MASK(UCP_RVMA_RING_POS_BITS)) *
          UCP_RVMA_RING_ALIGN;
    ring = (id < UCP_RVMA_MAX_RINGS) ? rw->rings[id] : NULL;
    if ((ring == NULL) || (nh->length < sizeof(ucp_rvma_rec_hdr_t)) ||
        ((pos + nh->length) > ring->size)) {
        ucs_debug("worker %p: RVMA notification 0x%x length %u for no ring "
                  "dropped",
                  worker, nh->notify_data, nh->length);
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
                  "read as one",
                  worker, id, seq);
        ring->notified = ring->seq; /* the next one names the next */
    }
    return UCS_OK;
}

UCP_DEFINE_AM(UCP_FEATURE_AM, UCP_AM_ID_RVMA_NOTIFY, ucp_rvma_notify_handler,
              NULL, 0);