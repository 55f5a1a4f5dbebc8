/*
 * softverbs queue pairs and shared receive queues: creation, the state
 * machine, posting, and flushing on error.
 */
#define _GNU_SOURCE
#include "sv.h"
#include "sv_trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* receive queues (RQ of a QP, or an SRQ): owner-side posting */

/* the ring of a receive queue that may hold max_wr WQEs (sv_rq_t) */
static int sv_rq_init(sv_rq_t *rq, uint32_t max_wr)
{
    int ret = sv_ring_init(&rq->ring, 2 * max_wr, sizeof(sv_rwqe_t), sv_g.slot);

    rq->cap = (ret == 0) ? rq->ring.size / 2 : 0;
    return ret;
}

static int sv_rq_post(sv_rq_t *rq, pthread_spinlock_t *lock,
                      struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    sv_ring_t *ring = &rq->ring;
    sv_rwqe_t *w;
    int i, ret = 0;

    pthread_spin_lock(lock);
    for (; wr != NULL; wr = wr->next) {
        if ((uint32_t)wr->num_sge > rq->max_sge || wr->num_sge < 0) {
            ret = EINVAL;
            break;
        }
        if (sv_ring_full(ring, rq->cap)) {
            ret = ENOMEM;
            break;
        }
        w = sv_ring_entry(ring, ring->prod);
        w->wr_id   = wr->wr_id;
        w->num_sge = (uint32_t)wr->num_sge;
        for (i = 0; i < wr->num_sge; ++i) {
            w->sge[i] = wr->sg_list[i];
        }
        SV_STORE(&w->seq, sv_ring_seq(ring->prod));
        /* prod itself is read only by the SRQ limit check */
        SV_STORE(&ring->prod, ring->prod + 1);
        sv_prefetch_w(sv_ring_entry(ring, ring->prod + 1));
    }
    pthread_spin_unlock(lock);
    if (ret != 0) {
        *bad = wr;
    }
    return ret;
}

/* The posted WQE at cons (caller holds ring.cons_lock), or NULL when the
 * queue is empty. Taking it is sv_rq_take(). */
sv_rwqe_t *sv_rq_head(sv_rq_t *rq)
{
    sv_rwqe_t *w = sv_ring_entry(&rq->ring, rq->ring.cons);

    return (SV_LOAD(&w->seq) == sv_ring_seq(rq->ring.cons)) ? w : NULL;
}

/* The owner polled n receive completions of its QP qpn: as many WQEs of
 * its receive queue (or SRQ) are consumed (sv_ring_full). */
void sv_rq_retired(uint32_t qpn, uint32_t n)
{
    sv_qp_t *q = sv_qp_by_qpn(qpn);
    sv_rq_t *rq;

    if ((q == NULL) || (q->owner != sv_g.slot) ||
        ((rq = sv_peer_rq(q)) == NULL)) {
        return;
    }
    __atomic_add_fetch(&rq->ring.retired, n, __ATOMIC_RELAXED);
}

/* A consumer's copy of a posted WQE: the header and the SGEs it has (the
 * others are never read, and copying them would fetch lines for nothing).
 * num_sge was checked when posted, and is clamped again here. */
void sv_rwqe_copy(sv_rwqe_t *dst, const sv_rwqe_t *src)
{
    uint32_t n = src->num_sge;

    if (n > SV_MAX_RECV_SGE) {
        n = SV_MAX_RECV_SGE;
    }
    memcpy(dst, src, offsetof(sv_rwqe_t, sge) + n * sizeof(src->sge[0]));
    dst->num_sge = n;
}

/* Complete every posted receive of the QP with WR_FLUSH_ERR. Any process
 * may do it: the ring and the CQ are shared. */
