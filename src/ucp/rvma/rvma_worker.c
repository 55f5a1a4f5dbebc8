/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "rvma.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_worker.inl>
#include <ucs/calib/calib.h>
#include <ucs/config/field_types.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/compiler.h>


/*
 * Per-worker RVMA state, created by the first RVMA call on a worker: the two
 * active message handlers, the table of windows and the memory pools.
 */

typedef struct ucp_rvma_config {
    unsigned am_id;
    int      fast;
    size_t   ring_size;
    size_t   fast_max;
    size_t   read_max;
    int      ring_poll;
    unsigned max_rings;
} ucp_rvma_config_t;

static ucs_config_field_t ucp_rvma_config_table[] = {
        /* the names of ucx-hcr 0.x, until the next release */
        UCS_CONFIG_RENAMED_FIELD("HCR_RVMA_AM_ID", "RVMA_AM_ID", "4000",
                                 ucs_offsetof(ucp_rvma_config_t, am_id),
                                 UCS_CONFIG_TYPE_UINT_STRICT),

        UCS_CONFIG_RENAMED_FIELD("HCR_RVMA_FAST", "RVMA_FAST", "y",
                                 ucs_offsetof(ucp_rvma_config_t, fast),
                                 UCS_CONFIG_TYPE_BOOL),

        UCS_CONFIG_RENAMED_FIELD("HCR_RVMA_RING_SIZE", "RVMA_RING_SIZE", "256k",
                                 ucs_offsetof(ucp_rvma_config_t, ring_size),
                                 UCS_CONFIG_TYPE_MEMUNITS_STRICT),

        UCS_CONFIG_RENAMED_FIELD("HCR_RVMA_FAST_MAX", "RVMA_FAST_MAX", "16k",
                                 ucs_offsetof(ucp_rvma_config_t, fast_max),
                                 UCS_CONFIG_TYPE_MEMUNITS_STRICT),

        UCS_CONFIG_RENAMED_FIELD("HCR_RVMA_READ_MAX", "RVMA_READ_MAX", "inf",
                                 ucs_offsetof(ucp_rvma_config_t, read_max),
                                 UCS_CONFIG_TYPE_MEMUNITS_STRICT),

        UCS_CONFIG_RENAMED_FIELD("HCR_RVMA_RING_POLL", "RVMA_RING_POLL", "y",
                                 ucs_offsetof(ucp_rvma_config_t, ring_poll),
                                 UCS_CONFIG_TYPE_BOOL),

        {"RVMA_AM_ID", "4000",
         "First of the five consecutive UCP active message ids that RVMA "
         "puts,\n"
         "their replies and the fast path's control messages use "
         "(ucpx_rvma.h);\n"
         "the application must not register handlers on them. Initiator and\n"
         "target must use the same value.",
         ucs_offsetof(ucp_rvma_config_t, am_id), UCS_CONFIG_TYPE_UINT_STRICT},

        {"RVMA_FAST", "y",
         "Fast path where the active message lane can put with notification\n"
         "(hcr): each initiator gets a registered ring in the target, and a "
         "put\n"
         "of up to RVMA_FAST_MAX bytes is one write-with-immediate into it,\n"
         "copied into the posted buffer by the target's progress and\n"
         "acknowledged in batches. A target with RVMA_FAST=n refuses the "
         "rings.",
         ucs_offsetof(ucp_rvma_config_t, fast), UCS_CONFIG_TYPE_BOOL},

        {"RVMA_RING_SIZE", "256k",
         "Size of the ring a target leases to each initiator for fast path "
         "puts\n"
         "(registered memory on both sides).",
         ucs_offsetof(ucp_rvma_config_t, ring_size),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RVMA_FAST_MAX", "16k",
         "Largest put that the fast path copies into the ring. At most a "
         "quarter\n"
         "of RVMA_RING_SIZE.",
         ucs_offsetof(ucp_rvma_config_t, fast_max),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RVMA_READ_MAX", "inf",
         "Largest put that the fast path sends as a record naming the\n"
         "initiator's buffer (registered through the registration cache), "
         "from\n"
         "which the target reads the data straight into the posted buffer: no\n"
         "copy on either side. It applies to puts larger than RVMA_FAST_MAX;\n"
         "with 0, or where the lane cannot read, they and any put that finds\n"
         "the ring full take the active message path.",
         ucs_offsetof(ucp_rvma_config_t, read_max),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RVMA_RING_POLL", "y",
         "Find fast path records by polling the rings, as soon as a record's\n"
         "last bytes have landed, instead of waiting for the write's receive\n"
         "completion. This needs the last bytes of one RDMA write to land "
         "after\n"
         "the rest, as HCAs place a write in address order (the eager RDMA of\n"
         "MVAPICH and Open MPI expects it) and as softverbs lands them. With "
         "n,\n"
         "records are taken only at their completion.",
         ucs_offsetof(ucp_rvma_config_t, ring_poll), UCS_CONFIG_TYPE_BOOL},

        {"RVMA_MAX_RINGS", "64",
         "Most rings a target leases at a time, one per initiator endpoint; "
         "each\n"
         "pins RVMA_RING_SIZE bytes in the target and as much in the "
         "initiator.\n"
         "The puts of an initiator that finds them all taken go by active\n"
         "message. At most 256; 0 leases none.",
         ucs_offsetof(ucp_rvma_config_t, max_rings),
         UCS_CONFIG_TYPE_UINT_STRICT},

        {NULL}};

