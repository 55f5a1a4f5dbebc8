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
#define SV_NET_PORT       18700     /* default SOFTVERBS_NET_PORT */

enum {
    SV_NET_REQ_RC    = 1,   /* an RC send WR, answered by SV_NET_ANSWER */
    SV_NET_REQ_UD    = 2,   /* a UD datagram, never answered */
    SV_NET_ANSWER    = 3,   /* status of one SV_NET_REQ_RC, in order */
    SV_NET_KEEPALIVE = 4    /* the responder still works on a request (RNR,
                             * target QP not ready): the requester's ack
                             * timer restarts, as with an RNR NAK */
};

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

#endif
