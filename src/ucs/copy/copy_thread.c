/**
 * Copyright (C) ucx-hcr contributors. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#  define _GNU_SOURCE
#endif

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "copy_engine_int.h"

#include <ucs/arch/cpu.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/time/time.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/*
 * The helper-thread backend.
 *
 * Posted copies are cut into pieces (one per copy with a single helper; pieces
 * of UCX_COPY_ENGINE_CHUNK with several, so that they share a large copy) and put
 * in a ring. Helpers take pieces in order, copy, and account for them in the
 * request; the last piece publishes the request's status.
 *
 * Locking: 'lock' guards the ring contents, head, tail, sleepers,
 * spin_window, busy_checks, num_wakeups, num_busy_idles and shutdown. An
 * idle helper first polls head/tail without the lock (they are only advanced
 * under it, so a stale read merely delays it) for the polling window, then
 * sleeps on 'cond'; a producer signals only when a helper sleeps, so the
 * fast path of a busy engine takes the lock once per post and makes no
 * system call.
 *
 * The polling window adapts like KVM's halt polling: waking a sleeping thread
 * costs tens of microseconds on a virtual machine, which a copy posted every
 * 100 us or so would pay each time. A helper woken soon after it went to
 * sleep (less than UCX_COPY_ENGINE_SPIN_MAX) doubles the window, up to that
 * maximum; one that slept longer halves it, down to UCX_COPY_ENGINE_SPIN_TIME.
 * While the host has more runnable threads than cores, a helper polls for
 * UCX_COPY_ENGINE_SPIN_TIME only and the window halves: polling would take a
 * core from the callers, and the scheduler runs a polling helper only in its
 * turn, whereas a woken one preempts.
 */

typedef struct ucs_copy_piece {
    void           *dst;
    const void     *src;
    size_t         length;
    ucs_copy_req_t *req;
} ucs_copy_piece_t;

typedef struct ucs_copy_thread_engine {
    ucs_copy_engine_t super;
    pthread_mutex_t   lock;
    pthread_cond_t    cond;
    ucs_copy_piece_t  *ring;
    uint64_t          ring_mask;
    volatile uint64_t head;       /* next piece a helper takes */
    volatile uint64_t tail;       /* next free slot */
    unsigned          sleepers;
    volatile int      shutdown;
    size_t            chunk_size;
    ucs_time_t        spin_time;   /* shortest polling window */
    ucs_time_t        spin_max;    /* longest polling window */
    ucs_time_t        spin_window; /* current polling window */
    uint64_t          num_wakeups; /* posts that woke a sleeping helper */
    uint64_t          num_busy_idles; /* idle periods polled short: busy */
    int               loadavg_fd;  /* /proc/loadavg: runnable threads */
    unsigned          busy_checks; /* host busy at so many checks in a row */
    unsigned          num_cpus;    /* online cores */
    unsigned          num_started;
    pthread_t         *threads;
    /* placement (UCX_COPY_ENGINE_CPUS=auto): keep helpers off the caller's core
     * even when the caller migrates */
    int               follow;
    int               caller_cpu;  /* where the caller posted last */
    int               *helper_cpu; /* core each helper is pinned to */
    cpu_set_t         allowed;     /* cores the helpers may move to */
} ucs_copy_thread_engine_t;


static int ucs_copy_thread_has_work(ucs_copy_thread_engine_t *engine)
{
    return (engine->head != engine->tail) || engine->shutdown;
}

/*
 * Whether the host has more runnable threads than cores (the fourth field
 * of /proc/loadavg counts them, the helper included). Polling then takes a
 * core from a caller, and the scheduler lets a polling helper run only in
 * its turn, whereas a sleeping one preempts when it is woken. A few us,
 * paid only before a polling window longer than UCX_COPY_ENGINE_SPIN_TIME, that
 * is once per idle period of a lightly used engine; it runs under the lock,
 * so a post that comes meanwhile waits that long at most.
 */
