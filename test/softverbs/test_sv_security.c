/*
 * softverbs against hostile peers, other local users and exhaustion (issue
 * 26): unguessable keys; connections accepted only from the address their
 * LID names and only from holders of the user's secret; requests taken only
 * from the connection of the QP they name; no lock held while a peer sends
 * slowly; accept() out of descriptors; bounded connections, threads and
 * waits; the fabric segment safe from other users and removed by its last
 * process; the secret file's rules.
 *
 * The network cases run on the harness's two hosts (softverbs-netns.sh,
 * prefix svt-; rank r on host r mod 2), with a secret file of their own. A
 * "raw client" (svt_wire.c) plays the attacker: it speaks the wire format
 * itself, with an identity and a key of its choice. The two-user cases run
 * as root and switch a child to another uid the way
 * `setpriv --reuid=U --regid=U --clear-groups` does.
 */
#define _GNU_SOURCE
#include "svt_wire.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define SEC_UID  65534 /* "nobody": the other local user */
#define SEC_UID2 65533 /* a third one, for planting files */
#define SEC_BUF  65536

/* ---------------------------------------------------------------------- */
/* helpers */

/* what `setpriv --reuid=uid --regid=uid --clear-groups` does */
static void sec_become(uid_t uid)
{
    TH_ASSERT_SYS(setgroups(0, NULL));
    TH_ASSERT_SYS(setresgid(uid, uid, uid));
    TH_ASSERT_SYS(setresuid(uid, uid, uid));
    /* changing credentials clears it: die with the test all the same */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static void sec_need_root(void)
{
    if (geteuid() != 0) {
        TH_SKIP("needs root (a second uid, network namespaces)");
    }
}

/* a directory of this test, mode 0700; removed by sec_dir_remove */
static char sec_dir[64];

static void sec_dir_make(void)
{
    snprintf(sec_dir, sizeof(sec_dir), "/tmp/svt-sec-XXXXXX");
    TH_ASSERT(mkdtemp(sec_dir) != NULL);
}

static void sec_dir_remove(void)
{
    char *out = NULL;

    if (sec_dir[0] != '\0') {
        th_run_cmd(&out, "rm -rf '%s'", sec_dir);
        free(out);
    }
}

/* two hosts, and a secret of this test shared by its ranks */
static void sec_hosts(void)
{
    char path[128];

    svt_net_hosts();
    sec_dir_make();
    snprintf(path, sizeof(path), "%s/secret", sec_dir);
    setenv("SOFTVERBS_NET_SECRET_FILE", path, 1);
}

static uint16_t sec_my_lid(void)
{
    struct in_addr in;

    TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &in), 1);
    return (uint16_t)(ntohl(in.s_addr) & 0xffff);
}

/* the victim's listening port for a raw client */
static svt_victim_t sec_victim_info(svt_ep_t *ep, struct ibv_mr *mr)
{
    const char *port = getenv("SOFTVERBS_NET_PORT");
    svt_victim_t v;
    struct in_addr in;

    memset(&v, 0, sizeof(v));
    TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &in), 1);
    v.ip   = in.s_addr;
    v.lid  = svt_lid(ep);
    v.qpn  = ep->qp->qp_num;
    v.port = (uint16_t)((port ? atoi(port) : SV_NET_PORT) +
                        (v.qpn >> SV_QPN_SLOT_SHIFT));
    v.pid  = getpid();
    if (mr != NULL) {
        v.rkey = mr->rkey;
        v.addr = (uintptr_t)mr->addr;
        v.len  = mr->length;
    }
    return v;
}

/* connect ep's RC QP to the raw client's identity on host lid */
static void sec_connect_to_raw(svt_ep_t *ep, uint16_t lid)
{
    svt_info_t raw;

    memset(&raw, 0, sizeof(raw));
    raw.qpn = SVT_WIRE_QPN;
    raw.lid = lid;
    svt_rc_connect(ep, &raw);
}

static enum ibv_qp_state sec_qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;

    TH_ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
    return a.qp_state;
}

static long sec_proc_status(const char *field)
{
    char line[256];
    long v  = -1;
    FILE *f = fopen("/proc/self/status", "r");

    TH_ASSERT(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (!strncmp(line, field, strlen(field)) &&
            line[strlen(field)] == ':') {
            v = atol(line + strlen(field) + 1);
        }
    }
    fclose(f);
    return v;
}

/* ---------------------------------------------------------------------- */
/* keys */

/* Every key carries at least 24 random bits (all 32 here): over 256 MRs
 * each bit is set about half the time, and a key with any single bit
 * flipped reaches nothing. */
