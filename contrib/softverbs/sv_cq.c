/*
 * softverbs completion queues. The ring lives in the shared segment so that
 * a remote initiator can write the receive completion of its target, with
 * the per-CQ producer lock (sv_lock_t); the owner polls without it.
 */
#define _GNU_SOURCE
#include "sv.h"
#include "sv_trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

SV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
                                       void *cq_context,
                                       struct ibv_comp_channel *channel,
                                       int comp_vector)
{
    sv_shm_t *shm = sv_g.shm;
    sv_cq_priv_t *cq;
    uint32_t idx = 0, i;
    sv_cq_t *s;
    int ret;

    (void)comp_vector;
    if (cqe < 1 || cqe >= (int)SV_MAX_CQE) {
        errno = EINVAL;
        return NULL;
    }
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        errno = ENOMEM;
        return NULL;
    }

    sv_shm_lock();
    for (i = 0; i < SV_MAX_CQ; ++i) {
        uint32_t c = (shm->next_cq + i) % SV_MAX_CQ;

        if (!shm->cqs[c].in_use) {
            idx = c;
            shm->cqs[c].in_use = 1;
            shm->next_cq = c + 1;
            break;
        }
    }
    sv_shm_unlock();
    if (i == SV_MAX_CQ) {
        free(cq);
        errno = ENOMEM;
        return NULL;
    }

    s             = &shm->cqs[idx];
    s->owner      = (uint16_t)sv_g.slot;
    s->id         = sv_new_id();
    s->armed      = 0;
    s->events     = 0;
    s->overrun    = 0;
    s->chan_fd    = -1;
    /* one spare entry beyond what was asked, like most HCAs */
    ret = sv_ring_init(&s->ring, (uint32_t)cqe + 1, sizeof(sv_cqe_t),
                       sv_g.slot);
    if (ret != 0) {
        SV_STORE(&s->in_use, 0);
        free(cq);
        errno = ret;
        return NULL;
    }

    cq->idx  = idx;
    cq->s    = s;
    cq->ents = sv_ptr(s->ring.off);
    cq->mask = s->ring.size - 1;
    pthread_spin_init(&cq->poll_lock, PTHREAD_PROCESS_PRIVATE);
    cq->ibcq.context    = context;
    cq->ibcq.channel    = channel;
    cq->ibcq.cq_context = cq_context;
    cq->ibcq.handle     = idx;
    cq->ibcq.cqe        = (int)s->ring.size - 1;
    pthread_mutex_init(&cq->ibcq.mutex, NULL);
    pthread_cond_init(&cq->ibcq.cond, NULL);

    if (channel != NULL) {
        sv_channel_t *ch = (sv_channel_t *)channel;

        s->chan_id = ch->id;
        s->chan_fd = channel->fd;
        pthread_mutex_lock(&ch->lock);
        cq->chan_next = ch->cqs;
        ch->cqs       = cq;
        pthread_mutex_unlock(&ch->lock);
    }
    return &cq->ibcq;
}

SV_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    sv_cq_priv_t *cq = (sv_cq_priv_t *)ibcq, **pp;

    if (ibcq->channel != NULL) {
        sv_channel_t *ch = (sv_channel_t *)ibcq->channel;

        pthread_mutex_lock(&ch->lock);
        for (pp = &ch->cqs; *pp != NULL; pp = &(*pp)->chan_next) {
            if (*pp == cq) {
                *pp = cq->chan_next;
                break;
            }
        }
        pthread_mutex_unlock(&ch->lock);
    }
    /* producers check in_use under the CQ lock */
    sv_lock(&cq->s->ring.prod_lock);
    SV_STORE(&cq->s->in_use, 0);
    sv_unlock(&cq->s->ring.prod_lock);
    sv_ring_fini(&cq->s->ring);
    free(cq);
    return 0;
}

SV_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    (void)cq; (void)cqe;
    return EOPNOTSUPP;
}

