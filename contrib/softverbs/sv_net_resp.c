/*
 * softverbs network data path, responder side: the emulated NIC of a
 * process for requests that come from other hosts.
 *
 * Each process listens on net_port + its slot (on every device address).
 * A connection is served only after the handshake (sv_net.h): from the
 * address its initiator's LID names, by a peer that proves it holds the
 * user's secret. Its requests must then name source QPs of that initiator
 * (LID and process slot), so a request is taken only from the connection
 * of the QP it names. Connections are served by threads of a bounded pool:
 * at most SOFTVERBS_NET_MAX_CONNS at once, of which at most
 * SV_NET_MAX_PREAUTH still in their handshake (which must end within
 * SV_NET_HANDSHAKE_NS); beyond that a connection is accepted and closed at
 * once. A thread executes the requests against the process's own QPs, MRs,
 * receive queues and CQs, as the same-host executor does for a local
 * initiator: keys and bounds are checked, receive WQEs consumed, data
 * received from the socket straight into the target buffer, the target's
 * CQE written. The application makes no call for it. Blocking I/O on one
 * connection per thread cannot deadlock: a thread only waits for its peer.
 *
 * No lock is held while data comes from a socket: a receive WQE is taken
 * off its queue under the queue's lock, and its data is received after
 * that lock is released. What keeps the memory alive meanwhile is a fence:
 * the thread publishes the QP and MRs it is placing data into (busy_qp,
 * busy_mr), and ibv_destroy_qp / ibv_dereg_mr of this process wait for it
 * (sv_net_resp_fence), shutting the connection down when the peer stalls.
 *
 * Each RC request is answered exactly once, in order:
 *  - target QP unknown, not RTR/RTS or not connected to the requester: the
 *    responder holds the request and looks again every millisecond (a real
 *    requester retransmits), sending keepalives, until the requester's ack
 *    timeout or SOFTVERBS_NET_MAX_HOLD_MS, whichever comes first; then it
 *    answers IBV_WC_RETRY_EXC_ERR;
 *  - no receive WQE: it waits the target QP's RNR timer as often as the
 *    requester's rnr_retry allows (7: forever), but no longer than
 *    SOFTVERBS_NET_MAX_HOLD_MS in all, then IBV_WC_RNR_RETRY_EXC_ERR;
 *  - a responder error (bad rkey, bounds, access, receive too small) breaks
 *    the target QP as locally, answers the error, and answers every later
 *    request of that requester QP with a flush without executing it.
 * Every wait is bounded by these local settings, never by a value from the
 * wire. A frame that breaks the protocol (wrong magic or kind, a source QP
 * of someone else, a length beyond the limits) closes the connection.
 */
#define _GNU_SOURCE
#include "sv_net.h"
#include "sv_auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SV_NET_PAYLOAD_STALL_NS (10ull * 1000000000ull)
#define SV_NET_KEEPALIVE_NS     (50ull * 1000000ull)
#define SV_NET_MAX_FAILED       64
/* a fence lets a transfer in progress finish for this long, then shuts its
 * connection down */
#define SV_NET_FENCE_GRACE_NS (100ull * 1000000ull)
/* accept() failing for want of descriptors or memory: wait this long
 * (doubling up to the maximum) before trying again */
#define SV_NET_BACKOFF_MIN_NS (10ull * 1000000ull)
#define SV_NET_BACKOFF_MAX_NS (1000ull * 1000000ull)

/* one accepted connection */
typedef struct sv_net_peer {
    int fd;
    uint32_t ip; /* the initiator's address, network order */
    uint16_t lid; /* who it proved to be (handshake) */
    uint16_t slot;
    int authed;
    uint64_t last_tx_ns;
    /* requester QPs whose requests are flushed after a responder error */
    uint32_t failed[SV_NET_MAX_FAILED];
    unsigned nfailed;
    /* what this thread places data into (sv_net_resp_fence): a QP (table
     * index + 1) whose receive WQE it took, MRs (table index) */
    uint32_t busy_qp;
    uint32_t busy_mr[SV_MAX_RECV_SGE];
    unsigned nbusy_mr; /* entries of busy_mr set */
    int fenced; /* a fence shut the connection down */
    struct sv_net_peer *next;
} sv_net_peer_t;

static struct {
    pthread_mutex_t lock; /* all of this */
    int             started;
    int             nfds;
    int             fds[SV_MAX_DEVS];
    sv_net_peer_t *peers; /* connections being served */
    unsigned npeers;
    unsigned npreauth; /* of which still in the handshake */
    /* QPs being destroyed (table index): a thread that took a receive WQE
     * of one must not place data (sv_net_resp_fence) */
    uint8_t dying[SV_MAX_QP];
    unsigned log_refused, log_auth, log_proto, log_accept;
} sv_resp = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ---------------------------------------------------------------------- */
/* fences */

static int
sv_net_peer_busy_on(sv_net_peer_t *p, uint32_t qp_idx, uint32_t mr_idx)
{
    int i;

    if (qp_idx != 0 &&
        __atomic_load_n(&p->busy_qp, __ATOMIC_SEQ_CST) == qp_idx) {
        return 1;
    }
    for (i = 0; mr_idx != 0 && i < SV_MAX_RECV_SGE; ++i) {
        if (__atomic_load_n(&p->busy_mr[i], __ATOMIC_SEQ_CST) == mr_idx) {
            return 1;
        }
    }
    return 0;
}

