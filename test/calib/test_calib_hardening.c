/*
 * The calibration and its settings against hostile input, another local user
 * and exhaustion (issue 26, items 7-12): models with values no device has,
 * a cache another user can reach, a FIFO named as a model, settings with
 * negative sizes and NaN, pinned memory that runs out, and a fuzzer of model
 * files. Each test names the item it covers.
 */
#include "th_ucx.h"

#include <ucs/calib/calib.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* the device name the in-process tests give their fake measurement */
#define HARD_DEV "hardtest0"
/* the second uid of the two-user tests (nobody) */
#define HARD_OTHER_UID 65534
/* how long a call that must not block may take */
#define HARD_BLOCK_LIMIT 10


/* a valid model; tests replace one of its lines */
static const char *hard_lines[] = {"reg_resident 5e-06 1e-10",
                                   "reg_nonresident 5e-06 3e-10",
                                   "dereg 2e-06 1e-11",
                                   "copy_fault 0 2.5e-10",
                                   "xfer_fault 1e-06 2e-10",
                                   "copy 16384 4e10",
                                   "copy 67108864 8e9",
                                   "net_latency 1e-06",
                                   "net_bw 7e9",
                                   "net_gap 2e-06",
                                   "engine memcpy 1e-07 1e-07 8e9 0 0",
                                   "measure_time 0.2",
                                   NULL};

/* the model's text with the line starting with @a key (and, for "copy" and
 * "engine", its second word) replaced by @a line, or @a line appended */
static void
hard_model_text(char *buf, size_t max, const char *key, const char *line)
{
    size_t len = 0, klen = (key != NULL) ? strlen(key) : 0;
    int replaced = 0;
    const char **l;

    buf[0] = '\0';
    for (l = hard_lines; *l != NULL; ++l) {
        if ((key != NULL) && !replaced && !strncmp(*l, key, klen) &&
            ((*l)[klen] == ' ')) {
            len += snprintf(buf + len, max - len, "%s\n", line);
            replaced = 1;
        } else {
            len += snprintf(buf + len, max - len, "%s\n", *l);
        }
    }
    if ((key != NULL) && !replaced) {
        snprintf(buf + len, max - len, "%s\n", line);
    }
}