TH_TEST(softverbs_sec, keys_random)
{
    enum {
        NMR = 256
    };
    struct ibv_mr *mr[NMR], *lmr;
    svt_info_t info[2];
    struct ibv_sge sge;
    struct ibv_wc wc;
    struct ibv_qp_attr a;
    svt_ep_t ep[2];
    uint8_t *buf;
    int i, j, b, ones;

    svt_ep_open(&ep[0], IBV_QPT_RC, 0, 0);
    svt_ep_open(&ep[1], IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 1 << 20);
    TH_ASSERT(buf != NULL);
    memset(buf, 0, 1 << 20);
    for (i = 0; i < NMR; ++i) {
        mr[i] = ibv_reg_mr(ep[0].pd, buf + i * 4096, 4096, SVT_ALL_ACCESS);
        TH_ASSERT(mr[i] != NULL);
        TH_ASSERT_EQ(mr[i]->lkey, mr[i]->rkey);
        TH_ASSERT_NE(mr[i]->rkey, 0);
        for (j = 0; j < i; ++j) {
            TH_ASSERT_NE(mr[i]->rkey, mr[j]->rkey);
        }
    }
    for (b = 0; b < 32; ++b) {
        for (i = 0, ones = 0; i < NMR; ++i) {
            ones += (mr[i]->rkey >> b) & 1;
        }
        /* binomial(256, 1/2): 128 +- 8; a bit outside 64..192 is not
         * random (the old layout, index << 8 | generation, had bits 24..31
         * always clear) */
        if (ones < 64 || ones > 192) {
            TH_FAIL("key bit %d is set in %d of %d keys", b, ones, NMR);
        }
    }

    /* a key with one bit flipped reaches nothing: loopback QPs, ep[1]
     * writes to ep[0]'s MRs */
    lmr = ibv_reg_mr(ep[1].pd, buf, 4096, SVT_ALL_ACCESS);
    TH_ASSERT(lmr != NULL);
    for (i = 0; i < 2; ++i) {
        info[i] = svt_info(&ep[i], NULL);
    }
    for (b = 0; b <= 32; ++b) {
        for (i = 0; i < 2; ++i) {
            memset(&a, 0, sizeof(a));
            a.qp_state = IBV_QPS_RESET;
            TH_ASSERT_EQ(ibv_modify_qp(ep[i].qp, &a, IBV_QP_STATE), 0);
            svt_rc_connect(&ep[i], &info[!i]);
        }
        sge = svt_sge(buf, 8, lmr);
        TH_ASSERT_EQ(svt_post(ep[1].qp, IBV_WR_RDMA_WRITE, &sge, 1,
                              (uintptr_t)buf + 7 * 4096,
                              b < 32 ? mr[7]->rkey ^ (1u << b) : mr[7]->rkey, b,
                              IBV_SEND_SIGNALED),
                     0);
        svt_poll(ep[1].scq, &wc, 10);
        if (b < 32) {
            if (wc.status != IBV_WC_REM_ACCESS_ERR) {
                TH_FAIL("the key with bit %d flipped gave status %d", b,
                        wc.status);
            }
        } else {
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        }
    }
    for (i = 0; i < NMR; ++i) {
        TH_ASSERT_EQ(ibv_dereg_mr(mr[i]), 0);
    }
    TH_ASSERT_EQ(ibv_dereg_mr(lmr), 0);
    svt_ep_close(&ep[0]);
    svt_ep_close(&ep[1]);
    free(buf);
}

/* ---------------------------------------------------------------------- */
/* impostors (items 1 and 2) */

enum {
    SEC_ATTACK_ADDRESS, /* same user, host a, claims the client on b */
    SEC_ATTACK_USER, /* another uid on host b, claims the client */
    SEC_ATTACK_FORGE /* same user on b, honest handshake, then
                            * requests in the client's name */
};

typedef struct {
    svt_victim_t v;
    uint32_t client_qpn;
    uint16_t client_lid;
} sec_target_t;

/* the strongest impostor: it knows the victim's QPN, address and rkey and
 * the client's QPN, and asks for a READ of the victim's buffer */
static int
sec_try_read(int fd, const sec_target_t *t, uint32_t src_qpn, uint16_t src_lid)
{
    uint8_t data[4096];
    sv_net_hdr_t h, a;
    int r;

    svt_wire_req(&h, IBV_WR_RDMA_READ, src_lid, src_qpn, t->v.qpn, 0);
    h.rkey   = t->v.rkey;
    h.raddr  = t->v.addr;
    h.length = sizeof(data);
    if (svt_wire_send(fd, &h, NULL, 0) != 0) {
        return 0;
    }
    r = svt_wire_answer(fd, &a, data, sizeof(data), 3.0);
    if (r == 1 && a.status == IBV_WC_SUCCESS && a.length == sizeof(data)) {
        return 1; /* it read the victim's memory */
    }
    TH_ASSERT_NE(r, -1); /* closed, or an error: never no answer */
    return 0;
}

