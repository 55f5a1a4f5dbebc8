/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_HCR_IMPL_H
#define UCT_HCR_IMPL_H

#include "hcr.h"

#include <uct/ib/base/ib_log.h>
#include <ucs/arch/bitops.h>
#include <arpa/inet.h>


#define UCT_HCR_IFACE(_tl_ep) \
    ucs_derived_of((_tl_ep)->iface, uct_hcr_iface_t)


static UCS_F_ALWAYS_INLINE unsigned
uct_hcr_iface_post_recv(uct_hcr_iface_t *iface, int fill)
{
    unsigned batch = iface->super.super.config.rx_max_batch;
    unsigned count;

    if (iface->super.rx.srq.available < batch) {
        if (ucs_likely(fill == 0)) {
            return 0;
        }
        count = iface->super.rx.srq.available;
    } else {
        count = batch;
    }

    return uct_hcr_iface_post_recv_always(iface, count);
}


/* A receive completion that carries an active message or a flow control
 * message (SEND), or the notification of a put (RDMA_WRITE_WITH_IMM) */
static UCS_F_ALWAYS_INLINE void
uct_hcr_iface_handle_recv(uct_hcr_iface_t *iface, const struct ibv_wc *wc)
{
    uct_rc_iface_t *rc_iface       = &iface->super;
    uct_ib_iface_recv_desc_t *desc = (uct_ib_iface_recv_desc_t*)wc->wr_id;
    uct_rc_hdr_t *hdr;
    uct_rc_iface_ops_t *rc_ops;
    ucs_status_t status;

    if (ucs_unlikely(wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)) {
        uct_hcr_iface_handle_notify(iface, ntohl(wc->imm_data), wc->byte_len);
        ucs_mpool_put_inline(desc);
        return;
    }

    hdr = (uct_rc_hdr_t*)uct_ib_iface_recv_desc_hdr(&rc_iface->super, desc);
    VALGRIND_MAKE_MEM_DEFINED(hdr, wc->byte_len);
    uct_ib_log_recv_completion(&rc_iface->super, wc, hdr, wc->byte_len,
                               uct_rc_ep_packet_dump);

    if (ucs_unlikely(hdr->am_id & UCT_RC_EP_FC_MASK)) {
        rc_ops = ucs_derived_of(rc_iface->super.ops, uct_rc_iface_ops_t);
        status = rc_ops->fc_handler(rc_iface, wc->qp_num, hdr,
                                    wc->byte_len - sizeof(*hdr), wc->imm_data,
                                    wc->slid, UCT_CB_PARAM_FLAG_DESC);
    } else {
        status = uct_iface_invoke_am(&rc_iface->super.super, hdr->am_id,
                                     hdr + 1, wc->byte_len - sizeof(*hdr),
                                     UCT_CB_PARAM_FLAG_DESC);
    }

    if (ucs_likely(status == UCS_OK)) {
        ucs_mpool_put_inline(desc);
    } else {
        uct_recv_desc((char*)desc + rc_iface->super.config.rx_headroom_offset) =
                &rc_iface->super.release_desc;
    }
}


static UCS_F_ALWAYS_INLINE unsigned
uct_hcr_iface_poll_rx(uct_hcr_iface_t *iface)
{
    unsigned num_wcs = iface->super.super.config.rx_max_poll;
    struct ibv_wc wc[num_wcs];
    ucs_status_t status;
    unsigned i;

    status = uct_ib_poll_cq(iface->super.super.cq[UCT_IB_DIR_RX], &num_wcs, wc);
    if (status != UCS_OK) {
        num_wcs = 0;
        goto out;
    }

    for (i = 0; i < num_wcs; i++) {
        if (ucs_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
            if ((wc[i].status == IBV_WC_REM_ABORT_ERR) ||
                (wc[i].status == IBV_WC_WR_FLUSH_ERR)) {
                /* flushed receives of a destroyed endpoint */
                ucs_mpool_put_inline((void*)wc[i].wr_id);
                continue;
            }
            UCT_IB_IFACE_VERBS_COMPLETION_ERR("receive", &iface->super.super,
                                              i, wc);
        }

        uct_hcr_iface_handle_recv(iface, &wc[i]);
    }

    iface->super.rx.srq.available += num_wcs;
    UCS_STATS_UPDATE_COUNTER(iface->super.super.stats,
                             UCT_IB_IFACE_STAT_RX_COMPLETION, num_wcs);

out:
    uct_hcr_iface_post_recv(iface, 0);
    return num_wcs;
}