static int ucs_copy_thread_host_busy(ucs_copy_thread_engine_t *engine)
{
    unsigned running;
    char buf[128];
    ssize_t len;

    len = pread(engine->loadavg_fd, buf, sizeof(buf) - 1, 0);
    if (len <= 0) {
        return 1;
    }

    buf[len] = '\0';
    return (sscanf(buf, "%*s %*s %*s %u/", &running) != 1) ||
           (running > engine->num_cpus);
}

/* Lock held: a helper slept for @a slept after polling; adapt the window */
static void ucs_copy_thread_adapt_spin(ucs_copy_thread_engine_t *engine,
                                       ucs_time_t slept)
{
    if (slept < engine->spin_max) {
        /* from a zero SPIN_TIME too */
        engine->spin_window = ucs_min(ucs_max(engine->spin_window * 2,
                                              ucs_time_from_usec(1)),
                                      engine->spin_max);
    } else {
        engine->spin_window = ucs_max(engine->spin_window / 2,
                                      engine->spin_time);
    }
}

/* Wait, lock held, until there is a piece or shutdown */
static void ucs_copy_thread_idle(ucs_copy_thread_engine_t *engine)
{
    ucs_time_t deadline, sleep_start, window;
    int busy;

    if (ucs_copy_thread_has_work(engine)) {
        return;
    }

    /* on a host busy at two checks in a row (one may catch a passing
     * thread): poll for the base window only, and halve the adaptive one, so
     * that a lasting load brings it down to the base */
    window = engine->spin_window;
    if ((window > engine->spin_time) && ucs_copy_thread_host_busy(engine)) {
        ++engine->busy_checks;
    } else {
        engine->busy_checks = 0;
    }
    busy = engine->busy_checks >= 2;
    if (busy) {
        ++engine->num_busy_idles;
        window              = engine->spin_time;
        engine->spin_window = ucs_max(engine->spin_window / 2,
                                      engine->spin_time);
    }

    deadline = ucs_get_time() + window;
    pthread_mutex_unlock(&engine->lock);
    while (!ucs_copy_thread_has_work(engine) && (ucs_get_time() < deadline)) {
        ucs_copy_spin_pause();
    }
    pthread_mutex_lock(&engine->lock);

    if (ucs_copy_thread_has_work(engine)) {
        return;
    }

    sleep_start = ucs_get_time();
    do {
        ++engine->sleepers;
        pthread_cond_wait(&engine->cond, &engine->lock);
        --engine->sleepers;
    } while (!ucs_copy_thread_has_work(engine));
    if (!busy && (engine->spin_max > engine->spin_time)) {
        ucs_copy_thread_adapt_spin(engine, ucs_get_time() - sleep_start);
    }
}

static void *ucs_copy_thread_main(void *arg)
{
    ucs_copy_thread_engine_t *engine = arg;
    ucs_copy_piece_t piece;

    pthread_mutex_lock(&engine->lock);
    for (;;) {
        ucs_copy_thread_idle(engine);
        if (engine->head == engine->tail) {
            break; /* shutdown and nothing left */
        }

        piece = engine->ring[engine->head & engine->ring_mask];
        ++engine->head;
        pthread_mutex_unlock(&engine->lock);

        memcpy(piece.dst, piece.src, piece.length);
        ucs_copy_req_pieces_done(piece.req, 1, UCS_OK);

        pthread_mutex_lock(&engine->lock);
    }
    pthread_mutex_unlock(&engine->lock);
    return NULL;
}

/* Cores the helpers may use: configured, or the affinity mask less the
 * creating thread's core when that leaves any */
static unsigned ucs_copy_thread_cpus(const char *spec, int *cpus,
                                     unsigned max_cpus)
{
    unsigned count = 0;
    cpu_set_t mask;
    int cpu, self;
    char *copy, *tok, *save;

    if (strcmp(spec, "auto") != 0) {
        copy = ucs_strdup(spec, "copy_cpus");
        for (tok = (copy != NULL) ? strtok_r(copy, ",", &save) : NULL;
             (tok != NULL) && (count < max_cpus);
             tok = strtok_r(NULL, ",", &save)) {
            cpus[count++] = atoi(tok);
        }
        ucs_free(copy);
        return count;
    }

    if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
        return 0;
    }

    self = sched_getcpu();
    for (cpu = 0; (cpu < CPU_SETSIZE) && (count < max_cpus); ++cpu) {
        if (CPU_ISSET(cpu, &mask) && (cpu != self)) {
            cpus[count++] = cpu;
        }
    }
    return count;
}

