/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCPX_RVMA_H_
#define UCPX_RVMA_H_

#include <ucp/api/ucp.h>

/*
 * This header, installed as <ucp/api/ucpx_rvma.h>, is an EXPERIMENTAL UCP
 * API: its functions and types may change or be removed in a later release,
 * without the deprecation period UCX gives its stable API.
 */

BEGIN_C_DECLS

/**
 * @defgroup UCP_RVMA UCP Remote Virtual Memory Access (experimental)
 * @ingroup UCP_API
 * @{
 * RVMA: a put whose target is told, through a completion pointer, when a
 * threshold of bytes or operations has arrived (Grant et al., "Remote Virtual
 * Memory Access").
 *
 * The target owns the resources. It creates a @e window (a mailbox) on a
 * worker, named by a 64-bit virtual address the application chooses, with a
 * threshold counted in bytes or in put operations. It posts buffers to the
 * window; each buffer has a completion pointer and a length word. Initiators
 * put to (endpoint, virtual address, offset) without knowing any target
 * memory address or key. Data lands at its offset in the window's current
 * buffer. When the buffer's threshold is reached, after all its data is
 * placed, the target writes the length word and then the completion pointer
 * (with the buffer's address), retires the buffer and moves to the next
 * posted buffer: a new @e epoch.
 *
 * Placement is by offset, and each put is counted once whatever the arrival
 * order and the number of initiators, so completion does not depend on
 * packet order. A put that does not fit in the buffer or in the remaining
 * threshold, or that is addressed to an unknown or closed window, fails at
 * the initiator and leaves the target's memory untouched.
 *
 * The contexts of both sides must be created with @ref UCP_FEATURE_AM: the
 * initiator sends its puts, or asks for a ring, and receives the target's
 * verdicts as active messages, and the target receives them. They use the
 * five ids from @c UCX_RVMA_AM_ID on (4000 to 4004 by default), which the
 * application must not use for its own handlers and which must be the same
 * in every process. With @ref UCP_FEATURE_WAKEUP, @ref ucp_rvma_win_wait
 * sleeps instead of polling. Windows are progressed by
 * @ref ucp_worker_progress of the target worker.
 *
 * Posted buffers are plain host memory: they need no registration and no
 * memory handle (the target registers a buffer's range itself while a put
 * reads into it, and copies smaller puts in).
 *
 * An initiator does not learn that a window exists before it puts: a put's
 * request completes with UCS_ERR_NO_ELEM for a window the target does not
 * have, and with UCS_ERR_NO_RESOURCE for one without a posted buffer. A
 * worker answers puts from its first @ref ucp_rvma_win_create on; before
 * that its UCP drops their active messages (with a warning) and the puts are
 * never answered. So a target creates its windows and posts their first
 * buffers, then tells its initiators out of band, as
 * contrib/examples/rvma_halo.c does with a barrier.
 *
 * Where the endpoint's lane can put with notification (hcr), the first put
 * on an endpoint asks the target to lease it a ring; until the lease
 * arrives, a round trip later, puts take the active message path.
 * @ref ucp_rvma_ep_query says which path an endpoint's puts take.
 */


/**
 * @brief Handle of an RVMA window (mailbox).
 */
typedef struct ucp_rvma_win *ucp_rvma_win_h;


/**
 * @brief What a window's threshold counts.
 */
typedef enum {
    UCP_RVMA_THRESHOLD_BYTES = 0, /**< Bytes placed in the buffer */
    UCP_RVMA_THRESHOLD_OPS   = 1  /**< Put operations placed in the buffer */
} ucp_rvma_threshold_type_t;


/**
 * @brief Window flags.
 */
enum ucp_rvma_win_flags {
    /**
     * Puts to the window after @ref ucp_rvma_win_close are discarded
     * silently: the initiator's request completes with UCS_OK instead of
     * UCS_ERR_CANCELED.
     */
    UCP_RVMA_WIN_FLAG_SILENT_CLOSE = UCS_BIT(0)
};


