/*
 * A fuzzer of softverbs' responder (issue 26): a raw client (svt_wire.c)
 * on host b, authenticated as a peer of the victim's RC QP, sends a few
 * thousand frames to a victim process on host a: valid requests (WRITE,
 * WRITE_WITH_IMM, READ, SEND, SEND_WITH_IMM, atomics, UD datagrams), the
 * same with 1 to 3 mutations (bit flips, special lengths, addresses and
 * keys, other opcodes, kinds, QPs, Q_Keys, timeouts, garbage headers,
 * frames cut short) and mutated handshakes. Seeded (SVT_FUZZ_SEED), bounded
 * (SVT_FUZZ_CASES, default 3000, and 45 s).
 *
 * The fuzzer keeps a shadow of the victim's memory: a 320 KiB block with an
 * MR of 64 KiB for one-sided operations, 32 receive buffers of 1 KiB for
 * the RC QP and 8 of 512 bytes for a UD QP, and guard areas around. It
 * applies what each answered request did (and what a datagram that the
 * victim could take did); READs and atomics' original values are checked
 * against it as they come, and the whole block is compared every 500 cases
 * and at the end. Every request must be answered or its connection closed
 * within 5 s, and the victim must survive. After any error or closed
 * connection the victim resets its QPs and reposts its receives.
 */
#define _GNU_SOURCE
#include "svt_wire.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <sys/socket.h>

#define FZ_BLOCK   (320 * 1024)
#define FZ_MR_OFF  (64 * 1024)
#define FZ_MR_LEN  (64 * 1024)
#define FZ_RQ_OFF  (128 * 1024)
#define FZ_RQ_N    32
#define FZ_RQ_SLOT 1024
#define FZ_UD_OFF  (160 * 1024)
#define FZ_UD_N    8
#define FZ_UD_SLOT 512
#define FZ_UD_QKEY 0x11113333u
#define FZ_PATTERN 11
#define FZ_MAXDATA 2048
#define FZ_WAIT_S  5.0

typedef struct {
    svt_victim_t v; /* the RC QP, the MR */
    uint64_t base; /* the block's address */
    uint32_t ud_qpn;
} fz_info_t;

static char fz_dir[64];

/* ---------------------------------------------------------------------- */
/* victim */

static void fz_ud_up(svt_ep_t *ep)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RESET;
    TH_ASSERT_EQ(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE), 0);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey     = FZ_UD_QKEY;
    TH_ASSERT_EQ(ibv_modify_qp(ep->qp, &a,
                               IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       IBV_QP_QKEY),
                 0);
    a.qp_state = IBV_QPS_RTR;
    TH_ASSERT_EQ(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE), 0);
    a.qp_state = IBV_QPS_RTS;
    TH_ASSERT_EQ(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
}

/* both QPs afresh, every receive posted again in slot order */
static void fz_victim_reset(svt_ep_t *rc, svt_ep_t *ud, uint8_t *blk,
                            struct ibv_mr *rq_mr, struct ibv_mr *ud_mr,
                            uint16_t peer_lid)
{
    struct ibv_qp_attr a;
    svt_info_t raw;
    struct ibv_wc wc[16];
    int i;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RESET;
    TH_ASSERT_EQ(ibv_modify_qp(rc->qp, &a, IBV_QP_STATE), 0);
    memset(&raw, 0, sizeof(raw));
    raw.qpn = SVT_WIRE_QPN;
    raw.lid = peer_lid;
    svt_rc_connect(rc, &raw);
    fz_ud_up(ud);
    while (ibv_poll_cq(rc->rcq, 16, wc) > 0 ||
           ibv_poll_cq(rc->scq, 16, wc) > 0 ||
           ibv_poll_cq(ud->rcq, 16, wc) > 0) {
    }
    for (i = 0; i < FZ_RQ_N; ++i) {
        svt_post_recv(rc->qp, blk + FZ_RQ_OFF + i * FZ_RQ_SLOT, FZ_RQ_SLOT,
                      rq_mr->lkey, i);
    }
    for (i = 0; i < FZ_UD_N; ++i) {
        svt_post_recv(ud->qp, blk + FZ_UD_OFF + i * FZ_UD_SLOT, FZ_UD_SLOT,
                      ud_mr->lkey, 100 + i);
    }
}

