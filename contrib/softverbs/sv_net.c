/*
 * softverbs network data path, initiator side: addressing, connections to
 * remote processes, sending send WRs as request frames and completing them
 * from the answers.
 *
 * Addressing, the "subnet manager" rule: with SOFTVERBS_NET set, device d
 * has an IPv4 address, its port LID is the low 16 bits of that address and
 * its GUID carries the whole address. The hosts of one softverbs network
 * share a /16, so a destination LID names a host: its address is the local
 * device's /16 prefix with the LID below it. A LID of this host's own
 * devices means the fast same-host path (sv_engine.c); any other LID goes
 * over TCP (this file). A destination QPN carries the owner's process slot
 * (SV_QPN_SLOT_SHIFT), so the initiator knows which process's port to
 * connect to without a lookup round trip.
 *
 * RC over TCP: WRs of one QP are sent in posting order on one connection and
 * answered in order on it, so a QP may have many WRs on the wire
 * ([sq_done, net_sent)) and still complete them in order: an answer must
 * name the WR at sq_done, anything else is stale and dropped. An error
 * answer completes its WR with the error, puts the QP in the error state and
 * flushes what follows; the responder answers later requests of that QP
 * with a flush as well. A connection that breaks (the remote process died,
 * the kernel gave up retransmitting) or stays silent for the QP's ack
 * timeout while WRs are on the wire (link down) fails those WRs with
 * IBV_WC_RETRY_EXC_ERR, as an HCA does when its retries run out.
 */
#define _GNU_SOURCE
#include "sv_net.h"
#include "sv_auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SV_NET_CONNECT_MAX_NS  (30ull * 1000000000ull)
#define SV_NET_UD_CONNECT_NS   (1000000000ull)
#define SV_NET_RCVTIMEO_US     50000
/* network threads hold little on their stacks; hundreds of 8 MiB default
 * stacks made gigabytes of address space */
#define SV_NET_STACK_SIZE (512u * 1024)

sv_net_limits_t sv_net_limits = {
        .max_conns   = SV_NET_MAX_CONNS_DEFAULT,
        .max_hold_ns = SV_NET_MAX_HOLD_DEFAULT,
};
uint8_t sv_net_key[32];
static int sv_net_key_loaded;

typedef struct sv_net_conn {
    uint32_t            ip;            /* network order */
    uint32_t lip; /* our address on it */
    uint16_t            port;
    int                 fd;
    int                 dead;          /* no new requests; reader closes fd */
    pthread_mutex_t     send_lock;     /* one frame at a time, and fd */
    uint32_t            outstanding;   /* RC requests not yet answered */
    uint64_t            last_rx_ns;
    uint64_t            timeout_ns;    /* smallest ack timeout of its QPs */
    struct sv_net_conn *next;
} sv_net_conn_t;

static struct {
    pthread_mutex_t  conn_lock;        /* the list of live connections */
    sv_net_conn_t   *conns;
    pthread_mutex_t  qp_lock;          /* the QP registry; held while an
                                        * answer completes a QP's WR */
    sv_qp_priv_t    *qps[SV_MAX_QP];
} sv_net = {
    .conn_lock = PTHREAD_MUTEX_INITIALIZER,
    .qp_lock   = PTHREAD_MUTEX_INITIALIZER,
};

/* ---------------------------------------------------------------------- */
/* configuration and addressing */

static int sv_net_parse_addr(const char *item, uint32_t *addr)
{
    struct ifaddrs *ifa, *p;
    struct in_addr in;
    int found = 0;

    if (inet_pton(AF_INET, item, &in) == 1) {
        *addr = in.s_addr;
        return 0;
    }
    /* an interface name: its first IPv4 address */
    if (getifaddrs(&ifa) != 0) {
        return -1;
    }
    for (p = ifa; p != NULL; p = p->ifa_next) {
        if (p->ifa_addr != NULL && p->ifa_addr->sa_family == AF_INET &&
            !strcmp(p->ifa_name, item)) {
            *addr = ((struct sockaddr_in *)p->ifa_addr)->sin_addr.s_addr;
            found = 1;
            break;
        }
    }
    freeifaddrs(ifa);
    return found ? 0 : -1;
}

/* a whole number in [min, max] from the environment; anything else is
 * reported and the default used */
