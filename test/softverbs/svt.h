/*
 * Helpers for the softverbs tests: endpoints (context, PD, CQs, QP),
 * connecting RC QPs across ranks, posting and polling.
 */
#ifndef SVT_H_
#define SVT_H_

#include "th.h"

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    struct ibv_context      *ctx;
    struct ibv_pd           *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq           *scq;
    struct ibv_cq           *rcq;
    struct ibv_srq          *srq;
    struct ibv_qp           *qp;
} svt_ep_t;

typedef struct {
    uint32_t qpn;
    uint16_t lid;
    uint64_t addr;
    uint32_t rkey;
    uint64_t len;
    int32_t  pid;
} svt_info_t;

/* Put the ranks of this test on two hosts (network namespaces joined by a
 * veth pair, rank r on host r mod 2), or skip saying why it cannot
 * (test_sv_net.c). */
void svt_net_hosts(void);

/* A test that runs twice: as softverbs._name, with its ranks on one host
 * (the same-host data path), and as softverbs_net._name, across two hosts
 * (the network data path). */
#define SVT_TEST_HOSTS_TIMEOUT(_name, _timeout) \
    static void svt_body_##_name(void); \
    TH_TEST_TIMEOUT(softverbs, _name, _timeout) \
    { \
        svt_body_##_name(); \
    } \
    TH_TEST_TIMEOUT(softverbs_net, _name, _timeout) \
    { \
        svt_net_hosts(); \
        svt_body_##_name(); \
    } \
    static void svt_body_##_name(void)

#define SVT_TEST_HOSTS(_name) \
    SVT_TEST_HOSTS_TIMEOUT(_name, TH_DEFAULT_TIMEOUT)

#define SVT_ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static inline void svt_need_device(void)
{
    struct ibv_device **list;
    int n = 0;

    list = ibv_get_device_list(&n);
    if (list == NULL || n == 0 ||
        strncmp(ibv_get_device_name(list[0]), "softverbs", 9) != 0) {
        if (list) {
            ibv_free_device_list(list);
        }
        TH_SKIP("no softverbs device (run with LD_PRELOAD=libsoftverbs.so)");
    }
    ibv_free_device_list(list);
}

static inline void svt_ep_open(svt_ep_t *ep, enum ibv_qp_type type,
                               int use_srq, int use_channel)
{
    struct ibv_qp_init_attr qa;
    struct ibv_device **list;
    int n;

    memset(ep, 0, sizeof(*ep));
    svt_need_device();
    list = ibv_get_device_list(&n);
    ep->ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    TH_ASSERT(ep->ctx != NULL);
    ep->pd = ibv_alloc_pd(ep->ctx);
    TH_ASSERT(ep->pd != NULL);
    if (use_channel) {
        ep->ch = ibv_create_comp_channel(ep->ctx);
        TH_ASSERT(ep->ch != NULL);
    }
    ep->scq = ibv_create_cq(ep->ctx, 256, NULL, NULL, 0);
    ep->rcq = ibv_create_cq(ep->ctx, 256, NULL, ep->ch, 0);
    TH_ASSERT(ep->scq != NULL && ep->rcq != NULL);
    if (use_srq) {
        struct ibv_srq_init_attr sa;

        memset(&sa, 0, sizeof(sa));
        sa.attr.max_wr  = 128;
        sa.attr.max_sge = 4;
        ep->srq = ibv_create_srq(ep->pd, &sa);
        TH_ASSERT(ep->srq != NULL);
    }
    memset(&qa, 0, sizeof(qa));
    qa.send_cq             = ep->scq;
    qa.recv_cq             = ep->rcq;
    qa.srq                 = ep->srq;
    qa.qp_type             = type;
    qa.cap.max_send_wr     = 128;
    qa.cap.max_recv_wr     = 128;
    qa.cap.max_send_sge    = 4;
    qa.cap.max_recv_sge    = 4;
    qa.cap.max_inline_data = 64;
    ep->qp = ibv_create_qp(ep->pd, &qa);
    TH_ASSERT(ep->qp != NULL);
}

static inline void svt_ep_close(svt_ep_t *ep)
{
    if (ep->qp != NULL) { /* a test may have destroyed it already */
        TH_ASSERT_EQ(ibv_destroy_qp(ep->qp), 0);
    }
    if (ep->srq) {
        TH_ASSERT_EQ(ibv_destroy_srq(ep->srq), 0);
    }
    TH_ASSERT_EQ(ibv_destroy_cq(ep->scq), 0);
    TH_ASSERT_EQ(ibv_destroy_cq(ep->rcq), 0);
    if (ep->ch) {
        TH_ASSERT_EQ(ibv_destroy_comp_channel(ep->ch), 0);
    }
    TH_ASSERT_EQ(ibv_dealloc_pd(ep->pd), 0);
    TH_ASSERT_EQ(ibv_close_device(ep->ctx), 0);
}

static inline uint16_t svt_lid(svt_ep_t *ep)
{
    struct ibv_port_attr pa;

    TH_ASSERT_EQ(ibv_query_port(ep->ctx, 1, &pa), 0);
    return pa.lid;
}

/* Connect an RC QP to a peer's; access: the remote operations the QP
 * accepts as a responder (IBV_ACCESS_REMOTE_*) */