static void ucs_copy_thread_pin(pthread_attr_t *attr, pthread_t thread,
                                int cpu)
{
    cpu_set_t cpu_set;

    CPU_ZERO(&cpu_set);
    CPU_SET(cpu, &cpu_set);
    if (attr != NULL) {
        pthread_attr_setaffinity_np(attr, sizeof(cpu_set), &cpu_set);
    } else {
        pthread_setaffinity_np(thread, sizeof(cpu_set), &cpu_set);
    }
}

/*
 * Lock held. The caller moved to another core: a helper pinned there would
 * share the core with it (and its cache, which the copy then evicts), so it
 * moves to the core the caller left, or another one. One sched_getcpu() per
 * post; a system call only when the caller has moved onto a helper's core.
 */
static void ucs_copy_thread_follow_caller(ucs_copy_thread_engine_t *engine)
{
    int cpu = sched_getcpu(), old = engine->caller_cpu, target;
    unsigned i;

    if ((cpu == old) || (cpu < 0)) {
        return;
    }

    engine->caller_cpu = cpu;
    for (i = 0; i < engine->num_started; ++i) {
        if (engine->helper_cpu[i] != cpu) {
            continue;
        }

        target = old;
        if ((target < 0) || !CPU_ISSET(target, &engine->allowed)) {
            for (target = 0; (target < CPU_SETSIZE) &&
                             (!CPU_ISSET(target, &engine->allowed) ||
                              (target == cpu)); ++target) {
            }
        }
        if (target >= CPU_SETSIZE) {
            return;
        }

        ucs_copy_thread_pin(NULL, engine->threads[i], target);
        engine->helper_cpu[i] = target;
        ucs_trace("copy engine '%s': caller moved to core %d, helper %u to "
                  "core %d", engine->super.name, cpu, i, target);
    }
}

static ucs_status_t ucs_copy_thread_start(ucs_copy_thread_engine_t *engine,
                                          unsigned num_threads,
                                          const char *cpu_spec)
{
    int cpus[CPU_SETSIZE];
    pthread_attr_t attr;
    unsigned num_cpus, i;
    int ret;

    num_cpus = ucs_copy_thread_cpus(cpu_spec, cpus, CPU_SETSIZE);
    if (num_cpus == 0) {
        ucs_debug("copy engine '%s': no core other than the caller's, "
                  "helpers are not pinned", engine->super.name);
    }

    engine->caller_cpu = sched_getcpu();
    engine->follow     = (num_cpus > 0) && !strcmp(cpu_spec, "auto") &&
                         (sched_getaffinity(0, sizeof(engine->allowed),
                                            &engine->allowed) == 0);
    for (i = 0; i < num_threads; ++i) {
        pthread_attr_init(&attr);
        engine->helper_cpu[i] = -1;
        if (num_cpus > 0) {
            engine->helper_cpu[i] = cpus[i % num_cpus];
            ucs_copy_thread_pin(&attr, 0, engine->helper_cpu[i]);
            ucs_debug("copy engine '%s': helper %u on core %d",
                      engine->super.name, i, engine->helper_cpu[i]);
        }
        ret = pthread_create(&engine->threads[i], &attr,
                             ucs_copy_thread_main, engine);
        pthread_attr_destroy(&attr);
        if (ret != 0) {
            ucs_error("copy engine '%s': failed to start helper thread: %s",
                      engine->super.name, strerror(ret));
            return UCS_ERR_IO_ERROR;
        }
        /* named here, not by the helper itself, so that the name is set
         * when the engine is returned (tools and tests look for it) */
        pthread_setname_np(engine->threads[i], "ucs_copy");
        ++engine->num_started;
    }

    return UCS_OK;
}

