/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "rvma.h"

#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_context.h>
#include <ucs/arch/atomic.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>


/*
 * The mailbox. A posted buffer goes through three states:
 *  - current (head of win->posted): takes puts; each accepted put reserves
 *    its units (bytes or 1 op) against the threshold before it is placed;
 *  - retired: reserved == threshold, or inc_epoch; takes no more puts and
 *    waits for the accepted ones still being placed (rendezvous fetches);
 *  - completed: retired with nothing in flight; the length word and then the
 *    completion pointer are written, once.
 * Reserving at arrival and counting placement separately is what makes the
 * threshold exact whatever the order in which fetches finish: a put that
 * would take reserved past the threshold is refused instead of spilling into
 * a buffer the application may already read.
 */

#define UCP_RVMA_DEFAULT_RETAIN 4


static ucp_rvma_buf_t *ucp_rvma_win_current(ucp_rvma_win_h win)
{
    if (ucs_queue_is_empty(&win->posted)) {
        return NULL;
    }

    return ucs_queue_head_elem_non_empty(&win->posted, ucp_rvma_buf_t, queue);
}

static void ucp_rvma_win_complete(ucp_rvma_win_h win, ucp_rvma_buf_t *buf)
{
    ucp_rvma_retained_t *slot;

    ucs_trace("rvma win 0x%" PRIx64 ": epoch %" PRIu64 " buffer %p complete, "
              "%" PRIu64 " bytes", win->vaddr, buf->epoch, buf->buffer,
              buf->placed);

    if (buf->length_ptr != NULL) {
        *buf->length_ptr = buf->placed;
    }
    /* the data and the length are visible before the pointer */
    ucs_memory_cpu_store_fence();
    *(void* volatile*)buf->comp_ptr = buf->buffer;

    if (win->retain > 0) {
        slot         = &win->retained[win->retained_count % win->retain];
        slot->epoch  = buf->epoch;
        slot->buffer = buf->buffer;
        slot->length = buf->placed;
        ++win->retained_count;
    }

    ucs_queue_push(&win->completed, &buf->queue);
}

/* Stop the current buffer taking puts; complete it if nothing is in flight */
static void ucp_rvma_win_retire(ucp_rvma_win_h win, ucp_rvma_buf_t *buf)
{
    ucs_assert(buf == ucp_rvma_win_current(win));

    ucs_queue_pull_non_empty(&win->posted);
    buf->retired = 1;
    ++win->epoch;

    /* the next buffer, if any, belongs to the new epoch */
    if (!ucs_queue_is_empty(&win->posted)) {
        ucp_rvma_win_current(win)->epoch = win->epoch;
    }

    if (buf->inflight == 0) {
        ucp_rvma_win_complete(win, buf);
    }
}

