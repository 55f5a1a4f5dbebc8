/*
 * RVMA put latency and message rate (issue 7), one transport configuration
 * per run (UCX_TLS from the environment). Processes on this host: fork +
 * socketpairs for worker addresses and remote keys.
 *
 * Latency until the target knows the data is there, as half the round trip
 * of a ping-pong in which each side answers as soon as it knows:
 *   rvma  - ucp_rvma_put_nbx() into a window with a threshold of the
 *           message size; the target waits for the completion pointer;
 *   flush - ucp_put_nbx() + ucp_ep_flush_nbx() + an 8-byte tag send; the
 *           target waits for the tag (what InfiniBand needs to signal a put);
 *   poll  - ucp_put_nbx() whose last byte changes every iteration; the
 *           target polls it (correct only with in-order placement).
 * Prints: "lat SIZE rvma_us flush_us poll_us" (medians of the iterations).
 *
 * Message rate: P initiators put 8-byte messages, W in flight each, into
 * one window with an operation threshold of all of them; the target times
 * from the start signal to its completion pointer.
 * Prints: "rate P puts_per_second".
 *
 *   rvma-lat [-n iters] [-p initiators_for_rate] [-m puts_per_initiator]
 */
#include <ucp/api/ucp.h>
#include <ucp/api/ucpx_rvma.h>

#include "bench_util.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE   65536
#define WIN_VADDR  0x7e57
#define RATE_WIN   64
#define MAX_PROCS  8

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h eps[MAX_PROCS];

static void check(const char *what, ucs_status_t status)
{
    if (status != UCS_OK) {
        fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
        exit(1);
    }
}

static void wait_req(void *req)
{
    ucs_status_t status;

    if (UCS_PTR_IS_ERR(req)) {
        check("request", UCS_PTR_STATUS(req));
    }
    if (req == NULL) {
        return;
    }
    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    check("request", status);
    ucp_request_free(req);
}

static void xfer(int fd, void *buf, size_t len, int send)
{
    ssize_t n;
    size_t done = 0;

    while (done < len) {
        n = send ? write(fd, (char*)buf + done, len - done) :
                   read(fd, (char*)buf + done, len - done);
        if (n <= 0) {
            perror("oob");
            exit(1);
        }
        done += n;
    }
}

static void oob_blob_send(int fd, const void *buf, size_t len)
{
    xfer(fd, &len, sizeof(len), 1);
    xfer(fd, (void*)buf, len, 1);
}

static void *oob_blob_recv(int fd, size_t *len_p)
{
    size_t len;
    void *buf;

    xfer(fd, &len, sizeof(len), 0);
    buf = malloc(len);
    xfer(fd, buf, len, 0);
    if (len_p != NULL) {
        *len_p = len;
    }
    return buf;
}

static void setup(void)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = UCP_FEATURE_TAG | UCP_FEATURE_RMA |
                                         UCP_FEATURE_AM};
    ucp_worker_params_t wparams = {0};

    check("ucp_init", ucp_init(&params, NULL, &ctx));
    check("ucp_worker_create", ucp_worker_create(ctx, &wparams, &worker));
}

static void connect_peer(int fd, int peer)
{
    ucp_ep_params_t eparams = {0};
    ucp_address_t *addr;
    size_t len;
    void *paddr;

    check("address", ucp_worker_get_address(worker, &addr, &len));
    oob_blob_send(fd, addr, len);
    paddr = oob_blob_recv(fd, NULL);
    ucp_worker_release_address(worker, addr);
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = paddr;
    check("ucp_ep_create", ucp_ep_create(worker, &eparams, &eps[peer]));
    free(paddr);
}

