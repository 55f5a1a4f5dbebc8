/*
 * softverbs network data path, responder side: the emulated NIC of a
 * process for requests that come from other hosts.
 *
 * Each process listens on net_port + its slot (on every device address) and
 * serves each accepted connection with a thread of its own, which executes
 * the requests against the process's own QPs, MRs, receive queues and CQs,
 * as the same-host executor does for a local initiator: keys and bounds are
 * checked, receive WQEs consumed, data received from the socket straight
 * into the target buffer, the target's CQE written. The application makes
 * no call for it (one-sided operations, and SENDs that complete while it
 * computes). A thread per connection keeps blocking I/O simple and cannot
 * deadlock: it only ever waits for its own peer.
 *
 * Each RC request is answered exactly once, in order:
 *  - target QP unknown, not RTR/RTS or not connected to the requester: the
 *    responder holds the request and looks again every millisecond (a real
 *    requester retransmits), sending keepalives, until the requester's ack
 *    timeout; then it answers IBV_WC_RETRY_EXC_ERR;
 *  - no receive WQE: it waits the target QP's RNR timer as often as the
 *    requester's rnr_retry allows (7: forever), then IBV_WC_RNR_RETRY_EXC_ERR;
 *  - a responder error (bad rkey, bounds, access, receive too small) breaks
 *    the target QP as locally, answers the error, and answers every later
 *    request of that requester QP with a flush without executing it.
 */
#define _GNU_SOURCE
#include "sv_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SV_NET_PAYLOAD_STALL_NS (10ull * 1000000000ull)
#define SV_NET_KEEPALIVE_NS     (50ull * 1000000ull)
#define SV_NET_MAX_FAILED       64

static struct {
    pthread_mutex_t lock;
    int             started;
    int             nfds;
    int             fds[SV_MAX_DEVS];
} sv_resp = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* one accepted connection */
typedef struct {
    int      fd;
    uint64_t last_tx_ns;
    /* requester QPs whose requests are flushed after a responder error */
    uint32_t failed[SV_NET_MAX_FAILED];
    unsigned nfailed;
} sv_net_peer_t;

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

/* the target buffer of a WRITE/READ/atomic, after the responder's checks */
static void *sv_net_target(sv_qp_t *peer, const sv_net_hdr_t *h,
                           uint32_t access)
{
    const sv_mr_t *mr;

    mr = sv_mr_lookup(h->rkey, peer->owner, peer->pd, h->raddr,
                      h->length ? h->length : 1, access);
    if (mr == NULL || !(peer->access & access)) {
        return NULL;
    }
    return (void *)(uintptr_t)(mr->addr + (h->raddr - mr->iova));
}

