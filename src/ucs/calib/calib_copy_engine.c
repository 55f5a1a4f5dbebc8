/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "calib.h"

#include <ucs/debug/log.h>
#include <ucs/time/time.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * The copy engine's part of the model, and the rule that picks a backend for
 * a pipeline's copy stage.
 *
 * Each backend is measured as the I/OAT study measured its DMA engine: the
 * time to start a copy, its bandwidth, and its overlap with computation of
 * the posting thread. What the study's overlap does not show is who pays for
 * the copy. A DMA engine copies on its own; a helper thread copies on another
 * core, which is free only while that core is idle. So the calibration also
 * reads the CPU clocks of the engine's own threads, and the rule judges a
 * backend by its net overlap, overlap less that CPU time: what is left when
 * every core has work (a process per core, as parallel jobs run). A helper
 * thread then gains nothing, and bench/sppln-copy-engine.sh shows that on a
 * 2-core host it makes the superpipeline slower; a DMA engine keeps its
 * overlap.
 */

#define UCS_CALIB_ENGINE_MIN_REPS    5
#define UCS_CALIB_ENGINE_MIN_TIME    0.005 /* seconds per overlap experiment */
#define UCS_CALIB_ENGINE_SMALL       (8 * UCS_KBYTE)
#define UCS_CALIB_ENGINE_SMALL_REPS  31
#define UCS_CALIB_COMPUTE_ITERS      2000000
/* computation per overlap round, relative to the copy (see below) */
#define UCS_CALIB_ENGINE_COMPUTE_SHARE 1.25

/* an engine must hide at least this share of the caller's copy time */
#define UCS_CALIB_ENGINE_MIN_OVERLAP 0.5
/* and stage at least this share of the rate the caller's copy gives */
#define UCS_CALIB_ENGINE_MIN_RATE    0.9


static volatile double ucs_calib_compute_sink;
static double ucs_calib_compute_rate; /* iterations per second */
static pthread_once_t ucs_calib_compute_once = PTHREAD_ONCE_INIT;


/* computation that does not touch memory: a dependent chain of flops */
static void ucs_calib_compute(long iters)
{
    double x = 1.0;
    long i;

    for (i = 0; i < iters; ++i) {
        x = (x * 1.0000001) + 1e-9;
    }
    ucs_calib_compute_sink = x;
}

static void ucs_calib_compute_measure(void)
{
    ucs_time_t start;

    ucs_calib_compute(UCS_CALIB_COMPUTE_ITERS / 10); /* clock ramp-up */
    start = ucs_get_time();
    ucs_calib_compute(UCS_CALIB_COMPUTE_ITERS);
    ucs_calib_compute_rate = UCS_CALIB_COMPUTE_ITERS /
                             ucs_time_to_sec(ucs_get_time() - start);
}

static double ucs_calib_engine_cpu_time(ucs_copy_engine_t *engine)
{
    ucs_copy_engine_attr_t attr;

    ucs_copy_engine_query(engine, &attr);
    return attr.cpu_time;
}

static ucs_status_t ucs_calib_engine_post(ucs_copy_engine_t *engine, void *dst,
                                          const void *src, size_t size,
                                          ucs_copy_req_t *req)
{
    ucs_status_t status = ucs_copy_engine_post(engine, dst, src, size, req);

    if (UCS_STATUS_IS_ERR(status)) {
        ucs_error("calib: copy engine post of %zu bytes failed: %s", size,
                  ucs_status_string(status));
    }
    return status;
}

/* post, compute (@a iters may be 0), wait: seconds */
static ucs_status_t ucs_calib_engine_copy(ucs_copy_engine_t *engine, void *dst,
                                          const void *src, size_t size,
                                          long iters, double *time_p)
{
    ucs_time_t start = ucs_get_time();
    ucs_copy_req_t req;
    ucs_status_t status;

    status = ucs_calib_engine_post(engine, dst, src, size, &req);
    if (UCS_STATUS_IS_ERR(status)) {
        return status;
    }

    ucs_calib_compute(iters);
    status  = ucs_copy_engine_wait(engine, &req);
    *time_p = ucs_time_to_sec(ucs_get_time() - start);
    return status;
}

/*
 * Means over at least UCS_CALIB_ENGINE_MIN_TIME, so that the engine's CPU
 * time (read from clocks of coarse resolution) is summed over many copies.
 */
