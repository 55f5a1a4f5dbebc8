/*
 * softverbs across hosts: two network namespaces joined by a veth pair
 * (softverbs-netns.sh, prefix svt-), the network data path between them.
 * The tests of test_sv_ops.c and test_sv_errors.c declared with
 * SVT_TEST_HOSTS run here too, as softverbs_net.*; this file holds what is
 * specific to hosts: the LID/path rule, RNR over the wire, a cut link.
 */
#define _GNU_SOURCE
#include "svt.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>

#define NETNS(_cmd) "SV_NETNS_PREFIX=svt- %s/bin/softverbs-netns.sh " _cmd

void svt_net_hosts(void)
{
    char *out = NULL, *last;
    const char *prefix = th_prefix();

    svt_need_device();
    if (geteuid() != 0) {
        TH_SKIP("creating network namespaces needs root");
    }
    if (th_run_cmd(&out, NETNS("up") " 2>&1 && " NETNS("link up") " && "
                   NETNS("rate off") " && " NETNS("hosts"),
                   prefix, prefix, prefix, prefix) != 0) {
        TH_SKIP("cannot create the test hosts (network namespaces): %s",
                out ? out : "");
    }
    /* the last line is the host list */
    while (out[0] != '\0' && out[strlen(out) - 1] == '\n') {
        out[strlen(out) - 1] = '\0';
    }
    last = strrchr(out, '\n');
    setenv("TH_HOSTS", last ? last + 1 : out, 1);
    free(out);
}

static int count_sockets(void)
{
    char path[300], target[64];
    struct dirent *d;
    int n = 0;
    DIR *dir;

    dir = opendir("/proc/self/fd");
    TH_ASSERT(dir != NULL);
    while ((d = readdir(dir)) != NULL) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", d->d_name);
        memset(target, 0, sizeof(target));
        if (readlink(path, target, sizeof(target) - 1) > 0 &&
            !strncmp(target, "socket:", 7)) {
            ++n;
        }
    }
    closedir(dir);
    return n;
}

/* ---------------------------------------------------------------------- */

/* Ranks 0 and 2 share host a, rank 1 is on host b. A port's LID is the low
 * 16 bits of its host's address; rank 0 reaches rank 2 by the same-host
 * path (no socket is opened) and rank 1 over TCP (one is). */
static void paths_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    svt_info_t mine, peer[3];
    struct ibv_mr *mr[3];
    struct in_addr in;
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_ep_t ep[3];
    uint8_t *buf;
    int p, before;

    (void)nprocs; (void)arg;
    TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &in), 1);
    buf = aligned_alloc(4096, 65536);
    memset(buf, 0, 65536);
    for (p = 0; p < 3; ++p) {
        if (p == rank) {
            continue;
        }
        svt_ep_open(&ep[p], IBV_QPT_RC, 0, 0);
        mr[p] = ibv_reg_mr(ep[p].pd, buf, 65536, SVT_ALL_ACCESS);
        TH_ASSERT(mr[p] != NULL);
        mine = svt_info(&ep[p], mr[p]);
        TH_ASSERT_EQ(mine.lid, ntohl(in.s_addr) & 0xffff);
        svt_exchange(oob, p, &mine, &peer[p]);
        svt_rc_connect(&ep[p], &peer[p]);
    }
    TH_ASSERT_EQ(peer[rank == 1 ? 0 : 1].lid == mine.lid, 0);
    if (rank != 1) {
        TH_ASSERT_EQ(peer[2 - rank].lid, mine.lid);
    }
    th_oob_barrier(oob);
    if (rank == 0) {
        before = count_sockets();
        th_fill_pattern(buf, 4096, 5);
        for (p = 2; p >= 1; --p) {     /* same host first, then remote */
            sge = svt_sge(buf, 4096, mr[p]);
            TH_ASSERT_EQ(svt_post(ep[p].qp, IBV_WR_RDMA_WRITE, &sge, 1,
                                  peer[p].addr + 8192, peer[p].rkey, 1,
                                  IBV_SEND_SIGNALED), 0);
            svt_poll(ep[p].scq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            if (p == 2) {
                TH_ASSERT_EQ(count_sockets(), before);
            } else {
                TH_ASSERT_GT(count_sockets(), before);
            }
        }
    }
    th_oob_barrier(oob);
    if (rank != 0) {
        TH_CHECK_PATTERN(buf + 8192, 4096, 5);  /* placed, by either path */
    }
    th_oob_barrier(oob);
    /* MRs and QPs go with the process */
}

TH_TEST(softverbs_net, lids_and_paths)
{
    svt_net_hosts();
    th_run_procs(3, paths_rank, NULL);
}

/* ---------------------------------------------------------------------- */

