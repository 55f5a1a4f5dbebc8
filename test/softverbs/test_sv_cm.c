/*
 * softverbs: rdma_cm (sv_cm.c), against what librdmacm gives: connection
 * with private data both ways and data over the QP, disconnect, reject,
 * no listener, an address no device reaches, a peer killed while
 * connected and before it answers, an agent slow to send its answers, an
 * unanswered request timing out, a datagram (SIDR) lookup, the synchronous
 * rdma_create_ep calls, the port space, and the CM port refusing a
 * connection that does not authenticate. The tests marked SVT_TEST_HOSTS run on one host and across
 * two (softverbs_net.*). Rank 0 listens, rank 1 connects.
 */
#include "svt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    struct sockaddr_in addr; /* where rank 0 listens */
} cm_where_t;

/* this rank's address: its host's SOFTVERBS_NET address, or loopback */
static struct sockaddr_in cm_my_addr(void)
{
    struct sockaddr_in in;
    const char *net = getenv("SOFTVERBS_NET");

    memset(&in, 0, sizeof(in));
    in.sin_family = AF_INET;
    if ((net == NULL) || (inet_pton(AF_INET, net, &in.sin_addr) != 1)) {
        in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    return in;
}

/* the next event of the channel within secs, or a failure saying which
 * came instead; the caller acks it */
static struct rdma_cm_event *cm_event(struct rdma_event_channel *ch,
                                      enum rdma_cm_event_type want, double secs)
{
    struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
    struct rdma_cm_event *ev;

    if (poll(&pfd, 1, (int)(secs * 1000)) != 1) {
        TH_FAIL("no %s within %.1f s", rdma_event_str(want), secs);
    }
    TH_ASSERT_EQ(rdma_get_cm_event(ch, &ev), 0);
    if (ev->event != want) {
        TH_FAIL("%s (status %d) instead of %s", rdma_event_str(ev->event),
                ev->status, rdma_event_str(want));
    }
    return ev;
}

static void cm_ack_next(struct rdma_event_channel *ch,
                        enum rdma_cm_event_type want, double secs)
{
    TH_ASSERT_EQ(rdma_ack_cm_event(cm_event(ch, want, secs)), 0);
}

/* rank 0: a listener on an ephemeral port of its address, told to rank 1 */
static struct rdma_cm_id *
cm_listen(th_oob_t *oob, struct rdma_event_channel *ch, enum rdma_port_space ps)
{
    struct rdma_cm_id *l;
    cm_where_t w;

    TH_ASSERT_EQ(rdma_create_id(ch, &l, NULL, ps), 0);
    w.addr = cm_my_addr();
    TH_ASSERT_EQ(rdma_bind_addr(l, (struct sockaddr *)&w.addr), 0);
    TH_ASSERT_EQ(rdma_listen(l, 8), 0);
    w.addr.sin_port = rdma_get_src_port(l);
    TH_ASSERT(w.addr.sin_port != 0);
    th_oob_send(oob, 1, &w, sizeof(w));
    return l;
}

/* rank 1: an id with its address and route resolved to rank 0 */
static struct rdma_cm_id *cm_resolve(th_oob_t *oob,
                                     struct rdma_event_channel *ch,
                                     enum rdma_port_space ps)
{
    struct rdma_cm_id *id;
    cm_where_t w;

    th_oob_recv(oob, 0, &w, sizeof(w));
    TH_ASSERT_EQ(rdma_create_id(ch, &id, NULL, ps), 0);
    TH_ASSERT_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&w.addr, 2000),
                 0);
    cm_ack_next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10);
    TH_ASSERT(id->verbs != NULL && id->pd != NULL);
    TH_ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
    cm_ack_next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10);
    return id;
}

static void cm_qp(struct rdma_cm_id *id, enum ibv_qp_type type)
{
    struct ibv_qp_init_attr qa;

    memset(&qa, 0, sizeof(qa));
    qa.qp_type          = type;
    qa.cap.max_send_wr  = 8;
    qa.cap.max_recv_wr  = 8;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    TH_ASSERT_EQ(rdma_create_qp(id, NULL, &qa), 0);
    TH_ASSERT(id->qp != NULL && id->send_cq != NULL && id->recv_cq != NULL);
}

/* ---------------------------------------------------------------------- */

