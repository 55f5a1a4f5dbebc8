/*
 * Two processes of one UCP pair on this host, for bench/ programs: fork +
 * socketpair for the worker addresses, one worker and one endpoint each.
 * Included by the programs (static functions: each is one binary).
 */
#ifndef BENCH_UCP_PAIR_H
#define BENCH_UCP_PAIR_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_setaffinity */
#endif
#include <ucp/api/ucp.h>

#include "bench_util.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static uint64_t pair_features = UCP_FEATURE_TAG; /* set before pair_start() */

static inline void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
    exit(1);
}

/* progress w until req completes; exits on a failed request */
static inline void wait_req_on(ucp_worker_h w, void *req)
{
    ucs_status_t status;

    if (UCS_PTR_IS_ERR(req)) {
        die("request", UCS_PTR_STATUS(req));
    }
    if (req == NULL) {
        return;
    }
    do {
        ucp_worker_progress(w);
        status = ucp_request_check_status(req);
    } while (status == UCS_INPROGRESS);
    if (status != UCS_OK) {
        die("request", status);
    }
    ucp_request_free(req);
}

static inline void wait_req(void *req)
{
    wait_req_on(worker, req);
}

/* A context (with config; NULL: the environment's), a worker and an
 * endpoint to the worker the other rank sends over sock */
static inline void pair_connect(int sock, const ucp_config_t *config,
                                ucp_context_h *ctx_p, ucp_worker_h *worker_p,
                                ucp_ep_h *ep_p)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = pair_features};
    ucp_worker_params_t wparams = {0};
    ucp_ep_params_t eparams     = {0};
    ucp_address_t *addr, *peer;
    size_t len, plen;
    ucs_status_t status;

    status = ucp_init(&params, config, ctx_p);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }
    status = ucp_worker_create(*ctx_p, &wparams, worker_p);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }
    ucp_worker_get_address(*worker_p, &addr, &len);
    if ((write(sock, &len, sizeof(len)) != sizeof(len)) ||
        (write(sock, addr, len) != (ssize_t)len) ||
        (read(sock, &plen, sizeof(plen)) != sizeof(plen))) {
        die("address exchange", UCS_ERR_IO_ERROR);
    }
    peer = malloc(plen);
    if (recv(sock, peer, plen, MSG_WAITALL) != (ssize_t)plen) {
        die("address exchange", UCS_ERR_IO_ERROR);
    }
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    status             = ucp_ep_create(*worker_p, &eparams, ep_p);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
    ucp_worker_release_address(*worker_p, addr);
    free(peer);
}

static inline void setup(int sock)
{
    pair_connect(sock, NULL, &ctx, &worker, &ep);
}

static inline void *map(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        die("mmap", UCS_ERR_NO_MEMORY);
    }
    return p;
}

/* The options of the first-use programs: [-n first] [-b best] [-s size]...
 * (default 16 KiB..16 MiB by 4x); returns the number of sizes, or exits */
static inline int first_use_options(int argc, char **argv, size_t *sizes,
                                    int max_sizes, int *n_first, int *n_best)
{
    int n_sizes = 0, c;
    size_t s;

    while ((c = getopt(argc, argv, "n:b:s:")) != -1) {
        switch (c) {
        case 'n': *n_first = atoi(optarg); break;
        case 'b': *n_best = atoi(optarg); break;
        case 's':
            if (n_sizes < max_sizes) {
                sizes[n_sizes++] = strtoul(optarg, NULL, 0);
            }
            break;
        default:
            fprintf(stderr, "usage: %s [-n first] [-b best] [-s size]...\n",
                    argv[0]);
            exit(2);
        }
    }
    if (n_sizes == 0) {
        for (s = 16384; s <= 16 * 1024 * 1024; s *= 4) {
            sizes[n_sizes++] = s;
        }
    }
    if ((*n_first < 1) || (*n_first > 256)) {
        *n_first = 9;
    }
    return n_sizes;
}

/* With PAIR_PIN=1, each rank and the threads it starts run on a core of
 * its own (the parent on the first of the process's allowed cores, the
 * child on the second), as MPI launchers bind ranks: on two cores the
 * scheduler otherwise puts both busy-polling ranks on one core now and
 * then, which slowed some runs of a configuration and not others */
static inline void pair_pin(int parent)
{
    const char *pin = getenv("PAIR_PIN");
    cpu_set_t allowed, one;
    int cpu, nth = parent ? 0 : 1;

    if ((pin == NULL) || strcmp(pin, "1") ||
        (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) ||
        (CPU_COUNT(&allowed) < 2)) {
        return;
    }
    for (cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &allowed) && (nth-- == 0)) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            if (sched_setaffinity(0, sizeof(one), &one) != 0) {
                die("sched_setaffinity", UCS_ERR_INVALID_PARAM);
            }
            return;
        }
    }
}

/* Fork into the two ranks, each with its end of a socket to the other in
 * *sock_p: returns 1 in the parent, 0 in the child (whose pid the parent
 * gets in *pid_p). The child dies with the parent: a parent killed in a
 * debugger or by a timeout left its child busy-polling for its messages on
 * the core the next runs are bound to (two such ran for 23 minutes under
 * a regret matrix's rounds). */
static inline int pair_fork(pid_t *pid_p, int *sock_p)
{
    pid_t ppid = getpid();
    int sv[2], parent;

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        die("socketpair", UCS_ERR_IO_ERROR);
    }
    *pid_p = fork();
    if (*pid_p < 0) {
        die("fork", UCS_ERR_IO_ERROR);
    }
    parent = (*pid_p != 0);
    if (!parent &&
        ((prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) || (getppid() != ppid))) {
        _exit(1); /* no death signal, or the parent is gone already */
    }
    pair_pin(parent);
    *sock_p = sv[parent ? 0 : 1];
    return parent;
}

/* Fork into the two ranks and connect them: returns 1 in the parent, 0 in
 * the child (whose pid the parent gets in *pid_p) */
static inline int pair_start(pid_t *pid_p)
{
    int sock, parent;

    parent = pair_fork(pid_p, &sock);
    setup(sock);
    return parent;
}

/* the parent: the child's exit status, or 1 */
static inline int pair_wait(pid_t pid)
{
    int st;

    if (waitpid(pid, &st, 0) != pid) {
        return 1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* Tear down UCP; the parent returns the child's exit status, or 1 */
static inline int pair_end(int parent, pid_t pid)
{
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return parent ? pair_wait(pid) : 0;
}

#endif
