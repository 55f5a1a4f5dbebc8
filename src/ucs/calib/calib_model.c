/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "calib.h"

#include <ucs/debug/assert.h>
#include <ucs/debug/log.h>
#include <ucs/sys/string.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The cost model: interpolation of the measured points, the times of the
 * ways to move a buffer, the critical sizes derived from them, and the text
 * form the cache stores.
 */

/* critical sizes are searched on a grid of 2^(1/8) steps in this range */
#define UCS_CALIB_SEARCH_MIN      256
#define UCS_CALIB_SEARCH_MAX      UCS_GBYTE
#define UCS_CALIB_SEARCH_STEPS    8

/* the first superpipeline chunk is at least a page, at most this */
#define UCS_CALIB_SP_C0_MAX       UCS_MBYTE

/* superpipeline chunks grow at least this fast (see ucs_calib_derive()) */
#define UCS_CALIB_SP_Q_MIN        2.0

/* the first chunk is at least this share of a message (ucs_calib_sp_first) */
#define UCS_CALIB_SP_FIRST_SHARE  8

/* a notified put is on the wire for about this many gaps, its own cost
 * (see ucs_calib_derive()); and within these bounds */
#define UCS_CALIB_SP_SUB_GAPS     32
#define UCS_CALIB_SP_SUB_MIN      (16 * UCS_KBYTE)
#define UCS_CALIB_SP_SUB_MAX      UCS_MBYTE


static int ucs_calib_cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

double ucs_calib_median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), ucs_calib_cmp_double);
    return v[n / 2];
}

/*
 * Weighted least squares with weights 1/x^2: the residuals are relative to
 * the size. The sizes span three decades and a measurement scatters by a
 * share of its time, so an unweighted fit is decided by the largest sizes
 * and leaves the fixed cost, which decides the critical sizes, to their
 * noise (it moved between 0 and 20 us on this host).
 */
ucs_linear_func_t ucs_calib_fit(const double *x, const double *y, unsigned n)
{
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, w, den;
    unsigned i;

    if (n == 0) {
        return ucs_linear_func_make(0, 0);
    }

    for (i = 0; i < n; ++i) {
        w    = 1.0 / ucs_max(x[i] * x[i], 1.0);
        sw  += w;
        sx  += w * x[i];
        sy  += w * y[i];
        sxx += w * x[i] * x[i];
        sxy += w * x[i] * y[i];
    }

    den = (sw * sxx) - (sx * sx);
    if (fabs(den) < (1e-12 * sw * sxx)) {
        return ucs_linear_func_make(ucs_max(sy / sw, 0), 0);
    }

    /* a negative fixed cost or slope is measurement noise: clamp to zero
     * and refit the other coefficient */
    {
        double m = ((sw * sxy) - (sx * sy)) / den;
        double c = (sy - (m * sx)) / sw;

        if (m < 0) {
            return ucs_linear_func_make(ucs_max(sy / sw, 0), 0);
        }
        if (c < 0) {
            return ucs_linear_func_make(0, (sxx > 0) ? (sxy / sxx) : 0);
        }
        return ucs_linear_func_make(c, m);
    }
}

double ucs_calib_copy_bw(const ucs_calib_model_t *model, size_t size)
{
    const ucs_calib_copy_point_t *lo, *hi;
    double f;
    unsigned i;

    if (model->num_copy == 0) {
        return 1e10;
    }

    if (size <= model->copy[0].size) {
        return model->copy[0].bw;
    }

    for (i = 1; i < model->num_copy; ++i) {
        if (size <= model->copy[i].size) {
            /* linear in log(size) between two working-set points */
            lo = &model->copy[i - 1];
            hi = &model->copy[i];
            f  = log((double)size / lo->size) / log((double)hi->size / lo->size);
            return lo->bw + (f * (hi->bw - lo->bw));
        }
    }

    return model->copy[model->num_copy - 1].bw;
}

double ucs_calib_copy_time(const ucs_calib_model_t *model, size_t size,
                           ucs_calib_pages_t pages)
{
    double t = size / ucs_calib_copy_bw(model, size);

    if (pages == UCS_CALIB_PAGES_NONRESIDENT) {
        t += ucs_linear_func_apply(model->copy_fault, size);
    }
    return t;
}

double ucs_calib_reg_time(const ucs_calib_model_t *model, size_t size,
                          ucs_calib_pages_t pages)
{
    double t = ucs_linear_func_apply(model->reg[pages], size) +
               ucs_linear_func_apply(model->dereg, size);

    if (pages == UCS_CALIB_PAGES_NONRESIDENT) {
        t += ucs_linear_func_apply(model->xfer_fault, size);
    }
    return t;
}

