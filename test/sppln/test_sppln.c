/*
 * rndv/sppln (src/ucp/proto/proto_sppln*.c): tag messages from the
 * rendezvous threshold to 64 MiB through each forced path and the automatic
 * choice, checksummed, from unaligned offsets of buffers mapped fresh for
 * every message, receives posted before and after arrival, both directions;
 * many transfers in flight (more than the staging groups); the generic lane
 * (rc_verbs: put, then an active message); registration failure (memlock)
 * falling back to the superpipeline; and a peer killed mid-transfer. And
 * RMA (put/choose, get/choose): puts and gets from and into fresh buffers
 * through each forced path (bcopy, staged put, zcopy) and the automatic
 * choice, the second put of a buffer, and registration failure falling back
 * to bcopy.
 */
#define _GNU_SOURCE
#include "th_ucx.h"

#include <ucs/calib/calib.h>
#include <ucs/sys/string.h>

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Path counters of a worker, as proto_sppln_staging.h lays them out (the
 * test builds against the installed API headers only) */
typedef struct {
    uint64_t sent[4];     /* auto (unused), bcopy, sppln, zcopy */
    uint64_t received[4];
    uint64_t reg_fallback;
    uint64_t async_copies;
    uint64_t fresh[4]; /* kcopy, populate, fault, uffd */
    uint64_t rma[3];      /* put/choose, get/choose: bcopy, zcopy, staged */
    uint64_t groups[2]; /* staging groups registered: send, receive */
    uint64_t busy_zcopy; /* zero-copy because every send group was busy */
    uint64_t populated; /* first chunk faulted in after the RTR */
    uint64_t residency_probes; /* mincore() of a buffer, either side */
    uint64_t eager; /* zcopy sends handed to an eager protocol */
    uint64_t cached_staged; /* registered buffers the model staged */
    uint64_t cached_backoff; /* of them, slower than its zero-copy */
    uint64_t window_full; /* a full window of puts held the next back */
    uint64_t max_posted; /* most puts a transfer had in flight */
    uint64_t puts; /* notified puts (sub-blocks) posted */
    uint64_t thp; /* destinations given transparent huge pages */
    uint64_t collapsed; /* pieces collapsed into huge pages */
    uint64_t collapse_failed; /* collapses the kernel refused */
    uint64_t collapse_slow; /* collapses slower than small pages */
    uint64_t max_ahead; /* most bytes a transfer staged before it looked
                           for its RTR */
    uint64_t ahead_idle; /* bytes staged while waiting for RTRs */
    uint64_t acks; /* receiver: ACKs of consumed chunks sent */
    uint64_t zcopy_timed; /* zero-copy sends of registered buffers timed */
} sppln_stats_t;

const sppln_stats_t *ucp_proto_sppln_stats(ucp_worker_h worker);
void ucp_proto_sppln_test_fault(unsigned faults);
void ucp_proto_sppln_test_zcopy_scale(double scale);
void ucp_proto_sppln_test_staged_scale(double scale);

enum { SP_BCOPY = 1, SP_SPPLN = 2, SP_ZCOPY = 3 };
enum {
    SP_FRESH_KCOPY,
    SP_FRESH_POPULATE,
    SP_FRESH_FAULT,
    SP_FRESH_UFFD
};
enum { SP_RMA_BCOPY, SP_RMA_ZCOPY, SP_RMA_STAGED };

#define SPPLN_MB (1024ul * 1024ul)

/* What the three staging slots of the default size (1 MiB) hold: messages
 * up to that go through one staged copy, whatever the model's threshold of
 * the superpipeline (ucp_sppln_lane_model_init()) */
#define SPPLN_SLOTS_HOLD (3 * SPPLN_MB)

/* Where the automatic choice takes the superpipeline by a model */
static size_t sppln_sp_thresh(const ucs_calib_derived_t *d)
{
    return ucs_calib_sp_from(d, SPPLN_SLOTS_HOLD);
}

static void sppln_env(const char *path, const char *tls)
{
    if (!th_have_verbs_device("softverbs") && !th_have_verbs_device("mlx")) {
        TH_SKIP("no verbs device (softverbs not preloaded)");
    }
    setenv("UCX_TLS", tls, 1);
    setenv("UCX_PROTO_ENABLE", "y", 1);
    setenv("UCX_RNDV_SPPLN_PATH", path, 1);
    setenv("UCX_RNDV_SPPLN_TLS", "all", 1);
    /* every size the tests send goes through rndv/sppln, so that its
     * counters account for each message, and none smaller does */
    setenv("UCX_RNDV_SPPLN_THRESH", "64k", 1);
}

/* a fresh mapping for every message: never registered, never touched */
static uint8_t *sppln_map(size_t size, size_t *map_len)
{
    void *p;

    *map_len = size + 4096 + 64;
    p = mmap(NULL, *map_len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TH_ASSERT(p != MAP_FAILED);
    return p;
}

typedef struct {
    const char *path;
    const char *tls;
    size_t     max_size;
    int        copy_async; /* stage with the copy engine's helper thread */
    const char *model; /* hand-written cost model (UCX_CALIB_FILE) */
} sppln_arg_t;

static const size_t sppln_sizes[] = {
    64 * 1024, 64 * 1024 + 3, 300001, SPPLN_MB + 5, 4 * SPPLN_MB + 1,
    16 * SPPLN_MB, 64 * SPPLN_MB
};
#define SPPLN_NUM_SIZES (sizeof(sppln_sizes) / sizeof(sppln_sizes[0]))

/* progress until a message with this tag waits, unexpected, for its
 * receive (a rendezvous one: its RTS); it must announce size bytes */
static void sppln_wait_unexpected(th_ucp_t *ucp, ucp_tag_t tag, size_t size)
{
    double deadline = th_time() + 60.0;
    ucp_tag_recv_info_t info;

    while (ucp_tag_probe_nb(ucp->worker, tag, (ucp_tag_t)-1, 0, &info) ==
           NULL) {
        ucp_worker_progress(ucp->worker);
        if (th_time() > deadline) {
            TH_FAIL("message with tag 0x%llx did not arrive in 60 s",
                    (unsigned long long)tag);
        }
    }
    TH_ASSERT_EQ(info.length, size);
}

/* ACKs a receiver sends for the messages of sppln_sizes up to max_size
 * through the bcopy path, whose chunks are a slot each (1 MiB): one per
 * chunk whose slot a later chunk of its message takes, none for the last
 * three */
static uint64_t sppln_bcopy_acks(size_t max_size)
{
    uint64_t acks = 0;
    size_t chunks;
    unsigned i;

    for (i = 0; i < SPPLN_NUM_SIZES; ++i) {
        if (sppln_sizes[i] <= max_size) {
            chunks = (sppln_sizes[i] + SPPLN_MB - 1) / SPPLN_MB;
            acks += (chunks > 3) ? (chunks - 3) : 0;
        }
    }
    return acks;
}

static void sppln_integrity_rank(th_oob_t *oob, int rank, int nprocs,
                                 void *varg)
{
    const sppln_arg_t *arg    = varg;
    ucp_request_param_t param = {0};
    const sppln_stats_t *st;
    size_t size, map_len, off;
    unsigned i, n_sent = 0;
    uint8_t *map, *buf;
    th_ucp_t ucp;
    int dir;
    char go;

    sppln_env(arg->path, arg->tls);
    if (arg->copy_async && (arg->model == NULL)) {
        setenv("UCX_RNDV_SPPLN_COPY_ASYNC", "y", 1);
        setenv("UCX_COPY_ENGINE", "thread", 1);
    }
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    for (dir = 0; dir < 2; ++dir) {
        for (i = 0; i < SPPLN_NUM_SIZES; ++i) {
            size = sppln_sizes[i];
            if (size > arg->max_size) {
                continue;
            }
            off = (i * 7 + dir * 13) % 64; /* unaligned start */
            map = sppln_map(size, &map_len);
            buf = map + off;
            if (rank == dir) {
                th_fill_pattern(buf, size, dir * 1000 + i);
                /* odd messages arrive before their receive is posted */
                if (!(i & 1)) {
                    th_oob_recv(oob, 1 - rank, &go, 1);
                }
                TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                        ucp_tag_send_nbx(ucp.ep, buf, size, 0x100 + i,
                                         &param), 120.0));
                ++n_sent;
            } else {
                ucp_request_param_t rp = {0};
                void *req;

                memset(buf, 0xee, size + 1);
                if (i & 1) {
                    /* the RTS arrives first (unexpected): the receive is
                     * posted once a probe sees the message waiting */
                    sppln_wait_unexpected(&ucp, 0x100 + i, size);
                }
                req = ucp_tag_recv_nbx(ucp.worker, buf, size, 0x100 + i,
                                       (ucp_tag_t)-1, &rp);
                if (!(i & 1)) {
                    go = 1;
                    th_oob_send(oob, 1 - rank, &go, 1);
                }
                TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 120.0));
                TH_CHECK_PATTERN(buf, size, dir * 1000 + i);
                TH_ASSERT_EQ(buf[size], 0xee);
            }
            munmap(map, map_len);
        }
    }
    th_ucp_flush_barrier(&ucp, oob);

    st = ucp_proto_sppln_stats(ucp.worker);
    TH_ASSERT(st != NULL);
    th_log("rank %d sent bcopy %llu sppln %llu zcopy %llu, received bcopy "
           "%llu sppln %llu", rank, (unsigned long long)st->sent[SP_BCOPY],
           (unsigned long long)st->sent[SP_SPPLN],
           (unsigned long long)st->sent[SP_ZCOPY],
           (unsigned long long)st->received[SP_BCOPY],
           (unsigned long long)st->received[SP_SPPLN]);
    if (arg->copy_async) {
        /* several chunks per message: the engine staged some of them */
        th_log("rank %d: %llu chunks staged by the copy engine", rank,
               (unsigned long long)st->async_copies);
        TH_ASSERT(st->async_copies > 0);
    } else {
        TH_ASSERT_EQ(st->async_copies, 0);
    }
    if (!strcmp(arg->path, "bcopy")) {
        th_log("rank %d: %llu ACKs sent", rank, (unsigned long long)st->acks);
        TH_ASSERT_EQ(st->acks, sppln_bcopy_acks(arg->max_size));
    }
    if (!strcmp(arg->path, "auto")) {
        TH_ASSERT_EQ(st->sent[SP_BCOPY] + st->sent[SP_SPPLN] +
                     st->sent[SP_ZCOPY], n_sent);
    } else {
        TH_ASSERT_EQ(st->sent[!strcmp(arg->path, "bcopy") ? SP_BCOPY :
                              !strcmp(arg->path, "sppln") ? SP_SPPLN :
                              SP_ZCOPY], n_sent);
    }
    th_ucp_cleanup(&ucp);
}

static void sppln_run(th_proc_fn_t fn, sppln_arg_t *arg)
{
    char path[] = "/tmp/th-sppln-model-XXXXXX";
    FILE *f;
    int fd;

    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    if ((arg == NULL) || (arg->model == NULL)) {
        th_run_procs(2, fn, arg);
        return;
    }

    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    f = fdopen(fd, "w");
    TH_ASSERT(f != NULL);
    fputs(arg->model, f);
    fclose(f);
    setenv("UCX_CALIB_FILE", path, 1);
    th_run_procs(2, fn, arg);
    unlink(path);
}

#define SPPLN_PATH_TEST(_path, _max) \
    TH_TEST_TIMEOUT(sppln, integrity_##_path, 300) \
    { \
        sppln_arg_t arg = {#_path, "hcr", _max, 0, NULL}; \
        sppln_run(sppln_integrity_rank, &arg); \
    }

SPPLN_PATH_TEST(auto, 64 * SPPLN_MB)
SPPLN_PATH_TEST(sppln, 64 * SPPLN_MB)
SPPLN_PATH_TEST(bcopy, 16 * SPPLN_MB)
SPPLN_PATH_TEST(zcopy, 16 * SPPLN_MB)

/* the sender stages chunks with the copy engine (UCX_RNDV_SPPLN_COPY_ASYNC) */
TH_TEST_TIMEOUT(sppln, integrity_sppln_copy_engine, 300)
{
    sppln_arg_t arg = {"sppln", "hcr", 16 * SPPLN_MB, 1, NULL};

    sppln_run(sppln_integrity_rank, &arg);
}

/* A growth ratio off the RTS's 1/1024 grid, as a measured model gives:
 * the receiver builds its chunks from the ratio in the RTS, so the sender
 * must build them from that too. With the sender on its own, finer, ratio
 * the chunk boundaries parted once the difference crossed a page, and the
 * receiver failed the transfer ("sub-block does not fit chunk"): seen
 * across hosts, whose ranks measured their own models. A ratio near 1 from
 * a first chunk of a page makes many chunks, so that it surely does. */
TH_TEST_TIMEOUT(sppln, integrity_ratio_off_wire_grid, 300)
{
    sppln_arg_t arg = {"sppln", "hcr", 16 * SPPLN_MB, 0, NULL};

    setenv("UCX_RNDV_SPPLN_Q", "1.0999", 1);
    setenv("UCX_RNDV_SPPLN_C0", "4k", 1);
    sppln_run(sppln_integrity_rank, &arg);
}

/* UCX_RNDV_SPPLN_COPY_ASYNC=auto (the default) follows the measured model:
 * every other test runs with the host's measurement, where the helper
 * thread's CPU time cancels its overlap, and asserts the engine staged
 * nothing. Here the model says the thread backend copies as a DMA engine
 * would (overlap 0.9, no CPU of its own), and the engine is used. */
/* A message received at offset off of a mapping changed nothing around it:
 * the bytes before it are zero, the guard byte after it is 0xee */
static void sppln_check_around(const uint8_t *map, size_t off, size_t size)
{
    size_t k;

    TH_ASSERT_EQ(map[off + size], 0xee);
    for (k = 0; k < off; ++k) {
        TH_ASSERT_EQ(map[k], 0);
    }
}

/* a model with this network bandwidth (bytes/s) and gap (seconds), as
 * strings */
#define SPPLN_MODEL_NET(_bw, _gap)                                             \
    "reg_resident 4e-6 1e-10\n"                                                \
    "reg_nonresident 4e-6 4e-10\n"                                             \
    "dereg 4e-6 5e-11\n"                                                       \
    "copy 65536 2e10\n"                                                        \
    "copy 67108864 8e9\n"                                                      \
    "net_latency 2e-6\n"                                                       \
    "net_bw " _bw "\n"                                                         \
    "net_gap " _gap "\n"

#define SPPLN_MODEL_BASE SPPLN_MODEL_NET("5e9", "1e-7")

TH_TEST_TIMEOUT(sppln, copy_engine_auto_dma_like_model, 300)
{
    sppln_arg_t arg = {"sppln", "hcr", 16 * SPPLN_MB, 1,
                       SPPLN_MODEL_BASE
                       "engine thread 2e-7 5e-8 3e10 0.9 0\n"};

    sppln_run(sppln_integrity_rank, &arg);
}

/* the same engine, charged with its threads' CPU time: not used */
TH_TEST_TIMEOUT(sppln, copy_engine_auto_thread_model, 300)
{
    sppln_arg_t arg = {"sppln", "hcr", 16 * SPPLN_MB, 0,
                       SPPLN_MODEL_BASE
                       "engine thread 2e-7 5e-8 3e10 0.9 3.3e-11\n"};

    sppln_run(sppln_integrity_rank, &arg);
}

/* rc_verbs has no put-with-notify: each put is followed by an AM */
TH_TEST_TIMEOUT(sppln, generic_lane_rc_verbs, 300)
{
    sppln_arg_t arg = {"sppln", "rc_v", 16 * SPPLN_MB, 0, NULL};

    sppln_run(sppln_integrity_rank, &arg);
}

/* ---- a buffer sent before is registered, a fresh one at its address not */

#define SPPLN_REUSE_SIZE (256 * 1024)

/* rank 0 sends from @a buf; returns how many sends so far went zero-copy */
static uint64_t sppln_reuse_send(th_ucp_t *ucp, th_oob_t *oob, uint8_t *buf,
                                 unsigned tag)
{
    ucp_request_param_t param = {0};
    char go;

    th_fill_pattern(buf, SPPLN_REUSE_SIZE, tag);
    th_oob_recv(oob, 1, &go, 1);
    TH_ASSERT_UCS_OK(th_ucp_wait(ucp, ucp_tag_send_nbx(ucp->ep, buf,
                                                       SPPLN_REUSE_SIZE, tag,
                                                       &param), 120.0));
    return ucp_proto_sppln_stats(ucp->worker)->sent[SP_ZCOPY];
}

static void sppln_reuse_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const int prot = PROT_READ | PROT_WRITE;
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    ucp_request_param_t param = {0};
    uint8_t *buf, *again;
    th_ucp_t ucp;
    unsigned tag;
    char go = 1;

    sppln_env("auto", "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    if (rank == 1) {
        buf = malloc(SPPLN_REUSE_SIZE);
        TH_ASSERT(buf != NULL);
        for (tag = 1; tag <= 3; ++tag) {
            void *req = ucp_tag_recv_nbx(ucp.worker, buf, SPPLN_REUSE_SIZE,
                                         tag, (ucp_tag_t)-1, &param);
            th_oob_send(oob, 0, &go, 1);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 120.0));
            TH_CHECK_PATTERN(buf, SPPLN_REUSE_SIZE, tag);
        }
        free(buf);
    } else {
        buf = mmap(NULL, SPPLN_REUSE_SIZE, prot, flags, -1, 0);
        TH_ASSERT(buf != MAP_FAILED);
        /* below the model's zero-copy size: a first send is staged */
        TH_ASSERT_EQ(sppln_reuse_send(&ucp, oob, buf, 1), 0);
        /* sent before: registered, so that later sends hit the cache */
        TH_ASSERT_EQ(sppln_reuse_send(&ucp, oob, buf, 2), 1);
        /* unmapped, and mapped fresh at the same address: staged again */
        TH_ASSERT_EQ(munmap(buf, SPPLN_REUSE_SIZE), 0);
        again = mmap(buf, SPPLN_REUSE_SIZE, prot,
                     flags | MAP_FIXED_NOREPLACE, -1, 0);
        TH_ASSERT(again == buf);
        TH_ASSERT_EQ(sppln_reuse_send(&ucp, oob, again, 3), 1);
        munmap(again, SPPLN_REUSE_SIZE);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, unmapped_buffer_is_fresh, 300)
{
    sppln_arg_t arg = {"auto", "hcr", 0, 0, SPPLN_MODEL_BASE};

    sppln_run(sppln_reuse_rank, &arg);
}

/* ---- receive buffers nobody touched ----------------------------------- */

/* the base model with a receiver that faults pages in at 1 GB/s, slower
 * than the network's 5 GB/s */
#define SPPLN_MODEL_SLOW_FAULTS                                                \
    SPPLN_MODEL_BASE                                                           \
    "copy_fault 0 1e-9\n"

/* and one that faults them in at 100 GB/s */
#define SPPLN_MODEL_FAST_FAULTS                                                \
    SPPLN_MODEL_BASE                                                           \
    "copy_fault 0 1e-11\n"

typedef struct {
    sppln_arg_t super; /* a model whose receiver is not the bottleneck: it
                          faults in the first chunk only, unless ahead */
    const char *how; /* UCX_RNDV_SPPLN_FRESH_COPY */
    int        fresh;  /* the counter it must move */
    int ahead; /* UCX_RNDV_SPPLN_FRESH_AHEAD: no counter moves */
} sppln_fresh_arg_t;

static const size_t sppln_fresh_sizes[] = {
    64 * 1024 + 3, 300001, SPPLN_MB + 5, 4 * SPPLN_MB + 1
};

/*
 * Rank 0 sends, rank 1 receives into fresh mappings it never touched
 * (except the guard byte after the message, on the last page), at unaligned
 * offsets: every byte must land, nothing before or after the message may
 * change, and the receiver's counter says the copy-out took the configured
 * way (with the destination faulted in ahead, none: every sub-block lands
 * in resident pages). Then one receive into a written buffer, which must
 * not.
 */
