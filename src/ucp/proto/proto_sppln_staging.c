/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "proto_sppln_staging.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_mm.h>
#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/rndv/rndv_sppln.h>
#include <ucs/datastruct/queue.h>
#include <ucs/sys/sys.h>

#include <unistd.h>


/* The slots of a group start a page after its header, page-aligned */
#define UCP_SPPLN_GROUP_HDR_SIZE 4096


typedef struct {
    ucp_sppln_worker_t *sw;
    int side;
} ucp_sppln_group_mp_priv_t;


/* A chunk of a staging pool holds one group (elems_per_chunk 1): one
 * registration per group, so that a receive group's rkey reaches only the
 * senders of the transfers that used that group */
typedef struct {
    ucp_mem_h memh;
    void *rkey_buf;
    size_t rkey_size;
} ucp_sppln_chunk_hdr_t;


static ucs_status_t
ucp_sppln_group_chunk_alloc(ucs_mpool_t *mp, size_t *size_p, void **chunk_p)
{
    ucp_sppln_group_mp_priv_t *mpriv = ucs_mpool_priv(mp);
    ucp_context_h context            = mpriv->sw->worker->context;
    ucp_sppln_chunk_hdr_t *hdr;
    ucp_mem_map_params_t params;
    ucs_status_t status;
    ucp_mem_h memh;

    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.length     = *size_p + sizeof(*hdr);
    params.flags      = UCP_MEM_MAP_ALLOCATE;
    status            = ucp_mem_map(context, &params, &memh);
    if (status != UCS_OK) {
        /* the mpool says that it could not grow; the caller says what it
         * does without the group */
        ucs_debug("rndv/sppln: could not register %zu bytes of staging "
                  "memory: %s",
                  params.length, ucs_status_string(status));
        return status;
    }

    hdr            = ucp_memh_address(memh);
    hdr->memh      = memh;
    hdr->rkey_buf  = NULL;
    hdr->rkey_size = 0;
    if (mpriv->side == UCP_SPPLN_SIDE_RECV) {
        status = ucp_rkey_pack(context, memh, &hdr->rkey_buf, &hdr->rkey_size);
        if (status != UCS_OK) {
            ucs_error("rndv/sppln: could not pack the rkey of a staging "
                      "group: %s",
                      ucs_status_string(status));
            ucp_mem_unmap(context, memh);
            return status;
        }
    }

    ++mpriv->sw->stats.groups[mpriv->side];
    *chunk_p = hdr + 1;
    *size_p  = ucp_memh_length(memh) - sizeof(*hdr);
    return UCS_OK;
}

static void ucp_sppln_group_chunk_release(ucs_mpool_t *mp, void *chunk)
{
    ucp_sppln_group_mp_priv_t *mpriv = ucs_mpool_priv(mp);
    ucp_sppln_chunk_hdr_t *hdr       = (ucp_sppln_chunk_hdr_t *)chunk - 1;

    if (hdr->rkey_buf != NULL) {
        ucp_rkey_buffer_release(hdr->rkey_buf);
    }
    ucp_mem_unmap(mpriv->sw->worker->context, hdr->memh);
}

static void ucp_sppln_group_obj_init(ucs_mpool_t *mp, void *obj, void *chunk)
{
    ucp_sppln_group_mp_priv_t *mpriv = ucs_mpool_priv(mp);
    ucp_sppln_chunk_hdr_t *hdr       = (ucp_sppln_chunk_hdr_t *)chunk - 1;
    ucp_sppln_group_t *group         = obj;

    group->memh      = hdr->memh;
    group->rkey_buf  = hdr->rkey_buf;
    group->rkey_size = hdr->rkey_size;
    group->side      = mpriv->side;
}

static ucs_mpool_ops_t ucp_sppln_group_mp_ops = {
        .chunk_alloc   = ucp_sppln_group_chunk_alloc,
        .chunk_release = ucp_sppln_group_chunk_release,
        .obj_init      = ucp_sppln_group_obj_init,
        .obj_cleanup   = NULL,
        .obj_str       = NULL};

static ucs_mpool_ops_t ucp_sppln_xfer_mp_ops = {
        .chunk_alloc   = ucs_mpool_chunk_malloc,
        .chunk_release = ucs_mpool_chunk_free,
        .obj_init      = NULL,
        .obj_cleanup   = NULL,
        .obj_str       = NULL};


