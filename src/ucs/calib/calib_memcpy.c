/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "calib.h"

#include <ucs/arch/cpu.h>
#include <ucs/debug/log.h>
#include <ucs/time/time.h>
#include <string.h>
#include <sys/mman.h>

/*
 * Host part of the model: memcpy bandwidth at one working set per cache
 * level and one in DRAM, and the extra cost of copying from pages that were
 * never touched (each is faulted in on the way).
 */

/* a point copies at least this much in total, so that timer resolution and
 * the first pass' misses do not dominate small sizes */
#define UCS_CALIB_COPY_MIN_TOTAL  (8 * UCS_MBYTE)
/* the last-level and DRAM points move by a third between batches on a
 * shared host: the median of five */
#define UCS_CALIB_COPY_BATCHES    5
#define UCS_CALIB_DRAM_MIN        (32 * UCS_MBYTE)
#define UCS_CALIB_DRAM_MAX        (64 * UCS_MBYTE) /* keeps calibration fast */

/* from the sizes where a fault-in copy competes with a registration (a few
 * pages) up to DRAM sizes */
static const size_t ucs_calib_fault_sizes[] = {
    16 * UCS_KBYTE, 64 * UCS_KBYTE, 256 * UCS_KBYTE, UCS_MBYTE,
    4 * UCS_MBYTE
};


static void *ucs_calib_map(size_t size)
{
    void *ptr = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    return (ptr == MAP_FAILED) ? NULL : ptr;
}

/* median time of a few batches of copies, per copy: the median, like the
 * registration's, so that neither side of a crossover gets its best case */
static double ucs_calib_time_copy(void *dst, const void *src, size_t size)
{
    unsigned reps = ucs_max(UCS_CALIB_COPY_MIN_TOTAL / size, 1), i, b;
    double t[UCS_CALIB_COPY_BATCHES];
    ucs_time_t start;

    for (b = 0; b < UCS_CALIB_COPY_BATCHES; ++b) {
        start = ucs_get_time();
        for (i = 0; i < reps; ++i) {
            memcpy(dst, src, size);
            /* keep the compiler from merging the copies */
            ucs_compiler_fence();
        }
        t[b] = ucs_time_to_sec(ucs_get_time() - start) / reps;
    }
    return ucs_calib_median(t, UCS_CALIB_COPY_BATCHES);
}

static ucs_status_t ucs_calib_copy_point(size_t size, ucs_calib_copy_point_t *p)
{
    void *src, *dst;

    src = ucs_calib_map(size);
    dst = ucs_calib_map(size);
    if ((src == NULL) || (dst == NULL)) {
        ucs_error("calib: failed to map 2 x %zu bytes: %m", size);
        goto err;
    }

    memset(src, 0x5a, size);
    memset(dst, 0xa5, size);
    p->size = size;
    p->bw   = size / ucs_calib_time_copy(dst, src, size);
    munmap(src, size);
    munmap(dst, size);
    return UCS_OK;

err:
    if (src != NULL) {
        munmap(src, size);
    }
    if (dst != NULL) {
        munmap(dst, size);
    }
    return UCS_ERR_NO_MEMORY;
}

unsigned ucs_calib_copy_sizes_for(const size_t *caches, unsigned num_caches,
                                  size_t *sizes)
{
    size_t half, largest = 0;
    unsigned i, n = 0;

    for (i = 0; i < num_caches; ++i) {
        half = caches[i] / 2;
        if (half <= largest) {
            continue; /* unknown (0), or not larger than the level before */
        }
        if ((half * 2) > UCS_CALIB_DRAM_MAX) {
            /* beyond what the DRAM point may cost: a virtual machine may
             * report its host's whole last-level cache; the DRAM point
             * stands for this level and those after it */
            break;
        }
        sizes[n++] = half;
        largest    = half;
    }

    if (n == 0) {
        /* caches unknown: typical L1, L2 and L3 working sets */
        sizes[n++] = 16 * UCS_KBYTE;
        sizes[n++] = 256 * UCS_KBYTE;
        sizes[n++] = 4 * UCS_MBYTE;
        largest    = 4 * UCS_MBYTE;
    }

    /* twice the last level: the copy's source and destination no longer
     * fit in it (half of it already is the previous point); above it, since
     * a cache level is kept only when twice its point fits DRAM_MAX */
    sizes[n++] = ucs_min(ucs_max(largest * 4, UCS_CALIB_DRAM_MIN),
                         UCS_CALIB_DRAM_MAX);
    return n;
}

/* working sets: half of each data cache level, and DRAM */
static unsigned ucs_calib_copy_sizes(size_t *sizes)
{
    const size_t caches[] = {ucs_cpu_get_cache_size(UCS_CPU_CACHE_L1d),
                             ucs_cpu_get_cache_size(UCS_CPU_CACHE_L2),
                             ucs_cpu_get_cache_size(UCS_CPU_CACHE_L3)};

    return ucs_calib_copy_sizes_for(caches, ucs_static_array_size(caches),
                                    sizes);
}

/* a copy from the fresh mapping into the resident buffer arg */
static ucs_status_t ucs_calib_copy_fresh(void *buf, size_t size, void *arg)
{
    memcpy(arg, buf, size);
    return UCS_OK;
}

static ucs_status_t ucs_calib_measure_fault(ucs_calib_model_t *model)
{
    unsigned n = ucs_static_array_size(ucs_calib_fault_sizes), i;
    double x[ucs_static_array_size(ucs_calib_fault_sizes)];
    double y[ucs_static_array_size(ucs_calib_fault_sizes)];
    size_t max_size = ucs_calib_fault_sizes[n - 1];
    ucs_status_t status;
    void *dst;

    dst = ucs_calib_map(max_size);
    if (dst == NULL) {
        ucs_error("calib: failed to map %zu bytes: %m", max_size);
        return UCS_ERR_NO_MEMORY;
    }
    memset(dst, 0, max_size);

    status = ucs_calib_time_fresh(ucs_calib_fault_sizes, n, 0, NULL,
                                  ucs_calib_copy_fresh, dst, y);
    munmap(dst, max_size);
    if (status != UCS_OK) {
        return status;
    }

    for (i = 0; i < n; ++i) {
        x[i] = ucs_calib_fault_sizes[i];
        y[i] -= ucs_calib_copy_time(model, ucs_calib_fault_sizes[i],
                                    UCS_CALIB_PAGES_RESIDENT);
    }
    model->copy_fault = ucs_calib_fit(x, y, n);
    return UCS_OK;
}

ucs_status_t ucs_calib_measure_memcpy(ucs_calib_model_t *model)
{
    size_t sizes[UCS_CALIB_MAX_COPY_POINTS];
    ucs_status_t status;
    unsigned i, n;

    n = ucs_calib_copy_sizes(sizes);
    for (i = 0; i < n; ++i) {
        status = ucs_calib_copy_point(sizes[i], &model->copy[i]);
        if (status != UCS_OK) {
            return status;
        }
        ucs_debug("calib: memcpy %zu bytes: %.0f MB/s", sizes[i],
                  model->copy[i].bw / UCS_MBYTE);
    }
    model->num_copy = n;

    return ucs_calib_measure_fault(model);
}