/**
 * @brief Fields of @ref ucp_rvma_win_params_t.
 */
enum ucp_rvma_win_params_field {
    UCP_RVMA_WIN_PARAM_FIELD_VADDR     = UCS_BIT(0), /**< vaddr */
    UCP_RVMA_WIN_PARAM_FIELD_THRESHOLD = UCS_BIT(1), /**< threshold */
    UCP_RVMA_WIN_PARAM_FIELD_TYPE      = UCS_BIT(2), /**< type */
    UCP_RVMA_WIN_PARAM_FIELD_FLAGS     = UCS_BIT(3), /**< flags */
    UCP_RVMA_WIN_PARAM_FIELD_RETAIN    = UCS_BIT(4)  /**< retain */
};


/**
 * @brief Parameters of @ref ucp_rvma_win_create.
 */
typedef struct ucp_rvma_win_params {
    /**
     * Mask of valid fields, from @ref ucp_rvma_win_params_field.
     * @a vaddr and @a threshold are mandatory.
     */
    uint64_t                  field_mask;

    /** Virtual address naming the window; unique per worker. */
    uint64_t                  vaddr;

    /**
     * Number of bytes or operations (see @a type) after which a buffer is
     * complete. In bytes mode it must not exceed the size of the buffers
     * posted to the window.
     */
    uint64_t                  threshold;

    /** What @a threshold counts; default @ref UCP_RVMA_THRESHOLD_BYTES. */
    ucp_rvma_threshold_type_t type;

    /** Flags from @ref ucp_rvma_win_flags; default 0. */
    unsigned                  flags;

    /**
     * Number of completed buffers remembered for @ref ucp_rvma_win_rewind;
     * default 4. The window never writes to a completed buffer again, so a
     * retained buffer keeps its data unless the application reuses it.
     */
    unsigned                  retain;
} ucp_rvma_win_params_t;


/**
 * @brief Create a window (mailbox) on a worker.
 *
 * Creating a window on the virtual address of a closed window replaces it.
 *
 * @param [in]  worker  Worker that receives the puts.
 * @param [in]  params  Window parameters.
 * @param [out] win_p   The window.
 *
 * @return UCS_OK; UCS_ERR_INVALID_PARAM for a missing field or a zero
 *         threshold; UCS_ERR_ALREADY_EXISTS if an open window has this
 *         virtual address; UCS_ERR_UNSUPPORTED without @ref UCP_FEATURE_AM.
 */
ucs_status_t ucp_rvma_win_create(ucp_worker_h worker,
                                 const ucp_rvma_win_params_t *params,
                                 ucp_rvma_win_h *win_p);


/**
 * @brief Post a buffer to a window.
 *
 * Buffers are used in the order they are posted. When the buffer completes,
 * @a *length_ptr is set to the number of bytes placed in it and then
 * @a *comp_ptr to @a buffer (a release store: a thread that sees the
 * pointer sees the data and the length). The buffer belongs to the window
 * until then. @a *comp_ptr is set to NULL here. The length counts the puts
 * that completed; a put whose initiator failed while its data was being
 * fetched is not counted, though part of its range may have been written
 * (as an RDMA transfer cut off on an HCA leaves part of its data).
 *
 * @param [in]  win         Window.
 * @param [in]  buffer      Buffer, host memory.
 * @param [in]  size        Size of the buffer.
 * @param [in]  comp_ptr    Completion pointer.
 * @param [in]  length_ptr  Length word; may be NULL.
 *
 * @return UCS_OK; UCS_ERR_INVALID_PARAM if @a buffer or @a comp_ptr is NULL
 *         or, in bytes mode, @a size is below the threshold;
 *         UCS_ERR_CANCELED if the window is closed.
 */
ucs_status_t ucp_rvma_win_post_buffer(ucp_rvma_win_h win, void *buffer,
                                      size_t size, void **comp_ptr,
                                      uint64_t *length_ptr);


