/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_RNDV_SPPLN_H_
#define UCP_RNDV_SPPLN_H_

#include <ucp/proto/proto_sppln_staging.h>
#include <ucp/rndv/proto_rndv.h>


/*
 * rndv/sppln: a rendezvous that chooses, per message, between
 *  - zcopy: the message goes with the protocol UCX chooses without this one
 *    (its rendezvous, which registers the buffer or finds it in the
 *    registration cache), where the buffer is cached, was sent before, or
 *    the measured model says registering beats copying;
 *  - bcopy: copy through pre-registered staging slots in fixed chunks;
 *  - sppln: the same slots with a superpipeline: chunks grow geometrically
 *    (C_i = C_0 * q^i) so that copying chunk i+1 hides behind sending chunk
 *    i, the first copy hides behind the RTS/RTR round trip, and the receiver
 *    copies sub-blocks out while later ones still arrive.
 *
 *   sender (tag/rndv/sppln, am/rndv/sppln)      receiver (rndv/recv/sppln)
 *   RTS: schedule (C_0, q, slot, sub-block)  -->  matched: selected by the
 *   copy chunks 0.. into the local slots          RTS's flag; takes a
 *                                           <--   receive group: RTR (its
 *                                                 slots, rkey, notify tag)
 *   put chunk i in sub-blocks, each notified -->  copy each sub-block out
 *   (put with notification, or an AM after        as it lands; chunk done:
 *   the put on the same lane)               <--   ACK, where a later chunk
 *   slot i % 3 takes chunk i + 3 after the        takes its slot
 *   ACK of chunk i; done once the last puts       done when every byte is
 *   completed                                     copied out
 *
 * The last three chunks have no ACK (ucp_sppln_acks_owed()): on RC a put
 * completes once the peer has its data, so the sender is done when its
 * last puts completed, as UCX's rndv/put is, and the message's last
 * control message is off both sides' path (a fresh 256 KiB at 25 Gb/s on
 * softverbs: the receiver posted its ACK for 3 us between its last copy
 * and its completion).
 *
 * Files: rndv_sppln_send.c (the sender's protocols, the RTR and ACK
 * handlers), rndv_sppln_recv.c (the receiver's protocol, the sub-block
 * handler); proto/proto_sppln_model.c (settings, model, choice, schedule),
 * proto/proto_sppln_staging.c (staging memory, per-message state).
 *
 * Nothing from a peer is trusted: every control message is checked for its
 * length and fields, and names its transfer by the request id and the
 * endpoint id it was given; a sub-block counts once and only with the
 * length its schedule gives it. A violation fails that transfer with
 * UCS_ERR_IO_ERROR and an error line on the side that saw it, and the other
 * side learns of it from an error ACK, the sender while it still waits for
 * an ACK or a put.
 */


/* Stages of the sender */
enum {
    /* choose the path; staged: take a send group, send the RTS */
    UCP_PROTO_RNDV_SPPLN_STAGE_RTS = UCP_PROTO_STAGE_START,

    /* copy chunks in and put them, as the RTR and the ACKs allow */
    UCP_PROTO_RNDV_SPPLN_STAGE_DATA
};


/* Stages of the receiver */
enum {
    /* take a receive group, send the RTR */
    UCP_PROTO_RNDV_SPPLN_STAGE_RTR = UCP_PROTO_STAGE_START,

    /* send the ACKs owed; done after the last, or the error ACK */
    UCP_PROTO_RNDV_SPPLN_STAGE_ACK
};


/* Parameters of a staged transfer, after the RTS header, where UCX's RTS
 * has the packed rkey */
typedef struct {
    uint32_t c0; /* first chunk, bytes */
    uint32_t q_1024; /* growth ratio times 1024 */
    uint32_t slot_size; /* largest chunk */
    uint32_t sub_size; /* bytes per notified put */
    uint8_t path; /* ucp_sppln_path_t, for the receiver's counters */
} UCS_S_PACKED ucp_sppln_rts_params_t;


