/**
 * Copyright (C) ucx-hcr contributors. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCS_COPY_ENGINE_INT_H_
#define UCS_COPY_ENGINE_INT_H_

#include "copy_engine.h"

#include <ucs/config/types.h>


/* UCX_COPY_ENGINE* configuration, see copy_engine.c */
typedef struct ucs_copy_engine_config {
    ucs_copy_backend_t backend;
    unsigned           num_threads;
    size_t             inline_thresh;
    size_t             chunk_size;
    unsigned           queue_len;
    double             spin_time;
    double             spin_max;
    char               *cpus;
} ucs_copy_engine_config_t;


/* What a backend implements */
typedef struct ucs_copy_backend_ops {
    ucs_status_t (*create)(const ucs_copy_engine_config_t *config,
                           const ucs_copy_engine_params_t *params,
                           ucs_copy_engine_t **engine_p);
    /* cancel what has not started, wait for what runs, free */
    void         (*destroy)(ucs_copy_engine_t *engine);
    /* copies above the inline threshold; may return UCS_ERR_NO_RESOURCE */
    ucs_status_t (*post)(ucs_copy_engine_t *engine, const ucs_copy_iov_t *iov,
                         size_t iovcnt, size_t total, ucs_copy_req_t *req);
    /* what the backend's own threads cost (attr->cpu_time,
     * attr->num_wakeups); NULL when it has none */
    void         (*query)(ucs_copy_engine_t *engine,
                          ucs_copy_engine_attr_t *attr);
} ucs_copy_backend_ops_t;


/* Base of every backend's engine */
struct ucs_copy_engine {
    const ucs_copy_backend_ops_t *ops;
    ucs_copy_backend_t           backend;
    unsigned                     flags;
    size_t                       inline_thresh;
    size_t                       max_inflight;
    unsigned                     num_threads;
    char                         name[32];
};


extern const ucs_copy_backend_ops_t ucs_copy_memcpy_ops;
extern const ucs_copy_backend_ops_t ucs_copy_thread_ops;


/* Fill the base part of a new engine */
void ucs_copy_engine_base_init(ucs_copy_engine_t *engine,
                               const ucs_copy_backend_ops_t *ops,
                               ucs_copy_backend_t backend,
                               const ucs_copy_engine_config_t *config,
                               const ucs_copy_engine_params_t *params);


/* Pause in a polling loop: tells the core (and a sibling hyperthread) that
 * this is a spin, not work */
static UCS_F_ALWAYS_INLINE void ucs_copy_spin_pause(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}


/* Account for finished pieces of a request; the last one publishes the
 * request's status (release: the copied data is visible before it) */
static UCS_F_ALWAYS_INLINE void
ucs_copy_req_pieces_done(ucs_copy_req_t *req, uint32_t count,
                         ucs_status_t status)
{
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_status_t expected = UCS_OK;
        __atomic_compare_exchange_n(&req->result, &expected, status, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }

    if (__atomic_sub_fetch(&req->pending, count, __ATOMIC_ACQ_REL) == 0) {
        __atomic_store_n(&req->status,
                         __atomic_load_n(&req->result, __ATOMIC_RELAXED),
                         __ATOMIC_RELEASE);
    }
}

#endif