static const char cm_req_data[] = "softverbs REQ private data";
static const char cm_rep_data[] = "softverbs REP private data";

static void connect_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_conn_param param;
    struct rdma_cm_id *l = NULL, *id;
    struct rdma_cm_event *ev;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    char buf[64];

    (void)nprocs;
    (void)arg;
    TH_ASSERT(ch != NULL);
    memset(&param, 0, sizeof(param));
    param.responder_resources = 1;
    param.initiator_depth     = 1;
    param.rnr_retry_count     = 7;
    if (rank == 0) {
        l  = cm_listen(oob, ch, RDMA_PS_TCP);
        ev = cm_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10);
        id = ev->id;
        TH_ASSERT(ev->listen_id == l);
        /* IB's REQ carries 56 bytes of private data (TCP port space) */
        TH_ASSERT_EQ(ev->param.conn.private_data_len, 56);
        TH_ASSERT_STR_EQ((const char *)ev->param.conn.private_data,
                         cm_req_data);
        TH_ASSERT_EQ(ev->param.conn.initiator_depth, 1);
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        cm_qp(id, IBV_QPT_RC);
        mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
        TH_ASSERT(mr != NULL);
        svt_post_recv(id->qp, buf, sizeof(buf), mr->lkey, 7);
        param.private_data     = cm_rep_data;
        param.private_data_len = sizeof(cm_rep_data);
        TH_ASSERT_EQ(rdma_accept(id, &param), 0);
        cm_ack_next(ch, RDMA_CM_EVENT_ESTABLISHED, 10);
        svt_poll(id->recv_cq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(wc.wr_id, 7);
        TH_ASSERT_STR_EQ(buf, "ping over the rdma_cm QP");
        /* the client disconnects; a disconnect after that is harmless */
        cm_ack_next(ch, RDMA_CM_EVENT_DISCONNECTED, 10);
        TH_ASSERT_EQ(rdma_disconnect(id), 0);
    } else {
        id = cm_resolve(oob, ch, RDMA_PS_TCP);
        cm_qp(id, IBV_QPT_RC);
        mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
        TH_ASSERT(mr != NULL);
        param.private_data     = cm_req_data;
        param.private_data_len = sizeof(cm_req_data);
        TH_ASSERT_EQ(rdma_connect(id, &param), 0);
        ev = cm_event(ch, RDMA_CM_EVENT_ESTABLISHED, 10);
        TH_ASSERT_EQ(ev->param.conn.private_data_len, 196);
        TH_ASSERT_STR_EQ((const char *)ev->param.conn.private_data,
                         cm_rep_data);
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        TH_ASSERT_EQ(id->qp->state, IBV_QPS_RTS);
        snprintf(buf, sizeof(buf), "ping over the rdma_cm QP");
        sge = svt_sge(buf, sizeof(buf), mr);
        TH_ASSERT_EQ(svt_post(id->qp, IBV_WR_SEND, &sge, 1, 0, 0, 9,
                              IBV_SEND_SIGNALED),
                     0);
        svt_poll(id->send_cq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(rdma_disconnect(id), 0);
        cm_ack_next(ch, RDMA_CM_EVENT_DISCONNECTED, 10);
    }
    ibv_dereg_mr(mr);
    rdma_destroy_qp(id);
    TH_ASSERT_EQ(rdma_destroy_id(id), 0);
    if (l != NULL) {
        TH_ASSERT_EQ(rdma_destroy_id(l), 0);
    }
    rdma_destroy_event_channel(ch);
}

SVT_TEST_HOSTS(cm_connect)
{
    svt_need_device();
    th_run_procs(2, connect_rank, NULL);
}

/* ---------------------------------------------------------------------- */

static const char cm_rej_data[] = "not today";

