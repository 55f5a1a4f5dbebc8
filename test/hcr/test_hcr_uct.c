/*
 * UCT conformance suite for hcr, run side by side on rc_verbs as the
 * reference: every test body takes the transport name as its argument.
 * Two ranks: rank 0 initiates, rank 1 owns the target memory and progresses.
 * Every payload is a seeded pattern, checked on arrival.
 */
#include "th_ucx.h"


/* UCT's v2 API header (uct/api/v2/uct_v2.h) is not installed by UCX 1.13.1;
 * these match the declarations the glue patch adds there */
#define UCT_PUT_NOTIFY_DATA_BITS (32 - UCT_AM_ID_BITS)
typedef struct {
    uint32_t notify_data;
    uint32_t length;
} __attribute__((packed)) uct_put_notify_hdr_t;
int uct_iface_is_put_notify_supported(uct_iface_h iface);
ucs_status_t
uct_ep_put_notify_zcopy(uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                        uint64_t remote_addr, uct_rkey_t rkey, uint8_t am_id,
                        uint32_t notify_data, uct_completion_t *comp);
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#define HCR_T_AM_ID     7
#define HCR_T_NOTIFY_ID 9
#define HCR_T_BUF_SIZE  (4u * 1024 * 1024 + 64)

/* ---- fixture: two ranks, one ep each way, a registered buffer each ------- */

typedef struct {
    th_uct_t    uct;
    uct_ep_h    ep;
    uint8_t     *buf;      /* local, registered */
    uct_mem_h   memh;
    uint64_t    raddr;     /* peer's buffer */
    uct_rkey_bundle_t rkey;
    th_oob_t    *oob;
    int         rank;
} hcr_t_ctx_t;

/* set before hcr_t_setup(): open the iface with an error handler (peer
 * failure mode) that records the first error here */
static int          hcr_t_err_mode;
static ucs_status_t hcr_t_ep_error = UCS_OK;

static ucs_status_t hcr_t_err_cb(void *arg, uct_ep_h ep, ucs_status_t status)
{
    if (hcr_t_ep_error == UCS_OK) {
        hcr_t_ep_error = status;
    }
    return UCS_OK;
}

static void hcr_t_setup(hcr_t_ctx_t *ctx, th_oob_t *oob, int rank,
                        const char *tl)
{
    uint8_t rkey_buf[256];
    uint64_t addr;

    if (!th_have_verbs_device("softverbs") && !th_have_verbs_device("mlx")) {
        TH_SKIP("no verbs device (softverbs not preloaded)");
    }
    if (th_uct_open(&ctx->uct, tl, NULL) != UCS_OK) {
        TH_SKIP("no device for transport %s", tl);
    }
    if (hcr_t_err_mode) {
        setenv("UCX_LOG_LEVEL", "fatal", 1); /* expected errors */
        th_uct_iface_open(&ctx->uct, hcr_t_err_cb, NULL);
        TH_ASSERT(ctx->uct.iface_attr.cap.flags &
                  UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE);
    }
    ctx->oob  = oob;
    ctx->rank = rank;
    ctx->buf  = aligned_alloc(4096, HCR_T_BUF_SIZE);
    TH_ASSERT(ctx->buf != NULL);
    memset(ctx->buf, 0, HCR_T_BUF_SIZE);
    TH_ASSERT_UCS_OK(uct_md_mem_reg(ctx->uct.md, ctx->buf, HCR_T_BUF_SIZE,
                                    UCT_MD_MEM_ACCESS_ALL, &ctx->memh));
    TH_ASSERT(ctx->uct.md_attr.rkey_packed_size <= sizeof(rkey_buf));
    TH_ASSERT_UCS_OK(uct_md_mkey_pack(ctx->uct.md, ctx->memh, rkey_buf));
    addr = (uintptr_t)ctx->buf;
    th_oob_send(oob, 1 - rank, &addr, sizeof(addr));
    th_oob_send(oob, 1 - rank, rkey_buf, ctx->uct.md_attr.rkey_packed_size);
    th_oob_recv(oob, 1 - rank, &ctx->raddr, sizeof(ctx->raddr));
    th_oob_recv(oob, 1 - rank, rkey_buf, ctx->uct.md_attr.rkey_packed_size);
    TH_ASSERT_UCS_OK(uct_rkey_unpack(ctx->uct.component, rkey_buf,
                                     &ctx->rkey));
    ctx->ep = th_uct_connect(&ctx->uct, oob, 1 - rank);
    th_oob_barrier(oob);
}

/* the target progresses until the initiator says it is done */
static void hcr_t_serve(hcr_t_ctx_t *ctx)
{
    char done;

    th_uct_oob_recv(&ctx->uct, ctx->oob, 0, &done, 1);
}

static void hcr_t_done(hcr_t_ctx_t *ctx)
{
    th_uct_flush(&ctx->uct, ctx->ep);
    th_oob_send(ctx->oob, 1, "d", 1);
}

static void hcr_t_teardown(hcr_t_ctx_t *ctx)
{
    double until;

    th_oob_barrier(ctx->oob);
    uct_ep_destroy(ctx->ep);
    /* let the QP's LAST_WQE_REACHED event be handled before the iface and
     * worker go away: UCX 1.13.1's async thread can otherwise schedule its
     * callback on a destroyed worker (seen on rc_verbs and hcr alike) */
    until = th_time() + 0.05;
    while (th_time() < until) {
        uct_worker_progress(ctx->uct.worker);
    }
    uct_rkey_release(ctx->uct.component, &ctx->rkey);
    uct_md_mem_dereg(ctx->uct.md, ctx->memh);
    free(ctx->buf);
    th_uct_close(&ctx->uct);
}

