/*
 * softverbs network data path: the wire format and the socket helpers that
 * the initiator side (sv_net.c) and the responder side (sv_net_resp.c)
 * share.
 *
 * A host is a softverbs fabric (one per network namespace). Each process
 * that uses verbs listens on TCP port net_port + its process slot, on the
 * IPv4 address of each of its devices. An initiator process keeps one TCP
 * connection per remote process it talks to; every QP of the initiator that
 * targets a QP of that process shares it (see README.md for why). On it flow
 * requests (one frame per send WR, data inline) one way and answers the
 * other way: the responder's thread executes the request against its own
 * fabric, exactly what the same-host executor does, and answers once the
 * data is placed, so a completion still means "placed at the target".
 *
 * A connection starts with a handshake (SV_NET_HELLO ... SV_NET_WELCOME,
 * below) that names the initiator (its LID and process slot) and proves
 * that both ends hold the per-user secret (sv_auth.h), without sending it.
 * The responder accepts the connection only from the IPv4 address that the
 * initiator's LID names, and afterwards only requests whose source QP
 * belongs to that initiator: a request is taken from the connection of the
 * QP it names, never from anyone who claims it.
 *
 * Frames are a fixed header and a payload of 'length' bytes where the kind
 * carries one: request data (WRITE, SEND, their _WITH_IMM forms, UD), READ
 * data and the 8-byte original value of an atomic in answers. Fields are in
 * host byte order, except imm (network order, as verbs keeps it): every host
 * here is little-endian x86-64 and there is no real HCA to interoperate
 * with.
 */
#ifndef SV_NET_H_
#define SV_NET_H_

#include "sv.h"

#define SV_NET_MAGIC      0x7673    /* "sv" */
#define SV_NET_VERSION    2 /* 2: authenticated connections */
#define SV_NET_PORT       18700     /* default SOFTVERBS_NET_PORT */
#define SV_NET_NONCE_LEN  16

/* defaults of the responder's limits (SOFTVERBS_NET_MAX_CONNS,
 * SOFTVERBS_NET_MAX_HOLD_MS) */
#define SV_NET_MAX_CONNS_DEFAULT 128
#define SV_NET_MAX_HOLD_DEFAULT  (30ull * 1000000000ull)
/* connections not yet authenticated, and how long they may take to be */
#define SV_NET_MAX_PREAUTH  8
#define SV_NET_HANDSHAKE_NS (2ull * 1000000000ull)

enum {
    SV_NET_REQ_RC    = 1,   /* an RC send WR, answered by SV_NET_ANSWER */
    SV_NET_REQ_UD    = 2,   /* a UD datagram, never answered */
    SV_NET_ANSWER    = 3,   /* status of one SV_NET_REQ_RC, in order */
    SV_NET_KEEPALIVE = 4, /* the responder still works on a request (RNR,
                             * target QP not ready): the requester's ack
                             * timer restarts, as with an RNR NAK */
    /* the handshake, sv_net_auth_t frames:
     *   initiator -> HELLO     (who it is, whom it wants, nonce_i)
     *   responder -> CHALLENGE (nonce_r, mac_r)
     *   initiator -> AUTH      (mac_i)
     *   responder -> WELCOME
     * mac_r = HMAC(key, "softverbs responder" | HELLO | nonce_r) proves the
     * responder, mac_i = HMAC(key, "softverbs initiator" | HELLO | nonce_r)
     * the initiator; key = SHA-256 of the per-user secret. Fresh nonces on
     * both sides: a recorded handshake cannot be replayed. */
    SV_NET_HELLO     = 5,
    SV_NET_CHALLENGE = 6,
    SV_NET_AUTH      = 7,
    SV_NET_WELCOME   = 8
};

typedef struct {
    uint16_t magic;
    uint8_t kind; /* SV_NET_HELLO .. SV_NET_WELCOME */
    uint8_t version; /* SV_NET_VERSION */
    uint16_t lid; /* HELLO: the initiator's port LID */
    uint16_t slot; /* HELLO: the initiator's process slot */
    uint16_t dst_lid; /* HELLO: the LID it connects to */
    uint16_t dst_slot; /* HELLO: the process slot it connects to */
    uint32_t reserved;
    uint8_t nonce[SV_NET_NONCE_LEN]; /* HELLO: nonce_i, CHALLENGE: nonce_r */
    uint8_t mac[32]; /* CHALLENGE: mac_r, AUTH: mac_i */
} sv_net_auth_t;

