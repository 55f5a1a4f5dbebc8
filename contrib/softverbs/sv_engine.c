/*
 * softverbs engine: the emulated NIC.
 *
 * A send WR is executed by whoever owns the QP's 'busy' flag: the posting
 * thread for small WRs (SOFTVERBS_MOVER=auto, the default) or the
 * per-process engine thread for large ones, for WRs waiting on RNR or retry
 * timers and for the link model. Execution is the whole responder side too:
 * the initiator checks the target's keys in the shared MR table, consumes
 * the target's receive WQE, moves the data with process_vm_writev/readv
 * straight into/out of the target's address space and writes the target's
 * CQE, so that the target process runs no code at all (one-sided semantics,
 * and SENDs complete while the target computes).
 *
 * RC ordering: WRs of one QP execute in posting order, one at a time, and a
 * completion is written after the data is placed (after the syscall that
 * copied it returned). The engine thread takes one WR of a QP at a time, so
 * that a polling thread can take the next (sv_engine_help()).
 */
#define _GNU_SOURCE
#include "sv.h"
#include "sv_trace.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct {
    pthread_mutex_t lock;       /* the QP list */
    sv_qp_priv_t   *qps;
    int             running;
    uint32_t        seq;        /* futex word: bumped by every kick */
    uint32_t        sleeping;
    uint32_t        pending;    /* a kick since the last idle pass */
    uint32_t moving; /* the engine thread executes a WR */
} sv_eng = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/*
 * Link model: a WR's bytes are on the wire from wire_ns, when its link frees
 * up, until deliver_ns, and an HCA places them as they arrive, so that its
 * last bytes land, and it completes, at deliver_ns. The engine thread starts
 * a WR at wire_ns (started at deliver_ns, a single large WR took its wire
 * time and then its copy's), and its last SV_TAIL_BYTES and its completions
 * wait for deliver_ns; a copy slower than the link ends after it, as a slow
 * bus would make a NIC's. An application thread that lends a hand
 * (sv_engine_help()) waits inside ibv_poll_cq() for at most
 * SV_LINK_HELP_HOLD_NS, so it starts a WR no earlier than that before its
 * deliver time, and it executes one such WR per call: an HCA does not keep
 * the application's thread, and a helper that took a QP's whole queue of
 * WRs held the application inside ibv_poll_cq() until the last of them
 * was delivered, blind to its other CQs meanwhile (rndv/sppln at 25 Gb/s:
 * the ACKs of 1 MiB chunks read 0.7 ms after they landed, behind the
 * chunks queued after them). A thread inside ibv_post_send() waits for at
 * most SV_LINK_POST_HOLD_NS: it executes a WR of up to
 * SV_LINK_POST_MAX_BYTES (a control message) that the link takes now and
 * delivers within that, and leaves any other to the engine thread or a
 * poller. Data WRs posted back to back, each executed where it was
 * posted, each waited out its latency before the next was posted (UCX's
 * eager fragments of a reused 16 KiB at 100 Gb/s: 14.4 us, 13.8 left to
 * the poller). Leaving every WR, it left the control messages a protocol
 * posts before it computes: rndv/sppln's RTS went out when the sender had
 * copied its first chunk, the copy that was to overlap the rendezvous
 * round trip (25 Gb/s, 1 us latency, fresh 1 MiB: 24-52 us after it was
 * posted), and the receiver's ACKs when it had copied out what had landed
 * (18-95 us).
 */
#define SV_LINK_HELP_HOLD_NS   200000
#define SV_LINK_POST_HOLD_NS   2000
#define SV_LINK_POST_MAX_BYTES 4096

/*
 * A helper starts a WR shorter on the wire than that as late as still lets
 * its copy end by the deliver time: the copy's expected time, at the pace
 * this process's copies to other processes have had (an average over the
 * last few, which follows the host's slower periods), half as long again,
 * plus SV_LINK_HELP_MARGIN_NS. Started when its wire time began, the
 * helper copied, then waited out the rest inside ibv_poll_cq(): 30 of the
 * 42 us of a 128 KiB WRITE at 25 Gb/s, in which the application read none
 * of its CQs and did none of its own work (the ACK of a staged chunk was
 * read 38 us after it landed, in the median; a rank that sends and
 * receives at once copied nothing it received meanwhile).
 */
#define SV_LINK_HELP_MARGIN_NS 3000
#define SV_COPY_PACE_MIN_BYTES 32768

/* picoseconds per byte of a large copy by the kernel (0: none timed yet) */
static uint64_t sv_copy_pace_ps;

static void sv_copy_pace_update(size_t bytes, uint64_t ns)
{
    uint64_t pace = ns * 1000 / bytes, old = SV_LOAD_RELAXED(&sv_copy_pace_ps);

    /* an average of the last 8 or so; racy updates only lose a sample */
    SV_STORE(&sv_copy_pace_ps,
             (old == 0) ? pace : old - (old / 8) + (pace / 8));
}

static uint64_t sv_link_help_start_ns(const sv_swqe_t *w)
{
    uint64_t pace = SV_LOAD_RELAXED(&sv_copy_pace_ps);
    uint64_t lead = SV_LINK_HELP_MARGIN_NS +
                    (((uint64_t)w->length * pace * 3) / 2000);

    if (pace == 0) {
        return w->wire_ns; /* no pace known: as early as the wire allows */
    }
    return (w->deliver_ns > w->wire_ns + lead) ? (w->deliver_ns - lead) :
                                                 w->wire_ns;
}

/* when 'who' may start WR w (0: now, no link model) */
static uint64_t sv_link_start_ns(const sv_swqe_t *w, sv_executor_t who)
{
    if (w->deliver_ns == 0) {
        return 0;
    }

    switch (who) {
    case SV_EXEC_POSTER:
        return ((w->length <= SV_LINK_POST_MAX_BYTES) &&
                (w->deliver_ns <= sv_now_ns() + SV_LINK_POST_HOLD_NS)) ?
                       w->wire_ns :
                       w->deliver_ns;
    case SV_EXEC_THREAD:
        return w->wire_ns;
    case SV_EXEC_ENGINE:
        return (w->deliver_ns - w->wire_ns > SV_LINK_HELP_HOLD_NS) ?
                       (w->deliver_ns - SV_LINK_HELP_HOLD_NS) :
                       sv_link_help_start_ns(w);
    default:
        return w->deliver_ns;
    }
}

/* wait for a WR's deliver time (0: no link model); the engine thread,
 * behind a long latency, sleeps most of it (sv_delay_ns()) */
static void sv_link_hold(uint64_t deliver_ns)
{
    uint64_t now = sv_now_ns();

    if ((deliver_ns != 0) && (now < deliver_ns)) {
        sv_delay_ns(deliver_ns - now);
    }
}

/* IB spec table of RNR NAK timer values, in microseconds */
static const uint32_t sv_rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
    1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
    81920, 122880, 163840, 245760, 327680, 491520
};