static void hard_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    TH_ASSERT(fd >= 0);
    TH_ASSERT_EQ(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static void hard_tmpfile(char *path, size_t max, const void *data, size_t len)
{
    int fd;

    snprintf(path, max, "/tmp/th-hard-XXXXXX");
    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    close(fd);
    hard_write_file(path, data, len);
}

static ucs_status_t hard_read_text(const char *text, ucs_calib_model_t *model)
{
    ucs_calib_model_t dummy;
    ucs_status_t status;
    char path[64];

    hard_tmpfile(path, sizeof(path), text, strlen(text));
    status = ucs_calib_model_read(path, (model != NULL) ? model : &dummy);
    unlink(path);
    return status;
}

/* stdout and stderr (UCX logs to stdout) into a file, and back */
typedef struct {
    int saved[2];
    char path[64];
} hard_capture_t;

static void hard_capture_start(hard_capture_t *cap)
{
    int fd, i;

    fflush(NULL);
    snprintf(cap->path, sizeof(cap->path), "/tmp/th-hard-log-XXXXXX");
    fd = mkstemp(cap->path);
    TH_ASSERT(fd >= 0);
    for (i = 0; i < 2; ++i) {
        cap->saved[i] = dup(i + 1);
        dup2(fd, i + 1);
    }
    close(fd);
}

/* the captured text (malloc'ed) */
static char *hard_capture_stop(hard_capture_t *cap)
{
    char *buf;
    FILE *f;
    long len;
    int i;

    fflush(NULL);
    for (i = 0; i < 2; ++i) {
        dup2(cap->saved[i], i + 1);
        close(cap->saved[i]);
    }

    f = fopen(cap->path, "r");
    TH_ASSERT(f != NULL);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    buf = calloc(1, len + 1);
    TH_ASSERT(buf != NULL);
    TH_ASSERT_EQ(fread(buf, 1, len, f), (size_t)len);
    fclose(f);
    unlink(cap->path);
    return buf;
}

static unsigned hard_count(const char *text, const char *what)
{
    unsigned n = 0;

    for (; (text = strstr(text, what)) != NULL; text += strlen(what)) {
        ++n;
    }
    return n;
}

static unsigned hard_lines_of(const char *text)
{
    return hard_count(text, "\n");
}


/* ---- item 7, 8: every value of a model is range-checked ----------------- */

/* a line of a model file that no device has */
static const struct {
    const char *key;
    const char *line;
} hard_bad_lines[] = {
        /* item 7: UCX's selection asserted on these (score >= 0, weight > 0) */
        {"net_latency", "net_latency -1e-6"},
        {"net_latency", "net_latency nan"},
        {"net_gap", "net_gap -2e-6"},
        {"net_gap", "net_gap NAN"},
        {"net_bw", "net_bw inf"},
        {"net_bw", "net_bw 1e300"},
        {"copy", "copy 16384 inf"},
        /* item 8: silently accepted nonsense */
        {"reg_resident", "reg_resident -5e-6 1e-10"},
        {"reg_resident", "reg_resident 5e-6 -1e-10"},
        {"reg_nonresident", "reg_nonresident nan 1e-10"},
        {"dereg", "dereg -1e-6 0"},
        {"copy_fault", "copy_fault 0 inf"},
        {"xfer_fault", "xfer_fault -1 0"},
        {"copy", "copy 0.5 1e10"},
        {"copy", "copy 1e30 1e10"},
        {"copy", "copy 4096.5 1e10"},
        {"copy", "copy -4096 1e10"},
        {"copy", "copy 16384 -4e10"},
        {"engine memcpy", "engine memcpy 1e-7 1e-7 8e9 -2.85 0"},
        {"engine memcpy", "engine memcpy 1e-7 1e-7 8e9 1.5 0"},
        {"engine memcpy", "engine memcpy nan 1e-7 8e9 0.5 0"},
        {"engine memcpy", "engine memcpy 1e-7 1e-7 inf 0.5 0"},
        {"engine memcpy", "engine memcpy 1e-7 1e-7 8e9 0.5 -1e-9"},
        {"measure_time", "measure_time nan"},
        {"measure_time", "measure_time -1"},
        /* a value with something after it, or a missing one */
        {"net_bw", "net_bw 7e9 junk"},
        {"net_bw", "net_bw 7e9x"},
        {"dereg", "dereg 2e-6"},
        {"net_gap", "net_gap 2e-6 1e-6"},
};

#define HARD_NUM_BAD (sizeof(hard_bad_lines) / sizeof(hard_bad_lines[0]))

TH_TEST(calib_hardening, file_bad_values_rejected)
{
    unsigned i, accepted = 0;
    hard_capture_t cap;
    char text[2048];
    char *log;

    hard_model_text(text, sizeof(text), NULL, NULL);
    TH_ASSERT_UCS_OK(hard_read_text(text, NULL));

    hard_capture_start(&cap);
    for (i = 0; i < HARD_NUM_BAD; ++i) {
        hard_model_text(text, sizeof(text), hard_bad_lines[i].key,
                        hard_bad_lines[i].line);
        if (hard_read_text(text, NULL) != UCS_ERR_INVALID_PARAM) {
            th_log("model with '%s' was not refused", hard_bad_lines[i].line);
            ++accepted;
        }
    }
    log = hard_capture_stop(&cap);
    th_log("%s", log);
    TH_ASSERT_EQ(accepted, 0);
    /* one error each */
    TH_ASSERT_EQ(hard_count(log, "calibration model"), HARD_NUM_BAD);
    free(log);
}

/* item 7: a bad UCX_CALIB_FILE gives one error, however many mds open,
 * and no model: the device keeps UCX's constants */
TH_TEST(calib_hardening, bad_file_one_error)
{
    ucs_calib_source_t source;
    ucs_calib_model_t model;
    char text[2048], path[64], *log;
    hard_capture_t cap;
    int i;

    hard_model_text(text, sizeof(text), "net_latency", "net_latency -1e-6");
    hard_tmpfile(path, sizeof(path), text, strlen(text));
    setenv("UCX_CALIB_FILE", path, 1);

    hard_capture_start(&cap);
    for (i = 0; i < 3; ++i) {
        if (ucs_calib_get(HARD_DEV, "", NULL, NULL, &model, &source) ==
            UCS_OK) {
            break;
        }
    }
    log = hard_capture_stop(&cap);
    unlink(path);
    th_log("log: %s", log);

    TH_ASSERT_EQ(i, 3);
    TH_ASSERT_EQ(ucs_calib_find(HARD_DEV, &model, NULL), UCS_ERR_NO_ELEM);
    TH_ASSERT_EQ(hard_count(log, "calibration model"), 1);
    TH_ASSERT(strstr(log, "net_latency -1e-06 is not in [0, 1] s") != NULL);
    free(log);
}

/* item 12: a parse error shows the file's bytes escaped, never raw */
TH_TEST(calib_hardening, file_error_escapes_bytes)
{
    static const char bad[] = "\x1b[2J\x1b]0;pwned\x07 \xff\x01 1 2\n";
    char text[2048], path[64], *log;
    ucs_calib_model_t model;
    hard_capture_t cap;
    const char *p;

    hard_model_text(text, sizeof(text), NULL, NULL);
    strcat(text, bad);
    hard_tmpfile(path, sizeof(path), text, strlen(text));

    hard_capture_start(&cap);
    TH_ASSERT_EQ(ucs_calib_model_read(path, &model), UCS_ERR_INVALID_PARAM);
    log = hard_capture_stop(&cap);
    unlink(path);
    th_log("log: %s", log);

    TH_ASSERT(strstr(log, "\\x1b[2J\\x1b]0;pwned\\x07 \\xff\\x01") != NULL);
    for (p = log; *p != '\0'; ++p) {
        if ((((unsigned char)*p < 0x20) && (*p != '\n')) ||
            ((unsigned char)*p >= 0x7f)) {
            TH_FAIL("raw byte 0x%02x at offset %zu of the log",
                    (unsigned char)*p, (size_t)(p - log));
        }
    }
    free(log);
}

/* the device part of a measurement, with values a test chooses */
typedef struct {
    double overlap; /* of the memcpy engine */
    double net_gap;
    double net_bw;
    int calls;
} hard_measure_t;

static ucs_status_t hard_measure(void *arg, ucs_calib_model_t *model)
{
    hard_measure_t *hm = arg;
    ucs_calib_engine_t *e;

    ++hm->calls;
    model->reg[UCS_CALIB_PAGES_RESIDENT]    = ucs_linear_func_make(5e-6, 1e-10);
    model->reg[UCS_CALIB_PAGES_NONRESIDENT] = ucs_linear_func_make(5e-6, 3e-10);
    model->dereg                            = ucs_linear_func_make(2e-6, 1e-11);
    model->net_latency                      = 1e-6;
    model->net_bw                           = hm->net_bw;
    model->net_gap                          = hm->net_gap;

    /* as if the engine's measurement had come out so */
    e          = &model->engine[UCS_COPY_BACKEND_MEMCPY];
    e->start   = 1e-7;
    e->post    = 1e-7;
    e->bw      = 8e9;
    e->overlap = hm->overlap;
    e->cpu     = 0;
    return UCS_OK;
}

static const hard_measure_t hard_measure_ok = {0.0, 2e-6, 7e9, 0};

/* ucs_calib_get() in a child process (models are kept per process) */
typedef struct {
    ucs_status_t status;
    ucs_calib_source_t source;
    ucs_calib_model_t model;
} hard_get_t;

static void
hard_get_child(const char *dev, const hard_measure_t *hm, hard_get_t *res)
{
    hard_measure_t m = *hm;
    int fds[2], status;
    ssize_t n;
    pid_t pid;

    TH_ASSERT_SYS(pipe(fds));
    pid = fork();
    TH_ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        /* a call that blocks ends here, and the parent sees no result */
        alarm(HARD_BLOCK_LIMIT);
        memset(res, 0, sizeof(*res));
        res->status = ucs_calib_get(dev, "", hard_measure, &m, &res->model,
                                    &res->source);
        n           = write(fds[1], res, sizeof(*res));
        _exit((n == sizeof(*res)) ? 0 : 1);
    }

    close(fds[1]);
    n = read(fds[0], res, sizeof(*res));
    close(fds[0]);
    TH_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (n != sizeof(*res)) {
        TH_FAIL("ucs_calib_get() did not return in %d s (child status 0x%x)",
                HARD_BLOCK_LIMIT, status);
    }
}

