/*
 * softverbs rdma_cm, the agent (sv_cm.h): what the kernel's CM does for a
 * process, done by one thread of it, started with its first event channel.
 *
 * It takes the CM messages addressed to the process and hands them to
 * sv_cm_handle():
 *  - from processes of this host, through the process's mailbox in the
 *    fabric segment (a ring, sv.h, with the owner's eventfd raised per
 *    message, as a CQ's channel is);
 *  - from other hosts, over TCP: every process that uses rdma_cm with the
 *    network path listens on the host's CM port (SOFTVERBS_CM_PORT,
 *    SO_REUSEPORT: the kernel gives a connection to any of them, and only
 *    processes of the same user can join), each connection authenticated
 *    by the handshake of the data path (sv_net.h, dst_slot SV_NET_SLOT_CM,
 *    the slot generations in HELLO and CHALLENGE). Whoever takes a message
 *    off the wire checks that it comes from the process the connection
 *    authenticated, finds its receiver (a REQ by the host's port table)
 *    and puts it in that process's mailbox. A connection carries frames
 *    both ways, so an answer goes back on whatever connection the two
 *    hosts have.
 *
 * It also watches the processes its connections talk to: one of this host
 * through a pidfd (readable when it exits), one of another host through
 * the connection that process opened to this host (which it keeps while
 * it lives): when that breaks, whoever held it tells every CM process of
 * this host (SV_CM_GONE in their mailboxes). A process that dies without
 * disconnecting so gives its peers DISCONNECTED, as the kernel's CM does
 * when it closes a dead process's ids. And it runs the timers of
 * sv_cm.c (connection requests, disconnects).
 *
 * Bounds: at most SV_CM_MAX_CONNS connections, of which SV_CM_MAX_PREAUTH
 * still in their handshake, each in a thread of its own for at most
 * SV_NET_HANDSHAKE_NS; a frame is taken only whole, without blocking.
 */
#define _GNU_SOURCE
#include "sv_cm.h"
#include "sv_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SV_CM_MAX_CONNS   64
#define SV_CM_MAX_PREAUTH 8
#define SV_CM_MAX_WATCH   256

typedef struct sv_cm_conn {
    int fd;
    int dev;
    uint16_t lid; /* the other host */
    uint16_t slot; /* the process at the other end, */
    uint32_t gen; /* its slot's generation */
    int accepted; /* it connected to us */
    size_t rlen; /* bytes of the frame being read */
    sv_cm_msg_t rbuf;
    pthread_mutex_t send_lock;
} sv_cm_conn_t;

typedef struct {
    int pidfd;
    uint16_t slot;
    uint32_t gen;
} sv_cm_watch_t;

static struct {
    pthread_mutex_t lock; /* this structure */
    int running;
    int efd; /* our mailbox's eventfd */
    int wake[2]; /* kicks the agent's poll */
    int lfd[SV_MAX_DEVS];
    sv_cm_conn_t *conns[SV_CM_MAX_CONNS];
    unsigned npreauth;
    sv_cm_watch_t watch[SV_CM_MAX_WATCH];
    unsigned nwatch;
    unsigned log_count;
} sv_agent = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
};

pthread_mutex_t sv_cm_lock = PTHREAD_MUTEX_INITIALIZER;

static void sv_cm_log(const char *fmt, ...)
        __attribute__((format(printf, 1, 2)));