/* ---------------------------------------------------------------------- */
/* data movement */

/* copy between two iovec lists in this process */
static void sv_iov_copy(const struct iovec *dst, int dn,
                        const struct iovec *src, int sn)
{
    size_t doff = 0, soff = 0, n;
    int d = 0, s = 0;

    while (d < dn && s < sn) {
        n = dst[d].iov_len - doff;
        if (src[s].iov_len - soff < n) {
            n = src[s].iov_len - soff;
        }
        memcpy((char *)dst[d].iov_base + doff,
               (const char *)src[s].iov_base + soff, n);
        doff += n;
        soff += n;
        if (doff == dst[d].iov_len) {
            ++d;
            doff = 0;
        }
        if (soff == src[s].iov_len) {
            ++s;
            soff = 0;
        }
    }
}

void sv_iov_advance(struct iovec **iov, int *n, size_t bytes)
{
    while (bytes > 0 && *n > 0) {
        if (bytes < (*iov)->iov_len) {
            (*iov)->iov_base = (char *)(*iov)->iov_base + bytes;
            (*iov)->iov_len -= bytes;
            return;
        }
        bytes -= (*iov)->iov_len;
        ++*iov;
        --*n;
    }
    while (*n > 0 && (*iov)->iov_len == 0) {
        ++*iov;
        --*n;
    }
}

/* 'out' (room for n + 1 entries) is 'in' with the entry that holds byte
 * total - SV_TAIL_BYTES split there; *tail_idx is the entry the tail starts
 * at, or -1 when 'in' is too short to hold it */
int sv_iov_split_tail(const struct iovec *in, int n, size_t total,
                      struct iovec *out, int *tail_idx)
{
    size_t body = total - SV_TAIL_BYTES, off = 0;
    int i, m = 0;

    *tail_idx = -1;
    for (i = 0; i < n; ++i, ++m) {
        out[m] = in[i];
        if ((*tail_idx < 0) && (body < off + in[i].iov_len)) {
            if (body > off) {
                out[m].iov_len = body - off;
                ++m;
                out[m].iov_base = (char *)in[i].iov_base + (body - off);
                out[m].iov_len  = in[i].iov_len - (body - off);
            }
            *tail_idx = m;
        }
        off += in[i].iov_len;
    }
    return m;
}

/* sv_iov_copy() into a list split by sv_iov_split_tail(): the tail last,
 * not before deliver_ns */
static void sv_iov_copy_tail_last(const struct iovec *dst, int dn, int tail,
                                  const struct iovec *src, int sn, size_t total,
                                  uint64_t deliver_ns)
{
    struct iovec rest[SV_MAX_SGE], *p = rest;
    int n = sn;

    if ((tail < 0) || (sn > SV_MAX_SGE)) {
        sv_iov_copy(dst, dn, src, sn);
        return;
    }
    sv_iov_copy(dst, tail, src, sn);
    sv_link_hold(deliver_ns);
    /* orders non-temporal stores too */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    memcpy(rest, src, sn * sizeof(*src));
    sv_iov_advance(&p, &n, total - SV_TAIL_BYTES);
    sv_iov_copy(dst + tail, dn - tail, p, n);
}

/* The kernel's copy of 'total' bytes between local and remote (in pid)
 * iovecs. Returns 0, ESRCH (the peer is gone) or EFAULT. */
static int sv_xfer_kernel(pid_t pid, int to_remote, struct iovec *l, int ln,
                          struct iovec *r, int rn, size_t total)
{
    uint64_t start;
    ssize_t n;

    while (total > 0) {
        SV_TRACE(SV_T_XFER);
        start = sv_now_ns();
        n     = to_remote ? process_vm_writev(pid, l, ln, r, rn, 0) :
                            process_vm_readv(pid, l, ln, r, rn, 0);
        SV_TRACE(SV_T_XFER_DONE);
        if (n >= SV_COPY_PACE_MIN_BYTES) {
            sv_copy_pace_update(n, sv_now_ns() - start);
        }
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return (errno == ESRCH) ? ESRCH : EFAULT;
        }
        if (n == 0) {
            return EFAULT;
        }
        total -= (size_t)n;
        sv_iov_advance(&l, &ln, (size_t)n);
        sv_iov_advance(&r, &rn, (size_t)n);
    }
    return 0;
}

/*
 * A WRITE's tail (its last SV_TAIL_BYTES, which a peer may watch) goes into
 * another process with a system call of its own, 1.5-2 us on a virtual
 * machine, of which the bytes land at the end. Started at the deliver time,
 * they landed that much after it, and so did the completion at the target
 * of every WRITE with immediate: a fresh 256 KiB at 25 Gb/s, 1 us latency,
 * saw its last sub-block's notification 2.0-2.2 us after the link model
 * delivered it. The tail's copy starts SV_TAIL_LEAD_PCT percent of the
 * shortest one lately before the deliver time, so that it lands at or just
 * after it; the estimate drops to a shorter copy at once and rises by a
 * sixteenth a copy, so that a slower period of the host lands tails late,
 * never early.
 */
#define SV_TAIL_LEAD_PCT 75
/* and never more than this: the estimate may be a slow period's, and a
 * lead longer than a fast copy's entry into the kernel landed tails 2-5 us
 * before their deliver time (softverbs.link_model_wire_time) */
#define SV_TAIL_LEAD_MAX_NS 300

/* nanoseconds of the shortest recent tail copy to another process (0: none
 * timed yet) */
static uint64_t sv_tail_copy_ns;

static void sv_tail_copy_update(uint64_t ns)
{
    uint64_t old = SV_LOAD_RELAXED(&sv_tail_copy_ns);
    uint64_t up  = old + (old / 16);

    /* racy updates only lose a sample */
    SV_STORE(&sv_tail_copy_ns,
             ((old == 0) || (ns < old)) ? ns : ((ns < up) ? ns : up));
}

/* A transfer this small is moved whole at its deliver time: copying its
 * body ahead and its tail at deliver_ns cost the posting thread a system
 * call more (1.5-2 us on a virtual machine) and landed it no earlier.
 * 25 Gb/s, 1 us latency, 5 interleaved runs, reused: 16 KiB 14.7 -> 13.8 us,
 * 256 KiB 98.1 -> 95.4; fresh 16 KiB 26.9 -> 25.2, 256 KiB 114 -> 109. */
#define SV_XFER_WHOLE_MAX 4096

/* Move 'total' bytes between local and remote (in pid) iovecs, the last
 * SV_TAIL_BYTES of a placement last, and not before deliver_ns (the link
 * model's arrival of the last bytes; 0 without it), when the transfer is
 * done too. Returns 0, ESRCH (the peer is gone) or EFAULT. */
