/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_PROTO_SPPLN_MODEL_H_
#define UCP_PROTO_SPPLN_MODEL_H_

#include "proto_sppln_config.h"

#include <ucp/core/ucp_types.h>
#include <ucp/proto/proto.h>
#include <ucs/calib/calib.h>
#include <ucs/copy/copy_engine.h>


/*
 * The measured costs behind the staged protocols (rndv/sppln, put/choose,
 * get/choose): the cost model of a lane's device, the choice of a path per
 * message, the chunk schedule of the superpipeline, and the performance
 * ranges the protocols report to UCX's selection. The protocols themselves
 * are in rndv/rndv_sppln_*.c and rma/rma_choose.c, rma/rma_staged.c; the
 * staging memory in proto_sppln_staging.c.
 */


/* Staging slots per transfer and side: triple buffering (the sender reuses
 * a slot once the receiver acknowledged the chunk three before) */
#define UCP_SPPLN_NUM_SLOTS 3

/* Chunks are whole pages (but for a message's last) */
#define UCP_SPPLN_CHUNK_ALIGN 4096

/* Smallest sub-block the measured size is taken down to, and that a lane
 * must be able to put (a configured sub-block size instead) */
#define UCP_SPPLN_SUB_MIN (16 * UCS_KBYTE)

/* a registered buffer is sent eagerly in at most this many fragments
 * (ucp_sppln_eager_max()) */
#define UCP_SPPLN_EAGER_MAX_FRAGS 64

/* The RTS carries the growth ratio in fixed point, 1/1024 steps */
#define UCP_SPPLN_Q_WIRE_SCALE 1024.0

/*
 * Notify data of a sub-block put (UCT_PUT_NOTIFY_DATA_BITS bits), from the
 * top: the receive transfer's index in the receiver's table, its generation
 * (the pair is what the receiver handed the sender in the RTR), the slot,
 * and the sub-block's index in the slot.
 */
#define UCP_SPPLN_SUB_BITS  8
#define UCP_SPPLN_SLOT_BITS 2
#define UCP_SPPLN_GEN_BITS  11
#define UCP_SPPLN_RX_BITS   6

/* Selection priorities (cfg_priority) of the staged protocols: one above
 * those of the UCX protocols they take over from where both thresholds are
 * reached, the rendezvous RTS (60, proto_rndv.c) and put/get offload zcopy
 * (30, put_offload.c and get_offload.c) */
#define UCP_PROTO_SPPLN_PRIORITY      61
#define UCP_PROTO_RMA_CHOOSE_PRIORITY 31

/* Receive transfers in flight per worker (and the most staging groups per
 * side a worker may have) */
#define UCP_SPPLN_MAX_GROUPS UCS_BIT(UCP_SPPLN_RX_BITS)


/* The cost model of one lane's device and what the protocols derive from it
 * (in a protocol's private data) */
typedef struct {
    ucs_calib_model_t model;
    ucs_calib_derived_t derived;
    int have_model;
    size_t c0; /* first chunk of the superpipeline */
    double q; /* its growth ratio */
    size_t sub_size; /* bytes per notified put */
    int copy_async; /* the copy engine stages the sender's
                                         chunks, */
    ucs_copy_backend_t copy_backend; /* with this backend */
} ucp_sppln_lane_model_t;


/* Where a transfer is in its chunk schedule: chunks C_0 * q^i of whole
 * pages, at most a slot each. Both sides build it from the same parameters
 * (the RTS carries them), so they agree on every chunk boundary. */
typedef struct {
    size_t length; /* message bytes */
    size_t slot_size; /* largest chunk */
    double q;
    double next; /* the next chunk, as grown */
    size_t offset; /* where the next chunk starts */
    unsigned index; /* its number */
} ucp_sppln_sched_t;


/* A buffer staged once: the next send of it registers it (0: empty) */
typedef struct {
    uintptr_t address;
    size_t length;
} ucp_sppln_staged_t;


/* Buffers staged once, forgotten when unmapped */
#define UCP_SPPLN_STAGED_HASH 256

