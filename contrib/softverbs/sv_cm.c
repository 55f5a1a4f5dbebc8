/*
 * softverbs rdma_cm, librdmacm's API (sv_cm.h).
 *
 * An rdma_cm_id is an sv_cm_id_t, the application's struct first. Its
 * state machine (IB CM's, as the kernel's rdma_cm drives it):
 *
 *   active:  IDLE -bind-> BOUND -resolve_addr-> ADDR -resolve_route->
 *            ROUTE -connect-> CONNECT (REQ sent; an MRA names the process
 *            that took it) -REP-> CONNECTED (a QP on the id: RTU sent,
 *            ESTABLISHED) or REP_RCVD (no QP: CONNECT_RESPONSE, then
 *            rdma_establish sends the RTU)
 *   passive: LISTEN; a REQ makes a child id in REQ_RCVD (CONNECT_REQUEST
 *            on the listener's channel) -accept-> ACCEPTED (REP sent)
 *            -RTU-> CONNECTED (ESTABLISHED); -reject-> DONE (REJ)
 *   both:    CONNECTED -disconnect-> DISCONNECTING (DREQ) -DREP or its
 *            timer-> DISCONNECTED; a DREQ received: DISCONNECTED at once
 *            (and a DREP back)
 *   UD:      ROUTE -connect-> CONNECT (SIDR REQ) -SIDR REP-> CONNECTED
 *            (ESTABLISHED with the remote QP number and Q_Key)
 *
 * Errors end in DONE with the event librdmacm gives: REJECTED (the IB
 * reject reason as status: 8 no listener, 28 rejected by the peer or the
 * peer process gone before the connection was up), UNREACHABLE
 * (-ETIMEDOUT: no answer within SOFTVERBS_CM_TIMEOUT_MS; -ECONNREFUSED: a
 * datagram lookup refused), ADDR_ERROR (-ENODEV: no softverbs device
 * reaches the address), ROUTE_ERROR (-ETIMEDOUT: the host does not
 * answer), DISCONNECTED (the peer disconnected, or its process is gone).
 *
 * Everything here runs under sv_cm_lock; messages go out after it is
 * released (sending may open a connection to another host). Events are
 * queued on their channel, whose fd is an eventfd counting them
 * (EFD_SEMAPHORE: readable while events wait, as librdmacm's is). An event
 * decided while handling a message is counted only once the answers
 * decided with it are sent: the application acts on what it sees (an
 * ESTABLISHED whose RTU the agent has not sent yet, then a disconnect),
 * and nothing it does may overtake them.
 */
#define _GNU_SOURCE
#include "sv_cm.h"
#include "sv_auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef enum {
    SV_CM_S_IDLE,
    SV_CM_S_BOUND,
    SV_CM_S_ADDR,
    SV_CM_S_ROUTE,
    SV_CM_S_LISTEN,
    SV_CM_S_CONNECT,
    SV_CM_S_REP_RCVD,
    SV_CM_S_REQ_RCVD,
    SV_CM_S_ACCEPTED,
    SV_CM_S_CONNECTED,
    SV_CM_S_DISCONNECTING,
    SV_CM_S_DISCONNECTED,
    SV_CM_S_DONE
} sv_cm_state_t;

typedef struct sv_cm_event {
    struct rdma_cm_event ev; /* first: what the application gets */
    struct sv_cm_id *owner; /* whose unacked events count it */
    struct sv_cm_event *next;
    uint8_t pdata[SV_CM_PDATA_MAX];
} sv_cm_event_t;

typedef struct sv_cm_chan {
    struct rdma_event_channel ch; /* first */
    sv_cm_event_t *head, *tail;
} sv_cm_chan_t;

typedef struct sv_cm_id {
    struct rdma_cm_id id; /* first */
    uint64_t cookie;
    sv_cm_state_t state;
    int dev; /* -1: no device yet */
    int port_idx; /* port table entry, -1: none */
    int sync; /* own channel: calls wait */
    int reuse;
    int refused; /* route: no CM process there */
    struct sv_cm_id *listener; /* a child's */
    uint16_t route_lid; /* the peer host's port LID */
    int route_local;
    /* the peer: its process (lid 0: this host) and id, and what its
     * REQ or REP said */
    int peer_known;
    uint16_t peer_lid, peer_slot;
    uint32_t peer_gen;
    uint64_t peer_id;
    uint16_t peer_port_lid; /* the LID its QP is reached at */
    uint32_t peer_qpn, peer_qkey, peer_psn;
    uint8_t peer_resp_res, peer_init_depth;
    /* ours */
    uint32_t psn;
    uint8_t resp_res, init_depth, retry, rnr_retry;
    uint64_t deadline; /* CONNECT, ACCEPTED, DISCONNECTING */
    unsigned events; /* given, not acked */
    pthread_cond_t acked;
    struct ibv_qp_init_attr ep_attr; /* rdma_create_ep's, for requests */
    int has_ep_attr;
    struct ibv_pd *ep_pd;
    struct ibv_sa_path_rec path;
    struct sv_cm_id *next;
} sv_cm_id_t;

static sv_cm_id_t *sv_cm_ids;

#define SV_CM_RAISE_MAX 8

/* messages to send once sv_cm_lock is released (sv_cm_unlock_send), and
 * the channels whose events wait for them (a dup of each fd: a channel
 * may be gone by then) */
typedef struct {
    sv_cm_msg_t m[4];
    int n;
    int raise_fd[SV_CM_RAISE_MAX];
    int nraise;
} sv_cm_out_t;

/* the answers this thread is deciding (sv_cm_handle) */
static __thread sv_cm_out_t *sv_cm_deferring;

static struct {
    struct ibv_context *ctx[SV_MAX_DEVS];
    struct ibv_pd *pd[SV_MAX_DEVS];
} sv_cm_devs;

/* ---------------------------------------------------------------------- */
/* helpers */

static struct sockaddr_in *sv_cm_src(sv_cm_id_t *id)
{
    return &id->id.route.addr.src_sin;
}

static struct sockaddr_in *sv_cm_dst(sv_cm_id_t *id)
{
    return &id->id.route.addr.dst_sin;
}

static uint64_t sv_cm_timeout_ns(void)
{
    return (uint64_t)sv_g.cfg.cm_timeout_ms * 1000000ull;
}

static uint32_t sv_cm_random(void)
{
    uint32_t r = 0;

    sv_auth_random(&r, sizeof(r));
    return r;
}

/* the device context and default PD of device dev, opened once (as
 * librdmacm keeps its devices open) */
static int sv_cm_dev_open(int dev)
{
    struct ibv_device **list;
    int n;

    if (sv_cm_devs.ctx[dev] != NULL) {
        return 0;
    }
    list = ibv_get_device_list(&n);
    if ((list == NULL) || (dev >= n)) {
        if (list != NULL) {
            ibv_free_device_list(list);
        }
        return ENODEV;
    }
    sv_cm_devs.ctx[dev] = ibv_open_device(list[dev]);
    ibv_free_device_list(list);
    if (sv_cm_devs.ctx[dev] == NULL) {
        return ENODEV;
    }
    sv_cm_devs.pd[dev] = ibv_alloc_pd(sv_cm_devs.ctx[dev]);
    if (sv_cm_devs.pd[dev] == NULL) {
        ibv_close_device(sv_cm_devs.ctx[dev]);
        sv_cm_devs.ctx[dev] = NULL;
        return ENOMEM;
    }
    return 0;
}

/* bind the id to device dev: librdmacm's id->verbs, ->pd, port, GIDs */
static int sv_cm_id_set_dev(sv_cm_id_t *id, int dev)
{
    union ibv_gid gid;
    int ret = sv_cm_dev_open(dev);

    if (ret != 0) {
        return ret;
    }
    id->dev         = dev;
    id->id.verbs    = sv_cm_devs.ctx[dev];
    id->id.pd       = sv_cm_devs.pd[dev];
    id->id.port_num = 1;
    if (ibv_query_gid(id->id.verbs, 1, 0, &gid) == 0) {
        id->id.route.addr.addr.ibaddr.sgid = gid;
    }
    id->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
    return 0;
}

static sv_cm_id_t *sv_cm_id_find(uint64_t cookie)
{
    sv_cm_id_t *id;

    for (id = sv_cm_ids; id != NULL; id = id->next) {
        if (id->cookie == cookie) {
            return id;
        }
    }
    return NULL;
}

static void sv_cm_raise(int fd)
{
    uint64_t one = 1;

    if (write(fd, &one, sizeof(one)) != sizeof(one)) {
        /* an eventfd counts far beyond any queue */
    }
}

