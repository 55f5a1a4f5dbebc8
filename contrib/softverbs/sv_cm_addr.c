/*
 * softverbs rdma_cm, addresses (sv_cm.h): which device and host an IPv4
 * address names, the port space of a host, rdma_getaddrinfo.
 *
 * An address of this host (any of its interfaces, loopback included) is
 * reached through device 0, or through the device whose SOFTVERBS_NET
 * address it is; an address of another host of the softverbs network (the
 * /16 of a device's SOFTVERBS_NET address) through that device, at the LID
 * that is its low 16 bits, the rule by which sv_net.c addresses hosts. Any
 * other address has no RDMA device: rdma_resolve_addr says ADDR_ERROR
 * (ENODEV), as the kernel's rdma_cm does for a route over a plain NIC.
 * IPv4 only, as the network data path.
 *
 * Ports: every rdma_cm port bound on this host is an entry of the table in
 * the fabric segment (sv_cm_port_t), taken and released under the segment
 * lock; an entry of a process that died, or of an earlier process in its
 * slot, is free. Port 0 binds the next free ephemeral port.
 */
#define _GNU_SOURCE
#include "sv_cm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

static int sv_cm_addr_is_mine(uint32_t addr)
{
    struct ifaddrs *ifa, *i;
    int found = 0;

    if ((ntohl(addr) >> 24) == 127) {
        return 1;
    }
    if (getifaddrs(&ifa) != 0) {
        return 0;
    }
    for (i = ifa; (i != NULL) && !found; i = i->ifa_next) {
        found = (i->ifa_addr != NULL) && (i->ifa_addr->sa_family == AF_INET) &&
                (((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == addr);
    }
    freeifaddrs(ifa);
    return found;
}

/* the device of this host an address of this host names, or -1 */
int sv_cm_addr_local_dev(uint32_t addr)
{
    int dev;

    if (sv_net_enabled()) {
        for (dev = 0; dev < sv_g.cfg.ndevs; ++dev) {
            if (sv_g.cfg.net_addr[dev] == addr) {
                return dev;
            }
        }
    }
    return sv_cm_addr_is_mine(addr) ? 0 : -1;
}

/* the address a device of this host is known by: its SOFTVERBS_NET
 * address, or loopback on a host of its own */
uint32_t sv_cm_addr_of_dev(int dev)
{
    return sv_net_enabled() ? sv_g.cfg.net_addr[dev] : htonl(INADDR_LOOPBACK);
}

int sv_cm_addr_route(uint32_t addr, sv_cm_route_t *route)
{
    uint32_t h = ntohl(addr), lid = h & 0xffff;
    int dev;

    if ((addr == htonl(INADDR_ANY)) || (addr == htonl(INADDR_BROADCAST))) {
        return EADDRNOTAVAIL;
    }
    dev = sv_cm_addr_local_dev(addr);
    if (dev >= 0) {
        route->dev   = dev;
        route->local = 1;
        route->lid   = sv_port_lid(dev);
        return 0;
    }
    if (sv_net_enabled()) {
        for (dev = 0; dev < sv_g.cfg.ndevs; ++dev) {
            if (((ntohl(sv_g.cfg.net_addr[dev]) ^ h) & 0xffff0000u) == 0 &&
                (lid != 0) && (lid < 0xc000)) {
                route->dev   = dev;
                route->local = 0;
                route->lid   = (uint16_t)lid;
                return 0;
            }
        }
    }
    return ENODEV;
}

/* ---------------------------------------------------------------------- */
/* the port space (caller of each: not holding the segment lock) */

static int sv_cm_port_live(const sv_cm_port_t *p)
{
    return p->in_use && (p->owner < SV_MAX_PROCS) &&
           (sv_g.shm->procs[p->owner].gen == p->gen) &&
           (sv_g.shm->procs[p->owner].pid != 0) &&
           ((p->owner == sv_g.slot) || sv_proc_alive(p->owner));
}

/* does a new binding (ps, addr, port) clash with entry p? */
static int sv_cm_port_clash(sv_cm_port_t *p, uint16_t ps, uint32_t addr,
                            uint16_t port, int reuse)
{
    if (!p->in_use || (p->ps != ps) || (p->port != port) ||
        ((p->addr != addr) && (p->addr != 0) && (addr != 0))) {
        return 0;
    }
    if (!sv_cm_port_live(p)) {
        p->in_use = 0; /* its process is gone */
        return 0;
    }
    return !(reuse && p->reuse && !p->listening);
}

static int sv_cm_port_free(uint16_t ps, uint32_t addr, uint16_t port, int reuse)
{
    unsigned i;

    for (i = 0; i < SV_CM_MAX_PORTS; ++i) {
        if (sv_cm_port_clash(&sv_g.shm->cm_ports[i], ps, addr, port, reuse)) {
            return 0;
        }
    }
    return 1;
}

/* Bind (ps, addr, *port); *port 0: an ephemeral one, returned. The entry's
 * index, or -EADDRINUSE, -EADDRNOTAVAIL (no ephemeral port left), -ENOMEM
 * (table full). */
int sv_cm_port_bind(uint16_t ps, uint32_t addr, uint16_t *port, uint64_t cookie,
                    int reuse)
{
    sv_shm_t *shm = sv_g.shm;
    unsigned i, n, span = SV_CM_EPHEMERAL_HI - SV_CM_EPHEMERAL_LO + 1;
    uint16_t p = *port;
    int idx    = -1;

    sv_shm_lock();
    if (p == 0) {
        for (n = 0; n < span; ++n) {
            p = (uint16_t)(SV_CM_EPHEMERAL_LO + (shm->cm_next_port + n) % span);
            if (sv_cm_port_free(ps, addr, p, 0)) {
                shm->cm_next_port = (shm->cm_next_port + n + 1) % span;
                break;
            }
        }
        if (n == span) {
            idx = -EADDRNOTAVAIL;
            goto out;
        }
    } else if (!sv_cm_port_free(ps, addr, p, reuse)) {
        idx = -EADDRINUSE;
        goto out;
    }
    for (i = 0; i < SV_CM_MAX_PORTS; ++i) {
        if (!shm->cm_ports[i].in_use || !sv_cm_port_live(&shm->cm_ports[i])) {
            shm->cm_ports[i].owner     = (uint16_t)sv_g.slot;
            shm->cm_ports[i].gen       = shm->procs[sv_g.slot].gen;
            shm->cm_ports[i].ps        = ps;
            shm->cm_ports[i].port      = p;
            shm->cm_ports[i].addr      = addr;
            shm->cm_ports[i].id        = cookie;
            shm->cm_ports[i].listening = 0;
            shm->cm_ports[i].reuse     = !!reuse;
            shm->cm_ports[i].in_use    = 1;
            idx                        = (int)i;
            break;
        }
    }
    if (idx < 0) {
        idx = -ENOMEM;
    }
    *port = p;
out:
    sv_shm_unlock();
    return idx;
}

/* Make entry idx a listener: 0, or EADDRINUSE when another process already
 * listens there */
int sv_cm_port_listen(int idx)
{
    sv_shm_t *shm    = sv_g.shm;
    sv_cm_port_t *me = &shm->cm_ports[idx];
    unsigned i;
    int ret = 0;

    sv_shm_lock();
    for (i = 0; i < SV_CM_MAX_PORTS; ++i) {
        sv_cm_port_t *p = &shm->cm_ports[i];

        if (((int)i != idx) && p->in_use && p->listening && (p->ps == me->ps) &&
            (p->port == me->port) &&
            ((p->addr == me->addr) || !p->addr || !me->addr) &&
            sv_cm_port_live(p)) {
            ret = EADDRINUSE;
            break;
        }
    }
    if (ret == 0) {
        me->listening = 1;
    }
    sv_shm_unlock();
    return ret;
}

void sv_cm_port_release(int idx)
{
    sv_shm_t *shm = sv_g.shm;

    if ((idx < 0) || (idx >= SV_CM_MAX_PORTS)) {
        return;
    }
    sv_shm_lock();
    if (shm->cm_ports[idx].owner == sv_g.slot) {
        shm->cm_ports[idx].in_use = 0;
    }
    sv_shm_unlock();
}

/* The listener of (ps, addr, port) on this host: 0 and its process slot
 * and id cookie, or ENOENT. A listener bound to the address wins over one
 * bound to any address. */
int sv_cm_port_lookup(uint16_t ps, uint32_t addr, uint16_t port, uint16_t *slot,
                      uint64_t *cookie)
{
    sv_shm_t *shm = sv_g.shm;
    sv_cm_port_t *p, *any = NULL, *exact = NULL;
    unsigned i;
    int ret = ENOENT;

    sv_shm_lock();
    for (i = 0; i < SV_CM_MAX_PORTS; ++i) {
        p = &shm->cm_ports[i];
        if (!p->in_use || !p->listening || (p->ps != ps) || (p->port != port) ||
            !sv_cm_port_live(p)) {
            continue;
        }
        if (p->addr == addr) {
            exact = p;
        } else if (p->addr == 0) {
            any = p;
        }
    }
    p = (exact != NULL) ? exact : any;
    if (p != NULL) {
        *slot   = p->owner;
        *cookie = p->id;
        ret     = 0;
    }
    sv_shm_unlock();
    return ret;
}

/* a dead process's ports (caller holds the segment lock) */
void sv_cm_ports_reclaim(int slot)
{
    unsigned i;

    for (i = 0; i < SV_CM_MAX_PORTS; ++i) {
        if (sv_g.shm->cm_ports[i].owner == slot) {
            sv_g.shm->cm_ports[i].in_use = 0;
        }
    }
}

/* ---------------------------------------------------------------------- */
/* rdma_getaddrinfo: IPv4 through the resolver, one result */

static struct sockaddr *sv_cm_sa_dup(const struct sockaddr *sa, socklen_t *len)
{
    struct sockaddr_in *in = calloc(1, sizeof(*in));

    if (in != NULL) {
        memcpy(in, sa, sizeof(*in));
        *len = sizeof(*in);
    }
    return (struct sockaddr *)in;
}

SV_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
    struct rdma_addrinfo *next;

    for (; res != NULL; res = next) {
        next = res->ai_next;
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_route);
        free(res->ai_connect);
        free(res);
    }
}