/*
 * Every chunk costs a put and an acknowledgment, two gaps. Started at the
 * C_0 whose copy hides in the rendezvous round trip, every message would go
 * through the same log_q(slot / C_0) small chunks before its chunks are
 * large, which on a fabric with gaps of microseconds (softverbs) costs more
 * than the copy they hide. A first chunk of at least an eighth of the
 * message keeps that growth to about three doublings; the part of its copy
 * that the round trip does not hide is at most an eighth of the message's.
 */
size_t ucs_calib_sp_first(size_t c0, size_t size)
{
    return ucs_max(c0, ucs_align_up(size / UCS_CALIB_SP_FIRST_SHARE, 4096));
}

static size_t ucs_calib_sp_num_chunks(const ucs_calib_derived_t *derived,
                                      size_t size)
{
    double c0 = ucs_calib_sp_first(derived->sp_c0, size);
    double n;

    if (derived->sp_q > 1.0) {
        /* sum of C_0 * q^i for i < n covers size */
        n = log(1.0 + ((size * (derived->sp_q - 1.0)) / c0)) /
            log(derived->sp_q);
    } else {
        n = (double)size / c0;
    }
    return ucs_max((size_t)ceil(n - 1e-9), 1);
}

double ucs_calib_sp_time(const ucs_calib_model_t *model,
                         const ucs_calib_derived_t *derived, size_t size)
{
    size_t first = ucs_min(size, ucs_calib_sp_first(derived->sp_c0, size));
    size_t n     = ucs_calib_sp_num_chunks(derived, size);
    size_t puts  = ucs_div_round_up(size, ucs_max(derived->sp_sub, 1));
    double bw_copy, t_rest, before_last;
    size_t sub;

    /* the last put: of the last chunk, what the ones before left */
    before_last = (derived->sp_q > 1.0) ?
                  (first * (pow(derived->sp_q, n - 1) - 1.0) /
                   (derived->sp_q - 1.0)) :
                  ((double)first * (n - 1));
    before_last = ucs_min(before_last, (double)(size - 1));
    sub         = ucs_min(ucs_max(derived->sp_sub, 1),
                          size - (size_t)before_last);

    /* the first chunk's copy is exposed; later copies overlap the sends of
     * earlier chunks, so the rest is bounded by the slower of the two; the
     * receiver copies each sub-block out as it lands, so only its copy of
     * the last one is exposed. Every sub-block is a put and every chunk an
     * acknowledgment: each costs a gap. */
    bw_copy = ucs_calib_copy_bw(model, first);
    t_rest  = ucs_max((double)(size - first) / model->net_bw,
                      (double)(size - first) / ucs_calib_copy_bw(model, size));
    return (first / bw_copy) + ((n + ucs_max(puts, n)) * model->net_gap) +
           model->net_latency + (first / model->net_bw) + t_rest +
           (sub / ucs_calib_copy_bw(model, sub));
}

/* copy into the staging, one send, copy out of the receiver's staging */
static double ucs_calib_bcopy_time(const ucs_calib_model_t *model,
                                   size_t size)
{
    return (2 * ucs_calib_copy_time(model, size, UCS_CALIB_PAGES_RESIDENT)) +
           model->net_gap + model->net_latency + (size / model->net_bw);
}

/*
 * Smallest grid size from which 'wins' holds at every larger grid size:
 * 0 when it holds everywhere, UCS_CALIB_SIZE_INF when not at the top.
 */
static size_t ucs_calib_crossover(int (*wins)(const ucs_calib_model_t*,
                                              const ucs_calib_derived_t*,
                                              size_t, int),
                                  const ucs_calib_model_t *model,
                                  const ucs_calib_derived_t *derived, int arg)
{
    double step = pow(2.0, 1.0 / UCS_CALIB_SEARCH_STEPS);
    double size, prev = UCS_CALIB_SEARCH_MAX;

    if (!wins(model, derived, UCS_CALIB_SEARCH_MAX, arg)) {
        return UCS_CALIB_SIZE_INF;
    }

    for (size = UCS_CALIB_SEARCH_MAX / step; size >= UCS_CALIB_SEARCH_MIN;
         size /= step) {
        if (!wins(model, derived, (size_t)size, arg)) {
            return (size_t)prev;
        }
        prev = size;
    }
    return 0;
}

static int ucs_calib_zcopy_wins(const ucs_calib_model_t *model,
                                const ucs_calib_derived_t *derived,
                                size_t size, int pages)
{
    /* the transfer from resident pages costs the same both ways; the extra
     * of a first transfer from untouched pages is in the reg time */
    return ucs_calib_reg_time(model, size, pages) <
           ucs_calib_copy_time(model, size, pages);
}

static int ucs_calib_sp_wins(const ucs_calib_model_t *model,
                             const ucs_calib_derived_t *derived, size_t size,
                             int unused)
{
    return ucs_calib_sp_time(model, derived, size) <
           ucs_calib_bcopy_time(model, size);
}