void sv_rq_flush(sv_qp_t *s)
{
    sv_rq_t *rq = &s->rq;
    struct ibv_wc wc;
    sv_rwqe_t *w;

    if (s->srq != 0) {
        return;   /* SRQ receives belong to the SRQ, not to this QP */
    }
    memset(&wc, 0, sizeof(wc));
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = s->qpn;
    sv_lock(&rq->ring.cons_lock);
    while (SV_LOAD(&s->in_use) && (w = sv_rq_head(rq)) != NULL) {
        wc.wr_id = w->wr_id;
        sv_cq_push(&sv_g.shm->cqs[s->rcq], &wc, 0);
        SV_STORE(&rq->ring.cons, rq->ring.cons + 1);
    }
    sv_unlock(&rq->ring.cons_lock);
}

/* Raise an async event on a QP of any process: a bit in the shared QP and
 * one count on the owner context's async eventfd per new bit. */
void sv_async_raise(uint32_t *bits, uint32_t bit, int owner, int fd,
                    uint64_t ctx_id)
{
    uint64_t one = 1;
    int lfd;

    if (__atomic_fetch_or(bits, bit, __ATOMIC_ACQ_REL) & bit) {
        return;
    }
    lfd = sv_remote_fd(owner, fd, ctx_id);
    if (lfd < 0 || write(lfd, &one, sizeof(one)) != sizeof(one)) {
        __atomic_fetch_and(bits, ~bit, __ATOMIC_ACQ_REL);
    }
}

/* A consumer took a receive WQE (caller holds ring.cons_lock): an SRQ below
 * its armed limit tells its owner once, and disarms. */
void sv_rq_consumed(sv_qp_t *peer, sv_rq_t *rq)
{
    sv_srq_t *srq;
    uint32_t limit;

    if (peer->srq == 0 || (limit = SV_LOAD(&rq->limit)) == 0 ||
        SV_LOAD(&rq->ring.prod) - rq->ring.cons >= limit) {
        return;
    }
    SV_STORE(&rq->limit, 0);
    srq = &sv_g.shm->srqs[peer->srq - 1];
    sv_async_raise(&srq->async_bits, SV_ASYNC_SRQ_LIMIT, srq->owner,
                   srq->async_fd, srq->ctx_id);
}

/*
 * The responder side of a QP detected an error (called by the initiator's
 * executor, in another process or this one): like an HCA, the responder QP
 * goes to the error state, its receives are flushed and its owner gets an
 * async event. Its own send queue is flushed when the owner next posts or
 * progresses it.
 */
void sv_responder_error(sv_qp_t *s, uint32_t bit)
{
    if (__atomic_exchange_n(&s->state, IBV_QPS_ERR, __ATOMIC_ACQ_REL) ==
        IBV_QPS_ERR) {
        return;
    }
    sv_rq_flush(s);
    sv_async_raise(&s->async_bits, bit, s->owner, s->async_fd, s->ctx_id);
    if (s->srq != 0 && !__atomic_exchange_n(&s->last_wqe, 1,
                                            __ATOMIC_ACQ_REL)) {
        sv_async_raise(&s->async_bits, SV_ASYNC_LAST_WQE, s->owner,
                       s->async_fd, s->ctx_id);
    }
}

int sv_op_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
                    struct ibv_recv_wr **bad)
{
    sv_qp_priv_t *qp = (sv_qp_priv_t *)ibqp;
    int ret;

    SV_TRACE(SV_T_POST_RECV);
    if (qp->srq != NULL) {
        *bad = wr;
        return EINVAL;
    }
    ret = sv_rq_post(&qp->s->rq, &qp->rpost_lock, wr, bad);
    if (SV_LOAD(&qp->s->state) == IBV_QPS_ERR) {
        qp->ibqp.state = IBV_QPS_ERR;
        sv_rq_flush(qp->s);
    }
    SV_TRACE(SV_T_POST_RECV_RET);
    return ret;
}

int sv_op_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad)
{
    sv_srq_priv_t *srq = (sv_srq_priv_t *)ibsrq;

    return sv_rq_post(&srq->s->rq, &srq->post_lock, wr, bad);
}

