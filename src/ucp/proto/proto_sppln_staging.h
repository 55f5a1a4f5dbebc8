/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_PROTO_SPPLN_STAGING_H_
#define UCP_PROTO_SPPLN_STAGING_H_

#include "proto_sppln_model.h"

#include <ucp/core/ucp_types.h>
#include <ucs/copy/copy_engine.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/queue_types.h>


/*
 * A worker's staging memory for the staged protocols: per side (sending,
 * receiving) a memory pool of staging groups, each the three slots of one
 * transfer, registered on every memory domain chunk by chunk. One group per
 * side is registered when the worker starts (when the staged protocols run
 * on one of its transports), others as transfers need them, up to
 * UCX_RNDV_SPPLN_GROUPS; more transfers wait for a group. The worker also
 * keeps the receive transfers by index and generation (what a sub-block's
 * notify data names), the per-message transfer state (a memory pool), the
 * table of buffers staged before, the copy engine of the senders, and the
 * counters of the paths taken.
 */


enum {
    UCP_SPPLN_SIDE_SEND,
    UCP_SPPLN_SIDE_RECV,
    UCP_SPPLN_SIDE_LAST
};


/* A staging group: its chunk's registration, then three slots */
typedef struct {
    ucp_mem_h memh; /* of the chunk it lies in */
    void *rkey_buf; /* packed rkey of that chunk (receive side) */
    size_t rkey_size;
    int side;
} ucp_sppln_group_t;


/* The paths of put/choose and get/choose (rma/rma_choose.c) */
enum {
    UCP_RMA_CHOOSE_BCOPY, /* UCX's put/get offload bcopy */
    UCP_RMA_CHOOSE_ZCOPY, /* UCX's put/get offload zcopy */
    UCP_RMA_CHOOSE_STAGED, /* put: superpipelined through staging
                              (rma/rma_staged.c) */
    UCP_RMA_CHOOSE_LAST
};


/* Counters of the paths taken, for tests and the debug log */
typedef struct {
    uint64_t sent[UCP_SPPLN_PATH_LAST];
    uint64_t received[UCP_SPPLN_PATH_LAST];
    uint64_t reg_fallback; /* zcopy wanted, registration failed */
    uint64_t async_copies; /* chunks the copy engine staged */
    /* receiver: sub-blocks copied out into a destination whose pages were
     * not resident when the transfer started, by how */
    uint64_t fresh[UCP_SPPLN_FRESH_LAST];
    /* put/choose and get/choose: RMA messages by the path they took */
    uint64_t rma[UCP_RMA_CHOOSE_LAST];
    /* staging groups registered, by side */
    uint64_t groups[UCP_SPPLN_SIDE_LAST];
    /* sends that went zero-copy because every send group was in use */
    uint64_t busy_zcopy;
    /* receiver: transfers into an untouched destination whose first chunk
     * was faulted in while the data was on its way */
    uint64_t populated;
    /* buffers whose residency was looked up (mincore()), by senders and
     * receivers of staged transfers */
    uint64_t residency_probes;
    /* zcopy sends of a small registered buffer handed to an eager protocol
     * (in sent[UCP_SPPLN_PATH_ZCOPY] too) */
    uint64_t eager;
    /* registered buffers staged by the model, and those of them that took
     * longer than zero-copy's time by the model (their size goes zero-copy
     * for a while) */
    uint64_t cached_staged;
    uint64_t cached_backoff;
    /* sender: times a full window of puts in flight held the next one
     * back (UCP_SPPLN_MAX_POSTED), and the most puts a transfer had in
     * flight */
    uint64_t window_full;
    uint64_t max_posted;
    /* sender: notified puts (sub-blocks) posted */
    uint64_t puts;
    /* receiver: untouched destinations given transparent huge pages
     * (UCX_RNDV_SPPLN_FRESH_THP) */
    uint64_t thp;
    /* receiver: pieces of untouched destinations collapsed into huge
     * pages (UCX_RNDV_SPPLN_FRESH_COLLAPSE), collapses the kernel refused,
     * and collapses slower than the pieces' faults in small pages */
    uint64_t collapsed;
    uint64_t collapse_failed;
    uint64_t collapse_slow;
    /* sender: the most bytes a transfer staged before it looked for its
     * RTR (ucp_sppln_copy_before_rtr()), and the bytes transfers staged
     * while they waited for it (ucp_sppln_copy_idle()) */
    uint64_t max_ahead;
    uint64_t ahead_idle;
    /* receiver: ACKs of consumed chunks sent (ucp_sppln_acks_owed()) */
    uint64_t acks;
    /* sender: zero-copy sends of registered buffers timed for the staged
     * ones' check (ucp_sppln_cached_zcopy_timed()) */
    uint64_t zcopy_timed;
} ucp_sppln_stats_t;