/*
 * The owner takes an object away: the QP's 'dying' mark or the MR's key
 * was cleared (sequentially consistent) before this is called, and a
 * responder thread publishes what it is busy with before it checks that
 * mark or key again (sv_net_busy_mr, sv_net_qp_dying). So either it sees the
 * object gone and leaves its memory alone, or this sees the thread busy
 * and waits for it.
 */
void sv_net_resp_fence(uint32_t qp_idx, uint32_t mr_idx)
{
    uint64_t start     = sv_now_ns();
    struct timespec ts = {0, 200000};
    sv_net_peer_t *p;
    int found;

    if (qp_idx != 0 && qp_idx <= SV_MAX_QP) {
        __atomic_store_n(&sv_resp.dying[qp_idx - 1], 1, __ATOMIC_SEQ_CST);
    }
    if (__atomic_load_n(&sv_resp.npeers, __ATOMIC_SEQ_CST) == 0) {
        return;
    }
    pthread_mutex_lock(&sv_resp.lock);
    for (;;) {
        found = 0;
        for (p = sv_resp.peers; p != NULL; p = p->next) {
            if (!sv_net_peer_busy_on(p, qp_idx, mr_idx)) {
                continue;
            }
            found = 1;
            if (!p->fenced && sv_now_ns() - start > SV_NET_FENCE_GRACE_NS) {
                /* a stalled peer must not keep the owner waiting: the
                 * thread's receive ends, and it drops the connection */
                p->fenced = 1;
                shutdown(p->fd, SHUT_RDWR);
            }
        }
        if (!found) {
            break;
        }
        pthread_mutex_unlock(&sv_resp.lock);
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&sv_resp.lock);
    }
    pthread_mutex_unlock(&sv_resp.lock);
}

void sv_net_resp_qp_alive(uint32_t idx)
{
    if (idx < SV_MAX_QP) {
        __atomic_store_n(&sv_resp.dying[idx], 0, __ATOMIC_SEQ_CST);
    }
}

/* Publish the MRs this thread is about to place data into or read from,
 * then check they are still registered under the keys they were found by:
 * 0, or -1 (and nothing published). */
static int sv_net_busy_mr(sv_net_peer_t *p, const uint32_t *mr_idx,
                          const uint32_t *keys, int n)
{
    int i, gone = 0;

    p->nbusy_mr = (unsigned)n;
    for (i = 0; i < n; ++i) {
        __atomic_store_n(&p->busy_mr[i], mr_idx[i], __ATOMIC_SEQ_CST);
    }
    for (i = 0; i < n; ++i) {
        if (__atomic_load_n(&sv_g.shm->mrs[mr_idx[i]].key, __ATOMIC_SEQ_CST) !=
            keys[i]) {
            gone = 1;
        }
    }
    for (i = 0; gone && i < n; ++i) {
        __atomic_store_n(&p->busy_mr[i], 0, __ATOMIC_RELEASE);
    }
    if (gone) {
        p->nbusy_mr = 0;
    }
    return gone ? -1 : 0;
}

static int sv_net_qp_dying(uint32_t qp_idx)
{
    return __atomic_load_n(&sv_resp.dying[qp_idx - 1], __ATOMIC_SEQ_CST);
}

/* (clearing needs no ordering with what follows: a fence only has to see
 * it eventually, and the data placed before it is ordered by release) */
static void sv_net_busy_end(sv_net_peer_t *p)
{
    unsigned i;

    __atomic_store_n(&p->busy_qp, 0, __ATOMIC_RELEASE);
    for (i = 0; i < p->nbusy_mr; ++i) {
        __atomic_store_n(&p->busy_mr[i], 0, __ATOMIC_RELEASE);
    }
    p->nbusy_mr = 0;
}

/* ---------------------------------------------------------------------- */
/* requests */

static int sv_net_peer_failed(const sv_net_peer_t *p, uint32_t qpn)
{
    unsigned i;

    for (i = 0; i < p->nfailed && i < SV_NET_MAX_FAILED; ++i) {
        if (p->failed[i] == qpn) {
            return 1;
        }
    }
    return 0;
}

static void sv_net_peer_fail(sv_net_peer_t *p, uint32_t qpn)
{
    if (!sv_net_peer_failed(p, qpn)) {
        p->failed[p->nfailed++ % SV_NET_MAX_FAILED] = qpn;
    }
}

static int sv_net_answer_send(sv_net_peer_t *p, const sv_net_hdr_t *req,
                              int status, void *data, size_t len)
{
    struct iovec iov[2];
    sv_net_hdr_t a;

    memset(&a, 0, sizeof(a));
    a.magic   = SV_NET_MAGIC;
    a.kind    = SV_NET_ANSWER;
    a.status  = (uint8_t)status;
    a.src_qpn = req->src_qpn;
    a.seq     = req->seq;
    a.length  = len;
    iov[0].iov_base = &a;
    iov[0].iov_len  = sizeof(a);
    iov[1].iov_base = data;
    iov[1].iov_len  = len;
    p->last_tx_ns   = sv_now_ns();
    return sv_net_send_iov(p->fd, iov, len > 0 ? 2 : 1);
}

