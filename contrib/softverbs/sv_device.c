/*
 * softverbs front end: devices, contexts, queries, PDs, AHs, completion
 * channels, async events and the helper strings.
 */
#define _GNU_SOURCE
#include "sv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

/* rdma-core providers wrap struct ibv_device in their struct verbs_device,
 * whose next member is the provider's ops table, and their direct-verbs
 * libraries (mlx5dv_is_supported(), efadv_query_device(), ...) tell their
 * own devices by that pointer: keep everything past struct ibv_device zero,
 * so that each of them sees a device that is not its own. */
typedef struct {
    struct ibv_device dev;
    uint8_t           zero[1024];
} sv_device_t;

static sv_device_t sv_devices[SV_MAX_DEVS];

/*
 * UCX only uses a device whose /dev/infiniband/<dev_name> is an accessible
 * character device. There is no uverbs device here: create
 * /dev/infiniband/softverbsN as a symlink to /dev/null when we may (root).
 */
static void sv_make_dev_node(int i)
{
    char path[96];
    struct stat st;

    snprintf(path, sizeof(path), "/dev/infiniband/softverbs%d", i);
    if (stat(path, &st) == 0) {
        return;
    }
    mkdir("/dev/infiniband", 0755);
    if (symlink("/dev/null", path) != 0 && errno != EEXIST) {
        /* not permitted: UCX will not list the device, everything else
         * works; the README says how to create the node by hand */
        return;
    }
}

SV_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct ibv_device **list;
    int i, n;

    if (sv_init() != 0) {
        if (num_devices) {
            *num_devices = 0;
        }
        return calloc(1, sizeof(*list));
    }
    n    = sv_g.cfg.ndevs;
    list = calloc(n + 1, sizeof(*list));
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    for (i = 0; i < n; ++i) {
        struct ibv_device *d = &sv_devices[i].dev;

        d->node_type      = IBV_NODE_CA;
        d->transport_type = IBV_TRANSPORT_IB;
        snprintf(d->name, sizeof(d->name), "softverbs%d", i);
        snprintf(d->dev_name, sizeof(d->dev_name), "softverbs%d", i);
        snprintf(d->dev_path, sizeof(d->dev_path),
                 "/sys/class/infiniband_verbs/softverbs%d", i);
        snprintf(d->ibdev_path, sizeof(d->ibdev_path),
                 "/sys/class/infiniband/softverbs%d", i);
        if (sv_g.cfg.create_dev_node) {
            sv_make_dev_node(i);
        }
        list[i] = d;
    }
    if (num_devices) {
        *num_devices = n;
    }
    return list;
}

SV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

SV_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

/* the index of one of our devices, -1 for any other pointer */
static int sv_dev_index(struct ibv_device *device)
{
    uintptr_t p    = (uintptr_t)device;
    uintptr_t base = (uintptr_t)&sv_devices[0].dev;

    if ((p < base) || (p >= base + sizeof(sv_devices)) ||
        ((p - base) % sizeof(sv_devices[0]) != 0)) {
        return -1;
    }
    return (int)((p - base) / sizeof(sv_devices[0]));
}

SV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
    int i = sv_dev_index(device);

    if (i < 0) {
        errno = ENODEV;
        return 0;
    }
    return htobe64(sv_port_guid(i));
}

SV_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
    return sv_dev_index(device);
}

SV_EXPORT int ibv_fork_init(void)
{
    return 0;
}

SV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
    return IBV_FORK_UNNEEDED;
}

static int sv_vctx_query_port(struct ibv_context *context, uint8_t port_num,
                              struct ibv_port_attr *attr, size_t attr_len);
static int sv_vctx_query_device_ex(struct ibv_context *context,
                                   const struct ibv_query_device_ex_input *in,
                                   struct ibv_device_attr_ex *attr,
                                   size_t attr_size);