/* completion that counts */
typedef struct {
    uct_completion_t super;
    ucs_status_t     status;
} hcr_t_comp_t;

static void hcr_t_comp_cb(uct_completion_t *self)
{
    hcr_t_comp_t *comp = ucs_container_of(self, hcr_t_comp_t, super);

    comp->status = self->status;
}

static void hcr_t_comp_init(hcr_t_comp_t *comp)
{
    comp->super.func   = hcr_t_comp_cb;
    comp->super.count  = 1;
    comp->super.status = UCS_OK;
    comp->status       = UCS_INPROGRESS;
}

/* wait for an operation that returned status and used comp */
static void hcr_t_wait(hcr_t_ctx_t *ctx, ucs_status_t status,
                       hcr_t_comp_t *comp)
{
    double deadline = th_time() + 30.0;

    if (status == UCS_OK) {
        return;
    }
    TH_ASSERT_EQ(status, UCS_INPROGRESS);
    while (comp->status == UCS_INPROGRESS) {
        uct_worker_progress(ctx->uct.worker);
        TH_ASSERT(th_time() < deadline);
    }
    TH_ASSERT_UCS_OK(comp->status);
}

/* retry an operation while the transport is out of resources */
#define HCR_T_RETRY(_ctx, _status, _expr) \
    do { \
        double _dl = th_time() + 30.0; \
        for (;;) { \
            _status = (_expr); \
            if (_status != UCS_ERR_NO_RESOURCE) { \
                break; \
            } \
            uct_worker_progress((_ctx)->uct.worker); \
            TH_ASSERT(th_time() < _dl); \
        } \
    } while (0)

/* sizes 0..max: small ones, powers of two +-1, and max */
static size_t hcr_t_sizes(size_t max, size_t *sizes)
{
    size_t n = 0, s;

    for (s = 0; s <= 8; ++s) {
        if (s <= max) {
            sizes[n++] = s;
        }
    }
    for (s = 16; s < max; s *= 4) {
        sizes[n++] = s - 1;
        sizes[n++] = s + 3;
    }
    sizes[n++] = max;
    return n;
}

static size_t hcr_t_pack(void *dest, void *arg)
{
    size_t *len = arg;

    th_fill_pattern(dest, len[0], len[1]);
    return len[0];
}

typedef struct {
    void   *dest;
    size_t length;
} hcr_t_unpack_arg_t;

static void hcr_t_unpack(void *arg, const void *data, size_t length)
{
    hcr_t_unpack_arg_t *u = arg;

    memcpy(u->dest, data, length);
    u->length = length;
}

/* ---- put / get: every size and unaligned offsets, checked at the target -- */

enum { HCR_T_PUT_SHORT, HCR_T_PUT_BCOPY, HCR_T_PUT_ZCOPY, HCR_T_GET_BCOPY,
       HCR_T_GET_ZCOPY, HCR_T_OP_LAST };

static const char *hcr_t_op_names[] = {"put_short", "put_bcopy", "put_zcopy",
                                       "get_bcopy", "get_zcopy"};

static size_t hcr_t_op_max(hcr_t_ctx_t *ctx, int op)
{
    uct_iface_attr_t *a = &ctx->uct.iface_attr;

    switch (op) {
    case HCR_T_PUT_SHORT: return a->cap.put.max_short;
    case HCR_T_PUT_BCOPY: return a->cap.put.max_bcopy;
    case HCR_T_PUT_ZCOPY: return TH_MIN(a->cap.put.max_zcopy, 1u << 22);
    case HCR_T_GET_BCOPY: return a->cap.get.max_bcopy;
    default:              return TH_MIN(a->cap.get.max_zcopy, 1u << 22);
    }
}

