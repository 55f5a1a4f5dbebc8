/*
 * softverbs: the queues of the receive path (sv.h, "Ring"). A receive
 * queue's owner learns of consumed WQEs from its completions rather than
 * from the initiators' counter, and a ring entry is there when its sequence
 * says so; these tests check that the queues still hold exactly what verbs
 * promise: a receive queue takes its capacity and not one WQE more, however
 * long an application keeps it full, its WQEs complete once and in order,
 * a reset drops them, and a CQ keeps its first completions when it
 * overruns.
 */
#include "svt.h"

#include <errno.h>

#define RING_MSGS 2000 /* messages through a full queue: many laps */

typedef struct {
    svt_ep_t a, b; /* a sends, b receives */
    uint8_t *buf; /* a's payloads, then b's receive slots */
    struct ibv_mr *mra, *mrb;
    uint32_t cap; /* b's receive capacity, as created */
} ring_pair_t;

/* two QPs of this process, connected; b receives on its RQ or an SRQ */
static void ring_open(ring_pair_t *p, int use_srq)
{
    struct ibv_srq_attr sa;
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr qa;
    svt_info_t info_a, info_b;

    svt_ep_open(&p->a, IBV_QPT_RC, 0, 0);
    svt_ep_open(&p->b, IBV_QPT_RC, use_srq, 0);
    p->buf = aligned_alloc(4096, 2 * 4096);
    TH_ASSERT(p->buf != NULL);
    memset(p->buf, 0, 2 * 4096);
    p->mra = ibv_reg_mr(p->a.pd, p->buf, 4096, SVT_ALL_ACCESS);
    p->mrb = ibv_reg_mr(p->b.pd, p->buf + 4096, 4096, SVT_ALL_ACCESS);
    TH_ASSERT(p->mra != NULL && p->mrb != NULL);
    info_a = svt_info(&p->a, p->mra);
    info_b = svt_info(&p->b, p->mrb);
    svt_rc_connect(&p->a, &info_b);
    svt_rc_connect(&p->b, &info_a);
    if (use_srq) {
        TH_ASSERT_EQ(ibv_query_srq(p->b.srq, &sa), 0);
        p->cap = sa.max_wr;
    } else {
        TH_ASSERT_EQ(ibv_query_qp(p->b.qp, &qa, IBV_QP_CAP, &ia), 0);
        p->cap = qa.cap.max_recv_wr;
    }
    /* svt_ep_open asks for 128 */
    TH_ASSERT_EQ(p->cap, 128);
}

static void ring_close(ring_pair_t *p)
{
    ibv_dereg_mr(p->mra);
    ibv_dereg_mr(p->mrb);
    svt_ep_close(&p->a);
    svt_ep_close(&p->b);
    free(p->buf);
}

/* post one 8-byte receive slot of b (slot = wr_id mod 32); 0 or errno */
static int ring_post_recv(ring_pair_t *p, uint64_t wr_id)
{
    struct ibv_sge sge = svt_sge(p->buf + 4096 + (wr_id % 32) * 8, 8, p->mrb);
    struct ibv_recv_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return p->b.srq ? ibv_post_srq_recv(p->b.srq, &wr, &bad) :
                      ibv_post_recv(p->b.qp, &wr, &bad);
}