static void reject_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *l          = NULL, *id;
    struct rdma_cm_event *ev;

    (void)nprocs;
    (void)arg;
    TH_ASSERT(ch != NULL);
    if (rank == 0) {
        l  = cm_listen(oob, ch, RDMA_PS_TCP);
        ev = cm_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10);
        id = ev->id;
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        TH_ASSERT_EQ(rdma_reject(id, cm_rej_data, sizeof(cm_rej_data)), 0);
        th_oob_barrier(oob);
        TH_ASSERT_EQ(rdma_destroy_id(id), 0);
        TH_ASSERT_EQ(rdma_destroy_id(l), 0);
    } else {
        id = cm_resolve(oob, ch, RDMA_PS_TCP);
        TH_ASSERT_EQ(rdma_connect(id, NULL), 0);
        /* IB CM's consumer-defined reject, with the REJ's private data */
        ev = cm_event(ch, RDMA_CM_EVENT_REJECTED, 10);
        TH_ASSERT_EQ(ev->status, 28);
        TH_ASSERT_EQ(ev->param.conn.private_data_len, 148);
        TH_ASSERT_STR_EQ((const char *)ev->param.conn.private_data,
                         cm_rej_data);
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        th_oob_barrier(oob);
        TH_ASSERT_EQ(rdma_destroy_id(id), 0);
    }
    rdma_destroy_event_channel(ch);
}

SVT_TEST_HOSTS(cm_reject)
{
    svt_need_device();
    th_run_procs(2, reject_rank, NULL);
}

/* a port nobody listens on: REJECTED with IB's "invalid service ID" (8) */
static void no_listener_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *l, *id;
    struct rdma_cm_event *ev;
    cm_where_t w;

    (void)nprocs;
    (void)arg;
    TH_ASSERT(ch != NULL);
    if (rank == 0) {
        /* a listener, gone before the client connects (its port is then
         * free, and nobody listens on it) */
        l = cm_listen(oob, ch, RDMA_PS_TCP);
        TH_ASSERT_EQ(rdma_destroy_id(l), 0);
        th_oob_barrier(oob);
        th_oob_barrier(oob);
    } else {
        th_oob_recv(oob, 0, &w, sizeof(w));
        th_oob_barrier(oob);
        TH_ASSERT_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
        TH_ASSERT_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&w.addr,
                                       2000),
                     0);
        cm_ack_next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10);
        TH_ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
        cm_ack_next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10);
        TH_ASSERT_EQ(rdma_connect(id, NULL), 0);
        ev = cm_event(ch, RDMA_CM_EVENT_REJECTED, 10);
        TH_ASSERT_EQ(ev->status, 8);
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        TH_ASSERT_EQ(rdma_destroy_id(id), 0);
        th_oob_barrier(oob);
    }
    rdma_destroy_event_channel(ch);
}

SVT_TEST_HOSTS(cm_no_listener)
{
    svt_need_device();
    th_run_procs(2, no_listener_rank, NULL);
}

/* an address no softverbs device reaches (TEST-NET-2): ADDR_ERROR, as the
 * kernel's rdma_cm says for a route over a NIC that is not RDMA's; an
 * address family it does not serve: EAFNOSUPPORT at once */
TH_TEST(softverbs, cm_addr_error)
{
    struct rdma_event_channel *ch;
    struct sockaddr_in6 in6;
    struct sockaddr_in in;
    struct rdma_cm_event *ev;
    struct rdma_cm_id *id;

    svt_need_device();
    ch = rdma_create_event_channel();
    TH_ASSERT(ch != NULL);
    TH_ASSERT_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
    memset(&in, 0, sizeof(in));
    in.sin_family = AF_INET;
    in.sin_port   = htons(4791);
    TH_ASSERT_EQ(inet_pton(AF_INET, "198.51.100.7", &in.sin_addr), 1);
    TH_ASSERT_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&in, 1000), 0);
    ev = cm_event(ch, RDMA_CM_EVENT_ADDR_ERROR, 10);
    TH_ASSERT_EQ(ev->status, -ENODEV);
    TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
    /* and nothing to connect afterwards */
    TH_ASSERT_EQ(rdma_resolve_route(id, 1000), -1);
    TH_ASSERT_EQ(errno, EINVAL);
    memset(&in6, 0, sizeof(in6));
    in6.sin6_family = AF_INET6;
    TH_ASSERT_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&in6, 1000),
                 -1);
    TH_ASSERT_EQ(errno, EAFNOSUPPORT);
    TH_ASSERT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

/* ---------------------------------------------------------------------- */
/* a peer process killed: the killer (the test) acts when the survivor
 * says it is ready */

typedef struct {
    volatile int ready;
} cm_kill_t;