static int sv_xfer(pid_t pid, int to_remote, struct iovec *l, int ln,
                   struct iovec *r, int rn, size_t total, uint64_t deliver_ns)
{
    struct iovec split[SV_MAX_SGE + 1], rbody[SV_MAX_RECV_SGE];
    size_t body = total - SV_TAIL_BYTES;
    uint64_t start, lead;
    /* its tail lands after its body, with a copy of its own: a peer that
     * polls the last bytes of a WRITE (rvma's ring records, of 2 KiB and
     * less) found them before bytes ahead of them, since the stores of
     * one copy (a fast string operation) may become visible in any order,
     * and read stale data: rvma.fast_path_hcr in 3 of 151 runs,
     * softverbs.write_tail_lands_last in 1 of 12 (a 4 KiB write). The
     * stores of two copies in a row do not pass each other, and the kernel
     * copies each local entry with a copy of its own: one system call */
    int order_tail = to_remote && (total > SV_TAIL_BYTES);
    /* ... and at deliver_ns, in a system call of its own */
    int split_tail = order_tail && (total > SV_XFER_WHOLE_MAX);
    int tail       = -1;
    int err;

    if (total <= SV_XFER_WHOLE_MAX) {
        /* lands whole at deliver_ns, in one copy: one of up to
         * SV_TAIL_BYTES is all tail (an 8-byte WRITE that a peer spun on
         * had landed 7 us into a 10 us latency), and for one this small
         * the body's copy ahead of the tail's is a system call more on
         * the poster's path (sv_link_start_ns()) */
        sv_link_hold(deliver_ns);
        if (total == 0) {
            return 0;
        }
    }
    if ((pid == sv_g.pid) && !sv_g.cfg.loopback_kernel) {
        if (order_tail && (rn <= SV_MAX_SGE)) {
            rn = sv_iov_split_tail(r, rn, total, split, &tail);
            sv_iov_copy_tail_last(split, rn, tail, l, ln, total, deliver_ns);
        } else if (to_remote) {
            sv_iov_copy(r, rn, l, ln);
        } else {
            sv_iov_copy(l, ln, r, rn);
        }
        err = 0;
        goto out;
    }
    if (order_tail && (ln <= SV_MAX_SGE)) {
        /* the kernel copies each local entry with a copy of its own, in
         * order (splitting a remote entry would cost a second page walk in
         * the target) */
        ln = sv_iov_split_tail(l, ln, total, split, &tail);
        l  = split;
    }
    if (split_tail && (tail > 0) && (rn <= SV_MAX_RECV_SGE) &&
        (deliver_ns > sv_now_ns())) {
        /* the body now, the tail when it arrives: two copies (the first
         * moves the entries it is given, so it gets copies) */
        memcpy(rbody, r, rn * sizeof(*r));
        err = sv_xfer_kernel(pid, 1, l, tail, rbody, rn, body);
        if (err != 0) {
            return err;
        }
        sv_iov_advance(&r, &rn, body);
        lead = (SV_LOAD_RELAXED(&sv_tail_copy_ns) * SV_TAIL_LEAD_PCT) / 100;
        sv_link_hold(deliver_ns - ((lead < SV_TAIL_LEAD_MAX_NS) ?
                                           lead :
                                           SV_TAIL_LEAD_MAX_NS));
        start = sv_now_ns();
        err = sv_xfer_kernel(pid, 1, l + tail, ln - tail, r, rn, SV_TAIL_BYTES);
        sv_tail_copy_update(sv_now_ns() - start);
        /* the completion, not before the deliver time */
        sv_link_hold(deliver_ns);
        return err;
    }
    err = sv_xfer_kernel(pid, to_remote, l, ln, r, rn, total);
out:
    sv_link_hold(deliver_ns);
    return err;
}

/*
 * A SEND's bytes into the receive buffer: copied at once, and done at the
 * deliver time. The buffer is the HCA's until the receive completes, so
 * bytes that land early are seen by nobody, while the copy (a system call,
 * 1.7 us for 64 bytes on a virtual machine) overlaps the modelled latency
 * instead of following it: 8-byte active messages at 25 Gb/s, 1 us
 * latency, took 2.96 us one way, 1 us of latency and 1.9 of copy.
 */
static int sv_recv_land(pid_t pid, struct iovec *l, int ln, struct iovec *r,
                        int rn, size_t total, uint64_t deliver_ns)
{
    int err = sv_xfer(pid, 1, l, ln, r, rn, total, 0);

    sv_link_hold(deliver_ns);
    return err;
}

/* ---------------------------------------------------------------------- */

static enum ibv_wc_opcode sv_wc_opcode(uint32_t wr_opcode)
{
    switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:  return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:            return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:   return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default:                          return IBV_WC_SEND;
    }
}

/* Complete the oldest WR of the send queue (w). Its slot is freed first:
 * an application that polls the completion may post into it at once (a
 * queue of one WR, as ibv_rc_pingpong uses, depends on that). */
void sv_send_complete(sv_qp_priv_t *qp, const sv_swqe_t *w,
                      enum ibv_wc_status status)
{
    uint64_t wr_id  = w->wr_id, length = w->length;
    uint32_t opcode = w->opcode, flags = w->flags;
    struct ibv_wc wc;

    __atomic_add_fetch(&qp->sq_done, 1, __ATOMIC_RELEASE);
    /* an error completes every WR, signaled or not */
    if (status == IBV_WC_SUCCESS && !qp->sq_sig_all &&
        !(flags & IBV_SEND_SIGNALED)) {
        return;
    }
    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = wr_id;
    wc.status = status;
    wc.opcode = sv_wc_opcode(opcode);
    wc.qp_num = qp->ibqp.qp_num;
    if (status == IBV_WC_SUCCESS &&
        (opcode == IBV_WR_RDMA_READ || opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
         opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)) {
        wc.byte_len = (uint32_t)length;
    }
    sv_cq_push(qp->scq->s, &wc, 0);
}

/* a failed WR: the QP goes to error, then its error completion comes, and
 * the executor flushes what follows */
int sv_send_fail(sv_qp_priv_t *qp, const sv_swqe_t *w,
                 enum ibv_wc_status status)
{
    sv_qp_set_error(qp);
    sv_send_complete(qp, w, status);
    return SV_DONE;
}

/* local SGEs -> iovecs, checking lkeys against our own MR table entries */
int sv_local_iov(sv_qp_priv_t *qp, sv_swqe_t *w, uint32_t access,
                 struct iovec *iov, int *n)
{
    const sv_mr_t *mr;
    uint32_t i;