static uint64_t
sv_net_env_uint(const char *name, uint64_t dflt, uint64_t min, uint64_t max)
{
    const char *s = getenv(name);
    unsigned long long v;
    char *end;

    if (s == NULL || *s == '\0') {
        return dflt;
    }
    errno = 0;
    v     = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || s[0] == '-' || v < min || v > max) {
        fprintf(stderr,
                "softverbs: %s='%s' is not a whole number in "
                "%llu..%llu; using %llu\n",
                name, s, (unsigned long long)min, (unsigned long long)max,
                (unsigned long long)dflt);
        return dflt;
    }
    return v;
}

int sv_net_config(sv_config_t *cfg)
{
    const char *env = getenv("SOFTVERBS_NET");
    char buf[256], *item, *save = NULL;
    const char *p;
    uint32_t addr, low;
    int n = 0;

    cfg->net_naddr = 0;
    p              = getenv("SOFTVERBS_NET_SPIN_US");
    cfg->net_spin_us = (p && *p) ? (unsigned)atoi(p) : 0;
    p              = getenv("SOFTVERBS_NET_PORT");
    cfg->net_port  = (p && *p) ? (unsigned)atoi(p) : SV_NET_PORT;
    if (cfg->net_port == 0 || cfg->net_port + SV_MAX_PROCS > 65536) {
        cfg->net_port = SV_NET_PORT;
    }
    sv_net_limits.max_conns = (unsigned)sv_net_env_uint(
            "SOFTVERBS_NET_MAX_CONNS", SV_NET_MAX_CONNS_DEFAULT, 1, 4096);
    sv_net_limits.max_hold_ns = sv_net_env_uint("SOFTVERBS_NET_MAX_HOLD_MS",
                                                SV_NET_MAX_HOLD_DEFAULT /
                                                        1000000,
                                                1, 3600000) *
                                1000000ull;
    if (env == NULL || *env == '\0') {
        return 0;
    }
    snprintf(buf, sizeof(buf), "%s", env);
    for (item = strtok_r(buf, ",", &save); item != NULL && n < SV_MAX_DEVS;
         item = strtok_r(NULL, ",", &save)) {
        if (sv_net_parse_addr(item, &addr) != 0) {
            fprintf(stderr, "softverbs: SOFTVERBS_NET: '%s' is neither an "
                    "IPv4 address nor an interface with one; network data "
                    "path off\n", item);
            return -1;
        }
        low = ntohl(addr) & 0xffff;
        if (low == 0 || low >= 0xc000) {
            fprintf(stderr, "softverbs: SOFTVERBS_NET: %s: the low 16 bits "
                    "of the address are the port's LID and must be in "
                    "1..0xbfff; network data path off\n", item);
            return -1;
        }
        cfg->net_addr[n++] = addr;
    }
    /* devices beyond the list share the last address */
    while (n > 0 && n < SV_MAX_DEVS) {
        cfg->net_addr[n] = cfg->net_addr[n - 1];
        ++n;
    }
    cfg->net_naddr = n;
    return 0;
}

uint16_t sv_port_lid(int dev)
{
    if (sv_net_enabled()) {
        return (uint16_t)(ntohl(sv_g.cfg.net_addr[dev]) & 0xffff);
    }
    return (uint16_t)(1 + dev);
}

uint64_t sv_port_guid(int dev)
{
    if (sv_net_enabled()) {
        return 0x0002c90300000000ULL | ntohl(sv_g.cfg.net_addr[dev]);
    }
    return 0x0002c90300a0b000ULL + (uint64_t)dev;
}

int sv_lid_is_local(uint32_t lid)
{
    int dev;

    for (dev = 0; dev < sv_g.cfg.ndevs; ++dev) {
        if (sv_port_lid(dev) == lid) {
            return 1;
        }
    }
    return 0;
}

static uint32_t sv_net_lid_ip(int dev, uint32_t lid)
{
    return htonl((ntohl(sv_g.cfg.net_addr[dev]) & 0xffff0000u) |
                 (lid & 0xffff));
}

static uint16_t sv_net_qpn_port(uint32_t qpn)
{
    return (uint16_t)(sv_g.cfg.net_port + (qpn >> SV_QPN_SLOT_SHIFT));
}

/* ---------------------------------------------------------------------- */
/* socket helpers */

void sv_net_tune_fd(int fd, uint64_t user_timeout_ns)
{
    struct timeval tv = { 0, SV_NET_RCVTIMEO_US };
    unsigned ms;
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (user_timeout_ns != 0 && user_timeout_ns < UINT64_MAX / 4) {
        /* unacknowledged data older than this breaks the connection: a
         * sender blocked on a dead link gets an error */
        ms = (unsigned)(user_timeout_ns / 1000000) + 1;
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
    }
}

