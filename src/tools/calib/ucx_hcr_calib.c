/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

/*
 * ucx_hcr_calib: shows the measured cost model of each IB device (as hcr
 * measured it when the md opened, or read it from the cache), the critical
 * sizes and superpipeline parameters derived from it, the reg_cost the md
 * now reports, and plots registration against copy cost.
 */

#include <uct/api/uct.h>
#include <ucs/calib/calib.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* msg_size: the size -s asks the costs of, 0 when not asked */
typedef struct {
    const char *dev_name;  /* NULL: every device */
    int        parsable;
    int        model_file;
    const char *plot_path;
    size_t msg_size;
} calib_opts_t;


/* Where rndv/sppln takes the superpipeline for a first send, as
 * ucp_sppln_lane_model_init() sets it: above what the three staging slots
 * of a transfer hold (UCX_RNDV_SPPLN_SLOT_SIZE, 1 MiB by default) */
static size_t sppln_from(const ucs_calib_derived_t *d)
{
    const char *env = getenv("UCX_RNDV_SPPLN_SLOT_SIZE");
    size_t slot     = UCS_MBYTE;

    if ((env != NULL) && (ucs_str_to_memunits(env, &slot) != UCS_OK)) {
        slot = UCS_MBYTE; /* UCP refuses it, and says so */
    }
    return ucs_calib_sp_from(d, 3 * slot);
}

/* the per-message choice of rndv/sppln for a first send (a buffer neither
 * in the registration cache nor sent before), as ucp_sppln_choose() makes
 * it from the same model */
static const char *first_send_path(const ucs_calib_derived_t *d, size_t size,
                                   ucs_calib_pages_t pages)
{
    if (size >= d->zcopy_thresh[pages]) {
        return "zcopy";
    } else if (size >= sppln_from(d)) {
        return "sppln";
    }
    return "bcopy";
}


static void usage(void)
{
    printf("Usage: ucx_hcr_calib [options]\n"
           "Show the cost model hcr measures on each InfiniBand device.\n"
           "  -d DEV    only this device (e.g. softverbs0, mlx5_0)\n"
           "  -f        measure again instead of reading the cache\n"
           "  -p        parsable output: key=value lines\n"
           "  -m        print the model in the cache's file format (for\n"
           "            UCX_CALIB_FILE)\n"
           "  -s SIZE   also the costs of a first send of SIZE bytes (k, m\n"
           "            suffixes) and the path rndv/sppln takes for it\n"
           "  -P FILE   plot registration vs copy cost against size (PNG)\n"
           "  -h        this help\n"
           "Settings: UCX_CALIB_MODE, UCX_CALIB_DIR, "
           "UCX_CALIB_FILE (see ucx_info -c -f).\n");
}

/* bytes with a binary unit: 512 B, 98.7 KiB, 4.4 MiB */
static void bytes_str(size_t size, char *buf, size_t max)
{
    if (size < UCS_KBYTE) {
        snprintf(buf, max, "%zu B", size);
    } else if (size < UCS_MBYTE) {
        snprintf(buf, max, "%.*f KiB", (size % UCS_KBYTE) ? 1 : 0,
                 (double)size / UCS_KBYTE);
    } else if (size < UCS_GBYTE) {
        snprintf(buf, max, "%.*f MiB", (size % UCS_MBYTE) ? 1 : 0,
                 (double)size / UCS_MBYTE);
    } else {
        snprintf(buf, max, "%.1f GiB", (double)size / UCS_GBYTE);
    }
}

/* a critical size: "never" when nothing in the searched range reaches it */
static void size_str(size_t size, char *buf, size_t max)
{
    if (size == UCS_CALIB_SIZE_INF) {
        ucs_strncpy_zero(buf, "never", max);
    } else if (size == 0) {
        ucs_strncpy_zero(buf, "always", max);
    } else {
        bytes_str(size, buf, max);
    }
}

static void print_size_kv(const char *key, size_t size)
{
    if (size == UCS_CALIB_SIZE_INF) {
        printf("%s=inf\n", key);
    } else {
        printf("%s=%zu\n", key, size);
    }
}

/* the backend the superpipeline's auto mode takes for 1 MiB chunks */
static void print_engine_choice(const ucs_calib_model_t *m, const char *fmt)
{
    ucs_copy_backend_t b;

    printf(fmt, (ucs_calib_engine_choose(m, UCS_COPY_BACKEND_AUTO,
                                         UCS_CALIB_ENGINE_SIZE, &b) == UCS_OK) ?
                ucs_copy_backend_name(b) : "none");
}

