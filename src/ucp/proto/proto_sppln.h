/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_PROTO_SPPLN_H_
#define UCP_PROTO_SPPLN_H_

#include <ucp/core/ucp_types.h>
#include <ucp/proto/proto_am.h>
#include <ucp/rndv/proto_rndv.h>
#include <ucs/calib/calib.h>
#include <ucs/copy/copy_engine.h>
#include <ucs/datastruct/queue_types.h>


/*
 * rndv/sppln: a rendezvous protocol that chooses, per message, between
 *  - zcopy: register the buffer (or find it in the registration cache) and
 *    let UCX's rendezvous move it without copies;
 *  - bcopy: copy through pre-registered staging buffers in fixed chunks;
 *  - sppln: the same staging buffers with a superpipeline: chunks grow
 *    geometrically (C_i = C_0 * q^i) so that copying chunk i+1 hides behind
 *    sending chunk i, the first copy hides behind the RTS/RTR round trip,
 *    and the receiver copies sub-blocks out while later ones still arrive.
 * The sizes come from the measured cost model (ucs/calib), see
 * proto_sppln_model.c. Files:
 *  proto_sppln_model.c    configuration, schedule, per-message choice, perf
 *  proto_sppln_staging.c  the worker's registered staging regions
 *  proto_sppln_send.c     the protocol (sender side)
 *  proto_sppln_recv.c     the receiver side, started by a flagged RTS
 *  proto_rma_choose.c     the same per-message choice for RMA put and get
 *                         (bcopy, zcopy, or for a put the staging)
 *  proto_rma_staged.c     a put superpipelined through the send staging
 */


/* Staging slots per transfer and side: triple buffering */
#define UCP_SPPLN_NUM_SLOTS     3

/* Chunks are whole pages (but for a message's last) */
#define UCP_SPPLN_CHUNK_ALIGN   4096

/* Smallest sub-block the measured size is taken down to, and that a lane
 * must be able to put (a configured UCX_HCR_SPPLN_SUB_SIZE instead) */
#define UCP_SPPLN_SUB_MIN       (16 * UCS_KBYTE)

/* notify_data of a sub-block put: group | slot | sub-block index */
#define UCP_SPPLN_SUB_BITS      19
#define UCP_SPPLN_SLOT_BITS     2
#define UCP_SPPLN_GROUP_BITS    6
#define UCP_SPPLN_MAX_GROUPS    UCS_BIT(UCP_SPPLN_GROUP_BITS)

/* Buffers remembered as staged once: sent again, they are registered */
#define UCP_SPPLN_STAGED_HASH   256


/* How a message is moved */
typedef enum {
    UCP_SPPLN_PATH_AUTO,  /* configuration only: choose per message */
    UCP_SPPLN_PATH_BCOPY, /* staging, fixed chunks of the slot size */
    UCP_SPPLN_PATH_SPPLN, /* staging, geometric chunks */
    UCP_SPPLN_PATH_ZCOPY, /* register, UCX's rendezvous */
    UCP_SPPLN_PATH_LAST
} ucp_sppln_path_t;


/* How the receiver copies into destination pages nobody touched yet */
typedef enum {
    UCP_SPPLN_FRESH_KCOPY,    /* the kernel copies (process_vm_writev into
                                 our own process), faulting pages in as it
                                 goes */
    UCP_SPPLN_FRESH_POPULATE, /* the kernel populates the pages
                                 (MADV_POPULATE_WRITE), then memcpy */
    UCP_SPPLN_FRESH_FAULT,    /* memcpy, taking a page fault per page */
    UCP_SPPLN_FRESH_LAST
} ucp_sppln_fresh_t;


/* Configuration, UCX_HCR_SPPLN_* */
typedef struct {
    int              enable;        /* ternary: offer the protocol at all */
    ucs_config_names_array_t tls;   /* transports whose lanes it runs on */
    ucp_sppln_path_t path;          /* forced path, or auto */
    size_t           thresh;        /* from this size on, or auto */
    size_t           slot_size;     /* bytes per staging slot */
    size_t           sub_size;      /* bytes per notified sub-block, or
                                       auto */
    unsigned         groups;        /* concurrent transfers per side */
    size_t           c0;            /* first chunk, or auto */
    double           q;             /* growth ratio, or 0 for auto */
    int              copy_async;    /* ternary-auto: sender stages chunks
                                       with the copy engine */
    ucp_sppln_fresh_t fresh_copy;   /* receiver: how it copies into
                                       untouched destination pages */
} ucp_sppln_config_t;