static struct ibv_qp *sv_vctx_create_qp_ex(struct ibv_context *context,
                                           struct ibv_qp_init_attr_ex *attr);

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct ibv_context *ibctx;
    sv_context_t *ctx;
    int ret, dev;

    dev = sv_dev_index(device);
    if (dev < 0) {
        errno = ENODEV;
        return NULL;
    }
    ret = sv_init();
    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ctx->dev = dev;
    ctx->id  = sv_new_id();

    /*
     * The extended part, as rdma-core's providers fill it: the ABI marker
     * in the ibv_context tells verbs_get_ctx() that it is there, and sz is
     * the size of the struct softverbs was built with (verbs_get_ctx_op()
     * takes an op as absent when it lies outside). An op left NULL makes
     * the verbs.h helper that needs it fail with EOPNOTSUPP, which is what
     * softverbs wants for the extensions it does not emulate (UCX then
     * falls back from ibv_create_cq_ex to ibv_create_cq). priv stays NULL:
     * only libibverbs' own implementations of the entry points read it,
     * and softverbs replaces each of those that an application can call
     * with a context of ours (see the end of this file).
     */
    ctx->vctx.sz              = sizeof(ctx->vctx);
    ctx->vctx.query_port      = sv_vctx_query_port;
    ctx->vctx.query_device_ex = sv_vctx_query_device_ex;
    ctx->vctx.create_qp_ex    = sv_vctx_create_qp_ex;

    ibctx             = sv_ibctx(ctx);
    ibctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ibctx->device     = device;
    /* the data path verbs.h inlines call through these */
    ibctx->ops.post_send     = sv_op_post_send;
    ibctx->ops.post_recv     = sv_op_post_recv;
    ibctx->ops.post_srq_recv = sv_op_post_srq_recv;
    ibctx->ops.poll_cq       = sv_op_poll_cq;
    ibctx->ops.req_notify_cq = sv_op_req_notify_cq;
    /* ops.alloc_mw stays NULL: ibv_alloc_mw() fails with EOPNOTSUPP */
    ibctx->num_comp_vectors = 1;
    ibctx->cmd_fd           = open("/dev/null", O_RDWR | O_CLOEXEC);
    ibctx->async_fd         = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (ibctx->async_fd < 0) {
        ret = errno;
        close(ibctx->cmd_fd);
        free(ctx);
        errno = ret;
        return NULL;
    }
    pthread_mutex_init(&ibctx->mutex, NULL);
    pthread_mutex_init(&ctx->async_lock, NULL);
    return ibctx;
}

SV_EXPORT int ibv_close_device(struct ibv_context *context)
{
    sv_context_t *ctx = sv_ctx(context);

    close(context->async_fd);
    close(context->cmd_fd);
    free(ctx);
    return 0;
}

SV_EXPORT int ibv_query_device(struct ibv_context *context,
                               struct ibv_device_attr *attr)
{
    sv_context_t *ctx = sv_ctx(context);

    memset(attr, 0, sizeof(*attr));
    sv_config_fw_ver(&sv_g.cfg, attr->fw_ver, sizeof(attr->fw_ver));
    attr->node_guid           = htobe64(sv_port_guid(ctx->dev));
    attr->sys_image_guid      = attr->node_guid;
    attr->max_mr_size         = 1ULL << 46;
    attr->page_size_cap       = 0xfffff000;
    attr->vendor_id           = 0x5356;   /* unknown to UCX: generic HCA */
    attr->vendor_part_id      = 1;
    attr->hw_ver              = 1;
    attr->max_qp              = SV_MAX_QP;
    attr->max_qp_wr           = SV_MAX_WR;
    attr->device_cap_flags    = IBV_DEVICE_RC_RNR_NAK_GEN |
                                IBV_DEVICE_CHANGE_PHY_PORT |
                                IBV_DEVICE_PORT_ACTIVE_EVENT;
    attr->max_sge             = SV_MAX_SGE;
    attr->max_sge_rd          = SV_MAX_SGE;
    attr->max_cq              = SV_MAX_CQ;
    attr->max_cqe             = SV_MAX_CQE - 1;
    attr->max_mr              = SV_MAX_MR - 1;
    attr->max_pd              = 1 << 16;
    attr->max_qp_rd_atom      = 16;
    attr->max_ee_rd_atom      = 0;
    attr->max_res_rd_atom     = 16 * SV_MAX_QP;
    attr->max_qp_init_rd_atom = 16;
    attr->atomic_cap          = IBV_ATOMIC_HCA;
    attr->max_mcast_grp       = 0;
    attr->max_ah              = 1 << 20;
    attr->max_srq             = SV_MAX_SRQ;
    attr->max_srq_wr          = SV_MAX_WR;
    attr->max_srq_sge         = SV_MAX_RECV_SGE;
    attr->max_pkeys           = 1;
    attr->local_ca_ack_delay  = 16;
    attr->phys_port_cnt       = 1;
    return 0;
}