static void sppln_fresh_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_fresh_arg_t *arg = varg;
    ucp_request_param_t param    = {0};
    size_t size, map_len, off, n, before;
    const sppln_stats_t *st;
    uint8_t *map, *buf;
    unsigned i;
    th_ucp_t ucp;
    void *req;
    char go;

    sppln_env("sppln", "hcr");
    setenv("UCX_RNDV_SPPLN_FRESH_COPY", arg->how, 1);
    setenv("UCX_RNDV_SPPLN_FRESH_AHEAD", arg->ahead ? "y" : "n", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    n = sizeof(sppln_fresh_sizes) / sizeof(sppln_fresh_sizes[0]);
    for (i = 0; i <= n; ++i) {
        size = sppln_fresh_sizes[(i < n) ? i : 0];
        off  = (i * 11 + 5) % 64;
        map  = sppln_map(size, &map_len);
        buf  = map + off;
        if (rank == 0) {
            th_fill_pattern(buf, size, 500 + i);
            th_oob_recv(oob, 1, &go, 1);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                    ucp_tag_send_nbx(ucp.ep, buf, size, 0x200 + i, &param),
                    120.0));
        } else {
            st     = ucp_proto_sppln_stats(ucp.worker);
            before = (st == NULL) ? 0 : st->fresh[arg->fresh];
            buf[size] = 0xee;
            if (i == n) {
                /* the application wrote its receive buffer: resident */
                memset(buf, 0x11, size);
            }
            req = ucp_tag_recv_nbx(ucp.worker, buf, size, 0x200 + i,
                                   (ucp_tag_t)-1, &param);
            go = 1;
            th_oob_send(oob, 0, &go, 1);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 120.0));
            TH_CHECK_PATTERN(buf, size, 500 + i);
            sppln_check_around(map, off, size);
            st = ucp_proto_sppln_stats(ucp.worker);
            TH_ASSERT(st != NULL);
            if ((i < n) && !arg->ahead) {
                /* at least one sub-block per message */
                TH_ASSERT_GT(st->fresh[arg->fresh], before);
            } else {
                TH_ASSERT_EQ(st->fresh[arg->fresh], before);
            }
        }
        munmap(map, map_len);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/* One tagged message from rank 0 to rank 1, sent once rank 1 has posted
 * its receive (so that it is expected): rank 0's part */
static void sppln_send_to_posted(th_ucp_t *ucp, th_oob_t *oob, void *buf,
                                 size_t size, ucp_tag_t tag)
{
    ucp_request_param_t param = {0};
    char go;

    th_oob_recv(oob, 1, &go, 1);
    TH_ASSERT_UCS_OK(
            th_ucp_wait(ucp, ucp_tag_send_nbx(ucp->ep, buf, size, tag, &param),
                        60.0));
}

/* ... and rank 1's */
static void sppln_recv_posted(th_ucp_t *ucp, th_oob_t *oob, void *buf,
                              size_t size, ucp_tag_t tag)
{
    ucp_request_param_t param = {0};
    char go                   = 1;
    void *req;

    req = ucp_tag_recv_nbx(ucp->worker, buf, size, tag, (ucp_tag_t)-1, &param);
    th_oob_send(oob, 0, &go, 1);
    TH_ASSERT_UCS_OK(th_ucp_wait(ucp, req, 60.0));
}

/* sppln_recv_posted() of a message filled with pattern 'seed', checked;
 * *before and *after: the worker's counters around it */
static void sppln_recv_counted(th_ucp_t *ucp, th_oob_t *oob, void *buf,
                               size_t size, ucp_tag_t tag, unsigned seed,
                               sppln_stats_t *before, sppln_stats_t *after)
{
    const sppln_stats_t *st = ucp_proto_sppln_stats(ucp->worker);

    if (st == NULL) {
        memset(before, 0, sizeof(*before));
    } else {
        *before = *st;
    }
    sppln_recv_posted(ucp, oob, buf, size, tag);
    TH_CHECK_PATTERN(buf, size, seed);
    st = ucp_proto_sppln_stats(ucp->worker);
    TH_ASSERT(st != NULL);
    *after = *st;
}

/* The counter of sub-blocks copied into untouched pages the 'which' way
 * moved between *before and *after, or did not */
static void sppln_check_fresh(const sppln_stats_t *before,
                              const sppln_stats_t *after, int which, int moved)
{
    if (moved) {
        TH_ASSERT_GT(after->fresh[which], before->fresh[which]);
    } else {
        TH_ASSERT_EQ(after->fresh[which], before->fresh[which]);
    }
}

/*
 * A message that fits in its first chunk (bcopy, 256 KiB) into an untouched
 * destination at an odd offset: the receiver faults the destination in after
 * its RTR, while the data is on its way, and copies the data out with
 * memcpy, not a copy per sub-block into untouched pages; every byte lands,
 * none around the message changes. Then the same into a buffer the
 * application wrote: nothing to fault in.
 */
#define SPPLN_POPULATE_SIZE (256 * 1024)

typedef struct {
    sppln_arg_t super; /* the path, the message's size (max_size), and a
                          model */
    int fresh_ahead; /* UCX_RNDV_SPPLN_FRESH_AHEAD */
    int ahead; /* whether the receiver faults in every chunk the sender
                  may put before an ACK (all of the message), or the
                  first chunk only */
} sppln_populate_arg_t;

static void sppln_populate_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_populate_arg_t *arg = varg;
    size_t size = (arg != NULL) ? arg->super.max_size : SPPLN_POPULATE_SIZE;
    sppln_stats_t before, after;
    size_t map_len, k;
    uint8_t *map, *buf;
    th_ucp_t ucp;
    unsigned i;

    sppln_env((arg != NULL) ? arg->super.path : "bcopy", "hcr");
    /* faulting in ahead is what the populating ways do; uffd does not */
    setenv("UCX_RNDV_SPPLN_FRESH_COPY", "kcopy", 1);
    setenv("UCX_RNDV_SPPLN_FRESH_AHEAD",
           ((arg != NULL) && !arg->fresh_ahead) ? "n" : "y", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    for (i = 0; i < 2; ++i) {
        map = sppln_map(size + 4096, &map_len);
        buf = map + 100;
        if (rank == 0) {
            th_fill_pattern(buf, size, 950 + i);
            sppln_send_to_posted(&ucp, oob, buf, size, 0x600 + i);
        } else {
            if (i == 1) {
                memset(buf, 0x11, size);
            }
            sppln_recv_counted(&ucp, oob, buf, size, 0x600 + i, 950 + i,
                               &before, &after);
            for (k = 0; k < 100; ++k) {
                TH_ASSERT_EQ(map[k], 0);
            }
            for (k = 100 + size; k < map_len; ++k) {
                TH_ASSERT_EQ(map[k], 0);
            }
            th_log("%zu bytes into %s pages: %lu sub-blocks copied into "
                   "untouched pages",
                   size, (i == 0) ? "untouched" : "written",
                   (unsigned long)(after.fresh[SP_FRESH_KCOPY] -
                                   before.fresh[SP_FRESH_KCOPY]));
            TH_ASSERT_EQ(after.populated - before.populated, (i == 0) ? 1 : 0);
            sppln_check_fresh(&before, &after, SP_FRESH_KCOPY,
                              (i == 0) && (arg != NULL) && !arg->ahead);
        }
        munmap(map, map_len);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, fresh_destination_populated_early, 120)
{
    sppln_run(sppln_populate_rank, NULL);
}

/*
 * By default the receiver faults in all of an untouched destination ahead
 * of the data: 2.5 MiB in 1 MiB chunks lands without a copy into untouched
 * pages, whatever the model. With UCX_RNDV_SPPLN_FRESH_AHEAD=n, where the
 * receiver faults pages in slower than the network delivers them, it
 * faults in as much as its three slots hold after its RTR (here all of
 * it); where it faults them faster, only the first chunk, and the rest is
 * copied into untouched pages as it lands.
 */
TH_TEST_TIMEOUT(sppln, fresh_destination_populated_ahead, 120)
{
    sppln_populate_arg_t arg = {{"bcopy", "hcr", 5 * SPPLN_MB / 2, 0,
                                 SPPLN_MODEL_FAST_FAULTS},
                                1,
                                1};

    sppln_run(sppln_populate_rank, &arg.super);

    arg.fresh_ahead = 0;
    arg.super.model = SPPLN_MODEL_SLOW_FAULTS;
    sppln_run(sppln_populate_rank, &arg.super);

    arg.super.model = SPPLN_MODEL_FAST_FAULTS;
    arg.ahead       = 0;
    sppln_run(sppln_populate_rank, &arg.super);
}

#define SPPLN_FRESH_TEST(_name, _how, _counter, _ahead)                        \
    TH_TEST_TIMEOUT(sppln, fresh_destination_##_name, 120)                     \
    {                                                                          \
        sppln_fresh_arg_t arg = {{"sppln", "hcr", 0, 0,                        \
                                  SPPLN_MODEL_FAST_FAULTS},                    \
                                 #_how,                                        \
                                 _counter,                                     \
                                 _ahead};                                      \
        sppln_run(sppln_fresh_rank, &arg.super);                               \
    }

SPPLN_FRESH_TEST(kcopy, kcopy, SP_FRESH_KCOPY, 0)
SPPLN_FRESH_TEST(populate, populate, SP_FRESH_POPULATE, 0)
SPPLN_FRESH_TEST(fault, fault, SP_FRESH_FAULT, 0)
SPPLN_FRESH_TEST(ahead, kcopy, SP_FRESH_KCOPY, 1)

/* ---- transparent huge pages for a fresh destination ------------------- */

#define SPPLN_THP_SIZE (2 * SPPLN_MB)

/* the kernel's transparent_hugepage mode: "always", "madvise", "never", or
 * NULL where it has none */
static const char *sppln_thp_mode(void)
{
    static char line[128];
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char *open_br, *close_br;

    if (f == NULL) {
        return NULL;
    }
    if (fgets(line, sizeof(line), f) == NULL) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    open_br  = strchr(line, '[');
    close_br = (open_br != NULL) ? strchr(open_br, ']') : NULL;
    if (close_br == NULL) {
        return NULL;
    }
    *close_br = '\0';
    return open_br + 1;
}

/* KiB of huge pages backing [addr, addr + len), and in *vmas the mappings
 * that overlap it, in *uffd_vmas those of them registered with a
 * userfaultfd for missing pages (VmFlags "um"), each where not NULL
 * (/proc/self/smaps) */
static unsigned long sppln_anon_huge_kb(const void *addr, size_t len,
                                        unsigned *vmas, unsigned *uffd_vmas)
{
    uintptr_t lo = (uintptr_t)addr, hi = lo + len, start, end;
    unsigned long kb, total            = 0;
    unsigned count = 0, uffd = 0;
    int inside = 0;
    char line[512];
    FILE *f;

    f = fopen("/proc/self/smaps", "r");
    TH_ASSERT(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2) {
            inside = (start < hi) && (end > lo);
            count += inside;
        } else if (inside &&
                   (sscanf(line, "AnonHugePages: %lu kB", &kb) == 1)) {
            total += kb;
        } else if (inside && !strncmp(line, "VmFlags:", 8)) {
            uffd += (strstr(line, " um") != NULL);
        }
    }
    fclose(f);
    if (vmas != NULL) {
        *vmas = count;
    }
    if (uffd_vmas != NULL) {
        *uffd_vmas = uffd;
    }
    return total;
}

/* Whether this kernel collapses an anonymous piece with one page into a
 * huge page (MADV_COLLAPSE, Linux 6.1, transparent huge pages not "never") */
static int sppln_can_collapse(void)
{
    size_t map_len;
    uint8_t *map   = sppln_map(2 * SPPLN_THP_SIZE, &map_len);
    uint8_t *piece = (uint8_t *)ucs_align_up((uintptr_t)map, SPPLN_THP_SIZE);
    int ok;

    piece[0] = 1;
    ok       = (madvise(piece, SPPLN_THP_SIZE, 25 /* MADV_COLLAPSE */) == 0);
    munmap(map, map_len);
    return ok;
}

typedef enum {
    SPPLN_HUGE_THP, /* UCX_RNDV_SPPLN_FRESH_THP=y */
    SPPLN_HUGE_COLLAPSE, /* UCX_RNDV_SPPLN_FRESH_COLLAPSE=y */
    SPPLN_HUGE_NONE /* the defaults */
} sppln_huge_mode_t;

/*
 * A staged message of 8 MiB into an untouched buffer that starts on a huge
 * page boundary, in its own mapping 2 MiB longer:
 *  - with UCX_RNDV_SPPLN_FRESH_THP=y (and COLLAPSE=y, which it makes
 *    needless: nothing is collapsed), the receiver asks for transparent
 *    huge pages once, and (where the kernel offers them) the message lands
 *    in them; the flag splits the mapping;
 *  - with UCX_RNDV_SPPLN_FRESH_COLLAPSE=y, it collapses the four pieces
 *    into huge pages (where the kernel can) and leaves the mapping whole:
 *    one mapping still covers the buffer;
 *  - by default, it does neither, and where the kernel gives huge pages
 *    only on request, none back the buffer.
 * The bytes are all there every time.
 */
static void sppln_huge_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_huge_mode_t *mode = varg;
    const char *kmode             = sppln_thp_mode();
    const size_t size             = 8 * SPPLN_MB;
    sppln_stats_t b, a; /* counters before and after */
    unsigned long huge_kb;
    unsigned vmas;
    size_t map_len;
    uint8_t *map, *buf;
    th_ucp_t ucp;
    int can;

    (void)nprocs;
    sppln_env("sppln", "hcr");
    if (*mode == SPPLN_HUGE_THP) {
        /* both: THP's huge pages leave nothing to collapse */
        setenv("UCX_RNDV_SPPLN_FRESH_THP", "y", 1);
        setenv("UCX_RNDV_SPPLN_FRESH_COLLAPSE", "y", 1);
    } else if (*mode == SPPLN_HUGE_COLLAPSE) {
        setenv("UCX_RNDV_SPPLN_FRESH_COLLAPSE", "y", 1);
    }
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    map = sppln_map(size + SPPLN_THP_SIZE, &map_len);
    buf = (uint8_t *)ucs_align_up((uintptr_t)map, SPPLN_THP_SIZE);
    if (rank == 0) {
        th_fill_pattern(buf, size, 31);
        sppln_send_to_posted(&ucp, oob, buf, size, 0x960);
    } else {
        can = sppln_can_collapse();
        sppln_recv_counted(&ucp, oob, buf, size, 0x960, 31, &b, &a);
        huge_kb = sppln_anon_huge_kb(buf, size, NULL, NULL);
        (void)sppln_anon_huge_kb(map, map_len, &vmas, NULL);
        th_log("mode %d, kernel mode %s, MADV_COLLAPSE %s: thp %llu, "
               "collapsed %llu, failed %llu, slow %llu, %lu KiB in huge "
               "pages, %u mappings",
               (int)*mode, (kmode != NULL) ? kmode : "none",
               can ? "works" : "refused", (unsigned long long)(a.thp - b.thp),
               (unsigned long long)(a.collapsed - b.collapsed),
               (unsigned long long)(a.collapse_failed - b.collapse_failed),
               (unsigned long long)(a.collapse_slow - b.collapse_slow), huge_kb,
               vmas);
        switch (*mode) {
        case SPPLN_HUGE_THP:
            TH_ASSERT_EQ(a.thp - b.thp, 1);
            TH_ASSERT_EQ(a.collapsed, b.collapsed);
            if ((kmode != NULL) && strcmp(kmode, "never")) {
                TH_ASSERT_GT(huge_kb, 0);
                TH_ASSERT_GT(vmas, 1);
            }
            break;
        case SPPLN_HUGE_COLLAPSE:
            TH_ASSERT_EQ(a.thp, b.thp);
            if (can) {
                /* every piece, unless a slow collapse (one that waited
                 * for work the kernel queued on the other core) left the
                 * rest of the transfer to small pages */
                if (a.collapse_slow == b.collapse_slow) {
                    TH_ASSERT_EQ(a.collapsed - b.collapsed,
                                 size / SPPLN_THP_SIZE);
                } else {
                    TH_ASSERT_EQ(a.collapse_slow - b.collapse_slow, 1);
                    TH_ASSERT_GE(a.collapsed - b.collapsed, 1);
                }
                TH_ASSERT_EQ(a.collapse_failed, b.collapse_failed);
                TH_ASSERT_EQ(huge_kb, (a.collapsed - b.collapsed) *
                                              (SPPLN_THP_SIZE / 1024));
            } else {
                /* the first refusal ends collapses in the worker */
                TH_ASSERT_EQ(a.collapsed, b.collapsed);
                TH_ASSERT_EQ(a.collapse_failed - b.collapse_failed, 1);
            }
            TH_ASSERT_EQ(vmas, 1);
            break;
        case SPPLN_HUGE_NONE:
            TH_ASSERT_EQ(a.thp, b.thp);
            TH_ASSERT_EQ(a.collapsed, b.collapsed);
            TH_ASSERT_EQ(a.collapse_failed, b.collapse_failed);
            if ((kmode != NULL) && !strcmp(kmode, "madvise")) {
                TH_ASSERT_EQ(huge_kb, 0);
            }
            TH_ASSERT_EQ(vmas, 1);
            break;
        }
    }
    munmap(map, map_len);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/* 8 MiB messages into untouched buffers on a huge page boundary, with
 * UCX_RNDV_SPPLN_FRESH_COLLAPSE=y and a model without copy_fault, which
 * leaves collapses untimed (on two busy cores a real one is often slow) */
typedef struct {
    sppln_arg_t super;
    unsigned fault; /* armed on the receiver before the first */
    int nohugepage_first; /* the first destination is marked
                             MADV_NOHUGEPAGE */
    /* checks message i by the receiver's counters before and after */
    void (*check)(int i, const sppln_stats_t *b, const sppln_stats_t *a,
                  unsigned long huge_kb);
} sppln_collapse_arg_t;

#define SPPLN_COLLAPSE_MSGS 3

static void sppln_collapse_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_collapse_arg_t *arg = varg;
    const size_t size               = 8 * SPPLN_MB;
    sppln_stats_t b, a; /* counters before and after */
    size_t map_len;
    uint8_t *map, *buf;
    th_ucp_t ucp;
    int i;

    (void)nprocs;
    sppln_env("sppln", "hcr");
    setenv("UCX_RNDV_SPPLN_FRESH_COLLAPSE", "y", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    if (rank == 1) {
        ucp_proto_sppln_test_fault(arg->fault);
    }
    for (i = 0; i < SPPLN_COLLAPSE_MSGS; ++i) {
        map = sppln_map(size + SPPLN_THP_SIZE, &map_len);
        buf = (uint8_t *)ucs_align_up((uintptr_t)map, SPPLN_THP_SIZE);
        if (rank == 0) {
            th_fill_pattern(buf, size, 40 + i);
            sppln_send_to_posted(&ucp, oob, buf, size, 0x970 + i);
        } else {
            if ((i == 0) && arg->nohugepage_first) {
                TH_ASSERT_EQ(madvise(map, map_len, MADV_NOHUGEPAGE), 0);
            }
            sppln_recv_counted(&ucp, oob, buf, size, 0x970 + i, 40 + i, &b, &a);
            arg->check(i, &b, &a, sppln_anon_huge_kb(buf, size, NULL, NULL));
        }
        munmap(map, map_len);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/*
 * A collapse slower than the pieces' faults in small pages (the test
 * harness makes the first one count as slow) leaves the rest of its
 * transfer and the next one to small pages; the one after collapses again.
 */
static void sppln_slow_collapse_check(int i, const sppln_stats_t *b,
                                      const sppln_stats_t *a,
                                      unsigned long huge_kb)
{
    /* pieces collapsed by each message */
    static const uint64_t expect[SPPLN_COLLAPSE_MSGS] = {1, 0, 4 /* all */};
    const char *kmode                                 = sppln_thp_mode();

    th_log("message %d: collapsed %llu, slow %llu, %lu KiB in huge pages", i,
           (unsigned long long)(a->collapsed - b->collapsed),
           (unsigned long long)(a->collapse_slow - b->collapse_slow), huge_kb);
    if (!sppln_can_collapse()) {
        TH_ASSERT_EQ(a->collapsed, b->collapsed);
        return;
    }
    TH_ASSERT_EQ(a->collapse_slow - b->collapse_slow, (i == 0) ? 1 : 0);
    TH_ASSERT_EQ(a->collapsed - b->collapsed, expect[i]);
    if ((kmode != NULL) && !strcmp(kmode, "madvise")) {
        TH_ASSERT_EQ(huge_kb, expect[i] * (SPPLN_THP_SIZE / 1024));
    }
}

/*
 * A collapse the kernel refuses ends collapses in the worker: the first
 * destination is in a mapping marked MADV_NOHUGEPAGE, which MADV_COLLAPSE
 * refuses; the next ones, in ordinary mappings, are not collapsed either.
 */
static void sppln_refused_collapse_check(int i, const sppln_stats_t *b,
                                         const sppln_stats_t *a,
                                         unsigned long huge_kb)
{
    th_log("message %d: collapsed %llu, refused %llu", i,
           (unsigned long long)(a->collapsed - b->collapsed),
           (unsigned long long)(a->collapse_failed - b->collapse_failed));
    TH_ASSERT_EQ(a->collapsed, b->collapsed);
    TH_ASSERT_EQ(a->collapse_failed - b->collapse_failed, (i == 0) ? 1 : 0);
    TH_ASSERT_EQ(huge_kb, 0);
}

TH_TEST_TIMEOUT(sppln, fresh_destination_huge_pages, 120)
{
    sppln_huge_mode_t mode;

    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    for (mode = SPPLN_HUGE_THP; mode <= SPPLN_HUGE_NONE; ++mode) {
        th_run_procs(2, sppln_huge_rank, &mode);
    }
}

TH_TEST_TIMEOUT(sppln, fresh_destination_collapse_refused_stops, 120)
{
    sppln_collapse_arg_t arg = {{"sppln", "hcr", 0, 0, SPPLN_MODEL_BASE},
                                0,
                                1,
                                sppln_refused_collapse_check};

    sppln_run(sppln_collapse_rank, &arg.super);
}

TH_TEST_TIMEOUT(sppln, fresh_destination_slow_collapse_backs_off, 120)
{
    sppln_collapse_arg_t arg = {{"sppln", "hcr", 0, 0, SPPLN_MODEL_BASE},
                                1u << 7, /* UCP_SPPLN_FAULT_SLOW_COLLAPSE */
                                0,
                                sppln_slow_collapse_check};

    sppln_run(sppln_collapse_rank, &arg.super);
}

/* ---- untouched pages filled by userfaultfd ---------------------------- */

/* Rank's UCP with rndv/sppln forced, fresh buffers filled by userfaultfd:
 * ahead and min, UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD and _MIN (NULL: the
 * default), set whatever the environment says */
static void sppln_uffd_init(th_ucp_t *ucp, th_oob_t *oob, int rank,
                            const char *ahead, const char *min)
{
    sppln_env("sppln", "hcr");
    setenv("UCX_RNDV_SPPLN_FRESH_COPY", "uffd", 1);
    setenv("UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD", ahead, 1);
    if (min == NULL) {
        unsetenv("UCX_RNDV_SPPLN_FRESH_UFFD_MIN");
    } else {
        setenv("UCX_RNDV_SPPLN_FRESH_UFFD_MIN", min, 1);
    }
    th_ucp_init(ucp, UCP_FEATURE_TAG);
    th_ucp_connect(ucp, oob, 1 - rank, 0);
}

/* No mapping of [addr, addr + len) is registered with a userfaultfd, and it
 * is one mapping: a receive's registration ended, and the mapping the
 * kernel split for it was merged back */
static void sppln_check_unregistered(const void *addr, size_t len)
{
    unsigned vmas, uffd_vmas;

    (void)sppln_anon_huge_kb(addr, len, &vmas, &uffd_vmas);
    TH_ASSERT_EQ(uffd_vmas, 0);
    TH_ASSERT_EQ(vmas, 1);
}

typedef struct {
    sppln_arg_t super;
    const char *uffd_min; /* UCX_RNDV_SPPLN_FRESH_UFFD_MIN */
    size_t uffd_min_bytes; /* ... in bytes */
    int touched; /* the receiver wrote, before the receive, none of its
                    buffer's whole pages (0), 8 of them (1), all (2) */
} sppln_uffd_arg_t;

/* present whole pages a receive fills around before it copies the rest as
 * usual (UCP_SPPLN_UFFD_MAX_PRESENT) */
#define SPPLN_UFFD_MAX_PRESENT 32

/*
 * Rank 0 sends, rank 1 receives into fresh mappings at odd offsets with
 * UCX_RNDV_SPPLN_FRESH_COPY=uffd, so that every sub-block shares its first
 * and last page with its neighbours (those parts go in through the bounce
 * page). Each message lands whole, nothing around it changes, the uffd
 * counter moves where the destination has uffd_min bytes of whole pages or
 * more and stays where it has fewer, and after each receive no mapping of
 * the buffer is registered any longer and its mapping is one again. With
 * touched 1, every fifth whole page from the third, 8 at most, is written
 * before the receive: UFFDIO_COPY finds them present and they are written
 * with memcpy, nothing falls back. With touched 2 all its whole pages are
 * (the first, partial page is not, so the buffer still looks fresh): after
 * SPPLN_UFFD_MAX_PRESENT of them the receiver copies the rest as usual,
 * which a buffer of 64 whole pages and more shows in the populate counter.
 */
static void sppln_uffd_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_uffd_arg_t *arg = varg;
    size_t page                 = (size_t)sysconf(_SC_PAGESIZE);
    size_t size, map_len, off, whole, k, n, touch;
    sppln_stats_t before, after;
    uintptr_t first;
    uint8_t *map, *buf;
    th_ucp_t ucp;
    unsigned i;

    /* all of it filled by userfaultfd */
    sppln_uffd_init(&ucp, oob, rank, "0", arg->uffd_min);

    n = sizeof(sppln_fresh_sizes) / sizeof(sppln_fresh_sizes[0]);
    for (i = 0; i < n; ++i) {
        size  = sppln_fresh_sizes[i];
        off   = (i * 11 + 5) % 64;
        map   = sppln_map(size, &map_len);
        buf   = map + off;
        first = ucs_align_up((uintptr_t)buf, page);
        whole = ucs_align_down((uintptr_t)buf + size, page) - first;
        if (rank == 0) {
            th_fill_pattern(buf, size, 700 + i);
            sppln_send_to_posted(&ucp, oob, buf, size, 0x710 + i);
        } else {
            buf[size] = 0xee;
            for (k = (arg->touched == 1) ? (3 * page) : 0, touch = 0;
                 arg->touched && (k + page <= whole) &&
                 ((arg->touched == 2) || (touch < 8));
                 k += (arg->touched == 1) ? (5 * page) : page, ++touch) {
                memset((void *)(first + k), 0x11, page);
            }
            sppln_check_unregistered(map, map_len);
            sppln_recv_counted(&ucp, oob, buf, size, 0x710 + i, 700 + i,
                               &before, &after);
            sppln_check_around(map, off, size);
            th_log("%zu bytes, %zu of them in whole pages: %lu sub-blocks "
                   "filled by userfaultfd",
                   size, whole,
                   (unsigned long)(after.fresh[SP_FRESH_UFFD] -
                                   before.fresh[SP_FRESH_UFFD]));
            sppln_check_fresh(&before, &after, SP_FRESH_UFFD,
                              whole >= arg->uffd_min_bytes);
            if ((whole >= arg->uffd_min_bytes) &&
                ((arg->touched < 2) ||
                 (whole <= SPPLN_UFFD_MAX_PRESENT * page))) {
                /* no sub-block fell back to populating */
                sppln_check_fresh(&before, &after, SP_FRESH_POPULATE, 0);
            } else if ((whole >= arg->uffd_min_bytes) && (whole >= 64 * page)) {
                sppln_check_fresh(&before, &after, SP_FRESH_POPULATE, 1);
            }
            sppln_check_unregistered(map, map_len);
        }
        munmap(map, map_len);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/* sppln_uffd_rank() with these settings, where a userfaultfd can be had */
static void
sppln_uffd_run(const char *uffd_min, size_t uffd_min_bytes, int touched)
{
    sppln_uffd_arg_t arg = {{"sppln", "hcr", 0, 0, SPPLN_MODEL_FAST_FAULTS},
                            uffd_min,
                            uffd_min_bytes,
                            touched};

    if (!th_can_uffd()) {
        TH_SKIP("the kernel refuses a user-mode userfaultfd");
    }
    sppln_run(sppln_uffd_rank, &arg.super);
}

TH_TEST_TIMEOUT(sppln, fresh_destination_uffd, 120)
{
    sppln_uffd_run("0", 0, 0);
    /* the default minimum: 64 KiB and 300001 bytes are populated */
    sppln_uffd_run("384k", 384 * 1024, 0);
}

TH_TEST_TIMEOUT(sppln, fresh_destination_uffd_touched_pages, 120)
{
    sppln_uffd_run("0", 0, 1);
    sppln_uffd_run("0", 0, 2);
}

/* the fast-faults model with the costs of filling untouched buffers (those
 * of the benches' VM): faulted in and copied, 0.3 ns/B, the receiver is
 * slower than the model's network (5 GB/s, 0.2 ns/B) */
#define SPPLN_MODEL_FILL                                                       \
    SPPLN_MODEL_FAST_FAULTS                                                    \
    "fill_populate 1e-6 2.5e-10\n"                                             \
    "fill_uffd 5e-6 2.1e-10\n"

/* and one whose network (1 GB/s) is the slower */
#define SPPLN_MODEL_FILL_SLOW_NET                                              \
    SPPLN_MODEL_NET("1e9", "1e-7")                                             \
    "copy_fault 0 1e-11\n"                                                     \
    "fill_populate 1e-6 2.5e-10\n"                                             \
    "fill_uffd 5e-6 2.1e-10\n"

static const size_t sppln_uffd_ahead_sizes[] = {64 * 1024 + 3, SPPLN_MB + 5,
                                                4 * SPPLN_MB + 1};

/* what a receive of each of sppln_uffd_ahead_sizes must show */
enum {
    SP_AHEAD_ALL, /* faulted in ahead, all of it */
    SP_AHEAD_PART, /* its start faulted in ahead, the rest userfaultfd's */
    SP_AHEAD_SOME /* its start faulted in ahead, the rest either way */
};

typedef struct {
    sppln_arg_t super;
    const char *ahead; /* UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD */
    int expect[3];
    int busy; /* the receiver has a staged send of its own in flight */
} sppln_uffd_ahead_arg_t;

/* the receiver's own send of sppln_uffd_ahead_rank() */
#define SPPLN_UFFD_BUSY_SIZE (4 * SPPLN_MB)
#define SPPLN_UFFD_BUSY_TAG  0x8ff

/*
 * Rank 0 sends, rank 1 receives into fresh mappings at odd offsets with
 * UCX_RNDV_SPPLN_FRESH_COPY=uffd: the receiver faults in the start of the
 * buffer ahead of the data (the populate counter), and the rest, where it
 * does not fault in all of it, userfaultfd fills (its counter). Every byte
 * lands, nothing around the message changes, and nothing stays registered.
 * With busy, rank 1 first sends a message of its own that rank 0 receives
 * only at the end: its staging group is taken all along.
 */
static void
sppln_uffd_ahead_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_uffd_ahead_arg_t *arg = varg;
    ucp_request_param_t param         = {0};
    sppln_stats_t before, after;
    size_t size, map_len, off;
    uint8_t *map, *buf, *busy_buf;
    void *busy_req = NULL;
    th_ucp_t ucp;
    unsigned i;

    sppln_uffd_init(&ucp, oob, rank, arg->ahead, "0");

    busy_buf = malloc(SPPLN_UFFD_BUSY_SIZE);
    TH_ASSERT(busy_buf != NULL);
    if (arg->busy && (rank == 1)) {
        th_fill_pattern(busy_buf, SPPLN_UFFD_BUSY_SIZE, 899);
        busy_req = ucp_tag_send_nbx(ucp.ep, busy_buf, SPPLN_UFFD_BUSY_SIZE,
                                    SPPLN_UFFD_BUSY_TAG, &param);
        TH_ASSERT(UCS_PTR_IS_PTR(busy_req));
    }

    for (i = 0; i < sizeof(sppln_uffd_ahead_sizes) / sizeof(size_t); ++i) {
        size = sppln_uffd_ahead_sizes[i];
        off  = (i * 11 + 5) % 64;
        map  = sppln_map(size, &map_len);
        buf  = map + off;
        if (rank == 0) {
            th_fill_pattern(buf, size, 800 + i);
            sppln_send_to_posted(&ucp, oob, buf, size, 0x810 + i);
        } else {
            buf[size] = 0xee;
            sppln_recv_counted(&ucp, oob, buf, size, 0x810 + i, 800 + i,
                               &before, &after);
            sppln_check_around(map, off, size);
            th_log("%zu bytes: faulted in ahead %lu times, %lu sub-blocks "
                   "filled by userfaultfd",
                   size, (unsigned long)(after.populated - before.populated),
                   (unsigned long)(after.fresh[SP_FRESH_UFFD] -
                                   before.fresh[SP_FRESH_UFFD]));
            TH_ASSERT_EQ(after.populated - before.populated, 1);
            if (arg->expect[i] != SP_AHEAD_SOME) {
                sppln_check_fresh(&before, &after, SP_FRESH_UFFD,
                                  arg->expect[i] == SP_AHEAD_PART);
            }
            /* nothing fell back to populating sub-block by sub-block */
            sppln_check_fresh(&before, &after, SP_FRESH_POPULATE, 0);
            sppln_check_unregistered(map, map_len);
        }
        munmap(map, map_len);
    }

    if (arg->busy && (rank == 0)) {
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                     ucp_tag_recv_nbx(ucp.worker, busy_buf,
                                                      SPPLN_UFFD_BUSY_SIZE,
                                                      SPPLN_UFFD_BUSY_TAG,
                                                      (ucp_tag_t)-1, &param),
                                     60.0));
        TH_CHECK_PATTERN(busy_buf, SPPLN_UFFD_BUSY_SIZE, 899);
    } else if (arg->busy) {
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, busy_req, 60.0));
    }
    free(busy_buf);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