static void sec_attacker(int mode, const sec_target_t *t)
{
    uint8_t key[32], other[32];
    sv_net_auth_t ch;
    uint8_t mac[32];
    struct in_addr me;
    sv_net_hdr_t h, a;
    int fd, r;

    TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &me), 1);
    switch (mode) {
    case SEC_ATTACK_ADDRESS:
        /* holds the secret, but connects from host a in the name of the
         * client on host b */
        TH_ASSERT_EQ(svt_wire_key(key), 0);
        fd = svt_wire_connect(me.s_addr, t->v.ip, t->v.port);
        TH_ASSERT(fd >= 0);
        if (svt_wire_handshake(fd, key, t->client_lid,
                               (uint16_t)(t->client_qpn >> 15), t->v.lid,
                               (uint16_t)(t->v.qpn >> 15), NULL)) {
            TH_ASSERT(!sec_try_read(fd, t, t->client_qpn, t->client_lid));
            TH_FAIL("a connection from host a was accepted as LID %u",
                    (unsigned)t->client_lid);
        }
        close(fd);
        break;
    case SEC_ATTACK_USER:
        sec_become(SEC_UID);
        /* the user's secret is out of reach... */
        TH_ASSERT_NE(svt_wire_key(key), 0);
        /* ...so it proves with a key of its own */
        TH_ASSERT_EQ(sv_auth_random(other, sizeof(other)), 0);
        fd = svt_wire_connect(me.s_addr, t->v.ip, t->v.port);
        TH_ASSERT(fd >= 0);
        if (svt_wire_handshake(fd, other, t->client_lid,
                               (uint16_t)(t->client_qpn >> 15), t->v.lid,
                               (uint16_t)(t->v.qpn >> 15), NULL)) {
            TH_ASSERT(!sec_try_read(fd, t, t->client_qpn, t->client_lid));
            TH_FAIL("another user's connection was accepted");
        }
        close(fd);
        /* and the frames of old: a request without any handshake */
        fd = svt_wire_connect(me.s_addr, t->v.ip, t->v.port);
        TH_ASSERT(fd >= 0);
        if (sec_try_read(fd, t, t->client_qpn, t->client_lid)) {
            TH_FAIL("another user read the victim's buffer");
        }
        close(fd);
        break;
    case SEC_ATTACK_FORGE:
        TH_ASSERT_EQ(svt_wire_key(key), 0);
        fd = svt_wire_connect(me.s_addr, t->v.ip, t->v.port);
        TH_ASSERT(fd >= 0);
        TH_ASSERT(svt_wire_handshake(fd, key, sec_my_lid(), SVT_WIRE_SLOT,
                                     t->v.lid, (uint16_t)(t->v.qpn >> 15),
                                     &ch));
        /* the responder proved it holds the secret, which it did not
         * send: its proof is an HMAC over our nonce and its own */
        TH_ASSERT(memmem(&ch, sizeof(ch), key, 8) == NULL);
        (void)mac;
        /* an out-of-range WRITE in the client's name would break the
         * victim's QP (item 2): it must not get there */
        svt_wire_req(&h, IBV_WR_RDMA_WRITE, t->client_lid, t->client_qpn,
                     t->v.qpn, 0);
        h.rkey   = t->v.rkey;
        h.raddr  = t->v.addr + t->v.len; /* beyond the MR */
        h.length = 8;
        TH_ASSERT_EQ(svt_wire_send(fd, &h, "xxxxxxxx", 8), 0);
        r = svt_wire_answer(fd, &a, NULL, 0, 3.0);
        if (r == 1) {
            TH_FAIL("a request in the client's name reached the victim's "
                    "QP (answered with status %d)",
                    a.status);
        }
        TH_ASSERT_EQ(r, 0); /* closed, unanswered */
        close(fd);
        /* a READ in the name of the client's QP */
        fd = svt_wire_open(&t->v, key, sec_my_lid(), SVT_WIRE_SLOT);
        TH_ASSERT(fd >= 0);
        if (sec_try_read(fd, t, t->client_qpn, t->client_lid)) {
            TH_FAIL("a request in another QP's name read the victim's "
                    "buffer");
        }
        TH_ASSERT(svt_wire_closed(fd, 3.0));
        close(fd);
        /* in its own name, the same request reaches a QP that is not
         * connected to it: held, then refused; the victim's QP is fine */
        fd = svt_wire_open(&t->v, key, sec_my_lid(), SVT_WIRE_SLOT);
        TH_ASSERT(fd >= 0);
        svt_wire_req(&h, IBV_WR_RDMA_WRITE, sec_my_lid(), SVT_WIRE_QPN,
                     t->v.qpn, 0);
        h.rkey       = t->v.rkey;
        h.raddr      = t->v.addr + t->v.len;
        h.length     = 8;
        h.timeout_ns = 100000000ull;
        TH_ASSERT_EQ(svt_wire_send(fd, &h, "xxxxxxxx", 8), 0);
        TH_ASSERT_EQ(svt_wire_answer(fd, &a, NULL, 0, 5.0), 1);
        TH_ASSERT_EQ(a.status, IBV_WC_RETRY_EXC_ERR);
        close(fd);
        break;
    }
}

static void sec_impostor_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    int mode     = (int)(intptr_t)arg,
        attacker = (mode == SEC_ATTACK_ADDRESS) ? 2 : 3;
    svt_info_t mine, peer;
    sec_target_t t;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf, *expect;
    svt_ep_t ep;

    (void)nprocs;
    if (rank >= 2) {
        th_oob_recv(oob, 0, &t, sizeof(t));
        th_oob_barrier(oob);
        if (rank == attacker) {
            sec_attacker(mode, &t);
        }
        th_oob_barrier(oob); /* the attack is over */
        th_oob_barrier(oob); /* the client checked */
        th_oob_barrier(oob); /* the victim checked */
        return;
    }
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, SEC_BUF);
    TH_ASSERT(buf != NULL);
    th_fill_pattern(buf, SEC_BUF, 1 + rank);
    mr = ibv_reg_mr(ep.pd, buf, SEC_BUF, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    if (rank == 0) {
        t.v          = sec_victim_info(&ep, mr);
        t.client_qpn = peer.qpn;
        t.client_lid = peer.lid;
        th_oob_send(oob, 2, &t, sizeof(t));
        th_oob_send(oob, 3, &t, sizeof(t));
    }
    th_oob_barrier(oob);
    th_oob_barrier(oob); /* the attack is over */
    if (rank == 1) {
        /* the real client still works: a WRITE and a READ */
        sge = svt_sge(buf, 4096, mr);
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1, peer.addr,
                              peer.rkey, 1, IBV_SEND_SIGNALED),
                     0);
        svt_poll(ep.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        sge = svt_sge(buf + 8192, 4096, mr);
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_READ, &sge, 1,
                              peer.addr + 8192, peer.rkey, 2,
                              IBV_SEND_SIGNALED),
                     0);
        svt_poll(ep.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        expect = malloc(SEC_BUF);
        TH_ASSERT(expect != NULL);
        th_fill_pattern(expect, SEC_BUF, 1); /* the victim's */
        TH_ASSERT_MEM_EQ(buf + 8192, expect + 8192, 4096);
        free(expect);
    }
    th_oob_barrier(oob);
    if (rank == 0) {
        /* nothing but the client's WRITE changed the victim's memory, and
         * its QP never left RTS */
        expect = malloc(SEC_BUF);
        TH_ASSERT(expect != NULL);
        th_fill_pattern(expect, SEC_BUF, 1);
        th_fill_pattern(expect, 4096, 2);
        TH_ASSERT_MEM_EQ(buf, expect, SEC_BUF);
        TH_ASSERT_EQ(sec_qp_state(ep.qp), IBV_QPS_RTS);
        free(expect);
    }
    th_oob_barrier(oob);
}

