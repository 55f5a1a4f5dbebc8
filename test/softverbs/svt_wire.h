/*
 * A raw client of softverbs' network wire format (contrib/softverbs/
 * sv_net.h), for the security tests and the wire fuzzer: it connects to a
 * process's port, runs the handshake with a key of its choice and an
 * identity of its choice, and sends frames of its choice.
 */
#ifndef SVT_WIRE_H_
#define SVT_WIRE_H_

#include "svt.h"
#include "../../contrib/softverbs/sv_net.h"
#include "../../contrib/softverbs/sv_auth.h"

/* an identity that no process of the test has: a QPN with this process
 * slot is "the raw client's" */
#define SVT_WIRE_SLOT 500u
#define SVT_WIRE_QPN  ((SVT_WIRE_SLOT << SV_QPN_SLOT_SHIFT) | 0x100u)

/* where a victim process listens, and what it registered, for a raw
 * client (exchanged over the oob channel) */
typedef struct {
    uint32_t ip; /* network order */
    uint16_t lid;
    uint16_t port;
    uint32_t qpn;
    uint32_t rkey;
    uint64_t addr;
    uint64_t len;
    int32_t pid;
} svt_victim_t;

/* TCP connection from local address lip to ip:port (network order);
 * fd, or -1 */
int svt_wire_connect(uint32_t lip, uint32_t ip, uint16_t port);

/* The initiator's handshake as (lid, slot) towards (dst_lid, dst_slot),
 * proving with key. 1: welcomed; 0: refused (closed, wrong proof, no
 * answer in time). The challenge frame is copied to *challenge if given. */
int svt_wire_handshake(int fd, const uint8_t *key, uint16_t lid, uint16_t slot,
                       uint16_t dst_lid, uint16_t dst_slot,
                       sv_net_auth_t *challenge);

/* connect and handshake; fd or -1 */
int svt_wire_open(const svt_victim_t *v, const uint8_t *key, uint16_t lid,
                  uint16_t slot);

/* the secret key of this user, as softverbs derives it (0 or errno) */
int svt_wire_key(uint8_t *key);

/* a request header of the raw client's identity */
void svt_wire_req(sv_net_hdr_t *h, int opcode, uint16_t lid, uint32_t src_qpn,
                  uint32_t dst_qpn, uint32_t seq);

/* send header and payload; 0, or -1 when the connection broke */
int svt_wire_send(int fd, const sv_net_hdr_t *h, const void *data, size_t len);

/* The next answer, keepalives skipped, within timeout_s; its payload
 * (up to buflen bytes, the rest dropped) goes to buf. 1: an answer;
 * 0: the connection closed; -1: nothing in time. */
int svt_wire_answer(int fd, sv_net_hdr_t *a, void *buf, size_t buflen,
                    double timeout_s);

/* does the peer close the connection (EOF or reset) within timeout_s,
 * reading and dropping anything before? */
int svt_wire_closed(int fd, double timeout_s);

#endif