/* A zero-copy send of a registered buffer being timed, alone in flight
 * (ucp_sppln_cached_zcopy_timed()), until UCX's ATS for it arrives */
typedef struct {
    const ucp_request_t *req; /* NULL: none */
    const void *buffer; /* what it sends: a request with */
    size_t length; /* other data is another's */
    ucs_time_t start;
} ucp_sppln_zcopy_timer_t;


/* A receive transfer the notify data can name */
typedef struct {
    struct ucp_sppln_xfer *xfer; /* NULL: free */
    uint16_t generation; /* of the transfer that holds it */
} ucp_sppln_rx_entry_t;


/* A send staging group lent to a staged put (rma/rma_staged.c): it returns
 * when the last put from it completed */
typedef struct {
    uct_completion_t comp; /* the puts in flight, and one more
                                        until all of the message's are
                                        posted */
    struct ucp_sppln_worker *sw;
    ucp_sppln_group_t *group; /* NULL: the entry is free */
} ucp_sppln_rma_group_t;


/* Worker state (worker->sppln) */
typedef struct ucp_sppln_worker {
    ucp_worker_h worker;
    size_t slot_size;
    ucs_mpool_t group_mp[UCP_SPPLN_SIDE_LAST];
    unsigned groups_used[UCP_SPPLN_SIDE_LAST];
    unsigned max_groups; /* per side: UCX_RNDV_SPPLN_GROUPS */
    ucs_queue_head_t waitq[UCP_SPPLN_SIDE_LAST]; /* transfers waiting
                                                            for a group */
    ucs_mpool_t xfer_mp; /* per-message state */
    ucp_sppln_rx_entry_t rx[UCP_SPPLN_MAX_GROUPS];
    uint16_t next_generation;
    ucp_sppln_staged_table_t staged;
    ucp_sppln_stats_t stats;
    ucp_sppln_zcopy_timer_t zcopy_timer;
    ucs_copy_engine_t *copy_engine; /* created on first use, or NULL */
    int copy_engine_failed; /* do not try again */
    ucp_sppln_fresh_t fresh_copy; /* receiver: how it copies into
                                            untouched pages, after fallbacks */
    int fresh_collapse; /* receiver: collapses pieces of
                                            untouched pages, until the
                                            kernel refuses */
    unsigned collapse_backoff; /* receiver: transfers without
                                            collapses after the next slow
                                            one */
    unsigned collapse_skip; /* ... and those left now */
    int uffd; /* receiver: the userfaultfd that fills
                                            untouched pages, -1 before its
                                            first use */
    pid_t uffd_pid; /* the process that opened it */
    void *uffd_page; /* receiver: a page that carries
                                            a page's part of a sub-block */
    ucp_sppln_rma_group_t rma[UCP_SPPLN_MAX_GROUPS]; /* staged puts */
} ucp_sppln_worker_t;


/* A send or a staged receive starts: a zero-copy send being timed is not
 * alone in flight any more, its time is not zero-copy's (and one that
 * ended without an ATS is forgotten) */
