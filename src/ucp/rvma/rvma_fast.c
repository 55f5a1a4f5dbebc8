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
 * (UCX_RVMA_RING_POLL): a record's trailer, its last 8 bytes, lands last
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
 * A put larger than UCX_RVMA_FAST_MAX, and of up to
 * UCX_RVMA_READ_MAX bytes, is a record that names the initiator's
 * buffer instead of holding the data, and the target reads the data from
 * there (rvma_read.c).
 *
 * Whatever the fast path cannot take (no lease yet, a ring or the window of
 * unacknowledged records full, larger than both limits, a buffer that cannot
 * be registered, transport resources busy) takes the active message path.
 * The two paths need no order between them: RVMA counts puts in any order.
 *
 * This is the whole picture; each part is in a file of its own, with its
 * part of the picture at the top:
 *  - rvma_lease.c  initiator: the lease of a ring, and the fast put;
 *  - rvma_ring.c   target: the leased rings, and the records that land in
 *                  them;
 *  - rvma_ack.c    acknowledging the records in batches;
 *  - rvma_read.c   puts too large to copy, which the target reads.
 * This file holds what ties them together: the fast path's life cycle on a
 * worker and an endpoint, ucp_rvma_ep_query() and the test harness's ring
 * count.
 */


const char *
ucp_rvma_md_component_name(ucp_context_h context, ucp_md_index_t md_index)
{
    return context->tl_cmpts[context->tl_mds[md_index].cmpt_index].attr.name;
}


unsigned ucp_rvma_test_num_rings(ucp_worker_h worker)
{
    ucp_rvma_worker_t *rw = worker->rvma;

    return (rw == NULL) ? 0 : rw->num_rings;
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

    ucp_rvma_worker_ep_forget(rw, ep);
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