/*
 * The extended device query (the verbs_context op behind
 * ibv_query_device_ex()): the basic attributes, and no extension. attr_size
 * is the size of the caller's struct, which is smaller for a program built
 * against older headers: fill what it has.
 */
static int sv_vctx_query_device_ex(struct ibv_context *context,
                                   const struct ibv_query_device_ex_input *in,
                                   struct ibv_device_attr_ex *attr,
                                   size_t attr_size)
{
    struct ibv_device_attr_ex a;
    int ret;

    if ((in != NULL) && (in->comp_mask != 0)) {
        return EINVAL;
    }
    if (attr_size < offsetof(struct ibv_device_attr_ex, comp_mask) +
                            sizeof(attr->comp_mask)) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    ret = ibv_query_device(context, &a.orig_attr);
    if (ret != 0) {
        return ret;
    }
    /* the extended flags include the basic ones; no ODP, TSO, RSS, tag
     * matching, timestamps, device memory or PCI atomics */
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
    a.phys_port_cnt_ex    = a.orig_attr.phys_port_cnt;
    memset(attr, 0, attr_size);
    memcpy(attr, &a, (attr_size < sizeof(a)) ? attr_size : sizeof(a));
    return 0;
}

static void sv_port_attr(sv_context_t *ctx, struct ibv_port_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->state          = IBV_PORT_ACTIVE;
    a->max_mtu        = IBV_MTU_4096;
    a->active_mtu     = IBV_MTU_4096;
    a->gid_tbl_len    = 1;
    a->port_cap_flags = 0x02010000; /* IsCM | IsSM-disabled style defaults */
    a->max_msg_sz     = SV_MAX_MSG;
    a->pkey_tbl_len   = 1;
    a->lid            = sv_port_lid(ctx->dev);
    a->sm_lid         = 1;
    a->max_vl_num     = 1;
    a->subnet_timeout = 18;
    a->active_width   = 2; /* 4x */
    a->active_speed   = 32; /* EDR */
    a->phys_state     = 5; /* LinkUp */
    a->link_layer     = IBV_LINK_LAYER_INFINIBAND;
}

/* the fields of struct ibv_port_attr that its first ABI (the compat struct
 * that the exported ibv_query_port symbol takes) has */
#define SV_PORT_ATTR_COMPAT_LEN (offsetof(struct ibv_port_attr, link_layer) + 1)

/* the verbs_context op behind the ibv_query_port() of verbs.h: the whole
 * struct, or as much of it as the caller's (older) struct has */
static int sv_vctx_query_port(struct ibv_context *context, uint8_t port_num,
                              struct ibv_port_attr *attr, size_t attr_len)
{
    struct ibv_port_attr a;

    if ((port_num != 1) || (attr_len < SV_PORT_ATTR_COMPAT_LEN)) {
        return EINVAL;
    }
    sv_port_attr(sv_ctx(context), &a);
    memset(attr, 0, attr_len);
    memcpy(attr, &a, (attr_len < sizeof(a)) ? attr_len : sizeof(a));
    return 0;
}

/* the exported symbol: binaries built against headers older than the
 * extended op call it directly with the compat struct */