SV_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
                                         struct ibv_srq_init_attr *attr)
{
    sv_shm_t *shm = sv_g.shm;
    sv_srq_priv_t *srq;
    uint32_t i, idx = 0;
    sv_srq_t *s;
    int ret;

    if (attr->attr.max_wr == 0 || attr->attr.max_wr > SV_MAX_WR ||
        attr->attr.max_sge > SV_MAX_RECV_SGE) {
        errno = EINVAL;
        return NULL;
    }
    srq = calloc(1, sizeof(*srq));
    if (srq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    sv_shm_lock();
    for (i = 0; i < SV_MAX_SRQ; ++i) {
        uint32_t c = (shm->next_srq + i) % SV_MAX_SRQ;

        if (!shm->srqs[c].in_use) {
            idx = c;
            shm->srqs[c].in_use = 1;
            shm->next_srq = c + 1;
            break;
        }
    }
    sv_shm_unlock();
    if (i == SV_MAX_SRQ) {
        free(srq);
        errno = ENOMEM;
        return NULL;
    }
    s = &shm->srqs[idx];
    s->owner         = (uint16_t)sv_g.slot;
    s->pd            = ((sv_pd_t *)pd)->id;
    s->id            = sv_new_id();
    s->rq.max_sge    = attr->attr.max_sge ? attr->attr.max_sge : 1;
    s->rq.limit      = attr->attr.srq_limit;
    s->async_bits    = 0;
    s->async_fd      = pd->context->async_fd;
    s->ctx_id        = sv_ctx(pd->context)->id;
    ret              = sv_rq_init(&s->rq, attr->attr.max_wr);
    if (ret != 0) {
        SV_STORE(&s->in_use, 0);
        free(srq);
        errno = ret;
        return NULL;
    }
    attr->attr.max_wr  = s->rq.cap;
    attr->attr.max_sge = s->rq.max_sge;

    srq->idx = idx;
    srq->s   = s;
    pthread_spin_init(&srq->post_lock, PTHREAD_PROCESS_PRIVATE);
    srq->ibsrq.context     = pd->context;
    srq->ibsrq.srq_context = attr->srq_context;
    srq->ibsrq.pd          = pd;
    srq->ibsrq.handle      = idx;
    pthread_mutex_init(&srq->ibsrq.mutex, NULL);
    pthread_cond_init(&srq->ibsrq.cond, NULL);
    {
        sv_context_t *ctx = sv_ctx(pd->context);

        pthread_mutex_lock(&ctx->async_lock);
        srq->ctx_next = ctx->srqs;
        ctx->srqs     = srq;
        pthread_mutex_unlock(&ctx->async_lock);
    }
    return &srq->ibsrq;
}

SV_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
                             int mask)
{
    sv_srq_priv_t *srq = (sv_srq_priv_t *)ibsrq;

    if (mask & IBV_SRQ_MAX_WR) {
        return EINVAL;   /* resizing is not supported */
    }
    if (mask & IBV_SRQ_LIMIT) {
        SV_STORE(&srq->s->rq.limit, attr->srq_limit);
    }
    return 0;
}

SV_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
    sv_srq_priv_t *srq = (sv_srq_priv_t *)ibsrq;

    attr->max_wr    = srq->s->rq.cap;
    attr->max_sge   = srq->s->rq.max_sge;
    attr->srq_limit = srq->s->rq.limit;
    return 0;
}

SV_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
    sv_srq_priv_t *srq = (sv_srq_priv_t *)ibsrq, **pp;
    sv_context_t *ctx  = sv_ctx(ibsrq->context);

    pthread_mutex_lock(&ctx->async_lock);
    for (pp = &ctx->srqs; *pp != NULL; pp = &(*pp)->ctx_next) {
        if (*pp == srq) {
            *pp = srq->ctx_next;
            break;
        }
    }
    pthread_mutex_unlock(&ctx->async_lock);
    sv_lock(&srq->s->rq.ring.cons_lock);
    SV_STORE(&srq->s->in_use, 0);
    sv_unlock(&srq->s->rq.ring.cons_lock);
    sv_ring_fini(&srq->s->rq.ring);
    free(srq);
    return 0;
}