static void hcr_t_rma_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    size_t sizes[128], n, i, length, lens[2], min;
    hcr_t_unpack_arg_t unpack;
    uint64_t seed, check[2];
    hcr_t_comp_t comp;
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    uct_iov_t iov;
    int op, misalign;
    uint8_t *src;

    hcr_t_setup(&ctx, oob, rank, arg);
    src = malloc(HCR_T_BUF_SIZE);
    TH_ASSERT(src != NULL);

    for (op = 0; op < HCR_T_OP_LAST; ++op) {
        n   = hcr_t_sizes(hcr_t_op_max(&ctx, op), sizes);
        min = (op == HCR_T_GET_ZCOPY) ? 
              ctx.uct.iface_attr.cap.get.min_zcopy : 0;
        for (i = 0; i < n; ++i) {
            length   = sizes[i];
            misalign = (int)(i % 7);
            seed     = op * 1000 + i;
            if ((length < min) || (length + misalign > HCR_T_BUF_SIZE / 2)) {
                continue;
            }
            if (rank == 1) {
                /* target: for gets, provide the data; for puts, check it */
                if (op >= HCR_T_GET_BCOPY) {
                    th_fill_pattern(ctx.buf + misalign, length, seed);
                    th_oob_send(oob, 0, "f", 1);
                }
                th_uct_oob_recv(&ctx.uct, oob, 0, check, sizeof(check));
                if (op < HCR_T_GET_BCOPY) {
                    if (th_checksum(ctx.buf + misalign, length) != check[0]) {
                        TH_FAIL("%s %s length %zu misalign %d: bad data",
                                (char*)arg, hcr_t_op_names[op], length,
                                misalign);
                    }
                }
                th_oob_send(oob, 0, "k", 1);
                continue;
            }

            /* initiator: source buffer is the registered one, unaligned */
            if (op >= HCR_T_GET_BCOPY) {
                char filled;
                th_uct_oob_recv(&ctx.uct, oob, 1, &filled, 1);
            }
            if (op >= HCR_T_GET_BCOPY) {
                /* the get's destination (and the byte after it) holds
                 * anything but the target's pattern: a get that moved
                 * nothing, or too much, shows */
                memset(ctx.buf + 1 + misalign, 0xa5, length + 1);
                memset(src, 0xa5, length + 1);
            } else {
                th_fill_pattern(ctx.buf + 1 + misalign, length, seed);
            }
            hcr_t_comp_init(&comp);
            lens[0] = length;
            lens[1] = seed;
            iov.buffer = ctx.buf + 1 + misalign;
            iov.length = length;
            iov.memh   = ctx.memh;
            iov.stride = 0;
            iov.count  = 1;
            unpack.dest   = src;
            unpack.length = 0;
            switch (op) {
            case HCR_T_PUT_SHORT:
                HCR_T_RETRY(&ctx, status,
                            uct_ep_put_short(ctx.ep, iov.buffer, length,
                                             ctx.raddr + misalign,
                                             ctx.rkey.rkey));
                break;
            case HCR_T_PUT_BCOPY: {
                ssize_t ret;
                HCR_T_RETRY(&ctx, status,
                            ((ret = uct_ep_put_bcopy(ctx.ep, hcr_t_pack, lens,
                                                     ctx.raddr + misalign,
                                                     ctx.rkey.rkey)) < 0) ?
                            (ucs_status_t)ret : UCS_OK);
                if (status == UCS_OK) {
                    TH_ASSERT_EQ((size_t)ret, length);
                }
                break;
            }
            case HCR_T_PUT_ZCOPY:
                HCR_T_RETRY(&ctx, status,
                            uct_ep_put_zcopy(ctx.ep, &iov, 1,
                                             ctx.raddr + misalign,
                                             ctx.rkey.rkey, &comp.super));
                break;
            case HCR_T_GET_BCOPY:
                HCR_T_RETRY(&ctx, status,
                            uct_ep_get_bcopy(ctx.ep, hcr_t_unpack, &unpack,
                                             length, ctx.raddr + misalign,
                                             ctx.rkey.rkey, &comp.super));
                break;
            default:
                HCR_T_RETRY(&ctx, status,
                            uct_ep_get_zcopy(ctx.ep, &iov, 1,
                                             ctx.raddr + misalign,
                                             ctx.rkey.rkey, &comp.super));
                break;
            }
            hcr_t_wait(&ctx, status, &comp);
            th_uct_flush(&ctx.uct, ctx.ep);
            if (op >= HCR_T_GET_BCOPY) {
                /* the data read must be the target's pattern */
                uint8_t *got = (op == HCR_T_GET_BCOPY) ? src :
                               ctx.buf + 1 + misalign;
                uint8_t *exp = src + HCR_T_BUF_SIZE / 2;
                th_fill_pattern(exp, length, seed);
                if ((op == HCR_T_GET_BCOPY) && (unpack.length != length) &&
                    (length != 0)) {
                    TH_FAIL("get_bcopy unpacked %zu of %zu", unpack.length,
                            length);
                }
                if (memcmp(got, exp, length)) {
                    TH_FAIL("%s %s length %zu misalign %d: bad data",
                            (char*)arg, hcr_t_op_names[op], length, misalign);
                }
                if (got[length] != 0xa5) {
                    TH_FAIL("%s %s length %zu misalign %d: wrote past the "
                            "end",
                            (char *)arg, hcr_t_op_names[op], length, misalign);
                }
            }
            check[0] = th_checksum(ctx.buf + 1 + misalign, length);
            check[1] = length;
            th_oob_send(oob, 1, check, sizeof(check));
            th_uct_oob_recv(&ctx.uct, oob, 1, &check, 1);
        }
    }

    if (rank == 0) {
        hcr_t_done(&ctx);
    } else {
        hcr_t_serve(&ctx);
    }
    free(src);
    hcr_t_teardown(&ctx);
}

/* ---- active messages: short, bcopy, zcopy, every size, in order --------- */

/* every AM: uint32 seq, uint32 len, then len bytes of pattern seeded by seq */
typedef struct {
    int received;
    int errors;
} hcr_t_am_rx_t;

static ucs_status_t hcr_t_am_cb(void *arg, void *data, size_t length,
                                unsigned flags)
{
    hcr_t_am_rx_t *rx = arg;
    uint32_t hdr[2];
    uint8_t *exp;

    memcpy(hdr, data, sizeof(hdr));
    exp = malloc(hdr[1] + 1);
    th_fill_pattern(exp, hdr[1], hdr[0]);
    if ((length != 8 + hdr[1]) || (hdr[0] != (uint32_t)rx->received) ||
        memcmp(exp, (char*)data + 8, hdr[1])) {
        th_log("bad AM %d: seq %u len %u length %zu", rx->received, hdr[0],
               hdr[1], length);
        ++rx->errors;
    }
    free(exp);
    ++rx->received;
    return UCS_OK;
}

static size_t hcr_t_am_pack(void *dest, void *arg)
{
    uint32_t *hdr = arg;

    memcpy(dest, hdr, 8);
    th_fill_pattern((char*)dest + 8, hdr[1], hdr[0]);
    return 8 + hdr[1];
}