/* no name and no service: the result is the hints' own addresses, as
 * librdmacm gives them back (libfabric's verbs provider asks this way); a
 * passive one without an address listens on every address */
static int sv_cm_addrinfo_hints(const struct rdma_addrinfo *hints,
                                struct rdma_addrinfo **res)
{
    struct sockaddr_in any = {.sin_family = AF_INET};
    struct rdma_addrinfo *r;

    if ((hints == NULL) ||
        ((hints->ai_src_addr != NULL) &&
         (hints->ai_src_addr->sa_family != AF_INET)) ||
        ((hints->ai_dst_addr != NULL) &&
         (hints->ai_dst_addr->sa_family != AF_INET)) ||
        (!(hints->ai_flags & RAI_PASSIVE) && (hints->ai_dst_addr == NULL))) {
        errno = EINVAL;
        return -1;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        errno = ENOMEM;
        return -1;
    }
    r->ai_flags      = hints->ai_flags;
    r->ai_family     = AF_INET;
    r->ai_qp_type    = hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
    r->ai_port_space = hints->ai_port_space ? hints->ai_port_space :
                                              RDMA_PS_TCP;
    r->ai_src_addr   = sv_cm_sa_dup(hints->ai_src_addr != NULL ?
                                            hints->ai_src_addr :
                                            (struct sockaddr *)&any,
                                  &r->ai_src_len);
    if (hints->ai_dst_addr != NULL) {
        r->ai_dst_addr = sv_cm_sa_dup(hints->ai_dst_addr, &r->ai_dst_len);
    }
    if ((r->ai_src_addr == NULL) ||
        ((hints->ai_dst_addr != NULL) && (r->ai_dst_addr == NULL))) {
        rdma_freeaddrinfo(r);
        errno = ENOMEM;
        return -1;
    }
    *res = r;
    return 0;
}

