/*
 * UCP tag, put and get between two processes, with checksummed data, over
 * tcp and over shared memory, with proto v2 on (this build's default) and
 * off. This is the baseline every ucx-hcr change must keep working.
 */
#include "th_ucx.h"

#include <stdlib.h>

static const size_t ucp_basic_sizes[] = {
    0, 1, 7, 64, 4095, 65536 + 3, 1024 * 1024 + 5, 8 * 1024 * 1024
};
#define NUM_SIZES (sizeof(ucp_basic_sizes) / sizeof(ucp_basic_sizes[0]))

typedef struct {
    const char *tls;
    const char *proto_enable;
} ucp_basic_cfg_t;

static void ucp_basic_setenv(const ucp_basic_cfg_t *cfg)
{
    setenv("UCX_TLS", cfg->tls, 1);
    setenv("UCX_PROTO_ENABLE", cfg->proto_enable, 1);
    /* tcp over loopback: UCX skips lo by default on hosts with another
     * interface, but the two ranks share this host */
    setenv("UCX_NET_DEVICES", "all", 1);
}

/* Rank 0 sends every size to rank 1, then rank 1 sends back */
static void ucp_basic_tag_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    ucp_request_param_t param = {0};
    int peer                  = 1 - rank;
    th_ucp_t ucp;
    unsigned i, dir;
    void *buf;

    ucp_basic_setenv(arg);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, peer, 0);

    buf = malloc(ucp_basic_sizes[NUM_SIZES - 1] + 1);
    TH_ASSERT(buf != NULL);

    for (dir = 0; dir < 2; ++dir) {
        for (i = 0; i < NUM_SIZES; ++i) {
            size_t size   = ucp_basic_sizes[i];
            uint64_t seed = dir * 100 + i;
            ucp_tag_t tag = 0x1000 + i;

            if (rank == (int)dir) {
                th_fill_pattern(buf, size, seed);
                TH_ASSERT_UCS_OK(th_ucp_wait(
                        &ucp, ucp_tag_send_nbx(ucp.ep, buf, size, tag, &param),
                        60.0));
            } else {
                memset(buf, 0xee, size + 1);
                TH_ASSERT_UCS_OK(th_ucp_wait(
                        &ucp,
                        ucp_tag_recv_nbx(ucp.worker, buf, size, tag,
                                         (ucp_tag_t)-1, &param),
                        60.0));
                TH_CHECK_PATTERN(buf, size, seed);
                /* nothing written past the message */
                TH_ASSERT_EQ(((uint8_t*)buf)[size], 0xee);
            }
        }
    }

    th_ucp_flush_barrier(&ucp, oob);
    free(buf);
    th_ucp_cleanup(&ucp);
}

/*
 * Rank 1 exposes a buffer holding a pattern; rank 0 gets it back, then puts
 * other patterns into it, at unaligned offsets on both sides.
 */
static void ucp_basic_rma_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    const size_t size         = 4 * 1024 * 1024 + 64;
    ucp_request_param_t param = {0};
    int peer                  = 1 - rank;
    uint64_t remote_addr;
    ucp_rkey_h rkey;
    ucp_mem_h memh;
    th_ucp_t ucp;
    uint8_t *buf, *local;
    unsigned i;
    char go = 'g';

    ucp_basic_setenv(arg);
    th_ucp_init(&ucp, UCP_FEATURE_RMA);
    th_ucp_connect(&ucp, oob, peer, 0);

    buf   = malloc(size);
    local = malloc(size);
    TH_ASSERT((buf != NULL) && (local != NULL));
    memh = th_ucp_mem_map(&ucp, buf, size);

    if (rank == 1) {
        th_fill_pattern(buf, size, 7);
        th_ucp_send_rkey(&ucp, oob, peer, memh, buf);
        /* rank 0's gets; RMA over tcp needs this side to progress */
        th_ucp_oob_recv(&ucp, oob, peer, &go, 1);
        /* rank 0 says when each put is flushed; the data must be there */
        for (i = 0; i < NUM_SIZES; ++i) {
            size_t off = 3 + i;
            size_t len = TH_MIN(ucp_basic_sizes[i], size - off);

            th_ucp_oob_recv(&ucp, oob, peer, &go, 1);
            TH_CHECK_PATTERN(buf + off, len, 1000 + i);
            th_oob_send(oob, peer, &go, 1);
        }
    } else {
        th_ucp_recv_rkey(&ucp, oob, peer, &rkey, &remote_addr);

        /* gets from the first half (the peer's pattern, seed 7) */
        for (i = 0; i < NUM_SIZES; ++i) {
            size_t len = TH_MIN(ucp_basic_sizes[i], size - 5);
            TH_ASSERT_UCS_OK(th_ucp_wait(
                    &ucp,
                    ucp_get_nbx(ucp.ep, local + 1, len, remote_addr + 5, rkey,
                                &param),
                    60.0));
            th_fill_pattern(buf, len + 5, 7);
            TH_ASSERT_MEM_EQ(local + 1, buf + 5, len);
        }

        th_oob_send(oob, peer, &go, 1);

        /* puts at unaligned offsets, each flushed and checked by the peer */
        for (i = 0; i < NUM_SIZES; ++i) {
            size_t off = 3 + i;
            size_t len = TH_MIN(ucp_basic_sizes[i], size - off);

            th_fill_pattern(local + 1, len, 1000 + i);
            TH_ASSERT_UCS_OK(th_ucp_wait(
                    &ucp,
                    ucp_put_nbx(ucp.ep, local + 1, len, remote_addr + off,
                                rkey, &param),
                    60.0));
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                         ucp_ep_flush_nbx(ucp.ep, &param),
                                         60.0));
            th_oob_send(oob, peer, &go, 1);
            th_ucp_oob_recv(&ucp, oob, peer, &go, 1);
        }
        ucp_rkey_destroy(rkey);
    }

    th_ucp_flush_barrier(&ucp, oob);
    ucp_mem_unmap(ucp.context, memh);
    free(buf);
    free(local);
    th_ucp_cleanup(&ucp);
}

#define UCP_BASIC_TESTS(_name, _tls, _proto) \
    TH_TEST(ucp_basic, _name##_tag) \
    { \
        ucp_basic_cfg_t cfg = {_tls, _proto}; \
        th_run_procs(2, ucp_basic_tag_rank, &cfg); \
    } \
    TH_TEST(ucp_basic, _name##_rma) \
    { \
        ucp_basic_cfg_t cfg = {_tls, _proto}; \
        th_run_procs(2, ucp_basic_rma_rank, &cfg); \
    }

UCP_BASIC_TESTS(tcp_proto_v2, "tcp", "y")
UCP_BASIC_TESTS(tcp_proto_v1, "tcp", "n")
UCP_BASIC_TESTS(shm_proto_v2, "shm", "y")
UCP_BASIC_TESTS(shm_proto_v1, "shm", "n")