int sv_net_recv_iov(int fd, struct iovec *dst, int dn, size_t total,
                    uint64_t stall_ns)
{
    uint64_t last = sv_now_ns();
    struct iovec iov[SV_MAX_SGE + 1], *v = iov;
    size_t left = total;
    struct msghdr msg;
    int n = 0;
    ssize_t r;

    /* the destination (a receive buffer) may be larger than the payload:
     * read exactly 'total' bytes, never into the next frame */
    while (left > 0 && n < dn && n < SV_MAX_SGE + 1) {
        iov[n] = dst[n];
        if (iov[n].iov_len > left) {
            iov[n].iov_len = left;
        }
        left -= iov[n].iov_len;
        ++n;
    }
    if (left > 0) {
        return -1;
    }
    while (total > 0) {
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov    = v;
        msg.msg_iovlen = (size_t)n;
        r = recvmsg(fd, &msg, MSG_WAITALL);
        if (r > 0) {
            total -= (size_t)r;
            sv_iov_advance(&v, &n, (size_t)r);
            last = sv_now_ns();
            continue;
        }
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
            if (stall_ns == 0 || sv_now_ns() - last < stall_ns) {
                continue;
            }
        }
        return -1;
    }
    return 0;
}

int sv_net_recv_buf(int fd, void *buf, size_t len, uint64_t stall_ns)
{
    struct iovec iov = { buf, len };

    return sv_net_recv_iov(fd, &iov, 1, len, stall_ns);
}

int sv_net_drain(int fd, size_t len, uint64_t stall_ns)
{
    char sink[16384];
    size_t n;

    while (len > 0) {
        n = len < sizeof(sink) ? len : sizeof(sink);
        if (sv_net_recv_buf(fd, sink, n, stall_ns) != 0) {
            return -1;
        }
        len -= n;
    }
    return 0;
}

int sv_net_send_iov(int fd, struct iovec *iov, int n)
{
    struct msghdr msg;
    ssize_t r;

    while (n > 0) {
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov    = iov;
        msg.msg_iovlen = (size_t)n;
        r = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        sv_iov_advance(&iov, &n, (size_t)r);
    }
    return 0;
}

/* Poll the socket for a moment before a thread blocks on it: waking a
 * blocked thread costs more than the next frame usually takes to come
 * (SOFTVERBS_NET_SPIN_US). Returns 1 when data is there. */
int sv_net_spin_readable(int fd)
{
    uint64_t end = sv_now_ns() + (uint64_t)sv_g.cfg.net_spin_us * 1000;
    char c;

    do {
        if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != -1 ||
            (errno != EAGAIN && errno != EINTR)) {
            return 1;   /* data, EOF or an error: the caller reads it */
        }
    } while (sv_now_ns() < end);
    return 0;
}

/* Read exactly len bytes before deadline_ns (CLOCK_MONOTONIC); -1 when the
 * peer closes, errs or is too slow. For the handshake, whose time is
 * bounded as a whole, not per byte. */
int sv_net_recv_until(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char *p           = buf;
    uint64_t now;
    ssize_t r;

    while (len > 0) {
        now = sv_now_ns();
        if (now >= deadline_ns) {
            return -1;
        }
        r = poll(&pfd, 1, (int)((deadline_ns - now) / 1000000) + 1);
        if (r < 0 && errno != EINTR) {
            return -1;
        }
        if (r <= 0) {
            continue;
        }
        r = recv(fd, p, len, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            return -1;
        }
        if (r > 0) {
            p += r;
            len -= (size_t)r;
        }
    }
    return 0;
}

/* the proof of one end of a handshake (see sv_net.h) */
void sv_net_auth_mac(int responder, const sv_net_auth_t *hello,
                     const uint8_t *nonce_r, uint8_t *mac)
{
    static const char lr[] = "softverbs responder";
    static const char li[] = "softverbs initiator";
    struct iovec iov[3];

    iov[0].iov_base = (void *)(responder ? lr : li);
    iov[0].iov_len  = responder ? sizeof(lr) : sizeof(li);
    iov[1].iov_base = (void *)hello;
    iov[1].iov_len  = sizeof(*hello);
    iov[2].iov_base = (void *)nonce_r;
    iov[2].iov_len  = SV_NET_NONCE_LEN;
    sv_hmac_sha256(sv_net_key, sizeof(sv_net_key), iov, 3, mac);
}

