/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCS_CALIB_H_
#define UCS_CALIB_H_

#include <ucs/type/status.h>
#include <ucs/config/parser.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/datastruct/linear_func.h>
#include <ucs/sys/math.h>
#include <ucs/copy/copy_engine.h>
#include <stddef.h>
#include <stdio.h>

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
/* net and stage points: the copy points above UCS_CALIB_NET_BW_SIZE (a
 * host has two or three; a model lives in protocols' private data, whose
 * room UCX bounds) */
#define UCS_CALIB_MAX_NET_POINTS  4
#define UCS_CALIB_KEY_MAX         256
#define UCS_CALIB_DEV_NAME_MAX    64
#define UCS_CALIB_SIZE_INF        SIZE_MAX
/* size of the copy the engine backends are measured with */
#define UCS_CALIB_ENGINE_SIZE     UCS_MBYTE
/* size of the transfers net_bw is measured with (from and to buffers that
 * the caches hold) */
#define UCS_CALIB_NET_BW_SIZE UCS_MBYTE

/* size of the fragments whose stream net_frag_gap times: about an eager
 * protocol's segment on InfiniBand (UCX_IB_SEG_SIZE, 8256 by default, less
 * its headers) */
#define UCS_CALIB_FRAG_SIZE ((size_t)(8 * UCS_KBYTE))


/* Pages of a buffer being registered or copied */
typedef enum {
    UCS_CALIB_PAGES_RESIDENT,    /* touched before: in memory */
    UCS_CALIB_PAGES_NONRESIDENT, /* never touched: faulted in on the way */
    UCS_CALIB_PAGES_LAST
} ucs_calib_pages_t;


/* Bandwidth at one working-set size: of memcpy (copy points), or of the
 * network's transfers between buffers of that size (net points) */
typedef struct {
    size_t size; /* bytes copied, and the working set of the copy */
    double bw;   /* bytes per second */
} ucs_calib_copy_point_t;


/*
 * One copy engine backend (see calib_copy_engine.c), measured with
 * UCS_CALIB_ENGINE_SIZE copies posted by a thread that computes until they
 * complete. bw == 0: not measured.
 */
typedef struct {
    double start;   /* post to completion of a small copy, less the time
                       memcpy takes for it: seconds */
    double post;    /* caller's time in a post of a large copy */
    double bw;      /* bytes per second */
    double overlap; /* share of the copy time hidden by computing */
    double cpu;     /* CPU seconds of the engine's own threads per byte */
} ucs_calib_engine_t;


typedef struct ucs_calib_model {
    /* registration and deregistration: seconds = c + m * bytes */
    ucs_linear_func_t      reg[UCS_CALIB_PAGES_LAST];
    ucs_linear_func_t      dereg;
    /* extra cost of copying from a source whose pages were never touched */
    ucs_linear_func_t      copy_fault;
    /* extra cost of the first zero-copy transfer from registered pages that
     * were never touched: about 0 where registration pins (faults in) the
     * pages, the faults themselves where the device takes them on access
     * (on-demand paging, softverbs) */
    ucs_linear_func_t      xfer_fault;
    /* a receive buffer nobody touched yet, filled with a message's data
     * (calib_fill.c): fill_populate faults its pages in zeroed
     * (MADV_POPULATE_WRITE), for a copy into them afterwards; fill_uffd has
     * the kernel allocate them with the data in them (registered with a
     * userfaultfd, filled by UFFDIO_COPY from resident memory, unregistered),
     * the copy included. 0 and 0: not measured (the kernel offers neither,
     * or the model comes from a file without them) */
    ucs_linear_func_t fill_populate;
    ucs_linear_func_t fill_uffd;
    /* extra cost of the copy into pages that fill_populate just faulted in,
     * over a copy into resident memory: about 0 where the CPU walks the
     * guest kernel's page tables itself; on a virtual machine that shadows
     * them, the first access from user mode to each page traps to the
     * hypervisor although the kernel has faulted it in (4-5 us a page on
     * one such VM, 2026-11-28), while userfaultfd's fill and the kernel's
     * own copies never touch the pages from user mode. 0 and 0: not
     * measured (an older model file): no extra cost */
    ucs_linear_func_t fill_copy;
    /* memcpy bandwidth by working set, ascending sizes */
    unsigned               num_copy;
    ucs_calib_copy_point_t copy[UCS_CALIB_MAX_COPY_POINTS];
    /* network, from the transport's own operations */
    double                 net_latency; /* one-way, seconds */
    double net_bw; /* bytes per second, for
                                           UCS_CALIB_NET_BW_SIZE */
    double                 net_gap;     /* seconds between small messages */
    /* seconds per message of a stream of UCS_CALIB_FRAG_SIZE-byte sends
     * that the receiver takes off its queue and copies out, as an eager
     * protocol's fragments go: the wire's time for one, or the hosts' work
     * for one where that takes longer (0: not measured, an older model
     * file) */
    double net_frag_gap;
    /* share of a large transfer's time during which it takes the posting
     * thread's core, so that copies there cannot overlap it: 0 where a NIC
     * moves the data, up to 1 where the transfer is a copy on the process's
     * own cores (an emulated NIC bound with the process) */
    double net_cpu;
    /* network bandwidth of transfers larger than UCS_CALIB_NET_BW_SIZE,
     * between buffers of their size, ascending sizes (none: net_bw at every
     * size). Where a transfer's pages no longer fit the caches, the device
     * may move them slower than net_bw: an HCA whose translation cache
     * misses, softverbs, whose kernel copy walks the pages of every
     * transfer. A staged copy keeps its chunks in the cache. */
    unsigned num_net;
    ucs_calib_copy_point_t net[UCS_CALIB_MAX_NET_POINTS];
    /* a staged sender's rate at the same sizes, on the core it posts from:
     * a message copied in UCS_CALIB_NET_BW_SIZE chunks into staging slots,
     * each put while the next is copied, the first chunk's copy included
     * (none: composed of the copy and network bandwidths and net_cpu at
     * every size) */
    unsigned num_stage;
    ucs_calib_copy_point_t stage[UCS_CALIB_MAX_NET_POINTS];
    /* copy engine backends */
    ucs_calib_engine_t     engine[UCS_COPY_BACKEND_LAST];
    /* how it was obtained */
    double                 measure_time; /* seconds the measurement took */
} ucs_calib_model_t;