/* a private cache directory (mode 0700) */
static void hard_cache_dir(char *dir, size_t max)
{
    snprintf(dir, max, "/tmp/th-hard-dir-XXXXXX");
    TH_ASSERT(mkdtemp(dir) != NULL);
    setenv("UCX_CALIB_DIR", dir, 1);
    unsetenv("UCX_CALIB_FILE");
}

/* the model file the cache holds, which a first get wrote */
static void hard_cache_file(const char *dir, char *path, size_t max)
{
    char pattern[PATH_MAX];
    glob_t g;

    snprintf(pattern, sizeof(pattern), "%s/*-" HARD_DEV "-*.model", dir);
    TH_ASSERT_EQ(glob(pattern, 0, NULL, &g), 0);
    TH_ASSERT_EQ(g.gl_pathc, 1);
    snprintf(path, max, "%s", g.gl_pathv[0]);
    globfree(&g);
}

static void hard_rm_rf(const char *path)
{
    TH_ASSERT_EQ(th_run_cmd(NULL, "rm -rf '%s'", path), 0);
}

/* item 8: a measured value out of bounds is clamped, and a NaN refused */
TH_TEST(calib_hardening, measured_values_clamped)
{
    hard_measure_t hm = hard_measure_ok;
    char dir[64], path[PATH_MAX];
    ucs_calib_model_t model;
    hard_get_t res;

    hard_cache_dir(dir, sizeof(dir));
    hm.overlap = -2.85; /* as a loaded host measured the thread engine */
    hm.net_gap = -1e-9; /* a difference of two noisy times */
    hm.net_bw  = INFINITY;
    hard_get_child(HARD_DEV, &hm, &res);
    TH_ASSERT_UCS_OK(res.status);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_MEASURED);
    TH_ASSERT_DBL(res.model.engine[UCS_COPY_BACKEND_MEMCPY].overlap, ==, 0.0);
    TH_ASSERT_DBL(res.model.net_gap, ==, 0.0);
    TH_ASSERT_DBL(res.model.net_bw, ==,
                  ucs_calib_value_bound(UCS_CALIB_VALUE_BW)->max);

    /* what the cache keeps reads back */
    hard_cache_file(dir, path, sizeof(path));
    TH_ASSERT_UCS_OK(ucs_calib_model_read(path, &model));
    TH_ASSERT_DBL(model.engine[UCS_COPY_BACKEND_MEMCPY].overlap, ==, 0.0);
    hard_rm_rf(dir);

    /* NaN has no nearest bound: the measurement is refused */
    hard_cache_dir(dir, sizeof(dir));
    hm        = hard_measure_ok;
    hm.net_bw = NAN;
    hard_get_child(HARD_DEV, &hm, &res);
    TH_ASSERT_EQ(res.status, UCS_ERR_INVALID_PARAM);
    hard_rm_rf(dir);
}


/* ---- item 9: the cache is the user's alone ------------------------------ */

/* a cache directory with a model of HARD_DEV in it */
static void hard_cache_filled(char *dir, size_t max)
{
    hard_get_t res;

    hard_cache_dir(dir, max);
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_UCS_OK(res.status);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_MEASURED);
    /* a second process reads it */
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_CACHE);
}

/* a directory others may write is not a cache: measure, keep nothing */
TH_TEST(calib_hardening, cache_dir_open_mode_refused)
{
    char dir[64], path[PATH_MAX];
    struct stat st;
    hard_get_t res;

    hard_cache_filled(dir, sizeof(dir));
    hard_cache_file(dir, path, sizeof(path));
    TH_ASSERT_SYS(stat(path, &st));

    TH_ASSERT_SYS(chmod(dir, 0777));
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_UCS_OK(res.status);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_MEASURED);

    TH_ASSERT_SYS(chmod(dir, 0750));
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_MEASURED);

    /* nothing was written meanwhile */
    TH_ASSERT_SYS(chmod(dir, 0700));
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_CACHE);
    hard_rm_rf(dir);
}

/* the cache directory named through a link is not used */
TH_TEST(calib_hardening, cache_dir_symlink_refused)
{
    char dir[64], link[80];
    hard_get_t res;

    hard_cache_filled(dir, sizeof(dir));
    snprintf(link, sizeof(link), "%s.link", dir);
    TH_ASSERT_SYS(symlink(dir, link));
    setenv("UCX_CALIB_DIR", link, 1);
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_MEASURED);
    unlink(link);
    hard_rm_rf(dir);
}