static void sv_cm_log(const char *fmt, ...)
{
    va_list ap;

    if (__atomic_fetch_add(&sv_agent.log_count, 1, __ATOMIC_RELAXED) >= 20) {
        return;
    }
    va_start(ap, fmt);
    fprintf(stderr, "softverbs rdma_cm: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

void sv_cm_agent_kick(void)
{
    char c = 0;

    if (SV_LOAD(&sv_agent.running) && write(sv_agent.wake[1], &c, 1) < 0) {
        /* a full pipe is kicked already */
    }
}

/* ---------------------------------------------------------------------- */
/* mailboxes */

/* the sanity every message gets, whoever sent it */
static int sv_cm_msg_valid(const sv_cm_msg_t *m)
{
    return (m->magic == SV_CM_MAGIC) && (m->version == SV_CM_VERSION) &&
           (m->kind >= SV_CM_REQ) && (m->kind < SV_CM_KIND_MAX) &&
           (m->pdata_len <= SV_CM_PDATA_MAX) && (m->src_slot < SV_MAX_PROCS);
}

/* Put m in the mailbox of process slot (of generation gen) of this host:
 * 0, or ENOENT (no such process takes CM messages), EAGAIN (its box is
 * full: the message is lost, as a MAD may be). */
static int sv_cm_box_post(uint16_t slot, uint32_t gen, const sv_cm_msg_t *m)
{
    sv_cm_box_t *box;
    sv_cm_msg_t *e;
    uint64_t one = 1;
    int fd;

    if (slot >= SV_MAX_PROCS) {
        return ENOENT;
    }
    box = &sv_g.shm->cm_boxes[slot];
    sv_lock(&box->ring.prod_lock);
    if ((SV_LOAD(&box->pid) == 0) || (box->gen != gen) ||
        (box->ring.off == 0)) {
        sv_unlock(&box->ring.prod_lock);
        return ENOENT;
    }
    if (sv_ring_full(&box->ring, box->ring.size)) {
        sv_unlock(&box->ring.prod_lock);
        sv_cm_log("the CM mailbox of process %u is full: a message is lost",
                  (unsigned)slot);
        return EAGAIN;
    }
    e = sv_ring_entry(&box->ring, box->ring.prod);
    memcpy(e, m, offsetof(sv_cm_msg_t, seq));
    SV_STORE(&e->seq, sv_ring_seq(box->ring.prod));
    box->ring.prod++;
    sv_unlock(&box->ring.prod_lock);
    fd = sv_remote_fd(slot, box->fd, box->fd_id);
    if ((fd < 0) || (write(fd, &one, sizeof(one)) != sizeof(one))) {
        return ENOENT; /* gone meanwhile */
    }
    return 0;
}

/* every CM process of this host learns that (lid, slot, gen) is gone */
static void sv_cm_box_broadcast_gone(uint16_t lid, uint16_t slot, uint32_t gen)
{
    sv_cm_msg_t m;
    unsigned i;

    memset(&m, 0, sizeof(m));
    m.magic    = SV_CM_MAGIC;
    m.version  = SV_CM_VERSION;
    m.kind     = SV_CM_GONE;
    m.src_lid  = lid;
    m.src_slot = slot;
    m.src_gen  = gen;
    for (i = 0; i < SV_MAX_PROCS; ++i) {
        if (SV_LOAD(&sv_g.shm->cm_boxes[i].pid) != 0) {
            sv_cm_box_post((uint16_t)i, sv_g.shm->cm_boxes[i].gen, &m);
        }
    }
}

/* a dead process's mailbox (caller holds the segment lock) */
void sv_cm_boxes_reclaim(int slot)
{
    sv_cm_box_t *box = &sv_g.shm->cm_boxes[slot];

    box->pid = 0;
    sv_heap_free(box->ring.off);
    box->ring.off = 0;
}

static int sv_cm_box_open(void)
{
    sv_cm_box_t *box = &sv_g.shm->cm_boxes[sv_g.slot];
    int ret;

    sv_agent.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sv_agent.efd < 0) {
        return errno;
    }
    sv_shm_lock();
    sv_heap_free(box->ring.off); /* a crashed predecessor's */
    box->ring.off = 0;
    sv_shm_unlock();
    ret = sv_ring_init(&box->ring, SV_CM_BOX_ENTRIES, sizeof(sv_cm_msg_t),
                       sv_g.slot);
    if (ret != 0) {
        close(sv_agent.efd);
        return ret;
    }
    box->fd    = sv_agent.efd;
    box->fd_id = sv_new_id();
    box->gen   = sv_g.shm->procs[sv_g.slot].gen;
    SV_STORE(&box->pid, (uint32_t)sv_g.pid);
    return 0;
}

static void sv_cm_box_drain(void)
{
    sv_cm_box_t *box = &sv_g.shm->cm_boxes[sv_g.slot];
    sv_ring_t *ring  = &box->ring;
    uint64_t count;
    sv_cm_msg_t m, *e;

    if (read(sv_agent.efd, &count, sizeof(count)) < 0) {
        /* nothing counted: look anyway */
    }
    for (;;) {
        e = sv_ring_entry(ring, ring->cons);
        if (SV_LOAD(&e->seq) != sv_ring_seq(ring->cons)) {
            break;
        }
        memcpy(&m, e, sizeof(m));
        SV_STORE(&ring->cons, ring->cons + 1);
        if (sv_cm_msg_valid(&m)) {
            sv_cm_handle(&m);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* watching processes of this host */

void sv_cm_watch(uint16_t slot, uint32_t gen)
{
    pid_t pid;
    unsigned i;
    int fd;

    if ((slot >= SV_MAX_PROCS) || (slot == sv_g.slot)) {
        return;
    }
    pthread_mutex_lock(&sv_agent.lock);
    for (i = 0; i < sv_agent.nwatch; ++i) {
        if ((sv_agent.watch[i].slot == slot) &&
            (sv_agent.watch[i].gen == gen)) {
            goto out;
        }
    }
    pid = sv_proc_pid(slot);
    fd  = (pid != 0) ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if ((fd >= 0) &&
        ((sv_g.shm->procs[slot].gen != gen) || !sv_proc_alive(slot))) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        /* gone already (or a reused pid): the process is not there */
        pthread_mutex_unlock(&sv_agent.lock);
        {
            sv_cm_msg_t m;

            memset(&m, 0, sizeof(m));
            m.magic    = SV_CM_MAGIC;
            m.version  = SV_CM_VERSION;
            m.kind     = SV_CM_GONE;
            m.src_slot = slot;
            m.src_gen  = gen;
            sv_cm_box_post((uint16_t)sv_g.slot,
                           sv_g.shm->cm_boxes[sv_g.slot].gen, &m);
        }
        return;
    }
    if (sv_agent.nwatch == SV_CM_MAX_WATCH) {
        close(fd); /* watching that many processes: not this one */
        goto out;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    sv_agent.watch[sv_agent.nwatch].pidfd = fd;
    sv_agent.watch[sv_agent.nwatch].slot  = slot;
    sv_agent.watch[sv_agent.nwatch].gen   = gen;
    ++sv_agent.nwatch;
    sv_cm_agent_kick();
out:
    pthread_mutex_unlock(&sv_agent.lock);
}

/* a watched process exited: our own ids hear of it. (sv_cm_handle() takes
 * sv_cm_lock, which is taken before sv_agent.lock elsewhere: never called
 * with sv_agent.lock held.) */
static void sv_cm_watch_fired(int pidfd)
{
    sv_cm_msg_t m;
    unsigned i;
    int found = 0;

    memset(&m, 0, sizeof(m));
    pthread_mutex_lock(&sv_agent.lock);
    for (i = 0; i < sv_agent.nwatch; ++i) {
        if (sv_agent.watch[i].pidfd == pidfd) {
            m.src_slot = sv_agent.watch[i].slot;
            m.src_gen  = sv_agent.watch[i].gen;
            close(pidfd);
            sv_agent.watch[i] = sv_agent.watch[--sv_agent.nwatch];
            found             = 1;
            break;
        }
    }
    pthread_mutex_unlock(&sv_agent.lock);
    if (found) {
        m.magic   = SV_CM_MAGIC;
        m.version = SV_CM_VERSION;
        m.kind    = SV_CM_GONE;
        sv_cm_handle(&m);
    }
}

/* ---------------------------------------------------------------------- */
/* connections to other hosts */

static int sv_cm_conn_add(sv_cm_conn_t *c)
{
    unsigned i;

    pthread_mutex_lock(&sv_agent.lock);
    for (i = 0; i < SV_CM_MAX_CONNS; ++i) {
        if (sv_agent.conns[i] == NULL) {
            sv_agent.conns[i] = c;
            pthread_mutex_unlock(&sv_agent.lock);
            sv_cm_agent_kick();
            return 0;
        }
    }
    pthread_mutex_unlock(&sv_agent.lock);
    return EAGAIN;
}

static sv_cm_conn_t *sv_cm_conn_new(int fd, int dev, uint16_t lid,
                                    uint16_t slot, uint32_t gen, int accepted)
{
    sv_cm_conn_t *c = calloc(1, sizeof(*c));
    int flags;

    if (c == NULL) {
        return NULL;
    }
    c->fd       = fd;
    c->dev      = dev;
    c->lid      = lid;
    c->slot     = slot;
    c->gen      = gen;
    c->accepted = accepted;
    pthread_mutex_init(&c->send_lock, NULL);
    flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    return c;
}

/* the connection to the host of lid, if there is one (caller holds
 * sv_agent.lock); one we opened first */
static sv_cm_conn_t *sv_cm_conn_find(uint16_t lid)
{
    sv_cm_conn_t *found = NULL;
    unsigned i;

    for (i = 0; i < SV_CM_MAX_CONNS; ++i) {
        sv_cm_conn_t *c = sv_agent.conns[i];

        if ((c != NULL) && (c->lid == lid) && (c->fd >= 0)) {
            if (!c->accepted) {
                return c;
            }
            found = c;
        }
    }
    return found;
}

static uint32_t sv_cm_my_gen(void)
{
    return sv_g.shm->procs[sv_g.slot].gen;
}

/* Open the CM connection to the host of lid from device dev: 0, or
 * ECONNREFUSED (nobody listens on its CM port) or ETIMEDOUT. */
static int sv_cm_conn_open(uint16_t lid, int dev, uint64_t timeout_ns)
{
    uint32_t lip = sv_g.cfg.net_addr[dev];
    uint32_t ip  = htonl((ntohl(lip) & 0xffff0000u) | lid);
    struct sockaddr_in sa;
    sv_net_auth_t ch;
    struct pollfd pfd;
    sv_cm_conn_t *c;
    socklen_t len;
    int fd, err = 0, flags;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return errno;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = lip; /* the responder wants our LID's address */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        err = errno;
        goto fail;
    }
    sa.sin_port        = htons((uint16_t)sv_g.cfg.cm_port);
    sa.sin_addr.s_addr = ip;
    flags              = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (errno != EINPROGRESS) {
            err = (errno == ECONNREFUSED) ? ECONNREFUSED : ETIMEDOUT;
            goto fail;
        }
        pfd.fd     = fd;
        pfd.events = POLLOUT;
        len        = sizeof(err);
        if ((poll(&pfd, 1, (int)(timeout_ns / 1000000) + 1) != 1) ||
            (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)) {
            err = ETIMEDOUT;
            goto fail;
        }
        if (err != 0) {
            err = (err == ECONNREFUSED) ? ECONNREFUSED : ETIMEDOUT;
            goto fail;
        }
    }
    fcntl(fd, F_SETFL, flags);
    sv_net_tune_fd(fd, 0);
    if (sv_net_handshake(fd, dev, lid, SV_NET_SLOT_CM, sv_cm_my_gen(), ip,
                         (uint16_t)sv_g.cfg.cm_port, SV_NET_HANDSHAKE_NS,
                         &ch) != 0 ||
        (ch.slot >= SV_MAX_PROCS)) {
        err = ECONNREFUSED;
        goto fail;
    }
    c = sv_cm_conn_new(fd, dev, lid, ch.slot, ch.reserved, 0);
    if ((c == NULL) || (sv_cm_conn_add(c) != 0)) {
        free(c);
        err = EAGAIN;
        goto fail;
    }
    return 0;

fail:
    close(fd);
    return err;
}

int sv_cm_host_reach(uint16_t lid, int dev, uint64_t timeout_ns)
{
    static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
    int ret                          = 0;

    if (!sv_net_enabled()) {
        return EHOSTUNREACH;
    }
    /* one opening at a time: two threads must not both connect */
    pthread_mutex_lock(&open_lock);
    pthread_mutex_lock(&sv_agent.lock);
    if (sv_cm_conn_find(lid) == NULL) {
        pthread_mutex_unlock(&sv_agent.lock);
        ret = sv_cm_conn_open(lid, dev, timeout_ns);
    } else {
        pthread_mutex_unlock(&sv_agent.lock);
    }
    pthread_mutex_unlock(&open_lock);
    return ret;
}

static int sv_cm_conn_send(sv_cm_conn_t *c, const sv_cm_msg_t *m)
{
    struct iovec iov = {(void *)m, sizeof(*m)};
    int ret;

    pthread_mutex_lock(&c->send_lock);
    /* the socket is non-blocking for the reader; a frame is small, and a
     * peer that stops reading loses the connection (TCP_USER_TIMEOUT) */
    ret = (c->fd >= 0) ? sv_net_send_iov(c->fd, &iov, 1) : -1;
    pthread_mutex_unlock(&c->send_lock);
    return ret;
}

int sv_cm_send(sv_cm_msg_t *m)
{
    sv_cm_conn_t *c;
    int ret, tries;

    m->magic    = SV_CM_MAGIC;
    m->version  = SV_CM_VERSION;
    m->src_slot = (uint16_t)sv_g.slot;
    m->src_gen  = sv_cm_my_gen();
    if ((m->dst_lid == 0) || sv_lid_is_local(m->dst_lid)) {
        if (m->dst_slot == SV_CM_SLOT_PORT) {
            return EINVAL; /* sv_cm.c looks listeners of this host up */
        }
        return sv_cm_box_post(m->dst_slot, m->dst_gen, m);
    }
    for (tries = 0; tries < 2; ++tries) {
        pthread_mutex_lock(&sv_agent.lock);
        c = sv_cm_conn_find(m->dst_lid);
        if (c != NULL) {
            ret = sv_cm_conn_send(c, m);
            pthread_mutex_unlock(&sv_agent.lock);
            if (ret == 0) {
                return 0;
            }
            continue; /* broken: the agent drops it; open another */
        }
        pthread_mutex_unlock(&sv_agent.lock);
        ret = sv_cm_host_reach(m->dst_lid, 0,
                               (uint64_t)sv_g.cfg.cm_timeout_ms * 1000000ull);
        if (ret != 0) {
            return ret;
        }
    }
    return ETIMEDOUT;
}

/* a frame from the wire: from the process the connection authenticated,
 * for a process of this host */
static void sv_cm_conn_frame(sv_cm_conn_t *c, sv_cm_msg_t *m)
{
    uint16_t slot;
    uint64_t cookie;
    sv_cm_msg_t rej;
    int ret;

    if (!sv_cm_msg_valid(m) || (m->kind == SV_CM_GONE) ||
        (m->src_lid != c->lid) || (m->src_slot != c->slot) ||
        (m->src_gen != c->gen) || !sv_lid_is_local(m->dst_lid)) {
        sv_cm_log("dropped a CM message from LID %u process %u: not one it "
                  "may send",
                  (unsigned)c->lid, (unsigned)c->slot);
        return;
    }
    if (m->dst_slot == SV_CM_SLOT_PORT) {
        if (((m->kind != SV_CM_REQ) && (m->kind != SV_CM_SIDR_REQ)) ||
            (sv_cm_port_lookup(m->ps, m->dst_addr, ntohs(m->dst_port), &slot,
                               &cookie) != 0)) {
            goto reject;
        }
        m->dst_slot = slot;
        m->dst_gen  = sv_g.shm->procs[slot].gen;
        m->dst_id   = cookie;
    }
    ret = sv_cm_box_post(m->dst_slot, m->dst_gen, m);
    if ((ret == 0) || ((m->kind != SV_CM_REQ) && (m->kind != SV_CM_SIDR_REQ) &&
                       (m->kind != SV_CM_DREQ))) {
        return;
    }
reject:
    /* nobody takes it here: answer as IB CM does for an unknown service
     * (or, to a DREQ, as for a connection that is gone) */
    memset(&rej, 0, sizeof(rej));
    rej.kind     = (m->kind == SV_CM_SIDR_REQ) ? SV_CM_SIDR_REP :
                   (m->kind == SV_CM_DREQ)     ? SV_CM_DREP :
                                                 SV_CM_REJ;
    rej.status   = SV_CM_REJ_INVALID_SERVICE_ID;
    rej.ps       = m->ps;
    rej.src_lid  = m->dst_lid;
    rej.dst_lid  = m->src_lid;
    rej.dst_slot = m->src_slot;
    rej.dst_gen  = m->src_gen;
    rej.dst_id   = m->src_id;
    rej.magic    = SV_CM_MAGIC;
    rej.version  = SV_CM_VERSION;
    rej.src_slot = (uint16_t)sv_g.slot;
    rej.src_gen  = sv_cm_my_gen();
    sv_cm_conn_send(c, &rej);
}

/* read what the connection has; -1 when it broke */
static int sv_cm_conn_read(sv_cm_conn_t *c)
{
    ssize_t r;

    for (;;) {
        r = recv(c->fd, (char *)&c->rbuf + c->rlen, sizeof(c->rbuf) - c->rlen,
                 MSG_DONTWAIT);
        if (r == 0) {
            return -1;
        }
        if (r < 0) {
            return ((errno == EAGAIN) || (errno == EINTR)) ? 0 : -1;
        }
        c->rlen += (size_t)r;
        if (c->rlen == sizeof(c->rbuf)) {
            c->rlen = 0;
            sv_cm_conn_frame(c, &c->rbuf);
        }
    }
}

/* the connection broke (only the agent closes connections, and frees
 * them: sv_agent.lock keeps a sender's connection alive) */
static void sv_cm_conn_close(unsigned i)
{
    sv_cm_conn_t *c;

    pthread_mutex_lock(&sv_agent.lock);
    c                 = sv_agent.conns[i];
    sv_agent.conns[i] = NULL;
    pthread_mutex_lock(&c->send_lock);
    close(c->fd);
    c->fd = -1;
    pthread_mutex_unlock(&c->send_lock);
    pthread_mutex_unlock(&sv_agent.lock);
    if (c->accepted) {
        /* the process at the other end kept this connection while it
         * lived: it is gone, every CM process of this host hears it */
        sv_cm_box_broadcast_gone(c->lid, c->slot, c->gen);
    } else {
        sv_cm_msg_t m;

        /* the process we reached on that host is gone; our ids talking to
         * it hear it (others of that host have connections of their own
         * to this host, whose end here tells) */
        memset(&m, 0, sizeof(m));
        m.magic    = SV_CM_MAGIC;
        m.version  = SV_CM_VERSION;
        m.kind     = SV_CM_GONE;
        m.src_lid  = c->lid;
        m.src_slot = c->slot;
        m.src_gen  = c->gen;
        sv_cm_handle(&m);
    }
    free(c);
}

/* ------------------------------------------------------------------------
 * the CM port: accepted connections, their handshake in a thread each */

typedef struct {
    int fd;
    int dev;
    uint32_t ip;
} sv_cm_pending_t;

static void *sv_cm_handshake_thread(void *arg)
{
    sv_cm_pending_t *p = arg;
    sv_net_auth_t hello;
    sv_cm_conn_t *c = NULL;

    sv_net_tune_fd(p->fd, 0);
    if ((sv_net_handshake_accept(p->fd, p->ip, SV_NET_SLOT_CM, sv_cm_my_gen(),
                                 &hello) == 0) &&
        (hello.slot < SV_MAX_PROCS)) {
        c = sv_cm_conn_new(p->fd, p->dev, hello.lid, hello.slot, hello.reserved,
                           1);
    }
    if ((c == NULL) || (sv_cm_conn_add(c) != 0)) {
        close(p->fd);
        free(c);
    }
    pthread_mutex_lock(&sv_agent.lock);
    --sv_agent.npreauth;
    pthread_mutex_unlock(&sv_agent.lock);
    free(p);
    return NULL;
}

static void sv_cm_accept(int dev)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    sv_cm_pending_t *p;
    int fd;

    fd = accept4(sv_agent.lfd[dev], (struct sockaddr *)&sa, &len, SOCK_CLOEXEC);
    if (fd < 0) {
        return;
    }
    pthread_mutex_lock(&sv_agent.lock);
    if (sv_agent.npreauth >= SV_CM_MAX_PREAUTH) {
        pthread_mutex_unlock(&sv_agent.lock);
        close(fd);
        return;
    }
    ++sv_agent.npreauth;
    pthread_mutex_unlock(&sv_agent.lock);
    p = malloc(sizeof(*p));
    if (p != NULL) {
        p->fd  = fd;
        p->dev = dev;
        p->ip  = sa.sin_addr.s_addr;
    }
    if ((p == NULL) || (sv_net_thread(sv_cm_handshake_thread, p) != 0)) {
        close(fd);
        free(p);
        pthread_mutex_lock(&sv_agent.lock);
        --sv_agent.npreauth;
        pthread_mutex_unlock(&sv_agent.lock);
    }
}

static int sv_cm_listen_open(void)
{
    struct sockaddr_in sa;
    int dev, fd, one = 1;

    for (dev = 0; dev < SV_MAX_DEVS; ++dev) {
        sv_agent.lfd[dev] = -1;
    }
    if (!sv_net_enabled()) {
        return 0;
    }
    for (dev = 0; dev < sv_g.cfg.ndevs; ++dev) {
        if ((dev > 0) &&
            (sv_g.cfg.net_addr[dev] == sv_g.cfg.net_addr[dev - 1])) {
            continue; /* devices beyond the list share the last address */
        }
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            return errno;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        /* every CM process of the host listens here; the kernel lets
         * only sockets of the same user share the port */
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        memset(&sa, 0, sizeof(sa));
        sa.sin_family      = AF_INET;
        sa.sin_port        = htons((uint16_t)sv_g.cfg.cm_port);
        sa.sin_addr.s_addr = sv_g.cfg.net_addr[dev];
        if ((bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) ||
            (listen(fd, 64) != 0)) {
            int err = errno;

            fprintf(stderr,
                    "softverbs rdma_cm: cannot listen on the CM port "
                    "%s:%u (%s); another user's process holds it, or "
                    "SOFTVERBS_CM_PORT is taken\n",
                    inet_ntoa(sa.sin_addr), sv_g.cfg.cm_port, strerror(err));
            close(fd);
            return err;
        }
        sv_agent.lfd[dev] = fd;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */

static void *sv_cm_agent_main(void *arg)
{
    struct pollfd pfd[2 + SV_MAX_DEVS + SV_CM_MAX_CONNS + SV_CM_MAX_WATCH];
    int what[2 + SV_MAX_DEVS + SV_CM_MAX_CONNS + SV_CM_MAX_WATCH];
    uint64_t next, now;
    unsigned i, n;
    int timeout, r;
    char buf[64];

    (void)arg;
    for (;;) {
        n         = 0;
        pfd[n].fd = sv_agent.efd;
        what[n++] = -1;
        pfd[n].fd = sv_agent.wake[0];
        what[n++] = -2;
        for (i = 0; i < SV_MAX_DEVS; ++i) {
            if (sv_agent.lfd[i] >= 0) {
                pfd[n].fd = sv_agent.lfd[i];
                what[n++] = -100 - (int)i;
            }
        }
        pthread_mutex_lock(&sv_agent.lock);
        for (i = 0; i < SV_CM_MAX_CONNS; ++i) {
            if (sv_agent.conns[i] != NULL) {
                pfd[n].fd = sv_agent.conns[i]->fd;
                what[n++] = (int)i;
            }
        }
        for (i = 0; i < sv_agent.nwatch; ++i) {
            pfd[n].fd = sv_agent.watch[i].pidfd;
            what[n++] = 1000 + (int)i;
        }
        pthread_mutex_unlock(&sv_agent.lock);
        for (i = 0; i < n; ++i) {
            pfd[i].events  = POLLIN;
            pfd[i].revents = 0;
        }
        now     = sv_now_ns();
        next    = sv_cm_timers(now);
        timeout = (next == UINT64_MAX) ? -1 :
                  (next <= now)        ? 0 :
                                         (int)((next - now) / 1000000) + 1;
        r       = poll(pfd, n, timeout);
        if (r <= 0) {
            continue;
        }
        for (i = 0; i < n; ++i) {
            if (!pfd[i].revents) {
                continue;
            }
            if (what[i] == -1) {
                sv_cm_box_drain();
            } else if (what[i] == -2) {
                while (read(sv_agent.wake[0], buf, sizeof(buf)) > 0) {
                }
            } else if (what[i] <= -100) {
                sv_cm_accept(-100 - what[i]);
            } else if (what[i] >= 1000) {
                sv_cm_watch_fired(pfd[i].fd);
            } else {
                sv_cm_conn_t *c = sv_agent.conns[what[i]];

                if ((c != NULL) && (sv_cm_conn_read(c) != 0)) {
                    sv_cm_conn_close((unsigned)what[i]);
                }
            }
        }
    }
    return NULL;
}

int sv_cm_agent_start(void)
{
    int ret = 0;

    pthread_mutex_lock(&sv_agent.lock);
    if (sv_agent.running) {
        goto out;
    }
    ret = sv_init();
    if (ret != 0) {
        goto out;
    }
    if (pipe2(sv_agent.wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        ret = errno;
        goto out;
    }
    ret = sv_cm_box_open();
    if ((ret == 0) && ((ret = sv_cm_listen_open()) != 0)) {
        sv_g.shm->cm_boxes[sv_g.slot].pid = 0;
    }
    if ((ret == 0) && (sv_net_thread(sv_cm_agent_main, NULL) != 0)) {
        ret = EAGAIN;
    }
    if (ret != 0) {
        close(sv_agent.wake[0]);
        close(sv_agent.wake[1]);
        goto out;
    }
    SV_STORE(&sv_agent.running, 1);
out:
    pthread_mutex_unlock(&sv_agent.lock);
    return ret;
}

void sv_cm_atfork_child(void)
{
    unsigned i;

    /* the parent's agent did not come along: the child starts its own */
    pthread_mutex_init(&sv_agent.lock, NULL);
    pthread_mutex_init(&sv_cm_lock, NULL);
    if (sv_agent.running) {
        close(sv_agent.wake[0]);
        close(sv_agent.wake[1]);
        close(sv_agent.efd);
        for (i = 0; i < SV_MAX_DEVS; ++i) {
            if (sv_agent.lfd[i] >= 0) {
                close(sv_agent.lfd[i]);
            }
        }
        for (i = 0; i < SV_CM_MAX_CONNS; ++i) {
            if (sv_agent.conns[i] != NULL) {
                close(sv_agent.conns[i]->fd);
                sv_agent.conns[i] = NULL;
            }
        }
        for (i = 0; i < sv_agent.nwatch; ++i) {
            close(sv_agent.watch[i].pidfd);
        }
    }
    sv_agent.nwatch   = 0;
    sv_agent.npreauth = 0;
    sv_agent.running  = 0;
}