    *n = 0;
    if (w->flags & IBV_SEND_INLINE) {
        iov[0].iov_base = w->inline_data;
        iov[0].iov_len  = w->length;
        *n = (w->length > 0);
        return 0;
    }
    for (i = 0; i < w->num_sge; ++i) {
        const struct ibv_sge *sge = &w->sge[i];

        if (sge->length == 0) {
            continue;
        }
        mr = sv_mr_lookup(sge->lkey, sv_g.slot, qp->s->pd, sge->addr,
                          sge->length, access);
        if (mr == NULL) {
            return -1;
        }
        iov[*n].iov_base = (void *)(uintptr_t)(mr->addr +
                                               (sge->addr - mr->iova));
        iov[*n].iov_len  = sge->length;
        ++*n;
    }
    return 0;
}

/* receive WQE SGEs of the target -> remote iovecs, skipping 'skip' bytes
 * (UD: the GRH area); returns the capacity, or -1 on a bad key */
int64_t sv_recv_iov(const sv_qp_t *peer, const sv_rwqe_t *rw,
                    size_t skip, struct iovec *iov, int *n)
{
    const sv_mr_t *mr;
    int64_t cap = 0;
    uint32_t i;

    *n = 0;
    for (i = 0; i < rw->num_sge && i < SV_MAX_RECV_SGE; ++i) {
        const struct ibv_sge *sge = &rw->sge[i];
        uint64_t va;
        size_t len;

        if (sge->length == 0) {
            continue;
        }
        mr = sv_mr_lookup(sge->lkey, peer->owner, peer->pd, sge->addr,
                          sge->length, IBV_ACCESS_LOCAL_WRITE);
        if (mr == NULL) {
            return -1;
        }
        va  = mr->addr + (sge->addr - mr->iova);
        len = sge->length;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        iov[*n].iov_base = (void *)(uintptr_t)(va + skip);
        iov[*n].iov_len  = len - skip;
        cap += (int64_t)(len - skip);
        skip = 0;
        ++*n;
    }
    return cap;
}

sv_qp_t *sv_qp_by_qpn(uint32_t qpn)
{
    uint32_t low = qpn & ((1u << SV_QPN_SLOT_SHIFT) - 1);
    sv_qp_t *q;

    if (low < SV_QPN_BASE || low >= SV_QPN_BASE + SV_MAX_QP) {
        return NULL;
    }
    q = &sv_g.shm->qps[low - SV_QPN_BASE];
    if (!SV_LOAD(&q->in_use) || q->qpn != qpn) {
        return NULL;
    }
    return q;
}

sv_rq_t *sv_peer_rq(sv_qp_t *peer)
{
    sv_srq_t *srq;

    if (peer->srq == 0) {
        return &peer->rq;
    }
    srq = &sv_g.shm->srqs[peer->srq - 1];
    return SV_LOAD(&srq->in_use) ? &srq->rq : NULL;
}

uint64_t sv_ack_timeout_ns(const sv_qp_priv_t *qp)
{
    if (qp->timeout == 0) {
        return UINT64_MAX / 2;  /* infinite, as the spec says */
    }
    return (4096ull << (qp->timeout > 31 ? 31 : qp->timeout)) *
           (uint64_t)(qp->retry_cnt + 1);
}

/* The target does not answer (QP gone, not ready or in error): a real
 * requester retransmits until the ack timeout and retry count run out. */
static int sv_no_response(sv_qp_priv_t *qp, const sv_swqe_t *w, int owner)
{
    uint64_t now = sv_now_ns();

    if (owner >= 0 && !sv_proc_alive(owner)) {
        return sv_send_fail(qp, w, IBV_WC_RETRY_EXC_ERR);
    }
    if (qp->timeout_at_ns == 0) {
        qp->timeout_at_ns = now + sv_ack_timeout_ns(qp);
    }
    if (now >= qp->timeout_at_ns) {
        return sv_send_fail(qp, w, IBV_WC_RETRY_EXC_ERR);
    }
    qp->retry_at_ns = now + 1000000; /* look again in 1 ms */
    if (qp->retry_at_ns > qp->timeout_at_ns) {
        qp->retry_at_ns = qp->timeout_at_ns;
    }
    return SV_BLOCKED;
}

uint64_t sv_rnr_delay_ns(uint32_t min_rnr_timer)
{
    return 1000ull * sv_rnr_us[min_rnr_timer & 31];
}

/* one of the shared locks that make softverbs atomics on a word atomic */
sv_lock_t *sv_atomic_lock(pid_t pid, uint64_t va)
{
    return &sv_g.shm->atomic_locks[((va >> 3) ^
                                    (uint64_t)pid * 2654435761u) %
                                   SV_ATOMIC_LOCKS];
}

static int sv_rnr(sv_qp_priv_t *qp, const sv_swqe_t *w, sv_qp_t *peer)
{
    if (!sv_proc_alive(peer->owner)) {
        return sv_send_fail(qp, w, IBV_WC_RETRY_EXC_ERR);
    }
    if (qp->rnr_left < 0) {
        qp->rnr_left = qp->rnr_retry;
    }
    if (qp->rnr_left == 0) {
        return sv_send_fail(qp, w, IBV_WC_RNR_RETRY_EXC_ERR);
    }
    if (qp->rnr_retry != 7) {   /* 7 means retry forever */
        --qp->rnr_left;
    }
    qp->retry_at_ns = sv_now_ns() + sv_rnr_delay_ns(peer->min_rnr_timer);
    return SV_BLOCKED;
}

static enum ibv_wc_status sv_xfer_status(int err)
{
    return (err == ESRCH) ? IBV_WC_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR;
}

/* ---------------------------------------------------------------------- */

static int sv_exec_atomic(sv_qp_priv_t *qp, sv_swqe_t *w, sv_qp_t *peer,
                          pid_t pid, struct iovec *liov, int ln)
{
    const sv_mr_t *mr;
    sv_lock_t *lock;
    uint64_t va, old, val;
    struct iovec tmp = { &old, 8 }, rv;
    int err;

    if (w->length != 8 || ln != 1 || (w->raddr & 7)) {
        return sv_send_fail(qp, w, IBV_WC_REM_INV_REQ_ERR);
    }
    mr = sv_mr_lookup(w->rkey, peer->owner, peer->pd, w->raddr, 8,
                      IBV_ACCESS_REMOTE_ATOMIC);
    if (mr == NULL || !(peer->access & IBV_ACCESS_REMOTE_ATOMIC)) {
        sv_responder_error(peer, SV_ASYNC_ACCESS_ERR);
        return sv_send_fail(qp, w, IBV_WC_REM_ACCESS_ERR);
    }
    va   = mr->addr + (w->raddr - mr->iova);
    rv.iov_base = (void *)(uintptr_t)va;
    rv.iov_len  = 8;
    /* atomic with respect to every other softverbs atomic on that word */
    lock = sv_atomic_lock(pid, va);
    sv_lock(lock);
    err = sv_xfer(pid, 0, &tmp, 1, &rv, 1, 8, 0);
    if (err == 0) {
        if (w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            val = old + w->compare_add;
        } else {
            val = (old == w->compare_add) ? w->swap : old;
        }
        if (val != old) {
            tmp.iov_base = &val;
            rv.iov_base  = (void *)(uintptr_t)va;
            rv.iov_len   = 8;
            tmp.iov_len  = 8;
            err          = sv_xfer(pid, 1, &tmp, 1, &rv, 1, 8, 0);
        }
    }
    sv_unlock(lock);
    if (err != 0) {
        return sv_send_fail(qp, w, sv_xfer_status(err));
    }
    sv_link_hold(w->deliver_ns);
    memcpy(liov[0].iov_base, &old, 8);
    sv_send_complete(qp, w, IBV_WC_SUCCESS);
    return SV_DONE;
}