/* Ready-to-receive into staging: receiver -> sender */
typedef struct {
    uint64_t sreq_id; /* the sender's request */
    uint64_t ep_id; /* the receiver's endpoint, by the id the RTS
                           named it with */
    uint64_t rreq_id; /* the receiver's request */
    uint64_t slot_addr; /* the first of the three slots, which follow one
                           another */
    uint32_t slot_size; /* bytes per receive slot */
    uint32_t rx_tag; /* index and generation for the notify data */
    /* packed rkey of the receive slots follows */
} UCS_S_PACKED ucp_sppln_rtr_hdr_t;


/* Chunk consumed (or transfer failed): receiver -> sender */
typedef struct {
    uint64_t sreq_id;
    uint64_t ep_id; /* the receiver's endpoint, as in the RTR */
    uint32_t chunk; /* chunk whose slot is free again */
    int8_t status; /* UCS_OK, or why the receiver gave up */
} UCS_S_PACKED ucp_sppln_ack_hdr_t;


/* A sub-block notified by an active message after its put (lanes without
 * put with notification), as a put with notification delivers it, and the
 * receiver's request */
typedef struct {
    uct_put_notify_hdr_t super;
    uint64_t rreq_id;
} UCS_S_PACKED ucp_sppln_data_hdr_t;


/* A staging slot of a sender's transfer */
typedef struct {
    uct_completion_t comp; /* the chunk's puts in flight (and one more
                                 while they are posted) */
    size_t offset; /* the chunk's start in the message */
    size_t length; /* its bytes, 0 when the slot is free */
    size_t staged; /* its first bytes copied in: sub-blocks up to here
                      may be put */
    unsigned chunk; /* its number */
    int copying; /* the copy engine fills it */
    ucs_copy_req_t copy;
} ucp_sppln_send_slot_t;


/* A staging slot of a receiver's transfer */
typedef struct {
    size_t offset; /* the chunk's start in the message */
    size_t length; /* its bytes */
    size_t filled; /* bytes arrived and copied out */
    unsigned chunk; /* its number */
    /* its sub-blocks that arrived: each counts once, and a chunk is done
     * only without holes */
    uint64_t seen[UCS_BIT(UCP_SPPLN_SUB_BITS) / 64];
} ucp_sppln_recv_slot_t;


/* The state of one staged transfer (from the worker's xfer pool; the
 * request points to it) */
/*
 * Puts of a transfer posted and not completed yet, at most. The lane that
 * carries them carries the control messages of transfers the other way,
 * behind them: an RC send queue executes in order, on an HCA as on
 * softverbs. With every sub-block of three chunks posted at once, an RTR
 * or ACK waited behind up to three slots of data (1 ms at 25 Gb/s) before
 * it left, and a rank that sends and receives at once (an all-to-all)
 * stalled its peer's pipeline as much. Four sub-blocks keep the wire busy
 * over the sender's slowest reaction to a completion (copying a 1 MiB
 * chunk: 100 us; four 128 KiB sub-blocks are 170 us at 25 Gb/s, the model
 * makes sub-blocks larger on faster links) and bound that wait.
 */
#define UCP_SPPLN_MAX_POSTED 4

/* Most receive transfers into untouched destinations that a worker makes
 * without collapses after collapses were slow (ucp_sppln_recv_collapse()) */
#define UCP_SPPLN_COLLAPSE_BACKOFF_MAX 64

/* Bytes a sender stages per progress call while it waits for its RTR
 * (ucp_sppln_copy_idle()): about a microsecond of copying */
#define UCP_SPPLN_IDLE_COPY (16 * UCS_KBYTE)


/* The completion of one posted put: it counts for its slot's chunk too */
typedef struct {
    uct_completion_t comp;
    struct ucp_sppln_xfer *xfer;
    unsigned slot;
} ucp_sppln_put_comp_t;


