/*
 * The measurement behind the regret matrix (bench/choice-matrix.sh): one
 * pair of processes on this host for one fabric setting (softverbs' link
 * model and registration cost come from the environment), and in each
 * process one UCP context per column, configured with ucp_config_modify():
 *  auto   UCX_TLS=hcr, the automatic choice
 *  eager  hcr without rendezvous (RNDV_THRESH=inf)
 *  bcopy  hcr, rndv/sppln forced to copy through its staging (from 16 KiB)
 *  sppln  hcr, rndv/sppln forced to the superpipeline
 *  zcopy  hcr, rndv/sppln forced to hand every message to UCX's own
 *         protocols (its rendezvous, with the registration cache)
 *  rcv    rc_verbs (TLS=rc_v) with its registration cache, the reference
 *  rcv2   the same as rcv, a control: how far apart two identical columns
 *         land is how much of a difference between two columns this
 *         bench can see at all (choice-matrix.sh, the summary)
 * The columns (all, or those CM_COLUMNS names) take turns message by
 * message, each round in another order, so that they share the host's
 * moments. choice-matrix.sh runs one column per pair of processes all the
 * same, one context per process as applications have it. (With softverbs'
 * link model on, a process with several UCP contexts once stalled for
 * 2.5-4 ms in most messages: the ATS and answer of one context waited for
 * the engine thread while the process polled the other's CQs; fixed in
 * softverbs, test softverbs.link_model_other_context_polled.)
 *
 * Each message: the sender sends it tagged, the receiver answers with one
 * byte once it has it; its time is the sender's. For each size:
 *  fresh  - both buffers mapped for this message (never registered, never
 *           touched by the receiver; the sender wrote its data);
 *  reused - one pair of buffers per column, sent untimed first, at least
 *           CM_REUSED_WARMUP times and for CM_REUSED_WARM_MS (default
 *           CM_REUSED_WARM_MS_DEFAULT) milliseconds: rndv/sppln stages a
 *           buffer it has not seen and
 *           registers it when it comes again (its table of buffers staged
 *           once), so an application's reused buffer pays its registration
 *           on its second send, where UCX's rendezvous pays it on the
 *           first; from the third on, both send from a registered buffer.
 *           (Sent once untimed, the automatic column's first timed message
 *           was that registration, 1.7-2.4 ms against 0.5 at 4 MiB and
 *           100 Gb/s, and the median of 9 carried it.) The next few sends
 *           of every column, forced zero-copy and rc_verbs alike, still
 *           take 1.5-2x the steady state (1 MiB at 100 Gb/s: 190-400 us for
 *           three to six sends, then 110; not investigated further), which
 *           moved a median of 9 by tens of percent from one process to the
 *           next: the steady state is timed from the ninth send.
 *           Eight untimed sends were not enough after staged ones: a pair
 *           whose fresh messages had been staged sent its reused 256 KiB
 *           by UCX's rendezvous in 46-53 us for its first hundred or so
 *           sends, one whose fresh ones had all gone zero-copy in 35-38,
 *           forced zero-copy in both (the sender's path set per phase;
 *           medians of 8 interleaved pairs each, default link); after
 *           100 untimed sends the two read 32 and 36 us, after 600 29 and
 *           29. That is the guest, not the choice: this one runs under
 *           PVM, whose shadow page tables make a page fault cost 11-13 us,
 *           and the kernel's copy alone (process_vm_readv of 256 KiB,
 *           bench-free) took 12.5-15 us with no such transient. So the
 *           warm-up runs for a time, which ends the transient of every
 *           column alike; CM_REUSED_WARM_MS=0 gives the eight alone.
 *           20 ms were not enough either: after 20 ms, auto's reused
 *           64 KiB at 25 Gb/s + 20 us took 49.6 us against forced
 *           zero-copy's 44.7 (medians of 8 pairs, the same path), its
 *           reused 256 KiB on the default link 41.7 against rc_verbs'
 *           37.0 (6 pairs); after 100 ms, 39.1 against 38.9 and 34.6
 *           against 34.8, after 300 ms 36.9 against 37.0.
 * Order: every size's fresh messages, then every size's reused buffers.
 * A fresh phase that followed the reused phase of the size before it paid
 * for that phase's traffic, which differs by column (auto's reused 16 KiB
 * go eagerly, bcopy's staged): auto's fresh 64 KiB took 10-12% longer than
 * forced bcopy's in the median cell of two full runs, both staged the same
 * way; 52.5 against 48.2 us after 20 ms of reused 16 KiB (medians of 12
 * interleaved pairs each, default link), 44.2 against 43.9 after 8 sends,
 * and 40.1 against 40.6 with the fresh phases first.
 * How many: n messages a cell, or CM_CHEAP_MSGS (default n) in the cells
 * whose messages are cheap, the reused ones and the fresh ones up to
 * CM_CHEAP_FRESH_MAX (0.02-14 ms and 0.05-4 ms a message, against 30-55 ms
 * for a fresh 16 MiB through the registering columns). One message of a
 * cell ranges over 1.5-2x the cell's median on this host (reused 4 MiB at
 * softverbs' default link, in six rounds: 251-645 us, the rounds' medians of
 * 9 messages 271-392 us), so a median of 9 moved a column by more than the
 * 5% the matrix judges.
 * Prints per size and column: size column fresh_us reused_us fresh_path
 * reused_path (medians of the cell's messages), where a path is the one
 * rndv/sppln took for those messages on the sender (bcopy, sppln, zcopy or
 * mixed), or "ucx" where UCX's own protocols took them.
 *
 *   choice-matrix [-n messages] [-s size]...
 */