/* Registered buffers around the model's cached staging threshold, by size
 * class (log2 of the length): from the threshold on, the messages that go
 * zero-copy after a staged one took longer than zero-copy would have by the
 * model; below it, down to a UCP_SPPLN_CACHED_EXPLORE-th of it, one
 * message in UCP_SPPLN_CACHED_BACKOFF is staged all the same, and the
 * messages that stay staged after one that took less */
#define UCP_SPPLN_SIZE_CLASSES   64
#define UCP_SPPLN_CACHED_BACKOFF 64
#define UCP_SPPLN_CACHED_EXPLORE 4
/* The first of those staged below the threshold: not the first sends of a
 * registered buffer, which took 1.5-2x the steady state by every path
 * (bench/choice-matrix.c) */
#define UCP_SPPLN_CACHED_EXPLORE_FIRST 4
/* A staged message loses to zero-copy by the model only where it took this
 * much longer: the model's zero-copy time is a rate measured within one
 * process (a reused 16 MiB at 100 Gb/s on softverbs: 2.5 ms by the model,
 * 2.6-2.8 between two processes), and staged messages of one buffer took
 * 1.6-2.4 ms from one to the next, which flipped a size class to zero-copy
 * every few dozen messages. A host's slower periods, which the check is
 * for, made staging 1.3-3x slower (3.5-8.9 ms). */
#define UCP_SPPLN_CACHED_LOSS 1.2
/* Zero-copy sends of a registered buffer timed per size class: the staged
 * ones are checked against the faster of the last two, so that one slowed
 * by something else (the receiver registering its buffer) does not make
 * staging look better */
#define UCP_SPPLN_ZCOPY_SAMPLES 2

typedef struct {
    ucp_sppln_staged_t entry[UCP_SPPLN_STAGED_HASH];
    int tracked; /* unmap events reach the table */
    uint8_t cached_zcopy_left[UCP_SPPLN_SIZE_CLASSES];
    uint8_t cached_staged_left[UCP_SPPLN_SIZE_CLASSES];
    uint8_t cached_explore_count[UCP_SPPLN_SIZE_CLASSES];
    /* seconds per byte of the last zero-copy sends of registered buffers,
     * from the request's start to its completion (0: none) */
    double zcopy_byte_time[UCP_SPPLN_SIZE_CLASSES][UCP_SPPLN_ZCOPY_SAMPLES];
    uint8_t zcopy_next[UCP_SPPLN_SIZE_CLASSES];
    /* a staged message that did not beat zero-copy, as its time over
     * zero-copy's, until the next staged one of its size class confirms
     * it (0: none pending) */
    float cached_pending_ratio[UCP_SPPLN_SIZE_CLASSES];
    /* registered messages the checks would stage (one in
     * UCP_SPPLN_CACHED_BACKOFF goes zero-copy, timed) */
    uint8_t cached_refresh_count[UCP_SPPLN_SIZE_CLASSES];
} ucp_sppln_staged_table_t;


extern const char *ucp_sppln_path_names[];
extern const char *ucp_sppln_fresh_names[];


/* Whether sub-blocks of sub_size bytes tile slots of slot_size bytes within
 * the notify data's sub-block index */
int ucp_sppln_geometry_valid(size_t slot_size, size_t sub_size);


/* A transfer's schedule: fixed chunks of a slot for the bcopy path */
void ucp_sppln_sched_init(ucp_sppln_sched_t *sched, size_t length,
                          ucp_sppln_path_t path, size_t c0, double q,
                          size_t slot_size);

/* The next chunk: 1 with its offset and size, 0 past the last one */
int ucp_sppln_sched_next(ucp_sppln_sched_t *sched, size_t *offset_p,
                         size_t *size_p);

/* The number of chunks of a schedule */
unsigned ucp_sppln_sched_count(const ucp_sppln_sched_t *sched);

/* The size of the chunk at offset (a chunk boundary) of a schedule */
size_t ucp_sppln_sched_chunk(size_t length, size_t offset, size_t c0, double q,
                             size_t slot_size);


/* The first chunk of a message of this length */
size_t ucp_sppln_first_chunk(const ucp_sppln_config_t *config,
                             const ucp_sppln_lane_model_t *lmodel,
                             size_t length);