/* A message about a refused or failed connection: those can come as fast
 * as anyone connects, so each kind is told a few times, then no more. */
void sv_net_log_limited(unsigned *count, const char *fmt, ...)
{
    unsigned n = __atomic_fetch_add(count, 1, __ATOMIC_RELAXED);
    char msg[256];
    va_list ap;

    if (n >= 3) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "softverbs[%d]: %s%s\n", (int)getpid(), msg,
            (n == 2) ? " (further ones are not reported)" : "");
}

/* a detached helper thread that takes none of the application's signals */
int sv_net_thread(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t th;
    int ret;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, SV_NET_STACK_SIZE);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ret = pthread_create(&th, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return ret;
}

/* ---------------------------------------------------------------------- */
/* the QP registry: answers find their QP by number */

static sv_qp_priv_t *sv_net_qp_find(uint32_t qpn)
{
    uint32_t low = qpn & ((1u << SV_QPN_SLOT_SHIFT) - 1);
    sv_qp_priv_t *qp;

    if (low < SV_QPN_BASE || low >= SV_QPN_BASE + SV_MAX_QP) {
        return NULL;
    }
    qp = sv_net.qps[low - SV_QPN_BASE];
    return (qp != NULL && qp->ibqp.qp_num == qpn) ? qp : NULL;
}

void sv_net_qp_add(sv_qp_priv_t *qp)
{
    sv_net_resp_qp_alive(qp->idx);
    pthread_mutex_lock(&sv_net.qp_lock);
    sv_net.qps[qp->idx] = qp;
    pthread_mutex_unlock(&sv_net.qp_lock);
}

void sv_net_qp_remove(sv_qp_priv_t *qp)
{
    pthread_mutex_lock(&sv_net.qp_lock);
    if (sv_net.qps[qp->idx] == qp) {
        sv_net.qps[qp->idx] = NULL;
    }
    pthread_mutex_unlock(&sv_net.qp_lock);
    /* the QP is being destroyed: a remote SEND still placing data into
     * one of its receive buffers ends first */
    sv_net_resp_fence(qp->idx + 1, 0);
}

/* complete the WRs on the wire with a flush; caller holds net_lock */
static void sv_net_qp_flush_locked(sv_qp_priv_t *qp)
{
    /* sv_send_complete() moves sq_done on */
    while (qp->sq_done != qp->net_sent) {
        sv_send_complete(qp, &qp->sq[qp->sq_done & (qp->sq_size - 1)],
                         IBV_WC_WR_FLUSH_ERR);
    }
}

void sv_net_qp_flush(sv_qp_priv_t *qp)
{
    pthread_mutex_lock(&qp->net_lock);
    sv_net_qp_flush_locked(qp);
    pthread_mutex_unlock(&qp->net_lock);
}

/* the WR at idx was completed locally (flushed, or failed before it was
 * sent): nothing of this QP is on the wire up to it */
void sv_net_qp_retire(sv_qp_priv_t *qp, uint32_t idx)
{
    pthread_mutex_lock(&qp->net_lock);
    qp->net_sent = idx + 1;
    pthread_mutex_unlock(&qp->net_lock);
}

void sv_net_qp_reset(sv_qp_priv_t *qp)
{
    /* WRs on the wire are forgotten; their answers no longer match */
    pthread_mutex_lock(&qp->net_lock);
    qp->net_sent = qp->sq_tail;
    SV_STORE(&qp->sq_done, qp->sq_tail);
    qp->net_conn = NULL;
    pthread_mutex_unlock(&qp->net_lock);
}

/* The WR at sq_done failed with 'status': enter the error state, complete
 * it and flush the rest on the wire. Caller holds sv_net.qp_lock (the QP
 * cannot go away) but not net_lock. */
static void sv_net_qp_fail(sv_qp_priv_t *qp, enum ibv_wc_status status)
{
    pthread_mutex_lock(&qp->net_lock);
    /* set under net_lock: an executor that sends next sees it; and before
     * the error completion, as sv_send_fail() does: its reader finds the
     * QP in error */
    SV_STORE(&qp->s->state, IBV_QPS_ERR);
    qp->ibqp.state = IBV_QPS_ERR;
    if (qp->sq_done != qp->net_sent) {
        sv_send_complete(qp, &qp->sq[qp->sq_done & (qp->sq_size - 1)],
                         status);
    }
    sv_net_qp_flush_locked(qp);
    pthread_mutex_unlock(&qp->net_lock);
    sv_qp_set_error(qp);
    sv_engine_kick();   /* the executor flushes what is still queued */
}