/* ---------------------------------------------------------------------- */

SV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                       struct ibv_qp_init_attr *attr)
{
    sv_shm_t *shm = sv_g.shm;
    sv_qp_priv_t *qp;
    uint32_t i, idx = 0, size;
    sv_qp_t *s;
    int ret;

    if ((attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD) ||
        attr->send_cq == NULL || attr->recv_cq == NULL ||
        attr->cap.max_send_wr > SV_MAX_WR ||
        attr->cap.max_recv_wr > SV_MAX_WR ||
        attr->cap.max_send_sge > SV_MAX_SGE ||
        attr->cap.max_recv_sge > SV_MAX_RECV_SGE ||
        attr->cap.max_inline_data > SV_MAX_INLINE) {
        errno = EINVAL;
        return NULL;
    }
    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    size = 1;
    while (size < attr->cap.max_send_wr + 1) {
        size <<= 1;
    }
    qp->sq = calloc(size, sizeof(sv_swqe_t));
    if (qp->sq == NULL) {
        free(qp);
        errno = ENOMEM;
        return NULL;
    }
    qp->sq_size = size;
    qp->sq_max  = attr->cap.max_send_wr ? attr->cap.max_send_wr : 1;

    sv_shm_lock();
    for (i = 0; i < SV_MAX_QP; ++i) {
        uint32_t c = (shm->next_qp + i) % SV_MAX_QP;

        if (!shm->qps[c].in_use) {
            idx = c;
            shm->qps[c].in_use = 1;
            shm->next_qp = c + 1;
            break;
        }
    }
    sv_shm_unlock();
    if (i == SV_MAX_QP) {
        free(qp->sq);
        free(qp);
        errno = ENOMEM;
        return NULL;
    }

    s = &shm->qps[idx];
    s->owner         = (uint16_t)sv_g.slot;
    s->dev           = (uint16_t)ibv_get_device_index(pd->context->device);
    s->type          = attr->qp_type;
    s->pd            = ((sv_pd_t *)pd)->id;
    s->rcq           = ((sv_cq_priv_t *)attr->recv_cq)->idx;
    s->srq           = attr->srq ? ((sv_srq_priv_t *)attr->srq)->idx + 1 : 0;
    s->qkey          = 0;
    s->dest_qpn      = 0;
    s->dlid          = 0;
    s->access        = 0;
    s->min_rnr_timer = 0;
    s->last_wqe      = 0;
    s->async_bits    = 0;
    s->async_fd      = pd->context->async_fd;
    s->ctx_id        = sv_ctx(pd->context)->id;
    s->rq.max_sge    = attr->cap.max_recv_sge ? attr->cap.max_recv_sge : 1;
    s->rq.ring.off   = 0;
    s->rq.cap        = 0;
    if (attr->srq == NULL) {
        ret = sv_rq_init(&s->rq, attr->cap.max_recv_wr ?: 1);
        if (ret != 0) {
            SV_STORE(&s->in_use, 0);
            free(qp->sq);
            free(qp);
            errno = ret;
            return NULL;
        }
    }
    s->id  = sv_new_id();
    s->qpn = ((uint32_t)sv_g.slot << SV_QPN_SLOT_SHIFT) | (SV_QPN_BASE + idx);
    SV_STORE(&s->state, IBV_QPS_RESET);

    qp->idx          = idx;
    qp->s            = s;
    qp->ctx          = sv_ctx(pd->context);
    qp->scq          = (sv_cq_priv_t *)attr->send_cq;
    qp->rcq          = (sv_cq_priv_t *)attr->recv_cq;
    qp->srq          = (sv_srq_priv_t *)attr->srq;
    qp->sq_sig_all   = attr->sq_sig_all;
    qp->max_inline   = attr->cap.max_inline_data;
    qp->max_send_sge = attr->cap.max_send_sge ? attr->cap.max_send_sge : 1;
    qp->rnr_left     = -1;
    pthread_spin_init(&qp->post_lock, PTHREAD_PROCESS_PRIVATE);
    pthread_spin_init(&qp->rpost_lock, PTHREAD_PROCESS_PRIVATE);
    pthread_mutex_init(&qp->net_lock, NULL);

    qp->ibqp.context    = pd->context;
    qp->ibqp.qp_context = attr->qp_context;
    qp->ibqp.pd         = pd;
    qp->ibqp.send_cq    = attr->send_cq;
    qp->ibqp.recv_cq    = attr->recv_cq;
    qp->ibqp.srq        = attr->srq;
    qp->ibqp.handle     = idx;
    qp->ibqp.qp_num     = s->qpn;
    qp->ibqp.state      = IBV_QPS_RESET;
    qp->ibqp.qp_type    = attr->qp_type;
    pthread_mutex_init(&qp->ibqp.mutex, NULL);
    pthread_cond_init(&qp->ibqp.cond, NULL);

    /* report what we give */
    attr->cap.max_send_wr  = qp->sq_max;
    attr->cap.max_recv_wr  = attr->srq ? 0 : s->rq.cap;
    attr->cap.max_send_sge = qp->max_send_sge;
    attr->cap.max_recv_sge = s->rq.max_sge;
    pthread_mutex_lock(&qp->ctx->async_lock);
    qp->ctx_next  = qp->ctx->qps;
    qp->ctx->qps  = qp;
    pthread_mutex_unlock(&qp->ctx->async_lock);
    sv_engine_add(qp);
    if (sv_net_enabled()) {
        sv_net_qp_add(qp);
    }
    return &qp->ibqp;
}

