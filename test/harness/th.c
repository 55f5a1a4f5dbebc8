/*
 * th runner: registration, isolation, timeouts, filtering and the summary.
 *
 * Each selected test is forked into its own process group. Its stdout and
 * stderr go to an anonymous file that is shown when the test fails (or always
 * with -v). A skip reason travels back on a pipe. When the test ends, or its
 * timeout expires, the whole process group is killed, so helper processes a
 * test started cannot outlive it.
 */
#define _GNU_SOURCE
#include "th.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static th_test_t *th_tests;
static int        th_result_fd = -1; /* write end, in the test process */

void th_register(th_test_t *test)
{
    th_test_t **p;

    /* the harness' own self-tests fail on purpose: they run only inside the
     * nested run that test/harness/test_harness.c starts */
    if (!strcmp(test->suite, "selftest") && (getenv("TH_SELFTEST") == NULL)) {
        return;
    }

    /* keep registration order (link order of the files, then source order) */
    for (p = &th_tests; *p != NULL; p = &(*p)->next) {
    }
    test->next = NULL;
    *p         = test;
}

static void th_vreport(const char *kind, const char *file, int line,
                       const char *fmt, va_list ap)
{
    char msg[2048];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    fprintf(stderr, "[pid %d] %s %s:%d: %s\n", getpid(), kind, file, line,
            msg);
    fflush(stderr);
    /* the runner keeps the first report: a skip's reason, or the failure
     * it recaps after the last test */
    if (th_result_fd >= 0) {
        if (kind[0] == 'S') {
            dprintf(th_result_fd, "%s\n", msg);
        } else {
            dprintf(th_result_fd, "%s:%d: %s\n", file, line, msg);
        }
    }
}

void th_fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    th_vreport("FAIL", file, line, fmt, ap);
    va_end(ap);
    fflush(stdout);
    _exit(TH_EXIT_FAIL);
}

void th_skip_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    th_vreport("SKIP", file, line, fmt, ap);
    va_end(ap);
    fflush(stdout);
    _exit(TH_EXIT_SKIP);
}