/* wait 'ns' while the requester is kept informed that we are alive */
static int sv_net_hold(sv_net_peer_t *p, uint64_t ns)
{
    uint64_t end = sv_now_ns() + ns, now;
    struct iovec iov;
    sv_net_hdr_t k;

    while ((now = sv_now_ns()) < end) {
        if (now - p->last_tx_ns >= SV_NET_KEEPALIVE_NS) {
            memset(&k, 0, sizeof(k));
            k.magic       = SV_NET_MAGIC;
            k.kind        = SV_NET_KEEPALIVE;
            iov.iov_base  = &k;
            iov.iov_len   = sizeof(k);
            p->last_tx_ns = now;
            if (sv_net_send_iov(p->fd, &iov, 1) != 0) {
                return -1;
            }
        }
        sv_delay_ns(end - now < 1000000 ? end - now : 1000000);
    }
    return 0;
}

/* refuse a request: its data is read and dropped, the error answered */
static int sv_net_refuse(sv_net_peer_t *p, const sv_net_hdr_t *h, int status)
{
    if (sv_net_req_has_data(h) &&
        sv_net_drain(p->fd, h->length, SV_NET_PAYLOAD_STALL_NS) != 0) {
        return -1;
    }
    if (status != IBV_WC_WR_FLUSH_ERR) {
        sv_net_peer_fail(p, h->src_qpn);
    }
    return sv_net_answer_send(p, h, status, NULL, 0);
}

static int sv_net_qp_ready(const sv_qp_t *q, const sv_net_hdr_t *h)
{
    uint32_t st;

    if (q == NULL || q->owner != sv_g.slot || q->type != IBV_QPT_RC) {
        return 0;
    }
    st = SV_LOAD(&q->state);
    return (st == IBV_QPS_RTR || st == IBV_QPS_RTS) &&
           q->dest_qpn == h->src_qpn && q->dlid == h->src_lid;
}

static uint32_t sv_net_mr_index(const sv_mr_t *mr)
{
    return (uint32_t)(mr - sv_g.shm->mrs);
}

/* the target MR of a WRITE/READ/atomic, after the responder's checks */
static const sv_mr_t *
sv_net_target(sv_qp_t *peer, const sv_net_hdr_t *h, uint32_t access)
{
    const sv_mr_t *mr;

    mr = sv_mr_lookup(h->rkey, peer->owner, peer->pd, h->raddr,
                      h->length ? h->length : 1, access);
    if (mr == NULL || !(peer->access & access)) {
        return NULL;
    }
    return mr;
}

static void *sv_net_mr_va(const sv_mr_t *mr, uint64_t iova)
{
    return (void *)(uintptr_t)(mr->addr + (iova - mr->iova));
}

/* the buffers of a receive WQE, skipping 'skip' bytes (UD: the GRH); as
 * sv_recv_iov(), and the MRs they are in. Returns the capacity, or -1 for
 * an lkey that does not cover its SGE. */
static int64_t sv_net_recv_target(const sv_qp_t *peer, const sv_rwqe_t *rw,
                                  size_t skip, struct iovec *iov, int *n,
                                  uint32_t *mr_idx, uint32_t *keys)
{
    const sv_mr_t *mr;
    int64_t cap = 0;
    uint32_t i;
    size_t len;

    *n = 0;
    for (i = 0; i < rw->num_sge && i < SV_MAX_RECV_SGE; ++i) {
        const struct ibv_sge *sge = &rw->sge[i];

        if (sge->length == 0) {
            continue;
        }
        mr = sv_mr_lookup(sge->lkey, peer->owner, peer->pd, sge->addr,
                          sge->length, IBV_ACCESS_LOCAL_WRITE);
        if (mr == NULL) {
            return -1;
        }
        len = sge->length;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        iov[*n].iov_base = (char *)sv_net_mr_va(mr, sge->addr) + skip;
        iov[*n].iov_len  = len - skip;
        mr_idx[*n]       = sv_net_mr_index(mr);
        keys[*n]         = sge->lkey;
        cap += (int64_t)(len - skip);
        skip = 0;
        ++*n;
    }
    return cap;
}

/*
 * SEND, SEND_WITH_IMM, RDMA_WRITE_WITH_IMM (wmr: the MR its data goes to,
 * already checked; NULL for no data): take a receive WQE, waiting on RNR as the requester
 * allows and the local limit permits, then receive the data with no lock
 * held, then write the target's CQE.
 */