/* a model file that is a link is neither read nor written through */
TH_TEST(calib_hardening, cache_file_symlink_not_followed)
{
    char dir[64], path[PATH_MAX], target[64], text[2048];
    struct stat st;
    hard_get_t res;

    hard_cache_filled(dir, sizeof(dir));
    hard_cache_file(dir, path, sizeof(path));

    /* a valid model elsewhere, linked in place of the cached one */
    hard_model_text(text, sizeof(text), NULL, NULL);
    hard_tmpfile(target, sizeof(target), text, strlen(text));
    TH_ASSERT_SYS(unlink(path));
    TH_ASSERT_SYS(symlink(target, path));

    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_MEASURED);

    /* the measurement replaced the link, not the file it named */
    TH_ASSERT_SYS(lstat(path, &st));
    TH_ASSERT(S_ISREG(st.st_mode));
    TH_ASSERT_SYS(stat(target, &st));
    TH_ASSERT_EQ(st.st_size, strlen(text));
    unlink(target);
    hard_rm_rf(dir);
}

/* the temporary file of a write has no name another user could plant: the
 * old one was "<file>.<pid>", opened with fopen("w") */
TH_TEST(calib_hardening, cache_tmp_file_not_planted)
{
    char dir[64], path[PATH_MAX], planted[PATH_MAX + 32], victim[64];
    static const char victim_text[] = "the victim's file\n";
    ucs_calib_model_t model;
    struct stat st;

    hard_cache_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/x.model", dir);
    hard_tmpfile(victim, sizeof(victim), victim_text, strlen(victim_text));
    snprintf(planted, sizeof(planted), "%s.%d", path, (int)getpid());
    TH_ASSERT_SYS(symlink(victim, planted));

    TH_ASSERT_UCS_OK(hard_read_text("reg_resident 1e-6 1e-10\n"
                                    "reg_nonresident 1e-6 1e-10\n"
                                    "dereg 1e-6 0\ncopy 4096 1e10\n"
                                    "net_bw 1e9\n",
                                    &model));
    TH_ASSERT_UCS_OK(ucs_calib_model_write(&model, path));

    TH_ASSERT_SYS(stat(victim, &st));
    TH_ASSERT_EQ(st.st_size, strlen(victim_text));
    TH_ASSERT_SYS(lstat(path, &st));
    TH_ASSERT(S_ISREG(st.st_mode));
    TH_ASSERT_EQ(st.st_mode & 0777, 0600);
    unlink(victim);
    hard_rm_rf(dir);
}

/* the ucx_hcr_calib tool as another user, with HOME and XDG_CACHE_HOME
 * unset (so the cache falls back to /tmp/ucx-calib-<uid>): its "source=" */
static void hard_tool_as_other(const char *env, char *source, size_t max)
{
    char *out, *p;
    int ret;

    ret = th_run_cmd(&out,
                     "env -u HOME -u XDG_CACHE_HOME -u "
                     "UCX_CALIB_DIR %s UCX_IB_PCI_RELAXED_ORDERING=off "
                     "setpriv --reuid=%d --regid=%d --clear-groups "
                     "%s/bin/ucx_hcr_calib -d softverbs0 -p 2>&1",
                     env, HARD_OTHER_UID, HARD_OTHER_UID, th_prefix());
    th_log("%s", out);
    TH_ASSERT_EQ(ret, 0);
    p = strstr(out, "\nsource=");
    TH_ASSERT(p != NULL);
    snprintf(source, max, "%.*s", (int)strcspn(p + 8, "\n"), p + 8);
    free(out);
}

/*
 * Two users: root plants a model in /tmp/ucx-calib-65534 before uid 65534
 * first runs without HOME. The model is the one the victim would cache
 * itself (its name is learnt from a run with a private cache), in a
 * directory root made open to everyone.
 */
TH_TEST_TIMEOUT(calib_hardening, cache_two_users, 120)
{
    char priv[64], tmp_dir[64], source[32], cmd[512], *out;

    if (geteuid() != 0) {
        TH_SKIP("needs root, to run as uid %d with setpriv", HARD_OTHER_UID);
    }
    if (system("command -v setpriv > /dev/null") != 0) {
        TH_SKIP("no setpriv (util-linux)");
    }
    if (!th_have_verbs_device("softverbs")) {
        TH_SKIP("no softverbs device (softverbs not preloaded)");
    }

    /* the victim's own cache, to learn the name of its model */
    snprintf(priv, sizeof(priv), "/tmp/th-hard-priv-XXXXXX");
    TH_ASSERT(mkdtemp(priv) != NULL);
    TH_ASSERT_SYS(chown(priv, HARD_OTHER_UID, HARD_OTHER_UID));
    snprintf(cmd, sizeof(cmd), "UCX_CALIB_DIR=%s", priv);
    hard_tool_as_other(cmd, source, sizeof(source));
    TH_ASSERT_STR_EQ(source, "measured");
    hard_tool_as_other(cmd, source, sizeof(source));
    TH_ASSERT_STR_EQ(source, "cache");

    /* the planted directory: root's, open to all, with that model */
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/ucx-calib-%d", HARD_OTHER_UID);
    hard_rm_rf(tmp_dir);
    TH_ASSERT_SYS(mkdir(tmp_dir, 0777));
    TH_ASSERT_SYS(chmod(tmp_dir, 0777));
    TH_ASSERT_EQ(th_run_cmd(NULL, "cp %s/*.model %s/ && chmod 0666 %s/*", priv,
                            tmp_dir, tmp_dir),
                 0);

    hard_tool_as_other("", source, sizeof(source));
    TH_ASSERT_STR_EQ(source, "measured");

    /* and it stays as planted: the victim wrote nothing into it */
    TH_ASSERT_EQ(th_run_cmd(&out, "ls -ln %s", tmp_dir), 0);
    th_log("%s", out);
    TH_ASSERT_EQ(hard_count(out, " 65534 "), 0);
    free(out);

    hard_rm_rf(tmp_dir);
    hard_rm_rf(priv);
}


