/*
 * softverbs: errors as an HCA reports them (keys, bounds, access flags,
 * RNR, retry timeout, flush), async events, a killed peer, the memlock
 * limit, the registration cost model and the link model.
 */
#define _GNU_SOURCE /* process_vm_writev */
#include "svt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
    svt_ep_t       a, b;
    uint8_t       *buf;
    struct ibv_mr *mra, *mrb;
    svt_info_t     ia, ib;
} svt_loop_t;

#define LOOP_BUF 65536

/* two QPs of this process connected to each other */
static void loop_open(svt_loop_t *l, int b_srq, uint8_t rnr_retry,
                      uint8_t timeout)
{
    svt_ep_open(&l->a, IBV_QPT_RC, 0, 0);
    svt_ep_open(&l->b, IBV_QPT_RC, b_srq, 0);
    l->buf = aligned_alloc(4096, 2 * LOOP_BUF);
    memset(l->buf, 0, 2 * LOOP_BUF);
    l->mra = ibv_reg_mr(l->a.pd, l->buf, LOOP_BUF, SVT_ALL_ACCESS);
    /* b's buffer: local write and remote write only, no remote read */
    l->mrb = ibv_reg_mr(l->b.pd, l->buf + LOOP_BUF, LOOP_BUF,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    TH_ASSERT(l->mra != NULL && l->mrb != NULL);
    l->ia = svt_info(&l->a, l->mra);
    l->ib = svt_info(&l->b, l->mrb);
    svt_rc_connect_ex(&l->a, &l->ib, rnr_retry, 1, timeout, 2);
    svt_rc_connect_ex(&l->b, &l->ia, rnr_retry, 1, timeout, 2);
}

static void loop_close(svt_loop_t *l)
{
    ibv_dereg_mr(l->mra);
    ibv_dereg_mr(l->mrb);
    svt_ep_close(&l->a);
    svt_ep_close(&l->b);
    free(l->buf);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;

    TH_ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
    return a.qp_state;
}

/* post one WRITE that must fail with 'status', then check that the QP is in
 * error and that a following unsignaled WR is flushed */
static void expect_write_error(svt_loop_t *l, struct ibv_sge *sge,
                               uint64_t raddr, uint32_t rkey,
                               enum ibv_wr_opcode op,
                               enum ibv_wc_status status)
{
    struct ibv_sge ok = svt_sge(l->buf, 8, l->mra);
    struct ibv_wc wc;

    TH_ASSERT_EQ(svt_post(l->a.qp, op, sge, 1, raddr, rkey, 1,
                          0 /* unsignaled: errors complete anyway */), 0);
    TH_ASSERT_EQ(svt_post(l->a.qp, IBV_WR_RDMA_WRITE, &ok, 1, l->ib.addr,
                          l->ib.rkey, 2, 0), 0);
    svt_poll(l->a.scq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 1);
    TH_ASSERT_EQ(wc.status, status);
    svt_poll(l->a.scq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 2);
    TH_ASSERT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    TH_ASSERT_EQ(qp_state(l->a.qp), IBV_QPS_ERR);
}

/* b (the responder) is in error, its next receive is flushed, and its
 * context has the async event */
static void expect_responder_error(svt_loop_t *l, enum ibv_event_type type,
                                   uint64_t flushed_wr_id)
{
    struct ibv_async_event ev;
    struct pollfd pfd;
    struct ibv_wc wc;

    TH_ASSERT_EQ(qp_state(l->b.qp), IBV_QPS_ERR);
    svt_poll(l->b.rcq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, flushed_wr_id);
    TH_ASSERT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    pfd.fd     = l->b.ctx->async_fd;
    pfd.events = POLLIN;
    TH_ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    TH_ASSERT_EQ(ibv_get_async_event(l->b.ctx, &ev), 0);
    TH_ASSERT_EQ(ev.event_type, type);
    TH_ASSERT(ev.element.qp == l->b.qp);
    ibv_ack_async_event(&ev);
    TH_ASSERT_EQ(l->b.qp->state, IBV_QPS_ERR);
}

TH_TEST(softverbs, err_bad_lkey)
{
    svt_loop_t l;
    struct ibv_sge sge;

    loop_open(&l, 0, 7, 14);
    sge = svt_sge(l.buf, 64, l.mra);
    sge.lkey ^= 0x100;
    expect_write_error(&l, &sge, l.ib.addr, l.ib.rkey, IBV_WR_RDMA_WRITE,
                       IBV_WC_LOC_PROT_ERR);
    loop_close(&l);
}

TH_TEST(softverbs, err_bad_rkey)
{
    svt_loop_t l;
    struct ibv_sge sge;

    loop_open(&l, 0, 7, 14);
    svt_post_recv(l.b.qp, l.buf + LOOP_BUF, 64, l.mrb->lkey, 33);
    sge = svt_sge(l.buf, 64, l.mra);
    expect_write_error(&l, &sge, l.ib.addr, l.ib.rkey + 0x100,
                       IBV_WR_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR);
    /* the responder QP goes to error too, flushes, and its owner is told */
    expect_responder_error(&l, IBV_EVENT_QP_ACCESS_ERR, 33);
    loop_close(&l);
}

TH_TEST(softverbs, err_recv_too_small)
{
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_loop_t l;

    loop_open(&l, 0, 7, 14);
    svt_post_recv(l.b.qp, l.buf + LOOP_BUF, 16, l.mrb->lkey, 40);
    svt_post_recv(l.b.qp, l.buf + LOOP_BUF, 16, l.mrb->lkey, 41);
    sge = svt_sge(l.buf, 64, l.mra);
    TH_ASSERT_EQ(svt_post(l.a.qp, IBV_WR_SEND, &sge, 1, 0, 0, 1,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(l.a.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    svt_poll(l.b.rcq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 40);
    TH_ASSERT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
    expect_responder_error(&l, IBV_EVENT_QP_REQ_ERR, 41);
    loop_close(&l);
}

TH_TEST(softverbs, err_out_of_bounds)
{
    svt_loop_t l;
    struct ibv_sge sge;

    loop_open(&l, 0, 7, 14);
    sge = svt_sge(l.buf, 64, l.mra);
    expect_write_error(&l, &sge, l.ib.addr + LOOP_BUF - 32, l.ib.rkey,
                       IBV_WR_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR);
    loop_close(&l);
}

TH_TEST(softverbs, err_missing_access)
{
    svt_loop_t l;
    struct ibv_sge sge;

    loop_open(&l, 0, 7, 14);
    /* b's MR has no REMOTE_READ */
    sge = svt_sge(l.buf, 64, l.mra);
    expect_write_error(&l, &sge, l.ib.addr, l.ib.rkey, IBV_WR_RDMA_READ,
                       IBV_WC_REM_ACCESS_ERR);
    loop_close(&l);
}

TH_TEST(softverbs, err_rnr_retry_exceeded)
{
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_loop_t l;
    double t0;

    loop_open(&l, 0, 2, 14);
    sge = svt_sge(l.buf, 64, l.mra);
    t0  = th_time();
    TH_ASSERT_EQ(svt_post(l.a.qp, IBV_WR_SEND, &sge, 1, 0, 0, 1,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(l.a.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    /* 2 retries of min_rnr_timer 1 (10 us) each */
    TH_ASSERT_DBL(th_time() - t0, <, 1.0);
    TH_ASSERT_EQ(qp_state(l.a.qp), IBV_QPS_ERR);
    loop_close(&l);
}

TH_TEST(softverbs, rnr_then_recv_posted)
{
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_loop_t l;

    loop_open(&l, 0, 7, 14);   /* rnr_retry 7: retry forever */
    th_fill_pattern(l.buf, 64, 3);
    sge = svt_sge(l.buf, 64, l.mra);
    TH_ASSERT_EQ(svt_post(l.a.qp, IBV_WR_SEND, &sge, 1, 0, 0, 1,
                          IBV_SEND_SIGNALED), 0);
    svt_poll_none(l.a.scq, 0.05);
    svt_post_recv(l.b.qp, l.buf + LOOP_BUF, 4096, l.mrb->lkey, 7);
    svt_poll(l.a.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    svt_poll(l.b.rcq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 7);
    TH_CHECK_PATTERN(l.buf + LOOP_BUF, 64, 3);
    loop_close(&l);
}

TH_TEST(softverbs, err_retry_peer_in_error)
{
    struct ibv_qp_attr a;
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_loop_t l;

    loop_open(&l, 0, 7, 1);    /* timeout 1: 8 us x (retry_cnt 2 + 1) */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    TH_ASSERT_EQ(ibv_modify_qp(l.b.qp, &a, IBV_QP_STATE), 0);
    sge = svt_sge(l.buf, 64, l.mra);
    TH_ASSERT_EQ(svt_post(l.a.qp, IBV_WR_RDMA_WRITE, &sge, 1, l.ib.addr,
                          l.ib.rkey, 1, IBV_SEND_SIGNALED), 0);
    svt_poll(l.a.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    loop_close(&l);
}

TH_TEST(softverbs, flush_on_error)
{
    struct ibv_qp_attr a;
    struct ibv_wc wc;
    svt_loop_t l;
    int i;

    loop_open(&l, 0, 7, 14);
    for (i = 0; i < 3; ++i) {
        svt_post_recv(l.b.qp, l.buf + LOOP_BUF, 64, l.mrb->lkey, 10 + i);
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    TH_ASSERT_EQ(ibv_modify_qp(l.b.qp, &a, IBV_QP_STATE), 0);
    TH_ASSERT_EQ(l.b.qp->state, IBV_QPS_ERR);
    for (i = 0; i < 3; ++i) {
        svt_poll(l.b.rcq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        TH_ASSERT_EQ(wc.wr_id, 10 + i);
    }
    /* WRs posted in error complete with flush errors, unsignaled too */
    {
        struct ibv_sge sge = svt_sge(l.buf + LOOP_BUF, 8, l.mrb);

        TH_ASSERT_EQ(svt_post(l.b.qp, IBV_WR_SEND, &sge, 1, 0, 0, 20, 0), 0);
        svt_poll(l.b.scq, &wc, 10);
        TH_ASSERT_EQ(wc.wr_id, 20);
        TH_ASSERT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        svt_post_recv(l.b.qp, l.buf + LOOP_BUF, 64, l.mrb->lkey, 21);
        svt_poll(l.b.rcq, &wc, 10);
        TH_ASSERT_EQ(wc.wr_id, 21);
        TH_ASSERT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    }
    loop_close(&l);
}

TH_TEST(softverbs, last_wqe_reached)
{
    struct ibv_async_event ev;
    struct ibv_qp_attr a;
    struct pollfd pfd;
    svt_loop_t l;

    loop_open(&l, 1, 7, 14);   /* b uses an SRQ */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    TH_ASSERT_EQ(ibv_modify_qp(l.b.qp, &a, IBV_QP_STATE), 0);
    pfd.fd     = l.b.ctx->async_fd;
    pfd.events = POLLIN;
    TH_ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    TH_ASSERT_EQ(ibv_get_async_event(l.b.ctx, &ev), 0);
    TH_ASSERT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    TH_ASSERT(ev.element.qp == l.b.qp);
    ibv_ack_async_event(&ev);
    /* UCX makes async_fd non-blocking: no event then means EAGAIN */
    TH_ASSERT_EQ(fcntl(l.b.ctx->async_fd, F_SETFL,
                       fcntl(l.b.ctx->async_fd, F_GETFL) | O_NONBLOCK), 0);
    TH_ASSERT_EQ(poll(&pfd, 1, 0), 0);
    TH_ASSERT_EQ(ibv_get_async_event(l.b.ctx, &ev), -1);
    TH_ASSERT_EQ(errno, EAGAIN);
    loop_close(&l);
}

/* a QP event not yet read when its QP is destroyed is dropped, as the
 * kernel does: reading it later would hand out a pointer to a freed QP */
TH_TEST(softverbs, async_event_dropped_on_destroy)
{
    struct ibv_async_event ev;
    struct ibv_qp_attr a;
    svt_loop_t l;

    loop_open(&l, 1, 7, 14);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    TH_ASSERT_EQ(ibv_modify_qp(l.b.qp, &a, IBV_QP_STATE), 0);
    TH_ASSERT_EQ(ibv_destroy_qp(l.b.qp), 0);
    l.b.qp = NULL;
    TH_ASSERT_EQ(fcntl(l.b.ctx->async_fd, F_SETFL,
                       fcntl(l.b.ctx->async_fd, F_GETFL) | O_NONBLOCK), 0);
    TH_ASSERT_EQ(ibv_get_async_event(l.b.ctx, &ev), -1);
    TH_ASSERT_EQ(errno, EAGAIN);
    loop_close(&l);
}

typedef struct {
    struct ibv_qp *qp;
    int            done;
} destroy_arg_t;

static void *destroy_thread(void *arg)
{
    destroy_arg_t *d = arg;

    d->done = (ibv_destroy_qp(d->qp) == 0) ? 1 : -1;
    return NULL;
}

/* ibv_destroy_qp returns only after the events it reported were acked */
TH_TEST(softverbs, destroy_qp_waits_for_ack)
{
    struct ibv_async_event ev;
    struct ibv_qp_attr a;
    destroy_arg_t d;
    pthread_t thread;
    svt_loop_t l;

    loop_open(&l, 1, 7, 14);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    TH_ASSERT_EQ(ibv_modify_qp(l.b.qp, &a, IBV_QP_STATE), 0);
    TH_ASSERT_EQ(ibv_get_async_event(l.b.ctx, &ev), 0);
    TH_ASSERT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    d.qp   = l.b.qp;
    d.done = 0;
    TH_ASSERT_EQ(pthread_create(&thread, NULL, destroy_thread, &d), 0);
    usleep(200000);
    TH_ASSERT_EQ(__atomic_load_n(&d.done, __ATOMIC_ACQUIRE), 0);
    TH_ASSERT_EQ(ev.element.qp->qp_num, l.b.qp->qp_num); /* still valid */
    ibv_ack_async_event(&ev);
    TH_ASSERT_EQ(pthread_join(thread, NULL), 0);
    TH_ASSERT_EQ(d.done, 1);
    l.b.qp = NULL;
    loop_close(&l);
}

TH_TEST(softverbs, qp_state_machine)
{
    struct ibv_qp_attr a;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    memset(&a, 0, sizeof(a));
    /* RESET -> RTR is not a valid transition */
    a.qp_state = IBV_QPS_RTR;
    TH_ASSERT_NE(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE), 0);
    /* RESET -> INIT needs port, pkey index and access flags */
    a.qp_state = IBV_QPS_INIT;
    TH_ASSERT_NE(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE), 0);
    a.port_num = 1;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE | IBV_QP_PORT |
                               IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), 0);
    /* INIT -> RTR without the path attributes fails */
    a.qp_state = IBV_QPS_RTR;
    TH_ASSERT_NE(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE), 0);
    /* posting a send before RTS fails */
    {
        struct ibv_sge sge = { 0, 0, 0 };

        TH_ASSERT_NE(svt_post(ep.qp, IBV_WR_SEND, &sge, 0, 0, 0, 1, 0), 0);
    }
    a.qp_state = IBV_QPS_RESET;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE), 0);
    TH_ASSERT_EQ(ep.qp->state, IBV_QPS_RESET);
    svt_ep_close(&ep);
}

/* ---------------------------------------------------------------------- */

/* With a 1 MiB limit: two registrations of 512 KiB fit, a third page does
 * not (ENOMEM) until one of them goes */
static void memlock_check(void)
{
    struct ibv_mr *m1, *m2, *m3;
    uint8_t *buf;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 4 << 20);
    m1  = ibv_reg_mr(ep.pd, buf, 512 * 1024, IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(m1 != NULL);
    m2  = ibv_reg_mr(ep.pd, buf + (1 << 20), 512 * 1024,
                     IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(m2 != NULL);
    errno = 0;
    m3 = ibv_reg_mr(ep.pd, buf + (2 << 20), 4096, IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(m3 == NULL);
    TH_ASSERT_EQ(errno, ENOMEM);
    TH_ASSERT_EQ(ibv_dereg_mr(m1), 0);
    m3 = ibv_reg_mr(ep.pd, buf + (2 << 20), 4096, IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(m3 != NULL);
    ibv_dereg_mr(m2);
    ibv_dereg_mr(m3);
    svt_ep_close(&ep);
    free(buf);
}

TH_TEST(softverbs, memlock_limit)
{
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "1M", 1);
    memlock_check();
}

/* without SOFTVERBS_MEMLOCK_LIMIT, the limit is the process' own
 * RLIMIT_MEMLOCK, as a real HCA driver's; like the kernel, softverbs lets a
 * process with CAP_IPC_LOCK (root) lock past it, so the test drops that
 * capability from its effective set first (calib_hardening's
 * softverbs_memlock_follows_kernel checks the privileged case) */
TH_TEST(softverbs, memlock_rlimit)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    struct rlimit rl = {1 << 20, 1 << 20};

    unsetenv("SOFTVERBS_MEMLOCK_LIMIT");
    TH_ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
    TH_ASSERT_SYS(syscall(SYS_capget, &hdr, data));
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    TH_ASSERT_SYS(syscall(SYS_capset, &hdr, data));
    memlock_check();
}

/* A key works only with the QPs of its own protection domain: the local
 * key of another PD of the same context fails the WR locally, the remote
 * key of another PD of the responder's context fails it remotely, and the
 * responder's memory stays as it was */
TH_TEST(softverbs, err_key_of_other_pd)
{
    struct ibv_sge sge;
    struct ibv_mr *mr2;
    struct ibv_pd *pd2;
    svt_loop_t l;
    unsigned i;

    loop_open(&l, 0, 7, 14);
    pd2 = ibv_alloc_pd(l.a.ctx);
    TH_ASSERT(pd2 != NULL);
    mr2 = ibv_reg_mr(pd2, l.buf, LOOP_BUF, SVT_ALL_ACCESS);
    TH_ASSERT(mr2 != NULL);
    sge = svt_sge(l.buf, 64, mr2);
    expect_write_error(&l, &sge, l.ib.addr, l.ib.rkey, IBV_WR_RDMA_WRITE,
                       IBV_WC_LOC_PROT_ERR);
    TH_ASSERT_EQ(ibv_dereg_mr(mr2), 0);
    TH_ASSERT_EQ(ibv_dealloc_pd(pd2), 0);
    loop_close(&l);

    loop_open(&l, 0, 7, 14);
    pd2 = ibv_alloc_pd(l.b.ctx);
    TH_ASSERT(pd2 != NULL);
    mr2 = ibv_reg_mr(pd2, l.buf + LOOP_BUF, LOOP_BUF, SVT_ALL_ACCESS);
    TH_ASSERT(mr2 != NULL);
    th_fill_pattern(l.buf, 64, 9);
    sge = svt_sge(l.buf, 64, l.mra);
    expect_write_error(&l, &sge, (uintptr_t)l.buf + LOOP_BUF, mr2->rkey,
                       IBV_WR_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR);
    for (i = 0; i < 64; ++i) {
        TH_ASSERT_EQ(l.buf[LOOP_BUF + i], 0);
    }
    TH_ASSERT_EQ(ibv_dereg_mr(mr2), 0);
    TH_ASSERT_EQ(ibv_dealloc_pd(pd2), 0);
    loop_close(&l);
}

/* One remote operation from a QP to a responder QP that grants 'grant'
 * (qp_access_flags) on an MR that grants everything: its completion
 * status, and whether the responder's 8 bytes stayed zero */
static enum ibv_wc_status
qp_access_op(enum ibv_wr_opcode op, unsigned grant, int *untouched)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_mr *mra, *mrb;
    svt_info_t ia, ib;
    struct ibv_sge sge;
    struct ibv_wc wc;
    uint64_t target;
    svt_ep_t a, b;
    uint8_t *buf;

    svt_ep_open(&a, IBV_QPT_RC, 0, 0);
    svt_ep_open(&b, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 2 * 4096);
    TH_ASSERT(buf != NULL);
    memset(buf, 0, 2 * 4096);
    mra = ibv_reg_mr(a.pd, buf, 4096, SVT_ALL_ACCESS);
    mrb = ibv_reg_mr(b.pd, buf + 4096, 4096, SVT_ALL_ACCESS);
    TH_ASSERT((mra != NULL) && (mrb != NULL));
    ia = svt_info(&a, mra);
    ib = svt_info(&b, mrb);
    svt_rc_connect_ex(&a, &ib, 7, 1, 14, 2);
    svt_rc_connect_access(&b, &ia, 7, 1, 14, 2, grant);

    th_fill_pattern(buf, 8, 5);
    sge = svt_sge(buf, 8, mra);
    memset(&wr, 0, sizeof(wr));
    wr.opcode     = op;
    wr.sg_list    = &sge;
    wr.num_sge    = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = ib.addr;
        wr.wr.atomic.rkey        = ib.rkey;
        wr.wr.atomic.compare_add = 3;
    } else {
        wr.wr.rdma.remote_addr = ib.addr;
        wr.wr.rdma.rkey        = ib.rkey;
    }
    TH_ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
    svt_poll(a.scq, &wc, 10);
    memcpy(&target, buf + 4096, sizeof(target));
    *untouched = (target == 0);

    ibv_dereg_mr(mra);
    ibv_dereg_mr(mrb);
    svt_ep_close(&a);
    svt_ep_close(&b);
    free(buf);
    return wc.status;
}

/* A responder QP's access flags gate remote operations as an MR's do: a
 * WRITE, READ or atomic fails with REM_ACCESS_ERR on a QP that grants the
 * other two (though the MR grants all), leaving the memory alone, and
 * succeeds on one that grants only it */
TH_TEST(softverbs, err_qp_access_flags)
{
    static const struct {
        enum ibv_wr_opcode op;
        unsigned need;
        int writes;
    } ops[]            = {{IBV_WR_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE, 1},
                          {IBV_WR_RDMA_READ, IBV_ACCESS_REMOTE_READ, 0},
                          {IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_ACCESS_REMOTE_ATOMIC, 1}};
    const unsigned all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC;
    int untouched;
    unsigned i;

    svt_need_device();
    for (i = 0; i < sizeof(ops) / sizeof(ops[0]); ++i) {
        TH_ASSERT_EQ(qp_access_op(ops[i].op, all & ~ops[i].need, &untouched),
                     IBV_WC_REM_ACCESS_ERR);
        TH_ASSERT(untouched);
        TH_ASSERT_EQ(qp_access_op(ops[i].op, ops[i].need, &untouched),
                     IBV_WC_SUCCESS);
        TH_ASSERT_EQ(untouched, !ops[i].writes);
    }
}

TH_TEST(softverbs, reg_cost_model)
{
    struct ibv_mr *mr;
    uint8_t *buf;
    svt_ep_t ep;
    double t0;

    setenv("SOFTVERBS_REG_COST_US", "5000", 1);
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 4096);
    t0  = th_time();
    mr  = ibv_reg_mr(ep.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(mr != NULL);
    TH_ASSERT_GE((th_time() - t0) * 1e6, 5000);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

/* The time of one signaled WRITE of len bytes, from post to completion */
static double link_write_time(svt_ep_t *ep, struct ibv_mr *mr, uint8_t *buf,
                              size_t len, const svt_info_t *peer)
{
    struct ibv_sge sge = svt_sge(buf, (uint32_t)len, mr);
    struct ibv_wc wc;
    double t0;

    t0 = th_time();
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_RDMA_WRITE, &sge, 1, peer->addr,
                          peer->rkey, len, IBV_SEND_SIGNALED),
                 0);
    svt_poll(ep->scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    return th_time() - t0;
}

/* Run fn on two ranks under the link model: gbps, lat_us one way */
static void
link_run_procs(th_proc_fn_t fn, const char *gbps, const char *lat_us, void *arg)
{
    setenv("SOFTVERBS_LINK_GBPS", gbps, 1);
    setenv("SOFTVERBS_LINK_LAT_US", lat_us, 1);
    th_run_procs(2, fn, arg);
}

/* At 1 Gb/s and 200 us: a WRITE never completes before its wire time plus
 * the latency (the model's floor, which load cannot lower), and the fastest
 * of a few comes within half of it (load can delay any one of them: the
 * engine thread must be scheduled when the time is up) */
#define LINK_TRIES 5

static void link_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    static const size_t lens[] = {8, 1 << 20, 2 << 20};
    double t, best[3];
    size_t len = 2 << 20;
    svt_info_t peer;
    struct ibv_mr *mr;
    uint8_t *buf;
    unsigned i, k;
    svt_ep_t ep;

    (void)nprocs; (void)arg;
    mr = svt_rc_pair(oob, rank, &ep, len, 1, &buf, &peer);
    if (rank == 0) {
        for (i = 0; i < 3; ++i) {
            /* the floor: 8 bits a byte at 1 Gb/s, plus 200 us */
            double floor_us = (lens[i] * 8.0 / 1e3) + 200;

            best[i] = 1e9;
            for (k = 0; k < LINK_TRIES; ++k) {
                t = link_write_time(&ep, mr, buf, lens[i], &peer);
                TH_ASSERT_DBL(t * 1e6, >=, floor_us);
                best[i] = (t < best[i]) ? t : best[i];
            }
            th_log("%zu B at 1 Gb/s + 200 us: best of %d %.3f ms, model "
                   "%.3f ms",
                   lens[i], LINK_TRIES, best[i] * 1e3, floor_us / 1e3);
            TH_ASSERT_DBL(best[i] * 1e6, <, floor_us * 1.5);
        }
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

TH_TEST(softverbs, link_model)
{
    svt_need_device();
    link_run_procs(link_rank, "1", "200", NULL);
}

/*
 * A NIC places a WR's bytes as they arrive, so a single large WR takes its
 * wire time and latency, not a copy's time more: at 20 Gb/s a 4 MiB WRITE
 * or READ (1.7 ms of wire) completes within half a kernel copy of 4 MiB
 * after it is due (the best of a few: load delays any one of them), and
 * never before. The WRITE's last bytes reach the target no earlier than the model
 * says either (rank 1 watches them).
 */
#define LINK_WIRE_GBPS "20"
#define LINK_WIRE_LEN  (4u << 20)
#define LINK_WIRE_LAT  "10"

/* the fastest of a few copies of len bytes by the kernel from one buffer of
 * this process into another (what softverbs' copy of a WR costs), in
 * seconds */
static double link_kernel_copy_time(size_t len)
{
    uint8_t *src = malloc(len), *dst = malloc(len);
    double best = 1e9, t0, t;
    struct iovec l, r;
    int k;

    TH_ASSERT((src != NULL) && (dst != NULL));
    memset(src, 1, len);
    memset(dst, 2, len);
    for (k = 0; k < LINK_TRIES; ++k) {
        l.iov_base = src;
        l.iov_len  = len;
        r.iov_base = dst;
        r.iov_len  = len;
        t0         = th_time();
        TH_ASSERT_EQ(process_vm_writev(getpid(), &l, 1, &r, 1, 0),
                     (ssize_t)len);
        t    = th_time() - t0;
        best = (t < best) ? t : best;
    }
    free(src);
    free(dst);
    return best;
}

/*
 * A SEND's bytes go into a receive buffer that nobody reads before the
 * receive completes: softverbs copies them when it starts the WR and
 * completes it at the deliver time, so that its copy (a system call)
 * overlaps the modelled latency. A WRITE's bytes may be watched, so they
 * land no earlier than the deliver time and its completion follows their
 * copy. At 20 us of latency neither completes early, and the fastest SEND
 * of a few completes at least half a kernel copy before the fastest WRITE
 * of the same size (when both waited for the latency, then copied, 8-byte
 * active messages at 25 Gb/s + 1 us took 2.96 us one way; 2.03 after).
 */
#define LINK_SEND_TRIES  16
#define LINK_SEND_LEN    64
#define LINK_SEND_LAT_US "20"

static void link_send_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    static const char *names[] = {"SEND", "WRITE"};
    double best[2] = {1e9, 1e9}, lat_us = atof(LINK_SEND_LAT_US), copy_us, t;
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_info_t peer;
    struct ibv_mr *mr;
    unsigned k, op, i;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs;
    (void)arg;
    /* rank 1 receives into [0, 4096), the WRITEs land after it */
    mr = svt_rc_pair(oob, rank, &ep, 8192, 0, &buf, &peer);
    for (k = 0; (rank == 1) && (k < LINK_SEND_TRIES); ++k) {
        svt_post_recv(ep.qp, buf + (k * LINK_SEND_LEN), LINK_SEND_LEN, mr->lkey,
                      k);
    }
    th_oob_barrier(oob);
    if (rank == 0) {
        copy_us = link_kernel_copy_time(LINK_SEND_LEN) * 1e6;
        sge     = svt_sge(buf, LINK_SEND_LEN, mr);
        for (k = 0; k < LINK_SEND_TRIES; ++k) {
            memset(buf, k + 1, LINK_SEND_LEN);
            for (op = 0; op < 2; ++op) {
                t = th_time();
                TH_ASSERT_EQ(svt_post(ep.qp,
                                      op ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
                                      &sge, 1, peer.addr + 4096, peer.rkey, k,
                                      IBV_SEND_SIGNALED),
                             0);
                svt_poll(ep.scq, &wc, 10);
                TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
                t = (th_time() - t) * 1e6;
                TH_ASSERT_DBL(t, >=, lat_us);
                best[op] = (t < best[op]) ? t : best[op];
            }
        }
        th_log("%d-byte %s and %s at %s Gb/s + %s us: best of %d %.2f and "
               "%.2f us; a kernel copy %.2f us",
               LINK_SEND_LEN, names[0], names[1], LINK_WIRE_GBPS,
               LINK_SEND_LAT_US, LINK_SEND_TRIES, best[0], best[1], copy_us);
        TH_ASSERT_DBL(best[0] + (copy_us / 2), <, best[1]);
    } else {
        for (k = 0; k < LINK_SEND_TRIES; ++k) {
            svt_poll(ep.rcq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            TH_ASSERT_EQ(wc.wr_id, k);
            TH_ASSERT_EQ(wc.byte_len, LINK_SEND_LEN);
            for (i = 0; i < LINK_SEND_LEN; ++i) {
                TH_ASSERT_EQ(buf[(k * LINK_SEND_LEN) + i], k + 1);
            }
        }
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

TH_TEST(softverbs, link_model_send_copy_overlaps_latency)
{
    svt_need_device();
    link_run_procs(link_send_rank, LINK_WIRE_GBPS, LINK_SEND_LAT_US, NULL);
}

/*
 * A bound on the time of a transfer holds only while the process that
 * moves it has its cores: with two spinning processes beside the test on
 * two cores, the copy behind a 4 MiB WRITE at 20 Gb/s took 2061 us against
 * its bound of 1843. A measurement that misses its bound while the process
 * ran less than LINK_CPU_SHARE of the time is taken again, up to
 * LINK_ATTEMPTS times; one that misses it with its cores fails.
 */
#define LINK_CPU_SHARE 0.9
#define LINK_ATTEMPTS  4

/* whether to measure again: the bound was missed while the process ran
 * less than cpu_share of the time since (cpu0, wall0) */
static int link_measure_again_share(int missed, double cpu0, double wall0,
                                    unsigned attempt, double cpu_share)
{
    double share = (th_cpu_time(RUSAGE_SELF) - cpu0) / (th_time() - wall0);

    if (!missed || (share >= cpu_share) || (attempt + 1 >= LINK_ATTEMPTS)) {
        return 0;
    }
    th_log("missed the bound, having run %.0f%% of the time: again",
           share * 100);
    /* out of a slow period of the host, if it is one */
    usleep(20000);
    return 1;
}

static int
link_measure_again(int missed, double cpu0, double wall0, unsigned attempt)
{
    return link_measure_again_share(missed, cpu0, wall0, attempt,
                                    LINK_CPU_SHARE);
}

/* one signaled WRITE (op 0) or READ (op 1) of sge to the peer, posted and
 * completed: its time in microseconds */
static double link_timed_op(svt_ep_t *ep, unsigned op, struct ibv_sge *sge,
                            const svt_info_t *peer, unsigned k)
{
    double t = th_time();
    struct ibv_wc wc;

    TH_ASSERT_EQ(svt_post(ep->qp, op ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
                          sge, 1, peer->addr, peer->rkey, k, IBV_SEND_SIGNALED),
                 0);
    svt_poll(ep->scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    return (th_time() - t) * 1e6;
}

/* the fastest of 'tries' signaled WRITEs (op 0) or READs (op 1) of sge, in
 * microseconds, none below floor_us; measured again while it is not below
 * within_us and the process ran less than cpu_share of the time
 * (link_measure_again_share()) */
static double link_best_op(svt_ep_t *ep, unsigned op, struct ibv_sge *sge,
                           const svt_info_t *peer, unsigned tries,
                           double floor_us, double within_us, double cpu_share)
{
    unsigned k, attempt = 0;
    double t, best, cpu0, wall0;

    do {
        cpu0  = th_cpu_time(RUSAGE_SELF);
        wall0 = th_time();
        best  = 1e9;
        for (k = 0; k < tries; ++k) {
            t = link_timed_op(ep, op, sge, peer, k);
            TH_ASSERT_DBL(t, >=, floor_us);
            best = (t < best) ? t : best;
        }
    } while (link_measure_again_share(best >= within_us, cpu0, wall0, attempt++,
                                      cpu_share));
    return best;
}

static void link_wire_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    double wire_us = (LINK_WIRE_LEN * 8.0 / (atof(LINK_WIRE_GBPS) * 1e3)) +
                     atof(LINK_WIRE_LAT);
    volatile uint64_t *last;
    double t, t_post, best[2], copy_us;
    unsigned k, op;
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_info_t peer;
    struct ibv_mr *mr;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs;
    (void)arg;
    mr   = svt_rc_pair(oob, rank, &ep, LINK_WIRE_LEN, 0, &buf, &peer);
    last = (volatile uint64_t *)(buf + LINK_WIRE_LEN - sizeof(uint64_t));
    sge  = svt_sge(buf, LINK_WIRE_LEN, mr);
    for (k = 0; k < LINK_TRIES; ++k) {
        /* a WRITE whose last word rank 1 sees change */
        if (rank == 0) {
            *last = k + 1;
            th_oob_barrier(oob);
            t_post = th_time();
            TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1, peer.addr,
                                  peer.rkey, k, IBV_SEND_SIGNALED),
                         0);
            th_oob_send(oob, 1, &t_post, sizeof(t_post));
            svt_poll(ep.scq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        } else {
            th_oob_barrier(oob);
            while (*last != k + 1) {
            }
            t = th_time();
            th_oob_recv(oob, 0, &t_post, sizeof(t_post));
            TH_ASSERT_DBL((t - t_post) * 1e6, >=, wire_us);
        }
        th_oob_barrier(oob);
    }
    if (rank == 0) {
        copy_us = link_kernel_copy_time(LINK_WIRE_LEN) * 1e6;
        for (op = 0; op < 2; ++op) {
            best[op] = link_best_op(&ep, op, &sge, &peer, LINK_TRIES, wire_us,
                                    wire_us + (copy_us / 2), LINK_CPU_SHARE);
        }
        th_log("%u MiB at %s Gb/s + %s us: model %.0f us, a copy %.0f us; "
               "best of %d WRITE %.0f us, READ %.0f us",
               LINK_WIRE_LEN >> 20, LINK_WIRE_GBPS, LINK_WIRE_LAT, wire_us,
               copy_us, LINK_TRIES, best[0], best[1]);
        TH_ASSERT_DBL(best[0], <, wire_us + (copy_us / 2));
        TH_ASSERT_DBL(best[1], <, wire_us + (copy_us / 2));
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

TH_TEST(softverbs, link_model_wire_time)
{
    svt_need_device();
    link_run_procs(link_wire_rank, LINK_WIRE_GBPS, LINK_WIRE_LAT, NULL);
}

/*
 * A WRITE's tail goes into the target with a system call of its own; it
 * starts most of the shortest one lately before the deliver time, so that
 * the WRITE completes at that time, not a system call after it (the
 * notification of a staged sub-block came 2.0-2.2 us after the link model
 * delivered it). 64 KiB at 20 Gb/s + 10 us: the fastest of a few completes
 * within an 8-byte kernel copy of the model (0.6-0.8 us after it on the
 * benches' VM, 1.8-1.9 with the tail started at the deliver time, the copy
 * 1.3), and none before it. The time this process ran does not tell
 * whether the device's thread that lands the tail waited for a core, so a
 * miss is measured again whatever it was (a slow period of a CI host: the
 * best of 16 came 10 us late, with an 8-byte kernel copy of 3 us); a tail
 * landed a system call late misses every time.
 */
#define LINK_TAIL_LEN   (64u << 10)
#define LINK_TAIL_TRIES 16

static void link_tail_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    double wire_us = (LINK_TAIL_LEN * 8.0 / (atof(LINK_WIRE_GBPS) * 1e3)) +
                     atof(LINK_WIRE_LAT);
    struct ibv_mr *mr;
    struct ibv_sge sge;
    double best, copy_us;
    svt_info_t peer;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs;
    (void)arg;
    mr  = svt_rc_pair(oob, rank, &ep, LINK_TAIL_LEN, 0, &buf, &peer);
    sge = svt_sge(buf, LINK_TAIL_LEN, mr);
    if (rank == 0) {
        copy_us = link_kernel_copy_time(8) * 1e6;
        best    = link_best_op(&ep, 0, &sge, &peer, LINK_TAIL_TRIES, wire_us,
                               wire_us + copy_us, INFINITY);
        th_log("%u KiB WRITE at %s Gb/s + %s us: model %.1f us, best of %d "
               "%.1f us, an 8-byte kernel copy %.2f us",
               LINK_TAIL_LEN >> 10, LINK_WIRE_GBPS, LINK_WIRE_LAT, wire_us,
               LINK_TAIL_TRIES, best, copy_us);
        TH_ASSERT_DBL(best, <, wire_us + copy_us);
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

TH_TEST(softverbs, link_model_write_tail_on_time)
{
    svt_need_device();
    link_run_procs(link_tail_rank, LINK_WIRE_GBPS, LINK_WIRE_LAT, NULL);
}

/* bind the calling process to the rank-th CPU it may run on */
static void link_pin_to_core(int rank)
{
    cpu_set_t allowed, one;
    int cpu, n = 0;

    TH_ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    for (cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &allowed) && (n++ == rank)) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            TH_ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
            return;
        }
    }
    TH_FAIL("no CPU for rank %d", rank);
}

static int link_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

#define LINK_BOUND_LEN   (16u << 20)
#define LINK_BOUND_TRIES 8

#define LINK_OTHER_TRIES    9
#define LINK_OTHER_BOUND_US 500

/* when each of rank 0's WRITEs landed at rank 1 (th_time()) */
typedef struct {
    volatile double landed[LINK_OTHER_TRIES];
} link_other_shared_t;

/* Run fn on two ranks, each to be bound to a CPU of its own, under the link
 * model (LINK_WIRE_GBPS, lat_us one way); with 'shared', fn's argument is
 * a link_other_shared_t both ranks see */
static void link_run_bound(th_proc_fn_t fn, const char *lat_us, int shared)
{
    link_other_shared_t *sh = NULL;
    cpu_set_t allowed;

    svt_need_device();
    TH_ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    if (CPU_COUNT(&allowed) < 2) {
        TH_SKIP("needs two CPUs, one for each rank: %d allowed",
                CPU_COUNT(&allowed));
    }
    if (shared) {
        sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        TH_ASSERT(sh != MAP_FAILED);
    }
    link_run_procs(fn, LINK_WIRE_GBPS, lat_us, sh);
    if (shared) {
        munmap(sh, sizeof(*sh));
    }
}

/* Rank 0 WRITEs, then READs, one large WR after another, bound with its
 * engine thread to one core where it busy-polls the CQ */
static void link_bound_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    static const char *names[] = {"WRITE", "READ"};
    double wire_us = (LINK_BOUND_LEN * 8.0 / (atof(LINK_WIRE_GBPS) * 1e3)) +
                     atof(LINK_WIRE_LAT);
    double t[LINK_BOUND_TRIES], median, cpu0, wall0;
    unsigned k, op, attempt;
    struct ibv_sge sge;
    svt_info_t peer;
    struct ibv_mr *mr;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs;
    (void)arg;
    /* before the first verbs call: the engine thread, created later, shares
     * the rank's core */
    link_pin_to_core(rank);
    mr  = svt_rc_pair(oob, rank, &ep, LINK_BOUND_LEN, 0, &buf, &peer);
    sge = svt_sge(buf, LINK_BOUND_LEN, mr);
    for (op = 0; (rank == 0) && (op < 2); ++op) {
        attempt = 0;
        do {
            cpu0  = th_cpu_time(RUSAGE_SELF);
            wall0 = th_time();
            for (k = 0; k < LINK_BOUND_TRIES; ++k) {
                t[k] = link_timed_op(&ep, op, &sge, &peer, k);
            }
            qsort(t, LINK_BOUND_TRIES, sizeof(t[0]), link_cmp_double);
            median = (t[LINK_BOUND_TRIES / 2 - 1] + t[LINK_BOUND_TRIES / 2]) /
                     2;
        } while (link_measure_again(median >= (wire_us * 1.05) + 100, cpu0,
                                    wall0, attempt++));
        th_log("%u MiB %s at %s Gb/s + %s us: model %.0f us; %d in a row: "
               "median %.0f us, slowest %.0f us",
               LINK_BOUND_LEN >> 20, names[op], LINK_WIRE_GBPS, LINK_WIRE_LAT,
               wire_us, LINK_BOUND_TRIES, median, t[LINK_BOUND_TRIES - 1]);
        TH_ASSERT_DBL(median, <, (wire_us * 1.05) + 100);
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

/* A large WR is the engine thread's to start (a poller takes it only
 * shortly before its deliver time). With the rank bound to one core, a
 * poller that kept the core made the woken engine thread wait for the
 * scheduler's next turn, later at each WR as the engine's share of the core
 * ran out: 16 MiB WRs at 20 Gb/s took 6.7, then up to 8.4 ms against 6.7 of
 * wire time (UCP rendezvous of 16 MiB at 25 Gb/s: 8.0 ms against 5.4) */
TH_TEST(softverbs, link_model_wire_time_bound_rank)
{
    link_run_bound(link_bound_rank, LINK_WIRE_LAT, 0);
}


/* Try k of link_other_rank() and link_post_rank(), after the ranks meet:
 * rank 1 notes when its word reads 'value'; rank 0 sets its own word to
 * it and WRITEs that to rank 1, the time of its post in *t_post. Returns
 * whether this is rank 0, which goes on with the try. */
static int link_landed_try(th_oob_t *oob, int rank, svt_ep_t *ep,
                           struct ibv_sge *sge, const svt_info_t *peer,
                           volatile uint64_t *word, link_other_shared_t *sh,
                           unsigned k, uint64_t value, double *t_post)
{
    th_oob_barrier(oob);
    if (rank == 1) {
        while (*word != value) {
        }
        sh->landed[k] = th_time();
        return 0;
    }

    sh->landed[k] = 0;
    *word         = value;
    *t_post       = th_time();
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_RDMA_WRITE, sge, 1, peer->addr,
                          peer->rkey, k, IBV_SEND_SIGNALED),
                 0);
    return 1;
}

/* Rank 0, bound with its engine thread to one core, WRITEs 8 bytes on one
 * context's QP and busy-polls the CQ of another context, as a process
 * with two UCP contexts progresses one while the other's answer waits to
 * go out; rank 1 notes when each landed */
static void link_other_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    link_other_shared_t *sh = arg;
    double t[LINK_OTHER_TRIES], t_post, median, cpu0, wall0;
    unsigned k, attempt = 0;
    volatile uint64_t *word;
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_info_t peer;
    struct ibv_mr *mr;
    svt_ep_t ep, other;
    uint8_t *buf;

    (void)nprocs;
    link_pin_to_core(rank);
    mr   = svt_rc_pair(oob, rank, &ep, 4096, 0, &buf, &peer);
    word = (volatile uint64_t *)buf;
    sge  = svt_sge(buf, sizeof(uint64_t), mr);
    if (rank == 0) {
        svt_ep_open(&other, IBV_QPT_RC, 0, 0);
    }
    do {
        cpu0  = th_cpu_time(RUSAGE_SELF);
        wall0 = th_time();
        for (k = 0; k < LINK_OTHER_TRIES; ++k) {
            if (!link_landed_try(oob, rank, &ep, &sge, &peer, word, sh, k,
                                 (attempt * LINK_OTHER_TRIES) + k + 1,
                                 &t_post)) {
                continue;
            }
            while ((sh->landed[k] == 0) && (th_time() < t_post + 10.0)) {
                TH_ASSERT_EQ(ibv_poll_cq(other.scq, 1, &wc), 0);
            }
            TH_ASSERT(sh->landed[k] != 0);
            t[k] = (sh->landed[k] - t_post) * 1e6;
            svt_poll(ep.scq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        }
        if (rank == 0) {
            qsort(t, LINK_OTHER_TRIES, sizeof(t[0]), link_cmp_double);
            median = t[LINK_OTHER_TRIES / 2];
        }
        /* both ranks take the same decision: rank 0's, told */
        if (rank == 0) {
            k = link_measure_again(median >= LINK_OTHER_BOUND_US, cpu0, wall0,
                                   attempt);
            th_oob_send(oob, 1, &k, sizeof(k));
        } else {
            th_oob_recv(oob, 0, &k, sizeof(k));
        }
        ++attempt;
    } while (k);
    if (rank == 0) {
        th_log("8-byte WRITE at %s Gb/s + %s us, the CQ of another context "
               "polled: landed after %.0f us (median of %d), at most %.0f",
               LINK_WIRE_GBPS, LINK_WIRE_LAT, median, LINK_OTHER_TRIES,
               t[LINK_OTHER_TRIES - 1]);
        TH_ASSERT_DBL(median, <, LINK_OTHER_BOUND_US);
        /* and none before the link's latency: its 8 bytes are all tail */
        TH_ASSERT_DBL(t[0], >=, atof(LINK_WIRE_LAT));
        svt_ep_close(&other);
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

/*
 * Under the link model a posting thread executes only a WR the link
 * delivers within 2 us (here, 10 us of latency: none); the engine thread
 * does, or a thread that finds a CQ of the WR's QP empty. A thread that
 * polled only the CQs of another context, on the one core it shared with
 * the engine thread, kept the engine from the core until the scheduler
 * took it away: two UCP contexts in one process (the regret matrix's
 * columns) waited 2.5-4 ms for the ATS and the answer of every
 * rendezvous, posted just before the thread went on to progress the
 * other context.
 */
TH_TEST(softverbs, link_model_other_context_polled)
{
    link_run_bound(link_other_rank, LINK_WIRE_LAT, 1);
}

#define LINK_POST_TRIES      5
#define LINK_POST_LAT_US     "1"
#define LINK_POST_COMPUTE_US 5000
#define LINK_POST_BOUND_US   1000
_Static_assert(LINK_POST_TRIES <= LINK_OTHER_TRIES, "landed[] holds the tries");

/* Rank 0, bound with its engine thread to one core, WRITEs 64 bytes and
 * computes for LINK_POST_COMPUTE_US without a verbs call, as a protocol
 * sends its RTS and copies its first chunk meanwhile; rank 1 notes when
 * the WRITE's last word landed */
static void link_post_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    link_other_shared_t *sh = arg;
    double t[LINK_POST_TRIES], t_post;
    volatile uint64_t *word;
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_info_t peer;
    struct ibv_mr *mr;
    uint8_t *buf;
    unsigned k;
    svt_ep_t ep;

    (void)nprocs;
    link_pin_to_core(rank);
    mr   = svt_rc_pair(oob, rank, &ep, 4096, 0, &buf, &peer);
    word = (volatile uint64_t *)(buf + 64 - sizeof(uint64_t));
    sge  = svt_sge(buf, 64, mr);
    for (k = 0; k < LINK_POST_TRIES; ++k) {
        if (!link_landed_try(oob, rank, &ep, &sge, &peer, word, sh, k, k + 1,
                             &t_post)) {
            continue;
        }
        /* delivered within SV_LINK_POST_HOLD_NS: executed by the post */
        TH_ASSERT_EQ(ibv_poll_cq(ep.scq, 1, &wc), 1);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        while (th_time() < t_post + (LINK_POST_COMPUTE_US * 1e-6)) {
        }
        while ((sh->landed[k] == 0) && (th_time() < t_post + 10.0)) {
        }
        TH_ASSERT(sh->landed[k] != 0);
        t[k] = (sh->landed[k] - t_post) * 1e6;
    }
    if (rank == 0) {
        qsort(t, LINK_POST_TRIES, sizeof(t[0]), link_cmp_double);
        th_log("64-byte WRITE at %s Gb/s + %s us, then %d us of computing: "
               "landed after %.1f us (median of %d), at most %.1f",
               LINK_WIRE_GBPS, LINK_POST_LAT_US, LINK_POST_COMPUTE_US,
               t[LINK_POST_TRIES / 2], LINK_POST_TRIES, t[LINK_POST_TRIES - 1]);
        TH_ASSERT_DBL(t[LINK_POST_TRIES / 2], <, LINK_POST_BOUND_US);
        TH_ASSERT_DBL(t[0], >=, atof(LINK_POST_LAT_US));
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

/*
 * A small WR posted on a link that delivers it within SV_LINK_POST_HOLD_NS
 * goes when it is posted, as an HCA's doorbell sends it, while its thread
 * goes on computing: it is complete when ibv_post_send() returns, and
 * lands after the link's latency, long before the computing ends. Left to
 * the engine thread or a poller, it went when the thread next polled or
 * lost its core (here: 48 or 2304 us in the median, by run): rndv/sppln's
 * RTS, after the sender's copy of its first chunk (25 Gb/s, fresh 1 MiB:
 * 24-52 us late).
 */
TH_TEST(softverbs, link_model_post_then_compute)
{
    link_run_bound(link_post_rank, LINK_POST_LAT_US, 1);
}

/* ---------------------------------------------------------------------- */

/* ---------------------------------------------------------------------- */

/* What a rank tells the test process that will kill its peer (shared
 * memory, so that the kill follows an event, not a sleep) */
typedef struct {
    volatile int ready; /* the state to kill in is reached */
    volatile int writes; /* WRITEs that succeeded before the peer died */
} kill_shared_t;

static kill_shared_t *kill_shared_new(void)
{
    kill_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    TH_ASSERT(sh != MAP_FAILED);
    memset((void *)sh, 0, sizeof(*sh));
    return sh;
}

/* start the ranks, kill rank 1 once rank 0 says it is ready, wait */
static void kill_run(th_proc_fn_t fn, kill_shared_t *sh)
{
    double deadline;
    int status[2];
    th_procs_t *p;

    p        = th_procs_start(2, fn, sh);
    deadline = th_time() + 30.0;
    while (!sh->ready) {
        if (th_time() > deadline) {
            TH_FAIL("rank 0 did not get ready in 30 s");
        }
        usleep(1000);
    }
    th_procs_kill(p, 1, SIGKILL);
    TH_ASSERT_EQ(th_procs_wait(p, status), 0);
    TH_ASSERT_EQ(status[0], 0);
}

/* rank 1 is killed by the test while rank 0 has a SEND waiting on RNR
 * (rnr_retry 7: forever): it completes with a retry error */
static void kill_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    kill_shared_t *sh = arg;
    svt_info_t mine, peer;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 65536);
    mr  = ibv_reg_mr(ep.pd, buf, 65536, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    th_oob_barrier(oob);
    if (rank == 1) {
        for (;;) {
            pause();   /* no receive posted; the test kills us */
        }
    }
    sge = svt_sge(buf, 64, mr);
    TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_SEND, &sge, 1, 0, 0, 1,
                          IBV_SEND_SIGNALED), 0);
    /* the SEND waits on RNR while the peer lives */
    svt_poll_none(ep.scq, 0.05);
    sh->ready = 1;
    svt_poll(ep.scq, &wc, 20);
    TH_ASSERT_EQ(wc.wr_id, 1);
    TH_ASSERT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    TH_ASSERT_EQ(ep.qp->state, IBV_QPS_ERR);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(killed_peer)
{
    svt_need_device();
    kill_run(kill_rank, kill_shared_new());
}

/* one-sided WRITEs succeed while the peer lives (the test kills it after
 * KILL_WRITES of them), and fail with a retry error once it is dead */
#define KILL_WRITES 5

static void kill_write_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    kill_shared_t *sh = arg;
    svt_info_t mine, peer;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf;
    svt_ep_t ep;
    double end;

    (void)nprocs;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 65536);
    mr  = ibv_reg_mr(ep.pd, buf, 65536, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    th_oob_barrier(oob);
    if (rank == 1) {
        for (;;) {
            pause();
        }
    }
    sge = svt_sge(buf, 4096, mr);
    end = th_time() + 20;
    for (;;) {
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1, peer.addr,
                              peer.rkey, 1, IBV_SEND_SIGNALED), 0);
        svt_poll(ep.scq, &wc, 20);
        if (wc.status != IBV_WC_SUCCESS) {
            break;
        }
        if (++sh->writes == KILL_WRITES) {
            sh->ready = 1;
        }
        TH_ASSERT_LT(th_time(), end);
        usleep(1000);
    }
    TH_ASSERT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    TH_ASSERT_GE(sh->writes, KILL_WRITES);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(killed_peer_write)
{
    kill_shared_t *sh;

    svt_need_device();
    sh = kill_shared_new();
    kill_run(kill_write_rank, sh);
    th_log("%d WRITEs succeeded before the peer was killed", sh->writes);
    TH_ASSERT_GE(sh->writes, KILL_WRITES);
}

/* a bad rkey from another process: the responder's owner gets the event */
static void remote_err_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct ibv_async_event ev;
    svt_info_t mine, peer;
    struct ibv_sge sge;
    struct pollfd pfd;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs; (void)arg;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 4096);
    mr  = ibv_reg_mr(ep.pd, buf, 4096, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    th_oob_barrier(oob);
    if (rank == 1) {
        pfd.fd     = ep.ctx->async_fd;
        pfd.events = POLLIN;
        TH_ASSERT_EQ(poll(&pfd, 1, 10000), 1);
        TH_ASSERT_EQ(ibv_get_async_event(ep.ctx, &ev), 0);
        TH_ASSERT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
        TH_ASSERT(ev.element.qp == ep.qp);
        ibv_ack_async_event(&ev);
        TH_ASSERT_EQ(qp_state(ep.qp), IBV_QPS_ERR);
    } else {
        sge = svt_sge(buf, 64, mr);
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1,
                              peer.addr + 4090, peer.rkey, 1,
                              IBV_SEND_SIGNALED), 0);
        svt_poll(ep.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(err_remote_async_event)
{
    svt_need_device();
    th_run_procs(2, remote_err_rank, NULL);
}

TH_TEST(softverbs, srq_limit_event)
{
    struct ibv_recv_wr rwr, *rbad;
    struct ibv_async_event ev;
    struct ibv_srq_attr sa;
    struct ibv_sge sge;
    struct pollfd pfd;
    struct ibv_wc wc;
    svt_loop_t l;
    int i;

    loop_open(&l, 1, 7, 14);   /* b receives through an SRQ */
    for (i = 0; i < 4; ++i) {
        sge = svt_sge(l.buf + LOOP_BUF + i * 64, 64, l.mrb);
        memset(&rwr, 0, sizeof(rwr));
        rwr.wr_id   = i;
        rwr.sg_list = &sge;
        rwr.num_sge = 1;
        TH_ASSERT_EQ(ibv_post_srq_recv(l.b.srq, &rwr, &rbad), 0);
    }
    sa.srq_limit = 2;
    TH_ASSERT_EQ(ibv_modify_srq(l.b.srq, &sa, IBV_SRQ_LIMIT), 0);
    pfd.fd     = l.b.ctx->async_fd;
    pfd.events = POLLIN;
    for (i = 0; i < 3; ++i) {
        /* 4 -> 3 -> 2 WQEs left: not below the limit yet */
        TH_ASSERT_EQ(poll(&pfd, 1, 0), 0);
        sge = svt_sge(l.buf, 8, l.mra);
        TH_ASSERT_EQ(svt_post(l.a.qp, IBV_WR_SEND, &sge, 1, 0, 0, i,
                              IBV_SEND_SIGNALED), 0);
        svt_poll(l.a.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    /* 1 left < 2: the event, once; the limit is disarmed */
    TH_ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    TH_ASSERT_EQ(ibv_get_async_event(l.b.ctx, &ev), 0);
    TH_ASSERT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    TH_ASSERT(ev.element.srq == l.b.srq);
    ibv_ack_async_event(&ev);
    TH_ASSERT_EQ(ibv_query_srq(l.b.srq, &sa), 0);
    TH_ASSERT_EQ(sa.srq_limit, 0);
    loop_close(&l);
}
