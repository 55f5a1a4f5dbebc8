/*
 * The asynchronous copy engine (src/ucs/copy/): data integrity for every
 * backend across sizes, offsets and batches; flow control; shutdown with
 * copies in flight; bad input; configuration; helper placement.
 */
#define _GNU_SOURCE
#include "th.h"

#include <ucs/copy/copy_engine.h>
#include <ucs/type/status.h>

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GUARD 64

static ucs_copy_engine_t *engine_create(ucs_copy_backend_t backend)
{
    ucs_copy_engine_params_t params = {.backend = backend, .name = "test"};
    ucs_copy_engine_t *engine;

    TH_ASSERT_EQ(ucs_copy_engine_create(&params, &engine), UCS_OK);
    return engine;
}

/* Copy and verify: the destination holds the pattern, its guards do not
 * change, whatever the path (inline or queued) */
static void copy_and_check(ucs_copy_engine_t *engine, size_t size,
                           size_t src_off, size_t dst_off, uint64_t seed)
{
    uint8_t *src = malloc(size + src_off + 1);
    uint8_t *dst = malloc(size + dst_off + 2 * GUARD);
    ucs_copy_req_t req;
    ucs_status_t status;
    size_t i;

    TH_ASSERT((src != NULL) && (dst != NULL));
    th_fill_pattern(src + src_off, size, seed);
    memset(dst, 0x5a, size + dst_off + 2 * GUARD);

    status = ucs_copy_engine_post(engine, dst + GUARD + dst_off,
                                  src + src_off, size, &req);
    TH_ASSERT((status == UCS_OK) || (status == UCS_INPROGRESS));
    TH_ASSERT_EQ(ucs_copy_engine_wait(engine, &req), UCS_OK);
    TH_ASSERT_EQ(ucs_copy_req_test(&req), UCS_OK);

    TH_CHECK_PATTERN(dst + GUARD + dst_off, size, seed);
    for (i = 0; i < GUARD + dst_off; ++i) {
        TH_ASSERT_EQ(dst[i], 0x5a);
    }
    for (i = 0; i < GUARD; ++i) {
        TH_ASSERT_EQ(dst[GUARD + dst_off + size + i], 0x5a);
    }
    free(src);
    free(dst);
}

static void sizes_test(ucs_copy_backend_t backend)
{
    static const size_t sizes[] = {0, 1, 63, 4095, 4096, 4097, 65536 + 7,
                                   1024 * 1024 + 3, 16 * 1024 * 1024};
    ucs_copy_engine_t *engine = engine_create(backend);
    unsigned i;

    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        copy_and_check(engine, sizes[i], 0, 0, i);
        copy_and_check(engine, sizes[i], 1, 3, 100 + i);
        copy_and_check(engine, sizes[i], 7, 0, 200 + i);
    }
    ucs_copy_engine_destroy(engine);
}

TH_TEST(copy_engine, sizes_memcpy)
{
    sizes_test(UCS_COPY_BACKEND_MEMCPY);
}

TH_TEST(copy_engine, sizes_thread)
{
    sizes_test(UCS_COPY_BACKEND_THREAD);
}

TH_TEST(copy_engine, sizes_thread_split)
{
    /* several helpers share each large copy in 64 KiB pieces */
    setenv("UCX_COPY_ENGINE_THREADS", "3", 1);
    setenv("UCX_COPY_ENGINE_CHUNK", "64k", 1);
    sizes_test(UCS_COPY_BACKEND_THREAD);
}

static void batch_test(ucs_copy_backend_t backend)
{
    enum { N = 16 };
    ucs_copy_engine_t *engine = engine_create(backend);
    ucs_copy_iov_t iov[N];
    uint8_t *src[N], *dst[N];
    ucs_copy_req_t req;
    ucs_status_t status;
    size_t len[N];
    int i;

    for (i = 0; i < N; ++i) {
        len[i] = (i == 3) ? 0 : (size_t)(i * i * 7919 + 1);
        src[i] = malloc(len[i] + 1);
        dst[i] = calloc(1, len[i] + 1);
        th_fill_pattern(src[i], len[i], 50 + i);
        iov[i].src    = src[i];
        iov[i].dst    = dst[i];
        iov[i].length = len[i];
    }

    status = ucs_copy_engine_post_iov(engine, iov, N, &req);
    TH_ASSERT((status == UCS_OK) || (status == UCS_INPROGRESS));
    TH_ASSERT_EQ(ucs_copy_engine_wait(engine, &req), UCS_OK);
    for (i = 0; i < N; ++i) {
        TH_CHECK_PATTERN(dst[i], len[i], 50 + i);
        free(src[i]);
        free(dst[i]);
    }
    ucs_copy_engine_destroy(engine);
}