/* messages whose untouched receive buffers the output describes */
static const size_t fill_sizes[] = {256 * UCS_KBYTE, UCS_MBYTE, 4 * UCS_MBYTE,
                                    16 * UCS_MBYTE};

static void print_parsable(const char *dev, const ucs_calib_model_t *m,
                           const ucs_calib_derived_t *d,
                           ucs_calib_source_t source, double open_time,
                           const uct_md_attr_t *md_attr)
{
    unsigned i;

    printf("dev=%s\n", dev);
    printf("source=%s\n", ucs_calib_source_name(source));
    printf("measure_time=%.6f\n", m->measure_time);
    printf("md_open_time=%.6f\n", open_time);
    printf("reg_resident_c=%.9e\nreg_resident_m=%.9e\n",
           m->reg[UCS_CALIB_PAGES_RESIDENT].c,
           m->reg[UCS_CALIB_PAGES_RESIDENT].m);
    printf("reg_nonresident_c=%.9e\nreg_nonresident_m=%.9e\n",
           m->reg[UCS_CALIB_PAGES_NONRESIDENT].c,
           m->reg[UCS_CALIB_PAGES_NONRESIDENT].m);
    printf("dereg_c=%.9e\ndereg_m=%.9e\n", m->dereg.c, m->dereg.m);
    printf("copy_fault_c=%.9e\ncopy_fault_m=%.9e\n", m->copy_fault.c,
           m->copy_fault.m);
    printf("xfer_fault_c=%.9e\nxfer_fault_m=%.9e\n", m->xfer_fault.c,
           m->xfer_fault.m);
    printf("fill_populate_c=%.9e\nfill_populate_m=%.9e\n", m->fill_populate.c,
           m->fill_populate.m);
    printf("fill_uffd_c=%.9e\nfill_uffd_m=%.9e\n", m->fill_uffd.c,
           m->fill_uffd.m);
    printf("fill_copy_c=%.9e\nfill_copy_m=%.9e\n", m->fill_copy.c,
           m->fill_copy.m);
    for (i = 0; i < m->num_copy; ++i) {
        printf("copy_bw_%zu=%.6e\n", m->copy[i].size, m->copy[i].bw);
    }
    printf("net_latency=%.9e\nnet_bw=%.6e\nnet_gap=%.9e\nnet_frag_gap=%.9e\n"
           "net_cpu=%.6f\n",
           m->net_latency, m->net_bw, m->net_gap, m->net_frag_gap, m->net_cpu);
    for (i = 0; i < m->num_net; ++i) {
        printf("net_bw_%zu=%.6e\n", m->net[i].size, m->net[i].bw);
    }
    for (i = 0; i < m->num_stage; ++i) {
        printf("stage_bw_%zu=%.6e\n", m->stage[i].size, m->stage[i].bw);
    }
    print_size_kv("zcopy_thresh_resident",
                  d->zcopy_thresh[UCS_CALIB_PAGES_RESIDENT]);
    print_size_kv("zcopy_thresh_nonresident",
                  d->zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT]);
    print_size_kv("sp_thresh", d->sp_thresh);
    print_size_kv("sppln_from", sppln_from(d));
    print_size_kv("cached_staged_thresh", d->cached_staged_thresh);
    printf("sp_c0=%zu\nsp_q=%.3f\nsp_sub=%zu\n", d->sp_c0, d->sp_q,
           d->sp_sub);
    print_size_kv("fill_uffd_min", d->fill_uffd_min);
    for (i = 0; i < ucs_static_array_size(fill_sizes); ++i) {
        printf("fill_ahead_%zu=%zu\n", fill_sizes[i],
               ucs_calib_fill_ahead(m, fill_sizes[i], d->sp_sub, 0));
    }
    for (i = 0; i < UCS_COPY_BACKEND_LAST; ++i) {
        if (m->engine[i].bw > 0) {
            printf("engine_%s_start=%.9e\nengine_%s_bw=%.6e\n"
                   "engine_%s_overlap=%.4f\nengine_%s_net_overlap=%.4f\n",
                   ucs_copy_backend_name(i), m->engine[i].start,
                   ucs_copy_backend_name(i), m->engine[i].bw,
                   ucs_copy_backend_name(i), m->engine[i].overlap,
                   ucs_copy_backend_name(i),
                   ucs_calib_engine_net_overlap(&m->engine[i]));
        }
    }
    print_engine_choice(m, "engine_choice=%s\n");
    printf("md_reg_cost_c=%.9e\nmd_reg_cost_m=%.9e\n", md_attr->reg_cost.c,
           md_attr->reg_cost.m);
}

