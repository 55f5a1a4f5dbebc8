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
 *  - rvma_put.c     the initiator: ucp_rvma_put_nbx() and its request;
 *  - rvma_fast.c    the fast path on lanes with put-with-notify (hcr): its
 *                   whole picture, life cycle and endpoint query;
 *  - rvma_lease.c   fast path, initiator: the lease of a ring, one
 *                   write-with-immediate per put;
 *  - rvma_ring.c    fast path, target: the leased rings and their records;
 *  - rvma_ack.c     fast path: acknowledging records in batches;
 *  - rvma_read.c    fast path puts too large to copy: the target reads the
 *                   data from the initiator's buffer into the posted one.
 *
 * Wire protocol: a put is one UCP active message (id UCX_RVMA_AM_ID)
 * whose user header is ucp_rvma_put_hdr_t and whose data is the put's data
 * (not sent with UCP_AM_SEND_FLAG_REPLY: in UCX 1.13.1 proto v2, such a
 * message crashes when it has to wait for resources; the header carries
 * the endpoint id for the reply instead);
 * UCP sends it eagerly or by rendezvous by size, and on rc transports an
 * eager put is one RC SEND. The target answers every put with an active
 * message (id + 1) holding ucp_rvma_reply_hdr_t, which completes the
 * initiator's request with the target's verdict.
 *
 * Fast path (the picture in rvma_fast.c): where the active message lane has
 * uct_ep_put_notify_zcopy(), the target leases each initiator a registered
 * ring; a put of up to UCX_RVMA_FAST_MAX bytes is then one
 * write-with-immediate of a ucp_rvma_rec_hdr_t, the data and a trailer word
 * into that ring. The target finds the record by polling the ring for the
 * trailer, or by the write's completion, and acknowledges the records in
 * batches: in the header of its own next fast put to the initiator, or else
 * by an ack message (ucp_rvma_ack_hdr_t) one progress round later. A put of
 * up to UCX_RVMA_READ_MAX bytes that is too large to copy is a record
 * naming the initiator's buffer instead (UCP_RVMA_REC_LENGTH_READ,
 * ucp_rvma_read_body_t), which the target reads from (rvma_read.c).
 *
 * Peers are not trusted. Every message is checked for its length and fields
 * before use; an endpoint id is used only once the worker is found to have
 * that endpoint (ucp_rvma_worker_ep_by_id()), and a reply only for a put
 * that awaits it (its request id and seq). What no operation of ours can be
 * told apart from a late message (an unknown id, a stale ack) is dropped
 * with a debug line; what a broken peer sends about our operations fails
 * them with UCS_ERR_IO_ERROR and an error line: a bad reply fails its put,
 * a bad ack the fast path of its endpoint (ucp_rvma_lease_fail(): its puts
 * in flight fail, the later ones go by active message).
 */

#include <ucp/api/ucpx_rvma.h>
#include <ucp/core/ucp_types.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/queue.h>
#include <uct/api/uct.h>
#include <uct/api/v2/uct_v2.h>


/* Active message ids relative to UCX_RVMA_AM_ID */
enum {
    UCP_RVMA_AM_PUT       = 0, /* put, generic path */
    UCP_RVMA_AM_REPLY     = 1, /* its verdict */
    UCP_RVMA_AM_LEASE_REQ = 2, /* fast path: initiator asks for a ring */
    UCP_RVMA_AM_LEASE     = 3, /* fast path: the ring, or a refusal */
    UCP_RVMA_AM_ACK       = 4, /* fast path: records handled */
    UCP_RVMA_AM_COUNT
};


/* Fast path limits */
#define UCP_RVMA_RING_ALIGN      64    /* records start on this boundary */
#define UCP_RVMA_RING_ID_BITS    8     /* notify data: ring id | position */
#define UCP_RVMA_RING_POS_BITS   (UCT_PUT_NOTIFY_DATA_BITS - \
                                  UCP_RVMA_RING_ID_BITS)
#define UCP_RVMA_MAX_RINGS       UCS_BIT(UCP_RVMA_RING_ID_BITS)
#define UCP_RVMA_RING_MAX_SIZE   (UCP_RVMA_RING_ALIGN * \
                                  UCS_BIT(UCP_RVMA_RING_POS_BITS))