/* ---- item 10: a FIFO is not a model ------------------------------------- */

TH_TEST(calib_hardening, calib_file_fifo_does_not_block)
{
    char dir[64], path[PATH_MAX], fifo[80];
    hard_get_t res;

    /* UCX_CALIB_FILE naming a FIFO nobody writes */
    hard_cache_dir(dir, sizeof(dir));
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    TH_ASSERT_SYS(mkfifo(fifo, 0600));
    setenv("UCX_CALIB_FILE", fifo, 1);
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_EQ(res.status, UCS_ERR_INVALID_PARAM);
    unsetenv("UCX_CALIB_FILE");
    hard_rm_rf(dir);

    /* a FIFO in place of the cached model */
    hard_cache_filled(dir, sizeof(dir));
    hard_cache_file(dir, path, sizeof(path));
    TH_ASSERT_SYS(unlink(path));
    TH_ASSERT_SYS(mkfifo(path, 0600));
    hard_get_child(HARD_DEV, &hard_measure_ok, &res);
    TH_ASSERT_UCS_OK(res.status);
    TH_ASSERT_EQ(res.source, UCS_CALIB_SOURCE_MEASURED);
    hard_rm_rf(dir);
}


/* ---- item 11: exhausted pinned memory ----------------------------------- */

static int hard_wait_until(pid_t pid, double deadline)
{
    int status;

    for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            return WIFEXITED(status) ? WEXITSTATUS(status) :
                                       128 + WTERMSIG(status);
        }
        if (th_time() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(20000);
    }
}

static pid_t hard_spawn(const char *cmd, const char *out_path)
{
    pid_t pid = fork();
    int fd;

    TH_ASSERT(pid >= 0);
    if (pid == 0) {
        fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static char *hard_slurp(const char *path, size_t max)
{
    char *buf = calloc(1, max + 1);
    FILE *f   = fopen(path, "r");

    TH_ASSERT((buf != NULL) && (f != NULL));
    fread(buf, 1, max, f);
    fclose(f);
    return buf;
}

/*
 * ucx_perftest's server and client with @a env: both must end within
 * @a timeout seconds; returns their exit codes, and their output (up to
 * 1 MiB each, malloc'ed) in out[].
 */
static void hard_perftest(const char *env, const char *args, double timeout,
                          int rc[2], char *out[2])
{
    char cmd[2][1024], path[2][64];
    double deadline;
    pid_t pid[2];
    int port = th_free_tcp_port(0);
    int i;

    for (i = 0; i < 2; ++i) {
        snprintf(path[i], sizeof(path[i]), "/tmp/th-hard-pt%d-%d", i,
                 (int)getpid());
        snprintf(cmd[i], sizeof(cmd[i]),
                 "exec env %s %s/bin/ucx_perftest "
                 "-p %d %s %s",
                 env, th_prefix(), port, (i == 0) ? "" : "127.0.0.1", args);
    }

    th_log("$ %s", cmd[1]);
    deadline = th_time() + timeout;
    pid[0]   = hard_spawn(cmd[0], path[0]);
    sleep(1); /* the server listens */
    if (!th_tcp_port_used(port, 0)) {
        th_log("no listener on port %d after 1 s", port);
    }
    pid[1] = hard_spawn(cmd[1], path[1]);
    for (i = 1; i >= 0; --i) {
        rc[i]  = hard_wait_until(pid[i], deadline);
        out[i] = hard_slurp(path[i], 1024 * 1024);
        unlink(path[i]);
    }
}

/* both ranks end, with a few lines of errors, instead of hanging and
 * logging ibv_reg_mr and mpool failures at every progress */
static void hard_perftest_memlock(const char *tls)
{
    char env[256], *out[2];
    int rc[2], i;

    if (!th_have_verbs_device("softverbs")) {
        TH_SKIP("no softverbs device (softverbs not preloaded)");
    }

    snprintf(env, sizeof(env), "UCX_TLS=%s SOFTVERBS_MEMLOCK_LIMIT=16M", tls);
    hard_perftest(env, "-t tag_bw -s 4194304 -n 20", 40, rc, out);
    for (i = 0; i < 2; ++i) {
        th_log("%s: exit %d, %u lines:\n%.3000s",
               (i == 0) ? "server" : "client", rc[i], hard_lines_of(out[i]),
               out[i]);
    }
    for (i = 0; i < 2; ++i) {
        TH_ASSERT(rc[i] >= 0); /* ended by itself */
        TH_ASSERT_LT(hard_lines_of(out[i]), 40);
        free(out[i]);
    }
}

TH_TEST_TIMEOUT(calib_hardening, memlock_exhausted_rc_verbs, 90)
{
    hard_perftest_memlock("rc_verbs,ud_verbs");
}

TH_TEST_TIMEOUT(calib_hardening, memlock_exhausted_hcr, 90)
{
    hard_perftest_memlock("hcr");
}

/* register @a size bytes on the first verbs device, in a child process with
 * an RLIMIT_MEMLOCK of @a rlimit (0: as it is) and, with @a drop_cap, no
 * CAP_IPC_LOCK;
 * returns whether it succeeded, and what softverbs printed */
static int hard_reg_child(size_t size, rlim_t rlimit, int drop_cap,
                          int attempts, char **log)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct rlimit rl;
    hard_capture_t cap;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    int n, i, status, ok;
    void *buf;
    pid_t pid;

    hard_capture_start(&cap);
    pid = fork();
    TH_ASSERT(pid >= 0);
    if (pid == 0) {
        /* lowering a limit needs no privilege */
        rl.rlim_cur = rl.rlim_max = rlimit;
        if ((rlimit != 0) && (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)) {
            _exit(3);
        }
        if (drop_cap) {
            if (syscall(SYS_capget, &hdr, data) != 0) {
                _exit(3);
            }
            data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
            if (syscall(SYS_capset, &hdr, data) != 0) {
                _exit(3);
            }
        }

        list = ibv_get_device_list(&n);
        if ((list == NULL) || (n == 0)) {
            _exit(3);
        }
        ctx = ibv_open_device(list[0]);
        pd  = (ctx != NULL) ? ibv_alloc_pd(ctx) : NULL;
        buf = aligned_alloc(4096, size);
        if ((pd == NULL) || (buf == NULL)) {
            _exit(3);
        }
        ok = 0;
        for (i = 0; i < attempts; ++i) {
            mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE);
            if (mr != NULL) {
                ok = 1;
                ibv_dereg_mr(mr);
            }
        }
        fflush(NULL);
        _exit(ok ? 0 : 1);
    }
    TH_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    *log = hard_capture_stop(&cap);
    th_log("child exit 0x%x: %s", status, *log);
    TH_ASSERT(WIFEXITED(status) && (WEXITSTATUS(status) <= 1));
    return WEXITSTATUS(status) == 0;
}

