/*
 * Cost calibration: the model's fitting, critical sizes and file form, and,
 * on softverbs, what hcr measures and publishes (md reg_cost, iface
 * attributes), the cache, the modes and a hand-written model.
 */
#define _GNU_SOURCE
#include "th_ucx.h"

#include <ucs/calib/calib.h>

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALIB_DEV "softverbs0"

static int calib_close(double a, double b, double rel)
{
    return fabs(a - b) <= (rel * fabs(b));
}

/* a model with one copy bandwidth, registration c + m * bytes */
static void calib_flat_model(ucs_calib_model_t *m, double reg_c, double reg_m,
                             double copy_bw)
{
    memset(m, 0, sizeof(*m));
    m->reg[UCS_CALIB_PAGES_RESIDENT]    = ucs_linear_func_make(reg_c, reg_m);
    m->reg[UCS_CALIB_PAGES_NONRESIDENT] = ucs_linear_func_make(reg_c, reg_m);
    m->num_copy    = 1;
    m->copy[0].size = 4096;
    m->copy[0].bw   = copy_bw;
    m->net_bw       = copy_bw / 2;
    m->net_latency  = 1e-6;
    m->net_gap      = 1e-7;
}

/* fit c + m * x at x = 4 KiB .. 4 MiB (factors of 4), each point scaled by
 * its scatter factor */
static ucs_linear_func_t calib_fit_scattered(double c, double m,
                                             const double *scatter)
{
    double x[6], y[6];
    unsigned i;

    for (i = 0; i < 6; ++i) {
        x[i] = 4096 << (2 * i);
        y[i] = (c + (m * x[i])) * scatter[i];
    }
    return ucs_calib_fit(x, y, 6);
}

TH_TEST(calib, fit_recovers_line)
{
    /* +-1% alternating, as measurements scatter */
    static const double scatter[] = {0.99, 1.01, 0.99, 1.01, 0.99, 1.01};
    const double c = 4e-6, m = 7e-11;
    double x[6], y[6];
    ucs_linear_func_t f;
    unsigned i;

    f = calib_fit_scattered(c, m, scatter);
    TH_ASSERT(calib_close(f.m, m, 0.05));
    TH_ASSERT(calib_close(f.c, c, 0.25));

    /* a falling line is noise around a constant: no negative slope */
    for (i = 0; i < 6; ++i) {
        x[i] = 4096 << (2 * i);
        y[i] = 1e-5 - (1e-12 * x[i]);
    }
    f = ucs_calib_fit(x, y, 6);
    TH_ASSERT_DBL(f.m, ==, 0.0);
    TH_ASSERT_DBL(f.c, >, 0.0);
}

/* a few percent of scatter at 4 MiB is more than the whole fixed cost: the
 * fit must take the fixed cost from the small sizes (an unweighted fit is
 * 38% off here) */
TH_TEST(calib, fit_fixed_cost_from_small_sizes)
{
    static const double scatter[] = {1.02, 0.98, 1.02, 0.98, 1.05, 0.97};
    const double c = 4e-6, m = 1e-10;
    ucs_linear_func_t f;

    f = calib_fit_scattered(c, m, scatter);
    TH_ASSERT(calib_close(f.c, c, 0.1));
    TH_ASSERT(calib_close(f.m, m, 0.05));
}

TH_TEST(calib, crossover_matches_model)
{
    ucs_calib_derived_t d;
    ucs_calib_model_t m;
    double expected;
    size_t t;

    /* copy 0.1 ns/B, registration 20 us + 0.05 ns/B: equal at 400 KB */
    calib_flat_model(&m, 20e-6, 0.05e-9, 10e9);
    expected = 20e-6 / (1.0 / 10e9 - 0.05e-9);
    ucs_calib_derive(&m, &d);
    t = d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT];
    TH_ASSERT(calib_close((double)t, expected, 0.1));
    /* registering wins above the threshold, copying below it */
    TH_ASSERT_DBL(ucs_calib_reg_time(&m, t * 1.1, UCS_CALIB_PAGES_RESIDENT),
                  <, ucs_calib_copy_time(&m, t * 1.1,
                                         UCS_CALIB_PAGES_RESIDENT));
    TH_ASSERT_DBL(ucs_calib_reg_time(&m, t / 1.2, UCS_CALIB_PAGES_RESIDENT),
                  >, ucs_calib_copy_time(&m, t / 1.2,
                                         UCS_CALIB_PAGES_RESIDENT));

    /* a dearer fixed cost moves the threshold up in proportion */
    calib_flat_model(&m, 60e-6, 0.05e-9, 10e9);
    ucs_calib_derive(&m, &d);
    TH_ASSERT(calib_close((double)d.zcopy_thresh[0], 3 * expected, 0.1));

    /* registering per byte dearer than copying: never worth it */
    calib_flat_model(&m, 1e-6, 0.2e-9, 10e9);
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.zcopy_thresh[0], UCS_CALIB_SIZE_INF);

    /* a network slower than the copy lets chunks grow by their ratio */
    calib_flat_model(&m, 1e-6, 0, 10e9);
    m.net_bw = 2.5e9;
    ucs_calib_derive(&m, &d);
    TH_ASSERT(calib_close(d.sp_q, 4.0, 1e-9));
    TH_ASSERT_GE(d.sp_c0, 4096);
}

/* calib_flat_model() with the costs of filling untouched receive buffers:
 * faulting pages in 1 us + 0.25 ns/B, userfaultfd 5 us + 0.21 ns/B (the
 * benches' VM), a copy of 0.05 ns/B (20 GB/s) and a network of net_bw */
static void calib_fill_model(ucs_calib_model_t *m, double net_bw)
{
    calib_flat_model(m, 4e-6, 0.1e-9, 20e9);
    m->net_bw        = net_bw;
    m->net_latency   = 1e-6;
    m->net_gap       = 2e-6;
    m->fill_populate = ucs_linear_func_make(1e-6, 0.25e-9);
    m->fill_uffd     = ucs_linear_func_make(5e-6, 0.21e-9);
}

/* userfaultfd fills untouched pages from where its fixed cost is paid by
 * what it saves per byte (no zeroing, no copy afterwards) */
TH_TEST(calib, fill_uffd_min_matches_model)
{
    /* saves 0.25 + 0.05 - 0.21 = 0.09 ns/B for 4 us more: 44 KB */
    const double expected = (5e-6 - 1e-6) / (0.09e-9);
    ucs_calib_derived_t d;
    ucs_calib_model_t m;

    calib_fill_model(&m, 12.5e9);
    TH_ASSERT(ucs_calib_fill_measured(&m));
    ucs_calib_derive(&m, &d);
    TH_ASSERT(calib_close((double)d.fill_uffd_min, expected, 0.1));

    /* dearer per byte than faulting in and copying: never */
    m.fill_uffd = ucs_linear_func_make(5e-6, 0.31e-9);
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.fill_uffd_min, UCS_CALIB_SIZE_INF);

    /* not measured (a model file of an older version): never */
    m.fill_uffd = ucs_linear_func_make(0, 0);
    TH_ASSERT(!ucs_calib_fill_measured(&m));
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.fill_uffd_min, UCS_CALIB_SIZE_INF);
}

/* A staged receiver's copy into new pages is the cheaper of its two fills,
 * whatever a page fault costs; a model without fill costs falls back to a
 * copy that faults each page in */
TH_TEST(calib, fresh_recv_time_is_the_cheaper_fill)
{
    const size_t size = 1024 * 1024;
    ucs_calib_model_t m;
    double t;

    calib_fill_model(&m, 3e9);
    m.copy_fault = ucs_linear_func_make(0, 3.1e-9); /* 12.7 us a page */

    /* populate 1 us + 0.25 ns/B and a copy 0.05 ns/B, against userfaultfd
     * 5 us + 0.21 ns/B: userfaultfd from 44 KB */
    t = ucs_calib_fresh_recv_time(&m, size);
    th_log("%zu bytes: %.1f us", size, t * 1e6);
    TH_ASSERT(calib_close(t, 5e-6 + (0.21e-9 * size), 1e-6));
    t = ucs_calib_fresh_recv_time(&m, 16384);
    TH_ASSERT(calib_close(t, 1e-6 + (0.30e-9 * 16384), 1e-6));

    /* a dear first write into faulted-in pages: userfaultfd at any size */
    m.fill_copy = ucs_linear_func_make(0, 1.1e-9);
    t           = ucs_calib_fresh_recv_time(&m, 16384);
    TH_ASSERT(calib_close(t, 5e-6 + (0.21e-9 * 16384), 1e-6));

    /* no fill costs: the copy with its page faults */
    m.fill_uffd = ucs_linear_func_make(0, 0);
    t           = ucs_calib_fresh_recv_time(&m, size);
    TH_ASSERT(calib_close(t, (0.05e-9 + 3.1e-9) * size, 1e-6));
}