static void hcr_t_am_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    hcr_t_am_rx_t rx = {0};
    size_t sizes[128], n, i, max[3];
    uct_iface_attr_t *a;
    uint32_t hdr[2];
    hcr_t_comp_t comp;
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    uint32_t seq = 0;
    uct_iov_t iov;
    uint64_t h64;
    uint8_t *tmp;
    ssize_t ret;
    int kind, total = 0;

    hcr_t_setup(&ctx, oob, rank, arg);
    a = &ctx.uct.iface_attr;
    TH_ASSERT_UCS_OK(uct_iface_set_am_handler(ctx.uct.iface, HCR_T_AM_ID,
                                              hcr_t_am_cb, &rx, 0));
    max[0] = a->cap.am.max_short - 8;
    max[1] = a->cap.am.max_bcopy - 8;
    max[2] = TH_MIN(a->cap.am.max_zcopy - 8, 1u << 20);
    for (kind = 0; kind < 3; ++kind) {
        total += hcr_t_sizes(max[kind], sizes);
    }
    th_oob_barrier(oob);

    if (rank == 1) {
        double deadline = th_time() + 60.0;
        while (rx.received < total) {
            uct_worker_progress(ctx.uct.worker);
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT_EQ(rx.errors, 0);
        hcr_t_serve(&ctx);
        hcr_t_teardown(&ctx);
        return;
    }

    tmp = malloc(1u << 20);
    for (kind = 0; kind < 3; ++kind) {
        n = hcr_t_sizes(max[kind], sizes);
        for (i = 0; i < n; ++i, ++seq) {
            hdr[0] = seq;
            hdr[1] = sizes[i];
            if (kind == 0) {
                h64 = hdr[0] | ((uint64_t)hdr[1] << 32);
                th_fill_pattern(tmp, sizes[i], seq);
                HCR_T_RETRY(&ctx, status,
                            uct_ep_am_short(ctx.ep, HCR_T_AM_ID, h64, tmp,
                                            sizes[i]));
            } else if (kind == 1) {
                HCR_T_RETRY(&ctx, status,
                            ((ret = uct_ep_am_bcopy(ctx.ep, HCR_T_AM_ID,
                                                    hcr_t_am_pack, hdr,
                                                    0)) < 0) ?
                            (ucs_status_t)ret : UCS_OK);
            } else {
                /* data unaligned in registered memory */
                th_fill_pattern(ctx.buf + 3, sizes[i], seq);
                iov.buffer = ctx.buf + 3;
                iov.length = sizes[i];
                iov.memh   = ctx.memh;
                iov.stride = 0;
                iov.count  = 1;
                hcr_t_comp_init(&comp);
                HCR_T_RETRY(&ctx, status,
                            uct_ep_am_zcopy(ctx.ep, HCR_T_AM_ID, hdr, 8,
                                            &iov, 1, 0, &comp.super));
                hcr_t_wait(&ctx, status, &comp);
                continue;
            }
            TH_ASSERT_UCS_OK(status);
        }
    }
    free(tmp);
    hcr_t_done(&ctx);
    hcr_t_teardown(&ctx);
}

/* ---- atomics: add, fetch-add, cswap; results checked -------------------- */

static void hcr_t_atomic_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    uint64_t *target, result, expect = 100, check;
    hcr_t_comp_t comp;
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    int i;

    hcr_t_setup(&ctx, oob, rank, arg);
    target  = (uint64_t*)ctx.buf;
    *target = 100;
    th_oob_barrier(oob);
    if (!(ctx.uct.iface_attr.cap.atomic64.op_flags &
          UCS_BIT(UCT_ATOMIC_OP_ADD))) {
        TH_SKIP("%s: no 64-bit atomic add", (char*)arg);
    }

    if (rank == 1) {
        hcr_t_serve(&ctx);
        TH_ASSERT_EQ(*target, 100 + 10 * 3 + 10 * 5 + 1000 - 180 + 0);
        hcr_t_teardown(&ctx);
        return;
    }

    for (i = 0; i < 10; ++i) {
        HCR_T_RETRY(&ctx, status,
                    uct_ep_atomic64_post(ctx.ep, UCT_ATOMIC_OP_ADD, 3,
                                         ctx.raddr, ctx.rkey.rkey));
        TH_ASSERT_UCS_OK(status);
        expect += 3;
    }
    th_uct_flush(&ctx.uct, ctx.ep);
    for (i = 0; i < 10; ++i) {
        hcr_t_comp_init(&comp);
        HCR_T_RETRY(&ctx, status,
                    uct_ep_atomic64_fetch(ctx.ep, UCT_ATOMIC_OP_ADD, 5,
                                          &result, ctx.raddr, ctx.rkey.rkey,
                                          &comp.super));
        hcr_t_wait(&ctx, status, &comp);
        TH_ASSERT_EQ(result, expect);
        expect += 5;
    }
    /* cswap: a failing compare leaves the value, a matching one swaps */
    hcr_t_comp_init(&comp);
    HCR_T_RETRY(&ctx, status,
                uct_ep_atomic_cswap64(ctx.ep, expect + 1, 7, ctx.raddr,
                                      ctx.rkey.rkey, &result, &comp.super));
    hcr_t_wait(&ctx, status, &comp);
    TH_ASSERT_EQ(result, expect);
    hcr_t_comp_init(&comp);
    HCR_T_RETRY(&ctx, status,
                uct_ep_atomic_cswap64(ctx.ep, expect, expect + 1000 - 180,
                                      ctx.raddr, ctx.rkey.rkey, &result,
                                      &comp.super));
    hcr_t_wait(&ctx, status, &comp);
    TH_ASSERT_EQ(result, expect);
    check = 0;
    (void)check;
    hcr_t_done(&ctx);
    hcr_t_teardown(&ctx);
}

/* ---- ordering: puts then an AM on one ep; fence; flush -------------------- */

typedef struct {
    hcr_t_ctx_t *ctx;
    int         received;
    int         errors;
    size_t      length;
} hcr_t_order_rx_t;