static void cm_kill_run(th_proc_fn_t fn)
{
    cm_kill_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double deadline;
    int status[2];
    th_procs_t *p;

    TH_ASSERT(sh != MAP_FAILED);
    sh->ready = 0;
    p         = th_procs_start(2, fn, sh);
    deadline  = th_time() + 30.0;
    while (!sh->ready) {
        if (th_time() > deadline) {
            TH_FAIL("rank 1 did not get ready in 30 s");
        }
        usleep(1000);
    }
    th_procs_kill(p, 0, SIGKILL);
    TH_ASSERT_EQ(th_procs_wait(p, status), 0);
    TH_ASSERT_EQ(status[1], 0);
}

/* connected, then the server is killed: the client gets DISCONNECTED, as
 * from the kernel's CM closing the dead process's ids */
static void killed_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    cm_kill_t *sh                 = arg;
    struct rdma_cm_event *ev;
    struct rdma_cm_id *id;
    double t0;

    (void)nprocs;
    TH_ASSERT(ch != NULL);
    if (rank == 0) {
        cm_listen(oob, ch, RDMA_PS_TCP);
        ev = cm_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10);
        id = ev->id;
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        cm_qp(id, IBV_QPT_RC);
        TH_ASSERT_EQ(rdma_accept(id, NULL), 0);
        cm_ack_next(ch, RDMA_CM_EVENT_ESTABLISHED, 10);
        for (;;) {
            pause(); /* killed by the test */
        }
    }
    id = cm_resolve(oob, ch, RDMA_PS_TCP);
    cm_qp(id, IBV_QPT_RC);
    TH_ASSERT_EQ(rdma_connect(id, NULL), 0);
    cm_ack_next(ch, RDMA_CM_EVENT_ESTABLISHED, 10);
    t0        = th_time();
    sh->ready = 1;
    cm_ack_next(ch, RDMA_CM_EVENT_DISCONNECTED, 5);
    th_log("DISCONNECTED %.3f s after the kill was allowed", th_time() - t0);
    rdma_destroy_qp(id);
    TH_ASSERT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

SVT_TEST_HOSTS(cm_killed_peer)
{
    svt_need_device();
    cm_kill_run(killed_rank);
}

/* the server holds the request and is killed before it answers: the
 * client is told at once (REJECTED, 28), not after its timeout */
static void killed_before_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    cm_kill_t *sh                 = arg;
    struct rdma_cm_event *ev;
    struct rdma_cm_id *id;

    (void)nprocs;
    TH_ASSERT(ch != NULL);
    if (rank == 0) {
        cm_listen(oob, ch, RDMA_PS_TCP);
        ev = cm_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10);
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        th_oob_barrier(oob);
        for (;;) {
            pause();
        }
    }
    id = cm_resolve(oob, ch, RDMA_PS_TCP);
    TH_ASSERT_EQ(rdma_connect(id, NULL), 0);
    th_oob_barrier(oob);
    sh->ready = 1;
    ev        = cm_event(ch, RDMA_CM_EVENT_REJECTED, 3);
    TH_ASSERT_EQ(ev->status, 28);
    TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
    TH_ASSERT_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

SVT_TEST_HOSTS(cm_killed_before_reply)
{
    svt_need_device();
    /* a timeout far beyond the test's wait: only the kill can end it */
    setenv("SOFTVERBS_CM_TIMEOUT_MS", "60000", 1);
    cm_kill_run(killed_before_rank);
}

/* The agent slow to send what it decided (its thread not scheduled on a
 * busy host, here 3 ms late every time): what the applications see must
 * still follow the messages. When an event could be read before the
 * answer decided with it had left, the client's DREQ overtook its RTU
 * (the server saw DISCONNECTED instead of ESTABLISHED: a CI run failed
 * so), and a server killed after taking the request but before its MRA
 * left kept the client waiting for its timeout. */
SVT_TEST_HOSTS(cm_slow_agent_connect)
{
    svt_need_device();
    setenv("SOFTVERBS_CM_SEND_DELAY_US", "3000", 1);
    th_run_procs(2, connect_rank, NULL);
}

SVT_TEST_HOSTS(cm_slow_agent_killed_before_reply)
{
    svt_need_device();
    setenv("SOFTVERBS_CM_SEND_DELAY_US", "3000", 1);
    setenv("SOFTVERBS_CM_TIMEOUT_MS", "60000", 1);
    cm_kill_run(killed_before_rank);
}