static int sv_net_serve_recv(sv_net_peer_t *p, const sv_net_hdr_t *h,
                             sv_qp_t *peer, const sv_mr_t *wmr)
{
    uint64_t hold_end = sv_now_ns() + sv_net_limits.max_hold_ns;
    struct iovec riov[SV_MAX_RECV_SGE], split[SV_MAX_RECV_SGE + 1];
    uint32_t mr_idx[SV_MAX_RECV_SGE], keys[SV_MAX_RECV_SGE];
    uint32_t qp_idx = (uint32_t)(peer - sv_g.shm->qps) + 1;
    int rnr_left = h->rnr_retry, rn = 0, n, tail;
    int ist = IBV_WC_SUCCESS, ret;
    struct ibv_wc wc;
    sv_rwqe_t rw, *head;
    sv_rq_t *rq;
    int64_t cap;

    for (;;) {
        rq = sv_peer_rq(peer);
        if (rq == NULL) {
            return sv_net_refuse(p, h, IBV_WC_RETRY_EXC_ERR);
        }
        sv_lock(&rq->ring.cons_lock);
        /* the owner destroys a QP or SRQ under this lock: re-check */
        if (!sv_net_qp_ready(peer, h) || !SV_LOAD(&peer->in_use) ||
            (peer->srq && !SV_LOAD(&sv_g.shm->srqs[peer->srq - 1].in_use))) {
            sv_unlock(&rq->ring.cons_lock);
            return sv_net_refuse(p, h, IBV_WC_RETRY_EXC_ERR);
        }
        if ((head = sv_rq_head(rq)) != NULL) {
            break;
        }
        sv_unlock(&rq->ring.cons_lock);
        if (rnr_left == 0 || sv_now_ns() >= hold_end) {
            return sv_net_refuse(p, h, IBV_WC_RNR_RETRY_EXC_ERR);
        }
        if (h->rnr_retry != 7) {    /* 7 means retry forever */
            --rnr_left;
        }
        if (sv_net_hold(p, sv_rnr_delay_ns(peer->min_rnr_timer)) != 0) {
            return -1;
        }
    }
    /* the WQE is ours from here on: taken off the queue, and the lock
     * released before any data is read from the socket */
    sv_rwqe_copy(&rw, head);
    SV_STORE(&rq->ring.cons, rq->ring.cons + 1);
    sv_rq_consumed(peer, rq);
    /* published under the lock that the owner takes to mark the QP gone:
     * a fence after that sees it (sv_net_resp_fence) */
    __atomic_store_n(&p->busy_qp, qp_idx, __ATOMIC_SEQ_CST);
    sv_unlock(&rq->ring.cons_lock);
    if (sv_net_qp_dying(qp_idx)) {
        /* being destroyed: its buffers and CQ are the owner's again */
        sv_net_busy_end(p);
        return sv_net_refuse(p, h, IBV_WC_RETRY_EXC_ERR);
    }

    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = rw.wr_id;
    wc.qp_num = peer->qpn;
    wc.src_qp = h->src_qpn;
    wc.slid   = h->src_lid;
    wc.sl     = h->sl;
    if (h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        /* its data goes to the MR (none when the length is 0) */
        wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        cap       = (int64_t)h->length;
        if (wmr != NULL) {
            riov[0].iov_base = sv_net_mr_va(wmr, h->raddr);
            riov[0].iov_len  = h->length;
            mr_idx[0]        = sv_net_mr_index(wmr);
            keys[0]          = h->rkey;
            rn               = 1;
        }
    } else {
        wc.opcode = IBV_WC_RECV;
        cap       = sv_net_recv_target(peer, &rw, 0, riov, &rn, mr_idx, keys);
    }
    if (cap >= 0 && sv_net_busy_mr(p, mr_idx, keys, rn) != 0) {
        cap = -1; /* an MR went away meanwhile */
    }
    if (cap < 0 || (uint64_t)cap < h->length) {
        wc.status = (cap < 0) ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR;
        ist       = (cap < 0) ? IBV_WC_REM_OP_ERR : IBV_WC_REM_INV_REQ_ERR;
        if (h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
            ist = IBV_WC_REM_ACCESS_ERR; /* its MR went away */
        }
        ret = sv_net_drain(p->fd, h->length, SV_NET_PAYLOAD_STALL_NS);
    } else {
        n   = sv_iov_split_tail(riov, rn, h->length, split, &tail);
        ret = sv_net_recv_iov(p->fd, split, n, h->length,
                              SV_NET_PAYLOAD_STALL_NS);
    }
    if (ret != 0) {
        /* the requester went away in the middle of the message, or a
         * fence cut it off: the WQE we took completes flushed, and the QP
         * breaks (its requester's QP is in error by now too) */
        if (!sv_net_qp_dying(qp_idx)) {
            wc.status = IBV_WC_WR_FLUSH_ERR;
            sv_cq_push(&sv_g.shm->cqs[peer->rcq], &wc, 1);
            sv_responder_error(peer, SV_ASYNC_REQ_ERR);
        }
        sv_net_busy_end(p);
        return -1;
    }
    if (h->opcode != IBV_WR_SEND) {
        wc.imm_data  = h->imm;
        wc.wc_flags |= IBV_WC_WITH_IMM;
    }
    if (wc.status == IBV_WC_SUCCESS) {
        wc.byte_len = (uint32_t)h->length;
    }
    /* the CQE is written while the fence still holds the QP (and so its
     * CQ) alive */
    sv_cq_push(&sv_g.shm->cqs[peer->rcq], &wc,
               (h->flags & SV_NET_F_SOLICITED) || wc.status);
    if (ist != IBV_WC_SUCCESS) {
        /* the receive WQE completed in error: the responder QP breaks */
        sv_responder_error(peer, ist == IBV_WC_REM_ACCESS_ERR ?
                                         SV_ASYNC_ACCESS_ERR :
                                         SV_ASYNC_REQ_ERR);
        sv_net_peer_fail(p, h->src_qpn);
    }
    sv_net_busy_end(p);
    return sv_net_answer_send(p, h, ist, NULL, 0);
}

