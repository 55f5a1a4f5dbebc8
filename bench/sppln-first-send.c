/*
 * First send vs best send (the superpipeline paper's figure), one transport
 * configuration per run (set by the environment: UCX_TLS, UCX_HCR_SPPLN_*,
 * UCX_RCACHE_ENABLE, ...). Two processes on this host (fork + socketpair
 * for the worker addresses). For each size, the sender sends a tagged
 * message and the receiver answers with 1 byte once it has it:
 *  first - both buffers freshly mapped for every message (never registered,
 *          never touched), median of the messages;
 *  best  - the same buffers reused, fastest message.
 * Prints: size first_MBps best_MBps cpu_thread_us cpu_process_us
 * (the last two: CPU time per first send of the sending thread and of the
 * whole sending process, helper threads included; medians)
 *
 *   sppln-first-send [-n first_iters] [-b best_iters] [-s size]...
 */
#include <ucp/api/ucp.h>

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

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

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
                           .features   = UCP_FEATURE_TAG};
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

/* one message and its 1-byte answer; returns seconds on the sender */
static double one(int sender, void *buf, size_t size)
{
    ucp_request_param_t param = {0};
    char ack                  = 0;
    double t0                 = now();

    if (sender) {
        wait_req(ucp_tag_send_nbx(ep, buf, size, 1, &param));
        wait_req(ucp_tag_recv_nbx(worker, &ack, 1, 2, (ucp_tag_t)-1, &param));
    } else {
        wait_req(ucp_tag_recv_nbx(worker, buf, size, 1, (ucp_tag_t)-1,
                                  &param));
        wait_req(ucp_tag_send_nbx(ep, &ack, 1, 2, &param));
    }
    return now() - t0;
}

static double cpu_now(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

static void run(int sender, size_t size, int n_first, int n_best)
{
    double t[256], cpu_t[256], cpu_p[256], best = 1e9, first, c_t, c_p;
    void *buf;
    int i;

    for (i = 0; i < n_first; ++i) {
        buf = map(size);
        if (sender) {
            memset(buf, i, size); /* the application wrote its data */
        }
        c_t      = cpu_now(CLOCK_THREAD_CPUTIME_ID);
        c_p      = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
        t[i]     = one(sender, buf, size);
        cpu_t[i] = cpu_now(CLOCK_THREAD_CPUTIME_ID) - c_t;
        cpu_p[i] = cpu_now(CLOCK_PROCESS_CPUTIME_ID) - c_p;
        munmap(buf, size);
    }
    qsort(t, n_first, sizeof(t[0]), cmp);
    qsort(cpu_t, n_first, sizeof(t[0]), cmp);
    qsort(cpu_p, n_first, sizeof(t[0]), cmp);
    first = t[n_first / 2];

    buf = map(size);
    memset(buf, 1, size);
    for (i = 0; i < n_best; ++i) {
        double ti = one(sender, buf, size);
        best      = (ti < best) ? ti : best;
    }
    munmap(buf, size);

    if (sender) {
        printf("%zu %.1f %.1f %.1f %.1f\n", size, size / first / 1e6,
               size / best / 1e6, cpu_t[n_first / 2] * 1e6,
               cpu_p[n_first / 2] * 1e6);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    size_t sizes[64];
    int n_sizes = 0, n_first = 9, n_best = 20, sv[2], c, i, sender, st;
    size_t s;
    pid_t pid;

    while ((c = getopt(argc, argv, "n:b:s:")) != -1) {
        switch (c) {
        case 'n': n_first = atoi(optarg); break;
        case 'b': n_best = atoi(optarg); break;
        case 's': sizes[n_sizes++] = strtoul(optarg, NULL, 0); break;
        default:
            fprintf(stderr, "usage: %s [-n first] [-b best] [-s size]...\n",
                    argv[0]);
            return 2;
        }
    }
    if (n_sizes == 0) {
        for (s = 16384; s <= 16 * 1024 * 1024; s *= 4) {
            sizes[n_sizes++] = s;
        }
    }
    if ((n_first < 1) || (n_first > 256)) {
        n_first = 9;
    }

    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pid    = fork();
    sender = (pid != 0);
    setup(sv[sender ? 0 : 1]);
    for (i = 0; i < n_sizes; ++i) {
        run(sender, sizes[i], n_first, n_best);
    }
    /* quiesce before teardown */
    one(sender, &c, 1);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    if (sender) {
        waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    return 0;
}