/* on the AM, every earlier put of the same ep must be visible */
static ucs_status_t hcr_t_order_cb(void *arg, void *data, size_t length,
                                   unsigned flags)
{
    hcr_t_order_rx_t *rx = arg;
    uint64_t seed;

    memcpy(&seed, data, sizeof(seed));
    if (th_checksum(rx->ctx->buf + (seed - 77) * rx->length, rx->length) !=
        ({ uint8_t *t = malloc(rx->length); uint64_t c;
           th_fill_pattern(t, rx->length, seed);
           c = th_checksum(t, rx->length); free(t); c; })) {
        th_log("AM %d overtook its put", rx->received);
        ++rx->errors;
    }
    ++rx->received;
    return UCS_OK;
}

static void hcr_t_order_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    const size_t length = 65536;
    hcr_t_order_rx_t rx = {0};
    ucs_status_t status;
    hcr_t_comp_t comp;
    hcr_t_ctx_t ctx;
    uint64_t seed;
    uct_iov_t iov;
    int i, use_fence;
    const int count = 50;
    ucs_status_t put_status;

    hcr_t_setup(&ctx, oob, rank, arg);
    rx.ctx    = &ctx;
    rx.length = length;
    TH_ASSERT_UCS_OK(uct_iface_set_am_handler(ctx.uct.iface, HCR_T_AM_ID,
                                              hcr_t_order_cb, &rx, 0));
    th_oob_barrier(oob);
    if (rank == 1) {
        double deadline = th_time() + 60.0;
        while (rx.received < count) {
            uct_worker_progress(ctx.uct.worker);
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT_EQ(rx.errors, 0);
        hcr_t_serve(&ctx);
        hcr_t_teardown(&ctx);
        return;
    }

    for (i = 0; i < count; ++i) {
        /* each round: a put of a new pattern (source buffer per round),
         * optionally a fence, then the AM that names the pattern */
        seed      = 77 + i;
        use_fence = i & 1;
        th_fill_pattern(ctx.buf + length * i, length, seed);
        iov.buffer = ctx.buf + length * i;
        iov.length = length;
        iov.memh   = ctx.memh;
        iov.stride = 0;
        iov.count  = 1;
        hcr_t_comp_init(&comp);
        HCR_T_RETRY(&ctx, put_status,
                    uct_ep_put_zcopy(ctx.ep, &iov, 1, ctx.raddr + length * i,
                                     ctx.rkey.rkey, &comp.super));
        if (use_fence) {
            TH_ASSERT_UCS_OK(uct_ep_fence(ctx.ep, 0));
        }
        HCR_T_RETRY(&ctx, status,
                    uct_ep_am_short(ctx.ep, HCR_T_AM_ID, seed, NULL, 0));
        TH_ASSERT_UCS_OK(status);
        hcr_t_wait(&ctx, put_status, &comp);
    }
    hcr_t_done(&ctx);
    hcr_t_teardown(&ctx);
}

/* ---- pending queue under resource exhaustion ----------------------------- */

#define HCR_T_PENDING_COUNT 2000

typedef struct {
    uct_pending_req_t super;
    hcr_t_ctx_t       *ctx;
    uint32_t          *seq;
    int               dispatched;
} hcr_t_pending_t;

static ucs_status_t hcr_t_send_one(hcr_t_ctx_t *ctx, uint32_t seq)
{
    uint32_t hdr[2] = {seq, 64};
    ssize_t ret;

    ret = uct_ep_am_bcopy(ctx->ep, HCR_T_AM_ID, hcr_t_am_pack, hdr, 0);
    return (ret < 0) ? (ucs_status_t)ret : UCS_OK;
}

/* sends as many as it can; stays queued while resources are short */
static ucs_status_t hcr_t_pending_cb(uct_pending_req_t *self)
{
    hcr_t_pending_t *req = ucs_container_of(self, hcr_t_pending_t, super);

    ++req->dispatched;
    while (*req->seq < HCR_T_PENDING_COUNT) {
        if (hcr_t_send_one(req->ctx, *req->seq) != UCS_OK) {
            return UCS_ERR_NO_RESOURCE;
        }
        ++*req->seq;
    }
    return UCS_OK;
}

static void hcr_t_pending_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    hcr_t_am_rx_t rx = {0};
    hcr_t_pending_t req;
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    uint32_t seq = 0;
    int exhausted = 0;
    double deadline;

    hcr_t_setup(&ctx, oob, rank, arg);
    TH_ASSERT_UCS_OK(uct_iface_set_am_handler(ctx.uct.iface, HCR_T_AM_ID,
                                              hcr_t_am_cb, &rx, 0));
    th_oob_barrier(oob);
    deadline = th_time() + 60.0;
    if (rank == 1) {
        while (rx.received < HCR_T_PENDING_COUNT) {
            uct_worker_progress(ctx.uct.worker);
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT_EQ(rx.errors, 0);
        hcr_t_serve(&ctx);
        hcr_t_teardown(&ctx);
        return;
    }

    /* no progress: the send queue or the credits run out */
    while (seq < HCR_T_PENDING_COUNT) {
        status = hcr_t_send_one(&ctx, seq);
        if (status == UCS_ERR_NO_RESOURCE) {
            exhausted = 1;
            break;
        }
        TH_ASSERT_UCS_OK(status);
        ++seq;
    }
    TH_ASSERT(exhausted);
    req.super.func = hcr_t_pending_cb;
    req.ctx        = &ctx;
    req.seq        = &seq;
    req.dispatched = 0;
    TH_ASSERT_UCS_OK(uct_ep_pending_add(ctx.ep, &req.super, 0));
    while (seq < HCR_T_PENDING_COUNT) {
        uct_worker_progress(ctx.uct.worker);
        TH_ASSERT(th_time() < deadline);
    }
    TH_ASSERT_GE(req.dispatched, 1);
    hcr_t_done(&ctx);
    hcr_t_teardown(&ctx);
}