static void sppln_uffd_ahead_run(const char *model, const char *ahead,
                                 int small, int mid, int large, int busy)
{
    sppln_uffd_ahead_arg_t arg = {{"sppln", "hcr", 0, 0, model},
                                  ahead,
                                  {small, mid, large},
                                  busy};

    if (!th_can_uffd()) {
        TH_SKIP("the kernel refuses a user-mode userfaultfd");
    }
    sppln_run(sppln_uffd_ahead_rank, &arg.super);
}

TH_TEST_TIMEOUT(sppln, fresh_destination_uffd_ahead, 120)
{
    /* 128 KiB ahead: all of a smaller buffer */
    sppln_uffd_ahead_run(SPPLN_MODEL_FAST_FAULTS, "128k", SP_AHEAD_ALL,
                         SP_AHEAD_PART, SP_AHEAD_PART, 0);
    /* by the model, whose receiver is the bottleneck: what the wait for
     * the first sub-block hides (all of 64 KiB, where userfaultfd's fixed
     * cost would not pay), and userfaultfd for the rest */
    sppln_uffd_ahead_run(SPPLN_MODEL_FILL, "auto", SP_AHEAD_ALL, SP_AHEAD_SOME,
                         SP_AHEAD_PART, 0);
    /* by the model, whose receiver keeps up with its network: all */
    sppln_uffd_ahead_run(SPPLN_MODEL_FILL_SLOW_NET, "auto", SP_AHEAD_ALL,
                         SP_AHEAD_ALL, SP_AHEAD_ALL, 0);
    /* ... but not while its core is busy with a staged send of its own */
    sppln_uffd_ahead_run(SPPLN_MODEL_FILL_SLOW_NET, "auto", SP_AHEAD_ALL,
                         SP_AHEAD_SOME, SP_AHEAD_PART, 1);
}

/* What another thread of the receiver saw of a page of its buffer */
typedef struct {
    const uint8_t *page;
    uint8_t *copy;
    size_t size;
} sppln_uffd_reader_t;

static void *sppln_uffd_reader(void *arg)
{
    sppln_uffd_reader_t *reader = arg;

    memcpy(reader->copy, reader->page, reader->size);
    return NULL;
}

/*
 * While a fresh buffer is filled by userfaultfd, another thread of the
 * receiver reads its last page, which the data reaches last (8 MiB over a
 * 10 Gb/s link: about 7 ms). The reader waits for the page rather than
 * seeing zeros or hanging: the receive's UFFDIO_COPY wakes it, and what it
 * read is the message's data.
 */
static void
sppln_uffd_reader_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const size_t size         = 8 * SPPLN_MB;
    size_t page               = (size_t)sysconf(_SC_PAGESIZE);
    ucp_request_param_t param = {0};
    sppln_uffd_reader_t reader;
    unsigned uffd_vmas = 0;
    double deadline;
    pthread_t thread;
    size_t map_len;
    th_ucp_t ucp;
    uint8_t *buf;
    void *req;

    /* all of it filled by userfaultfd */
    sppln_uffd_init(&ucp, oob, rank, "0", NULL);
    buf = sppln_map(size, &map_len); /* page-aligned: all whole pages */
    if (rank == 0) {
        th_fill_pattern(buf, size, 79);
        TH_ASSERT_UCS_OK(th_ucp_wait(
                &ucp, ucp_tag_send_nbx(ucp.ep, buf, size, 0x79, &param), 60.0));
    } else {
        /* the RTS first, so that the receive starts at once */
        sppln_wait_unexpected(&ucp, 0x79, size);
        req = ucp_tag_recv_nbx(ucp.worker, buf, size, 0x79, (ucp_tag_t)-1,
                               &param);
        TH_ASSERT(!UCS_PTR_IS_ERR(req) && (req != NULL));
        deadline = th_time() + 10.0;
        while ((uffd_vmas == 0) && (th_time() < deadline) &&
               (ucp_request_check_status(req) == UCS_INPROGRESS)) {
            ucp_worker_progress(ucp.worker);
            (void)sppln_anon_huge_kb(buf, size, NULL, &uffd_vmas);
        }
        /* registered while the data is on its way */
        TH_ASSERT_EQ(uffd_vmas, 1);

        reader.page = buf + size - page;
        reader.size = page;
        reader.copy = malloc(page);
        TH_ASSERT(reader.copy != NULL);
        TH_ASSERT_EQ(pthread_create(&thread, NULL, sppln_uffd_reader, &reader),
                     0);
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 60.0));
        TH_ASSERT_EQ(pthread_join(thread, NULL), 0);
        TH_CHECK_PATTERN(buf, size, 79);
        TH_ASSERT(memcmp(reader.copy, reader.page, page) == 0);
        free(reader.copy);
        sppln_check_unregistered(buf, map_len);
    }
    munmap(buf, map_len);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, fresh_destination_uffd_concurrent_reader, 120)
{
    sppln_arg_t arg = {"sppln", "hcr", 0, 0, SPPLN_MODEL_FAST_FAULTS};

    if (!th_can_uffd()) {
        TH_SKIP("the kernel refuses a user-mode userfaultfd");
    }
    setenv("SOFTVERBS_LINK_GBPS", "10", 1);
    setenv("SOFTVERBS_LINK_LAT_US", "1", 1);
    sppln_run(sppln_uffd_reader_rank, &arg);
}

/* ---- active messages ------------------------------------------------- */

#define SPPLN_AM_ID      9
#define SPPLN_AM_MAGIC   0x5a5a5a5au
#define SPPLN_AM_DROPPED 6 /* more than the staging groups (4) */

typedef struct {
    th_ucp_t *ucp;
    uint8_t *buf; /* where the next message goes */
    size_t size; /* its size */
    uint32_t seed; /* the seed its header must carry */
    int drop; /* the handler does not take it */
    int received; /* messages completed or dropped */
    int errors;
} sppln_am_rx_t;

/* receive active messages SPPLN_AM_ID with cb(arg) on ucp's worker */
static void
sppln_am_set_handler(th_ucp_t *ucp, ucp_am_recv_callback_t cb, void *arg)
{
    ucp_am_handler_param_t hparam = {0};

    hparam.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                        UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hparam.id  = SPPLN_AM_ID;
    hparam.cb  = cb;
    hparam.arg = arg;
    TH_ASSERT_UCS_OK(ucp_worker_set_am_recv_handler(ucp->worker, &hparam));
}

/* progress ucp's worker until *received exceeds done, failing the test
 * after timeout_s */