#define UCP_RVMA_LEASE_INFLIGHT  1024  /* unacknowledged records, power of 2 */
#define UCP_RVMA_LEASE_READS     16    /* unacknowledged read records */
#define UCP_RVMA_ACK_MAX_ERR     16
#define UCP_RVMA_CTL_MAX         256   /* largest control message */


/* User header of a put */
typedef struct ucp_rvma_put_hdr {
    uint64_t vaddr;  /* target window */
    uint64_t offset; /* offset in the window's current buffer */
    uint64_t req_id; /* initiator's request, echoed in the reply */
    uint64_t ep_id;  /* the target's endpoint to the initiator, for the
                        reply */
    uint64_t seq; /* the initiator's number of the put, echoed in the
                        reply: with req_id, it names this put only */
} UCS_S_PACKED ucp_rvma_put_hdr_t;


/* User header of a reply */
typedef struct ucp_rvma_reply_hdr {
    uint64_t req_id;
    uint64_t seq;
    int8_t   status; /* ucs_status_t */
} UCS_S_PACKED ucp_rvma_reply_hdr_t;


/* ucp_rvma_rec_hdr_t flags */
#define UCP_RVMA_REC_FLAG_ACK    UCS_BIT(0) /* ack_cons and ack_seq are valid */

/* In ucp_rvma_rec_hdr_t::length: the record holds no data but where to read
 * it from (ucp_rvma_read_body_t), and the other bits are that body's size.
 * Records that hold data are far smaller than 2^31 bytes. */
#define UCP_RVMA_REC_LENGTH_READ UCS_BIT(31)


/* A put in a ring (fast path): this header, then the data, then padding to
 * the next multiple of UCP_RVMA_RING_ALIGN whose last 8 bytes are the
 * record's trailer: its sequence number and length, and bit 63 set. A
 * record may carry the
 * acknowledgement of the ring its target leased to the writer (the reverse
 * direction of the same endpoint pair), as an ack message would, without
 * the errors. */
typedef struct ucp_rvma_rec_hdr {
    uint64_t vaddr;
    uint64_t offset;
    uint32_t length;
    uint32_t seq;      /* records written to this ring before, mod 2^32 */
    uint64_t ack_cons; /* reverse ring: bytes consumed */
    uint32_t ack_seq;  /* reverse ring: records handled */
    uint32_t flags;    /* UCP_RVMA_REC_FLAG_xx */
} UCS_S_PACKED ucp_rvma_rec_hdr_t;


/* The body of a read record: the put's data at the initiator; its packed
 * remote key follows */
typedef struct ucp_rvma_read_body {
    uint64_t address;
    uint64_t length;
} UCS_S_PACKED ucp_rvma_read_body_t;


/* Initiator -> target: lease me a ring */
typedef struct ucp_rvma_lease_req_hdr {
    uint64_t ep_id;        /* the target's endpoint to the initiator */
    uint64_t initiator_ep; /* the initiator's endpoint id, echoed back */
    char     component[UCT_COMPONENT_NAME_MAX]; /* whose rkey it can use */
} UCS_S_PACKED ucp_rvma_lease_req_hdr_t;


/* Target -> initiator: the ring (its packed rkey follows as data) */
typedef struct ucp_rvma_lease_hdr {
    uint64_t initiator_ep;
    uint64_t ring_addr;
    uint32_t ring_size;
    uint16_t ring_id;      /* UCP_RVMA_MAX_RINGS: refused */
} UCS_S_PACKED ucp_rvma_lease_hdr_t;


typedef struct ucp_rvma_ack_err {
    uint32_t seq;
    int8_t   status;       /* ucs_status_t */
} UCS_S_PACKED ucp_rvma_ack_err_t;


/* Target -> initiator: records up to seq handled, ring free up to cons;
 * the listed records failed */
typedef struct ucp_rvma_ack_hdr {
    uint64_t           initiator_ep;
    uint64_t           cons;
    uint32_t           seq;
    uint8_t            n_err;
    ucp_rvma_ack_err_t err[UCP_RVMA_ACK_MAX_ERR];
} UCS_S_PACKED ucp_rvma_ack_hdr_t;


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
typedef struct ucp_rvma_ring ucp_rvma_ring_t;


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