static int sv_net_serve_atomic(sv_net_peer_t *p, const sv_net_hdr_t *h,
                               sv_qp_t *peer)
{
    const sv_mr_t *mr;
    uint64_t *va, old;
    sv_lock_t *lock;
    uint32_t idx;

    if (h->length != 8 || (h->raddr & 7)) {
        return sv_net_refuse(p, h, IBV_WC_REM_INV_REQ_ERR);
    }
    mr  = sv_net_target(peer, h, IBV_ACCESS_REMOTE_ATOMIC);
    idx = mr ? sv_net_mr_index(mr) : 0;
    if (mr == NULL || sv_net_busy_mr(p, &idx, &h->rkey, 1) != 0) {
        sv_responder_error(peer, SV_ASYNC_ACCESS_ERR);
        return sv_net_refuse(p, h, IBV_WC_REM_ACCESS_ERR);
    }
    va = sv_net_mr_va(mr, h->raddr);
    /* atomic with respect to the same-host softverbs atomics on the word */
    lock = sv_atomic_lock(sv_g.pid, (uintptr_t)va);
    sv_lock(lock);
    old = *(volatile uint64_t *)va;
    if (h->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        *(volatile uint64_t *)va = old + h->compare_add;
    } else if (old == h->compare_add) {
        *(volatile uint64_t *)va = h->swap;
    }
    sv_unlock(lock);
    sv_net_busy_end(p);
    return sv_net_answer_send(p, h, IBV_WC_SUCCESS, &old, 8);
}

static int sv_net_serve_rc(sv_net_peer_t *p, const sv_net_hdr_t *h)
{
    /* the requester's ack timeout, but never longer than we allow */
    uint64_t hold     = h->timeout_ns < sv_net_limits.max_hold_ns ?
                                h->timeout_ns :
                                sv_net_limits.max_hold_ns;
    uint64_t deadline = sv_now_ns() + hold;
    struct iovec iov, split[2];
    const sv_mr_t *mr = NULL;
    int n, tail, ret;
    sv_qp_t *peer;
    uint32_t access, idx;

    if (sv_net_peer_failed(p, h->src_qpn)) {
        return sv_net_refuse(p, h, IBV_WC_WR_FLUSH_ERR);
    }
    /* wait for the target QP, like a requester retransmitting */
    while (!sv_net_qp_ready(peer = sv_qp_by_qpn(h->dst_qpn), h)) {
        if (sv_now_ns() >= deadline) {
            return sv_net_refuse(p, h, IBV_WC_RETRY_EXC_ERR);
        }
        if (sv_net_hold(p, 1000000) != 0) {
            return -1;
        }
    }
    switch (h->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        return sv_net_serve_recv(p, h, peer, NULL);
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return sv_net_serve_atomic(p, h, peer);
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
        break;
    default:
        return sv_net_refuse(p, h, IBV_WC_REM_INV_REQ_ERR);
    }
    access = (h->opcode == IBV_WR_RDMA_READ) ? IBV_ACCESS_REMOTE_READ :
                                               IBV_ACCESS_REMOTE_WRITE;
    if (h->length > 0) {
        mr = sv_net_target(peer, h, access);
        if (mr == NULL) {
            sv_responder_error(peer, SV_ASYNC_ACCESS_ERR);
            return sv_net_refuse(p, h, IBV_WC_REM_ACCESS_ERR);
        }
    }
    if (h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        return sv_net_serve_recv(p, h, peer, mr);
    }
    if (h->length == 0) {
        return sv_net_answer_send(p, h, IBV_WC_SUCCESS, NULL, 0);
    }
    idx = sv_net_mr_index(mr);
    if (sv_net_busy_mr(p, &idx, &h->rkey, 1) != 0) {
        sv_responder_error(peer, SV_ASYNC_ACCESS_ERR);
        return sv_net_refuse(p, h, IBV_WC_REM_ACCESS_ERR);
    }
    if (h->opcode == IBV_WR_RDMA_READ) {
        ret = sv_net_answer_send(p, h, IBV_WC_SUCCESS,
                                 sv_net_mr_va(mr, h->raddr), h->length);
        sv_net_busy_end(p);
        return ret;
    }
    iov.iov_base = sv_net_mr_va(mr, h->raddr);
    iov.iov_len  = h->length;
    n            = sv_iov_split_tail(&iov, 1, h->length, split, &tail);
    ret = sv_net_recv_iov(p->fd, split, n, h->length, SV_NET_PAYLOAD_STALL_NS);
    sv_net_busy_end(p);
    if (ret != 0) {
        return -1;
    }
    return sv_net_answer_send(p, h, IBV_WC_SUCCESS, NULL, 0);
}

/* a datagram: placed if a UD QP with that Q_Key has a receive, else lost.
 * A datagram is at most an MTU: it is read into a buffer of ours first, so
 * the receive queue's lock is held only for a copy in memory. */