static void sv_cm_chan_push(sv_cm_chan_t *ch, sv_cm_event_t *e)
{
    sv_cm_out_t *out = sv_cm_deferring;
    int fd;

    e->next = NULL;
    if (ch->tail != NULL) {
        ch->tail->next = e;
    } else {
        ch->head = e;
    }
    ch->tail = e;
    /* queued, but counted after the answers (a reader that takes the
     * count of an event dropped meanwhile may find it earlier: rare, and
     * no worse than before) */
    if ((out != NULL) && (out->nraise < SV_CM_RAISE_MAX) &&
        ((fd = fcntl(ch->ch.fd, F_DUPFD_CLOEXEC, 0)) >= 0)) {
        out->raise_fd[out->nraise++] = fd;
        return;
    }
    sv_cm_raise(ch->ch.fd);
}

/* queue an event of id on its channel; pdata of plen bytes, reported as
 * rlen (IB's fixed sizes) */
static sv_cm_event_t *
sv_cm_event_post(sv_cm_id_t *id, enum rdma_cm_event_type type, int status,
                 const void *pdata, unsigned plen, unsigned rlen)
{
    sv_cm_event_t *e = calloc(1, sizeof(*e));

    if ((e == NULL) || (id->id.channel == NULL)) {
        free(e);
        return NULL;
    }
    e->ev.id     = &id->id;
    e->ev.event  = type;
    e->ev.status = status;
    e->owner     = id;
    if (plen > SV_CM_PDATA_MAX) {
        plen = SV_CM_PDATA_MAX;
    }
    if (rlen > SV_CM_PDATA_MAX) {
        rlen = SV_CM_PDATA_MAX;
    }
    if (plen > 0) {
        memcpy(e->pdata, pdata, plen);
    }
    if (rlen > 0) {
        e->ev.param.conn.private_data     = e->pdata;
        e->ev.param.conn.private_data_len = (uint8_t)rlen;
    }
    sv_cm_chan_push((sv_cm_chan_t *)id->id.channel, e);
    return e;
}

static void
sv_cm_event_simple(sv_cm_id_t *id, enum rdma_cm_event_type type, int status)
{
    sv_cm_event_post(id, type, status, NULL, 0, 0);
}

/* a message to the peer of id (sent by sv_cm_unlock_send) */
static sv_cm_msg_t *sv_cm_out_msg(sv_cm_out_t *out, sv_cm_id_t *id, int kind)
{
    sv_cm_msg_t *m = &out->m[out->n++];

    memset(m, 0, sizeof(*m));
    m->kind     = (uint8_t)kind;
    m->ps       = (uint16_t)id->id.ps;
    m->src_lid  = sv_port_lid(id->dev >= 0 ? id->dev : 0);
    m->src_id   = id->cookie;
    m->src_addr = sv_cm_src(id)->sin_addr.s_addr;
    m->src_port = sv_cm_src(id)->sin_port;
    m->dst_addr = sv_cm_dst(id)->sin_addr.s_addr;
    m->dst_port = sv_cm_dst(id)->sin_port;
    m->dst_lid  = id->peer_lid;
    m->dst_slot = id->peer_slot;
    m->dst_gen  = id->peer_gen;
    m->dst_id   = id->peer_id;
    return m;
}

/* an answer to a message that found no id here */
static void
sv_cm_out_answer(sv_cm_out_t *out, const sv_cm_msg_t *to, int kind, int status)
{
    sv_cm_msg_t *m = &out->m[out->n++];

    memset(m, 0, sizeof(*m));
    m->kind     = (uint8_t)kind;
    m->ps       = to->ps;
    m->status   = status;
    m->src_lid  = to->dst_lid;
    m->dst_lid  = sv_lid_is_local(to->src_lid) ? 0 : to->src_lid;
    m->dst_slot = to->src_slot;
    m->dst_gen  = to->src_gen;
    m->dst_id   = to->src_id;
    m->src_id   = to->dst_id;
}

/* release sv_cm_lock, send out's messages, then count the events that
 * waited for them: 0, or the failure of the first message */
static int sv_cm_unlock_send(sv_cm_out_t *out)
{
    int answers = (sv_cm_deferring != NULL);
    int i, err, first = 0;

    sv_cm_deferring = NULL;
    pthread_mutex_unlock(&sv_cm_lock);
    if (answers && (out->n > 0) && (sv_g.cfg.cm_send_delay_us > 0)) {
        usleep(sv_g.cfg.cm_send_delay_us); /* tests: a descheduled agent */
    }
    for (i = 0; i < out->n; ++i) {
        err   = sv_cm_send(&out->m[i]);
        first = (i == 0) ? err : first;
    }
    for (i = 0; i < out->nraise; ++i) {
        sv_cm_raise(out->raise_fd[i]);
        close(out->raise_fd[i]);
    }
    out->n      = 0;
    out->nraise = 0;
    return first;
}

static void sv_cm_peer_set(sv_cm_id_t *id, const sv_cm_msg_t *m)
{
    id->peer_known    = 1;
    id->peer_lid      = sv_lid_is_local(m->src_lid) ? 0 : m->src_lid;
    id->peer_port_lid = m->src_lid;
    id->peer_slot     = m->src_slot;
    id->peer_gen      = m->src_gen;
    id->peer_id       = m->src_id;
    if (id->peer_lid == 0) {
        sv_cm_watch(m->src_slot, m->src_gen);
    }
}

/* ---------------------------------------------------------------------- */
/* QPs of ids */

static int sv_cm_qp_modify(sv_cm_id_t *id, enum ibv_qp_state state)
{
    struct ibv_qp_attr a;
    int mask;

    a.qp_state = state;
    if (rdma_init_qp_attr(&id->id, &a, &mask) != 0) {
        return errno;
    }
    return ibv_modify_qp(id->id.qp, &a, mask);
}

/* the RC QP of a connection that the peer's REQ or REP described */
static int sv_cm_qp_connect(sv_cm_id_t *id)
{
    int ret;

    if ((id->id.qp == NULL) || (id->id.qp->qp_type != IBV_QPT_RC)) {
        return 0;
    }
    ret = sv_cm_qp_modify(id, IBV_QPS_RTR);
    if (ret == 0) {
        ret = sv_cm_qp_modify(id, IBV_QPS_RTS);
    }
    return ret;
}

static void sv_cm_qp_error(sv_cm_id_t *id)
{
    struct ibv_qp_attr a;

    if (id->id.qp != NULL) {
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
    }
}

/* ---------------------------------------------------------------------- */
/* the messages (the agent's thread, sv_cm_lock taken here) */

static sv_cm_id_t *sv_cm_id_alloc(struct rdma_event_channel *ch, void *ctx,
                                  enum rdma_port_space ps);

static void sv_cm_on_req(const sv_cm_msg_t *m, sv_cm_out_t *out)
{
    sv_cm_id_t *l = sv_cm_id_find(m->dst_id), *c;
    int ud        = (m->kind == SV_CM_SIDR_REQ), dev;
    sv_cm_event_t *e;
    uint32_t rlen;

    if ((l == NULL) || (l->state != SV_CM_S_LISTEN) || (l->id.ps != m->ps)) {
        sv_cm_out_answer(out, m, ud ? SV_CM_SIDR_REP : SV_CM_REJ,
                         SV_CM_REJ_INVALID_SERVICE_ID);
        return;
    }
    /* the child's events go to the listener's channel (a synchronous
     * listener's too: rdma_get_request moves the child off it) */
    c   = sv_cm_id_alloc(l->id.channel, l->id.context, l->id.ps);
    dev = sv_cm_addr_local_dev(m->dst_addr);
    if ((c == NULL) || (sv_cm_id_set_dev(c, dev >= 0 ? dev : 0) != 0)) {
        sv_cm_out_answer(out, m, ud ? SV_CM_SIDR_REP : SV_CM_REJ,
                         SV_CM_REJ_CONSUMER_DEFINED);
        return;
    }
    c->listener                   = l;
    c->state                      = SV_CM_S_REQ_RCVD;
    c->id.qp_type                 = ud ? IBV_QPT_UD : IBV_QPT_RC;
    sv_cm_src(c)->sin_family      = AF_INET;
    sv_cm_src(c)->sin_addr.s_addr = m->dst_addr;
    sv_cm_src(c)->sin_port        = m->dst_port;
    sv_cm_dst(c)->sin_family      = AF_INET;
    sv_cm_dst(c)->sin_addr.s_addr = m->src_addr;
    sv_cm_dst(c)->sin_port        = m->src_port;
    sv_cm_peer_set(c, m);
    c->peer_qpn                       = m->qpn;
    c->peer_psn                       = m->psn;
    c->peer_resp_res                  = m->resp_res;
    c->peer_init_depth                = m->init_depth;
    c->rnr_retry                      = m->rnr_retry;
    c->retry                          = m->retry;
    c->id.route.addr.addr.ibaddr.dgid = c->id.route.addr.addr.ibaddr.sgid;
    if (!ud) {
        /* the REQ reached a process: the requester learns which (IB CM's
         * MRA), so that it hears if that process goes */
        sv_cm_out_msg(out, c, SV_CM_MRA);
    }
    /* the event goes to the listener's channel, for the child id */
    rlen = ud ? SV_CM_PDATA_SIDR_REQ : SV_CM_PDATA_REQ;
    e    = sv_cm_event_post(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, m->pdata,
                            m->pdata_len, rlen);
    if (e != NULL) {
        e->ev.listen_id = &l->id;
        if (ud) {
            e->ev.param.ud.private_data     = e->pdata;
            e->ev.param.ud.private_data_len = (uint8_t)rlen;
            e->ev.param.ud.ah_attr.dlid     = c->peer_port_lid;
            e->ev.param.ud.ah_attr.port_num = 1;
        } else {
            e->ev.param.conn.responder_resources = m->resp_res;
            e->ev.param.conn.initiator_depth     = m->init_depth;
            e->ev.param.conn.retry_count         = m->retry;
            e->ev.param.conn.rnr_retry_count     = m->rnr_retry;
            e->ev.param.conn.srq                 = m->srq;
            e->ev.param.conn.qp_num              = m->qpn;
        }
    }
}