void ucs_calib_derive(const ucs_calib_model_t *model,
                      ucs_calib_derived_t *derived)
{
    double bw_copy = ucs_calib_copy_bw(model, UCS_CALIB_SEARCH_MAX);
    double c0, sub;
    int pages;

    for (pages = 0; pages < UCS_CALIB_PAGES_LAST; ++pages) {
        derived->zcopy_thresh[pages] =
                ucs_calib_crossover(ucs_calib_zcopy_wins, model, derived,
                                    pages);
    }

    /* each notified put costs a gap of its own (posting it, and the
     * target's completion): a sub-block keeps the wire busy for
     * UCS_CALIB_SP_SUB_GAPS gaps, so that those costs stay a small share.
     * On a NIC (a gap of 0.1-0.3 us at 12 GB/s) that is 32-128 KiB; on
     * softverbs, whose every operation is a system call (1.6-2.3 us at
     * 7-8 GB/s), 512 KiB, where 64 KiB puts had kept forced superpipelined
     * sends of reused 1-4 MiB buffers at half the bandwidth of zero-copy */
    sub             = model->net_gap * model->net_bw * UCS_CALIB_SP_SUB_GAPS;
    sub             = ucs_min(ucs_max(sub, UCS_CALIB_SP_SUB_MIN),
                              UCS_CALIB_SP_SUB_MAX);
    /* the nearest power of two */
    derived->sp_sub = ucs_rounddown_pow2((size_t)(sub * M_SQRT2));

    /* copying chunk i+1 takes as long as sending chunk i (q = B_copy /
     * B_net). Where the copy is not at least twice as fast as the network,
     * the pipeline waits for its copies whatever the chunk sizes, and
     * chunks still double: fixed chunks would pay a gap and an
     * acknowledgment (a round trip of flow control) per chunk, a number
     * linear in the message size instead of logarithmic. */
    derived->sp_q = (model->net_bw > 0) ? (bw_copy / model->net_bw) : 1.0;
    derived->sp_q = ucs_max(derived->sp_q, UCS_CALIB_SP_Q_MIN);

    /* the first chunk's copy hides behind the rendezvous round trip */
    c0               = bw_copy * 2.0 * model->net_latency;
    derived->sp_c0   = ucs_min(ucs_max(ucs_align_up((size_t)c0, 64),
                                       (size_t)UCS_KBYTE * 4),
                               (size_t)UCS_CALIB_SP_C0_MAX);
    derived->sp_thresh = ucs_calib_crossover(ucs_calib_sp_wins, model,
                                             derived, 0);
}

const char *ucs_calib_source_name(ucs_calib_source_t source)
{
    switch (source) {
    case UCS_CALIB_SOURCE_MEASURED:
        return "measured";
    case UCS_CALIB_SOURCE_CACHE:
        return "cache";
    case UCS_CALIB_SOURCE_FILE:
        return "file";
    case UCS_CALIB_SOURCE_PROCESS:
        return "process";
    default:
        return "?";
    }
}

static const char *ucs_calib_pages_key[] = {
    [UCS_CALIB_PAGES_RESIDENT]    = "reg_resident",
    [UCS_CALIB_PAGES_NONRESIDENT] = "reg_nonresident"
};