/* ---------------------------------------------------------------------- */
/* connections */

static void sv_net_conn_dead(sv_net_conn_t *conn)
{
    sv_net_conn_t **pp;
    sv_qp_priv_t *qp;
    uint32_t i;

    pthread_mutex_lock(&conn->send_lock);
    if (conn->dead) {
        pthread_mutex_unlock(&conn->send_lock);
        return;
    }
    conn->dead = 1;
    shutdown(conn->fd, SHUT_RDWR);  /* the reader sees it and closes */
    pthread_mutex_unlock(&conn->send_lock);

    pthread_mutex_lock(&sv_net.conn_lock);
    for (pp = &sv_net.conns; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == conn) {
            *pp = conn->next;
            break;
        }
    }
    pthread_mutex_unlock(&sv_net.conn_lock);

    /* every QP with WRs on this connection: retries exhausted */
    pthread_mutex_lock(&sv_net.qp_lock);
    for (i = 0; i < SV_MAX_QP; ++i) {
        qp = sv_net.qps[i];
        if (qp != NULL && qp->net_conn == conn &&
            SV_LOAD(&qp->sq_done) != qp->net_sent) {
            sv_net_qp_fail(qp, IBV_WC_RETRY_EXC_ERR);
        }
    }
    pthread_mutex_unlock(&sv_net.qp_lock);
}

/* one answer: complete the WR at sq_done of its QP. Returns -1 when the
 * stream broke in the middle of the answer's payload. */
static int sv_net_answer(sv_net_conn_t *conn, const sv_net_hdr_t *h)
{
    struct iovec liov[SV_MAX_SGE];
    uint64_t old;
    sv_qp_priv_t *qp;
    sv_swqe_t *w;
    int ln, ret = 0, fail = 0;

    pthread_mutex_lock(&sv_net.qp_lock);
    qp = sv_net_qp_find(h->src_qpn);
    if (qp != NULL) {
        pthread_mutex_lock(&qp->net_lock);
    }
    if (qp == NULL || qp->net_conn != conn || qp->sq_done == qp->net_sent ||
        h->seq != qp->sq_done) {
        /* the QP is gone, was reset or flushed: a stale answer */
        ret = sv_net_drain(conn->fd, h->length, conn->timeout_ns);
        goto out;
    }
    w = &qp->sq[qp->sq_done & (qp->sq_size - 1)];
    if (h->status == IBV_WC_SUCCESS && h->length > 0) {
        if (w->opcode == IBV_WR_RDMA_READ && h->length == w->length &&
            sv_local_iov(qp, w, IBV_ACCESS_LOCAL_WRITE, liov, &ln) == 0) {
            ret = sv_net_recv_iov(conn->fd, liov, ln, h->length,
                                  conn->timeout_ns);
        } else if (w->opcode != IBV_WR_RDMA_READ && h->length == 8 &&
                   sv_local_iov(qp, w, IBV_ACCESS_LOCAL_WRITE, liov,
                                &ln) == 0 && ln == 1) {
            ret = sv_net_recv_buf(conn->fd, &old, 8, conn->timeout_ns);
            memcpy(liov[0].iov_base, &old, 8);
        } else {
            ret = -1;   /* a malformed answer: the stream cannot be trusted */
        }
        if (ret != 0) {
            goto out;
        }
    } else if (h->length > 0) {
        ret = sv_net_drain(conn->fd, h->length, conn->timeout_ns);
        if (ret != 0) {
            goto out;
        }
    }
    if (h->status == IBV_WC_SUCCESS) {
        sv_send_complete(qp, w, IBV_WC_SUCCESS);
    } else {
        fail = 1;
    }
out:
    if (qp != NULL) {
        pthread_mutex_unlock(&qp->net_lock);
        if (fail) {
            sv_net_qp_fail(qp, (enum ibv_wc_status)h->status);
        }
    }
    pthread_mutex_unlock(&sv_net.qp_lock);
    return ret;
}

