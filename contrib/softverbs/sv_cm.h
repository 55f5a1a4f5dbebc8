/*
 * softverbs rdma_cm: the connection manager librdmacm gives applications,
 * emulated in the same library (no kernel, no /dev/infiniband/rdma_cm).
 *
 * Roles:
 *  - sv_cm.c: librdmacm's API (event channels, ids, bind, resolve, listen,
 *    connect, accept, reject, disconnect, events, QPs of ids, the
 *    synchronous calls of rdma_create_ep), over the id state machine below;
 *  - sv_cm_addr.c: addresses: which device an IPv4 address names and on
 *    which host it is (the subnet manager rule of sv_net.c: a LID is the
 *    low 16 bits of a device's address), the port space of a host (a table
 *    in the fabric segment), rdma_getaddrinfo;
 *  - sv_cm_agent.c: the connection manager "firmware" of each process: a
 *    thread that takes the CM messages addressed to the process (a mailbox
 *    in the fabric segment on one host, authenticated TCP connections to
 *    the CM port of other hosts), watches the peers of its connections and
 *    runs the timers, and turns all of it into events.
 *
 * Messages are IB CM's (REQ, REP, RTU, REJ, DREQ, DREP, SIDR REQ/REP),
 * carrying what IB CM carries: QP numbers, PSNs, RDMA read resources and
 * private data of IB's sizes. A message names its sender and receiver by
 * LID, process slot and the slot's generation (so that a message for a
 * process that died does not reach the next one in its slot), and the ids
 * at both ends by random cookies; a REQ names the receiver by its
 * address and port, and the host's port table finds the listener.
 */
#ifndef SV_CM_H_
#define SV_CM_H_

#include "sv.h"

#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#define SV_CM_MAGIC        0x6d63 /* "cm" */
#define SV_CM_VERSION      1
#define SV_CM_PDATA_MAX    224 /* the largest private data (DREQ) */
#define SV_CM_SLOT_PORT    0xffff /* dst_slot of a REQ: by port */
#define SV_CM_BOX_ENTRIES  256 /* a process's mailbox */
#define SV_CM_PORT_DEFAULT 18699 /* SOFTVERBS_CM_PORT */
#define SV_CM_EPHEMERAL_LO 32768 /* ports rdma_cm picks, as Linux's */
#define SV_CM_EPHEMERAL_HI 60999

/* IB CM's private data sizes; for the TCP and UDP port spaces the rdma_cm
 * header (36 bytes) is taken out of REQ and SIDR REQ */
#define SV_CM_PDATA_REQ      56
#define SV_CM_PDATA_REP      196
#define SV_CM_PDATA_REJ      148
#define SV_CM_PDATA_SIDR_REQ 180
#define SV_CM_PDATA_SIDR_REP 136

/* IB CM reject reasons librdmacm reports as the status of REJECTED */
#define SV_CM_REJ_INVALID_SERVICE_ID 8 /* no listener at that port */
#define SV_CM_REJ_CONSUMER_DEFINED   28 /* rdma_reject, or the peer went */

/* the qkey rdma_cm gives UD ids (RDMA_UDP_QKEY in the kernel) */
#define SV_CM_UDP_QKEY 0x01234567u

enum {
    SV_CM_REQ = 1,
    SV_CM_REP,
    SV_CM_RTU,
    SV_CM_REJ,
    SV_CM_DREQ,
    SV_CM_DREP,
    SV_CM_SIDR_REQ,
    SV_CM_SIDR_REP,
    SV_CM_MRA, /* a REQ was taken, by the sender of this */
    SV_CM_GONE, /* agent to agents: a process (src_*) is gone */
    SV_CM_KIND_MAX
};

typedef struct {
    uint16_t magic;
    uint8_t kind;
    uint8_t version;
    uint16_t ps; /* enum rdma_port_space */
    uint8_t pdata_len;
    uint8_t flags;
    uint16_t src_lid, src_slot;
    uint16_t dst_lid, dst_slot;
    uint32_t src_gen, dst_gen;
    uint64_t src_id, dst_id; /* id cookies; dst_id 0 in a REQ */
    uint32_t src_addr, dst_addr; /* IPv4, network order */
    uint16_t src_port, dst_port; /* network order */
    uint32_t qpn, qkey, psn;
    int32_t status; /* REJ: reason; SIDR REP: 0 or reason */
    uint8_t resp_res, init_depth, retry, rnr_retry, srq, reserved[3];
    uint8_t pdata[SV_CM_PDATA_MAX];
    uint32_t pad;
    uint32_t seq; /* mailbox ring entry sequence (sv.h) */
} sv_cm_msg_t;

/* ------------------------------------------------------------------------
 * sv_cm_addr.c
 */

/* where an IPv4 address (network order) is, for this process */
typedef struct {
    int dev; /* the device of this host that reaches it */
    int local; /* on this host */
    uint16_t lid; /* the LID of the port that owns the address */
} sv_cm_route_t;

int sv_cm_addr_route(uint32_t addr, sv_cm_route_t *route);
int sv_cm_addr_local_dev(uint32_t addr);
uint32_t sv_cm_addr_of_dev(int dev);
int sv_cm_port_bind(uint16_t ps, uint32_t addr, uint16_t *port, uint64_t cookie,
                    int reuse);
int sv_cm_port_listen(int idx);
void sv_cm_port_release(int idx);
int sv_cm_port_lookup(uint16_t ps, uint32_t addr, uint16_t port, uint16_t *slot,
                      uint64_t *cookie);
void sv_cm_ports_reclaim(int slot);

/* ------------------------------------------------------------------------
 * sv_cm_agent.c
 */
int sv_cm_agent_start(void);
/* send a message (src_* and magic filled in here); 0 or an errno:
 * ECONNREFUSED when no process of the destination host takes CM
 * messages, ETIMEDOUT when the host does not answer */
int sv_cm_send(sv_cm_msg_t *m);
/* make sure the CM connection to the host of 'lid' (another host) is
 * there: 0, ECONNREFUSED or ETIMEDOUT (rdma_resolve_route's part) */
int sv_cm_host_reach(uint16_t lid, int dev, uint64_t timeout_ns);
/* watch a process of this host: its death becomes a SV_CM_GONE */
void sv_cm_watch(uint16_t slot, uint32_t gen);
/* the agent calls this for every message it takes (sv_cm.c) */
void sv_cm_handle(const sv_cm_msg_t *m);
/* and this when its earliest timer may have changed */
void sv_cm_agent_kick(void);
uint64_t sv_cm_timers(uint64_t now); /* runs due timers; next deadline */
void sv_cm_boxes_reclaim(int slot);
void sv_cm_atfork_child(void);

extern pthread_mutex_t sv_cm_lock; /* ids, channels, events */

#endif
