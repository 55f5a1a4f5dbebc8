/*
 * softverbs: a userspace RDMA verbs emulator (internal definitions).
 *
 * Layers:
 *  - fabric (sv_fabric.c): one per-uid shared memory segment holding the
 *    emulated "hardware" state that other processes must see: process slots,
 *    the MR (key) table, QP/CQ/SRQ descriptors and their receive/completion
 *    rings, and a small heap for ring memory.
 *  - engine (sv_engine.c): the emulated NIC: executes send work requests,
 *    moves data with process_vm_readv/writev, checks keys, writes CQEs,
 *    models RNR/retry, the link and the async data mover thread.
 *  - verbs front end (sv_device.c, sv_mr.c, sv_cq.c, sv_qp.c): the ibv_*
 *    entry points, process-private objects wrapping the shared descriptors.
 *
 * Everything in the shared segment is addressed by offsets or table indices,
 * never by pointers, because each process maps it at a different address.
 */
#ifndef SV_H_
#define SV_H_

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SV_SHM_VERSION    8 /* bump with every layout change */
#define SV_SHM_MAGIC      0x73666f7476726273ULL
#define SV_MAX_DEVS       4
#define SV_MAX_PROCS      512
#define SV_MAX_MR         (1u << 16)
#define SV_MAX_QP         (1u << 14)
#define SV_MAX_CQ         (1u << 14)
#define SV_MAX_SRQ        (1u << 12)
#define SV_MAX_SGE        16
#define SV_MAX_RECV_SGE   16
#define SV_MAX_INLINE     512
#define SV_MAX_WR         (1u << 15)
#define SV_MAX_CQE        (1u << 20)
#define SV_QPN_BASE       0x100
/* a QPN carries its owner's process slot above bit 15 (qpn = slot << 15 |
 * (SV_QPN_BASE + table index)), so that a remote host can tell which
 * process serves it (sv_net.c); it stays below 2^24 as IB requires */
#define SV_QPN_SLOT_SHIFT 15
#define SV_ATOMIC_LOCKS   1024
#define SV_GRH_LEN        40
#define SV_HEAP_SIZE      (16ULL << 30)  /* sparse: only used pages cost */
#define SV_MTU            4096
#define SV_MAX_MSG        (1u << 31)

#define SV_CACHELINE      64
#define sv_aligned        __attribute__((aligned(SV_CACHELINE)))

#define SV_LOAD(_p)        __atomic_load_n((_p), __ATOMIC_ACQUIRE)
#define SV_STORE(_p, _v)   __atomic_store_n((_p), (_v), __ATOMIC_RELEASE)
#define SV_LOAD_RELAXED(_p) __atomic_load_n((_p), __ATOMIC_RELAXED)

/* ------------------------------------------------------------------------
 * Shared lock: a spinlock whose word holds the holder's pid, so that a
 * waiter can take it over when the holder process died inside the critical
 * section (the protected ring may then hold one half-written entry, which is
 * no worse than a NIC losing a packet).
 */
typedef struct {
    uint32_t owner;
} sv_lock_t;

void sv_lock(sv_lock_t *lock);
void sv_unlock(sv_lock_t *lock);

/* ------------------------------------------------------------------------
 * Ring: the one queue abstraction, used for receive queues, SRQs and CQs.
 *
 * size is a power of two; prod and cons are free-running 32-bit counters
 * (index = counter & (size - 1)), so full is prod - cons == size.
 *
 * Every entry carries a sequence word: the producer writes the entry, then
 * stores its sequence, sv_ring_seq(counter), with release ordering; a
 * consumer takes the entry at cons when an acquire load of its sequence
 * finds sv_ring_seq(cons). So a consumer never reads prod and a producer
 * reads cons only when its cached view (cons_seen) says the ring is full:
 * each side keeps to its own cache lines (the geometry line, written once;
 * the producer line; the consumer line), and a message between processes
 * moves the entry's line and nothing else, as an HCA's DMA of a CQE does:
 * every line that changes hands between two cores is on the message's
 * critical path.
 *
 * Several producers (a CQ: the local poster, the engine, initiators in
 * other processes, network threads) take prod_lock; several consumers (a
 * receive queue: the initiators and the owner's flush) take cons_lock;
 * a single side takes no shared lock beyond the owner's private one.
 * A stale entry (one lap old, or zero-filled) never matches: its sequence
 * is cons + 1 - size or 0, and every slot is written once before the
 * counters wrap.
 */