/* The RTS carries the growth ratio in fixed point, 1/1024 steps */
#define UCP_SPPLN_Q_WIRE_SCALE 1024.0


/* Parameters of one transfer, sent in the RTS after its header */
typedef struct {
    uint32_t c0;        /* first chunk, bytes */
    uint32_t q_1024;    /* growth ratio times 1024 */
    uint32_t slot_size; /* largest chunk */
    uint32_t sub_size;  /* bytes per notified put */
    uint8_t  path;      /* ucp_sppln_path_t, for the receiver's counters */
} UCS_S_PACKED ucp_sppln_rts_params_t;


/* Ready-to-receive into staging: receiver -> sender */
typedef struct {
    uint64_t sreq_id;                          /* sender's request */
    uint64_t rreq_id;                          /* receiver's request */
    uint64_t slot_addr[UCP_SPPLN_NUM_SLOTS];   /* receiver staging slots */
    uint32_t slot_size;                        /* bytes per receiver slot */
    uint8_t  group;                            /* receiver staging group */
    /* packed rkey of the receiver's staging region follows */
} UCS_S_PACKED ucp_sppln_rtr_hdr_t;


/* Chunk consumed (or transfer failed): receiver -> sender */
typedef struct {
    uint64_t sreq_id;
    uint32_t chunk;   /* chunk whose slot is free again */
    int8_t   status;  /* UCS_OK, or why the receiver gave up */
} UCS_S_PACKED ucp_sppln_ack_hdr_t;


/* Chunk schedule of a transfer */
typedef struct {
    size_t   length;     /* message bytes */
    size_t   c0;         /* first chunk, as asked for */
    double   q;
    size_t   sub_size;   /* bytes per notified put */
    unsigned n_chunks;
    size_t   *offset;    /* n_chunks + 1 chunk start offsets */
} ucp_sppln_sched_t;


/* Per-protocol private data: UCX's RTS part first, so that the zcopy path
 * can use UCX's RTS functions on it */
typedef struct {
    ucp_proto_rndv_ctrl_priv_t rts;
    ucp_lane_index_t           rma_lane;   /* lane of the staged data */
    ucp_md_index_t             md_index;   /* its memory domain */
    int                        put_notify; /* lane has uct_ep_put_notify */
    ucs_calib_derived_t        derived;    /* of the lane's device */
    ucs_calib_model_t          model;
    int                        have_model;
    size_t                     c0;
    double                     q;
    size_t                     sub_size;     /* bytes per notified put */
    int                        copy_async;   /* the copy engine stages the
                                                sender's chunks, */
    ucs_copy_backend_t         copy_backend; /* with this backend */
    int                        am;           /* active messages, not tags */
} ucp_sppln_priv_t;


/* The paths of put/choose and get/choose (proto_rma_choose.c) */
enum {
    UCP_RMA_CHOOSE_BCOPY,  /* UCX's put/get offload bcopy */
    UCP_RMA_CHOOSE_ZCOPY,  /* UCX's put/get offload zcopy */
    UCP_RMA_CHOOSE_STAGED, /* put: superpipelined through staging
                              (proto_rma_staged.c) */
    UCP_RMA_CHOOSE_LAST
};


/* A send staging group lent to staged puts (proto_rma_staged.c): it
 * returns when the last put from it completed */
typedef struct {
    uct_completion_t comp;   /* the puts in flight, and one more until all
                                of the message's are posted */
    ucp_worker_h     worker;
    int              group;
} ucp_sppln_rma_group_t;


/* Counters of the paths taken, for tests and the debug log */
typedef struct {
    uint64_t sent[UCP_SPPLN_PATH_LAST];
    uint64_t received[UCP_SPPLN_PATH_LAST];
    uint64_t reg_fallback;  /* zcopy wanted, registration failed */
    uint64_t async_copies;  /* chunks the copy engine staged */
    /* receiver: sub-blocks copied out into a destination whose pages were
     * not resident when the transfer started, by how */
    uint64_t fresh[UCP_SPPLN_FRESH_LAST];
    /* put/choose and get/choose: RMA messages by the path they took */
    uint64_t rma[UCP_RMA_CHOOSE_LAST];
} ucp_sppln_stats_t;


