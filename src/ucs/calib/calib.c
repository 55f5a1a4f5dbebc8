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
#include <ucs/config/parser.h>
#include <ucs/datastruct/list.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Where a model comes from: this process' earlier result, a file the user
 * supplies, the per-host cache, or a measurement (which then fills the
 * cache). Concurrent processes on one host serialize on a lock file, so
 * the first one measures on a quiet host and the others read its result.
 */

/* bump when the measurement or the file format changes meaning */
#define UCS_CALIB_FORMAT_VERSION 3


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
    {"MODE", "auto",
     "How ucx-hcr obtains the measured cost model (registration, memcpy by\n"
     "working set, network latency, bandwidth and gap) of a device:\n"
     " auto  - read it from the per-host cache, measure it when missing.\n"
     " force - measure it again and rewrite the cache.\n"
     " off   - do not measure: keep UCX's constant cost estimates.",
     ucs_offsetof(ucs_calib_config_t, mode),
     UCS_CONFIG_TYPE_ENUM(ucs_calib_mode_names)},

    {"DIR", "auto",
     "Directory of the calibration cache. auto: $XDG_CACHE_HOME/ucx-hcr,\n"
     "else $HOME/.cache/ucx-hcr, else /tmp/ucx-hcr-<uid>. A cached model is\n"
     "specific to the host, the device and the settings that change its\n"
     "costs.",
     ucs_offsetof(ucs_calib_config_t, dir), UCS_CONFIG_TYPE_STRING},

    {"FILE", "",
     "A cost model written by hand (the format of the cache files, see\n"
     "ucx_hcr_calib -m), used for every device instead of measuring.",
     ucs_offsetof(ucs_calib_config_t, file), UCS_CONFIG_TYPE_STRING},

    {NULL}
};

UCS_CONFIG_REGISTER_TABLE(ucs_calib_config_table, "Cost calibration",
                          "HCR_CALIB_", ucs_calib_config_t,
                          &ucs_config_global_list)


/* models this process obtained, by device */
typedef struct {
    ucs_list_link_t   list;
    char               dev_name[UCS_CALIB_DEV_NAME_MAX];
    ucs_calib_model_t  model;
    ucs_calib_source_t source; /* where ucs_calib_get() first got it */
} ucs_calib_entry_t;

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

/* mkdir -p, private to the user */
static ucs_status_t ucs_calib_mkdir(const char *dir)
{
    char path[PATH_MAX], *p;

    ucs_strncpy_zero(path, dir, sizeof(path));
    for (p = path + 1; *p != '\0'; ++p) {
        if (*p == '/') {
            *p = '\0';
            if ((mkdir(path, 0700) != 0) && (errno != EEXIST)) {
                return UCS_ERR_IO_ERROR;
            }
            *p = '/';
        }
    }

    if ((mkdir(path, 0700) != 0) && (errno != EEXIST)) {
        return UCS_ERR_IO_ERROR;
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
        ucs_snprintf_safe(dir, max, "%s/ucx-hcr", base);
    } else if ((base = getenv("HOME")) != NULL) {
        ucs_snprintf_safe(dir, max, "%s/.cache/ucx-hcr", base);
    } else {
        ucs_snprintf_safe(dir, max, "/tmp/ucx-hcr-%d", (int)getuid());
    }

    /* the parent (~/.cache) may not exist yet either */
    return ucs_calib_mkdir(dir);
}

/* <dir>/<host>-<dev>-<crc of the full key>.model */
static void ucs_calib_cache_path(const char *dir, const char *dev_name,
                                 const char *dev_key, char *path, size_t max)
{
    char key[UCS_CALIB_KEY_MAX * 3], engine_key[UCS_CALIB_KEY_MAX];

    /* the copy engine's settings change what its backends measure */
    ucs_copy_engine_config_str(engine_key, sizeof(engine_key));
    ucs_snprintf_safe(key, sizeof(key), "v%d|%s|%s|%s|%s",
                      UCS_CALIB_FORMAT_VERSION, ucs_get_host_name(), dev_name,
                      dev_key, engine_key);
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

    memset(model, 0, sizeof(*model));
    status = ucs_calib_measure_memcpy(model);
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
        lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if ((lock_fd >= 0) && (flock(lock_fd, LOCK_EX) != 0)) {
            close(lock_fd);
            lock_fd = -1;
        }
    } else {
        ucs_debug("calib: no cache directory %s: models are not kept", dir);
    }

    if ((lock_fd >= 0) && (config->mode != UCS_CALIB_MODE_FORCE) &&
        (ucs_calib_model_read(path, model) == UCS_OK)) {
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
                                         UCS_DEFAULT_ENV_PREFIX, "HCR_CALIB_",
                                         0);
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
        status = ucs_calib_model_read(config.file, model);
        if (status == UCS_ERR_NO_ELEM) {
            ucs_error("cannot open calibration model UCX_HCR_CALIB_FILE=%s: "
                      "%m", config.file);
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