ucs_status_t ucs_calib_model_write(const ucs_calib_model_t *model,
                                   const char *path)
{
    const ucs_calib_engine_t *e;
    char tmp_path[PATH_MAX];
    unsigned i;
    FILE *f;
    int ret;

    /* write aside and rename, so a reader never sees half a model */
    ucs_snprintf_safe(tmp_path, sizeof(tmp_path), "%s.%d", path, getpid());
    f = fopen(tmp_path, "w");
    if (f == NULL) {
        ucs_debug("calib: cannot write %s: %m", tmp_path);
        return UCS_ERR_IO_ERROR;
    }

    fprintf(f, "# ucx-hcr cost model: seconds = c + m * bytes; bytes/s\n"
               "# engine <backend> start post bw overlap cpu_per_byte\n");
    for (i = 0; i < UCS_CALIB_PAGES_LAST; ++i) {
        fprintf(f, "%s %.9e %.9e\n", ucs_calib_pages_key[i], model->reg[i].c,
                model->reg[i].m);
    }
    fprintf(f, "dereg %.9e %.9e\n", model->dereg.c, model->dereg.m);
    fprintf(f, "copy_fault %.9e %.9e\n", model->copy_fault.c,
            model->copy_fault.m);
    fprintf(f, "xfer_fault %.9e %.9e\n", model->xfer_fault.c,
            model->xfer_fault.m);
    for (i = 0; i < model->num_copy; ++i) {
        fprintf(f, "copy %zu %.9e\n", model->copy[i].size, model->copy[i].bw);
    }
    fprintf(f, "net_latency %.9e\n", model->net_latency);
    fprintf(f, "net_bw %.9e\n", model->net_bw);
    fprintf(f, "net_gap %.9e\n", model->net_gap);
    for (i = 0; i < UCS_COPY_BACKEND_LAST; ++i) {
        e = &model->engine[i];
        if (e->bw > 0) {
            fprintf(f, "engine %s %.9e %.9e %.9e %.4f %.9e\n",
                    ucs_copy_backend_name(i), e->start, e->post, e->bw,
                    e->overlap, e->cpu);
        }
    }
    fprintf(f, "measure_time %.9e\n", model->measure_time);

    ret = fclose(f);
    if ((ret != 0) || (rename(tmp_path, path) != 0)) {
        ucs_debug("calib: cannot write %s: %m", path);
        unlink(tmp_path);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

/* "engine <backend> start post bw overlap cpu_per_byte" */
static ucs_status_t ucs_calib_engine_line_read(const char *line,
                                               ucs_calib_model_t *model)
{
    ucs_calib_engine_t e;
    char name[32];
    unsigned b;

    if ((sscanf(line, "engine %31s %lf %lf %lf %lf %lf", name, &e.start,
                &e.post, &e.bw, &e.overlap, &e.cpu) != 6) ||
        (e.start < 0) || (e.post < 0) || (e.bw <= 0) || (e.cpu < 0)) {
        return UCS_ERR_INVALID_PARAM;
    }

    for (b = 0; b < UCS_COPY_BACKEND_LAST; ++b) {
        if (!strcmp(name, ucs_copy_backend_name(b))) {
            model->engine[b] = e;
            return UCS_OK;
        }
    }
    return UCS_ERR_INVALID_PARAM;
}

ucs_status_t ucs_calib_model_read(const char *path, ucs_calib_model_t *model)
{
    unsigned found = 0, line_no = 0, i;
    char line[256], key[64];
    double a, b;
    FILE *f;
    int n;

    f = fopen(path, "r");
    if (f == NULL) {
        return UCS_ERR_NO_ELEM;
    }

    memset(model, 0, sizeof(*model));
    while (fgets(line, sizeof(line), f) != NULL) {
        ++line_no;
        if ((line[0] == '#') || (line[0] == '\n')) {
            continue;
        }

        if (!strncmp(line, "engine ", 7)) {
            if (ucs_calib_engine_line_read(line, model) != UCS_OK) {
                goto err_format;
            }
            continue;
        }

        n = sscanf(line, "%63s %lf %lf", key, &a, &b);
        if (n < 2) {
            goto err_format;
        }

        for (i = 0; i < UCS_CALIB_PAGES_LAST; ++i) {
            if (!strcmp(key, ucs_calib_pages_key[i]) && (n == 3)) {
                model->reg[i] = ucs_linear_func_make(a, b);
                found        |= UCS_BIT(i);
                break;
            }
        }
        if (i < UCS_CALIB_PAGES_LAST) {
            continue;
        }

        if (!strcmp(key, "dereg") && (n == 3)) {
            model->dereg = ucs_linear_func_make(a, b);
            found       |= UCS_BIT(2);
        } else if (!strcmp(key, "copy_fault") && (n == 3)) {
            model->copy_fault = ucs_linear_func_make(a, b);
        } else if (!strcmp(key, "xfer_fault") && (n == 3)) {
            model->xfer_fault = ucs_linear_func_make(a, b);
        } else if (!strcmp(key, "copy") && (n == 3) && (a > 0) && (b > 0) &&
                   (model->num_copy < UCS_CALIB_MAX_COPY_POINTS) &&
                   ((model->num_copy == 0) ||
                    (a > model->copy[model->num_copy - 1].size))) {
            model->copy[model->num_copy].size = (size_t)a;
            model->copy[model->num_copy].bw   = b;
            ++model->num_copy;
        } else if (!strcmp(key, "net_latency")) {
            model->net_latency = a;
        } else if (!strcmp(key, "net_bw") && (a > 0)) {
            model->net_bw = a;
            found        |= UCS_BIT(3);
        } else if (!strcmp(key, "net_gap")) {
            model->net_gap = a;
        } else if (!strcmp(key, "measure_time")) {
            model->measure_time = a;
        } else {
            goto err_format;
        }
    }
    fclose(f);

    if ((found != UCS_MASK(4)) || (model->num_copy == 0)) {
        ucs_error("calibration model %s is incomplete: it needs reg_resident,"
                  " reg_nonresident, dereg, net_bw and at least one copy "
                  "line", path);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;

err_format:
    ucs_error("calibration model %s:%u: cannot parse '%.*s'", path, line_no,
              (int)strcspn(line, "\n"), line);
    fclose(f);
    return UCS_ERR_INVALID_PARAM;
}