static ucs_status_t ucs_calib_engine_overlap_run(ucs_copy_engine_t *engine,
                                                 void *dst, const void *src,
                                                 size_t size,
                                                 ucs_calib_overlap_t *result)
{
    double rate = ucs_calib_compute_rate; /* compute iterations per second */
    double t_copy = 0, t_comp = 0, t_total = 0, cpu_start, t;
    ucs_time_t run_start, start;
    ucs_status_t status;
    unsigned reps;
    long iters;

    /* The first copy may fault the destination in: left out */
    status = ucs_calib_engine_copy(engine, dst, src, size, 0, &t);
    if (status != UCS_OK) {
        return status;
    }

    /* Each round times the copy alone, then a computation sized to a quarter
     * more than the mean copy time so far, then both at once. The formula
     * caps at T_compute / T_copy: a computation shorter than the copies
     * (their time varies by 20% from round to round here) would show as
     * missing overlap, whereas with a longer one a perfectly hidden copy
     * gives 1 and a synchronous one still 0. The computation's rate is
     * re-taken every round, as the core's clock may change. */
    cpu_start = ucs_calib_engine_cpu_time(engine);
    run_start = ucs_get_time();
    for (reps = 0; (reps < UCS_CALIB_ENGINE_MIN_REPS) ||
                   (ucs_time_to_sec(ucs_get_time() - run_start) <
                    UCS_CALIB_ENGINE_MIN_TIME); ++reps) {
        status = ucs_calib_engine_copy(engine, dst, src, size, 0, &t);
        if (status != UCS_OK) {
            return status;
        }
        t_copy += t;

        iters   = ucs_max((long)(rate * UCS_CALIB_ENGINE_COMPUTE_SHARE *
                                 t_copy / (reps + 1)), 1);
        start   = ucs_get_time();
        ucs_calib_compute(iters);
        t       = ucs_time_to_sec(ucs_get_time() - start);
        t_comp += t;
        if (t > 0) {
            rate = iters / t;
        }

        status = ucs_calib_engine_copy(engine, dst, src, size, iters, &t);
        if (status != UCS_OK) {
            return status;
        }
        t_total += t;
    }

    result->t_copy      = t_copy / reps;
    result->t_compute   = t_comp / reps;
    result->t_total     = t_total / reps;
    /* two copies per round; the helpers' polling between them counts too */
    result->t_engine    = (ucs_calib_engine_cpu_time(engine) - cpu_start) /
                          (2.0 * reps);
    result->overlap     = (result->t_copy + result->t_compute -
                           result->t_total) / result->t_copy;
    result->net_overlap = result->overlap -
                          (result->t_engine / result->t_copy);
    return UCS_OK;
}

ucs_status_t ucs_calib_engine_overlap(ucs_copy_engine_t *engine, void *dst,
                                      const void *src, size_t size,
                                      ucs_calib_overlap_t *result)
{
    pthread_once(&ucs_calib_compute_once, ucs_calib_compute_measure);
    return ucs_calib_engine_overlap_run(engine, dst, src, size, result);
}

/* time to the start of a copy: a small copy, less what memcpy takes for it */
static ucs_status_t ucs_calib_engine_start(const ucs_calib_model_t *model,
                                           ucs_copy_engine_t *engine,
                                           void *dst, const void *src,
                                           double *start_p)
{
    double t[UCS_CALIB_ENGINE_SMALL_REPS];
    ucs_status_t status;
    unsigned r;

    for (r = 0; r < UCS_CALIB_ENGINE_SMALL_REPS; ++r) {
        status = ucs_calib_engine_copy(engine, dst, src, UCS_CALIB_ENGINE_SMALL,
                                       0, &t[r]);
        if (status != UCS_OK) {
            return status;
        }
    }

    *start_p = ucs_max(ucs_calib_median(t, UCS_CALIB_ENGINE_SMALL_REPS) -
                       ucs_calib_copy_time(model, UCS_CALIB_ENGINE_SMALL,
                                           UCS_CALIB_PAGES_RESIDENT), 0.0);
    return UCS_OK;
}

/* caller's time in a post of a large copy (all of it, for memcpy) */
static ucs_status_t ucs_calib_engine_post_time(ucs_copy_engine_t *engine,
                                               void *dst, const void *src,
                                               size_t size, double *post_p)
{
    double t[UCS_CALIB_ENGINE_MIN_REPS];
    ucs_copy_req_t req;
    ucs_status_t status;
    ucs_time_t start;
    unsigned r;

    for (r = 0; r < UCS_CALIB_ENGINE_MIN_REPS; ++r) {
        start  = ucs_get_time();
        status = ucs_calib_engine_post(engine, dst, src, size, &req);
        t[r]   = ucs_time_to_sec(ucs_get_time() - start);
        if (UCS_STATUS_IS_ERR(status)) {
            return status;
        }

        status = ucs_copy_engine_wait(engine, &req);
        if (status != UCS_OK) {
            return status;
        }
    }

    *post_p = ucs_calib_median(t, UCS_CALIB_ENGINE_MIN_REPS);
    return UCS_OK;
}