/* Item 1: a process on host a, holding the user's secret, that claims to
 * be the client on host b (its LID) is refused: a connection is accepted
 * only from the address its LID names. */
TH_TEST(softverbs_sec, impostor_address)
{
    sec_need_root();
    sec_hosts();
    th_run_procs(4, sec_impostor_rank, (void *)(intptr_t)SEC_ATTACK_ADDRESS);
    sec_dir_remove();
}

/* Item 1: another local user (on the client's host, with the client's
 * address) cannot read the secret, and without it cannot connect at all;
 * frames without a handshake are not served either. */
TH_TEST(softverbs_sec, impostor_other_user)
{
    sec_need_root();
    sec_hosts();
    th_run_procs(4, sec_impostor_rank, (void *)(intptr_t)SEC_ATTACK_USER);
    sec_dir_remove();
}

/* Items 1 and 2: a peer of the same user, connected honestly, that sends
 * requests in the name of the client's QP loses its connection and
 * changes nothing; in its own name it cannot reach the victim's QP, which
 * stays in RTS and keeps serving the client. */
TH_TEST(softverbs_sec, impostor_forged_qp)
{
    sec_need_root();
    sec_hosts();
    th_run_procs(4, sec_impostor_rank, (void *)(intptr_t)SEC_ATTACK_FORGE);
    sec_dir_remove();
}

/* ---------------------------------------------------------------------- */
/* a victim and a raw peer of the same user (items 3 to 5) */

typedef struct {
    int mode;
} sec_raw_arg_t;

/* rank 0 (host a): an RC QP connected to the raw client's identity on host
 * b, a registered buffer; the raw client (rank 1) gets the details */
static void sec_victim_open(th_oob_t *oob, svt_ep_t *ep, uint8_t **buf,
                            struct ibv_mr **mr, uint16_t peer_lid)
{
    svt_victim_t v;

    svt_ep_open(ep, IBV_QPT_RC, 0, 0);
    *buf = aligned_alloc(4096, SEC_BUF);
    TH_ASSERT(*buf != NULL);
    memset(*buf, 0, SEC_BUF);
    *mr = ibv_reg_mr(ep->pd, *buf, SEC_BUF, SVT_ALL_ACCESS);
    TH_ASSERT(*mr != NULL);
    sec_connect_to_raw(ep, peer_lid);
    v = sec_victim_info(ep, *mr);
    th_oob_send(oob, 1, &v, sizeof(v));
}

static uint16_t sec_peer_lid(th_oob_t *oob, int rank)
{
    uint16_t mine = sec_my_lid(), theirs;

    th_oob_send(oob, !rank, &mine, sizeof(mine));
    th_oob_recv(oob, !rank, &theirs, sizeof(theirs));
    return theirs;
}

/* Item 3: a peer that sends a SEND's payload one byte at a time does not
 * hold the receive queue's lock: the owner's ibv_destroy_qp returns at
 * once (cutting that peer's connection), without spinning. */
static void sec_slow_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    uint16_t peer_lid = sec_peer_lid(oob, rank);
    double t0, c0, dt, dc, end;
    struct ibv_mr *mr;
    uint8_t key[32], *buf;
    svt_victim_t v;
    sv_net_hdr_t h;
    svt_ep_t ep;
    int fd, cut = 0;

    (void)nprocs;
    (void)arg;
    if (rank == 0) {
        sec_victim_open(oob, &ep, &buf, &mr, peer_lid);
        svt_post_recv(ep.qp, buf, SEC_BUF, mr->lkey, 7);
        th_oob_barrier(oob);
        usleep(1000000); /* the peer is in the middle of the payload */
        t0 = th_time();
        c0 = th_cpu_time(RUSAGE_THREAD);
        TH_ASSERT_EQ(ibv_destroy_qp(ep.qp), 0);
        dt    = th_time() - t0;
        dc    = th_cpu_time(RUSAGE_THREAD) - c0;
        ep.qp = NULL;
        th_log("ibv_destroy_qp took %.3f s (%.3f s of CPU) while the peer "
               "trickled a payload",
               dt, dc);
        TH_ASSERT_DBL(dt, <, 1.0);
        TH_ASSERT_DBL(dc, <, 0.5);
        th_oob_recv(oob, 1, &cut, sizeof(cut));
        /* the responder was in the middle of that payload (not done with
         * it nor yet to begin), and the destroy cut it off */
        TH_ASSERT_EQ(cut, 1);
        th_oob_barrier(oob);
        TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
        svt_ep_close(&ep);
        return;
    }
    th_oob_recv(oob, 0, &v, sizeof(v));
    TH_ASSERT_EQ(svt_wire_key(key), 0);
    fd = svt_wire_open(&v, key, sec_my_lid(), SVT_WIRE_SLOT);
    TH_ASSERT(fd >= 0);
    svt_wire_req(&h, IBV_WR_SEND, sec_my_lid(), SVT_WIRE_QPN, v.qpn, 0);
    h.length = SEC_BUF;
    TH_ASSERT_EQ(svt_wire_send(fd, &h, "x", 1), 0);
    th_oob_barrier(oob);
    /* one byte every 0.3 s for 4 s, then it goes away */
    for (end = th_time() + 4.0; th_time() < end && !cut;) {
        usleep(300000);
        cut = send(fd, "x", 1, MSG_NOSIGNAL) != 1 ||
              svt_wire_closed(fd, 0.01); /* the victim cut us off */
    }
    close(fd);
    th_oob_send(oob, 0, &cut, sizeof(cut));
    th_oob_barrier(oob);
}

TH_TEST(softverbs_sec, slow_payload)
{
    sec_need_root();
    sec_hosts();
    th_run_procs(2, sec_slow_rank, NULL);
    sec_dir_remove();
}

/* Item 4: with its descriptors exhausted (accept() fails with EMFILE) and
 * connections pending, the listener backs off instead of spinning. */
