/*
 * Register-vs-copy crossover, measured with the public UCT API.
 *
 * The calibration (src/ucs/calib/) predicts the size from which registering
 * a buffer, sending it zero-copy and deregistering it is faster than copying
 * it into a pre-registered staging buffer and sending that. This program
 * times both on the real transport, one process, loopback (two endpoints of
 * one iface connected to each other):
 *
 *   (a) zcopy:   uct_md_mem_reg(src) + put_zcopy(src) + wait + mem_dereg
 *   (b) staging: memcpy(staging <- src) + put_zcopy(staging) + wait
 *
 * for each size and for two kinds of source pages:
 *
 *   resident:    one buffer, written (memset) before every iteration, never
 *                registered between iterations;
 *   nonresident: a fresh anonymous mapping per iteration that nobody
 *                touched (the copy faults it in; on the zero-copy side the
 *                registration does where it pins, the put where the device
 *                faults pages in on access, as softverbs does).
 *
 * The destination and the staging buffer are registered once. Each point is
 * the median of several iterations of (a) and (b), interleaved so that drift
 * affects both alike. The crossover of a residency is the smallest size from
 * which zcopy wins at that and every larger size measured, interpolated in
 * log-log between the last losing and the first winning size.
 *
 * Where the two costs are within noise of each other over a range of sizes
 * (resident pages on softverbs: registering walks the pages at about the
 * rate memcpy copies them from DRAM), the crossover as a point moves with
 * every run; what a measurement does establish is the band it lies in. Each
 * iteration times (a) and (b) back to back, so the pairs give a sign test
 * per size: a method wins a size when it was faster in so many pairs that a
 * tie would give that few times in 20 (two-sided). The band runs from the
 * largest size that staging wins to the smallest size from which zcopy wins
 * and staging wins no larger one.
 *
 * Output (parsed by bench/calib-crossover.sh):
 *   # comment lines
 *   <size> <resident|nonresident> <t_zcopy_us> <t_staging_us> <winner>
 *     (winner: zcopy or staging, in capitals where the sign test decides)
 *   crossover <resident|nonresident> <bytes|none>
 *   band <resident|nonresident> <bytes: 0 if staging wins no size>
 *        <bytes|none: none if zcopy wins no size above the last one staging
 *         wins>
 *
 * Run with UCX_IB_REG_METHODS=direct: with the default registration cache
 * every registration after the first would be a cache hit. Registration is
 * what uct_md_mem_reg costs, which is not always one ibv_reg_mr: with
 * UCX_IB_PCI_RELAXED_ORDERING=auto (the default) on a CPU that prefers
 * relaxed ordering, the IB md registers every buffer twice. -v prints the
 * median of each phase (register, put, deregister | copy, put).
 */
#define _GNU_SOURCE
#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <alloca.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define KIB              1024ul
#define MIB              (1024ul * KIB)
#define MAX_SIZES        64
#define MAX_REPS         63
#define WAIT_TIMEOUT_SEC 30.0
#define MAX_PHASES       3

typedef enum {
    RES_RESIDENT,
    RES_NONRESIDENT,
    RES_LAST
} residency_t;

static const char *residency_names[] = {
    [RES_RESIDENT]    = "resident",
    [RES_NONRESIDENT] = "nonresident"
};

/* Iterations of one method at one point: the total and each phase */
typedef struct {
    double total[MAX_REPS];
    double phase[MAX_PHASES][MAX_REPS];
} samples_t;

typedef struct {
    /* options */
    const char          *tl_name;
    const char          *dev_name;
    size_t              min_size;
    size_t              max_size;
    unsigned            min_reps;
    int                 half_steps;
    int                 verbose;

    /* UCT objects */
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_component_h     component;
    uct_md_h            md;
    uct_iface_h         iface;
    uct_ep_h            ep[2];
    size_t              max_zcopy;

    /* buffers registered once */
    void                *dst;
    uct_mem_h           dst_memh;
    uct_rkey_bundle_t   dst_rkey;
    void                *staging;
    uct_mem_h           staging_memh;
    void                *resident_src;

    uct_completion_t    comp;
} bench_t;