typedef struct {
    uint64_t off; /* entries, as an offset in the shared segment */
    uint32_t size; /* entries, power of two */
    uint32_t stride; /* bytes per entry */
    sv_lock_t prod_lock sv_aligned;
    uint32_t prod;
    uint32_t cons_seen; /* the producers' last look at cons */
    uint32_t retired; /* receive queues: entries whose completion the
                          * owner polled (or that a reset dropped) */
    sv_lock_t cons_lock sv_aligned;
    uint32_t cons;
} sv_ring_t;

static inline uint32_t sv_ring_seq(uint32_t counter)
{
    return counter + 1;
}

/*
 * A producer's room check: may one more entry go in while at most 'cap'
 * (at most size) are outstanding? (caller is the only producer, or holds
 * prod_lock). cons_seen and retired are both at most cons, so the nearer
 * of them to prod is a safe view; cons itself is read only when that view
 * says full. A receive queue's owner learns of consumed WQEs from its
 * receive completions (retired), as an HCA's driver does: an application
 * that keeps its queue full (every post follows a poll) never reads the
 * consumers' line.
 */
static inline int sv_ring_full(sv_ring_t *ring, uint32_t cap)
{
    uint32_t used_seen    = ring->prod - ring->cons_seen;
    uint32_t used_retired = ring->prod - SV_LOAD_RELAXED(&ring->retired);

    if ((used_seen < cap) || (used_retired < cap)) {
        return 0;
    }
    ring->cons_seen = __atomic_load_n(&ring->cons, __ATOMIC_ACQUIRE);
    return ring->prod - ring->cons_seen >= cap;
}

/* a line this thread is about to write, fetched for writing ahead of time
 * so that the stores do not wait for another core to give it up (a hint:
 * PREFETCHW, or a plain prefetch where the CPU has none) */
static inline void sv_prefetch_w(const void *p)
{
#if defined(__x86_64__)
    __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 1);
#endif
}

/* ------------------------------------------------------------------------
 * Shared descriptors
 */
typedef struct {
    uint32_t pid;          /* 0: free slot */
    uint32_t gen;
    uint64_t cookie;       /* random, also stored at cookie_addr in pid */
    uint64_t cookie_addr;
} sv_proc_t;

typedef struct {
    uint32_t key;          /* lkey == rkey; 0: free */
    uint16_t owner;        /* process slot */
    uint16_t dev;
    uint32_t pd;
    uint32_t access;
    uint64_t addr;         /* process virtual address */
    uint64_t iova;         /* address remote peers use */
    uint64_t length;
} sv_mr_t;

/* a receive WQE; entries start on a cache line, so that the header and
 * the first SGEs, all that most receives use, move in one line */
typedef struct {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t seq; /* sv_ring_seq() of its counter: posted */
    struct ibv_sge sge[SV_MAX_RECV_SGE];
} sv_aligned sv_rwqe_t;

/* a completion as the CQ ring holds it: one cache line */
typedef struct {
    struct ibv_wc wc;
    uint32_t pad[3];
    uint32_t seq; /* sv_ring_seq() of its counter: written */
} sv_cqe_t;
_Static_assert(sizeof(sv_cqe_t) == SV_CACHELINE, "a CQE is one line");

/*
 * A receive queue's ring has twice the entries that may be posted (cap):
 * the slot a post writes was consumed cap receives ago, so the poster can
 * fetch its line for writing ahead of time while the initiators read the
 * WQEs still posted. In a ring only as large as the queue, an application
 * that keeps it full would write the very slot the next initiator reads.
 */
typedef struct {
    uint32_t  max_sge;
    uint32_t  limit;       /* SRQ limit event threshold, 0: disarmed */
    uint32_t cap; /* WQEs that may be posted: ring.size / 2 */
    sv_ring_t ring; /* of sv_rwqe_t; consumers (initiators, the
                            * owner's flush) take ring.cons_lock */
} sv_rq_t;

