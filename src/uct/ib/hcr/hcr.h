/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_HCR_H
#define UCT_HCR_H

#include <uct/ib/rc/verbs/rc_verbs.h>
#include <uct/api/v2/uct_v2.h>


/*
 * hcr is rc_verbs with a put that notifies its target: every operation but
 * that one is rc_verbs' own. The immediate value of the notifying write
 * holds the AM id in its top bits and the caller's notify_data below them.
 */
#define UCT_HCR_NOTIFY_DATA_MASK UCS_MASK(UCT_PUT_NOTIFY_DATA_BITS)


/* rc_verbs' configuration, and the performance attributes to report:
 * bandwidth auto and latency 0 keep rc_verbs' unless a model is given */
typedef struct uct_hcr_iface_config {
    uct_rc_verbs_iface_config_t super;
    double overhead;
    double bandwidth;
    double latency;
} uct_hcr_iface_config_t;


typedef struct uct_hcr_iface {
    uct_rc_verbs_iface_t super;
    /* performance attributes that replace rc_verbs' in iface_query */
    struct {
        double overhead;
        double bandwidth;
        double latency;
    } perf;
} uct_hcr_iface_t;


typedef struct uct_hcr_ep {
    uct_rc_verbs_ep_t super;
} uct_hcr_ep_t;


UCS_CLASS_DECLARE_NEW_FUNC(uct_hcr_ep_t, uct_ep_t, const uct_ep_params_t *);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_hcr_ep_t, uct_ep_t);


/* RDMA_WRITE_WITH_IMM: see uct_ep_put_notify_zcopy() */
ucs_status_t uct_hcr_ep_put_notify_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                         size_t iovcnt, uint64_t remote_addr,
                                         uct_rkey_t rkey, uint8_t am_id,
                                         uint32_t notify_data,
                                         uct_completion_t *comp);

#endif