void th_log(const char *fmt, ...)
{
    va_list ap;

    printf("[pid %d] ", getpid());
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

double th_time(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double th_cpu_time(int who)
{
    struct rusage ru;

    TH_ASSERT_SYS(getrusage(who, &ru));
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           ((ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6);
}

static int th_matches(const th_test_t *test, int argc, char **argv)
{
    char full[256];
    int i, selected = 0, have_positive = 0;

    snprintf(full, sizeof(full), "%s.%s", test->suite, test->name);
    for (i = 0; i < argc; ++i) {
        if (argv[i][0] == '-') {
            /* -PATTERN excludes */
            if (fnmatch(argv[i] + 1, full, 0) == 0) {
                return 0;
            }
        } else {
            have_positive = 1;
            if (fnmatch(argv[i], full, 0) == 0) {
                selected = 1;
            }
        }
    }
    return selected || !have_positive;
}

static void th_dump_output(int fd, const char *full)
{
    char buf[4096];
    ssize_t n;

    lseek(fd, 0, SEEK_SET);
    printf("---- output of %s ----\n", full);
    fflush(stdout);
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        if (write(STDOUT_FILENO, buf, n) < 0) {
            break;
        }
    }
    printf("---- end of %s ----\n", full);
}

typedef enum { TH_RES_PASS, TH_RES_FAIL, TH_RES_SKIP } th_result_t;

static th_result_t th_run_one(th_test_t *test, double timeout_scale,
                              int verbose, char *recap, size_t recap_size)
{
    char full[256], reason[1024] = "";
    int out_fd, res_pipe[2], status = 0, done = 0;
    double start, deadline, elapsed;
    th_result_t result;
    const char *why = "";
    ssize_t n;
    pid_t pid;

    snprintf(full, sizeof(full), "%s.%s", test->suite, test->name);
    out_fd = memfd_create("th-output", 0);
    if ((out_fd < 0) || (pipe2(res_pipe, O_CLOEXEC) < 0)) {
        perror("th: memfd_create/pipe");
        exit(2);
    }

    printf("[ RUN  ] %s\n", full);
    fflush(stdout);
    start = th_time();

    pid = fork();
    if (pid < 0) {
        perror("th: fork");
        exit(2);
    }

    if (pid == 0) {
        setpgid(0, 0);
        close(res_pipe[0]);
        /* close-on-exec: only this process and its forked ranks report */
        th_result_fd = res_pipe[1];
        dup2(out_fd, STDOUT_FILENO);
        dup2(out_fd, STDERR_FILENO);
        close(out_fd);
        setvbuf(stdout, NULL, _IOLBF, 0);
        test->func();
        fflush(stdout);
        _exit(TH_EXIT_PASS);
    }

    setpgid(pid, pid); /* avoid a race with the child's own setpgid */
    close(res_pipe[1]);
    deadline = start + test->timeout * timeout_scale;

    while (!done) {
        pid_t ret = waitpid(pid, &status, WNOHANG);
        if (ret == pid) {
            done = 1;
        } else if (ret < 0 && errno != EINTR) {
            perror("th: waitpid");
            exit(2);
        } else if (th_time() > deadline) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            why = "timeout";
            status = -1;
            done = 1;
        } else {
            usleep(2000);
        }
    }

    /* nothing a test started may outlive it */
    kill(-pid, SIGKILL);

    /* non-blocking: a process that escaped the group may hold the pipe */
    fcntl(res_pipe[0], F_SETFL, O_NONBLOCK);
    n = read(res_pipe[0], reason, sizeof(reason) - 1);
    reason[(n > 0) ? n : 0] = '\0';
    /* the first report decided the outcome; the ranks' parent may add its
     * own after it */
    reason[strcspn(reason, "\n")] = '\0';
    close(res_pipe[0]);
    elapsed = th_time() - start;

    if (status == -1) {
        result = TH_RES_FAIL;
    } else if (WIFEXITED(status) && (WEXITSTATUS(status) == TH_EXIT_PASS)) {
        result = TH_RES_PASS;
    } else if (WIFEXITED(status) && (WEXITSTATUS(status) == TH_EXIT_SKIP)) {
        result = TH_RES_SKIP;
    } else {
        result = TH_RES_FAIL;
        if (WIFSIGNALED(status)) {
            snprintf(reason, sizeof(reason), "killed by signal %d (%s)",
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
            why = reason;
        }
    }

    if ((result == TH_RES_FAIL) || verbose) {
        th_dump_output(out_fd, full);
    }
    close(out_fd);

    switch (result) {
    case TH_RES_PASS:
        printf("[  OK  ] %s (%.2f s)\n", full, elapsed);
        break;
    case TH_RES_SKIP:
        printf("[ SKIP ] %s: %s\n", full, reason[0] ? reason : "no reason");
        snprintf(recap, recap_size, "%s: %s", full,
                 reason[0] ? reason : "no reason");
        break;
    default:
        if (status == -1) {
            printf("[ FAIL ] %s: timeout after %u s\n", full,
                   (unsigned)(test->timeout * timeout_scale));
            snprintf(recap, recap_size, "%s: timeout after %u s", full,
                     (unsigned)(test->timeout * timeout_scale));
        } else {
            printf("[ FAIL ] %s (%.2f s)%s%s\n", full, elapsed,
                   why[0] ? ": " : "", why);
            snprintf(recap, recap_size, "%s: %s", full,
                     reason[0] ? reason : "exited without a report");
        }
        break;
    }
    fflush(stdout);
    return result;
}

static void th_usage(const char *prog)
{
    printf("usage: %s [-l] [-v] [-t SCALE] [-x FILE] [PATTERN|-PATTERN ...]\n"
           "  PATTERN   run tests whose suite.name matches the glob\n"
           "  -PATTERN  exclude tests matching the glob\n"
           "  -l        list the selected tests and exit\n"
           "  -v        show every test's output, not only failures'\n"
           "  -t SCALE  multiply every timeout by SCALE\n"
           "  -x FILE   the tests allowed to skip (a glob on suite.name per "
           "line,\n"
           "            then the reason; # comments): any other skip fails "
           "the run\n"
           "Environment: TH_FILTER (space-separated patterns) adds to the "
           "arguments;\n"
           "TH_ALLOW_SKIPS=1 lets skips not in the -x file pass, and says so "
           "on the\nlast line; TH_SUMMARY_NOTE is appended to the last "
           "line.\n",
           prog);
}

/*
 * The expected skips (-x FILE): one glob per line, then why it skips on a
 * host set up as CI is. A skip that is not there means the host, or a
 * test, stopped checking something: it fails the run, unless TH_ALLOW_SKIPS
 * says that this run accepts it (a host without root or without softverbs),
 * which the summary then states.
 */
#define TH_MAX_EXPECTED 64

typedef struct {
    int count;
    char *glob[TH_MAX_EXPECTED];
} th_expected_t;

static void th_expected_read(const char *path, th_expected_t *exp)
{
    char line[512], *p, *end;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        fprintf(stderr, "th: cannot read the expected skips %s: %m\n", path);
        exit(2);
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        p = line + strspn(line, " \t");
        if ((*p == '#') || (*p == '\n') || (*p == '\0')) {
            continue;
        }
        end  = p + strcspn(p, " \t\n");
        *end = '\0';
        if (exp->count == TH_MAX_EXPECTED) {
            fprintf(stderr, "th: %s: more than %d entries\n", path,
                    TH_MAX_EXPECTED);
            exit(2);
        }
        exp->glob[exp->count++] = strdup(p);
    }
    fclose(f);
}

static int th_expected_match(const th_expected_t *exp, const th_test_t *test)
{
    char full[256];
    int i;

    snprintf(full, sizeof(full), "%s.%s", test->suite, test->name);
    for (i = 0; i < exp->count; ++i) {
        if (fnmatch(exp->glob[i], full, 0) == 0) {
            return 1;
        }
    }
    return 0;
}

static int th_env_set(const char *name)
{
    const char *v = getenv(name);

    return (v != NULL) && (v[0] != '\0') && strcmp(v, "0");
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0, list = 0, verbose = 0;
    int unexpected = 0, allow_skips = th_env_set("TH_ALLOW_SKIPS");
    th_expected_t expected    = {0};
    const char *expected_path = NULL, *note = getenv("TH_SUMMARY_NOTE");
    /* the skips that no entry of the -x file allows */
    char *skips      = NULL;
    size_t skips_len = 0;
    char *pats[256], *filter, *tok, *save = NULL;
    /* one line per failed test, repeated above the summary so that the
     * tail of a long log (all a CI page may show) names them */
    char *recap     = NULL;
    size_t recap_len = 0;
    char line[1280];
    double timeout_scale = 1.0;
    th_test_t *test;
    int npats = 0, i;

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            th_usage(argv[0]);
            return 0;
        } else if (!strcmp(argv[i], "-l")) {
            list = 1;
        } else if (!strcmp(argv[i], "-v")) {
            verbose = 1;
        } else if (!strcmp(argv[i], "-t") && (i + 1 < argc)) {
            timeout_scale = atof(argv[++i]);
        } else if (!strcmp(argv[i], "-x") && (i + 1 < argc)) {
            expected_path = argv[++i];
        } else if (npats < 255) {
            pats[npats++] = argv[i];
        }
    }

    filter = getenv("TH_FILTER");
    if (filter != NULL) {
        filter = strdup(filter);
        for (tok = strtok_r(filter, " ", &save); tok && (npats < 255);
             tok = strtok_r(NULL, " ", &save)) {
            pats[npats++] = tok;
        }
    }

    if (expected_path != NULL) {
        th_expected_read(expected_path, &expected);
    }

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);

    for (test = th_tests; test != NULL; test = test->next) {
        if (!th_matches(test, npats, pats)) {
            continue;
        }
        if (list) {
            printf("%s.%s\n", test->suite, test->name);
            continue;
        }
        switch (th_run_one(test, timeout_scale, verbose, line,
                           sizeof(line))) {
        case TH_RES_PASS:
            ++passed;
            break;
        case TH_RES_SKIP:
            ++skipped;
            if ((expected_path != NULL) &&
                !th_expected_match(&expected, test)) {
                ++unexpected;
                skips = realloc(skips, skips_len + strlen(line) + 4);
                if (skips == NULL) {
                    perror("th: realloc");
                    exit(2);
                }
                skips_len += sprintf(skips + skips_len, "  %s\n", line);
            }
            break;
        default:
            ++failed;
            recap = realloc(recap, recap_len + strlen(line) + 4);
            if (recap == NULL) {
                perror("th: realloc");
                exit(2);
            }
            recap_len += sprintf(recap + recap_len, "  %s\n", line);
            break;
        }
    }

    if (list) {
        return 0;
    }

    if (failed) {
        printf("failed:\n%s", recap);
    }
    free(recap);
    if (unexpected) {
        printf("skipped, not in %s:\n%s", expected_path, skips);
    }
    free(skips);

    /* the last line: the counts, whether the skips were the expected
     * ones, and what this run was told to accept */
    printf("%d passed, %d failed, %d skipped", passed, failed, skipped);
    if (expected_path != NULL) {
        printf(" (%d not expected%s)", unexpected,
               (unexpected && allow_skips) ? ", allowed by TH_ALLOW_SKIPS" :
               unexpected                  ? ": a failure" :
                                             "");
    }
    if ((note != NULL) && (note[0] != '\0')) {
        printf("; %s", note);
    }
    printf("\n");
    return ((failed == 0) && (!unexpected || allow_skips)) ? 0 : 1;
}
