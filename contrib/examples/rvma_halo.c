/*
 * RVMA example: a 1-D halo exchange on a ring of processes.
 *
 * Each rank owns CELLS cells and, every step, needs one boundary cell from
 * each neighbour. With RVMA the receiver owns the landing zones: each rank
 * opens two windows (left halo, right halo) whose threshold is one cell, and
 * posts one buffer per step to each. A neighbour puts its boundary cell to
 * (window, offset 0) without knowing any address or key; the receiver knows
 * its halo is there when the completion pointer is set, with no separate
 * "done" message. The next step's buffers are posted ahead, so a fast
 * neighbour's put always finds one (a new epoch per step).
 *
 * The result is checked against a serial run of the same stencil.
 *
 * Installed in <prefix>/share/ucx/examples. With P the prefix (e.g.
 * build/install), build and run it on one host (the ranks are forked
 * processes):
 *
 *   cc -o rvma_halo rvma_halo.c -I$P/include -L$P/lib -Wl,-rpath,$P/lib \
 *      -lucp -lucs -lm
 *   UCX_TLS=tcp ./rvma_halo [ranks 2..8, default 3] [steps, default 100]
 *
 * or, with softverbs preloaded (LD_PRELOAD=$P/lib/libsoftverbs.so), over hcr
 * (UCX_TLS=hcr), where the puts take RVMA's fast path.
 */
#include <ucp/api/ucp.h>
#include <ucp/api/ucpx_rvma.h>

#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CELLS      64
#define MAX_RANKS  8
#define WIN_LEFT   0x4c /* my left halo: written by my left neighbour */
#define WIN_RIGHT  0x52

static void check(const char *what, ucs_status_t status)
{
    if (status != UCS_OK) {
        fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
        exit(1);
    }
}

static void xfer(int fd, void *buf, size_t len, int send)
{
    size_t done = 0;
    ssize_t n;

    while (done < len) {
        n = send ? write(fd, (char*)buf + done, len - done) :
                   read(fd, (char*)buf + done, len - done);
        if (n <= 0) {
            perror("socket");
            exit(1);
        }
        done += n;
    }
}

static void initial(double *cells, int rank)
{
    int i;

    for (i = 0; i < CELLS; ++i) {
        cells[i] = sin(0.1 * (rank * CELLS + i));
    }
}

/* one step of the stencil over a rank's cells, given its two halo cells */
static void stencil(const double *in, double left, double right, double *out)
{
    int i;

    for (i = 0; i < CELLS; ++i) {
        out[i] = 0.25 * ((i == 0) ? left : in[i - 1]) + 0.5 * in[i] +
                 0.25 * ((i == CELLS - 1) ? right : in[i + 1]);
    }
}

static ucp_rvma_win_h open_window(ucp_worker_h worker, uint64_t vaddr)
{
    ucp_rvma_win_params_t params;
    ucp_rvma_win_h win;

    params.field_mask = UCP_RVMA_WIN_PARAM_FIELD_VADDR |
                        UCP_RVMA_WIN_PARAM_FIELD_THRESHOLD;
    params.vaddr      = vaddr;
    params.threshold  = sizeof(double);
    check("ucp_rvma_win_create", ucp_rvma_win_create(worker, &params, &win));
    return win;
}

static void wait_put(ucp_worker_h worker, void *req)
{
    ucs_status_t status;

    if (UCS_PTR_IS_ERR(req)) {
        check("ucp_rvma_put_nbx", UCS_PTR_STATUS(req));
    }
    if (req == NULL) {
        return;
    }
    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    check("put", status);
    ucp_request_free(req);
}