/* ---- many endpoints --------------------------------------------------------- */

#define HCR_T_NUM_EPS 32

static void hcr_t_many_eps_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    hcr_t_am_rx_t rx = {0};
    uct_ep_h eps[HCR_T_NUM_EPS];
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    double deadline;
    int i;

    hcr_t_setup(&ctx, oob, rank, arg);
    TH_ASSERT_UCS_OK(uct_iface_set_am_handler(ctx.uct.iface, HCR_T_AM_ID,
                                              hcr_t_am_cb, &rx, 0));
    for (i = 0; i < HCR_T_NUM_EPS; ++i) {
        eps[i] = th_uct_connect(&ctx.uct, oob, 1 - rank);
    }
    th_oob_barrier(oob);
    deadline = th_time() + 60.0;
    if (rank == 0) {
        /* one AM per ep, in ep order; each ep flushed before the next so
         * the target sees them in sequence */
        for (i = 0; i < HCR_T_NUM_EPS; ++i) {
            uint32_t hdr[2] = {i, 100 + i};
            ssize_t ret;
            HCR_T_RETRY(&ctx, status,
                        ((ret = uct_ep_am_bcopy(eps[i], HCR_T_AM_ID,
                                                hcr_t_am_pack, hdr, 0)) < 0) ?
                        (ucs_status_t)ret : UCS_OK);
            TH_ASSERT_UCS_OK(status);
            th_uct_flush(&ctx.uct, eps[i]);
        }
        th_oob_send(oob, 1, "d", 1);
    } else {
        char done;
        while (rx.received < HCR_T_NUM_EPS) {
            uct_worker_progress(ctx.uct.worker);
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT_EQ(rx.errors, 0);
        th_uct_oob_recv(&ctx.uct, oob, 0, &done, 1);
    }
    th_oob_barrier(oob);
    for (i = 0; i < HCR_T_NUM_EPS; ++i) {
        uct_ep_destroy(eps[i]);
    }
    if (rank == 0) {
        hcr_t_done(&ctx);
    } else {
        hcr_t_serve(&ctx);
    }
    hcr_t_teardown(&ctx);
}

/* ---- put with remote notification ------------------------------------------ */

typedef struct {
    hcr_t_ctx_t *ctx;
    int         received;
    int         errors;
} hcr_t_notify_rx_t;

/* the data must be in place when the notification arrives */
static ucs_status_t hcr_t_notify_cb(void *arg, void *data, size_t length,
                                    unsigned flags)
{
    hcr_t_notify_rx_t *rx = arg;
    uct_put_notify_hdr_t hdr;
    uint8_t *exp;
    size_t offset;

    TH_ASSERT_EQ(length, sizeof(hdr));
    memcpy(&hdr, data, sizeof(hdr));
    offset = (size_t)rx->received * 70000;
    exp    = malloc(hdr.length + 1);
    th_fill_pattern(exp, hdr.length, 1000 + rx->received);
    if ((hdr.notify_data != (uint32_t)(0x5a0000 + rx->received)) ||
        (hdr.length != (uint32_t)(rx->received * 997)) ||
        memcmp(exp, rx->ctx->buf + offset, hdr.length)) {
        th_log("notify %d: data 0x%x length %u", rx->received,
               hdr.notify_data, hdr.length);
        ++rx->errors;
    }
    free(exp);
    ++rx->received;
    return UCS_OK;
}

#define HCR_T_NOTIFY_COUNT 50

static void hcr_t_notify_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    hcr_t_notify_rx_t rx = {0};
    ucs_status_t status;
    hcr_t_comp_t comp;
    hcr_t_ctx_t ctx;
    double deadline;
    uct_iov_t iov;
    int i;

    hcr_t_setup(&ctx, oob, rank, arg);
    rx.ctx = &ctx;
    TH_ASSERT_UCS_OK(uct_iface_set_am_handler(ctx.uct.iface, HCR_T_NOTIFY_ID,
                                              hcr_t_notify_cb, &rx, 0));
    th_oob_barrier(oob);
    if (!uct_iface_is_put_notify_supported(ctx.uct.iface)) {
        /* the reference transport: the generic entry point refuses */
        iov.buffer = ctx.buf;
        iov.length = 8;
        iov.memh   = ctx.memh;
        iov.stride = 0;
        iov.count  = 1;
        TH_ASSERT_EQ(uct_ep_put_notify_zcopy(ctx.ep, &iov, 1, ctx.raddr,
                                             ctx.rkey.rkey, HCR_T_NOTIFY_ID,
                                             1, NULL),
                     UCS_ERR_UNSUPPORTED);
        th_oob_barrier(oob);
        TH_SKIP("%s has no put with notification", (char*)arg);
    }

    deadline = th_time() + 60.0;
    if (rank == 1) {
        while (rx.received < HCR_T_NOTIFY_COUNT) {
            uct_worker_progress(ctx.uct.worker);
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT_EQ(rx.errors, 0);
        hcr_t_serve(&ctx);
        hcr_t_teardown(&ctx);
        return;
    }

    /* too wide notify_data is refused */
    iov.buffer = ctx.buf;
    iov.length = 8;
    iov.memh   = ctx.memh;
    iov.stride = 0;
    iov.count  = 1;
    TH_ASSERT_EQ(uct_ep_put_notify_zcopy(ctx.ep, &iov, 1, ctx.raddr,
                                         ctx.rkey.rkey, HCR_T_NOTIFY_ID,
                                         1u << UCT_PUT_NOTIFY_DATA_BITS, NULL),
                 UCS_ERR_INVALID_PARAM);

    for (i = 0; i < HCR_T_NOTIFY_COUNT; ++i) {
        /* sizes 0, 997, ..., unaligned source */
        th_fill_pattern(ctx.buf + 5 + i * 70000, i * 997, 1000 + i);
        iov.buffer = ctx.buf + 5 + i * 70000;
        iov.length = i * 997;
        hcr_t_comp_init(&comp);
        HCR_T_RETRY(&ctx, status,
                    uct_ep_put_notify_zcopy(ctx.ep, &iov, 1,
                                            ctx.raddr + i * 70000,
                                            ctx.rkey.rkey, HCR_T_NOTIFY_ID,
                                            0x5a0000 + i, &comp.super));
        hcr_t_wait(&ctx, status, &comp);
    }
    hcr_t_done(&ctx);
    hcr_t_teardown(&ctx);
}