static void sec_emfile_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    uint16_t peer_lid = sec_peer_lid(oob, rank);
    struct rlimit rl, low;
    struct ibv_mr *mr;
    uint8_t *buf;
    svt_victim_t v;
    svt_ep_t ep;
    double c0, dc;
    int fds[4], i, nfd;

    (void)nprocs;
    (void)arg;
    if (rank == 0) {
        sec_victim_open(oob, &ep, &buf, &mr, peer_lid);
        /* the limit is on descriptor numbers: at the lowest free one, no
         * descriptor can be made */
        nfd = dup(0);
        TH_ASSERT(nfd >= 0);
        close(nfd);
        TH_ASSERT_SYS(getrlimit(RLIMIT_NOFILE, &rl));
        low          = rl;
        low.rlim_cur = (rlim_t)nfd;
        TH_ASSERT_SYS(setrlimit(RLIMIT_NOFILE, &low));
        TH_ASSERT_EQ(dup(0), -1);
        th_oob_barrier(oob);
        th_oob_barrier(oob); /* connections are pending */
        c0 = th_cpu_time(RUSAGE_SELF);
        usleep(1000000);
        dc = th_cpu_time(RUSAGE_SELF) - c0;
        TH_ASSERT_SYS(setrlimit(RLIMIT_NOFILE, &rl));
        th_oob_barrier(oob);
        th_log("CPU time of the process in 1 s with accept() failing: "
               "%.3f s",
               dc);
        TH_ASSERT_DBL(dc, <, 0.1); /* spinning: a share of a core */
        TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
        svt_ep_close(&ep);
        return;
    }
    th_oob_recv(oob, 0, &v, sizeof(v));
    th_oob_barrier(oob);
    for (i = 0; i < 4; ++i) {
        fds[i] = svt_wire_connect(0, v.ip, v.port); /* in the backlog */
        TH_ASSERT(fds[i] >= 0);
    }
    th_oob_barrier(oob);
    th_oob_barrier(oob);
    for (i = 0; i < 4; ++i) {
        close(fds[i]);
    }
}

TH_TEST(softverbs_sec, accept_emfile)
{
    sec_need_root();
    sec_hosts();
    th_run_procs(2, sec_emfile_rank, NULL);
    sec_dir_remove();
}

/* Item 5: 300 connections that never authenticate and 30 that do and then
 * idle: the responder serves at most SOFTVERBS_NET_MAX_CONNS (16 here)
 * with as many threads, refuses the rest, and serves new connections once
 * those go. */
static void sec_limits_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    enum {
        NPLAIN = 300,
        NAUTH  = 30,
        MAXC   = 16
    };
    static int fds[NPLAIN + NAUTH];
    uint16_t peer_lid = sec_peer_lid(oob, rank);
    long threads0, vm0, threads, vm;
    struct ibv_mr *mr;
    uint8_t key[32], *buf;
    svt_victim_t v;
    svt_ep_t ep;
    int i, n = 0, welcomed = 0, fd;
    double end;

    (void)nprocs;
    (void)arg;
    if (rank == 0) {
        setenv("SOFTVERBS_NET_MAX_CONNS", "16", 1);
        sec_victim_open(oob, &ep, &buf, &mr, peer_lid);
        threads0 = sec_proc_status("Threads");
        vm0      = sec_proc_status("VmSize");
        th_oob_barrier(oob);
        th_oob_barrier(oob); /* all connections made */
        usleep(300000);
        threads = sec_proc_status("Threads");
        vm      = sec_proc_status("VmSize");
        th_oob_barrier(oob);
        th_log("%d connections: threads %ld -> %ld, VmSize %ld -> %ld kB",
               NPLAIN + NAUTH, threads0, threads, vm0, vm);
        TH_ASSERT_LE(threads, threads0 + MAXC + 1);
        /* 512 KiB stacks, and a malloc arena or two (64 MiB each); a
         * thread per connection with 8 MiB stacks made gigabytes */
        TH_ASSERT_LE(vm - vm0, 256 * 1024);
        th_oob_barrier(oob); /* the peer checked a new connection */
        TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
        svt_ep_close(&ep);
        return;
    }
    th_oob_recv(oob, 0, &v, sizeof(v));
    TH_ASSERT_EQ(svt_wire_key(key), 0);
    th_oob_barrier(oob);
    for (i = 0; i < NAUTH; ++i) {
        fd = svt_wire_open(&v, key, sec_my_lid(), (uint16_t)(400 + i));
        if (fd >= 0) {
            fds[n++] = fd;
            ++welcomed;
        }
    }
    for (i = 0; i < NPLAIN; ++i) {
        fd = svt_wire_connect(0, v.ip, v.port);
        if (fd >= 0) {
            fds[n++] = fd;
        }
    }
    th_oob_barrier(oob);
    th_oob_barrier(oob);
    th_log("%d of %d authenticated connections were served", welcomed, NAUTH);
    TH_ASSERT_LE(welcomed, MAXC);
    TH_ASSERT_GT(welcomed, 0);
    for (i = 0; i < n; ++i) {
        close(fds[i]);
    }
    /* once they are gone (the unauthenticated ones time out in their
     * handshake) a new connection is served again */
    for (end = th_time() + 10, fd = -1; fd < 0 && th_time() < end;) {
        usleep(200000);
        fd = svt_wire_open(&v, key, sec_my_lid(), SVT_WIRE_SLOT);
    }
    TH_ASSERT(fd >= 0);
    close(fd);
    th_oob_barrier(oob);
}

TH_TEST(softverbs_sec, conn_limits)
{
    sec_need_root();
    sec_hosts();
    th_run_procs(2, sec_limits_rank, NULL);
    sec_dir_remove();
}