static void sppln_progress_past(th_ucp_t *ucp, const int *received, int done,
                                double timeout_s)
{
    double deadline = th_time() + timeout_s;

    while (*(volatile const int *)received <= done) {
        ucp_worker_progress(ucp->worker);
        if (th_time() > deadline) {
            TH_FAIL("message %d did not arrive in %.0f s", done + 1, timeout_s);
        }
    }
}

static void
sppln_am_recv_done(void *request, ucs_status_t status, size_t length, void *arg)
{
    sppln_am_rx_t *rx = arg;

    if ((status != UCS_OK) || (length != rx->size)) {
        ++rx->errors;
    }
    ++rx->received;
    if (request != NULL) {
        ucp_request_free(request);
    }
}

static ucs_status_t sppln_am_cb(void *arg, const void *header,
                                size_t header_length, void *data, size_t length,
                                const ucp_am_recv_param_t *param)
{
    sppln_am_rx_t *rx = arg;
    uint32_t hdr[4];

    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
        (header_length != sizeof(hdr)) || (length != rx->size)) {
        ++rx->errors;
        ++rx->received;
        return UCS_OK;
    }
    memcpy(hdr, header, sizeof(hdr));
    if ((hdr[0] != SPPLN_AM_MAGIC) || (hdr[1] != rx->seed)) {
        ++rx->errors;
    }
    if (rx->drop) {
        /* not taken: UCX answers the RTS, the send completes */
        ++rx->received;
        return UCS_OK;
    }

    th_ucp_am_recv_data(rx->ucp, data, rx->buf, length, sppln_am_recv_done, rx);
    return UCS_OK;
}

/*
 * Rank 0 sends active messages with a user header through the staged path;
 * rank 1 takes some into buffers it never touched and drops others (more
 * than the staging groups, so a group leaked by a dropped message would
 * stall the last one), then takes one more.
 */
static void sppln_am_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    static const size_t sizes[] = {64 * 1024 + 3, SPPLN_MB + 5,
                                   4 * SPPLN_MB + 1};
    const unsigned n_taken      = sizeof(sizes) / sizeof(sizes[0]);
    const unsigned n_msgs       = n_taken + SPPLN_AM_DROPPED + 1;
    ucp_request_param_t param   = {0};
    sppln_am_rx_t rx            = {0};
    const sppln_stats_t *st;
    size_t size, map_len, off;
    uint8_t *map, *buf;
    uint32_t hdr[4];
    th_ucp_t ucp;
    unsigned i;
    char go;

    sppln_env("sppln", "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_AM);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    rx.ucp = &ucp;
    sppln_am_set_handler(&ucp, sppln_am_cb, &rx);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_RNDV;

    for (i = 0; i < n_msgs; ++i) {
        size = (i < n_taken) ? sizes[i] : sizes[1];
        off  = (i * 13 + 3) % 64;
        map  = sppln_map(size, &map_len);
        buf  = map + off;
        if (rank == 0) {
            th_fill_pattern(buf, size, 700 + i);
            hdr[0] = SPPLN_AM_MAGIC;
            hdr[1] = 700 + i;
            hdr[2] = hdr[3] = 0;
            th_oob_recv(oob, 1, &go, 1);
            TH_ASSERT_UCS_OK(
                    th_ucp_wait(&ucp,
                                ucp_am_send_nbx(ucp.ep, SPPLN_AM_ID, hdr,
                                                sizeof(hdr), buf, size, &param),
                                120.0));
        } else {
            rx.buf    = buf;
            rx.size   = size;
            rx.seed   = 700 + i;
            rx.drop   = (i >= n_taken) && (i < (n_msgs - 1));
            buf[size] = 0xee;
            go        = 1;
            th_oob_send(oob, 0, &go, 1);
            sppln_progress_past(&ucp, &rx.received, (int)i, 120.0);
            TH_ASSERT_EQ(rx.errors, 0);
            if (!rx.drop) {
                TH_CHECK_PATTERN(buf, size, 700 + i);
            }
            TH_ASSERT_EQ(buf[size], 0xee);
        }
        munmap(map, map_len);
    }
    th_ucp_flush_barrier(&ucp, oob);

    st = ucp_proto_sppln_stats(ucp.worker);
    TH_ASSERT(st != NULL);
    if (rank == 0) {
        /* every message was staged, the dropped ones too */
        TH_ASSERT_EQ(st->sent[SP_SPPLN], n_msgs);
    } else {
        TH_ASSERT_EQ(st->received[SP_SPPLN], n_taken + 1);
        /* the destinations, never touched, were faulted in ahead or, as
         * large as UCX_RNDV_SPPLN_FRESH_UFFD_MIN, filled by userfaultfd */
        TH_ASSERT((st->populated + st->fresh[SP_FRESH_UFFD]) > 0);
        TH_ASSERT_EQ(st->fresh[SP_FRESH_KCOPY], 0);
    }
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, active_messages, 120)
{
    sppln_run(sppln_am_rank, NULL);
}

/* ---- many transfers in flight, both ways at once ---------------------- */

#define SPPLN_NUM_INFLIGHT 12
#define SPPLN_MAX_POSTED                                                       \
    4 /* UCP_SPPLN_MAX_POSTED: puts a transfer has
                                in flight, at most */

static void sppln_inflight_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    ucp_request_param_t param = {0};
    void *sreq[SPPLN_NUM_INFLIGHT], *rreq[SPPLN_NUM_INFLIGHT];
    uint8_t *sbuf[SPPLN_NUM_INFLIGHT], *rbuf[SPPLN_NUM_INFLIGHT];
    size_t size[SPPLN_NUM_INFLIGHT];
    const sppln_stats_t *st;
    th_ucp_t ucp;
    unsigned i;

    sppln_env("sppln", "hcr");
    /* chunks of many sub-blocks: more of them than the window holds */
    setenv("UCX_RNDV_SPPLN_SUB_SIZE", "64k", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    for (i = 0; i < SPPLN_NUM_INFLIGHT; ++i) {
        size[i] = (i + 1) * 300007;
        sbuf[i] = malloc(size[i]);
        rbuf[i] = malloc(size[i]);
        th_fill_pattern(sbuf[i], size[i], rank * 100 + i);
        memset(rbuf[i], 0, size[i]);
    }
    /* more transfers than staging groups (4): the rest wait for one */
    for (i = 0; i < SPPLN_NUM_INFLIGHT; ++i) {
        rreq[i] = ucp_tag_recv_nbx(ucp.worker, rbuf[i], size[i], i,
                                   (ucp_tag_t)-1, &param);
        sreq[i] = ucp_tag_send_nbx(ucp.ep, sbuf[i], size[i], i, &param);
    }
    for (i = 0; i < SPPLN_NUM_INFLIGHT; ++i) {
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, sreq[i], 120.0));
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, rreq[i], 120.0));
        TH_CHECK_PATTERN(rbuf[i], size[i], (1 - rank) * 100 + i);
        free(sbuf[i]);
        free(rbuf[i]);
    }
    st = ucp_proto_sppln_stats(ucp.worker);
    TH_ASSERT_EQ(st->sent[SP_SPPLN], SPPLN_NUM_INFLIGHT);
    /* the puts a transfer posts ahead of the peer's RTRs and ACKs, which
     * share their send queue: the window filled, and bounded them */
    th_log("rank %d: at most %llu puts of a transfer in flight, window full "
           "%llu times",
           rank, (unsigned long long)st->max_posted,
           (unsigned long long)st->window_full);
    TH_ASSERT_EQ(st->max_posted, SPPLN_MAX_POSTED);
    TH_ASSERT(st->window_full > 0);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, many_in_flight_both_ways, 300)
{
    sppln_run(sppln_inflight_rank, NULL);
}

/* ---- what a sender stages before its RTR ---- */

/*
 * Where the network is slower than the sender's copies, a copy before the
 * RTR beyond what the round trip covers only delays the first put (the
 * rest of the copy hides behind the puts); where it is faster, the sender
 * stages all it can before the RTR. A 4 MiB message, one chunk per 512 KiB
 * slot (bcopy), 64 KiB sub-blocks: under SPPLN_MODEL_BASE (a 5 GB/s
 * network, copies of 8-20 GB/s, 2 us of latency) the sender stages at most
 * 2 x 2 us x 20 GB/s (80 KB) and the sub-block that passes it; with a
 * 50 GB/s network, its three slots.
 */
#define SPPLN_AHEAD_SIZE (4 * SPPLN_MB)

typedef struct {
    sppln_arg_t super;
    size_t min, max; /* bytes the sender stages before it looks for its
                        RTR */
    int late; /* the receiver posts its receive this many ms late */
} sppln_ahead_arg_t;

static void sppln_ahead_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_ahead_arg_t *arg = varg;
    ucp_request_param_t param    = {0};
    const sppln_stats_t *st;
    uint64_t idle = 0;
    th_ucp_t ucp;
    uint8_t *buf;
    unsigned i;
    void *req;
    char go;

    sppln_env(arg->super.path, arg->super.tls);
    setenv("UCX_RNDV_SPPLN_SLOT_SIZE", "512k", 1);
    setenv("UCX_RNDV_SPPLN_SUB_SIZE", "64k", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf = malloc(SPPLN_AHEAD_SIZE);
    TH_ASSERT(buf != NULL);
    /* the first message sets the endpoint and rndv/sppln up (up to 0.2 s
     * here), the second is timed by its receiver */
    for (i = 0; i < 2; ++i) {
        if (rank == 0) {
            th_fill_pattern(buf, SPPLN_AHEAD_SIZE, 31 + i);
            th_oob_recv(oob, 1, &go, 1);
            st   = ucp_proto_sppln_stats(ucp.worker);
            idle = (st == NULL) ? 0 : st->ahead_idle;
            req  = ucp_tag_send_nbx(ucp.ep, buf, SPPLN_AHEAD_SIZE, 3, &param);
        } else {
            memset(buf, 0, SPPLN_AHEAD_SIZE);
            th_oob_send(oob, 0, &go, 1);
            usleep((i == 1) ? (arg->late * 1000) : 0);
            req = ucp_tag_recv_nbx(ucp.worker, buf, SPPLN_AHEAD_SIZE, 3,
                                   (ucp_tag_t)-1, &param);
        }
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 120.0));
        if (rank == 1) {
            TH_CHECK_PATTERN(buf, SPPLN_AHEAD_SIZE, 31 + i);
        }
    }
    if (rank == 0) {
        st = ucp_proto_sppln_stats(ucp.worker);
        th_log("staged %llu bytes before looking for the RTR (expected "
               "%zu-%zu), %llu while waiting for it",
               (unsigned long long)st->max_ahead, arg->min, arg->max,
               (unsigned long long)(st->ahead_idle - idle));
        TH_ASSERT_EQ(st->sent[SP_BCOPY], 2);
        TH_ASSERT(st->max_ahead >= arg->min);
        TH_ASSERT(st->max_ahead <= arg->max);
        if (arg->late > 0) {
            /* the rest of the three slots, while the receiver slept */
            TH_ASSERT_EQ(st->max_ahead + (st->ahead_idle - idle),
                         3 * 512 * 1024);
        }
    }
    free(buf);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, slow_network_stages_a_round_trip_before_rtr, 120)
{
    sppln_ahead_arg_t arg = {{"bcopy", "hcr", 0, 0, SPPLN_MODEL_BASE},
                             1,
                             80000 + (64 * 1024),
                             0};

    sppln_run(sppln_ahead_rank, &arg.super);
}

/* and stages the rest of its slots while a late receiver keeps the RTR */
TH_TEST_TIMEOUT(sppln, slow_network_stages_while_rtr_is_late, 120)
{
    sppln_ahead_arg_t arg = {{"bcopy", "hcr", 0, 0, SPPLN_MODEL_BASE},
                             1,
                             80000 + (64 * 1024),
                             200};

    sppln_run(sppln_ahead_rank, &arg.super);
}

TH_TEST_TIMEOUT(sppln, fast_network_stages_its_slots_before_rtr, 120)
{
    /* the later net_bw line is the one that counts */
    sppln_ahead_arg_t arg = {{"bcopy", "hcr", 0, 0,
                              SPPLN_MODEL_BASE "net_bw 5e10\n"},
                             3 * 512 * 1024,
                             3 * 512 * 1024,
                             0};

    sppln_run(sppln_ahead_rank, &arg.super);
}

/* ---- registration fails: the message goes through the superpipeline --- */

static void sppln_memlock_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const size_t size         = 192 * SPPLN_MB;
    ucp_request_param_t param = {0};
    const sppln_stats_t *st;
    th_ucp_t ucp;
    uint8_t *buf;

    sppln_env("zcopy", "hcr");
    /* keep UCX's own pools small so that the limit bites on the message */
    setenv("UCX_RC_RX_QUEUE_LEN", "256", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf = malloc(size);
    TH_ASSERT(buf != NULL);

    if (rank == 0) {
        th_fill_pattern(buf, size, 77);
        TH_ASSERT_UCS_OK(th_ucp_wait(
                &ucp, ucp_tag_send_nbx(ucp.ep, buf, size, 5, &param), 120.0));
        st = ucp_proto_sppln_stats(ucp.worker);
        th_log("registration fallbacks %llu, sent sppln %llu",
               (unsigned long long)st->reg_fallback,
               (unsigned long long)st->sent[SP_SPPLN]);
        TH_ASSERT_EQ(st->reg_fallback, 1);
        TH_ASSERT_EQ(st->sent[SP_SPPLN], 1);
    } else {
        memset(buf, 0, size);
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                     ucp_tag_recv_nbx(ucp.worker, buf, size, 5,
                                                      (ucp_tag_t)-1, &param),
                                     120.0));
        TH_CHECK_PATTERN(buf, size, 77);
    }
    th_ucp_flush_barrier(&ucp, oob);
    free(buf);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, memlock_exhausted_falls_back, 120)
{
    /* room for the interfaces' pools and the staging regions, not for the
     * 192 MiB message */
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "160m", 1);
    th_run_procs(2, sppln_memlock_rank, NULL);
}

/* ---- staging: registered when the worker starts, grown on demand ------ */

/*
 * A worker whose transports the staged protocols run on registers one
 * staging group per side when it starts, so that no message pays for it: a
 * small message and a first staged one register nothing more. Transfers in
 * flight at once take more groups, up to UCX_RNDV_SPPLN_GROUPS per side,
 * and no more (more transfers wait for a group). A worker on transports the
 * staged protocols do not run on registers nothing.
 */
static void sppln_staging_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const size_t size         = 2 * SPPLN_MB + 5;
    const unsigned n          = 6; /* more than the groups */
    ucp_request_param_t param = {0};
    const sppln_stats_t *st;
    void *req[6];
    uint8_t *buf[6];
    th_ucp_t ucp;
    unsigned i;

    sppln_env("sppln", "hcr");
    setenv("UCX_RNDV_SPPLN_TLS", "hcr", 1);
    setenv("UCX_RNDV_SPPLN_GROUPS", "3", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    st = ucp_proto_sppln_stats(ucp.worker);
    TH_ASSERT(st != NULL);
    TH_ASSERT_EQ(st->groups[0], 1);
    TH_ASSERT_EQ(st->groups[1], 1);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    for (i = 0; i < n; ++i) {
        buf[i] = malloc(size);
        th_fill_pattern(buf[i], size, 600 + i);
    }

    /* a small message, then one staged message: nothing more registered */
    if (rank == 0) {
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                     ucp_tag_send_nbx(ucp.ep, buf[0], 4096,
                                                      0x60, &param),
                                     30.0));
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                     ucp_tag_send_nbx(ucp.ep, buf[0], size,
                                                      0x61, &param),
                                     30.0));
    } else {
        TH_ASSERT_UCS_OK(
                th_ucp_wait(&ucp,
                            ucp_tag_recv_nbx(ucp.worker, buf[1], 4096, 0x60,
                                             (ucp_tag_t)-1, &param),
                            30.0));
        TH_ASSERT_UCS_OK(
                th_ucp_wait(&ucp,
                            ucp_tag_recv_nbx(ucp.worker, buf[1], size, 0x61,
                                             (ucp_tag_t)-1, &param),
                            30.0));
        TH_CHECK_PATTERN(buf[1], size, 600);
    }
    TH_ASSERT_EQ(st->groups[0], 1);
    TH_ASSERT_EQ(st->groups[1], 1);

    /* six at once: up to three groups a side */
    th_oob_barrier(oob);
    if (rank == 0) {
        for (i = 0; i < n; ++i) {
            th_fill_pattern(buf[i], size, 600 + i);
            req[i] = ucp_tag_send_nbx(ucp.ep, buf[i], size, 0x70 + i, &param);
        }
    } else {
        for (i = 0; i < n; ++i) {
            req[i] = ucp_tag_recv_nbx(ucp.worker, buf[i], size, 0x70 + i,
                                      (ucp_tag_t)-1, &param);
        }
    }
    for (i = 0; i < n; ++i) {
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req[i], 60.0));
        if (rank == 1) {
            TH_CHECK_PATTERN(buf[i], size, 600 + i);
        }
    }
    th_log("rank %d registered %llu send and %llu receive groups", rank,
           (unsigned long long)st->groups[0],
           (unsigned long long)st->groups[1]);
    TH_ASSERT_LE(st->groups[0], 3);
    TH_ASSERT_LE(st->groups[1], 3);
    TH_ASSERT_GT(st->groups[rank], 1); /* the side that had several */
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);

    /* tcp alone (the staged protocols run on hcr by default): nothing */
    setenv("UCX_TLS", "tcp", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    TH_ASSERT(ucp_proto_sppln_stats(ucp.worker) == NULL);
    th_ucp_cleanup(&ucp);
    for (i = 0; i < n; ++i) {
        free(buf[i]);
    }
}

TH_TEST_TIMEOUT(sppln, staging_at_worker_start, 120)
{
    sppln_run(sppln_staging_rank, NULL);
}


/* ---- a peer killed in the middle of a superpipelined transfer --------- */

static void sppln_kill_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const size_t size = 32 * SPPLN_MB;
    uint8_t *buf      = malloc(size);
    th_ucp_t ucp;

    sppln_env("sppln", "hcr");
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
        /* take the first message, then die while the next one streams */
        ucp_request_param_t rp = {0};
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                     ucp_tag_recv_nbx(ucp.worker, buf, size, 1,
                                                      (ucp_tag_t)-1, &rp),
                                     60.0));
        ucp_tag_recv_nbx(ucp.worker, buf, size, 1, (ucp_tag_t)-1, &rp);
        while (ucp_proto_sppln_stats(ucp.worker)->received[SP_SPPLN] < 2) {
            ucp_worker_progress(ucp.worker);
        }
        raise(SIGKILL);
    }

    /* the peer takes one message whole, and dies in the next */
    TH_ASSERT(th_ucp_send_until_error(&ucp, buf, size, 1, 90.0) >= 2);
    _exit(0);
}

TH_TEST_TIMEOUT(sppln, killed_peer_mid_transfer, 200)
{
    int status[2];
    th_procs_t *p;

    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    p = th_procs_start(2, sppln_kill_rank, NULL);
    th_procs_wait(p, status);
    if ((status[0] == TH_EXIT_SKIP) || (status[1] == TH_EXIT_SKIP)) {
        TH_SKIP("no verbs device");
    }
    TH_ASSERT_EQ(status[0], 0);
    TH_ASSERT_EQ(status[1], 128 + SIGKILL);
}


/* ---- RMA: put/choose and get/choose ---------------------------------- */

#define SPPLN_RMA_REGION    (72 * SPPLN_MB)
#define SPPLN_RMA_BURST     16 /* puts in flight, more than staging groups */
#define SPPLN_RMA_BURST_LEN (128 * 1024)

static const size_t sppln_rma_sizes[] = {4096, 65536 + 3, SPPLN_MB,
                                         4 * SPPLN_MB + 5, 64 * SPPLN_MB};

typedef struct {
    const char *path;
    int memlock; /* little locked memory, a put too large for it */
} sppln_rma_arg_t;

static uint64_t sppln_rma_count(th_ucp_t *ucp, int path)
{
    const sppln_stats_t *st = ucp_proto_sppln_stats(ucp->worker);

    return (st == NULL) ? 0 : st->rma[path];
}