static void ucs_copy_thread_destroy(ucs_copy_engine_t *super)
{
    ucs_copy_thread_engine_t *engine = ucs_derived_of(super,
                                                      ucs_copy_thread_engine_t);
    ucs_copy_piece_t *piece;
    unsigned i;

    pthread_mutex_lock(&engine->lock);
    engine->shutdown = 1;
    /* pieces nobody took: their requests complete with UCS_ERR_CANCELED */
    while (engine->head != engine->tail) {
        piece = &engine->ring[engine->head & engine->ring_mask];
        ++engine->head;
        ucs_copy_req_pieces_done(piece->req, 1, UCS_ERR_CANCELED);
    }
    pthread_cond_broadcast(&engine->cond);
    pthread_mutex_unlock(&engine->lock);

    /* pieces being copied finish before their helper exits */
    for (i = 0; i < engine->num_started; ++i) {
        pthread_join(engine->threads[i], NULL);
    }

    pthread_cond_destroy(&engine->cond);
    pthread_mutex_destroy(&engine->lock);
    if (engine->loadavg_fd >= 0) {
        close(engine->loadavg_fd);
    }
    ucs_free(engine->helper_cpu);
    ucs_free(engine->threads);
    ucs_free(engine->ring);
    ucs_free(engine);
}

static ucs_status_t
ucs_copy_thread_create(const ucs_copy_engine_config_t *config,
                       const ucs_copy_engine_params_t *params,
                       ucs_copy_engine_t **engine_p)
{
    unsigned num_threads = ucs_max(config->num_threads, 1);
    size_t ring_size     = ucs_roundup_pow2(ucs_max(config->queue_len, 2));
    ucs_copy_thread_engine_t *engine;
    ucs_status_t status;

    engine = ucs_calloc(1, sizeof(*engine), "copy_engine_thread");
    if (engine == NULL) {
        ucs_error("failed to allocate a thread copy engine");
        return UCS_ERR_NO_MEMORY;
    }

    ucs_copy_engine_base_init(&engine->super, &ucs_copy_thread_ops,
                              UCS_COPY_BACKEND_THREAD, config, params);
    engine->super.num_threads  = num_threads;
    engine->super.max_inflight = ring_size;
    engine->ring_mask          = ring_size - 1;
    engine->chunk_size         = ucs_max(config->chunk_size, 4096);
    engine->spin_time          = ucs_time_from_sec(config->spin_time);
    engine->spin_max           = ucs_max(ucs_time_from_sec(config->spin_max),
                                         engine->spin_time);
    engine->spin_window        = engine->spin_time;
    engine->ring    = ucs_calloc(ring_size, sizeof(*engine->ring),
                                 "copy_engine_ring");
    engine->threads = ucs_calloc(num_threads, sizeof(*engine->threads),
                                 "copy_engine_threads");
    engine->helper_cpu = ucs_calloc(num_threads, sizeof(*engine->helper_cpu),
                                    "copy_engine_helper_cpu");
    if ((engine->ring == NULL) || (engine->threads == NULL) ||
        (engine->helper_cpu == NULL)) {
        ucs_error("failed to allocate a copy engine ring of %zu", ring_size);
        ucs_free(engine->ring);
        ucs_free(engine->threads);
        ucs_free(engine->helper_cpu);
        ucs_free(engine);
        return UCS_ERR_NO_MEMORY;
    }

    engine->num_cpus   = ucs_max(sysconf(_SC_NPROCESSORS_ONLN), 1);
    engine->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (engine->loadavg_fd < 0) {
        ucs_debug("copy engine '%s': cannot open /proc/loadavg (%m), the "
                  "helpers poll for UCX_COPY_ENGINE_SPIN_TIME only",
                  engine->super.name);
        engine->spin_max = engine->spin_time;
    }

    pthread_mutex_init(&engine->lock, NULL);
    pthread_cond_init(&engine->cond, NULL);

    status = ucs_copy_thread_start(engine, num_threads, config->cpus);
    if (status != UCS_OK) {
        ucs_copy_thread_destroy(&engine->super);
        return status;
    }

    *engine_p = &engine->super;
    return UCS_OK;
}