/* A copy into pages the kernel has just faulted in that costs more than
 * into resident ones (fill_copy: a VM that shadows the guest's page
 * tables traps the first write to each page from user mode) moves the
 * receiver to userfaultfd, whose kernel copy takes no such trap */
TH_TEST(calib, fill_copy_counts_the_first_write)
{
    const size_t sub = 256 * 1024, size = 4 * 1024 * 1024;
    /* saves 0.25 + 0.05 + 1.1 - 0.21 = 1.19 ns/B for 4 us more: 3.4 KB */
    const double expected = (5e-6 - 1e-6) / (1.19e-9);
    ucs_calib_derived_t d;
    ucs_calib_model_t m;

    calib_fill_model(&m, 12.5e9);
    ucs_calib_derive(&m, &d);
    TH_ASSERT_GT(d.fill_uffd_min, 40000);
    TH_ASSERT_GT(ucs_calib_fill_ahead(&m, size, sub, 0), 0);

    m.fill_copy = ucs_linear_func_make(0, 1.1e-9); /* 4.5 us a page */
    ucs_calib_derive(&m, &d);
    th_log("fill_uffd_min %zu bytes", d.fill_uffd_min);
    TH_ASSERT(calib_close((double)d.fill_uffd_min, expected, 0.1));

    /* what the wait before the data would hide costs a dear copy each:
     * none of it is faulted in ahead, at 12.5 GB/s as at 1 GB/s, where
     * the receiver keeps up with the wire only without that copy */
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, size, sub, 0), 0);
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, size, sub, 1), 0);
    m.net_bw = 1e9;
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, size, sub, 0), 0);
    /* a buffer too small for userfaultfd's fixed cost: all of it */
    m.fill_uffd = ucs_linear_func_make(200e-6, 0.21e-9);
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, 64 * 1024, 16 * 1024, 0), 64 * 1024);
}

/* What the receiver of an untouched buffer faults in ahead of the data */
TH_TEST(calib, fill_ahead_follows_the_bottleneck)
{
    const size_t sub = 256 * 1024, size = 4 * 1024 * 1024;
    double wait;
    size_t ahead;
    ucs_calib_model_t m;

    /* 12.5 GB/s (0.08 ns/B): the receiver, at 0.3 ns/B faulted in and
     * copied, is the bottleneck, so it faults in what it can while the
     * first sub-block is on its way (the RTR's latency, the sender's
     * post, the sub-block's wire time and latency), and userfaultfd fills
     * the rest */
    calib_fill_model(&m, 12.5e9);
    wait  = (2 * m.net_latency) + m.net_gap + (sub / m.net_bw);
    ahead = ucs_calib_fill_ahead(&m, size, sub, 0);
    th_log("ahead %zu of %zu bytes at 12.5 GB/s", ahead, size);
    TH_ASSERT(calib_close((double)ahead,
                          (wait - m.fill_populate.c) / m.fill_populate.m,
                          0.01));
    /* a larger first sub-block is longer on its way */
    TH_ASSERT_GT(ucs_calib_fill_ahead(&m, size, 2 * sub, 0), ahead);

    /* 1 GB/s: the receiver keeps up with the wire anyway, so it faults in
     * all of it rather than pay userfaultfd's fixed cost; not where its core
     * is busy with its own sends too */
    calib_fill_model(&m, 1e9);
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, size, sub, 0), size);
    TH_ASSERT_LT(ucs_calib_fill_ahead(&m, size, sub, 1), size);
    /* a small buffer all the same */
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, 64 * 1024, 16 * 1024, 1), 64 * 1024);

    /* a buffer that the wait before its data covers: all of it */
    calib_fill_model(&m, 12.5e9);
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, 32 * 1024, sub, 0), 32 * 1024);

    /* userfaultfd's fixed cost larger than the wait hides: all of it */
    m.fill_uffd = ucs_linear_func_make(2e-3, 0.21e-9);
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, size, sub, 0), size);

    /* not measured: all of it, as before there was a choice */
    m.fill_uffd = ucs_linear_func_make(0, 0);
    TH_ASSERT_EQ(ucs_calib_fill_ahead(&m, size, sub, 0), size);
}

/* the superpipeline's schedule: chunks double where copies are not twice as
 * fast as the network, puts carry 32 gaps' worth of wire time, and the
 * first chunk is at least an eighth of the message */
TH_TEST(calib, superpipeline_schedule)
{
    ucs_calib_derived_t d;
    ucs_calib_model_t m;

    /* copy as fast as the network: Denis' q = 1 would keep chunks fixed */
    calib_flat_model(&m, 1e-6, 0, 8e9);
    m.net_bw  = 8e9;
    m.net_gap = 2e-6;
    ucs_calib_derive(&m, &d);
    TH_ASSERT(calib_close(d.sp_q, 2.0, 1e-9));
    /* 2 us * 8 GB/s * 32 = 512 KB: the nearest power of two is 512 KiB */
    TH_ASSERT_EQ(d.sp_sub, 512 * UCS_KBYTE);

    /* a NIC: a gap of 0.2 us at 12 GB/s is 77 KB, nearest 64 KiB */
    m.net_bw  = 12e9;
    m.net_gap = 0.2e-6;
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.sp_sub, 64 * UCS_KBYTE);

    /* within bounds whatever the gap */
    m.net_gap = 0;
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.sp_sub, 16 * UCS_KBYTE);
    m.net_gap = 1e-3;
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.sp_sub, UCS_MBYTE);

    /* the first chunk: C_0, or an eighth of the message, in pages */
    TH_ASSERT_EQ(ucs_calib_sp_first(22 * UCS_KBYTE, 64 * UCS_KBYTE),
                 22 * UCS_KBYTE);
    TH_ASSERT_EQ(ucs_calib_sp_first(22 * UCS_KBYTE, UCS_MBYTE),
                 128 * UCS_KBYTE);
    TH_ASSERT_EQ(ucs_calib_sp_first(4096, 100000), 16384);
}

/* every put and every chunk's acknowledgment (the last three chunks have
 * none) costs a gap: with dearer gaps a superpipelined transfer beats one
 * copy only for larger messages */
TH_TEST(calib, superpipeline_counts_gaps)
{
    ucs_calib_derived_t d_cheap, d_dear;
    ucs_calib_model_t m;
    double t_cheap, t_dear;

    calib_flat_model(&m, 1e-6, 0, 10e9);
    m.net_bw  = 8e9;
    m.net_gap = 0.1e-6;
    ucs_calib_derive(&m, &d_cheap);
    t_cheap = ucs_calib_sp_time(&m, &d_cheap, UCS_MBYTE);

    m.net_gap = 2e-6;
    ucs_calib_derive(&m, &d_dear);
    /* the same schedule, 1.9 us more per put and per acknowledged chunk */
    d_dear.sp_sub = d_cheap.sp_sub;
    d_dear.sp_c0  = d_cheap.sp_c0;
    t_dear        = ucs_calib_sp_time(&m, &d_dear, UCS_MBYTE);
    /* 1 MiB from a first chunk of 128 KiB doubling: 4 chunks, the first
     * acknowledged; 0.1 us at 8 GB/s makes puts of 32 KiB, 32 of them */
    TH_ASSERT_EQ(d_cheap.sp_sub, 32 * UCS_KBYTE);
    TH_ASSERT(calib_close(t_dear - t_cheap, (1 + 32) * 1.9e-6, 1e-6));

    /* near the threshold (two chunks, neither acknowledged) the
     * superpipeline pays one put more than one copy and hides the copy of
     * its first chunk (20 KiB, 2 us): a gap dearer than that moves it up */
    m.net_gap = 5e-6;
    ucs_calib_derive(&m, &d_dear);
    TH_ASSERT_GT(d_dear.sp_thresh, d_cheap.sp_thresh);
}

