/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "hcr.h"
#include "hcr_impl.h"

#include <uct/api/v2/uct_v2.h>
#include <arpa/inet.h>


/*
 * Put with remote notification: one RDMA_WRITE_WITH_IMM. The immediate value
 * holds the AM id (top UCT_AM_ID_BITS) and notify_data (the rest). The target
 * consumes one receive of its SRQ, whose completion comes after the data is
 * placed, and turns it into an active message (uct_hcr_iface_handle_notify).
 */
ucs_status_t uct_hcr_ep_put_notify_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                         size_t iovcnt, uint64_t remote_addr,
                                         uct_rkey_t rkey, uint8_t am_id,
                                         uint32_t notify_data,
                                         uct_completion_t *comp)
{
    uct_hcr_iface_t *iface = UCT_HCR_IFACE(tl_ep);
    uct_hcr_ep_t *ep       = ucs_derived_of(tl_ep, uct_hcr_ep_t);
    uint32_t imm;
    ucs_status_t status;

    UCT_CHECK_AM_ID(am_id);
    UCT_CHECK_IOV_SIZE(iovcnt, iface->config.max_send_sge,
                       "uct_hcr_ep_put_notify_zcopy");
    if (ucs_unlikely(notify_data & ~UCT_HCR_NOTIFY_DATA_MASK)) {
        ucs_error("hcr: notify_data 0x%x exceeds %d bits", notify_data,
                  UCT_HCR_NOTIFY_DATA_BITS);
        return UCS_ERR_INVALID_PARAM;
    }

    /* The notification consumes a receive of the target's SRQ but carries
     * no RC header, so it takes no flow control credit: a target short of
     * receives answers RNR and the QP retries (UCX_RC_RNR_RETRY_COUNT=7,
     * infinite, by default). */
    imm = ((uint32_t)am_id << UCT_HCR_NOTIFY_DATA_BITS) | notify_data;
    uct_rc_ep_fence_put(&iface->super, &ep->fi, &rkey, &remote_addr,
                        ep->super.atomic_mr_offset);
    status = uct_hcr_ep_rdma_zcopy(ep, iov, iovcnt, 0, remote_addr, rkey, comp,
                                   uct_rc_ep_send_op_completion_handler, 0,
                                   IBV_WR_RDMA_WRITE_WITH_IMM, htonl(imm));
    if (!UCS_STATUS_IS_ERR(status)) {
        UCT_TL_EP_STAT_OP(&ep->super.super, PUT, ZCOPY,
                          uct_iov_total_length(iov, iovcnt));
    }
    return status;
}

void uct_hcr_iface_handle_notify(uct_hcr_iface_t *iface, uint32_t imm_data,
                                 uint32_t length)
{
    uct_put_notify_hdr_t hdr;
    uint8_t am_id;

    am_id           = imm_data >> UCT_HCR_NOTIFY_DATA_BITS;
    hdr.notify_data = imm_data & UCT_HCR_NOTIFY_DATA_MASK;
    hdr.length      = length;

    ucs_trace_data("hcr iface %p: put notify am_id %u data 0x%x length %u",
                   iface, am_id, hdr.notify_data, length);
    /* delivered from the stack: the handler must copy what it keeps */
    uct_iface_invoke_am(&iface->super.super.super, am_id, &hdr, sizeof(hdr),
                        0);
}
