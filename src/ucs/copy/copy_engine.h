/**
 * Copyright (C) ucx-hcr contributors. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCS_COPY_ENGINE_H_
#define UCS_COPY_ENGINE_H_

#include <ucs/type/status.h>
#include <ucs/sys/compiler_def.h>

#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

/**
 * @file copy_engine.h
 *
 * Asynchronous memory copy for host memory: the caller posts a copy, does
 * other work (posts network operations, computes, polls), then tests or waits
 * for the completion. This is the idea of the I/OAT copy-offload study,
 * applied to the copy stages of UCX's protocols: the sender can post the next
 * RDMA and the receiver keep polling while chunks move.
 *
 * Backends, chosen at run time (UCX_COPY_ENGINE):
 *  - memcpy: synchronous copy by the posting thread (always available; every
 *            post completes immediately).
 *  - thread: helper threads, placed on cores other than the creating
 *            thread's where the affinity mask has some, and moved off a
 *            core the posting thread migrates to.
 *
 * An engine is used by one thread at a time unless it was created with
 * UCS_COPY_ENGINE_FLAG_MT.
 */


/**
 * Copy engine backends.
 */
typedef enum {
    UCS_COPY_BACKEND_MEMCPY, /**< Synchronous memcpy by the caller */
    UCS_COPY_BACKEND_THREAD, /**< Helper threads */
    UCS_COPY_BACKEND_LAST,
    UCS_COPY_BACKEND_AUTO = UCS_COPY_BACKEND_LAST /**< From configuration */
} ucs_copy_backend_t;


/**
 * Copy engine creation flags.
 */
enum {
    UCS_COPY_ENGINE_FLAG_MT = UCS_BIT(0) /**< Posts from several threads */
};


/**
 * One copy of a batch.
 */
typedef struct ucs_copy_iov {
    void       *dst;
    const void *src;
    size_t     length;
} ucs_copy_iov_t;


/**
 * Completion handle of a posted copy or batch, owned by the caller. It must
 * stay valid until the copy completes. The engine sets @a status to the
 * result last, with release ordering: once ucs_copy_req_test() returns a value
 * other than UCS_INPROGRESS, the destination holds the data.
 */
typedef struct ucs_copy_req {
    volatile ucs_status_t status;   /**< UCS_INPROGRESS while in flight */
    uint32_t              pending;  /**< Internal: pieces not yet done */
    ucs_status_t          result;   /**< Internal: first error of a piece */
} ucs_copy_req_t;


/**
 * Parameters of ucs_copy_engine_create().
 */
typedef struct ucs_copy_engine_params {
    /** Backend; UCS_COPY_BACKEND_AUTO takes UCX_COPY_ENGINE */
    ucs_copy_backend_t backend;
    /** UCS_COPY_ENGINE_FLAG_xx */
    unsigned           flags;
    /** Name shown in logs */
    const char         *name;
} ucs_copy_engine_params_t;


/**
 * What an engine measured or was configured with.
 */
typedef struct ucs_copy_engine_attr {
    ucs_copy_backend_t backend;       /**< Backend in use */
    unsigned           num_threads;   /**< Helper threads (0 for memcpy) */
    size_t             inline_thresh; /**< Copies up to this size are done
                                           by the caller */
    size_t             max_inflight;  /**< Posts in flight before
                                           UCS_ERR_NO_RESOURCE */
    double             cpu_time;      /**< CPU seconds the engine's own
                                           threads used so far: what its
                                           copies cost the rest of the host
                                           (0 for memcpy, whose copies the
                                           caller pays for) */
    uint64_t num_wakeups; /**< Posts that had to wake a sleeping
                                           helper (see
                                           UCX_COPY_ENGINE_SPIN_MAX) */
    uint64_t           num_busy_idles; /**< Idle periods in which a helper
                                            kept its polling window short
                                            because the host had more
                                            runnable threads than cores */
} ucs_copy_engine_attr_t;


typedef struct ucs_copy_engine ucs_copy_engine_t;


/**
 * Create a copy engine.
 *
 * @param [in]  params    Parameters, or NULL for the configured defaults.
 * @param [out] engine_p  Filled with the engine.
 *
 * @return UCS_OK, UCS_ERR_UNSUPPORTED if the backend can't run here, or
 *         another error.
 */
ucs_status_t ucs_copy_engine_create(const ucs_copy_engine_params_t *params,
                                    ucs_copy_engine_t **engine_p);


/**
 * Destroy an engine. Copies that were posted but not started complete with
 * UCS_ERR_CANCELED; copies in progress are waited for. Every posted request
 * holds its final status when this returns.
 */
void ucs_copy_engine_destroy(ucs_copy_engine_t *engine);


/**
 * Post a copy of @a length bytes from @a src to @a dst (not overlapping).
 *
 * @return UCS_OK if the copy is already complete (req->status is UCS_OK too),
 *         UCS_INPROGRESS if it was queued (test or wait for @a req),
 *         UCS_ERR_NO_RESOURCE if the engine has too many copies in flight
 *         (nothing was done; retry after completions), or
 *         UCS_ERR_INVALID_PARAM / UCS_ERR_CANCELED (engine shutting down).
 */
ucs_status_t ucs_copy_engine_post(ucs_copy_engine_t *engine, void *dst,
                                  const void *src, size_t length,
                                  ucs_copy_req_t *req);


/**
 * Post a batch of copies completed by one request: it completes when all of
 * them are done. Return values as ucs_copy_engine_post(), and
 * UCS_ERR_EXCEEDS_LIMIT for a batch of more copies than the engine's queue.
 */
ucs_status_t ucs_copy_engine_post_iov(ucs_copy_engine_t *engine,
                                      const ucs_copy_iov_t *iov,
                                      size_t iovcnt, ucs_copy_req_t *req);


/**
 * @return The request's status: UCS_INPROGRESS while the copy runs.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucs_copy_req_test(const ucs_copy_req_t *req)
{
    /* acquire: pairs with the engine's release store of the status */
    return (ucs_status_t)__atomic_load_n(&req->status, __ATOMIC_ACQUIRE);
}


/**
 * Wait until the request completes; returns its final status.
 */
ucs_status_t ucs_copy_engine_wait(ucs_copy_engine_t *engine,
                                  ucs_copy_req_t *req);


/**
 * Query the engine's backend and limits.
 */
void ucs_copy_engine_query(ucs_copy_engine_t *engine,
                           ucs_copy_engine_attr_t *attr);


/**
 * @return The backend UCX_COPY_ENGINE names (UCS_COPY_BACKEND_AUTO for
 *         "auto").
 */
ucs_copy_backend_t ucs_copy_engine_config_backend(void);


/**
 * Write the configured settings that change how the backends perform
 * (UCX_COPY_ENGINE*) to @a buf, e.g. to tell measurements apart.
 */
void ucs_copy_engine_config_str(char *buf, size_t max);


/**
 * @return The name of a backend ("memcpy", "thread").
 */
const char *ucs_copy_backend_name(ucs_copy_backend_t backend);

END_C_DECLS

#endif