static void sv_cm_on_rep(sv_cm_id_t *id, const sv_cm_msg_t *m, sv_cm_out_t *out)
{
    sv_cm_event_t *e;
    int ret;

    if ((id == NULL) || (id->state != SV_CM_S_CONNECT) ||
        (id->id.qp_type != IBV_QPT_RC)) {
        sv_cm_out_answer(out, m, SV_CM_REJ, SV_CM_REJ_CONSUMER_DEFINED);
        return;
    }
    sv_cm_peer_set(id, m);
    id->peer_qpn        = m->qpn;
    id->peer_psn        = m->psn;
    id->peer_resp_res   = m->resp_res;
    id->peer_init_depth = m->init_depth;
    id->deadline        = 0;
    if (id->id.qp != NULL) {
        ret = sv_cm_qp_connect(id);
        if (ret != 0) {
            sv_cm_out_msg(out, id, SV_CM_REJ)->status =
                    SV_CM_REJ_CONSUMER_DEFINED;
            id->state = SV_CM_S_DONE;
            sv_cm_event_simple(id, RDMA_CM_EVENT_CONNECT_ERROR, -ret);
            return;
        }
        sv_cm_out_msg(out, id, SV_CM_RTU);
        id->state = SV_CM_S_CONNECTED;
        e         = sv_cm_event_post(id, RDMA_CM_EVENT_ESTABLISHED, 0, m->pdata,
                                     m->pdata_len, SV_CM_PDATA_REP);
    } else {
        id->state = SV_CM_S_REP_RCVD;
        e = sv_cm_event_post(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, m->pdata,
                             m->pdata_len, SV_CM_PDATA_REP);
    }
    if (e != NULL) {
        e->ev.param.conn.responder_resources = m->resp_res;
        e->ev.param.conn.initiator_depth     = m->init_depth;
        e->ev.param.conn.rnr_retry_count     = m->rnr_retry;
        e->ev.param.conn.qp_num              = m->qpn;
    }
}

static void sv_cm_on_sidr_rep(sv_cm_id_t *id, const sv_cm_msg_t *m)
{
    sv_cm_event_t *e;

    if ((id == NULL) || (id->state != SV_CM_S_CONNECT) ||
        (id->id.qp_type != IBV_QPT_UD)) {
        return;
    }
    id->deadline = 0;
    if (m->status != 0) {
        id->state = SV_CM_S_DONE;
        sv_cm_event_simple(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNREFUSED);
        return;
    }
    sv_cm_peer_set(id, m);
    id->peer_qpn  = m->qpn;
    id->peer_qkey = m->qkey;
    id->state     = SV_CM_S_CONNECTED;
    e             = sv_cm_event_post(id, RDMA_CM_EVENT_ESTABLISHED, 0, m->pdata,
                                     m->pdata_len, SV_CM_PDATA_SIDR_REP);
    if (e != NULL) {
        e->ev.param.ud.private_data     = e->pdata;
        e->ev.param.ud.private_data_len = SV_CM_PDATA_SIDR_REP;
        e->ev.param.ud.ah_attr.dlid     = m->src_lid;
        e->ev.param.ud.ah_attr.port_num = 1;
        e->ev.param.ud.qp_num           = m->qpn;
        e->ev.param.ud.qkey             = m->qkey;
    }
}

/* the peer rejected, or went before the connection was up */
static void
sv_cm_rejected(sv_cm_id_t *id, int status, const void *pdata, unsigned plen)
{
    id->state    = SV_CM_S_DONE;
    id->deadline = 0;
    sv_cm_qp_error(id);
    sv_cm_event_post(id, RDMA_CM_EVENT_REJECTED, status, pdata, plen,
                     SV_CM_PDATA_REJ);
}

static void sv_cm_disconnected(sv_cm_id_t *id)
{
    id->state    = SV_CM_S_DISCONNECTED;
    id->deadline = 0;
    sv_cm_qp_error(id);
    sv_cm_event_simple(id, RDMA_CM_EVENT_DISCONNECTED, 0);
}

/* the process of peer (lid, slot, gen) is gone: as the kernel's CM closing
 * its ids would tell us */
static void sv_cm_on_gone(const sv_cm_msg_t *m)
{
    sv_cm_id_t *id;

    for (id = sv_cm_ids; id != NULL; id = id->next) {
        if (!id->peer_known || (id->peer_lid != m->src_lid) ||
            (id->peer_slot != m->src_slot) || (id->peer_gen != m->src_gen)) {
            continue;
        }
        switch (id->state) {
        case SV_CM_S_CONNECT:
        case SV_CM_S_REQ_RCVD:
        case SV_CM_S_ACCEPTED:
            sv_cm_rejected(id, SV_CM_REJ_CONSUMER_DEFINED, NULL, 0);
            break;
        case SV_CM_S_REP_RCVD:
        case SV_CM_S_CONNECTED:
        case SV_CM_S_DISCONNECTING:
            if (id->id.qp_type == IBV_QPT_UD) {
                break; /* a datagram service has no connection */
            }
            sv_cm_disconnected(id);
            break;
        default:
            break;
        }
    }
}

void sv_cm_handle(const sv_cm_msg_t *m)
{
    sv_cm_out_t out = {.n = 0};
    sv_cm_id_t *id;

    pthread_mutex_lock(&sv_cm_lock);
    sv_cm_deferring = &out;
    id              = (m->kind == SV_CM_GONE) ? NULL : sv_cm_id_find(m->dst_id);
    /* a message from a process that is not the id's peer is not its */
    if ((id != NULL) && id->peer_known && (m->kind != SV_CM_REQ) &&
        (m->kind != SV_CM_SIDR_REQ) &&
        ((id->peer_slot != m->src_slot) || (id->peer_gen != m->src_gen))) {
        id = NULL;
    }
    switch (m->kind) {
    case SV_CM_REQ:
    case SV_CM_SIDR_REQ:
        sv_cm_on_req(m, &out);
        break;
    case SV_CM_MRA:
        if ((id != NULL) && (id->state == SV_CM_S_CONNECT)) {
            sv_cm_peer_set(id, m);
            /* the peer's application decides: it has a while more */
            id->deadline = sv_now_ns() + 4 * sv_cm_timeout_ns();
        }
        break;
    case SV_CM_REP:
        sv_cm_on_rep(id, m, &out);
        break;
    case SV_CM_SIDR_REP:
        sv_cm_on_sidr_rep(id, m);
        break;
    case SV_CM_RTU:
        if ((id != NULL) && (id->state == SV_CM_S_ACCEPTED)) {
            id->state    = SV_CM_S_CONNECTED;
            id->deadline = 0;
            sv_cm_event_simple(id, RDMA_CM_EVENT_ESTABLISHED, 0);
        }
        break;
    case SV_CM_REJ:
        if ((id != NULL) && ((id->state == SV_CM_S_CONNECT) ||
                             (id->state == SV_CM_S_REP_RCVD) ||
                             (id->state == SV_CM_S_ACCEPTED) ||
                             (id->state == SV_CM_S_REQ_RCVD))) {
            sv_cm_rejected(id, m->status, m->pdata, m->pdata_len);
        }
        break;
    case SV_CM_DREQ:
        if ((id != NULL) && ((id->state == SV_CM_S_CONNECTED) ||
                             (id->state == SV_CM_S_DISCONNECTING) ||
                             (id->state == SV_CM_S_ACCEPTED) ||
                             (id->state == SV_CM_S_REP_RCVD))) {
            sv_cm_disconnected(id);
        }
        sv_cm_out_answer(&out, m, SV_CM_DREP, 0);
        break;
    case SV_CM_DREP:
        if ((id != NULL) && (id->state == SV_CM_S_DISCONNECTING)) {
            sv_cm_disconnected(id);
        }
        break;
    case SV_CM_GONE:
        sv_cm_on_gone(m);
        break;
    default:
        break;
    }
    sv_cm_unlock_send(&out);
}