/* RNR over the wire: with rnr_retry 1 a SEND to a QP without receives fails
 * with RNR_RETRY_EXC_ERR; with 7 (forever) it waits until the target posts
 * one, and the target's application makes no other call meanwhile */
static void rnr_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    svt_info_t mine[2], peer[2];
    struct ibv_mr *mr[2];
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_ep_t ep[2];
    uint8_t *buf;
    int i;

    (void)nprocs; (void)arg;
    buf = aligned_alloc(4096, 65536);
    memset(buf, 0, 65536);
    for (i = 0; i < 2; ++i) {
        svt_ep_open(&ep[i], IBV_QPT_RC, 0, 0);
        mr[i] = ibv_reg_mr(ep[i].pd, buf, 65536, SVT_ALL_ACCESS);
        TH_ASSERT(mr[i] != NULL);
        mine[i] = svt_info(&ep[i], mr[i]);
        svt_exchange(oob, !rank, &mine[i], &peer[i]);
        /* min_rnr_timer 3: 0.03 ms between retries */
        svt_rc_connect_ex(&ep[i], &peer[i], i ? 7 : 1, 3, 14, 7);
    }
    th_oob_barrier(oob);
    if (rank == 0) {
        th_fill_pattern(buf, 1000, 9);
        sge = svt_sge(buf, 1000, mr[0]);
        TH_ASSERT_EQ(svt_post(ep[0].qp, IBV_WR_SEND, &sge, 1, 0, 0, 1,
                              IBV_SEND_SIGNALED), 0);
        svt_poll(ep[0].scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
        th_oob_barrier(oob);
        sge = svt_sge(buf, 1000, mr[1]);
        TH_ASSERT_EQ(svt_post(ep[1].qp, IBV_WR_SEND, &sge, 1, 0, 0, 2,
                              IBV_SEND_SIGNALED), 0);
        svt_poll_none(ep[1].scq, 0.2);   /* waits on RNR */
        th_oob_barrier(oob);             /* the target posts now */
        svt_poll(ep[1].scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(wc.wr_id, 2);
    } else {
        th_oob_barrier(oob);
        th_oob_barrier(oob);
        svt_post_recv(ep[1].qp, buf + 4096, 4096, mr[1]->lkey, 3);
        svt_poll(ep[1].rcq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(wc.byte_len, 1000);
        TH_CHECK_PATTERN(buf + 4096, 1000, 9);
    }
    th_oob_barrier(oob);
}

TH_TEST(softverbs_net, rnr)
{
    svt_net_hosts();
    th_run_procs(2, rnr_rank, NULL);
}

/* ---------------------------------------------------------------------- */

/* The link goes down while rank 0 keeps WRITEs in flight: they fail with
 * RETRY_EXC_ERR once the ack timeout (timeout 14, retry_cnt 7: 0.54 s)
 * has passed, not earlier and not never */
typedef struct {
    volatile double cut;
    volatile double failed;
    volatile int writes;
} cut_shared_t;

static void cut_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    cut_shared_t *sh = arg;
    svt_info_t mine, peer;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    svt_ep_t ep;
    uint8_t *buf;
    double end;

    (void)nprocs;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 1 << 20);
    memset(buf, 0, 1 << 20);
    mr = ibv_reg_mr(ep.pd, buf, 1 << 20, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect_ex(&ep, &peer, 7, 1, 14, 7);
    th_oob_barrier(oob);
    if (rank == 1) {
        for (;;) {
            pause();    /* one-sided target; the test kills it */
        }
    }
    sge = svt_sge(buf, 1 << 20, mr);
    end = th_time() + 30;
    for (;;) {
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1, peer.addr,
                              peer.rkey, 1, IBV_SEND_SIGNALED), 0);
        svt_poll(ep.scq, &wc, 20);
        if (wc.status != IBV_WC_SUCCESS) {
            break;
        }
        ++sh->writes;
        TH_ASSERT_LT(th_time(), end);
    }
    sh->failed = th_time();
    TH_ASSERT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    TH_ASSERT_EQ(ep.qp->state, IBV_QPS_ERR);
}

#define CUT_AFTER_WRITES 3