static int sv_exec_ud(sv_qp_priv_t *qp, sv_swqe_t *w, struct iovec *liov,
                      int ln)
{
    struct iovec riov[SV_MAX_RECV_SGE];
    uint32_t qkey = (w->remote_qkey & 0x80000000u) ? qp->s->qkey :
                                                     w->remote_qkey;
    sv_rwqe_t rw, *head;
    sv_qp_t *peer;
    struct ibv_wc wc;
    sv_rq_t *rq;
    int rn, err;
    int64_t cap;
    uint32_t st;

    if (w->length > SV_MTU) {
        return sv_send_fail(qp, w, IBV_WC_LOC_LEN_ERR);
    }
    if (sv_net_enabled() && !sv_lid_is_local(w->dlid)) {
        return sv_net_exec_ud(qp, w, liov, ln);
    }
    peer = sv_qp_by_qpn(w->remote_qpn);
    /* an unreliable datagram that nobody can take is dropped silently */
    if (peer == NULL || peer->type != IBV_QPT_UD || peer->qkey != qkey) {
        goto out;
    }
    st = SV_LOAD(&peer->state);
    if (st != IBV_QPS_RTR && st != IBV_QPS_RTS) {
        goto out;
    }
    rq = sv_peer_rq(peer);
    if (rq == NULL) {
        goto out;
    }
    sv_lock(&rq->ring.cons_lock);
    if ((head = sv_rq_head(rq)) == NULL || !SV_LOAD(&peer->in_use) ||
        peer->qpn != w->remote_qpn ||
        (peer->srq && !SV_LOAD(&sv_g.shm->srqs[peer->srq - 1].in_use))) {
        sv_unlock(&rq->ring.cons_lock);
        goto out;
    }
    sv_rwqe_copy(&rw, head);
    SV_STORE(&rq->ring.cons, rq->ring.cons + 1);
    sv_rq_consumed(peer, rq);

    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = rw.wr_id;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = peer->qpn;
    wc.src_qp = qp->ibqp.qp_num;
    wc.slid   = sv_port_lid(qp->ctx->dev);
    wc.sl     = qp->sl;
    if (w->opcode == IBV_WR_SEND_WITH_IMM) {
        wc.imm_data  = w->imm;
        wc.wc_flags |= IBV_WC_WITH_IMM;
    }
    cap = sv_recv_iov(peer, &rw, SV_GRH_LEN, riov, &rn);
    if (cap < 0) {
        wc.status = IBV_WC_LOC_PROT_ERR;
    } else if ((uint64_t)cap < w->length) {
        wc.status = IBV_WC_LOC_LEN_ERR;
    } else {
        err         = sv_recv_land(sv_proc_pid(peer->owner), liov, ln, riov, rn,
                                   w->length, w->deliver_ns);
        wc.status   = err ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS;
        wc.byte_len = (uint32_t)w->length + SV_GRH_LEN;
    }
    sv_cq_push(&sv_g.shm->cqs[peer->rcq], &wc,
               !!(w->flags & IBV_SEND_SOLICITED));
    sv_unlock(&rq->ring.cons_lock);
out:
    sv_send_complete(qp, w, IBV_WC_SUCCESS);
    return SV_DONE;
}

/* The receive WQE at rq->ring.cons, taken under ring.cons_lock, is done:
 * consume it, write the target's CQE (wc) and release the lock. Both
 * responders (this file, sv_net_resp.c) end a receive this way. */
void sv_rq_complete(sv_qp_t *peer, sv_rq_t *rq, const struct ibv_wc *wc,
                    int solicited)
{
    /* the completion first: the target waits for it, nobody for cons (the
     * WQE was copied out when it was taken) */
    sv_cq_push(&sv_g.shm->cqs[peer->rcq], wc, solicited);
    SV_STORE(&rq->ring.cons, rq->ring.cons + 1);
    sv_rq_consumed(peer, rq);
    sv_unlock(&rq->ring.cons_lock);
}

/* SEND, SEND_WITH_IMM, RDMA_WRITE_WITH_IMM: the responder side consumes a
 * receive WQE (or the initiator sees RNR) */
static int sv_exec_recv_side(sv_qp_priv_t *qp, sv_swqe_t *w, sv_qp_t *peer,
                             pid_t pid, struct iovec *liov, int ln,
                             struct iovec *wiov, int wn)
{
    struct iovec riov[SV_MAX_RECV_SGE];
    sv_rq_t *rq = sv_peer_rq(peer);
    enum ibv_wc_status ist = IBV_WC_SUCCESS;
    sv_rwqe_t rw, *head;
    struct ibv_wc wc;
    int rn, err = 0;
    int64_t cap;

    if (rq == NULL) {
        return sv_no_response(qp, w, peer->owner);
    }
    sv_lock(&rq->ring.cons_lock);
    /* the owner destroys a QP or SRQ under this lock: re-check */
    if (!SV_LOAD(&peer->in_use) || peer->id != qp->peer_id ||
        (peer->srq && !SV_LOAD(&sv_g.shm->srqs[peer->srq - 1].in_use))) {
        sv_unlock(&rq->ring.cons_lock);
        return sv_no_response(qp, w, -1);
    }
    if ((head = sv_rq_head(rq)) == NULL) {
        sv_unlock(&rq->ring.cons_lock);
        return sv_rnr(qp, w, peer);
    }
    sv_rwqe_copy(&rw, head);
    SV_TRACE(SV_T_RQ_TAKEN);

    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = rw.wr_id;
    wc.qp_num = peer->qpn;
    wc.src_qp = qp->ibqp.qp_num;
    wc.slid   = sv_port_lid(qp->ctx->dev);
    wc.sl     = qp->sl;
    if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        err = sv_xfer(pid, 1, liov, ln, wiov, wn, w->length, w->deliver_ns);
        if (err != 0) {
            wc.status = IBV_WC_LOC_ACCESS_ERR;
            ist       = sv_xfer_status(err);
        }
    } else {
        wc.opcode = IBV_WC_RECV;
        cap = sv_recv_iov(peer, &rw, 0, riov, &rn);
        if (cap < 0) {
            wc.status = IBV_WC_LOC_PROT_ERR;
            ist       = IBV_WC_REM_OP_ERR;
        } else if ((uint64_t)cap < w->length) {
            wc.status = IBV_WC_LOC_LEN_ERR;
            ist       = IBV_WC_REM_INV_REQ_ERR;
        } else {
            err = sv_recv_land(pid, liov, ln, riov, rn, w->length,
                               w->deliver_ns);
            if (err != 0) {
                wc.status = IBV_WC_LOC_PROT_ERR;
                ist       = sv_xfer_status(err);
            }
        }
    }
    if (err == ESRCH) {
        /* the target is gone: no completion there */
        sv_unlock(&rq->ring.cons_lock);
        return sv_send_fail(qp, w, ist);
    }
    if (w->opcode != IBV_WR_SEND) {
        wc.imm_data  = w->imm;
        wc.wc_flags |= IBV_WC_WITH_IMM;
    }
    wc.byte_len = (uint32_t)w->length;
    sv_rq_complete(peer, rq, &wc,
                   !!(w->flags & IBV_SEND_SOLICITED) || wc.status);
    if (ist != IBV_WC_SUCCESS) {
        /* the receive WQE completed in error: the responder QP breaks */
        sv_responder_error(peer, ist == IBV_WC_REM_ACCESS_ERR ?
                                 SV_ASYNC_ACCESS_ERR : SV_ASYNC_REQ_ERR);
        return sv_send_fail(qp, w, ist);
    }
    sv_send_complete(qp, w, IBV_WC_SUCCESS);
    return SV_DONE;
}