/* A transfer that takes the sender's core (net_cpu) keeps its copies from
 * overlapping it: the superpipeline's rest costs the faster of the wire and
 * the copy on top of the slower, in that share, and it wins no earlier */
TH_TEST(calib, superpipeline_counts_net_cpu)
{
    ucs_calib_derived_t d_nic, d_cpu;
    ucs_calib_model_t m;
    double t_nic, t_cpu, rest;
    size_t first;

    calib_flat_model(&m, 1e-6, 0, 10e9);
    m.net_bw = 8e9;
    ucs_calib_derive(&m, &d_nic);
    t_nic = ucs_calib_sp_time(&m, &d_nic, UCS_MBYTE);

    m.net_cpu = 0.5;
    ucs_calib_derive(&m, &d_cpu);
    /* the same schedule */
    TH_ASSERT_EQ(d_cpu.sp_c0, d_nic.sp_c0);
    TH_ASSERT_EQ(d_cpu.sp_sub, d_nic.sp_sub);
    t_cpu = ucs_calib_sp_time(&m, &d_cpu, UCS_MBYTE);
    /* after the first chunk, the copy (10 GB/s) is the faster of the two */
    first = ucs_calib_sp_first(d_nic.sp_c0, UCS_MBYTE);
    rest  = (double)(UCS_MBYTE - first) / 10e9;
    th_log("1 MiB: %.2f us with a NIC, %.2f us with half the copy exposed",
           t_nic * 1e6, t_cpu * 1e6);
    TH_ASSERT(calib_close(t_cpu - t_nic, 0.5 * rest, 1e-6));
    /* a single chunk overlaps nothing either way: the threshold may stay */
    TH_ASSERT_GE(d_cpu.sp_thresh, d_nic.sp_thresh);
}

/* a device that faults untouched pages in at the first transfer, not at
 * registration, makes zero-copy of such pages dearer by that much */
TH_TEST(calib, crossover_counts_transfer_faults)
{
    ucs_calib_derived_t d, d_faults;
    ucs_calib_model_t m;
    double expected;
    size_t t;

    /* copy 0.1 ns/B, 2 ns/B more from untouched pages; registration
     * 2 us + 0.05 ns/B */
    calib_flat_model(&m, 2e-6, 0.05e-9, 10e9);
    m.copy_fault = ucs_linear_func_make(0, 2e-9);
    ucs_calib_derive(&m, &d);
    expected = 2e-6 / (2.1e-9 - 0.05e-9);
    TH_ASSERT(calib_close((double)d.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT],
                          expected, 0.1));

    /* the first transfer faults at 3 us + 1 ns/B */
    m.xfer_fault = ucs_linear_func_make(3e-6, 1e-9);
    ucs_calib_derive(&m, &d_faults);
    expected = 5e-6 / (2.1e-9 - 1.05e-9);
    t        = d_faults.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT];
    TH_ASSERT(calib_close((double)t, expected, 0.1));
    TH_ASSERT_DBL(ucs_calib_reg_time(&m, t * 1.1,
                                     UCS_CALIB_PAGES_NONRESIDENT), <,
                  ucs_calib_copy_time(&m, t * 1.1,
                                      UCS_CALIB_PAGES_NONRESIDENT));
    /* resident pages are not faulted in by anyone */
    TH_ASSERT_EQ(d_faults.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
                 d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT]);
}

/* A first send's receiver is taken to receive into a new buffer too: by
 * zero-copy it registers that and takes the first transfer's faults, where
 * a staged receiver fills it (the cheaper of its two ways) */
TH_TEST(calib, zcopy_thresh_counts_a_new_receive_buffer)
{
    ucs_calib_derived_t d, d_recv;
    ucs_calib_model_t m;

    /* copy 0.1 ns/B, registration 2 us + 0.05 ns/B: resident pages by
     * zero-copy from 40 KB, the model without fill costs (an older file)
     * not counting the receiver */
    calib_flat_model(&m, 2e-6, 0.05e-9, 10e9);
    m.copy_fault = ucs_linear_func_make(0, 2e-9);
    m.xfer_fault = ucs_linear_func_make(0, 1e-9);
    ucs_calib_derive(&m, &d);
    TH_ASSERT(calib_close((double)d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
                          2e-6 / 0.05e-9, 0.1));

    /* the faults of a first transfer into the new buffer (1 ns/B, as
     * softverbs' on a VM) cost more than the staged receiver's fill
     * (userfaultfd, 0.21 ns/B): never by zero-copy */
    m.fill_populate = ucs_linear_func_make(1e-6, 0.25e-9);
    m.fill_uffd     = ucs_linear_func_make(5e-6, 0.21e-9);
    ucs_calib_derive(&m, &d_recv);
    th_log("zcopy_thresh resident %zu, without the receiver %zu",
           d_recv.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
           d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT]);
    TH_ASSERT_EQ(d_recv.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
                 UCS_CALIB_SIZE_INF);
    TH_ASSERT_GT(d_recv.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT],
                 d.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT]);

    /* a device that pins at registration (no faults on the transfer) and
     * pins new pages for less than the staged receiver fills them: no
     * later than without the receiver */
    m.xfer_fault                       = ucs_linear_func_make(0, 0);
    m.reg[UCS_CALIB_PAGES_NONRESIDENT] = ucs_linear_func_make(2e-6, 0.1e-9);
    ucs_calib_derive(&m, &d_recv);
    TH_ASSERT_LE(d_recv.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
                 d.zcopy_thresh[UCS_CALIB_PAGES_RESIDENT]);
}

TH_TEST(calib, copy_bw_interpolates)
{
    ucs_calib_model_t m;

    memset(&m, 0, sizeof(m));
    m.num_copy     = 2;
    m.copy[0].size = 1024;
    m.copy[0].bw   = 40e9;
    m.copy[1].size = 1024 * 1024;
    m.copy[1].bw   = 10e9;
    TH_ASSERT_DBL(ucs_calib_copy_bw(&m, 100), ==, 40e9);
    TH_ASSERT_DBL(ucs_calib_copy_bw(&m, 1 << 30), ==, 10e9);
    /* 32 KiB is half-way in log(size) */
    TH_ASSERT(calib_close(ucs_calib_copy_bw(&m, 32 * 1024), 25e9, 1e-9));
}

/* one net and one stage point, at 16 MiB */
static void
calib_points_16m(ucs_calib_model_t *m, double net_bw, double stage_bw)
{
    m->num_net       = 1;
    m->net[0].size   = 16 * UCS_CALIB_NET_BW_SIZE;
    m->net[0].bw     = net_bw;
    m->num_stage     = 1;
    m->stage[0].size = 16 * UCS_CALIB_NET_BW_SIZE;
    m->stage[0].bw   = stage_bw;
}

/* the network's bandwidth by transfer size: net_bw up to the size it is
 * measured with, then through the net points; a staged sender's time
 * composed of its copies and puts up to that size, then at a rate through
 * the stage points */