/* The path the one RMA operation since the counts in before[] took */
static int sppln_rma_path(th_ucp_t *ucp, const uint64_t *before)
{
    int path, taken = -1;

    for (path = SP_RMA_BCOPY; path <= SP_RMA_STAGED; ++path) {
        if (sppln_rma_count(ucp, path) != before[path]) {
            TH_ASSERT_EQ(sppln_rma_count(ucp, path), before[path] + 1);
            TH_ASSERT_EQ(taken, -1);
            taken = path;
        }
    }
    TH_ASSERT(taken >= 0);
    return taken;
}

static void sppln_rma_counts(th_ucp_t *ucp, uint64_t *counts)
{
    int path;

    for (path = SP_RMA_BCOPY; path <= SP_RMA_STAGED; ++path) {
        counts[path] = sppln_rma_count(ucp, path);
    }
}

static const char *sppln_rma_path_names[] = {"bcopy", "zcopy", "staged"};

/* More puts in flight than staging groups, each from a fresh buffer: the
 * ones that find no group take zcopy; all land (read back with a get) */
static void sppln_rma_burst(th_ucp_t *ucp, uint64_t remote, ucp_rkey_h rkey)
{
    const size_t len          = SPPLN_RMA_BURST_LEN;
    ucp_request_param_t param = {0};
    void *reqs[SPPLN_RMA_BURST];
    uint8_t *src[SPPLN_RMA_BURST], *dst;
    size_t map_len, map_len2;
    int i;

    for (i = 0; i < SPPLN_RMA_BURST; ++i) {
        src[i] = sppln_map(len, &map_len) + 64;
        th_fill_pattern(src[i], len, 900 + i);
        reqs[i] = ucp_put_nbx(ucp->ep, src[i], len, remote + (i * len), rkey,
                              &param);
        TH_ASSERT(!UCS_PTR_IS_ERR(reqs[i]));
    }
    for (i = 0; i < SPPLN_RMA_BURST; ++i) {
        TH_ASSERT_UCS_OK(th_ucp_wait(ucp, reqs[i], 60.0));
        munmap(src[i] - 64, map_len);
    }
    TH_ASSERT_UCS_OK(th_ucp_wait(ucp, ucp_ep_flush_nbx(ucp->ep, &param), 60.0));

    dst = sppln_map(SPPLN_RMA_BURST * len, &map_len2);
    TH_ASSERT_UCS_OK(
            th_ucp_wait(ucp,
                        ucp_get_nbx(ucp->ep, dst, SPPLN_RMA_BURST * len, remote,
                                    rkey, &param),
                        60.0));
    for (i = 0; i < SPPLN_RMA_BURST; ++i) {
        TH_CHECK_PATTERN(dst + (i * len), len, 900 + i);
    }
    munmap(dst, map_len2);
}

/* Rank 0's part of an RMA test: exposes a zeroed region of @a size bytes
 * to rank 1, waits for its word that it is done (sppln_rma_done()), checks
 * the region with @a check and leaves */
static void sppln_rma_target(th_ucp_t *ucp, th_oob_t *oob, size_t size,
                             void (*check)(const uint8_t *region))
{
    uint8_t *region;
    ucp_mem_h memh;
    size_t len;

    region = malloc(size);
    TH_ASSERT(region != NULL);
    memset(region, 0, size);
    memh = th_ucp_mem_map(ucp, region, size);
    th_ucp_send_rkey(ucp, oob, 1, memh, region);
    th_ucp_oob_recv(ucp, oob, 1, &len, sizeof(len));
    check(region);
    th_ucp_flush_barrier(ucp, oob);
    TH_ASSERT_UCS_OK(ucp_mem_unmap(ucp->context, memh));
    free(region);
    th_ucp_cleanup(ucp);
}

/* Rank 1's end of an RMA test: tells rank 0 it is done and leaves */
static void sppln_rma_done(th_ucp_t *ucp, th_oob_t *oob, ucp_rkey_h rkey)
{
    size_t len = 0;

    th_oob_send(oob, 0, &len, sizeof(len));
    th_ucp_flush_barrier(ucp, oob);
    ucp_rkey_destroy(rkey);
    th_ucp_cleanup(ucp);
}

/* what rank 1 of sppln_rma_rank() puts: each size at its offset */
static void sppln_rma_check_sizes(const uint8_t *region)
{
    size_t i, off;

    for (i = 0, off = 0; i < ucs_static_array_size(sppln_rma_sizes);
         off += sppln_rma_sizes[i++]) {
        TH_CHECK_PATTERN(region + off, sppln_rma_sizes[i], 500 + i);
    }
}

/* Rank 0 exposes a region; rank 1 puts each size from a fresh mapping at an
 * unaligned offset (again if it took zcopy: a cache hit), then gets it back
 * into another fresh mapping and checks it. Rank 0 checks the region. */
static void sppln_rma_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_rma_arg_t *arg = varg;
    size_t n                   = ucs_static_array_size(sppln_rma_sizes);
    ucp_request_param_t param  = {0};
    const sppln_stats_t *st;
    size_t i, off, len, map_len, map_len2;
    uint8_t *src, *dst;
    uint64_t counts[3], remote;
    ucp_rkey_h rkey;
    th_ucp_t ucp;
    int path;

    if (arg->memlock) {
        /* softverbs reads this again in a forked process, when it first
         * looks for devices: the initiator has room for the interfaces'
         * pools and the smaller buffers, not for a 64 MiB one besides */
        setenv("SOFTVERBS_MEMLOCK_LIMIT", (rank == 0) ? "unlimited" : "64m", 1);
        setenv("UCX_RC_RX_QUEUE_LEN", "256", 1);
    }
    sppln_env(arg->path, "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_RMA);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    if (rank == 0) {
        sppln_rma_target(&ucp, oob, SPPLN_RMA_REGION, sppln_rma_check_sizes);
        return;
    }

    th_ucp_recv_rkey(&ucp, oob, 0, &rkey, &remote);
    for (i = 0, off = 0; i < n; off += sppln_rma_sizes[i++]) {
        len = sppln_rma_sizes[i];
        src = sppln_map(len, &map_len) + 64 + 5;
        th_fill_pattern(src, len, 500 + i);
        sppln_rma_counts(&ucp, counts);
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                     ucp_put_nbx(ucp.ep, src, len, remote + off,
                                                 rkey, &param),
                                     60.0));
        TH_ASSERT_UCS_OK(
                th_ucp_wait(&ucp, ucp_ep_flush_nbx(ucp.ep, &param), 60.0));
        path = sppln_rma_path(&ucp, counts);
        th_log("%s: put of %zu bytes from a fresh buffer: %s", arg->path, len,
               sppln_rma_path_names[path]);
        if (!strcmp(arg->path, "auto") && (len >= SPPLN_MB)) {
            /* more than one bcopy fragment: zcopy, or staged if it fits */
            TH_ASSERT(path != SP_RMA_BCOPY);
        } else if (!strcmp(arg->path, "sppln")) {
            TH_ASSERT_EQ(path,
                         (len <= 3 * SPPLN_MB) ? SP_RMA_STAGED : SP_RMA_BCOPY);
        }

        /* a buffer put before (in the registration cache, or staged once)
         * goes zcopy the next time, whatever its size */
        if (!arg->memlock && strcmp(arg->path, "bcopy") &&
            strcmp(arg->path, "sppln")) {
            sppln_rma_counts(&ucp, counts);
            TH_ASSERT_UCS_OK(
                    th_ucp_wait(&ucp,
                                ucp_put_nbx(ucp.ep, src, len, remote + off,
                                            rkey, &param),
                                60.0));
            TH_ASSERT_EQ(sppln_rma_path(&ucp, counts), SP_RMA_ZCOPY);
        }

        dst = sppln_map(len, &map_len2) + 64 + 3;
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                     ucp_get_nbx(ucp.ep, dst, len, remote + off,
                                                 rkey, &param),
                                     60.0));
        TH_CHECK_PATTERN(dst, len, 500 + i);
        munmap(dst - 64 - 3, map_len2);
        munmap(src - 64 - 5, map_len);
    }
    TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, ucp_ep_flush_nbx(ucp.ep, &param), 60.0));
    if (!arg->memlock) {
        sppln_rma_burst(&ucp, remote + off, rkey);
    }

    st = ucp_proto_sppln_stats(ucp.worker);
    th_log("%s: rma bcopy %llu zcopy %llu staged %llu, registration "
           "fallbacks %llu",
           arg->path, (unsigned long long)st->rma[SP_RMA_BCOPY],
           (unsigned long long)st->rma[SP_RMA_ZCOPY],
           (unsigned long long)st->rma[SP_RMA_STAGED],
           (unsigned long long)st->reg_fallback);
    if (arg->memlock) {
        /* zcopy forced, the 64 MiB buffers cannot be registered */
        TH_ASSERT_GE(st->reg_fallback, 2);
        TH_ASSERT_GE(st->rma[SP_RMA_BCOPY], 2);
    } else if (!strcmp(arg->path, "bcopy")) {
        TH_ASSERT_EQ(st->rma[SP_RMA_ZCOPY] + st->rma[SP_RMA_STAGED], 0);
        TH_ASSERT_EQ(st->rma[SP_RMA_BCOPY], 2 * n + SPPLN_RMA_BURST + 1);
    } else if (!strcmp(arg->path, "sppln")) {
        /* puts of up to 3 MiB staged (or zcopy when all staging groups are
         * taken); the larger ones and the gets bcopy */
        TH_ASSERT_EQ(st->rma[SP_RMA_STAGED] + st->rma[SP_RMA_ZCOPY],
                     3 + SPPLN_RMA_BURST);
        TH_ASSERT_GE(st->rma[SP_RMA_STAGED], 3 + 1);
        TH_ASSERT_EQ(st->rma[SP_RMA_BCOPY], 2 * n - 3 + 1);
    } else if (!strcmp(arg->path, "zcopy")) {
        TH_ASSERT_EQ(st->rma[SP_RMA_BCOPY] + st->rma[SP_RMA_STAGED], 0);
        TH_ASSERT_EQ(st->rma[SP_RMA_ZCOPY], 3 * n + SPPLN_RMA_BURST + 1);
    } else {
        /* every put was followed by another; then the burst */
        TH_ASSERT_EQ(st->rma[SP_RMA_BCOPY] + st->rma[SP_RMA_ZCOPY] +
                             st->rma[SP_RMA_STAGED],
                     3 * n + SPPLN_RMA_BURST + 1);
    }

    sppln_rma_done(&ucp, oob, rkey);
}

#define SPPLN_RMA_TEST(_path)                                                  \
    TH_TEST_TIMEOUT(sppln, rma_##_path, 120)                                   \
    {                                                                          \
        sppln_rma_arg_t arg = {#_path, 0};                                     \
        setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);                     \
        th_run_procs(2, sppln_rma_rank, &arg);                                 \
    }

SPPLN_RMA_TEST(auto)
SPPLN_RMA_TEST(bcopy)
SPPLN_RMA_TEST(sppln)
SPPLN_RMA_TEST(zcopy)

TH_TEST_TIMEOUT(sppln, rma_memlock_falls_back, 120)
{
    sppln_rma_arg_t arg = {"zcopy", 1};

    th_run_procs(2, sppln_rma_rank, &arg);
}


/* ---- UCX_RNDV_SPPLN_* count as used when a worker starts ---------------- */

TH_TEST(sppln, config_vars_used)
{
    /* rndv/sppln reads its variables at its first use, after UCP warned
     * about unused ones */
    th_ucp_assert_var_used(UCP_FEATURE_TAG, "UCX_RNDV_SPPLN_THRESH", "64k",
                           "UCX_RNDV_SPPLN_TRESH");
}


/* ---- the chunk schedule, as both sides compute it ----------------------- */

size_t ucp_sppln_sched_chunk(size_t length, size_t offset, size_t c0, double q,
                             size_t slot_size);
int ucp_sppln_geometry_valid(size_t slot_size, size_t sub_size);

static size_t sppln_min(size_t a, size_t b)
{
    return (a < b) ? a : b;
}

/* chunks of whole pages, from the first one doubling up to a slot; the
 * chunks of an RTS with a first chunk of 0 bytes or a ratio below 1 (a
 * broken peer) still cover the message, a page at least each */
TH_TEST(sppln, schedule_chunks)
{
    static const struct {
        size_t c0;
        double q;
    } bad[]       = {{0, 2.0}, {4096, 0.0}, {1, 0.5}};
    size_t length = 3 * SPPLN_MB + 5, offset, size, expect;
    unsigned i, n;

    for (offset = 0, expect = 128 * 1024; offset < length; offset += size) {
        size = ucp_sppln_sched_chunk(length, offset, 128 * 1024, 2.0, SPPLN_MB);
        TH_ASSERT_EQ(size, sppln_min(expect, length - offset));
        expect = sppln_min(2 * expect, SPPLN_MB);
    }

    /* however long the message: once at a slot, chunks stay there (a
     * chunk size that kept doubling past what a size_t holds came back as
     * a page: a 192 MiB message went in 37932 chunks) */
    length = 256 * SPPLN_MB + 5;
    for (offset = 0, n = 0, expect = 128 * 1024; offset < length;
         offset += size, ++n) {
        size = ucp_sppln_sched_chunk(length, offset, 128 * 1024, 2.0, SPPLN_MB);
        TH_ASSERT_EQ(size, sppln_min(expect, length - offset));
        expect = sppln_min(2 * expect, SPPLN_MB);
    }
    TH_ASSERT_EQ(n, 3 + 255 + 1); /* 128K, 256K, 512K, 255 x 1M, 128K+5 */
    length = 3 * SPPLN_MB + 5;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        for (offset = 0, n = 0; offset < length; offset += size, ++n) {
            size = ucp_sppln_sched_chunk(length, offset, bad[i].c0, bad[i].q,
                                         SPPLN_MB);
            TH_ASSERT_GE(size, sppln_min(4096, length - offset));
            TH_ASSERT(n < length / 4096 + 1);
        }
    }

    /* sub-blocks tile a slot within the 19 bits of their index */
    TH_ASSERT(ucp_sppln_geometry_valid(SPPLN_MB, 512 * 1024));
    TH_ASSERT(ucp_sppln_geometry_valid(SPPLN_MB, SPPLN_MB));
    TH_ASSERT(!ucp_sppln_geometry_valid(SPPLN_MB, 0));
    TH_ASSERT(!ucp_sppln_geometry_valid(SPPLN_MB, 2 * SPPLN_MB));
    TH_ASSERT(!ucp_sppln_geometry_valid(1ul << 31, 1024));
}


/* ---- a peer that breaks the protocol ---------------------------------- */

/* UCP_SPPLN_FAULT_* of proto_sppln.h */
#define SPPLN_FAULT_DUP_SUB   (1u << 0)
#define SPPLN_FAULT_SHORT_SUB (1u << 1)
#define SPPLN_FAULT_DUP_RTR   (1u << 2)
#define SPPLN_FAULT_SHORT_RTR (1u << 3)
#define SPPLN_FAULT_DUP_ACK   (1u << 4)
#define SPPLN_FAULT_ACK_AHEAD (1u << 5)
#define SPPLN_FAULT_FOREIGN   (1u << 6)

typedef struct {
    unsigned fault;
    int faulty; /* rank that breaks the protocol: 0 sends, 1 receives */
    int harmless; /* the other rank drops what is broken and the transfer
                      completes whole */
    int fresh_uffd; /* the receiver's buffer is fresh, filled by
                       userfaultfd: after the failure no page of it may stay
                       registered, and it writes them all */
} sppln_fault_arg_t;

/* Rank 0 sends one message of several chunks to rank 1 through staging;
 * the faulty rank breaks the protocol once, as the fault says. The other
 * rank must detect it: its request fails with UCS_ERR_IO_ERROR (its log
 * says why), nothing crashes, hangs or completes with a hole. The faulty
 * rank's request must not complete successfully either (a broken sender
 * breaks a chunk whose ACK it waits for: the last three have none). */
static void sppln_fault_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_fault_arg_t *arg = varg;
    const size_t size            = 4 * SPPLN_MB + 5;
    ucp_request_param_t param    = {0};
    ucs_status_t status;
    double deadline;
    size_t map_len;
    th_ucp_t ucp;
    uint8_t *buf;
    void *req;
    char done;

    sppln_env("sppln", "hcr");
    /* several sub-blocks per chunk */
    setenv("UCX_RNDV_SPPLN_SUB_SIZE", "256k", 1);
    if (arg->fresh_uffd) {
        setenv("UCX_RNDV_SPPLN_FRESH_COPY", "uffd", 1);
        setenv("UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD", "0", 1);
    }
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    /* untrusted peers: with error handling, request ids on the wire are
     * looked up, not taken as pointers (a broken peer's late ACK names a
     * request that is gone) */
    th_ucp_connect(&ucp, oob, 1 - rank, 1);
    buf = sppln_map(size, &map_len);
    if (rank == arg->faulty) {
        ucp_proto_sppln_test_fault(arg->fault);
    }
    if (rank == 0) {
        th_fill_pattern(buf, size, 77);
        req = ucp_tag_send_nbx(ucp.ep, buf, size, 0x77, &param);
    } else {
        if (!arg->fresh_uffd) {
            memset(buf, 0xee, size);
        }
        req = ucp_tag_recv_nbx(ucp.worker, buf, size, 0x77, (ucp_tag_t)-1,
                               &param);
    }
    TH_ASSERT(!UCS_PTR_IS_ERR(req) && (req != NULL));

    if (arg->harmless) {
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 60.0));
        if (rank == 1) {
            TH_CHECK_PATTERN(buf, size, 77);
        }
        th_ucp_flush_barrier(&ucp, oob);
        fflush(stdout);
        _exit(0);
    }

    if (rank != arg->faulty) {
        status = th_ucp_wait(&ucp, req, 60.0);
        th_log("rank %d detected the fault: %s", rank,
               ucs_status_string(status));
        TH_ASSERT_EQ(status, UCS_ERR_IO_ERROR);
        if (arg->fresh_uffd && (rank == 1)) {
            /* a page still registered and never filled would keep this
             * writer waiting for a fault handler */
            sppln_check_unregistered(buf, size);
            memset(buf, 0x22, size);
        }
        /* the faulty rank stops using the connection first */
        th_oob_recv(oob, 1 - rank, &done, 1);
    } else {
        /* a broken sender learns of its failure from the receiver's error
         * ACK; a broken receiver waits for data that will not come */
        deadline = th_time() + 3.0;
        while (((status = ucp_request_check_status(req)) == UCS_INPROGRESS) &&
               (th_time() < deadline)) {
            ucp_worker_progress(ucp.worker);
        }
        th_log("rank %d (faulty): its request %s", rank,
               (status == UCS_INPROGRESS) ? "is still in progress" :
                                            ucs_status_string(status));
        TH_ASSERT(status != UCS_OK);
        done = 1;
        th_oob_send(oob, 1 - rank, &done, 1);
    }
    /* requests of a broken transfer may still be in flight */
    fflush(stdout);
    _exit(0);
}

#define SPPLN_FAULT_TEST(_name, _fault, _faulty)                               \
    TH_TEST_TIMEOUT(sppln, peer_##_name, 120)                                  \
    {                                                                          \
        sppln_fault_arg_t arg = {_fault, _faulty, 0, 0};                       \
        setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);                     \
        th_run_procs(2, sppln_fault_rank, &arg);                               \
    }

/* data: the receiver detects */
SPPLN_FAULT_TEST(duplicate_sub_block, SPPLN_FAULT_DUP_SUB, 0)
SPPLN_FAULT_TEST(short_sub_block, SPPLN_FAULT_SHORT_SUB, 0)
/* control: the sender detects */
SPPLN_FAULT_TEST(second_rtr, SPPLN_FAULT_DUP_RTR, 1)
SPPLN_FAULT_TEST(rtr_without_rkey, SPPLN_FAULT_SHORT_RTR, 1)
SPPLN_FAULT_TEST(duplicate_ack, SPPLN_FAULT_DUP_ACK, 1)
SPPLN_FAULT_TEST(ack_out_of_order, SPPLN_FAULT_ACK_AHEAD, 1)

/* a sub-block notification that names another generation of the
 * receiver's entry (an earlier transfer's, or a peer's that kept an old
 * rkey) before the real one: dropped, it counts for nothing, and the
 * transfer completes whole */
