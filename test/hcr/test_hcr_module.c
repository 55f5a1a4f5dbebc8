/*
 * The hcr module itself: it is listed by ucx_info on the verbs device with
 * its UCX_HCR_* configuration, which includes rc_verbs' (hcr extends it);
 * its interface reports the configured costs; and its calibration cache is
 * keyed on what the device reports, not on an emulator's settings.
 */
#include "th_ucx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* its own variables, and rc_verbs' under its prefix */
    TH_ASSERT(hcr_mod_grep(cmd, "UCX_HCR_OVERHEAD="));
    TH_ASSERT(hcr_mod_grep(cmd, "UCX_HCR_FLUSH_MODE=auto"));
    TH_ASSERT(hcr_mod_grep(cmd, "UCX_HCR_TX_MAX_WR="));
}

static void hcr_mod_perf_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    th_uct_t uct;

    /* the costs set in the configuration reach the interface attributes */
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
    th_uct_close(&uct);
}

TH_TEST(hcr_module, perf_attributes)
{
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(1, hcr_mod_perf_rank, NULL);
}

/* "source=..." of ucx_hcr_calib -p, run with SOFTVERBS_REG_COST_US=reg_us
 * (softverbs reads its settings when it loads, so in a fresh process) */
static void hcr_mod_calib_source(const char *reg_us, char *source, size_t max)
{
    char cmd[1024], line[256];
    FILE *p;

    snprintf(cmd, sizeof(cmd),
             "SOFTVERBS_REG_COST_US=%s %s/bin/ucx_hcr_calib "
             "-d softverbs0 -p 2>/dev/null",
             reg_us, th_prefix());
    source[0] = '\0';
    p         = popen(cmd, "r");
    TH_ASSERT(p != NULL);
    while (fgets(line, sizeof(line), p) != NULL) {
        if (!strncmp(line, "source=", 7)) {
            snprintf(source, max, "%.*s", (int)strcspn(line + 7, "\n"),
                     line + 7);
        }
    }
    TH_ASSERT_EQ(pclose(p), 0);
}

/*
 * The calibration cache is keyed on the device's attributes: softverbs
 * reports a changed cost setting in its firmware version, so that the model
 * is measured again, and a setting that stays the same finds the cache. The
 * transport itself reads no SOFTVERBS_* variable.
 */
TH_TEST(hcr_module, calib_key_from_device)
{
    char dir[64], cmd[1024], source[64];

    if (!th_have_verbs_device("softverbs")) {
        TH_SKIP("no softverbs device (softverbs not preloaded)");
    }
    snprintf(dir, sizeof(dir), "/tmp/th-hcr-key-XXXXXX");
    TH_ASSERT(mkdtemp(dir) != NULL);
    setenv("UCX_CALIB_DIR", dir, 1);

    hcr_mod_calib_source("0", source, sizeof(source));
    TH_ASSERT_STR_EQ(source, "measured");
    hcr_mod_calib_source("0", source, sizeof(source));
    TH_ASSERT_STR_EQ(source, "cache");
    hcr_mod_calib_source("7", source, sizeof(source));
    TH_ASSERT_STR_EQ(source, "measured");
    hcr_mod_calib_source("7", source, sizeof(source));
    TH_ASSERT_STR_EQ(source, "cache");

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    TH_ASSERT_EQ(system(cmd), 0);

    snprintf(cmd, sizeof(cmd),
             "grep -c SOFTVERBS_ %s/lib/ucx/libuct_ib_hcr.so"
             " >/dev/null",
             th_prefix());
    TH_ASSERT(system(cmd) != 0);
}
