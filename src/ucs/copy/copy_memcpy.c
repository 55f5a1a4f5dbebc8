/**
 * Copyright (C) ucx-hcr contributors. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "copy_engine_int.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <string.h>


/* The synchronous backend: every post completes before it returns. It is the
 * reference the other backends are measured against, and the fallback where
 * no other core is available. */

static ucs_status_t
ucs_copy_memcpy_create(const ucs_copy_engine_config_t *config,
                       const ucs_copy_engine_params_t *params,
                       ucs_copy_engine_t **engine_p)
{
    ucs_copy_engine_t *engine;

    engine = ucs_malloc(sizeof(*engine), "copy_engine_memcpy");
    if (engine == NULL) {
        ucs_error("failed to allocate a memcpy copy engine");
        return UCS_ERR_NO_MEMORY;
    }

    ucs_copy_engine_base_init(engine, &ucs_copy_memcpy_ops,
                              UCS_COPY_BACKEND_MEMCPY, config, params);
    engine->inline_thresh = SIZE_MAX;
    *engine_p             = engine;
    return UCS_OK;
}

static void ucs_copy_memcpy_destroy(ucs_copy_engine_t *engine)
{
    ucs_free(engine);
}

static ucs_status_t
ucs_copy_memcpy_post(ucs_copy_engine_t *engine, const ucs_copy_iov_t *iov,
                     size_t iovcnt, size_t total, ucs_copy_req_t *req)
{
    size_t i;

    /* not reached through the front end (everything is inline), kept for a
     * caller that lowers inline_thresh */
    for (i = 0; i < iovcnt; ++i) {
        memcpy(iov[i].dst, iov[i].src, iov[i].length);
    }
    req->status = UCS_OK;
    return UCS_OK;
}

const ucs_copy_backend_ops_t ucs_copy_memcpy_ops = {
    .create   = ucs_copy_memcpy_create,
    .destroy  = ucs_copy_memcpy_destroy,
    .post     = ucs_copy_memcpy_post,
    .query    = NULL /* the caller's own time */
};
