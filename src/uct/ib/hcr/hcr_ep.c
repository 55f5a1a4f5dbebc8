/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hcr.h"

#include <arpa/inet.h>


/*
 * Put with remote notification: one RDMA_WRITE_WITH_IMM. The target's
 * completion of it comes after the data is placed; it consumes a receive of
 * the target's SRQ and becomes an active message there (hcr_iface.c). The
 * write carries no RC header, so it takes no flow control credit: a target
 * short of receives answers RNR, and the QP retries (UCX_RC_RNR_RETRY_COUNT,
 * 7 = forever, by default).
 */
ucs_status_t uct_hcr_ep_put_notify_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                         size_t iovcnt, uint64_t remote_addr,
                                         uct_rkey_t rkey, uint8_t am_id,
                                         uint32_t notify_data,
                                         uct_completion_t *comp)
{
    uct_hcr_ep_t *hcr_ep        = ucs_derived_of(tl_ep, uct_hcr_ep_t);
    uct_rc_verbs_ep_t *ep       = &hcr_ep->super;
    uct_rc_verbs_iface_t *iface = ucs_derived_of(tl_ep->iface,
                                                 uct_rc_verbs_iface_t);
    struct ibv_send_wr wr;
    struct ibv_sge sge[UCT_IB_MAX_IOV];

    UCT_CHECK_AM_ID(am_id);
    UCT_CHECK_IOV_SIZE(iovcnt, iface->config.max_send_sge,
                       "uct_hcr_ep_put_notify_zcopy");
    if (ucs_unlikely(notify_data & ~UCT_HCR_NOTIFY_DATA_MASK)) {
        ucs_error("hcr: notify_data 0x%x exceeds %d bits", notify_data,
                  UCT_PUT_NOTIFY_DATA_BITS);
        return UCS_ERR_INVALID_PARAM;
    }

    UCT_RC_CHECK_RES(&iface->super, &ep->super);
    uct_rc_ep_fence_put(&iface->super, &ep->fi, &rkey, &remote_addr,
                        ep->super.atomic_mr_offset);

    /* unlike a plain put, an empty one is posted: its notification is the
     * point */
    wr.next     = NULL;
    wr.opcode   = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(((uint32_t)am_id << UCT_PUT_NOTIFY_DATA_BITS) |
                        notify_data);
    wr.sg_list  = sge;
    wr.num_sge  = uct_ib_verbs_sge_fill_iov(sge, iov, iovcnt);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = rkey;
    uct_rc_verbs_ep_post_send_wr(ep, &wr, IBV_SEND_SIGNALED);

    uct_rc_txqp_add_send_comp(&iface->super, &ep->super.txqp,
                              uct_rc_ep_send_op_completion_handler, comp,
                              ep->txcnt.pi, UCT_RC_IFACE_SEND_OP_FLAG_ZCOPY,
                              iov, iovcnt, 0);
    UCT_TL_EP_STAT_OP(&ep->super.super, PUT, ZCOPY,
                      uct_iov_total_length(iov, iovcnt));
    return UCS_INPROGRESS;
}

/* everything an hcr endpoint holds is rc_verbs' */
static UCS_CLASS_INIT_FUNC(uct_hcr_ep_t, const uct_ep_params_t *params)
{
    UCS_CLASS_CALL_SUPER_INIT(uct_rc_verbs_ep_t, params);
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_hcr_ep_t)
{
}

UCS_CLASS_DEFINE(uct_hcr_ep_t, uct_rc_verbs_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_hcr_ep_t, uct_ep_t, const uct_ep_params_t *);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_hcr_ep_t, uct_ep_t);
