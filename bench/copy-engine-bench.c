/*
 * Copy engine benchmark, after the I/OAT copy-offload study.
 *
 * 1. Overlap of a posted copy with computation, per backend and size, with
 *    the experiment the calibration runs (ucs_calib_engine_overlap):
 *      overlap = (T_copy + T_compute - T_total) / T_copy
 *    where T_copy is post+wait alone, T_compute a compute loop sized to take
 *    1.25x the mean T_copy so far (at least T_copy, or the formula caps
 *    below 1), and T_total post, compute, wait. 1 means the copy was
 *    entirely hidden, 0 that it was not overlapped at all. The net overlap
 *    also charges the CPU time of the engine's own threads: what is left
 *    when no core is idle.
 * 2. Cache pollution: the time to walk a cache-resident working set after a
 *    large copy done by the calling thread (memcpy) vs by the engine.
 *
 * Each overlap value is the median of RUNS experiments (each a mean over at
 * least 5 ms of copies). Built and run by bench/copy-engine-bench.sh.
 */
#define _GNU_SOURCE
#include <ucs/calib/calib.h>
#include <ucs/copy/copy_engine.h>

#include "bench_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5
#define REPS 9

static volatile uint64_t sink;

static ucs_copy_engine_t *engine_create(ucs_copy_backend_t backend)
{
    ucs_copy_engine_params_t params = {.backend = backend, .name = "bench"};
    ucs_copy_engine_t *engine;

    if (ucs_copy_engine_create(&params, &engine) != UCS_OK) {
        fprintf(stderr, "cannot create a %s engine\n",
                ucs_copy_backend_name(backend));
        exit(1);
    }
    return engine;
}

static void copy_wait(ucs_copy_engine_t *engine, void *dst, void *src,
                      size_t size)
{
    ucs_copy_req_t req;
    ucs_status_t status;

    status = ucs_copy_engine_post(engine, dst, src, size, &req);
    if ((status != UCS_OK) && (status != UCS_INPROGRESS)) {
        fprintf(stderr, "post failed: %s\n", ucs_status_string(status));
        exit(1);
    }
    if (ucs_copy_engine_wait(engine, &req) != UCS_OK) {
        fprintf(stderr, "copy failed\n");
        exit(1);
    }
}

static void overlap(ucs_copy_backend_t backend, void *dst, void *src)
{
    ucs_copy_engine_t *engine = engine_create(backend);
    double tc[RUNS], tp[RUNS], tt[RUNS], te[RUNS], ov[RUNS], net[RUNS];
    ucs_calib_overlap_t result;
    size_t size;
    int r;

    for (size = 64 * 1024; size <= 16 * 1024 * 1024; size *= 2) {
        for (r = 0; r < RUNS; ++r) {
            if (ucs_calib_engine_overlap(engine, dst, src, size, &result) !=
                UCS_OK) {
                fprintf(stderr, "overlap experiment failed\n");
                exit(1);
            }
            tc[r]  = result.t_copy;
            tp[r]  = result.t_compute;
            tt[r]  = result.t_total;
            te[r]  = result.t_engine;
            ov[r]  = result.overlap;
            net[r] = result.net_overlap;
        }
        printf("%-7s %9zu %10.1f %10.1f %10.1f %10.1f %8.2f %8.2f\n",
               ucs_copy_backend_name(backend), size / 1024,
               median(tc, RUNS) * 1e6, median(tp, RUNS) * 1e6,
               median(tt, RUNS) * 1e6, median(te, RUNS) * 1e6,
               median(ov, RUNS), median(net, RUNS));
    }
    ucs_copy_engine_destroy(engine);
}

static double walk(volatile uint64_t *ws, size_t n)
{
    double t = now();
    uint64_t s = 0;
    size_t i;

    for (i = 0; i < n; i += 8) { /* one load per 64-byte line */
        s += ws[i];
    }
    sink = s;
    return now() - t;
}

static void pollution(void *dst, void *src, size_t copy_size, size_t ws_size)
{
    ucs_copy_engine_t *engine = engine_create(UCS_COPY_BACKEND_THREAD);
    double cpu[REPS], eng[REPS], warm[REPS];
    uint64_t *ws = malloc(ws_size);
    size_t n     = ws_size / sizeof(*ws);
    int r;

    memset(ws, 1, ws_size);
    for (r = 0; r < REPS; ++r) {
        walk(ws, n);
        warm[r] = walk(ws, n);

        walk(ws, n);
        memcpy(dst, src, copy_size);
        cpu[r] = walk(ws, n);

        walk(ws, n);
        copy_wait(engine, dst, src, copy_size);
        eng[r] = walk(ws, n);
    }
    printf("walk of a %zu KiB working set: warm %.1f us, after a %zu MiB "
           "copy by the CPU %.1f us, by the engine %.1f us\n",
           ws_size / 1024, median(warm, REPS) * 1e6, copy_size >> 20,
           median(cpu, REPS) * 1e6, median(eng, REPS) * 1e6);
    ucs_copy_engine_destroy(engine);
    free(ws);
}

int main(void)
{
    size_t max = 16 * 1024 * 1024;
    void *src  = malloc(max), *dst = malloc(max);

    memset(src, 1, max);
    memset(dst, 2, max);

    printf("# medians of %d experiments; engine_us: CPU time of the engine's "
           "own threads per copy\n", RUNS);
    printf("%-7s %9s %10s %10s %10s %10s %8s %8s\n", "backend", "size_KiB",
           "T_copy_us", "T_comp_us", "T_total_us", "engine_us", "overlap",
           "net");
    overlap(UCS_COPY_BACKEND_MEMCPY, dst, src);
    overlap(UCS_COPY_BACKEND_THREAD, dst, src);
    printf("\n");
    pollution(dst, src, max, 256 * 1024);
    free(src);
    free(dst);
    return 0;
}
