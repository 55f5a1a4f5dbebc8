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
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* the last chunks of a message that are not acknowledged: rndv/sppln's
 * staging slots per side, an acknowledgment freeing a slot for a later
 * chunk */
#define UCS_CALIB_SP_UNACKED 3

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

/* bandwidth at @a size between two working-set points, linear in log(size)
 * (@a size between their sizes) */
static double ucs_calib_point_interp(const ucs_calib_copy_point_t *lo,
                                     const ucs_calib_copy_point_t *hi,
                                     size_t size)
{
    double f = log((double)size / lo->size) / log((double)hi->size / lo->size);

    return lo->bw + (f * (hi->bw - lo->bw));
}

double ucs_calib_copy_bw(const ucs_calib_model_t *model, size_t size)
{
    unsigned i;

    if (model->num_copy == 0) {
        return 1e10;
    }

    if (size <= model->copy[0].size) {
        return model->copy[0].bw;
    }

    for (i = 1; i < model->num_copy; ++i) {
        if (size <= model->copy[i].size) {
            return ucs_calib_point_interp(&model->copy[i - 1], &model->copy[i],
                                          size);
        }
    }

    return model->copy[model->num_copy - 1].bw;
}

/* bandwidth at @a size from the point @a lo on, through @a points above it
 * (constant past the last) */
static double ucs_calib_points_bw(ucs_calib_copy_point_t lo,
                                  const ucs_calib_copy_point_t *points,
                                  unsigned num, size_t size)
{
    unsigned i;

    if (size <= lo.size) {
        return lo.bw;
    }

    for (i = 0; i < num; ++i) {
        if (size <= points[i].size) {
            return ucs_calib_point_interp(&lo, &points[i], size);
        }
        lo = points[i];
    }
    return lo.bw;
}

double ucs_calib_net_bw(const ucs_calib_model_t *model, size_t size)
{
    ucs_calib_copy_point_t lo = {UCS_CALIB_NET_BW_SIZE, model->net_bw};

    return ucs_calib_points_bw(lo, model->net, model->num_net, size);
}