static ucs_mpool_ops_t ucp_rvma_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

UCS_CONFIG_REGISTER_TABLE(ucp_rvma_config_table, "RVMA put (experimental)", "",
                          ucp_rvma_config_t, &ucs_config_global_list)


unsigned ucp_rvma_faults = 0;

void ucp_rvma_test_fault(unsigned faults)
{
    ucp_rvma_faults = faults;
}

void ucp_rvma_config_mark_used(void)
{
    ucp_rvma_config_t config;

    /* parsing notes the variables as used; errors are reported when RVMA
     * reads them for real, in ucp_rvma_worker_create() */
    if (ucs_config_parser_fill_opts(&config, ucp_rvma_config_table,
                                    UCS_DEFAULT_ENV_PREFIX, "", 1) == UCS_OK) {
        ucs_config_parser_release_opts(&config, ucp_rvma_config_table);
    }
}

ucs_status_t ucp_rvma_worker_set_handler(ucp_rvma_worker_t *rw, unsigned id,
                                         ucp_am_recv_callback_t cb)
{
    ucp_am_handler_param_t param;

    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id         = rw->am_id + id;
    param.flags      = UCP_AM_FLAG_WHOLE_MSG;
    param.cb         = cb;
    param.arg        = rw;
    return ucp_worker_set_am_recv_handler(rw->worker, &param);
}