static void fz_victim(th_oob_t *oob, uint16_t peer_lid)
{
    struct ibv_mr *mr, *rq_mr, *ud_mr;
    svt_ep_t rc, ud;
    fz_info_t info;
    uint8_t *blk;
    char cmd;

    svt_ep_open(&rc, IBV_QPT_RC, 0, 0);
    svt_ep_open(&ud, IBV_QPT_UD, 0, 0);
    blk = aligned_alloc(4096, FZ_BLOCK);
    TH_ASSERT(blk != NULL);
    th_fill_pattern(blk, FZ_BLOCK, FZ_PATTERN);
    mr    = ibv_reg_mr(rc.pd, blk + FZ_MR_OFF, FZ_MR_LEN, SVT_ALL_ACCESS);
    rq_mr = ibv_reg_mr(rc.pd, blk + FZ_RQ_OFF, FZ_RQ_N * FZ_RQ_SLOT,
                       IBV_ACCESS_LOCAL_WRITE);
    ud_mr = ibv_reg_mr(ud.pd, blk + FZ_UD_OFF, FZ_UD_N * FZ_UD_SLOT,
                       IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(mr != NULL && rq_mr != NULL && ud_mr != NULL);
    fz_victim_reset(&rc, &ud, blk, rq_mr, ud_mr, peer_lid);

    memset(&info, 0, sizeof(info));
    {
        const char *port = getenv("SOFTVERBS_NET_PORT");
        struct in_addr in;

        TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &in), 1);
        info.v.ip   = in.s_addr;
        info.v.lid  = svt_lid(&rc);
        info.v.qpn  = rc.qp->qp_num;
        info.v.port = (uint16_t)((port ? atoi(port) : SV_NET_PORT) +
                                 (info.v.qpn >> SV_QPN_SLOT_SHIFT));
        info.v.rkey = mr->rkey;
        info.v.addr = (uintptr_t)mr->addr;
        info.v.len  = mr->length;
        info.v.pid  = getpid();
    }
    info.base   = (uintptr_t)blk;
    info.ud_qpn = ud.qp->qp_num;
    th_oob_send(oob, 1, &info, sizeof(info));

    for (;;) {
        th_oob_recv(oob, 1, &cmd, 1);
        if (cmd == 'R') {
            fz_victim_reset(&rc, &ud, blk, rq_mr, ud_mr, peer_lid);
        } else if (cmd == 'D') {
            th_oob_send(oob, 1, blk, FZ_BLOCK);
            continue;
        } else {
            break;
        }
        th_oob_send(oob, 1, "k", 1);
    }
    TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
    TH_ASSERT_EQ(ibv_dereg_mr(rq_mr), 0);
    TH_ASSERT_EQ(ibv_dereg_mr(ud_mr), 0);
    svt_ep_close(&rc);
    svt_ep_close(&ud);
    th_oob_send(oob, 1, "q", 1);
}

/* ---------------------------------------------------------------------- */
/* fuzzer */

typedef struct {
    uint64_t s;
} fz_rng_t;

