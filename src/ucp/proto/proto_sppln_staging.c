/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "proto_sppln.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_mm.h>
#include <ucp/core/ucp_request.inl>
#include <ucs/datastruct/queue.h>


unsigned ucp_sppln_faults = 0;

void ucp_proto_sppln_test_fault(unsigned faults)
{
    ucp_sppln_faults = faults;
}

int ucp_sppln_rkey_buf_valid(const void *buffer, size_t length)
{
    const uint8_t *p   = buffer;
    const uint8_t *end = p + length;
    ucp_md_map_t md_map;
    unsigned md_index;

    /* md map, memory type, then a size byte and a key per md of the map */
    if (length < sizeof(md_map) + 1) {
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

/*
 * The staging regions of a worker: one for sending and one for receiving,
 * each GROUPS x 3 slots, allocated and registered on every memory domain
 * once, when the worker first stages a message. A transfer holds one group
 * (three slots: triple buffering) on each side for its lifetime.
 */

static ucs_status_t ucp_sppln_region_alloc(ucp_worker_h worker,
                                           ucp_sppln_worker_t *sw, int side)
{
    ucp_mem_map_params_t params;
    ucs_status_t status;

    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.length     = sw->groups * UCP_SPPLN_NUM_SLOTS * sw->slot_size;
    params.flags      = UCP_MEM_MAP_ALLOCATE;

    status = ucp_mem_map(worker->context, &params, &sw->memh[side]);
    if (status != UCS_OK) {
        ucs_error("rndv/sppln: could not allocate and register %zu bytes of "
                  "staging memory: %s", params.length,
                  ucs_status_string(status));
        return status;
    }

    sw->base[side] = ucp_memh_address(sw->memh[side]);
    return UCS_OK;
}

ucs_status_t ucp_sppln_worker_state(ucp_worker_h worker,
                                    ucp_sppln_worker_t **sw_p)
{
    const ucp_sppln_config_t *cfg = ucp_sppln_config();
    ucp_sppln_worker_t *sw;
    int side;

    if (ucs_likely(worker->sppln != NULL)) {
        *sw_p = worker->sppln;
        return UCS_OK;
    }

    sw = ucs_calloc(1, sizeof(*sw), "sppln_worker");
    if (sw == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    sw->slot_size  = cfg->slot_size;
    sw->groups     = cfg->groups;
    sw->fresh_copy = cfg->fresh_copy;
    for (side = UCP_SPPLN_SIDE_SEND; side <= UCP_SPPLN_SIDE_RECV; ++side) {
        ucs_queue_head_init(&sw->waitq[side]);
        sw->free_groups[side] = UCS_MASK(sw->groups);
    }

    ucp_sppln_staged_track(sw);
    worker->sppln = sw;
    *sw_p         = sw;
    return UCS_OK;
}

ucs_status_t ucp_sppln_worker_get(ucp_worker_h worker,
                                  ucp_sppln_worker_t **sw_p)
{
    ucp_sppln_worker_t *sw;
    ucs_status_t status;
    int side;

    status = ucp_sppln_worker_state(worker, &sw);
    if (status != UCS_OK) {
        return status;
    } else if (ucs_likely(sw->rkey_buf != NULL)) {
        *sw_p = sw; /* the staging regions are there */
        return UCS_OK;
    }

    for (side = UCP_SPPLN_SIDE_SEND; side <= UCP_SPPLN_SIDE_RECV; ++side) {
        status = ucp_sppln_region_alloc(worker, sw, side);
        if (status != UCS_OK) {
            goto err;
        }
    }

    status = ucp_rkey_pack(worker->context, sw->memh[UCP_SPPLN_SIDE_RECV],
                           &sw->rkey_buf, &sw->rkey_size);
    if (status != UCS_OK) {
        ucs_error("rndv/sppln: could not pack the staging rkey: %s",
                  ucs_status_string(status));
        goto err;
    }

    ucs_debug("worker %p: rndv/sppln staging %u groups x %d x %zu bytes, "
              "send %p recv %p", worker, sw->groups, UCP_SPPLN_NUM_SLOTS,
              sw->slot_size, sw->base[0], sw->base[1]);
    *sw_p = sw;
    return UCS_OK;

err:
    /* the state stays, without staging: a later transfer tries again */
    for (side = UCP_SPPLN_SIDE_SEND; side <= UCP_SPPLN_SIDE_RECV; ++side) {
        if (sw->memh[side] != NULL) {
            ucp_mem_unmap(worker->context, sw->memh[side]);
            sw->memh[side] = NULL;
        }
    }
    sw->rkey_buf = NULL;
    return status;
}

/* The worker's copy engine, created when a transfer first wants one; one
 * per worker, so the first backend asked for is the one used */
ucs_copy_engine_t *ucp_sppln_copy_engine(ucp_sppln_worker_t *sw,
                                         const ucp_sppln_priv_t *spriv)
{
    ucs_copy_engine_params_t params;
    ucs_status_t status;

    if (!spriv->copy_async) {
        return NULL;
    } else if ((sw->copy_engine != NULL) || sw->copy_engine_failed) {
        return sw->copy_engine;
    }

    params.backend = spriv->copy_backend;
    params.flags   = 0;
    params.name    = "sppln";
    status         = ucs_copy_engine_create(&params, &sw->copy_engine);
    if (status != UCS_OK) {
        ucs_diag("rndv/sppln: no copy engine (%s), the sender copies itself",
                 ucs_status_string(status));
        sw->copy_engine        = NULL;
        sw->copy_engine_failed = 1;
    }
    return sw->copy_engine;
}

void ucp_proto_sppln_worker_cleanup(ucp_worker_h worker)
{
    ucp_sppln_worker_t *sw = worker->sppln;
    int side;

    if (sw == NULL) {
        return;
    }

    ucs_debug("worker %p: rndv/sppln sent bcopy %" PRIu64 " sppln %" PRIu64
              " zcopy %" PRIu64 " (registration fallbacks %" PRIu64 ", "
              "chunks staged by the copy engine %" PRIu64 ")",
              worker, sw->stats.sent[UCP_SPPLN_PATH_BCOPY],
              sw->stats.sent[UCP_SPPLN_PATH_SPPLN],
              sw->stats.sent[UCP_SPPLN_PATH_ZCOPY], sw->stats.reg_fallback,
              sw->stats.async_copies);

    ucp_sppln_staged_untrack(sw);
    if (sw->copy_engine != NULL) {
        ucs_copy_engine_destroy(sw->copy_engine);
    }
    if (sw->rkey_buf != NULL) {
        ucp_rkey_buffer_release(sw->rkey_buf);
    }
    for (side = UCP_SPPLN_SIDE_SEND; side <= UCP_SPPLN_SIDE_RECV; ++side) {
        if (sw->memh[side] != NULL) {
            ucp_mem_unmap(worker->context, sw->memh[side]);
        }
    }
    ucs_free(sw);
    worker->sppln = NULL;
}

const ucp_sppln_stats_t *ucp_proto_sppln_stats(ucp_worker_h worker)
{
    ucp_sppln_worker_t *sw = worker->sppln;

    return (sw == NULL) ? NULL : &sw->stats;
}

int ucp_sppln_group_get(ucp_sppln_worker_t *sw, int side)
{
    int group;

    if (sw->free_groups[side] == 0) {
        return -1;
    }

    group                  = ucs_ffs64(sw->free_groups[side]);
    sw->free_groups[side] &= ~UCS_BIT(group);
    return group;
}

void ucp_sppln_group_put(ucp_worker_h worker, int side, int group)
{
    ucp_sppln_worker_t *sw = worker->sppln;
    ucp_sppln_xfer_t *waiter;

    ucs_assert(!(sw->free_groups[side] & UCS_BIT(group)));
    sw->free_groups[side] |= UCS_BIT(group);
    if (side == UCP_SPPLN_SIDE_RECV) {
        sw->rx[group] = NULL;
    }

    if (!ucs_queue_is_empty(&sw->waitq[side])) {
        waiter = ucs_queue_pull_elem_non_empty(&sw->waitq[side],
                                               ucp_sppln_xfer_t, queue);
        waiter->flags &= ~UCP_SPPLN_XFER_FLAG_WAITING;
        ucp_sppln_kick(waiter);
    }
}

void ucp_sppln_wait_group(ucp_sppln_worker_t *sw, ucp_sppln_xfer_t *xfer)
{
    ucs_trace_req("xfer %p: waiting for a %s staging group", xfer,
                  (xfer->side == UCP_SPPLN_SIDE_SEND) ? "send" : "receive");
    xfer->flags |= UCP_SPPLN_XFER_FLAG_WAITING;
    ucs_queue_push(&sw->waitq[xfer->side], &xfer->queue);
}

void *ucp_sppln_slot_ptr(ucp_sppln_worker_t *sw, int side, int group,
                         unsigned slot)
{
    return UCS_PTR_BYTE_OFFSET(sw->base[side],
                               ((group * UCP_SPPLN_NUM_SLOTS) + slot) *
                               sw->slot_size);
}

uct_mem_h ucp_sppln_slot_memh(ucp_sppln_worker_t *sw, int side,
                              ucp_md_index_t md_index)
{
    ucp_mem_h memh = sw->memh[side];

    if (!(memh->md_map & UCS_BIT(md_index))) {
        return UCT_MEM_HANDLE_NULL;
    }
    return memh->uct[md_index];
}

void ucp_sppln_xfer_put(ucp_sppln_xfer_t *xfer)
{
    ucs_assert(xfer->refcount > 0);
    if (--xfer->refcount > 0) {
        return;
    }

    if (xfer->flags & UCP_SPPLN_XFER_FLAG_WAITING) {
        ucs_queue_remove(&xfer->worker->sppln->waitq[xfer->side],
                         &xfer->queue);
    }
    if (xfer->rkey != NULL) {
        ucp_rkey_destroy(xfer->rkey);
    }
    if (xfer->group >= 0) {
        ucp_sppln_group_put(xfer->worker, xfer->side, xfer->group);
    }
    ucp_sppln_sched_cleanup(&xfer->sched);
    ucs_free(xfer->sub_seen);
    ucs_free(xfer);
}

void ucp_sppln_kick(ucp_sppln_xfer_t *xfer)
{
    if (xfer->flags & (UCP_SPPLN_XFER_FLAG_PENDING |
                       UCP_SPPLN_XFER_FLAG_DONE)) {
        return; /* progress comes from the pending queue, or nothing to do */
    }

    ucp_request_send(xfer->req);
}

ucs_status_t ucp_sppln_send_ctrl(ucp_sppln_xfer_t *xfer, ucp_lane_index_t lane,
                                 uint8_t am_id, uct_pack_callback_t pack_cb)
{
    ucp_request_t *req = xfer->req;
    ssize_t packed;

    packed = uct_ep_am_bcopy(req->send.ep->uct_eps[lane], am_id, pack_cb, xfer,
                             0);
    if (ucs_likely(packed >= 0)) {
        return UCS_OK;
    }

    if (packed == UCS_ERR_NO_RESOURCE) {
        req->send.lane = lane;
        xfer->flags   |= UCP_SPPLN_XFER_FLAG_PENDING;
    }
    return (ucs_status_t)packed;
}
