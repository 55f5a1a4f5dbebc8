/*
 * UCT fixture check: active messages between two processes over shared
 * memory (posix) and tcp, short and bcopy, with every payload verified.
 * Later transports (hcr, rc_verbs) run a full conformance suite; this one
 * proves the UCT fixture itself on transports that exist on any host.
 */
#include "th_ucx.h"

#include <stdlib.h>

#define UCT_BASIC_AM_ID 5
#define UCT_BASIC_COUNT 200

typedef struct {
    volatile int received;
    int          errors;
} uct_basic_rx_t;

typedef struct {
    uint32_t seq;
    uint32_t length;
    uint64_t checksum;
} uct_basic_hdr_t;

static ucs_status_t uct_basic_am_cb(void *arg, void *data, size_t length,
                                    unsigned flags)
{
    uct_basic_rx_t *rx    = arg;
    uct_basic_hdr_t *hdr  = data;

    if ((length != sizeof(*hdr) + hdr->length) ||
        (hdr->seq != (uint32_t)rx->received) ||
        (th_checksum(hdr + 1, hdr->length) != hdr->checksum)) {
        th_log("bad AM %d: length %zu hdr.length %u seq %u", rx->received,
               length, hdr->length, hdr->seq);
        ++rx->errors;
    }
    ++rx->received;
    return UCS_OK;
}

typedef struct {
    uct_basic_hdr_t hdr;
    const void      *payload;
} uct_basic_pack_arg_t;

static size_t uct_basic_pack_cb(void *dest, void *arg)
{
    uct_basic_pack_arg_t *pack = arg;

    memcpy(dest, &pack->hdr, sizeof(pack->hdr));
    memcpy((char*)dest + sizeof(pack->hdr), pack->payload, pack->hdr.length);
    return sizeof(pack->hdr) + pack->hdr.length;
}

static void uct_basic_am_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    const char *tl        = arg;
    uct_basic_rx_t rx     = {0};
    uct_basic_pack_arg_t pack;
    size_t max_bcopy, length;
    ucs_status_t status;
    uint8_t *payload;
    th_uct_t uct;
    uct_ep_h ep;
    ssize_t ret;
    char done;
    int i;

    if (!strcmp(tl, "tcp")) {
        setenv("UCX_NET_DEVICES", "all", 1);
    }
    if (th_uct_open(&uct, tl, NULL) != UCS_OK) {
        TH_SKIP("no device for transport %s", tl);
    }
    TH_ASSERT(uct.iface_attr.cap.flags & UCT_IFACE_FLAG_AM_BCOPY);
    TH_ASSERT_UCS_OK(uct_iface_set_am_handler(uct.iface, UCT_BASIC_AM_ID,
                                              uct_basic_am_cb, &rx, 0));
    ep = th_uct_connect(&uct, oob, 1 - rank);
    th_oob_barrier(oob);

    max_bcopy = uct.iface_attr.cap.am.max_bcopy - sizeof(pack.hdr);
    payload   = malloc(max_bcopy);
    TH_ASSERT(payload != NULL);

    if (rank == 0) {
        for (i = 0; i < UCT_BASIC_COUNT; ++i) {
            /* sizes sweep 0..max_bcopy, short ones go as am_short */
            length = ((size_t)i * 7919) % (max_bcopy + 1);
            if (i < 10) {
                length = i;
            }
            th_fill_pattern(payload, length, i);
            pack.hdr.seq      = i;
            pack.hdr.length   = length;
            pack.hdr.checksum = th_checksum(payload, length);
            pack.payload      = payload;

            do {
                if ((uct.iface_attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT) &&
                    (sizeof(pack.hdr) + length <=
                     uct.iface_attr.cap.am.max_short) &&
                    (length <= 4096)) {
                    /* am_short: first 8 bytes of the header go as the
                     * 64-bit header argument */
                    char tmp[sizeof(pack.hdr) + 4096];
                    uint64_t h;
                    uct_basic_pack_cb(tmp, &pack);
                    memcpy(&h, tmp, sizeof(h));
                    status = uct_ep_am_short(ep, UCT_BASIC_AM_ID, h,
                                             tmp + sizeof(h),
                                             sizeof(pack.hdr) + length -
                                             sizeof(h));
                } else {
                    ret    = uct_ep_am_bcopy(ep, UCT_BASIC_AM_ID,
                                             uct_basic_pack_cb, &pack, 0);
                    status = (ret < 0) ? (ucs_status_t)ret : UCS_OK;
                }
                uct_worker_progress(uct.worker);
            } while (status == UCS_ERR_NO_RESOURCE);
            TH_ASSERT_UCS_OK(status);
        }
        th_uct_flush(&uct, ep);
        th_oob_send(oob, 1, "d", 1);
    } else {
        double deadline = th_time() + 30.0;

        while (rx.received < UCT_BASIC_COUNT) {
            uct_worker_progress(uct.worker);
            TH_ASSERT(th_time() < deadline);
        }
        TH_ASSERT_EQ(rx.errors, 0);
        TH_ASSERT_EQ(rx.received, UCT_BASIC_COUNT);
        /* keep progressing until the sender's flush is complete */
        th_uct_oob_recv(&uct, oob, 0, &done, 1);
    }

    uct_ep_destroy(ep);
    free(payload);
    th_uct_close(&uct);
}

TH_TEST(uct_basic, am_posix)
{
    th_run_procs(2, uct_basic_am_rank, "posix");
}

TH_TEST(uct_basic, am_tcp)
{
    th_run_procs(2, uct_basic_am_rank, "tcp");
}