/* Initiator: the active message puts awaiting their reply, request id ->
 * the put's seq (ucp_rvma_put_hdr_t) */
KHASH_MAP_INIT_INT64(ucp_rvma_reply, uint64_t);

/* Endpoints that peers named by a direct id (their address), found among
 * the worker's endpoints */
KHASH_SET_INIT_INT64(ucp_rvma_ep);

typedef struct ucp_rvma_lease ucp_rvma_lease_t;
KHASH_MAP_INIT_INT64(ucp_rvma_lease, ucp_rvma_lease_t*);



/* Per-worker RVMA state (worker->rvma) */
struct ucp_rvma_worker {
    ucp_worker_h       worker;
    unsigned           am_id;     /* first of the active message ids */
    int fast; /* UCX_RVMA_FAST */
    size_t ring_size; /* UCX_RVMA_RING_SIZE */
    size_t fast_max; /* UCX_RVMA_FAST_MAX */
    size_t read_max; /* UCX_RVMA_READ_MAX */
    khash_t(ucp_rvma_win) wins;   /* open and closed windows by vaddr */
    khash_t(ucp_rvma_lease) leases; /* initiator: by endpoint */
    ucp_rvma_ring_t    *rings[UCP_RVMA_MAX_RINGS]; /* target: by ring id */
    unsigned           rings_end; /* target: no ring at this id or above
                                     (not lowered when rings go) */
    unsigned           num_rings;
    unsigned max_rings; /* UCX_RVMA_MAX_RINGS */
    int ring_poll; /* UCX_RVMA_RING_POLL */
    ucs_list_link_t    ack_list;  /* target: rings owing an ack */
    uct_worker_cb_id_t ring_cb_id; /* polls the rings, ages the acks */
    ucs_mpool_t        buf_mp;    /* ucp_rvma_buf_t */
    ucs_mpool_t        msg_mp;    /* ucp_rvma_msg_t */
    ucs_queue_head_t   deferred;  /* puts waiting for their endpoint's
                                     wire-up (rvma_put.c) */
    khash_t(ucp_rvma_reply) replies; /* initiator: puts awaiting a reply */
    uint64_t put_seq; /* initiator: puts sent by message */
    khash_t(ucp_rvma_ep) eps; /* endpoints peers named by a direct id */
    uct_worker_cb_id_t deferred_cb_id;
};


/* Target: a fast path put being read from the initiator's buffer into the
 * posted one (rvma_read.c), in reads of chunk bytes (the last one less) */
typedef struct ucp_rvma_read {
    uct_completion_t  comp;      /* the reads in flight, and one more until
                                    all are issued */
    ucp_rvma_worker_t *rw;
    ucp_rvma_ring_t   *ring;     /* told when it is done; NULL once gone */
    uct_ep_h          uct_ep;
    uct_md_h          md;
    uct_component_h   component;
    ucp_rvma_win_h    win;
    ucp_rvma_buf_t    *buf;
    void              *dst;
    uint64_t          src;
    size_t            length;
    size_t            issued;    /* bytes of reads issued */
    size_t            chunk;
    uct_mem_h         memh;      /* of dst */
    uct_rkey_bundle_t rkey;      /* of src */
} ucp_rvma_read_t;


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
    uint8_t                ctl[UCP_RVMA_CTL_MAX]; /* a reply, lease or ack
                                                     being sent */
    struct {
        ucp_rvma_win_h     win;
        ucp_rvma_buf_t     *buf;
        ucp_ep_h           reply_ep;
        uint64_t           req_id;
        uint64_t seq;
        size_t             length;
    } fetch;                      /* target: a rendezvous put being fetched */
    ucp_rvma_read_t        read;  /* target: a fast path put being read */
} ucp_rvma_msg_t;


typedef enum {
    UCP_RVMA_LEASE_REQUESTED,
    UCP_RVMA_LEASE_READY,
    UCP_RVMA_LEASE_REFUSED, /* no fast path on this endpoint */
    UCP_RVMA_LEASE_FAILED /* the target broke the protocol: no fast path
                               any more; registrations kept until the
                               endpoint goes */
} ucp_rvma_lease_state_t;


/* Initiator: the registration of a read record's buffer, kept until the
 * target acknowledges the record */