#define SV_NET_F_SOLICITED 1u

typedef struct {
    uint16_t magic;
    uint8_t  kind;
    uint8_t  opcode;       /* requests: enum ibv_wr_opcode */
    uint8_t  status;       /* answers: enum ibv_wc_status */
    uint8_t  flags;        /* SV_NET_F_* */
    uint8_t  rnr_retry;    /* requests: the requester's RNR retry count */
    uint8_t  sl;
    uint32_t src_qpn;      /* requests: initiator QP; answers: the same */
    uint32_t dst_qpn;
    uint32_t seq;          /* the initiator's send queue index of the WR */
    uint32_t imm;          /* network order */
    uint32_t rkey;
    uint32_t qkey;         /* UD: the Q_Key the datagram carries */
    uint16_t src_lid;
    uint16_t reserved16;
    uint32_t reserved32;
    uint64_t length;       /* WR length; bytes of payload if the frame has
                            * one (not a READ request) */
    uint64_t raddr;
    uint64_t compare_add;
    uint64_t swap;
    uint64_t timeout_ns;   /* requests: the requester's ack timeout */
} sv_net_hdr_t;

/* does a request of this opcode carry its data in the frame? */
static inline int sv_net_req_has_data(const sv_net_hdr_t *h)
{
    return h->kind == SV_NET_REQ_UD ||
           h->opcode == IBV_WR_RDMA_WRITE ||
           h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
           h->opcode == IBV_WR_SEND || h->opcode == IBV_WR_SEND_WITH_IMM;
}

/* Blocking socket I/O. The sockets have a short receive timeout so that a
 * receive can give up after 'stall_ns' without progress (0: never): a link
 * that is down must end in an error, not a hang. Return 0 or -1. */
int sv_net_recv_iov(int fd, struct iovec *iov, int n, size_t total,
                    uint64_t stall_ns);
int sv_net_recv_buf(int fd, void *buf, size_t len, uint64_t stall_ns);
int sv_net_drain(int fd, size_t len, uint64_t stall_ns);
int sv_net_send_iov(int fd, struct iovec *iov, int n);
void sv_net_tune_fd(int fd, uint64_t user_timeout_ns);
int sv_net_thread(void *(*fn)(void *), void *arg);
int sv_net_spin_readable(int fd);
int sv_net_recv_until(int fd, void *buf, size_t len, uint64_t deadline_ns);
void sv_net_auth_mac(int responder, const sv_net_auth_t *hello,
                     const uint8_t *nonce_r, uint8_t *mac);
void sv_net_log_limited(unsigned *count, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* the handshake's two halves (sv_net.c, sv_net_resp.c), shared with the
 * connection manager's transport (sv_cm_agent.c), which connects to
 * SV_NET_SLOT_CM; the HELLO's and CHALLENGE's 'reserved' carry the slot
 * generation of each end there */
#define SV_NET_SLOT_CM 0xffff
int sv_net_handshake(int fd, int dev, uint32_t lid, uint16_t dst_slot,
                     uint32_t gen, uint32_t ip, uint16_t port,
                     uint64_t timeout_ns, sv_net_auth_t *ch_out);
int sv_net_handshake_accept(int fd, uint32_t ip, uint16_t want_slot,
                            uint32_t gen, sv_net_auth_t *hello_out);

/* the responder's limits, from the environment (sv_net_config) */
typedef struct {
    unsigned max_conns; /* connections served at once */
    uint64_t max_hold_ns; /* longest hold of one request (RNR, QP not
                             * ready), whatever the requester asks */
} sv_net_limits_t;

extern sv_net_limits_t sv_net_limits;
extern uint8_t sv_net_key[32]; /* from the per-user secret */

/* A QP being destroyed (qp_idx: its table index + 1) or an MR being
 * deregistered (mr_idx: its table index): wait until no responder thread
 * of this process places data into its memory any more; one that takes
 * longer than a moment (a stalled peer) loses its connection. */
void sv_net_resp_fence(uint32_t qp_idx, uint32_t mr_idx);
void sv_net_resp_qp_alive(uint32_t idx);

#endif
