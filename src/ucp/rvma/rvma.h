/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_RVMA_H_
#define UCP_RVMA_H_

/*
 * RVMA (ucpx_rvma.h) inside UCP. Files:
 *  - rvma_worker.c  per-worker state: configuration, active message handlers,
 *                   the window table, memory pools, cleanup;
 *  - rvma_win.c     the mailbox: posted buffers, threshold accounting,
 *                   epochs, completion writes, rewind;
 *  - rvma_target.c  a put arriving at the target: window lookup, placement
 *                   (eager copy or rendezvous fetch), the reply;
 *  - rvma_put.c     the initiator: ucp_rvma_put_nbx() and its request.
 *
 * Wire protocol: a put is one UCP active message (id UCX_HCR_RVMA_AM_ID)
 * whose user header is ucp_rvma_put_hdr_t and whose data is the put's data
 * (not sent with UCP_AM_SEND_FLAG_REPLY: in UCX 1.13.1 proto v2, such a
 * message crashes when it has to wait for resources; the header carries
 * the endpoint id for the reply instead);
 * UCP sends it eagerly or by rendezvous by size, and on rc transports an
 * eager put is one RC SEND. The target answers every put with an active
 * message (id + 1) holding ucp_rvma_reply_hdr_t, which completes the
 * initiator's request with the target's verdict.
 */

#include <ucp/api/ucpx_rvma.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/queue.h>
#include <uct/api/uct.h>


/* Active message ids relative to UCX_HCR_RVMA_AM_ID */
enum {
    UCP_RVMA_AM_PUT   = 0,
    UCP_RVMA_AM_REPLY = 1
};


/* User header of a put */
typedef struct ucp_rvma_put_hdr {
    uint64_t vaddr;  /* target window */
    uint64_t offset; /* offset in the window's current buffer */
    uint64_t req_id; /* initiator's request, echoed in the reply */
    uint64_t ep_id;  /* the target's endpoint to the initiator, for the
                        reply */
} UCS_S_PACKED ucp_rvma_put_hdr_t;


/* User header of a reply */
typedef struct ucp_rvma_reply_hdr {
    uint64_t req_id;
    int8_t   status; /* ucs_status_t */
} UCS_S_PACKED ucp_rvma_reply_hdr_t;


/* A buffer posted to a window */
typedef struct ucp_rvma_buf {
    ucs_queue_elem_t queue;      /* in the window's posted, then completed
                                    queue */
    void             *buffer;
    size_t           size;
    void             **comp_ptr;
    uint64_t         *length_ptr;
    uint64_t         epoch;      /* set when it becomes the current buffer */
    uint64_t         reserved;   /* units (bytes or ops) accepted */
    uint64_t         placed;     /* bytes placed */
    unsigned         inflight;   /* accepted puts not placed yet */
    int              retired;    /* takes no more puts */
} ucp_rvma_buf_t;


/* A completed buffer remembered for rewind */
typedef struct ucp_rvma_retained {
    uint64_t epoch;
    void     *buffer;
    uint64_t length;
} ucp_rvma_retained_t;


typedef struct ucp_rvma_worker ucp_rvma_worker_t;


struct ucp_rvma_win {
    ucp_rvma_worker_t         *rw;
    uint64_t                  vaddr;
    uint64_t                  threshold;
    ucp_rvma_threshold_type_t type;
    unsigned                  flags;
    int                       closed;
    int                       destroyed;   /* freed when refcount drops to 0 */
    unsigned                  refcount;    /* rendezvous puts being fetched */
    uint64_t                  epoch;       /* buffers retired so far */
    ucs_queue_head_t          posted;      /* head: the current buffer */
    ucs_queue_head_t          completed;   /* not yet taken by get_buf_ptrs */
    ucp_rvma_retained_t       *retained;   /* ring of the last completions */
    unsigned                  retain;
    uint64_t                  retained_count;
};


KHASH_MAP_INIT_INT64(ucp_rvma_win, ucp_rvma_win_h);


/* Per-worker RVMA state (worker->rvma) */
struct ucp_rvma_worker {
    ucp_worker_h       worker;
    unsigned           am_id;     /* first of the two active message ids */
    khash_t(ucp_rvma_win) wins;   /* open and closed windows by vaddr */
    ucs_mpool_t        buf_mp;    /* ucp_rvma_buf_t */
    ucs_mpool_t        msg_mp;    /* ucp_rvma_msg_t */
    ucs_queue_head_t   deferred;  /* puts waiting for their endpoint's
                                     wire-up (rvma_put.c) */
    uct_worker_cb_id_t deferred_cb_id;
};


/* State of one message in flight: what must outlive the call that sent or
 * received it (UCP 1.13 keeps a pointer to an active message's header until
 * the send completes) */
typedef union ucp_rvma_msg {
    struct {
        ucp_rvma_worker_t  *rw;
        ucp_rvma_put_hdr_t hdr;
        ucs_queue_elem_t   queue; /* in rw->deferred */
        ucp_ep_h           ep;
        const void         *buffer;
        size_t             length;
    } put;                        /* initiator: the put's active message */
    ucp_rvma_reply_hdr_t   reply; /* target: a reply being sent */
    struct {
        ucp_rvma_win_h     win;
        ucp_rvma_buf_t     *buf;
        ucp_ep_h           reply_ep;
        uint64_t           req_id;
        size_t             length;
    } fetch;                      /* target: a rendezvous put being fetched */
} ucp_rvma_msg_t;


/* rvma_worker.c */
ucs_status_t ucp_rvma_worker_get(ucp_worker_h worker,
                                 ucp_rvma_worker_t **rw_p);

void ucp_rvma_worker_cleanup(ucp_worker_h worker);

ucp_rvma_win_h ucp_rvma_worker_find_win(ucp_rvma_worker_t *rw, uint64_t vaddr);

ucs_status_t ucp_rvma_worker_add_win(ucp_rvma_worker_t *rw, ucp_rvma_win_h win);

void ucp_rvma_worker_remove_win(ucp_rvma_worker_t *rw, ucp_rvma_win_h win);

/* rvma_win.c: accounting for the target side */
ucs_status_t ucp_rvma_win_accept(ucp_rvma_win_h win, uint64_t offset,
                                 size_t length, ucp_rvma_buf_t **buf_p);

void ucp_rvma_win_placed(ucp_rvma_win_h win, ucp_rvma_buf_t *buf,
                         size_t length, ucs_status_t status);

void ucp_rvma_win_free(ucp_rvma_win_h win);

/* rvma_target.c */
ucs_status_t ucp_rvma_target_put_handler(void *arg, const void *header,
                                         size_t header_length, void *data,
                                         size_t length,
                                         const ucp_am_recv_param_t *param);

/* rvma_put.c */
void ucp_rvma_put_cleanup(ucp_rvma_worker_t *rw);

ucs_status_t ucp_rvma_put_reply_handler(void *arg, const void *header,
                                        size_t header_length, void *data,
                                        size_t length,
                                        const ucp_am_recv_param_t *param);

#endif