/* Sizes and parameters derived from a model */
typedef struct {
    /* register + zero-copy + deregister beats copy through staging above */
    size_t zcopy_thresh[UCS_CALIB_PAGES_LAST];
    /* a superpipelined copy beats a single copy-then-send above */
    size_t sp_thresh;
    /* a staged copy beats zero-copy even from a registered buffer (whose
     * registration is paid) above (UCS_CALIB_SIZE_INF: never) */
    size_t cached_staged_thresh;
    /* superpipeline: first chunk (at least; ucs_calib_sp_first()) and
     * growth ratio (C_i = C_0 * q^i), and the bytes of each notified put */
    size_t sp_c0;
    double sp_q;
    size_t sp_sub;
    /* an untouched receive buffer: bytes of whole pages from which filling
     * them by userfaultfd costs less than faulting them in and copying into
     * them (UCS_CALIB_SIZE_INF: never, or not measured) */
    size_t fill_uffd_min;
} ucs_calib_derived_t;


/* Where a model came from */
typedef enum {
    UCS_CALIB_SOURCE_MEASURED, /* measured now */
    UCS_CALIB_SOURCE_CACHE,    /* read from the per-host cache */
    UCS_CALIB_SOURCE_FILE, /* supplied by the user (UCX_CALIB_FILE) */
    UCS_CALIB_SOURCE_PROCESS   /* already obtained by this process */
} ucs_calib_source_t;


/* Measures the device-specific part of a model (registration, network) */
typedef ucs_status_t (*ucs_calib_measure_func_t)(void *arg,
                                                 ucs_calib_model_t *model);


/**
 * Get the model of a device: from this process' earlier result, from the
 * cache, or by measuring it (the device part with @a measure, the host part
 * here). UCX_CALIB_MODE=force measures again; =off returns
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


/* The working sets memcpy is measured at, given the data cache sizes (bytes,
 * 0 for unknown) from the first level on: half of each cache level, and a
 * DRAM point; ascending, at most UCS_CALIB_MAX_COPY_POINTS. Returns their
 * number. */
unsigned ucs_calib_copy_sizes_for(const size_t *caches, unsigned num_caches,
                                  size_t *sizes);


/* Measure the copy engine's backends (those that can run here) */
ucs_status_t ucs_calib_measure_copy_engines(ucs_calib_model_t *model);


/* One overlap experiment, after the I/OAT study (means, seconds per copy) */
typedef struct {
    double t_copy;      /* post and wait */
    double t_compute;   /* computation sized to take about t_copy */
    double t_total;     /* post, compute, wait */
    double t_engine;    /* CPU time of the engine's own threads */
    double overlap;     /* (t_copy + t_compute - t_total) / t_copy */
    double net_overlap; /* overlap - t_engine / t_copy: what is left when
                           the engine's threads take a busy core's time */
} ucs_calib_overlap_t;


