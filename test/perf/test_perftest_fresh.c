/*
 * ucx_perftest -F (glue 0016): every iteration of a UCP tag, stream, put or
 * get test uses memory that was just mapped. Checked from outside, as a
 * user sees it:
 *  - on tcp, which registers nothing, by the page faults of each process
 *    (wait4's rusage): a fresh run takes a fault per page per iteration
 *    where the memory is written (the sender filling its data, a receive or
 *    a get landing), a run that reuses its buffer takes none; and by the
 *    sender's peak memory, which grows by the buffers it wrote (reading
 *    untouched pages would fault as often, on the shared zero page);
 *  - on rc_verbs over softverbs with a costly registration
 *    (SOFTVERBS_REG_COST_US), by time: every fresh message pays it, reused
 *    buffers hit the registration cache;
 *  - the tests and settings it cannot serve are refused, with a message.
 */
#define _GNU_SOURCE
#include "th.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define PT_SIZE  (1024 * 1024)
#define PT_PAGES (PT_SIZE / 4096)
#define PT_ITERS 20
/* outstanding operations: a ring of 5 buffers, each used 4 times */
#define PT_WINDOW  4
#define PT_TIMEOUT 120 /* seconds, for one run of both processes */

typedef struct {
    int rc; /* exit code, or 128 + signal */
    long minflt; /* minor page faults of the process */
    long maxrss; /* its peak resident memory, KiB */
    char *out; /* its output (malloc'ed) */
} pt_side_t;

typedef struct {
    pt_side_t server; /* ucx_perftest without a peer name */
    pt_side_t client; /* ... with one: the side that initiates */
    double avg_us; /* the client's average time per iteration */
} pt_run_t;