/* enter the error state: from modify_qp, or when a send WR failed (in the
 * engine or a posting thread) */
void sv_qp_set_error(sv_qp_priv_t *qp)
{
    struct ibv_async_event ev;

    SV_STORE(&qp->s->state, IBV_QPS_ERR);
    qp->ibqp.state = IBV_QPS_ERR;
    if (qp->remote) {
        sv_net_qp_flush(qp);    /* WRs on the wire complete first */
    }
    sv_rq_flush(qp->s);
    if (qp->srq != NULL && !__atomic_exchange_n(&qp->s->last_wqe, 1,
                                                __ATOMIC_ACQ_REL)) {
        ev.element.qp  = &qp->ibqp;
        ev.event_type  = IBV_EVENT_QP_LAST_WQE_REACHED;
        sv_async_post(qp->ctx, &ev);
    }
}

static int sv_mask_has(int mask, int need)
{
    return (mask & need) == need;
}

SV_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a,
                            int mask)
{
    sv_qp_priv_t *qp = (sv_qp_priv_t *)ibqp;
    enum ibv_qp_state cur = (enum ibv_qp_state)SV_LOAD(&qp->s->state);
    enum ibv_qp_state next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
    int rc = (qp->ibqp.qp_type == IBV_QPT_RC);

    if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
        return EINVAL;
    }
    /* the transitions and the attributes the IB spec requires for them */
    if (next == IBV_QPS_INIT && cur == IBV_QPS_RESET) {
        if (!sv_mask_has(mask, IBV_QP_PKEY_INDEX | IBV_QP_PORT) ||
            (rc && !(mask & IBV_QP_ACCESS_FLAGS)) ||
            (!rc && !(mask & IBV_QP_QKEY))) {
            return EINVAL;
        }
    } else if (next == IBV_QPS_RTR) {
        if (cur != IBV_QPS_INIT ||
            (rc && !sv_mask_has(mask, IBV_QP_AV | IBV_QP_PATH_MTU |
                                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER))) {
            return EINVAL;
        }
    } else if (next == IBV_QPS_RTS && cur == IBV_QPS_RTR) {
        if ((rc && !sv_mask_has(mask, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                      IBV_QP_MAX_QP_RD_ATOMIC)) ||
            (!rc && !(mask & IBV_QP_SQ_PSN))) {
            return EINVAL;
        }
    } else if (next == IBV_QPS_INIT && cur == IBV_QPS_INIT) {
    } else if (next == IBV_QPS_RTS && cur == IBV_QPS_RTS) {
    } else if (next == IBV_QPS_SQD || next == IBV_QPS_SQE) {
        return EINVAL;
    } else if (next != IBV_QPS_ERR && next != IBV_QPS_RESET &&
               next != cur) {
        return EINVAL;
    }
    if ((mask & IBV_QP_PORT) && a->port_num != 1) {
        return EINVAL;
    }
    if ((mask & IBV_QP_PATH_MTU) && a->path_mtu > IBV_MTU_4096) {
        return EINVAL;
    }

    if (mask & IBV_QP_PKEY_INDEX)  qp->pkey_index = a->pkey_index;
    if (mask & IBV_QP_PORT)        qp->port = a->port_num;
    if (mask & IBV_QP_QKEY)        qp->s->qkey = a->qkey;
    if (mask & IBV_QP_ACCESS_FLAGS) qp->s->access = a->qp_access_flags;
    if (mask & IBV_QP_PATH_MTU)    qp->path_mtu = a->path_mtu;
    if (mask & IBV_QP_DEST_QPN)    qp->s->dest_qpn = a->dest_qp_num;
    if (mask & IBV_QP_RQ_PSN)      qp->rq_psn = a->rq_psn;
    if (mask & IBV_QP_SQ_PSN)      qp->sq_psn = a->sq_psn;
    if (mask & IBV_QP_MIN_RNR_TIMER) qp->s->min_rnr_timer = a->min_rnr_timer;
    if (mask & IBV_QP_TIMEOUT)     qp->timeout = a->timeout;
    if (mask & IBV_QP_RETRY_CNT)   qp->retry_cnt = a->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY)   qp->rnr_retry = a->rnr_retry;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->max_rd_atomic = a->max_rd_atomic;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
        qp->max_dest_rd_atomic = a->max_dest_rd_atomic;
    }
    if (mask & IBV_QP_AV) {
        qp->dlid    = a->ah_attr.dlid;
        qp->sl      = a->ah_attr.sl;
        qp->s->dlid = a->ah_attr.dlid;
        /* a destination on another host goes through sv_net.c */
        qp->remote  = rc && sv_net_enabled() &&
                      !sv_lid_is_local(a->ah_attr.dlid);
    }

    if (next == cur) {
        return 0;
    }
    if (next == IBV_QPS_ERR) {
        sv_qp_set_error(qp);
        /* the executor flushes the send queue */
        sv_qp_progress(qp, SV_EXEC_ENGINE, NULL);
        sv_engine_kick();
        return 0;
    }
    if (next == IBV_QPS_RESET) {
        SV_STORE(&qp->s->state, IBV_QPS_RESET);
        qp->ibqp.state = IBV_QPS_RESET;
        /* wait for a running executor, then drop everything queued */
        while (__atomic_exchange_n(&qp->busy, 1, __ATOMIC_ACQUIRE)) {
        }
        qp->sq_head       = qp->sq_tail;
        if (qp->remote) {
            sv_net_qp_reset(qp);
        }
        SV_STORE(&qp->sq_done, qp->sq_tail);
        qp->rnr_left      = -1;
        qp->retry_at_ns   = 0;
        qp->timeout_at_ns = 0;
        SV_STORE(&qp->s->last_wqe, 0);
        SV_STORE(&qp->s->async_bits, 0);
        SV_STORE(&qp->busy, 0);
        if (qp->srq == NULL) {
            sv_ring_t *ring = &qp->s->rq.ring;

            /* the owner is the only producer: prod is stable here. The
             * dropped WQEs get no completion: they count as retired */
            sv_lock(&ring->cons_lock);
            __atomic_add_fetch(&ring->retired, ring->prod - ring->cons,
                               __ATOMIC_RELAXED);
            SV_STORE(&ring->cons, ring->prod);
            sv_unlock(&ring->cons_lock);
        }
        return 0;
    }
    SV_STORE(&qp->s->state, next);
    qp->ibqp.state = next;
    return 0;
}

