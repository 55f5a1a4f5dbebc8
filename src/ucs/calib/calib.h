/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCS_CALIB_H_
#define UCS_CALIB_H_

#include <ucs/type/status.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/datastruct/linear_func.h>
#include <ucs/sys/math.h>
#include <stddef.h>

BEGIN_C_DECLS

/*
 * Measured cost model of one device on one host.
 *
 * UCX models memory registration with constants (UCX_IB_MEM_REG_OVERHEAD,
 * UCX_IB_MEM_REG_GROWTH) and copies with one bandwidth (UCX_BCOPY_BW). The
 * size at which registering beats copying moves by an order of magnitude
 * with the CPU, the NIC and whether the pages are resident, so ucx-hcr
 * measures these costs on the host (once, then from a cache) and derives
 * its thresholds from them. A transport that can measure its device (hcr)
 * fills the model through ucs_calib_get(); protocols read it with
 * ucs_calib_find().
 */


#define UCS_CALIB_MAX_COPY_POINTS 8
#define UCS_CALIB_KEY_MAX         256
#define UCS_CALIB_DEV_NAME_MAX    64
#define UCS_CALIB_SIZE_INF        SIZE_MAX


/* Pages of a buffer being registered or copied */
typedef enum {
    UCS_CALIB_PAGES_RESIDENT,    /* touched before: in memory */
    UCS_CALIB_PAGES_NONRESIDENT, /* never touched: faulted in on the way */
    UCS_CALIB_PAGES_LAST
} ucs_calib_pages_t;


/* memcpy bandwidth for one working-set size */
typedef struct {
    size_t size; /* bytes copied, and the working set of the copy */
    double bw;   /* bytes per second */
} ucs_calib_copy_point_t;


typedef struct ucs_calib_model {
    /* registration and deregistration: seconds = c + m * bytes */
    ucs_linear_func_t      reg[UCS_CALIB_PAGES_LAST];
    ucs_linear_func_t      dereg;
    /* extra cost of copying from a source whose pages were never touched */
    ucs_linear_func_t      copy_fault;
    /* memcpy bandwidth by working set, ascending sizes */
    unsigned               num_copy;
    ucs_calib_copy_point_t copy[UCS_CALIB_MAX_COPY_POINTS];
    /* network, from the transport's own operations */
    double                 net_latency; /* one-way, seconds */
    double                 net_bw;      /* bytes per second */
    double                 net_gap;     /* seconds between small messages */
    /* how it was obtained */
    double                 measure_time; /* seconds the measurement took */
} ucs_calib_model_t;


/* Sizes and parameters derived from a model */
typedef struct {
    /* register + zero-copy + deregister beats copy through staging above */
    size_t zcopy_thresh[UCS_CALIB_PAGES_LAST];
    /* a superpipelined copy beats a single copy-then-send above */
    size_t sp_thresh;
    /* superpipeline: first chunk and growth ratio (C_i = C_0 * q^i) */
    size_t sp_c0;
    double sp_q;
} ucs_calib_derived_t;


/* Where a model came from */
typedef enum {
    UCS_CALIB_SOURCE_MEASURED, /* measured now */
    UCS_CALIB_SOURCE_CACHE,    /* read from the per-host cache */
    UCS_CALIB_SOURCE_FILE,     /* supplied by the user (UCX_HCR_CALIB_FILE) */
    UCS_CALIB_SOURCE_PROCESS   /* already obtained by this process */
} ucs_calib_source_t;


/* Measures the device-specific part of a model (registration, network) */
typedef ucs_status_t (*ucs_calib_measure_func_t)(void *arg,
                                                 ucs_calib_model_t *model);


/**
 * Get the model of a device: from this process' earlier result, from the
 * cache, or by measuring it (the device part with @a measure, the host part
 * here). UCX_HCR_CALIB_MODE=force measures again; =off returns
 * UCS_ERR_UNSUPPORTED so that callers keep UCX's constants.
 *
 * @param [in]  dev_name  Device the model is for, e.g. "softverbs0".
 * @param [in]  dev_key   What else identifies the device's behaviour
 *                        (firmware, settings); part of the cache key.
 * @param [in]  measure   Measures registration and network costs.
 * @param [in]  arg       Argument for @a measure.
 * @param [out] model     Filled with the model.
 * @param [out] source_p  Where the model came from (may be NULL).
 */
ucs_status_t ucs_calib_get(const char *dev_name, const char *dev_key,
                           ucs_calib_measure_func_t measure, void *arg,
                           ucs_calib_model_t *model,
                           ucs_calib_source_t *source_p);


/**
 * The model this process obtained for a device with ucs_calib_get(), if
 * any, and where ucs_calib_get() got it from (source_p may be NULL):
 * UCS_ERR_NO_ELEM otherwise.
 */
ucs_status_t ucs_calib_find(const char *dev_name, ucs_calib_model_t *model,
                            ucs_calib_source_t *source_p);


/* Measure memcpy bandwidth by working set and the first-touch cost */
ucs_status_t ucs_calib_measure_memcpy(ucs_calib_model_t *model);


/* Least-squares line through (x[i], y[i]) */
ucs_linear_func_t ucs_calib_fit(const double *x, const double *y, unsigned n);


/* memcpy bandwidth for a copy of @a size bytes (interpolated) */
double ucs_calib_copy_bw(const ucs_calib_model_t *model, size_t size);


/* Time to copy @a size bytes from a buffer with @a pages */
double ucs_calib_copy_time(const ucs_calib_model_t *model, size_t size,
                           ucs_calib_pages_t pages);


/* Time to register and deregister @a size bytes with @a pages */
double ucs_calib_reg_time(const ucs_calib_model_t *model, size_t size,
                          ucs_calib_pages_t pages);


/* Time to send @a size bytes with a superpipelined copy (design.md model) */
double ucs_calib_sp_time(const ucs_calib_model_t *model,
                         const ucs_calib_derived_t *derived, size_t size);


/* Critical sizes, C_0 and q of a model */
void ucs_calib_derive(const ucs_calib_model_t *model,
                      ucs_calib_derived_t *derived);


/* Text form of a model, as the cache stores it ("key value" lines) */
ucs_status_t ucs_calib_model_write(const ucs_calib_model_t *model,
                                   const char *path);
ucs_status_t ucs_calib_model_read(const char *path, ucs_calib_model_t *model);


const char *ucs_calib_source_name(ucs_calib_source_t source);

END_C_DECLS

#endif