typedef struct {
    uint32_t  in_use;
    uint16_t  owner;
    uint64_t  id;          /* unique, to detect reuse of the slot */
    uint32_t  armed;       /* 0: not armed, 1: solicited only, 2: any */
    uint32_t  events;      /* notifications not yet taken by get_cq_event */
    int32_t   chan_fd;     /* owner's eventfd of the completion channel */
    uint32_t  overrun;
    uint64_t  chan_id;
    sv_ring_t ring; /* of sv_cqe_t; producers take ring.prod_lock */
} sv_cq_t;

typedef struct {
    uint32_t in_use;
    uint16_t owner;
    uint32_t pd;
    uint64_t id;
    uint32_t async_bits;   /* SV_ASYNC_SRQ_LIMIT raised by a consumer */
    int32_t  async_fd;     /* the owner context's async eventfd */
    uint64_t ctx_id;
    sv_rq_t  rq;
} sv_srq_t;

typedef struct {
    uint32_t in_use;
    uint32_t qpn;
    uint64_t id;
    uint16_t owner;
    uint16_t dev;
    uint32_t type;         /* enum ibv_qp_type */
    uint32_t state;        /* enum ibv_qp_state, read by initiators */
    uint32_t pd;
    uint32_t rcq;          /* CQ table index */
    uint32_t srq;          /* SRQ table index + 1, 0: none */
    uint32_t qkey;
    uint32_t dest_qpn;
    uint32_t dlid;         /* the AV's destination LID: with dest_qpn, who
                            * may send to this QP (remote initiators) */
    uint32_t access;       /* qp_access_flags */
    uint32_t min_rnr_timer;
    uint32_t last_wqe;     /* LAST_WQE_REACHED raised (SRQ QPs) */
    uint32_t async_bits;   /* SV_ASYNC_*: events raised by other processes */
    int32_t  async_fd;     /* the owner context's async eventfd */
    uint64_t ctx_id;
    sv_rq_t  rq;
} sv_qp_t;

/* async events another process raises on a QP (responder errors) */
#define SV_ASYNC_ACCESS_ERR 1u   /* IBV_EVENT_QP_ACCESS_ERR */
#define SV_ASYNC_REQ_ERR    2u   /* IBV_EVENT_QP_REQ_ERR */
#define SV_ASYNC_LAST_WQE   4u   /* IBV_EVENT_QP_LAST_WQE_REACHED */
#define SV_ASYNC_SRQ_LIMIT  8u   /* IBV_EVENT_SRQ_LIMIT_REACHED (sv_srq_t) */

/* rdma_cm (sv_cm.h): a bound port of this host, the port space that the
 * kernel's rdma_cm keeps per host */
#define SV_CM_MAX_PORTS 4096
typedef struct {
    uint32_t in_use;
    uint16_t owner; /* process slot */
    uint16_t ps; /* enum rdma_port_space */
    uint16_t port; /* host order */
    uint8_t listening;
    uint8_t reuse; /* RDMA_OPTION_ID_REUSEADDR */
    uint32_t addr; /* IPv4, network order; 0: any */
    uint32_t gen; /* the owner slot's generation */
    uint64_t id; /* the owner's id cookie */
} sv_cm_port_t;

/* a process's rdma_cm mailbox: messages from processes of this host (and
 * from other hosts, through the process that took them off the wire) */
typedef struct {
    uint32_t pid; /* the owner, 0: none */
    uint32_t gen; /* the owner slot's generation */
    int32_t fd; /* the owner's eventfd, raised per message */
    uint32_t reserved;
    uint64_t fd_id; /* for sv_remote_fd() */
    sv_ring_t ring; /* of sv_cm_msg_t; producers take prod_lock */
} sv_cm_box_t;

#define SV_NCLASS 40