TH_TEST(calib, net_and_stage_points_interpolate)
{
    const size_t mb = UCS_CALIB_NET_BW_SIZE;
    double composed, composed_bw;
    ucs_calib_derived_t d;
    ucs_calib_model_t m;

    calib_flat_model(&m, 1e-6, 0, 10e9);
    m.net_bw = 8e9;
    ucs_calib_derive(&m, &d);
    /* no points: one network rate at every size, a composed sender */
    TH_ASSERT_DBL(ucs_calib_net_bw(&m, 64 * mb), ==, 8e9);
    composed = ucs_calib_stage_time(&m, &d, 16 * mb);
    /* the first chunk's copy, then the network (the slower, no net_cpu) */
    TH_ASSERT(calib_close(composed,
                          ucs_calib_sp_first(d.sp_c0, 16 * mb) / 10e9 +
                                  (16.0 * mb / 8e9),
                          1e-9));
    composed_bw = mb / ucs_calib_stage_time(&m, &d, mb);

    calib_points_16m(&m, 4e9, 6e9);
    m.num_net     = 2;
    m.net[1].size = 64 * mb;
    m.net[1].bw   = 2e9;
    ucs_calib_derive(&m, &d);
    TH_ASSERT_DBL(ucs_calib_net_bw(&m, mb / 2), ==, 8e9);
    TH_ASSERT_DBL(ucs_calib_net_bw(&m, mb), ==, 8e9);
    /* 4 MiB is half-way from 1 MiB to 16 MiB in log(size) */
    TH_ASSERT(calib_close(ucs_calib_net_bw(&m, 4 * mb), 6e9, 1e-9));
    TH_ASSERT(calib_close(ucs_calib_net_bw(&m, 32 * mb), 3e9, 1e-9));
    TH_ASSERT_DBL(ucs_calib_net_bw(&m, 1024 * mb), ==, 2e9);
    TH_ASSERT(calib_close(mb / ucs_calib_stage_time(&m, &d, mb), composed_bw,
                          1e-9));
    TH_ASSERT(calib_close(4 * mb / ucs_calib_stage_time(&m, &d, 4 * mb),
                          (composed_bw + 6e9) / 2, 1e-9));
    TH_ASSERT(calib_close(ucs_calib_stage_time(&m, &d, 1024 * mb),
                          1024.0 * mb / 6e9, 1e-9));
    /* zero-copy of a registered buffer: one message at the size's rate */
    TH_ASSERT(calib_close(ucs_calib_zcopy_time(&m, 16 * mb),
                          m.net_gap + m.net_latency + (16.0 * mb / 4e9), 1e-9));
}

/* Zero-copy from a registered buffer loses to staging it only where the
 * device moves large buffers slower than a staged sender does */
TH_TEST(calib, cached_staged_thresh_follows_points)
{
    const size_t mb = UCS_CALIB_NET_BW_SIZE;
    ucs_calib_derived_t d;
    ucs_calib_model_t m;
    size_t t;

    calib_flat_model(&m, 1e-6, 0, 10e9);
    m.net_bw = 8e9;
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.cached_staged_thresh, UCS_CALIB_SIZE_INF);

    /* large transfers as slow for both: zero-copy keeps its one copy */
    calib_points_16m(&m, 3e9, 3e9);
    ucs_calib_derive(&m, &d);
    TH_ASSERT_EQ(d.cached_staged_thresh, UCS_CALIB_SIZE_INF);

    /* a staged sender keeps twice zero-copy's rate */
    m.stage[0].bw = 6e9;
    ucs_calib_derive(&m, &d);
    t = d.cached_staged_thresh;
    th_log("staged from %zu bytes", t);
    TH_ASSERT_GT(t, mb);
    TH_ASSERT_LT(t, 16 * mb);
    TH_ASSERT_DBL(ucs_calib_sp_time(&m, &d, t * 1.1), <,
                  ucs_calib_zcopy_time(&m, t * 1.1));
    TH_ASSERT_DBL(ucs_calib_sp_time(&m, &d, t / 1.2), >,
                  ucs_calib_zcopy_time(&m, t / 1.2));
}

/* the memcpy working sets ascend whatever caches a host reports, and the
 * last one lies beyond the caches it measures */
TH_TEST(calib, copy_sizes_ascend)
{
    static const size_t hosts[][3] = {
            {32 * 1024, 1024 * 1024, 32 * 1024 * 1024}, /* a server */
            {48 * 1024, 2 * 1024 * 1024, 480ul * 1024 * 1024}, /* a VM that
                                                    reports its host's L3 */
            {48 * 1024, 2 * 1024 * 1024, 128ul * 1024 * 1024},
            {0, 0, 0}, /* nothing known */
            {64 * 1024, 64 * 1024, 0}, /* L2 no larger */
    };
    size_t sizes[UCS_CALIB_MAX_COPY_POINTS];
    unsigned h, i, n;

    for (h = 0; h < sizeof(hosts) / sizeof(hosts[0]); ++h) {
        n = ucs_calib_copy_sizes_for(hosts[h], 3, sizes);
        TH_ASSERT_GE(n, 2);
        TH_ASSERT_LE(n, UCS_CALIB_MAX_COPY_POINTS);
        for (i = 1; i < n; ++i) {
            TH_ASSERT_GT(sizes[i], sizes[i - 1]);
        }
        /* a cache point is half a cache: the DRAM point is at least twice
         * the largest one */
        TH_ASSERT_GE(sizes[n - 1], 2 * sizes[n - 2]);
    }

    /* the first host: three cache points, then DRAM */
    n = ucs_calib_copy_sizes_for(hosts[0], 3, sizes);
    TH_ASSERT_EQ(n, 4);
    TH_ASSERT_EQ(sizes[2], 16 * 1024 * 1024);
}

static void calib_tmpfile(char *path, size_t max, const char *content)
{
    FILE *f;
    int fd;

    snprintf(path, max, "/tmp/th-calib-XXXXXX");
    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    close(fd);
    if (content != NULL) {
        f = fopen(path, "w");
        TH_ASSERT(f != NULL);
        fputs(content, f);
        fclose(f);
    }
}

/* a model file holding @a text is refused as malformed */
static void calib_assert_rejected(const char *text)
{
    ucs_calib_model_t r;
    char path[64];

    calib_tmpfile(path, sizeof(path), text);
    TH_ASSERT_EQ(ucs_calib_model_read(path, &r), UCS_ERR_INVALID_PARAM);
    unlink(path);
}

TH_TEST(calib, model_file_roundtrip)
{
    ucs_calib_model_t m, r;
    char path[64];
    unsigned i;

    calib_flat_model(&m, 12.5e-6, 0.07e-9, 9.5e9);
    m.reg[UCS_CALIB_PAGES_NONRESIDENT] = ucs_linear_func_make(3e-6, 0.3e-9);
    m.dereg        = ucs_linear_func_make(2e-6, 0.01e-9);
    m.copy_fault   = ucs_linear_func_make(0, 0.2e-9);
    m.xfer_fault   = ucs_linear_func_make(1.5e-6, 0.4e-9);
    m.fill_populate                    = ucs_linear_func_make(1e-6, 0.25e-9);
    m.fill_uffd                        = ucs_linear_func_make(4.5e-6, 0.21e-9);
    m.fill_copy                        = ucs_linear_func_make(0.5e-6, 1.1e-9);
    m.num_copy     = 3;
    m.copy[1].size = 65536;
    m.copy[1].bw   = 30e9;
    m.copy[2].size = 64 << 20;
    m.copy[2].bw   = 8e9;
    m.measure_time = 0.25;
    m.net_cpu                          = 0.37;
    m.net_frag_gap                     = 3.7e-6;
    m.num_net                          = 2;
    m.net[0].size                      = 16 << 20;
    m.net[0].bw                        = 4.5e9;
    m.net[1].size                      = 64 << 20;
    m.net[1].bw                        = 3.5e9;
    m.num_stage                        = 1;
    m.stage[0].size                    = 16 << 20;
    m.stage[0].bw                      = 6.5e9;

    calib_tmpfile(path, sizeof(path), NULL);
    TH_ASSERT_UCS_OK(ucs_calib_model_write(&m, path));
    TH_ASSERT_UCS_OK(ucs_calib_model_read(path, &r));
    unlink(path);

    for (i = 0; i < UCS_CALIB_PAGES_LAST; ++i) {
        TH_ASSERT(calib_close(r.reg[i].c, m.reg[i].c, 1e-6));
        TH_ASSERT(calib_close(r.reg[i].m, m.reg[i].m, 1e-6));
    }
    TH_ASSERT(calib_close(r.dereg.c, m.dereg.c, 1e-6));
    TH_ASSERT(calib_close(r.copy_fault.m, m.copy_fault.m, 1e-6));
    TH_ASSERT(calib_close(r.xfer_fault.c, m.xfer_fault.c, 1e-6));
    TH_ASSERT(calib_close(r.xfer_fault.m, m.xfer_fault.m, 1e-6));
    TH_ASSERT(calib_close(r.fill_populate.c, m.fill_populate.c, 1e-6));
    TH_ASSERT(calib_close(r.fill_populate.m, m.fill_populate.m, 1e-6));
    TH_ASSERT(calib_close(r.fill_uffd.c, m.fill_uffd.c, 1e-6));
    TH_ASSERT(calib_close(r.fill_uffd.m, m.fill_uffd.m, 1e-6));
    TH_ASSERT(calib_close(r.fill_copy.c, m.fill_copy.c, 1e-6));
    TH_ASSERT(calib_close(r.fill_copy.m, m.fill_copy.m, 1e-6));
    TH_ASSERT_EQ(r.num_copy, m.num_copy);
    for (i = 0; i < m.num_copy; ++i) {
        TH_ASSERT_EQ(r.copy[i].size, m.copy[i].size);
        TH_ASSERT(calib_close(r.copy[i].bw, m.copy[i].bw, 1e-6));
    }
    TH_ASSERT(calib_close(r.net_bw, m.net_bw, 1e-6));
    TH_ASSERT(calib_close(r.net_latency, m.net_latency, 1e-6));
    TH_ASSERT(calib_close(r.net_cpu, m.net_cpu, 1e-6));
    TH_ASSERT(calib_close(r.net_frag_gap, m.net_frag_gap, 1e-6));
    TH_ASSERT_EQ(r.num_net, m.num_net);
    for (i = 0; i < m.num_net; ++i) {
        TH_ASSERT_EQ(r.net[i].size, m.net[i].size);
        TH_ASSERT(calib_close(r.net[i].bw, m.net[i].bw, 1e-6));
    }
    TH_ASSERT_EQ(r.num_stage, m.num_stage);
    TH_ASSERT_EQ(r.stage[0].size, m.stage[0].size);
    TH_ASSERT(calib_close(r.stage[0].bw, m.stage[0].bw, 1e-6));
}