#undef ibv_query_port
SV_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                             struct _compat_ibv_port_attr *compat)
{
    struct ibv_port_attr a;

    if (port_num != 1) {
        return EINVAL;
    }
    sv_port_attr(sv_ctx(context), &a);
    memcpy(compat, &a, SV_PORT_ATTR_COMPAT_LEN);
    return 0;
}

SV_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num,
                            int index, union ibv_gid *gid)
{
    sv_context_t *ctx = sv_ctx(context);

    if (port_num != 1 || index != 0) {
        return -1;
    }
    gid->global.subnet_prefix = htobe64(0xfe80000000000000ULL);
    gid->global.interface_id  = htobe64(sv_port_guid(ctx->dev));
    return 0;
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *context,
                                uint32_t port_num, uint32_t gid_index,
                                struct ibv_gid_entry *entry, uint32_t flags,
                                size_t entry_size)
{
    if (flags != 0 || entry_size < sizeof(*entry)) {
        return EINVAL;
    }
    memset(entry, 0, sizeof(*entry));
    if (ibv_query_gid(context, (uint8_t)port_num, (int)gid_index,
                      &entry->gid) != 0) {
        return ENODATA;
    }
    entry->gid_index = gid_index;
    entry->port_num  = port_num;
    entry->gid_type  = IBV_GID_TYPE_IB;
    return 0;
}

SV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
                                       struct ibv_gid_entry *entries,
                                       size_t max_entries, uint32_t flags,
                                       size_t entry_size)
{
    if (max_entries < 1) {
        return -EINVAL;
    }
    return _ibv_query_gid_ex(context, 1, 0, entries, flags, entry_size) ?
           -EINVAL : 1;
}

SV_EXPORT int ibv_query_gid_type(struct ibv_context *context,
                                 uint8_t port_num, unsigned int index,
                                 int *type)
{
    (void)context; (void)port_num; (void)index;
    *type = 0;   /* IBV_GID_TYPE_SYSFS_IB_ROCE_V1: what an IB port reports */
    return 0;
}

SV_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num,
                             int index, __be16 *pkey)
{
    (void)context;
    if (port_num != 1 || index != 0) {
        return -1;
    }
    *pkey = htobe16(0xffff);
    return 0;
}

SV_EXPORT int ibv_get_pkey_index(struct ibv_context *context,
                                 uint8_t port_num, __be16 pkey)
{
    (void)context; (void)port_num;
    return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -1;
}

/* ---------------------------------------------------------------------- */

SV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    static uint32_t next_pd;
    sv_pd_t *pd = calloc(1, sizeof(*pd));

    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pd->ibpd.context = context;
    /* unique on the fabric: slot in the high bits */
    pd->id = ((uint32_t)sv_g.slot << 20) |
             (__atomic_add_fetch(&next_pd, 1, __ATOMIC_RELAXED) & 0xfffff);
    pd->ibpd.handle = pd->id;
    return &pd->ibpd;
}

SV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}

SV_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd,
                                       struct ibv_ah_attr *attr)
{
    sv_ah_t *ah;

    if (attr->port_num != 1) {
        errno = EINVAL;
        return NULL;
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ah->ibah.context = pd->context;
    ah->ibah.pd      = pd;
    ah->dlid         = attr->dlid;
    ah->is_global    = attr->is_global;
    ah->dgid         = attr->grh.dgid;
    return &ah->ibah;
}

SV_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context,
                                  uint8_t port_num, struct ibv_wc *wc,
                                  struct ibv_grh *grh,
                                  struct ibv_ah_attr *ah_attr)
{
    (void)context; (void)grh;
    memset(ah_attr, 0, sizeof(*ah_attr));
    ah_attr->dlid     = wc->slid;
    ah_attr->sl       = wc->sl;
    ah_attr->port_num = port_num;
    return 0;
}

SV_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd,
                                               struct ibv_wc *wc,
                                               struct ibv_grh *grh,
                                               uint8_t port_num)
{
    struct ibv_ah_attr attr;

    ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr);
    return ibv_create_ah(pd, &attr);
}

