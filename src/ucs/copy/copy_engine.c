/**
 * Copyright (C) ucx-hcr contributors. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "copy_engine_int.h"

#include <ucs/arch/cpu.h>
#include <ucs/config/field_types.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <sched.h>


static const char *ucs_copy_backend_names[] = {
    [UCS_COPY_BACKEND_MEMCPY] = "memcpy",
    [UCS_COPY_BACKEND_THREAD] = "thread",
    [UCS_COPY_BACKEND_AUTO]   = "auto",
    NULL
};

static const ucs_copy_backend_ops_t *ucs_copy_backends[] = {
    [UCS_COPY_BACKEND_MEMCPY] = &ucs_copy_memcpy_ops,
    [UCS_COPY_BACKEND_THREAD] = &ucs_copy_thread_ops
};

static ucs_config_field_t ucs_copy_engine_config_table[] = {
        /* the names of ucx-hcr 0.x, until the next release */
        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_ENGINE", "COPY_ENGINE", "auto",
                                 ucs_offsetof(ucs_copy_engine_config_t,
                                              backend),
                                 UCS_CONFIG_TYPE_ENUM(ucs_copy_backend_names)),

        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_THREADS", "COPY_ENGINE_THREADS", "1",
                                 ucs_offsetof(ucs_copy_engine_config_t,
                                              num_threads),
                                 UCS_CONFIG_TYPE_COUNT),

        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_CPUS", "COPY_ENGINE_CPUS", "auto",
                                 ucs_offsetof(ucs_copy_engine_config_t, cpus),
                                 UCS_CONFIG_TYPE_STRING),

        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_INLINE_THRESH",
                                 "COPY_ENGINE_INLINE_THRESH", "4k",
                                 ucs_offsetof(ucs_copy_engine_config_t,
                                              inline_thresh),
                                 UCS_CONFIG_TYPE_MEMUNITS_STRICT),

        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_CHUNK", "COPY_ENGINE_CHUNK", "256k",
                                 ucs_offsetof(ucs_copy_engine_config_t,
                                              chunk_size),
                                 UCS_CONFIG_TYPE_MEMUNITS_STRICT),

        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_QUEUE_LEN", "COPY_ENGINE_QUEUE_LEN",
                                 "1024",
                                 ucs_offsetof(ucs_copy_engine_config_t,
                                              queue_len),
                                 UCS_CONFIG_TYPE_COUNT),

        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_SPIN_TIME", "COPY_ENGINE_SPIN_TIME",
                                 "50us",
                                 ucs_offsetof(ucs_copy_engine_config_t,
                                              spin_time),
                                 UCS_CONFIG_TYPE_TIME_STRICT),

        UCS_CONFIG_RENAMED_FIELD("HCR_COPY_SPIN_MAX", "COPY_ENGINE_SPIN_MAX",
                                 "1ms",
                                 ucs_offsetof(ucs_copy_engine_config_t,
                                              spin_max),
                                 UCS_CONFIG_TYPE_TIME_STRICT),

        {"COPY_ENGINE", "auto",
         "Backend of the asynchronous copy engine, which copy stages of\n"
         "protocols (e.g. the staged rendezvous) post copies to:\n"
         " memcpy - synchronous copy by the posting thread.\n"
         " thread - helper threads on other cores copy while the caller goes "
         "on.\n"
         " auto   - thread when the process may run on more than one core,\n"
         "          memcpy otherwise.",
         ucs_offsetof(ucs_copy_engine_config_t, backend),
         UCS_CONFIG_TYPE_ENUM(ucs_copy_backend_names)},

        {"COPY_ENGINE_THREADS", "1",
         "Number of helper threads of the thread backend (at least 1).",
         ucs_offsetof(ucs_copy_engine_config_t, num_threads),
         UCS_CONFIG_TYPE_COUNT},

        {"COPY_ENGINE_CPUS", "auto",
         "Cores for the helper threads: 'auto' (cores of the process' "
         "affinity\n"
         "mask other than the creating thread's, if any), or a "
         "comma-separated\n"
         "list of core numbers.",
         ucs_offsetof(ucs_copy_engine_config_t, cpus), UCS_CONFIG_TYPE_STRING},

        {"COPY_ENGINE_INLINE_THRESH", "4k",
         "Copies up to this size are done by the posting thread: handing them\n"
         "to a helper costs more than the copy.",
         ucs_offsetof(ucs_copy_engine_config_t, inline_thresh),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"COPY_ENGINE_CHUNK", "256k",
         "With several helper threads, copies larger than this are split into\n"
         "pieces of this size that the threads share.",
         ucs_offsetof(ucs_copy_engine_config_t, chunk_size),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"COPY_ENGINE_QUEUE_LEN", "1024",
         "Copies (pieces) in flight per engine before a post returns\n"
         "UCS_ERR_NO_RESOURCE (at least 1; the queue holds the next power of\n"
         "two, and at least 2).",
         ucs_offsetof(ucs_copy_engine_config_t, queue_len),
         UCS_CONFIG_TYPE_COUNT},

        {"COPY_ENGINE_SPIN_TIME", "50us",
         "How long an idle helper thread polls for new copies before it "
         "sleeps.\n"
         "Polling saves the wake-up latency and costs a core meanwhile.",
         ucs_offsetof(ucs_copy_engine_config_t, spin_time),
         UCS_CONFIG_TYPE_TIME_STRICT},

        {"COPY_ENGINE_SPIN_MAX", "1ms",
         "Longest polling window of an idle helper thread. The window starts\n"
         "at COPY_ENGINE_SPIN_TIME and doubles each time a helper is woken\n"
         "less than COPY_ENGINE_SPIN_MAX after it went to sleep (copies come\n"
         "at a steady pace, and waking a thread costs tens of microseconds on\n"
         "a virtual machine); it halves after a longer sleep. Polling costs a\n"
         "core meanwhile. A value not above COPY_ENGINE_SPIN_TIME keeps the\n"
         "window fixed.",
         ucs_offsetof(ucs_copy_engine_config_t, spin_max),
         UCS_CONFIG_TYPE_TIME_STRICT},

        {NULL}};