/* a first send of @a size bytes: what each path costs by the model */
static void print_message_parsable(const ucs_calib_model_t *m,
                                   const ucs_calib_derived_t *d, size_t size)
{
    static const char *pages_name[] = {"resident", "nonresident"};
    int p;

    printf("msg_size=%zu\n", size);
    for (p = 0; p < UCS_CALIB_PAGES_LAST; ++p) {
        printf("msg_reg_time_%s=%.9e\nmsg_copy_time_%s=%.9e\n"
               "msg_path_%s=%s\n",
               pages_name[p], ucs_calib_reg_time(m, size, p), pages_name[p],
               ucs_calib_copy_time(m, size, p), pages_name[p],
               first_send_path(d, size, p));
    }
    printf("msg_net_time=%.9e\nmsg_sp_time=%.9e\nmsg_path_cached=%s\n",
           m->net_latency + (size / ucs_calib_net_bw(m, size)),
           ucs_calib_sp_time(m, d, size),
           (size < d->cached_staged_thresh) ? "zcopy" : "staged");
}

static void print_linear(const char *what, ucs_linear_func_t f)
{
    printf("  %-32s %9.3f us + %8.1f ns per 4 KiB page\n", what, f.c * 1e6,
           f.m * 1e9 * 4096);
}

static void print_human(const char *dev, const ucs_calib_model_t *m,
                        const ucs_calib_derived_t *d,
                        ucs_calib_source_t source, double open_time,
                        const uct_md_attr_t *md_attr)
{
    char s1[32], s2[32];
    unsigned i;

    printf("# %s: model %s (measurement took %.3f s; md open now %.3f s)\n",
           dev, (source == UCS_CALIB_SOURCE_CACHE) ? "read from the cache" :
                ucs_calib_source_name(source),
           m->measure_time, open_time);
    printf("registration (pinning and the device's tables)\n");
    print_linear("resident pages", m->reg[UCS_CALIB_PAGES_RESIDENT]);
    print_linear("untouched pages", m->reg[UCS_CALIB_PAGES_NONRESIDENT]);
    print_linear("deregistration", m->dereg);
    print_linear("copy from untouched (extra)", m->copy_fault);
    print_linear("zcopy from untouched (extra)", m->xfer_fault);
    printf("memcpy bandwidth by working set\n");
    for (i = 0; i < m->num_copy; ++i) {
        bytes_str(m->copy[i].size, s1, sizeof(s1));
        printf("  %-32s %9.0f MB/s\n", s1, m->copy[i].bw / UCS_MBYTE);
    }
    printf("network (two RC QPs of this process, through the device)\n");
    printf("  %-32s %9.3f us\n", "latency (one way)", m->net_latency * 1e6);
    for (i = 0; i <= m->num_net; ++i) {
        /* by the size of the transfers (and of their buffers) */
        bytes_str((i == 0) ? UCS_CALIB_NET_BW_SIZE : m->net[i - 1].size, s1,
                  sizeof(s1));
        ucs_snprintf_safe(s2, sizeof(s2), "bandwidth, %s transfers", s1);
        printf("  %-32s %9.0f MB/s\n", s2,
               ((i == 0) ? m->net_bw : m->net[i - 1].bw) / UCS_MBYTE);
    }
    for (i = 0; i < m->num_stage; ++i) {
        /* what the staged alternative to those large transfers achieves */
        bytes_str(m->stage[i].size, s1, sizeof(s1));
        ucs_snprintf_safe(s2, sizeof(s2), "staged sender, %s", s1);
        printf("  %-32s %9.0f MB/s (copies and puts of %s chunks)\n", s2,
               m->stage[i].bw / UCS_MBYTE, "1 MiB");
    }
    printf("  %-32s %9.3f us\n", "gap between messages", m->net_gap * 1e6);
    printf("  %-32s %9.3f us (sends of %zu bytes, received and copied "
           "out)\n",
           "gap between fragments", m->net_frag_gap * 1e6, UCS_CALIB_FRAG_SIZE);
    printf("  %-32s %9.0f %%\n", "poster's core taken by a transfer",
           m->net_cpu * 100);
    printf("critical sizes of a first send (a buffer not registered yet)\n");
    size_str(d->zcopy_thresh[UCS_CALIB_PAGES_RESIDENT], s1, sizeof(s1));
    size_str(d->zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT], s2, sizeof(s2));
    printf("  register + zero-copy beats a copy from: resident pages %s, "
           "untouched pages %s\n  (counting what the receiver of a new "
           "buffer pays more by zero-copy than\n  staged, where the fill "
           "costs below are measured)\n",
           s1, s2);
    size_str(d->sp_thresh, s1, sizeof(s1));
    printf("  the superpipeline beats one copy from: %s\n", s1);
    size_str(sppln_from(d), s1, sizeof(s1));
    printf("  so rndv/sppln sends a first send of: bcopy below %s (at least "
           "what the three\n  staging slots hold), sppln from there,\n",
           s1);
    size_str(d->zcopy_thresh[UCS_CALIB_PAGES_RESIDENT], s1, sizeof(s1));
    printf("  zcopy from %s (resident) or %s (untouched)\n", s1, s2);
    size_str(d->cached_staged_thresh, s1, sizeof(s1));
    printf("a registered or resent buffer: zcopy, staged from %s (where "
           "transfers between\n  buffers the caches cannot hold are slow "
           "enough)\n",
           s1);
    bytes_str(d->sp_c0, s1, sizeof(s1));
    bytes_str(d->sp_sub, s2, sizeof(s2));
    printf("superpipeline (chunk i is C_0 * q^i bytes, at most a staging "
           "slot)\n");
    printf("  C_0 %s: the bytes copied during a rendezvous round trip (the "
           "first chunk is\n  C_0 or an eighth of the message, whichever "
           "is more)\n",
           s1);
    printf("  q %.2f: copy bandwidth / network bandwidth (%.0f / %.0f MB/s), "
           "at least 2%s\n",
           d->sp_q, ucs_calib_copy_bw(m, SIZE_MAX) / UCS_MBYTE,
           m->net_bw / UCS_MBYTE,
           (ucs_calib_copy_bw(m, SIZE_MAX) < (2.0 * m->net_bw)) ?
                   ":\n  copies are not twice as fast as the network, so "
                   "chunks "
                   "double" :
                   "");
    printf("  sub-blocks %s: each a notified put, long enough on the wire "
           "that its gap\n  (%.1f us) is a small share of it\n",
           s2, m->net_gap * 1e6);
    printf("an untouched receive buffer (populate: %.1f us + %.0f ns/KiB, "
           "and the copy into\n  its pages %.1f us + %.0f ns/KiB more than "
           "into resident ones; userfaultfd\n  with the copy: %.1f us + "
           "%.0f ns/KiB), faulted in ahead of the data in\n  sub-blocks of "
           "%zu KiB:",
           m->fill_populate.c * 1e6, m->fill_populate.m * 1e9 * UCS_KBYTE,
           m->fill_copy.c * 1e6, m->fill_copy.m * 1e9 * UCS_KBYTE,
           m->fill_uffd.c * 1e6, m->fill_uffd.m * 1e9 * UCS_KBYTE,
           (size_t)(d->sp_sub / UCS_KBYTE));
    for (i = 0; i < ucs_static_array_size(fill_sizes); ++i) {
        bytes_str(fill_sizes[i], s1, sizeof(s1));
        bytes_str(ucs_calib_fill_ahead(m, fill_sizes[i], d->sp_sub, 0), s2,
                  sizeof(s2));
        printf("%s %s of %s", (i == 0) ? "" : ",", s2, s1);
    }
    if (d->fill_uffd_min == UCS_CALIB_SIZE_INF) {
        printf(";\n  the rest too: userfaultfd does not cost less\n");
    } else {
        bytes_str(d->fill_uffd_min, s1, sizeof(s1));
        printf(";\n  the rest filled by userfaultfd where it has at least %s "
               "of whole pages\n",
               s1);
    }
    printf("copy engine (1 MiB copies while the caller computes)\n");
    for (i = 0; i < UCS_COPY_BACKEND_LAST; ++i) {
        if (m->engine[i].bw > 0) {
            printf("  %-8s start %6.2f us, %6.0f MB/s, overlap %5.2f, "
                   "net of its own CPU %5.2f\n", ucs_copy_backend_name(i),
                   m->engine[i].start * 1e6, m->engine[i].bw / UCS_MBYTE,
                   m->engine[i].overlap,
                   ucs_calib_engine_net_overlap(&m->engine[i]));
        }
    }
    print_engine_choice(m, "  superpipeline stages with: %s "
                           "(UCX_RNDV_SPPLN_COPY_ASYNC=auto)\n");
    printf("md reg_cost (ucx_info -d)\n  %.3f us + %.3f ns/KiB\n",
           md_attr->reg_cost.c * 1e6, md_attr->reg_cost.m * 1e9 * UCS_KBYTE);
}