/* a request nobody answers (the listener's application never takes it):
 * UNREACHABLE with -ETIMEDOUT once SOFTVERBS_CM_TIMEOUT_MS (here 200 ms)
 * and the MRA's extension (four times that) are over */
static void timeout_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_event *ev;
    struct rdma_cm_id *l, *id;
    double t0, took;

    (void)nprocs;
    (void)arg;
    TH_ASSERT(ch != NULL);
    if (rank == 0) {
        l = cm_listen(oob, ch, RDMA_PS_TCP);
        th_oob_barrier(oob); /* the client has its answer */
        TH_ASSERT_EQ(rdma_destroy_id(l), 0);
    } else {
        id = cm_resolve(oob, ch, RDMA_PS_TCP);
        t0 = th_time();
        TH_ASSERT_EQ(rdma_connect(id, NULL), 0);
        ev   = cm_event(ch, RDMA_CM_EVENT_UNREACHABLE, 10);
        took = th_time() - t0;
        TH_ASSERT_EQ(ev->status, -ETIMEDOUT);
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        th_log("UNREACHABLE after %.2f s", took);
        TH_ASSERT(took >= 0.19 && took < 5.0);
        TH_ASSERT_EQ(rdma_destroy_id(id), 0);
        th_oob_barrier(oob);
    }
    rdma_destroy_event_channel(ch);
}

TH_TEST(softverbs, cm_timeout)
{
    svt_need_device();
    setenv("SOFTVERBS_CM_TIMEOUT_MS", "200", 1);
    th_run_procs(2, timeout_rank, NULL);
}

/* ---------------------------------------------------------------------- */

/* a datagram service lookup (SIDR): the client learns the server's QP
 * number and Q_Key and sends it a datagram */
static void ud_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *l          = NULL, *id;
    struct rdma_cm_event *ev;
    struct ibv_send_wr wr, *bad;
    struct ibv_ah *ah;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    char buf[128];

    (void)nprocs;
    (void)arg;
    TH_ASSERT(ch != NULL);
    if (rank == 0) {
        l  = cm_listen(oob, ch, RDMA_PS_UDP);
        ev = cm_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10);
        id = ev->id;
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        cm_qp(id, IBV_QPT_UD);
        TH_ASSERT_EQ(id->qp->state, IBV_QPS_RTS);
        mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
        TH_ASSERT(mr != NULL);
        svt_post_recv(id->qp, buf, sizeof(buf), mr->lkey, 3);
        TH_ASSERT_EQ(rdma_accept(id, NULL), 0);
        svt_poll(id->recv_cq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_ASSERT_STR_EQ(buf + 40, "a datagram"); /* after the GRH */
        th_oob_barrier(oob);
    } else {
        id = cm_resolve(oob, ch, RDMA_PS_UDP);
        cm_qp(id, IBV_QPT_UD);
        TH_ASSERT_EQ(rdma_connect(id, NULL), 0);
        ev = cm_event(ch, RDMA_CM_EVENT_ESTABLISHED, 10);
        TH_ASSERT(ev->param.ud.qp_num != 0);
        TH_ASSERT_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
        ah = ibv_create_ah(id->pd, &ev->param.ud.ah_attr);
        TH_ASSERT(ah != NULL);
        mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
        TH_ASSERT(mr != NULL);
        snprintf(buf, sizeof(buf), "a datagram");
        sge = svt_sge(buf, 32, mr);
        memset(&wr, 0, sizeof(wr));
        wr.opcode            = IBV_WR_SEND;
        wr.sg_list           = &sge;
        wr.num_sge           = 1;
        wr.send_flags        = IBV_SEND_SIGNALED;
        wr.wr.ud.ah          = ah;
        wr.wr.ud.remote_qpn  = ev->param.ud.qp_num;
        wr.wr.ud.remote_qkey = ev->param.ud.qkey;
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        TH_ASSERT_EQ(ibv_post_send(id->qp, &wr, &bad), 0);
        svt_poll(id->send_cq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        th_oob_barrier(oob);
        ibv_destroy_ah(ah);
    }
    ibv_dereg_mr(mr);
    rdma_destroy_qp(id);
    TH_ASSERT_EQ(rdma_destroy_id(id), 0);
    if (l != NULL) {
        TH_ASSERT_EQ(rdma_destroy_id(l), 0);
    }
    rdma_destroy_event_channel(ch);
}