#include "ucp_pair.h"

#include <errno.h>
#include <stdint.h>

#define CM_MAX_MSGS  256
#define CM_MAX_SIZES 64
/* untimed sends of a reused buffer, at least, and for at least so long by
 * default: see "reused" above */
#define CM_REUSED_WARMUP          8
#define CM_REUSED_WARM_MS_DEFAULT 100
/* the largest fresh message that takes CM_CHEAP_MSGS messages */
#define CM_CHEAP_FRESH_MAX (1024 * 1024)

/* Path counters of a worker, as src/ucp/proto/proto_sppln_staging.h lays
 * them out (bench programs build against the installed API headers only);
 * NULL from a worker that never ran rndv/sppln */
typedef struct {
    uint64_t sent[4]; /* auto (unused), bcopy, sppln, zcopy */
    uint64_t received[4];
    uint64_t reg_fallback;
    uint64_t async_copies;
    uint64_t fresh[4]; /* kcopy, populate, fault, uffd */
    uint64_t rma[3];
    uint64_t groups[2];
    uint64_t busy_zcopy;
    uint64_t populated;
    uint64_t residency_probes;
    uint64_t eager; /* zcopy sends that went with an eager protocol */
} cm_stats_t;

const cm_stats_t *ucp_proto_sppln_stats(ucp_worker_h worker);

static const char *cm_path_names[] = {"ucx", "bcopy", "sppln", "zcopy"};

/* A column: its settings (UCP configuration name and value pairs) and its
 * context, worker and endpoint */
typedef struct {
    const char *name;
    const char *settings[4][2];
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
    void *reused;
    uint64_t before[4];
    double fresh_us[CM_MAX_MSGS], reused_us[CM_MAX_MSGS];
    /* each size's fresh messages: their median and path */
    double fresh_median[CM_MAX_SIZES];
    const char *fresh_path[CM_MAX_SIZES];
} cm_column_t;

static cm_column_t cm_columns[] = {
        {"auto", {{"TLS", "hcr"}}},
        {"eager", {{"TLS", "hcr"}, {"RNDV_THRESH", "inf"}}},
        {"bcopy",
         {{"TLS", "hcr"},
          {"RNDV_SPPLN_PATH", "bcopy"},
          {"RNDV_SPPLN_THRESH", "16k"}}},
        {"sppln",
         {{"TLS", "hcr"},
          {"RNDV_SPPLN_PATH", "sppln"},
          {"RNDV_SPPLN_THRESH", "16k"}}},
        {"zcopy",
         {{"TLS", "hcr"},
          {"RNDV_SPPLN_PATH", "zcopy"},
          {"RNDV_SPPLN_THRESH", "16k"}}},
        {"rcv", {{"TLS", "rc_v"}}},
        {"rcv2", {{"TLS", "rc_v"}}},
};

static unsigned cm_num_columns = sizeof(cm_columns) / sizeof(cm_columns[0]);

/* CM_COLUMNS (comma-separated names) keeps those columns only */
static void cm_select_columns(void)
{
    const char *keep = getenv("CM_COLUMNS");
    char list[256], name[32];
    unsigned k, n = 0;

    if (keep == NULL) {
        return;
    }
    snprintf(list, sizeof(list), ",%s,", keep);
    for (k = 0; k < cm_num_columns; ++k) {
        snprintf(name, sizeof(name), ",%s,", cm_columns[k].name);
        if (strstr(list, name) != NULL) {
            cm_columns[n++] = cm_columns[k];
        }
    }
    if (n == 0) {
        fprintf(stderr,
                "CM_COLUMNS='%s' names no column; the columns are "
                "(comma-separated):",
                keep);
        for (k = 0; k < cm_num_columns; ++k) {
            fprintf(stderr, " %s", cm_columns[k].name);
        }
        fprintf(stderr, "\n");
        exit(1);
    }
    cm_num_columns = n;
}