typedef struct ucp_sppln_xfer {
    ucp_request_t *req;
    ucp_sppln_group_t *group; /* local staging group, or NULL */
    ucp_sppln_waiter_t waiter; /* waiting for a group */
    ucs_status_t status; /* why it failed, or UCS_OK */
    ucp_sppln_sched_t sched; /* sender: the next chunk to copy in;
                                       receiver: the next chunk a slot
                                       takes */
    unsigned n_chunks;
    ucp_sppln_path_t path;
    uint8_t pending; /* in a lane's pending queue */
    uint8_t waiting; /* in the worker's wait queue */
    uint8_t progressing; /* in its own progress function, which looks at
                            the slots again before it returns: a completion
                            there needs no new call */

    union {
        struct {
            ucp_sppln_send_slot_t slot[UCP_SPPLN_NUM_SLOTS];
            unsigned next_put; /* chunk to put next */
            size_t put_offset; /* its bytes posted */
            unsigned posted; /* puts in flight */
            int guarded; /* the slot of next_put holds a guard
                                count while its puts are posted */
            ucp_sppln_put_comp_t put_comp[UCP_SPPLN_MAX_POSTED];
            int notify_owed; /* its last put went out,
                                                  its notification did not */
            unsigned acked; /* chunks the receiver freed */
            unsigned copies; /* copy engine copies */
            int rtr; /* the RTR arrived */
            size_t copied; /* bytes staged so far */
            size_t ahead_max; /* at most this many before the
                                 RTR (ucp_sppln_copy_before_rtr()) */
            int ahead_done; /* staged that much, or all it
                               could, and waits for the RTR */
            size_t sub_size; /* bytes per notified put */
            int cached_check; /* a registered buffer the model
                                                  stages: its time is checked
                                                  (ucp_sppln_cached_staged_check()) */
            ucs_time_t start_time; /* when it started, if so */
            ucs_time_t rtr_time; /* when the RTR arrived, if so */
            uint64_t rreq_id; /* from the RTR */
            uint64_t remote_slot;
            uint32_t rx_tag;
            ucp_rkey_h rkey;
            uct_rkey_t tl_rkey;
            uct_worker_cb_id_t copy_cb_id; /* watches engine copies */
            uct_worker_cb_id_t idle_cb_id; /* stages while the RTR is
                                              awaited */
            ucs_copy_engine_t *copy_engine; /* or NULL */
        } send;

        struct {
            ucp_sppln_recv_slot_t slot[UCP_SPPLN_NUM_SLOTS];
            ucp_sppln_rts_params_t params; /* from the RTS */
            int rx_index; /* in the worker's table, or
                                                -1 */
            uint16_t generation;
            unsigned acks; /* ACKs owed so far (chunks consumed,
                              ucp_sppln_acks_owed() at most) */
            unsigned acks_sent;
            size_t received; /* bytes copied out */
            int rtr_sent;
            int fresh_prepared; /* ucp_sppln_recv_fresh_prepare() */
            int fresh_probed; /* ucp_sppln_recv_check_fresh() */
            int fresh; /* the destination was not
                                                 resident */
            int collapse; /* its whole huge pieces are
                                                 collapsed */
            size_t populated; /* its first bytes, faulted in
                                                 after the RTR */
            size_t populate_end; /* ... up to here, a piece at
                                                 a time (ucp_sppln_recv_populate()) */
            uct_worker_cb_id_t populate_cb_id;
            /* the whole pages of the destination registered with the
             * worker's userfaultfd (UCX_RNDV_SPPLN_FRESH_COPY=uffd), none
             * where uffd_end is 0 */
            uintptr_t uffd_start;
            uintptr_t uffd_end;
            unsigned uffd_present; /* whole pages it found present */
        } recv;
    };
} ucp_sppln_xfer_t;


/* Ways this process's rndv/sppln can break the protocol on purpose, so
 * that the test harness can check that a peer detects each one and fails
 * the transfer with a clear error: a peer is never trusted. */