/* Item 5: how long the responder holds a request is its own setting
 * (SOFTVERBS_NET_MAX_HOLD_MS, 300 ms here), not the requester's ack
 * timeout (an hour here) nor its rnr_retry of 7 ("forever"). */
static void sec_hold_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    uint16_t peer_lid = sec_peer_lid(oob, rank);
    struct ibv_mr *mr;
    uint8_t key[32], *buf;
    svt_victim_t v;
    sv_net_hdr_t h, a;
    svt_ep_t ep;
    double t0, dt;
    int fd;

    (void)nprocs;
    (void)arg;
    if (rank == 0) {
        setenv("SOFTVERBS_NET_MAX_HOLD_MS", "300", 1);
        sec_victim_open(oob, &ep, &buf, &mr, peer_lid);
        th_oob_barrier(oob);
        th_oob_barrier(oob);
        TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
        svt_ep_close(&ep);
        return;
    }
    th_oob_recv(oob, 0, &v, sizeof(v));
    TH_ASSERT_EQ(svt_wire_key(key), 0);
    th_oob_barrier(oob);
    fd = svt_wire_open(&v, key, sec_my_lid(), SVT_WIRE_SLOT);
    TH_ASSERT(fd >= 0);
    /* a QP that does not exist, and an ack timeout of an hour */
    svt_wire_req(&h, IBV_WR_RDMA_WRITE, sec_my_lid(), SVT_WIRE_QPN,
                 v.qpn + 1000, 0);
    h.length     = 8;
    h.timeout_ns = 3600ull * 1000000000ull;
    t0           = th_time();
    TH_ASSERT_EQ(svt_wire_send(fd, &h, "xxxxxxxx", 8), 0);
    TH_ASSERT_EQ(svt_wire_answer(fd, &a, NULL, 0, 5.0), 1);
    dt = th_time() - t0;
    th_log("held a request for a missing QP %.3f s", dt);
    TH_ASSERT_EQ(a.status, IBV_WC_RETRY_EXC_ERR);
    TH_ASSERT_DBL(dt, >=, 0.25);
    TH_ASSERT_DBL(dt, <, 3.0);
    /* (that error flushes the raw QP's later requests on this connection,
     * as RC does: a new one) */
    close(fd);
    fd = svt_wire_open(&v, key, sec_my_lid(), SVT_WIRE_SLOT);
    TH_ASSERT(fd >= 0);
    /* a SEND with rnr_retry 7 to a QP without receives */
    svt_wire_req(&h, IBV_WR_SEND, sec_my_lid(), SVT_WIRE_QPN, v.qpn, 1);
    h.length     = 8;
    h.rnr_retry  = 7;
    h.timeout_ns = 3600ull * 1000000000ull;
    t0           = th_time();
    TH_ASSERT_EQ(svt_wire_send(fd, &h, "xxxxxxxx", 8), 0);
    TH_ASSERT_EQ(svt_wire_answer(fd, &a, NULL, 0, 5.0), 1);
    dt = th_time() - t0;
    th_log("held a SEND on RNR (rnr_retry 7) %.3f s", dt);
    TH_ASSERT_EQ(a.status, IBV_WC_RNR_RETRY_EXC_ERR);
    TH_ASSERT_DBL(dt, >=, 0.25);
    TH_ASSERT_DBL(dt, <, 3.0);
    close(fd);
    th_oob_barrier(oob);
}

TH_TEST(softverbs_sec, hold_bound)
{
    sec_need_root();
    sec_hosts();
    th_run_procs(2, sec_hold_rank, NULL);
    sec_dir_remove();
}

/* ---------------------------------------------------------------------- */
/* the fabric segment (item 6) */

/* fork; the child becomes uid (unless 0), runs fn and exits through
 * exit() (so that softverbs' exit handler runs); its exit code */