TH_TEST_TIMEOUT(sppln, peer_foreign_notification, 120)
{
    sppln_fault_arg_t arg = {SPPLN_FAULT_FOREIGN, 0, 1, 0};

    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(2, sppln_fault_rank, &arg);
}

/*
 * A receive into a fresh buffer filled by userfaultfd fails half way: a
 * sub-block of the sender's is short (in the last chunk whose ACK it waits
 * for), so the receiver fails the transfer before its last pages are
 * filled. Its registration must end with the
 * transfer: afterwards no mapping of the buffer is registered, and the
 * application writes every page of it.
 */
TH_TEST_TIMEOUT(sppln, fresh_destination_uffd_failed_transfer, 120)
{
    sppln_fault_arg_t arg = {SPPLN_FAULT_SHORT_SUB, 0, 0, 1};

    if (!th_can_uffd()) {
        TH_SKIP("the kernel refuses a user-mode userfaultfd");
    }
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(2, sppln_fault_rank, &arg);
}

/* ---- truncation: a receive smaller than the message -------------------- */

#define SPPLN_TRUNC_MSGS 6 /* more than the staging groups (4) */
#define SPPLN_TRUNC_SIZE (SPPLN_MB + 5)
#define SPPLN_TRUNC_RECV 300001

/*
 * Rank 0 sends messages of 1 MiB + 5 through the forced path; rank 1
 * receives them into buffers of 300001 bytes it never touched (but for 64
 * guard bytes after them). As in UCX's own rendezvous (the zcopy path):
 * the receive completes with UCS_ERR_MESSAGE_TRUNCATED, the send with
 * UCS_OK, nothing after the receive buffer changes, and the staging a
 * truncated message held is given back (more of them than staging groups,
 * then one that fits and must arrive whole).
 */
static void sppln_trunc_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_arg_t *arg    = varg;
    ucp_request_param_t param = {0};
    const sppln_stats_t *st;
    size_t map_len, size, k;
    ucs_status_t status;
    uint8_t *map, *buf;
    th_ucp_t ucp;
    unsigned i;
    void *req;
    char go;

    sppln_env(arg->path, "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    for (i = 0; i <= SPPLN_TRUNC_MSGS; ++i) {
        size = (i < SPPLN_TRUNC_MSGS) ? SPPLN_TRUNC_RECV : SPPLN_TRUNC_SIZE;
        map  = sppln_map(SPPLN_TRUNC_SIZE, &map_len);
        buf  = map + 64 + i;
        if (rank == 0) {
            th_fill_pattern(buf, SPPLN_TRUNC_SIZE, 800 + i);
            th_oob_recv(oob, 1, &go, 1);
            TH_ASSERT_UCS_OK(
                    th_ucp_wait(&ucp,
                                ucp_tag_send_nbx(ucp.ep, buf, SPPLN_TRUNC_SIZE,
                                                 0x300 + i, &param),
                                60.0));
        } else {
            memset(buf + size, 0xee, 64);
            req = ucp_tag_recv_nbx(ucp.worker, buf, size, 0x300 + i,
                                   (ucp_tag_t)-1, &param);
            go  = 1;
            th_oob_send(oob, 0, &go, 1);
            status = th_ucp_wait(&ucp, req, 60.0);
            if (i < SPPLN_TRUNC_MSGS) {
                TH_ASSERT_EQ(status, UCS_ERR_MESSAGE_TRUNCATED);
            } else {
                TH_ASSERT_UCS_OK(status);
                TH_CHECK_PATTERN(buf, size, 800 + i);
            }
            for (k = 0; k < 64; ++k) {
                TH_ASSERT_EQ(buf[size + k], 0xee);
            }
        }
        munmap(map, map_len);
    }
    th_ucp_flush_barrier(&ucp, oob);

    if (rank == 0) {
        st = ucp_proto_sppln_stats(ucp.worker);
        TH_ASSERT(st != NULL);
        TH_ASSERT_EQ(st->sent[!strcmp(arg->path, "bcopy") ? SP_BCOPY :
                              !strcmp(arg->path, "sppln") ? SP_SPPLN :
                                                            SP_ZCOPY],
                     SPPLN_TRUNC_MSGS + 1);
    }
    th_ucp_cleanup(&ucp);
}

#define SPPLN_TRUNC_TEST(_path)                                                \
    TH_TEST_TIMEOUT(sppln, truncated_##_path, 120)                             \
    {                                                                          \
        sppln_arg_t arg = {#_path, "hcr", 0, 0, NULL};                         \
        sppln_run(sppln_trunc_rank, &arg);                                     \
    }

SPPLN_TRUNC_TEST(sppln)
SPPLN_TRUNC_TEST(bcopy)
SPPLN_TRUNC_TEST(zcopy)


/* ---- the automatic takeover: UCX_RNDV_SPPLN_THRESH=auto ----------------- */

/* What rndv/sppln derives from a hand-written model */
static void sppln_model_derive(const char *model, ucs_calib_derived_t *d)
{
    char path[] = "/tmp/th-sppln-model-XXXXXX";
    ucs_calib_model_t m;
    FILE *f;
    int fd;

    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    f = fdopen(fd, "w");
    TH_ASSERT(f != NULL);
    fputs(model, f);
    fclose(f);
    TH_ASSERT_UCS_OK(ucs_calib_model_read(path, &m));
    unlink(path);
    ucs_calib_derive(&m, d);
}

/* The C_0 of a model (the bytes copied during a rendezvous round trip) */
static size_t sppln_model_c0(const char *model)
{
    ucs_calib_derived_t d;

    sppln_model_derive(model, &d);
    return d.sp_c0;
}

/* Where auto takes over: the smallest sub-block */
#define SPPLN_AUTO_THRESH 16384

typedef struct {
    sppln_arg_t super;
    size_t thresh; /* where rndv/sppln must take over */
} sppln_auto_arg_t;

/* Rank 0 sends a message one byte below the threshold, one at it and one
 * three times larger: rndv/sppln sends the last two only */
static void sppln_auto_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_auto_arg_t *arg = varg;
    const size_t sizes[]      = {arg->thresh - 1, arg->thresh, 3 * arg->thresh};
    ucp_request_param_t param = {0};
    const sppln_stats_t *st;
    size_t map_len, size;
    uint64_t before, after;
    uint8_t *buf;
    th_ucp_t ucp;
    unsigned i;
    void *req;
    char go;

    sppln_env("auto", "hcr");
    unsetenv("UCX_RNDV_SPPLN_THRESH"); /* the default: auto */
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    for (i = 0; i < 3; ++i) {
        size = sizes[i];
        buf  = sppln_map(size, &map_len);
        if (rank == 0) {
            st     = ucp_proto_sppln_stats(ucp.worker);
            before = (st == NULL) ? 0 :
                                    st->sent[SP_BCOPY] + st->sent[SP_SPPLN] +
                                            st->sent[SP_ZCOPY];
            th_fill_pattern(buf, size, 900 + i);
            th_oob_recv(oob, 1, &go, 1);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                         ucp_tag_send_nbx(ucp.ep, buf, size,
                                                          0x400 + i, &param),
                                         30.0));
            st    = ucp_proto_sppln_stats(ucp.worker);
            after = (st == NULL) ? 0 :
                                   st->sent[SP_BCOPY] + st->sent[SP_SPPLN] +
                                           st->sent[SP_ZCOPY];
            th_log("threshold %zu: %zu bytes %s rndv/sppln", arg->thresh, size,
                   (after > before) ? "took" : "did not take");
            TH_ASSERT_EQ(after - before, (size >= arg->thresh) ? 1 : 0);
        } else {
            req = ucp_tag_recv_nbx(ucp.worker, buf, size, 0x400 + i,
                                   (ucp_tag_t)-1, &param);
            go  = 1;
            th_oob_send(oob, 0, &go, 1);
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 30.0));
            TH_CHECK_PATTERN(buf, size, 900 + i);
        }
        munmap(buf, map_len);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/* the same network with a latency 8 times longer: a C_0 8 times larger */
#define SPPLN_MODEL_SLOW_NET                                                   \
    "reg_resident 4e-6 1e-10\n"                                                \
    "reg_nonresident 4e-6 4e-10\n"                                             \
    "dereg 4e-6 5e-11\n"                                                       \
    "copy 65536 2e10\n"                                                        \
    "copy 67108864 8e9\n"                                                      \
    "net_latency 1.6e-5\n"                                                     \
    "net_bw 5e9\n"                                                             \
    "net_gap 1e-7\n"

/* By default rndv/sppln takes over from 16 KiB, whatever the model's C_0:
 * below C_0 a staged first send cannot hide its copy in the round trip, but
 * it still costs less than UCX's rendezvous, which registers a fresh buffer
 * on both sides. Checked on both sides of it with two models, one with a
 * C_0 far above it. */
TH_TEST_TIMEOUT(sppln, auto_threshold_below_c0, 120)
{
    sppln_auto_arg_t arg = {{"auto", "hcr", 0, 0, SPPLN_MODEL_BASE},
                            SPPLN_AUTO_THRESH};

    th_log("C_0 of the models: %zu and %zu", sppln_model_c0(SPPLN_MODEL_BASE),
           sppln_model_c0(SPPLN_MODEL_SLOW_NET));
    TH_ASSERT_GT(sppln_model_c0(SPPLN_MODEL_SLOW_NET), 2 * SPPLN_AUTO_THRESH);
    sppln_run(sppln_auto_rank, &arg.super);

    arg.super.model = SPPLN_MODEL_SLOW_NET;
    sppln_run(sppln_auto_rank, &arg.super);
}


/* ---- the residency of a buffer is looked up only where it decides ------ */

/* registration far cheaper than copying: zero-copy from a few KiB up */
#define SPPLN_MODEL_CHEAP_REG                                                  \
    "reg_resident 1e-6 1e-12\n"                                                \
    "reg_nonresident 1e-6 1e-12\n"                                             \
    "dereg 1e-6 1e-12\n"                                                       \
    "copy 65536 2e10\n"                                                        \
    "copy 67108864 8e9\n"                                                      \
    "net_latency 2e-6\n"                                                       \
    "net_bw 5e9\n"                                                             \
    "net_gap 1e-7\n"

typedef struct {
    sppln_arg_t super;
    size_t size; /* of the fresh message */
    int path; /* the path it must take */
    uint64_t send_probes; /* mincore() calls on the sender for it */
    uint64_t recv_probes; /* ... and on the receiver */
} sppln_probe_arg_t;

static uint64_t sppln_probes(th_ucp_t *ucp)
{
    const sppln_stats_t *st = ucp_proto_sppln_stats(ucp->worker);

    return (st == NULL) ? 0 : st->residency_probes;
}

/* Rank 0 sends one fresh message: each side's residency lookups and the
 * sender's path are counted */
static void sppln_probe_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_probe_arg_t *arg = varg;
    const sppln_stats_t *st;
    uint64_t before, sent;
    size_t map_len;
    uint8_t *buf;
    th_ucp_t ucp;

    sppln_env("auto", "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    buf    = sppln_map(arg->size, &map_len);
    before = sppln_probes(&ucp);
    if (rank == 0) {
        st   = ucp_proto_sppln_stats(ucp.worker);
        sent = (st == NULL) ? 0 : st->sent[arg->path];
        th_fill_pattern(buf, arg->size, 990);
        sppln_send_to_posted(&ucp, oob, buf, arg->size, 0x700);
        st = ucp_proto_sppln_stats(ucp.worker);
        TH_ASSERT(st != NULL);
        TH_ASSERT_EQ(st->sent[arg->path] - sent, 1);
        th_log("%zu bytes: %lu residency lookups on the sender", arg->size,
               (unsigned long)(st->residency_probes - before));
        TH_ASSERT_EQ(st->residency_probes - before, arg->send_probes);
    } else {
        sppln_recv_posted(&ucp, oob, buf, arg->size, 0x700);
        TH_CHECK_PATTERN(buf, arg->size, 990);
        th_log("%zu bytes: %lu residency lookups on the receiver", arg->size,
               (unsigned long)(sppln_probes(&ucp) - before));
        TH_ASSERT_EQ(sppln_probes(&ucp) - before, arg->recv_probes);
    }
    munmap(buf, map_len);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/*
 * Whether a buffer's pages are resident is a system call (mincore(), 0.9 us
 * on a VM, the cost of a few KiB of a staged message). The sender asks only
 * where a zero-copy threshold may be reached; the receiver of a staged
 * transfer asks once (whether to fault its destination in), after its RTR.
 * A staged 256 KiB message under a model whose zero-copy thresholds are
 * higher: no lookup on the sender, one on the receiver. A 1 MiB message
 * under a model where registering is cheap: the sender looks, and goes
 * zero-copy (UCX's rendezvous: the receiver of rndv/sppln has no part).
 */
TH_TEST_TIMEOUT(sppln, residency_looked_up_where_it_decides, 120)
{
    sppln_probe_arg_t arg = {{"auto", "hcr", 0, 0, SPPLN_MODEL_BASE},
                             256 * 1024,
                             SP_BCOPY,
                             0,
                             1};
    ucs_calib_derived_t d;

    sppln_model_derive(SPPLN_MODEL_BASE, &d);
    th_log("base model: zero-copy from %zu (resident) and %zu (not), "
           "superpipeline from %zu",
           d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
           d.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT], d.sp_thresh);
    /* (unsigned: a threshold may be SIZE_MAX, never) */
    TH_ASSERT(d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT] > arg.size);
    TH_ASSERT(d.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT] > arg.size);
    if (arg.size >= sppln_sp_thresh(&d)) {
        arg.path = SP_SPPLN;
    }
    sppln_run(sppln_probe_rank, &arg.super);

    sppln_model_derive(SPPLN_MODEL_CHEAP_REG, &d);
    th_log("cheap registration: zero-copy from %zu (resident) and %zu (not)",
           d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
           d.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT]);
    arg.super.model = SPPLN_MODEL_CHEAP_REG;
    arg.size        = SPPLN_MB;
    TH_ASSERT(d.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT] <= arg.size);
    arg.path        = SP_ZCOPY;
    arg.send_probes = 1;
    arg.recv_probes = 0;
    sppln_run(sppln_probe_rank, &arg.super);
}


/* registration dearer than any copy here, on any pages */
#define SPPLN_MODEL_DEAR_REG                                                   \
    "reg_resident 1e-3 1e-9\n"                                                 \
    "reg_nonresident 1e-3 1e-9\n"                                              \
    "dereg 1e-4 1e-10\n"                                                       \
    "copy 65536 2e10\n"                                                        \
    "copy 67108864 8e9\n"                                                      \
    "net_latency 2e-6\n"                                                       \
    "net_bw 5e9\n"                                                             \
    "net_gap 1e-7\n"

/* registration cheap on resident pages only: the pages decide */
#define SPPLN_MODEL_REG_BY_PAGES                                               \
    "reg_resident 1e-6 1e-12\n"                                                \
    "reg_nonresident 1e-3 1e-9\n"                                              \
    "dereg 1e-6 1e-12\n"                                                       \
    "copy 65536 2e10\n"                                                        \
    "copy 67108864 8e9\n"                                                      \
    "net_latency 2e-6\n"                                                       \
    "net_bw 5e9\n"                                                             \
    "net_gap 1e-7\n"

/* what rank 1 of sppln_rma_probe_rank() puts */
static void sppln_rma_check_probe(const uint8_t *region)
{
    TH_CHECK_PATTERN(region, SPPLN_MB, 995);
}

/* Rank 1 puts 1 MiB from a buffer it wrote (resident, neither cached nor
 * put before) into rank 0's region: its path and residency lookups */
static void
sppln_rma_probe_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_probe_arg_t *arg = varg;
    ucp_request_param_t param    = {0};
    uint64_t counts[3], remote, before;
    ucp_rkey_h rkey;
    size_t map_len;
    uint8_t *src;
    th_ucp_t ucp;

    TH_ASSERT_EQ(arg->size, SPPLN_MB); /* sppln_rma_check_probe() */
    sppln_env("auto", "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_RMA);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    if (rank == 0) {
        sppln_rma_target(&ucp, oob, arg->size, sppln_rma_check_probe);
        return;
    }

    th_ucp_recv_rkey(&ucp, oob, 0, &rkey, &remote);
    src = sppln_map(arg->size, &map_len);
    th_fill_pattern(src, arg->size, 995);
    sppln_rma_counts(&ucp, counts);
    before = sppln_probes(&ucp);
    TH_ASSERT_UCS_OK(th_ucp_wait(&ucp,
                                 ucp_put_nbx(ucp.ep, src, arg->size, remote,
                                             rkey, &param),
                                 60.0));
    TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, ucp_ep_flush_nbx(ucp.ep, &param), 60.0));
    th_log("put of %zu bytes: %s, %lu residency lookups", arg->size,
           sppln_rma_path_names[sppln_rma_path(&ucp, counts)],
           (unsigned long)(sppln_probes(&ucp) - before));
    TH_ASSERT_EQ(sppln_rma_path(&ucp, counts), arg->path);
    TH_ASSERT_EQ(sppln_probes(&ucp) - before, arg->send_probes);
    munmap(src, map_len);
    sppln_rma_done(&ucp, oob, rkey);
}

/* put/choose asks for a buffer's residency (a system call) only when the
 * model's answer for resident pages and for untouched ones differ: a
 * registration dearer than the copy on both stages the put without asking;
 * one cheap on resident pages only asks, and the written buffer goes
 * zero-copy */
TH_TEST_TIMEOUT(sppln, rma_residency_looked_up_where_it_decides, 120)
{
    sppln_probe_arg_t arg = {{"auto", "hcr", 0, 0, SPPLN_MODEL_DEAR_REG},
                             SPPLN_MB,
                             SP_RMA_STAGED,
                             0,
                             0};

    sppln_run(sppln_rma_probe_rank, &arg.super);

    arg.super.model = SPPLN_MODEL_REG_BY_PAGES;
    arg.path        = SP_RMA_ZCOPY;
    arg.send_probes = 1;
    sppln_run(sppln_rma_probe_rank, &arg.super);
}


/* ---- a message that would wait for a staging group goes zero-copy ------ */

#define SPPLN_NUM_BUSY 4

typedef struct {
    sppln_arg_t super;
    size_t size; /* staged by the model when a group is free */
} sppln_busy_arg_t;

/* Rank 0 sends SPPLN_NUM_BUSY messages of a size the model stages, at once,
 * with one send group: the first takes it, the others would wait for that
 * transfer to end, and go zero-copy instead */
static void sppln_busy_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_busy_arg_t *arg = varg;
    ucp_request_param_t param   = {0};
    void *req[SPPLN_NUM_BUSY];
    uint8_t *buf[SPPLN_NUM_BUSY];
    const sppln_stats_t *st;
    th_ucp_t ucp;
    unsigned i;
    char go;

    sppln_env("auto", "hcr");
    setenv("UCX_RNDV_SPPLN_GROUPS", "1", 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    for (i = 0; i < SPPLN_NUM_BUSY; ++i) {
        buf[i] = malloc(arg->size);
        TH_ASSERT(buf[i] != NULL);
        /* written by the application: resident */
        th_fill_pattern(buf[i], arg->size, 1000 + i);
    }

    if (rank == 0) {
        th_oob_recv(oob, 1, &go, 1);
        for (i = 0; i < SPPLN_NUM_BUSY; ++i) {
            req[i] = ucp_tag_send_nbx(ucp.ep, buf[i], arg->size, 0x500 + i,
                                      &param);
        }
    } else {
        for (i = 0; i < SPPLN_NUM_BUSY; ++i) {
            req[i] = ucp_tag_recv_nbx(ucp.worker, buf[i], arg->size, 0x500 + i,
                                      (ucp_tag_t)-1, &param);
        }
        go = 1;
        th_oob_send(oob, 0, &go, 1);
    }
    for (i = 0; i < SPPLN_NUM_BUSY; ++i) {
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req[i], 60.0));
        TH_CHECK_PATTERN(buf[i], arg->size, 1000 + i);
    }

    if (rank == 0) {
        st = ucp_proto_sppln_stats(ucp.worker);
        th_log("%zu bytes x %d: staged %llu, zcopy %llu, busy %llu", arg->size,
               SPPLN_NUM_BUSY,
               (unsigned long long)(st->sent[SP_BCOPY] + st->sent[SP_SPPLN]),
               (unsigned long long)st->sent[SP_ZCOPY],
               (unsigned long long)st->busy_zcopy);
        TH_ASSERT_EQ(st->sent[SP_BCOPY] + st->sent[SP_SPPLN], 1);
        TH_ASSERT_EQ(st->sent[SP_ZCOPY], SPPLN_NUM_BUSY - 1);
        TH_ASSERT_EQ(st->busy_zcopy, SPPLN_NUM_BUSY - 1);
    }
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
    for (i = 0; i < SPPLN_NUM_BUSY; ++i) {
        free(buf[i]);
    }
}