/* The sub-block size of a first send of this length (the lane's for a
 * buffer sent before) */
size_t ucp_sppln_first_send_sub(const ucp_sppln_config_t *config,
                                const ucp_sppln_lane_model_t *lmodel,
                                size_t length);


/* Whether the staged protocols run on the transport of this resource */
int ucp_sppln_lane_tl_enabled(ucp_context_h context, ucp_rsc_index_t rsc_index);


/* The model of a lane's device (md name), and the schedule and copy engine
 * use the settings and the model give; max_put: the lane's largest put */
void ucp_sppln_lane_model_init(ucp_sppln_lane_model_t *lmodel,
                               const ucp_sppln_config_t *config,
                               const char *md_name, size_t max_put);


/* Residency of a buffer, judged by its first page */
ucs_calib_pages_t ucp_sppln_pages(const void *buffer);


/* Whether UCP's registration cache holds the buffer registered already */
int ucp_sppln_rcache_hit(ucp_context_h context, const void *buffer,
                         size_t length);


void ucp_sppln_staged_track(ucp_sppln_staged_table_t *table);

void ucp_sppln_staged_untrack(ucp_sppln_staged_table_t *table);

/* Whether this buffer was staged (copied) before; remembers it if not */
int ucp_sppln_staged_before(ucp_sppln_staged_table_t *table, const void *buffer,
                            size_t length);


/* The path of a message: cached or sent before goes zero-copy below the
 * measured size from which staging beats it anyway, and so does one that
 * would wait for a staging group (staging_busy), else the measured
 * critical sizes decide; *probed_p tells whether the buffer's residency was
 * looked up for it (a system call), *check_p whether the message is a
 * registered buffer of a size whose staged sends are checked: staged, its
 * time goes to ucp_sppln_cached_staged_check(), zero-copy, to
 * ucp_sppln_cached_zcopy_timed() */
ucp_sppln_path_t
ucp_sppln_choose(ucp_context_h context, ucp_sppln_staged_table_t *staged,
                 const ucp_sppln_lane_model_t *lmodel, const void *buffer,
                 size_t length, int staging_busy, int *probed_p, int *check_p);


/* A registered buffer of @a length bytes was staged: @a since_start from
 * the request's start until its last puts completed, @a since_rtr of that
 * from the receiver's RTR. Where zero-copy would have taken less (timed
 * zero-copy sends of its size class, else the model), the next message of
 * its size class is staged too, and where zero-copy beats the faster of
 * the two by more than UCP_SPPLN_CACHED_LOSS, the next
 * UCP_SPPLN_CACHED_BACKOFF go zero-copy; below the model's threshold,
 * where one took less, the next ones are staged. Returns 1 when it backs
 * off. */
int ucp_sppln_cached_staged_check(ucp_sppln_staged_table_t *staged,
                                  const ucp_sppln_lane_model_t *lmodel,
                                  size_t length, double since_start,
                                  double since_rtr);


/* A zero-copy send of a registered buffer of @a length bytes, which
 * ucp_sppln_choose() asked to be timed, took @a seconds from its start to
 * its completion, with no other staged or timed send in flight */
void ucp_sppln_cached_zcopy_timed(ucp_sppln_staged_table_t *staged,
                                  size_t length, double seconds);


/* Largest message of a registered buffer that costs less sent eagerly, in
 * fragments of seg_size bytes, than by a rendezvous (0: none; no model) */
size_t
ucp_sppln_eager_max(const ucp_sppln_lane_model_t *lmodel, size_t seg_size);


/* The model this process measured for the device of an md (md name, which
 * may carry a suffix): 1, or 0 without one */
int ucp_sppln_find_model(const char *md_name, ucs_calib_model_t *model);


/* Whether a receiver faults the pages of an untouched destination in
 * slower than the network delivers them, by its device's measured model */
int ucp_sppln_recv_bound(const ucs_calib_model_t *model);


/* The performance ranges of rndv/sppln from the model, for a buffer that is
 * neither cached nor resident; ctrl_time: its control messages */
void ucp_sppln_perf(const ucp_sppln_lane_model_t *lmodel,
                    ucp_proto_caps_t *caps, double ctrl_time);

#endif