typedef struct {
    uint64_t        magic;
    uint32_t        version;
    uint32_t        reserved;
    pthread_mutex_t lock;      /* robust, process-shared: control path only */
    uint64_t        heap_brk;
    uint64_t        free_list[SV_NCLASS];
    uint32_t        next_mr, next_qp, next_cq, next_srq;
    uint64_t        next_id;
    sv_lock_t       atomic_locks[SV_ATOMIC_LOCKS];
    sv_proc_t       procs[SV_MAX_PROCS];
    sv_mr_t         mrs[SV_MAX_MR];
    sv_qp_t         qps[SV_MAX_QP];
    sv_cq_t         cqs[SV_MAX_CQ];
    sv_srq_t        srqs[SV_MAX_SRQ];
    sv_cm_box_t cm_boxes[SV_MAX_PROCS];
    sv_cm_port_t cm_ports[SV_CM_MAX_PORTS];
    uint32_t cm_next_port;
} sv_shm_t;

/* ------------------------------------------------------------------------
 * Configuration (environment, see README.md)
 */
typedef enum {
    SV_MOVER_AUTO,      /* small ops by the poster, large by the engine */
    SV_MOVER_INLINE,    /* the posting thread does every copy */
    SV_MOVER_ENGINE     /* the engine thread does every copy */
} sv_mover_t;

/* which limit memlock_limit is (named when a registration is refused) */
typedef enum {
    SV_MEMLOCK_RLIMIT, /* RLIMIT_MEMLOCK (ulimit -l) */
    SV_MEMLOCK_ENV, /* SOFTVERBS_MEMLOCK_LIMIT */
    SV_MEMLOCK_CAP /* none: the process has CAP_IPC_LOCK */
} sv_memlock_source_t;

typedef struct {
    int         ndevs;
    sv_mover_t  mover;
    size_t      engine_thresh;    /* AUTO: ops above this go to the engine */
    unsigned    engine_spin_us;   /* engine polls this long before sleeping */
    int         engine_help;      /* empty poll_cq runs queued engine work */
    uint64_t    memlock_limit;    /* bytes, UINT64_MAX: unlimited */
    sv_memlock_source_t memlock_source;
    unsigned    reg_cost_us;
    double      link_gbps;        /* 0: link model off */
    double      link_lat_us;
    int         create_dev_node;
    int         loopback_kernel;  /* same-process transfers by the kernel */
    char        shm_name[128];
    /* network data path (sv_net.c): IPv4 address of each device, network
     * order; net_naddr == 0: this host only */
    int         net_naddr;
    uint32_t    net_addr[SV_MAX_DEVS];
    unsigned    net_port;         /* process slot s listens on net_port + s */
    unsigned    net_spin_us;      /* net threads poll this long, then block */
    /* rdma_cm (sv_cm.h) */
    unsigned cm_port; /* the host's CM port (other hosts) */
    unsigned cm_timeout_ms; /* a connection request's answer */
    unsigned cm_send_delay_us; /* tests: a slow CM agent */
} sv_config_t;

/* ------------------------------------------------------------------------
 * Per-process state
 */
typedef struct {
    sv_shm_t       *shm;
    int             slot;
    pid_t           pid;
    uint64_t        cookie;
    sv_config_t     cfg;
    uint64_t        pinned;       /* bytes pinned by registrations */
    pthread_mutex_t lock;         /* process-private control lock */
} sv_global_t;

extern sv_global_t sv_g;

int      sv_init(void);               /* idempotent; 0 or errno */
void     sv_config_load(sv_config_t *cfg);
uint64_t sv_now_ns(void);
void     sv_delay_ns(uint64_t ns);
int      sv_proc_alive(int slot);
pid_t    sv_proc_pid(int slot);
int      sv_pid_alive(pid_t pid);
uint64_t sv_new_id(void);
int      sv_remote_fd(int slot, int fd, uint64_t id);
void     sv_shm_lock(void);
void     sv_shm_unlock(void);

/* the fw_ver ibv_query_device reports: the cost settings of cfg */
void sv_config_fw_ver(const sv_config_t *cfg, char *buf, size_t max);

static inline void *sv_ptr(uint64_t off)
{
    return (char *)sv_g.shm + off;
}

