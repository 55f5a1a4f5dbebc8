/*
 * Two processes of one UCP pair on this host, for bench/ programs: fork +
 * socketpair for the worker addresses, one worker and one endpoint each.
 * Included by the programs (static functions: each is one binary).
 */
#ifndef BENCH_UCP_PAIR_H
#define BENCH_UCP_PAIR_H

#include <ucp/api/ucp.h>

#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static uint64_t pair_features = UCP_FEATURE_TAG; /* set before pair_start() */

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
    exit(1);
}

static void wait_req(void *req)
{
    ucs_status_t status;

    if (UCS_PTR_IS_ERR(req)) {
        die("request", UCS_PTR_STATUS(req));
    }
    if (req == NULL) {
        return;
    }
    do {
        ucp_worker_progress(worker);
        status = ucp_request_check_status(req);
    } while (status == UCS_INPROGRESS);
    if (status != UCS_OK) {
        die("request", status);
    }
    ucp_request_free(req);
}

static void setup(int sock)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = pair_features};
    ucp_worker_params_t wparams = {0};
    ucp_ep_params_t eparams     = {0};
    ucp_address_t *addr, *peer;
    size_t len, plen;
    ucs_status_t status;

    status = ucp_init(&params, NULL, &ctx);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }
    status = ucp_worker_create(ctx, &wparams, &worker);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }
    ucp_worker_get_address(worker, &addr, &len);
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
    status             = ucp_ep_create(worker, &eparams, &ep);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
    ucp_worker_release_address(worker, addr);
    free(peer);
}

static void *map(size_t size)
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

/* Fork into the two ranks and connect them: returns 1 in the parent, 0 in
 * the child (whose pid the parent gets in *pid_p) */
static int pair_start(pid_t *pid_p)
{
    int sv[2], parent;

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        die("socketpair", UCS_ERR_IO_ERROR);
    }
    *pid_p = fork();
    if (*pid_p < 0) {
        die("fork", UCS_ERR_IO_ERROR);
    }
    parent = (*pid_p != 0);
    setup(sv[parent ? 0 : 1]);
    return parent;
}

/* Tear down UCP; the parent returns the child's exit status, or 1 */
static int pair_end(int parent, pid_t pid)
{
    int st;

    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    if (!parent) {
        return 0;
    }
    if (waitpid(pid, &st, 0) != pid) {
        return 1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

#endif
