/*
 * First send vs best send (the superpipeline paper's figure), one transport
 * configuration per run (set by the environment: UCX_TLS, UCX_RNDV_SPPLN_*,
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
#include "ucp_pair.h"

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
    qsort(t, n_first, sizeof(t[0]), cmp_double);
    qsort(cpu_t, n_first, sizeof(t[0]), cmp_double);
    qsort(cpu_p, n_first, sizeof(t[0]), cmp_double);
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
    int n_sizes, n_first = 9, n_best = 20, c = 0, i, sender;
    pid_t pid;

    n_sizes = first_use_options(argc, argv, sizes, 64, &n_first, &n_best);

    sender = pair_start(&pid);
    for (i = 0; i < n_sizes; ++i) {
        run(sender, sizes[i], n_first, n_best);
    }
    /* quiesce before teardown */
    one(sender, &c, 1);
    return pair_end(sender, pid);
}
