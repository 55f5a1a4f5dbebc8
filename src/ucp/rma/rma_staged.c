/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ucp/proto/proto_sppln_staging.h>
#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_rkey.h>
#include <ucp/core/ucp_worker.h>
#include <ucp/dt/datatype_iter.inl>
#include <ucs/debug/log.h>


/*
 * A put superpipelined through one of the worker's send staging groups
 * (proto/proto_sppln_staging.c), put/choose's path for a first put of a
 * buffer the measured model finds cheaper to copy than to register. The
 * message must fit in one staging group (three slots, contiguous). Chunks
 * follow the superpipeline's schedule (C_0 * q^i, whole pages, at most a
 * slot): the first one is on the wire after a small copy, and the copy of
 * each next one overlaps the transfer of the last.
 *
 * The request completes when its last chunk is posted: the application's
 * buffer is free then, and the puts, which read the staging, are in UCT,
 * where a flush waits for them as for any other put. The group goes back to
 * the worker when the last of them has completed (ucp_sppln_rma_group_t).
 * Between progress calls (after UCS_ERR_NO_RESOURCE) the request keeps the
 * index of its entry in send.multi_lane_idx, a field of multi-lane
 * protocols, and the bytes posted in its datatype iterator's offset.
 */


static void ucp_rma_staged_group_done(uct_completion_t *self)
{
    ucp_sppln_rma_group_t *rg = ucs_container_of(self, ucp_sppln_rma_group_t,
                                                 comp);
    ucp_sppln_group_t *group  = rg->group;

    if (self->status != UCS_OK) {
        ucs_debug("worker %p: a staged put failed: %s", rg->sw->worker,
                  ucs_status_string(self->status));
    }
    rg->group = NULL;
    ucp_sppln_group_put(rg->sw, group);
}

/* Drop the count that kept the group from returning while chunks were
 * still to be posted, and complete the request */
static void ucp_rma_staged_finish(ucp_request_t *req, ucs_status_t status)
{
    ucp_sppln_worker_t *sw    = req->send.ep->worker->sppln;
    ucp_sppln_rma_group_t *rg = &sw->rma[req->send.multi_lane_idx];

    ucs_trace_req("req %p: staged put of %zu bytes done: %s", req,
                  req->send.state.dt_iter.length, ucs_status_string(status));
    uct_completion_update_status(&rg->comp, status);
    if (--rg->comp.count == 0) {
        rg->comp.func(&rg->comp);
    }

    ucp_datatype_iter_cleanup(&req->send.state.dt_iter, UCP_DT_MASK_ALL);
    ucp_request_complete_send(req, status);
}

ucs_status_t ucp_rma_staged_start(ucp_request_t *req, ucp_sppln_worker_t *sw,
                                  ucp_md_index_t md_index, size_t max_frag)
{
    ucp_sppln_rma_group_t *rg;
    ucp_sppln_group_t *group;
    ucs_status_t status;
    unsigned index;

    if ((req->send.state.dt_iter.length >
         (UCP_SPPLN_NUM_SLOTS * sw->slot_size)) ||
        (sw->slot_size > max_frag)) {
        return UCS_ERR_UNSUPPORTED;
    }

    for (index = 0; index < UCP_SPPLN_MAX_GROUPS; ++index) {
        if (sw->rma[index].group == NULL) {
            break;
        }
    }

    /* all busy (or none can be registered): the caller takes zcopy */
    group = (index < UCP_SPPLN_MAX_GROUPS) ?
                    ucp_sppln_group_get(sw, UCP_SPPLN_SIDE_SEND, &status) :
                    NULL;
    if (group == NULL) {
        return UCS_ERR_NO_RESOURCE;
    } else if (ucp_sppln_group_uct_memh(group, md_index) ==
               UCT_MEM_HANDLE_NULL) {
        ucp_sppln_group_put(sw, group);
        return UCS_ERR_UNSUPPORTED; /* not registered with the lane's md */
    }

    rg              = &sw->rma[index];
    rg->comp.func   = ucp_rma_staged_group_done;
    rg->comp.count  = 1;
    rg->comp.status = UCS_OK;
    rg->sw          = sw;
    rg->group       = group;

    req->send.multi_lane_idx = index;
    req->flags |= UCP_REQUEST_FLAG_PROTO_INITIALIZED;
    ucs_trace_req("req %p: staged put of %zu bytes through send group %p", req,
                  req->send.state.dt_iter.length, group);
    return UCS_OK;
}

ucs_status_t ucp_rma_staged_progress(ucp_request_t *req, ucp_lane_index_t lane,
                                     ucp_md_index_t md_index,
                                     ucp_md_index_t rkey_index, size_t c0,
                                     double q)
{
    ucp_sppln_worker_t *sw       = req->send.ep->worker->sppln;
    ucp_datatype_iter_t *dt_iter = &req->send.state.dt_iter;
    ucp_sppln_rma_group_t *rg    = &sw->rma[req->send.multi_lane_idx];
    void *stage                  = ucp_sppln_group_slot(sw, rg->group, 0);
    uct_rkey_t tl_rkey;
    ucs_status_t status;
    uct_iov_t iov;
    size_t length;

    tl_rkey    = ucp_rkey_get_tl_rkey(req->send.rma.rkey, rkey_index);
    iov.memh   = ucp_sppln_group_uct_memh(rg->group, md_index);
    iov.stride = 0;
    iov.count  = 1;
    while (dt_iter->offset < dt_iter->length) {
        length = ucp_sppln_sched_chunk(dt_iter->length, dt_iter->offset, c0, q,
                                       sw->slot_size);
        iov.buffer = UCS_PTR_BYTE_OFFSET(stage, dt_iter->offset);
        iov.length = length;
        /* again after UCS_ERR_NO_RESOURCE: the same bytes */
        memcpy(iov.buffer,
               UCS_PTR_BYTE_OFFSET(dt_iter->type.contig.buffer,
                                   dt_iter->offset),
               length);

        ++rg->comp.count;
        status = uct_ep_put_zcopy(req->send.ep->uct_eps[lane], &iov, 1,
                                  req->send.rma.remote_addr + dt_iter->offset,
                                  tl_rkey, &rg->comp);
        if (status != UCS_INPROGRESS) {
            --rg->comp.count;
            if (status == UCS_ERR_NO_RESOURCE) {
                req->send.lane = lane; /* for the pending queue */
                return status;
            } else if (UCS_STATUS_IS_ERR(status)) {
                ucp_rma_staged_finish(req, status);
                return UCS_OK;
            }
        }
        dt_iter->offset += length;
    }

    ucp_rma_staged_finish(req, UCS_OK);
    return UCS_OK;
}

void ucp_rma_staged_abort(ucp_request_t *req, ucs_status_t status)
{
    ucs_debug("req %p: staged put aborted at %zu of %zu bytes: %s", req,
              req->send.state.dt_iter.offset, req->send.state.dt_iter.length,
              ucs_status_string(status));
    ucp_rma_staged_finish(req, status);
}