TH_TEST(copy_engine, batch_memcpy)
{
    batch_test(UCS_COPY_BACKEND_MEMCPY);
}

TH_TEST(copy_engine, batch_thread)
{
    setenv("UCX_COPY_ENGINE_THREADS", "2", 1);
    setenv("UCX_COPY_ENGINE_CHUNK", "4k", 1);
    batch_test(UCS_COPY_BACKEND_THREAD);
}

/* A full queue refuses posts with UCS_ERR_NO_RESOURCE and loses nothing */
TH_TEST(copy_engine, queue_full)
{
    enum { N = 64, SIZE = 1024 * 1024 };
    ucs_copy_req_t req[N];
    ucs_copy_engine_t *engine;
    int i, refused = 0, posted = 0;
    uint8_t *src, *dst;
    ucs_status_t status;

    setenv("UCX_COPY_ENGINE_QUEUE_LEN", "4", 1);
    engine = engine_create(UCS_COPY_BACKEND_THREAD);
    src    = malloc(SIZE);
    dst    = malloc((size_t)N * SIZE);
    TH_ASSERT((src != NULL) && (dst != NULL));
    th_fill_pattern(src, SIZE, 9);

    for (i = 0; i < N; ++i) {
        while ((status = ucs_copy_engine_post(engine, dst + (size_t)i * SIZE,
                                              src, SIZE, &req[i])) ==
               UCS_ERR_NO_RESOURCE) {
            ++refused;
            /* a refused post leaves its request untouched by the engine */
            TH_ASSERT_EQ(ucs_copy_req_test(&req[i]), UCS_ERR_NO_RESOURCE);
            sched_yield();
        }
        TH_ASSERT((status == UCS_OK) || (status == UCS_INPROGRESS));
        ++posted;
    }
    for (i = 0; i < N; ++i) {
        TH_ASSERT_EQ(ucs_copy_engine_wait(engine, &req[i]), UCS_OK);
        TH_CHECK_PATTERN(dst + (size_t)i * SIZE, SIZE, 9);
    }
    TH_ASSERT_EQ(posted, N);
    /* 64 posts of 1 MiB into a queue of 4: the limit must have been hit */
    TH_ASSERT_GT(refused, 0);
    ucs_copy_engine_destroy(engine);
    free(src);
    free(dst);
}

/* A source buffer whose pages the kernel leaves missing (userfaultfd): a
 * helper that copies from it blocks in the page fault until the test's
 * resolver thread fills the pages, which it does only once the request
 * named in 'release_after' has a final status. */
typedef struct {
    int uffd;
    uint8_t *region; /* registered, missing until resolved */
    uint8_t *contents; /* what it then holds */
    size_t size;
    ucs_copy_req_t *release_after;
    volatile int faulted; /* a helper is blocked in the region */
    int timed_out; /* release_after did not end in 10 s */
    pthread_t thread;
} engine_stall_t;

static void *engine_stall_resolver(void *arg)
{
    engine_stall_t *st = arg;
    struct uffdio_copy copy;
    struct uffd_msg msg;
    double deadline;

    if ((read(st->uffd, &msg, sizeof(msg)) != sizeof(msg)) ||
        (msg.event != UFFD_EVENT_PAGEFAULT)) {
        return (void *)1;
    }
    st->faulted = 1;
    /* not forever: a request that never ends must fail the test, not hang
     * it in the helper's join */
    deadline = th_time() + 10.0;
    while (ucs_copy_req_test(st->release_after) == UCS_INPROGRESS) {
        if (th_time() > deadline) {
            st->timed_out = 1;
            break;
        }
        sched_yield();
    }
    copy.dst  = (uintptr_t)st->region;
    copy.src  = (uintptr_t)st->contents;
    copy.len  = st->size;
    copy.mode = 0;
    return (ioctl(st->uffd, UFFDIO_COPY, &copy) == 0) ? NULL : (void *)1;
}

