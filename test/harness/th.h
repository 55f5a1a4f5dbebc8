/*
 * th: the ucx-hcr test harness.
 *
 * A small C harness with no googletest dependency. Each test runs in its own
 * forked process (its own process group), so a crash, an assertion or a hang
 * fails that test only. Tests register themselves with TH_TEST(); the runner
 * (th.c) filters them by name, enforces a per-test timeout and prints a final
 * line "N passed, N failed, N skipped".
 *
 * Multi-process tests start N cooperating ranks with th_run_procs() or
 * th_procs_start(); ranks exchange addresses over an out-of-band channel
 * (a full mesh of UNIX socket pairs, see th_procs.c).
 */
#ifndef TH_H_
#define TH_H_

#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>
#include <string.h>

#define TH_DEFAULT_TIMEOUT 60 /* seconds */

/* Exit codes of a test or rank process */
#define TH_EXIT_PASS 0
#define TH_EXIT_FAIL 1
#define TH_EXIT_SKIP 77

typedef struct th_test {
    const char     *suite;
    const char     *name;
    void            (*func)(void);
    unsigned        timeout;
    struct th_test  *next;
} th_test_t;

void th_register(th_test_t *test);

#define TH_TEST_TIMEOUT(_suite, _name, _timeout) \
    static void th_test_##_suite##_##_name(void); \
    static th_test_t th_desc_##_suite##_##_name = { \
        #_suite, #_name, th_test_##_suite##_##_name, (_timeout), NULL \
    }; \
    static void __attribute__((constructor)) th_reg_##_suite##_##_name(void) \
    { \
        th_register(&th_desc_##_suite##_##_name); \
    } \
    static void th_test_##_suite##_##_name(void)

#define TH_TEST(_suite, _name) \
    TH_TEST_TIMEOUT(_suite, _name, TH_DEFAULT_TIMEOUT)


/* Failing, skipping and logging. All of them work in a test process and in
 * a rank process. */
void th_fail_at(const char *file, int line, const char *fmt, ...)
        __attribute__((noreturn, format(printf, 3, 4)));
void th_skip_at(const char *file, int line, const char *fmt, ...)
        __attribute__((noreturn, format(printf, 3, 4)));
void th_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TH_FAIL(...) th_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define TH_SKIP(...) th_skip_at(__FILE__, __LINE__, __VA_ARGS__)

#define TH_ASSERT(_cond) \
    do { \
        if (!(_cond)) { \
            TH_FAIL("assertion failed: %s", #_cond); \
        } \
    } while (0)

#define TH_ASSERT_OP_(_a, _op, _b) \
    do { \
        long long _th_a = (long long)(_a); \
        long long _th_b = (long long)(_b); \
        if (!(_th_a _op _th_b)) { \
            TH_FAIL("expected %s %s %s, got %lld (0x%llx) vs %lld (0x%llx)", \
                    #_a, #_op, #_b, _th_a, (unsigned long long)_th_a, _th_b, \
                    (unsigned long long)_th_b); \
        } \
    } while (0)

/* floating point: TH_ASSERT_DBL(x, <, 1e-6); the integer forms truncate */
#define TH_ASSERT_DBL(_a, _op, _b) \
    do { \
        double _th_a = (_a); \
        double _th_b = (_b); \
        if (!(_th_a _op _th_b)) { \
            TH_FAIL("expected %s %s %s, got %g vs %g", #_a, #_op, #_b, \
                    _th_a, _th_b); \
        } \
    } while (0)

#define TH_ASSERT_EQ(_a, _b) TH_ASSERT_OP_(_a, ==, _b)
#define TH_ASSERT_NE(_a, _b) TH_ASSERT_OP_(_a, !=, _b)
#define TH_ASSERT_LT(_a, _b) TH_ASSERT_OP_(_a, <, _b)
#define TH_ASSERT_LE(_a, _b) TH_ASSERT_OP_(_a, <=, _b)
#define TH_ASSERT_GT(_a, _b) TH_ASSERT_OP_(_a, >, _b)
#define TH_ASSERT_GE(_a, _b) TH_ASSERT_OP_(_a, >=, _b)

#define TH_ASSERT_STR_EQ(_a, _b) \
    do { \
        const char *_th_a = (_a), *_th_b = (_b); \
        if (strcmp(_th_a, _th_b) != 0) { \
            TH_FAIL("expected %s == %s, got \"%s\" vs \"%s\"", #_a, #_b, \
                    _th_a, _th_b); \
        } \
    } while (0)

/* Compare two buffers; on mismatch report the first differing offset */
void th_assert_mem_eq_at(const char *file, int line, const char *expr_a,
                         const char *expr_b, const void *a, const void *b,
                         size_t length);
#define TH_ASSERT_MEM_EQ(_a, _b, _len) \
    th_assert_mem_eq_at(__FILE__, __LINE__, #_a, #_b, (_a), (_b), (_len))

/* Assert that a function returning 0/-1 with errno succeeded */
#define TH_ASSERT_SYS(_expr) \
    do { \
        if ((_expr) < 0) { \
            TH_FAIL("%s failed: %m", #_expr); \
        } \
    } while (0)


/* Data helpers: a reproducible pattern and a checksum (FNV-1a 64) */
void     th_fill_pattern(void *buf, size_t length, uint64_t seed);
uint64_t th_checksum(const void *buf, size_t length);
/* Verify a th_fill_pattern() buffer in place; fails the test on mismatch */
void     th_check_pattern_at(const char *file, int line, const void *buf,
                             size_t length, uint64_t seed);
#define TH_CHECK_PATTERN(_buf, _len, _seed) \
    th_check_pattern_at(__FILE__, __LINE__, (_buf), (_len), (_seed))

#define TH_MIN(_a, _b) (((_a) < (_b)) ? (_a) : (_b))

/* Time in seconds (monotonic) */
double th_time(void);

/* CPU time in seconds, user and system, of who (RUSAGE_SELF: this process,
 * all its threads; RUSAGE_THREAD, RUSAGE_CHILDREN) */
double th_cpu_time(int who);

/* Installation paths: TH_PREFIX overrides the compiled-in prefix */
const char *th_prefix(void);

/*
 * Run a shell command; its combined stdout and stderr is returned in
 * *output (malloc'ed, NUL-terminated, may be NULL if not wanted). Returns the
 * exit status (or 128+signal).
 */
int th_run_cmd(char **output, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Does the process see a verbs device named with this prefix? */
int th_have_verbs_device(const char *name_prefix);

/* May this process open a user-mode userfaultfd (Linux 5.11; a seccomp
 * filter, or a kernel built without it, refuses; headers older than 5.11
 * build UCX without it)? */
int th_can_uffd(void);

/* Is a TCP socket on this port (/proc/net/tcp): listening, or with any, in
 * any state (a connection's end, TIME_WAIT included)? */
int th_tcp_port_used(int port, int any);

/*
 * A TCP port for a test's server that no socket uses now, in 20000..31999:
 * below the kernel's ephemeral ports (32768 and up by default), where
 * connections take theirs, so that it is not a client's end by the time
 * the server binds it. attempt picks another one after a server could not
 * bind the last.
 */
int th_free_tcp_port(unsigned attempt);


/* ---- Multi-process tests ------------------------------------------------ */

typedef struct th_oob   th_oob_t;
typedef struct th_procs th_procs_t;

typedef void (*th_proc_fn_t)(th_oob_t *oob, int rank, int nprocs, void *arg);

/*
 * Run fn in nprocs forked processes and wait for them. Fails the calling test
 * if a rank fails or crashes; skips it if a rank skips.
 */
void th_run_procs(int nprocs, th_proc_fn_t fn, void *arg);

/* Start ranks without waiting, e.g. to kill one of them */
th_procs_t *th_procs_start(int nprocs, th_proc_fn_t fn, void *arg);
pid_t       th_procs_pid(th_procs_t *procs, int rank);
void        th_procs_kill(th_procs_t *procs, int rank, int sig);
/*
 * Wait for all ranks. exit_status (nprocs entries, may be NULL) receives each
 * rank's exit code, or 128+signal. Returns 0 when every rank that was not
 * killed by th_procs_kill() exited with TH_EXIT_PASS, TH_EXIT_SKIP if a rank
 * skipped, and TH_EXIT_FAIL otherwise. Frees procs.
 */
int         th_procs_wait(th_procs_t *procs, int *exit_status);

/* Out-of-band channel between ranks (blocking, exact lengths) */
void th_oob_send(th_oob_t *oob, int peer, const void *buf, size_t length);
void th_oob_recv(th_oob_t *oob, int peer, void *buf, size_t length);
void th_oob_barrier(th_oob_t *oob);
/* Send buf to peer and receive the peer's buffer of any length (malloc'ed) */
void th_oob_exchange(th_oob_t *oob, int peer, const void *buf, size_t length,
                     void **peer_buf, size_t *peer_length);
/* The socket to a peer, e.g. to poll it while progressing something else */
int  th_oob_fd(th_oob_t *oob, int peer);
int  th_oob_rank(th_oob_t *oob);
int  th_oob_nprocs(th_oob_t *oob);

#endif