static ucs_status_t ucp_rvma_worker_create(ucp_worker_h worker,
                                           ucp_rvma_worker_t **rw_p)
{
    char ring_str[32], fast_str[32];
    ucp_rvma_config_t config;
    ucp_rvma_worker_t *rw;
    ucs_status_t status;

    if (!(worker->context->config.features & UCP_FEATURE_AM)) {
        ucs_error("worker %p: RVMA needs a context with UCP_FEATURE_AM",
                  worker);
        return UCS_ERR_UNSUPPORTED;
    }

    status = ucs_config_parser_fill_opts(&config, ucp_rvma_config_table,
                                         UCS_DEFAULT_ENV_PREFIX, "", 0);
    if (status != UCS_OK) {
        return status;
    }

    if (config.am_id > (UINT16_MAX - UCP_RVMA_AM_COUNT)) {
        ucs_error("UCX_RVMA_AM_ID=%u: must be at most %u", config.am_id,
                  UINT16_MAX - UCP_RVMA_AM_COUNT);
        status = UCS_ERR_INVALID_PARAM;
        goto out_release_config;
    }

    if (config.max_rings > UCP_RVMA_MAX_RINGS) {
        ucs_error("UCX_RVMA_MAX_RINGS=%u: must be at most %u", config.max_rings,
                  (unsigned)UCP_RVMA_MAX_RINGS);
        status = UCS_ERR_INVALID_PARAM;
        goto out_release_config;
    }

    if (config.fast &&
        ((config.ring_size > UCP_RVMA_RING_MAX_SIZE) ||
         (config.ring_size < (4 * UCP_RVMA_RING_ALIGN)) ||
         ((config.ring_size % UCP_RVMA_RING_ALIGN) != 0) ||
         (config.fast_max > (config.ring_size / 4)))) {
        /* sizes as given: "auto" and "inf", not their numeric codes */
        ucs_memunits_to_str(config.ring_size, ring_str, sizeof(ring_str));
        ucs_memunits_to_str(config.fast_max, fast_str, sizeof(fast_str));
        ucs_error("UCX_RVMA_RING_SIZE=%s, UCX_RVMA_FAST_MAX=%s: "
                  "the ring must be a multiple of %d bytes, at most %zu, "
                  "and at least 4 times FAST_MAX",
                  ring_str, fast_str, UCP_RVMA_RING_ALIGN,
                  (size_t)UCP_RVMA_RING_MAX_SIZE);
        status = UCS_ERR_INVALID_PARAM;
        goto out_release_config;
    }

    rw = ucs_calloc(1, sizeof(*rw), "ucp_rvma_worker");
    if (rw == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto out_release_config;
    }

    rw->worker = worker;
    rw->am_id          = config.am_id;
    rw->fast           = config.fast;
    rw->ring_size      = config.ring_size;
    rw->fast_max       = config.fast_max;
    rw->read_max       = config.read_max;
    rw->ring_poll      = config.ring_poll;
    rw->max_rings      = config.max_rings;
    rw->deferred_cb_id = UCS_CALLBACKQ_ID_NULL;
    kh_init_inplace(ucp_rvma_win, &rw->wins);
    kh_init_inplace(ucp_rvma_reply, &rw->replies);
    kh_init_inplace(ucp_rvma_ep, &rw->eps);
    ucs_queue_head_init(&rw->deferred);

    status = ucs_mpool_init(&rw->buf_mp, 0, sizeof(ucp_rvma_buf_t), 0,
                            UCS_SYS_CACHE_LINE_SIZE, 64, UINT_MAX,
                            &ucp_rvma_mpool_ops, "rvma_bufs");
    if (status != UCS_OK) {
        goto err_free;
    }

    status = ucs_mpool_init(&rw->msg_mp, 0, sizeof(ucp_rvma_msg_t), 0,
                            UCS_SYS_CACHE_LINE_SIZE, 128, UINT_MAX,
                            &ucp_rvma_mpool_ops, "rvma_msgs");
    if (status != UCS_OK) {
        goto err_buf_mp;
    }

    status = ucp_rvma_worker_set_handler(rw, UCP_RVMA_AM_PUT,
                                         ucp_rvma_target_put_handler);
    if (status != UCS_OK) {
        goto err_msg_mp;
    }

    status = ucp_rvma_worker_set_handler(rw, UCP_RVMA_AM_REPLY,
                                         ucp_rvma_put_reply_handler);
    if (status != UCS_OK) {
        goto err_msg_mp;
    }

    status = ucp_rvma_fast_init(rw);
    if (status != UCS_OK) {
        goto err_msg_mp;
    }

    ucs_debug("worker %p: RVMA on active message ids %u and %u", worker,
              rw->am_id + UCP_RVMA_AM_PUT, rw->am_id + UCP_RVMA_AM_REPLY);
    *rw_p = rw;
    goto out_release_config;

err_msg_mp:
    ucs_mpool_cleanup(&rw->msg_mp, 0);
err_buf_mp:
    ucs_mpool_cleanup(&rw->buf_mp, 0);
err_free:
    kh_destroy_inplace(ucp_rvma_ep, &rw->eps);
    kh_destroy_inplace(ucp_rvma_reply, &rw->replies);
    kh_destroy_inplace(ucp_rvma_win, &rw->wins);
    ucs_free(rw);
out_release_config:
    ucs_config_parser_release_opts(&config, ucp_rvma_config_table);
    return status;
}

ucs_status_t ucp_rvma_worker_get(ucp_worker_h worker, ucp_rvma_worker_t **rw_p)
{
    ucs_status_t status;

    if (ucs_likely(worker->rvma != NULL)) {
        *rw_p = worker->rvma;
        return UCS_OK;
    }

    status = ucp_rvma_worker_create(worker, rw_p);
    if (status == UCS_OK) {
        worker->rvma = *rw_p;
    }

    return status;
}

void ucp_rvma_worker_cleanup(ucp_worker_h worker)
{
    ucp_rvma_worker_t *rw = worker->rvma;
    ucp_rvma_win_h win;

    if (rw == NULL) {
        return;
    }

    ucp_rvma_put_cleanup(rw);
    ucp_rvma_fast_cleanup(rw);

    /* the endpoints are gone: no fetch is in flight any more */
    kh_foreach_value(&rw->wins, win, {
        if (win->refcount != 0) {
            ucs_warn("worker %p: RVMA window 0x%" PRIx64 " destroyed with %u "
                     "puts in flight", worker, win->vaddr, win->refcount);
        }
        ucp_rvma_win_free(win);
    })

    kh_destroy_inplace(ucp_rvma_win, &rw->wins);
    kh_destroy_inplace(ucp_rvma_ep, &rw->eps);
    kh_destroy_inplace(ucp_rvma_reply, &rw->replies);
    ucs_mpool_cleanup(&rw->msg_mp, 1);
    ucs_mpool_cleanup(&rw->buf_mp, 0);
    ucs_free(rw);
    worker->rvma = NULL;
}

static void ucp_rvma_ctl_sent(void *request, ucs_status_t status,
                              void *user_data)
{
    ucs_mpool_put(user_data);
    ucp_request_free(request);
}

/* A small eager message of RVMA's own (reply, lease, ack): header and data
 * are copied into a message of the pool, which outlives the send. Returns
 * UCS_OK when it was handed to the transport at once, UCS_INPROGRESS when
 * UCP holds it (it may wait for resources, behind later operations that
 * bypass UCP's queue) */