static void engine_stall_init(engine_stall_t *st, size_t size,
                              ucs_copy_req_t *release_after)
{
    struct uffdio_register reg = {0};
    struct uffdio_api api      = {.api = UFFD_API};

    st->uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
    if ((st->uffd < 0) || (ioctl(st->uffd, UFFDIO_API, &api) != 0)) {
        TH_SKIP("userfaultfd is not available (%m): cannot hold a helper "
                "in the middle of a copy");
    }
    st->size          = size;
    st->release_after = release_after;
    st->faulted       = 0;
    st->timed_out     = 0;
    st->contents      = aligned_alloc(4096, size);
    st->region        = mmap(NULL, size, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TH_ASSERT((st->contents != NULL) && (st->region != MAP_FAILED));
    reg.range.start = (uintptr_t)st->region;
    reg.range.len   = size;
    reg.mode        = UFFDIO_REGISTER_MODE_MISSING;
    TH_ASSERT_EQ(ioctl(st->uffd, UFFDIO_REGISTER, &reg), 0);
    TH_ASSERT_EQ(pthread_create(&st->thread, NULL, engine_stall_resolver, st),
                 0);
}

static void engine_stall_cleanup(engine_stall_t *st)
{
    void *ret;

    TH_ASSERT_EQ(pthread_join(st->thread, &ret), 0);
    TH_ASSERT(ret == NULL);
    close(st->uffd);
    munmap(st->region, st->size);
    free(st->contents);
}

/* Destroy with one copy running and others queued: the running one
 * finishes and holds the data, the queued ones end UCS_ERR_CANCELED with
 * their destinations untouched. The helper is held in the middle of copy 1
 * (its source faults until the test resolves it) until destroy has
 * canceled the rest, so the outcome does not depend on timing. */
TH_TEST(copy_engine, destroy_in_flight)
{
    enum {
        N    = 16,
        SIZE = 1024 * 1024
    };
    ucs_copy_req_t req[N];
    ucs_copy_engine_t *engine;
    engine_stall_t stall;
    int i, ok = 0, canceled = 0;
    uint8_t *src, *dst;
    ucs_status_t status;
    double deadline;

    setenv("UCX_COPY_ENGINE_QUEUE_LEN", "64", 1);
    setenv("UCX_COPY_ENGINE_THREADS", "1", 1);
    engine = engine_create(UCS_COPY_BACKEND_THREAD);
    src    = malloc(SIZE);
    dst    = calloc(N, SIZE);
    TH_ASSERT((src != NULL) && (dst != NULL));
    th_fill_pattern(src, SIZE, 3);
    engine_stall_init(&stall, SIZE, &req[N - 1]);
    th_fill_pattern(stall.contents, SIZE, 4);

    /* copy 0 completes first */
    TH_ASSERT_EQ(ucs_copy_engine_post(engine, dst, src, SIZE, &req[0]),
                 UCS_INPROGRESS);
    TH_ASSERT_EQ(ucs_copy_engine_wait(engine, &req[0]), UCS_OK);
    /* copy 1 holds the helper; copies 2.. wait in the queue */
    for (i = 1; i < N; ++i) {
        status = ucs_copy_engine_post(engine, dst + (size_t)i * SIZE,
                                      (i == 1) ? stall.region : src, SIZE,
                                      &req[i]);
        TH_ASSERT_EQ(status, UCS_INPROGRESS);
    }
    deadline = th_time() + 30.0;
    while (!stall.faulted) {
        TH_ASSERT(th_time() < deadline);
        sched_yield();
    }
    ucs_copy_engine_destroy(engine);
    engine_stall_cleanup(&stall);
    if (stall.timed_out) {
        TH_FAIL("destroy did not end the queued copies in 10 s");
    }

    for (i = 0; i < N; ++i) {
        status = ucs_copy_req_test(&req[i]);
        if (status == UCS_OK) {
            TH_CHECK_PATTERN(dst + (size_t)i * SIZE, SIZE, (i == 1) ? 4 : 3);
            ++ok;
        } else {
            TH_ASSERT_EQ(status, UCS_ERR_CANCELED);
            TH_ASSERT_EQ(dst[(size_t)i * SIZE], 0);
            TH_ASSERT_EQ(dst[(size_t)(i + 1) * SIZE - 1], 0);
            ++canceled;
        }
    }
    th_log("destroy with a copy running and %d queued: %d done, %d "
           "canceled",
           N - 2, ok, canceled);
    TH_ASSERT_EQ(ucs_copy_req_test(&req[0]), UCS_OK);
    TH_ASSERT_EQ(ucs_copy_req_test(&req[1]), UCS_OK);
    TH_ASSERT_EQ(ok, 2);
    TH_ASSERT_EQ(canceled, N - 2);
    free(src);
    free(dst);
}

TH_TEST(copy_engine, invalid_param)
{
    ucs_copy_engine_t *engine = engine_create(UCS_COPY_BACKEND_THREAD);
    ucs_copy_iov_t iov[2];
    char buf[16384];
    ucs_copy_req_t req;

    TH_ASSERT_EQ(ucs_copy_engine_post(engine, NULL, buf, 10, &req),
                 UCS_ERR_INVALID_PARAM);
    TH_ASSERT_EQ(ucs_copy_engine_post(engine, buf, NULL, 10000, &req),
                 UCS_ERR_INVALID_PARAM);
    /* a NULL buffer of length 0 is a valid empty copy */
    TH_ASSERT_EQ(ucs_copy_engine_post(engine, NULL, NULL, 0, &req), UCS_OK);

    iov[0].dst = buf;
    iov[0].src = buf + 8192;
    iov[0].length = 8192;
    iov[1].dst = NULL;
    iov[1].src = buf;
    iov[1].length = 1;
    TH_ASSERT_EQ(ucs_copy_engine_post_iov(engine, iov, 2, &req),
                 UCS_ERR_INVALID_PARAM);
    ucs_copy_engine_destroy(engine);
}

TH_TEST(copy_engine, config_selects_backend)
{
    ucs_copy_engine_attr_t attr;
    ucs_copy_engine_t *engine;

    setenv("UCX_COPY_ENGINE", "memcpy", 1);
    TH_ASSERT_EQ(ucs_copy_engine_create(NULL, &engine), UCS_OK);
    ucs_copy_engine_query(engine, &attr);
    TH_ASSERT_EQ(attr.backend, UCS_COPY_BACKEND_MEMCPY);
    TH_ASSERT_EQ(attr.num_threads, 0);
    ucs_copy_engine_destroy(engine);

    setenv("UCX_COPY_ENGINE", "thread", 1);
    setenv("UCX_COPY_ENGINE_THREADS", "2", 1);
    setenv("UCX_COPY_ENGINE_INLINE_THRESH", "1k", 1);
    TH_ASSERT_EQ(ucs_copy_engine_create(NULL, &engine), UCS_OK);
    ucs_copy_engine_query(engine, &attr);
    TH_ASSERT_EQ(attr.backend, UCS_COPY_BACKEND_THREAD);
    TH_ASSERT_EQ(attr.num_threads, 2);
    TH_ASSERT_EQ(attr.inline_thresh, 1024);
    TH_ASSERT_STR_EQ(ucs_copy_backend_name(attr.backend), "thread");
    ucs_copy_engine_destroy(engine);

    /* a bad value is an error, not a silent default */
    setenv("UCX_COPY_ENGINE", "warp-drive", 1);
    TH_ASSERT_NE(ucs_copy_engine_create(NULL, &engine), UCS_OK);
}

/* Cpus_allowed_list of this process' single helper thread, as in
 * /proc (e.g. "1"); fails the test when there is no helper or several */
static void engine_helper_cpus(char *cpus, size_t max)
{
    char path[300], line[256];
    struct dirent *ent;
    int found = 0;
    DIR *dir;
    FILE *f;

    dir = opendir("/proc/self/task");
    TH_ASSERT(dir != NULL);
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", ent->d_name);
        f = fopen(path, "r");
        if ((f == NULL) || (fgets(line, sizeof(line), f) == NULL) ||
            strncmp(line, "ucs_copy", 8)) {
            if (f != NULL) {
                fclose(f);
            }
            continue;
        }
        fclose(f);
        snprintf(path, sizeof(path), "/proc/self/task/%s/status",
                 ent->d_name);
        f = fopen(path, "r");
        TH_ASSERT(f != NULL);
        while (fgets(line, sizeof(line), f) != NULL) {
            if (!strncmp(line, "Cpus_allowed_list:", 18)) {
                snprintf(cpus, max, "%.*s",
                         (int)strcspn(line + 19, "\n"), line + 19);
                th_log("helper %s: cores %s", ent->d_name, cpus);
                ++found;
            }
        }
        fclose(f);
    }
    closedir(dir);
    TH_ASSERT_EQ(found, 1);
}

