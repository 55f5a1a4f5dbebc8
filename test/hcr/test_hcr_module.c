/*
 * The hcr module itself: it is listed by ucx_info on the verbs device with
 * its UCX_HCR_* configuration, and its interface owns a registered staging
 * pool of the configured size (reached through the module's exported
 * accessor, as in-tree protocols do), and reports the configured costs.
 */
#include "th_ucx.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    uint32_t lkey;
    uint32_t rkey;
    size_t   length;
} hcr_mod_staging_buf_t; /* head of uct_hcr_staging_buf_t */

static int hcr_mod_grep(const char *cmd, const char *needle)
{
    char line[512];
    int found = 0;
    FILE *f   = popen(cmd, "r");

    TH_ASSERT(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, needle) != NULL) {
            found = 1;
        }
    }
    pclose(f);
    return found;
}

TH_TEST(hcr_module, ucx_info)
{
    char cmd[1024];

    if (!th_have_verbs_device("softverbs")) {
        TH_SKIP("no softverbs device");
    }
    snprintf(cmd, sizeof(cmd), "%s/bin/ucx_info -d 2>/dev/null", th_prefix());
    TH_ASSERT(hcr_mod_grep(cmd, "Transport: hcr"));
    snprintf(cmd, sizeof(cmd), "%s/bin/ucx_info -c -f 2>/dev/null",
             th_prefix());
    TH_ASSERT(hcr_mod_grep(cmd, "UCX_HCR_STAGING_COUNT=16"));
    TH_ASSERT(hcr_mod_grep(cmd, "UCX_HCR_STAGING_BUF_SIZE=64K"));
}

static void hcr_mod_staging_rank(th_oob_t *oob, int rank, int nprocs,
                                 void *arg)
{
    void *(*staging_of)(uct_iface_h);
    void *(*get)(void*);
    void (*put)(void*);
    hcr_mod_staging_buf_t *bufs[8];
    void *dl, *staging;
    th_uct_t uct;
    int i;

    setenv("UCX_HCR_STAGING_COUNT", "8", 1);
    setenv("UCX_HCR_STAGING_BUF_SIZE", "16k", 1);
    /* the costs the calibration fills reach the interface attributes */
    setenv("UCX_HCR_BANDWIDTH", "1234MBs", 1);
    setenv("UCX_HCR_LATENCY", "3us", 1);
    setenv("UCX_HCR_OVERHEAD", "100ns", 1);
    if (!th_have_verbs_device("softverbs") ||
        (th_uct_open(&uct, "hcr", NULL) != UCS_OK)) {
        TH_SKIP("no hcr device");
    }

    TH_ASSERT(fabs(uct.iface_attr.bandwidth.shared - 1234.0 * 1024 * 1024) <
              1.0);
    TH_ASSERT(fabs(uct.iface_attr.latency.c - 3e-6) < 1e-9);
    TH_ASSERT(fabs(uct.iface_attr.overhead - 100e-9) < 1e-12);

    /* the module is loaded RTLD_LOCAL by UCX; look its symbols up by handle */
    dl = dlopen("libuct_ib_hcr.so.0", RTLD_LAZY | RTLD_NOLOAD);
    if (dl == NULL) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/lib/ucx/libuct_ib_hcr.so.0",
                 th_prefix());
        dl = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    }
    TH_ASSERT(dl != NULL);
    staging_of = (void*(*)(uct_iface_h))dlsym(dl, "uct_hcr_iface_staging");
    get        = (void*(*)(void*))dlsym(dl, "uct_hcr_staging_get");
    put        = (void(*)(void*))dlsym(dl, "uct_hcr_staging_put");
    TH_ASSERT((staging_of != NULL) && (get != NULL) && (put != NULL));

    staging = staging_of(uct.iface);
    TH_ASSERT(staging != NULL);
    for (i = 0; i < 8; ++i) {
        bufs[i] = get(staging);
        TH_ASSERT(bufs[i] != NULL);
        TH_ASSERT_EQ(bufs[i]->length, 16384);
        TH_ASSERT_NE(bufs[i]->lkey, 0);
        /* one registration: every buffer has the same keys */
        TH_ASSERT_EQ(bufs[i]->lkey, bufs[0]->lkey);
        TH_ASSERT_EQ(bufs[i]->rkey, bufs[0]->rkey);
        memset(bufs[i] + 1, i, 16384 - 64);
    }
    /* the pool never grows on the data path */
    TH_ASSERT(get(staging) == NULL);
    for (i = 0; i < 8; ++i) {
        put(bufs[i]);
    }
    TH_ASSERT(get(staging) != NULL);
    dlclose(dl);
    th_uct_close(&uct);
}

TH_TEST(hcr_module, staging_pool)
{
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(1, hcr_mod_staging_rank, NULL);
}