static uint64_t fz_next(fz_rng_t *r)
{
    /* xorshift64* */
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

static uint64_t fz_below(fz_rng_t *r, uint64_t n)
{
    return n ? fz_next(r) % n : 0;
}

typedef struct {
    fz_info_t info;
    uint8_t key[32];
    uint16_t lid;
    uint8_t *shadow;
    int fd;
    int rc_next; /* the next RC receive slot to be taken */
    int ud_next;
    uint32_t seq;
    fz_rng_t rng;
    th_oob_t *oob;
    /* counts */
    unsigned cases, mutated, answered, success, errors, closed, resets, ud_sent,
            ud_placed, hs_cases, hs_welcomed, compares;
    unsigned status_count[32];
} fz_t;

static void fz_reset(fz_t *f)
{
    char k;

    if (f->fd >= 0) {
        close(f->fd);
    }
    th_oob_send(f->oob, 0, "R", 1);
    th_oob_recv(f->oob, 0, &k, 1);
    f->rc_next = 0;
    f->ud_next = 0;
    ++f->resets;
    f->fd = svt_wire_open(&f->info.v, f->key, f->lid, SVT_WIRE_SLOT);
    TH_ASSERT(f->fd >= 0);
}

static void fz_compare(fz_t *f)
{
    uint8_t *mem = malloc(FZ_BLOCK);
    size_t i;

    TH_ASSERT(mem != NULL);
    th_oob_send(f->oob, 0, "D", 1);
    th_oob_recv(f->oob, 0, mem, FZ_BLOCK);
    for (i = 0; i < FZ_BLOCK; ++i) {
        if (mem[i] != f->shadow[i]) {
            TH_FAIL("after case %u: the victim's byte at offset %zu (%s) is "
                    "0x%02x, expected 0x%02x",
                    f->cases, i,
                    i < FZ_MR_OFF ? "guard" :
                    i < FZ_RQ_OFF ? "MR" :
                    i < FZ_UD_OFF ? "RC receive buffers" :
                    i < FZ_UD_OFF + FZ_UD_N * FZ_UD_SLOT ?
                                    "UD receive buffers" :
                                    "guard",
                    mem[i], f->shadow[i]);
        }
    }
    free(mem);
    ++f->compares;
}

static int fz_has_data(const sv_net_hdr_t *h)
{
    return sv_net_req_has_data(h);
}

/* is [addr, addr + len) inside the victim's MR? */
static int fz_in_mr(const fz_t *f, uint64_t addr, uint64_t len)
{
    return addr >= f->info.v.addr && len <= FZ_MR_LEN &&
           addr - f->info.v.addr <= FZ_MR_LEN - len;
}

static uint8_t *fz_shadow_at(fz_t *f, uint64_t addr)
{
    return f->shadow + (addr - f->info.base);
}

/* what the victim did, by the answer to an RC request: update the shadow,
 * or fail when the victim did what it must not */
static void fz_apply_rc(fz_t *f, const sv_net_hdr_t *h, const uint8_t *data,
                        const sv_net_hdr_t *a, const uint8_t *rdata)
{
    uint64_t old, *w;

    if (a->status != IBV_WC_SUCCESS) {
        return;
    }
    switch (h->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        if (h->length > 0 &&
            (!fz_in_mr(f, h->raddr, h->length) || h->rkey != f->info.v.rkey)) {
            TH_FAIL("case %u: a WRITE of %llu bytes at 0x%llx with key 0x%x "
                    "succeeded",
                    f->cases, (unsigned long long)h->length,
                    (unsigned long long)h->raddr, h->rkey);
        }
        if (h->length > 0) {
            memcpy(fz_shadow_at(f, h->raddr), data, h->length);
        }
        if (h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
            TH_ASSERT_LT(f->rc_next, FZ_RQ_N);
            ++f->rc_next;
        }
        break;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        TH_ASSERT_LT(f->rc_next, FZ_RQ_N);
        TH_ASSERT_LE(h->length, FZ_RQ_SLOT);
        memcpy(f->shadow + FZ_RQ_OFF + f->rc_next * FZ_RQ_SLOT, data,
               h->length);
        ++f->rc_next;
        break;
    case IBV_WR_RDMA_READ:
        if (h->length > 0 &&
            (!fz_in_mr(f, h->raddr, h->length) || h->rkey != f->info.v.rkey)) {
            TH_FAIL("case %u: a READ of %llu bytes at 0x%llx with key 0x%x "
                    "succeeded",
                    f->cases, (unsigned long long)h->length,
                    (unsigned long long)h->raddr, h->rkey);
        }
        TH_ASSERT_EQ(a->length, h->length);
        if (h->length > 0 &&
            memcmp(rdata, fz_shadow_at(f, h->raddr), h->length) != 0) {
            TH_FAIL("case %u: a READ returned other bytes than the "
                    "victim's memory holds",
                    f->cases);
        }
        break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        if (h->length != 8 || (h->raddr & 7) || !fz_in_mr(f, h->raddr, 8) ||
            h->rkey != f->info.v.rkey) {
            TH_FAIL("case %u: an atomic at 0x%llx (length %llu, key 0x%x) "
                    "succeeded",
                    f->cases, (unsigned long long)h->raddr,
                    (unsigned long long)h->length, h->rkey);
        }
        TH_ASSERT_EQ(a->length, 8);
        w = (uint64_t *)fz_shadow_at(f, h->raddr);
        memcpy(&old, rdata, 8);
        TH_ASSERT_EQ(old, *w);
        if (h->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            *w = old + h->compare_add;
        } else if (old == h->compare_add) {
            *w = h->swap;
        }
        break;
    default:
        TH_FAIL("case %u: opcode %u succeeded", f->cases, h->opcode);
    }
}

/* a datagram the victim processed (its connection is alive after it):
 * taken if it is for the UD QP with its Q_Key and a receive is left;
 * placed after the 40 bytes of GRH if it fits */
static void fz_apply_ud(fz_t *f, const sv_net_hdr_t *h, const uint8_t *data)
{
    if (h->dst_qpn != f->info.ud_qpn || h->qkey != FZ_UD_QKEY ||
        f->ud_next >= FZ_UD_N) {
        return;
    }
    if (h->length + SV_GRH_LEN <= FZ_UD_SLOT) {
        memcpy(f->shadow + FZ_UD_OFF + f->ud_next * FZ_UD_SLOT + SV_GRH_LEN,
               data, h->length);
        ++f->ud_placed;
    }
    ++f->ud_next;
}

static const uint64_t fz_lengths[] = {0,
                                      1,
                                      7,
                                      8,
                                      9,
                                      40,
                                      472,
                                      473,
                                      1023,
                                      1024,
                                      1025,
                                      4095,
                                      4096,
                                      4097,
                                      65535,
                                      65536,
                                      65537,
                                      1ull << 31,
                                      (1ull << 31) + 1,
                                      1ull << 32,
                                      1ull << 63,
                                      ~0ull};

/* 1 to 3 mutations of a request; *cut: send it short and close */
static void fz_mutate(fz_t *f, sv_net_hdr_t *h, int *cut, int *garbage)
{
    fz_rng_t *r = &f->rng;
    int n       = 1 + (int)fz_below(r, 3), i;
    uint8_t *b  = (uint8_t *)h;

    for (i = 0; i < n; ++i) {
        switch (fz_below(r, 14)) {
        case 0:
        case 1:
            b[fz_below(r, sizeof(*h))] ^= (uint8_t)(1u << fz_below(r, 8));
            break;
        case 2:
            h->length = fz_lengths[fz_below(r, sizeof(fz_lengths) /
                                                       sizeof(fz_lengths[0]))];
            break;
        case 3: {
            static const int64_t d[] = {-1,
                                        -8,
                                        -4096,
                                        1,
                                        8,
                                        FZ_MR_LEN - 1,
                                        FZ_MR_LEN,
                                        FZ_MR_LEN + 1,
                                        FZ_MR_LEN - 8};

            h->raddr = f->info.v.addr +
                       (uint64_t)d[fz_below(r, sizeof(d) / sizeof(d[0]))];
            if (fz_below(r, 4) == 0) {
                h->raddr = fz_next(r);
            }
            break;
        }
        case 4:
            h->rkey = fz_below(r, 2) ? h->rkey ^ (1u << fz_below(r, 32)) :
                                       (uint32_t)fz_next(r);
            break;
        case 5:
            h->opcode = (uint8_t)fz_below(r, 256);
            break;
        case 6:
            h->kind = (uint8_t)fz_below(r, 11);
            break;
        case 7:
            if (fz_below(r, 2)) {
                h->src_qpn = (uint32_t)fz_next(r) & 0xffffff;
            } else {
                h->src_lid = (uint16_t)fz_next(r);
            }
            break;
        case 8:
            h->dst_qpn = fz_below(r, 2) ?
                                 f->info.ud_qpn :
                                 (fz_below(r, 2) ? f->info.v.qpn + 1 :
                                                   (uint32_t)fz_next(r));
            break;
        case 9:
            h->magic = (uint16_t)fz_next(r);
            break;
        case 10:
            h->qkey = fz_below(r, 2) ? FZ_UD_QKEY ^ 1 : (uint32_t)fz_next(r);
            break;
        case 11:
            h->rnr_retry  = (uint8_t)fz_below(r, 256);
            h->timeout_ns = fz_below(r, 2) ? 0 : fz_next(r);
            break;
        case 12:
            *cut = 1;
            break;
        case 13:
            *garbage = 1;
            break;
        }
    }
}

/* one request case: a valid frame, maybe mutated; sent, and its outcome
 * taken into the shadow */
static void fz_request(fz_t *f)
{
    static uint8_t data[FZ_MAXDATA], rdata[FZ_MR_LEN];
    fz_rng_t *r = &f->rng;
    int cut = 0, garbage = 0, kind, ret;
    sv_net_hdr_t h, a, probe;
    uint64_t len, off, pick = fz_below(r, 100);
    size_t i, sent;

    svt_wire_req(&h, IBV_WR_RDMA_WRITE, f->lid, SVT_WIRE_QPN, f->info.v.qpn,
                 ++f->seq);
    h.rkey       = f->info.v.rkey;
    h.timeout_ns = 5000000ull;
    h.sl         = (uint8_t)fz_below(r, 16);
    h.flags      = (uint8_t)fz_below(r, 2);
    h.imm        = (uint32_t)fz_next(r);
    len = fz_below(r, 4) ? fz_below(r, 257) : fz_below(r, FZ_MAXDATA + 1);
    if (pick < 25) {
        h.opcode = IBV_WR_RDMA_WRITE;
    } else if (pick < 33) {
        h.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    } else if (pick < 48) {
        h.opcode = IBV_WR_RDMA_READ;
    } else if (pick < 60) {
        h.opcode = IBV_WR_SEND;
        len      = fz_below(r, 12) ? fz_below(r, FZ_RQ_SLOT + 1) :
                                     fz_below(r, FZ_RQ_SLOT + 100);
    } else if (pick < 66) {
        h.opcode = IBV_WR_SEND_WITH_IMM;
        len      = fz_below(r, FZ_RQ_SLOT + 1);
    } else if (pick < 78) {
        h.opcode = fz_below(r, 2) ? IBV_WR_ATOMIC_FETCH_AND_ADD :
                                    IBV_WR_ATOMIC_CMP_AND_SWP;
        len      = 8;
    } else {
        h.kind    = SV_NET_REQ_UD;
        h.opcode  = fz_below(r, 2) ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM;
        h.dst_qpn = f->info.ud_qpn;
        h.qkey    = FZ_UD_QKEY;
        len       = fz_below(r, 8) ? fz_below(r, FZ_UD_SLOT - SV_GRH_LEN + 1) :
                                     fz_below(r, 700);
    }
    off = fz_below(r, FZ_MR_LEN - len + 1);
    if (h.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
        h.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
        off &= ~7ull;
        memcpy(&h.compare_add, f->shadow + FZ_MR_OFF + off, 8);
        if (fz_below(r, 2)) {
            h.compare_add = fz_next(r);
        }
        h.swap = fz_next(r);
    }
    h.length = len;
    h.raddr  = f->info.v.addr + off;
    for (i = 0; i < len; ++i) {
        data[i] = (uint8_t)fz_next(r);
    }
    if (fz_below(r, 2)) {
        fz_mutate(f, &h, &cut, &garbage);
        ++f->mutated;
    }
    if (garbage) {
        for (i = 0; i < sizeof(h); ++i) {
            ((uint8_t *)&h)[i] = (uint8_t)fz_next(r);
        }
    }
    kind = h.kind;
    if (getenv("SVT_FUZZ_DEBUG") != NULL) {
        th_log("case %u: kind %u op %u len %llu raddr +0x%llx rkey %s "
               "src 0x%x dst 0x%x cut %d garbage %d",
               f->cases, h.kind, h.opcode, (unsigned long long)h.length,
               (unsigned long long)(h.raddr - f->info.v.addr),
               h.rkey == f->info.v.rkey ? "ok" : "bad", h.src_qpn, h.dst_qpn,
               cut, garbage);
    }

    /* what goes on the wire: the header, and as many bytes as it announces
     * (never more than we have: such a frame is cut) */
    if (fz_has_data(&h) && h.length > FZ_MAXDATA) {
        cut = 1;
    }
    if (cut) {
        /* a header, whole or not, with no payload, then the connection
         * goes: no byte of data reaches the victim */
        /* a whole header is a whole request unless data should follow */
        sent = (fz_has_data(&h) && h.length > 0 && fz_below(r, 2)) ?
                       sizeof(h) :
                       fz_below(r, sizeof(h));
        if (send(f->fd, &h, sent, MSG_NOSIGNAL) < 0) {
            /* the victim closed first: fine */
        }
        /* the victim ends what it began of this frame, then closes: only
         * then may it reset its QPs */
        shutdown(f->fd, SHUT_WR);
        if (!svt_wire_closed(f->fd, FZ_WAIT_S)) {
            TH_FAIL("case %u: a frame cut short did not end its connection "
                    "in %.0f s",
                    f->cases, FZ_WAIT_S);
        }
        ++f->closed;
        fz_reset(f);
        return;
    }
    if (svt_wire_send(f->fd, &h, data, fz_has_data(&h) ? h.length : 0) != 0) {
        ++f->closed;
        fz_reset(f);
        return;
    }
    if (kind != SV_NET_REQ_RC) {
        /* not answered: a READ of 8 bytes behind it shows whether the
         * victim took it (it is served in order) or closed */
        svt_wire_req(&probe, IBV_WR_RDMA_READ, f->lid, SVT_WIRE_QPN,
                     f->info.v.qpn, ++f->seq);
        probe.rkey   = f->info.v.rkey;
        probe.raddr  = f->info.v.addr;
        probe.length = 8;
        if (svt_wire_send(f->fd, &probe, NULL, 0) != 0) {
            ++f->closed;
            fz_reset(f);
            return;
        }
        ret = svt_wire_answer(f->fd, &a, rdata, sizeof(rdata), FZ_WAIT_S);
        if (ret == -1) {
            TH_FAIL("case %u: no answer and no close in %.0f s (kind %u)",
                    f->cases, FZ_WAIT_S, kind);
        }
        if (ret == 0) {
            ++f->closed;
            fz_reset(f);
            return;
        }
        if (kind == SV_NET_REQ_UD) {
            ++f->ud_sent;
            fz_apply_ud(f, &h, data);
        }
        TH_ASSERT_EQ(a.seq, probe.seq);
        fz_apply_rc(f, &probe, NULL, &a, rdata);
        if (a.status != IBV_WC_SUCCESS) {
            fz_reset(f);
        }
        return;
    }
    ret = svt_wire_answer(f->fd, &a, rdata, sizeof(rdata), FZ_WAIT_S);
    if (ret == -1) {
        TH_FAIL("case %u: no answer and no close in %.0f s (opcode %u, "
                "length %llu)",
                f->cases, FZ_WAIT_S, h.opcode, (unsigned long long)h.length);
    }
    if (ret == 0) {
        ++f->closed;
        fz_reset(f);
        return;
    }
    ++f->answered;
    TH_ASSERT_EQ(a.kind, SV_NET_ANSWER);
    TH_ASSERT_EQ(a.seq, h.seq);
    TH_ASSERT_EQ(a.src_qpn, h.src_qpn);
    ++f->status_count[a.status < 32 ? a.status : 31];
    fz_apply_rc(f, &h, data, &a, rdata);
    if (a.status == IBV_WC_SUCCESS) {
        ++f->success;
    } else {
        ++f->errors;
        fz_reset(f);
    }
}

/* a new connection with a mutated handshake: refused or welcomed, never a
 * hang; closed either way */
static void fz_handshake(fz_t *f)
{
    fz_rng_t *r = &f->rng;
    uint8_t key[32];
    uint16_t lid = f->lid, slot = SVT_WIRE_SLOT + 1, dlid = f->info.v.lid;
    uint16_t dslot = (uint16_t)(f->info.v.qpn >> SV_QPN_SLOT_SHIFT);
    struct in_addr me;
    int fd, i;

    memcpy(key, f->key, sizeof(key));
    switch (fz_below(r, 6)) {
    case 0:
        key[fz_below(r, 32)] ^= (uint8_t)(1u << fz_below(r, 8));
        break;
    case 1:
        lid ^= (uint16_t)(1u << fz_below(r, 16));
        break;
    case 2:
        slot = (uint16_t)fz_next(r);
        break;
    case 3:
        dlid = (uint16_t)fz_next(r);
        break;
    case 4:
        dslot = (uint16_t)fz_next(r);
        break;
    default:
        break;
    }
    TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &me), 1);
    fd = svt_wire_connect(me.s_addr, f->info.v.ip, f->info.v.port);
    TH_ASSERT(fd >= 0);
    if (fz_below(r, 4) == 0) {
        /* random bytes instead of a hello */
        uint8_t junk[64];

        for (i = 0; i < 64; ++i) {
            junk[i] = (uint8_t)fz_next(r);
        }
        if (send(fd, junk, 1 + fz_below(r, 64), MSG_NOSIGNAL) < 0) {
            /* closed already */
        }
    } else if (svt_wire_handshake(fd, key, lid, slot, dlid, dslot, NULL)) {
        ++f->hs_welcomed;
    }
    close(fd);
    ++f->hs_cases;
}

