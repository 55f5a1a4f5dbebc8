/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "calib.h"

#include <ucs/algorithm/crc.h>
#include <ucs/config/field_types.h>
#include <ucs/datastruct/list.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Where a model comes from: this process' earlier result, a file the user
 * supplies, the per-host cache, or a measurement (which then fills the
 * cache). Concurrent processes on one host serialize on a lock file, so
 * the first one measures on a quiet host and the others read its result.
 *
 * A model read from the cache decides how this process sends its data, so
 * only this user may have written it: the cache directory must belong to
 * the user with mode 0700 (else the process measures and keeps nothing),
 * and its files must be regular files of the user, opened without following
 * links and without blocking.
 */

/* bump when the measurement or the file format changes meaning (4: values
 * are range-checked, a measured overlap is clamped to 0..1; 5: net_cpu, and
 * the key names the CPUs the process may run on; 6: net and stage
 * lines, zero-copy and a staged sender by working set; 7: the fill of
 * untouched receive buffers; 8: the copy into pages the kernel faulted in,
 * fill_copy; 9: net_frag_gap) */
#define UCS_CALIB_FORMAT_VERSION 9

/* modes of the cache directory: the user's alone */
#define UCS_CALIB_DIR_MODE 0700


typedef enum {
    UCS_CALIB_MODE_AUTO,
    UCS_CALIB_MODE_FORCE,
    UCS_CALIB_MODE_OFF,
    UCS_CALIB_MODE_LAST
} ucs_calib_mode_t;

static const char *ucs_calib_mode_names[] = {
    [UCS_CALIB_MODE_AUTO]  = "auto",
    [UCS_CALIB_MODE_FORCE] = "force",
    [UCS_CALIB_MODE_OFF]   = "off",
    [UCS_CALIB_MODE_LAST]  = NULL
};

typedef struct {
    ucs_calib_mode_t mode;
    char             *dir;
    char             *file;
} ucs_calib_config_t;

static ucs_config_field_t ucs_calib_config_table[] = {
        /* the names of ucx-hcr 0.x, until the next release */
        UCS_CONFIG_RENAMED_FIELD("HCR_CALIB_MODE", "CALIB_MODE", "auto",
                                 ucs_offsetof(ucs_calib_config_t, mode),
                                 UCS_CONFIG_TYPE_ENUM(ucs_calib_mode_names)),

        UCS_CONFIG_RENAMED_FIELD("HCR_CALIB_DIR", "CALIB_DIR", "auto",
                                 ucs_offsetof(ucs_calib_config_t, dir),
                                 UCS_CONFIG_TYPE_STRING),

        UCS_CONFIG_RENAMED_FIELD("HCR_CALIB_FILE", "CALIB_FILE", "",
                                 ucs_offsetof(ucs_calib_config_t, file),
                                 UCS_CONFIG_TYPE_STRING),

        {"CALIB_MODE", "auto",
         "How the measured cost model of a device (registration, memcpy by\n"
         "working set, network latency, bandwidth and gap) is obtained:\n"
         " auto  - read it from the per-host cache, measure it when missing.\n"
         " force - measure it again and rewrite the cache.\n"
         " off   - do not measure: keep UCX's constant cost estimates.",
         ucs_offsetof(ucs_calib_config_t, mode),
         UCS_CONFIG_TYPE_ENUM(ucs_calib_mode_names)},

        {"CALIB_DIR", "auto",
         "Directory of the calibration cache. auto: "
         "$XDG_CACHE_HOME/ucx-calib,\n"
         "else $HOME/.cache/ucx-calib, else /tmp/ucx-calib-<uid>. A cached "
         "model\n"
         "is specific to the host, the device and the settings that change "
         "its\n"
         "costs.",
         ucs_offsetof(ucs_calib_config_t, dir), UCS_CONFIG_TYPE_STRING},

        {"CALIB_FILE", "",
         "A cost model written by hand (the format of the cache files, see\n"
         "ucx_hcr_calib -m), used for every device instead of measuring.",
         ucs_offsetof(ucs_calib_config_t, file), UCS_CONFIG_TYPE_STRING},

        {NULL}};

UCS_CONFIG_REGISTER_TABLE(ucs_calib_config_table, "Cost calibration", "",
                          ucs_calib_config_t, &ucs_config_global_list)