static int sec_child(uid_t uid, int (*fn)(void *), void *arg)
{
    int status;
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    TH_ASSERT(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (uid != 0) {
            sec_become(uid);
        }
        exit(fn(arg));
    }
    TH_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* a process that uses softverbs on the fabric named arg: the number of
 * devices it sees (0: softverbs refused to start) */
static int sec_devices(const char *shm_name)
{
    struct ibv_device **list;
    int n = 0;

    setenv("SOFTVERBS_SHM_NAME", shm_name, 1);
    setenv("SOFTVERBS_DEV_NODE", "0", 1);
    list = ibv_get_device_list(&n);
    if (list != NULL) {
        ibv_free_device_list(list);
    }
    return n;
}

static int sec_use_fabric(void *arg)
{
    unsetenv("SOFTVERBS_NET"); /* this host only */
    return sec_devices(arg);
}

static int sec_plant(void *arg)
{
    const char **a = arg; /* { link or file, target or NULL } */
    int fd;

    if (a[1] != NULL) {
        fd = open(a[1], O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 || write(fd, "precious", 8) != 8) {
            return 2;
        }
        close(fd);
        return symlink(a[1], a[0]) == 0 ? 0 : 3;
    }
    fd = open(a[0], O_RDWR | O_CREAT | O_EXCL, 0666);
    if (fd < 0 || fchmod(fd, 0666) != 0) {
        return 4;
    }
    close(fd);
    return 0;
}

/* A symlink planted under the fabric's name by another user is never
 * followed (the file it points to stays as it was), and a segment file
 * made by another user (mode 0666), or of this user with another mode
 * than 0600, is refused: softverbs does not start. */
TH_TEST(softverbs_sec, segment_planted)
{
    char name[64], path[96], target[96];
    const char *plant[2];
    struct stat st;
    char data[16];
    int fd;

    svt_need_device();
    sec_need_root();
    /* a symlink to a file of the planting user */
    snprintf(name, sizeof(name), "svt-seg-link-%d", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    snprintf(target, sizeof(target), "/tmp/svt-seg-target-%d", (int)getpid());
    unlink(path);
    unlink(target);
    plant[0] = path;
    plant[1] = target;
    TH_ASSERT_EQ(sec_child(SEC_UID2, sec_plant, plant), 0);
    TH_ASSERT_EQ(sec_child(SEC_UID, sec_use_fabric, name), 0);
    TH_ASSERT_SYS(lstat(target, &st));
    TH_ASSERT_EQ(st.st_size, 8);
    fd = open(target, O_RDONLY);
    TH_ASSERT(fd >= 0);
    TH_ASSERT_EQ(read(fd, data, sizeof(data)), 8);
    close(fd);
    TH_ASSERT(!memcmp(data, "precious", 8));
    unlink(path);
    unlink(target);

    /* a symlink to a file of the victim, 0600 like a segment (a private
     * key, say): the owner and mode checks would pass, so it is
     * O_NOFOLLOW that keeps the file intact */
    snprintf(name, sizeof(name), "svt-seg-link2-%d", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    unlink(path);
    unlink(target);
    fd = open(target, O_WRONLY | O_CREAT | O_EXCL, 0600);
    TH_ASSERT(fd >= 0);
    TH_ASSERT_EQ(write(fd, "precious", 8), 8);
    TH_ASSERT_SYS(fchown(fd, SEC_UID, SEC_UID));
    close(fd);
    TH_ASSERT_SYS(symlink(target, path));
    TH_ASSERT_SYS(lchown(path, SEC_UID2, SEC_UID2));
    TH_ASSERT_EQ(sec_child(SEC_UID, sec_use_fabric, name), 0);
    TH_ASSERT_SYS(lstat(target, &st));
    TH_ASSERT_EQ(st.st_size, 8);
    unlink(path);
    unlink(target);

    /* a segment made by another user, readable and writable by all */
    snprintf(name, sizeof(name), "svt-seg-foreign-%d", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    unlink(path);
    plant[0] = path;
    plant[1] = NULL;
    TH_ASSERT_EQ(sec_child(SEC_UID2, sec_plant, plant), 0);
    TH_ASSERT_EQ(sec_child(SEC_UID, sec_use_fabric, name), 0);
    TH_ASSERT_SYS(stat(path, &st));
    TH_ASSERT_EQ(st.st_size, 0); /* nothing of the victim went there */
    unlink(path);

    /* the user's own file, but readable by others */
    snprintf(name, sizeof(name), "svt-seg-mode-%d", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    unlink(path);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
    TH_ASSERT(fd >= 0);
    TH_ASSERT_SYS(fchmod(fd, 0644));
    TH_ASSERT_SYS(fchown(fd, SEC_UID, SEC_UID));
    close(fd);
    TH_ASSERT_EQ(sec_child(SEC_UID, sec_use_fabric, name), 0);
    TH_ASSERT_SYS(stat(path, &st));
    TH_ASSERT_EQ(st.st_size, 0);
    unlink(path);

    /* and the way it is meant to be: created 0600, used */
    snprintf(name, sizeof(name), "svt-seg-ok-%d", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    TH_ASSERT_EQ(sec_child(SEC_UID, sec_use_fabric, name), 1);
    TH_ASSERT_NE(stat(path, &st), 0); /* and removed at its exit */
}

typedef struct {
    const char *name;
    int wait_fd; /* -1, or read a byte from it before exiting */
    int ready_fd;
} sec_user_arg_t;

static int sec_use_fabric_wait(void *arg)
{
    sec_user_arg_t *a = arg;
    struct ibv_context *ctx;
    struct ibv_device **list;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    static char buf[8192];
    char c = 'r';
    int n  = sec_use_fabric((void *)a->name);

    if (n < 1) {
        return 2;
    }
    list = ibv_get_device_list(&n);
    ctx  = ibv_open_device(list[0]);
    pd   = ctx ? ibv_alloc_pd(ctx) : NULL;
    mr   = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
    if (mr == NULL) {
        return 3;
    }
    if (a->ready_fd >= 0 && write(a->ready_fd, &c, 1) != 1) {
        return 4;
    }
    if (a->wait_fd >= 0 && read(a->wait_fd, &c, 1) != 1) {
        return 5;
    }
    return 0; /* exit() with the MR, PD and context still open */
}

/* The last process of a fabric removes its segment when it exits, not
 * before. */
TH_TEST(softverbs_sec, segment_unlinked)
{
    sec_user_arg_t a = {NULL, -1, -1};
    int go[2], ready[2], status;
    char name[64], path[96], c;
    struct stat st;
    pid_t pid;

    svt_need_device();
    snprintf(name, sizeof(name), "svt-seg-last-%d", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    a.name = name;
    /* alone: gone at exit */
    TH_ASSERT_EQ(sec_child(0, sec_use_fabric_wait, &a), 0);
    TH_ASSERT_NE(stat(path, &st), 0);

    /* two: the first to exit leaves it, the last removes it */
    TH_ASSERT_SYS(pipe(go));
    TH_ASSERT_SYS(pipe(ready));
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    TH_ASSERT(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        a.wait_fd  = go[0];
        a.ready_fd = ready[1];
        exit(sec_use_fabric_wait(&a));
    }
    TH_ASSERT_EQ(read(ready[0], &c, 1), 1);
    TH_ASSERT_SYS(stat(path, &st));
    TH_ASSERT_EQ(sec_child(0, sec_use_fabric_wait, &a), 0);
    TH_ASSERT_SYS(stat(path, &st)); /* the other one still uses it */
    TH_ASSERT_EQ(write(go[1], "g", 1), 1);
    TH_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    TH_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    TH_ASSERT_NE(stat(path, &st), 0);
}

/* ---------------------------------------------------------------------- */
/* the secret file */

static int sec_load(const char *file, int *err_out)
{
    char path[512], err[512];
    uint8_t key[32];
    int ret;

    if (file != NULL) {
        setenv("SOFTVERBS_NET_SECRET_FILE", file, 1);
    } else {
        unsetenv("SOFTVERBS_NET_SECRET_FILE");
    }
    ret = sv_auth_load_secret(key, path, sizeof(path), err, sizeof(err));
    if (ret != 0) {
        th_log("refused as expected? %s", err);
    }
    if (err_out != NULL) {
        *err_out = ret;
    }
    return ret;
}

static int sec_load_as_other(void *arg)
{
    return sec_load(arg, NULL) == 0 ? 0 : 1;
}

static int sec_net_start(void *arg)
{
    char name[64];

    setenv("SOFTVERBS_NET_SECRET_FILE", (const char *)arg, 1);
    /* the secret is read before anything listens: this port is never
     * opened */
    setenv("SOFTVERBS_NET", "127.0.0.1", 1);
    setenv("SOFTVERBS_NET_PORT", "1", 1);
    snprintf(name, sizeof(name), "svt-seg-secret-%d", (int)getpid());
    return sec_devices(name);
}

/* Created 0600 on first use (directory 0700), the same key after; refused
 * when group or others have any permission, when owned by another user,
 * when a symlink, a FIFO (without blocking) or too short; another user
 * cannot read it; and softverbs does not start its network path with a
 * secret it refuses. */
TH_TEST(softverbs_sec, secret_file)
{
    char f[128], g[256], home[128], *out = NULL;
    uint8_t k1[32], k2[32];
    char path[512], err[512];
    struct stat st;
    double t0;
    int e, fd;

    sec_dir_make();
    snprintf(f, sizeof(f), "%s/secret", sec_dir);
    TH_ASSERT_EQ(sec_load(f, NULL), 0);
    TH_ASSERT_SYS(stat(f, &st));
    TH_ASSERT_EQ(st.st_mode & 07777, 0600);
    TH_ASSERT_EQ(st.st_uid, geteuid());
    TH_ASSERT_GE(st.st_size, 16);
    TH_ASSERT_EQ(sv_auth_load_secret(k1, path, sizeof(path), err, sizeof(err)),
                 0);
    TH_ASSERT_EQ(sv_auth_load_secret(k2, path, sizeof(path), err, sizeof(err)),
                 0);
    TH_ASSERT_MEM_EQ(k1, k2, 32);

    TH_ASSERT_SYS(chmod(f, 0640));
    TH_ASSERT_NE(sec_load(f, NULL), 0);
    TH_ASSERT_SYS(chmod(f, 0604));
    TH_ASSERT_NE(sec_load(f, NULL), 0);
    TH_ASSERT_SYS(chmod(f, 0600));
    TH_ASSERT_EQ(sec_load(f, NULL), 0);

    snprintf(g, sizeof(g), "%s/link", sec_dir);
    TH_ASSERT_SYS(symlink(f, g));
    TH_ASSERT_NE(sec_load(g, &e), 0);
    TH_ASSERT_EQ(e, ELOOP);

    snprintf(g, sizeof(g), "%s/fifo", sec_dir);
    TH_ASSERT_SYS(mkfifo(g, 0600));
    t0 = th_time();
    TH_ASSERT_NE(sec_load(g, NULL), 0);
    TH_ASSERT_DBL(th_time() - t0, <, 1.0);

    snprintf(g, sizeof(g), "%s/short", sec_dir);
    fd = open(g, O_WRONLY | O_CREAT | O_EXCL, 0600);
    TH_ASSERT(fd >= 0);
    TH_ASSERT_EQ(write(fd, "12345", 5), 5);
    close(fd);
    TH_ASSERT_NE(sec_load(g, &e), 0);
    TH_ASSERT_EQ(e, EINVAL);

    /* the default place: ~/.config/softverbs/secret, or under
     * XDG_CONFIG_HOME */
    snprintf(home, sizeof(home), "%s/home", sec_dir);
    TH_ASSERT_SYS(mkdir(home, 0755));
    setenv("HOME", home, 1);
    unsetenv("XDG_CONFIG_HOME");
    TH_ASSERT_EQ(sec_load(NULL, NULL), 0);
    snprintf(g, sizeof(g), "%s/.config/softverbs", home);
    TH_ASSERT_SYS(stat(g, &st));
    TH_ASSERT_EQ(st.st_mode & 07777, 0700);
    snprintf(g, sizeof(g), "%s/.config/softverbs/secret", home);
    TH_ASSERT_SYS(stat(g, &st));
    TH_ASSERT_EQ(st.st_mode & 07777, 0600);
    snprintf(g, sizeof(g), "%s/xdg", sec_dir);
    TH_ASSERT_SYS(mkdir(g, 0700));
    setenv("XDG_CONFIG_HOME", g, 1);
    TH_ASSERT_EQ(sec_load(NULL, NULL), 0);
    snprintf(g, sizeof(g), "%s/xdg/softverbs/secret", sec_dir);
    TH_ASSERT_SYS(stat(g, &st));

    if (geteuid() == 0) {
        /* another user cannot read it, nor use a file it does not own */
        TH_ASSERT_NE(sec_child(SEC_UID, sec_load_as_other, f), 0);
        snprintf(g, sizeof(g), "%s/owned", sec_dir);
        TH_ASSERT_SYS(th_run_cmd(&out, "cp '%s' '%s' && chown %u '%s'", f, g,
                                 SEC_UID, g) == 0 ?
                              0 :
                              -1);
        free(out);
        TH_ASSERT_NE(sec_load(g, NULL), 0);
    }
    /* the library refuses to start its network path with a bad secret */
    if (th_have_verbs_device("softverbs")) {
        TH_ASSERT_SYS(chmod(f, 0644));
        TH_ASSERT_EQ(sec_child(0, sec_net_start, f), 0);
        TH_ASSERT_SYS(chmod(f, 0600));
    }
    sec_dir_remove();
}