static void fz_fuzzer(th_oob_t *oob, uint16_t victim_lid)
{
    const char *s_seed  = getenv("SVT_FUZZ_SEED");
    const char *s_cases = getenv("SVT_FUZZ_CASES");
    unsigned ncases     = s_cases ? (unsigned)atoi(s_cases) : 3000;
    int debug           = getenv("SVT_FUZZ_DEBUG") != NULL;
    double t0           = th_time();
    fz_t *f             = calloc(1, sizeof(*f));
    char q;

    (void)victim_lid;
    TH_ASSERT(f != NULL);
    f->oob   = oob;
    f->rng.s = s_seed ? strtoull(s_seed, NULL, 0) : 0x5eedf00dull;
    if (f->rng.s == 0) {
        f->rng.s = 1;
    }
    th_log("fuzz seed 0x%llx, %u cases", (unsigned long long)f->rng.s, ncases);
    th_oob_recv(oob, 0, &f->info, sizeof(f->info));
    TH_ASSERT_EQ(svt_wire_key(f->key), 0);
    f->lid    = (uint16_t)(ntohl(inet_addr(getenv("SOFTVERBS_NET"))) & 0xffff);
    f->shadow = malloc(FZ_BLOCK);
    TH_ASSERT(f->shadow != NULL);
    th_fill_pattern(f->shadow, FZ_BLOCK, FZ_PATTERN);
    f->fd = svt_wire_open(&f->info.v, f->key, f->lid, SVT_WIRE_SLOT);
    TH_ASSERT(f->fd >= 0);

    for (f->cases = 0; f->cases < ncases; ++f->cases) {
        if (th_time() - t0 > 45) {
            th_log("stopped after %u cases: 45 s", f->cases);
            break;
        }
        if (fz_below(&f->rng, 100) < 4) {
            fz_handshake(f);
        } else {
            fz_request(f);
        }
        if (f->cases % 500 == 499 || debug) {
            fz_compare(f);
        }
    }
    fz_compare(f);
    th_log("%u cases in %.1f s: %u mutated, %u answered (%u success, %u "
           "errors: rem_inv_req %u, rem_access %u, rem_op %u, retry_exc %u, "
           "rnr_retry_exc %u, flush %u), %u connections closed by the "
           "victim or cut, %u resets, %u datagrams (%u placed), %u "
           "handshakes (%u welcomed), %u memory comparisons",
           f->cases, th_time() - t0, f->mutated, f->answered, f->success,
           f->errors, f->status_count[IBV_WC_REM_INV_REQ_ERR],
           f->status_count[IBV_WC_REM_ACCESS_ERR],
           f->status_count[IBV_WC_REM_OP_ERR],
           f->status_count[IBV_WC_RETRY_EXC_ERR],
           f->status_count[IBV_WC_RNR_RETRY_EXC_ERR],
           f->status_count[IBV_WC_WR_FLUSH_ERR], f->closed, f->resets,
           f->ud_sent, f->ud_placed, f->hs_cases, f->hs_welcomed, f->compares);
    TH_ASSERT_GT(f->success, f->cases / 10);
    TH_ASSERT_GT(f->errors + f->closed, f->cases / 20);
    close(f->fd);
    th_oob_send(oob, 0, "Q", 1);
    th_oob_recv(oob, 0, &q, 1); /* the victim is still there */
    free(f->shadow);
    free(f);
}