/* the copy engine's lines, and a model without them (hand-written files
 * need not measure engines) */
TH_TEST(calib, model_file_engines)
{
    ucs_calib_engine_t *w, *e;
    ucs_calib_model_t m, r;
    char path[64];

    calib_flat_model(&m, 12.5e-6, 0.07e-9, 9.5e9);
    w          = &m.engine[UCS_COPY_BACKEND_THREAD];
    w->start   = 2.5e-7;
    w->post    = 4e-8;
    w->bw      = 3.7e10;
    w->overlap = 0.91;
    w->cpu     = 3.5e-11;

    calib_tmpfile(path, sizeof(path), NULL);
    TH_ASSERT_UCS_OK(ucs_calib_model_write(&m, path));
    TH_ASSERT_UCS_OK(ucs_calib_model_read(path, &r));
    unlink(path);

    e = &r.engine[UCS_COPY_BACKEND_THREAD];
    TH_ASSERT(calib_close(e->start, w->start, 1e-6));
    TH_ASSERT(calib_close(e->post, w->post, 1e-6));
    TH_ASSERT(calib_close(e->bw, w->bw, 1e-6));
    TH_ASSERT(calib_close(e->overlap, w->overlap, 1e-3));
    TH_ASSERT(calib_close(e->cpu, w->cpu, 1e-6));
    /* not measured: not written, read back as absent */
    TH_ASSERT_DBL(r.engine[UCS_COPY_BACKEND_MEMCPY].bw, ==, 0.0);

    setenv("UCX_LOG_LEVEL", "fatal", 1); /* the errors are expected */
    calib_assert_rejected("engine dma 0 0 1e10 0.9 0\n");
    calib_assert_rejected("engine thread 0 0 1e10 0.9\n");
    calib_assert_rejected("engine thread 0 0 1e10 0.9 -1\n");
}

/* an engine measured as a DMA engine would be: overlap, no CPU of its own */
static void calib_engine_set(ucs_calib_model_t *m, ucs_copy_backend_t b,
                             double bw, double overlap, double cpu_share)
{
    m->engine[b].start   = 1e-6;
    m->engine[b].post    = 1e-7;
    m->engine[b].bw      = bw;
    m->engine[b].overlap = overlap;
    m->engine[b].cpu     = cpu_share / bw; /* CPU seconds per byte */
}

TH_TEST(calib, engine_choice_follows_measurements)
{
    const size_t chunk = 1 << 20;
    ucs_copy_backend_t b;
    ucs_calib_model_t m;

    /* memcpy 10 GB/s, network 5 GB/s: the pipeline runs at 5 GB/s */
    calib_flat_model(&m, 20e-6, 0.05e-9, 10e9);
    TH_ASSERT_EQ(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO, chunk,
                                         &b), UCS_ERR_UNSUPPORTED);

    /* the caller's own copy never overlaps */
    calib_engine_set(&m, UCS_COPY_BACKEND_MEMCPY, 10e9, 0.02, 0);
    TH_ASSERT_EQ(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO, chunk,
                                         &b), UCS_ERR_UNSUPPORTED);

    /* overlaps, but its threads spend as much CPU as the copy: net nothing */
    calib_engine_set(&m, UCS_COPY_BACKEND_THREAD, 9e9, 0.95, 1.0);
    TH_ASSERT(ucs_calib_engine_net_overlap(&m.engine[UCS_COPY_BACKEND_THREAD])
              < 0.0);
    TH_ASSERT_EQ(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO, chunk,
                                         &b), UCS_ERR_UNSUPPORTED);

    /* no CPU of its own, keeps up with the network: chosen */
    calib_engine_set(&m, UCS_COPY_BACKEND_THREAD, 9e9, 0.95, 0);
    b = UCS_COPY_BACKEND_MEMCPY;
    TH_ASSERT_UCS_OK(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO,
                                             chunk, &b));
    TH_ASSERT_EQ(b, UCS_COPY_BACKEND_THREAD);
    /* unless the configuration names another backend */
    TH_ASSERT_EQ(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_MEMCPY, chunk,
                                         &b), UCS_ERR_UNSUPPORTED);

    /* slower than the network, where the caller's copy is not: the engine
     * would become the pipeline's bottleneck */
    calib_engine_set(&m, UCS_COPY_BACKEND_THREAD, 3e9, 0.95, 0);
    TH_ASSERT_EQ(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO, chunk,
                                         &b), UCS_ERR_UNSUPPORTED);
    /* on a network slower still, the same engine keeps up */
    m.net_bw = 2e9;
    TH_ASSERT_UCS_OK(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO,
                                             chunk, &b));

    /* a start latency that dominates small chunks */
    m.net_bw                                = 5e9;
    calib_engine_set(&m, UCS_COPY_BACKEND_THREAD, 9e9, 0.95, 0);
    m.engine[UCS_COPY_BACKEND_THREAD].start = 50e-6;
    TH_ASSERT_EQ(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO, 65536,
                                         &b), UCS_ERR_UNSUPPORTED);
    TH_ASSERT_UCS_OK(ucs_calib_engine_choose(&m, UCS_COPY_BACKEND_AUTO,
                                             16 << 20, &b));
}

/* the experiment itself, on the real backends: who pays for the copy. Each
 * claim is about wall times of phases that another process can preempt, so
 * it must hold in one of a few measurements, not in each */
TH_TEST(calib, engine_overlap_counts_engine_cpu)
{
    const unsigned tries            = 5;
    const size_t size               = 1 << 20;
    ucs_copy_engine_params_t params = {.name = "test"};
    ucs_calib_overlap_t ov;
    ucs_copy_engine_t *engine;
    uint8_t *src, *dst;
    double t_memcpy;
    unsigned i;

    src = malloc(size);
    dst = malloc(size);
    TH_ASSERT((src != NULL) && (dst != NULL));
    memset(src, 0x3c, size);

    /* memcpy: the caller copies, nothing overlaps, no CPU elsewhere */
    params.backend = UCS_COPY_BACKEND_MEMCPY;
    TH_ASSERT_UCS_OK(ucs_copy_engine_create(&params, &engine));
    for (i = 0; i < tries; ++i) {
        TH_ASSERT_UCS_OK(ucs_calib_engine_overlap(engine, dst, src, size,
                                                  &ov));
        th_log("memcpy: copy %.1f us, compute %.1f us, total %.1f us, "
               "overlap %.2f", ov.t_copy * 1e6, ov.t_compute * 1e6,
               ov.t_total * 1e6, ov.overlap);
        TH_ASSERT(ov.t_copy > 0);
        TH_ASSERT_DBL(ov.t_engine, ==, 0.0);
        TH_ASSERT_EQ(memcmp(dst, src, size), 0);
        if ((ov.t_total >= ov.t_compute) && (ov.overlap < 0.5)) {
            break;
        }
    }
    ucs_copy_engine_destroy(engine);
    TH_ASSERT(ov.t_total >= ov.t_compute);
    TH_ASSERT(ov.overlap < 0.5);
    t_memcpy = ov.t_copy;

    /* a helper thread: its CPU clock runs for the copy, as the caller's
     * did (a quarter of it leaves room for noise), and the net overlap
     * charges that time */
    params.backend = UCS_COPY_BACKEND_THREAD;
    TH_ASSERT_UCS_OK(ucs_copy_engine_create(&params, &engine));
    for (i = 0; i < tries; ++i) {
        memset(dst, 0, size);
        TH_ASSERT_UCS_OK(ucs_calib_engine_overlap(engine, dst, src, size,
                                                  &ov));
        th_log("thread: copy %.1f us, compute %.1f us, total %.1f us, "
               "engine CPU %.1f us, overlap %.2f, net %.2f",
               ov.t_copy * 1e6, ov.t_compute * 1e6, ov.t_total * 1e6,
               ov.t_engine * 1e6, ov.overlap, ov.net_overlap);
        TH_ASSERT(calib_close(ov.net_overlap,
                              ov.overlap - (ov.t_engine / ov.t_copy), 1e-9));
        TH_ASSERT_EQ(memcmp(dst, src, size), 0);
        if (ov.t_engine > 0.25 * t_memcpy) {
            break;
        }
    }
    ucs_copy_engine_destroy(engine);
    TH_ASSERT_DBL(ov.t_engine, >, 0.25 * t_memcpy);

    free(src);
    free(dst);
}