static ucs_status_t ucp_sppln_worker_create(ucp_worker_h worker)
{
    const ucp_sppln_config_t *config = &worker->context->config.sppln;
    ucp_sppln_group_mp_priv_t *mpriv;
    ucp_sppln_worker_t *sw;
    ucs_status_t status;
    int side;

    sw = ucs_calloc(1, sizeof(*sw), "sppln_worker");
    if (sw == NULL) {
        ucs_error("rndv/sppln: failed to allocate the worker's state");
        return UCS_ERR_NO_MEMORY;
    }

    sw->worker          = worker;
    sw->slot_size       = config->slot_size;
    sw->fresh_copy      = config->fresh_copy;
    sw->fresh_collapse  = config->fresh_collapse;
    sw->uffd            = -1;
    sw->next_generation = 1;

    status = ucs_mpool_init(&sw->xfer_mp, 0, sizeof(ucp_sppln_xfer_t), 0,
                            UCS_SYS_CACHE_LINE_SIZE, 16, UINT_MAX,
                            &ucp_sppln_xfer_mp_ops, "sppln_xfer");
    if (status != UCS_OK) {
        goto err_free;
    }

    sw->max_groups = ucs_min(config->groups, UCP_SPPLN_MAX_GROUPS);
    for (side = 0; side < UCP_SPPLN_SIDE_LAST; ++side) {
        ucs_queue_head_init(&sw->waitq[side]);
        status = ucs_mpool_init(&sw->group_mp[side], sizeof(*mpriv),
                                UCP_SPPLN_GROUP_HDR_SIZE +
                                        (UCP_SPPLN_NUM_SLOTS * sw->slot_size),
                                UCP_SPPLN_GROUP_HDR_SIZE,
                                UCP_SPPLN_GROUP_HDR_SIZE, 1, sw->max_groups,
                                &ucp_sppln_group_mp_ops,
                                (side == UCP_SPPLN_SIDE_SEND) ?
                                        "sppln_send_staging" :
                                        "sppln_recv_staging");
        if (status != UCS_OK) {
            goto err_cleanup;
        }
        mpriv       = ucs_mpool_priv(&sw->group_mp[side]);
        mpriv->sw   = sw;
        mpriv->side = side;
    }

    ucp_sppln_staged_track(&sw->staged);
    worker->sppln = sw;
    return UCS_OK;

err_cleanup:
    while (side-- > 0) {
        ucs_mpool_cleanup(&sw->group_mp[side], 1);
    }
    ucs_mpool_cleanup(&sw->xfer_mp, 1);
err_free:
    ucs_free(sw);
    return status;
}

ucs_status_t
ucp_sppln_worker_state(ucp_worker_h worker, ucp_sppln_worker_t **sw_p)
{
    ucs_status_t status;

    if (ucs_unlikely(worker->sppln == NULL)) {
        status = ucp_sppln_worker_create(worker);
        if (status != UCS_OK) {
            return status;
        }
    }

    *sw_p = worker->sppln;
    return UCS_OK;
}

/* Whether the staged protocols may run on one of the worker's transports */
static int ucp_sppln_worker_uses_staging(ucp_worker_h worker)
{
    ucp_context_h context = worker->context;
    ucp_rsc_index_t rsc_index;

    if ((context->config.sppln.enable == UCS_NO) ||
        !(context->config.features &
          (UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_RMA))) {
        return 0;
    }

    UCS_BITMAP_FOR_EACH_BIT(context->tl_bitmap, rsc_index) {
        if (ucp_sppln_lane_tl_enabled(context, rsc_index)) {
            return 1;
        }
    }
    return 0;
}

void ucp_proto_sppln_worker_init(ucp_worker_h worker)
{
    ucp_sppln_worker_t *sw;
    int side;

    if (!ucp_sppln_worker_uses_staging(worker) ||
        (ucp_sppln_worker_state(worker, &sw) != UCS_OK)) {
        return;
    }

    /* one group per side now, not in the first staged message: registering
     * (and faulting in) megabytes costs milliseconds. A failure here is
     * not one yet: the first transfer tries again, and says so if it must */
    for (side = 0; side < UCP_SPPLN_SIDE_LAST; ++side) {
        ucs_mpool_grow(&sw->group_mp[side], 1);
    }
    ucs_debug("worker %p: rndv/sppln staging groups of 3 x %zu bytes, up to "
              "%u per side, one each registered",
              worker, sw->slot_size, worker->context->config.sppln.groups);
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

    ucp_sppln_staged_untrack(&sw->staged);
    if (sw->uffd >= 0) {
        /* ends the registrations of transfers still in progress too */
        close(sw->uffd);
    }
    ucs_free(sw->uffd_page);
    if (sw->copy_engine != NULL) {
        ucs_copy_engine_destroy(sw->copy_engine);
    }
    for (side = 0; side < UCP_SPPLN_SIDE_LAST; ++side) {
        /* transfers of endpoints closed in force may not have returned
         * their groups */
        ucs_mpool_cleanup(&sw->group_mp[side], 0);
    }
    ucs_mpool_cleanup(&sw->xfer_mp, 0);
    ucs_free(sw);
    worker->sppln = NULL;
}