static void fz_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct in_addr in;
    uint16_t mine, theirs;

    (void)nprocs;
    (void)arg;
    TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &in), 1);
    mine = (uint16_t)(ntohl(in.s_addr) & 0xffff);
    th_oob_send(oob, !rank, &mine, sizeof(mine));
    th_oob_recv(oob, !rank, &theirs, sizeof(theirs));
    if (rank == 0) {
        /* holds are bounded by this, whatever a frame asks */
        setenv("SOFTVERBS_NET_MAX_HOLD_MS", "20", 1);
        fz_victim(oob, theirs);
    } else {
        fz_fuzzer(oob, theirs);
    }
}

TH_TEST_TIMEOUT(softverbs_sec, wire_fuzz, 120)
{
    char path[128], *out = NULL;

    if (geteuid() != 0) {
        TH_SKIP("needs root (network namespaces)");
    }
    svt_net_hosts();
    snprintf(fz_dir, sizeof(fz_dir), "/tmp/svt-fuzz-XXXXXX");
    TH_ASSERT(mkdtemp(fz_dir) != NULL);
    snprintf(path, sizeof(path), "%s/secret", fz_dir);
    setenv("SOFTVERBS_NET_SECRET_FILE", path, 1);
    th_run_procs(2, fz_rank, NULL);
    th_run_cmd(&out, "rm -rf '%s'", fz_dir);
    free(out);
}