static UCS_F_ALWAYS_INLINE void ucp_sppln_xfer_started(ucp_sppln_worker_t *sw)
{
    sw->zcopy_timer.req = NULL;
}


/* A request waiting for a staging group: it is sent again (its progress
 * asks for a group again) when one is given back */
typedef struct {
    ucs_queue_elem_t queue;
    ucp_request_t *req;
} ucp_sppln_waiter_t;


/**
 * The worker's state, created at its first use: a worker receives staged
 * messages whatever its own settings.
 */
ucs_status_t
ucp_sppln_worker_state(ucp_worker_h worker, ucp_sppln_worker_t **sw_p);


/* A staging group of a side, registered already or registered now; NULL
 * with *status_p UCS_INPROGRESS when all groups are taken (wait for one),
 * or with an error when none can be registered */
ucp_sppln_group_t *
ucp_sppln_group_get(ucp_sppln_worker_t *sw, int side, ucs_status_t *status_p);

/* Wait for a group of this side: the waiter's request is sent again when a
 * group is given back */
void ucp_sppln_group_wait(ucp_sppln_worker_t *sw, int side,
                          ucp_sppln_waiter_t *waiter);

/* Stop waiting (a transfer that ends before its group came) */
void ucp_sppln_group_wait_cancel(ucp_sppln_worker_t *sw, int side,
                                 ucp_sppln_waiter_t *waiter);

/* Give a group back: the first waiter of its side is sent again */
void ucp_sppln_group_put(ucp_sppln_worker_t *sw, ucp_sppln_group_t *group);

/* The address of a slot of a group */
void *ucp_sppln_group_slot(const ucp_sppln_worker_t *sw,
                           const ucp_sppln_group_t *group, unsigned slot);

/* The group's memory handle on a memory domain */
uct_mem_h
ucp_sppln_group_uct_memh(const ucp_sppln_group_t *group, ucp_md_index_t md);


/* A receive transfer's entry in the table the notify data indexes, with a
 * fresh generation; -1 when all are taken */
int ucp_sppln_rx_add(ucp_sppln_worker_t *sw, struct ucp_sppln_xfer *xfer,
                     uint16_t *generation_p);

void ucp_sppln_rx_remove(ucp_sppln_worker_t *sw, int index);

/* The transfer an index and a generation from the wire name, or NULL */
struct ucp_sppln_xfer *ucp_sppln_rx_find(const ucp_sppln_worker_t *sw,
                                         unsigned index, unsigned generation);


/* The worker's copy engine for senders that stage with it, or NULL */
ucs_copy_engine_t *ucp_sppln_copy_engine(ucp_sppln_worker_t *sw,
                                         const ucp_sppln_lane_model_t *lmodel);


/* Staged puts (rma/rma_staged.c): start one through a send group, if the
 * message fits one and the lane's md registered it */
ucs_status_t ucp_rma_staged_start(ucp_request_t *req, ucp_sppln_worker_t *sw,
                                  ucp_md_index_t md_index, size_t max_frag);

ucs_status_t ucp_rma_staged_progress(ucp_request_t *req, ucp_lane_index_t lane,
                                     ucp_md_index_t md_index,
                                     ucp_md_index_t rkey_index, size_t c0,
                                     double q);

void ucp_rma_staged_abort(ucp_request_t *req, ucs_status_t status);


/**
 * Create the worker's staging state when the staged protocols run on one of
 * its transports, and register one staging group per side, so that the
 * first staged message does not pay for it (from ucp_worker_create()).
 */
void ucp_proto_sppln_worker_init(ucp_worker_h worker);


/**
 * Release the staging state of a worker (from ucp_worker_destroy()).
 */
void ucp_proto_sppln_worker_cleanup(ucp_worker_h worker);


/**
 * Path counters of a worker, NULL when it never used the staged protocols.
 */
const ucp_sppln_stats_t *ucp_proto_sppln_stats(ucp_worker_h worker);

#endif