SV_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
    free(ah);
    return 0;
}

SV_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
                               uint16_t lid)
{
    (void)qp; (void)gid; (void)lid;
    return EOPNOTSUPP;
}

SV_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
                               uint16_t lid)
{
    (void)qp; (void)gid; (void)lid;
    return EOPNOTSUPP;
}

SV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    (void)qp;
    return NULL;
}

/* ---------------------------------------------------------------------- */

SV_EXPORT struct ibv_comp_channel *
ibv_create_comp_channel(struct ibv_context *context)
{
    sv_channel_t *ch = calloc(1, sizeof(*ch));

    if (ch == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ibch.context = context;
    ch->ibch.fd      = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (ch->ibch.fd < 0) {
        free(ch);
        return NULL;
    }
    ch->id = sv_new_id();
    pthread_mutex_init(&ch->lock, NULL);
    return &ch->ibch;
}

SV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    sv_channel_t *ch = (sv_channel_t *)channel;

    if (ch->cqs != NULL) {
        return EBUSY;
    }
    close(ch->ibch.fd);
    free(ch);
    return 0;
}

SV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel,
                               struct ibv_cq **cq, void **cq_context)
{
    sv_channel_t *ch = (sv_channel_t *)channel;
    sv_cq_priv_t *c;
    uint64_t one;
    uint32_t ev;

    /* one eventfd count per notification; blocks unless the application
     * made the fd non-blocking */
    if (read(ch->ibch.fd, &one, sizeof(one)) != sizeof(one)) {
        return -1;
    }
    pthread_mutex_lock(&ch->lock);
    for (c = ch->cqs; c != NULL; c = c->chan_next) {
        ev = SV_LOAD(&c->s->events);
        while (ev != 0 &&
               !__atomic_compare_exchange_n(&c->s->events, &ev, ev - 1, 0,
                                            __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
        }
        if (ev != 0) {
            break;
        }
    }
    pthread_mutex_unlock(&ch->lock);
    if (c == NULL) {
        errno = EAGAIN;
        return -1;
    }
    *cq         = &c->ibcq;
    *cq_context = c->ibcq.cq_context;
    return 0;
}

SV_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_broadcast(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

/* ---------------------------------------------------------------------- */

static int sv_async_is_qp_event(enum ibv_event_type type)
{
    switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return 1;
    default:
        return 0;
    }
}

void sv_async_post(sv_context_t *ctx, struct ibv_async_event *ev)
{
    uint64_t one = 1;

    pthread_mutex_lock(&ctx->async_lock);
    if (ctx->async_tail - ctx->async_head < 256) {
        ctx->async_q[ctx->async_tail++ % 256] = *ev;
        if (write(sv_ibctx(ctx)->async_fd, &one, sizeof(one)) != sizeof(one)) {
            --ctx->async_tail;
        }
    }
    pthread_mutex_unlock(&ctx->async_lock);
}

/*
 * Forget the queued, not yet read events of a QP that is being destroyed,
 * as the kernel does for a destroyed uobject: a consumer must never get an
 * event whose element points at a freed QP (UCX reads qp->qp_num from it,
 * possibly while it tears the device down). The eventfd count stays; a read
 * that finds no event returns EAGAIN. async_lock held.
 */
void sv_async_drop_qp(sv_context_t *ctx, struct ibv_qp *ibqp)
{
    unsigned head = ctx->async_head, tail = ctx->async_tail, i, keep = head;
    struct ibv_async_event *ev;

    for (i = head; i != tail; ++i) {
        ev = &ctx->async_q[i % 256];
        if (sv_async_is_qp_event(ev->event_type) && (ev->element.qp == ibqp)) {
            continue;
        }
        ctx->async_q[keep++ % 256] = *ev;
    }
    ctx->async_tail = keep;
}

/* an event another process raised on one of our QPs; async_lock held */
static int sv_async_take_remote(sv_context_t *ctx,
                                struct ibv_async_event *event)
{
    static const struct {
        uint32_t            bit;
        enum ibv_event_type type;
    } map[] = {
        { SV_ASYNC_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR },
        { SV_ASYNC_REQ_ERR,    IBV_EVENT_QP_REQ_ERR },
        { SV_ASYNC_LAST_WQE,   IBV_EVENT_QP_LAST_WQE_REACHED },
    };
    sv_srq_priv_t *srq;
    sv_qp_priv_t *qp;
    unsigned i;