/* Add a completion; any process may call it. */
void sv_cq_push(sv_cq_t *cq, const struct ibv_wc *wc, int solicited)
{
    sv_ring_t *ring = &cq->ring;
    uint32_t armed;
    uint64_t one = 1;
    sv_cqe_t *e;
    int fd;

    sv_lock(&ring->prod_lock);
    if (!cq->in_use) {
        sv_unlock(&ring->prod_lock);
        return;
    }
    if (sv_ring_full(ring, ring->size)) {
        /* CQ overrun: the completion is lost, as on an HCA */
        cq->overrun = 1;
        sv_unlock(&ring->prod_lock);
        return;
    }
    e = sv_ring_entry(ring, ring->prod);
    memcpy(&e->wc, wc, sizeof(*wc));
    SV_STORE(&e->seq, sv_ring_seq(ring->prod));
    SV_TRACE(SV_T_CQE);
    ring->prod++;

    /* The application arms (a locked CAS), then polls the ring; we publish
     * the entry, then read armed. Without a full fence the CPU may read
     * armed before the entry is visible, and both sides miss: a lost
     * wakeup (seen with completions written by the network threads). */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    armed = SV_LOAD(&cq->armed);
    if (armed == 2 || (armed == 1 && (solicited ||
                                      wc->status != IBV_WC_SUCCESS))) {
        if (__atomic_exchange_n(&cq->armed, 0, __ATOMIC_ACQ_REL) != 0 &&
            cq->chan_fd >= 0) {
            __atomic_add_fetch(&cq->events, 1, __ATOMIC_RELEASE);
            fd = sv_remote_fd(cq->owner, cq->chan_fd, cq->chan_id);
            if (fd >= 0 && write(fd, &one, sizeof(one)) != sizeof(one)) {
                __atomic_sub_fetch(&cq->events, 1, __ATOMIC_RELEASE);
            }
        }
    }
    sv_unlock(&ring->prod_lock);
}

/* The owner's threads poll (poll_lock): the entry at cons is there when its
 * sequence says so; prod, written by the producers, is never read. */
int sv_op_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
    sv_cq_priv_t *cq = (sv_cq_priv_t *)ibcq;
    sv_ring_t *ring  = &cq->s->ring;
    uint32_t cons;
    sv_cqe_t *e;
    int n, i;

    /* an empty CQ is told without the lock (a poller spins on this): the
     * entry at cons, read unlocked, may be stale, but then it is there */
    cons = SV_LOAD_RELAXED(&ring->cons);
    if (SV_LOAD(&cq->ents[cons & cq->mask].seq) != sv_ring_seq(cons)) {
        n = 0;
        goto out;
    }
    pthread_spin_lock(&cq->poll_lock);
    cons = ring->cons;
    for (n = 0; n < num_entries; ++n, ++cons) {
        e = &cq->ents[cons & cq->mask];
        if (SV_LOAD(&e->seq) != sv_ring_seq(cons)) {
            break;
        }
        memcpy(&wc[n], &e->wc, sizeof(*wc));
    }
    if (n > 0) {
        SV_STORE(&ring->cons, cons);
        SV_TRACE(SV_T_POLL_HIT);
    }
    pthread_spin_unlock(&cq->poll_lock);
    for (i = 0; i < n; ++i) {
        if (wc[i].opcode & IBV_WC_RECV) {
            sv_rq_retired(wc[i].qp_num, 1);
        }
    }
out:
    if (sv_g.cfg.engine_help) {
        sv_engine_help(cq, n > 0);
    }
    return n;
}

int sv_op_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    sv_cq_priv_t *cq = (sv_cq_priv_t *)ibcq;
    uint32_t want = solicited_only ? 1 : 2, cur;

    /* arming for any completion wins over solicited-only */
    cur = SV_LOAD(&cq->s->armed);
    while (cur < want &&
           !__atomic_compare_exchange_n(&cq->s->armed, &cur, want, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
    return 0;
}
