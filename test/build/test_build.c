/*
 * Tests of the superbuild itself: the installed UCX is 1.13.1, its tools
 * find the expected transports, and proto v2 is this build's default.
 */
#include "th_ucx.h"

#include <stdio.h>
#include <stdlib.h>

TH_TEST(build, ucx_version)
{
    unsigned major, minor, release;
    char *out;

    ucp_get_version(&major, &minor, &release);
    TH_ASSERT_EQ(major, 1);
    TH_ASSERT_EQ(minor, 13);
    TH_ASSERT_EQ(release, 1);
    TH_ASSERT_STR_EQ(ucp_get_version_string(), "1.13.1");

    /* the installed tool is the same build, and loads the prefix' libraries */
    TH_ASSERT_EQ(th_run_cmd(&out, "%s/bin/ucx_info -v", th_prefix()), 0);
    if (strstr(out, "# Version 1.13.1\n") == NULL) {
        TH_FAIL("ucx_info -v does not report 1.13.1:\n%s", out);
    }
    free(out);
}

static void check_transport(const char *info, const char *tl)
{
    char line[128];

    snprintf(line, sizeof(line), "Transport: %s\n", tl);
    if (strstr(info, line) == NULL) {
        TH_FAIL("ucx_info -d does not list transport '%s'", tl);
    }
}

TH_TEST(build, ucx_info_transports)
{
    static const char *always[] = {"self", "tcp", "posix", "sysv", "cma"};
    static const char *verbs[]  = {"rc_verbs", "ud_verbs"};
    char *out;
    unsigned i;

    TH_ASSERT_EQ(th_run_cmd(&out, "%s/bin/ucx_info -d", th_prefix()), 0);
    for (i = 0; i < sizeof(always) / sizeof(always[0]); ++i) {
        check_transport(out, always[i]);
    }

    /* verbs transports need a device: softverbs provides one when loaded */
    if (th_have_verbs_device("softverbs")) {
        for (i = 0; i < sizeof(verbs) / sizeof(verbs[0]); ++i) {
            check_transport(out, verbs[i]);
        }
    } else {
        th_log("no softverbs device: verbs transports not checked");
    }
    free(out);

    /* the verbs modules were built, whether or not a device is present */
    TH_ASSERT_EQ(th_run_cmd(&out, "ls %s/lib/ucx/", th_prefix()), 0);
    if ((strstr(out, "libuct_ib.so") == NULL) ||
        (strstr(out, "libuct_rdmacm.so") == NULL)) {
        TH_FAIL("verbs modules missing from %s/lib/ucx:\n%s", th_prefix(),
                out);
    }
    free(out);
}

static const char *proto_enable_value(const char *env)
{
    static char value[32];
    char *out, *p;

    TH_ASSERT_EQ(th_run_cmd(&out, "%s %s/bin/ucx_info -c", env, th_prefix()),
                 0);
    p = strstr(out, "UCX_PROTO_ENABLE=");
    if (p == NULL) {
        TH_FAIL("ucx_info -c does not show UCX_PROTO_ENABLE");
    }
    sscanf(p + strlen("UCX_PROTO_ENABLE="), "%31s", value);
    free(out);
    return value;
}

TH_TEST(build, proto_v2_default)
{
    /* the installed ucx.conf turns proto v2 on ... */
    TH_ASSERT_STR_EQ(proto_enable_value("env -u UCX_PROTO_ENABLE"), "y");
    /* ... and the user's environment still decides */
    TH_ASSERT_STR_EQ(proto_enable_value("UCX_PROTO_ENABLE=n"), "n");
}

#ifndef TH_SRCDIR
#define TH_SRCDIR "."
#endif

static void expect_failure_with(const char *out, int status,
                                const char *expected)
{
    TH_ASSERT_NE(status, 0);
    if (strstr(out, expected) == NULL) {
        TH_FAIL("message lacks \"%s\":\n%s", expected, out);
    }
}

/* A --with-ucx-src that is not a UCX tree stops configure, saying why */
TH_TEST(build, missing_ucx_src)
{
    char *out;
    int status;

    status = th_run_cmd(&out,
                        "d=$(mktemp -d) && cd $d && %s/configure "
                        "--with-ucx-src=/nonexistent/ucx 2>&1; s=$?; "
                        "rm -rf $d; exit $s",
                        TH_SRCDIR);
    expect_failure_with(out, status,
                        "--with-ucx-src=/nonexistent/ucx: no UCX source tree");
    expect_failure_with(out, status, "or leave the option out");
    free(out);
}

/* A tree of another UCX version is refused */
TH_TEST(build, wrong_ucx_version)
{
    char *out;
    int status;

    status = th_run_cmd(&out,
                        "d=$(mktemp -d) && mkdir $d/src && "
                        "printf 'define([ucx_ver_major], 1)\\n"
                        "define([ucx_ver_minor], 12)\\n"
                        "define([ucx_ver_patch], 0)\\n' > $d/src/configure.ac && "
                        "%s/contrib/get-ucx-src.sh $d/out $d/src 2>&1; s=$?; "
                        "rm -rf $d; exit $s",
                        TH_SRCDIR);
    expect_failure_with(out, status, "holds UCX '1.12.0', not 1.13.1");
    free(out);
}

/* An apt source list that cannot be reached gives an actionable message */
TH_TEST(build, unreachable_apt_source)
{
    char *out;
    int status;

    /* port 9 (discard) on loopback refuses at once: nothing leaves the host */
    status = th_run_cmd(&out,
                        "d=$(mktemp -d) && mkdir -p $d/etc/sources.list.d && "
                        "echo 'deb http://127.0.0.1:9/debian bookworm main' "
                        "> $d/etc/sources.list && "
                        "GET_UCX_SRC_APT_ETC=$d/etc "
                        "%s/contrib/get-ucx-src.sh $d/out 2>&1; s=$?; "
                        "rm -rf $d; exit $s",
                        TH_SRCDIR);
    expect_failure_with(out, status, "is not\n       reachable");
    expect_failure_with(out, status, "--with-ucx-src=/path/to/ucx-1.13.1");
    free(out);
}