static int sv_exec_rc(sv_qp_priv_t *qp, sv_swqe_t *w, struct iovec *liov,
                      int ln)
{
    sv_qp_t *peer = qp->peer;
    struct iovec wiov;
    const sv_mr_t *mr;
    uint32_t st, access;
    pid_t pid;
    int err;

    if (qp->remote) {
        return sv_net_exec_rc(qp, w, liov, ln);
    }
    if (peer == NULL || peer->id != qp->peer_id || !SV_LOAD(&peer->in_use) ||
        peer->qpn != qp->s->dest_qpn) {
        peer = sv_qp_by_qpn(qp->s->dest_qpn);
        qp->peer    = peer;
        qp->peer_id = peer ? peer->id : 0;
    }
    if (peer == NULL) {
        return sv_no_response(qp, w, -1);
    }
    st = SV_LOAD(&peer->state);
    if ((st != IBV_QPS_RTR && st != IBV_QPS_RTS) ||
        peer->type != IBV_QPT_RC || peer->dest_qpn != qp->ibqp.qp_num) {
        return sv_no_response(qp, w, peer->owner);
    }
    qp->timeout_at_ns = 0;
    pid = sv_proc_pid(peer->owner);

    switch (w->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        return sv_exec_recv_side(qp, w, peer, pid, liov, ln, NULL, 0);
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return sv_exec_atomic(qp, w, peer, pid, liov, ln);
    default:
        break;
    }

    /* RDMA WRITE / READ: the rkey, bounds and access checks of the
     * responder */
    access = (w->opcode == IBV_WR_RDMA_READ) ? IBV_ACCESS_REMOTE_READ :
                                               IBV_ACCESS_REMOTE_WRITE;
    wiov.iov_base = NULL;
    wiov.iov_len  = 0;
    if (w->length > 0) {
        mr = sv_mr_lookup(w->rkey, peer->owner, peer->pd, w->raddr,
                          w->length, access);
        if (mr == NULL || !(peer->access & access)) {
            sv_responder_error(peer, SV_ASYNC_ACCESS_ERR);
            return sv_send_fail(qp, w, IBV_WC_REM_ACCESS_ERR);
        }
        wiov.iov_base = (void *)(uintptr_t)(mr->addr + (w->raddr - mr->iova));
        wiov.iov_len  = w->length;
    }
    if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        return sv_exec_recv_side(qp, w, peer, pid, liov, ln, &wiov,
                                 w->length > 0);
    }
    if (w->length == 0 && !sv_proc_alive(peer->owner)) {
        return sv_send_fail(qp, w, IBV_WC_RETRY_EXC_ERR);
    }
    err = sv_xfer(pid, w->opcode != IBV_WR_RDMA_READ, liov, ln, &wiov, 1,
                  w->length, w->deliver_ns);
    if (err != 0) {
        return sv_send_fail(qp, w, sv_xfer_status(err));
    }
    sv_send_complete(qp, w, IBV_WC_SUCCESS);
    return SV_DONE;
}

static int sv_exec(sv_qp_priv_t *qp, sv_swqe_t *w)
{
    struct iovec liov[SV_MAX_SGE];
    uint32_t access = 0;
    int ln;

    SV_TRACE(SV_T_EXEC);
    if (w->opcode == IBV_WR_RDMA_READ ||
        w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
        w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        access = IBV_ACCESS_LOCAL_WRITE;
    }
    if (sv_local_iov(qp, w, access, liov, &ln) != 0) {
        return sv_send_fail(qp, w, IBV_WC_LOC_PROT_ERR);
    }
    if (qp->ibqp.qp_type == IBV_QPT_UD) {
        return sv_exec_ud(qp, w, liov, ln);
    }
    if (w->length > SV_MAX_MSG) {
        return sv_send_fail(qp, w, IBV_WC_LOC_LEN_ERR);
    }
    return sv_exec_rc(qp, w, liov, ln);
}

/* ---------------------------------------------------------------------- */

static int sv_for_engine(const sv_swqe_t *w)
{
    switch (sv_g.cfg.mover) {
    case SV_MOVER_INLINE: return 0;
    case SV_MOVER_ENGINE: return 1;
    default:              return w->length > sv_g.cfg.engine_thresh;
    }
}

/* WR idx finished (completed) without waiting for a remote answer */
static void sv_qp_retire(sv_qp_priv_t *qp, uint32_t idx)
{
    if (qp->remote) {
        sv_net_qp_retire(qp, idx);
    }
}

