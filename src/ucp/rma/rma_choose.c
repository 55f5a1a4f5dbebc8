/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ucp/proto/proto_sppln_staging.h>

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_request.inl>
#include <ucp/dt/datatype_iter.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/proto/proto_common.inl>
#include <ucp/proto/proto_debug.h>
#include <ucp/proto/proto_init.h>
#include <ucp/proto/proto_multi.h>
#include <ucp/proto/proto_select.inl>
#include <ucp/rma/rma.h>
#include <ucs/debug/log.h>
#include <ucs/sys/string.h>


/*
 * put/choose and get/choose: the per-message choice between copying and
 * zero-copy for RMA, from measured costs.
 *
 * UCX picks put/get bcopy or zcopy by message size alone, and its zcopy
 * estimate assumes the registration cache holds the buffer. The target's
 * memory is the application's, registered already, so RMA has no receiver
 * side to stage through; but the registration of the local buffer is the
 * same hidden cost as for a send. So this protocol wraps UCX's own put (get)
 * offload bcopy and zcopy protocols, adds a staged put (the sender half of
 * the superpipeline, rma_staged.c), and picks one per message:
 *  - the buffer is in UCP's registration cache, or was copied before (and
 *    so is likely to be used again): zcopy;
 *  - a first use that one bcopy fragment carries: the one with the lower
 *    time, UCX's estimate of each protocol for the length plus, for zcopy,
 *    registering and deregistering the buffer and the faults of its first
 *    transfer when its pages are not resident, and for bcopy the faults its
 *    copy takes on such pages, all from the device's measured model
 *    (ucs/calib);
 *  - a larger first use: zcopy, or for a put that fits in a staging group
 *    and whose copy costs less than its registration by the model, the
 *    superpipelined staged put (proto_rma_staged.c). UCX's bcopy is not
 *    chosen there: neither its estimate nor the model counts the cost of
 *    each further 8 KiB fragment (on softverbs a system call each, which put
 *    bcopy of 256 KiB and more at half the bandwidth of registering);
 *  - a buffer the zcopy path could not register (e.g. RLIMIT_MEMLOCK
 *    exhausted): bcopy.
 * UCX_RNDV_SPPLN_PATH forces zcopy (zcopy), bcopy (bcopy) or, for puts that
 * fit in a staging group, the staged put (sppln; bcopy otherwise).
 * ucp_proto_sppln_stats() counts the choices.
 *
 * The two wrapped protocols are initialized into this protocol's private
 * space; a request runs the chosen one as if UCX had selected it.
 */


#define UCP_RMA_CHOOSE_MAX_RANGES 4
#define UCP_RMA_CHOOSE_WRAPPED    2 /* UCX's bcopy and zcopy protocols */


/* A wrapped protocol's estimate: seconds = c + m * length, by range */
typedef struct {
    unsigned num_ranges;
    struct {
        size_t max_length;
        ucs_linear_func_t time;
    } ranges[UCP_RMA_CHOOSE_MAX_RANGES];
} ucp_rma_choose_perf_t;


typedef struct {
    /* the wrapped protocols as selected ones; filled at the first request,
     * since this private space moves after initialization */
    ucp_proto_config_t sub[UCP_RMA_CHOOSE_WRAPPED];
    int sub_ready;
    size_t sub_offset[UCP_RMA_CHOOSE_WRAPPED];
    ucp_rma_choose_perf_t perf[UCP_RMA_CHOOSE_WRAPPED];
    int have_model;
    ucs_calib_model_t model;
    size_t c0; /* staged put schedule */
    double q;
    size_t bcopy_max_frag; /* one bcopy fragment */
    /* then the wrapped protocols' private data, at sub_offset[] */
} ucp_rma_choose_priv_t;


/* UCX's own protocols, which this one chooses between (rma/put_offload.c,
 * rma/get_offload.c) */
