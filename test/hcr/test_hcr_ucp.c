/*
 * UCP over hcr alone (UCX_TLS=hcr, nothing else named): tag, stream, am,
 * put/get and atomics with checksummed data, in both protocol modes
 * (UCX_PROTO_ENABLE=y/n); then error handling: a put with an invalid rkey
 * and a peer killed mid-transfer surface as endpoint errors, not hangs.
 */
#include "th_ucx.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static const size_t hcr_ucp_sizes[] = {
    0, 1, 8, 63, 4096 + 1, 65536 + 3, 1024 * 1024 + 5, 4 * 1024 * 1024
};
#define HCR_UCP_NUM_SIZES (sizeof(hcr_ucp_sizes) / sizeof(hcr_ucp_sizes[0]))
#define HCR_UCP_MAX_SIZE  (4 * 1024 * 1024)

static void hcr_ucp_env(const char *proto)
{
    if (!th_have_verbs_device("softverbs") && !th_have_verbs_device("mlx")) {
        TH_SKIP("no verbs device (softverbs not preloaded)");
    }
    /* HCR_UCP_TLS: run the same checks on another transport (reference) */
    setenv("UCX_TLS", getenv("HCR_UCP_TLS") ? getenv("HCR_UCP_TLS") : "hcr",
           1);
    setenv("UCX_PROTO_ENABLE", proto, 1);
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
}

/* the data lanes must be hcr: UCP must not fall back to another transport */
static void hcr_ucp_check_lanes(th_ucp_t *ucp)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);

    ucp_ep_print_info(ucp->ep, f);
    fclose(f);
    if ((getenv("HCR_UCP_TLS") == NULL) && (strstr(text, "hcr/") == NULL)) {
        TH_FAIL("endpoint has no hcr lane:\n%s", text);
    }
    free(text);
}

/* ---- tag and stream: every size, both directions ----------------------- */

static void hcr_ucp_tag_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    ucp_request_param_t param = {0};
    int peer = 1 - rank, dir;
    th_ucp_t ucp;
    unsigned i;
    uint8_t *buf;
    size_t len;

    hcr_ucp_env(arg);
    th_ucp_init(&ucp, UCP_FEATURE_TAG | UCP_FEATURE_STREAM);
    th_ucp_connect(&ucp, oob, peer, 0);
    hcr_ucp_check_lanes(&ucp);
    buf = malloc(HCR_UCP_MAX_SIZE + 1);

    for (dir = 0; dir < 2; ++dir) {
        for (i = 0; i < HCR_UCP_NUM_SIZES; ++i) {
            size_t size = hcr_ucp_sizes[i];
            if (rank == dir) {
                th_fill_pattern(buf, size, dir * 100 + i);
                TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                        ucp_tag_send_nbx(ucp.ep, buf, size, 0x10 + i, &param),
                        60.0));
                if (size > 0) {
                    TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                            ucp_stream_send_nbx(ucp.ep, buf, size, &param),
                            60.0));
                }
            } else {
                memset(buf, 0xee, size + 1);
                TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                        ucp_tag_recv_nbx(ucp.worker, buf, size, 0x10 + i,
                                         (ucp_tag_t)-1, &param), 60.0));
                TH_CHECK_PATTERN(buf, size, dir * 100 + i);
                TH_ASSERT_EQ(buf[size], 0xee);
                if (size > 0) {
                    ucp_request_param_t sp = {0};
                    memset(buf, 0xee, size + 1);
                    sp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                    sp.flags        = UCP_STREAM_RECV_FLAG_WAITALL;
                    TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                            ucp_stream_recv_nbx(ucp.ep, buf, size, &len, &sp),
                            60.0));
                    TH_CHECK_PATTERN(buf, size, dir * 100 + i);
                }
            }
        }
    }
    th_ucp_flush_barrier(&ucp, oob);
    free(buf);
    th_ucp_cleanup(&ucp);
}

/* ---- active messages --------------------------------------------------- */