/* ---- flush with cancel: puts still in flight complete as canceled ------- */

typedef struct {
    uct_completion_t super;
    int calls;
    int              canceled;
    ucs_status_t status;
} hcr_t_count_comp_t;

static void hcr_t_count_cb(uct_completion_t *self)
{
    hcr_t_count_comp_t *c = ucs_container_of(self, hcr_t_count_comp_t, super);

    ++c->calls;
    c->status   = self->status;
    c->canceled = (self->status == UCS_ERR_CANCELED);
}

static void hcr_t_count_init(hcr_t_count_comp_t *c)
{
    c->super.func   = hcr_t_count_cb;
    c->super.count  = 1;
    c->super.status = UCS_OK;
    c->calls        = 0;
    c->canceled     = 0;
    c->status       = UCS_INPROGRESS;
}

/* The initiator's link delivers each put 50 ms after it is posted
 * (hcr_t_run_cancel), so the puts are still in flight when
 * uct_ep_flush(CANCEL) moves the QP to error: each completes once, as
 * canceled (or done, for any the link delivered first), none with another
 * error, at least one canceled, and the flush completes. */
static void hcr_t_cancel_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    hcr_t_count_comp_t ops[64], flush;
    const size_t length = 65536;
    int i, posted = 0, done, canceled = 0;
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    double deadline;
    uct_iov_t iov;
    char go;

    hcr_t_setup(&ctx, oob, rank, arg);
    if (rank == 1) {
        th_uct_oob_recv(&ctx.uct, oob, 0, &go, 1);
        hcr_t_teardown(&ctx);
        return;
    }

    iov.buffer = ctx.buf;
    iov.length = length;
    iov.memh   = ctx.memh;
    iov.stride = 0;
    iov.count  = 1;
    for (i = 0; i < 64; ++i) {
        hcr_t_count_init(&ops[i]);
        status = uct_ep_put_zcopy(ctx.ep, &iov, 1, ctx.raddr + i * length,
                                  ctx.rkey.rkey, &ops[i].super);
        if (status == UCS_ERR_NO_RESOURCE) {
            break;
        }
        TH_ASSERT_EQ(status, UCS_INPROGRESS);
        ++posted;
    }
    TH_ASSERT_GE(posted, 8);

    hcr_t_count_init(&flush);
    status = uct_ep_flush(ctx.ep, UCT_FLUSH_FLAG_CANCEL, &flush.super);
    TH_ASSERT_EQ(status, UCS_INPROGRESS);

    deadline = th_time() + 30.0;
    do {
        uct_worker_progress(ctx.uct.worker);
        TH_ASSERT(th_time() < deadline);
        for (i = 0, done = 0; i < posted; ++i) {
            done += (ops[i].calls > 0);
        }
    } while ((flush.calls == 0) || (done < posted));

    for (i = 0; i < posted; ++i) {
        TH_ASSERT_EQ(ops[i].calls, 1);
        if ((ops[i].status != UCS_OK) && !ops[i].canceled) {
            TH_FAIL("put %d completed with %s, not done or canceled", i,
                    ucs_status_string(ops[i].status));
        }
        canceled += ops[i].canceled;
    }
    th_log("%s: %d puts, %d canceled by flush(CANCEL), flush %s", (char *)arg,
           posted, canceled, ucs_status_string(flush.status));
    TH_ASSERT_EQ(flush.calls, 1);
    TH_ASSERT_GT(canceled, 0);
    th_oob_send(oob, 1, "d", 1);
    hcr_t_teardown(&ctx);
}

/* ---- errors with error handling on: bad rkey, killed peer ----------------- */

/* a put outside the region the rkey covers fails the endpoint (remote access
 * error): the operation completes with an error and the handler runs once */
static void hcr_t_bad_rkey_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    hcr_t_comp_t comp;
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    double deadline;
    uct_iov_t iov;
    char go;

    hcr_t_err_mode = 1;
    hcr_t_setup(&ctx, oob, rank, arg);
    if (rank == 1) {
        th_uct_oob_recv(&ctx.uct, oob, 0, &go, 1);
        _exit(0);
    }

    iov.buffer = ctx.buf;
    iov.length = 4096;
    iov.memh   = ctx.memh;
    iov.stride = 0;
    iov.count  = 1;
    hcr_t_comp_init(&comp);
    status = uct_ep_put_zcopy(ctx.ep, &iov, 1, ctx.raddr + (256ul << 20),
                              ctx.rkey.rkey, &comp.super);
    TH_ASSERT_EQ(status, UCS_INPROGRESS);
    deadline = th_time() + 30.0;
    while ((comp.status == UCS_INPROGRESS) || (hcr_t_ep_error == UCS_OK)) {
        uct_worker_progress(ctx.uct.worker);
        TH_ASSERT(th_time() < deadline);
    }
    th_log("%s: put with a bad rkey completed with %s, ep error %s",
           (char*)arg, ucs_status_string(comp.status),
           ucs_status_string(hcr_t_ep_error));
    TH_ASSERT(comp.status != UCS_OK);
    TH_ASSERT(hcr_t_ep_error != UCS_OK);
    th_oob_send(oob, 1, "d", 1);
    _exit(0); /* the endpoint is failed: no orderly teardown */
}