static int sv_net_serve_ud(sv_net_peer_t *p, const sv_net_hdr_t *h)
{
    struct iovec riov[SV_MAX_RECV_SGE];
    uint32_t mr_idx[SV_MAX_RECV_SGE], keys[SV_MAX_RECV_SGE];
    uint8_t data[SV_MTU];
    sv_qp_t *peer = sv_qp_by_qpn(h->dst_qpn);
    struct ibv_wc wc;
    sv_rwqe_t rw, *head;
    sv_rq_t *rq = NULL;
    size_t off;
    int64_t cap;
    uint32_t st;
    int rn, i;

    if (sv_net_recv_buf(p->fd, data, h->length, SV_NET_PAYLOAD_STALL_NS) != 0) {
        return -1;
    }
    if (peer != NULL && peer->owner == sv_g.slot &&
        peer->type == IBV_QPT_UD && peer->qkey == h->qkey) {
        st = SV_LOAD(&peer->state);
        if (st == IBV_QPS_RTR || st == IBV_QPS_RTS) {
            rq = sv_peer_rq(peer);
        }
    }
    if (rq == NULL) {
        return 0;
    }
    sv_lock(&rq->ring.cons_lock);
    if ((head = sv_rq_head(rq)) == NULL || !SV_LOAD(&peer->in_use) ||
        peer->qpn != h->dst_qpn ||
        (peer->srq && !SV_LOAD(&sv_g.shm->srqs[peer->srq - 1].in_use))) {
        sv_unlock(&rq->ring.cons_lock);
        return 0;
    }
    sv_rwqe_copy(&rw, head);
    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = rw.wr_id;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = peer->qpn;
    wc.src_qp = h->src_qpn;
    wc.slid   = h->src_lid;
    wc.sl     = h->sl;
    if (h->opcode == IBV_WR_SEND_WITH_IMM) {
        wc.imm_data  = h->imm;
        wc.wc_flags |= IBV_WC_WITH_IMM;
    }
    /* the owner frees its buffers only after destroying the QP, which
     * takes this lock: the copy below is safe under it */
    cap = sv_net_recv_target(peer, &rw, SV_GRH_LEN, riov, &rn, mr_idx, keys);
    if (cap < 0 || (uint64_t)cap < h->length) {
        wc.status = (cap < 0) ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR;
    } else {
        for (i = 0, off = 0; i < rn && off < h->length; ++i) {
            size_t n = riov[i].iov_len < h->length - off ? riov[i].iov_len :
                                                           h->length - off;

            memcpy(riov[i].iov_base, data + off, n);
            off += n;
        }
        wc.byte_len = (uint32_t)h->length + SV_GRH_LEN;
    }
    sv_rq_complete(peer, rq, &wc, !!(h->flags & SV_NET_F_SOLICITED));
    return 0;
}

/* ---------------------------------------------------------------------- */
/* connections */

/* The responder's half of the handshake (sv_net.h) on the connection fd
 * from address ip, for process want_slot of this host (SV_NET_SLOT_CM: its
 * connection manager); our slot and gen go in the CHALLENGE. 0 and the
 * HELLO in *hello_out: the initiator is who it says, from where its LID
 * says, and holds our secret. */
int sv_net_handshake_accept(int fd, uint32_t ip, uint16_t want_slot,
                            uint32_t gen, sv_net_auth_t *hello_out)
{
    uint64_t deadline = sv_now_ns() + SV_NET_HANDSHAKE_NS;
    struct sockaddr_in local;
    socklen_t len = sizeof(local);
    sv_net_auth_t hello, ch, auth;
    struct in_addr in = {ip};
    uint8_t mac[32];
    struct iovec iov;
    uint32_t want;

    if (sv_net_recv_until(fd, &hello, sizeof(hello), deadline) != 0) {
        return -1; /* a scan, or an old softverbs: not worth a message */
    }
    if (hello.magic != SV_NET_MAGIC || hello.kind != SV_NET_HELLO ||
        hello.version != SV_NET_VERSION) {
        sv_net_log_limited(&sv_resp.log_proto,
                           "refused a connection from "
                           "%s: not a softverbs handshake of version %d",
                           inet_ntoa(in), SV_NET_VERSION);
        return -1;
    }
    if (getsockname(fd, (struct sockaddr *)&local, &len) != 0) {
        return -1;
    }
    /* the address that the initiator's LID names (the subnet manager
     * rule, sv_net.c): the /16 of the address it reached us on */
    want = htonl((ntohl(local.sin_addr.s_addr) & 0xffff0000u) | hello.lid);
    if (hello.lid == 0 || hello.lid >= 0xc000 || want != ip ||
        hello.dst_slot != want_slot || hello.slot >= SV_MAX_PROCS ||
        hello.dst_lid != (ntohl(local.sin_addr.s_addr) & 0xffff)) {
        sv_net_log_limited(&sv_resp.log_auth,
                           "refused a connection from "
                           "%s: it claims LID %u and process %u, and wants "
                           "LID %u process %u",
                           inet_ntoa(in), (unsigned)hello.lid,
                           (unsigned)hello.slot, (unsigned)hello.dst_lid,
                           (unsigned)hello.dst_slot);
        return -1;
    }
    memset(&ch, 0, sizeof(ch));
    ch.magic    = SV_NET_MAGIC;
    ch.kind     = SV_NET_CHALLENGE;
    ch.version  = SV_NET_VERSION;
    ch.slot     = (uint16_t)sv_g.slot;
    ch.reserved = gen;
    if (sv_auth_random(ch.nonce, sizeof(ch.nonce)) != 0) {
        return -1;
    }
    sv_net_auth_mac(1, &hello, ch.nonce, ch.mac);
    iov.iov_base = &ch;
    iov.iov_len  = sizeof(ch);
    if (sv_net_send_iov(fd, &iov, 1) != 0 ||
        sv_net_recv_until(fd, &auth, sizeof(auth), deadline) != 0) {
        return -1; /* an initiator that does not know us gives up here */
    }
    sv_net_auth_mac(0, &hello, ch.nonce, mac);
    if (auth.magic != SV_NET_MAGIC || auth.kind != SV_NET_AUTH ||
        !sv_auth_equal(mac, auth.mac, sizeof(mac))) {
        sv_net_log_limited(&sv_resp.log_auth,
                           "refused a connection from "
                           "%s: it does not hold this user's secret",
                           inet_ntoa(in));
        return -1;
    }
    memset(&ch, 0, sizeof(ch));
    ch.magic     = SV_NET_MAGIC;
    ch.kind      = SV_NET_WELCOME;
    ch.version   = SV_NET_VERSION;
    iov.iov_base = &ch;
    iov.iov_len  = sizeof(ch);
    if (sv_net_send_iov(fd, &iov, 1) != 0) {
        return -1;
    }
    *hello_out = hello;
    return 0;
}