TH_TEST(softverbs_net, link_cut)
{
    int status[2], ret, writes_before;
    cut_shared_t *sh;
    char *out = NULL;
    th_procs_t *p;
    double end;

    svt_net_hosts();
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TH_ASSERT(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    p = th_procs_start(2, cut_rank, sh);
    /* cut once WRITEs flow over the link (not after a guessed delay) */
    end = th_time() + 30.0;
    while (sh->writes < CUT_AFTER_WRITES) {
        if (th_time() > end) {
            th_procs_kill(p, 0, SIGKILL);
            th_procs_kill(p, 1, SIGKILL);
            th_procs_wait(p, NULL);
            TH_FAIL("only %d WRITEs went in 30 s", sh->writes);
        }
        usleep(1000);
    }
    writes_before = sh->writes;
    sh->cut       = th_time();
    ret     = th_run_cmd(&out, NETNS("link down") " 2>&1", th_prefix());
    free(out);
    TH_ASSERT_EQ(ret, 0);
    /* rank 0 ends by itself; then the target goes */
    while (sh->failed == 0 && th_time() < sh->cut + 20) {
        usleep(10000);
    }
    th_procs_kill(p, 1, SIGKILL);
    TH_ASSERT_EQ(th_procs_wait(p, status), 0);
    ret = th_run_cmd(&out, NETNS("link up") " 2>&1", th_prefix());
    free(out);
    TH_ASSERT_EQ(ret, 0);
    TH_ASSERT_EQ(status[0], 0);
    th_log("%d 1 MiB WRITEs before the cut, %d in all; error %.3f s after "
           "it",
           writes_before, sh->writes, sh->failed - sh->cut);
    TH_ASSERT_GE(writes_before, CUT_AFTER_WRITES);
    TH_ASSERT_DBL(sh->failed - sh->cut, >=, 0.4);
    TH_ASSERT_DBL(sh->failed - sh->cut, <=, 3.0);
}

/* ---------------------------------------------------------------------- */

/* The superpipeline and RVMA suites (hcr, rc_verbs and tcp lanes), with
 * their ranks on the two hosts: the same test binary, run again with
 * TH_HOSTS set, must pass every test it selects, none failed or skipped.
 * Each suite is a test of its own, with its own time limit. */
/* The failed and skipped tests of a nested run's output, one per line. */
static void net_nested_recap(const char *out, char *recap, size_t max)
{
    const char *p, *end;
    size_t len = 0;

    recap[0] = '\0';
    for (p = out; p != NULL && *p != '\0'; p = end) {
        end = strchr(p, '\n');
        end = (end != NULL) ? end + 1 : p + strlen(p);
        /* "[ SKIP ] name: why", and the "  name: file:line: why" lines
         * below "failed:" */
        if ((strncmp(p, "[ SKIP ]", 8) == 0 || strncmp(p, "  ", 2) == 0) &&
            (len + (size_t)(end - p) < max)) {
            memcpy(recap + len, p, (size_t)(end - p));
            len += (size_t)(end - p);
            recap[len] = '\0';
        }
    }
    if (len == 0) {
        snprintf(recap, max, "no recap: the nested run ended early");
    }
}

static void net_nested_run(const char *patterns)
{
    int listed = 0, passed = -1, failed = -1, skipped = -1, ret;
    char *out = NULL, *line;
    char self[4096], recap[1536];
    ssize_t n;

    svt_net_hosts();
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    TH_ASSERT_GT(n, 0);
    self[n] = '\0';

    TH_ASSERT_EQ(th_run_cmd(&out, "'%s' -l %s", self, patterns), 0);
    for (line = out; (line = strchr(line, '\n')) != NULL; ++line) {
        ++listed;
    }
    free(out);
    TH_ASSERT_GT(listed, 0);

    ret = th_run_cmd(&out, "env -u TH_ALLOW_SKIPS '%s' %s 2>&1", self,
                     patterns);
    /* the summary is the last line */
    line = out ? strstr(out, " passed, ") : NULL;
    while (line != NULL && strstr(line + 1, " passed, ") != NULL) {
        line = strstr(line + 1, " passed, ");
    }
    if (line != NULL) {
        while (line > out && line[-1] != '\n') {
            --line;
        }
        sscanf(line, "%d passed, %d failed, %d skipped", &passed, &failed,
               &skipped);
    }
    th_log("across hosts: %d of %d tests passed, %d failed, %d skipped "
           "(exit %d)",
           passed, listed, failed, skipped, ret);
    if (ret != 0 || failed != 0 || skipped != 0 || passed != listed) {
        th_log("%s", out ? out : "");
        /* the nested run's own recap (which test, where, why) goes into
         * this failure's message: a CI log may keep only the last recap */
        net_nested_recap(out, recap, sizeof(recap));
        free(out);
        TH_FAIL("across hosts: exit %d, %d of %d passed, %d failed, "
                "%d skipped: %s",
                ret, passed, listed, failed, skipped, recap);
    }
    free(out);
}

TH_TEST_TIMEOUT(softverbs_net, ucp_suites_sppln, 400)
{
    net_nested_run("'sppln.*'");
}

TH_TEST_TIMEOUT(softverbs_net, ucp_suites_rvma, 300)
{
    net_nested_run("'rvma.*'");
}