/* one per connection: reads answers, and watches the ack timeout */
static void *sv_net_reader(void *arg)
{
    sv_net_conn_t *conn = arg;
    struct pollfd pfd;
    sv_net_hdr_t h;
    uint64_t now;
    int r;

    for (;;) {
        pfd.fd     = conn->fd;
        pfd.events = POLLIN;
        r = sv_net_spin_readable(conn->fd) ? 1 : poll(&pfd, 1, 10);
        if (r == 0) {
            now = sv_now_ns();
            if (SV_LOAD(&conn->outstanding) > 0 &&
                now - SV_LOAD(&conn->last_rx_ns) > SV_LOAD(&conn->timeout_ns)) {
                break;  /* silent for a whole ack timeout: link down */
            }
            continue;
        }
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (sv_net_recv_buf(conn->fd, &h, sizeof(h), conn->timeout_ns) != 0 ||
            h.magic != SV_NET_MAGIC) {
            break;
        }
        SV_STORE(&conn->last_rx_ns, sv_now_ns());
        if (h.kind == SV_NET_KEEPALIVE) {
            continue;
        }
        if (h.kind != SV_NET_ANSWER) {
            break;
        }
        __atomic_sub_fetch(&conn->outstanding, 1, __ATOMIC_ACQ_REL);
        if (sv_net_answer(conn, &h) != 0) {
            break;
        }
    }
    sv_net_conn_dead(conn);
    pthread_mutex_lock(&conn->send_lock);
    close(conn->fd);
    conn->fd = -1;
    pthread_mutex_unlock(&conn->send_lock);
    /* the structure stays: QPs may still point at it (never reused) */
    return NULL;
}

/* The initiator's half of the handshake (sv_net.h) on a connected
 * socket, to process dst_slot of the host of 'lid' (SV_NET_SLOT_CM: the
 * host's connection manager); gen goes in the HELLO, the responder's
 * CHALLENGE comes back in *ch_out (may be NULL): 0, or -1 with the reason
 * told (a few times). */
int sv_net_handshake(int fd, int dev, uint32_t lid, uint16_t dst_slot,
                     uint32_t gen, uint32_t ip, uint16_t port,
                     uint64_t timeout_ns, sv_net_auth_t *ch_out)
{
    static unsigned nlog;
    uint64_t deadline = sv_now_ns() + timeout_ns;
    sv_net_auth_t hello, ch, auth;
    uint8_t mac[32];
    struct iovec iov;
    struct in_addr in = {ip};
    const char *why;

    memset(&hello, 0, sizeof(hello));
    hello.magic    = SV_NET_MAGIC;
    hello.kind     = SV_NET_HELLO;
    hello.version  = SV_NET_VERSION;
    hello.lid      = sv_port_lid(dev);
    hello.slot     = (uint16_t)sv_g.slot;
    hello.dst_lid  = (uint16_t)lid;
    hello.dst_slot = dst_slot;
    hello.reserved = gen;
    if (sv_auth_random(hello.nonce, sizeof(hello.nonce)) != 0) {
        why = "no random numbers";
        goto fail;
    }
    iov.iov_base = &hello;
    iov.iov_len  = sizeof(hello);
    if (sv_net_send_iov(fd, &iov, 1) != 0 ||
        sv_net_recv_until(fd, &ch, sizeof(ch), deadline) != 0) {
        why = "refused the connection (not a softverbs process of this "
              "version, or it does not accept us)";
        goto fail;
    }
    sv_net_auth_mac(1, &hello, ch.nonce, mac);
    if (ch.magic != SV_NET_MAGIC || ch.kind != SV_NET_CHALLENGE ||
        ch.version != SV_NET_VERSION || !sv_auth_equal(mac, ch.mac, 32)) {
        /* not a peer that holds our secret: tell it nothing */
        why = "failed to authenticate (another user, or another "
              "SOFTVERBS_NET secret)";
        goto fail;
    }
    if (ch_out != NULL) {
        *ch_out = ch;
    }
    memset(&auth, 0, sizeof(auth));
    auth.magic   = SV_NET_MAGIC;
    auth.kind    = SV_NET_AUTH;
    auth.version = SV_NET_VERSION;
    sv_net_auth_mac(0, &hello, ch.nonce, auth.mac);
    iov.iov_base = &auth;
    iov.iov_len  = sizeof(auth);
    if (sv_net_send_iov(fd, &iov, 1) != 0 ||
        sv_net_recv_until(fd, &ch, sizeof(ch), deadline) != 0 ||
        ch.magic != SV_NET_MAGIC || ch.kind != SV_NET_WELCOME) {
        why = "did not accept our authentication (is the secret file the "
              "same on both hosts?)";
        goto fail;
    }
    return 0;

fail:
    sv_net_log_limited(&nlog, "%s:%u %s", inet_ntoa(in), (unsigned)port, why);
    return -1;
}