typedef struct ucp_rvma_lease_read {
    uint32_t seq;
    uct_mem_h memh;
} ucp_rvma_lease_read_t;


/* Initiator: a ring leased from the target of one endpoint */
struct ucp_rvma_lease {
    ucp_rvma_lease_state_t state;
    uct_ep_h uct_ep; /* the lane it was leased for */
    uct_md_h md; /* the lane's memory domain */
    uct_component_h component;
    uct_rkey_bundle_t rkey; /* the target's ring */
    uint64_t raddr;
    size_t size;
    uint16_t ring_id;
    void *staging; /* registered mirror of the ring */
    uct_mem_h memh;
    uint64_t head; /* bytes written, skips included */
    uint64_t tail; /* bytes the target has consumed */
    uint32_t seq; /* records written */
    uint32_t acked_seq; /* records acknowledged */
    uint64_t puts; /* sent by the fast path */
    size_t read_min; /* puts read by the target: from */
    size_t read_max; /* this size to this; 0: none */
    size_t rkey_size; /* packed, in a read record */
    ucp_rvma_lease_read_t reads[UCP_RVMA_LEASE_READS];
    unsigned reads_head;
    unsigned reads_tail;
    ucp_rvma_ring_t *ring; /* the target leased us this one: its
                                         acks ride on our records */
    uint64_t req_id[UCP_RVMA_LEASE_INFLIGHT];
};


/* Bytes a record of length data bytes takes in a ring */
static UCS_F_ALWAYS_INLINE size_t ucp_rvma_rec_size(size_t length)
{
    return ucs_align_up_pow2(sizeof(ucp_rvma_rec_hdr_t) + length +
                                     sizeof(uint64_t),
                             UCP_RVMA_RING_ALIGN);
}

/* A record's last 8 bytes. Never 0, which is what the target leaves where a
 * trailer could be (ucp_rvma_ring_clear()). */
static UCS_F_ALWAYS_INLINE uint64_t ucp_rvma_rec_trailer(uint32_t seq,
                                                         size_t length)
{
    return UCS_BIT(63) | ((uint64_t)length << 32) | seq;
}


/* Acknowledgement owed by a ring: it waits a progress round for a record
 * going back to carry it */
typedef enum {
    UCP_RVMA_ACK_NONE,
    UCP_RVMA_ACK_OWED, /* since this progress round */
    UCP_RVMA_ACK_OVERDUE /* since the last one: send it */
} ucp_rvma_ack_state_t;


/* Target: a ring leased to the initiator of one endpoint */
struct ucp_rvma_ring {
    ucp_rvma_worker_t *rw;
    uint16_t id;
    ucp_ep_h ep; /* to the initiator, for the acks */
    uint64_t initiator_ep;
    void *base;
    size_t size;
    uct_md_h md;
    uct_mem_h memh;
    uint64_t cons; /* bytes consumed, skips included */
    uint64_t acked_cons;
    uint32_t seq; /* records handled */
    uint32_t notified; /* notifications handled */
    uint32_t acked_seq;
    uint8_t n_err;
    ucp_rvma_ack_err_t err[UCP_RVMA_ACK_MAX_ERR];
    ucp_rvma_lease_t *lease; /* our lease on the initiator's
                                            ring: our records carry its
                                            acks */
    int ack_in_records; /* they may */
    uint64_t ack_msgs; /* acks sent by message */
    uint64_t ack_carried; /* acks carried by our records */
    uint64_t taken_polled; /* records found by polling */
    uint64_t taken_notified; /* records taken at completion */
    ucp_rvma_read_t *read; /* the record being read, which
                                            the records behind wait for */
    size_t read_pos; /* its place in the ring */
    size_t read_rec_size;
    ucp_rvma_ack_state_t ack_owed; /* not NONE: in rw->ack_list */
    ucs_list_link_t list;
    unsigned dropped_reqs; /* lease requests dropped since */
};


/* rvma_worker.c */
/* Ways this process's RVMA can break its protocol on purpose, so that the
 * test harness can check that a peer holds: a peer is never trusted */