TH_TEST(calib, model_file_errors)
{
    ucs_calib_model_t r;

    setenv("UCX_LOG_LEVEL", "fatal", 1); /* the errors are expected */
    TH_ASSERT_EQ(ucs_calib_model_read("/nonexistent/model", &r),
                 UCS_ERR_NO_ELEM);

    calib_assert_rejected("reg_resident 1e-6 1e-10\n");
    calib_assert_rejected("reg_resident one two\n");
    calib_assert_rejected("frobnicate 1 2\n");
    /* a share: 0..1 */
    calib_assert_rejected("reg_resident 1e-6 1e-10\n"
                          "reg_nonresident 1e-6 1e-10\n"
                          "dereg 1e-6 1e-11\n"
                          "copy 65536 1e10\n"
                          "net_bw 1e10\n"
                          "net_cpu 1.5\n");
#define CALIB_MODEL_MIN                                                        \
    "reg_resident 1e-6 1e-10\n"                                                \
    "reg_nonresident 1e-6 1e-10\n"                                             \
    "dereg 1e-6 1e-11\n"                                                       \
    "copy 65536 1e10\n"                                                        \
    "net_bw 1e10\n"
    /* net and stage points: above the size net_bw is measured with,
     * ascending, two values */
    calib_assert_rejected(CALIB_MODEL_MIN "net 1048576 5e9\n");
    calib_assert_rejected(CALIB_MODEL_MIN "stage 65536 5e9\n");
    calib_assert_rejected(CALIB_MODEL_MIN "net 67108864 5e9\n"
                                          "net 16777216 5e9\n");
    calib_assert_rejected(CALIB_MODEL_MIN "net 16777216 5e9 1\n");
    calib_assert_rejected(CALIB_MODEL_MIN "stage 16777216 -5e9\n");
    /* fill costs: a fixed cost and a cost per byte, neither negative */
    calib_assert_rejected(CALIB_MODEL_MIN "fill_uffd 5e-6\n");
    calib_assert_rejected(CALIB_MODEL_MIN "fill_populate 1e-6 -2.5e-10\n");
    calib_assert_rejected(CALIB_MODEL_MIN "fill_uffd nan 2e-10\n");
    calib_assert_rejected(CALIB_MODEL_MIN "fill_copy 0 -1e-9\n");
#undef CALIB_MODEL_MIN
}

/* a private cache directory, so that the test measures */
static void calib_env(char *dir, size_t max)
{
    if (!th_have_verbs_device("softverbs")) {
        TH_SKIP("no softverbs device (softverbs not preloaded)");
    }
    snprintf(dir, max, "/tmp/th-calib-dir-XXXXXX");
    TH_ASSERT(mkdtemp(dir) != NULL);
    setenv("UCX_CALIB_DIR", dir, 1);
}

static void calib_rm_dir(const char *dir)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    TH_ASSERT_EQ(system(cmd), 0);
}

/* the tool, in a fresh process (softverbs reads its settings when it
 * loads): one value of its parsable output */
static void calib_tool_value(const char *key, char *value, size_t max)
{
    char line[256];
    size_t len = strlen(key);
    FILE *p;

    value[0] = '\0';
    p = popen(TH_PREFIX "/bin/ucx_hcr_calib -d " CALIB_DEV " -p", "r");
    TH_ASSERT(p != NULL);
    while (fgets(line, sizeof(line), p) != NULL) {
        if (!strncmp(line, key, len) && (line[len] == '=')) {
            snprintf(value, max, "%.*s", (int)strcspn(line + len + 1, "\n"),
                     line + len + 1);
        }
    }
    TH_ASSERT_EQ(pclose(p), 0);
}

TH_TEST(calib, hcr_publishes_measured_costs)
{
    ucs_calib_source_t source;
    ucs_calib_model_t model;
    ucs_linear_func_t cost;
    char dir[64], value[64];
    th_uct_t uct;

    calib_env(dir, sizeof(dir));
    setenv("UCX_IB_REG_METHODS", "direct", 1);
    /* one MR per registration throughout (relaxed ordering makes the md
     * register twice, and the calibration with it; it is part of the
     * cache key too, so it must not change between the runs below) */
    setenv("UCX_IB_PCI_RELAXED_ORDERING", "off", 1);
    if (th_uct_open(&uct, "hcr", NULL) != UCS_OK) {
        TH_SKIP("no hcr device");
    }

    TH_ASSERT_UCS_OK(ucs_calib_find(CALIB_DEV, &model, &source));
    TH_ASSERT_EQ(source, UCS_CALIB_SOURCE_MEASURED);
    TH_ASSERT_DBL(model.net_bw, >, 0.0);
    TH_ASSERT_GT(model.num_copy, 1);
    /* softverbs registers without touching the pages, so the first
     * transfer pays their faults; what that costs depends on the host (1.5
     * to 3.5 us a page on one VM, nothing measurable on another, which maps
     * the zero page on a first read): calib.crossover_counts_transfer_faults
     * checks what the term does, here it is only shown */
    th_log("xfer_fault %.3f us + %.3f ns/KiB", model.xfer_fault.c * 1e6,
           model.xfer_fault.m * 1e12);
    /* faulting untouched pages in: a cost per byte between what zeroing
     * them at 100 GB/s and faulting each 4 KiB page in 100 us would take */
    th_log("fill_populate %.3f us + %.1f ns/KiB, fill_uffd %.3f us + %.1f "
           "ns/KiB",
           model.fill_populate.c * 1e6, model.fill_populate.m * 1e12,
           model.fill_uffd.c * 1e6, model.fill_uffd.m * 1e12);
    TH_ASSERT_DBL(model.fill_populate.m, >, 1e-11);
    TH_ASSERT_DBL(model.fill_populate.m, <, 100e-6 / 4096);
    /* the copy into those pages, over one into resident memory: nothing on
     * a host whose CPU walks the kernel's page tables, a trap per page on
     * a VM that shadows them (4.5 us on one, 2026-11-28): at most 100 us */
    th_log("fill_copy %.3f us + %.1f ns/KiB", model.fill_copy.c * 1e6,
           model.fill_copy.m * 1e12);
    TH_ASSERT_DBL(model.fill_copy.c, <, 1e-3);
    TH_ASSERT_DBL(model.fill_copy.m, <, 100e-6 / 4096);
    if (th_can_uffd()) {
        TH_ASSERT_DBL(model.fill_uffd.m, >, 1e-11);
        TH_ASSERT_DBL(model.fill_uffd.m, <, 100e-6 / 4096);
    } else {
        th_log("userfaultfd refused here: fill_uffd not measured");
        TH_ASSERT(!ucs_calib_fill_measured(&model));
    }

    /* the md reports it instead of UCX_IB_MEM_REG_OVERHEAD's 16 us */
    cost = ucs_linear_func_add(model.reg[UCS_CALIB_PAGES_RESIDENT],
                               model.dereg);
    TH_ASSERT(calib_close(uct.md_attr.reg_cost.c, cost.c, 1e-9));
    TH_ASSERT(calib_close(uct.md_attr.reg_cost.m, cost.m, 1e-9));
    th_uct_close(&uct);

    /* a new process reads the cache */
    calib_tool_value("source", value, sizeof(value));
    TH_ASSERT_STR_EQ(value, "cache");

    /* emulated NIC firmware at 40 us per registration, the only setting
     * that changes: another cache entry, measured, and its fixed cost
     * tracks the configured one */
    setenv("SOFTVERBS_REG_COST_US", "40", 1);
    calib_tool_value("source", value, sizeof(value));
    TH_ASSERT_STR_EQ(value, "measured");
    calib_tool_value("reg_resident_c", value, sizeof(value));
    TH_ASSERT_DBL(atof(value), >=, 38e-6);
    /* tracks it from above too, loosely: on a loaded 2-core host a timed
     * registration can take twice as long as on an idle one (92 us was
     * seen with 10 runnable threads), so the bound is the configured cost
     * five times over on top of this host's own measured cost */
    TH_ASSERT_DBL(atof(value), <,
                  model.reg[UCS_CALIB_PAGES_RESIDENT].c + 5 * 40e-6);

    /* force measures again */
    setenv("UCX_CALIB_MODE", "force", 1);
    calib_tool_value("source", value, sizeof(value));
    TH_ASSERT_STR_EQ(value, "measured");
    calib_rm_dir(dir);
}