/**
 * @brief Close a window.
 *
 * Later puts are discarded and fail at their initiator with UCS_ERR_CANCELED
 * (unless @ref UCP_RVMA_WIN_FLAG_SILENT_CLOSE). Buffers not completed are
 * returned to the application as they are: their completion pointers are
 * not written. Puts already being placed (rendezvous) finish into their
 * buffer first. The handle stays valid for the query functions until
 * @ref ucp_rvma_win_destroy.
 */
ucs_status_t ucp_rvma_win_close(ucp_rvma_win_h win);


/**
 * @brief Destroy a window, closing it first if needed; its virtual address
 * becomes unknown to later puts (UCS_ERR_NO_ELEM at the initiator).
 */
void ucp_rvma_win_destroy(ucp_rvma_win_h win);


/**
 * @brief Hand the current, possibly partly filled, buffer to the
 * application and move to the next posted buffer (a new epoch).
 *
 * The completion pointer and length word are written as soon as the puts
 * already accepted into the buffer are placed (at once, unless a rendezvous
 * put is still in flight). Later puts go to the next posted buffer.
 *
 * @return UCS_OK; UCS_ERR_NO_ELEM if no buffer is posted;
 *         UCS_ERR_CANCELED if the window is closed.
 */
ucs_status_t ucp_rvma_win_inc_epoch(ucp_rvma_win_h win);


/**
 * @brief The window's epoch: the number of buffers that have stopped taking
 * puts (threshold reached or @ref ucp_rvma_win_inc_epoch). The current
 * buffer belongs to this epoch.
 */
uint64_t ucp_rvma_win_get_epoch(ucp_rvma_win_h win);


/**
 * @brief Take the addresses of completed buffers, in completion order.
 *
 * Each completed buffer is returned once by this function.
 *
 * @param [in]  win       Window.
 * @param [out] buf_ptrs  Array that receives up to @a max buffer addresses.
 * @param [in]  max       Size of @a buf_ptrs.
 *
 * @return The number of addresses written.
 */
size_t ucp_rvma_win_get_buf_ptrs(ucp_rvma_win_h win, void **buf_ptrs,
                                 size_t max);


/**
 * @brief Retrieve the buffer of an earlier epoch, kept for recovery.
 *
 * @param [in]  win       Window.
 * @param [in]  epoch     Epoch of the buffer, below the current epoch.
 * @param [out] buffer_p  The buffer's address.
 * @param [out] length_p  The number of bytes placed in it; may be NULL.
 *
 * @return UCS_OK, or UCS_ERR_NO_ELEM if the buffer of that epoch is not
 *         (or no longer) retained or has not completed.
 */
ucs_status_t ucp_rvma_win_rewind(ucp_rvma_win_h win, uint64_t epoch,
                                 void **buffer_p, uint64_t *length_p);


/**
 * @brief Wait until a completion pointer is set.
 *
 * Progresses the window's worker until @a *comp_ptr is not NULL. With
 * @ref UCP_FEATURE_WAKEUP the thread sleeps in @ref ucp_worker_wait while
 * nothing arrives.
 *
 * @return UCS_OK, or the error of @ref ucp_worker_arm or
 *         @ref ucp_worker_wait.
 */
ucs_status_t ucp_rvma_win_wait(ucp_rvma_win_h win, void *const *comp_ptr);