static void cm_connect(int sock, cm_column_t *col)
{
    ucp_config_t *config;
    ucs_status_t status;
    int i;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        die("ucp_config_read", status);
    }
    for (i = 0; (i < 4) && (col->settings[i][0] != NULL); ++i) {
        status = ucp_config_modify(config, col->settings[i][0],
                                   col->settings[i][1]);
        if (status != UCS_OK) {
            die(col->settings[i][0], status);
        }
    }
    pair_connect(sock, config, &col->ctx, &col->worker, &col->ep);
    ucp_config_release(config);
}

/* sent[] by path, and in sent[0] (auto, unused) the eager ones of zcopy */
static void cm_sent(const cm_column_t *col, uint64_t sent[4])
{
    const cm_stats_t *st = ucp_proto_sppln_stats(col->worker);
    int p;

    for (p = 1; p < 4; ++p) {
        sent[p] = (st == NULL) ? 0 : st->sent[p];
    }
    sent[0] = (st == NULL) ? 0 : st->eager;
}

/* the path the column's messages took since col->before */
static const char *cm_path(const cm_column_t *col, int n)
{
    uint64_t after[4], total = 0;
    int p, taken             = 0;

    cm_sent(col, after);
    for (p = 1; p < 4; ++p) {
        total += after[p] - col->before[p];
        if (after[p] != col->before[p]) {
            taken = p;
        }
    }
    if (total == 0) {
        return cm_path_names[0];
    }
    if (after[taken] - col->before[taken] != (uint64_t)n) {
        return "mixed";
    }
    return (after[0] - col->before[0] == (uint64_t)n) ? "eager" :
                                                        cm_path_names[taken];
}

/* one message and its 1-byte answer on a column, which carries *answer
 * from the receiver to the sender; returns seconds */
static double cm_one_answer(int sender, cm_column_t *col, void *buf,
                            size_t size, char *answer)
{
    ucp_request_param_t param = {0};
    double t0                 = now();

    if (sender) {
        wait_req_on(col->worker,
                    ucp_tag_send_nbx(col->ep, buf, size, 1, &param));
        wait_req_on(col->worker, ucp_tag_recv_nbx(col->worker, answer, 1, 2,
                                                  (ucp_tag_t)-1, &param));
    } else {
        wait_req_on(col->worker, ucp_tag_recv_nbx(col->worker, buf, size, 1,
                                                  (ucp_tag_t)-1, &param));
        wait_req_on(col->worker,
                    ucp_tag_send_nbx(col->ep, answer, 1, 2, &param));
    }
    return now() - t0;
}

static double cm_one(int sender, cm_column_t *col, void *buf, size_t size)
{
    char answer = 0;

    return cm_one_answer(sender, col, buf, size, &answer);
}

/* The untimed sends of a column's reused buffer: the receiver counts the
 * time, and its answer to each says whether that was the last */
static void
cm_warm_reused(int sender, cm_column_t *col, size_t size, double warm_sec)
{
    double t0 = now();
    char last = 0;
    int i;

    for (i = 0; !last; ++i) {
        last = !sender && (i + 1 >= CM_REUSED_WARMUP) &&
               (now() - t0 >= warm_sec);
        cm_one_answer(sender, col, col->reused, size, &last);
    }
}

/* The order of the columns for message i, both ranks alike: row i of a
 * balanced Latin square (Williams), so that over a round every column
 * comes after every other one as often, and first as often: a column's
 * message pays for what the previous one left behind (a copy engine
 * thread still polling, caches). A shuffle seeded by i put auto after the
 * superpipeline in three of nine messages, the same three in every round,
 * and bcopy first in three: auto's fresh messages took 10-20% longer than
 * bcopy's in cells where both went by bcopy. Row r is the first row
 * (0, 1, n-1, 2, n-2, ...) plus r; for an odd number of columns, the rows
 * after n are those rows reversed. */
static void cm_order(int i, unsigned *order)
{
    unsigned n = cm_num_columns, r = (unsigned)i % (2 * n), k, first;

    for (k = 0; k < n; ++k) {
        /* 0, 1, n-1, 2, n-2, ... */
        first    = (k % 2) ? ((k + 1) / 2) : ((n - (k / 2)) % n);
        order[k] = (first + r) % n;
    }
    if ((r >= n) && (n % 2)) {
        for (k = 0; k < n / 2; ++k) {
            first            = order[k];
            order[k]         = order[n - 1 - k];
            order[n - 1 - k] = first;
        }
    }
}