static int sv_net_accept_handshake(sv_net_peer_t *p)
{
    sv_net_auth_t hello;

    if (sv_net_handshake_accept(p->fd, p->ip, (uint16_t)sv_g.slot, 0, &hello) !=
        0) {
        return -1;
    }
    p->lid  = hello.lid;
    p->slot = hello.slot;
    return 0;
}

/* Is this request one the connection may make? Its source must be a QP of
 * the initiator that authenticated, and its sizes within the limits. */
static int sv_net_req_valid(const sv_net_peer_t *p, const sv_net_hdr_t *h)
{
    struct in_addr in = {p->ip};

    if (h->magic != SV_NET_MAGIC ||
        (h->kind != SV_NET_REQ_RC && h->kind != SV_NET_REQ_UD)) {
        sv_net_log_limited(&sv_resp.log_proto,
                           "closed the connection of "
                           "%s: not a request frame",
                           inet_ntoa(in));
        return 0;
    }
    if (h->src_lid != p->lid || (h->src_qpn >> SV_QPN_SLOT_SHIFT) != p->slot) {
        sv_net_log_limited(&sv_resp.log_proto,
                           "closed the connection of "
                           "%s (LID %u, process %u): a request from QP 0x%x "
                           "LID %u, which is not its own",
                           inet_ntoa(in), (unsigned)p->lid, (unsigned)p->slot,
                           (unsigned)h->src_qpn, (unsigned)h->src_lid);
        return 0;
    }
    if (h->length > (h->kind == SV_NET_REQ_UD ? SV_MTU : SV_MAX_MSG)) {
        sv_net_log_limited(&sv_resp.log_proto,
                           "closed the connection of "
                           "%s: a request of %llu bytes",
                           inet_ntoa(in), (unsigned long long)h->length);
        return 0;
    }
    return 1;
}

static void sv_net_peer_release(sv_net_peer_t *p)
{
    sv_net_peer_t **pp;

    pthread_mutex_lock(&sv_resp.lock);
    for (pp = &sv_resp.peers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    __atomic_sub_fetch(&sv_resp.npeers, 1, __ATOMIC_SEQ_CST);
    if (!p->authed) {
        --sv_resp.npreauth;
    }
    pthread_mutex_unlock(&sv_resp.lock);
    /* closed only once it is off the list: a fence never shuts down a
     * descriptor number that was reused meanwhile */
    close(p->fd);
    free(p);
}

static void *sv_net_responder(void *arg)
{
    sv_net_peer_t *p = arg;
    sv_net_hdr_t h;
    int ret;

    if (sv_net_accept_handshake(p) != 0) {
        goto out;
    }
    pthread_mutex_lock(&sv_resp.lock);
    p->authed = 1;
    --sv_resp.npreauth;
    pthread_mutex_unlock(&sv_resp.lock);
    for (;;) {
        /* between requests the connection may idle for any time; a frame
         * once begun must keep coming */
        sv_net_spin_readable(p->fd);
        if (sv_net_recv_buf(p->fd, &h, 1, 0) != 0 ||
            sv_net_recv_buf(p->fd, (char *)&h + 1, sizeof(h) - 1,
                            SV_NET_PAYLOAD_STALL_NS) != 0 ||
            !sv_net_req_valid(p, &h)) {
            break;
        }
        if (h.kind == SV_NET_REQ_RC) {
            ret = sv_net_serve_rc(p, &h);
        } else {
            ret = sv_net_serve_ud(p, &h);
        }
        if (ret != 0) {
            break;
        }
    }
out:
    sv_net_peer_release(p);
    return NULL;
}

/* a new connection: served if the limits allow, else closed at once */
static void sv_net_accepted(int fd, const struct sockaddr_in *sa)
{
    int one = 1, idle = 5, intvl = 1, cnt = 5;
    struct in_addr in = sa->sin_addr;
    sv_net_peer_t *p;

    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        close(fd);
        return;
    }
    p->fd = fd;
    p->ip = sa->sin_addr.s_addr;
    pthread_mutex_lock(&sv_resp.lock);
    if (sv_resp.npeers >= sv_net_limits.max_conns ||
        sv_resp.npreauth >= SV_NET_MAX_PREAUTH) {
        int preauth = sv_resp.npreauth >= SV_NET_MAX_PREAUTH;

        pthread_mutex_unlock(&sv_resp.lock);
        sv_net_log_limited(
                &sv_resp.log_refused,
                "refused a connection "
                "from %s: %s",
                inet_ntoa(in),
                preauth ? "too many connections in their handshake" :
                          "SOFTVERBS_NET_MAX_CONNS connections are served");
        close(fd);
        free(p);
        return;
    }
    p->next       = sv_resp.peers;
    sv_resp.peers = p;
    __atomic_add_fetch(&sv_resp.npeers, 1, __ATOMIC_SEQ_CST);
    ++sv_resp.npreauth;
    pthread_mutex_unlock(&sv_resp.lock);

    /* a requester whose host vanished must not pin a thread */
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    sv_net_tune_fd(fd, SV_NET_PAYLOAD_STALL_NS);
    if (sv_net_thread(sv_net_responder, p) != 0) {
        sv_net_peer_release(p);
    }
}