/* A buffer staged once: the next send of it registers it (0: empty) */
typedef struct {
    uintptr_t address;
    size_t    length;
} ucp_sppln_staged_t;


/* Worker state (worker->sppln) */
typedef struct ucp_sppln_worker {
    ucp_mem_h          memh[2];      /* send and receive staging regions */
    void               *base[2];
    void               *rkey_buf;    /* packed rkey of the receive region */
    size_t             rkey_size;
    uint64_t           free_groups[2];
    ucs_queue_head_t   waitq[2];     /* transfers waiting for a group */
    size_t             slot_size;
    unsigned           groups;
    struct ucp_sppln_xfer *rx[UCP_SPPLN_MAX_GROUPS]; /* receive group owners */
    /* buffers staged once, forgotten when unmapped (an unmapped range may
     * be mapped again, fresh, at the same address) */
    ucp_sppln_staged_t staged[UCP_SPPLN_STAGED_HASH];
    int                staged_tracked; /* unmap events reach the table */
    ucp_sppln_stats_t  stats;
    ucs_copy_engine_t  *copy_engine; /* created on first use, or NULL */
    ucp_sppln_fresh_t  fresh_copy;   /* receiver: how it copies into
                                        untouched pages, after fallbacks */
    int                copy_engine_failed; /* do not try again */
    ucp_sppln_rma_group_t rma[UCP_SPPLN_MAX_GROUPS]; /* staged puts */
} ucp_sppln_worker_t;


enum {
    UCP_SPPLN_SIDE_SEND,
    UCP_SPPLN_SIDE_RECV
};


/* A staging slot of a transfer, with the completion of its puts */
typedef struct {
    uct_completion_t      comp;
    struct ucp_sppln_xfer *xfer;
    unsigned              chunk;   /* chunk it holds */
    size_t                filled;  /* sender: bytes held until sent;
                                      receiver: bytes arrived and copied */
    int                   copying; /* sender: copy engine filling it */
    ucs_copy_req_t        copy;
} ucp_sppln_slot_t;


enum {
    UCP_SPPLN_XFER_FLAG_PENDING  = UCS_BIT(0), /* in a lane's pending queue */
    UCP_SPPLN_XFER_FLAG_RTS_SENT = UCS_BIT(1),
    UCP_SPPLN_XFER_FLAG_RTR      = UCS_BIT(2), /* sender: RTR arrived;
                                                  receiver: RTR sent */
    UCP_SPPLN_XFER_FLAG_NOTIFY   = UCS_BIT(3), /* sender: put done, its
                                                  notification not sent */
    UCP_SPPLN_XFER_FLAG_DONE     = UCS_BIT(4), /* request completed */
    UCP_SPPLN_XFER_FLAG_WAITING  = UCS_BIT(5), /* in the worker's waitq */
    UCP_SPPLN_XFER_FLAG_FRESH    = UCS_BIT(6)  /* receiver: the destination
                                                  was not resident */
};


/* One staged transfer, on either side */
typedef struct ucp_sppln_xfer {
    ucp_request_t       *req;       /* sender: user's; receiver: internal */
    ucp_worker_h        worker;
    ucs_queue_elem_t    queue;      /* in the worker's waitq */
    int                 side;
    ucp_sppln_path_t    path;
    unsigned            flags;
    int                 group;      /* staging group, -1 if none */
    ucs_status_t        status;
    unsigned            refcount;   /* request + puts in flight */
    ucp_sppln_sched_t   sched;
    ucp_sppln_slot_t    slot[UCP_SPPLN_NUM_SLOTS];
    ucp_lane_index_t    am_lane;
    ucp_lane_index_t    rma_lane;
    unsigned            next_copy;  /* sender: next chunk to copy in */
    unsigned            next_put;   /* sender: next chunk to send */
    size_t              put_offset; /* sender: bytes of next_put sent */
    unsigned            acked;      /* sender: chunks freed by receiver */
    unsigned            acks;       /* receiver: acks to send */
    unsigned            acks_sent;
    uint64_t            remote_id;  /* peer's request id */
    uint64_t            remote_slot[UCP_SPPLN_NUM_SLOTS];
    uint8_t             remote_group;
    ucp_rkey_h          rkey;
    uct_rkey_t          tl_rkey;
    size_t              received;   /* receiver: bytes copied out */
    /* receiver: per slot, the sub-blocks of its chunk that arrived, so that
     * each counts once and a chunk is complete only without holes */
    uint64_t *sub_seen;
    unsigned sub_words; /* 64-bit words of sub_seen per slot */
    ucp_sppln_rts_params_t params;  /* receiver: from the RTS */
    uct_worker_cb_id_t  copy_cb_id; /* sender: watches engine copies */
    ucs_copy_engine_t   *copy_engine; /* sender: stages chunks, or NULL */
} ucp_sppln_xfer_t;