static size_t ucs_copy_thread_num_pieces(size_t length, size_t piece_size)
{
    if (length == 0) {
        return 0;
    }

    /* not ucs_div_round_up: piece_size may be SIZE_MAX */
    return (length <= piece_size) ? 1 : ucs_div_round_up(length, piece_size);
}

static ucs_status_t
ucs_copy_thread_post(ucs_copy_engine_t *super, const ucs_copy_iov_t *iov,
                     size_t iovcnt, size_t total, ucs_copy_req_t *req)
{
    ucs_copy_thread_engine_t *engine = ucs_derived_of(super,
                                                      ucs_copy_thread_engine_t);
    size_t ring_size  = engine->ring_mask + 1;
    size_t piece_size = (engine->super.num_threads > 1) ?
                        engine->chunk_size : SIZE_MAX;
    size_t i, pieces, offset, length;
    ucs_copy_piece_t *piece;

    if (iovcnt > ring_size) {
        ucs_debug("copy engine '%s': batch of %zu exceeds the queue (%zu)",
                  engine->super.name, iovcnt, ring_size);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    /* split for the helpers to share, unless that would not fit the queue:
     * then one piece per copy */
    for (;;) {
        for (i = 0, pieces = 0; i < iovcnt; ++i) {
            pieces += ucs_copy_thread_num_pieces(iov[i].length, piece_size);
        }
        if ((pieces <= ring_size) || (piece_size == SIZE_MAX)) {
            break;
        }
        piece_size = SIZE_MAX;
    }

    if (pieces == 0) {
        req->status = UCS_OK;
        return UCS_OK;
    }

    pthread_mutex_lock(&engine->lock);
    if (engine->follow) {
        ucs_copy_thread_follow_caller(engine);
    }

    if (engine->tail - engine->head + pieces > engine->ring_mask + 1) {
        pthread_mutex_unlock(&engine->lock);
        return UCS_ERR_NO_RESOURCE;
    }

    /* the count is set before any piece can be taken */
    req->pending = pieces;
    for (i = 0; i < iovcnt; ++i) {
        for (offset = 0; offset < iov[i].length; offset += length) {
            length = ucs_min(iov[i].length - offset, piece_size);
            piece  = &engine->ring[engine->tail & engine->ring_mask];
            piece->dst    = UCS_PTR_BYTE_OFFSET(iov[i].dst, offset);
            piece->src    = UCS_PTR_BYTE_OFFSET(iov[i].src, offset);
            piece->length = length;
            piece->req    = req;
            ++engine->tail;
        }
    }

    if (engine->sleepers > 0) {
        ++engine->num_wakeups;
        if (pieces > 1) {
            pthread_cond_broadcast(&engine->cond);
        } else {
            pthread_cond_signal(&engine->cond);
        }
    }
    pthread_mutex_unlock(&engine->lock);
    return UCS_INPROGRESS;
}

/* CPU clocks of the helpers (copying, polling for work and waking up), and
 * how often a post had to wake one */
static void ucs_copy_thread_query(ucs_copy_engine_t *super,
                                  ucs_copy_engine_attr_t *attr)
{
    ucs_copy_thread_engine_t *engine = ucs_derived_of(super,
                                                      ucs_copy_thread_engine_t);
    struct timespec ts;
    clockid_t clock;
    unsigned i;

    for (i = 0; i < engine->num_started; ++i) {
        if ((pthread_getcpuclockid(engine->threads[i], &clock) == 0) &&
            (clock_gettime(clock, &ts) == 0)) {
            attr->cpu_time += ts.tv_sec + (ts.tv_nsec * 1e-9);
        }
    }

    pthread_mutex_lock(&engine->lock);
    attr->num_wakeups    = engine->num_wakeups;
    attr->num_busy_idles = engine->num_busy_idles;
    pthread_mutex_unlock(&engine->lock);
}

const ucs_copy_backend_ops_t ucs_copy_thread_ops = {
    .create   = ucs_copy_thread_create,
    .destroy  = ucs_copy_thread_destroy,
    .post     = ucs_copy_thread_post,
    .query    = ucs_copy_thread_query
};