    for (srq = ctx->srqs; srq != NULL; srq = srq->ctx_next) {
        if (__atomic_fetch_and(&srq->s->async_bits, ~SV_ASYNC_SRQ_LIMIT,
                               __ATOMIC_ACQ_REL) & SV_ASYNC_SRQ_LIMIT) {
            event->element.srq = &srq->ibsrq;
            event->event_type  = IBV_EVENT_SRQ_LIMIT_REACHED;
            return 0;
        }
    }
    for (qp = ctx->qps; qp != NULL; qp = qp->ctx_next) {
        if (SV_LOAD(&qp->s->async_bits) == 0) {
            continue;
        }
        for (i = 0; i < sizeof(map) / sizeof(map[0]); ++i) {
            if (__atomic_fetch_and(&qp->s->async_bits, ~map[i].bit,
                                   __ATOMIC_ACQ_REL) & map[i].bit) {
                qp->ibqp.state    = IBV_QPS_ERR;
                event->element.qp = &qp->ibqp;
                event->event_type = map[i].type;
                return 0;
            }
        }
    }
    return -1;
}

SV_EXPORT int ibv_get_async_event(struct ibv_context *context,
                                  struct ibv_async_event *event)
{
    sv_context_t *ctx = sv_ctx(context);
    uint64_t one;
    int ret = -1;

    if (read(context->async_fd, &one, sizeof(one)) != sizeof(one)) {
        return -1;
    }
    pthread_mutex_lock(&ctx->async_lock);
    if (ctx->async_head != ctx->async_tail) {
        *event = ctx->async_q[ctx->async_head++ % 256];
        ret    = 0;
    } else {
        ret = sv_async_take_remote(ctx, event);
    }
    if ((ret == 0) && sv_async_is_qp_event(event->event_type)) {
        ++((sv_qp_priv_t *)event->element.qp)->events_reported;
    }
    pthread_mutex_unlock(&ctx->async_lock);
    if (ret != 0) {
        errno = EAGAIN;
    }
    return ret;
}

SV_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
    struct ibv_qp *qp = event->element.qp;

    if (!sv_async_is_qp_event(event->event_type)) {
        return;
    }
    pthread_mutex_lock(&qp->mutex);
    ++qp->events_completed;
    pthread_cond_broadcast(&qp->cond);
    pthread_mutex_unlock(&qp->mutex);
}

/* ---------------------------------------------------------------------- */

SV_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
    static const char *const s[] = { "unknown", "InfiniBand channel adapter",
                                     "InfiniBand switch",
                                     "InfiniBand router", "iWARP NIC",
                                     "usNIC", "usNIC UDP", "unspecified" };

    /* indexed by the enum: IBV_NODE_CA is 1, IBV_NODE_UNKNOWN is -1 */
    return (((int)t >= IBV_NODE_CA) &&
            ((unsigned)t < sizeof(s) / sizeof(s[0]))) ? s[t] : "unknown";
}

SV_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
    static const char *const n[] = { "no state change (NOP)", "down", "init",
                                     "armed", "active", "active defer" };

    return ((unsigned)s < 6) ? n[s] : "unknown";
}

SV_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
    static const char *const n[] = {
        "CQ error", "local work queue catastrophic error",
        "invalid request local work queue error",
        "local access violation work queue error",
        "communication established", "send queue drained",
        "path migrated", "path migration request error",
        "local catastrophic error", "port active", "port error",
        "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
        "SRQ limit reached", "last WQE reached", "client reregistration",
        "GID table change", "WQ fatal"
    };

    return ((unsigned)e < sizeof(n) / sizeof(n[0])) ? n[e] : "unknown";
}