/* Connect to the process serving QP 'qpn' on the host of 'lid', from the
 * address of device 'dev' (the responder accepts us only from the address
 * our LID names). Returns NULL when it cannot be reached within timeout_ns
 * (refused: no such process) or the handshake fails. */
static sv_net_conn_t *sv_net_conn_get(int dev, uint32_t lid, uint32_t qpn,
                                      uint64_t timeout_ns)
{
    uint32_t ip    = sv_net_lid_ip(dev, lid);
    uint32_t lip   = sv_g.cfg.net_addr[dev];
    uint16_t port  = sv_net_qpn_port(qpn);
    struct sockaddr_in sa;
    sv_net_conn_t *conn;
    struct pollfd pfd;
    socklen_t len;
    int fd, err, flags;

    pthread_mutex_lock(&sv_net.conn_lock);
    for (conn = sv_net.conns; conn != NULL; conn = conn->next) {
        if (conn->ip == ip && conn->port == port && conn->lip == lip &&
            !conn->dead) {
            goto out;
        }
    }
    conn = NULL;
    if (timeout_ns > SV_NET_CONNECT_MAX_NS) {
        timeout_ns = SV_NET_CONNECT_MAX_NS;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        goto out;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = lip;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        goto out;
    }
    sa.sin_port        = htons(port);
    sa.sin_addr.s_addr = ip;
    flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (errno != EINPROGRESS) {
            close(fd);
            goto out;
        }
        pfd.fd     = fd;
        pfd.events = POLLOUT;
        err        = 0;
        len        = sizeof(err);
        if (poll(&pfd, 1, (int)(timeout_ns / 1000000) + 1) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
            err != 0) {
            close(fd);
            goto out;
        }
    }
    fcntl(fd, F_SETFL, flags);
    sv_net_tune_fd(fd, 0);
    /* the responder gives a handshake SV_NET_HANDSHAKE_NS */
    if (sv_net_handshake(fd, dev, lid, (uint16_t)(qpn >> SV_QPN_SLOT_SHIFT), 0,
                         ip, port, SV_NET_HANDSHAKE_NS, NULL) != 0) {
        close(fd);
        goto out;
    }
    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        close(fd);
        goto out;
    }
    conn->ip         = ip;
    conn->lip        = lip;
    conn->port       = port;
    conn->fd         = fd;
    conn->timeout_ns = UINT64_MAX / 2;
    pthread_mutex_init(&conn->send_lock, NULL);
    if (sv_net_thread(sv_net_reader, conn) != 0) {
        close(fd);
        free(conn);
        conn = NULL;
        goto out;
    }
    conn->next    = sv_net.conns;
    sv_net.conns  = conn;
out:
    pthread_mutex_unlock(&sv_net.conn_lock);
    return conn;
}

static void sv_net_hdr_init(sv_net_hdr_t *h, sv_qp_priv_t *qp,
                            const sv_swqe_t *w, int kind)
{
    memset(h, 0, sizeof(*h));
    h->magic     = SV_NET_MAGIC;
    h->kind      = (uint8_t)kind;
    h->opcode    = (uint8_t)w->opcode;
    h->flags     = (w->flags & IBV_SEND_SOLICITED) ? SV_NET_F_SOLICITED : 0;
    h->sl        = qp->sl;
    h->src_qpn   = qp->ibqp.qp_num;
    h->src_lid   = sv_port_lid(qp->ctx->dev);
    h->imm       = w->imm;
    h->length    = w->length;
}

/* send the frame of one request: header, then the WR's data if it has any */
static int sv_net_send_req(sv_net_conn_t *conn, sv_net_hdr_t *h,
                           struct iovec *liov, int ln, int answered)
{
    struct iovec iov[1 + SV_MAX_SGE];
    int n = 1, ret = -1, i;