static inline void svt_rc_connect_access(svt_ep_t *ep, const svt_info_t *peer,
                                         uint8_t rnr_retry,
                                         uint8_t min_rnr_timer, uint8_t timeout,
                                         uint8_t retry_cnt, unsigned access)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state        = IBV_QPS_INIT;
    a.port_num        = 1;
    a.qp_access_flags = access;
    TH_ASSERT_EQ(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                               IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state           = IBV_QPS_RTR;
    a.path_mtu           = IBV_MTU_4096;
    a.dest_qp_num        = peer->qpn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer      = min_rnr_timer;
    a.ah_attr.dlid       = peer->lid;
    a.ah_attr.port_num   = 1;
    TH_ASSERT_EQ(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_AV |
                               IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                               IBV_QP_MIN_RNR_TIMER), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = timeout;
    a.retry_cnt     = retry_cnt;
    a.rnr_retry     = rnr_retry;
    a.max_rd_atomic = 4;
    TH_ASSERT_EQ(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), 0);
    TH_ASSERT_EQ(ep->qp->state, IBV_QPS_RTS);
}

static inline void svt_rc_connect_ex(svt_ep_t *ep, const svt_info_t *peer,
                                     uint8_t rnr_retry, uint8_t min_rnr_timer,
                                     uint8_t timeout, uint8_t retry_cnt)
{
    svt_rc_connect_access(ep, peer, rnr_retry, min_rnr_timer, timeout,
                          retry_cnt,
                          IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC);
}

static inline void svt_rc_connect(svt_ep_t *ep, const svt_info_t *peer)
{
    svt_rc_connect_ex(ep, peer, 7, 1, 14, 7);
}

/* swap endpoint info with one peer rank */
static inline void svt_exchange(th_oob_t *oob, int peer, const svt_info_t *mine,
                                svt_info_t *theirs)
{
    void *buf;
    size_t len;

    th_oob_exchange(oob, peer, mine, sizeof(*mine), &buf, &len);
    TH_ASSERT_EQ(len, sizeof(*theirs));
    memcpy(theirs, buf, sizeof(*theirs));
    free(buf);
}

static inline svt_info_t svt_info(svt_ep_t *ep, struct ibv_mr *mr)
{
    svt_info_t i;

    memset(&i, 0, sizeof(i));
    i.qpn  = ep->qp->qp_num;
    i.lid  = svt_lid(ep);
    i.pid  = getpid();
    if (mr != NULL) {
        i.addr = (uintptr_t)mr->addr;
        i.rkey = mr->rkey;
        i.len  = mr->length;
    }
    return i;
}

/* An RC endpoint connected to the other of two ranks, with a page-aligned
 * buffer of len bytes, each set to fill, registered for every access; the
 * ranks meet after connecting. The peer's buffer is in *peer. */
static inline struct ibv_mr *svt_rc_pair(th_oob_t *oob, int rank, svt_ep_t *ep,
                                         size_t len, int fill,
                                         uint8_t **buf_p, svt_info_t *peer)
{
    svt_info_t mine;
    struct ibv_mr *mr;

    svt_ep_open(ep, IBV_QPT_RC, 0, 0);
    *buf_p = aligned_alloc(4096, len);
    TH_ASSERT(*buf_p != NULL);
    memset(*buf_p, fill, len);
    mr = ibv_reg_mr(ep->pd, *buf_p, len, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(ep, mr);
    svt_exchange(oob, !rank, &mine, peer);
    svt_rc_connect(ep, peer);
    th_oob_barrier(oob);
    return mr;
}

/* wait for one completion, failing the test after timeout_s */
static inline void svt_poll(struct ibv_cq *cq, struct ibv_wc *wc,
                            double timeout_s)
{
    double end = th_time() + timeout_s;
    int n;

    while ((n = ibv_poll_cq(cq, 1, wc)) == 0) {
        if (th_time() > end) {
            TH_FAIL("no completion within %.1f s", timeout_s);
        }
    }
    TH_ASSERT_EQ(n, 1);
}

/* expect no completion for a while */
static inline void svt_poll_none(struct ibv_cq *cq, double secs)
{
    double end = th_time() + secs;
    struct ibv_wc wc;

    while (th_time() < end) {
        TH_ASSERT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
    }
}

static inline int svt_post(struct ibv_qp *qp, enum ibv_wr_opcode op,
                           struct ibv_sge *sge, int nsge, uint64_t raddr,
                           uint32_t rkey, uint64_t wr_id, unsigned flags)
{
    struct ibv_send_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id               = wr_id;
    wr.opcode              = op;
    wr.sg_list             = sge;
    wr.num_sge             = nsge;
    wr.send_flags          = flags;
    wr.imm_data            = htobe32(0x1234abcd);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey        = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

static inline void svt_post_recv(struct ibv_qp *qp, void *addr, uint32_t len,
                                 uint32_t lkey, uint64_t wr_id)
{
    struct ibv_sge sge = { (uintptr_t)addr, len, lkey };
    struct ibv_recv_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    TH_ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
}

static inline struct ibv_sge svt_sge(void *addr, uint32_t len,
                                     struct ibv_mr *mr)
{
    struct ibv_sge s = { (uintptr_t)addr, len, mr->lkey };

    return s;
}

#endif