static void fatal(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "calib-crossover: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

static void check_ucs(ucs_status_t status, const char *what)
{
    if (status != UCS_OK) {
        fatal("%s failed: %s", what, ucs_status_string(status));
    }
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n % 2) ? v[n / 2] : (v[(n / 2) - 1] + v[n / 2]) / 2;
}

/* t[0..nphases]: the clock at each phase boundary */
static void samples_store(samples_t *s, unsigned r, const double *t,
                          unsigned nphases)
{
    unsigned p;

    for (p = 0; p < nphases; ++p) {
        s->phase[p][r] = t[p + 1] - t[p];
    }
    s->total[r] = t[nphases] - t[0];
}

static void *map_anon(size_t size)
{
    void *ptr = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (ptr == MAP_FAILED) {
        fatal("mmap(%zu) failed: %s", size, strerror(errno));
    }
    return ptr;
}

static void comp_cb(uct_completion_t *self)
{
    /* never reached: the count keeps one reference of our own (see put) */
}

/* Open the md whose resources hold tl_name/dev_name, then the iface */
static void open_iface(bench_t *b)
{
    uct_iface_params_t params = {0};
    uct_component_attr_t comp_attr;
    uct_iface_config_t *iface_config;
    uct_md_config_t *md_config;
    uct_tl_resource_desc_t *tls;
    uct_component_h *comps;
    unsigned num_comps, c, m, t, num_tls;
    uct_iface_attr_t iface_attr;
    ucs_status_t status;
    uct_md_h md;

    check_ucs(uct_query_components(&comps, &num_comps),
              "uct_query_components");
    for (c = 0; (c < num_comps) && (b->md == NULL); ++c) {
        comp_attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                               UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        check_ucs(uct_component_query(comps[c], &comp_attr),
                  "uct_component_query");
        comp_attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        comp_attr.md_resources = alloca(sizeof(*comp_attr.md_resources) *
                                        comp_attr.md_resource_count);
        check_ucs(uct_component_query(comps[c], &comp_attr),
                  "uct_component_query");

        for (m = 0; (m < comp_attr.md_resource_count) && (b->md == NULL);
             ++m) {
            check_ucs(uct_md_config_read(comps[c], NULL, NULL, &md_config),
                      "uct_md_config_read");
            status = uct_md_open(comps[c], comp_attr.md_resources[m].md_name,
                                 md_config, &md);
            uct_config_release(md_config);
            if (status != UCS_OK) {
                continue; /* another component's device: not ours */
            }

            check_ucs(uct_md_query_tl_resources(md, &tls, &num_tls),
                      "uct_md_query_tl_resources");
            for (t = 0; t < num_tls; ++t) {
                if (!strcmp(tls[t].tl_name, b->tl_name) &&
                    !strcmp(tls[t].dev_name, b->dev_name)) {
                    b->md        = md;
                    b->component = comps[c];
                    break;
                }
            }
            uct_release_tl_resource_list(tls);
            if (b->md == NULL) {
                uct_md_close(md);
            }
        }
    }
    uct_release_component_list(comps);
    if (b->md == NULL) {
        fatal("no transport %s on device %s (is softverbs preloaded?)",
              b->tl_name, b->dev_name);
    }

    check_ucs(uct_md_iface_config_read(b->md, b->tl_name, NULL, NULL,
                                       &iface_config),
              "uct_md_iface_config_read");
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_STATS_ROOT |
                                  UCT_IFACE_PARAM_FIELD_RX_HEADROOM |
                                  UCT_IFACE_PARAM_FIELD_CPU_MASK;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = b->tl_name;
    params.mode.device.dev_name = b->dev_name;
    params.stats_root           = NULL;
    params.rx_headroom          = 0;
    UCS_CPU_ZERO(&params.cpu_mask);
    status = uct_iface_open(b->md, b->worker, &params, iface_config,
                            &b->iface);
    uct_config_release(iface_config);
    check_ucs(status, "uct_iface_open");

    check_ucs(uct_iface_query(b->iface, &iface_attr), "uct_iface_query");
    if (!(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) ||
        !(iface_attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP)) {
        fatal("%s/%s lacks put_zcopy or connect-to-ep", b->tl_name,
              b->dev_name);
    }
    b->max_zcopy = iface_attr.cap.put.max_zcopy;
    uct_iface_progress_enable(b->iface,
                              UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

/* Two endpoints of the one iface, each connected to the other: a loopback
 * RC connection, so a put goes through the whole transport and device */
static void connect_loopback(bench_t *b)
{
    uct_ep_params_t params = {0};
    uct_iface_attr_t iface_attr;
    uct_device_addr_t *dev_addr;
    uct_ep_addr_t *ep_addr[2];
    int i;

    check_ucs(uct_iface_query(b->iface, &iface_attr), "uct_iface_query");
    dev_addr = alloca(iface_attr.device_addr_len);
    check_ucs(uct_iface_get_device_address(b->iface, dev_addr),
              "uct_iface_get_device_address");

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = b->iface;
    for (i = 0; i < 2; ++i) {
        ep_addr[i] = alloca(iface_attr.ep_addr_len);
        check_ucs(uct_ep_create(&params, &b->ep[i]), "uct_ep_create");
        check_ucs(uct_ep_get_address(b->ep[i], ep_addr[i]),
                  "uct_ep_get_address");
    }
    for (i = 0; i < 2; ++i) {
        check_ucs(uct_ep_connect_to_ep(b->ep[i], dev_addr, ep_addr[1 - i]),
                  "uct_ep_connect_to_ep");
    }
}

static uct_mem_h mem_reg(bench_t *b, void *addr, size_t size, unsigned flags)
{
    uct_mem_h memh;

    check_ucs(uct_md_mem_reg(b->md, addr, size, flags, &memh),
              "uct_md_mem_reg");
    return memh;
}

static void setup_buffers(bench_t *b)
{
    uct_md_attr_t md_attr;
    void *rkey_buffer;

    b->dst          = map_anon(b->max_size);
    b->staging      = map_anon(b->max_size);
    b->resident_src = map_anon(b->max_size);
    memset(b->dst, 0xd5, b->max_size);
    memset(b->staging, 0x5a, b->max_size);
    memset(b->resident_src, 0xa5, b->max_size);

    b->dst_memh     = mem_reg(b, b->dst, b->max_size, UCT_MD_MEM_ACCESS_ALL);
    b->staging_memh = mem_reg(b, b->staging, b->max_size,
                              UCT_MD_MEM_ACCESS_RMA);

    check_ucs(uct_md_query(b->md, &md_attr), "uct_md_query");
    rkey_buffer = alloca(md_attr.rkey_packed_size);
    check_ucs(uct_md_mkey_pack(b->md, b->dst_memh, rkey_buffer),
              "uct_md_mkey_pack");
    check_ucs(uct_rkey_unpack(b->component, rkey_buffer, &b->dst_rkey),
              "uct_rkey_unpack");
}

static void cleanup(bench_t *b)
{
    int i;

    uct_rkey_release(b->component, &b->dst_rkey);
    for (i = 0; i < 2; ++i) {
        uct_ep_destroy(b->ep[i]);
    }
    uct_iface_close(b->iface);
    check_ucs(uct_md_mem_dereg(b->md, b->dst_memh), "uct_md_mem_dereg");
    check_ucs(uct_md_mem_dereg(b->md, b->staging_memh), "uct_md_mem_dereg");
    uct_md_close(b->md);
    uct_worker_destroy(b->worker);
    ucs_async_context_destroy(b->async);
    munmap(b->dst, b->max_size);
    munmap(b->staging, b->max_size);
    munmap(b->resident_src, b->max_size);
}

/*
 * Put [src, src+size) to the destination in max_zcopy pieces and wait until
 * every piece completed. comp.count holds one reference of ours, so the
 * transport never brings it to 0: completion is count == 1.
 */
static void put_wait(bench_t *b, void *src, uct_mem_h memh, size_t size)
{
    double deadline = now() + WAIT_TIMEOUT_SEC;
    uct_iov_t iov;
    ucs_status_t status;
    size_t offset, len;

    b->comp.func   = comp_cb;
    b->comp.count  = 1;
    b->comp.status = UCS_OK;

    for (offset = 0; offset < size; offset += len) {
        len          = ((size - offset) < b->max_zcopy) ? (size - offset) :
                                                           b->max_zcopy;
        iov.buffer   = (char*)src + offset;
        iov.length   = len;
        iov.memh     = memh;
        iov.stride   = 0;
        iov.count    = 1;
        for (;;) {
            /* count first: a completion may run in the progress below */
            ++b->comp.count;
            status = uct_ep_put_zcopy(b->ep[0], &iov, 1,
                                      (uintptr_t)b->dst + offset,
                                      b->dst_rkey.rkey, &b->comp);
            if (status == UCS_INPROGRESS) {
                break;
            }
            --b->comp.count;
            if (status == UCS_OK) {
                break;
            }
            if (status != UCS_ERR_NO_RESOURCE) {
                check_ucs(status, "uct_ep_put_zcopy");
            }
            uct_worker_progress(b->worker);
            if (now() > deadline) {
                fatal("no send resources for %.0f s", WAIT_TIMEOUT_SEC);
            }
        }
    }

    while (b->comp.count > 1) {
        uct_worker_progress(b->worker);
        if (now() > deadline) {
            fatal("put of %zu bytes did not complete in %.0f s", size,
                  WAIT_TIMEOUT_SEC);
        }
    }
    check_ucs(b->comp.status, "put_zcopy completion");
}

/* The source of one iteration: prepared outside the timed region */
static void *source_get(bench_t *b, residency_t res, size_t size)
{
    if (res == RES_RESIDENT) {
        /* the application just wrote its data: the pages are resident and
         * (up to the cache size) in cache, as the calibration copies them */
        memset(b->resident_src, (int)(size & 0xff), size);
        return b->resident_src;
    }
    return map_anon(size);
}

static void source_put(bench_t *b, residency_t res, void *src, size_t size)
{
    if (res == RES_NONRESIDENT) {
        munmap(src, size);
    }
}

/*
 * One iteration of (a): register, put, deregister. Stores the total and
 * each phase as sample r.
 */
static void time_zcopy(bench_t *b, residency_t res, size_t size,
                       samples_t *s, unsigned r)
{
    void *src = source_get(b, res, size);
    double t[4];
    uct_mem_h memh;

    t[0] = now();
    memh = mem_reg(b, src, size, UCT_MD_MEM_ACCESS_RMA);
    t[1] = now();
    put_wait(b, src, memh, size);
    t[2] = now();
    check_ucs(uct_md_mem_dereg(b->md, memh), "uct_md_mem_dereg");
    t[3] = now();

    source_put(b, res, src, size);
    samples_store(s, r, t, 3);
}

/* One iteration of (b): copy into the staging buffer, put it */
static void time_staging(bench_t *b, residency_t res, size_t size,
                         samples_t *s, unsigned r)
{
    void *src = source_get(b, res, size);
    double t[3];

    t[0] = now();
    memcpy(b->staging, src, size);
    t[1] = now();
    put_wait(b, b->staging, b->staging_memh, size);
    t[2] = now();

    source_put(b, res, src, size);
    samples_store(s, r, t, 2);
}

/* Small sizes are cheap and noisier: more iterations (up to MAX_REPS) */
static unsigned reps_for(bench_t *b, size_t size)
{
    size_t reps = (64 * MIB) / size;

    if (reps < b->min_reps) {
        reps = b->min_reps;
    }
    return (reps > MAX_REPS) ? MAX_REPS : (unsigned)reps;
}

static unsigned make_sizes(bench_t *b, size_t *sizes)
{
    unsigned n = 0;
    size_t size;

    for (size = b->min_size; (size <= b->max_size) && (n < MAX_SIZES);
         size *= 2) {
        sizes[n++] = size;
        if (b->half_steps && ((size + (size / 2)) <= b->max_size) &&
            (n < MAX_SIZES)) {
            sizes[n++] = size + (size / 2);
        }
    }
    return n;
}

/*
 * Two-sided sign test: do k wins in n pairs show a difference at the 5%
 * level? (exact binomial tail, n <= MAX_REPS)
 */
static int sign_test(unsigned k, unsigned n)
{
    double tail = 0, term = pow(0.5, n); /* C(n, 0) / 2^n */
    unsigned j, lo = (k < n - k) ? k : n - k;

    for (j = 0; j <= lo; ++j) {
        tail += term;
        term  = term * (n - j) / (j + 1);
    }
    return (2 * tail) <= 0.05;
}

/* Which method the pairs of one size decide for: 1 zcopy, -1 staging, 0 a
 * tie (call before median(), which sorts the samples) */
static int paired_winner(const samples_t *sz, const samples_t *ss,
                         unsigned reps)
{
    unsigned r, k = 0;

    for (r = 0; r < reps; ++r) {
        k += sz->total[r] < ss->total[r];
    }
    if (!sign_test(k, reps)) {
        return 0;
    }
    return (2 * k > reps) ? 1 : -1;
}

/* The band of the crossover (see the top of the file); hi = 0: none */
static void crossover_band(const size_t *sizes, const int *win, unsigned n,
                           double *lo, double *hi)
{
    unsigned i, last_staging = n;

    *lo = 0;
    *hi = 0;
    for (i = 0; i < n; ++i) {
        if (win[i] < 0) {
            last_staging = i;
            *lo          = sizes[i];
        }
    }
    for (i = (last_staging == n) ? 0 : last_staging + 1; i < n; ++i) {
        if (win[i] > 0) {
            *hi = sizes[i];
            return;
        }
    }
}

/*
 * Smallest size from which zcopy wins everywhere above; between the last
 * losing size and the first winning one, where log(t_zcopy / t_staging)
 * crosses 0 on a log-size axis. Returns 0 when zcopy never wins at the top.
 */
static double crossover(const size_t *sizes, const double *tz,
                        const double *ts, unsigned n)
{
    double r0, r1, f;
    unsigned i;

    if ((n == 0) || (tz[n - 1] >= ts[n - 1])) {
        return 0;
    }

    i = n - 1;
    while ((i > 0) && (tz[i - 1] < ts[i - 1])) {
        --i;
    }
    if (i == 0) {
        return sizes[0]; /* wins at every measured size */
    }

    r0 = log(tz[i - 1] / ts[i - 1]); /* >= 0: lost */
    r1 = log(tz[i] / ts[i]);         /* < 0: won */
    f  = r0 / (r0 - r1);
    return exp(log((double)sizes[i - 1]) +
               (f * (log((double)sizes[i]) - log((double)sizes[i - 1]))));
}

static void run(bench_t *b)
{
    size_t sizes[MAX_SIZES];
    double tz[MAX_SIZES], ts[MAX_SIZES];
    int win[MAX_SIZES];
    samples_t samples_z, samples_s, *sz = &samples_z, *ss = &samples_s;
    double cross[RES_LAST], band_lo[RES_LAST], band_hi[RES_LAST];
    unsigned n, i, r, reps;
    residency_t res;

    n = make_sizes(b, sizes);
    printf("# tl %s dev %s max_zcopy %zu sizes %zu..%zu\n", b->tl_name,
           b->dev_name, b->max_zcopy, sizes[0], sizes[n - 1]);
    printf("# %-10s %-11s %12s %12s %s\n", "size", "residency",
           "t_zcopy_us", "t_staging_us", "winner");

    for (res = 0; res < RES_LAST; ++res) {
        for (i = 0; i < n; ++i) {
            reps = reps_for(b, sizes[i]);

            /* warm up: first touch of the size's code paths and pages */
            time_zcopy(b, res, sizes[i], sz, 0);
            time_staging(b, res, sizes[i], ss, 0);

            for (r = 0; r < reps; ++r) {
                /* alternate the order, so neither always runs second with
                 * the other's effect on caches and clocks */
                if (r % 2) {
                    time_staging(b, res, sizes[i], ss, r);
                    time_zcopy(b, res, sizes[i], sz, r);
                } else {
                    time_zcopy(b, res, sizes[i], sz, r);
                    time_staging(b, res, sizes[i], ss, r);
                }
            }
            win[i] = paired_winner(sz, ss, reps);
            tz[i]  = median(sz->total, reps);
            ts[i]  = median(ss->total, reps);
            printf("%-12zu %-11s %12.2f %12.2f %s\n", sizes[i],
                   residency_names[res], tz[i] * 1e6, ts[i] * 1e6,
                   (win[i] > 0) ? "ZCOPY" : (win[i] < 0) ? "STAGING" :
                   (tz[i] < ts[i]) ? "zcopy" : "staging");
            if (b->verbose) {
                /* medians of each phase: they need not add up exactly */
                printf("#   phases_us reg %.2f put %.2f dereg %.2f |"
                       " copy %.2f put %.2f\n",
                       median(sz->phase[0], reps) * 1e6,
                       median(sz->phase[1], reps) * 1e6,
                       median(sz->phase[2], reps) * 1e6,
                       median(ss->phase[0], reps) * 1e6,
                       median(ss->phase[1], reps) * 1e6);
            }
            fflush(stdout);
        }
        cross[res] = crossover(sizes, tz, ts, n);
        crossover_band(sizes, win, n, &band_lo[res], &band_hi[res]);
    }

    for (res = 0; res < RES_LAST; ++res) {
        if (cross[res] == 0) {
            printf("crossover %s none\n", residency_names[res]);
        } else {
            printf("crossover %s %.0f\n", residency_names[res], cross[res]);
        }
        if (band_hi[res] == 0) {
            printf("band %s %.0f none\n", residency_names[res], band_lo[res]);
        } else {
            printf("band %s %.0f %.0f\n", residency_names[res], band_lo[res],
                   band_hi[res]);
        }
    }
}

static size_t parse_size(const char *arg)
{
    char *end;
    double v = strtod(arg, &end);

    switch (*end) {
    case 'k': case 'K': v *= KIB; ++end; break;
    case 'm': case 'M': v *= MIB; ++end; break;
    default: break;
    }
    if ((*end != '\0') || (v < 4096) || (v > (1ul << 34))) {
        fatal("bad size '%s' (4096..16G, K/M suffixes)", arg);
    }
    return (size_t)v;
}

static void usage(void)
{
    printf("Usage: calib-crossover [options]\n"
           "Times register+put_zcopy+deregister against memcpy into a\n"
           "registered staging buffer+put_zcopy, on resident and\n"
           "non-resident source pages, and prints the crossover sizes.\n"
           "  -t TL     transport (default hcr)\n"
           "  -d DEV    device (default softverbs0:1)\n"
           "  -m SIZE   smallest size (default 4K)\n"
           "  -M SIZE   largest size (default 16M)\n"
           "  -n REPS   iterations per point at least (default 7; small\n"
           "            sizes take more, up to %d)\n"
           "  -p        powers of 2 only (default: also 1.5 x each)\n"
           "  -v        also print the median of each phase\n"
           "  -h        this help\n"
           "Set UCX_IB_REG_METHODS=direct, or the registration cache hides\n"
           "the registration cost.\n", MAX_REPS);
}

int main(int argc, char **argv)
{
    bench_t b;
    int c;

    memset(&b, 0, sizeof(b));
    b.tl_name    = "hcr";
    b.dev_name   = "softverbs0:1";
    b.min_size   = 4 * KIB;
    b.max_size   = 16 * MIB;
    b.min_reps   = 7;
    b.half_steps = 1;

    while ((c = getopt(argc, argv, "t:d:m:M:n:pvh")) != -1) {
        switch (c) {
        case 't':
            b.tl_name = optarg;
            break;
        case 'd':
            b.dev_name = optarg;
            break;
        case 'm':
            b.min_size = parse_size(optarg);
            break;
        case 'M':
            b.max_size = parse_size(optarg);
            break;
        case 'n':
            b.min_reps = (unsigned)atoi(optarg);
            if ((b.min_reps < 1) || (b.min_reps > MAX_REPS)) {
                fatal("-n takes 1..%d", MAX_REPS);
            }
            break;
        case 'p':
            b.half_steps = 0;
            break;
        case 'v':
            b.verbose = 1;
            break;
        case 'h':
            usage();
            return 0;
        default:
            usage();
            return 1;
        }
    }
    if (b.min_size > b.max_size) {
        fatal("-m %zu is larger than -M %zu", b.min_size, b.max_size);
    }

    check_ucs(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                       &b.async),
              "ucs_async_context_create");
    check_ucs(uct_worker_create(b.async, UCS_THREAD_MODE_SINGLE, &b.worker),
              "uct_worker_create");
    open_iface(&b);
    connect_loopback(&b);
    setup_buffers(&b);

    run(&b);

    cleanup(&b);
    return 0;
}