extern ucp_proto_t ucp_put_offload_bcopy_proto;
extern ucp_proto_t ucp_put_offload_zcopy_proto;
extern ucp_proto_t ucp_get_offload_bcopy_proto;
extern ucp_proto_t ucp_get_offload_zcopy_proto;


static const ucp_proto_t *
ucp_rma_choose_protos(ucp_operation_id_t op_id, unsigned which)
{
    if (op_id == UCP_OP_ID_PUT) {
        return (which == UCP_RMA_CHOOSE_ZCOPY) ? &ucp_put_offload_zcopy_proto :
                                                 &ucp_put_offload_bcopy_proto;
    }
    return (which == UCP_RMA_CHOOSE_ZCOPY) ? &ucp_get_offload_zcopy_proto :
                                             &ucp_get_offload_bcopy_proto;
}

static double
ucp_rma_choose_time(const ucp_rma_choose_perf_t *perf, size_t length)
{
    unsigned i;

    for (i = 0; i < perf->num_ranges; ++i) {
        if (length <= perf->ranges[i].max_length) {
            return ucs_linear_func_apply(perf->ranges[i].time, length);
        }
    }
    return INFINITY; /* the protocol does not take this length */
}

/* The wrapped protocol's estimate of the kind UCX selects by for these
 * requests (single or multiple in flight), in up to
 * UCP_RMA_CHOOSE_MAX_RANGES ranges (the last one stretched to the end) */
static void ucp_rma_choose_perf_set(ucp_rma_choose_perf_t *perf,
                                    const ucp_proto_caps_t *caps,
                                    ucp_proto_perf_type_t perf_type)
{
    unsigned i;

    perf->num_ranges = ucs_min(caps->num_ranges, UCP_RMA_CHOOSE_MAX_RANGES);
    for (i = 0; i < perf->num_ranges; ++i) {
        perf->ranges[i].max_length = caps->ranges[i].max_length;
        perf->ranges[i].time       = caps->ranges[i].perf[perf_type];
    }
    if (perf->num_ranges > 0) {
        perf->ranges[perf->num_ranges - 1].max_length =
                caps->ranges[caps->num_ranges - 1].max_length;
    }
}

/* The measured costs of the lane's device: registration (with
 * deregistration and first-transfer faults) and copy faults by residency */
static void
ucp_rma_choose_model(ucp_rma_choose_priv_t *cpriv, const char *md_name)
{
    ucs_calib_derived_t derived;

    cpriv->have_model = ucp_sppln_find_model(md_name, &cpriv->model);
    if (!cpriv->have_model) {
        return;
    }

    ucs_calib_derive(&cpriv->model, &derived);
    cpriv->c0 = derived.sp_c0;
    cpriv->q  = derived.sp_q;
}