/* Ways this process's rndv/sppln can break the protocol on purpose, so
 * that the test harness can check that a peer detects each one and fails
 * the transfer with a clear error: a peer is never trusted. */
enum {
    UCP_SPPLN_FAULT_DUP_SUB   = UCS_BIT(0), /* sender: the first sub-block
                                               of the last chunk again, in
                                               place of its second */
    UCP_SPPLN_FAULT_SHORT_SUB = UCS_BIT(1), /* sender: the last sub-block
                                               one byte short */
    UCP_SPPLN_FAULT_DUP_RTR   = UCS_BIT(2), /* receiver: the RTR twice */
    UCP_SPPLN_FAULT_SHORT_RTR = UCS_BIT(3), /* receiver: an RTR without its
                                               rkey */
    UCP_SPPLN_FAULT_DUP_ACK   = UCS_BIT(4), /* receiver: the first ACK
                                               twice */
    UCP_SPPLN_FAULT_ACK_AHEAD = UCS_BIT(5) /* receiver: the first ACK names
                                               a chunk not sent yet */
};

/* Set by ucp_proto_sppln_test_fault(); 0 outside the test harness */
extern unsigned ucp_sppln_faults;

/* Break the protocol as 'faults' (UCP_SPPLN_FAULT_*) says, once each */
void ucp_proto_sppln_test_fault(unsigned faults);

/* Whether to commit this fault now (it is then cleared) */
static UCS_F_ALWAYS_INLINE int ucp_sppln_fault_take(unsigned fault)
{
    if (ucs_likely(!(ucp_sppln_faults & fault))) {
        return 0;
    }
    ucp_sppln_faults &= ~fault;
    return 1;
}

/* Whether a packed ucp rkey of 'length' bytes from a peer is well-formed:
 * every per-md key it lists lies within it (UCX's unpacking trusts the
 * sizes it reads) */
int ucp_sppln_rkey_buf_valid(const void *buffer, size_t length);

/* proto_sppln_model.c */
const ucp_sppln_config_t *ucp_sppln_config(void);

/* Whether sub-blocks of sub_size bytes tile slots of slot_size bytes within
 * the notify data's sub-block index */
int ucp_sppln_geometry_valid(size_t slot_size, size_t sub_size);

/* The first chunk of a message of this length */
size_t ucp_sppln_first_chunk(const ucp_sppln_priv_t *spriv, size_t length);

ucs_status_t ucp_sppln_sched_init(ucp_sppln_sched_t *sched, size_t length,
                                  ucp_sppln_path_t path, size_t c0, double q,
                                  size_t slot_size, size_t sub_size);

void ucp_sppln_sched_cleanup(ucp_sppln_sched_t *sched);

/* The size of the chunk at offset (a chunk boundary) of the same schedule */
size_t ucp_sppln_sched_chunk(size_t length, size_t offset, size_t c0,
                             double q, size_t slot_size);

/* Residency of a buffer, judged by its first page */
ucs_calib_pages_t ucp_sppln_pages(const void *buffer);

int ucp_sppln_rcache_hit(ucp_context_h context, const void *buffer,
                         size_t length);

int ucp_sppln_lane_tl_enabled(ucp_context_h context,
                              ucp_rsc_index_t rsc_index);

/* Whether this buffer was staged (copied) before; remembers it if not */
int ucp_sppln_staged_before(ucp_sppln_worker_t *sw, const void *buffer,
                            size_t length);