const ucp_sppln_stats_t *ucp_proto_sppln_stats(ucp_worker_h worker)
{
    ucp_sppln_worker_t *sw = worker->sppln;

    return (sw == NULL) ? NULL : &sw->stats;
}

ucp_sppln_group_t *
ucp_sppln_group_get(ucp_sppln_worker_t *sw, int side, ucs_status_t *status_p)
{
    ucp_sppln_group_t *group;

    group = ucs_mpool_get(&sw->group_mp[side]);
    if (group != NULL) {
        ++sw->groups_used[side];
        return group;
    }

    if (sw->groups_used[side] > 0) {
        /* all taken, or the pool cannot grow now: one comes back when a
         * transfer ends */
        *status_p = UCS_INPROGRESS;
    } else {
        ucs_error("rndv/sppln: no %s staging memory could be registered "
                  "(%zu bytes; is the locked memory limit too low?)",
                  (side == UCP_SPPLN_SIDE_SEND) ? "send" : "receive",
                  UCP_SPPLN_NUM_SLOTS * sw->slot_size);
        *status_p = UCS_ERR_NO_MEMORY;
    }
    return NULL;
}

void ucp_sppln_group_wait(ucp_sppln_worker_t *sw, int side,
                          ucp_sppln_waiter_t *waiter)
{
    ucp_trace_req(waiter->req, "rndv/sppln: waiting for a %s staging group",
                  (side == UCP_SPPLN_SIDE_SEND) ? "send" : "receive");
    ucs_queue_push(&sw->waitq[side], &waiter->queue);
}

void ucp_sppln_group_wait_cancel(ucp_sppln_worker_t *sw, int side,
                                 ucp_sppln_waiter_t *waiter)
{
    ucs_queue_remove(&sw->waitq[side], &waiter->queue);
}

void ucp_sppln_group_put(ucp_sppln_worker_t *sw, ucp_sppln_group_t *group)
{
    int side = group->side;
    ucp_sppln_waiter_t *waiter;

    ucs_assert(sw->groups_used[side] > 0);
    --sw->groups_used[side];
    ucs_mpool_put(group);

    if (!ucs_queue_is_empty(&sw->waitq[side])) {
        waiter = ucs_queue_pull_elem_non_empty(&sw->waitq[side],
                                               ucp_sppln_waiter_t, queue);
        ucp_request_send(waiter->req);
    }
}

void *ucp_sppln_group_slot(const ucp_sppln_worker_t *sw,
                           const ucp_sppln_group_t *group, unsigned slot)
{
    return UCS_PTR_BYTE_OFFSET(group, UCP_SPPLN_GROUP_HDR_SIZE +
                                              (slot * sw->slot_size));
}

uct_mem_h
ucp_sppln_group_uct_memh(const ucp_sppln_group_t *group, ucp_md_index_t md)
{
    if (!(group->memh->md_map & UCS_BIT(md))) {
        return UCT_MEM_HANDLE_NULL;
    }
    return group->memh->uct[md];
}

int ucp_sppln_rx_add(ucp_sppln_worker_t *sw, struct ucp_sppln_xfer *xfer,
                     uint16_t *generation_p)
{
    int index;

    for (index = 0; index < UCP_SPPLN_MAX_GROUPS; ++index) {
        if (sw->rx[index].xfer == NULL) {
            break;
        }
    }
    if (index == UCP_SPPLN_MAX_GROUPS) {
        return -1;
    }

    /* a new generation for every transfer: a sub-block meant for an earlier
     * transfer of the entry does not count for this one */
    sw->next_generation = (sw->next_generation + 1) &
                          UCS_MASK(UCP_SPPLN_GEN_BITS);
    sw->rx[index].xfer       = xfer;
    sw->rx[index].generation = sw->next_generation;
    *generation_p            = sw->next_generation;
    return index;
}

void ucp_sppln_rx_remove(ucp_sppln_worker_t *sw, int index)
{
    ucs_assert(sw->rx[index].xfer != NULL);
    sw->rx[index].xfer = NULL;
}

struct ucp_sppln_xfer *ucp_sppln_rx_find(const ucp_sppln_worker_t *sw,
                                         unsigned index, unsigned generation)
{
    if ((index >= UCP_SPPLN_MAX_GROUPS) ||
        (sw->rx[index].generation != generation)) {
        return NULL;
    }
    return sw->rx[index].xfer;
}

ucs_copy_engine_t *ucp_sppln_copy_engine(ucp_sppln_worker_t *sw,
                                         const ucp_sppln_lane_model_t *lmodel)
{
    ucs_copy_engine_params_t params;
    ucs_status_t status;

    if (!lmodel->copy_async) {
        return NULL;
    } else if ((sw->copy_engine != NULL) || sw->copy_engine_failed) {
        return sw->copy_engine;
    }

    /* one per worker: the first backend asked for is the one used */
    params.backend = lmodel->copy_backend;
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