/* heap for ring memory, in the shared segment; caller holds sv_shm_lock() */
uint64_t sv_heap_alloc(size_t size, int owner);
void     sv_heap_free(uint64_t off);

static inline void *sv_ring_entry(sv_ring_t *ring, uint32_t counter)
{
    return (char *)sv_ptr(ring->off) +
           (size_t)(counter & (ring->size - 1)) * ring->stride;
}

int  sv_ring_init(sv_ring_t *ring, uint32_t min_entries, uint32_t stride,
                  int owner);
void sv_ring_fini(sv_ring_t *ring);

/* ------------------------------------------------------------------------
 * Process-private verbs objects
 */
struct sv_qp;

/*
 * A device context, laid out as rdma-core's providers lay theirs out: a
 * struct verbs_context first, whose last member is the struct ibv_context
 * that ibv_open_device() returns, so that verbs_get_ctx() and
 * verbs_get_ctx_op() (inline in verbs.h, used by applications and by other
 * providers' libraries such as libefa) find it right before the context.
 * The ibv_context is therefore NOT at the start of sv_context_t: go from one
 * to the other with sv_ctx() and sv_ibctx(), never with a cast.
 */
typedef struct sv_context {
    struct verbs_context vctx;
    int                dev;
    uint64_t           id;
    struct sv_qp      *qps;            /* under async_lock */
    struct sv_srq_priv *srqs;          /* under async_lock */
    uint64_t           link_free_ns;   /* link model: port busy until */
    pthread_mutex_t    async_lock;
    struct ibv_async_event async_q[256];
    unsigned           async_head, async_tail;
} sv_context_t;

static inline sv_context_t *sv_ctx(struct ibv_context *context)
{
    return (sv_context_t *)((char *)context -
                            offsetof(sv_context_t, vctx.context));
}

static inline struct ibv_context *sv_ibctx(sv_context_t *ctx)
{
    return &ctx->vctx.context;
}

typedef struct {
    struct ibv_pd ibpd;
    uint32_t      id;
} sv_pd_t;

typedef struct sv_mr {
    struct ibv_mr ibmr;
    uint32_t      idx;
    uintptr_t     pin_start, pin_end;
    struct sv_mr *next;
} sv_mr_priv_t;

typedef struct sv_channel {
    struct ibv_comp_channel ibch;
    uint64_t                id;
    pthread_mutex_t         lock;
    struct sv_cq           *cqs;
} sv_channel_t;

typedef struct sv_cq {
    struct ibv_cq      ibcq;
    uint32_t           idx;
    sv_cq_t           *s;
    sv_cqe_t *ents; /* the ring's entries, and */
    uint32_t mask; /* its size - 1: the poller's own
                                        * copy of the geometry */
    pthread_spinlock_t poll_lock;
    struct sv_cq      *chan_next;
} sv_cq_priv_t;

typedef struct sv_srq_priv {
    struct ibv_srq      ibsrq;
    uint32_t            idx;
    sv_srq_t           *s;
    pthread_spinlock_t  post_lock;
    struct sv_srq_priv *ctx_next;
} sv_srq_priv_t;

typedef struct {
    struct ibv_ah ibah;
    uint32_t      dlid;
    int           is_global;
    union ibv_gid dgid;
} sv_ah_t;

/* a send work request as the emulated NIC keeps it */
typedef struct {
    uint64_t       wr_id;
    uint32_t       opcode;         /* enum ibv_wr_opcode */
    uint32_t       flags;          /* IBV_SEND_* */
    uint32_t       num_sge;
    uint32_t       imm;            /* network order */
    uint64_t       length;         /* total bytes */
    uint64_t       raddr;
    uint32_t       rkey;
    uint32_t       remote_qpn;
    uint32_t       remote_qkey;
    uint32_t       dlid;
    uint64_t       compare_add;
    uint64_t       swap;
    uint64_t wire_ns; /* link model: its bytes start to arrive */
    uint64_t deliver_ns; /* link model: its last bytes arrive */
    struct ibv_sge sge[SV_MAX_SGE];
    uint8_t        inline_data[SV_MAX_INLINE];
} sv_swqe_t;