SV_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a,
                           int mask, struct ibv_qp_init_attr *init)
{
    sv_qp_priv_t *qp = (sv_qp_priv_t *)ibqp;

    (void)mask;
    memset(a, 0, sizeof(*a));
    a->qp_state           = (enum ibv_qp_state)SV_LOAD(&qp->s->state);
    a->cur_qp_state       = a->qp_state;
    a->path_mtu           = qp->path_mtu;
    a->qkey               = qp->s->qkey;
    a->rq_psn             = qp->rq_psn;
    a->sq_psn             = qp->sq_psn;
    a->dest_qp_num        = qp->s->dest_qpn;
    a->qp_access_flags    = (int)qp->s->access;
    a->cap.max_send_wr    = qp->sq_max;
    a->cap.max_recv_wr     = qp->srq ? 0 : qp->s->rq.cap;
    a->cap.max_send_sge   = qp->max_send_sge;
    a->cap.max_recv_sge   = qp->s->rq.max_sge;
    a->cap.max_inline_data = qp->max_inline;
    a->ah_attr.dlid       = (uint16_t)qp->dlid;
    a->ah_attr.sl         = qp->sl;
    a->ah_attr.port_num   = (uint8_t)qp->port;
    a->pkey_index         = qp->pkey_index;
    a->port_num           = (uint8_t)qp->port;
    a->max_rd_atomic      = qp->max_rd_atomic;
    a->max_dest_rd_atomic = qp->max_dest_rd_atomic;
    a->min_rnr_timer      = (uint8_t)qp->s->min_rnr_timer;
    a->timeout            = qp->timeout;
    a->retry_cnt          = qp->retry_cnt;
    a->rnr_retry          = qp->rnr_retry;
    if (init != NULL) {
        memset(init, 0, sizeof(*init));
        init->qp_context = qp->ibqp.qp_context;
        init->send_cq    = qp->ibqp.send_cq;
        init->recv_cq    = qp->ibqp.recv_cq;
        init->srq        = qp->ibqp.srq;
        init->cap        = a->cap;
        init->qp_type    = qp->ibqp.qp_type;
        init->sq_sig_all = qp->sq_sig_all;
    }
    return 0;
}

