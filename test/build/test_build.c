/*
 * Tests of the superbuild itself: the installed UCX is 1.13.1, its tools
 * find the expected transports, and proto v2 is this build's default.
 */
#include "th_ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
    static const char *verbs[]  = {"rc_verbs", "ud_verbs", "hcr"};
    char *out, *modules;
    unsigned i;

    TH_ASSERT_EQ(th_run_cmd(&out, "%s/bin/ucx_info -d", th_prefix()), 0);
    for (i = 0; i < sizeof(always) / sizeof(always[0]); ++i) {
        check_transport(out, always[i]);
    }

    /* the verbs modules were built, whether or not a device is present */
    TH_ASSERT_EQ(th_run_cmd(&modules, "ls %s/lib/ucx/", th_prefix()), 0);
    if ((strstr(modules, "libuct_ib.so") == NULL) ||
        (strstr(modules, "libuct_rdmacm.so") == NULL) ||
        (strstr(modules, "libuct_ib_hcr.so") == NULL)) {
        TH_FAIL("verbs modules missing from %s/lib/ucx:\n%s", th_prefix(),
                modules);
    }
    free(modules);

    /* verbs transports need a device, which softverbs provides: without
     * one this half is not checked, and the test says so by skipping */
    if (!th_have_verbs_device("softverbs") && !th_have_verbs_device("mlx")) {
        free(out);
        TH_SKIP("no verbs device (softverbs not preloaded): the verbs "
                "transports were not checked");
    }
    for (i = 0; i < sizeof(verbs) / sizeof(verbs[0]); ++i) {
        check_transport(out, verbs[i]);
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

/* The README's review export: contrib/export-patches.sh makes one patch per
 * feature (each glue patch with the files of src/ it brings), every title
 * in UCX's form, and the series, applied with patch -p1 to pristine UCX
 * (this build's copy), holds every file of src/ as it is here and every
 * glue change */
TH_TEST_TIMEOUT(build, export_patches, 300)
{
    char exe[4096], *out;
    int status;
    ssize_t n;

    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    TH_ASSERT(n > 0);
    exe[n]             = '\0';
    *strrchr(exe, '/') = '\0'; /* build/test: the pristine tree is beside */

    status = th_run_cmd(
            &out,
            "set -e; src=%s; pristine=%s/../ucx/pristine; d=$(mktemp -d); "
            "trap 'rm -rf $d' EXIT; "
            "test -f $pristine/configure.ac; "
            "$src/contrib/export-patches.sh -o $d/p -s $pristine "
            "    --apply-to $d/tree > $d/log 2>&1 || { cat $d/log; exit 1; }; "
            "glue=$(ls $src/contrib/ucx-glue/*.patch | wc -l); "
            "got=$(ls $d/p/*.patch | wc -l); "
            "echo \"patches: $got, expected one per glue patch, $glue\"; "
            "test $got -eq $glue; "
            /* UCX's commit title rule (buildlib/pr/codestyle.yml) */
            "bad=$(grep -h '^Subject: ' $d/p/*.patch | "
            "      sed 's/^Subject: \\[PATCH [0-9/]*\\] //' | "
            "      grep -cvE '^[0-9A-Z/_-]*: [[:alnum:]_]' || true); "
            "echo \"titles breaking UCX's rule: $bad\"; test $bad -eq 0; "
            "(cd $src/src && find . -type f ! -name '*~' ! -name '.*') | "
            "    while read -r f; do cmp $src/src/$f $d/tree/src/$f; done; "
            /* taking the glue back out, last first, and the new files, leaves
         * pristine UCX: the series holds the glue, and nothing else */
            "cp -a $d/tree $d/back; "
            "for p in $(ls -r $src/contrib/ucx-glue/*.patch); do "
            "    (cd $d/back && git apply -R $p) || "
            "        { echo \"glue not in the series: $p\"; exit 1; }; "
            "done; "
            "(cd $src/src && find . -type f ! -name '*~' ! -name '.*') | "
            "    while read -r f; do rm $d/back/src/$f; "
            "        rmdir -p --ignore-fail-on-non-empty "
            "            $(dirname $d/back/src/$f); done; "
            "diff -r $pristine $d/back; "
            "grep -l '^Subject: ' $d/p/*.patch | wc -l | "
            "    xargs test $glue -eq; "
            "echo export ok",
            TH_SRCDIR, exe);
    th_log("%s", out);
    TH_ASSERT_EQ(status, 0);
    TH_ASSERT(strstr(out, "export ok") != NULL);
    free(out);
}