/* SEND, SEND_WITH_IMM, RDMA_WRITE_WITH_IMM: consume a receive WQE */
static int sv_net_serve_recv(sv_net_peer_t *p, const sv_net_hdr_t *h,
                             sv_qp_t *peer, void *wbuf)
{
    struct iovec riov[SV_MAX_RECV_SGE], wiov, wsplit[2];
    int rnr_left = h->rnr_retry, rn, wn, tail, ist = IBV_WC_SUCCESS;
    struct ibv_wc wc;
    sv_rwqe_t rw;
    sv_rq_t *rq;
    int64_t cap;

    for (;;) {
        rq = sv_peer_rq(peer);
        if (rq == NULL) {
            return sv_net_refuse(p, h, IBV_WC_RETRY_EXC_ERR);
        }
        sv_lock(&rq->lock);
        /* the owner destroys a QP or SRQ under this lock: re-check */
        if (!sv_net_qp_ready(peer, h) || !SV_LOAD(&peer->in_use) ||
            (peer->srq && !SV_LOAD(&sv_g.shm->srqs[peer->srq - 1].in_use))) {
            sv_unlock(&rq->lock);
            return sv_net_refuse(p, h, IBV_WC_RETRY_EXC_ERR);
        }
        if (rq->ring.cons != SV_LOAD(&rq->ring.prod)) {
            break;
        }
        sv_unlock(&rq->lock);
        if (rnr_left == 0) {
            return sv_net_refuse(p, h, IBV_WC_RNR_RETRY_EXC_ERR);
        }
        if (h->rnr_retry != 7) {    /* 7 means retry forever */
            --rnr_left;
        }
        if (sv_net_hold(p, sv_rnr_delay_ns(peer->min_rnr_timer)) != 0) {
            return -1;
        }
    }
    memcpy(&rw, sv_ring_entry(&rq->ring, rq->ring.cons), sizeof(rw));
    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = rw.wr_id;
    wc.qp_num = peer->qpn;
    wc.src_qp = h->src_qpn;
    wc.slid   = h->src_lid;
    wc.sl     = h->sl;
    if (h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        wc.opcode     = IBV_WC_RECV_RDMA_WITH_IMM;
        wiov.iov_base = wbuf;
        wiov.iov_len  = h->length;
        wn            = sv_iov_split_tail(&wiov, 1, h->length, wsplit,
                                          &tail);
        if (sv_net_recv_iov(p->fd, wsplit, wn, h->length,
                            SV_NET_PAYLOAD_STALL_NS) != 0) {
            sv_unlock(&rq->lock);  /* WQE not consumed: nothing arrived */
            return -1;
        }
    } else {
        wc.opcode = IBV_WC_RECV;
        cap = sv_recv_iov(peer, &rw, 0, riov, &rn);
        if (cap < 0 || (uint64_t)cap < h->length) {
            wc.status = (cap < 0) ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR;
            ist       = (cap < 0) ? IBV_WC_REM_OP_ERR :
                                    IBV_WC_REM_INV_REQ_ERR;
            if (sv_net_drain(p->fd, h->length, SV_NET_PAYLOAD_STALL_NS)) {
                sv_unlock(&rq->lock);
                return -1;
            }
        } else if (sv_net_recv_iov(p->fd, riov, rn, h->length,
                                   SV_NET_PAYLOAD_STALL_NS) != 0) {
            sv_unlock(&rq->lock);
            return -1;
        }
    }
    if (h->opcode != IBV_WR_SEND) {
        wc.imm_data  = h->imm;
        wc.wc_flags |= IBV_WC_WITH_IMM;
    }
    wc.byte_len = (uint32_t)h->length;
    sv_rq_complete(peer, rq, &wc,
                   (h->flags & SV_NET_F_SOLICITED) || wc.status);
    if (ist != IBV_WC_SUCCESS) {
        /* the receive WQE completed in error: the responder QP breaks */
        sv_responder_error(peer, SV_ASYNC_REQ_ERR);
        sv_net_peer_fail(p, h->src_qpn);
    }
    return sv_net_answer_send(p, h, ist, NULL, 0);
}

static int sv_net_serve_atomic(sv_net_peer_t *p, const sv_net_hdr_t *h,
                               sv_qp_t *peer)
{
    uint64_t *va, old;
    sv_lock_t *lock;

    if (h->length != 8 || (h->raddr & 7)) {
        return sv_net_refuse(p, h, IBV_WC_REM_INV_REQ_ERR);
    }
    va = sv_net_target(peer, h, IBV_ACCESS_REMOTE_ATOMIC);
    if (va == NULL) {
        sv_responder_error(peer, SV_ASYNC_ACCESS_ERR);
        return sv_net_refuse(p, h, IBV_WC_REM_ACCESS_ERR);
    }
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
    return sv_net_answer_send(p, h, IBV_WC_SUCCESS, &old, 8);
}

static int sv_net_serve_rc(sv_net_peer_t *p, const sv_net_hdr_t *h)
{
    uint64_t deadline = sv_now_ns() + h->timeout_ns;
    struct iovec iov, split[2];
    int n, tail;
    sv_qp_t *peer;
    void *buf = NULL;
    uint32_t access;

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
        buf = sv_net_target(peer, h, access);
        if (buf == NULL) {
            sv_responder_error(peer, SV_ASYNC_ACCESS_ERR);
            return sv_net_refuse(p, h, IBV_WC_REM_ACCESS_ERR);
        }
    }
    if (h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        return sv_net_serve_recv(p, h, peer, buf);
    }
    if (h->opcode == IBV_WR_RDMA_READ) {
        return sv_net_answer_send(p, h, IBV_WC_SUCCESS, buf, h->length);
    }
    iov.iov_base = buf;
    iov.iov_len  = h->length;
    n            = sv_iov_split_tail(&iov, 1, h->length, split, &tail);
    if (sv_net_recv_iov(p->fd, split, n, h->length,
                        SV_NET_PAYLOAD_STALL_NS) != 0) {
        return -1;
    }
    return sv_net_answer_send(p, h, IBV_WC_SUCCESS, NULL, 0);
}