static void print_message_human(const ucs_calib_model_t *m,
                                const ucs_calib_derived_t *d, size_t size)
{
    static const char *pages_name[] = {"resident", "untouched"};
    char s1[32];
    int p;

    bytes_str(size, s1, sizeof(s1));
    printf("a first send of %s\n", s1);
    for (p = 0; p < UCS_CALIB_PAGES_LAST; ++p) {
        printf("  %-9s pages: register+deregister %8.1f us, copy %8.1f us: "
               "path %s\n",
               pages_name[p], ucs_calib_reg_time(m, size, p) * 1e6,
               ucs_calib_copy_time(m, size, p) * 1e6,
               first_send_path(d, size, p));
    }
    printf("  %-32s %8.1f us\n", "network (latency + size/bandwidth)",
           (m->net_latency + (size / m->net_bw)) * 1e6);
    printf("  %-32s %8.1f us\n", "superpipelined send (model)",
           ucs_calib_sp_time(m, d, size) * 1e6);
}

static int print_model_file(const ucs_calib_model_t *m)
{
    ucs_calib_model_print(m, stdout);
    return 0;
}

/* a vertical mark at @a size, labelled, unless the size is none */
static void plot_mark(FILE *gp, size_t size, const char *what, int color,
                      const char *height)
{
    char s1[32];

    if ((size == 0) || (size == UCS_CALIB_SIZE_INF)) {
        return;
    }

    size_str(size, s1, sizeof(s1));
    fprintf(gp,
            "set arrow from %zu, graph 0 to %zu, graph 1 nohead dt 2 "
            "lc %d\n",
            size, size, color);
    fprintf(gp,
            "set label '%s %s' at %zu, graph %s rotate by 90 "
            "offset -1,0 tc lt %d\n",
            what, s1, size, height, color);
}