/* the peer dies mid-transfer: it lets a few puts land (each carries its
 * sequence number in its first word) and kills itself while the initiator
 * keeps putting; the puts in flight then fail and the error handler reports
 * it (not a hang) */
#define HCR_T_KILL_AFTER 3

static void hcr_t_killed_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    volatile uint64_t *landed;
    hcr_t_comp_t comp;
    ucs_status_t status;
    hcr_t_ctx_t ctx;
    double deadline;
    uct_iov_t iov;
    uint64_t seq = 0;
    int ok       = 0;

    hcr_t_err_mode = 1;
    setenv("UCX_RC_TIMEOUT", "100ms", 1);
    setenv("UCX_RC_RETRY_COUNT", "3", 1);
    hcr_t_setup(&ctx, oob, rank, arg);
    th_oob_barrier(oob);
    deadline = th_time() + 90.0;
    if (rank == 1) {
        landed = (volatile uint64_t *)ctx.buf;
        while (*landed < HCR_T_KILL_AFTER) {
            TH_ASSERT(th_time() < deadline);
        }
        raise(SIGKILL);
    }

    iov.buffer = ctx.buf;
    iov.length = 65536;
    iov.memh   = ctx.memh;
    iov.stride = 0;
    iov.count  = 1;
    while (hcr_t_ep_error == UCS_OK) {
        memcpy(ctx.buf, &(uint64_t){++seq}, sizeof(seq));
        hcr_t_comp_init(&comp);
        HCR_T_RETRY(&ctx, status,
                    uct_ep_put_zcopy(ctx.ep, &iov, 1, ctx.raddr,
                                     ctx.rkey.rkey, &comp.super));
        while ((status == UCS_INPROGRESS) &&
               (comp.status == UCS_INPROGRESS)) {
            uct_worker_progress(ctx.uct.worker);
            TH_ASSERT(th_time() < deadline);
        }
        if ((status == UCS_OK) ||
            ((status == UCS_INPROGRESS) && (comp.status == UCS_OK))) {
            ++ok;
        }
        TH_ASSERT(th_time() < deadline);
    }
    th_log("%s: killed peer reported as %s after %d puts, %d of them done",
           (char *)arg, ucs_status_string(hcr_t_ep_error), (int)seq, ok);
    /* the peer saw HCR_T_KILL_AFTER puts land before it died */
    TH_ASSERT_GE(ok, HCR_T_KILL_AFTER);
    TH_ASSERT_LT(ok, (int)seq);
    _exit(0);
}

static void hcr_t_run_killed(const char *tl)
{
    int status[2];
    th_procs_t *p;

    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    p = th_procs_start(2, hcr_t_killed_rank, (void*)tl);
    th_procs_wait(p, status);
    if ((status[0] == TH_EXIT_SKIP) || (status[1] == TH_EXIT_SKIP)) {
        TH_SKIP("no device for %s", tl);
    }
    TH_ASSERT_EQ(status[0], 0);
    TH_ASSERT_EQ(status[1], 128 + SIGKILL);
}

TH_TEST_TIMEOUT(hcr_uct, killed_peer_hcr, 150) { hcr_t_run_killed("hcr"); }
TH_TEST_TIMEOUT(hcr_uct, killed_peer_rc_verbs, 150)
{
    hcr_t_run_killed("rc_verbs");
}

/* ---- the suite, on hcr and on rc_verbs --------------------------------------- */

/* UCX's receive pools exceed the default 8 MiB memlock that softverbs
 * enforces, as they would on a real HCA */
static void hcr_t_run(th_proc_fn_t fn, const char *tl)
{
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(2, fn, (void*)tl);
}

#define HCR_T_BOTH(_name, _fn) \
    TH_TEST(hcr_uct, _name##_hcr)      { hcr_t_run(_fn, "hcr"); } \
    TH_TEST(hcr_uct, _name##_rc_verbs) { hcr_t_run(_fn, "rc_verbs"); }

HCR_T_BOTH(rma, hcr_t_rma_rank)
HCR_T_BOTH(am, hcr_t_am_rank)
HCR_T_BOTH(atomic, hcr_t_atomic_rank)
HCR_T_BOTH(order_fence, hcr_t_order_rank)
HCR_T_BOTH(pending, hcr_t_pending_rank)
HCR_T_BOTH(many_eps, hcr_t_many_eps_rank)
HCR_T_BOTH(put_notify, hcr_t_notify_rank)

/* softverbs' link model delays every put by 50 ms; the calibration, which
 * would measure that link at each md open, is off */
static void hcr_t_run_cancel(const char *tl)
{
    setenv("SOFTVERBS_LINK_GBPS", "100", 1);
    setenv("SOFTVERBS_LINK_LAT_US", "50000", 1);
    setenv("UCX_CALIB_MODE", "off", 1);
    hcr_t_run(hcr_t_cancel_rank, tl);
}

TH_TEST(hcr_uct, flush_cancel_hcr)
{
    hcr_t_run_cancel("hcr");
}
TH_TEST(hcr_uct, flush_cancel_rc_verbs)
{
    hcr_t_run_cancel("rc_verbs");
}
HCR_T_BOTH(bad_rkey, hcr_t_bad_rkey_rank)