typedef struct sv_qp {
    struct ibv_qp      ibqp;
    uint32_t           idx;
    sv_qp_t           *s;
    sv_context_t      *ctx;
    sv_cq_priv_t      *scq, *rcq;
    sv_srq_priv_t     *srq;
    int                sq_sig_all;
    uint32_t           max_inline;
    uint32_t           max_send_sge;
    /* send queue: private, producer = posters (post_lock), consumer = the
     * executor holding 'busy' (a poster or the engine thread) */
    sv_swqe_t         *sq;
    uint32_t           sq_size;        /* power of two */
    uint32_t           sq_max;         /* max_send_wr */
    uint32_t           sq_tail;        /* posted (release by poster) */
    uint32_t           sq_head;        /* executed (release by executor) */
    uint32_t           sq_done;        /* completed: slots below are free */
    uint32_t           busy;           /* executor ownership flag */
    pthread_spinlock_t post_lock;
    pthread_spinlock_t rpost_lock;
    /* connection attributes */
    uint32_t           port;
    uint32_t           path_mtu;
    uint8_t            timeout, retry_cnt, rnr_retry, max_rd_atomic;
    uint8_t            max_dest_rd_atomic, sl;
    uint32_t           dlid;
    uint32_t           sq_psn, rq_psn;
    uint16_t           pkey_index;
    /* executor state for the WR at sq_head */
    int                rnr_left;       /* -1: not started */
    uint64_t           retry_at_ns;    /* blocked until */
    uint64_t           timeout_at_ns;  /* peer unresponsive: fail after */
    uint64_t           peer_id;
    sv_qp_t           *peer;
    struct sv_qp      *eng_next;
    struct sv_qp      *ctx_next;
    /* remote peer (sv_net.c): WRs in [sq_done, net_sent) are on the wire,
     * waiting for the responder's answer; both under net_lock */
    int                remote;         /* RC: dlid is on another host */
    struct sv_net_conn *net_conn;
    uint32_t           net_sent;
    pthread_mutex_t    net_lock;
    /* async events handed out by ibv_get_async_event (async_lock); the
     * acked count is ibqp.events_completed, and destroy waits for both to
     * match, as verbs requires */
    uint32_t           events_reported;
} sv_qp_priv_t;

/* data path entry points, installed in ibv_context.ops */
int sv_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                    struct ibv_send_wr **bad);
int sv_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                    struct ibv_recv_wr **bad);
int sv_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad);
int sv_op_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int sv_op_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* results of executing one send WR */
enum {
    SV_DONE    = 0,   /* WR finished (its completion, if any, written) */
    SV_BLOCKED = 1,   /* WR must be retried at qp->retry_at_ns */
    SV_SENT    = 2    /* WR is on the wire to a remote host: the answer
                       * completes it (sv_net.c) */
};

/* engine / emulated NIC */
typedef enum {
    SV_EXEC_POSTER,  /* the posting thread: small WRs (sv_for_engine()) */
    SV_EXEC_ENGINE,  /* any thread on the engine's behalf: every WR */
    SV_EXEC_THREAD   /* the engine thread: one WR per call */
} sv_executor_t;

void sv_engine_add(sv_qp_priv_t *qp);
void sv_engine_remove(sv_qp_priv_t *qp);
void sv_engine_kick(void);
void sv_engine_help(sv_cq_priv_t *cq, int found);
void sv_engine_atfork_child(void);
void sv_qp_progress(sv_qp_priv_t *qp, sv_executor_t who, uint64_t *wake_ns);
void sv_cq_push(sv_cq_t *cq, const struct ibv_wc *wc, int solicited);
void sv_qp_set_error(sv_qp_priv_t *qp);
void sv_rq_flush(sv_qp_t *s);
void sv_responder_error(sv_qp_t *s, uint32_t bit);
void sv_async_raise(uint32_t *bits, uint32_t bit, int owner, int fd,
                    uint64_t ctx_id);