TH_TEST_TIMEOUT(sppln, busy_staging_goes_zcopy, 120)
{
    sppln_busy_arg_t arg = {{"auto", "hcr", 0, 0, SPPLN_MODEL_BASE}, 0};
    char path[]          = "/tmp/th-sppln-model-XXXXXX";
    ucs_calib_derived_t d;
    ucs_calib_model_t m;
    FILE *f;
    int fd;

    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    f = fdopen(fd, "w");
    TH_ASSERT(f != NULL);
    fputs(SPPLN_MODEL_BASE, f);
    fclose(f);
    TH_ASSERT_UCS_OK(ucs_calib_model_read(path, &m));
    unlink(path);
    ucs_calib_derive(&m, &d);

    /* a size the model stages, resident */
    arg.size = 2 * ucs_max(d.sp_thresh, 65536);
    th_log("model: sppln from %zu, zcopy from %zu (resident): %zu bytes",
           d.sp_thresh, d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT], arg.size);
    TH_ASSERT(arg.size < d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT]);
    sppln_run(sppln_busy_rank, &arg.super);
}

/* ---- the sub-blocks of a first send ------------------------------------ */

/* a wire slower than copies into untouched pages (3 GB/s against 3.4:
 * 25 Gb/s on softverbs), and the same with a wire four times as fast */
#define SPPLN_MODEL_WIRE_BOUND(_net_bw)                                        \
    "reg_resident 4e-6 1e-10\n"                                                \
    "reg_nonresident 4e-6 4e-10\n"                                             \
    "dereg 4e-6 5e-11\n"                                                       \
    "copy_fault 0 2.7e-10\n"                                                   \
    "copy 65536 5e10\n"                                                        \
    "copy 67108864 1.2e10\n"                                                   \
    "net_latency 1e-6\n"                                                       \
    "net_bw " _net_bw "\n"                                                     \
    "net_gap 1.4e-6\n"

/* page faults slower than that wire (3.1 ns a byte, as on a VM in a slow
 * period), userfaultfd's fill, which the receiver takes, faster (0.19) */
#define SPPLN_MODEL_FAULTS_SLOW                                                \
    "reg_resident 4e-6 1e-10\n"                                                \
    "reg_nonresident 4e-6 4e-10\n"                                             \
    "dereg 4e-6 5e-11\n"                                                       \
    "copy_fault 0 3.1e-9\n"                                                    \
    "fill_populate 1.5e-6 1.3e-10\n"                                           \
    "fill_uffd 4.3e-6 1.9e-10\n"                                               \
    "fill_copy 0 1.3e-9\n"                                                     \
    "copy 65536 5e10\n"                                                        \
    "copy 67108864 1.2e10\n"                                                   \
    "net_latency 1e-6\n"                                                       \
    "net_bw 3e9\n"                                                             \
    "net_gap 1.4e-6\n"

typedef struct {
    sppln_arg_t super;
    size_t size;
    uint64_t min_puts, max_puts; /* that its first send may take */
} sppln_sub_arg_t;

/* rank 0 sends one fresh buffer of size, once, by the superpipeline */
static void sppln_sub_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_sub_arg_t *arg = varg;
    const sppln_stats_t *st;
    size_t map_len;
    uint8_t *buf;
    th_ucp_t ucp;

    (void)nprocs;
    sppln_env(arg->super.path, "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf = sppln_map(arg->size, &map_len);
    if (rank == 0) {
        th_fill_pattern(buf, arg->size, 77);
        sppln_send_to_posted(&ucp, oob, buf, arg->size, 0x950);
        st = ucp_proto_sppln_stats(ucp.worker);
        TH_ASSERT(st != NULL);
        TH_ASSERT_EQ(st->sent[SP_SPPLN], 1);
        th_log("%zu bytes: %llu puts (%llu..%llu)", arg->size,
               (unsigned long long)st->puts, (unsigned long long)arg->min_puts,
               (unsigned long long)arg->max_puts);
        TH_ASSERT_GE(st->puts, arg->min_puts);
        TH_ASSERT_LE(st->puts, arg->max_puts);
    } else {
        sppln_recv_posted(&ucp, oob, buf, arg->size, 0x950);
        TH_CHECK_PATTERN(buf, arg->size, 77);
    }
    munmap(buf, map_len);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/*
 * Where the wire is slower than the receiver's copies into new pages, a
 * first send's sub-blocks are sized for the message (the last one's copy
 * against the gaps of all: ucp_sppln_first_send_sub()), here at most half
 * the lane's; where it is faster, every put adds to what sets the pace,
 * and a first send keeps the lane's. (Each chunk's last sub-block may be
 * short: a 1 MiB message has at most 8 chunks.) The receiver's copies are
 * what it does with new pages, the cheaper of its two fills: a model
 * whose page faults are slower than the wire, and whose userfaultfd fill
 * is not, sizes them for the message too.
 */
TH_TEST_TIMEOUT(sppln, first_send_sub_blocks, 120)
{
    sppln_sub_arg_t arg = {{"sppln", "hcr", 0, 0,
                            SPPLN_MODEL_WIRE_BOUND("3e9")},
                           SPPLN_MB,
                           0,
                           0};
    ucs_calib_derived_t d;
    uint64_t slow_min;

    sppln_model_derive(SPPLN_MODEL_WIRE_BOUND("3e9"), &d);
    th_log("lane's sub-block: %zu bytes", d.sp_sub);
    TH_ASSERT(d.sp_sub >= 64 * 1024);
    arg.min_puts = 2 * (arg.size / d.sp_sub);
    arg.max_puts = (arg.size / (16 * 1024)) + 8;
    sppln_run(sppln_sub_rank, &arg.super);
    slow_min = arg.min_puts;

    sppln_model_derive(SPPLN_MODEL_WIRE_BOUND("1.2e10"), &d);
    th_log("four times the wire: lane's sub-block %zu bytes", d.sp_sub);
    arg.super.model = SPPLN_MODEL_WIRE_BOUND("1.2e10");
    arg.min_puts    = arg.size / d.sp_sub;
    arg.max_puts    = (arg.size / d.sp_sub) + 8;
    TH_ASSERT_LT(arg.max_puts, slow_min); /* the two cases differ */
    sppln_run(sppln_sub_rank, &arg.super);

    sppln_model_derive(SPPLN_MODEL_FAULTS_SLOW, &d);
    th_log("slow page faults: lane's sub-block %zu bytes", d.sp_sub);
    TH_ASSERT(d.sp_sub >= 64 * 1024);
    arg.super.model = SPPLN_MODEL_FAULTS_SLOW;
    arg.min_puts    = 2 * (arg.size / d.sp_sub);
    arg.max_puts    = (arg.size / (16 * 1024)) + 8;
    sppln_run(sppln_sub_rank, &arg.super);
}

/* ---- a small registered buffer goes eagerly --------------------------- */

/* the base model with a message gap of 1 us: eager costs less than a
 * rendezvous up to four fragments (ucp_sppln_eager_max()) */
#define SPPLN_MODEL_EAGER SPPLN_MODEL_NET("5e9", "1e-6")

#define SPPLN_EAGER_SENDS 3

typedef struct {
    sppln_arg_t super;
    size_t size; /* of the reused buffer */
    int eager; /* whether its registered sends must go eagerly */
    int staged; /* how many of them must be staged, the rest zero-copy */
    int backoff; /* how many staged ones must take longer than
                    zero-copy's time by the model */
    int sends; /* of the buffer (0: SPPLN_EAGER_SENDS) */
    int timed; /* whether its zero-copy sends must be timed */
    double zcopy_scale; /* they count as this many times their time
                           (0: as they took) */
    int ucx_rndv; /* zero-copy by UCX's rendezvous, whose ATS times
                     it: UCX_RNDV_THRESH set (without it UCX sends a few
                     MiB on softverbs by its eager zero-copy, untimed) */
    int slow_send; /* the send (by its index, 0: none) that counts as
                      SPPLN_SLOW_STAGED times its time if staged */
} sppln_eager_arg_t;

/* far more than a timed zero-copy send counts as in any of the tests */
#define SPPLN_SLOW_STAGED 1e4

/* Rank 0 sends one buffer arg->sends times, new data each time: the
 * first send stages it, the next ones are zero-copy sends of a registered
 * buffer, eager or by UCX's rendezvous, or staged again */
static void sppln_eager_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_eager_arg_t *arg = varg;
    int sends      = (arg->sends > 0) ? arg->sends : SPPLN_EAGER_SENDS;
    uint64_t zcopy = 0, eager = 0, staged = 0, backoff = 0, timed = 0;
    const sppln_stats_t *st;
    size_t map_len;
    uint8_t *buf;
    th_ucp_t ucp;
    int i;

    sppln_env(arg->super.path, "hcr");
    setenv("UCX_RNDV_SPPLN_THRESH", "16k", 1);
    if (arg->ucx_rndv) {
        setenv("UCX_RNDV_THRESH", "64k", 1);
    }
    ucp_proto_sppln_test_zcopy_scale((arg->zcopy_scale > 0) ? arg->zcopy_scale :
                                                              1.0);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);

    buf = sppln_map(arg->size, &map_len);
    for (i = 0; i < sends; ++i) {
        if (rank == 0) {
            st = ucp_proto_sppln_stats(ucp.worker);
            if ((i == 1) && (st != NULL)) {
                zcopy   = st->sent[SP_ZCOPY];
                eager   = st->eager;
                staged  = st->sent[SP_BCOPY] + st->sent[SP_SPPLN];
                backoff = st->cached_backoff;
                timed   = st->zcopy_timed;
            }
            ucp_proto_sppln_test_staged_scale(
                    ((arg->slow_send > 0) && (i == arg->slow_send)) ?
                            SPPLN_SLOW_STAGED :
                            1.0);
            th_fill_pattern(buf, arg->size, 1200 + i);
            sppln_send_to_posted(&ucp, oob, buf, arg->size, 0x900 + i);
        } else {
            memset(buf, 0, arg->size);
            sppln_recv_posted(&ucp, oob, buf, arg->size, 0x900 + i);
            TH_CHECK_PATTERN(buf, arg->size, 1200 + i);
        }
    }
    if (rank == 0) {
        st = ucp_proto_sppln_stats(ucp.worker);
        TH_ASSERT(st != NULL);
        th_log("%s, %zu bytes: of %d registered sends %lu eager, %lu staged, "
               "%lu timed",
               arg->super.path, arg->size, sends - 1,
               (unsigned long)(st->eager - eager),
               (unsigned long)(st->sent[SP_BCOPY] + st->sent[SP_SPPLN] -
                               staged),
               (unsigned long)(st->zcopy_timed - timed));
        TH_ASSERT_EQ(st->sent[SP_ZCOPY] - zcopy, sends - 1 - arg->staged);
        TH_ASSERT_EQ(st->zcopy_timed - timed,
                     arg->timed ? (sends - 1 - arg->staged) : 0);
        TH_ASSERT_EQ(st->sent[SP_BCOPY] + st->sent[SP_SPPLN] - staged,
                     arg->staged);
        TH_ASSERT_EQ(st->cached_backoff - backoff, arg->backoff);
        TH_ASSERT_EQ(st->eager - eager, arg->eager ? (sends - 1) : 0);
    }
    munmap(buf, map_len);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/*
 * A registered buffer costs no copy either way: what differs is the trips,
 * three for a rendezvous, one for an eager send whose fragments the
 * receiver copies out. Below the size the model gives (two fragments of
 * 8 KiB with 2 us of latency and 1 us of gap per message: 16 KiB eager,
 * 256 KiB not), the automatic choice hands a registered buffer to UCX's
 * eager protocols (reused 16 KiB on softverbs: 10.3 us against 12.9 by
 * the rendezvous on the default link, 15.9 against 19.9 at 25 Gb/s); a
 * path forced to zcopy stays UCX's rendezvous, and so does a message at or
 * above a UCX_RNDV_THRESH the user set.
 */
TH_TEST_TIMEOUT(sppln, small_registered_buffer_goes_eager, 120)
{
    sppln_eager_arg_t arg = {{"auto", "hcr", 0, 0, SPPLN_MODEL_EAGER},
                             16 * 1024,
                             1,
                             0,
                             0};

    sppln_run(sppln_eager_rank, &arg.super);

    arg.size  = 256 * 1024;
    arg.eager = 0;
    sppln_run(sppln_eager_rank, &arg.super);

    arg.super.path = "zcopy";
    arg.size       = 16 * 1024;
    sppln_run(sppln_eager_rank, &arg.super);

    /* a rendezvous threshold the user set holds */
    arg.super.path = "auto";
    setenv("UCX_RNDV_THRESH", "16k", 1);
    sppln_run(sppln_eager_rank, &arg.super);
    unsetenv("UCX_RNDV_THRESH");
}

/* models whose fragments' stream is measured: on a link slower than the
 * hosts (8 KiB on the wire at 1.25 GB/s: 6.55 us, the stream 6.6) each
 * fragment's host work hides behind the wire; on a faster one (1.64 us) the
 * hosts take 3.6 us a fragment, 1.96 more than the wire */
#define SPPLN_MODEL_EAGER_WIRE_BOUND                                           \
    SPPLN_MODEL_NET("1.25e9", "3e-6") "net_frag_gap 6.6e-6\n"
#define SPPLN_MODEL_EAGER_HOST_BOUND                                           \
    SPPLN_MODEL_NET("5e9", "3e-6") "net_frag_gap 3.6e-6\n"

/*
 * An eager send's fragments pipeline behind the wire: it pays what each
 * fragment after the first costs the hosts beyond its wire time, against
 * the rendezvous' two more latencies (4 us here). Where the wire is the
 * slower, a registered buffer goes eagerly up to UCP_SPPLN_EAGER_MAX_FRAGS
 * fragments (10 Gb/s on softverbs, reused 256 KiB: eager 218 us against
 * 230 by the rendezvous), which the old rule, every fragment a message's
 * gap in series with the wire, stopped at 16 KiB; where the hosts are,
 * while the excess of the fragments after the first stays under the
 * latencies (three fragments here).
 */
TH_TEST_TIMEOUT(sppln, registered_buffer_eager_by_fragment_gap, 120)
{
    sppln_eager_arg_t arg = {{"auto", "hcr", 0, 0,
                              SPPLN_MODEL_EAGER_WIRE_BOUND},
                             256 * 1024,
                             1,
                             0,
                             0};

    sppln_run(sppln_eager_rank, &arg.super);

    /* more fragments than UCP_SPPLN_EAGER_MAX_FRAGS: the rendezvous */
    arg.size  = SPPLN_MB;
    arg.eager = 0;
    sppln_run(sppln_eager_rank, &arg.super);

    arg.super.model = SPPLN_MODEL_EAGER_HOST_BOUND;
    arg.size        = 16 * 1024;
    arg.eager       = 1;
    sppln_run(sppln_eager_rank, &arg.super);

    arg.size  = 64 * 1024;
    arg.eager = 0;
    sppln_run(sppln_eager_rank, &arg.super);
}

/* the base model on a device that moves buffers from 2 MiB on at a
 * twenty-five-hundredth of its rate (8 MiB by zero-copy: 4.2 s), where a
 * staged sender keeps most of it. A staged send must never take longer:
 * at a twenty-fifth (42 ms) one across two hosts on a loaded machine did,
 * and the send after it backed off to zero-copy, as it should; at a
 * two-hundred-fiftieth (0.42 s) one did with two spinning processes
 * beside the test on two cores. */
#define SPPLN_MODEL_SLOW_LARGE_ZCOPY                                           \
    SPPLN_MODEL_BASE                                                           \
    "net 2097152 2e6\n"                                                        \
    "stage 2097152 4e9\n"

/* one whose large transfers are ten times faster than its small ones, and
 * a staged sender's twice as fast again: no host moves 8 MiB that fast
 * (zero-copy: 0.17 ms) */
#define SPPLN_MODEL_FAST_LARGE_ZCOPY                                           \
    SPPLN_MODEL_BASE                                                           \
    "net 2097152 5e10\n"                                                       \
    "stage 2097152 1e11\n"

/*
 * Zero-copy from a registered buffer loses to staging it where the device
 * moves large buffers slower than the staging's cache-sized chunks (on
 * softverbs, whose kernel copy walks every page of every transfer, a reused
 * 16 MiB buffer by UCX's rendezvous took 2.6-2.9 ms against 1.8-2.2 by the
 * superpipeline). From the size the measured model gives, a registered or
 * resent buffer is staged; below it, and with a model whose large
 * transfers are as fast as its small ones, it goes zero-copy.
 */
TH_TEST_TIMEOUT(sppln, large_registered_buffer_goes_staged, 120)
{
    sppln_eager_arg_t arg = {{"auto", "hcr", 0, 0,
                              SPPLN_MODEL_SLOW_LARGE_ZCOPY},
                             8 * SPPLN_MB,
                             0,
                             SPPLN_EAGER_SENDS - 1,
                             0};
    ucs_calib_derived_t d;

    sppln_model_derive(SPPLN_MODEL_SLOW_LARGE_ZCOPY, &d);
    th_log("staged from %zu bytes", d.cached_staged_thresh);
    TH_ASSERT_GT(d.cached_staged_thresh, 256 * 1024);
    TH_ASSERT_LE(d.cached_staged_thresh, arg.size);
    sppln_run(sppln_eager_rank, &arg.super);

    /* below it: near it, its zero-copy sends are timed (for a staged one's
     * check, sppln.registered_buffer_near_threshold_explored) */
    arg.size   = d.cached_staged_thresh - 4096;
    arg.staged = 0;
    arg.timed  = (arg.size >= 2 * SPPLN_MB);
    sppln_run(sppln_eager_rank, &arg.super);

    /* a device that moves large buffers as fast as small ones */
    sppln_model_derive(SPPLN_MODEL_BASE, &d);
    TH_ASSERT_EQ(d.cached_staged_thresh, UCS_CALIB_SIZE_INF);
    arg.super.model = SPPLN_MODEL_BASE;
    arg.size        = 8 * SPPLN_MB;
    arg.timed       = 0;
    sppln_run(sppln_eager_rank, &arg.super);
}

/*
 * A staged registered buffer is checked against zero-copy's time, the
 * model's where no zero-copy send of its size was timed yet: two that took
 * longer (here every one), the first and the one that confirms it, send
 * the next messages of its size zero-copy, and those are timed. Of 4 sends
 * (one first send, 3 registered): 2 staged, then one zero-copy.
 */
TH_TEST_TIMEOUT(sppln, large_registered_buffer_backs_off, 120)
{
    sppln_eager_arg_t arg = {{"auto", "hcr", 0, 0,
                              SPPLN_MODEL_FAST_LARGE_ZCOPY},
                             8 * SPPLN_MB,
                             0,
                             2,
                             1,
                             4,
                             1};
    ucs_calib_derived_t d;

    sppln_model_derive(SPPLN_MODEL_FAST_LARGE_ZCOPY, &d);
    th_log("staged from %zu bytes", d.cached_staged_thresh);
    TH_ASSERT_LE(d.cached_staged_thresh, arg.size);
    sppln_run(sppln_eager_rank, &arg.super);
}

/*
 * A size class that stays staged still sends one registered message in 64
 * zero-copy, timed, so that the staged ones are checked against zero-copy
 * as it is now: of 65 registered sends of a buffer the model stages, the
 * 64th goes zero-copy (counted as a hundred times its time: the staged
 * ones after it still win).
 */
TH_TEST_TIMEOUT(sppln, staged_registered_buffer_times_zcopy_now_and_then, 120)
{
    sppln_eager_arg_t arg = {{"auto", "hcr", 0, 0,
                              SPPLN_MODEL_SLOW_LARGE_ZCOPY},
                             8 * SPPLN_MB,
                             0,
                             64,
                             0,
                             66,
                             1,
                             100,
                             1};

    sppln_run(sppln_eager_rank, &arg.super);
}