/* issue 30 item 3: softverbs follows the kernel, where a process with
 * CAP_IPC_LOCK may lock past RLIMIT_MEMLOCK, and names the limit it
 * enforced when it refuses */
TH_TEST(calib_hardening, softverbs_memlock_follows_kernel)
{
    char *log;

    if (!th_have_verbs_device("softverbs")) {
        TH_SKIP("no softverbs device (softverbs not preloaded)");
    }
    if (geteuid() != 0) {
        TH_SKIP("needs root, for CAP_IPC_LOCK");
    }

    unsetenv("SOFTVERBS_MEMLOCK_LIMIT");
    /* with CAP_IPC_LOCK, past a 1 MiB RLIMIT_MEMLOCK */
    TH_ASSERT(hard_reg_child(8 << 20, 1 << 20, 0, 1, &log));
    TH_ASSERT(strstr(log, "refused") == NULL);
    free(log);

    /* without it, refused, saying so once however often it is asked */
    TH_ASSERT(!hard_reg_child(8 << 20, 1 << 20, 1, 50, &log));
    TH_ASSERT_EQ(hard_count(log, "softverbs: "), 1);
    TH_ASSERT(strstr(log, "RLIMIT_MEMLOCK") != NULL);
    free(log);

    /* softverbs' own limit binds every process, and is named */
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "1M", 1);
    TH_ASSERT(!hard_reg_child(8 << 20, 0, 0, 50, &log));
    TH_ASSERT_EQ(hard_count(log, "softverbs: "), 1);
    TH_ASSERT(strstr(log, "SOFTVERBS_MEMLOCK_LIMIT is 1048576") != NULL);
    free(log);
}


/* ---- item 12: settings -------------------------------------------------- */

/* values that UCX's parsers took as huge numbers, or NaN */
TH_TEST(calib_hardening, settings_reject_negative_and_nan)
{
    static const char *bad[] = {"UCX_RNDV_SPPLN_THRESH=-1",
                                "UCX_RNDV_SPPLN_SLOT_SIZE=-3",
                                "UCX_RNDV_SPPLN_C0=-4k",
                                "UCX_RNDV_SPPLN_Q=nan",
                                "UCX_RNDV_SPPLN_Q=-2",
                                "UCX_RNDV_SPPLN_Q=inf",
                                "UCX_RNDV_SPPLN_GROUPS=0",
                                "UCX_RNDV_SPPLN_GROUPS=-1",
                                "UCX_COPY_ENGINE_THREADS=0",
                                "UCX_COPY_ENGINE_THREADS=-1",
                                "UCX_COPY_ENGINE_QUEUE_LEN=0",
                                "UCX_COPY_ENGINE_CHUNK=-1",
                                "UCX_COPY_ENGINE_SPIN_TIME=-5us",
                                "UCX_COPY_ENGINE_SPIN_MAX=nan",
                                "UCX_RVMA_RING_SIZE=-1",
                                "UCX_RVMA_AM_ID=-1",
                                "UCX_HCR_RVMA_AM_ID=-1", /* the old name */
                                "UCX_RVMA_READ_MAX=-64k"};
    unsigned i;
    char *out;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        th_run_cmd(&out, "env %s %s/bin/ucx_info -c 2>&1", bad[i], th_prefix());
        if (strstr(out, "Invalid value") == NULL) {
            TH_FAIL("%s was accepted", bad[i]);
        }
        free(out);
    }

    /* and what they refuse is not what is valid */
    TH_ASSERT_EQ(
            th_run_cmd(&out,
                       "env UCX_RNDV_SPPLN_Q=2.5 "
                       "UCX_COPY_ENGINE_THREADS=2 UCX_RNDV_SPPLN_THRESH=inf "
                       "%s/bin/ucx_info -c 2>&1",
                       th_prefix()),
            0);
    TH_ASSERT(strstr(out, "Invalid value") == NULL);
    TH_ASSERT(strstr(out, "UCX_RNDV_SPPLN_Q=2.500") != NULL);
    TH_ASSERT(strstr(out, "UCX_RNDV_SPPLN_THRESH=inf") != NULL);
    free(out);
}

/* errors about sizes print "auto" and "inf", not their codes; a growth
 * ratio outside what the superpipeline takes is refused, not raised */