/**
 * @brief Put data to a window of a remote worker.
 *
 * Places @a length bytes from @a buffer at @a offset in the current buffer
 * of the window @a vaddr of the endpoint's peer. Where the endpoint's lane
 * can put with notification (hcr), a put of up to UCX_RVMA_FAST_MAX bytes
 * is one write-with-immediate into a ring the target leased to this
 * endpoint, and @a buffer may be reused as soon as the call returns (a
 * target leases at most UCX_RVMA_MAX_RINGS rings). Other
 * small puts are one active message; large ones (above UCP's active message
 * rendezvous threshold) are fetched by the target directly into the posted
 * buffer. The request completes when @a buffer may be reused and the target
 * has accepted or rejected the put. On the fast path the target's verdict
 * rides in the header of its next fast put to this worker, if it makes one
 * before it progresses its worker again, and else goes in a message of its
 * own: as for every UCP operation, the target has to keep progressing.
 *
 * @param [in]  ep      Endpoint to the target worker.
 * @param [in]  vaddr   Virtual address of the target's window.
 * @param [in]  offset  Offset in the target's current buffer.
 * @param [in]  buffer  Data, contiguous host memory.
 * @param [in]  length  Length of the data.
 * @param [in]  param   Operation parameters, as for @ref ucp_put_nbx
 *                      (callback, user data, request); the datatype must be
 *                      contiguous bytes.
 *
 * @return A request to wait for, or an error status pointer. The request
 *         completes with UCS_OK, UCS_ERR_NO_ELEM (unknown window),
 *         UCS_ERR_CANCELED (closed window), UCS_ERR_NO_RESOURCE (no buffer
 *         posted), UCS_ERR_MESSAGE_TRUNCATED (the data does not fit in the
 *         buffer), UCS_ERR_EXCEEDS_LIMIT (bytes mode: the put would take the
 *         buffer past its threshold), UCS_ERR_IO_ERROR (the target broke
 *         the protocol; the data may have landed) or the endpoint's error.
 */
ucs_status_ptr_t ucp_rvma_put_nbx(ucp_ep_h ep, uint64_t vaddr, size_t offset,
                                  const void *buffer, size_t length,
                                  const ucp_request_param_t *param);



/**
 * @brief Fields of @ref ucp_rvma_ep_attr_t.
 */
enum ucp_rvma_ep_attr_field {
    UCP_RVMA_EP_ATTR_FIELD_FAST      = UCS_BIT(0), /**< fast */
    UCP_RVMA_EP_ATTR_FIELD_FAST_PUTS = UCS_BIT(1), /**< fast_puts */
    UCP_RVMA_EP_ATTR_FIELD_ACKS      = UCS_BIT(2), /**< ack_msgs and
                                                        ack_carried */
    UCP_RVMA_EP_ATTR_FIELD_TAKEN     = UCS_BIT(3)  /**< taken_polled and
                                                        taken_notified */
};


/**
 * @brief RVMA state of an endpoint, from @ref ucp_rvma_ep_query.
 */
typedef struct ucp_rvma_ep_attr {
    /** Mask of fields to fill, from @ref ucp_rvma_ep_attr_field. */
    uint64_t field_mask;

    /** Non-zero when the target has leased this endpoint a ring, so that
     *  small puts take the fast path (one write-with-immediate). */
    int      fast;

    /** Puts this endpoint has sent by the fast path. */
    uint64_t fast_puts;

    /** Acknowledgements of the peer's fast-path puts that this side sent
     *  as messages of their own. */
    uint64_t ack_msgs;

    /** Acknowledgements of the peer's fast-path puts that rode in the
     *  header of this side's own fast-path puts to the peer, costing no
     *  network operation. */
    uint64_t ack_carried;

    /** The peer's fast-path puts that this side found by polling the ring
     *  in a progress round (UCX_RVMA_RING_POLL). */
    uint64_t taken_polled;

    /** The peer's fast-path puts that this side took while it handled the
     *  completion of a write: that write's put, and with ring polling any
     *  later ones that had landed too. */
    uint64_t taken_notified;
} ucp_rvma_ep_attr_t;


/**
 * @brief Which path RVMA puts on an endpoint take.
 *
 * @param [in]    ep    Endpoint.
 * @param [inout] attr  Fields to fill (field_mask) and their values.
 *
 * @return UCS_OK.
 */
ucs_status_t ucp_rvma_ep_query(ucp_ep_h ep, ucp_rvma_ep_attr_t *attr);

/** @} */

END_C_DECLS

#endif