/* zero-copy measured at 10 MB/s from 2 MiB on, a fifth of that at
 * 64 MiB, a staged sender a little slower at 2 MiB and faster at 64 MiB:
 * the cached staging threshold falls between, and softverbs stages a few
 * MiB in a fraction of the model's zero-copy time (270 ms for 2.7 MB), on
 * one host or across two (across two hosts a staged 7 MB took 38-76 ms on
 * a slow VM, so at 100 MB/s a staged 2.7 MB lost the check now and then) */
#define SPPLN_MODEL_NEAR_TIE_SLOW                                              \
    SPPLN_MODEL_BASE                                                           \
    "net 2097152 1e7\n"                                                        \
    "net 67108864 2e6\n"                                                       \
    "stage 2097152 9e6\n"                                                      \
    "stage 67108864 5e6\n"

/* the same shape five hundred times faster: no host stages a few MiB that fast
 * (4 MiB by zero-copy: 0.08 ms) */
#define SPPLN_MODEL_NEAR_TIE_FAST                                              \
    SPPLN_MODEL_BASE                                                           \
    "net 2097152 5e10\n"                                                       \
    "net 67108864 1e10\n"                                                      \
    "stage 2097152 4.5e10\n"                                                   \
    "stage 67108864 2.5e10\n"

/* the size of a message explored below the threshold of @a model: from
 * zero-copy's first measured working set (2 MiB) or half the threshold */
static size_t sppln_explored_size(const char *model)
{
    ucs_calib_derived_t d;
    size_t size;

    sppln_model_derive(model, &d);
    th_log("staged from %zu bytes", d.cached_staged_thresh);
    TH_ASSERT_GT(d.cached_staged_thresh, 2 * SPPLN_MB);
    TH_ASSERT_LT(d.cached_staged_thresh, 64 * SPPLN_MB);
    size = ucs_align_down(ucs_max(2 * SPPLN_MB, d.cached_staged_thresh / 2),
                          4096);
    TH_ASSERT_LT(size, d.cached_staged_thresh);
    return size;
}

/*
 * Below the model's cached staging threshold a registered buffer goes
 * zero-copy, but the threshold is where two measured rates cross, and
 * near it (from zero-copy's first measured working set up) the fourth
 * registered send of a size class, and one in 64 after it, is staged and
 * checked against zero-copy: the zero-copy sends of that size the sender
 * timed (each, start to ATS), else the model. One that took less keeps the
 * size class staged (every later one checked the same way); one that took
 * longer is confirmed by the next, also staged, and where the faster of
 * the two took clearly longer the size class goes back to zero-copy. Of 8
 * sends (one first send, 7 registered): 3 zero-copy, then 4 staged; or the
 * fourth and fifth staged, backing off, and the rest zero-copy. Below
 * zero-copy's first
 * measured working set, where its rate is interpolated, none is staged
 * nor timed.
 *
 * The timed zero-copy sends count as a hundred times, or a hundredth of,
 * their time, whatever this host's: a host where zero-copy is far slower
 * than staging, or far faster. Where that and the model disagree, the
 * timed sends decide. They are UCX's rendezvous (a user's UCX_RNDV_THRESH
 * here): the sender times one from its start to the receiver's ATS.
 */
TH_TEST_TIMEOUT(sppln, registered_buffer_near_threshold_explored, 180)
{
    sppln_eager_arg_t arg = {{"auto", "hcr", 0, 0, SPPLN_MODEL_NEAR_TIE_SLOW},
                             0,
                             0,
                             4,
                             0,
                             8,
                             1,
                             100,
                             1};

    /* the model stages faster than zero-copy, and so does the host */
    arg.size = sppln_explored_size(SPPLN_MODEL_NEAR_TIE_SLOW);
    sppln_run(sppln_eager_rank, &arg.super);

    /* the model stages faster, the host zero-copies faster */
    arg.zcopy_scale = 0.01;
    arg.staged      = 2;
    arg.backoff     = 1;
    sppln_run(sppln_eager_rank, &arg.super);

    /* below 2 MiB, where zero-copy's rate is interpolated */
    arg.size    = 2 * SPPLN_MB - 4096;
    arg.staged  = 0;
    arg.backoff = 0;
    arg.timed   = 0;
    sppln_run(sppln_eager_rank, &arg.super);

    /* the model zero-copies faster than staging, and so does the host */
    arg.super.model = SPPLN_MODEL_NEAR_TIE_FAST;
    arg.size        = sppln_explored_size(SPPLN_MODEL_NEAR_TIE_FAST);
    arg.staged      = 2;
    arg.backoff     = 1;
    arg.timed       = 1;
    sppln_run(sppln_eager_rank, &arg.super);

    /* the model zero-copies faster, the host stages faster */
    arg.zcopy_scale = 100;
    arg.staged      = 4;
    arg.backoff     = 0;
    sppln_run(sppln_eager_rank, &arg.super);

    /* so does the host, but the first staged one (the fourth registered
     * send) was slowed by something else: the next one, staged too,
     * decides, and keeps the size class staged */
    arg.slow_send = 4;
    sppln_run(sppln_eager_rank, &arg.super);
}

/* what rank 1 received of the active messages of sppln_am_eager_rank() */
typedef struct {
    th_ucp_t *ucp;
    uint8_t *buf;
    size_t size;
    int received;
    int rndv; /* of them announced by a rendezvous */
    int errors;
} sppln_am_eager_rx_t;

static void sppln_am_eager_done(void *request, ucs_status_t status,
                                size_t length, void *arg)
{
    sppln_am_eager_rx_t *rx = arg;

    rx->errors += (status != UCS_OK) || (length != rx->size);
    ++rx->received;
    if (request != NULL) {
        ucp_request_free(request);
    }
}

static ucs_status_t
sppln_am_eager_cb(void *arg, const void *header, size_t header_length,
                  void *data, size_t length, const ucp_am_recv_param_t *param)
{
    sppln_am_eager_rx_t *rx = arg;

    if (length != rx->size) {
        ++rx->errors;
        ++rx->received;
    } else if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        ++rx->rndv;
        th_ucp_am_recv_data(rx->ucp, data, rx->buf, length, sppln_am_eager_done,
                            rx);
    } else {
        memcpy(rx->buf, data, length);
        ++rx->received;
    }
    return UCS_OK;
}

/* Rank 0 sends one 16 KiB buffer as an active message SPPLN_EAGER_SENDS
 * times, then as many times with UCP_AM_SEND_FLAG_RNDV */
static void sppln_am_eager_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const size_t size         = 16 * 1024;
    ucp_request_param_t param = {0};
    sppln_am_eager_rx_t rx    = {0};
    const sppln_stats_t *st;
    uint64_t eager = 0;
    size_t map_len;
    th_ucp_t ucp;
    uint8_t *buf;
    int batch, i;
    char go = 1;

    sppln_env("auto", "hcr");
    setenv("UCX_RNDV_SPPLN_THRESH", "16k", 1);
    th_ucp_init(&ucp, UCP_FEATURE_AM);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf     = sppln_map(size, &map_len);
    rx.ucp  = &ucp;
    rx.buf  = buf;
    rx.size = size;
    sppln_am_set_handler(&ucp, sppln_am_eager_cb, &rx);

    for (batch = 0; batch < 2; ++batch) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = batch ? UCP_AM_SEND_FLAG_RNDV : 0;
        st                 = ucp_proto_sppln_stats(ucp.worker);
        eager              = (st == NULL) ? 0 : st->eager;
        rx.rndv            = 0;
        for (i = 0; i < SPPLN_EAGER_SENDS; ++i) {
            if (rank == 0) {
                th_fill_pattern(buf, size, 1300 + (batch * 10) + i);
                th_oob_recv(oob, 1, &go, 1);
                TH_ASSERT_UCS_OK(
                        th_ucp_wait(&ucp,
                                    ucp_am_send_nbx(ucp.ep, SPPLN_AM_ID, NULL,
                                                    0, buf, size, &param),
                                    60.0));
                continue;
            }
            memset(buf, 0, size);
            rx.received = 0;
            th_oob_send(oob, 0, &go, 1);
            sppln_progress_past(&ucp, &rx.received, 0, 60.0);
            TH_ASSERT_EQ(rx.errors, 0);
            TH_CHECK_PATTERN(buf, size, 1300 + (batch * 10) + i);
        }
        if (rank == 0) {
            st = ucp_proto_sppln_stats(ucp.worker);
            TH_ASSERT(st != NULL);
            th_log("batch %d: %lu eager", batch,
                   (unsigned long)(st->eager - eager));
            /* the first send stages the buffer, the next ones go eagerly;
             * asked for a rendezvous, none does */
            TH_ASSERT_EQ(st->eager - eager,
                         batch ? 0 : (SPPLN_EAGER_SENDS - 1));
        } else {
            th_log("batch %d: %d announced by a rendezvous", batch, rx.rndv);
            TH_ASSERT_EQ(rx.rndv, batch ? SPPLN_EAGER_SENDS : 1);
        }
    }
    munmap(buf, map_len);
    th_ucp_flush_barrier(&ucp, oob);
    th_ucp_cleanup(&ucp);
}

/* the same for active messages: a registered 16 KiB buffer goes eagerly,
 * and its receiver gets it as eager data, unless the sender asked for a
 * rendezvous */
TH_TEST_TIMEOUT(sppln, small_registered_am_goes_eager, 120)
{
    sppln_arg_t arg = {"auto", "hcr", 0, 0, SPPLN_MODEL_EAGER};

    sppln_run(sppln_am_eager_rank, &arg);
}


/* ---- lanes: hcr only by default (UCX_RNDV_SPPLN_TLS=hcr) ----------------- */

/* Rank 0 sends one message of 1 MiB through the forced superpipeline on
 * the transports of arg->tls, with UCX_RNDV_SPPLN_TLS at its default;
 * arg->max_size says whether rndv/sppln must have sent it (1) or not (0) */
static void sppln_tls_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const sppln_arg_t *arg    = varg;
    ucp_request_param_t param = {0};
    const sppln_stats_t *st;
    th_ucp_t ucp;
    uint8_t *buf;
    void *req;
    char go;

    sppln_env("sppln", arg->tls);
    unsetenv("UCX_RNDV_SPPLN_TLS"); /* the default */
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf = malloc(SPPLN_MB);
    TH_ASSERT(buf != NULL);
    if (rank == 0) {
        th_fill_pattern(buf, SPPLN_MB, 31);
        th_oob_recv(oob, 1, &go, 1);
        TH_ASSERT_UCS_OK(
                th_ucp_wait(&ucp,
                            ucp_tag_send_nbx(ucp.ep, buf, SPPLN_MB, 7, &param),
                            30.0));
        st = ucp_proto_sppln_stats(ucp.worker);
        TH_ASSERT_EQ((st == NULL) ? 0 : st->sent[SP_SPPLN], arg->max_size);
    } else {
        memset(buf, 0, SPPLN_MB);
        req = ucp_tag_recv_nbx(ucp.worker, buf, SPPLN_MB, 7, (ucp_tag_t)-1,
                               &param);
        go  = 1;
        th_oob_send(oob, 0, &go, 1);
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 30.0));
        TH_CHECK_PATTERN(buf, SPPLN_MB, 31);
    }
    th_ucp_flush_barrier(&ucp, oob);
    free(buf);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, tls_default_hcr_only, 120)
{
    sppln_arg_t on_rc  = {"sppln", "rc_v", 0, 0, NULL};
    sppln_arg_t on_hcr = {"sppln", "hcr", 1, 0, NULL};

    sppln_run(sppln_tls_rank, &on_rc);
    sppln_run(sppln_tls_rank, &on_hcr);
}


/* ---- iov senders keep UCX's protocols; any receiver takes rndv/sppln --- */

static void sppln_iov_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    const size_t half          = SPPLN_MB / 2 + 3;
    ucp_request_param_t param  = {0};
    ucp_request_param_t iparam = {0};
    const sppln_stats_t *st;
    ucp_dt_iov_t iov[2];
    uint8_t *buf, *other;
    th_ucp_t ucp;
    void *req;
    char go;

    sppln_env("sppln", "hcr");
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf   = malloc(2 * half);
    other = malloc(2 * half);
    TH_ASSERT((buf != NULL) && (other != NULL));
    /* the two halves of the message, not adjacent in memory */
    iov[0].buffer       = other + half;
    iov[0].length       = half;
    iov[1].buffer       = other;
    iov[1].length       = half;
    iparam.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    iparam.datatype     = ucp_dt_make_iov();

    if (rank == 0) {
        /* a contiguous message: rndv/sppln; an iov one: not */
        th_fill_pattern(buf, 2 * half, 41);
        th_oob_recv(oob, 1, &go, 1);
        TH_ASSERT_UCS_OK(
                th_ucp_wait(&ucp,
                            ucp_tag_send_nbx(ucp.ep, buf, 2 * half, 1, &param),
                            30.0));
        th_fill_pattern(buf, 2 * half, 42);
        memcpy(iov[0].buffer, buf, half);
        memcpy(iov[1].buffer, buf + half, half);
        th_oob_recv(oob, 1, &go, 1);
        TH_ASSERT_UCS_OK(
                th_ucp_wait(&ucp, ucp_tag_send_nbx(ucp.ep, iov, 2, 2, &iparam),
                            30.0));
        st = ucp_proto_sppln_stats(ucp.worker);
        TH_ASSERT(st != NULL);
        TH_ASSERT_EQ(st->sent[SP_SPPLN], 1);
        TH_ASSERT_EQ(st->sent[SP_BCOPY] + st->sent[SP_ZCOPY], 0);
    } else {
        /* the contiguous message into an iov receive */
        memset(other, 0, 2 * half);
        req = ucp_tag_recv_nbx(ucp.worker, iov, 2, 1, (ucp_tag_t)-1, &iparam);
        go  = 1;
        th_oob_send(oob, 0, &go, 1);
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 30.0));
        memcpy(buf, iov[0].buffer, half);
        memcpy(buf + half, iov[1].buffer, half);
        TH_CHECK_PATTERN(buf, 2 * half, 41);
        /* the iov message into a contiguous one */
        memset(buf, 0, 2 * half);
        req = ucp_tag_recv_nbx(ucp.worker, buf, 2 * half, 2, (ucp_tag_t)-1,
                               &param);
        th_oob_send(oob, 0, &go, 1);
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 30.0));
        TH_CHECK_PATTERN(buf, 2 * half, 42);
        st = ucp_proto_sppln_stats(ucp.worker);
        TH_ASSERT(st != NULL);
        TH_ASSERT_EQ(st->received[SP_SPPLN], 1);
    }
    th_ucp_flush_barrier(&ucp, oob);
    free(buf);
    free(other);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, iov_sender_keeps_ucx_protocols, 120)
{
    sppln_run(sppln_iov_rank, NULL);
}


/* ---- UCX_RNDV_SPPLN_COPY_ASYNC=n: never the engine ---------------------- */

/* the model of copy_engine_auto_dma_like_model, under which auto uses the
 * engine: n keeps the sender's own copy */
TH_TEST_TIMEOUT(sppln, copy_engine_off_dma_like_model, 300)
{
    sppln_arg_t arg = {"sppln", "hcr", 4 * SPPLN_MB, 0,
                       SPPLN_MODEL_BASE "engine thread 2e-7 5e-8 3e10 0.9 0\n"};

    setenv("UCX_RNDV_SPPLN_COPY_ASYNC", "n", 1);
    sppln_run(sppln_integrity_rank, &arg);
}


/* ---- UCX_PROTO_INFO=y shows rndv/sppln with its measured terms --------- */

/* sizes as rndv/sppln shows them (below 1 MiB) */
/* a size as the row prints it: bytes, KiB, or MiB to a tenth */
static const char *sppln_kib(size_t size, char *buf, size_t max)
{
    if (size < 1024) {
        snprintf(buf, max, "%zu", size);
    } else if (size < SPPLN_MB) {
        snprintf(buf, max, "%zuK", size / 1024);
    } else {
        snprintf(buf, max, "%.1fM", (double)size / SPPLN_MB);
    }
    return buf;
}

/* Rank 0's standard output while it selects a protocol for a 1 MiB tag
 * send, with a hand-written model and the default threshold: the row of
 * rndv/sppln starts at the model's C_0 and shows its choice by size, C_0,
 * q and the sub-block size, as the model gives them */
static void
sppln_proto_info_rank(th_oob_t *oob, int rank, int nprocs, void *varg)
{
    ucp_request_param_t param = {0};
    char text[65536], expect[4][128], a[32], b[32], c[32];
    const char *row;
    ucs_calib_derived_t d;
    ucs_calib_model_t m;
    int fd, saved, i;
    th_ucp_t ucp;
    uint8_t *buf;
    ssize_t n;
    void *req;
    char go;

    sppln_env("auto", "hcr");
    unsetenv("UCX_RNDV_SPPLN_THRESH");
    setenv("UCX_PROTO_INFO", "y", 1);
    if (rank == 0) {
        fflush(stdout);
        fd    = memfd_create("proto-info", 0);
        saved = dup(STDOUT_FILENO);
        TH_ASSERT((fd >= 0) && (saved >= 0));
        TH_ASSERT(dup2(fd, STDOUT_FILENO) >= 0);
    }
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    th_ucp_connect(&ucp, oob, 1 - rank, 0);
    buf = malloc(SPPLN_MB);
    TH_ASSERT(buf != NULL);
    if (rank == 0) {
        th_fill_pattern(buf, SPPLN_MB, 51);
        th_oob_recv(oob, 1, &go, 1);
        TH_ASSERT_UCS_OK(
                th_ucp_wait(&ucp,
                            ucp_tag_send_nbx(ucp.ep, buf, SPPLN_MB, 3, &param),
                            30.0));
        fflush(stdout);
        TH_ASSERT(dup2(saved, STDOUT_FILENO) >= 0);
        n = pread(fd, text, sizeof(text) - 1, 0);
        TH_ASSERT(n > 0);
        text[n] = '\0';
        close(fd);
        th_log("UCX_PROTO_INFO:\n%s", text);

        TH_ASSERT_UCS_OK(ucs_calib_model_read(getenv("UCX_CALIB_FILE"), &m));
        ucs_calib_derive(&m, &d);
        TH_ASSERT_LT(d.sp_thresh, SPPLN_MB);
        /* from 16 KiB, whatever the model's C_0 */
        snprintf(expect[0], sizeof(expect[0]), " %s..inf |",
                 ucs_memunits_to_str(SPPLN_AUTO_THRESH, a, sizeof(a)));
        snprintf(expect[1], sizeof(expect[1]),
                 "< zcopy, else bcopy <%s< sppln <",
                 sppln_kib(sppln_sp_thresh(&d), a, sizeof(a)));
        snprintf(expect[3], sizeof(expect[3]), "| cached: eager <");
        snprintf(expect[2], sizeof(expect[2]),
                 "| hcr/%s:1 put+notify C0 %s q %.1f sub %s cached-sppln "
                 "inf |",
                 "softverbs0", sppln_kib(d.sp_c0, b, sizeof(b)), d.sp_q,
                 sppln_kib(d.sp_sub, c, sizeof(c)));
        row = strstr(text, expect[0]);
        if (row == NULL) {
            TH_FAIL("UCX_PROTO_INFO output lacks \"%s\"", expect[0]);
        }
        for (i = 1; i < 4; ++i) {
            if ((strstr(row, expect[i]) == NULL) ||
                (strstr(row, expect[i]) > strchr(row, '\n'))) {
                TH_FAIL("the row \"%.*s\" lacks \"%s\"",
                        (int)strcspn(row, "\n"), row, expect[i]);
            }
        }
    } else {
        req = ucp_tag_recv_nbx(ucp.worker, buf, SPPLN_MB, 3, (ucp_tag_t)-1,
                               &param);
        go  = 1;
        th_oob_send(oob, 0, &go, 1);
        TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, req, 30.0));
        TH_CHECK_PATTERN(buf, SPPLN_MB, 51);
    }
    th_ucp_flush_barrier(&ucp, oob);
    free(buf);
    th_ucp_cleanup(&ucp);
}

TH_TEST_TIMEOUT(sppln, proto_info_shows_model, 120)
{
    sppln_arg_t arg = {"auto", "hcr", 0, 0, SPPLN_MODEL_BASE};

    sppln_run(sppln_proto_info_rank, &arg);
}