static ucs_status_t ucs_calib_engine_measure(const ucs_calib_model_t *model,
                                             ucs_copy_engine_t *engine,
                                             void *dst, const void *src,
                                             ucs_calib_engine_t *result)
{
    size_t size = UCS_CALIB_ENGINE_SIZE;
    ucs_calib_overlap_t ov;
    ucs_status_t status;

    status = ucs_calib_engine_start(model, engine, dst, src, &result->start);
    if (status != UCS_OK) {
        return status;
    }

    status = ucs_calib_engine_post_time(engine, dst, src, size, &result->post);
    if (status != UCS_OK) {
        return status;
    }

    status = ucs_calib_engine_overlap(engine, dst, src, size, &ov);
    if (status != UCS_OK) {
        return status;
    }

    result->bw      = size / ov.t_copy;
    result->overlap = ov.overlap;
    result->cpu     = ov.t_engine / size;
    return UCS_OK;
}

ucs_status_t ucs_calib_measure_copy_engines(ucs_calib_model_t *model)
{
    size_t size = UCS_CALIB_ENGINE_SIZE;
    ucs_copy_engine_params_t params;
    ucs_copy_engine_t *engine;
    ucs_calib_engine_t *e;
    ucs_copy_backend_t b;
    ucs_status_t status;
    void *src, *dst;

    src = mmap(NULL, 2 * size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED) {
        ucs_error("calib: failed to map 2 x %zu bytes: %m", size);
        return UCS_ERR_NO_MEMORY;
    }
    dst = UCS_PTR_BYTE_OFFSET(src, size);
    memset(src, 0x5a, 2 * size);

    status = UCS_OK;
    for (b = 0; b < UCS_COPY_BACKEND_LAST; ++b) {
        e = &model->engine[b];
        memset(e, 0, sizeof(*e));

        params.backend = b;
        params.flags   = 0;
        params.name    = "calib";
        status         = ucs_copy_engine_create(&params, &engine);
        if (status == UCS_ERR_UNSUPPORTED) {
            ucs_debug("calib: copy engine %s is not available here",
                      ucs_copy_backend_name(b));
            status = UCS_OK;
            continue;
        } else if (status != UCS_OK) {
            break;
        }

        status = ucs_calib_engine_measure(model, engine, dst, src, e);
        ucs_copy_engine_destroy(engine);
        if (status != UCS_OK) {
            memset(e, 0, sizeof(*e));
            break;
        }

        ucs_debug("calib: copy engine %s: start %.2f us, post %.2f us, "
                  "%.0f MB/s, overlap %.2f, engine CPU %.2f ns/KiB, net "
                  "overlap %.2f", ucs_copy_backend_name(b), e->start * 1e6,
                  e->post * 1e6, e->bw / UCS_MBYTE, e->overlap,
                  e->cpu * UCS_KBYTE * 1e9, ucs_calib_engine_net_overlap(e));
    }

    munmap(src, 2 * size);
    return status;
}

double ucs_calib_engine_net_overlap(const ucs_calib_engine_t *engine)
{
    /* CPU seconds per byte times bytes per second: per second of copy */
    return engine->overlap - (engine->cpu * engine->bw);
}

ucs_status_t ucs_calib_engine_choose(const ucs_calib_model_t *model,
                                     ucs_copy_backend_t backend, size_t chunk,
                                     ucs_copy_backend_t *backend_p)
{
    ucs_status_t status = UCS_ERR_UNSUPPORTED;
    ucs_copy_backend_t b;
    double net_bw = (model->net_bw > 0) ? model->net_bw : HUGE_VAL;
    double need, rate, net_overlap;
    double best_overlap = UCS_CALIB_ENGINE_MIN_OVERLAP;
    const ucs_calib_engine_t *e;

    /* the pipeline's rate when the caller copies: its copy overlaps the
     * network, so the slower of the two */
    need = ucs_min(ucs_calib_copy_bw(model, chunk), net_bw) *
           UCS_CALIB_ENGINE_MIN_RATE;

    for (b = 0; b < UCS_COPY_BACKEND_LAST; ++b) {
        e = &model->engine[b];
        if (((backend != UCS_COPY_BACKEND_AUTO) && (b != backend)) ||
            (e->bw <= 0)) {
            continue;
        }

        rate        = chunk / (e->start + (chunk / e->bw));
        net_overlap = ucs_calib_engine_net_overlap(e);
        if ((net_overlap >= best_overlap) &&
            (ucs_min(rate, net_bw) >= need)) {
            *backend_p   = b;
            best_overlap = net_overlap;
            status       = UCS_OK;
        }
    }

    return status;
}