/* the timers of ids: an unanswered REQ or REP, a DREQ without DREP */
uint64_t sv_cm_timers(uint64_t now)
{
    uint64_t next = UINT64_MAX;
    sv_cm_id_t *id;

    pthread_mutex_lock(&sv_cm_lock);
    for (id = sv_cm_ids; id != NULL; id = id->next) {
        if (id->deadline == 0) {
            continue;
        }
        if (id->deadline > now) {
            next = (id->deadline < next) ? id->deadline : next;
            continue;
        }
        id->deadline = 0;
        if ((id->state == SV_CM_S_CONNECT) || (id->state == SV_CM_S_ACCEPTED)) {
            id->state = SV_CM_S_DONE;
            sv_cm_qp_error(id);
            sv_cm_event_simple(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
        } else if (id->state == SV_CM_S_DISCONNECTING) {
            sv_cm_disconnected(id);
        }
    }
    pthread_mutex_unlock(&sv_cm_lock);
    return next;
}

/* ---------------------------------------------------------------------- */
/* event channels and ids */

SV_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
    sv_cm_chan_t *ch;
    int ret = sv_cm_agent_start();

    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    if (ch->ch.fd < 0) {
        free(ch);
        return NULL;
    }
    return &ch->ch;
}

SV_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    sv_cm_chan_t *ch = (sv_cm_chan_t *)channel;
    sv_cm_event_t *e;

    if (ch == NULL) {
        return;
    }
    while ((e = ch->head) != NULL) {
        ch->head = e->next;
        free(e);
    }
    close(ch->ch.fd);
    free(ch);
}

static sv_cm_id_t *sv_cm_id_alloc(struct rdma_event_channel *ch, void *ctx,
                                  enum rdma_port_space ps)
{
    sv_cm_id_t *id = calloc(1, sizeof(*id));

    if (id == NULL) {
        return NULL;
    }
    if (ch == NULL) {
        /* synchronous: a channel of its own, which the calls wait on */
        ch = rdma_create_event_channel();
        if (ch == NULL) {
            free(id);
            return NULL;
        }
        id->sync = 1;
    }
    id->id.channel = ch;
    id->id.context = ctx;
    id->id.ps      = ps;
    id->id.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD :
                                                                  IBV_QPT_RC;
    id->cookie     = ((uint64_t)sv_cm_random() << 32) | sv_cm_random();
    id->dev        = -1;
    id->port_idx   = -1;
    id->psn        = sv_cm_random() & 0xffffff;
    id->resp_res   = 1;
    id->init_depth = 1;
    id->retry      = 7;
    id->rnr_retry  = 7;
    pthread_cond_init(&id->acked, NULL);
    id->next  = sv_cm_ids;
    sv_cm_ids = id;
    return id;
}

SV_EXPORT int rdma_create_id(struct rdma_event_channel *channel,
                             struct rdma_cm_id **id_p, void *context,
                             enum rdma_port_space ps)
{
    sv_cm_id_t *id;
    int ret;

    if ((id_p == NULL) || ((ps != RDMA_PS_TCP) && (ps != RDMA_PS_UDP) &&
                           (ps != RDMA_PS_IB) && (ps != RDMA_PS_IPOIB))) {
        errno = EINVAL;
        return -1;
    }
    ret = sv_cm_agent_start();
    if (ret != 0) {
        errno = ret;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    id = sv_cm_id_alloc(channel, context, ps);
    pthread_mutex_unlock(&sv_cm_lock);
    if (id == NULL) {
        errno = ENOMEM;
        return -1;
    }
    *id_p = &id->id;
    return 0;
}

/* drop the events of id still queued on its channel, with their counts
 * (caller holds sv_cm_lock) */
static void sv_cm_events_drop(sv_cm_id_t *id)
{
    sv_cm_chan_t *ch = (sv_cm_chan_t *)id->id.channel;
    sv_cm_event_t *e, *next, *prev = NULL;
    uint64_t cnt;
    int flags;

    for (e = ch->head; e != NULL; e = next) {
        next = e->next;
        if (e->owner != id) {
            prev = e;
            continue;
        }
        if (prev != NULL) {
            prev->next = next;
        } else {
            ch->head = next;
        }
        free(e);
        flags = fcntl(ch->ch.fd, F_GETFL);
        fcntl(ch->ch.fd, F_SETFL, flags | O_NONBLOCK);
        if (read(ch->ch.fd, &cnt, sizeof(cnt)) < 0) {
            /* a reader took the count: it finds no event and reads on */
        }
        fcntl(ch->ch.fd, F_SETFL, flags);
    }
    ch->tail = prev;
}

/* does id have an event not yet taken from its channel? */
static int sv_cm_events_queued(sv_cm_id_t *id)
{
    sv_cm_event_t *e;

    for (e = ((sv_cm_chan_t *)id->id.channel)->head; e != NULL; e = e->next) {
        if (e->owner == id) {
            return 1;
        }
    }
    return 0;
}

static void sv_cm_id_unlink(sv_cm_id_t *id)
{
    sv_cm_id_t **pp;

    for (pp = &sv_cm_ids; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == id) {
            *pp = id->next;
            break;
        }
    }
}

SV_EXPORT int rdma_destroy_id(struct rdma_cm_id *cm_id)
{
    sv_cm_id_t *id  = (sv_cm_id_t *)cm_id, *c, *next;
    sv_cm_out_t out = {.n = 0};
    sv_cm_msg_t *m;

    if (id == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (id->sync && (id->id.event != NULL)) {
        rdma_ack_cm_event(id->id.event); /* rdma_get_request's */
        id->id.event = NULL;
    }
    pthread_mutex_lock(&sv_cm_lock);
    /* as the kernel's CM closing it: the peer hears */
    switch (id->state) {
    case SV_CM_S_CONNECTED:
    case SV_CM_S_ACCEPTED:
    case SV_CM_S_REP_RCVD:
        if (id->id.qp_type == IBV_QPT_RC) {
            sv_cm_out_msg(&out, id, SV_CM_DREQ);
        }
        break;
    case SV_CM_S_REQ_RCVD:
        m         = sv_cm_out_msg(&out, id,
                          (id->id.qp_type == IBV_QPT_UD) ? SV_CM_SIDR_REP :
                                                                   SV_CM_REJ);
        m->status = SV_CM_REJ_CONSUMER_DEFINED;
        break;
    default:
        break;
    }
    id->state    = SV_CM_S_DONE;
    id->deadline = 0;
    /* events given out must come back first (librdmacm blocks too) */
    while (id->events > 0) {
        pthread_cond_wait(&id->acked, &sv_cm_lock);
    }
    sv_cm_events_drop(id);
    /* a listener takes the requests nobody took with it (rejected, as
     * the kernel's CM does); the others are the application's now */
    for (c = sv_cm_ids; c != NULL; c = next) {
        next = c->next;
        if (c->listener != id) {
            continue;
        }
        c->listener = NULL;
        if ((c->state == SV_CM_S_REQ_RCVD) && (c->events == 0) &&
            sv_cm_events_queued(c) && (out.n < 4)) {
            m         = sv_cm_out_msg(&out, c,
                              (c->id.qp_type == IBV_QPT_UD) ? SV_CM_SIDR_REP :
                                                                      SV_CM_REJ);
            m->status = SV_CM_REJ_CONSUMER_DEFINED;
            sv_cm_events_drop(c);
            sv_cm_id_unlink(c);
            pthread_cond_destroy(&c->acked);
            free(c);
        }
    }
    sv_cm_id_unlink(id);
    sv_cm_unlock_send(&out);
    sv_cm_port_release(id->port_idx);
    if (id->sync) {
        rdma_destroy_event_channel(id->id.channel);
    }
    pthread_cond_destroy(&id->acked);
    free(id);
    return 0;
}

SV_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel,
                                struct rdma_cm_event **event)
{
    sv_cm_chan_t *ch = (sv_cm_chan_t *)channel;
    sv_cm_event_t *e;
    uint64_t cnt;