/* a datagram: placed if a UD QP with that Q_Key has a receive, else lost */
static int sv_net_serve_ud(sv_net_peer_t *p, const sv_net_hdr_t *h)
{
    struct iovec riov[SV_MAX_RECV_SGE];
    sv_qp_t *peer = sv_qp_by_qpn(h->dst_qpn);
    struct ibv_wc wc;
    sv_rwqe_t rw;
    sv_rq_t *rq = NULL;
    int64_t cap;
    uint32_t st;
    int rn;

    if (peer != NULL && peer->owner == sv_g.slot &&
        peer->type == IBV_QPT_UD && peer->qkey == h->qkey) {
        st = SV_LOAD(&peer->state);
        if (st == IBV_QPS_RTR || st == IBV_QPS_RTS) {
            rq = sv_peer_rq(peer);
        }
    }
    if (rq != NULL) {
        sv_lock(&rq->lock);
        if (rq->ring.cons == SV_LOAD(&rq->ring.prod) ||
            !SV_LOAD(&peer->in_use) || peer->qpn != h->dst_qpn) {
            sv_unlock(&rq->lock);
            rq = NULL;
        }
    }
    if (rq == NULL) {
        return sv_net_drain(p->fd, h->length, SV_NET_PAYLOAD_STALL_NS);
    }
    memcpy(&rw, sv_ring_entry(&rq->ring, rq->ring.cons), sizeof(rw));
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
    cap = sv_recv_iov(peer, &rw, SV_GRH_LEN, riov, &rn);
    if (cap < 0 || (uint64_t)cap < h->length) {
        wc.status = (cap < 0) ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR;
        if (sv_net_drain(p->fd, h->length, SV_NET_PAYLOAD_STALL_NS) != 0) {
            sv_unlock(&rq->lock);
            return -1;
        }
    } else {
        if (sv_net_recv_iov(p->fd, riov, rn, h->length,
                            SV_NET_PAYLOAD_STALL_NS) != 0) {
            sv_unlock(&rq->lock);
            return -1;
        }
        wc.byte_len = (uint32_t)h->length + SV_GRH_LEN;
    }
    sv_rq_complete(peer, rq, &wc, !!(h->flags & SV_NET_F_SOLICITED));
    return 0;
}

static void *sv_net_responder(void *arg)
{
    sv_net_peer_t *p = arg;
    sv_net_hdr_t h;
    int ret;

    for (;;) {
        /* between requests the connection may idle for any time */
        sv_net_spin_readable(p->fd);
        if (sv_net_recv_buf(p->fd, &h, sizeof(h), 0) != 0 ||
            h.magic != SV_NET_MAGIC) {
            break;
        }
        if (h.kind == SV_NET_REQ_RC) {
            ret = sv_net_serve_rc(p, &h);
        } else if (h.kind == SV_NET_REQ_UD) {
            ret = sv_net_serve_ud(p, &h);
        } else {
            ret = -1;
        }
        if (ret != 0) {
            break;
        }
    }
    close(p->fd);
    free(p);
    return NULL;
}

static void *sv_net_listener(void *arg)
{
    struct pollfd pfd[SV_MAX_DEVS];
    sv_net_peer_t *p;
    int i, n, fd, one = 1, idle = 5, intvl = 1, cnt = 5;

    (void)arg;
    for (;;) {
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
            fd = accept4(pfd[i].fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) {
                continue;
            }
            /* a requester whose host vanished must not pin this thread */
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
            sv_net_tune_fd(fd, SV_NET_PAYLOAD_STALL_NS);
            p = calloc(1, sizeof(*p));
            if (p == NULL) {
                close(fd);
                continue;
            }
            p->fd = fd;
            if (sv_net_thread(sv_net_responder, p) != 0) {
                close(fd);
                free(p);
            }
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

    /* the parent's sockets belong to the parent's slot */
    for (i = 0; i < sv_resp.nfds; ++i) {
        close(sv_resp.fds[i]);
    }
    pthread_mutex_init(&sv_resp.lock, NULL);
    sv_resp.nfds    = 0;
    sv_resp.started = 0;
}