/* models this process obtained, by device */
typedef struct {
    ucs_list_link_t   list;
    char               dev_name[UCS_CALIB_DEV_NAME_MAX];
    ucs_calib_model_t  model;
    ucs_calib_source_t source; /* where ucs_calib_get() first got it */
} ucs_calib_entry_t;

/* the last UCX_CALIB_FILE refused, so that it is reported once */
static char ucs_calib_bad_file[PATH_MAX];

static pthread_mutex_t ucs_calib_lock = PTHREAD_MUTEX_INITIALIZER;
static UCS_LIST_HEAD(ucs_calib_models);


static ucs_calib_entry_t *ucs_calib_entry_find(const char *dev_name)
{
    ucs_calib_entry_t *entry;

    ucs_list_for_each(entry, &ucs_calib_models, list) {
        if (!strcmp(entry->dev_name, dev_name)) {
            return entry;
        }
    }
    return NULL;
}

static void ucs_calib_entry_set(const char *dev_name,
                                const ucs_calib_model_t *model,
                                ucs_calib_source_t source)
{
    ucs_calib_entry_t *entry = ucs_calib_entry_find(dev_name);

    if (entry == NULL) {
        entry = ucs_malloc(sizeof(*entry), "calib_entry");
        if (entry == NULL) {
            /* only the reuse within this process is lost */
            return;
        }
        ucs_strncpy_zero(entry->dev_name, dev_name, sizeof(entry->dev_name));
        ucs_list_add_tail(&ucs_calib_models, &entry->list);
    }
    entry->model  = *model;
    entry->source = source;
}

/* mkdir -p of the parents, private to the user */
static void ucs_calib_mkdir_parents(const char *dir)
{
    char path[PATH_MAX], *p;

    ucs_strncpy_zero(path, dir, sizeof(path));
    for (p = path + 1; *p != '\0'; ++p) {
        if (*p == '/') {
            *p = '\0';
            /* an existing parent is checked by what it holds, the cache
             * directory itself */
            (void)mkdir(path, UCS_CALIB_DIR_MODE);
            *p = '/';
        }
    }
}

/*
 * Create the cache directory (mode 0700) or find it, and check, without
 * following a link, that it is a directory of this user that nobody else
 * may enter. A directory someone else made (another user can create
 * /tmp/ucx-calib-<uid> first, or plant a link there) or left open must not
 * supply models, nor receive them.
 */