enum {
    UCP_SPPLN_FAULT_DUP_SUB       = UCS_BIT(0), /* sender: the first sub-block
                                               of the last chunk it waits
                                               an ACK for again, in place
                                               of its second */
    UCP_SPPLN_FAULT_SHORT_SUB     = UCS_BIT(1), /* sender: the last sub-block
                                               of that chunk one byte
                                               short */
    UCP_SPPLN_FAULT_DUP_RTR       = UCS_BIT(2), /* receiver: the RTR twice */
    UCP_SPPLN_FAULT_SHORT_RTR     = UCS_BIT(3), /* receiver: an RTR without its
                                               rkey */
    UCP_SPPLN_FAULT_DUP_ACK       = UCS_BIT(4), /* receiver: the first ACK
                                               twice */
    UCP_SPPLN_FAULT_ACK_AHEAD     = UCS_BIT(5), /* receiver: the first ACK names
                                               a chunk not sent yet */
    UCP_SPPLN_FAULT_FOREIGN       = UCS_BIT(6), /* sender: the first sub-block
                                               notified with another
                                               generation (a transfer it
                                               does not own) */
    UCP_SPPLN_FAULT_SLOW_COLLAPSE = UCS_BIT(7) /* receiver: the next
                                                  collapse counts as slower
                                                  than small pages */
};

/* Set by ucp_proto_sppln_test_fault(); 0 outside the test harness */
extern unsigned ucp_sppln_faults;

/* Break the protocol as 'faults' (UCP_SPPLN_FAULT_*) says, once each */
void ucp_proto_sppln_test_fault(unsigned faults);

/* ACKs the receiver of a transfer of @a n_chunks chunks sends: one per chunk
 * whose slot a later chunk takes */
static UCS_F_ALWAYS_INLINE unsigned ucp_sppln_acks_owed(unsigned n_chunks)
{
    return (n_chunks > UCP_SPPLN_NUM_SLOTS) ? (n_chunks - UCP_SPPLN_NUM_SLOTS) :
                                              0;
}

/* Whether a control message being packed carries this fault; cleared by
 * ucp_sppln_fault_sent() once the message went out (a message is packed
 * again when the lane had no resources) */
static UCS_F_ALWAYS_INLINE int ucp_sppln_fault_pending(unsigned fault)
{
    return ucs_unlikely(ucp_sppln_faults & fault);
}

static UCS_F_ALWAYS_INLINE void ucp_sppln_fault_sent(unsigned fault)
{
    ucp_sppln_faults &= ~fault;
}

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


/* The notify data of sub-block 'sub' of slot 's' for a receive transfer */
static UCS_F_ALWAYS_INLINE uint32_t ucp_sppln_notify_data(uint32_t rx_tag,
                                                          unsigned slot,
                                                          unsigned sub)
{
    return (rx_tag << (UCP_SPPLN_SLOT_BITS + UCP_SPPLN_SUB_BITS)) |
           (slot << UCP_SPPLN_SUB_BITS) | sub;
}

/* A receive transfer's index and generation, as the RTR hands them out */
static UCS_F_ALWAYS_INLINE uint32_t ucp_sppln_rx_tag(int index,
                                                     uint16_t generation)
{
    return ((uint32_t)index << UCP_SPPLN_GEN_BITS) | generation;
}


/**
 * Receiver side of a flagged RTS (from ucp_proto_rndv_receive_start()): the
 * transfer's state, with the RTS's parameters, for the receive request
 * @a req, whose protocol is selected next. A failure here is the
 * transfer's: the protocol tells the sender.
 */
void ucp_proto_sppln_recv_prepare(ucp_worker_h worker, ucp_request_t *req,
                                  const void *params, size_t params_length);


/**
 * ATS hook: a receiver that does not take a staged message (an active
 * message dropped by the application, a receive buffer too small) answers
 * its RTS with UCX's ATS. Ends the staged send and returns 1 for a request
 * of rndv/sppln's own staged transfer; 0 for any other request.
 */
int ucp_proto_sppln_ats(ucp_worker_h worker, const ucp_reply_hdr_t *rephdr);

#endif
