/*
 * A raw client of softverbs' network wire format (see svt_wire.h).
 */
#define _GNU_SOURCE
#include "svt_wire.h"

/* the library's own SHA-256, HMAC and secret file code, compiled in here:
 * the tests derive the key and the proofs exactly as softverbs does */
#include "../../contrib/softverbs/sv_auth.c"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

int svt_wire_connect(uint32_t lip, uint32_t ip, uint16_t port)
{
    struct sockaddr_in sa;
    int fd, one = 1;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = lip;
    if (lip != 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    sa.sin_addr.s_addr = ip;
    sa.sin_port        = htons(port);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int svt_wire_read(int fd, void *buf, size_t len, double timeout_s)
{
    double end        = th_time() + timeout_s;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char *p           = buf;
    ssize_t r;

    while (len > 0) {
        if (th_time() > end) {
            return -1;
        }
        if (poll(&pfd, 1, 20) <= 0) {
            continue;
        }
        r = recv(fd, p, len, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            return 0;
        }
        if (r > 0) {
            p += r;
            len -= (size_t)r;
        }
    }
    return 1;
}

static int svt_wire_write(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    ssize_t r;

    while (len > 0) {
        r = send(fd, p, len, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static void svt_wire_mac(const uint8_t *key, int responder,
                         const sv_net_auth_t *hello, const uint8_t *nonce_r,
                         uint8_t *mac)
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
    sv_hmac_sha256(key, 32, iov, 3, mac);
}

int svt_wire_handshake(int fd, const uint8_t *key, uint16_t lid, uint16_t slot,
                       uint16_t dst_lid, uint16_t dst_slot,
                       sv_net_auth_t *challenge)
{
    sv_net_auth_t hello, ch, auth;

    memset(&hello, 0, sizeof(hello));
    hello.magic    = SV_NET_MAGIC;
    hello.kind     = SV_NET_HELLO;
    hello.version  = SV_NET_VERSION;
    hello.lid      = lid;
    hello.slot     = slot;
    hello.dst_lid  = dst_lid;
    hello.dst_slot = dst_slot;
    sv_auth_random(hello.nonce, sizeof(hello.nonce));
    if (svt_wire_write(fd, &hello, sizeof(hello)) != 0 ||
        svt_wire_read(fd, &ch, sizeof(ch), 5.0) != 1) {
        return 0;
    }
    if (challenge != NULL) {
        *challenge = ch;
    }
    /* (an attacker would not check the responder's proof; we answer
     * whatever it is, with our own proof) */
    memset(&auth, 0, sizeof(auth));
    auth.magic   = SV_NET_MAGIC;
    auth.kind    = SV_NET_AUTH;
    auth.version = SV_NET_VERSION;
    svt_wire_mac(key, 0, &hello, ch.nonce, auth.mac);
    if (svt_wire_write(fd, &auth, sizeof(auth)) != 0 ||
        svt_wire_read(fd, &ch, sizeof(ch), 5.0) != 1) {
        return 0;
    }
    return ch.magic == SV_NET_MAGIC && ch.kind == SV_NET_WELCOME;
}

int svt_wire_open(const svt_victim_t *v, const uint8_t *key, uint16_t lid,
                  uint16_t slot)
{
    struct in_addr me;
    int fd;

    TH_ASSERT_EQ(inet_pton(AF_INET, getenv("SOFTVERBS_NET"), &me), 1);
    fd = svt_wire_connect(me.s_addr, v->ip, v->port);
    if (fd < 0) {
        return -1;
    }
    if (!svt_wire_handshake(fd, key, lid, slot, v->lid,
                            (uint16_t)(v->qpn >> SV_QPN_SLOT_SHIFT), NULL)) {
        close(fd);
        return -1;
    }
    return fd;
}

int svt_wire_key(uint8_t *key)
{
    char path[512], err[512];

    return sv_auth_load_secret(key, path, sizeof(path), err, sizeof(err));
}

void svt_wire_req(sv_net_hdr_t *h, int opcode, uint16_t lid, uint32_t src_qpn,
                  uint32_t dst_qpn, uint32_t seq)
{
    memset(h, 0, sizeof(*h));
    h->magic      = SV_NET_MAGIC;
    h->kind       = SV_NET_REQ_RC;
    h->opcode     = (uint8_t)opcode;
    h->src_qpn    = src_qpn;
    h->dst_qpn    = dst_qpn;
    h->src_lid    = lid;
    h->seq        = seq;
    h->timeout_ns = 500000000ull;
}

int svt_wire_send(int fd, const sv_net_hdr_t *h, const void *data, size_t len)
{
    if (svt_wire_write(fd, h, sizeof(*h)) != 0) {
        return -1;
    }
    return (len > 0) ? svt_wire_write(fd, data, len) : 0;
}

int svt_wire_answer(int fd, sv_net_hdr_t *a, void *buf, size_t buflen,
                    double timeout_s)
{
    double end = th_time() + timeout_s;
    char sink[4096];
    size_t n, take;
    int r;

    for (;;) {
        r = svt_wire_read(fd, a, sizeof(*a), end - th_time());
        if (r != 1) {
            return r;
        }
        if (a->kind == SV_NET_KEEPALIVE) {
            continue;
        }
        for (n = 0; n < a->length; n += take) {
            if (n < buflen) {
                take = TH_MIN(buflen - n, a->length - n);
                r = svt_wire_read(fd, (char *)buf + n, take, end - th_time());
            } else {
                take = TH_MIN(sizeof(sink), a->length - n);
                r    = svt_wire_read(fd, sink, take, end - th_time());
            }
            if (r != 1) {
                return r;
            }
        }
        return 1;
    }
}

int svt_wire_closed(int fd, double timeout_s)
{
    double end        = th_time() + timeout_s;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char sink[4096];
    ssize_t r;

    while (th_time() < end) {
        if (poll(&pfd, 1, 20) <= 0) {
            continue;
        }
        r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            return 1;
        }
    }
    return 0;
}