/* Post one work request; the caller filled opcode, sg_list, num_sge and the
 * operation's fields */
static UCS_F_ALWAYS_INLINE void
uct_hcr_ep_post_send(uct_hcr_iface_t *iface, uct_hcr_ep_t *ep,
                     struct ibv_send_wr *wr, int send_flags, int max_log_sge)
{
    struct ibv_send_wr *bad_wr;
    int ret;

    /* after a transport error the QP is in ERR and UCP may still post (e.g.
     * a pending wire-up message): verbs completes such a WR with a flush
     * error, which the failed endpoint ignores */
    ucs_assertv((ep->qp->state == IBV_QPS_RTS) ||
                (ep->qp->state == IBV_QPS_ERR), "QP 0x%x state is %d",
                ep->qp->qp_num, ep->qp->state);

    if (!(send_flags & IBV_SEND_SIGNALED)) {
        send_flags |= uct_rc_iface_tx_moderation(&iface->super,
                                                 &ep->super.txqp,
                                                 IBV_SEND_SIGNALED);
    }
    if (wr->opcode == IBV_WR_RDMA_READ) {
        send_flags |= uct_rc_ep_fm(&iface->super, &ep->fi, IBV_SEND_FENCE);
    }

    wr->send_flags = send_flags;
    wr->wr_id      = ep->txcnt.pi + 1;

    uct_ib_log_post_send(&iface->super.super, ep->qp, wr, max_log_sge,
                         (wr->opcode == IBV_WR_SEND) ? uct_rc_ep_packet_dump :
                                                       NULL);

    ret = ibv_post_send(ep->qp, wr, &bad_wr);
    if (ucs_unlikely(ret != 0)) {
        ucs_fatal("ibv_post_send() returned %d (%m)", ret);
    }

    ep->txcnt.pi++;
    uct_rc_txqp_posted(&ep->super.txqp, &iface->super, 1,
                       send_flags & IBV_SEND_SIGNALED);
}


/* Post a work request whose first sge is the descriptor's buffer */
static UCS_F_ALWAYS_INLINE void
uct_hcr_ep_post_send_desc(uct_hcr_ep_t *ep, struct ibv_send_wr *wr,
                          uct_rc_iface_send_desc_t *desc, int send_flags,
                          int max_log_sge)
{
    uct_hcr_iface_t *iface = UCT_HCR_IFACE(&ep->super.super.super);

    wr->next              = NULL;
    wr->sg_list[0].addr   = (uintptr_t)(desc + 1);
    wr->sg_list[0].lkey   = desc->lkey;
    uct_hcr_ep_post_send(iface, ep, wr, send_flags, max_log_sge);
    uct_rc_txqp_add_send_op_sn(&ep->super.txqp, &desc->super, ep->txcnt.pi);
}


/* Post a zero-copy RDMA (write, write with immediate, read) of an iov */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_hcr_ep_rdma_zcopy(uct_hcr_ep_t *ep, const uct_iov_t *iov, size_t iovcnt,
                      size_t total_length, uint64_t remote_addr,
                      uint32_t rkey, uct_completion_t *comp,
                      uct_rc_send_handler_t handler, uint16_t op_flags,
                      enum ibv_wr_opcode opcode, uint32_t imm_data)
{
    uct_hcr_iface_t *iface = UCT_HCR_IFACE(&ep->super.super.super);
    struct ibv_sge sge[UCT_IB_MAX_IOV];
    struct ibv_send_wr wr;
    size_t sge_cnt;

    UCT_RC_CHECK_RES(&iface->super, &ep->super);
    sge_cnt = uct_ib_verbs_sge_fill_iov(sge, iov, iovcnt);
    if (opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
        /* cppcheck-suppress syntaxError */
        UCT_SKIP_ZERO_LENGTH(sge_cnt);
    }

    wr.next                = NULL;
    wr.opcode              = opcode;
    wr.sg_list             = sge;
    wr.num_sge             = sge_cnt;
    wr.imm_data            = imm_data;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = rkey;

    uct_hcr_ep_post_send(iface, ep, &wr, IBV_SEND_SIGNALED, INT_MAX);
    uct_rc_txqp_add_send_comp(&iface->super, &ep->super.txqp, handler, comp,
                              ep->txcnt.pi,
                              op_flags | UCT_RC_IFACE_SEND_OP_FLAG_ZCOPY,
                              iov, iovcnt, total_length);
    return UCS_INPROGRESS;
}

#endif