void sv_qp_progress(sv_qp_priv_t *qp, sv_executor_t who, uint64_t *wake_ns)
{
    uint32_t head, tail;
    uint64_t now = 0, start;
    int ret, linked;
    sv_swqe_t *w;

    if (__atomic_exchange_n(&qp->busy, 1, __ATOMIC_ACQUIRE)) {
        if (who == SV_EXEC_POSTER) {
            sv_engine_kick();   /* the holder may have just stopped */
        }
        return;
    }
    head = qp->sq_head;
    tail = SV_LOAD(&qp->sq_tail);
    while (head != tail) {
        w = &qp->sq[head & (qp->sq_size - 1)];
        if (SV_LOAD(&qp->s->state) == IBV_QPS_ERR) {
            sv_send_complete(qp, w, IBV_WC_WR_FLUSH_ERR);
            sv_qp_retire(qp, head);
        } else {
            if (who == SV_EXEC_POSTER && sv_for_engine(w)) {
                break;
            }
            if (w->deliver_ns != 0 || qp->retry_at_ns != 0) {
                start = sv_link_start_ns(w, who);
                now   = sv_now_ns();
                if (start > now || qp->retry_at_ns > now) {
                    if (wake_ns != NULL) {
                        uint64_t t = start > qp->retry_at_ns ? start :
                                                               qp->retry_at_ns;
                        *wake_ns = t < *wake_ns ? t : *wake_ns;
                    }
                    break;
                }
            }
            qp->retry_at_ns = 0;
            if (who == SV_EXEC_THREAD) {
                SV_STORE(&sv_eng.moving, 1);
            }
            ret = sv_exec(qp, w);
            if (who == SV_EXEC_THREAD) {
                SV_STORE(&sv_eng.moving, 0);
            }
            if (ret == SV_BLOCKED) {
                if (wake_ns != NULL && qp->retry_at_ns < *wake_ns) {
                    *wake_ns = qp->retry_at_ns;
                }
                break;
            }
            qp->rnr_left      = -1;
            qp->timeout_at_ns = 0;
            if (ret == SV_DONE) {
                sv_qp_retire(qp, head);
            }
        }
        /* the slot is the poster's once the head passes it */
        linked = (w->deliver_ns != 0);
        SV_STORE(&qp->sq_head, ++head);
        if ((who == SV_EXEC_THREAD) || ((who == SV_EXEC_ENGINE) && linked)) {
            /* the engine thread: one WR per QP and pass; a helper: one WR
             * the link model held it for (sv_engine_help()) */
            break;
        }
        if (head == tail) {
            tail = SV_LOAD(&qp->sq_tail);
        }
    }
    SV_STORE(&qp->busy, 0);
    if (who == SV_EXEC_POSTER && head != SV_LOAD(&qp->sq_tail)) {
        sv_engine_kick();
    }
}