SV_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
                               const struct rdma_addrinfo *hints,
                               struct rdma_addrinfo **res)
{
    struct addrinfo ah, *ai = NULL;
    struct rdma_addrinfo *r;
    int passive = (hints != NULL) && (hints->ai_flags & RAI_PASSIVE);
    int ret;

    if (res == NULL) {
        errno = EINVAL;
        return -1;
    }
    if ((hints != NULL) && (hints->ai_family != 0) &&
        (hints->ai_family != AF_INET)) {
        errno = EAFNOSUPPORT; /* IPv4 only */
        return -1;
    }
    if ((node == NULL) && (service == NULL)) {
        return sv_cm_addrinfo_hints(hints, res);
    }
    memset(&ah, 0, sizeof(ah));
    ah.ai_family   = AF_INET;
    ah.ai_socktype = SOCK_STREAM;
    ah.ai_flags    = (passive ? AI_PASSIVE : 0) |
                  ((hints != NULL) && (hints->ai_flags & RAI_NUMERICHOST) ?
                           AI_NUMERICHOST :
                           0);
    ret = getaddrinfo(node, service, &ah, &ai);
    if (ret != 0) {
        errno = (ret == EAI_SYSTEM) ? errno : ENODEV;
        return -1;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        freeaddrinfo(ai);
        errno = ENOMEM;
        return -1;
    }
    r->ai_flags   = (hints != NULL) ? hints->ai_flags : 0;
    r->ai_family  = AF_INET;
    r->ai_qp_type = ((hints != NULL) && hints->ai_qp_type) ? hints->ai_qp_type :
                                                             IBV_QPT_RC;
    r->ai_port_space = ((hints != NULL) && hints->ai_port_space) ?
                               hints->ai_port_space :
                               RDMA_PS_TCP;
    if (passive) {
        r->ai_src_addr = sv_cm_sa_dup(ai->ai_addr, &r->ai_src_len);
    } else {
        r->ai_dst_addr = sv_cm_sa_dup(ai->ai_addr, &r->ai_dst_len);
        if ((hints != NULL) && (hints->ai_src_addr != NULL) &&
            (hints->ai_src_addr->sa_family == AF_INET)) {
            r->ai_src_addr = sv_cm_sa_dup(hints->ai_src_addr, &r->ai_src_len);
        }
    }
    freeaddrinfo(ai);
    if ((passive ? r->ai_src_addr : r->ai_dst_addr) == NULL) {
        rdma_freeaddrinfo(r);
        errno = ENOMEM;
        return -1;
    }
    *res = r;
    return 0;
}