TH_TEST_TIMEOUT(calib_hardening, settings_errors_print_auto, 90)
{
    static const struct {
        const char *env;
        const char *expect;
    } cases[] = {
            {"UCX_RNDV_SPPLN_SLOT_SIZE=auto", "slot auto"},
            {"UCX_RNDV_SPPLN_Q=0.5", "UCX_RNDV_SPPLN_Q=0.5: need auto"},
    };
    char env[256], *out[2];
    unsigned i;
    int rc[2], r;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        snprintf(env, sizeof(env), "UCX_TLS=tcp %s", cases[i].env);
        hard_perftest(env, "-t tag_lat -n 10", 40, rc, out);
        for (r = 0; r < 2; ++r) {
            th_log("%s rank %d exit %d: %.2000s", cases[i].env, r, rc[r],
                   out[r]);
            TH_ASSERT_EQ(rc[r], 0);
            TH_ASSERT(strstr(out[r], "18446744073709551") == NULL);
            TH_ASSERT(strstr(out[r], cases[i].expect) != NULL);
            free(out[r]);
        }
    }
}


/* ---- the model file fuzzer ---------------------------------------------- */

#define HARD_FUZZ_SEED  0x5eedca1bULL
#define HARD_FUZZ_CASES 3000

static uint64_t hard_rand_state;

static uint64_t hard_rand(void)
{
    /* xorshift64*: reproducible from the seed on every libc */
    hard_rand_state ^= hard_rand_state >> 12;
    hard_rand_state ^= hard_rand_state << 25;
    hard_rand_state ^= hard_rand_state >> 27;
    return hard_rand_state * 0x2545f4914f6cdd1dULL;
}

static unsigned hard_rand_below(unsigned n)
{
    return (unsigned)(hard_rand() % n);
}

/* numbers a mutation puts in place of one: bad ones, edge ones, fine ones */
static const char *hard_fuzz_numbers[] = {
        "nan",     "-nan",   "inf",
        "-inf",    "INF",    "NaN(0x1)",
        "1e308",   "1e-320", "-1",
        "-0",      "0",      "1",
        "0.5",     "1e30",   "1e13",
        "1e14",    "1e6",    "999999",
        "0x1p-20", "4096",   "18446744073709551615",
        "1e-6",    "1e-7",   "2e9",
        "",        "1e",     "--1",
        "1..2",    "+7e9",   "7e9junk",
        "0x",      "1e-300"};

static void hard_fuzz_mutate(char *text, size_t max)
{
    char tmp[4096], *p, *q;
    size_t len    = strlen(text), pos;
    unsigned kind = hard_rand_below(8), i, n;

    switch (kind) {
    case 0: /* flip random bytes, some to control characters */
        for (i = 0, n = 1 + hard_rand_below(4); (i < n) && (len > 0); ++i) {
            text[hard_rand_below(len)] = (char)hard_rand();
        }
        break;
    case 1: /* replace one number (a token starting with a digit, - or .) */
    case 2:
        n = 0;
        for (p = text; *p != '\0'; ++p) {
            if (((p == text) || (p[-1] == ' ')) &&
                (strchr("0123456789-.", *p) != NULL)) {
                ++n;
            }
        }
        if (n == 0) {
            break;
        }
        i = hard_rand_below(n);
        for (p = text; *p != '\0'; ++p) {
            if (((p == text) || (p[-1] == ' ')) &&
                (strchr("0123456789-.", *p) != NULL) && (i-- == 0)) {
                break;
            }
        }
        q = p + strcspn(p, " \n");
        snprintf(tmp, sizeof(tmp), "%.*s%s%s", (int)(p - text), text,
                 hard_fuzz_numbers[hard_rand_below(sizeof(hard_fuzz_numbers) /
                                                   sizeof(char *))],
                 q);
        snprintf(text, max, "%s", tmp);
        break;
    case 3: /* cut the file */
        text[hard_rand_below(len + 1)] = '\0';
        break;
    case 4: /* duplicate a part of it */
        pos = hard_rand_below(len + 1);
        snprintf(tmp, sizeof(tmp), "%s%s", text, text + pos);
        snprintf(text, max, "%s", tmp);
        break;
    case 5: /* a long line */
        pos = strlen(text);
        n   = 200 + hard_rand_below(400);
        for (i = 0; (i < n) && (pos + 2 < max); ++i) {
            text[pos++] = (i == 0) ? 'c' : '9';
        }
        text[pos++] = '\n';
        text[pos]   = '\0';
        break;
    case 6: /* remove a line */
        p = text;
        for (i = hard_rand_below(12); (i > 0) && (p != NULL); --i) {
            p = strchr(p, '\n');
            p = (p != NULL) ? p + 1 : NULL;
        }
        if ((p != NULL) && ((q = strchr(p, '\n')) != NULL)) {
            memmove(p, q + 1, strlen(q + 1) + 1);
        }
        break;
    default: /* random bytes appended */
        pos = strlen(text);
        for (n = hard_rand_below(64); (n > 0) && (pos + 1 < max); --n) {
            text[pos++] = (char)(1 + hard_rand_below(255));
        }
        text[pos] = '\0';
        break;
    }
}

/* the bounds calib_model.c states, written out again: the fuzzer checks
 * the reader against them, not against its own checker */
#define HARD_IN(_v, _lo, _hi) (((_v) >= (_lo)) && ((_v) <= (_hi)))
#define HARD_TIME(_v)         HARD_IN(_v, 0.0, 1.0)
#define HARD_PER_BYTE(_v)     HARD_IN(_v, 0.0, 1e-6)
#define HARD_BW(_v)           HARD_IN(_v, 1e6, 1e13)

static int hard_linear_ok(ucs_linear_func_t f)
{
    return HARD_TIME(f.c) && HARD_PER_BYTE(f.m);
}

/* an accepted model: every value within its bounds, and what is derived
 * from it finite and not negative; else what is wrong */