enum {
    UCP_RVMA_FAULT_LEASE_REQ_AGAIN   = UCS_BIT(0), /* initiator: ask for a
                                                       ring UCP_RVMA_MAX_RINGS
                                                       more times */
    UCP_RVMA_FAULT_LEASE_NO_RKEY     = UCS_BIT(1), /* target: a lease without
                                                       its rkey */
    UCP_RVMA_FAULT_LEASE_REQ_SHORT   = UCS_BIT(2), /* initiator: a lease
                                                       request one byte
                                                       short */
    UCP_RVMA_FAULT_NOTIFY_NO_RING    = UCS_BIT(3), /* initiator: notify a ring
                                                       id the target does not
                                                       lease */
    UCP_RVMA_FAULT_ACK_SHORT         = UCS_BIT(4), /* target: an ack message
                                                       one byte short instead
                                                       of the ack */
    UCP_RVMA_FAULT_ACK_REPLAY        = UCS_BIT(5), /* target: the first ack
                                                       message again after the
                                                       second */
    UCP_RVMA_FAULT_ACK_AHEAD         = UCS_BIT(6), /* target: an ack of one
                                                       record more than
                                                       written */
    UCP_RVMA_FAULT_ACK_UNKNOWN_EP    = UCS_BIT(7), /* target: an ack naming an
                                                       endpoint id the
                                                       initiator does not
                                                       have, before the ack */
    UCP_RVMA_FAULT_REPLY_STATUS      = UCS_BIT(8), /* target: a reply with a
                                                       status that is not one
                                                       (UCS_INPROGRESS) */
    UCP_RVMA_FAULT_REPLY_UNKNOWN_REQ = UCS_BIT(9) /* target: a reply naming
                                                       a request the initiator
                                                       does not have, before
                                                       the reply */
};

/* Set by ucp_rvma_test_fault(); 0 outside the test harness */
extern unsigned ucp_rvma_faults;

/* Break the protocol as 'faults' (UCP_RVMA_FAULT_*) says, once each */
void ucp_rvma_test_fault(unsigned faults);

void ucp_rvma_config_mark_used(void);

ucs_status_t ucp_rvma_worker_get(ucp_worker_h worker,
                                 ucp_rvma_worker_t **rw_p);

void ucp_rvma_worker_cleanup(ucp_worker_h worker);

ucs_status_t ucp_rvma_worker_set_handler(ucp_rvma_worker_t *rw, unsigned id,
                                         ucp_am_recv_callback_t cb);

ucs_status_t ucp_rvma_worker_send_ctl(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                                      unsigned id, const void *header,
                                      size_t header_length, const void *data,
                                      size_t length);

ucp_rvma_win_h ucp_rvma_worker_find_win(ucp_rvma_worker_t *rw, uint64_t vaddr);

ucs_status_t ucp_rvma_worker_add_win(ucp_rvma_worker_t *rw, ucp_rvma_win_h win);

void ucp_rvma_worker_remove_win(ucp_rvma_worker_t *rw, ucp_rvma_win_h win);

ucs_status_t
ucp_rvma_worker_ep_by_id(ucp_rvma_worker_t *rw, uint64_t id, ucp_ep_h *ep_p);

void ucp_rvma_worker_ep_forget(ucp_rvma_worker_t *rw, ucp_ep_h ep);

/* A status a peer sent: UCS_OK or an error UCX defines */
static UCS_F_ALWAYS_INLINE int ucp_rvma_peer_status_valid(int status)
{
    return (status <= UCS_OK) && (status > UCS_ERR_LAST);
}

/* rvma_win.c: accounting for the target side */
ucs_status_t ucp_rvma_win_accept(ucp_rvma_win_h win, uint64_t offset,
                                 size_t length, ucp_rvma_buf_t **buf_p);

void ucp_rvma_win_placed(ucp_rvma_win_h win, ucp_rvma_buf_t *buf,
                         size_t length, ucs_status_t status);

void ucp_rvma_win_free(ucp_rvma_win_h win);

/* rvma_target.c */
ucs_status_t ucp_rvma_target_accept(ucp_rvma_worker_t *rw, uint64_t vaddr,
                                    uint64_t offset, size_t length,
                                    ucp_rvma_win_h *win_p,
                                    ucp_rvma_buf_t **buf_p);

ucs_status_t ucp_rvma_target_place(ucp_rvma_worker_t *rw, uint64_t vaddr,
                                   uint64_t offset, const void *data,
                                   size_t length);