/* map buf and swap rkeys with the peer */
static ucp_rkey_h swap_rkey(int fd, ucp_ep_h ep, void *buf, size_t len,
                            ucp_mem_h *memh_p, uint64_t *raddr_p)
{
    ucp_mem_map_params_t mp = {0};
    uint64_t addr           = (uintptr_t)buf;
    void *rbuf, *peer;
    ucp_rkey_h rkey;
    size_t rlen;

    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = buf;
    mp.length     = len;
    check("ucp_mem_map", ucp_mem_map(ctx, &mp, memh_p));
    check("rkey_pack", ucp_rkey_pack(ctx, *memh_p, &rbuf, &rlen));
    xfer(fd, &addr, sizeof(addr), 1);
    oob_blob_send(fd, rbuf, rlen);
    ucp_rkey_buffer_release(rbuf);
    xfer(fd, raddr_p, sizeof(*raddr_p), 0);
    peer = oob_blob_recv(fd, NULL);
    check("rkey_unpack", ucp_ep_rkey_unpack(ep, peer, &rkey));
    free(peer);
    return rkey;
}

/* ---- latency ------------------------------------------------------------- */

static double lat_rvma(int rank, size_t size, int iters, uint8_t *sbuf,
                       uint8_t *rbuf, double *samples)
{
    ucp_request_param_t param = {0};
    ucp_rvma_win_params_t wp;
    void *comp, *done[4];
    ucp_rvma_win_h win;
    void *req = NULL;
    uint64_t length;
    double t0;
    int i;

    wp.field_mask = UCP_RVMA_WIN_PARAM_FIELD_VADDR |
                    UCP_RVMA_WIN_PARAM_FIELD_THRESHOLD |
                    UCP_RVMA_WIN_PARAM_FIELD_RETAIN;
    wp.vaddr      = WIN_VADDR + size;
    wp.threshold  = size;
    wp.retain     = 0;
    check("win_create", ucp_rvma_win_create(worker, &wp, &win));
    check("post", ucp_rvma_win_post_buffer(win, rbuf, MAX_SIZE, &comp,
                                           &length));

    for (i = 0; i < iters; ++i) {
        t0 = now();
        if (rank == 1) {
            req = ucp_rvma_put_nbx(eps[0], WIN_VADDR + size, 0, sbuf, size,
                                   &param);
        }
        while (comp == NULL) {
            ucp_worker_progress(worker);
        }
        /* repost before answering: the peer's next put may come at once */
        ucp_rvma_win_get_buf_ptrs(win, done, 4);
        check("post", ucp_rvma_win_post_buffer(win, rbuf, MAX_SIZE, &comp,
                                               &length));
        wait_req(req);
        if (rank == 0) {
            req = ucp_rvma_put_nbx(eps[1], WIN_VADDR + size, 0, sbuf, size,
                                   &param);
        } else {
            samples[i] = (now() - t0) / 2;
        }
    }
    if (rank == 0) {
        wait_req(req);
    }
    /* both sides are done with the window before it goes */
    while (ucp_worker_progress(worker)) {
    }
    ucp_rvma_win_destroy(win);
    return median(samples, iters);
}

static double lat_flush(int rank, size_t size, int iters, uint8_t *sbuf,
                        ucp_rkey_h rkey, uint64_t raddr, double *samples)
{
    ucp_request_param_t param = {0};
    ucp_ep_h ep = eps[1 - rank];
    uint64_t token;
    double t0;
    int i, turn;

    for (i = 0; i < iters; ++i) {
        t0 = now();
        for (turn = 0; turn < 2; ++turn) {
            if (turn == rank) {
                wait_req(ucp_tag_recv_nbx(worker, &token, sizeof(token), 7,
                                          (ucp_tag_t)-1, &param));
            } else {
                wait_req(ucp_put_nbx(ep, sbuf, size, raddr, rkey, &param));
                wait_req(ucp_ep_flush_nbx(ep, &param));
                token = i;
                wait_req(ucp_tag_send_nbx(ep, &token, sizeof(token), 7,
                                          &param));
            }
        }
        samples[i] = (now() - t0) / 2;
    }
    return median(samples, iters);
}