typedef struct {
    int      received;
    int      errors;
    th_ucp_t *ucp;
    uint8_t *buf;
    size_t   rndv_len;
    uint64_t seed;
} hcr_ucp_am_rx_t;

/* every message's header: the seed of its pattern and its length, which
 * the receiver checks against what arrived */
typedef struct {
    uint64_t seed;
    uint64_t length;
} hcr_ucp_am_hdr_t;

static int hcr_ucp_am_data_ok(const void *data, size_t length, uint64_t seed)
{
    uint8_t *t = malloc(length + 1);
    int ok;

    TH_ASSERT(t != NULL);
    th_fill_pattern(t, length, seed);
    ok = !memcmp(t, data, length);
    free(t);
    return ok;
}

static void hcr_ucp_am_recv_done(void *request, ucs_status_t status,
                                 size_t length, void *arg)
{
    hcr_ucp_am_rx_t *rx = arg;

    if ((status != UCS_OK) || (length != rx->rndv_len) ||
        !hcr_ucp_am_data_ok(rx->buf, rx->rndv_len, rx->seed) ||
        (rx->buf[rx->rndv_len] != 0xee)) {
        th_log("bad rendezvous AM: %s, %zu of %zu bytes",
               ucs_status_string(status), length, rx->rndv_len);
        ++rx->errors;
    }
    ++rx->received;
    if (request != NULL) {
        ucp_request_free(request);
    }
}

static ucs_status_t hcr_ucp_am_cb(void *arg, const void *header,
                                  size_t header_length, void *data,
                                  size_t length,
                                  const ucp_am_recv_param_t *param)
{
    hcr_ucp_am_rx_t *rx = arg;
    hcr_ucp_am_hdr_t hdr;

    if (header_length != sizeof(hdr)) {
        ++rx->errors;
        ++rx->received;
        return UCS_OK;
    }
    memcpy(&hdr, header, sizeof(hdr));
    if (length != hdr.length) {
        th_log("AM of %llu bytes arrived with %zu",
               (unsigned long long)hdr.length, length);
        ++rx->errors;
        ++rx->received;
        return UCS_OK;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        rx->seed     = hdr.seed;
        rx->rndv_len = length;
        memset(rx->buf, 0xee, length + 1);
        th_ucp_am_recv_data(rx->ucp, data, rx->buf, length,
                            hcr_ucp_am_recv_done, rx);
        return UCS_OK;
    }

    if (!hcr_ucp_am_data_ok(data, length, hdr.seed)) {
        ++rx->errors;
    }
    ++rx->received;
    return UCS_OK;
}

static void hcr_ucp_am_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    ucp_request_param_t param = {0};
    ucp_am_handler_param_t hparam = {0};
    hcr_ucp_am_rx_t rx = {0};
    hcr_ucp_am_hdr_t hdr;
    th_ucp_t ucp;
    double deadline;
    uint8_t *buf;
    unsigned i;

    hcr_ucp_env(arg);
    th_ucp_init(&ucp, UCP_FEATURE_AM);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf    = malloc(HCR_UCP_MAX_SIZE + 1);
    rx.ucp = &ucp;
    rx.buf = buf;
    hparam.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                        UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hparam.id         = 3;
    hparam.cb         = hcr_ucp_am_cb;
    hparam.arg        = &rx;
    TH_ASSERT_UCS_OK(ucp_worker_set_am_recv_handler(ucp.worker, &hparam));
    th_oob_barrier(oob);

    if (rank == 0) {
        for (i = 0; i < HCR_UCP_NUM_SIZES; ++i) {
            hdr.seed   = 500 + i;
            hdr.length = hcr_ucp_sizes[i];
            th_fill_pattern(buf, hcr_ucp_sizes[i], hdr.seed);
            TH_ASSERT_UCS_OK(
                    th_ucp_wait(&ucp,
                                ucp_am_send_nbx(ucp.ep, 3, &hdr, sizeof(hdr),
                                                buf, hcr_ucp_sizes[i], &param),
                                60.0));
        }
        th_ucp_flush_barrier(&ucp, oob);
    } else {
        deadline = th_time() + 60.0;
        while (rx.received < (int)HCR_UCP_NUM_SIZES) {
            ucp_worker_progress(ucp.worker);
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT_EQ(rx.errors, 0);
        th_ucp_flush_barrier(&ucp, oob);
    }
    free(buf);
    th_ucp_cleanup(&ucp);
}