/* Bound to @a cpus, the tool measures a model (its net_cpu to @a net_cpu)
 * and then finds it in the cache */
static void
calib_measured_then_cached(const cpu_set_t *cpus, char *net_cpu, size_t max)
{
    char value[64];

    TH_ASSERT_EQ(sched_setaffinity(0, sizeof(*cpus), cpus), 0);
    calib_tool_value("source", value, sizeof(value));
    TH_ASSERT_STR_EQ(value, "measured");
    calib_tool_value("net_cpu", net_cpu, max);
    calib_tool_value("source", value, sizeof(value));
    TH_ASSERT_STR_EQ(value, "cache");
}

/* Bound to one CPU, a process shares it with its helper threads (the copy
 * engine's, softverbs' engine that executes large writes): a model measured
 * so is not one for a process that may use two, and the cache keeps one of
 * each. Bound to one, a 1 MiB write on softverbs takes the core its memcpy
 * needs: net_cpu is high. */
TH_TEST_TIMEOUT(calib, cache_keyed_on_cpus, 120)
{
    char dir[64], cpu_one[32], cpu_all[32];
    cpu_set_t all, one;
    int cpu;

    calib_env(dir, sizeof(dir));
    TH_ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
    if (CPU_COUNT(&all) < 2) {
        calib_rm_dir(dir);
        TH_SKIP("this process may run on one CPU only");
    }
    for (cpu = 0; !CPU_ISSET(cpu, &all); ++cpu) {
    }
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);

    calib_measured_then_cached(&one, cpu_one, sizeof(cpu_one));
    calib_measured_then_cached(&all, cpu_all, sizeof(cpu_all));

    th_log("net_cpu: %s bound to CPU %d, %s on %d CPUs", cpu_one, cpu, cpu_all,
           CPU_COUNT(&all));
    TH_ASSERT_DBL(atof(cpu_one), >=, 0.5);
    calib_rm_dir(dir);
}

/* A stream of fragments, each received and copied out, takes at least the
 * wire's time per fragment: at a 10 Gb/s link model, 8 KiB take 6.55 us
 * (the stream measured 6.56, 2026-11-28); at softverbs' default link, whose
 * wire is a copy at 7 GB/s (1.1 us), the hosts' work takes longer (2.9) */
TH_TEST_TIMEOUT(calib, frag_gap_follows_the_link, 120)
{
    double wire = UCS_CALIB_FRAG_SIZE / 1.25e9;
    char dir[64], value[64];
    double slow, fast;

    calib_env(dir, sizeof(dir));
    setenv("SOFTVERBS_LINK_GBPS", "10", 1);
    setenv("SOFTVERBS_LINK_LAT_US", "1", 1);
    calib_tool_value("net_frag_gap", value, sizeof(value));
    slow = atof(value);
    unsetenv("SOFTVERBS_LINK_GBPS");
    unsetenv("SOFTVERBS_LINK_LAT_US");
    calib_tool_value("net_frag_gap", value, sizeof(value));
    fast = atof(value);
    calib_rm_dir(dir);

    th_log("fragment gap: %.2f us at 10 Gb/s (wire %.2f us), %.2f us at the "
           "default link",
           slow * 1e6, wire * 1e6, fast * 1e6);
    TH_ASSERT_DBL(slow, >=, 0.95 * wire);
    TH_ASSERT_DBL(slow, <, 3 * wire);
    TH_ASSERT_DBL(fast, >, 0);
    TH_ASSERT_DBL(fast, <, slow);
}

/* UCX_CALIB_MODE=force measures once per process, not at each md open */
TH_TEST(calib, force_measures_once)
{
    ucs_calib_model_t first, second;
    ucs_calib_source_t source;
    char dir[64];
    th_uct_t uct;

    calib_env(dir, sizeof(dir));
    setenv("UCX_CALIB_MODE", "force", 1);
    if (th_uct_open(&uct, "hcr", NULL) != UCS_OK) {
        TH_SKIP("no hcr device");
    }
    TH_ASSERT_UCS_OK(ucs_calib_find(CALIB_DEV, &first, &source));
    TH_ASSERT_EQ(source, UCS_CALIB_SOURCE_MEASURED);
    th_uct_close(&uct);

    TH_ASSERT_UCS_OK(th_uct_open(&uct, "hcr", NULL));
    TH_ASSERT_UCS_OK(ucs_calib_find(CALIB_DEV, &second, NULL));
    /* a new measurement would differ in every timing */
    TH_ASSERT_DBL(second.measure_time, ==, first.measure_time);
    TH_ASSERT_DBL(second.net_latency, ==, first.net_latency);
    th_uct_close(&uct);
    calib_rm_dir(dir);
}

/* Processes that start together on an empty cache serialize on its lock
 * file: one measures, the others wait and read what it cached (without the
 * lock, each of them measured: 4 of 4 'measured' when flock() was taken
 * out of ucs_calib_get) */
#define CALIB_CONCURRENT 4

TH_TEST(calib, cache_lock_one_measures)
{
    FILE *p[CALIB_CONCURRENT];
    int i, measured = 0, cached = 0;
    char dir[64], line[256];

    calib_env(dir, sizeof(dir));
    for (i = 0; i < CALIB_CONCURRENT; ++i) {
        p[i] = popen(TH_PREFIX "/bin/ucx_hcr_calib -d " CALIB_DEV " -p", "r");
        TH_ASSERT(p[i] != NULL);
    }
    for (i = 0; i < CALIB_CONCURRENT; ++i) {
        while (fgets(line, sizeof(line), p[i]) != NULL) {
            measured += !strcmp(line, "source=measured\n");
            cached += !strcmp(line, "source=cache\n");
        }
        TH_ASSERT_EQ(pclose(p[i]), 0);
    }
    th_log("%d processes started together: %d measured, %d read the cache",
           CALIB_CONCURRENT, measured, cached);
    TH_ASSERT_EQ(measured, 1);
    TH_ASSERT_EQ(cached, CALIB_CONCURRENT - 1);
    calib_rm_dir(dir);
}

/* with a registration cache the md keeps charging the lookup: proto v2
 * selects per size, and reused buffers must stay zero-copy */
TH_TEST(calib, rcache_keeps_lookup_cost)
{
    ucs_calib_model_t model;
    char dir[64];
    th_uct_t uct;

    calib_env(dir, sizeof(dir));
    setenv("UCX_IB_REG_METHODS", "rcache", 1);
    if (th_uct_open(&uct, "hcr", NULL) != UCS_OK) {
        TH_SKIP("no hcr device");
    }
    TH_ASSERT_UCS_OK(ucs_calib_find(CALIB_DEV, &model, NULL));
    /* the configured lookup (UCX rounds it through its time units), far
     * below what a miss costs by the model: registering and deregistering
     * 64 KiB (not the fixed part alone, which a noisy fit may put at 0) */
    TH_ASSERT_DBL(uct.md_attr.reg_cost.c, <, 1e-6);
    TH_ASSERT_DBL(ucs_linear_func_apply(model.reg[UCS_CALIB_PAGES_RESIDENT],
                                        65536) +
                  ucs_linear_func_apply(model.dereg, 65536), >,
                  2 * ucs_linear_func_apply(uct.md_attr.reg_cost, 65536));
    th_uct_close(&uct);
    calib_rm_dir(dir);
}