static double lat_poll(int rank, size_t size, int iters, uint8_t *sbuf,
                       volatile uint8_t *rbuf, ucp_rkey_h rkey, uint64_t raddr,
                       double *samples)
{
    ucp_request_param_t param = {0};
    ucp_ep_h ep = eps[1 - rank];
    uint8_t flag;
    double t0;
    int i, turn;

    for (i = 0; i < iters; ++i) {
        flag = (uint8_t)(i % 255) + 1;
        t0   = now();
        for (turn = 0; turn < 2; ++turn) {
            if (turn == rank) {
                while (rbuf[size - 1] != flag) {
                    ucp_worker_progress(worker);
                }
            } else {
                sbuf[size - 1] = flag;
                wait_req(ucp_put_nbx(ep, sbuf, size, raddr, rkey, &param));
            }
        }
        samples[i] = (now() - t0) / 2;
    }
    return median(samples, iters);
}

static void run_latency(int rank, int fd, int iters)
{
    static const size_t sizes[] = {8, 64, 512, 4096, 16384, 65536};
    uint8_t *sbuf = calloc(1, MAX_SIZE), *rbuf = calloc(1, MAX_SIZE);
    double *samples = calloc(iters, sizeof(double));
    double r, f, p;
    uint64_t raddr;
    ucp_mem_h memh;
    ucp_rkey_h rkey;
    unsigned i;
    char sync;

    rkey = swap_rkey(fd, eps[1 - rank], rbuf, MAX_SIZE, &memh, &raddr);
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        /* both windows exist before the first put */
        xfer(fd, &sync, 1, 1);
        xfer(fd, &sync, 1, 0);
        r = lat_rvma(rank, sizes[i], iters, sbuf, rbuf, samples);
        xfer(fd, &sync, 1, 1);
        xfer(fd, &sync, 1, 0);
        f = lat_flush(rank, sizes[i], iters, sbuf, rkey, raddr, samples);
        /* the flag byte is clear on both sides before the first poll put */
        rbuf[sizes[i] - 1] = 0;
        xfer(fd, &sync, 1, 1);
        xfer(fd, &sync, 1, 0);
        p = lat_poll(rank, sizes[i], iters, sbuf, rbuf, rkey, raddr, samples);
        if (rank == 1) {
            printf("lat %zu %.3f %.3f %.3f\n", sizes[i], r * 1e6, f * 1e6,
                   p * 1e6);
            fflush(stdout);
        }
    }
    xfer(fd, &sync, 1, 1);
    xfer(fd, &sync, 1, 0);
    ucp_rkey_destroy(rkey);
    ucp_mem_unmap(ctx, memh);
    free(sbuf);
    free(rbuf);
    free(samples);
}

/* ---- message rate: P initiators into one window ------------------------- */