    if ((ch == NULL) || (event == NULL)) {
        errno = EINVAL;
        return -1;
    }
    for (;;) {
        /* blocks, or fails with EAGAIN, as the application set the fd */
        if (read(ch->ch.fd, &cnt, sizeof(cnt)) != sizeof(cnt)) {
            return -1;
        }
        pthread_mutex_lock(&sv_cm_lock);
        e = ch->head;
        if (e != NULL) {
            ch->head = e->next;
            if (ch->head == NULL) {
                ch->tail = NULL;
            }
            e->owner->events++;
        }
        pthread_mutex_unlock(&sv_cm_lock);
        if (e != NULL) {
            *event = &e->ev;
            return 0;
        }
        /* the count of an event dropped with its id */
    }
}

SV_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    sv_cm_event_t *e = (sv_cm_event_t *)event;

    if (e == NULL) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (--e->owner->events == 0) {
        pthread_cond_broadcast(&e->owner->acked);
    }
    pthread_mutex_unlock(&sv_cm_lock);
    free(e);
    return 0;
}

SV_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
    static const char *const names[] = {
            "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
            "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
            "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
            "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
            "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
            "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
            "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
            "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT"};

    if ((unsigned)event < sizeof(names) / sizeof(names[0])) {
        return names[event];
    }
    return "UNKNOWN EVENT";
}

/* a synchronous id's call waits for its event: 0, or -1 with errno from
 * the event that came instead */
static int sv_cm_sync_wait(sv_cm_id_t *id, enum rdma_cm_event_type want)
{
    struct rdma_cm_event *ev;
    int status;

    if (rdma_get_cm_event(id->id.channel, &ev) != 0) {
        return -1;
    }
    status = ev->status;
    if (ev->event == want) {
        rdma_ack_cm_event(ev);
        return 0;
    }
    rdma_ack_cm_event(ev);
    errno = (status < 0) ? -status : ECONNREFUSED;
    return -1;
}

SV_EXPORT int
rdma_migrate_id(struct rdma_cm_id *cm_id, struct rdma_event_channel *channel)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;
    struct rdma_event_channel *old;
    int was_sync;

    if ((id == NULL) || (channel == NULL)) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    while (id->events > 0) {
        pthread_cond_wait(&id->acked, &sv_cm_lock);
    }
    old            = id->id.channel;
    was_sync       = id->sync;
    id->id.channel = channel;
    id->sync       = 0;
    pthread_mutex_unlock(&sv_cm_lock);
    if (was_sync && (old != channel)) {
        rdma_destroy_event_channel(old);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* addresses and routes */

SV_EXPORT int rdma_bind_addr(struct rdma_cm_id *cm_id, struct sockaddr *addr)
{
    sv_cm_id_t *id         = (sv_cm_id_t *)cm_id;
    struct sockaddr_in *in = (struct sockaddr_in *)addr;
    uint16_t port;
    int dev = -1, idx, ret = 0;

    if ((id == NULL) || (addr == NULL)) {
        errno = EINVAL;
        return -1;
    }
    if (addr->sa_family != AF_INET) {
        errno = EAFNOSUPPORT; /* IPv4 only */
        return -1;
    }
    if (in->sin_addr.s_addr != htonl(INADDR_ANY)) {
        dev = sv_cm_addr_local_dev(in->sin_addr.s_addr);
        if (dev < 0) {
            errno = EADDRNOTAVAIL;
            return -1;
        }
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state != SV_CM_S_IDLE) {
        ret = EINVAL;
        goto out;
    }
    port = ntohs(in->sin_port);
    idx  = sv_cm_port_bind((uint16_t)id->id.ps, in->sin_addr.s_addr, &port,
                           id->cookie, id->reuse);
    if (idx < 0) {
        ret = -idx;
        goto out;
    }
    if ((dev >= 0) && ((ret = sv_cm_id_set_dev(id, dev)) != 0)) {
        sv_cm_port_release(idx);
        goto out;
    }
    id->port_idx                   = idx;
    sv_cm_src(id)->sin_family      = AF_INET;
    sv_cm_src(id)->sin_addr.s_addr = in->sin_addr.s_addr;
    sv_cm_src(id)->sin_port        = htons(port);
    id->state                      = SV_CM_S_BOUND;
out:
    pthread_mutex_unlock(&sv_cm_lock);
    if (ret != 0) {
        errno = ret;
        return -1;
    }
    return 0;
}

SV_EXPORT int rdma_resolve_addr(struct rdma_cm_id *cm_id,
                                struct sockaddr *src_addr,
                                struct sockaddr *dst_addr, int timeout_ms)
{
    sv_cm_id_t *id          = (sv_cm_id_t *)cm_id;
    struct sockaddr_in any  = {.sin_family = AF_INET};
    struct sockaddr_in *dst = (struct sockaddr_in *)dst_addr;
    sv_cm_route_t route;
    int err, ret = 0;

    (void)timeout_ms;
    if ((id == NULL) || (dst == NULL)) {
        errno = EINVAL;
        return -1;
    }
    if (dst->sin_family != AF_INET) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    if ((id->state == SV_CM_S_IDLE) &&
        (rdma_bind_addr(cm_id, src_addr != NULL ?
                                       src_addr :
                                       (struct sockaddr *)&any) != 0)) {
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state != SV_CM_S_BOUND) {
        ret = EINVAL;
        goto out;
    }
    *sv_cm_dst(id) = *dst;
    err            = sv_cm_addr_route(dst->sin_addr.s_addr, &route);
    if ((err == 0) && (id->dev >= 0) && (id->dev != route.dev)) {
        err = ENODEV; /* bound to a device that does not reach it */
    }
    if (err == 0) {
        err = sv_cm_id_set_dev(id, route.dev);
    }
    if (err != 0) {
        sv_cm_event_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
        goto out;
    }
    if (sv_cm_src(id)->sin_addr.s_addr == htonl(INADDR_ANY)) {
        /* the source is the device's address, as a route would pick */
        sv_cm_src(id)->sin_addr.s_addr = route.local ?
                                                 dst->sin_addr.s_addr :
                                                 sv_cm_addr_of_dev(route.dev);
    }
    id->route_lid                      = route.lid;
    id->route_local                    = route.local;
    id->id.route.addr.addr.ibaddr.dgid = id->id.route.addr.addr.ibaddr.sgid;
    id->state                          = SV_CM_S_ADDR;
    sv_cm_event_simple(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
out:
    pthread_mutex_unlock(&sv_cm_lock);
    if (ret != 0) {
        errno = ret;
        return -1;
    }
    return id->sync ? sv_cm_sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

SV_EXPORT int rdma_resolve_route(struct rdma_cm_id *cm_id, int timeout_ms)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;
    uint64_t timeout_ns;
    int err = 0, local, dev;
    uint16_t lid;

    if (id == NULL) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state != SV_CM_S_ADDR) {
        pthread_mutex_unlock(&sv_cm_lock);
        errno = EINVAL;
        return -1;
    }
    local = id->route_local;
    lid   = id->route_lid;
    dev   = id->dev;
    pthread_mutex_unlock(&sv_cm_lock);
    if (!local) {
        /* the subnet administrator's part: can the host be reached? (a
         * host where no process takes CM messages rejects the REQ) */
        timeout_ns = (timeout_ms > 0) ? (uint64_t)timeout_ms * 1000000ull :
                                        sv_cm_timeout_ns();
        err        = sv_cm_host_reach(lid, dev, timeout_ns);
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state == SV_CM_S_ADDR) {
        if ((err != 0) && (err != ECONNREFUSED)) {
            sv_cm_event_simple(id, RDMA_CM_EVENT_ROUTE_ERROR, -err);
        } else {
            id->refused = (err == ECONNREFUSED);
            memset(&id->path, 0, sizeof(id->path));
            id->path.sgid          = id->id.route.addr.addr.ibaddr.sgid;
            id->path.dgid          = id->id.route.addr.addr.ibaddr.dgid;
            id->path.dlid          = htons(lid);
            id->path.slid          = htons(sv_port_lid(dev));
            id->path.pkey          = htons(0xffff);
            id->path.mtu           = IBV_MTU_4096;
            id->path.mtu_selector  = 2;
            id->path.reversible    = 1;
            id->id.route.path_rec  = &id->path;
            id->id.route.num_paths = 1;
            id->state              = SV_CM_S_ROUTE;
            sv_cm_event_simple(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
        }
    }
    pthread_mutex_unlock(&sv_cm_lock);
    return id->sync ? sv_cm_sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

SV_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *cm_id)
{
    return ((sv_cm_id_t *)cm_id)->id.route.addr.src_sin.sin_port;
}

SV_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *cm_id)
{
    return ((sv_cm_id_t *)cm_id)->id.route.addr.dst_sin.sin_port;
}

SV_EXPORT int rdma_set_option(struct rdma_cm_id *cm_id, int level, int optname,
                              void *optval, size_t optlen)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;

    if ((id == NULL) || (optval == NULL)) {
        errno = EINVAL;
        return -1;
    }
    if ((level == RDMA_OPTION_ID) && (optname == RDMA_OPTION_ID_REUSEADDR)) {
        if (optlen != sizeof(int)) {
            errno = EINVAL;
            return -1;
        }
        id->reuse = !!*(int *)optval;
        return 0;
    }
    if ((level == RDMA_OPTION_ID) || (level == RDMA_OPTION_IB)) {
        return 0; /* type of service, AF only, ACK timeout, path: no
                     * effect on an emulated fabric of one subnet */
    }
    errno = EINVAL;
    return -1;
}