/**
 * Overlap of copies of @a size bytes by @a engine with computation of the
 * posting thread. Used by the calibration and by bench/.
 */
ucs_status_t ucs_calib_engine_overlap(ucs_copy_engine_t *engine, void *dst,
                                      const void *src, size_t size,
                                      ucs_calib_overlap_t *result);


/* Share of a backend's copy time left to the caller when every core is
 * busy: its overlap less the CPU time of its own threads */
double ucs_calib_engine_net_overlap(const ucs_calib_engine_t *engine);


/**
 * The copy engine backend that should stage chunks of @a chunk bytes for a
 * pipeline whose other stage is the network: one whose net overlap frees at
 * least half of the caller's copy time, and that keeps up with the rate a
 * copy by the caller would give.
 *
 * @param [in]  backend    The one configured, or UCS_COPY_BACKEND_AUTO.
 * @param [out] backend_p  The backend to use.
 *
 * @return UCS_OK, or UCS_ERR_UNSUPPORTED when no backend helps.
 */
ucs_status_t ucs_calib_engine_choose(const ucs_calib_model_t *model,
                                     ucs_copy_backend_t backend, size_t chunk,
                                     ucs_copy_backend_t *backend_p);


/* Median of @a n values (sorts them; the upper one of an even count) */
double ucs_calib_median(double *v, unsigned n);


/* Least-squares line through (x[i], y[i]), residuals relative to x[i] */
ucs_linear_func_t ucs_calib_fit(const double *x, const double *y, unsigned n);


/* memcpy bandwidth for a copy of @a size bytes (interpolated) */
double ucs_calib_copy_bw(const ucs_calib_model_t *model, size_t size);


/* Network bandwidth of a transfer of @a size bytes between buffers of that
 * size (interpolated) */
double ucs_calib_net_bw(const ucs_calib_model_t *model, size_t size);


/* Time to send @a size bytes with zero-copy from a registered buffer */
double ucs_calib_zcopy_time(const ucs_calib_model_t *model, size_t size);


/* Time to copy @a size bytes from a buffer with @a pages */
double ucs_calib_copy_time(const ucs_calib_model_t *model, size_t size,
                           ucs_calib_pages_t pages);


/*
 * What a zero-copy send of @a size bytes with @a pages pays that a copy
 * through pre-registered staging does not: registration, deregistration and,
 * for pages never touched, the first transfer's faults (xfer_fault)
 */
double ucs_calib_reg_time(const ucs_calib_model_t *model, size_t size,
                          ucs_calib_pages_t pages);


/* First chunk of a superpipelined message of @a size bytes: @a c0 (the
 * derived sp_c0), or an eighth of the message if more (see calib_model.c) */
size_t ucs_calib_sp_first(size_t c0, size_t size);


/* Size from which a staged first send takes the superpipeline rather than
 * one staged copy, for a sender whose staging slots hold @a slots_bytes:
 * the derived sp_thresh, and never for what the slots hold (see
 * calib_model.c) */
size_t
ucs_calib_sp_from(const ucs_calib_derived_t *derived, size_t slots_bytes);


/* A superpipelined sender's copies and puts of @a size bytes, the first
 * chunk's included: composed of the copy and network costs, or from the
 * stage points where the message outgrows the caches */
double ucs_calib_stage_time(const ucs_calib_model_t *model,
                            const ucs_calib_derived_t *derived, size_t size);


/* Time to send @a size bytes with a superpipelined copy (design.md model) */
double ucs_calib_sp_time(const ucs_calib_model_t *model,
                         const ucs_calib_derived_t *derived, size_t size);


/* An operation on @a buf, a fresh mapping's first @a size bytes (its own
 * pages or after its first few, see ucs_calib_time_fresh()) */
typedef ucs_status_t (*ucs_calib_fresh_op_t)(void *buf, size_t size, void *arg);

/**
 * Median seconds that @a op takes on fresh mappings (pages never touched)
 * of each of @a sizes, in *medians: a first touch's time scatters by tens
 * of percent, so more repetitions where they are cheap. The first @a skip
 * bytes of each mapping are written untimed, and @a op gets the rest,
 * after @a prepare (untimed, unless NULL) had it.
 *
 * @return UCS_OK; UCS_ERR_UNSUPPORTED where @a op failed (not logged);
 *         UCS_ERR_NO_MEMORY where no mapping could be had (logged).
 */
ucs_status_t ucs_calib_time_fresh(const size_t *sizes, unsigned n, size_t skip,
                                  ucs_calib_fresh_op_t prepare,
                                  ucs_calib_fresh_op_t op, void *arg,
                                  double *medians);