SVT_TEST_HOSTS(cm_ud)
{
    svt_need_device();
    th_run_procs(2, ud_rank, NULL);
}

/* the synchronous calls (rdma_create_ep, rdma_get_request, rdma_accept and
 * rdma_connect that wait), as rdma_server and rdma_client use them */
static void sync_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_addrinfo hints, *res;
    struct ibv_qp_init_attr qa;
    struct rdma_cm_id *l, *id;
    char port[16];
    cm_where_t w;

    (void)nprocs;
    (void)arg;
    memset(&hints, 0, sizeof(hints));
    hints.ai_port_space = RDMA_PS_TCP;
    memset(&qa, 0, sizeof(qa));
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qa.sq_sig_all                             = 1;
    if (rank == 0) {
        hints.ai_flags = RAI_PASSIVE;
        w.addr         = cm_my_addr();
        TH_ASSERT_EQ(rdma_getaddrinfo(inet_ntoa(w.addr.sin_addr), "0", &hints,
                                      &res),
                     0);
        TH_ASSERT_EQ(rdma_create_ep(&l, res, NULL, &qa), 0);
        rdma_freeaddrinfo(res);
        TH_ASSERT_EQ(rdma_listen(l, 0), 0);
        w.addr.sin_port = rdma_get_src_port(l);
        th_oob_send(oob, 1, &w, sizeof(w));
        TH_ASSERT_EQ(rdma_get_request(l, &id), 0);
        TH_ASSERT(id->qp != NULL); /* made from rdma_create_ep's attr */
        TH_ASSERT(id->event != NULL);
        TH_ASSERT_EQ(rdma_accept(id, NULL), 0); /* waits: ESTABLISHED */
        TH_ASSERT_EQ(id->qp->state, IBV_QPS_RTS);
        th_oob_barrier(oob);
        rdma_disconnect(id);
        rdma_destroy_ep(id);
        rdma_destroy_ep(l);
    } else {
        th_oob_recv(oob, 0, &w, sizeof(w));
        snprintf(port, sizeof(port), "%u", (unsigned)ntohs(w.addr.sin_port));
        TH_ASSERT_EQ(rdma_getaddrinfo(inet_ntoa(w.addr.sin_addr), port, &hints,
                                      &res),
                     0);
        TH_ASSERT(res->ai_dst_addr != NULL);
        TH_ASSERT_EQ(rdma_create_ep(&id, res, NULL, &qa), 0);
        rdma_freeaddrinfo(res);
        TH_ASSERT(id->qp != NULL && id->send_cq_channel != NULL);
        TH_ASSERT_EQ(rdma_connect(id, NULL), 0); /* waits: ESTABLISHED */
        TH_ASSERT_EQ(id->qp->state, IBV_QPS_RTS);
        th_oob_barrier(oob);
        rdma_disconnect(id);
        rdma_destroy_ep(id);
    }
}

SVT_TEST_HOSTS(cm_sync_ep)
{
    svt_need_device();
    th_run_procs(2, sync_rank, NULL);
}

/* the port space: a port in use is refused, REUSEADDR on both sides lets a
 * second id bind one that is not listened on, ephemeral ports differ */