    iov[0].iov_base = h;
    iov[0].iov_len  = sizeof(*h);
    if (sv_net_req_has_data(h)) {
        for (i = 0; i < ln; ++i) {
            iov[n++] = liov[i];
        }
    }
    pthread_mutex_lock(&conn->send_lock);
    if (!conn->dead) {
        if (answered) {
            if (__atomic_fetch_add(&conn->outstanding, 1,
                                   __ATOMIC_ACQ_REL) == 0) {
                SV_STORE(&conn->last_rx_ns, sv_now_ns());
            }
            if (h->timeout_ns < conn->timeout_ns) {
                SV_STORE(&conn->timeout_ns, h->timeout_ns);
                sv_net_tune_fd(conn->fd, h->timeout_ns);
            }
        }
        ret = sv_net_send_iov(conn->fd, iov, n);
    }
    pthread_mutex_unlock(&conn->send_lock);
    return ret;
}

int sv_net_exec_rc(sv_qp_priv_t *qp, sv_swqe_t *w, struct iovec *liov,
                   int ln)
{
    uint64_t timeout = sv_ack_timeout_ns(qp);
    uint32_t seq     = qp->sq_head;     /* the executor's WR */
    sv_net_conn_t *conn = qp->net_conn;
    sv_net_hdr_t h;

    if (conn == NULL || SV_LOAD(&conn->dead)) {
        conn = sv_net_conn_get(qp->ctx->dev, qp->dlid, qp->s->dest_qpn,
                               timeout);
        if (conn == NULL) {
            /* nobody serves that QPN there, or the host is unreachable */
            return sv_send_fail(qp, w, IBV_WC_RETRY_EXC_ERR);
        }
    }
    sv_net_hdr_init(&h, qp, w, SV_NET_REQ_RC);
    h.rnr_retry   = qp->rnr_retry;
    h.dst_qpn     = qp->s->dest_qpn;
    h.seq         = seq;
    h.rkey        = w->rkey;
    h.raddr       = w->raddr;
    h.compare_add = w->compare_add;
    h.swap        = w->swap;
    h.timeout_ns  = timeout;

    pthread_mutex_lock(&qp->net_lock);
    if (SV_LOAD(&qp->s->state) == IBV_QPS_ERR) {
        /* an answer failed the QP meanwhile: this WR is flushed */
        pthread_mutex_unlock(&qp->net_lock);
        sv_send_complete(qp, w, IBV_WC_WR_FLUSH_ERR);
        return SV_DONE;
    }
    qp->net_conn = conn;
    qp->net_sent = seq + 1;
    pthread_mutex_unlock(&qp->net_lock);

    if (sv_net_send_req(conn, &h, liov, ln, 1) != 0) {
        /* fails this WR and every other one on the connection */
        sv_net_conn_dead(conn);
    }
    return SV_SENT;
}

int sv_net_exec_ud(sv_qp_priv_t *qp, sv_swqe_t *w, struct iovec *liov,
                   int ln)
{
    sv_net_conn_t *conn;
    sv_net_hdr_t h;

    /* a datagram that cannot be delivered is lost, silently */
    conn = sv_net_conn_get(qp->ctx->dev, w->dlid, w->remote_qpn,
                           SV_NET_UD_CONNECT_NS);
    if (conn != NULL) {
        sv_net_hdr_init(&h, qp, w, SV_NET_REQ_UD);
        h.dst_qpn = w->remote_qpn;
        h.qkey    = (w->remote_qkey & 0x80000000u) ? qp->s->qkey :
                                                     w->remote_qkey;
        if (sv_net_send_req(conn, &h, liov, ln, 0) != 0) {
            sv_net_conn_dead(conn);
        }
    }
    sv_send_complete(qp, w, IBV_WC_SUCCESS);
    return SV_DONE;
}

/* ---------------------------------------------------------------------- */

int sv_net_start(void)
{
    char path[512], err[512];
    int ret;

    /* connections are authenticated with the user's secret: without it
     * the network data path cannot work, and says why once */
    if (!sv_net_key_loaded) {
        ret = sv_auth_load_secret(sv_net_key, path, sizeof(path), err,
                                  sizeof(err));
        if (ret != 0) {
            fprintf(stderr, "softverbs: network data path: %s\n", err);
            return ret;
        }
        sv_net_key_loaded = 1;
    }
    return sv_net_resp_start();
}

void sv_net_atfork_child(void)
{
    /* the parent's connections and threads do not exist in the child */
    pthread_mutex_init(&sv_net.conn_lock, NULL);
    pthread_mutex_init(&sv_net.qp_lock, NULL);
    sv_net.conns = NULL;
    memset(sv_net.qps, 0, sizeof(sv_net.qps));
    /* the child reads its own SOFTVERBS_NET_SECRET_FILE */
    sv_net_key_loaded = 0;
    sv_net_resp_atfork_child();
}