ucp_sppln_path_t ucp_sppln_choose(ucp_worker_h worker, ucp_sppln_worker_t *sw,
                                  const ucp_sppln_priv_t *spriv,
                                  const void *buffer, size_t length);

void ucp_sppln_staged_track(ucp_sppln_worker_t *sw);

void ucp_sppln_staged_untrack(ucp_sppln_worker_t *sw);

void ucp_sppln_priv_model(ucp_sppln_priv_t *spriv, const char *dev_name,
                          size_t max_put);

void ucp_sppln_perf(const ucp_sppln_priv_t *spriv, ucp_proto_caps_t *caps,
                    double ctrl_time);

extern const char *ucp_sppln_path_names[];
extern const char *ucp_sppln_fresh_names[];


/* proto_rma_staged.c */
ucs_status_t ucp_rma_staged_start(ucp_request_t *req, ucp_sppln_worker_t *sw,
                                  ucp_md_index_t md_index, size_t max_frag);

ucs_status_t ucp_rma_staged_progress(ucp_request_t *req, ucp_lane_index_t lane,
                                     ucp_md_index_t md_index,
                                     ucp_md_index_t rkey_index, size_t c0,
                                     double q);

void ucp_rma_staged_abort(ucp_request_t *req, ucs_status_t status);


/* proto_sppln_staging.c */

/* The worker's state and counters, without staging regions */
ucs_status_t ucp_sppln_worker_state(ucp_worker_h worker,
                                    ucp_sppln_worker_t **sw_p);

/* The same, with the staging regions registered */
ucs_status_t ucp_sppln_worker_get(ucp_worker_h worker,
                                  ucp_sppln_worker_t **sw_p);

int ucp_sppln_group_get(ucp_sppln_worker_t *sw, int side);

void ucp_sppln_group_put(ucp_worker_h worker, int side, int group);

void *ucp_sppln_slot_ptr(ucp_sppln_worker_t *sw, int side, int group,
                         unsigned slot);

uct_mem_h ucp_sppln_slot_memh(ucp_sppln_worker_t *sw, int side,
                              ucp_md_index_t md_index);

void ucp_sppln_xfer_put(ucp_sppln_xfer_t *xfer);

void ucp_sppln_kick(ucp_sppln_xfer_t *xfer);

void ucp_sppln_wait_group(ucp_sppln_worker_t *sw, ucp_sppln_xfer_t *xfer);

ucs_copy_engine_t *ucp_sppln_copy_engine(ucp_sppln_worker_t *sw,
                                         const ucp_sppln_priv_t *spriv);

ucs_status_t ucp_sppln_send_ctrl(ucp_sppln_xfer_t *xfer, ucp_lane_index_t lane,
                                 uint8_t am_id, uct_pack_callback_t pack_cb);


/* proto_sppln_send.c / proto_sppln_recv.c */
ucs_status_t ucp_sppln_send_progress(uct_pending_req_t *self);

ucs_status_t ucp_sppln_recv_progress(uct_pending_req_t *self);


/**
 * Receiver side of a flagged RTS (called from ucp_proto_rndv_receive_start).
 */
void ucp_proto_sppln_receive_start(ucp_worker_h worker, ucp_request_t *recv_req,
                                   const ucp_rndv_rts_hdr_t *rts,
                                   const void *params, size_t params_length);


/**
 * Release the staging regions of a worker (from ucp_worker_destroy).
 */
void ucp_proto_sppln_worker_cleanup(ucp_worker_h worker);


/**
 * ATS hook: an active message receiver that does not take a staged message
 * answers its RTS with UCX's ATS. Ends the staged send and returns 1 for a
 * request of rndv/sppln's own staged transfer; 0 for any other request.
 */
int ucp_proto_sppln_ats(ucp_worker_h worker, const ucp_reply_hdr_t *rephdr);


/**
 * Path counters of a worker, NULL when it never used the protocol.
 */
const ucp_sppln_stats_t *ucp_proto_sppln_stats(ucp_worker_h worker);

/* Notes the UCX_HCR_SPPLN_* variables as used (ucp_worker_create()) */
void ucp_proto_sppln_config_mark_used(void);

#endif
