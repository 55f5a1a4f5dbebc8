/*
 * The fabric's own cost of telling a target that data is there, without
 * UCX (issue 7: the floor under RVMA's latency goal against a polled put).
 * Two processes on this host, one RC QP each (fork + pipes for the QP
 * numbers and keys), ping-pong of one operation each way:
 *   write - RDMA write whose last byte changes every iteration; the target
 *           polls that byte (what bench/rvma-lat.c's polled put does);
 *   wimm  - RDMA write with immediate into the same buffer; the target
 *           polls its receive CQ and posts the receive again (what a put
 *           placed straight into a posted buffer and notified by the
 *           network, with no copy and no ring, would cost at least).
 * Prints "notify SIZE write_us wimm_us", half round trips, medians.
 *
 *   verbs-notify-lat [-n iterations] [-s size] [-o write|wimm]
 *                    [-H netns-path,address]
 *
 * -s runs one size (default: 8, 512, 4096, 16384 and 65536 bytes), -o one
 * of the two operations (the other's column then reads 0), e.g. to trace
 * it alone (bench/softverbs-stages.sh). -H puts the second process on
 * another host: it enters that network namespace (root) and sets
 * SOFTVERBS_NET to the address before its first verbs call
 * (softverbs-netns.sh builds such hosts; run the program itself on the
 * other one).
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "sv_rc_connect.h"

#include <infiniband/verbs.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SIZE 65536
#define RECVS    128

typedef struct {
    uint32_t qpn;
    uint32_t rkey;
    uint16_t lid;
    uint64_t addr;
} peer_info_t;

static struct ibv_context *ctx;
static struct ibv_qp *qp;
static struct ibv_cq *scq, *rcq;
static struct ibv_mr *mr;
static uint8_t *sbuf, *rbuf;
static peer_info_t peer;

static void die(const char *what)
{
    fprintf(stderr, "verbs-notify-lat: %s failed\n", what);
    exit(1);
}

static void xfer(int fd, void *buf, size_t len, int send)
{
    ssize_t n = send ? write(fd, buf, len) : read(fd, buf, len);

    if (n != (ssize_t)len) {
        die("pipe");
    }
}

static void poll_one(struct ibv_cq *cq)
{
    struct ibv_wc wc;
    int n;

    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
    }
    if ((n < 0) || (wc.status != IBV_WC_SUCCESS)) {
        die("completion");
    }
}

static void post_recv(void)
{
    struct ibv_recv_wr wr = {0}, *bad;

    if (ibv_post_recv(qp, &wr, &bad)) {
        die("ibv_post_recv");
    }
}

static void post_write(size_t size, int with_imm)
{
    struct ibv_sge sge = {(uintptr_t)sbuf, (uint32_t)size, mr->lkey};
    struct ibv_send_wr wr = {0}, *bad;

    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.opcode              = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM :
                                        IBV_WR_RDMA_WRITE;
    wr.send_flags          = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = peer.addr;
    wr.wr.rdma.rkey        = peer.rkey;
    if (ibv_post_send(qp, &wr, &bad)) {
        die("ibv_post_send");
    }
    poll_one(scq);
}

static void setup(int rfd, int wfd)
{
    struct ibv_qp_init_attr qa = {0};
    struct ibv_device **list;
    const char *step;
    struct ibv_port_attr pa;
    peer_info_t mine;
    struct ibv_pd *pd;
    int i;

    list = ibv_get_device_list(NULL);
    if ((list == NULL) || (list[0] == NULL)) {
        die("ibv_get_device_list");
    }
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    pd  = ctx ? ibv_alloc_pd(ctx) : NULL;
    scq = ctx ? ibv_create_cq(ctx, RECVS, NULL, NULL, 0) : NULL;
    rcq = ctx ? ibv_create_cq(ctx, RECVS, NULL, NULL, 0) : NULL;
    if ((pd == NULL) || (scq == NULL) || (rcq == NULL)) {
        die("device setup");
    }
    sbuf = aligned_alloc(4096, 2 * MAX_SIZE);
    if (sbuf == NULL) {
        die("aligned_alloc");
    }
    rbuf = sbuf + MAX_SIZE;
    memset(sbuf, 0, 2 * MAX_SIZE);
    mr = ibv_reg_mr(pd, sbuf, 2 * MAX_SIZE,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    qa.send_cq          = scq;
    qa.recv_cq          = rcq;
    qa.qp_type          = IBV_QPT_RC;
    qa.cap.max_send_wr  = 16;
    qa.cap.max_recv_wr  = RECVS;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qp = mr ? ibv_create_qp(pd, &qa) : NULL;
    if ((qp == NULL) || ibv_query_port(ctx, 1, &pa)) {
        die("QP setup");
    }

    mine.qpn  = qp->qp_num;
    mine.rkey = mr->rkey;
    mine.lid  = pa.lid;
    mine.addr = (uintptr_t)rbuf;
    xfer(wfd, &mine, sizeof(mine), 1);
    xfer(rfd, &peer, sizeof(peer), 0);

    step = sv_rc_connect(qp, peer.qpn, peer.lid);
    if (step != NULL) {
        die(step);
    }
    for (i = 0; i < RECVS; ++i) {
        post_recv();
    }
}

/* half the median round trip of iters ping-pongs, in us */
static double pingpong(int rank, size_t size, int with_imm, int iters,
                       double *samples)
{
    volatile uint8_t *last = rbuf + size - 1;
    uint8_t flag;
    double t0;
    int i, turn;

    for (i = 0; i < iters; ++i) {
        flag = (uint8_t)((i % 255) + 1);
        t0   = now();
        for (turn = 0; turn < 2; ++turn) {
            if (turn == rank) {
                if (with_imm) {
                    poll_one(rcq);
                    post_recv();
                } else {
                    while (*last != flag) {
                    }
                }
            } else {
                sbuf[size - 1] = flag;
                post_write(size, with_imm);
            }
        }
        samples[i] = (now() - t0) / 2;
    }
    return median(samples, iters) * 1e6;
}