TH_TEST(calib, mode_off_keeps_constants)
{
    ucs_calib_model_t model;
    char dir[64];
    th_uct_t uct;

    calib_env(dir, sizeof(dir));
    setenv("UCX_CALIB_MODE", "off", 1);
    setenv("UCX_IB_REG_METHODS", "direct", 1);
    setenv("UCX_IB_MEM_REG_OVERHEAD", "7us", 1);
    if (th_uct_open(&uct, "hcr", NULL) != UCS_OK) {
        TH_SKIP("no hcr device");
    }
    TH_ASSERT(calib_close(uct.md_attr.reg_cost.c, 7e-6, 1e-9));
    TH_ASSERT_EQ(ucs_calib_find(CALIB_DEV, &model, NULL), UCS_ERR_NO_ELEM);
    th_uct_close(&uct);
    calib_rm_dir(dir);
}

TH_TEST(calib, hand_written_model)
{
    static const char text[] = "# by hand\n"
                               "reg_resident 1e-3 1e-10\n"
                               "reg_nonresident 2e-3 1e-9\n"
                               "dereg 5e-4 0\n"
                               "copy 65536 2e10\n"
                               "net_bw 5e9\n"
                               "net_latency 2e-6\n";
    ucs_calib_source_t source;
    ucs_calib_model_t model;
    char dir[64], path[64];
    th_uct_t uct;

    calib_env(dir, sizeof(dir));
    calib_tmpfile(path, sizeof(path), text);
    setenv("UCX_CALIB_FILE", path, 1);
    setenv("UCX_IB_REG_METHODS", "direct", 1);
    if (th_uct_open(&uct, "hcr", NULL) != UCS_OK) {
        unlink(path);
        TH_SKIP("no hcr device");
    }
    unlink(path);
    TH_ASSERT_UCS_OK(ucs_calib_find(CALIB_DEV, &model, &source));
    TH_ASSERT_EQ(source, UCS_CALIB_SOURCE_FILE);
    TH_ASSERT(calib_close(uct.md_attr.reg_cost.c, 1e-3 + 5e-4, 1e-9));
    TH_ASSERT(calib_close(uct.iface_attr.bandwidth.shared, 5e9, 1e-9));
    TH_ASSERT(calib_close(uct.iface_attr.latency.c, 2e-6, 1e-9));
    th_uct_close(&uct);
    calib_rm_dir(dir);
}

TH_TEST(calib, bad_hand_written_model)
{
    ucs_calib_model_t model;
    char dir[64];
    th_uct_t uct;

    calib_env(dir, sizeof(dir));
    setenv("UCX_LOG_LEVEL", "fatal", 1); /* the error is expected */
    setenv("UCX_CALIB_FILE", "/nonexistent/model", 1);
    setenv("UCX_IB_REG_METHODS", "direct", 1);
    setenv("UCX_IB_MEM_REG_OVERHEAD", "9us", 1);
    /* the md still opens, with UCX's constant */
    if (th_uct_open(&uct, "hcr", NULL) != UCS_OK) {
        TH_SKIP("no hcr device");
    }
    TH_ASSERT(calib_close(uct.md_attr.reg_cost.c, 9e-6, 1e-9));
    TH_ASSERT_EQ(ucs_calib_find(CALIB_DEV, &model, NULL), UCS_ERR_NO_ELEM);
    th_uct_close(&uct);
    calib_rm_dir(dir);
}

/* the value of key in the tool's parsable output (in out) */
static const char *
calib_out_value(const char *out, const char *key, char *value, size_t max)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\n%s=", key);
    p = strstr(out, pat);
    if (p == NULL) {
        TH_FAIL("ucx_hcr_calib -p shows no %s:\n%s", key, out);
    }
    p += strlen(pat);
    snprintf(value, max, "%.*s", (int)strcspn(p, "\n"), p);
    return value;
}

/* a value of ucx_hcr_calib -p the same, within rounding, in two outputs */
static void calib_compare_key(const char *out_measured, const char *out_file,
                              const char *key)
{
    char value[64], measured[64];

    calib_out_value(out_measured, key, measured, sizeof(measured));
    calib_out_value(out_file, key, value, sizeof(value));
    th_log("%s: measured %s, from the -m file %s", key, measured, value);
    if (strcmp(value, measured) &&
        !calib_close(atof(value), atof(measured), 1e-6)) {
        TH_FAIL("%s: %s measured, %s read back from ucx_hcr_calib -m", key,
                measured, value);
    }
}

/* ucx_hcr_calib -m prints the model in the file format: given back as a
 * hand-written model (UCX_CALIB_FILE), the tool shows the same terms,
 * and derives the same sizes and engine choice from them, and names the
 * file as their source; -P plots it (a PNG, by gnuplot) */
TH_TEST_TIMEOUT(calib, tool_model_file_and_plot, 120)
{
    static const char *keys[] = {"reg_resident_c",
                                 "reg_resident_m",
                                 "reg_nonresident_m",
                                 "dereg_c",
                                 "xfer_fault_m",
                                 "copy_fault_m",
                                 "net_latency",
                                 "net_bw",
                                 "net_gap",
                                 "engine_thread_bw",
                                 "engine_thread_net_overlap",
                                 "sp_c0",
                                 "sp_thresh",
                                 "sp_sub",
                                 "zcopy_thresh_resident",
                                 "zcopy_thresh_nonresident",
                                 "engine_choice"};
    char dir[64], path[128], png[128], value[64];
    char *out_measured, *out_file, *out, key[64];
    unsigned char magic[8];
    unsigned i, num_copy;
    const char *p;
    FILE *f;

    calib_env(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/model", dir);
    snprintf(png, sizeof(png), "%s/plot.png", dir);
    TH_ASSERT_EQ(th_run_cmd(&out,
                            "%s/bin/ucx_hcr_calib -d " CALIB_DEV " -m > %s",
                            th_prefix(), path),
                 0);
    free(out);
    TH_ASSERT_EQ(th_run_cmd(&out_measured,
                            "%s/bin/ucx_hcr_calib -d " CALIB_DEV " -p",
                            th_prefix()),
                 0);
    TH_ASSERT_EQ(th_run_cmd(&out_file,
                            "UCX_CALIB_FILE=%s "
                            "%s/bin/ucx_hcr_calib -d " CALIB_DEV " -p",
                            path, th_prefix()),
                 0);
    TH_ASSERT_STR_EQ(calib_out_value(out_measured, "source", value,
                                     sizeof(value)),
                     "cache");
    TH_ASSERT_STR_EQ(calib_out_value(out_file, "source", value, sizeof(value)),
                     "file");
    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); ++i) {
        calib_compare_key(out_measured, out_file, keys[i]);
    }
    /* the memcpy points are at the working sets of this host's caches */
    num_copy = 0;
    for (p = strstr(out_measured, "\ncopy_bw_"); p != NULL;
         p = strstr(p + 1, "\ncopy_bw_")) {
        snprintf(key, sizeof(key), "%.*s", (int)strcspn(p + 1, "="), p + 1);
        calib_compare_key(out_measured, out_file, key);
        ++num_copy;
    }
    TH_ASSERT_GE(num_copy, 2);
    free(out_measured);
    free(out_file);

    TH_ASSERT_EQ(th_run_cmd(&out,
                            "%s/bin/ucx_hcr_calib -d " CALIB_DEV " -P %s 2>&1",
                            th_prefix(), png),
                 0);
    free(out);
    f = fopen(png, "rb");
    TH_ASSERT(f != NULL);
    TH_ASSERT_EQ(fread(magic, 1, sizeof(magic), f), sizeof(magic));
    fclose(f);
    TH_ASSERT_EQ(memcmp(magic, "\x89PNG\r\n\x1a\n", 8), 0);
    calib_rm_dir(dir);
}