double ucs_calib_zcopy_time(const ucs_calib_model_t *model, size_t size)
{
    return model->net_gap + model->net_latency +
           (size / ucs_calib_net_bw(model, size));
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
 * Every chunk costs a put and (but for the last three) an acknowledgment,
 * two gaps. Started at the
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

/*
 * A message the staging slots hold goes through one staged copy: the
 * sender puts each sub-block once it is staged, whatever the chunk, and
 * never waits for a slot, so the superpipeline's small first chunks save
 * nothing there and its chunks cost an acknowledgment each. The model's
 * single copy (ucs_calib_bcopy_time()) is not pipelined, and the
 * superpipeline won from 256 KiB-1 MiB by it; measured (choice-matrix,
 * fresh, forced paths, two runs), one staged copy took 86-90 against
 * 101-104 us at 256 KiB on softverbs' default link and at 100 Gb/s,
 * 106-107 against 110-114 at 25 Gb/s, and 324-348 against 340-357 at
 * 1 MiB and 100 Gb/s.
 */
size_t ucs_calib_sp_from(const ucs_calib_derived_t *derived, size_t slots_bytes)
{
    return ucs_max(derived->sp_thresh, slots_bytes + 1);
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

/* A staged sender's time for @a size bytes composed of its parts: the
 * first chunk's copy and put are exposed; later copies overlap the puts of
 * earlier chunks, so the rest is bounded by the slower of the two, plus the
 * share of the faster one that the transfers keep the sender's core from
 * overlapping (net_cpu) */
static double ucs_calib_stage_time_composed(const ucs_calib_model_t *model,
                                            const ucs_calib_derived_t *derived,
                                            size_t size)
{
    size_t first  = ucs_min(size, ucs_calib_sp_first(derived->sp_c0, size));
    double t_wire = (double)(size - first) / model->net_bw;
    double t_copy = (double)(size - first) / ucs_calib_copy_bw(model, size);

    return (first / ucs_calib_copy_bw(model, first)) + (first / model->net_bw) +
           ucs_max(t_wire, t_copy) + (model->net_cpu * ucs_min(t_wire, t_copy));
}

double ucs_calib_stage_time(const ucs_calib_model_t *model,
                            const ucs_calib_derived_t *derived, size_t size)
{
    ucs_calib_copy_point_t lo;

    if ((size <= UCS_CALIB_NET_BW_SIZE) || (model->num_stage == 0)) {
        return ucs_calib_stage_time_composed(model, derived, size);
    }

    /* measured where the message outgrows the caches: the rate runs from
     * the composed one at the size the network's parts were measured with
     * through the stage points */
    lo.size = UCS_CALIB_NET_BW_SIZE;
    lo.bw   = lo.size / ucs_calib_stage_time_composed(model, derived, lo.size);
    return size / ucs_calib_points_bw(lo, model->stage, model->num_stage, size);
}

double ucs_calib_sp_time(const ucs_calib_model_t *model,
                         const ucs_calib_derived_t *derived, size_t size)
{
    size_t first = ucs_min(size, ucs_calib_sp_first(derived->sp_c0, size));
    size_t n     = ucs_calib_sp_num_chunks(derived, size);
    size_t puts  = ucs_div_round_up(size, ucs_max(derived->sp_sub, 1));
    double before_last;
    size_t sub, acks;

    /* the last put: of the last chunk, what the ones before left */
    before_last = (derived->sp_q > 1.0) ?
                  (first * (pow(derived->sp_q, n - 1) - 1.0) /
                   (derived->sp_q - 1.0)) :
                  ((double)first * (n - 1));
    before_last = ucs_min(before_last, (double)(size - 1));
    sub         = ucs_min(ucs_max(derived->sp_sub, 1),
                          size - (size_t)before_last);

    /* the sender's copies and puts; the receiver copies each sub-block out
     * as it lands, so only its copy of the last one is exposed. Every
     * sub-block is a put and every chunk but the last UCS_CALIB_SP_UNACKED
     * an acknowledgment: each costs a gap. */
    acks = (n > UCS_CALIB_SP_UNACKED) ? (n - UCS_CALIB_SP_UNACKED) : 0;
    return ucs_calib_stage_time(model, derived, size) +
           ((acks + ucs_max(puts, n)) * model->net_gap) + model->net_latency +
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

/* the superpipeline against zero-copy from a buffer registered already
 * (where it does not win, the single copy, whose chunks are no larger,
 * does not either: the stage points measure the staged sender) */
static int ucs_calib_cached_staged_wins(const ucs_calib_model_t *model,
                                        const ucs_calib_derived_t *derived,
                                        size_t size, int unused)
{
    return ucs_calib_sp_time(model, derived, size) <
           ucs_calib_zcopy_time(model, size);
}

static int ucs_calib_sp_wins(const ucs_calib_model_t *model,
                             const ucs_calib_derived_t *derived, size_t size,
                             int unused)
{
    return ucs_calib_sp_time(model, derived, size) <
           ucs_calib_bcopy_time(model, size);
}

static int ucs_calib_linear_measured(const ucs_linear_func_t *func)
{
    return (func->c > 0) || (func->m > 0);
}

int ucs_calib_fill_measured(const ucs_calib_model_t *model)
{
    return ucs_calib_linear_measured(&model->fill_populate) &&
           ucs_calib_linear_measured(&model->fill_uffd);
}

/* the copy of @a size bytes into pages just faulted in (fill_copy) */
static double
ucs_calib_fill_copy_time(const ucs_calib_model_t *model, size_t size)
{
    return ucs_calib_copy_time(model, size, UCS_CALIB_PAGES_RESIDENT) +
           ucs_linear_func_apply(model->fill_copy, size);
}

/* an untouched receive buffer of @a size bytes faulted in, then copied
 * into */
static double
ucs_calib_fill_populate_time(const ucs_calib_model_t *model, size_t size)
{
    return ucs_linear_func_apply(model->fill_populate, size) +
           ucs_calib_fill_copy_time(model, size);
}

double ucs_calib_fresh_recv_time(const ucs_calib_model_t *model, size_t size)
{
    if (!ucs_calib_fill_measured(model)) {
        return ucs_calib_copy_time(model, size, UCS_CALIB_PAGES_NONRESIDENT);
    }

    return ucs_min(ucs_linear_func_apply(model->fill_uffd, size),
                   ucs_calib_fill_populate_time(model, size));
}

/* an untouched receive buffer filled by userfaultfd, against faulting its
 * pages in and copying into them */
static int ucs_calib_fill_uffd_wins(const ucs_calib_model_t *model,
                                    const ucs_calib_derived_t *derived,
                                    size_t size, int unused)
{
    return ucs_linear_func_apply(model->fill_uffd, size) <
           ucs_calib_fill_populate_time(model, size);
}

/*
 * What the receiver of a first send pays more by zero-copy than through the
 * staging, its buffer taken to be as new as the sender's (untouched): it
 * registers the buffer and takes the first transfer's faults (reg time of
 * untouched pages), where a staged receiver fills the pages the cheaper of
 * its two ways, less the copy out of the staging that it pays into
 * resident pages too. The sender cannot see the receiver's buffer; a
 * receive buffer that is not new after all leaves the staged message one
 * pipelined copy dearer, while a new one received by zero-copy cost 6 us a
 * page on softverbs on a VM whose every copy into untouched pages traps to
 * the hypervisor (a NAS IS-like exchange of 8 MiB into new buffers took 2.5
 * times as long as staged). 0 where the model has no fill costs.
 */
static double
ucs_calib_first_recv_zcopy_extra(const ucs_calib_model_t *model, size_t size)
{
    double staged;

    if (!ucs_calib_fill_measured(model)) {
        return 0;
    }

    staged = ucs_calib_fresh_recv_time(model, size) -
             ucs_calib_copy_time(model, size, UCS_CALIB_PAGES_RESIDENT);
    return ucs_calib_reg_time(model, size, UCS_CALIB_PAGES_NONRESIDENT) -
           ucs_max(staged, 0.0);
}

static int ucs_calib_zcopy_wins(const ucs_calib_model_t *model,
                                const ucs_calib_derived_t *derived, size_t size,
                                int pages)
{
    /* the sender's side: the transfer from resident pages costs the same
     * both ways, and the extra of a first transfer from untouched pages is
     * in the reg time; then the receiver's */
    return (ucs_calib_reg_time(model, size, pages) +
            ucs_calib_first_recv_zcopy_extra(model, size)) <
           ucs_calib_copy_time(model, size, pages);
}

/*
 * The receiver of a message of @a size bytes into an untouched buffer, whose
 * sub-blocks have @a first bytes: from the RTR until the last byte is in
 * place, when it faults in the first @a ahead bytes from the RTR on and has
 * userfaultfd fill the rest as it lands. Faulting in may start at once;
 * placing a sub-block (a copy into faulted in pages, or userfaultfd's fill,
 * four times as long on the benches' VM) only once it landed, the first
 * after the RTR's latency, the sender's post (a gap), its time on the wire
 * and its latency. Each sub-block costs the receiver a gap as well (its
 * notification, its ACK). The receiver is the bottleneck, or it keeps up
 * with the wire and places the last sub-block once that landed (at 25 Gb/s
 * a fresh 4 MiB took 1383-1465 us faulted in ahead whole, 1434-1463 split);
 * userfaultfd's fixed cost is on the path either way (registered before
 * the RTR, unregistered at the end). A receiver whose core is @a busy with
 * other work (its own staged sends) is taken not to keep up.
 */
/* From the RTR until a sub-block of @a first bytes landed: the RTR's
 * latency, the sender's post (a gap), the sub-block's wire time and its
 * latency */
static double ucs_calib_fill_wait(const ucs_calib_model_t *model, size_t first)
{
    return (2 * model->net_latency) + model->net_gap +
           (first / ucs_calib_net_bw(model, first));
}

static double ucs_calib_fill_time(const ucs_calib_model_t *model, size_t size,
                                  size_t first, size_t ahead, int busy)
{
    double wait   = ucs_calib_fill_wait(model, first);
    double m_copy = ucs_calib_fill_copy_time(model, size) / size;
    size_t last   = size - ((ucs_div_round_up(size, first) - 1) * first);
    /* of the last sub-block, the bytes in faulted in pages */
    size_t last_ahead = (ahead > (size - last)) ? (ahead - (size - last)) : 0;
    double landed, work;

    work = ucs_max((ahead > 0) ?
                           ucs_linear_func_apply(model->fill_populate, ahead) :
                           0.0,
                   wait) +
           (ahead * m_copy) + ((size - ahead) * model->fill_uffd.m) +
           (ucs_div_round_up(size, first) * model->net_gap);
    if (busy) {
        landed = 0; /* a busy core does not keep up with the wire */
    } else {
        landed = wait + ((size - first) / ucs_calib_net_bw(model, size)) +
                 (last_ahead * m_copy) +
                 ((last - last_ahead) * model->fill_uffd.m);
    }

    return ucs_max(landed, work) + ((ahead < size) ? model->fill_uffd.c : 0.0);
}

size_t ucs_calib_fill_ahead(const ucs_calib_model_t *model, size_t size,
                            size_t sub, int busy)
{
    size_t first = ucs_min(size, ucs_max(sub, 1));
    double ahead;

    if (!ucs_calib_fill_measured(model) || (size == 0)) {
        return size;
    }

    /* what can be faulted in while the first sub-block is on its way: more
     * costs what userfaultfd would fill it for and its copy out, less
     * leaves the receiver waiting. Each byte of it then costs a copy into
     * faulted in pages instead of userfaultfd's fill: where that copy is
     * the dearer (fill_copy), the wait hides nothing worth faulting in */
    if ((ucs_calib_fill_copy_time(model, size) / size) >= model->fill_uffd.m) {
        ahead = 0;
    } else {
        ahead = (ucs_calib_fill_wait(model, first) - model->fill_populate.c) /
                ucs_max(model->fill_populate.m, 1e-15);
        ahead = ucs_min(ucs_max(ahead, 0.0), (double)size);
    }

    /* all of it, where userfaultfd's fixed cost is not worth it */
    if (ucs_calib_fill_time(model, size, first, size, busy) <=
        ucs_calib_fill_time(model, size, first, (size_t)ahead, busy)) {
        return size;
    }
    return (size_t)ahead;
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
    derived->cached_staged_thresh = ucs_calib_crossover(
            ucs_calib_cached_staged_wins, model, derived, 0);

    derived->fill_uffd_min =
            ucs_calib_fill_measured(model) ?
                    ucs_calib_crossover(ucs_calib_fill_uffd_wins, model,
                                        derived, 0) :
                    UCS_CALIB_SIZE_INF;
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


/*
 * Physical bounds of a model's values. A value outside them is not a
 * measurement but a typo, a corrupted file or a timing gone wrong, and what
 * follows from it breaks the selection: UCX asserts on negative or NaN
 * times and on bandwidths that are not positive and finite, and sizes
 * derived from 1e30 do not fit a size_t. A file holding one is refused; a
 * measured one is clamped (a difference of two noisy times can go negative,
 * e.g. a copy engine's overlap on a loaded host).
 */
static const ucs_calib_bound_t ucs_calib_bounds[] = {
        /* one operation's fixed cost (registration, a fault's start, latency,
     * gap, a copy's start): no device takes a second for one */
        [UCS_CALIB_VALUE_TIME] = {0.0, 1.0, "s"},
        /* cost per byte: 1 us a byte is 1 MB/s, slower than any memory or link
     * a registration or a copy is compared with */
        [UCS_CALIB_VALUE_PER_BYTE] = {0.0, 1e-6, "s/byte"},
        /* bandwidth of a copy or a link: 1 MB/s to 10 TB/s, ten times the
     * fastest memory of today; a zero or infinite one has no meaning */
        [UCS_CALIB_VALUE_BW] = {1e6, 1e13, "bytes/s"},
        /* share of a copy's time hidden by computing: none to all of it */
        [UCS_CALIB_VALUE_SHARE] = {0.0, 1.0, ""},
        /* working set of a copy point, whole bytes: one byte to 1 TiB, more than
     * any host copies at once and exact in a double */
        [UCS_CALIB_VALUE_SIZE] = {1.0, (double)UCS_TBYTE, "bytes"},
        /* how long the measurement took: informational, at most an hour */
        [UCS_CALIB_VALUE_DURATION] = {0.0, 3600.0, "s"}};

/* a model file is a few hundred bytes: a larger file is not a model */
#define UCS_CALIB_FILE_MAX 65536
/* and its lines are short */
#define UCS_CALIB_LINE_MAX 256
/* most tokens on a line ("engine <name> start post bw overlap cpu") */
#define UCS_CALIB_MAX_TOKENS 7
/* bytes of a bad line shown in an error, escaped */
#define UCS_CALIB_SHOW_MAX 64
/* and of a bad value */
#define UCS_CALIB_TOKEN_SHOW 24


const ucs_calib_bound_t *ucs_calib_value_bound(ucs_calib_value_t kind)
{
    return &ucs_calib_bounds[kind];
}

static int ucs_calib_value_valid(ucs_calib_value_t kind, double value)
{
    const ucs_calib_bound_t *b = &ucs_calib_bounds[kind];

    /* NaN fails both comparisons */
    if (!((value >= b->min) && (value <= b->max))) {
        return 0;
    }
    return (kind != UCS_CALIB_VALUE_SIZE) || (value == floor(value));
}

/* the first bad value of a model, clamping where asked */
typedef struct {
    int fix;
    char *err;
    size_t max;
    ucs_status_t status;
} ucs_calib_check_t;

static void ucs_calib_check_value(ucs_calib_check_t *check, const char *name,
                                  ucs_calib_value_t kind, double *value)
{
    const ucs_calib_bound_t *b = &ucs_calib_bounds[kind];
    double fixed;

    if ((check->status != UCS_OK) || ucs_calib_value_valid(kind, *value)) {
        return;
    }

    if (check->fix && !isnan(*value)) {
        fixed = ucs_min(ucs_max(*value, b->min), b->max);
        if (kind == UCS_CALIB_VALUE_SIZE) {
            fixed = floor(fixed);
        }
        ucs_debug("calib: measured %s %g is outside [%g, %g] %s: clamped to "
                  "%g",
                  name, *value, b->min, b->max, b->unit, fixed);
        *value = fixed;
        return;
    }

    ucs_snprintf_safe(check->err, check->max, "%s %g is not %sin [%g, %g]%s%s",
                      name, *value,
                      (kind == UCS_CALIB_VALUE_SIZE) ? "a whole number " : "",
                      b->min, b->max, (*b->unit != '\0') ? " " : "", b->unit);
    check->status = UCS_ERR_INVALID_PARAM;
}

static void ucs_calib_check_linear(ucs_calib_check_t *check, const char *name,
                                   ucs_linear_func_t *func)
{
    char field[64];

    ucs_snprintf_safe(field, sizeof(field), "%s fixed cost", name);
    ucs_calib_check_value(check, field, UCS_CALIB_VALUE_TIME, &func->c);
    ucs_snprintf_safe(field, sizeof(field), "%s cost per byte", name);
    ucs_calib_check_value(check, field, UCS_CALIB_VALUE_PER_BYTE, &func->m);
}

/* working-set points: sizes above @a min_size and ascending, bandwidths
 * within their bounds */
static ucs_status_t ucs_calib_check_points(ucs_calib_check_t *check,
                                           const char *name,
                                           ucs_calib_copy_point_t *points,
                                           unsigned num, size_t min_size)
{
    size_t prev = min_size;
    char field[64];
    double size;
    unsigned i;

    for (i = 0; i < num; ++i) {
        ucs_snprintf_safe(field, sizeof(field), "%s %u size", name, i);
        size = points[i].size;
        ucs_calib_check_value(check, field, UCS_CALIB_VALUE_SIZE, &size);
        points[i].size = size;
        ucs_snprintf_safe(field, sizeof(field), "%s %u bandwidth", name, i);
        ucs_calib_check_value(check, field, UCS_CALIB_VALUE_BW, &points[i].bw);
        if ((check->status == UCS_OK) && (points[i].size <= prev) &&
            ((i > 0) || (min_size > 0))) {
            ucs_snprintf_safe(check->err, check->max,
                              "%s sizes must ascend, above %zu (%zu after "
                              "%zu)",
                              name, min_size, points[i].size, prev);
            check->status = UCS_ERR_INVALID_PARAM;
        }
        if (check->status != UCS_OK) {
            break;
        }
        prev = points[i].size;
    }
    return check->status;
}

ucs_status_t
ucs_calib_model_check(ucs_calib_model_t *model, int fix, char *err, size_t max)
{
    ucs_calib_check_t check = {fix, err, max, UCS_OK};
    char field[64];
    ucs_calib_engine_t *e;
    unsigned i;

    for (i = 0; i < UCS_CALIB_PAGES_LAST; ++i) {
        ucs_calib_check_linear(&check, ucs_calib_pages_key[i], &model->reg[i]);
    }
    ucs_calib_check_linear(&check, "dereg", &model->dereg);
    ucs_calib_check_linear(&check, "copy_fault", &model->copy_fault);
    ucs_calib_check_linear(&check, "xfer_fault", &model->xfer_fault);
    ucs_calib_check_linear(&check, "fill_populate", &model->fill_populate);
    ucs_calib_check_linear(&check, "fill_uffd", &model->fill_uffd);
    ucs_calib_check_linear(&check, "fill_copy", &model->fill_copy);

    if ((model->num_copy == 0) ||
        (model->num_copy > UCS_CALIB_MAX_COPY_POINTS)) {
        ucs_snprintf_safe(err, max, "%u copy points, need 1 to %d",
                          model->num_copy, UCS_CALIB_MAX_COPY_POINTS);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((model->num_net > UCS_CALIB_MAX_NET_POINTS) ||
        (model->num_stage > UCS_CALIB_MAX_NET_POINTS)) {
        ucs_snprintf_safe(err, max, "%u net and %u stage points, at most %d",
                          model->num_net, model->num_stage,
                          UCS_CALIB_MAX_NET_POINTS);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((ucs_calib_check_points(&check, "copy", model->copy, model->num_copy,
                                0) != UCS_OK) ||
        (ucs_calib_check_points(&check, "net", model->net, model->num_net,
                                UCS_CALIB_NET_BW_SIZE) != UCS_OK) ||
        (ucs_calib_check_points(&check, "stage", model->stage, model->num_stage,
                                UCS_CALIB_NET_BW_SIZE) != UCS_OK)) {
        return check.status;
    }

    ucs_calib_check_value(&check, "net_latency", UCS_CALIB_VALUE_TIME,
                          &model->net_latency);
    ucs_calib_check_value(&check, "net_bw", UCS_CALIB_VALUE_BW, &model->net_bw);
    ucs_calib_check_value(&check, "net_gap", UCS_CALIB_VALUE_TIME,
                          &model->net_gap);
    ucs_calib_check_value(&check, "net_frag_gap", UCS_CALIB_VALUE_TIME,
                          &model->net_frag_gap);
    ucs_calib_check_value(&check, "net_cpu", UCS_CALIB_VALUE_SHARE,
                          &model->net_cpu);

    for (i = 0; i < UCS_COPY_BACKEND_LAST; ++i) {
        e = &model->engine[i];
        if (e->bw == 0) {
            /* not measured: nothing else may claim otherwise */
            memset(e, 0, sizeof(*e));
            continue;
        }
        ucs_snprintf_safe(field, sizeof(field), "engine %s start",
                          ucs_copy_backend_name(i));
        ucs_calib_check_value(&check, field, UCS_CALIB_VALUE_TIME, &e->start);
        ucs_snprintf_safe(field, sizeof(field), "engine %s post",
                          ucs_copy_backend_name(i));
        ucs_calib_check_value(&check, field, UCS_CALIB_VALUE_TIME, &e->post);
        ucs_snprintf_safe(field, sizeof(field), "engine %s bandwidth",
                          ucs_copy_backend_name(i));
        ucs_calib_check_value(&check, field, UCS_CALIB_VALUE_BW, &e->bw);
        ucs_snprintf_safe(field, sizeof(field), "engine %s overlap",
                          ucs_copy_backend_name(i));
        ucs_calib_check_value(&check, field, UCS_CALIB_VALUE_SHARE,
                              &e->overlap);
        ucs_snprintf_safe(field, sizeof(field), "engine %s cpu",
                          ucs_copy_backend_name(i));
        ucs_calib_check_value(&check, field, UCS_CALIB_VALUE_PER_BYTE, &e->cpu);
    }

    ucs_calib_check_value(&check, "measure_time", UCS_CALIB_VALUE_DURATION,
                          &model->measure_time);
    return check.status;
}

void ucs_calib_escape(const void *data, size_t length, char *buf, size_t max)
{
    const unsigned char *p = data;
    size_t i, pos = 0;
    char esc[5];

    if (max == 0) {
        return;
    }

    for (i = 0; i < length; ++i) {
        if ((p[i] >= 0x20) && (p[i] < 0x7f) && (p[i] != '\\')) {
            esc[0] = p[i];
            esc[1] = '\0';
        } else {
            ucs_snprintf_safe(esc, sizeof(esc), "\\x%02x", p[i]);
        }
        if ((pos + strlen(esc)) >= max) {
            break;
        }
        memcpy(buf + pos, esc, strlen(esc));
        pos += strlen(esc);
    }
    buf[pos] = '\0';
}

void ucs_calib_model_print(const ucs_calib_model_t *model, FILE *stream)
{
    const ucs_calib_engine_t *e;
    unsigned i;

    fprintf(stream, "# ucx-hcr cost model: seconds = c + m * bytes; "
                    "bytes/s\n"
                    "# copy, net, stage: <working set bytes> <bytes/s>\n"
                    "# engine <backend> start post bw overlap "
                    "cpu_per_byte\n");
    for (i = 0; i < UCS_CALIB_PAGES_LAST; ++i) {
        fprintf(stream, "%s %.9e %.9e\n", ucs_calib_pages_key[i],
                model->reg[i].c, model->reg[i].m);
    }
    fprintf(stream, "dereg %.9e %.9e\n", model->dereg.c, model->dereg.m);
    fprintf(stream, "copy_fault %.9e %.9e\n", model->copy_fault.c,
            model->copy_fault.m);
    fprintf(stream, "xfer_fault %.9e %.9e\n", model->xfer_fault.c,
            model->xfer_fault.m);
    fprintf(stream, "fill_populate %.9e %.9e\n", model->fill_populate.c,
            model->fill_populate.m);
    fprintf(stream, "fill_uffd %.9e %.9e\n", model->fill_uffd.c,
            model->fill_uffd.m);
    fprintf(stream, "fill_copy %.9e %.9e\n", model->fill_copy.c,
            model->fill_copy.m);
    for (i = 0; i < model->num_copy; ++i) {
        fprintf(stream, "copy %zu %.9e\n", model->copy[i].size,
                model->copy[i].bw);
    }
    fprintf(stream, "net_latency %.9e\n", model->net_latency);
    fprintf(stream, "net_bw %.9e\n", model->net_bw);
    for (i = 0; i < model->num_net; ++i) {
        fprintf(stream, "net %zu %.9e\n", model->net[i].size, model->net[i].bw);
    }
    for (i = 0; i < model->num_stage; ++i) {
        fprintf(stream, "stage %zu %.9e\n", model->stage[i].size,
                model->stage[i].bw);
    }
    fprintf(stream, "net_gap %.9e\n", model->net_gap);
    fprintf(stream, "net_frag_gap %.9e\n", model->net_frag_gap);
    fprintf(stream, "net_cpu %.6f\n", model->net_cpu);
    for (i = 0; i < UCS_COPY_BACKEND_LAST; ++i) {
        e = &model->engine[i];
        if (e->bw > 0) {
            fprintf(stream, "engine %s %.9e %.9e %.9e %.6f %.9e\n",
                    ucs_copy_backend_name(i), e->start, e->post, e->bw,
                    e->overlap, e->cpu);
        }
    }
    fprintf(stream, "measure_time %.9e\n", model->measure_time);
}

/*
 * Write aside and rename, so that a reader never sees half a model. The
 * temporary file comes from mkstemp() (a name nobody could plant, mode
 * 0600) in the target's directory, so the rename stays in one file system.
 */
ucs_status_t
ucs_calib_model_write(const ucs_calib_model_t *model, const char *path)
{
    ucs_calib_model_t checked = *model;
    char tmp_path[PATH_MAX], err[128];
    FILE *f;
    int fd, ret;

    /* never write what the reader would refuse */
    if (ucs_calib_model_check(&checked, 0, err, sizeof(err)) != UCS_OK) {
        ucs_debug("calib: not writing %s: %s", path, err);
        return UCS_ERR_INVALID_PARAM;
    }

    ucs_snprintf_safe(tmp_path, sizeof(tmp_path), "%s.XXXXXX", path);
    fd = mkstemp(tmp_path);
    if (fd < 0) {
        ucs_debug("calib: cannot create a file next to %s: %m", path);
        return UCS_ERR_IO_ERROR;
    }

    f = fdopen(fd, "w");
    if (f == NULL) {
        ucs_debug("calib: fdopen(%s) failed: %m", tmp_path);
        close(fd);
        unlink(tmp_path);
        return UCS_ERR_IO_ERROR;
    }

    ucs_calib_model_print(model, f);
    ret = ferror(f);
    if ((fclose(f) != 0) || (ret != 0) || (rename(tmp_path, path) != 0)) {
        ucs_debug("calib: cannot write %s: %m", path);
        unlink(tmp_path);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}


/* keys of lines with a linear function: "<key> c m" */
static ucs_linear_func_t *ucs_calib_linear_field(ucs_calib_model_t *model,
                                                 const char *key,
                                                 unsigned *bit_p)
{
    unsigned i;

    for (i = 0; i < UCS_CALIB_PAGES_LAST; ++i) {
        if (!strcmp(key, ucs_calib_pages_key[i])) {
            *bit_p = UCS_BIT(i);
            return &model->reg[i];
        }
    }

    *bit_p = 0;
    if (!strcmp(key, "dereg")) {
        *bit_p = UCS_BIT(UCS_CALIB_PAGES_LAST);
        return &model->dereg;
    } else if (!strcmp(key, "copy_fault")) {
        return &model->copy_fault;
    } else if (!strcmp(key, "xfer_fault")) {
        return &model->xfer_fault;
    } else if (!strcmp(key, "fill_populate")) {
        return &model->fill_populate;
    } else if (!strcmp(key, "fill_uffd")) {
        return &model->fill_uffd;
    } else if (!strcmp(key, "fill_copy")) {
        return &model->fill_copy;
    }
    return NULL;
}

/* the keys a model must have: reg_*, dereg, net_bw */
#define UCS_CALIB_FOUND_NET_BW UCS_BIT(UCS_CALIB_PAGES_LAST + 1)
#define UCS_CALIB_FOUND_ALL    UCS_MASK(UCS_CALIB_PAGES_LAST + 2)

/* a number and nothing else */
static int ucs_calib_parse_double(const char *token, double *value)
{
    char *end;

    errno  = 0;
    *value = strtod(token, &end);
    return (end != token) && (*end == '\0');
}

/* a "copy" or "net" line: one more working-set point, above @a min_size
 * and the points before */
static ucs_status_t
ucs_calib_parse_point(ucs_calib_check_t *check, const char *name, double size,
                      double bw, size_t min_size, unsigned max_num,
                      ucs_calib_copy_point_t *points, unsigned *num_p)
{
    char field[32];

    ucs_snprintf_safe(field, sizeof(field), "%s size", name);
    ucs_calib_check_value(check, field, UCS_CALIB_VALUE_SIZE, &size);
    ucs_snprintf_safe(field, sizeof(field), "%s bandwidth", name);
    ucs_calib_check_value(check, field, UCS_CALIB_VALUE_BW, &bw);
    if (check->status != UCS_OK) {
        return check->status;
    }
    if (*num_p == max_num) {
        ucs_snprintf_safe(check->err, check->max, "more than %u %s lines",
                          max_num, name);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((size <= min_size) ||
        ((*num_p > 0) && (size <= points[*num_p - 1].size))) {
        ucs_snprintf_safe(check->err, check->max,
                          "%s sizes must ascend, above %zu", name, min_size);
        return UCS_ERR_INVALID_PARAM;
    }
    points[*num_p].size = (size_t)size;
    points[*num_p].bw   = bw;
    ++(*num_p);
    return UCS_OK;
}

/* one line, split into tokens; err says what is wrong with it */
static ucs_status_t ucs_calib_parse_line(char **tok, unsigned ntok,
                                         ucs_calib_model_t *model,
                                         unsigned *found, char *err, size_t max)
{
    static const struct {
        const char *name;
        ucs_calib_value_t kind;
    } engine_fields[]       = {{"engine start", UCS_CALIB_VALUE_TIME},
                               {"engine post", UCS_CALIB_VALUE_TIME},
                               {"engine bandwidth", UCS_CALIB_VALUE_BW},
                               {"engine overlap", UCS_CALIB_VALUE_SHARE},
                               {"engine cpu", UCS_CALIB_VALUE_PER_BYTE}};
    ucs_calib_check_t check = {0, err, max, UCS_OK};
    char shown[4 * UCS_CALIB_TOKEN_SHOW + 1];
    double v[UCS_CALIB_MAX_TOKENS];
    ucs_calib_engine_t engine;
    ucs_linear_func_t *func;
    unsigned i, first, bit;
    ucs_copy_backend_t b;
    const char *key = tok[0];

    /* engine lines name the backend before their numbers */
    first = !strcmp(key, "engine") ? 2 : 1;
    for (i = first; i < ntok; ++i) {
        if (!ucs_calib_parse_double(tok[i], &v[i])) {
            ucs_calib_escape(tok[i], strlen(tok[i]), shown, sizeof(shown));
            ucs_snprintf_safe(err, max, "value %u, '%s', is not a number",
                              i - first + 1, shown);
            return UCS_ERR_INVALID_PARAM;
        }
    }

#define UCS_CALIB_NEED_VALUES(_n)                                              \
    if (ntok != (_n) + first) {                                                \
        ucs_snprintf_safe(err, max, "%s takes %d value%s, not %u", key, (_n),  \
                          ((_n) > 1) ? "s" : "", ntok - first);                \
        return UCS_ERR_INVALID_PARAM;                                          \
    }

    func = ucs_calib_linear_field(model, key, &bit);
    if (func != NULL) {
        UCS_CALIB_NEED_VALUES(2);
        *func = ucs_linear_func_make(v[1], v[2]);
        *found |= bit;
        ucs_calib_check_linear(&check, key, func);
    } else if (!strcmp(key, "copy")) {
        UCS_CALIB_NEED_VALUES(2);
        return ucs_calib_parse_point(&check, key, v[1], v[2], 0,
                                     UCS_CALIB_MAX_COPY_POINTS, model->copy,
                                     &model->num_copy);
    } else if (!strcmp(key, "net")) {
        UCS_CALIB_NEED_VALUES(2);
        return ucs_calib_parse_point(&check, key, v[1], v[2],
                                     UCS_CALIB_NET_BW_SIZE,
                                     UCS_CALIB_MAX_NET_POINTS, model->net,
                                     &model->num_net);
    } else if (!strcmp(key, "stage")) {
        UCS_CALIB_NEED_VALUES(2);
        return ucs_calib_parse_point(&check, key, v[1], v[2],
                                     UCS_CALIB_NET_BW_SIZE,
                                     UCS_CALIB_MAX_NET_POINTS, model->stage,
                                     &model->num_stage);
    } else if (!strcmp(key, "net_latency")) {
        UCS_CALIB_NEED_VALUES(1);
        model->net_latency = v[1];
        ucs_calib_check_value(&check, key, UCS_CALIB_VALUE_TIME,
                              &model->net_latency);
    } else if (!strcmp(key, "net_bw")) {
        UCS_CALIB_NEED_VALUES(1);
        model->net_bw = v[1];
        *found |= UCS_CALIB_FOUND_NET_BW;
        ucs_calib_check_value(&check, key, UCS_CALIB_VALUE_BW, &model->net_bw);
    } else if (!strcmp(key, "net_gap")) {
        UCS_CALIB_NEED_VALUES(1);
        model->net_gap = v[1];
        ucs_calib_check_value(&check, key, UCS_CALIB_VALUE_TIME,
                              &model->net_gap);
    } else if (!strcmp(key, "net_frag_gap")) {
        UCS_CALIB_NEED_VALUES(1);
        model->net_frag_gap = v[1];
        ucs_calib_check_value(&check, key, UCS_CALIB_VALUE_TIME,
                              &model->net_frag_gap);
    } else if (!strcmp(key, "net_cpu")) {
        UCS_CALIB_NEED_VALUES(1);
        model->net_cpu = v[1];
        ucs_calib_check_value(&check, key, UCS_CALIB_VALUE_SHARE,
                              &model->net_cpu);
    } else if (!strcmp(key, "measure_time")) {
        UCS_CALIB_NEED_VALUES(1);
        model->measure_time = v[1];
        ucs_calib_check_value(&check, key, UCS_CALIB_VALUE_DURATION,
                              &model->measure_time);
    } else if (!strcmp(key, "engine")) {
        UCS_CALIB_NEED_VALUES(5);
        for (b = 0; b < UCS_COPY_BACKEND_LAST; ++b) {
            if (!strcmp(tok[1], ucs_copy_backend_name(b))) {
                break;
            }
        }
        if (b == UCS_COPY_BACKEND_LAST) {
            ucs_calib_escape(tok[1], strlen(tok[1]), shown, sizeof(shown));
            ucs_snprintf_safe(err, max, "unknown copy engine backend '%s'",
                              shown);
            return UCS_ERR_INVALID_PARAM;
        }
        for (i = 0; i < ucs_static_array_size(engine_fields); ++i) {
            ucs_calib_check_value(&check, engine_fields[i].name,
                                  engine_fields[i].kind, &v[i + 2]);
        }
        engine.start     = v[2];
        engine.post      = v[3];
        engine.bw        = v[4];
        engine.overlap   = v[5];
        engine.cpu       = v[6];
        model->engine[b] = engine;
    } else {
        ucs_snprintf_safe(err, max, "an unknown key");
        return UCS_ERR_INVALID_PARAM;
    }
#undef UCS_CALIB_NEED_VALUES

    return check.status;
}

/* split a line at blanks; 0 tokens for a blank line or a comment */
static unsigned ucs_calib_tokenize(char *line, char **tok, unsigned max)
{
    unsigned ntok = 0;
    char *save    = NULL;
    char *t;

    for (t = strtok_r(line, " \t\r", &save); t != NULL;
         t = strtok_r(NULL, " \t\r", &save)) {
        if ((ntok == 0) && (t[0] == '#')) {
            return 0;
        }
        if (ntok == max) {
            return max + 1;
        }
        tok[ntok++] = t;
    }
    return ntok;
}

ucs_status_t
ucs_calib_model_read_fd(int fd, const char *name, ucs_calib_model_t *model)
{
    char err[160], shown[4 * UCS_CALIB_SHOW_MAX + 1];
    char *buf, *line, *next, *tok[UCS_CALIB_MAX_TOKENS];
    char copy[UCS_CALIB_LINE_MAX + 1];
    unsigned found = 0, line_no = 0, ntok;
    ucs_status_t status;
    size_t length = 0, line_len;
    struct stat st;
    ssize_t ret;

    if (fstat(fd, &st) != 0) {
        ucs_error("calibration model %s: fstat failed: %m", name);
        return UCS_ERR_IO_ERROR;
    }

    /* a FIFO, a device or a directory is not a model (and a FIFO would
     * block a reader that waited for its writer) */
    if (!S_ISREG(st.st_mode)) {
        ucs_error("calibration model %s is not a regular file", name);
        return UCS_ERR_INVALID_PARAM;
    }
    if (st.st_size > UCS_CALIB_FILE_MAX) {
        ucs_error("calibration model %s has %lld bytes, more than a model's "
                  "%d",
                  name, (long long)st.st_size, UCS_CALIB_FILE_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    buf = ucs_malloc(UCS_CALIB_FILE_MAX + 1, "calib_model_file");
    if (buf == NULL) {
        ucs_error("calibration model %s: no memory to read it", name);
        return UCS_ERR_NO_MEMORY;
    }

    /* the file may have grown since fstat: read at most the limit */
    do {
        ret = read(fd, buf + length, UCS_CALIB_FILE_MAX + 1 - length);
        if (ret > 0) {
            length += ret;
        }
    } while (((ret > 0) && (length <= UCS_CALIB_FILE_MAX)) ||
             ((ret < 0) && (errno == EINTR)));
    if (ret < 0) {
        ucs_error("calibration model %s: read failed: %m", name);
        status = UCS_ERR_IO_ERROR;
        goto out;
    } else if (length > UCS_CALIB_FILE_MAX) {
        ucs_error("calibration model %s has more than a model's %d bytes", name,
                  UCS_CALIB_FILE_MAX);
        status = UCS_ERR_INVALID_PARAM;
        goto out;
    }
    buf[length] = '\0';

    memset(model, 0, sizeof(*model));
    for (line = buf; line < (buf + length); line = next) {
        ++line_no;
        next     = memchr(line, '\n', buf + length - line);
        line_len = (next != NULL) ? (next - line) : (buf + length - line);
        next     = line + line_len + 1;

        if (memchr(line, '\0', line_len) != NULL) {
            ucs_snprintf_safe(err, sizeof(err), "a NUL byte");
            status = UCS_ERR_INVALID_PARAM;
            goto err_line;
        } else if (line_len > UCS_CALIB_LINE_MAX) {
            ucs_snprintf_safe(err, sizeof(err), "a line longer than %d bytes",
                              UCS_CALIB_LINE_MAX);
            status = UCS_ERR_INVALID_PARAM;
            goto err_line;
        }

        memcpy(copy, line, line_len);
        copy[line_len] = '\0';
        ntok           = ucs_calib_tokenize(copy, tok, UCS_CALIB_MAX_TOKENS);
        if (ntok == 0) {
            continue;
        } else if (ntok > UCS_CALIB_MAX_TOKENS) {
            ucs_snprintf_safe(err, sizeof(err), "more than %d fields",
                              UCS_CALIB_MAX_TOKENS);
            status = UCS_ERR_INVALID_PARAM;
            goto err_line;
        }

        status = ucs_calib_parse_line(tok, ntok, model, &found, err,
                                      sizeof(err));
        if (status != UCS_OK) {
            goto err_line;
        }
    }

    if ((found != UCS_CALIB_FOUND_ALL) || (model->num_copy == 0)) {
        ucs_error("calibration model %s is incomplete: it needs reg_resident,"
                  " reg_nonresident, dereg, net_bw and at least one copy "
                  "line",
                  name);
        status = UCS_ERR_INVALID_PARAM;
        goto out;
    }

    /* each line was checked; this checks what lines cannot (none today) */
    status = ucs_calib_model_check(model, 0, err, sizeof(err));
    if (status != UCS_OK) {
        ucs_error("calibration model %s: %s", name, err);
    }
    goto out;

err_line:
    /* the file's bytes, escaped: a terminal must not interpret them */
    ucs_calib_escape(line, ucs_min(line_len, UCS_CALIB_SHOW_MAX), shown,
                     sizeof(shown));
    ucs_error("calibration model %s:%u: %s in '%s%s'", name, line_no, err,
              shown, (line_len > UCS_CALIB_SHOW_MAX) ? "..." : "");
out:
    ucs_free(buf);
    return status;
}

ucs_status_t ucs_calib_model_read(const char *path, ucs_calib_model_t *model)
{
    ucs_status_t status;
    int fd;

    /* O_NONBLOCK: opening a FIFO must not wait for a writer (the file is
     * then refused as not regular) */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        return UCS_ERR_NO_ELEM;
    }

    status = ucs_calib_model_read_fd(fd, path, model);
    close(fd);
    return status;
}