UCS_CONFIG_REGISTER_TABLE(ucs_copy_engine_config_table, "Copy engine", "",
                          ucs_copy_engine_config_t, &ucs_config_global_list)


const char *ucs_copy_backend_name(ucs_copy_backend_t backend)
{
    return (backend <= UCS_COPY_BACKEND_AUTO) ?
           ucs_copy_backend_names[backend] : "unknown";
}

ucs_copy_backend_t ucs_copy_engine_config_backend(void)
{
    ucs_copy_engine_config_t config;
    ucs_copy_backend_t backend;

    if (ucs_config_parser_fill_opts(&config, ucs_copy_engine_config_table,
                                    UCS_DEFAULT_ENV_PREFIX, "", 0) != UCS_OK) {
        return UCS_COPY_BACKEND_AUTO;
    }

    backend = config.backend;
    ucs_config_parser_release_opts(&config, ucs_copy_engine_config_table);
    return backend;
}

void ucs_copy_engine_config_str(char *buf, size_t max)
{
    ucs_copy_engine_config_t config;

    if (ucs_config_parser_fill_opts(&config, ucs_copy_engine_config_table,
                                    UCS_DEFAULT_ENV_PREFIX, "", 0) != UCS_OK) {
        ucs_strncpy_zero(buf, "?", max);
        return;
    }

    ucs_snprintf_safe(buf, max, "threads=%u,cpus=%s,inline=%zu,chunk=%zu,"
                      "queue=%u,spin=%.0fns,spin_max=%.0fns",
                      config.num_threads, config.cpus, config.inline_thresh,
                      config.chunk_size, config.queue_len,
                      config.spin_time * 1e9, config.spin_max * 1e9);
    ucs_config_parser_release_opts(&config, ucs_copy_engine_config_table);
}

void ucs_copy_engine_base_init(ucs_copy_engine_t *engine,
                               const ucs_copy_backend_ops_t *ops,
                               ucs_copy_backend_t backend,
                               const ucs_copy_engine_config_t *config,
                               const ucs_copy_engine_params_t *params)
{
    engine->ops           = ops;
    engine->backend       = backend;
    engine->flags         = params->flags;
    engine->inline_thresh = config->inline_thresh;
    engine->max_inflight  = config->queue_len;
    engine->num_threads   = 0;
    ucs_strncpy_zero(engine->name,
                     (params->name != NULL) ? params->name : "copy",
                     sizeof(engine->name));
}

static ucs_copy_backend_t ucs_copy_engine_auto_backend(void)
{
    cpu_set_t mask;

    if ((sched_getaffinity(0, sizeof(mask), &mask) == 0) &&
        (CPU_COUNT(&mask) > 1)) {
        return UCS_COPY_BACKEND_THREAD;
    }

    return UCS_COPY_BACKEND_MEMCPY;
}