/* ---------------------------------------------------------------------- */
/* QPs */

SV_EXPORT int
rdma_init_qp_attr(struct rdma_cm_id *cm_id, struct ibv_qp_attr *a, int *mask)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;
    enum ibv_qp_state state;
    int ud;

    if ((id == NULL) || (a == NULL) || (mask == NULL) || (id->dev < 0)) {
        errno = EINVAL;
        return -1;
    }
    state = a->qp_state;
    ud    = (id->id.qp_type == IBV_QPT_UD);
    memset(a, 0, sizeof(*a));
    a->qp_state = state;
    switch (state) {
    case IBV_QPS_INIT:
        a->port_num   = 1;
        a->pkey_index = 0;
        *mask         = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (ud) {
            a->qkey = SV_CM_UDP_QKEY;
            *mask |= IBV_QP_QKEY;
        } else {
            a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC;
            *mask |= IBV_QP_ACCESS_FLAGS;
        }
        return 0;
    case IBV_QPS_RTR:
        *mask = IBV_QP_STATE;
        if (ud) {
            return 0;
        }
        if (!id->peer_known) {
            errno = EINVAL; /* no REQ or REP yet: nothing to connect */
            return -1;
        }
        a->path_mtu           = IBV_MTU_4096;
        a->dest_qp_num        = id->peer_qpn;
        a->rq_psn             = id->peer_psn;
        a->max_dest_rd_atomic = id->resp_res ? id->resp_res : 1;
        a->min_rnr_timer      = 12;
        a->ah_attr.dlid       = id->peer_port_lid;
        a->ah_attr.port_num   = 1;
        *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        return 0;
    case IBV_QPS_RTS:
        a->sq_psn = id->psn;
        *mask     = IBV_QP_STATE | IBV_QP_SQ_PSN;
        if (!ud) {
            a->timeout       = 14;
            a->retry_cnt     = id->retry;
            a->rnr_retry     = id->rnr_retry;
            a->max_rd_atomic = id->init_depth ? id->init_depth : 1;
            *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC;
        }
        return 0;
    default:
        errno = EINVAL;
        return -1;
    }
}

/* a CQ with a completion channel of its own, as librdmacm makes for a QP
 * whose attributes leave one out */
static struct ibv_cq *
sv_cm_cq_new(sv_cm_id_t *id, uint32_t wr, struct ibv_comp_channel **ch)
{
    struct ibv_cq *cq;

    *ch = ibv_create_comp_channel(id->id.verbs);
    if (*ch == NULL) {
        return NULL;
    }
    cq = ibv_create_cq(id->id.verbs, wr ? (int)wr : 1, id, *ch, 0);
    if (cq == NULL) {
        ibv_destroy_comp_channel(*ch);
        *ch = NULL;
    }
    return cq;
}

/* the CQs (and channels) sv_cm_cq_new made for id's QP */
static void sv_cm_cqs_free(sv_cm_id_t *id)
{
    if (id->id.send_cq_channel != NULL) {
        ibv_destroy_cq(id->id.send_cq);
        ibv_destroy_comp_channel(id->id.send_cq_channel);
    }
    if (id->id.recv_cq_channel != NULL) {
        ibv_destroy_cq(id->id.recv_cq);
        ibv_destroy_comp_channel(id->id.recv_cq_channel);
    }
    id->id.send_cq         = NULL;
    id->id.recv_cq         = NULL;
    id->id.send_cq_channel = NULL;
    id->id.recv_cq_channel = NULL;
}

SV_EXPORT int rdma_create_qp(struct rdma_cm_id *cm_id, struct ibv_pd *pd,
                             struct ibv_qp_init_attr *attr)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;
    struct ibv_qp_init_attr qa;
    struct ibv_qp *qp;
    int ret;

    if ((id == NULL) || (attr == NULL) || (id->dev < 0) ||
        (id->id.qp != NULL)) {
        errno = EINVAL;
        return -1;
    }
    qa = *attr;
    if ((qa.send_cq == NULL) &&
        ((qa.send_cq = sv_cm_cq_new(id, qa.cap.max_send_wr,
                                    &id->id.send_cq_channel)) == NULL)) {
        goto err;
    }
    id->id.send_cq = qa.send_cq;
    if ((qa.recv_cq == NULL) &&
        ((qa.recv_cq = sv_cm_cq_new(id, qa.cap.max_recv_wr,
                                    &id->id.recv_cq_channel)) == NULL)) {
        goto err;
    }
    id->id.recv_cq = qa.recv_cq;
    if (qa.qp_type == 0) {
        qa.qp_type = id->id.qp_type;
    }
    qp = ibv_create_qp((pd != NULL) ? pd : id->id.pd, &qa);
    if (qp == NULL) {
        goto err;
    }
    id->id.qp  = qp;
    id->id.srq = qa.srq;
    /* to INIT, ready for receives; a datagram QP on to RTS, ready to send
     * (a connected one goes on when its peer is known) */
    ret = sv_cm_qp_modify(id, IBV_QPS_INIT);
    if ((ret == 0) && (qa.qp_type == IBV_QPT_UD) &&
        ((ret = sv_cm_qp_modify(id, IBV_QPS_RTR)) == 0)) {
        ret = sv_cm_qp_modify(id, IBV_QPS_RTS);
    }
    if (ret != 0) {
        ibv_destroy_qp(qp);
        id->id.qp = NULL;
        errno     = ret;
        goto err;
    }
    attr->cap = qa.cap;
    return 0;

err:
    ret = errno ? errno : ENOMEM;
    sv_cm_cqs_free(id);
    errno = ret;
    return -1;
}

SV_EXPORT int
rdma_create_qp_ex(struct rdma_cm_id *cm_id, struct ibv_qp_init_attr_ex *ax)
{
    struct ibv_qp_init_attr a;
    int ret;

    if (ax == NULL) {
        errno = EINVAL;
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.qp_context = ax->qp_context;
    a.send_cq    = ax->send_cq;
    a.recv_cq    = ax->recv_cq;
    a.srq        = ax->srq;
    a.cap        = ax->cap;
    a.qp_type    = ax->qp_type;
    a.sq_sig_all = ax->sq_sig_all;
    ret          = rdma_create_qp(cm_id,
                         (ax->comp_mask & IBV_QP_INIT_ATTR_PD) ? ax->pd : NULL,
                                  &a);
    ax->cap      = a.cap;
    return ret;
}

SV_EXPORT void rdma_destroy_qp(struct rdma_cm_id *cm_id)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;

    if ((id == NULL) || (id->id.qp == NULL)) {
        return;
    }
    ibv_destroy_qp(id->id.qp);
    id->id.qp = NULL;
    sv_cm_cqs_free(id);
}

/* ---------------------------------------------------------------------- */
/* connecting */