/* ---- put/get and atomics ---------------------------------------------- */

static void hcr_ucp_rma_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    const size_t size            = HCR_UCP_MAX_SIZE + 64;
    ucp_request_param_t param    = {0};
    uint64_t remote_addr, *counter, result, value;
    uint8_t *buf, *local;
    ucp_rkey_h rkey;
    ucp_mem_h memh;
    th_ucp_t ucp;
    unsigned i;
    char go = 'g';

    hcr_ucp_env(arg);
    th_ucp_init(&ucp, UCP_FEATURE_RMA | UCP_FEATURE_AMO64);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf   = malloc(size);
    local = malloc(size);
    memh = th_ucp_mem_map(&ucp, buf, size);

    if (rank == 1) {
        th_fill_pattern(buf, size, 7);
        counter  = (uint64_t*)(buf + size - 8);
        *counter = 10;
        th_ucp_send_rkey(&ucp, oob, 0, memh, buf);
        th_ucp_oob_recv(&ucp, oob, 0, &go, 1);
        for (i = 0; i < HCR_UCP_NUM_SIZES; ++i) {
            size_t len = TH_MIN(hcr_ucp_sizes[i], size - 3 - 64);
            th_ucp_oob_recv(&ucp, oob, 0, &go, 1);
            TH_CHECK_PATTERN(buf + 3, len, 1000 + i);
            th_oob_send(oob, 0, &go, 1);
        }
        th_ucp_oob_recv(&ucp, oob, 0, &go, 1);
        /* 10 + 5 * 4 (add) then cswap to 1234 */
        TH_ASSERT_EQ(*counter, 1234);
    } else {
        th_ucp_recv_rkey(&ucp, oob, 1, &rkey, &remote_addr);
        for (i = 0; i < HCR_UCP_NUM_SIZES; ++i) {
            size_t len = TH_MIN(hcr_ucp_sizes[i], size - 5 - 64);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                    ucp_get_nbx(ucp.ep, local + 1, len, remote_addr + 5, rkey,
                                &param), 60.0));
            th_fill_pattern(buf, len + 5, 7);
            TH_ASSERT_MEM_EQ(local + 1, buf + 5, len);
        }
        th_oob_send(oob, 1, &go, 1);
        for (i = 0; i < HCR_UCP_NUM_SIZES; ++i) {
            size_t len = TH_MIN(hcr_ucp_sizes[i], size - 3 - 64);
            th_fill_pattern(local + 1, len, 1000 + i);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                    ucp_put_nbx(ucp.ep, local + 1, len, remote_addr + 3, rkey,
                                &param), 60.0));
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                    ucp_ep_flush_nbx(ucp.ep, &param), 60.0));
            th_oob_send(oob, 1, &go, 1);
            th_ucp_oob_recv(&ucp, oob, 1, &go, 1);
        }

        /* atomics on the last 8 bytes */
        for (i = 0; i < 4; ++i) {
            ucp_request_param_t ap = {0};
            value           = 5;
            ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                              UCP_OP_ATTR_FIELD_REPLY_BUFFER;
            ap.datatype     = ucp_dt_make_contig(8);
            ap.reply_buffer = &result;
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                    ucp_atomic_op_nbx(ucp.ep, UCP_ATOMIC_OP_ADD, &value, 1,
                                      remote_addr + size - 8, rkey, &ap),
                    60.0));
            TH_ASSERT_EQ(result, 10 + 5 * i);
        }
        {
            ucp_request_param_t ap = {0};
            value           = 30;     /* compare */
            result          = 1234;   /* swap, replaced by the old value */
            ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                              UCP_OP_ATTR_FIELD_REPLY_BUFFER;
            ap.datatype     = ucp_dt_make_contig(8);
            ap.reply_buffer = &result;
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                    ucp_atomic_op_nbx(ucp.ep, UCP_ATOMIC_OP_CSWAP, &value, 1,
                                      remote_addr + size - 8, rkey, &ap),
                    60.0));
            TH_ASSERT_EQ(result, 30);
        }
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, ucp_ep_flush_nbx(ucp.ep, &param),
                                     60.0));
        th_oob_send(oob, 1, &go, 1);
        ucp_rkey_destroy(rkey);
    }
    th_ucp_flush_barrier(&ucp, oob);
    ucp_mem_unmap(ucp.context, memh);
    free(buf);
    free(local);
    th_ucp_cleanup(&ucp);
}

