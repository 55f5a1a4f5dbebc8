/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hcr.h"
#include "hcr_calib.h"

#include <uct/ib/rc/verbs/rc_verbs_impl.h>
#include <uct/ib/base/ib_log.h>
#include <ucs/debug/log.h>
#include <arpa/inet.h>


/* Filled when the module loads, from rc_verbs' own (uct_hcr_init_module);
 * the internal operations are rc_verbs' as they are */
static uct_iface_ops_t uct_hcr_iface_tl_ops;


static ucs_config_field_t uct_hcr_iface_config_table[] = {
        /* UCX_HCR_<rc_verbs' variable>, UCX_HCR_RC_*, UCX_HCR_IB_* */
        {"", "", NULL, ucs_offsetof(uct_hcr_iface_config_t, super),
         UCS_CONFIG_TYPE_TABLE(uct_rc_verbs_iface_config_table)},

        {"OVERHEAD", "75ns",
         "Software overhead of posting one operation, reported in the\n"
         "interface attributes.",
         ucs_offsetof(uct_hcr_iface_config_t, overhead), UCS_CONFIG_TYPE_TIME},

        {"BANDWIDTH", "auto",
         "Network bandwidth reported in the interface attributes. auto:\n"
         "the one of a model given in UCX_CALIB_FILE, else the\n"
         "device's port speed.",
         ucs_offsetof(uct_hcr_iface_config_t, bandwidth), UCS_CONFIG_TYPE_BW},

        {"LATENCY", "0",
         "Network latency reported in the interface attributes. 0: the\n"
         "one of a model given in UCX_CALIB_FILE, else the IB default.",
         ucs_offsetof(uct_hcr_iface_config_t, latency), UCS_CONFIG_TYPE_TIME},

        {NULL}};


/* The receive side of uct_hcr_ep_put_notify_zcopy(): the write's data is
 * placed; its immediate value becomes an active message */
static void
uct_hcr_iface_recv_notify(uct_rc_verbs_iface_t *iface, const struct ibv_wc *wc)
{
    uint32_t imm = ntohl(wc->imm_data);
    uct_put_notify_hdr_t hdr;
    uint8_t am_id;

    am_id           = imm >> UCT_PUT_NOTIFY_DATA_BITS;
    hdr.notify_data = imm & UCT_HCR_NOTIFY_DATA_MASK;
    hdr.length      = wc->byte_len;
    ucs_trace_data("hcr iface %p: put notify am_id %u data 0x%x length %u",
                   iface, am_id, hdr.notify_data, hdr.length);

    /* from the stack, so no UCT_CB_PARAM_FLAG_DESC: the handler copies what
     * it keeps */
    uct_iface_invoke_am(&iface->super.super.super, am_id, &hdr, sizeof(hdr), 0);
}

/* rc_verbs' progress, whose receive path also takes notifications */
static unsigned uct_hcr_iface_progress(void *arg)
{
    uct_rc_verbs_iface_t *iface = arg;
    unsigned num_rx;

    num_rx = uct_rc_verbs_iface_poll_rx_common(iface,
                                               uct_hcr_iface_recv_notify);
    if (uct_rc_iface_poll_tx(&iface->super, num_rx)) {
        return num_rx + uct_rc_verbs_iface_poll_tx(iface);
    }

    return num_rx;
}

static ucs_status_t
uct_hcr_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *iface_attr)
{
    uct_hcr_iface_t *iface = ucs_derived_of(tl_iface, uct_hcr_iface_t);
    ucs_status_t status;

    status = uct_rc_verbs_iface_tl_ops.iface_query(tl_iface, iface_attr);
    if (status != UCS_OK) {
        return status;
    }

    iface_attr->overhead = iface->perf.overhead;
    if (!UCS_CONFIG_BW_IS_AUTO(iface->perf.bandwidth)) {
        /* shared by the processes on the port, as the IB model has it */
        iface_attr->bandwidth.dedicated = 0;
        iface_attr->bandwidth.shared    = iface->perf.bandwidth;
    }
    if (iface->perf.latency != 0) {
        iface_attr->latency.c = iface->perf.latency;
    }

    return UCS_OK;
}

