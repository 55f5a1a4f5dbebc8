/*
 * The INIT -> RTR -> RTS sequence of an RC QP to a peer on this host (port
 * 1, MTU 4096, remote writes allowed), for the small verbs programs that
 * measure softverbs on its own (softverbs-overlap, bench/verbs-notify-lat).
 * Returns 0, or the step that failed.
 */
#ifndef SV_RC_CONNECT_H
#define SV_RC_CONNECT_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>

static inline const char *sv_rc_connect(struct ibv_qp *qp, uint32_t dest_qpn,
                                        uint16_t dlid)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state        = IBV_QPS_INIT;
    a.port_num        = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                      IBV_QP_ACCESS_FLAGS)) {
        return "INIT";
    }
    memset(&a, 0, sizeof(a));
    a.qp_state           = IBV_QPS_RTR;
    a.path_mtu           = IBV_MTU_4096;
    a.dest_qp_num        = dest_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer      = 1;
    a.ah_attr.dlid       = dlid;
    a.ah_attr.port_num   = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        return "RTR";
    }
    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = 14;
    a.retry_cnt     = 7;
    a.rnr_retry     = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC)) {
        return "RTS";
    }
    return NULL;
}

#endif