void sv_rq_consumed(sv_qp_t *peer, sv_rq_t *rq);
sv_rwqe_t *sv_rq_head(sv_rq_t *rq);
void sv_rq_retired(uint32_t qpn, uint32_t n);
void sv_rwqe_copy(sv_rwqe_t *dst, const sv_rwqe_t *src);
void sv_async_post(sv_context_t *ctx, struct ibv_async_event *ev);
void sv_async_drop_qp(sv_context_t *ctx, struct ibv_qp *ibqp);
uint64_t sv_link_stamp(sv_context_t *ctx, uint64_t bytes, uint64_t *wire_p);

const sv_mr_t *sv_mr_lookup(uint32_t key, int owner, uint32_t pd,
                            uint64_t addr, uint64_t len, uint32_t access);

/* responder helpers shared by the local (sv_engine.c) and the network
 * (sv_net_resp.c) data paths */
sv_qp_t   *sv_qp_by_qpn(uint32_t qpn);
sv_rq_t   *sv_peer_rq(sv_qp_t *peer);
int64_t    sv_recv_iov(const sv_qp_t *peer, const sv_rwqe_t *rw, size_t skip,
                       struct iovec *iov, int *n);
void       sv_iov_advance(struct iovec **iov, int *n, size_t bytes);
/*
 * An HCA places the bytes of one write in address order, and eager RDMA
 * protocols (MVAPICH's, the RVMA rings of ucx-hcr with
 * UCX_RVMA_RING_POLL) poll the last bytes of a buffer to learn that all
 * of it has landed. One copy by the kernel or by glibc does not keep that
 * order: x86 may make the stores of a fast-string copy (rep movsb) or
 * non-temporal ones visible out of order. So every placement copies its
 * last SV_TAIL_BYTES on their own, after the rest: from or into an iovec
 * list that sv_iov_split_tail() made (the kernel copies entry by entry).
 */
#define SV_TAIL_BYTES 8
int        sv_iov_split_tail(const struct iovec *in, int n, size_t total,
                             struct iovec *out, int *tail_idx);
sv_lock_t *sv_atomic_lock(pid_t pid, uint64_t va);
void       sv_rq_complete(sv_qp_t *peer, sv_rq_t *rq, const struct ibv_wc *wc,
                          int solicited);
uint64_t   sv_rnr_delay_ns(uint32_t min_rnr_timer);
uint64_t   sv_ack_timeout_ns(const sv_qp_priv_t *qp);
int        sv_local_iov(sv_qp_priv_t *qp, sv_swqe_t *w, uint32_t access,
                        struct iovec *iov, int *n);
void       sv_send_complete(sv_qp_priv_t *qp, const sv_swqe_t *w,
                            enum ibv_wc_status status);
int        sv_send_fail(sv_qp_priv_t *qp, const sv_swqe_t *w,
                        enum ibv_wc_status status);

/* addressing: a port's LID is 1 + device index on a host-only fabric, and
 * the low 16 bits of the device's IPv4 address with the network data path
 * (the "subnet manager" rule of sv_net.c) */
uint16_t sv_port_lid(int dev);
uint64_t sv_port_guid(int dev);
int      sv_lid_is_local(uint32_t lid);

/* network data path (sv_net.c, sv_net_resp.c) */
static inline int sv_net_enabled(void)
{
    return sv_g.cfg.net_naddr > 0;
}
int  sv_net_config(sv_config_t *cfg);
int  sv_net_start(void);
void sv_net_qp_add(sv_qp_priv_t *qp);
void sv_net_qp_remove(sv_qp_priv_t *qp);
void sv_net_qp_flush(sv_qp_priv_t *qp);
void sv_net_qp_retire(sv_qp_priv_t *qp, uint32_t idx);
void sv_net_qp_reset(sv_qp_priv_t *qp);
int  sv_net_exec_rc(sv_qp_priv_t *qp, sv_swqe_t *w, struct iovec *liov,
                    int ln);
int  sv_net_exec_ud(sv_qp_priv_t *qp, sv_swqe_t *w, struct iovec *liov,
                    int ln);
void sv_net_atfork_child(void);
int  sv_net_resp_start(void);
void sv_net_resp_atfork_child(void);
#define SV_EXPORT __attribute__((visibility("default")))

#endif