/*
 * What a first send pays for each way of sending, in us, by size: register
 * (and deregister, and the first transfer's faults on untouched pages)
 * against a copy through pre-registered memory, for resident and untouched
 * pages, with the network's own time for scale; marks at the crossovers,
 * the superpipeline's threshold and C_0
 */
static int plot(const char *png, const char *dev, const ucs_calib_model_t *m,
                const ucs_calib_derived_t *d)
{
    char data[] = "/tmp/ucx_hcr_calib_data.XXXXXX";
    const char *sep = "";
    char label[32];
    FILE *f, *gp;
    size_t size;
    int fd, ret;

    fd = mkstemp(data);
    if ((fd < 0) || ((f = fdopen(fd, "w")) == NULL)) {
        fprintf(stderr, "cannot create plot data: %s\n", strerror(errno));
        return -1;
    }
    for (size = 1024; size <= 256 * UCS_MBYTE; size *= 2) {
        fprintf(f, "%zu %g %g %g %g %g\n", size,
                ucs_calib_reg_time(m, size, UCS_CALIB_PAGES_RESIDENT) * 1e6,
                ucs_calib_copy_time(m, size, UCS_CALIB_PAGES_RESIDENT) * 1e6,
                ucs_calib_reg_time(m, size, UCS_CALIB_PAGES_NONRESIDENT) * 1e6,
                ucs_calib_copy_time(m, size, UCS_CALIB_PAGES_NONRESIDENT) * 1e6,
                (m->net_latency + (size / m->net_bw)) * 1e6);
    }
    fclose(f);

    gp = popen("gnuplot", "w");
    if (gp == NULL) {
        fprintf(stderr, "cannot run gnuplot: %s\n", strerror(errno));
        unlink(data);
        return -1;
    }
    fprintf(gp, "set terminal png size 1000,650\n");
    fprintf(gp, "set output '%s'\n", png);
    fprintf(gp,
            "set title \"what a first send pays on %s: register or "
            "copy\"\n",
            dev);
    fprintf(gp, "set logscale xy\nset grid\nset key right bottom\n");
    fprintf(gp, "set xrange [1024:%zu]\n", (size_t)(256 * UCS_MBYTE));
    fprintf(gp, "set xlabel 'message size'\nset ylabel 'time (us)'\n");
    fprintf(gp, "set format y '%%g'\nset xtics (");
    for (size = 1024; size <= 256 * UCS_MBYTE; size *= 4) {
        bytes_str(size, label, sizeof(label));
        fprintf(gp, "%s'%s' %zu", sep, label, size);
        sep = ", ";
    }
    fprintf(gp, ")\n");
    plot_mark(gp, d->zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
              "zcopy wins, resident:", 1, "0.55");
    plot_mark(gp, d->zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT],
              "zcopy wins, untouched:", 3, "0.05");
    plot_mark(gp, sppln_from(d), "superpipeline from", 7, "0.55");
    plot_mark(gp, d->sp_c0, "C_0", 8, "0.55");
    fprintf(gp,
            "plot '%s' using 1:2 with lines lw 2 lc 1 title "
            "'register+deregister, resident pages', "
            "'' using 1:3 with lines lw 2 lc 2 title 'copy, resident pages', "
            "'' using 1:4 with lines lw 2 lc 3 title "
            "'register+deregister+transfer faults, untouched pages', "
            "'' using 1:5 with lines lw 2 lc 4 title 'copy, untouched pages', "
            "'' using 1:6 with lines lw 2 dt 3 lc rgb 'black' title "
            "'network: latency + size / bandwidth'\n",
            data);
    ret = pclose(gp);
    unlink(data);
    if (ret != 0) {
        fprintf(stderr, "gnuplot failed (status %d)\n", ret);
        return -1;
    }
    return 0;
}