SV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    sv_qp_priv_t *qp = (sv_qp_priv_t *)ibqp, **pp;
    uint32_t reported;

    pthread_mutex_lock(&qp->ctx->async_lock);
    for (pp = &qp->ctx->qps; *pp != NULL; pp = &(*pp)->ctx_next) {
        if (*pp == qp) {
            *pp = qp->ctx_next;
            break;
        }
    }
    sv_async_drop_qp(qp->ctx, ibqp);
    reported = qp->events_reported;
    pthread_mutex_unlock(&qp->ctx->async_lock);

    /* events already handed out must be acked first: their element points
     * at this QP */
    pthread_mutex_lock(&ibqp->mutex);
    while (ibqp->events_completed != reported) {
        pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
    }
    pthread_mutex_unlock(&ibqp->mutex);
    sv_engine_remove(qp);
    if (sv_net_enabled()) {
        sv_net_qp_remove(qp);
    }
    sv_lock(&qp->s->rq.ring.cons_lock);
    SV_STORE(&qp->s->state, IBV_QPS_RESET);
    SV_STORE(&qp->s->in_use, 0);
    sv_unlock(&qp->s->rq.ring.cons_lock);
    if (qp->srq == NULL) {
        sv_ring_fini(&qp->s->rq.ring);
    }
    free(qp->sq);
    free(qp);
    return 0;
}