/* The smallest length from which UCX's zcopy estimate beats its bcopy one */
static size_t ucp_rma_choose_crossover(const ucp_rma_choose_priv_t *cpriv)
{
    size_t lo = 0, hi = UCS_GBYTE, mid;

    if (ucp_rma_choose_time(&cpriv->perf[UCP_RMA_CHOOSE_ZCOPY], hi) >=
        ucp_rma_choose_time(&cpriv->perf[UCP_RMA_CHOOSE_BCOPY], hi)) {
        return SIZE_MAX;
    }

    /* the zcopy line's fixed cost is the higher one: one crossing */
    while ((hi - lo) > 1) {
        mid = lo + ((hi - lo) / 2);
        if (ucp_rma_choose_time(&cpriv->perf[UCP_RMA_CHOOSE_ZCOPY], mid) <
            ucp_rma_choose_time(&cpriv->perf[UCP_RMA_CHOOSE_BCOPY], mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    return hi;
}

static ucs_status_t
ucp_rma_choose_init(const ucp_proto_init_params_t *init_params)
{
    ucp_context_h context         = init_params->worker->context;
    const ucp_sppln_config_t *cfg = &context->config.sppln;
    ucp_operation_id_t op_id      = init_params->select_param->op_id;
    ucp_rma_choose_priv_t *cpriv  = init_params->priv;
    ucp_proto_caps_t sub_caps[UCP_RMA_CHOOSE_WRAPPED];
    ucp_proto_init_params_t sub_params;
    const ucp_proto_multi_priv_t *mpriv;
    size_t offset, sub_size;
    ucs_status_t status;
    unsigned which;

    if ((op_id != UCP_OP_ID_PUT) && (op_id != UCP_OP_ID_GET)) {
        return UCS_ERR_UNSUPPORTED;
    }

    if ((cfg->enable == UCS_NO) ||
        (init_params->select_param->dt_class != UCP_DATATYPE_CONTIG) ||
        !UCP_MEM_IS_HOST(init_params->select_param->mem_type)) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* both of UCX's protocols, side by side in this private space */
    offset = sizeof(*cpriv);
    for (which = 0; which < UCP_RMA_CHOOSE_WRAPPED; ++which) {
        sub_params            = *init_params;
        sub_params.priv       = UCS_PTR_BYTE_OFFSET(cpriv, offset);
        sub_params.priv_size  = &sub_size;
        sub_params.caps       = &sub_caps[which];
        sub_params.proto_name = ucp_rma_choose_protos(op_id, which)->name;
        sub_size              = 0;
        status = ucp_rma_choose_protos(op_id, which)->init(&sub_params);
        if (status != UCS_OK) {
            return status;
        }

        cpriv->sub_offset[which] = offset;
        offset = ucs_align_up(offset + sub_size, UCS_SYS_POINTER_SIZE);
        if (offset > UCP_PROTO_PRIV_MAX) {
            ucs_debug("%s: no room for the private data of its protocols",
                      init_params->proto_name);
            return UCS_ERR_NO_RESOURCE;
        }
        ucp_rma_choose_perf_set(&cpriv->perf[which], &sub_caps[which],
                                ucp_proto_select_param_perf_type(
                                        init_params->select_param));
    }

    /* only on the transports the superpipeline is enabled on */
    mpriv = UCS_PTR_BYTE_OFFSET(cpriv, cpriv->sub_offset[UCP_RMA_CHOOSE_ZCOPY]);
    if (!ucp_sppln_lane_tl_enabled(context,
                                   init_params->ep_config_key
                                           ->lanes[mpriv->lanes[0].super.lane]
                                           .rsc_index)) {
        return UCS_ERR_UNSUPPORTED;
    }

    ucp_rma_choose_model(
            cpriv, context->tl_mds[mpriv->lanes[0].super.md_index].rsc.md_name);
    cpriv->bcopy_max_frag =
            ((const ucp_proto_multi_priv_t *)UCS_PTR_BYTE_OFFSET(
                     cpriv, cpriv->sub_offset[UCP_RMA_CHOOSE_BCOPY]))
                    ->max_frag_sum;
    cpriv->sub_ready = 0;

    /* UCX's zcopy estimate (a buffer in the cache), from where UCX would
     * take zcopy over bcopy on: this protocol takes over there */
    *init_params->caps              = sub_caps[UCP_RMA_CHOOSE_ZCOPY];
    init_params->caps->cfg_thresh   = ucp_rma_choose_crossover(cpriv);
    init_params->caps->cfg_priority = UCP_PROTO_RMA_CHOOSE_PRIORITY;
    init_params->caps->min_length   = ucs_max(init_params->caps->min_length,
                                              init_params->caps->cfg_thresh);
    for (which = 0; which < init_params->caps->num_ranges; ++which) {
        init_params->caps->ranges[which].name = "choose";
    }
    *init_params->priv_size = offset;
    return UCS_OK;
}

/* What the model says for a buffer that is neither cached nor copied before,
 * with @a pages */
static unsigned ucp_rma_choose_by_model(const ucp_rma_choose_priv_t *cpriv,
                                        const ucp_sppln_config_t *cfg,
                                        ucp_operation_id_t op_id, size_t length,
                                        ucs_calib_pages_t pages)
{
    double t_bcopy, t_zcopy, t_reg;

    t_reg = ucs_calib_reg_time(&cpriv->model, length, pages);

    /* UCX's bcopy estimate counts nothing per fragment beyond the copy,
     * and neither does the measured model (its network gap is a loopback's):
     * only where one fragment carries the message is it a fair estimate.
     * A larger put can be staged in a few large chunks instead, whose
     * transfer costs what zcopy's does: the copy against the registration
     * decides. */
    if (length > cpriv->bcopy_max_frag) {
        return ((op_id == UCP_OP_ID_PUT) &&
                (length <= (UCP_SPPLN_NUM_SLOTS * cfg->slot_size)) &&
                (ucs_calib_copy_time(&cpriv->model, length, pages) < t_reg)) ?
                       UCP_RMA_CHOOSE_STAGED :
                       UCP_RMA_CHOOSE_ZCOPY;
    }

    t_bcopy = ucp_rma_choose_time(&cpriv->perf[UCP_RMA_CHOOSE_BCOPY], length);
    t_zcopy = ucp_rma_choose_time(&cpriv->perf[UCP_RMA_CHOOSE_ZCOPY], length) +
              t_reg;
    if (pages == UCS_CALIB_PAGES_NONRESIDENT) {
        t_bcopy += ucs_linear_func_apply(cpriv->model.copy_fault, length);
    }

    ucs_trace("%zu bytes, %s pages: bcopy %.2f us, register and zcopy %.2f us",
              length,
              (pages == UCS_CALIB_PAGES_RESIDENT) ? "resident" : "non-resident",
              t_bcopy * 1e6, t_zcopy * 1e6);
    return (t_zcopy < t_bcopy) ? UCP_RMA_CHOOSE_ZCOPY : UCP_RMA_CHOOSE_BCOPY;
}

/* Which protocol moves this message; *cached_p: the buffer is registered
 * in UCP's cache already */
static unsigned ucp_rma_choose_which(ucp_request_t *req,
                                     const ucp_rma_choose_priv_t *cpriv,
                                     ucp_sppln_worker_t *sw, int *cached_p)
{
    ucp_context_h context         = req->send.ep->worker->context;
    const ucp_sppln_config_t *cfg = &context->config.sppln;
    void *buffer                  = req->send.state.dt_iter.type.contig.buffer;
    size_t length                 = req->send.state.dt_iter.length;
    ucp_operation_id_t op_id      = req->send.proto_config->select_param.op_id;
    unsigned resident, untouched;

    *cached_p = 0;
    if (cfg->path == UCP_SPPLN_PATH_ZCOPY) {
        return UCP_RMA_CHOOSE_ZCOPY;
    } else if (cfg->path == UCP_SPPLN_PATH_SPPLN) {
        return ((op_id == UCP_OP_ID_PUT) &&
                (length <= (UCP_SPPLN_NUM_SLOTS * cfg->slot_size))) ?
                       UCP_RMA_CHOOSE_STAGED :
                       UCP_RMA_CHOOSE_BCOPY;
    } else if (cfg->path != UCP_SPPLN_PATH_AUTO) {
        return UCP_RMA_CHOOSE_BCOPY;
    }

    if (ucp_sppln_rcache_hit(context, buffer, length)) {
        *cached_p = 1;
        return UCP_RMA_CHOOSE_ZCOPY;
    } else if (!cpriv->have_model) {
        return UCP_RMA_CHOOSE_ZCOPY; /* what UCX would do */
    }

    /* a buffer copied before is likely to be used again: register it now,
     * so that its next uses find it in the cache */
    if (ucp_sppln_staged_before(&sw->staged, buffer, length)) {
        return UCP_RMA_CHOOSE_ZCOPY;
    }

    /* the pages' residency is a system call (mincore(), 0.9 us on a VM):
     * asked only when the answer depends on it */
    resident  = ucp_rma_choose_by_model(cpriv, cfg, op_id, length,
                                        UCS_CALIB_PAGES_RESIDENT);
    untouched = ucp_rma_choose_by_model(cpriv, cfg, op_id, length,
                                        UCS_CALIB_PAGES_NONRESIDENT);
    if (resident == untouched) {
        return resident;
    }
    ++sw->stats.residency_probes;
    return (ucp_sppln_pages(buffer) == UCS_CALIB_PAGES_RESIDENT) ? resident :
                                                                   untouched;
}

/* Whether the zcopy path can register the buffer: registering it now puts
 * it in UCP's cache, where the path finds it */
static int ucp_rma_choose_can_register(ucp_request_t *req,
                                       const ucp_rma_choose_priv_t *cpriv,
                                       unsigned access)
{
    const ucp_proto_multi_priv_t *mpriv =
            UCS_PTR_BYTE_OFFSET(cpriv, cpriv->sub_offset[UCP_RMA_CHOOSE_ZCOPY]);
    ucs_status_t status;

    status = ucp_datatype_iter_mem_reg(req->send.ep->worker->context,
                                       &req->send.state.dt_iter,
                                       mpriv->reg_md_map, access,
                                       UCS_BIT(UCP_DATATYPE_CONTIG));
    if (status != UCS_OK) {
        ucs_debug("req %p: %s of %zu bytes: registration failed (%s), "
                  "copying instead",
                  req, req->send.proto_config->proto->name,
                  req->send.state.dt_iter.length, ucs_status_string(status));
        return 0;
    }

    ucp_datatype_iter_mem_dereg(req->send.ep->worker->context,
                                &req->send.state.dt_iter,
                                UCS_BIT(UCP_DATATYPE_CONTIG));
    return 1;
}

/* The staged put, on the zcopy protocol's lane */
static ucs_status_t
ucp_rma_choose_staged_progress(ucp_request_t *req,
                               const ucp_rma_choose_priv_t *cpriv)
{
    const ucp_proto_multi_priv_t *mpriv =
            UCS_PTR_BYTE_OFFSET(cpriv, cpriv->sub_offset[UCP_RMA_CHOOSE_ZCOPY]);
    const ucp_proto_common_lane_priv_t *lpriv = &mpriv->lanes[0].super;

    return ucp_rma_staged_progress(req, lpriv->lane, lpriv->md_index,
                                   lpriv->rkey_index, cpriv->c0, cpriv->q);
}

static void ucp_rma_choose_abort(ucp_request_t *req, ucs_status_t status)
{
    if (req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) {
        ucp_rma_staged_abort(req, status); /* a staged put */
    } else {
        ucp_proto_request_bcopy_abort(req, status); /* not started */
    }
}

static ucs_status_t ucp_rma_choose_progress(uct_pending_req_t *self)
{
    ucp_request_t *req = ucs_container_of(self, ucp_request_t, send.uct);
    ucp_rma_choose_priv_t *cpriv = (ucp_rma_choose_priv_t *)
                                           req->send.proto_config->priv;
    ucp_operation_id_t op_id = req->send.proto_config->select_param.op_id;
    const ucp_proto_multi_priv_t *mpriv;
    ucp_sppln_worker_t *sw;
    ucs_status_t status;
    unsigned which;
    int cached;

    if (req->flags & UCP_REQUEST_FLAG_PROTO_INITIALIZED) {
        /* a staged put, again after UCS_ERR_NO_RESOURCE */
        return ucp_rma_choose_staged_progress(req, cpriv);
    }

    status = ucp_sppln_worker_state(req->send.ep->worker, &sw);
    if (status != UCS_OK) {
        ucp_proto_request_bcopy_abort(req, status);
        return UCS_OK;
    }
    ucp_sppln_xfer_started(sw);

    if (!cpriv->sub_ready) {
        for (which = 0; which < UCP_RMA_CHOOSE_WRAPPED; ++which) {
            cpriv->sub[which]       = *req->send.proto_config;
            cpriv->sub[which].proto = ucp_rma_choose_protos(op_id, which);
            cpriv->sub[which].priv =
                    UCS_PTR_BYTE_OFFSET(cpriv, cpriv->sub_offset[which]);
        }
        cpriv->sub_ready = 1;
    }

    which = ucp_rma_choose_which(req, cpriv, sw, &cached);
    if (which == UCP_RMA_CHOOSE_STAGED) {
        mpriv  = UCS_PTR_BYTE_OFFSET(cpriv,
                                     cpriv->sub_offset[UCP_RMA_CHOOSE_ZCOPY]);
        status = ucp_rma_staged_start(req, sw, mpriv->lanes[0].super.md_index,
                                      mpriv->lanes[0].max_frag);
        if (status == UCS_OK) {
            ++sw->stats.rma[which];
            return ucp_rma_choose_staged_progress(req, cpriv);
        }
        ucs_debug("req %p: no staging for a put of %zu bytes (%s), "
                  "registering it",
                  req, req->send.state.dt_iter.length,
                  ucs_status_string(status));
        which = UCP_RMA_CHOOSE_ZCOPY;
    }

    /* a cached buffer is registered: trying again would cost a lookup */
    if ((which == UCP_RMA_CHOOSE_ZCOPY) && !cached &&
        !ucp_rma_choose_can_register(req, cpriv,
                                     (op_id == UCP_OP_ID_PUT) ?
                                             UCT_MD_MEM_ACCESS_LOCAL_READ :
                                             UCT_MD_MEM_ACCESS_LOCAL_WRITE)) {
        ++sw->stats.reg_fallback;
        which = UCP_RMA_CHOOSE_BCOPY;
    }

    ++sw->stats.rma[which];
    ucs_trace_req("req %p: %s of %zu bytes by %s", req,
                  req->send.proto_config->proto->name,
                  req->send.state.dt_iter.length,
                  cpriv->sub[which].proto->name);

    /* from now on, the request is the wrapped protocol's */
    req->send.proto_config = &cpriv->sub[which];
    req->send.uct.func =
            cpriv->sub[which].proto->progress[UCP_PROTO_STAGE_START];
    return req->send.uct.func(self);
}

static void ucp_rma_choose_query(const ucp_proto_query_params_t *params,
                                 ucp_proto_query_attr_t *attr)
{
    const ucp_rma_choose_priv_t *cpriv = params->priv;
    ucp_proto_query_params_t sub_params;

    /* the lane, as the zcopy protocol describes it */
    sub_params       = *params;
    sub_params.proto = ucp_rma_choose_protos(params->select_param->op_id,
                                             UCP_RMA_CHOOSE_ZCOPY);
    sub_params.priv =
            UCS_PTR_BYTE_OFFSET(cpriv, cpriv->sub_offset[UCP_RMA_CHOOSE_ZCOPY]);
    sub_params.proto->query(&sub_params, attr);

    attr->max_msg_length = SIZE_MAX;
    attr->is_estimation  = 0;
    ucs_snprintf_safe(attr->desc, sizeof(attr->desc),
                      "per message: rcache hit zcopy, else %s",
                      cpriv->have_model ?
                              "bcopy or register+zcopy by measured cost" :
                              "zcopy (no measured model)");
}

ucp_proto_t ucp_put_choose_proto = {.name     = "put/choose",
                                    .desc     = NULL,
                                    .flags    = 0,
                                    .init     = ucp_rma_choose_init,
                                    .query    = ucp_rma_choose_query,
                                    .progress = {ucp_rma_choose_progress},
                                    .abort    = ucp_rma_choose_abort};

ucp_proto_t ucp_get_choose_proto = {.name     = "get/choose",
                                    .desc     = NULL,
                                    .flags    = 0,
                                    .init     = ucp_rma_choose_init,
                                    .query    = ucp_rma_choose_query,
                                    .progress = {ucp_rma_choose_progress},
                                    .abort    = ucp_proto_request_bcopy_abort};