static void *sv_net_listener(void *arg)
{
    struct pollfd pfd[SV_MAX_DEVS];
    uint64_t backoff = 0;
    struct sockaddr_in sa;
    struct timespec ts;
    socklen_t len;
    int i, n, fd;

    (void)arg;
    for (;;) {
        if (backoff != 0) {
            /* out of descriptors or memory: accepting again at once would
             * spin on the same pending connection */
            ts.tv_sec  = (time_t)(backoff / 1000000000ull);
            ts.tv_nsec = (long)(backoff % 1000000000ull);
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&sv_resp.lock);
        n = sv_resp.nfds;
        for (i = 0; i < n; ++i) {
            pfd[i].fd     = sv_resp.fds[i];
            pfd[i].events = POLLIN;
        }
        pthread_mutex_unlock(&sv_resp.lock);
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            continue;
        }
        for (i = 0; i < n; ++i) {
            if (!(pfd[i].revents & POLLIN)) {
                continue;
            }
            len = sizeof(sa);
            fd = accept4(pfd[i].fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                    errno == ENOMEM) {
                    sv_net_log_limited(&sv_resp.log_accept,
                                       "cannot accept "
                                       "connections: %s; trying again "
                                       "later",
                                       strerror(errno));
                    backoff = backoff ? backoff * 2 : SV_NET_BACKOFF_MIN_NS;
                    if (backoff > SV_NET_BACKOFF_MAX_NS) {
                        backoff = SV_NET_BACKOFF_MAX_NS;
                    }
                }
                continue;
            }
            backoff = 0;
            if (len < sizeof(sa) || sa.sin_family != AF_INET) {
                close(fd);
                continue;
            }
            sv_net_accepted(fd, &sa);
        }
    }
    return NULL;
}

/* Listen on net_port + slot on every device address. Called once the
 * process has its slot (sv_init), so that a QPN exists only once the
 * process that serves it can be reached. */
int sv_net_resp_start(void)
{
    struct sockaddr_in sa;
    int i, j, fd, one = 1, ret = 0;

    pthread_mutex_lock(&sv_resp.lock);
    if (sv_resp.started) {
        goto out;
    }
    for (i = 0; i < sv_g.cfg.net_naddr; ++i) {
        for (j = 0; j < i; ++j) {
            if (sv_g.cfg.net_addr[j] == sv_g.cfg.net_addr[i]) {
                break;
            }
        }
        if (j < i) {
            continue;   /* devices sharing an address share the socket */
        }
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            ret = errno;
            goto out;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        memset(&sa, 0, sizeof(sa));
        sa.sin_family      = AF_INET;
        sa.sin_port        = htons((uint16_t)(sv_g.cfg.net_port + sv_g.slot));
        sa.sin_addr.s_addr = sv_g.cfg.net_addr[i];
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
            listen(fd, 64) != 0) {
            ret = errno;
            fprintf(stderr, "softverbs: cannot listen on %s:%u: %s\n",
                    inet_ntoa(sa.sin_addr), sv_g.cfg.net_port + sv_g.slot,
                    strerror(ret));
            close(fd);
            goto out;
        }
        sv_resp.fds[sv_resp.nfds++] = fd;
    }
    ret = sv_net_thread(sv_net_listener, NULL);
    if (ret == 0) {
        sv_resp.started = 1;
    }
out:
    if (ret != 0) {
        for (i = 0; i < sv_resp.nfds; ++i) {
            close(sv_resp.fds[i]);
        }
        sv_resp.nfds = 0;
    }
    pthread_mutex_unlock(&sv_resp.lock);
    return ret;
}

void sv_net_resp_atfork_child(void)
{
    int i;

    sv_net_peer_t *p;

    /* the parent's sockets belong to the parent's slot, and its responder
     * threads do not exist here: a fence must not wait for them, and our
     * copies of their connections must not keep them open when the
     * parent closes them (a connection is on the list while its
     * descriptor is open) */
    for (i = 0; i < sv_resp.nfds; ++i) {
        close(sv_resp.fds[i]);
    }
    for (p = sv_resp.peers; p != NULL; p = p->next) {
        close(p->fd);
    }
    pthread_mutex_init(&sv_resp.lock, NULL);
    sv_resp.nfds     = 0;
    sv_resp.started  = 0;
    sv_resp.peers    = NULL;
    sv_resp.npeers   = 0;
    sv_resp.npreauth = 0;
    memset(sv_resp.dying, 0, sizeof(sv_resp.dying));
}