/*
 * Where no verbs device is found: on a host without RDMA hardware the
 * devices come from softverbs, which must be preloaded. Name the library
 * next to this program's, where the build installs it.
 */
static void print_no_device_hint(void)
{
    char exe[PATH_MAX], lib[PATH_MAX + 32];
    const char *preload = getenv("LD_PRELOAD");
    ssize_t len;
    char *dir;

    if ((preload != NULL) && (strstr(preload, "libsoftverbs") != NULL)) {
        fprintf(stderr, "hint: softverbs is preloaded but offers no device: "
                        "see its messages above, and SOFTVERBS_NDEVS\n");
        return;
    }

    len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len > 0) {
        exe[len] = '\0';
        dir      = strrchr(exe, '/');
        if (dir != NULL) {
            *dir = '\0';
            dir  = strrchr(exe, '/');
        }
        if (dir != NULL) {
            *dir = '\0';
            snprintf(lib, sizeof(lib), "%s/lib/libsoftverbs.so", exe);
            if (access(lib, R_OK) == 0) {
                fprintf(stderr,
                        "hint: on a host without RDMA hardware, "
                        "preload the verbs emulator:\n"
                        "  LD_PRELOAD=%s ucx_hcr_calib\n",
                        lib);
                return;
            }
        }
    }

    fprintf(stderr, "hint: on a host without RDMA hardware, preload "
                    "softverbs (LD_PRELOAD=<prefix>/lib/libsoftverbs.so)\n");
}

