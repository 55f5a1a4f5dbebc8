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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


typedef struct {
    const char *dev_name;  /* NULL: every device */
    int        parsable;
    int        model_file;
    const char *plot_path;
} calib_opts_t;


static void usage(void)
{
    printf("Usage: ucx_hcr_calib [options]\n"
           "Show the cost model hcr measures on each InfiniBand device.\n"
           "  -d DEV    only this device (e.g. softverbs0, mlx5_0)\n"
           "  -f        measure again instead of reading the cache\n"
           "  -p        parsable output: key=value lines\n"
           "  -m        print the model in the cache's file format (for\n"
           "            UCX_CALIB_FILE)\n"
           "  -P FILE   plot registration vs copy cost against size (PNG)\n"
           "  -h        this help\n"
           "Settings: UCX_CALIB_MODE, UCX_CALIB_DIR, "
           "UCX_CALIB_FILE (see ucx_info -c -f).\n");
}

static void size_str(size_t size, char *buf, size_t max)
{
    if (size == UCS_CALIB_SIZE_INF) {
        ucs_strncpy_zero(buf, "never", max);
    } else if (size == 0) {
        ucs_strncpy_zero(buf, "always", max);
    } else {
        ucs_memunits_to_str(size, buf, max);
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
    for (i = 0; i < m->num_copy; ++i) {
        printf("copy_bw_%zu=%.6e\n", m->copy[i].size, m->copy[i].bw);
    }
    printf("net_latency=%.9e\nnet_bw=%.6e\nnet_gap=%.9e\n", m->net_latency,
           m->net_bw, m->net_gap);
    print_size_kv("zcopy_thresh_resident",
                  d->zcopy_thresh[UCS_CALIB_PAGES_RESIDENT]);
    print_size_kv("zcopy_thresh_nonresident",
                  d->zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT]);
    print_size_kv("sp_thresh", d->sp_thresh);
    printf("sp_c0=%zu\nsp_q=%.3f\nsp_sub=%zu\n", d->sp_c0, d->sp_q,
           d->sp_sub);
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

static void print_linear(const char *what, ucs_linear_func_t f)
{
    printf("  %-30s %9.3f us + %8.1f ns/page\n", what, f.c * 1e6,
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
    printf("registration\n");
    print_linear("resident pages", m->reg[UCS_CALIB_PAGES_RESIDENT]);
    print_linear("non-resident pages", m->reg[UCS_CALIB_PAGES_NONRESIDENT]);
    print_linear("deregistration", m->dereg);
    print_linear("copy from non-resident (extra)", m->copy_fault);
    print_linear("zcopy from non-resident (extra)", m->xfer_fault);
    printf("memcpy bandwidth by working set\n");
    for (i = 0; i < m->num_copy; ++i) {
        ucs_memunits_to_str(m->copy[i].size, s1, sizeof(s1));
        printf("  %-30s %9.0f MB/s\n", s1, m->copy[i].bw / UCS_MBYTE);
    }
    printf("network (loopback RC QPs)\n");
    printf("  %-30s %9.3f us\n", "latency (one way)", m->net_latency * 1e6);
    printf("  %-30s %9.0f MB/s\n", "bandwidth", m->net_bw / UCS_MBYTE);
    printf("  %-30s %9.3f us\n", "gap between messages", m->net_gap * 1e6);
    printf("critical sizes\n");
    size_str(d->zcopy_thresh[UCS_CALIB_PAGES_RESIDENT], s1, sizeof(s1));
    size_str(d->zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT], s2, sizeof(s2));
    printf("  register+zcopy beats copy    resident: %s, non-resident: %s\n",
           s1, s2);
    size_str(d->sp_thresh, s1, sizeof(s1));
    printf("  superpipeline beats one copy %s\n", s1);
    ucs_memunits_to_str(d->sp_c0, s1, sizeof(s1));
    ucs_memunits_to_str(d->sp_sub, s2, sizeof(s2));
    printf("superpipeline\n  C_0 %s, q %.3f, sub-blocks %s%s\n", s1, d->sp_q,
           s2, (ucs_calib_copy_bw(m, SIZE_MAX) < (2.0 * m->net_bw)) ?
           " (copies not twice as fast as the network: chunks double)" : "");
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

static int print_model_file(const ucs_calib_model_t *m)
{
    ucs_calib_model_print(m, stdout);
    return 0;
}

/* registration + deregistration vs copy, resident and not, in us */
static int plot(const char *png, const char *dev, const ucs_calib_model_t *m,
                const ucs_calib_derived_t *d)
{
    char data[] = "/tmp/ucx_hcr_calib_data.XXXXXX";
    FILE *f, *gp;
    size_t size, t;
    int fd, ret, p;

    fd = mkstemp(data);
    if ((fd < 0) || ((f = fdopen(fd, "w")) == NULL)) {
        fprintf(stderr, "cannot create plot data: %s\n", strerror(errno));
        return -1;
    }
    for (size = 1024; size <= 256 * UCS_MBYTE; size *= 2) {
        fprintf(f, "%zu %g %g %g %g\n", size,
                ucs_calib_reg_time(m, size, UCS_CALIB_PAGES_RESIDENT) * 1e6,
                ucs_calib_copy_time(m, size, UCS_CALIB_PAGES_RESIDENT) * 1e6,
                ucs_calib_reg_time(m, size, UCS_CALIB_PAGES_NONRESIDENT) *
                        1e6,
                ucs_calib_copy_time(m, size, UCS_CALIB_PAGES_NONRESIDENT) *
                        1e6);
    }
    fclose(f);

    gp = popen("gnuplot", "w");
    if (gp == NULL) {
        fprintf(stderr, "cannot run gnuplot: %s\n", strerror(errno));
        unlink(data);
        return -1;
    }
    fprintf(gp, "set terminal png size 900,600\n");
    fprintf(gp, "set output '%s'\n", png);
    fprintf(gp, "set title 'registration vs copy on %s'\n", dev);
    fprintf(gp, "set logscale xy\nset grid\nset key left top\n");
    fprintf(gp, "set xlabel 'size (bytes)'\nset ylabel 'time (us)'\n");
    for (p = 0; p < UCS_CALIB_PAGES_LAST; ++p) {
        t = d->zcopy_thresh[p];
        if ((t != 0) && (t != UCS_CALIB_SIZE_INF)) {
            fprintf(gp, "set arrow from %zu, graph 0 to %zu, graph 1 nohead "
                    "dt 2 lc %d\n", t, t, (p == 0) ? 1 : 3);
            fprintf(gp, "set label '%s crossover' at %zu, graph %s "
                    "rotate by 90 offset -1,0\n",
                    (p == 0) ? "resident" : "non-resident", t,
                    (p == 0) ? "0.55" : "0.05");
        }
    }
    fprintf(gp, "plot '%s' using 1:2 with lines lw 2 lc 1 title "
            "'register+deregister, resident', "
            "'' using 1:3 with lines lw 2 lc 2 title 'copy, resident', "
            "'' using 1:4 with lines lw 2 lc 3 title "
            "'register+deregister+transfer faults, non-resident', "
            "'' using 1:5 with lines lw 2 lc 4 title 'copy, non-resident'\n",
            data);
    ret = pclose(gp);
    unlink(data);
    if (ret != 0) {
        fprintf(stderr, "gnuplot failed (status %d)\n", ret);
        return -1;
    }
    return 0;
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

    if ((ret == 0) && (opts->plot_path != NULL)) {
        ret = plot(opts->plot_path, md_name, &model, &derived);
    }

out:
    uct_md_close(md);
    return ret;
}

int main(int argc, char **argv)
{
    calib_opts_t opts = {NULL, 0, 0, NULL};
    uct_component_attr_t comp_attr;
    uct_component_h *comps;
    unsigned num_comps, c, m;
    int ret = 0, found = 0;
    ucs_status_t status;
    int opt;

    while ((opt = getopt(argc, argv, "d:fpmP:h")) != -1) {
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
        return 1;
    }
    return ret;
}