static pid_t pt_spawn(const char *cmd, const char *out_path)
{
    pid_t pid = fork();
    int fd;

    TH_ASSERT(pid >= 0);
    if (pid == 0) {
        fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* if @a pid exited (with @a flags 0: once it exits), its status and
 * faults into @a side; returns 1 then */
static int pt_reap(pid_t pid, int flags, pt_side_t *side)
{
    struct rusage ru;
    int status;

    if (wait4(pid, &status, flags, &ru) != pid) {
        return 0;
    }
    side->rc     = WIFEXITED(status) ? WEXITSTATUS(status) :
                                       (128 + WTERMSIG(status));
    side->minflt = ru.ru_minflt;
    side->maxrss = ru.ru_maxrss;
    return 1;
}

/* wait for @a pid until @a deadline (kill it then); its status and faults */
static void pt_wait(pid_t pid, double deadline, pt_side_t *side)
{
    while (!pt_reap(pid, WNOHANG, side)) {
        if (th_time() > deadline) {
            kill(pid, SIGKILL);
            pt_reap(pid, 0, side);
            return;
        }
        usleep(10000);
    }
}

static char *pt_slurp(const char *path)
{
    char *buf = calloc(1, 65537);
    FILE *f   = fopen(path, "r");

    TH_ASSERT(buf != NULL);
    if (f != NULL) {
        fread(buf, 1, 65536, f);
        fclose(f);
    }
    unlink(path);
    return buf;
}

/*
 * ucx_perftest's server and client with @a env and @a args, on port
 * @a port; returns 0 when the server exited before it listened, and
 * then fills in only @a run->server
 */
static int pt_run_on(const char *env, const char *args, int port, pt_run_t *run)
{
    char cmd[2][1024], path[2][64];
    double deadline;
    pid_t pid[2];
    int i;

    for (i = 0; i < 2; ++i) {
        snprintf(path[i], sizeof(path[i]), "/tmp/th-perftest%d-%d", i,
                 (int)getpid());
        snprintf(cmd[i], sizeof(cmd[i]),
                 "exec env UCX_WARN_UNUSED_ENV_VARS=n %s "
                 "%s/bin/ucx_perftest -p %d %s %s",
                 env, th_prefix(), port, (i == 0) ? "" : "127.0.0.1", args);
    }

    th_log("$ %s", cmd[1]);
    deadline = th_time() + PT_TIMEOUT;
    pid[0]   = pt_spawn(cmd[0], path[0]);
    while (!th_tcp_port_used(port, 0) && (th_time() < (deadline - 10))) {
        if (pt_reap(pid[0], WNOHANG, &run->server)) {
            run->server.out = pt_slurp(path[0]);
            return 0;
        }
        usleep(20000);
    }
    pid[1] = pt_spawn(cmd[1], path[1]);

    pt_wait(pid[1], deadline, &run->client);
    pt_wait(pid[0], deadline, &run->server);
    run->client.out = pt_slurp(path[1]);
    run->server.out = pt_slurp(path[0]);
    return 1;
}

/* pt_run_on() on a free port; another one where the server could not bind
 * it (a socket took it meanwhile) */
static void pt_run(const char *env, const char *args, pt_run_t *run)
{
    const char *final;
    double p50, avg;
    unsigned attempt;
    long iters;

    for (attempt = 0;; ++attempt) {
        memset(run, 0, sizeof(*run));
        if (pt_run_on(env, args, th_free_tcp_port(attempt), run)) {
            break;
        }
        th_log("the server exited (%d) before it listened: %.500s",
               run->server.rc, run->server.out);
        if ((attempt == 2) ||
            (strstr(run->server.out, "Address already in use") == NULL)) {
            TH_FAIL("ucx_perftest's server failed:\n%.2000s", run->server.out);
        }
        free(run->server.out);
    }

    run->avg_us = -1;
    final       = strstr(run->client.out, "Final:");
    if ((final != NULL) &&
        (sscanf(final, "Final: %ld %lf %lf", &iters, &p50, &avg) == 3)) {
        run->avg_us = avg;
    }

    th_log("client exit %d, %ld faults, %ld KiB, avg %.1f us; server exit "
           "%d, %ld faults, %ld KiB",
           run->client.rc, run->client.minflt, run->client.maxrss, run->avg_us,
           run->server.rc, run->server.minflt, run->server.maxrss);
    if ((run->client.rc != 0) || (run->server.rc != 0) || (run->avg_us < 0)) {
        TH_FAIL("ucx_perftest failed:\nclient: %.2000s\nserver: %.2000s",
                run->client.out, run->server.out);
    }
}

static void pt_free(pt_run_t *run)
{
    free(run->client.out);
    free(run->server.out);
}

/*
 * @a test on tcp, reused and fresh: the fresh run's extra faults on a side
 * whose memory is written must come to about a page per page of message
 * per iteration (the first iteration of the reused run takes some too)
 */
static void
pt_fresh_faults(const char *test, int client_writes, int server_writes)
{
    const long expected = (long)PT_ITERS * PT_PAGES * 8 / 10;
    pt_run_t reuse, fresh;
    char args[256];

    snprintf(args, sizeof(args), "-t %s -s %d -n %d -w 0 -O %d", test, PT_SIZE,
             PT_ITERS, PT_WINDOW);
    pt_run("UCX_TLS=tcp", args, &reuse);
    strcat(args, " -F");
    pt_run("UCX_TLS=tcp", args, &fresh);

    th_log("extra faults with -F: client %ld, server %ld (a written side "
           "needs %ld)",
           fresh.client.minflt - reuse.client.minflt,
           fresh.server.minflt - reuse.server.minflt, expected);
    if (client_writes) {
        TH_ASSERT_GE(fresh.client.minflt - reuse.client.minflt, expected);
    }
    if (server_writes) {
        TH_ASSERT_GE(fresh.server.minflt - reuse.server.minflt, expected);
    }

    pt_free(&reuse);
    pt_free(&fresh);
}

/*
 * The server receives into fresh buffers. The client's buffers are fresh
 * too, but tcp's tag and stream sends buffer a varying amount of data in
 * the sender, thousands of faults more or less from one run to the next:
 * the put and get tests check the initiator's side, which is the same code.
 */
TH_TEST_TIMEOUT(perftest, fresh_faults_tag_bw_tcp, 300)
{
    pt_fresh_faults("tag_bw", 0, 1);
}

TH_TEST_TIMEOUT(perftest, fresh_faults_stream_bw_tcp, 300)
{
    pt_fresh_faults("stream_bw", 0, 1);
}

/*
 * The sender writes its data, as an application would, into every buffer of
 * its ring (PT_WINDOW + 1 of them), so its peak memory grows by that much.
 * A put: tcp's tag sends buffer a varying amount of data in the sender,
 * which moves its peak by more than that.
 */
TH_TEST_TIMEOUT(perftest, fresh_sender_writes_tcp, 300)
{
    const long expected = (long)(PT_WINDOW + 1) * (PT_SIZE / 1024) * 8 / 10;
    pt_run_t reuse, fresh;
    char args[256];

    snprintf(args, sizeof(args), "-t ucp_put_bw -s %d -n %d -w 0 -O %d",
             PT_SIZE, PT_ITERS, PT_WINDOW);
    pt_run("UCX_TLS=tcp", args, &reuse);
    strcat(args, " -F");
    pt_run("UCX_TLS=tcp", args, &fresh);

    th_log("the sender's peak memory grew by %ld KiB (needs %ld)",
           fresh.client.maxrss - reuse.client.maxrss, expected);
    TH_ASSERT_GE(fresh.client.maxrss - reuse.client.maxrss, expected);
    pt_free(&reuse);
    pt_free(&fresh);
}

/* a put's target memory is mapped once: only the initiator's is fresh */
TH_TEST_TIMEOUT(perftest, fresh_faults_ucp_put_bw_tcp, 300)
{
    pt_fresh_faults("ucp_put_bw", 1, 0);
}

/* a get lands in the initiator's fresh buffer */
TH_TEST_TIMEOUT(perftest, fresh_faults_ucp_get_tcp, 300)
{
    pt_fresh_faults("ucp_get", 1, 0);
}

/*
 * rc_verbs with a registration that costs PT_REG_COST_US: a fresh message
 * is registered by its sender before its rendezvous can start, one after
 * the other, so none takes less; reused buffers pay it once
 */
#define PT_REG_COST_US 20000

TH_TEST_TIMEOUT(perftest, fresh_registers_rc_v, 300)
{
    char env[256], args[128];
    pt_run_t reuse, fresh;

    if (!th_have_verbs_device("softverbs")) {
        TH_SKIP("no softverbs device (softverbs not preloaded)");
    }

    snprintf(env, sizeof(env), "UCX_TLS=rc_v SOFTVERBS_REG_COST_US=%d",
             PT_REG_COST_US);
    snprintf(args, sizeof(args), "-t tag_bw -s %d -n 40 -w 0 -O %d", PT_SIZE,
             PT_WINDOW);
    pt_run(env, args, &reuse);
    strcat(args, " -F");
    pt_run(env, args, &fresh);

    TH_ASSERT_DBL(fresh.avg_us, >=, PT_REG_COST_US * 0.9);
    TH_ASSERT_DBL(reuse.avg_us, <, PT_REG_COST_US * 0.5);
    pt_free(&reuse);
    pt_free(&fresh);
}

/* tests without a user buffer to replace, or with a handle for it */
TH_TEST(perftest, fresh_refused)
{
    static const struct {
        const char *args;
        const char *message;
    } cases[] = {{"-t ucp_am_bw",
                  "fresh memory needs a UCP tag, stream, put or get"},
                 {"-t ucp_add",
                  "fresh memory needs a UCP tag, stream, put or get"},
                 {"-t tag_bw -z",
                  "fresh memory needs buffers without a pre-registered"},
                 {"-t tag_bw -D iov,iov",
                  "fresh memory needs the contig datatype"},
                 {"-t put_bw -x tcp -d lo", "fresh memory needs a UCP tag"}};
    char *out;
    unsigned i;
    int rc;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        rc = th_run_cmd(&out,
                        "UCX_TLS=tcp timeout 60 %s/bin/ucx_perftest "
                        "-l -F %s 2>&1",
                        th_prefix(), cases[i].args);
        th_log("exit %d: %s", rc,
               (strstr(out, "fresh") != NULL) ? strstr(out, "fresh") : out);
        TH_ASSERT_NE(rc, 0);
        TH_ASSERT(strstr(out, cases[i].message) != NULL);
        free(out);
    }
}