/* ---- wakeup: the receiver sleeps in ucp_worker_wait() -------------------- */

static void hcr_ucp_wakeup_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    ucp_request_param_t param = {0};
    uint64_t buf[512];
    double deadline;
    th_ucp_t ucp;
    void *req;
    int i, sleeps = 0;

    hcr_ucp_env(arg);
    th_ucp_init(&ucp, UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    th_oob_barrier(oob);

    for (i = 0; i < 20; ++i) {
        if (rank == 0) {
            usleep(20000); /* let the receiver go to sleep */
            th_fill_pattern(buf, sizeof(buf), i);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, ucp_tag_send_nbx(ucp.ep, buf,
                    sizeof(buf), 9, &param), 30.0));
            continue;
        }
        req      = ucp_tag_recv_nbx(ucp.worker, buf, sizeof(buf), 9,
                                    (ucp_tag_t)-1, &param);
        deadline = th_time() + 30.0;
        while (UCS_PTR_IS_PTR(req) &&
               (ucp_request_check_status(req) == UCS_INPROGRESS)) {
            if (ucp_worker_progress(ucp.worker) == 0) {
                ucs_status_t st = ucp_worker_arm(ucp.worker);
                if (st == UCS_OK) {
                    TH_ASSERT_UCS_OK(ucp_worker_wait(ucp.worker));
                    ++sleeps;
                } else {
                    TH_ASSERT_EQ(st, UCS_ERR_BUSY);
                }
            }
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT(!UCS_PTR_IS_ERR(req));
        if (UCS_PTR_IS_PTR(req)) {
            TH_ASSERT_UCS_OK(ucp_request_check_status(req));
            ucp_request_free(req);
        }
        TH_CHECK_PATTERN(buf, sizeof(buf), i);
    }
    if (rank == 1) {
        th_log("receiver slept %d times in ucp_worker_wait", sleeps);
        TH_ASSERT_GT(sleeps, 0);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/* ---- errors: invalid rkey, killed peer --------------------------------- */

/* rank 0 puts outside the region its rkey covers (the key alone cannot be
 * invalidated: UCX caches registrations): the put must fail with a remote
 * access error and the endpoint report it, without hanging */
static void hcr_ucp_bad_rkey_rank(th_oob_t *oob, int rank, int nprocs,
                                  void *arg)
{
    ucp_request_param_t param    = {0};
    uint8_t *buf = malloc(65536);
    uint64_t remote_addr;
    ucs_status_t status;
    double deadline;
    ucp_rkey_h rkey;
    ucp_mem_h memh;
    th_ucp_t ucp;
    char go = 'g';

    hcr_ucp_env(arg);
    setenv("UCX_LOG_LEVEL", "fatal", 1);
    th_ucp_init(&ucp, UCP_FEATURE_RMA);
    th_ucp_connect(&ucp, oob, 1 - rank, 1);
    memh = th_ucp_mem_map(&ucp, buf, 65536);

    if (rank == 1) {
        th_ucp_send_rkey(&ucp, oob, 0, memh, buf);
        th_oob_send(oob, 0, &go, 1);
        th_ucp_oob_recv(&ucp, oob, 0, &go, 1);
    } else {
        th_ucp_recv_rkey(&ucp, oob, 1, &rkey, &remote_addr);
        th_ucp_oob_recv(&ucp, oob, 1, &go, 1);
        status = th_ucp_wait(&ucp, ucp_put_nbx(ucp.ep, buf, 65536,
                                               remote_addr + (256ul << 20),
                                               rkey, &param), 30.0);
        if (status == UCS_OK) {
            status = th_ucp_wait(&ucp, ucp_ep_flush_nbx(ucp.ep, &param), 30.0);
        }
        TH_ASSERT(status != UCS_OK);
        /* and the endpoint's error handler reports it */
        deadline = th_time() + 30.0;
        while (ucp.ep_error == UCS_OK) {
            ucp_worker_progress(ucp.worker);
            TH_ASSERT(th_time() < deadline);
        }
        th_log("put with an invalid rkey: %s, ep error %s",
               ucs_status_string(status), ucs_status_string(ucp.ep_error));
        ucp_rkey_destroy(rkey);
        th_oob_send(oob, 1, &go, 1);
    }
    _exit(0); /* the endpoint is in error: no orderly teardown */
}

static void hcr_ucp_kill_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    uint8_t *buf = malloc(1024 * 1024);
    th_ucp_t ucp;

    hcr_ucp_env(arg);
    setenv("UCX_LOG_LEVEL", "fatal", 1);
    setenv("UCX_KEEPALIVE_INTERVAL", "1s", 1);
    /* a peer killed while nothing is in flight on the RC lane (waiting for
     * its rendezvous reply) shows only on the keepalive lane, UD, after its
     * peer timeout: 30 s by default */
    setenv("UCX_UD_TIMEOUT", "5s", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 1);
    th_oob_barrier(oob);

    if (rank == 1) {
        /* receive a little, then die mid-transfer */
        ucp_request_param_t rp = {0};
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, ucp_tag_recv_nbx(ucp.worker, buf,
                1024 * 1024, 1, (ucp_tag_t)-1, &rp), 30.0));
        raise(SIGKILL);
    }

    th_ucp_send_until_error(&ucp, buf, 1024 * 1024, 1, 60.0);
    _exit(0);
}