/* The fresh messages of size number @a s */
static void cm_run_fresh(int sender, unsigned s, size_t size, int n_fresh)
{
    unsigned order[sizeof(cm_columns) / sizeof(cm_columns[0])], k;
    cm_column_t *col;
    void *buf;
    int i;

    for (k = 0; k < cm_num_columns; ++k) {
        cm_sent(&cm_columns[k], cm_columns[k].before);
    }
    for (i = 0; i < n_fresh; ++i) {
        cm_order(i, order);
        for (k = 0; k < cm_num_columns; ++k) {
            col = &cm_columns[order[k]];
            buf = map(size);
            if (sender) {
                memset(buf, i, size); /* the application wrote its data */
            }
            col->fresh_us[i] = cm_one(sender, col, buf, size) * 1e6;
            munmap(buf, size);
        }
    }
    for (k = 0; k < cm_num_columns; ++k) {
        col                  = &cm_columns[k];
        col->fresh_median[s] = median(col->fresh_us, n_fresh);
        col->fresh_path[s]   = cm_path(col, n_fresh);
    }
}

/* The reused buffers of size number @a s, and the size's line */
static void cm_run_reused(int sender, unsigned s, size_t size, int n_fresh,
                          int n_cheap, double warm_sec)
{
    unsigned order[sizeof(cm_columns) / sizeof(cm_columns[0])], k;
    cm_column_t *col;
    int i;

    for (k = 0; k < cm_num_columns; ++k) {
        col         = &cm_columns[k];
        col->reused = map(size);
        memset(col->reused, 1, size);
        /* untimed: staged, registered, then the transient */
        cm_warm_reused(sender, col, size, warm_sec);
        cm_sent(col, col->before);
    }
    for (i = 0; i < n_cheap; ++i) {
        cm_order(n_fresh + i, order);
        for (k = 0; k < cm_num_columns; ++k) {
            col               = &cm_columns[order[k]];
            col->reused_us[i] = cm_one(sender, col, col->reused, size) * 1e6;
        }
    }
    for (k = 0; k < cm_num_columns; ++k) {
        col = &cm_columns[k];
        munmap(col->reused, size);
        if (sender) {
            printf("%zu %s %.2f %.2f %s %s\n", size, col->name,
                   col->fresh_median[s], median(col->reused_us, n_cheap),
                   col->fresh_path[s], cm_path(col, n_cheap));
        }
    }
    fflush(stdout);
}

static int cm_fresh_count(size_t size, int n, long n_cheap)
{
    return (size <= CM_CHEAP_FRESH_MAX) ? (int)n_cheap : n;
}

/* *value_p: the whole number in the environment variable @a name, at
 * least @a min, or @a dflt where it is not set; -1 (and a message naming
 * @a what it must be) where it is not such a number */
static int cm_env_long(const char *name, long dflt, long min, const char *what,
                       long *value_p)
{
    const char *str = getenv(name);
    char *end;

    if (str == NULL) {
        *value_p = dflt;
        return 0;
    }
    errno    = 0;
    *value_p = strtol(str, &end, 10);
    if ((end == str) || (*end != '\0') || (errno != 0) || (*value_p < min)) {
        fprintf(stderr, "%s=%s: not %s\n", name, str, what);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t sizes[CM_MAX_SIZES];
    int n_sizes, n = 9, unused = 0, c = 0, i, sender, sock;
    long n_cheap, warm_ms;
    unsigned k;
    pid_t pid;

    n_sizes = first_use_options(argc, argv, sizes, CM_MAX_SIZES, &n, &unused);
    cm_select_columns();
    if ((cm_env_long("CM_CHEAP_MSGS", n, 1, "a number of messages", &n_cheap) !=
         0) ||
        (cm_env_long("CM_REUSED_WARM_MS", CM_REUSED_WARM_MS_DEFAULT, 0,
                     "a number of milliseconds", &warm_ms) != 0)) {
        return 1;
    }
    if (n > CM_MAX_MSGS) {
        n = CM_MAX_MSGS;
    }
    if (n_cheap > CM_MAX_MSGS) {
        n_cheap = CM_MAX_MSGS;
    }

    sender = pair_fork(&pid, &sock);
    for (k = 0; k < cm_num_columns; ++k) {
        cm_connect(sock, &cm_columns[k]);
        cm_one(sender, &cm_columns[k], &c, 1); /* wire-up, untimed */
    }
    /* every size's fresh messages before any reused ones: see "Order" */
    for (i = 0; i < n_sizes; ++i) {
        cm_run_fresh(sender, i, sizes[i], cm_fresh_count(sizes[i], n, n_cheap));
    }
    for (i = 0; i < n_sizes; ++i) {
        cm_run_reused(sender, i, sizes[i], cm_fresh_count(sizes[i], n, n_cheap),
                      (int)n_cheap, warm_ms / 1e3);
    }
    for (k = 0; k < cm_num_columns; ++k) {
        cm_one(sender, &cm_columns[k], &c, 1); /* quiesce before teardown */
        ucp_ep_destroy(cm_columns[k].ep);
        ucp_worker_destroy(cm_columns[k].worker);
        ucp_cleanup(cm_columns[k].ctx);
    }
    return sender ? pair_wait(pid) : 0;
}
