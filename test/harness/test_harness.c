/*
 * Tests of the harness itself. The "selftest" suite holds tests that pass,
 * fail, crash, hang and skip on purpose; it is registered only when
 * TH_SELFTEST is set. harness.* runs this binary again on that suite and
 * checks what the runner reports for each, so a harness that could not
 * detect a failure would fail here.
 */
#include "th.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

TH_TEST(selftest, pass)
{
    TH_ASSERT_EQ(1 + 1, 2);
}

TH_TEST(selftest, assert_eq_fails)
{
    int answer = 41;

    TH_ASSERT_EQ(answer, 42);
}

TH_TEST(selftest, crash)
{
    raise(SIGSEGV);
}

TH_TEST_TIMEOUT(selftest, hang, 1)
{
    sleep(30);
}

TH_TEST(selftest, skip)
{
    TH_SKIP("no frobnicator on this host");
}

static void selftest_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    int value = rank * 10, peer_value;

    th_oob_send(oob, 1 - rank, &value, sizeof(value));
    th_oob_recv(oob, 1 - rank, &peer_value, sizeof(peer_value));
    TH_ASSERT_EQ(peer_value, (1 - rank) * 10);
    if (arg != NULL && rank == 1) {
        TH_FAIL("rank 1 fails on purpose");
    }
}

TH_TEST(selftest, procs_pass)
{
    th_run_procs(2, selftest_rank, NULL);
}

TH_TEST(selftest, procs_rank_fails)
{
    th_run_procs(2, selftest_rank, "fail");
}

static void expect(const char *out, const char *text)
{
    if (strstr(out, text) == NULL) {
        TH_FAIL("runner output lacks \"%s\":\n%s", text, out);
    }
}

TH_TEST(harness, reports_each_outcome)
{
    char *out;
    int status;

    status = th_run_cmd(&out, "TH_SELFTEST=1 /proc/%d/exe 'selftest.*' 2>&1",
                        getpid());
    TH_ASSERT_EQ(status, 1); /* failures make the runner exit 1 */
    expect(out, "[  OK  ] selftest.pass");
    expect(out, "expected answer == 42, got 41");
    expect(out, "[ FAIL ] selftest.assert_eq_fails");
    expect(out, "[ FAIL ] selftest.crash");
    expect(out, "killed by signal 11");
    expect(out, "[ FAIL ] selftest.hang: timeout after 1 s");
    expect(out, "[ SKIP ] selftest.skip: no frobnicator on this host");
    expect(out, "[  OK  ] selftest.procs_pass");
    expect(out, "rank 1 fails on purpose");
    expect(out, "[ FAIL ] selftest.procs_rank_fails");
    /* the failures again, above the summary, with where each was decided */
    expect(out, "\nfailed:\n  selftest.assert_eq_fails: ");
    expect(out, "test_harness.c:24: expected answer == 42, got 41");
    expect(out, "\n  selftest.crash: killed by signal 11");
    expect(out, "\n  selftest.hang: timeout after 1 s\n");
    expect(out, "\n  selftest.procs_rank_fails: ");
    expect(out, "rank 1 fails on purpose\n2 passed, 4 failed, 1 skipped\n");
    free(out);
}

TH_TEST(harness, filters_by_name)
{
    char *out;
    int status;

    status = th_run_cmd(&out,
                        "TH_SELFTEST=1 /proc/%d/exe 'selftest.p*' "
                        "'-selftest.procs_rank*' 2>&1",
                        getpid());
    TH_ASSERT_EQ(status, 0);
    expect(out, "[  OK  ] selftest.pass");
    expect(out, "[  OK  ] selftest.procs_pass");
    TH_ASSERT(strstr(out, "procs_rank_fails") == NULL);
    TH_ASSERT(strstr(out, "selftest.crash") == NULL);
    expect(out, "\n2 passed, 0 failed, 0 skipped\n");
    free(out);
}

/* A skip that the expected-skips file (-x) does not list fails the run,
 * names the test and why it skipped; one it lists does not; TH_ALLOW_SKIPS
 * accepts it and the last line says so, with TH_SUMMARY_NOTE after it */
TH_TEST(harness, unexpected_skip_fails)
{
    char path[] = "/tmp/th-expected-XXXXXX";
    char *out;
    int fd, status;

    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    TH_ASSERT(write(fd, "# comment\nselftest.no_such  why\n", 32) == 32);
    close(fd);

    status = th_run_cmd(&out,
                        "env -u TH_ALLOW_SKIPS -u TH_SUMMARY_NOTE "
                        "TH_SELFTEST=1 /proc/%d/exe -x %s 'selftest.pass' "
                        "'selftest.skip' 2>&1",
                        getpid(), path);
    TH_ASSERT_EQ(status, 1);
    expect(out, "\nskipped, not in ");
    expect(out, "\n  selftest.skip: no frobnicator on this host\n");
    expect(out, "\n1 passed, 0 failed, 1 skipped (1 not expected: a "
                "failure)\n");
    free(out);

    status = th_run_cmd(&out,
                        "env -u TH_SUMMARY_NOTE TH_ALLOW_SKIPS=1 "
                        "TH_SELFTEST=1 /proc/%d/exe -x %s 'selftest.pass' "
                        "'selftest.skip' 2>&1",
                        getpid(), path);
    TH_ASSERT_EQ(status, 0);
    expect(out, "\n1 passed, 0 failed, 1 skipped (1 not expected, allowed "
                "by TH_ALLOW_SKIPS)\n");
    free(out);

    fd = open(path, O_WRONLY | O_APPEND);
    TH_ASSERT(fd >= 0);
    TH_ASSERT(write(fd, "selftest.sk*  no frobnicator\n", 29) == 29);
    close(fd);
    status = th_run_cmd(&out,
                        "env -u TH_ALLOW_SKIPS TH_SUMMARY_NOTE='a note' "
                        "TH_SELFTEST=1 /proc/%d/exe -x %s 'selftest.pass' "
                        "'selftest.skip' 2>&1",
                        getpid(), path);
    TH_ASSERT_EQ(status, 0);
    TH_ASSERT(strstr(out, "skipped, not in") == NULL);
    expect(out, "\n1 passed, 0 failed, 1 skipped (0 not expected); a note\n");
    free(out);
    unlink(path);
}