/* a sends the 8-byte value v; b's completion must be WQE wr_id with v */
static void ring_send_expect(ring_pair_t *p, uint64_t v, uint64_t wr_id)
{
    struct ibv_sge sge = svt_sge(p->buf, 8, p->mra);
    struct ibv_wc wc;
    uint64_t got;

    memcpy(p->buf, &v, 8);
    TH_ASSERT_EQ(svt_post(p->a.qp, IBV_WR_SEND, &sge, 1, 0, 0, v,
                          IBV_SEND_SIGNALED),
                 0);
    svt_poll(p->a.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    svt_poll(p->b.rcq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    if (wc.wr_id != wr_id) {
        TH_FAIL("message %lu completed WQE %lu, expected %lu", (unsigned long)v,
                (unsigned long)wc.wr_id, (unsigned long)wr_id);
    }
    memcpy(&got, p->buf + 4096 + (wr_id % 32) * 8, 8);
    TH_ASSERT_EQ(got, v);
}

/*
 * An application that reposts after every completion keeps its queue full
 * for many laps of the ring: each repost fits, one more never does, and
 * every message takes the oldest WQE.
 */
static void ring_kept_full(int use_srq)
{
    ring_pair_t p;
    uint64_t i;

    ring_open(&p, use_srq);
    for (i = 0; i < p.cap; ++i) {
        TH_ASSERT_EQ(ring_post_recv(&p, i), 0);
    }
    TH_ASSERT_EQ(ring_post_recv(&p, 999999), ENOMEM);
    for (i = 0; i < RING_MSGS; ++i) {
        ring_send_expect(&p, 1000000 + i, i);
        TH_ASSERT_EQ(ring_post_recv(&p, p.cap + i), 0);
        if (ring_post_recv(&p, 999999) != ENOMEM) {
            TH_FAIL("after %lu messages the full queue took one more WQE",
                    (unsigned long)i + 1);
        }
    }
    ring_close(&p);
}

TH_TEST(softverbs, ring_rq_kept_full)
{
    ring_kept_full(0);
}

TH_TEST(softverbs, ring_srq_kept_full)
{
    ring_kept_full(1);
}

/* A reset drops the posted WQEs: after it the queue takes its whole
 * capacity again, and messages complete the new WQEs, not the old. */
TH_TEST(softverbs, ring_reset_drops_wqes)
{
    struct ibv_qp_attr qa;
    svt_info_t info_a;
    ring_pair_t p;
    uint64_t i;

    ring_open(&p, 0);
    for (i = 0; i < p.cap; ++i) {
        TH_ASSERT_EQ(ring_post_recv(&p, i), 0);
    }
    ring_send_expect(&p, 7, 0); /* one consumed, and its CQE polled */
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RESET;
    TH_ASSERT_EQ(ibv_modify_qp(p.b.qp, &qa, IBV_QP_STATE), 0);
    info_a = svt_info(&p.a, p.mra);
    svt_rc_connect(&p.b, &info_a);
    for (i = 0; i < p.cap; ++i) {
        TH_ASSERT_EQ(ring_post_recv(&p, 5000 + i), 0);
    }
    TH_ASSERT_EQ(ring_post_recv(&p, 999999), ENOMEM);
    for (i = 0; i < 3 * p.cap; ++i) {
        ring_send_expect(&p, 100 + i, 5000 + i);
        TH_ASSERT_EQ(ring_post_recv(&p, 5000 + p.cap + i), 0);
    }
    ring_close(&p);
}

/* A CQ that nobody polls keeps its first completions, in order, and drops
 * the rest (an overrun, as on an HCA); polled again, it works on. */
TH_TEST(softverbs, ring_cq_overrun)
{
    struct ibv_qp_init_attr qa;
    struct ibv_device **list;
    struct ibv_wc wc[16];
    svt_ep_t ea, eb;
    svt_info_t ia, ib;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_cq *cq, *rcq;
    uint64_t *buf;
    int i, n, cqe;

    svt_need_device();
    memset(&ea, 0, sizeof(ea));
    list   = ibv_get_device_list(&n);
    ea.ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    TH_ASSERT(ea.ctx != NULL);
    ea.pd = ibv_alloc_pd(ea.ctx);
    cq    = ibv_create_cq(ea.ctx, 4, NULL, NULL, 0);
    rcq   = ibv_create_cq(ea.ctx, 4, NULL, NULL, 0);
    buf   = aligned_alloc(4096, 4096);
    TH_ASSERT(ea.pd != NULL && cq != NULL && rcq != NULL && buf != NULL);
    mr = ibv_reg_mr(ea.pd, buf, 4096, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    cqe = cq->cqe;
    TH_ASSERT(cqe >= 4 && cqe < 16);
    memset(&qa, 0, sizeof(qa));
    qa.send_cq          = cq;
    qa.recv_cq          = rcq;
    qa.qp_type          = IBV_QPT_RC;
    qa.cap.max_send_wr  = 64;
    qa.cap.max_recv_wr  = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    eb                  = ea;
    ea.qp               = ibv_create_qp(ea.pd, &qa);
    eb.qp               = ibv_create_qp(ea.pd, &qa);
    TH_ASSERT(ea.qp != NULL && eb.qp != NULL);
    ia = svt_info(&ea, mr);
    ib = svt_info(&eb, mr);
    svt_rc_connect(&ea, &ib);
    svt_rc_connect(&eb, &ia);

    /* cqe + 4 signaled WRITEs, none polled */
    sge = svt_sge(buf, 8, mr);
    for (i = 0; i < cqe + 4; ++i) {
        TH_ASSERT_EQ(svt_post(ea.qp, IBV_WR_RDMA_WRITE, &sge, 1,
                              (uintptr_t)(buf + 8), mr->rkey, i,
                              IBV_SEND_SIGNALED),
                     0);
    }
    /* at least the cqe it reported (softverbs keeps one spare entry) */
    n = ibv_poll_cq(cq, 16, wc);
    TH_ASSERT(n >= cqe && n <= cqe + 1);
    for (i = 0; i < n; ++i) {
        TH_ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(wc[i].wr_id, i);
    }
    TH_ASSERT_EQ(ibv_poll_cq(cq, 16, wc), 0);
    /* and on, for more laps than the ring has entries */
    for (i = 0; i < 10 * cqe; ++i) {
        TH_ASSERT_EQ(svt_post(ea.qp, IBV_WR_RDMA_WRITE, &sge, 1,
                              (uintptr_t)(buf + 8), mr->rkey, 100 + i,
                              IBV_SEND_SIGNALED),
                     0);
        svt_poll(cq, wc, 10);
        TH_ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(wc[0].wr_id, 100 + i);
    }
    TH_ASSERT_EQ(ibv_destroy_qp(ea.qp), 0);
    TH_ASSERT_EQ(ibv_destroy_qp(eb.qp), 0);
    TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
    TH_ASSERT_EQ(ibv_destroy_cq(cq), 0);
    TH_ASSERT_EQ(ibv_destroy_cq(rcq), 0);
    TH_ASSERT_EQ(ibv_dealloc_pd(ea.pd), 0);
    TH_ASSERT_EQ(ibv_close_device(ea.ctx), 0);
    free(buf);
}