/* pin the calling thread to one core */
static void engine_pin_self(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    TH_ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
    TH_ASSERT_EQ(sched_getcpu(), cpu);
}

/* With more than one core, helpers avoid the creating thread's core, and
 * move off a core the caller migrates to */
TH_TEST(copy_engine, helper_placement)
{
    static uint8_t src[65536], dst[65536];
    ucs_copy_engine_t *engine;
    ucs_copy_req_t req;
    char cpus[64];
    cpu_set_t both;

    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        TH_SKIP("one core: helpers cannot avoid the caller's core");
    }

    /* move to core 0, then allow cores 0 and 1: the engine sees the
     * caller on core 0 with core 1 free for its helper */
    engine_pin_self(0);
    CPU_ZERO(&both);
    CPU_SET(0, &both);
    CPU_SET(1, &both);
    TH_ASSERT_EQ(sched_setaffinity(0, sizeof(both), &both), 0);

    engine = engine_create(UCS_COPY_BACKEND_THREAD);
    engine_helper_cpus(cpus, sizeof(cpus));
    TH_ASSERT_STR_EQ(cpus, "1");

    /* the caller moves onto the helper's core: its next post moves the
     * helper to the core the caller left */
    engine_pin_self(1);
    memset(src, 0x42, sizeof(src));
    TH_ASSERT_NE(ucs_copy_engine_post(engine, dst, src, sizeof(src), &req),
                 UCS_ERR_NO_RESOURCE);
    TH_ASSERT_EQ(ucs_copy_engine_wait(engine, &req), UCS_OK);
    TH_ASSERT_EQ(memcmp(dst, src, sizeof(src)), 0);
    engine_helper_cpus(cpus, sizeof(cpus));
    TH_ASSERT_STR_EQ(cpus, "0");

    ucs_copy_engine_destroy(engine);
    TH_ASSERT_EQ(sched_setaffinity(0, sizeof(both), &both), 0);
}