ucs_status_t ucp_rvma_worker_send_ctl(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                                      unsigned id, const void *header,
                                      size_t header_length, const void *data,
                                      size_t length)
{
    ucp_request_param_t param;
    ucs_status_ptr_t sreq;
    ucp_rvma_msg_t *msg;

    ucs_assert((header_length + length) <= sizeof(msg->ctl));
    msg = ucs_mpool_get(&rw->msg_mp);
    if (msg == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    memcpy(msg->ctl, header, header_length);
    if (length > 0) {
        memcpy(msg->ctl + header_length, data, length);
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_EAGER;
    param.cb.send      = ucp_rvma_ctl_sent;
    param.user_data    = msg;
    sreq = ucp_am_send_nbx(ep, rw->am_id + id, msg->ctl, header_length,
                           msg->ctl + header_length, length, &param);
    if (UCS_PTR_IS_PTR(sreq)) {
        return UCS_INPROGRESS; /* ucp_rvma_ctl_sent() releases both */
    }

    ucs_mpool_put(msg);
    return UCS_PTR_STATUS(sreq);
}

ucp_rvma_win_h ucp_rvma_worker_find_win(ucp_rvma_worker_t *rw, uint64_t vaddr)
{
    khiter_t iter = kh_get(ucp_rvma_win, &rw->wins, vaddr);

    return (iter == kh_end(&rw->wins)) ? NULL : kh_value(&rw->wins, iter);
}

ucs_status_t ucp_rvma_worker_add_win(ucp_rvma_worker_t *rw, ucp_rvma_win_h win)
{
    khiter_t iter;
    int ret;

    iter = kh_put(ucp_rvma_win, &rw->wins, win->vaddr, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        return UCS_ERR_NO_MEMORY;
    }

    ucs_assert(ret != UCS_KH_PUT_KEY_PRESENT);
    kh_value(&rw->wins, iter) = win;
    return UCS_OK;
}

void ucp_rvma_worker_remove_win(ucp_rvma_worker_t *rw, ucp_rvma_win_h win)
{
    khiter_t iter = kh_get(ucp_rvma_win, &rw->wins, win->vaddr);

    if ((iter != kh_end(&rw->wins)) && (kh_value(&rw->wins, iter) == win)) {
        kh_del(ucp_rvma_win, &rw->wins, iter);
    }
}

/* The endpoint a peer's message names by its id, if this worker has it.
 * UCP takes a direct id for the endpoint's address, which a broken or
 * malicious peer could make anything: such an id is used only once it is
 * found among the worker's endpoints (remembered until the endpoint goes,
 * ucp_rvma_worker_ep_forget()). An indirect id UCP looks up safely. */
ucs_status_t
ucp_rvma_worker_ep_by_id(ucp_rvma_worker_t *rw, uint64_t id, ucp_ep_h *ep_p)
{
    ucp_ep_ext_gen_t *ep_ext;
    int ret;

    if (id == UCS_PTR_MAP_KEY_INVALID) {
        return UCS_ERR_NO_ELEM;
    } else if (ucs_ptr_map_key_indirect(id)) {
        return ucp_worker_get_ep_by_id(rw->worker, id, ep_p);
    } else if (kh_get(ucp_rvma_ep, &rw->eps, id) != kh_end(&rw->eps)) {
        *ep_p = (ucp_ep_h)id;
        return UCS_OK;
    }

    ucs_list_for_each(ep_ext, &rw->worker->all_eps, ep_list) {
        if ((uintptr_t)ucp_ep_from_ext_gen(ep_ext) == id) {
            /* without memory, found again by the next message */
            (void)kh_put(ucp_rvma_ep, &rw->eps, id, &ret);
            *ep_p = (ucp_ep_h)id;
            return UCS_OK;
        }
    }

    return UCS_ERR_NO_ELEM;
}

void ucp_rvma_worker_ep_forget(ucp_rvma_worker_t *rw, ucp_ep_h ep)
{
    khiter_t iter = kh_get(ucp_rvma_ep, &rw->eps, (uintptr_t)ep);

    if (iter != kh_end(&rw->eps)) {
        kh_del(ucp_rvma_ep, &rw->eps, iter);
    }
}

/* Parse the variables once when libucp loads, so that ucp_init() does not
 * warn about them as unused */
UCS_STATIC_INIT {
    ucp_rvma_config_t config;

    if (ucs_config_parser_fill_opts(&config, ucp_rvma_config_table,
                                    UCS_DEFAULT_ENV_PREFIX, "", 0) == UCS_OK) {
        ucs_config_parser_release_opts(&config, ucp_rvma_config_table);
    }
}
