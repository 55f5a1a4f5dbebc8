/*
 * ucx_hcr_calib as a newcomer meets it: a hint where no device is found,
 * sizes with their units, q explained, and with -s SIZE the costs of a
 * first send of that size and the path rndv/sppln takes for it, by the
 * same rule as the protocol (bcopy below the superpipeline's threshold,
 * sppln from it, zcopy from the registration crossover of the pages).
 */
#include "th.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL_DEV "softverbs0"

static void tool_need_device(void)
{
    if (!th_have_verbs_device(TOOL_DEV)) {
        TH_SKIP("no %s device (softverbs not preloaded)", TOOL_DEV);
    }
}

/* the number after "key=" in parsable output; -1 for "inf" */
static double tool_value(const char *out, const char *key)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\n%s=", key);
    p = strstr(out, pat);
    if (p == NULL) {
        TH_FAIL("ucx_hcr_calib -p shows no %s:\n%s", key, out);
    }
    p += strlen(pat);
    return strncmp(p, "inf", 3) ? strtod(p, NULL) : -1;
}

static const char *
tool_path(const char *out, const char *key, char *buf, size_t max)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\n%s=", key);
    p = strstr(out, pat);
    TH_ASSERT(p != NULL);
    p += strlen(pat);
    snprintf(buf, max, "%.*s", (int)strcspn(p, "\n"), p);
    return buf;
}

/* the rule of ucp_sppln_choose() for a buffer neither cached nor sent */
static const char *tool_rule(double size, double zcopy, double sp)
{
    if ((zcopy >= 0) && (size >= zcopy)) {
        return "zcopy";
    } else if ((sp >= 0) && (size >= sp)) {
        return "sppln";
    }
    return "bcopy";
}

TH_TEST(calib_tool, no_device_hint)
{
    char *out;
    int rc;

    rc = th_run_cmd(&out, "env -u LD_PRELOAD %s/bin/ucx_hcr_calib 2>&1",
                    th_prefix());
    th_log("exit %d:\n%s", rc, out);
    TH_ASSERT_EQ(rc, 1);
    TH_ASSERT(strstr(out, "no InfiniBand device found") != NULL);
    TH_ASSERT(strstr(out, "hint: on a host without RDMA hardware") != NULL);
    TH_ASSERT(strstr(out, "LD_PRELOAD=") != NULL);
    free(out);
}

TH_TEST(calib_tool, human_output_units)
{
    char *out;

    tool_need_device();
    TH_ASSERT_EQ(th_run_cmd(&out,
                            "%s/bin/ucx_hcr_calib -d " TOOL_DEV " -s 1m 2>&1",
                            th_prefix()),
                 0);
    th_log("%s", out);
    TH_ASSERT(strstr(out, "  C_0 ") != NULL);
    /* C_0, the crossovers and the superpipeline's threshold, with units */
    TH_ASSERT(strstr(strstr(out, "  C_0 "), " B:") ||
              strstr(strstr(out, "  C_0 "), " KiB:") ||
              strstr(strstr(out, "  C_0 "), " MiB:"));
    TH_ASSERT(strstr(out, "the superpipeline beats one copy from: ") != NULL);
    TH_ASSERT(strstr(out, "iB\n") != NULL);
    TH_ASSERT(strstr(out, ": copy bandwidth / network bandwidth") != NULL);
    TH_ASSERT(strstr(out, "a first send of 1 MiB") != NULL);
    free(out);
}

/* a size in each range the thresholds make, resident and untouched */
TH_TEST(calib_tool, message_path_follows_thresholds)
{
    double zc[2], sp, sizes[6], bounds[3];
    char *out, key[64], path[16];
    unsigned i, n = 0, b;
    const char *pages[] = {"resident", "nonresident"};
    int p;

    tool_need_device();
    TH_ASSERT_EQ(th_run_cmd(&out,
                            "%s/bin/ucx_hcr_calib -d " TOOL_DEV " -p 2>&1",
                            th_prefix()),
                 0);
    zc[0] = tool_value(out, "zcopy_thresh_resident");
    zc[1] = tool_value(out, "zcopy_thresh_nonresident");
    sp    = tool_value(out, "sppln_from");
    /* above what three staging slots of 1 MiB hold, whatever the model */
    TH_ASSERT_GT(sp, 3.0 * 1024 * 1024);
    TH_ASSERT_GE(sp, tool_value(out, "sp_thresh"));
    free(out);

    bounds[0] = zc[0];
    bounds[1] = zc[1];
    bounds[2] = sp;
    for (b = 0; b < 3; ++b) {
        if (bounds[b] > 2) {
            sizes[n++] = bounds[b] - 1;
            sizes[n++] = bounds[b];
        }
    }
    TH_ASSERT_GT(n, 0);

    for (i = 0; i < n; ++i) {
        TH_ASSERT_EQ(th_run_cmd(&out,
                                "%s/bin/ucx_hcr_calib -d " TOOL_DEV
                                " -p -s %.0f 2>&1",
                                th_prefix(), sizes[i]),
                     0);
        TH_ASSERT_EQ(tool_value(out, "msg_size"), sizes[i]);
        for (p = 0; p < 2; ++p) {
            snprintf(key, sizeof(key), "msg_path_%s", pages[p]);
            tool_path(out, key, path, sizeof(path));
            th_log("%.0f bytes, %s pages: %s", sizes[i], pages[p], path);
            TH_ASSERT_STR_EQ(path, tool_rule(sizes[i], zc[p], sp));
        }
        free(out);
    }
}

TH_TEST(calib_tool, bad_size_refused)
{
    char *out;

    TH_ASSERT_EQ(th_run_cmd(&out, "%s/bin/ucx_hcr_calib -s 0 2>&1",
                            th_prefix()),
                 1);
    TH_ASSERT(strstr(out, "-s: a size of at least one byte") != NULL);
    free(out);
    TH_ASSERT_EQ(th_run_cmd(&out, "%s/bin/ucx_hcr_calib -s lots 2>&1",
                            th_prefix()),
                 1);
    TH_ASSERT(strstr(out, "-s: a size of at least one byte") != NULL);
    free(out);
}