/* Posts 64 KiB copies @a count times, @a gap_us apart (the helper idles
 * in between); returns how many of them had to wake a sleeping helper, and
 * in @a busy_p how many idle periods the helper found the host busy */
static uint64_t engine_paced_wakeups(ucs_copy_engine_t *engine,
                                     unsigned count, unsigned gap_us,
                                     uint64_t *busy_p)
{
    static uint8_t src[65536], dst[65536];
    ucs_copy_engine_attr_t attr;
    uint64_t before, busy_before;
    ucs_copy_req_t req;
    unsigned i;

    ucs_copy_engine_query(engine, &attr);
    before      = attr.num_wakeups;
    busy_before = attr.num_busy_idles;
    for (i = 0; i < count; ++i) {
        memset(src, i, sizeof(src));
        TH_ASSERT_EQ(ucs_copy_engine_post(engine, dst, src, sizeof(src),
                                          &req), UCS_INPROGRESS);
        TH_ASSERT_EQ(ucs_copy_engine_wait(engine, &req), UCS_OK);
        TH_ASSERT_EQ(memcmp(dst, src, sizeof(src)), 0);
        usleep(gap_us);
    }
    ucs_copy_engine_query(engine, &attr);
    if (busy_p != NULL) {
        *busy_p = attr.num_busy_idles - busy_before;
    }
    return attr.num_wakeups - before;
}

/* The engine reads the host's load from /proc/loadavg (its fourth field:
 * runnable threads). Give this test process a view of its own, in a mount
 * namespace of its own, where the host is idle: what the window does then
 * must not depend on what else runs on the host (other tests, other jobs,
 * a loaded CI runner); spin_window_stays_on_busy_host checks the real file
 * with a real load. Needs root (a mount namespace). */
static void engine_idle_host_view(void)
{
    static const char idle[] = "0.00 0.00 0.00 1/100 1\n";
    char path[]              = "/tmp/th-loadavg-XXXXXX";
    int fd;

    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    TH_ASSERT_EQ(write(fd, idle, sizeof(idle) - 1), sizeof(idle) - 1);
    close(fd);
    if ((unshare(CLONE_NEWNS) != 0) ||
        (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) ||
        (mount(path, "/proc/loadavg", NULL, MS_BIND, NULL) != 0)) {
        unlink(path);
        TH_SKIP("cannot give the test a /proc/loadavg of its own (%m): "
                "needs root");
    }
    unlink(path); /* the mount keeps it */
}