static void run_rate(int rank, int nprocs, int *fds, int puts)
{
    ucp_request_param_t param = {0};
    size_t size = (size_t)(nprocs - 1) * puts * 8;
    void *reqs[RATE_WIN] = {NULL};
    ucp_rvma_win_params_t wp;
    uint64_t length, data = 0;
    ucp_rvma_win_h win;
    void *comp;
    uint8_t *buf;
    double t0;
    char sync;
    int i, p;

    if (rank == 0) {
        buf           = malloc(size);
        wp.field_mask = UCP_RVMA_WIN_PARAM_FIELD_VADDR |
                        UCP_RVMA_WIN_PARAM_FIELD_THRESHOLD |
                        UCP_RVMA_WIN_PARAM_FIELD_TYPE;
        wp.vaddr      = WIN_VADDR;
        wp.threshold  = (uint64_t)(nprocs - 1) * puts;
        wp.type       = UCP_RVMA_THRESHOLD_OPS;
        check("win_create", ucp_rvma_win_create(worker, &wp, &win));
        check("post", ucp_rvma_win_post_buffer(win, buf, size, &comp,
                                               &length));
        for (p = 1; p < nprocs; ++p) {
            xfer(fds[p], &sync, 1, 1);
        }
        t0 = now();
        while (comp == NULL) {
            ucp_worker_progress(worker);
        }
        printf("rate %d %.0f\n", nprocs - 1,
               (nprocs - 1) * (double)puts / (now() - t0));
        fflush(stdout);
        /* the last replies may still wait for resources: progress until
         * every initiator has all of them */
        for (p = 1; p < nprocs; ++p) {
            struct pollfd pfd = {.fd = fds[p], .events = POLLIN};
            while (poll(&pfd, 1, 0) == 0) {
                ucp_worker_progress(worker);
            }
            xfer(fds[p], &sync, 1, 0);
        }
        ucp_rvma_win_destroy(win);
        free(buf);
        return;
    }

    xfer(fds[0], &sync, 1, 0);
    for (i = 0; i < puts; ++i) {
        wait_req(reqs[i % RATE_WIN]);
        reqs[i % RATE_WIN] = ucp_rvma_put_nbx(eps[0], WIN_VADDR,
                                              ((size_t)(rank - 1) * puts + i) *
                                              8, &data, 8, &param);
    }
    for (i = 0; i < RATE_WIN; ++i) {
        wait_req(reqs[i]);
    }
    xfer(fds[0], &sync, 1, 1);
}

/* ---- processes ---------------------------------------------------------- */

static void run_job(int nprocs, int iters, int puts, int latency)
{
    int fds[MAX_PROCS][MAX_PROCS], sv[2], rank, p, q, status, ok = 1;
    int *mine;
    pid_t pids[MAX_PROCS];
    char sync;

    for (p = 0; p < nprocs; ++p) {
        for (q = p + 1; q < nprocs; ++q) {
            socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
            fds[p][q] = sv[0];
            fds[q][p] = sv[1];
        }
    }

    fflush(stdout);
    for (rank = 0; rank < nprocs; ++rank) {
        pids[rank] = fork();
        if (pids[rank] != 0) {
            continue;
        }
        mine = fds[rank];
        setup();
        /* the target connects to each initiator, in rank order */
        for (p = 0; p < nprocs; ++p) {
            if ((p != rank) && ((rank == 0) || (p == 0))) {
                connect_peer(mine[p], p);
            }
        }
        if (latency) {
            run_latency(rank, mine[1 - rank], iters);
        } else {
            run_rate(rank, nprocs, mine, puts);
        }
        /* everyone done before endpoints go */
        for (p = 0; p < nprocs; ++p) {
            if ((p != rank) && ((rank == 0) || (p == 0))) {
                xfer(mine[p], &sync, 1, 1);
                xfer(mine[p], &sync, 1, 0);
            }
        }
        _exit(0);
    }

    for (rank = 0; rank < nprocs; ++rank) {
        waitpid(pids[rank], &status, 0);
        ok &= WIFEXITED(status) && (WEXITSTATUS(status) == 0);
    }
    if (!ok) {
        fprintf(stderr, "a rank failed\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int iters = 1000, rate_procs = 4, puts = 20000, c;

    while ((c = getopt(argc, argv, "n:p:m:")) != -1) {
        switch (c) {
        case 'n': iters = atoi(optarg); break;
        case 'p': rate_procs = atoi(optarg); break;
        case 'm': puts = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-n iters] [-p initiators] [-m puts]\n",
                    argv[0]);
            return 2;
        }
    }
    if ((rate_procs < 1) || (rate_procs >= MAX_PROCS)) {
        fprintf(stderr, "initiators: 1..%d\n", MAX_PROCS - 1);
        return 2;
    }

    run_job(2, iters, 0, 1);
    run_job(2, 0, puts, 0);
    if (rate_procs > 1) {
        run_job(rate_procs + 1, 0, puts, 0);
    }
    return 0;
}
