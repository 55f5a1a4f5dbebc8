/*
 * softverbs-overlap: how much of an RDMA WRITE overlaps with computation
 * of the posting thread. Two processes (fork); the parent posts a WRITE of
 * SIZE bytes to the child, computes for COMPUTE_US, then waits for the
 * completion. Prints the mean time per iteration, the time of the post
 * call alone and of the transfer alone (no compute).
 *
 * usage: LD_PRELOAD=libsoftverbs.so softverbs-overlap [size] [compute_us]
 */
#include "sv_rc_connect.h"

#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint32_t qpn;
    uint16_t lid;
    uint64_t addr;
    uint32_t rkey;
} info_t;

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void connect_qp(struct ibv_qp *qp, const info_t *peer)
{
    const char *step = sv_rc_connect(qp, peer->qpn, peer->lid);

    if (step != NULL) {
        die(step);
    }
}

static volatile uint64_t sink;

static void compute(double us)
{
    double end = now_us() + us;
    uint64_t x = 1;

    while (now_us() < end) {
        x = x * 6364136223846793005ULL + 1;
    }
    sink = x;
}

int main(int argc, char **argv)
{
    size_t size = (argc > 1) ? strtoull(argv[1], NULL, 0) : (1 << 20);
    double cus = (argc > 2) ? atof(argv[2]) : 100;
    int iters = 200, i, p2c[2], c2p[2], is_child;
    double t0, t_post = 0, t_total, t_xfer;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_qp_init_attr qa;
    struct ibv_send_wr wr, *bad;
    struct ibv_port_attr pa;
    struct ibv_sge sge;
    struct ibv_wc wc;
    struct ibv_mr *mr;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    info_t mine, peer;
    pid_t pid;
    char *buf;

    if (pipe(p2c) || pipe(c2p)) {
        die("pipe");
    }
    pid      = fork();
    is_child = (pid == 0);
    list = ibv_get_device_list(NULL);
    if (list == NULL || list[0] == NULL) {
        fprintf(stderr, "no verbs device\n");
        return 1;
    }
    ctx = ibv_open_device(list[0]);
    pd  = ibv_alloc_pd(ctx);
    cq  = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    buf = aligned_alloc(4096, size);
    memset(buf, is_child, size);
    mr  = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE |
                                    IBV_ACCESS_REMOTE_WRITE);
    if (!ctx || !pd || !cq || !mr) {
        die("setup");
    }
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &qa);
    if (qp == NULL) {
        die("qp");
    }
    ibv_query_port(ctx, 1, &pa);
    mine.qpn  = qp->qp_num;
    mine.lid  = pa.lid;
    mine.addr = (uintptr_t)buf;
    mine.rkey = mr->rkey;
    if (write(is_child ? c2p[1] : p2c[1], &mine, sizeof(mine)) !=
            sizeof(mine) ||
        read(is_child ? p2c[0] : c2p[0], &peer, sizeof(peer)) !=
            sizeof(peer)) {
        die("exchange");
    }
    connect_qp(qp, &peer);
    if (is_child) {
        /* the target runs no verbs call; wait to be told to exit */
        if (read(p2c[0], &i, 1) < 0) {
            die("read");
        }
        return 0;
    }

    sge.addr = (uintptr_t)buf;
    sge.length = (uint32_t)size;
    sge.lkey = mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = peer.addr;
    wr.wr.rdma.rkey = peer.rkey;

    for (int pass = 0; pass < 2; ++pass) {
        double c = pass ? cus : 0;

        t_post = 0;
        t0 = now_us();
        for (i = 0; i < iters; ++i) {
            double tp = now_us();

            if (ibv_post_send(qp, &wr, &bad)) {
                die("post");
            }
            t_post += now_us() - tp;
            compute(c);
            while (ibv_poll_cq(cq, 1, &wc) == 0) {
            }
            if (wc.status != IBV_WC_SUCCESS) {
                fprintf(stderr, "completion error %d\n", wc.status);
                return 1;
            }
        }
        if (pass == 0) {
            t_xfer = (now_us() - t0) / iters;
        } else {
            t_total = (now_us() - t0) / iters;
        }
    }
    printf("size %zu: transfer alone %.1f us, compute %.1f us, "
           "post+compute+wait %.1f us (post call %.1f us), overlap %.0f%%\n",
           size, t_xfer, cus, t_total, t_post / iters,
           100.0 * (t_xfer + cus - t_total) / (t_xfer < cus ? t_xfer : cus));
    if (write(p2c[1], "x", 1) != 1) {
        die("write");
    }
    waitpid(pid, NULL, 0);
    return 0;
}