/*
 * The attributes set in the configuration, else the network of a model
 * given in UCX_CALIB_FILE, else rc_verbs' attributes. A measured model
 * does not set them: two loopback QPs in one process measure a network
 * other than the one UCX's IB constants describe for rc_verbs, and UCP
 * would then select other protocols for hcr than for rc_verbs.
 */
static void uct_hcr_iface_init_perf(uct_hcr_iface_t *iface,
                                    const uct_hcr_iface_config_t *config)
{
    const char *dev_name = uct_ib_device_name(
            uct_ib_iface_device(&iface->super.super.super));
    ucs_calib_source_t source;
    ucs_calib_model_t model;

    iface->perf.overhead  = config->overhead;
    iface->perf.bandwidth = config->bandwidth;
    iface->perf.latency   = config->latency;

    if ((ucs_calib_find(dev_name, &model, &source) == UCS_OK) &&
        (source == UCS_CALIB_SOURCE_FILE)) {
        if (UCS_CONFIG_BW_IS_AUTO(iface->perf.bandwidth)) {
            iface->perf.bandwidth = model.net_bw;
        }
        if (iface->perf.latency == 0) {
            iface->perf.latency = model.net_latency;
        }
    }

    /* 0 bandwidth or latency: rc_verbs' */
    ucs_debug("hcr %s: overhead %.0f ns, bandwidth %.0f MB/s, latency %.3f us",
              dev_name, iface->perf.overhead * 1e9,
              ucs_max(iface->perf.bandwidth, 0) / UCS_MBYTE,
              iface->perf.latency * 1e6);
}

static UCS_CLASS_INIT_FUNC(uct_hcr_iface_t, uct_md_h tl_md, uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    UCS_CLASS_CALL_SUPER_INIT(uct_rc_verbs_iface_t, &uct_hcr_iface_tl_ops,
                              &uct_rc_verbs_iface_ops, tl_md, worker, params,
                              tl_config);

    self->super.super.progress = uct_hcr_iface_progress;
    uct_hcr_iface_init_perf(self,
                            ucs_derived_of(tl_config, uct_hcr_iface_config_t));
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_hcr_iface_t)
{
}

UCS_CLASS_DEFINE(uct_hcr_iface_t, uct_rc_verbs_iface_t);

static UCS_CLASS_DEFINE_NEW_FUNC(uct_hcr_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t *,
                                 const uct_iface_config_t *);

static UCS_CLASS_DEFINE_DELETE_FUNC(uct_hcr_iface_t, uct_iface_t);

/*
 * Run when the module loads: hcr's operations are rc_verbs', but for the
 * classes, the query and the put with notification; and since libuct_ib
 * loads modules before it opens any md, every md from then on gets measured
 * costs.
 */
static void uct_hcr_init_module(void)
{
    uct_hcr_iface_tl_ops             = uct_rc_verbs_iface_tl_ops;
    uct_hcr_iface_tl_ops.ep_create   = UCS_CLASS_NEW_FUNC_NAME(uct_hcr_ep_t);
    uct_hcr_iface_tl_ops.ep_destroy  = UCS_CLASS_DELETE_FUNC_NAME(uct_hcr_ep_t);
    uct_hcr_iface_tl_ops.iface_close = UCS_CLASS_DELETE_FUNC_NAME(
            uct_hcr_iface_t);
    uct_hcr_iface_tl_ops.iface_query         = uct_hcr_iface_query;
    uct_hcr_iface_tl_ops.ep_put_notify_zcopy = uct_hcr_ep_put_notify_zcopy;

    uct_ib_md_open_hook = uct_hcr_calib_md_open;
}

/* hcr runs wherever rc_verbs does */
static ucs_status_t
uct_hcr_query_tl_devices(uct_md_h md, uct_tl_device_resource_t **tl_devices_p,
                         unsigned *num_tl_devices_p)
{
    return UCT_TL_NAME(rc_verbs).query_devices(md, tl_devices_p,
                                               num_tl_devices_p);
}

UCT_TL_DEFINE_ENTRY(&uct_ib_component, hcr, uct_hcr_query_tl_devices,
                    uct_hcr_iface_t, "HCR_", uct_hcr_iface_config_table,
                    uct_hcr_iface_config_t);

UCT_TL_INIT(&uct_ib_component, hcr, ctor, uct_hcr_init_module(),
            uct_ib_md_open_hook = NULL)