uint64_t sv_link_stamp(sv_context_t *ctx, uint64_t bytes, uint64_t *wire_p)
{
    uint64_t now = sv_now_ns();
    uint64_t ser = (uint64_t)((double)bytes * 8.0 / sv_g.cfg.link_gbps);
    uint64_t cur = SV_LOAD(&ctx->link_free_ns), start, end;

    do {
        start = cur > now ? cur : now;
        end   = start + ser;
    } while (!__atomic_compare_exchange_n(&ctx->link_free_ns, &cur, end, 0,
                                          __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    *wire_p = start;
    return end + (uint64_t)(sv_g.cfg.link_lat_us * 1000.0) + 1;
}

/* ---------------------------------------------------------------------- */
/* the engine thread: one per process, sleeps on a futex when idle */

/* A timed futex wait on a virtual machine overshoots by tens of
 * microseconds, by milliseconds now and then: the engine wakes this early
 * for a timer (RNR, retry, link model) and spins the rest, so that a WR
 * runs when it is due */
#define SV_ENGINE_WAKE_EARLY_NS 100000

static void sv_futex_wait(uint32_t *addr, uint32_t val, uint64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;

    if (timeout_ns != UINT64_MAX) {
        ts.tv_sec  = timeout_ns / 1000000000ull;
        ts.tv_nsec = timeout_ns % 1000000000ull;
        tsp = &ts;
    }
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, tsp, NULL, 0);
}

static void *sv_engine_main(void *arg)
{
    uint64_t wake, now, spin_until;
    uint32_t seq, before;
    sv_qp_priv_t *qp;
    int progressed;

    (void)arg;
    /* timed sleeps (RNR, link model) must not be stretched by the default
     * 50 us timer slack */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    for (;;) {
        seq        = SV_LOAD(&sv_eng.seq);
        wake       = UINT64_MAX;
        progressed = 0;
        pthread_mutex_lock(&sv_eng.lock);
        for (qp = sv_eng.qps; qp != NULL; qp = qp->eng_next) {
            if (qp->sq_head != SV_LOAD(&qp->sq_tail)) {
                before = qp->sq_head;
                sv_qp_progress(qp, SV_EXEC_THREAD, &wake);
                progressed |= (qp->sq_head != before);
            }
        }
        pthread_mutex_unlock(&sv_eng.lock);
        if (progressed) {
            /* one WR per QP and pass, then the core goes to whoever waits
             * for it: on a host with as many busy-polling threads as cores,
             * an engine thread that took a QP's whole queue executed it at
             * the pace of a shared core while the poller, which would
             * have helped (sv_engine_help()), waited behind the QP's busy
             * flag (first-use 1 MiB puts staged in 4 WRs: 2.2-2.6 GB/s,
             * against 4.9-5.7 GB/s with one WR per pass) */
            sched_yield();
            continue;
        }
        if (wake == UINT64_MAX && SV_LOAD(&sv_eng.seq) == seq) {
            SV_STORE(&sv_eng.pending, 0);
        }

        /* idle: poll for new work a little, then sleep until kicked or
         * until the nearest timer (RNR, retry, link model). The poll
         * yields: a rank bound to one core shares it with its engine
         * thread, and an engine that spun there kept the application from
         * the completion it had just written for the whole spin (a 4 MiB
         * READ at 100 Gb/s: its ATS went out 60 us after the data landed,
         * in about half of the process pairs, on rc_verbs and hcr alike) */
        now        = sv_now_ns();
        spin_until = now + (uint64_t)sv_g.cfg.engine_spin_us * 1000;
        if (wake < spin_until + SV_ENGINE_WAKE_EARLY_NS) {
            spin_until = wake;
        }
        while (SV_LOAD(&sv_eng.seq) == seq && sv_now_ns() < spin_until) {
            sched_yield();
        }
        if (SV_LOAD(&sv_eng.seq) != seq || wake <= sv_now_ns()) {
            continue;
        }
        __atomic_store_n(&sv_eng.sleeping, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&sv_eng.seq, __ATOMIC_SEQ_CST) == seq) {
            now = sv_now_ns();
            sv_futex_wait(&sv_eng.seq, seq,
                          (wake == UINT64_MAX) ?
                                  UINT64_MAX :
                          (wake > now + SV_ENGINE_WAKE_EARLY_NS) ?
                                  (wake - now - SV_ENGINE_WAKE_EARLY_NS) :
                                  0);
        }
        __atomic_store_n(&sv_eng.sleeping, 0, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void sv_engine_start(void)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t th;

    pthread_mutex_lock(&sv_eng.lock);
    if (!sv_eng.running) {
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* the engine takes no signals meant for the application */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (pthread_create(&th, &attr, sv_engine_main, NULL) == 0) {
            sv_eng.running = 1;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&sv_eng.lock);
}

void sv_engine_kick(void)
{
    if (!SV_LOAD(&sv_eng.running)) {
        sv_engine_start();
    }
    if (!SV_LOAD_RELAXED(&sv_eng.pending)) {
        SV_STORE(&sv_eng.pending, 1);
    }
    __atomic_add_fetch(&sv_eng.seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&sv_eng.sleeping, __ATOMIC_SEQ_CST)) {
        syscall(SYS_futex, &sv_eng.seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Whether the WR at the head of qp is due for the engine thread (its bytes
 * are on the modelled wire) but not yet for a poller that would help */
static int sv_engine_due(sv_qp_priv_t *qp)
{
    uint32_t head = qp->sq_head;
    const sv_swqe_t *w;
    uint64_t now;

    if (head == SV_LOAD(&qp->sq_tail)) {
        return 0;
    }
    w = &qp->sq[head & (qp->sq_size - 1)];
    if (w->deliver_ns == 0) {
        return 0;
    }
    /* a WR a helper starts late (sv_link_help_start_ns()) is not left to
     * the engine thread: it would wait out the wire time on the core */
    now = sv_now_ns();
    return (w->deliver_ns - w->wire_ns > SV_LINK_HELP_HOLD_NS) &&
           (sv_link_start_ns(w, SV_EXEC_THREAD) <= now) &&
           (sv_link_start_ns(w, SV_EXEC_ENGINE) > now);
}

/* Whether the engine thread may start the WR at the head of qp at time now
 * (its bytes are on the modelled wire, or it is queued for the engine
 * without the link model); a hint, read without the QP's busy flag */
static int sv_engine_startable(sv_qp_priv_t *qp, uint64_t now)
{
    uint32_t head = qp->sq_head;

    if ((head == SV_LOAD(&qp->sq_tail)) || (qp->retry_at_ns > now)) {
        return 0;
    }
    return sv_link_start_ns(&qp->sq[head & (qp->sq_size - 1)],
                            SV_EXEC_THREAD) <= now;
}

/*
 * A thread that polls a CQ and finds it empty would only spin: let it run
 * the engine's queued work for the QPs whose sends complete to that CQ
 * (under the link model, one WR per QP and call: see SV_LINK_HELP_HOLD_NS).
 * One that found completions executes, under the link model, the WR due
 * of each QP completing to that CQ, one per call: otherwise a thread that
 * keeps finding completions (data that keeps coming) executed none of its
 * own WRs, an ACK it posted went out when it next found its CQs empty (up
 * to 150 us later), and a rank that sends while it receives (an
 * all-to-all) put nothing on the wire for a millisecond at a time. With 2
 * cores
 * and busy-polling applications, the engine thread otherwise competes for a
 * core with the pollers (see README: mover choice). Work the engine has
 * already started is not taken (the QP's busy flag).
 *
 * A poller that has nothing to take gives its core away while the engine
 * thread moves data or has a WR due (an HCA's DMA does not wait for the
 * CPU): with a rank bound to one core, which its engine thread shares, the
 * woken engine thread otherwise waited for the poller's time slice to end,
 * and then moved data at half the core (16 MiB WRs at 20 Gb/s: 6.7 ms,
 * then up to 8.4 ms in a row, against 6.7 ms of wire time; test
 * softverbs.link_model_wire_time_bound_rank). So does one whose CQ is
 * not the due WR's: a process with two UCP contexts posted the ATS and
 * the answer of a rendezvous on one, then progressed the other, and they
 * went out 2.5-4 ms later (softverbs.link_model_other_context_polled).
 */
/* Whether the WR at the head of qp waits for the link model */
static int sv_engine_linked(sv_qp_priv_t *qp)
{
    uint32_t head = qp->sq_head;

    return (head != SV_LOAD(&qp->sq_tail)) &&
           (qp->sq[head & (qp->sq_size - 1)].deliver_ns != 0);
}

void sv_engine_help(sv_cq_priv_t *cq, int found)
{
    uint64_t now   = 0;
    int engine_due = 0;
    sv_qp_priv_t *qp;

    if (SV_LOAD_RELAXED(&sv_eng.moving)) {
        if (!found) {
            sched_yield();
        }
        return;
    }
    if (!SV_LOAD_RELAXED(&sv_eng.pending) ||
        pthread_mutex_trylock(&sv_eng.lock) != 0) {
        return;
    }
    for (qp = sv_eng.qps; qp != NULL; qp = qp->eng_next) {
        if (qp->sq_head == SV_LOAD(&qp->sq_tail) ||
            SV_LOAD_RELAXED(&qp->busy)) {
            continue;
        }
        if (!found) {
            if (qp->scq == cq) {
                sv_qp_progress(qp, SV_EXEC_ENGINE, NULL);
                engine_due |= sv_engine_due(qp);
            } else if (qp->ibqp.context != cq->ibcq.context) {
                /* another context's, which this thread may not poll for
                 * a while: the engine thread's to start, on a core this
                 * poller may share with it (below). A QP of this context
                 * is its poller's, and one polling this context polls
                 * its other CQs too (UCX: the receive CQ, then the send
                 * CQ): yielding for their WRs made 16 KiB messages at
                 * 25 Gb/s 20% slower. */
                if (now == 0) {
                    now = sv_now_ns(); /* once per call, not per QP */
                }
                engine_due |= sv_engine_startable(qp, now);
            }
        } else if (((qp->scq == cq) || (qp->rcq == cq)) &&
                   sv_engine_linked(qp)) {
            /* the one WR due, started as late as its copy allows: a thread
             * that keeps finding data to take (the receive CQ is the one
             * polled then) does not starve its own sends */
            sv_qp_progress(qp, SV_EXEC_ENGINE, NULL);
        }
    }
    pthread_mutex_unlock(&sv_eng.lock);
    if (engine_due) {
        sched_yield();
    }
}

void sv_engine_add(sv_qp_priv_t *qp)
{
    pthread_mutex_lock(&sv_eng.lock);
    qp->eng_next = sv_eng.qps;
    sv_eng.qps   = qp;
    pthread_mutex_unlock(&sv_eng.lock);
}

void sv_engine_remove(sv_qp_priv_t *qp)
{
    sv_qp_priv_t **pp;

    /* the engine holds the list lock for a whole pass, so once we have it
     * the engine is not inside this QP; wait out a posting thread too */
    pthread_mutex_lock(&sv_eng.lock);
    for (pp = &sv_eng.qps; *pp != NULL; pp = &(*pp)->eng_next) {
        if (*pp == qp) {
            *pp = qp->eng_next;
            break;
        }
    }
    pthread_mutex_unlock(&sv_eng.lock);
    while (__atomic_exchange_n(&qp->busy, 1, __ATOMIC_ACQUIRE)) {
        sched_yield();
    }
}

void sv_engine_atfork_child(void)
{
    pthread_mutex_init(&sv_eng.lock, NULL);
    sv_eng.qps      = NULL;
    sv_eng.running  = 0;
    sv_eng.sleeping = 0;
    sv_eng.moving   = 0;
}