/* The helper's polling window grows when copies come at a steady pace
 * (fewer wake-ups than with a fixed window), and shrinks again after long
 * idle times, on a host that the engine sees idle */
TH_TEST(copy_engine, spin_window_adapts)
{
    uint64_t fixed, adaptive, after_idle, busy;
    ucs_copy_engine_t *engine;

    engine_idle_host_view();
    setenv("UCX_COPY_ENGINE_SPIN_TIME", "10us", 1);
    setenv("UCX_COPY_ENGINE_SPIN_MAX", "10us", 1);
    engine = engine_create(UCS_COPY_BACKEND_THREAD);
    fixed  = engine_paced_wakeups(engine, 40, 400, NULL);
    ucs_copy_engine_destroy(engine);
    th_log("400 us apart: %" PRIu64 " of 40 posts woke the helper with a "
           "fixed 10 us window", fixed);
    TH_ASSERT(fixed >= 30);

    /* a maximum well above the time a loaded host takes to wake the
     * helper, so that the window grows whatever else runs */
    setenv("UCX_COPY_ENGINE_SPIN_MAX", "20ms", 1);
    engine   = engine_create(UCS_COPY_BACKEND_THREAD);
    adaptive = engine_paced_wakeups(engine, 40, 400, &busy);
    th_log("400 us apart: %" PRIu64 " of 40 posts woke the helper with an "
           "adaptive window; it found the host busy %" PRIu64 " times",
           adaptive, busy);
    TH_ASSERT_EQ(busy, 0);
    TH_ASSERT(adaptive <= 20);

    /* eight idle times longer than SPIN_MAX halve the window eight
     * times, below the 400 us gap again (20 ms / 256) */
    TH_ASSERT(engine_paced_wakeups(engine, 8, 100000, NULL) >= 7);
    /* the first post finds the helper asleep after the last long idle
     * time whatever its window; the next ones only if the window shrank */
    after_idle = engine_paced_wakeups(engine, 5, 400, NULL);
    th_log("after long idle times: %" PRIu64 " of 5 posts woke the helper",
           after_idle);
    TH_ASSERT(after_idle >= 3);
    ucs_copy_engine_destroy(engine);
}

static volatile int engine_spinners_stop;

static void *engine_spinner(void *arg)
{
    while (!engine_spinners_stop) {
    }
    return NULL;
}

/* With more runnable threads than cores, the helper does not extend its
 * polling: it would take a core from the callers */
TH_TEST(copy_engine, spin_window_stays_on_busy_host)
{
    long i, ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t *spinners = calloc(ncpus, sizeof(*spinners));
    uint64_t busy, busy_idles;
    ucs_copy_engine_t *engine;

    setenv("UCX_COPY_ENGINE_SPIN_TIME", "10us", 1);
    /* a maximum no wake-up on a loaded host reaches: the window would grow
     * here but for the load (each sleep shorter than SPIN_MAX doubles it),
     * so the load, read from the real /proc/loadavg, must keep it short */
    setenv("UCX_COPY_ENGINE_SPIN_MAX", "1s", 1);
    engine = engine_create(UCS_COPY_BACKEND_THREAD);

    /* one busy thread per core, besides the caller and the helper */
    TH_ASSERT(spinners != NULL);
    for (i = 0; i < ncpus; ++i) {
        TH_ASSERT_EQ(pthread_create(&spinners[i], NULL, engine_spinner, NULL),
                     0);
    }
    busy = engine_paced_wakeups(engine, 40, 400, &busy_idles);
    engine_spinners_stop = 1;
    for (i = 0; i < ncpus; ++i) {
        pthread_join(spinners[i], NULL);
    }
    free(spinners);

    th_log("400 us apart on a busy host: %" PRIu64 " of 40 posts woke the "
           "helper, which found the host busy %" PRIu64 " times", busy,
           busy_idles);
    TH_ASSERT(busy >= 30);
    TH_ASSERT(busy_idles > 0);
    ucs_copy_engine_destroy(engine);
}