SV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status st)
{
    static const char *const n[] = {
        "success", "local length error", "local QP operation error",
        "local EE context operation error", "local protection error",
        "Work Request Flushed Error", "memory management operation error",
        "bad response error", "local access error",
        "remote invalid request error", "remote access error",
        "remote operation error", "transport retry counter exceeded",
        "RNR retry counter exceeded", "local RDD violation error",
        "remote invalid RD request", "aborted error",
        "invalid EE context number", "invalid EE context state",
        "fatal error", "response timeout error", "general error",
        "TM error", "TM rendezvous incomplete"
    };

    return ((unsigned)st < sizeof(n) / sizeof(n[0])) ? n[st] : "unknown";
}

SV_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
    return (int)rate;
}

SV_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
    (void)rate;
    return 100000;
}

/* ---------------------------------------------------------------------- */

/*
 * The extended QP creation (the verbs_context op behind
 * ibv_create_qp_ex()): what the basic verb can do, and a clean EOPNOTSUPP
 * for the extensions softverbs does not emulate (XRC, RSS, TSO, create
 * flags, the ibv_wr_* send API of ibv_qp_ex).
 */
static struct ibv_qp *sv_vctx_create_qp_ex(struct ibv_context *context,
                                           struct ibv_qp_init_attr_ex *attr)
{
    const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                           IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || (attr->pd == NULL) ||
        (attr->pd->context != context)) {
        errno = EINVAL;
        return NULL;
    }
    if ((attr->comp_mask & ~known) ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
         (attr->create_flags != 0)) ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
         (attr->send_ops_flags != 0))) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    /* the extended attributes start with the basic ones, as verbs.h's own
     * fallback for a PD-only mask relies on */
    return ibv_create_qp(attr->pd, (struct ibv_qp_init_attr *)attr);
}

/*
 * libibverbs entry points that softverbs does not emulate. libibverbs'
 * own versions of these dispatch through the provider ops table that it
 * keeps in verbs_context.priv, which a softverbs context does not have:
 * called with one of our objects they would crash, so they are replaced
 * here by clean failures.
 */

/* sharing a context with another process through its command fd */
SV_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
    (void)cmd_fd;
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT struct ibv_pd *
ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
    (void)context;
    (void)pd_handle;
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
    (void)pd;
    (void)mr_handle;
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT struct ibv_dm *
ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
    (void)context;
    (void)dm_handle;
    errno = EOPNOTSUPP;
    return NULL;
}

/* nothing can have been imported: there is nothing to release (the object
 * stays valid, to be destroyed with its usual verb) */
SV_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
    (void)pd;
}

SV_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
    (void)mr;
}

SV_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
    (void)dm;
}

/* enhanced connection establishment: no options to negotiate */
SV_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp;
    (void)ece;
    return EOPNOTSUPP;
}

SV_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp;
    (void)ece;
    return EOPNOTSUPP;
}

/* 0: the bytes of one operation are not guaranteed to land in order (only
 * the last SV_TAIL_BYTES are placed last) */
SV_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp,
                                         enum ibv_wr_opcode op, uint32_t flags)
{
    (void)qp;
    (void)op;
    (void)flags;
    return 0;
}

/* no dma-buf exporter can be reached from process memory */
SV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
                                           size_t length, uint64_t iova, int fd,
                                           int access)
{
    (void)pd;
    (void)offset;
    (void)length;
    (void)iova;
    (void)fd;
    (void)access;
    errno = EOPNOTSUPP;
    return NULL;
}

/* IBV_REREG_MR_ERR_INPUT: the old MR stays valid, as it is */
SV_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
                           void *addr, size_t length, int access)
{
    (void)mr;
    (void)flags;
    (void)pd;
    (void)addr;
    (void)length;
    (void)access;
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;
}