static ucs_status_t ucs_calib_dir_check(const char *dir)
{
    struct stat st;

    if ((mkdir(dir, UCS_CALIB_DIR_MODE) != 0) && (errno != EEXIST)) {
        ucs_debug("calib: cannot create %s: %m: models are not kept", dir);
        return UCS_ERR_IO_ERROR;
    }

    if (lstat(dir, &st) != 0) {
        ucs_debug("calib: cannot stat %s: %m: models are not kept", dir);
        return UCS_ERR_IO_ERROR;
    }

    if (!S_ISDIR(st.st_mode) || (st.st_uid != geteuid()) ||
        ((st.st_mode & 0777) != UCS_CALIB_DIR_MODE)) {
        ucs_warn("calibration cache %s is %s (owner uid %u, mode %04o), not a "
                 "directory of uid %u with mode %04o: measuring without a "
                 "cache",
                 dir,
                 S_ISLNK(st.st_mode) ? "a symbolic link" :
                 S_ISDIR(st.st_mode) ? "a directory" :
                                       "not a directory",
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                 (unsigned)geteuid(), UCS_CALIB_DIR_MODE);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

static ucs_status_t ucs_calib_cache_dir(const ucs_calib_config_t *config,
                                        char *dir, size_t max)
{
    const char *base;

    if (strcmp(config->dir, "auto")) {
        ucs_strncpy_zero(dir, config->dir, max);
    } else if ((base = getenv("XDG_CACHE_HOME")) != NULL) {
        ucs_snprintf_safe(dir, max, "%s/ucx-calib", base);
    } else if ((base = getenv("HOME")) != NULL) {
        ucs_snprintf_safe(dir, max, "%s/.cache/ucx-calib", base);
    } else {
        /* a shared directory: only one this user made (checked below) */
        ucs_snprintf_safe(dir, max, "/tmp/ucx-calib-%u", (unsigned)geteuid());
    }

    /* the parent (~/.cache) may not exist yet either */
    ucs_calib_mkdir_parents(dir);
    return ucs_calib_dir_check(dir);
}

/*
 * Open a file of the cache: never through a link, never blocking (a FIFO
 * planted in its place is refused, not waited on), and only a regular file
 * of this user. Returns the fd, or -1 (errno ENOENT: the file is missing).
 */
static int ucs_calib_cache_open(const char *path, int flags)
{
    struct stat st;
    int fd;

    fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
              0600);
    if (fd < 0) {
        if (errno != ENOENT) {
            ucs_debug("calib: cannot open %s: %m", path);
        }
        return -1;
    }

    if ((fstat(fd, &st) != 0) || !S_ISREG(st.st_mode) ||
        (st.st_uid != geteuid())) {
        ucs_debug("calib: %s is not a regular file of uid %u: not used", path,
                  (unsigned)geteuid());
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* the cached model, UCS_ERR_NO_ELEM when there is none */
static ucs_status_t
ucs_calib_cache_read(const char *path, ucs_calib_model_t *model)
{
    ucs_status_t status;
    int fd;

    fd = ucs_calib_cache_open(path, O_RDONLY);
    if (fd < 0) {
        return UCS_ERR_NO_ELEM;
    }

    status = ucs_calib_model_read_fd(fd, path, model);
    close(fd);
    return status;
}

/* CPUs this process may run on (its affinity), at least 1 */
static int ucs_calib_num_cpus(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return 1;
    }
    return ucs_max(CPU_COUNT(&set), 1);
}

/* <dir>/<host>-<dev>-<crc of the full key>.model */
static void ucs_calib_cache_path(const char *dir, const char *dev_name,
                                 const char *dev_key, char *path, size_t max)
{
    char key[UCS_CALIB_KEY_MAX * 3], engine_key[UCS_CALIB_KEY_MAX];

    /* the copy engine's settings change what its backends measure, and the
     * number of CPUs the process may run on what overlaps what: a process
     * bound to one core shares it with its helper threads (the copy
     * engine's, an emulated NIC's), one that may use more does not */
    ucs_copy_engine_config_str(engine_key, sizeof(engine_key));
    ucs_snprintf_safe(key, sizeof(key), "v%d|%s|%s|%s|%s|cpus=%d",
                      UCS_CALIB_FORMAT_VERSION, ucs_get_host_name(), dev_name,
                      dev_key, engine_key, ucs_calib_num_cpus());
    ucs_snprintf_safe(path, max, "%s/%s-%s-%08x.model", dir,
                      ucs_get_host_name(), dev_name,
                      ucs_crc32(0, key, strlen(key)));
}

static ucs_status_t ucs_calib_measure(const char *dev_name,
                                      ucs_calib_measure_func_t measure,
                                      void *arg, ucs_calib_model_t *model)
{
    ucs_time_t start = ucs_get_time();
    ucs_status_t status;
    char err[128];

    memset(model, 0, sizeof(*model));
    status = ucs_calib_measure_memcpy(model);
    if (status != UCS_OK) {
        return status;
    }

    status = ucs_calib_measure_fill(model);
    if (status != UCS_OK) {
        return status;
    }

    status = ucs_calib_measure_copy_engines(model);
    if (status != UCS_OK) {
        return status;
    }

    status = measure(arg, model);
    if (status != UCS_OK) {
        return status;
    }

    model->measure_time = ucs_time_to_sec(ucs_get_time() - start);

    /* timings scatter: a value out of bounds is clamped, a NaN refused */
    status = ucs_calib_model_check(model, 1, err, sizeof(err));
    if (status != UCS_OK) {
        ucs_diag("calib: measurement of %s refused: %s", dev_name, err);
        return status;
    }

    ucs_debug("calib: measured %s in %.3f s", dev_name, model->measure_time);
    return UCS_OK;
}

/* with the lock file held: the cache, or a new measurement */
static ucs_status_t ucs_calib_get_cached(const ucs_calib_config_t *config,
                                         const char *dev_name,
                                         const char *dev_key,
                                         ucs_calib_measure_func_t measure,
                                         void *arg, ucs_calib_model_t *model,
                                         ucs_calib_source_t *source_p)
{
    char dir[PATH_MAX], path[PATH_MAX], lock_path[PATH_MAX];
    ucs_status_t status;
    int lock_fd = -1;

    status = ucs_calib_cache_dir(config, dir, sizeof(dir));
    if (status == UCS_OK) {
        ucs_calib_cache_path(dir, dev_name, dev_key, path, sizeof(path));
        ucs_snprintf_safe(lock_path, sizeof(lock_path), "%s.lock", path);
        lock_fd = ucs_calib_cache_open(lock_path, O_RDWR | O_CREAT);
        if ((lock_fd >= 0) && (flock(lock_fd, LOCK_EX) != 0)) {
            close(lock_fd);
            lock_fd = -1;
        }
    }

    if ((lock_fd >= 0) && (config->mode != UCS_CALIB_MODE_FORCE) &&
        (ucs_calib_cache_read(path, model) == UCS_OK)) {
        *source_p = UCS_CALIB_SOURCE_CACHE;
        ucs_debug("calib: %s from %s", dev_name, path);
        goto out;
    }

    status = ucs_calib_measure(dev_name, measure, arg, model);
    if (status != UCS_OK) {
        goto out;
    }

    *source_p = UCS_CALIB_SOURCE_MEASURED;
    if (lock_fd >= 0) {
        ucs_calib_model_write(model, path);
    }

out:
    if (lock_fd >= 0) {
        close(lock_fd); /* releases the lock */
    }
    return status;
}

ucs_status_t ucs_calib_get(const char *dev_name, const char *dev_key,
                           ucs_calib_measure_func_t measure, void *arg,
                           ucs_calib_model_t *model,
                           ucs_calib_source_t *source_p)
{
    ucs_calib_source_t source = UCS_CALIB_SOURCE_PROCESS;
    ucs_calib_config_t config;
    ucs_calib_entry_t *entry;
    ucs_status_t status;

    status = ucs_config_parser_fill_opts(&config, ucs_calib_config_table,
                                         UCS_DEFAULT_ENV_PREFIX, "", 0);
    if (status != UCS_OK) {
        return status;
    }

    if (config.mode == UCS_CALIB_MODE_OFF) {
        status = UCS_ERR_UNSUPPORTED;
        goto out;
    }

    pthread_mutex_lock(&ucs_calib_lock);
    entry = ucs_calib_entry_find(dev_name);
    /* force measures once per process, not at every md open */
    if ((entry != NULL) && ((config.mode != UCS_CALIB_MODE_FORCE) ||
                            (entry->source == UCS_CALIB_SOURCE_MEASURED))) {
        *model = entry->model;
    } else if (strlen(config.file) > 0) {
        source = UCS_CALIB_SOURCE_FILE;
        if (!strcmp(config.file, ucs_calib_bad_file)) {
            /* refused before, and said so: every md open asks again */
            status = UCS_ERR_INVALID_PARAM;
        } else {
            status = ucs_calib_model_read(config.file, model);
            if (status == UCS_ERR_NO_ELEM) {
                ucs_error("cannot open calibration model "
                          "UCX_CALIB_FILE=%s: %m",
                          config.file);
            }
            if (status != UCS_OK) {
                ucs_strncpy_zero(ucs_calib_bad_file, config.file,
                                 sizeof(ucs_calib_bad_file));
            }
        }
    } else {
        status = ucs_calib_get_cached(&config, dev_name, dev_key, measure,
                                      arg, model, &source);
    }

    if ((status == UCS_OK) && (source != UCS_CALIB_SOURCE_PROCESS)) {
        ucs_calib_entry_set(dev_name, model, source);
    }
    pthread_mutex_unlock(&ucs_calib_lock);

    if ((status == UCS_OK) && (source_p != NULL)) {
        *source_p = source;
    }

out:
    ucs_config_parser_release_opts(&config, ucs_calib_config_table);
    return status;
}

ucs_status_t ucs_calib_find(const char *dev_name, ucs_calib_model_t *model,
                            ucs_calib_source_t *source_p)
{
    ucs_calib_entry_t *entry;
    ucs_status_t status;

    pthread_mutex_lock(&ucs_calib_lock);
    entry = ucs_calib_entry_find(dev_name);
    if (entry != NULL) {
        *model = entry->model;
        status = UCS_OK;
        if (source_p != NULL) {
            *source_p = entry->source;
        }
    } else {
        status = UCS_ERR_NO_ELEM;
    }
    pthread_mutex_unlock(&ucs_calib_lock);
    return status;
}

UCS_STATIC_CLEANUP {
    ucs_calib_entry_t *entry, *tmp;

    ucs_list_for_each_safe(entry, tmp, &ucs_calib_models, list) {
        ucs_list_del(&entry->list);
        ucs_free(entry);
    }
}