static int show_md(uct_component_h comp, const char *md_name,
                   const calib_opts_t *opts)
{
    ucs_calib_derived_t derived;
    ucs_calib_source_t source;
    uct_md_config_t *md_config;
    ucs_calib_model_t model;
    uct_md_attr_t md_attr;
    ucs_time_t start;
    double open_time;
    ucs_status_t status;
    uct_md_h md;
    int ret = 0;

    status = uct_md_config_read(comp, NULL, NULL, &md_config);
    if (status != UCS_OK) {
        fprintf(stderr, "cannot read the md configuration: %s\n",
                ucs_status_string(status));
        return -1;
    }

    /* hcr measures (or reads the cache) as the md opens */
    start     = ucs_get_time();
    status    = uct_md_open(comp, md_name, md_config, &md);
    open_time = ucs_time_to_sec(ucs_get_time() - start);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        fprintf(stderr, "cannot open %s: %s\n", md_name,
                ucs_status_string(status));
        return -1;
    }

    status = uct_md_query(md, &md_attr);
    if (status != UCS_OK) {
        fprintf(stderr, "cannot query %s: %s\n", md_name,
                ucs_status_string(status));
        ret = -1;
        goto out;
    }

    status = ucs_calib_find(md_name, &model, &source);
    if (status != UCS_OK) {
        fprintf(stderr,
                "%s: no measured model (is the hcr module installed,"
                " and UCX_CALIB_MODE not 'off'?)\n",
                md_name);
        ret = -1;
        goto out;
    }

    ucs_calib_derive(&model, &derived);
    if (opts->model_file) {
        ret = print_model_file(&model);
    } else if (opts->parsable) {
        print_parsable(md_name, &model, &derived, source, open_time,
                       &md_attr);
    } else {
        print_human(md_name, &model, &derived, source, open_time, &md_attr);
    }

    if ((ret == 0) && !opts->model_file && (opts->msg_size != 0)) {
        if (opts->parsable) {
            print_message_parsable(&model, &derived, opts->msg_size);
        } else {
            print_message_human(&model, &derived, opts->msg_size);
        }
    }

    if ((ret == 0) && (opts->plot_path != NULL)) {
        ret = plot(opts->plot_path, md_name, &model, &derived);
    }

out:
    uct_md_close(md);
    return ret;
}

int main(int argc, char **argv)
{
    calib_opts_t opts = {NULL, 0, 0, NULL, 0};
    uct_component_attr_t comp_attr;
    uct_component_h *comps;
    unsigned num_comps, c, m;
    int ret = 0, found = 0;
    ucs_status_t status;
    int opt;

    while ((opt = getopt(argc, argv, "d:fpms:P:h")) != -1) {
        switch (opt) {
        case 'd':
            opts.dev_name = optarg;
            break;
        case 'f':
            setenv("UCX_CALIB_MODE", "force", 1);
            break;
        case 'p':
            opts.parsable = 1;
            break;
        case 'm':
            opts.model_file = 1;
            break;
        case 'P':
            opts.plot_path = optarg;
            break;
        case 's':
            if ((ucs_str_to_memunits(optarg, &opts.msg_size) != UCS_OK) ||
                (opts.msg_size == 0) || (opts.msg_size == UCS_MEMUNITS_INF) ||
                (opts.msg_size == UCS_MEMUNITS_AUTO)) {
                fprintf(stderr,
                        "-s: a size of at least one byte, not "
                        "'%s'\n",
                        optarg);
                return 1;
            }
            break;
        case 'h':
            usage();
            return 0;
        default:
            usage();
            return 1;
        }
    }

    status = uct_query_components(&comps, &num_comps);
    if (status != UCS_OK) {
        fprintf(stderr, "uct_query_components: %s\n",
                ucs_status_string(status));
        return 1;
    }

    for (c = 0; c < num_comps; ++c) {
        comp_attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                               UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if ((uct_component_query(comps[c], &comp_attr) != UCS_OK) ||
            strcmp(comp_attr.name, "ib")) {
            continue;
        }

        comp_attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        comp_attr.md_resources = calloc(comp_attr.md_resource_count + 1,
                                        sizeof(*comp_attr.md_resources));
        if ((comp_attr.md_resources == NULL) ||
            (uct_component_query(comps[c], &comp_attr) != UCS_OK)) {
            free(comp_attr.md_resources);
            continue;
        }

        for (m = 0; m < comp_attr.md_resource_count; ++m) {
            const char *name = comp_attr.md_resources[m].md_name;

            if ((opts.dev_name != NULL) && strcmp(opts.dev_name, name)) {
                continue;
            }
            ++found;
            if (show_md(comps[c], name, &opts) != 0) {
                ret = 1;
            }
        }
        free(comp_attr.md_resources);
    }

    uct_release_component_list(comps);
    if (found == 0) {
        fprintf(stderr, "no InfiniBand device%s%s found\n",
                (opts.dev_name != NULL) ? " " : "",
                (opts.dev_name != NULL) ? opts.dev_name : "");
        print_no_device_hint();
        return 1;
    }
    return ret;
}