ucs_status_t ucp_rvma_target_put_handler(void *arg, const void *header,
                                         size_t header_length, void *data,
                                         size_t length,
                                         const ucp_am_recv_param_t *param);

/* rvma_put.c */
void ucp_rvma_put_cleanup(ucp_rvma_worker_t *rw);

void ucp_rvma_put_event(ucp_worker_h worker, uint64_t req_id,
                        ucs_status_t status, int sent);

ucs_status_t ucp_rvma_put_reply_handler(void *arg, const void *header,
                                        size_t header_length, void *data,
                                        size_t length,
                                        const ucp_am_recv_param_t *param);

/* rvma_fast.c */
/* Rings this worker leases to initiators (test harness) */
unsigned ucp_rvma_test_num_rings(ucp_worker_h worker);

ucs_status_t ucp_rvma_fast_init(ucp_rvma_worker_t *rw);

void ucp_rvma_fast_cleanup(ucp_rvma_worker_t *rw);

void ucp_rvma_ep_cleanup(ucp_ep_h ep);

const char *
ucp_rvma_md_component_name(ucp_context_h context, ucp_md_index_t md_index);

/* rvma_lease.c: initiator */
ucs_status_t ucp_rvma_fast_put(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                               uint64_t req_id, uint64_t vaddr,
                               uint64_t offset, const void *buffer,
                               size_t length);

ucp_rvma_lease_t *ucp_rvma_lease_find(ucp_rvma_worker_t *rw, ucp_ep_h ep);

ucp_rvma_lease_t *ucp_rvma_lease_by_id(ucp_rvma_worker_t *rw, uint64_t ep_id,
                                       ucp_rvma_lease_state_t state,
                                       ucp_ep_h *ep_p);

void ucp_rvma_lease_free(ucp_rvma_lease_t *lease);

void ucp_rvma_lease_release_reads(ucp_rvma_lease_t *lease, uint32_t seq);

void ucp_rvma_lease_fail(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                         ucp_rvma_lease_t *lease);

ucs_status_t ucp_rvma_lease_handler(void *arg, const void *header,
                                    size_t header_length, void *data,
                                    size_t length,
                                    const ucp_am_recv_param_t *param);

/* rvma_ring.c: target */
ucp_rvma_ring_t *ucp_rvma_ring_find(ucp_rvma_worker_t *rw, ucp_ep_h ep);

void ucp_rvma_ring_destroy(ucp_rvma_ring_t *ring);

void ucp_rvma_ring_read_done(ucp_rvma_ring_t *ring, ucs_status_t status);

ucs_status_t ucp_rvma_lease_req_handler(void *arg, const void *header,
                                        size_t header_length, void *data,
                                        size_t length,
                                        const ucp_am_recv_param_t *param);

/* rvma_ack.c: target */
void ucp_rvma_ring_acked(ucp_rvma_ring_t *ring);

ucs_status_t ucp_rvma_ring_ack(ucp_rvma_ring_t *ring);

void ucp_rvma_ring_ack_owed(ucp_rvma_ring_t *ring);

unsigned ucp_rvma_ack_progress(ucp_rvma_worker_t *rw);

/* rvma_ack.c: initiator */
void ucp_rvma_lease_ack(ucp_rvma_worker_t *rw, ucp_ep_h ep,
                        ucp_rvma_lease_t *lease, uint64_t cons, uint32_t seq,
                        unsigned n_err, const ucp_rvma_ack_err_t *err);

ucs_status_t ucp_rvma_ack_handler(void *arg, const void *header,
                                  size_t header_length, void *data,
                                  size_t length,
                                  const ucp_am_recv_param_t *param);

/* rvma_read.c */
ucs_status_t ucp_rvma_read_pack(uct_md_h md, const void *buffer,
                                size_t length, void *body, uct_mem_h *memh_p);

ucs_status_t ucp_rvma_read_start(ucp_rvma_worker_t *rw, ucp_rvma_ring_t *ring,
                                 ucp_ep_h ep, const ucp_rvma_rec_hdr_t *rec,
                                 size_t body_length, ucp_rvma_read_t **read_p);

ucs_status_t ucp_rvma_read_progress(ucp_rvma_read_t *read);

#endif