int main(int argc, char **argv)
{
    static size_t sizes[] = {8, 512, 4096, 16384, 65536};
    int iters = 2000, p2c[2], c2p[2], rank, rfd, wfd, c, status;
    int do_write = 1, do_wimm = 1, nsfd;
    char *host = NULL, *addr;
    unsigned i, nsizes = sizeof(sizes) / sizeof(sizes[0]);
    double write_us, wimm_us, *samples;
    char sync = 0;
    long size;
    pid_t pid;

    while ((c = getopt(argc, argv, "n:s:o:H:")) != -1) {
        switch (c) {
        case 'n':
            iters = atoi(optarg);
            break;
        case 's':
            size = atol(optarg);
            if ((size < 1) || (size > MAX_SIZE)) {
                die("-s (1..65536)");
            }
            sizes[0] = (size_t)size;
            nsizes   = 1;
            break;
        case 'o':
            do_write = !strcmp(optarg, "write");
            do_wimm  = !strcmp(optarg, "wimm");
            if (!do_write && !do_wimm) {
                die("-o (write or wimm)");
            }
            break;
        case 'H':
            host = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [-n iterations] [-s size] "
                    "[-o write|wimm] [-H netns-path,address]\n",
                    argv[0]);
            return 2;
        }
    }
    samples = calloc((iters > 0) ? iters : 1, sizeof(*samples));
    if ((iters < 1) || (samples == NULL) || pipe(p2c) || pipe(c2p)) {
        die("arguments");
    }

    pid  = fork();
    rank = (pid == 0);
    rfd  = rank ? p2c[0] : c2p[0];
    wfd  = rank ? c2p[1] : p2c[1];
    /* only the peer's ends stay open: a peer that dies ends our reads */
    close(rank ? p2c[1] : c2p[1]);
    close(rank ? c2p[0] : p2c[0]);
    if (rank && (host != NULL)) {
        addr = strchr(host, ',');
        if (addr == NULL) {
            die("-H (netns-path,address)");
        }
        *addr++ = '\0';
        nsfd    = open(host, O_RDONLY);
        if ((nsfd < 0) || (setns(nsfd, CLONE_NEWNET) != 0)) {
            die("setns");
        }
        close(nsfd);
        setenv("SOFTVERBS_NET", addr, 1);
    }
    setup(rfd, wfd);
    for (i = 0; i < nsizes; ++i) {
        /* the flag byte is clear on both sides before each series */
        rbuf[sizes[i] - 1] = 0;
        xfer(wfd, &sync, 1, 1);
        xfer(rfd, &sync, 1, 0);
        write_us = do_write ? pingpong(rank, sizes[i], 0, iters, samples) : 0;
        xfer(wfd, &sync, 1, 1);
        xfer(rfd, &sync, 1, 0);
        wimm_us = do_wimm ? pingpong(rank, sizes[i], 1, iters, samples) : 0;
        if (rank) {
            printf("notify %zu %.3f %.3f\n", sizes[i], write_us, wimm_us);
            fflush(stdout);
        }
    }
    xfer(wfd, &sync, 1, 1);
    xfer(rfd, &sync, 1, 0);
    if (!rank) {
        waitpid(pid, &status, 0);
        return !(WIFEXITED(status) && (WEXITSTATUS(status) == 0));
    }
    return 0;
}