/* ---------------------------------------------------------------------- */

static int sv_swqe_fill(sv_qp_priv_t *qp, sv_swqe_t *w, struct ibv_send_wr *wr)
{
    uint64_t len = 0;
    int i;

    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge) {
        return EINVAL;
    }
    switch (wr->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        if (qp->ibqp.qp_type != IBV_QPT_RC) {
            return EINVAL;
        }
        break;
    default:
        return EINVAL;
    }
    w->wr_id   = wr->wr_id;
    w->opcode  = wr->opcode;
    w->flags   = wr->send_flags;
    w->imm     = wr->imm_data;
    w->num_sge = (uint32_t)wr->num_sge;
    for (i = 0; i < wr->num_sge; ++i) {
        len += wr->sg_list[i].length;
    }
    w->length = len;
    if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
        wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        w->raddr       = wr->wr.atomic.remote_addr;
        w->rkey        = wr->wr.atomic.rkey;
        w->compare_add = wr->wr.atomic.compare_add;
        w->swap        = wr->wr.atomic.swap;
        if (wr->send_flags & IBV_SEND_INLINE) {
            return EINVAL;
        }
    } else {
        w->raddr = wr->wr.rdma.remote_addr;
        w->rkey  = wr->wr.rdma.rkey;
    }
    if (qp->ibqp.qp_type == IBV_QPT_UD) {
        sv_ah_t *ah = (sv_ah_t *)wr->wr.ud.ah;

        if (ah == NULL) {
            return EINVAL;
        }
        w->dlid        = ah->dlid;
        w->remote_qpn  = wr->wr.ud.remote_qpn;
        w->remote_qkey = wr->wr.ud.remote_qkey;
    }
    if ((wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ) {
        uint8_t *p = w->inline_data;

        if (len > qp->max_inline && len > 0) {
            return EINVAL;
        }
        for (i = 0; i < wr->num_sge; ++i) {
            memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
            p += wr->sg_list[i].length;
        }
        w->num_sge = 0;
    } else {
        w->flags &= ~IBV_SEND_INLINE;
        for (i = 0; i < wr->num_sge; ++i) {
            w->sge[i] = wr->sg_list[i];
        }
    }
    w->wire_ns    = 0;
    w->deliver_ns = (sv_g.cfg.link_gbps > 0) ?
                            sv_link_stamp(qp->ctx, len, &w->wire_ns) :
                            0;
    return 0;
}

int sv_op_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
                    struct ibv_send_wr **bad)
{
    sv_qp_priv_t *qp = (sv_qp_priv_t *)ibqp;
    uint32_t state = SV_LOAD(&qp->s->state);
    int ret = 0;

    SV_TRACE(SV_T_POST_SEND);
    if (state != IBV_QPS_RTS && state != IBV_QPS_ERR) {
        *bad = wr;
        return EINVAL;
    }
    if (state == IBV_QPS_ERR) {
        qp->ibqp.state = IBV_QPS_ERR;   /* may have been set by a peer */
    }
    pthread_spin_lock(&qp->post_lock);
    for (; wr != NULL; wr = wr->next) {
        if (qp->sq_tail - SV_LOAD(&qp->sq_done) >= qp->sq_max) {
            ret = ENOMEM;
            break;
        }
        ret = sv_swqe_fill(qp, &qp->sq[qp->sq_tail & (qp->sq_size - 1)], wr);
        if (ret != 0) {
            break;
        }
        SV_STORE(&qp->sq_tail, qp->sq_tail + 1);
    }
    pthread_spin_unlock(&qp->post_lock);
    if (ret != 0) {
        *bad = wr;
    }
    sv_qp_progress(qp, SV_EXEC_POSTER, NULL);
    SV_TRACE(SV_T_POST_SEND_RET);
    return ret;
}