static int run_rank(int rank, int nranks, int steps, int fd_left,
                    int fd_right, int fd_parent)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = UCP_FEATURE_AM};
    ucp_worker_params_t wparams = {0};
    ucp_request_param_t rparam  = {0};
    ucp_ep_params_t eparams     = {0};
    double cells[CELLS], next[CELLS];
    double *halo[2];
    void **comp[2], *req[2];
    ucp_rvma_win_h win[2];
    ucp_address_t *addr;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep[2];
    size_t len, plen;
    void *paddr;
    int s, side, fds[2] = {fd_left, fd_right};
    struct pollfd pfd = {.fd = fd_parent, .events = POLLIN};

    check("ucp_init", ucp_init(&params, NULL, &ctx));
    check("ucp_worker_create", ucp_worker_create(ctx, &wparams, &worker));

    /* windows first, then endpoints to both neighbours */
    win[0] = open_window(worker, WIN_LEFT);
    win[1] = open_window(worker, WIN_RIGHT);
    for (side = 0; side < 2; ++side) {
        halo[side] = calloc(steps, sizeof(double));
        comp[side] = calloc(steps, sizeof(void*));
        for (s = 0; s < steps; ++s) {
            check("post", ucp_rvma_win_post_buffer(win[side], &halo[side][s],
                                                   sizeof(double),
                                                   &comp[side][s], NULL));
        }
    }

    check("address", ucp_worker_get_address(worker, &addr, &len));
    for (side = 0; side < 2; ++side) {
        xfer(fds[side], &len, sizeof(len), 1);
        xfer(fds[side], addr, len, 1);
    }
    for (side = 0; side < 2; ++side) {
        xfer(fds[side], &plen, sizeof(plen), 0);
        paddr = malloc(plen);
        xfer(fds[side], paddr, plen, 0);
        eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        eparams.address    = paddr;
        check("ucp_ep_create", ucp_ep_create(worker, &eparams, &ep[side]));
        free(paddr);
    }
    ucp_worker_release_address(worker, addr);

    initial(cells, rank);
    for (s = 0; s < steps; ++s) {
        /* my first cell is my left neighbour's right halo, and so on */
        req[0] = ucp_rvma_put_nbx(ep[0], WIN_RIGHT, 0, &cells[0],
                                  sizeof(double), &rparam);
        req[1] = ucp_rvma_put_nbx(ep[1], WIN_LEFT, 0, &cells[CELLS - 1],
                                  sizeof(double), &rparam);
        for (side = 0; side < 2; ++side) {
            check("wait", ucp_rvma_win_wait(win[side], &comp[side][s]));
        }
        stencil(cells, halo[0][s], halo[1][s], next);
        /* the put requests read cells: done before cells change */
        wait_put(worker, req[0]);
        wait_put(worker, req[1]);
        memcpy(cells, next, sizeof(cells));
    }

    /* report, then wait for everybody before the endpoints go, progressing
     * meanwhile: a neighbour's last put completes only once this rank has
     * handled it and answered (see ucp_rvma_put_nbx) */
    xfer(fd_parent, cells, sizeof(cells), 1);
    while (poll(&pfd, 1, 0) == 0) {
        ucp_worker_progress(worker);
    }
    xfer(fd_parent, &s, 1, 0);
    for (side = 0; side < 2; ++side) {
        ucp_rvma_win_destroy(win[side]);
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int nranks = (argc > 1) ? atoi(argv[1]) : 3;
    int steps  = (argc > 2) ? atoi(argv[2]) : 100;
    int ring[MAX_RANKS][2], parent[MAX_RANKS][2], sv[2];
    double all[MAX_RANKS][CELLS], ref[MAX_RANKS][CELLS], tmp[CELLS];
    double err = 0;
    int r, s, i, status, ok = 1;
    pid_t pids[MAX_RANKS];
    char go = 'g';

    if ((nranks < 2) || (nranks > MAX_RANKS) || (steps < 1)) {
        fprintf(stderr, "usage: %s [ranks 2..%d] [steps]\n", argv[0],
                MAX_RANKS);
        return 2;
    }

    /* ring[r][1] talks to the right neighbour, ring[r + 1][0] to the left */
    for (r = 0; r < nranks; ++r) {
        socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
        ring[r][1]                = sv[0];
        ring[(r + 1) % nranks][0] = sv[1];
        socketpair(AF_UNIX, SOCK_STREAM, 0, parent[r]);
    }

    for (r = 0; r < nranks; ++r) {
        pids[r] = fork();
        if (pids[r] == 0) {
            _exit(run_rank(r, nranks, steps, ring[r][0], ring[r][1],
                           parent[r][1]));
        }
    }

    for (r = 0; r < nranks; ++r) {
        xfer(parent[r][0], all[r], sizeof(all[r]), 0);
    }
    for (r = 0; r < nranks; ++r) {
        xfer(parent[r][0], &go, 1, 1);
    }
    for (r = 0; r < nranks; ++r) {
        waitpid(pids[r], &status, 0);
        ok &= WIFEXITED(status) && (WEXITSTATUS(status) == 0);
    }

    /* the same stencil, serially */
    for (r = 0; r < nranks; ++r) {
        initial(ref[r], r);
    }
    for (s = 0; s < steps; ++s) {
        double next[MAX_RANKS][CELLS];
        for (r = 0; r < nranks; ++r) {
            stencil(ref[r], ref[(r + nranks - 1) % nranks][CELLS - 1],
                    ref[(r + 1) % nranks][0], tmp);
            memcpy(next[r], tmp, sizeof(tmp));
        }
        memcpy(ref, next, sizeof(double) * CELLS * nranks);
    }
    for (r = 0; r < nranks; ++r) {
        for (i = 0; i < CELLS; ++i) {
            err = fmax(err, fabs(all[r][i] - ref[r][i]));
        }
    }

    printf("halo exchange: %d ranks, %d steps, max error vs serial %g: %s\n",
           nranks, steps, err, (ok && (err == 0)) ? "ok" : "FAILED");
    return (ok && (err == 0)) ? 0 : 1;
}