ucs_status_t ucs_copy_engine_create(const ucs_copy_engine_params_t *params,
                                    ucs_copy_engine_t **engine_p)
{
    static const ucs_copy_engine_params_t default_params = {
        .backend = UCS_COPY_BACKEND_AUTO,
        .flags   = 0,
        .name    = NULL
    };
    ucs_copy_engine_config_t config;
    ucs_copy_backend_t backend;
    ucs_status_t status;

    if (params == NULL) {
        params = &default_params;
    }

    status = ucs_config_parser_fill_opts(&config, ucs_copy_engine_config_table,
                                         UCS_DEFAULT_ENV_PREFIX, "", 0);
    if (status != UCS_OK) {
        return status;
    }

    backend = (params->backend != UCS_COPY_BACKEND_AUTO) ? params->backend :
                                                           config.backend;
    if (backend == UCS_COPY_BACKEND_AUTO) {
        backend = ucs_copy_engine_auto_backend();
    }

    if (backend >= UCS_COPY_BACKEND_LAST) {
        ucs_error("invalid copy engine backend %d", backend);
        status = UCS_ERR_INVALID_PARAM;
    } else {
        status = ucs_copy_backends[backend]->create(&config, params,
                                                    engine_p);
    }

    if (status == UCS_OK) {
        ucs_debug("copy engine '%s': backend %s, %u threads, inline up to "
                  "%zu bytes", (*engine_p)->name,
                  ucs_copy_backend_name(backend), (*engine_p)->num_threads,
                  (*engine_p)->inline_thresh);
    }

    ucs_config_parser_release_opts(&config, ucs_copy_engine_config_table);
    return status;
}

void ucs_copy_engine_destroy(ucs_copy_engine_t *engine)
{
    engine->ops->destroy(engine);
}

static ucs_status_t ucs_copy_engine_check_iov(const ucs_copy_iov_t *iov,
                                              size_t iovcnt, size_t *total_p)
{
    size_t i, total = 0;

    for (i = 0; i < iovcnt; ++i) {
        if ((iov[i].length > 0) &&
            ((iov[i].dst == NULL) || (iov[i].src == NULL))) {
            ucs_debug("copy %zu of %zu: NULL buffer with length %zu", i,
                      iovcnt, iov[i].length);
            return UCS_ERR_INVALID_PARAM;
        }
        total += iov[i].length;
    }

    *total_p = total;
    return UCS_OK;
}

ucs_status_t ucs_copy_engine_post_iov(ucs_copy_engine_t *engine,
                                      const ucs_copy_iov_t *iov,
                                      size_t iovcnt, ucs_copy_req_t *req)
{
    ucs_status_t status;
    size_t i, total;

    status = ucs_copy_engine_check_iov(iov, iovcnt, &total);
    if (status != UCS_OK) {
        return status;
    }

    if (total <= engine->inline_thresh) {
        for (i = 0; i < iovcnt; ++i) {
            memcpy(iov[i].dst, iov[i].src, iov[i].length);
        }
        req->status = UCS_OK;
        return UCS_OK;
    }

    req->result  = UCS_OK;
    req->pending = 0;
    req->status  = UCS_INPROGRESS;
    status       = engine->ops->post(engine, iov, iovcnt, total, req);
    if (UCS_STATUS_IS_ERR(status)) {
        /* nothing was queued: the request is not in flight */
        req->status = status;
    }

    return status;
}

ucs_status_t ucs_copy_engine_post(ucs_copy_engine_t *engine, void *dst,
                                  const void *src, size_t length,
                                  ucs_copy_req_t *req)
{
    ucs_copy_iov_t iov = {.dst = dst, .src = src, .length = length};

    return ucs_copy_engine_post_iov(engine, &iov, 1, req);
}

ucs_status_t ucs_copy_engine_wait(ucs_copy_engine_t *engine,
                                  ucs_copy_req_t *req)
{
    ucs_status_t status;
    unsigned spins = 0;

    while ((status = ucs_copy_req_test(req)) == UCS_INPROGRESS) {
        /* the helper may share this core: yield after a short spin */
        if (++spins > 1000) {
            sched_yield();
        } else {
            ucs_copy_spin_pause();
        }
    }

    return status;
}

void ucs_copy_engine_query(ucs_copy_engine_t *engine,
                           ucs_copy_engine_attr_t *attr)
{
    attr->backend        = engine->backend;
    attr->num_threads    = engine->num_threads;
    attr->inline_thresh  = engine->inline_thresh;
    attr->max_inflight   = engine->max_inflight;
    attr->cpu_time       = 0.0;
    attr->num_wakeups    = 0;
    attr->num_busy_idles = 0;
    if (engine->ops->query != NULL) {
        engine->ops->query(engine, attr);
    }
}