ucs_status_t ucp_rvma_win_accept(ucp_rvma_win_h win, uint64_t offset,
                                 size_t length, ucp_rvma_buf_t **buf_p)
{
    ucp_rvma_buf_t *buf;
    uint64_t units;

    if (win->closed) {
        return UCS_ERR_CANCELED;
    }

    buf = ucp_rvma_win_current(win);
    if (buf == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }

    if ((offset > buf->size) || (length > (buf->size - offset))) {
        return UCS_ERR_MESSAGE_TRUNCATED;
    }

    units = (win->type == UCP_RVMA_THRESHOLD_BYTES) ? length : 1;
    if (units > (win->threshold - buf->reserved)) {
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    buf->reserved += units;
    ++buf->inflight;
    *buf_p = buf;

    if (buf->reserved == win->threshold) {
        /* this put is in flight: the buffer completes in
         * ucp_rvma_win_placed() when the data is there */
        ucp_rvma_win_retire(win, buf);
    }

    return UCS_OK;
}

void ucp_rvma_win_placed(ucp_rvma_win_h win, ucp_rvma_buf_t *buf,
                         size_t length, ucs_status_t status)
{
    ucs_assert(buf->inflight > 0);

    --buf->inflight;
    if (status == UCS_OK) {
        buf->placed += length;
    } else {
        /* the initiator failed during a fetch: the buffer keeps what was
         * placed; if it is still current, the units can be put again */
        if (!buf->retired) {
            buf->reserved -= (win->type == UCP_RVMA_THRESHOLD_BYTES) ?
                             length : 1;
        }
        ucs_debug("rvma win 0x%" PRIx64 ": put of %zu bytes to epoch %" PRIu64
                  " failed: %s", win->vaddr, length, buf->epoch,
                  ucs_status_string(status));
    }

    if (buf->retired && (buf->inflight == 0)) {
        ucp_rvma_win_complete(win, buf);
    }
}

ucs_status_t ucp_rvma_win_create(ucp_worker_h worker,
                                 const ucp_rvma_win_params_t *params,
                                 ucp_rvma_win_h *win_p)
{
    ucp_rvma_worker_t *rw;
    ucp_rvma_win_h win, old;
    ucs_status_t status;

    if (!(params->field_mask & UCP_RVMA_WIN_PARAM_FIELD_VADDR) ||
        !(params->field_mask & UCP_RVMA_WIN_PARAM_FIELD_THRESHOLD) ||
        (params->threshold == 0)) {
        ucs_error("RVMA window needs a virtual address and a non-zero "
                  "threshold");
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->field_mask & UCP_RVMA_WIN_PARAM_FIELD_TYPE) &&
        (params->type != UCP_RVMA_THRESHOLD_BYTES) &&
        (params->type != UCP_RVMA_THRESHOLD_OPS)) {
        ucs_error("RVMA window 0x%" PRIx64 ": invalid threshold type %d",
                  params->vaddr, params->type);
        return UCS_ERR_INVALID_PARAM;
    }

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);

    status = ucp_rvma_worker_get(worker, &rw);
    if (status != UCS_OK) {
        goto out;
    }

    old = ucp_rvma_worker_find_win(rw, params->vaddr);
    if ((old != NULL) && !old->closed) {
        ucs_error("RVMA window 0x%" PRIx64 " already exists", params->vaddr);
        status = UCS_ERR_ALREADY_EXISTS;
        goto out;
    }

    win = ucs_calloc(1, sizeof(*win), "ucp_rvma_win");
    if (win == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto out;
    }

    win->rw        = rw;
    win->vaddr     = params->vaddr;
    win->threshold = params->threshold;
    win->type      = (params->field_mask & UCP_RVMA_WIN_PARAM_FIELD_TYPE) ?
                     params->type : UCP_RVMA_THRESHOLD_BYTES;
    win->flags     = (params->field_mask & UCP_RVMA_WIN_PARAM_FIELD_FLAGS) ?
                     params->flags : 0;
    win->retain    = (params->field_mask & UCP_RVMA_WIN_PARAM_FIELD_RETAIN) ?
                     params->retain : UCP_RVMA_DEFAULT_RETAIN;
    ucs_queue_head_init(&win->posted);
    ucs_queue_head_init(&win->completed);

    if (win->retain > 0) {
        win->retained = ucs_calloc(win->retain, sizeof(*win->retained),
                                   "ucp_rvma_retained");
        if (win->retained == NULL) {
            ucs_free(win);
            status = UCS_ERR_NO_MEMORY;
            goto out;
        }
    }

    if (old != NULL) {
        /* a closed window with this address: the new one replaces it */
        ucp_rvma_win_destroy(old);
    }

    status = ucp_rvma_worker_add_win(rw, win);
    if (status != UCS_OK) {
        ucs_free(win->retained);
        ucs_free(win);
        goto out;
    }

    ucs_debug("rvma win 0x%" PRIx64 " created on worker %p: threshold %" PRIu64
              " %s", win->vaddr, worker, win->threshold,
              (win->type == UCP_RVMA_THRESHOLD_BYTES) ? "bytes" : "ops");
    *win_p = win;

out:
    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);
    return status;
}

ucs_status_t ucp_rvma_win_post_buffer(ucp_rvma_win_h win, void *buffer,
                                      size_t size, void **comp_ptr,
                                      uint64_t *length_ptr)
{
    ucp_worker_h worker = win->rw->worker;
    ucp_rvma_buf_t *buf;
    ucs_status_t status;

    if ((buffer == NULL) || (comp_ptr == NULL) ||
        ((win->type == UCP_RVMA_THRESHOLD_BYTES) && (size < win->threshold))) {
        ucs_error("rvma win 0x%" PRIx64 ": invalid buffer %p size %zu "
                  "completion pointer %p (threshold %" PRIu64 " %s)",
                  win->vaddr, buffer, size, comp_ptr, win->threshold,
                  (win->type == UCP_RVMA_THRESHOLD_BYTES) ? "bytes" : "ops");
        return UCS_ERR_INVALID_PARAM;
    }

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);

    if (win->closed) {
        status = UCS_ERR_CANCELED;
        goto out;
    }

    buf = ucs_mpool_get(&win->rw->buf_mp);
    if (buf == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto out;
    }

    buf->buffer     = buffer;
    buf->size       = size;
    buf->comp_ptr   = comp_ptr;
    buf->length_ptr = length_ptr;
    buf->epoch      = win->epoch;
    buf->reserved   = 0;
    buf->placed     = 0;
    buf->inflight   = 0;
    buf->retired    = 0;
    *comp_ptr       = NULL;
    ucs_queue_push(&win->posted, &buf->queue);
    status = UCS_OK;

out:
    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);
    return status;
}