/* softverbs reads its memlock limit when a process starts (or forks): set it
 * before the ranks exist; UCX's receive pools exceed the default 8 MiB */
static void hcr_ucp_run(th_proc_fn_t fn, const char *proto)
{
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(2, fn, (void*)proto);
}

#define HCR_UCP_TEST(_name, _fn) \
    TH_TEST(hcr_ucp, _name##_v2) { hcr_ucp_run(_fn, "y"); } \
    TH_TEST(hcr_ucp, _name##_v1) { hcr_ucp_run(_fn, "n"); }

HCR_UCP_TEST(tag_stream, hcr_ucp_tag_rank)
HCR_UCP_TEST(am, hcr_ucp_am_rank)
HCR_UCP_TEST(rma_amo, hcr_ucp_rma_rank)
HCR_UCP_TEST(bad_rkey, hcr_ucp_bad_rkey_rank)
HCR_UCP_TEST(wakeup, hcr_ucp_wakeup_rank)

TH_TEST_TIMEOUT(hcr_ucp, killed_peer, 150)
{
    int status[2];
    th_procs_t *p;

    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    p = th_procs_start(2, hcr_ucp_kill_rank, "y");
    th_procs_wait(p, status);
    if ((status[0] == TH_EXIT_SKIP) || (status[1] == TH_EXIT_SKIP)) {
        TH_SKIP("no verbs device");
    }
    TH_ASSERT_EQ(status[0], 0);
    TH_ASSERT_EQ(status[1], 128 + SIGKILL);
}