static const char *hard_fuzz_check_model(ucs_calib_model_t *m)
{
    static const size_t sizes[] = {1,         4096,           65536,
                                   UCS_MBYTE, 64 * UCS_MBYTE, UCS_GBYTE};
    const ucs_calib_engine_t *e;
    ucs_calib_derived_t d;
    unsigned i, ok;
    double t[3];

    ok = hard_linear_ok(m->reg[0]) && hard_linear_ok(m->reg[1]) &&
         hard_linear_ok(m->dereg) && hard_linear_ok(m->copy_fault) &&
         hard_linear_ok(m->xfer_fault) && HARD_TIME(m->net_latency) &&
         HARD_TIME(m->net_gap) && HARD_TIME(m->net_frag_gap) &&
         HARD_BW(m->net_bw) && HARD_IN(m->measure_time, 0.0, 3600.0) &&
         (m->num_copy >= 1) && (m->num_copy <= UCS_CALIB_MAX_COPY_POINTS);
    for (i = 0; ok && (i < m->num_copy); ++i) {
        ok = HARD_IN(m->copy[i].size, 1, UCS_TBYTE) && HARD_BW(m->copy[i].bw) &&
             ((i == 0) || (m->copy[i].size > m->copy[i - 1].size));
    }
    for (i = 0; ok && (i < UCS_COPY_BACKEND_LAST); ++i) {
        e  = &m->engine[i];
        ok = (e->bw == 0) ||
             (HARD_TIME(e->start) && HARD_TIME(e->post) && HARD_BW(e->bw) &&
              HARD_IN(e->overlap, 0.0, 1.0) && HARD_PER_BYTE(e->cpu));
    }
    if (!ok) {
        return "a value out of bounds";
    }

    ucs_calib_derive(m, &d);
    if (!isfinite(d.sp_q) || (d.sp_q < 1) || (d.sp_c0 == 0) ||
        (d.sp_sub == 0)) {
        return "a derived superpipeline out of bounds";
    }
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        t[0] = ucs_calib_sp_time(m, &d, sizes[i]);
        t[1] = ucs_calib_reg_time(m, sizes[i], UCS_CALIB_PAGES_NONRESIDENT);
        t[2] = ucs_calib_copy_time(m, sizes[i], UCS_CALIB_PAGES_NONRESIDENT);
        if (!isfinite(t[0]) || (t[0] < 0) || !isfinite(t[1]) || (t[1] < 0) ||
            !isfinite(t[2]) || (t[2] < 0)) {
            return "a derived time negative or not finite";
        }
    }
    return NULL;
}

/*
 * A few thousand model files, each the valid model with one to three
 * mutations (a byte, a number, a cut, a repeat, a long line, a missing line,
 * garbage), fed to the reader. None may crash or hang it; every model it
 * accepts must be within bounds; and every case that put a value out of
 * bounds into a line the reader keeps must be refused.
 */
TH_TEST_TIMEOUT(calib_hardening, model_file_fuzzer, 120)
{
    unsigned accepted = 0, refused = 0, bad_refused = 0, errors, c, m;
    char base[2048], text[4096], path[64], bad[4096], *log;
    const char *problem = NULL;
    hard_capture_t cap;
    ucs_calib_model_t model;
    ucs_status_t status;
    double start = th_time();
    int fd;

    /* thousands of expected errors, each one line */
    hard_capture_start(&cap);
    hard_rand_state = HARD_FUZZ_SEED;
    hard_model_text(base, sizeof(base), NULL, NULL);
    snprintf(path, sizeof(path), "/tmp/th-hard-fuzz-XXXXXX");
    fd = mkstemp(path);
    TH_ASSERT(fd >= 0);
    close(fd);

    for (c = 0; c < HARD_FUZZ_CASES; ++c) {
        snprintf(text, sizeof(text), "%s", base);
        for (m = 1 + hard_rand_below(3); m > 0; --m) {
            hard_fuzz_mutate(text, sizeof(text));
        }

        hard_write_file(path, text, strlen(text));
        status = ucs_calib_model_read(path, &model);
        if (status == UCS_OK) {
            ++accepted;
            problem = hard_fuzz_check_model(&model);
        } else if (status == UCS_ERR_INVALID_PARAM) {
            ++refused;
        } else {
            problem = "a status other than UCS_ERR_INVALID_PARAM";
        }
        if (problem != NULL) {
            /* reported below, where the output is not captured */
            snprintf(bad, sizeof(bad), "%s", text);
            break;
        }

        /* the known-bad lines, one per case, each must be refused */
        hard_model_text(text, sizeof(text),
                        hard_bad_lines[c % HARD_NUM_BAD].key,
                        hard_bad_lines[c % HARD_NUM_BAD].line);
        hard_write_file(path, text, strlen(text));
        if (ucs_calib_model_read(path, &model) == UCS_ERR_INVALID_PARAM) {
            ++bad_refused;
        }
    }
    unlink(path);
    log    = hard_capture_stop(&cap);
    errors = hard_count(log, "calibration model");
    free(log);
    if (problem != NULL) {
        TH_FAIL("case %u: %s, from:\n%s", c, problem, bad);
    }

    th_log("fuzzer: seed 0x%llx, %u mutated files: %u accepted (all within "
           "bounds), %u refused; %u of %u known-bad files refused; %u error "
           "lines; %.1f s",
           (unsigned long long)HARD_FUZZ_SEED, HARD_FUZZ_CASES, accepted,
           refused, bad_refused, HARD_FUZZ_CASES, errors, th_time() - start);
    TH_ASSERT_EQ(bad_refused, HARD_FUZZ_CASES);
    /* one error per refused file */
    TH_ASSERT_EQ(errors, refused + bad_refused);
    TH_ASSERT_GT(accepted, 0);
    TH_ASSERT_GT(refused, 0);
    TH_ASSERT_DBL(th_time() - start, <, 60.0);
}