SV_EXPORT int
rdma_connect(struct rdma_cm_id *cm_id, struct rdma_conn_param *param)
{
    sv_cm_id_t *id  = (sv_cm_id_t *)cm_id;
    int ud          = (id != NULL) && (id->id.qp_type == IBV_QPT_UD);
    unsigned max    = ud ? SV_CM_PDATA_SIDR_REQ : SV_CM_PDATA_REQ;
    sv_cm_out_t out = {.n = 0};
    uint16_t slot;
    uint64_t cookie;
    sv_cm_msg_t *m;
    int ret = 0, err;

    if ((id == NULL) || ((param != NULL) && (param->private_data_len > max))) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state != SV_CM_S_ROUTE) {
        pthread_mutex_unlock(&sv_cm_lock);
        errno = EINVAL;
        return -1;
    }
    if (param != NULL) {
        id->resp_res   = param->responder_resources;
        id->init_depth = param->initiator_depth;
        id->retry      = param->retry_count ? param->retry_count : 7;
        id->rnr_retry  = param->rnr_retry_count;
    }
    m             = sv_cm_out_msg(&out, id, ud ? SV_CM_SIDR_REQ : SV_CM_REQ);
    m->dst_lid    = id->route_local ? 0 : id->route_lid;
    m->dst_slot   = SV_CM_SLOT_PORT;
    m->dst_gen    = 0;
    m->dst_id     = 0;
    m->qpn        = (id->id.qp != NULL) ? id->id.qp->qp_num :
                    (param != NULL)     ? param->qp_num :
                                          0;
    m->psn        = id->psn;
    m->resp_res   = id->resp_res;
    m->init_depth = id->init_depth;
    m->retry      = id->retry;
    m->rnr_retry  = id->rnr_retry;
    m->srq        = (param != NULL) ? param->srq : 0;
    if ((param != NULL) && (param->private_data_len > 0)) {
        memcpy(m->pdata, param->private_data, param->private_data_len);
        m->pdata_len = param->private_data_len;
    }
    id->state    = SV_CM_S_CONNECT;
    id->deadline = sv_now_ns() + sv_cm_timeout_ns();
    err          = 0;
    if (id->refused) {
        err = ECONNREFUSED;
    } else if (id->route_local) {
        /* a listener of this host: the port table names it */
        if (sv_cm_port_lookup(m->ps, m->dst_addr, ntohs(m->dst_port), &slot,
                              &cookie) != 0) {
            err = ECONNREFUSED;
        } else {
            m->dst_slot = slot;
            m->dst_gen  = sv_g.shm->procs[slot].gen;
            m->dst_id   = cookie;
        }
    }
    if (err != 0) {
        out.n        = 0;
        id->deadline = 0;
        id->state    = SV_CM_S_DONE;
        if (ud) {
            sv_cm_event_simple(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNREFUSED);
        } else {
            sv_cm_event_post(id, RDMA_CM_EVENT_REJECTED,
                             SV_CM_REJ_INVALID_SERVICE_ID, NULL, 0,
                             SV_CM_PDATA_REJ);
        }
    }
    err = sv_cm_unlock_send(&out);
    if (err != 0) {
        pthread_mutex_lock(&sv_cm_lock);
        if (id->state == SV_CM_S_CONNECT) {
            id->deadline = 0;
            id->state    = SV_CM_S_DONE;
            if (err == ECONNREFUSED || err == ENOENT) {
                sv_cm_event_post(id, RDMA_CM_EVENT_REJECTED,
                                 SV_CM_REJ_INVALID_SERVICE_ID, NULL, 0,
                                 SV_CM_PDATA_REJ);
            } else {
                sv_cm_event_simple(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
            }
        }
        pthread_mutex_unlock(&sv_cm_lock);
    }
    if (ret != 0) {
        errno = ret;
        return -1;
    }
    return id->sync ? sv_cm_sync_wait(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

SV_EXPORT int rdma_establish(struct rdma_cm_id *cm_id)
{
    sv_cm_id_t *id  = (sv_cm_id_t *)cm_id;
    sv_cm_out_t out = {.n = 0};

    if (id == NULL) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state != SV_CM_S_REP_RCVD) {
        pthread_mutex_unlock(&sv_cm_lock);
        errno = EINVAL;
        return -1;
    }
    sv_cm_out_msg(&out, id, SV_CM_RTU);
    id->state = SV_CM_S_CONNECTED;
    sv_cm_unlock_send(&out);
    return 0;
}

SV_EXPORT int rdma_listen(struct rdma_cm_id *cm_id, int backlog)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;
    int ret        = 0;

    (void)backlog; /* requests wait in the listener's channel, unbounded */
    if (id == NULL) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state == SV_CM_S_IDLE) {
        /* listening unbound: an ephemeral port on every address */
        pthread_mutex_unlock(&sv_cm_lock);
        {
            struct sockaddr_in any = {.sin_family = AF_INET};

            if (rdma_bind_addr(cm_id, (struct sockaddr *)&any) != 0) {
                return -1;
            }
        }
        pthread_mutex_lock(&sv_cm_lock);
    }
    if (id->state != SV_CM_S_BOUND) {
        ret = EINVAL;
    } else if ((ret = sv_cm_port_listen(id->port_idx)) == 0) {
        id->state = SV_CM_S_LISTEN;
    }
    pthread_mutex_unlock(&sv_cm_lock);
    if (ret != 0) {
        errno = ret;
        return -1;
    }
    return 0;
}

SV_EXPORT int
rdma_accept(struct rdma_cm_id *cm_id, struct rdma_conn_param *param)
{
    sv_cm_id_t *id  = (sv_cm_id_t *)cm_id;
    int ud          = (id != NULL) && (id->id.qp_type == IBV_QPT_UD);
    unsigned max    = ud ? SV_CM_PDATA_SIDR_REP : SV_CM_PDATA_REP;
    sv_cm_out_t out = {.n = 0};
    sv_cm_msg_t *m;
    int ret = 0, err;

    if ((id == NULL) || ((param != NULL) && (param->private_data_len > max))) {
        errno = EINVAL;
        return -1;
    }
    if (id->sync && (id->id.event != NULL)) {
        rdma_ack_cm_event(id->id.event); /* rdma_get_request's */
        id->id.event = NULL;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state != SV_CM_S_REQ_RCVD) {
        ret = EINVAL;
        goto out;
    }
    if (param != NULL) {
        id->resp_res   = param->responder_resources;
        id->init_depth = param->initiator_depth;
        if (param->rnr_retry_count) {
            id->rnr_retry = param->rnr_retry_count;
        }
    }
    if (!ud && (id->id.qp != NULL) && ((ret = sv_cm_qp_connect(id)) != 0)) {
        goto out;
    }
    m             = sv_cm_out_msg(&out, id, ud ? SV_CM_SIDR_REP : SV_CM_REP);
    m->qpn        = (id->id.qp != NULL) ? id->id.qp->qp_num :
                    (param != NULL)     ? param->qp_num :
                                          0;
    m->qkey       = SV_CM_UDP_QKEY;
    m->psn        = id->psn;
    m->resp_res   = id->resp_res;
    m->init_depth = id->init_depth;
    m->rnr_retry  = id->rnr_retry;
    if ((param != NULL) && (param->private_data_len > 0)) {
        memcpy(m->pdata, param->private_data, param->private_data_len);
        m->pdata_len = param->private_data_len;
    }
    if (ud) {
        id->state = SV_CM_S_CONNECTED;
    } else {
        id->state    = SV_CM_S_ACCEPTED;
        id->deadline = sv_now_ns() + sv_cm_timeout_ns();
    }
out:
    err = sv_cm_unlock_send(&out);
    if (ret != 0) {
        errno = ret;
        return -1;
    }
    if (err != 0) {
        /* the requester is gone: its REQ timed out or it died */
        errno = err;
        return -1;
    }
    return (id->sync && !ud) ? sv_cm_sync_wait(id, RDMA_CM_EVENT_ESTABLISHED) :
                               0;
}

SV_EXPORT int rdma_reject(struct rdma_cm_id *cm_id, const void *private_data,
                          uint8_t private_data_len)
{
    sv_cm_id_t *id  = (sv_cm_id_t *)cm_id;
    int ud          = (id != NULL) && (id->id.qp_type == IBV_QPT_UD);
    sv_cm_out_t out = {.n = 0};
    sv_cm_msg_t *m;

    if ((id == NULL) ||
        (private_data_len > (ud ? SV_CM_PDATA_SIDR_REP : SV_CM_PDATA_REJ)) ||
        ((private_data_len > 0) && (private_data == NULL))) {
        errno = EINVAL;
        return -1;
    }
    if (id->sync && (id->id.event != NULL)) {
        rdma_ack_cm_event(id->id.event); /* rdma_get_request's */
        id->id.event = NULL;
    }
    pthread_mutex_lock(&sv_cm_lock);
    if (id->state != SV_CM_S_REQ_RCVD) {
        pthread_mutex_unlock(&sv_cm_lock);
        errno = EINVAL;
        return -1;
    }
    m         = sv_cm_out_msg(&out, id, ud ? SV_CM_SIDR_REP : SV_CM_REJ);
    m->status = SV_CM_REJ_CONSUMER_DEFINED;
    if (private_data_len > 0) {
        memcpy(m->pdata, private_data, private_data_len);
        m->pdata_len = private_data_len;
    }
    id->state = SV_CM_S_DONE;
    sv_cm_unlock_send(&out);
    return 0;
}