/* Measure the costs of filling untouched receive buffers (fill_populate,
 * fill_copy, fill_uffd); those the kernel does not offer stay 0 */
ucs_status_t ucs_calib_measure_fill(ucs_calib_model_t *model);


/* Whether the model has both costs of filling untouched receive buffers */
int ucs_calib_fill_measured(const ucs_calib_model_t *model);


/*
 * Time for a staged receiver to copy @a size bytes out of its staging into
 * a buffer nobody touched yet: the cheaper of its two ways to fill the
 * pages (fill_uffd, or fill_populate and the copy into the pages), or,
 * where the model has no fill costs, a copy that faults the pages in
 * (copy_fault). The copy is included.
 */
double ucs_calib_fresh_recv_time(const ucs_calib_model_t *model, size_t size);


/*
 * Bytes at the start of an untouched receive buffer of @a size bytes that
 * its receiver faults in ahead of the data, the rest being filled by
 * userfaultfd as it lands: what it can fault in while it waits for the
 * first sub-block of @a sub bytes (at most the message), where that costs
 * less than faulting in all of it; none of it where the copy into faulted
 * in pages costs more than userfaultfd's fill (fill_copy); else all of it
 * (also where fill_populate or fill_uffd was not measured). A receiver
 * that keeps up with the wire
 * faults in all of it, unless its core is @a busy with other work (its own
 * staged sends, as in an all-to-all).
 */
size_t ucs_calib_fill_ahead(const ucs_calib_model_t *model, size_t size,
                            size_t sub, int busy);


/* Critical sizes, C_0 and q of a model */
void ucs_calib_derive(const ucs_calib_model_t *model,
                      ucs_calib_derived_t *derived);


/* Kinds of values in a model, each with physical bounds (calib_model.c) */
typedef enum {
    UCS_CALIB_VALUE_TIME, /* fixed cost of one operation, seconds */
    UCS_CALIB_VALUE_PER_BYTE, /* cost per byte, seconds */
    UCS_CALIB_VALUE_BW, /* bytes per second */
    UCS_CALIB_VALUE_SHARE, /* a share of a time, 0..1 */
    UCS_CALIB_VALUE_SIZE, /* whole bytes */
    UCS_CALIB_VALUE_DURATION, /* how long the measurement took, seconds */
    UCS_CALIB_VALUE_LAST
} ucs_calib_value_t;

typedef struct {
    double min, max;
    const char *unit;
} ucs_calib_bound_t;


/* The bounds a value of @a kind must be within */
const ucs_calib_bound_t *ucs_calib_value_bound(ucs_calib_value_t kind);


/**
 * Check every value of a model against its physical bounds, and the model's
 * shape (1 to UCS_CALIB_MAX_COPY_POINTS copy points of ascending sizes).
 *
 * @param [inout] model  The model.
 * @param [in]    fix    Clamp finite values that are out of bounds into
 *                       them (with a debug line each), for a measured
 *                       model; NaN is never fixed.
 * @param [out]   err    What is wrong, when the model is refused.
 * @param [in]    max    Size of @a err.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM.
 */
ucs_status_t
ucs_calib_model_check(ucs_calib_model_t *model, int fix, char *err, size_t max);


/* Text form of a model, as the cache stores it ("key value" lines) */
void ucs_calib_model_print(const ucs_calib_model_t *model, FILE *stream);

/* Write it to @a path, through a mkstemp() file renamed into place;
 * UCS_ERR_INVALID_PARAM for a model ucs_calib_model_check() refuses */
ucs_status_t ucs_calib_model_write(const ucs_calib_model_t *model,
                                   const char *path);

/**
 * Read a model: every value must be a number within its bounds, every line
 * a known key with its number of values. A bad file is refused with one
 * error that names the file, the line and what is wrong (its bytes
 * escaped).
 *
 * @return UCS_OK; UCS_ERR_NO_ELEM when the file cannot be opened (errno
 *         tells why, nothing is logged); UCS_ERR_INVALID_PARAM for a file
 *         that is not a regular file or not a valid model (logged).
 */
ucs_status_t ucs_calib_model_read(const char *path, ucs_calib_model_t *model);

/* The same from an open file (@a name is for messages) */
ucs_status_t
ucs_calib_model_read_fd(int fd, const char *name, ucs_calib_model_t *model);


/* @a length bytes of @a data as printable ASCII, others as \xNN, cut to
 * fit @a max (with the NUL) */
void ucs_calib_escape(const void *data, size_t length, char *buf, size_t max);


const char *ucs_calib_source_name(ucs_calib_source_t source);


END_C_DECLS

#endif