TH_TEST(softverbs, cm_ports)
{
    struct rdma_event_channel *ch;
    struct rdma_cm_id *a, *b, *c;
    struct sockaddr_in in;
    int one = 1;

    svt_need_device();
    ch = rdma_create_event_channel();
    TH_ASSERT(ch != NULL);
    TH_ASSERT_EQ(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP), 0);
    TH_ASSERT_EQ(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP), 0);
    TH_ASSERT_EQ(rdma_create_id(ch, &c, NULL, RDMA_PS_UDP), 0);
    in = cm_my_addr();
    TH_ASSERT_EQ(rdma_bind_addr(a, (struct sockaddr *)&in), 0);
    in.sin_port = rdma_get_src_port(a);
    TH_ASSERT(in.sin_port != 0);
    TH_ASSERT_EQ(rdma_bind_addr(b, (struct sockaddr *)&in), -1);
    TH_ASSERT_EQ(errno, EADDRINUSE);
    /* another port space is another port */
    TH_ASSERT_EQ(rdma_bind_addr(c, (struct sockaddr *)&in), 0);
    TH_ASSERT_EQ(rdma_destroy_id(b), 0);
    TH_ASSERT_EQ(rdma_destroy_id(a), 0);
    /* free again */
    TH_ASSERT_EQ(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP), 0);
    TH_ASSERT_EQ(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
                                 &one, sizeof(one)),
                 0);
    TH_ASSERT_EQ(rdma_bind_addr(a, (struct sockaddr *)&in), 0);
    TH_ASSERT_EQ(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP), 0);
    TH_ASSERT_EQ(rdma_set_option(b, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
                                 &one, sizeof(one)),
                 0);
    TH_ASSERT_EQ(rdma_bind_addr(b, (struct sockaddr *)&in), 0);
    /* but two listeners on one port, never */
    TH_ASSERT_EQ(rdma_listen(a, 1), 0);
    TH_ASSERT_EQ(rdma_listen(b, 1), -1);
    TH_ASSERT_EQ(errno, EADDRINUSE);
    TH_ASSERT_EQ(rdma_destroy_id(a), 0);
    TH_ASSERT_EQ(rdma_destroy_id(b), 0);
    TH_ASSERT_EQ(rdma_destroy_id(c), 0);
    rdma_destroy_event_channel(ch);
}

/* the CM port of a host takes only connections that authenticate: a
 * stranger's bytes are dropped with the connection, strangers that stay
 * silent in their handshake hold no one up (each handshake has a thread
 * of its own and 2 s), and a real client connects meanwhile as fast as
 * ever */
static void cm_port_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *l, *id;
    struct rdma_cm_event *ev;
    struct sockaddr_in sa;
    int fd, i, silent[5];
    char junk[512];
    double t0;

    (void)nprocs;
    (void)arg;
    TH_ASSERT(ch != NULL);
    if (rank == 0) {
        l  = cm_listen(oob, ch, RDMA_PS_TCP);
        ev = cm_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 20);
        id = ev->id;
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        TH_ASSERT_EQ(rdma_accept(id, NULL), 0);
        cm_ack_next(ch, RDMA_CM_EVENT_ESTABLISHED, 10);
        th_oob_barrier(oob);
        TH_ASSERT_EQ(rdma_destroy_id(id), 0);
        TH_ASSERT_EQ(rdma_destroy_id(l), 0);
    } else {
        cm_where_t w;

        /* peek at where rank 0 is, then give it back to cm_resolve */
        th_oob_recv(oob, 0, &w, sizeof(w));
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_addr   = w.addr.sin_addr;
        sa.sin_port   = htons(18699); /* SOFTVERBS_CM_PORT default */
        for (i = 0; i < 2; ++i) {
            fd = socket(AF_INET, SOCK_STREAM, 0);
            TH_ASSERT(fd >= 0);
            if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
                memset(junk, 0x5a, sizeof(junk));
                if (write(fd, junk, sizeof(junk)) < 0) {
                    /* closed on us already: as good */
                }
            }
            close(fd);
        }
        for (i = 0; i < 5; ++i) {
            silent[i] = socket(AF_INET, SOCK_STREAM, 0);
            TH_ASSERT(silent[i] >= 0);
            TH_ASSERT_EQ(connect(silent[i], (struct sockaddr *)&sa, sizeof(sa)),
                         0);
        }
        t0 = th_time();
        TH_ASSERT_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
        TH_ASSERT_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&w.addr,
                                       2000),
                     0);
        cm_ack_next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10);
        TH_ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
        cm_ack_next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10);
        TH_ASSERT_EQ(rdma_connect(id, NULL), 0);
        ev = cm_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, 10);
        TH_ASSERT_EQ(rdma_ack_cm_event(ev), 0);
        TH_ASSERT_EQ(rdma_establish(id), 0);
        th_log("connected in %.3f s beside silent strangers", th_time() - t0);
        TH_ASSERT_LT(th_time() - t0, 1.5);
        th_oob_barrier(oob);
        for (i = 0; i < 5; ++i) {
            close(silent[i]);
        }
        TH_ASSERT_EQ(rdma_destroy_id(id), 0);
    }
    rdma_destroy_event_channel(ch);
}

TH_TEST_TIMEOUT(softverbs_net, cm_port_strangers, 60)
{
    svt_net_hosts();
    th_run_procs(2, cm_port_rank, NULL);
}