SV_EXPORT int rdma_reject_ece(struct rdma_cm_id *cm_id,
                              const void *private_data,
                              uint8_t private_data_len)
{
    return rdma_reject(cm_id, private_data, private_data_len);
}

SV_EXPORT int rdma_notify(struct rdma_cm_id *cm_id, enum ibv_event_type event)
{
    (void)event;
    if (cm_id == NULL) {
        errno = EINVAL;
        return -1;
    }
    return 0; /* connections come up by their RTU here */
}

SV_EXPORT int rdma_disconnect(struct rdma_cm_id *cm_id)
{
    sv_cm_id_t *id  = (sv_cm_id_t *)cm_id;
    sv_cm_out_t out = {.n = 0};
    int ret         = 0;

    if (id == NULL) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&sv_cm_lock);
    sv_cm_qp_error(id);
    switch (id->state) {
    case SV_CM_S_CONNECTED:
    case SV_CM_S_ACCEPTED:
    case SV_CM_S_REP_RCVD:
        if (id->id.qp_type == IBV_QPT_UD) {
            break;
        }
        sv_cm_out_msg(&out, id, SV_CM_DREQ);
        id->state = SV_CM_S_DISCONNECTING;
        /* the DREP, or as long as IB CM's DREQ timeout, then anyway */
        id->deadline = sv_now_ns() + sv_cm_timeout_ns() / 4;
        break;
    case SV_CM_S_DISCONNECTING:
    case SV_CM_S_DISCONNECTED:
    case SV_CM_S_DONE:
        break; /* the peer disconnected first, or went: nothing more */
    default:
        ret = EINVAL;
        break;
    }
    sv_cm_unlock_send(&out);
    sv_cm_agent_kick(); /* a new timer */
    if (ret != 0) {
        errno = ret;
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* rdma_create_ep and friends: synchronous ids */

SV_EXPORT int rdma_create_ep(struct rdma_cm_id **id_p,
                             struct rdma_addrinfo *res, struct ibv_pd *pd,
                             struct ibv_qp_init_attr *qp_init_attr)
{
    struct rdma_cm_id *cm_id;
    sv_cm_id_t *id;

    if ((id_p == NULL) || (res == NULL)) {
        errno = EINVAL;
        return -1;
    }
    if (rdma_create_id(NULL, &cm_id, NULL,
                       (enum rdma_port_space)res->ai_port_space) != 0) {
        return -1;
    }
    id = (sv_cm_id_t *)cm_id;
    if (res->ai_flags & RAI_PASSIVE) {
        if (rdma_bind_addr(cm_id, res->ai_src_addr) != 0) {
            goto err;
        }
        if (qp_init_attr != NULL) {
            /* requests taken by rdma_get_request get a QP like this */
            id->ep_attr     = *qp_init_attr;
            id->has_ep_attr = 1;
            id->ep_pd       = pd;
        }
        *id_p = cm_id;
        return 0;
    }
    if ((rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000) !=
         0) ||
        (rdma_resolve_route(cm_id, 2000) != 0)) {
        goto err;
    }
    if ((qp_init_attr != NULL) &&
        (rdma_create_qp(cm_id, pd, qp_init_attr) != 0)) {
        goto err;
    }
    *id_p = cm_id;
    return 0;

err : {
    int err = errno;

    rdma_destroy_id(cm_id);
    errno = err;
}
    return -1;
}

SV_EXPORT void rdma_destroy_ep(struct rdma_cm_id *cm_id)
{
    if (cm_id == NULL) {
        return;
    }
    rdma_destroy_qp(cm_id);
    rdma_destroy_id(cm_id);
}

SV_EXPORT int
rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id_p)
{
    sv_cm_id_t *l = (sv_cm_id_t *)listen, *c;
    struct rdma_cm_event *ev;
    struct rdma_event_channel *ch;
    int ret;

    if ((l == NULL) || (id_p == NULL) || !l->sync) {
        errno = EINVAL;
        return -1;
    }
    for (;;) {
        if (rdma_get_cm_event(l->id.channel, &ev) != 0) {
            return -1;
        }
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            break;
        }
        rdma_ack_cm_event(ev);
    }
    c = (sv_cm_id_t *)ev->id;
    /* the request's id waits on a channel of its own from now on */
    ch = rdma_create_event_channel();
    if (ch == NULL) {
        rdma_ack_cm_event(ev);
        return -1;
    }
    c->id.event = ev;
    pthread_mutex_lock(&sv_cm_lock);
    c->id.channel = ch;
    c->sync       = 1;
    pthread_mutex_unlock(&sv_cm_lock);
    if (l->has_ep_attr) {
        struct ibv_qp_init_attr a = l->ep_attr;

        ret = rdma_create_qp(&c->id, l->ep_pd, &a);
        if (ret != 0) {
            int err = errno;

            rdma_reject(&c->id, NULL, 0);
            rdma_destroy_id(&c->id);
            errno = err;
            return -1;
        }
    }
    /* the request's event stays with the id (id->event, as librdmacm
     * leaves it) until accept, reject or destroy */
    *id_p = &c->id;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* devices, SRQs, what softverbs does not emulate */

SV_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
    struct ibv_context **list;
    int d, n = 0;

    if (sv_init() != 0) {
        errno = ENODEV;
        return NULL;
    }
    list = calloc(SV_MAX_DEVS + 1, sizeof(*list));
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&sv_cm_lock);
    for (d = 0; d < sv_g.cfg.ndevs; ++d) {
        if (sv_cm_dev_open(d) == 0) {
            list[n++] = sv_cm_devs.ctx[d];
        }
    }
    pthread_mutex_unlock(&sv_cm_lock);
    if (num_devices != NULL) {
        *num_devices = n;
    }
    return list;
}

SV_EXPORT void rdma_free_devices(struct ibv_context **list)
{
    free(list); /* the contexts stay open, as librdmacm's */
}

SV_EXPORT int rdma_create_srq(struct rdma_cm_id *cm_id, struct ibv_pd *pd,
                              struct ibv_srq_init_attr *attr)
{
    sv_cm_id_t *id = (sv_cm_id_t *)cm_id;
    struct ibv_srq *srq;

    if ((id == NULL) || (attr == NULL) || (id->dev < 0)) {
        errno = EINVAL;
        return -1;
    }
    srq = ibv_create_srq(pd != NULL ? pd : id->id.pd, attr);
    if (srq == NULL) {
        return -1;
    }
    id->id.srq = srq;
    return 0;
}

SV_EXPORT int
rdma_create_srq_ex(struct rdma_cm_id *cm_id, struct ibv_srq_init_attr_ex *attr)
{
    (void)cm_id;
    (void)attr;
    errno = EOPNOTSUPP;
    return -1;
}

SV_EXPORT void rdma_destroy_srq(struct rdma_cm_id *cm_id)
{
    if ((cm_id != NULL) && (cm_id->srq != NULL)) {
        ibv_destroy_srq(cm_id->srq);
        cm_id->srq = NULL;
    }
}

SV_EXPORT int rdma_join_multicast(struct rdma_cm_id *cm_id,
                                  struct sockaddr *addr, void *context)
{
    (void)cm_id;
    (void)addr;
    (void)context;
    errno = ENOSYS; /* no multicast (README, Limitations) */
    return -1;
}

SV_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *cm_id,
                                     struct rdma_cm_join_mc_attr_ex *attr,
                                     void *context)
{
    (void)cm_id;
    (void)attr;
    (void)context;
    errno = ENOSYS;
    return -1;
}

SV_EXPORT int
rdma_leave_multicast(struct rdma_cm_id *cm_id, struct sockaddr *addr)
{
    (void)cm_id;
    (void)addr;
    errno = EADDRNOTAVAIL;
    return -1;
}

SV_EXPORT int rdma_set_local_ece(struct rdma_cm_id *cm_id, struct ibv_ece *ece)
{
    (void)cm_id;
    (void)ece;
    errno = EOPNOTSUPP;
    return -1;
}

SV_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *cm_id, struct ibv_ece *ece)
{
    (void)cm_id;
    (void)ece;
    errno = EOPNOTSUPP;
    return -1;
}