ucs_status_t ucp_rvma_win_inc_epoch(ucp_rvma_win_h win)
{
    ucp_worker_h worker = win->rw->worker;
    ucp_rvma_buf_t *buf;
    ucs_status_t status;

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);

    buf = ucp_rvma_win_current(win);
    if (win->closed) {
        status = UCS_ERR_CANCELED;
    } else if (buf == NULL) {
        status = UCS_ERR_NO_ELEM;
    } else {
        ucp_rvma_win_retire(win, buf);
        status = UCS_OK;
    }

    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);
    return status;
}

uint64_t ucp_rvma_win_get_epoch(ucp_rvma_win_h win)
{
    return win->epoch;
}

size_t ucp_rvma_win_get_buf_ptrs(ucp_rvma_win_h win, void **buf_ptrs,
                                 size_t max)
{
    ucp_worker_h worker = win->rw->worker;
    ucp_rvma_buf_t *buf;
    size_t count;

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);
    for (count = 0; (count < max) && !ucs_queue_is_empty(&win->completed);
         ++count) {
        buf = ucs_queue_pull_elem_non_empty(&win->completed, ucp_rvma_buf_t,
                                            queue);
        buf_ptrs[count] = buf->buffer;
        ucs_mpool_put(buf);
    }
    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);

    return count;
}

ucs_status_t ucp_rvma_win_rewind(ucp_rvma_win_h win, uint64_t epoch,
                                 void **buffer_p, uint64_t *length_p)
{
    ucp_rvma_retained_t *slot;
    uint64_t i, first;

    first = (win->retained_count > win->retain) ?
            (win->retained_count - win->retain) : 0;
    /* completions can come out of epoch order (a fetch still in flight),
     * so look at every retained slot */
    for (i = first; i < win->retained_count; ++i) {
        slot = &win->retained[i % win->retain];
        if (slot->epoch == epoch) {
            *buffer_p = slot->buffer;
            if (length_p != NULL) {
                *length_p = slot->length;
            }
            return UCS_OK;
        }
    }

    return UCS_ERR_NO_ELEM;
}

ucs_status_t ucp_rvma_win_close(ucp_rvma_win_h win)
{
    ucp_worker_h worker = win->rw->worker;
    ucp_rvma_buf_t *buf;

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);

    if (!win->closed) {
        ucs_debug("rvma win 0x%" PRIx64 " closed at epoch %" PRIu64,
                  win->vaddr, win->epoch);
        win->closed = 1;
        /* the current buffer keeps puts being fetched into it: it completes
         * when they are placed; untouched buffers go back as they are */
        buf = ucp_rvma_win_current(win);
        if ((buf != NULL) && (buf->inflight > 0)) {
            ucp_rvma_win_retire(win, buf);
        }
        while (!ucs_queue_is_empty(&win->posted)) {
            ucs_mpool_put(ucs_queue_pull_elem_non_empty(&win->posted,
                                                        ucp_rvma_buf_t,
                                                        queue));
        }
    }

    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);
    return UCS_OK;
}

void ucp_rvma_win_free(ucp_rvma_win_h win)
{
    while (!ucs_queue_is_empty(&win->posted)) {
        ucs_mpool_put(ucs_queue_pull_elem_non_empty(&win->posted,
                                                    ucp_rvma_buf_t, queue));
    }
    while (!ucs_queue_is_empty(&win->completed)) {
        ucs_mpool_put(ucs_queue_pull_elem_non_empty(&win->completed,
                                                    ucp_rvma_buf_t, queue));
    }
    ucs_free(win->retained);
    ucs_free(win);
}

void ucp_rvma_win_destroy(ucp_rvma_win_h win)
{
    ucp_worker_h worker = win->rw->worker;

    UCP_WORKER_THREAD_CS_ENTER_CONDITIONAL(worker);

    ucp_rvma_win_close(win);
    ucp_rvma_worker_remove_win(win->rw, win);
    if (win->refcount == 0) {
        ucp_rvma_win_free(win);
    } else {
        /* freed by the last fetch (rvma_target.c) */
        win->destroyed = 1;
    }

    UCP_WORKER_THREAD_CS_EXIT_CONDITIONAL(worker);
}

ucs_status_t ucp_rvma_win_wait(ucp_rvma_win_h win, void *const *comp_ptr)
{
    ucp_worker_h worker = win->rw->worker;
    int wakeup = !!(worker->context->config.features & UCP_FEATURE_WAKEUP);
    ucs_status_t status;

    while (*(void* const volatile*)comp_ptr == NULL) {
        if (ucp_worker_progress(worker) != 0) {
            continue;
        }

        if (!wakeup) {
            continue;
        }

        status = ucp_worker_arm(worker);
        if (status == UCS_ERR_BUSY) {
            continue;
        } else if (status != UCS_OK) {
            return status;
        }

        if (*(void* const volatile*)comp_ptr != NULL) {
            break;
        }

        status = ucp_worker_wait(worker);
        if (status != UCS_OK) {
            return status;
        }
    }

    return UCS_OK;
}
