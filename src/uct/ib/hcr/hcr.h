/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_HCR_H
#define UCT_HCR_H

#include "hcr_staging.h"

#include <uct/ib/rc/base/rc_iface.h>
#include <uct/ib/rc/base/rc_ep.h>
#include <ucs/type/class.h>
#include <uct/api/v2/uct_v2.h>


/* Immediate data of a put with notification: the AM id in the top bits, the
 * user's notify_data in the rest (see README.md) */
#define UCT_HCR_NOTIFY_DATA_BITS  UCT_PUT_NOTIFY_DATA_BITS
#define UCT_HCR_NOTIFY_DATA_MASK  UCS_MASK(UCT_HCR_NOTIFY_DATA_BITS)


enum {
    UCT_HCR_ADDR_HAS_ATOMIC_MR = UCS_BIT(0)
};


typedef struct uct_hcr_ep_address {
    uint8_t         flags;
    uct_ib_uint24_t qp_num;
} UCS_S_PACKED uct_hcr_ep_address_t;


/* Work requests posted and completed on one QP, 16-bit circular */
typedef struct uct_hcr_txcnt {
    uint16_t pi; /* posted */
    uint16_t ci; /* completed */
} uct_hcr_txcnt_t;


/**
 * hcr endpoint: one RC QP.
 */
typedef struct uct_hcr_ep {
    uct_rc_ep_t         super;
    uct_hcr_txcnt_t     txcnt;
    uct_ib_fence_info_t fi;
    struct ibv_qp       *qp;
} uct_hcr_ep_t;


typedef struct {
    uct_rc_iface_qp_cleanup_ctx_t super;
    struct ibv_qp                 *qp;
} uct_hcr_qp_cleanup_ctx_t;


/**
 * Costs the transport reports to UCX's protocol selection: the values set
 * in the configuration, else the ones measured on the host (hcr_calib.c),
 * else UCX's defaults.
 */
typedef struct uct_hcr_perf {
    double copy_bw;      /* memcpy bandwidth into staging buffers, bytes/s */
    double overhead;     /* software overhead per operation, seconds */
    double bandwidth;    /* network bandwidth, bytes/s; auto: the device's */
    double latency;      /* network latency, seconds; 0: the device's */
} uct_hcr_perf_t;


typedef struct uct_hcr_iface_config {
    uct_rc_iface_config_t super;
    size_t                max_am_hdr;
    unsigned              tx_max_wr;
    size_t                staging_buf_size;
    unsigned              staging_count;
    double                copy_bw;
    double                overhead;
    double                bandwidth;
    double                latency;
} uct_hcr_iface_config_t;


/**
 * hcr interface.
 */
typedef struct uct_hcr_iface {
    uct_rc_iface_t        super;
    struct ibv_srq        *srq;
    struct ibv_send_wr    inl_am_wr;
    struct ibv_send_wr    inl_rwrite_wr;
    struct ibv_sge        inl_sge[UCT_IB_MAX_IOV];
    uct_rc_am_short_hdr_t am_inl_hdr;
    ucs_mpool_t           short_desc_mp;
    uct_rc_iface_send_desc_t *fc_desc; /* pure grant when inline is absent */
    uct_hcr_staging_t     staging;
    uct_hcr_perf_t        perf;
    struct {
        size_t            short_desc_size;
        size_t            max_inline;
        size_t            max_send_sge;
        unsigned          tx_max_wr;
    } config;
} uct_hcr_iface_t;


UCS_CLASS_DECLARE(uct_hcr_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_NEW_FUNC(uct_hcr_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_hcr_ep_t, uct_ep_t);


ucs_status_t uct_hcr_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                  unsigned length, uint64_t remote_addr,
                                  uct_rkey_t rkey);

ssize_t uct_hcr_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                             void *arg, uint64_t remote_addr, uct_rkey_t rkey);

ucs_status_t uct_hcr_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp);

ucs_status_t uct_hcr_ep_get_bcopy(uct_ep_h tl_ep,
                                  uct_unpack_callback_t unpack_cb, void *arg,
                                  size_t length, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp);

ucs_status_t uct_hcr_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                  size_t iovcnt, uint64_t remote_addr,
                                  uct_rkey_t rkey, uct_completion_t *comp);

ucs_status_t uct_hcr_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t hdr,
                                 const void *buffer, unsigned length);

ucs_status_t uct_hcr_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                     const uct_iov_t *iov, size_t iovcnt);

ssize_t uct_hcr_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                            uct_pack_callback_t pack_cb, void *arg,
                            unsigned flags);

ucs_status_t uct_hcr_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                 const void *header, unsigned header_length,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 unsigned flags, uct_completion_t *comp);

ucs_status_t uct_hcr_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                       uint64_t swap, uint64_t remote_addr,
                                       uct_rkey_t rkey, uint64_t *result,
                                       uct_completion_t *comp);

ucs_status_t uct_hcr_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode,
                                      uint64_t value, uint64_t remote_addr,
                                      uct_rkey_t rkey);

ucs_status_t uct_hcr_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                       uint64_t value, uint64_t *result,
                                       uint64_t remote_addr, uct_rkey_t rkey,
                                       uct_completion_t *comp);

ucs_status_t uct_hcr_ep_flush(uct_ep_h tl_ep, unsigned flags,
                              uct_completion_t *comp);

ucs_status_t uct_hcr_ep_fence(uct_ep_h tl_ep, unsigned flags);

void uct_hcr_ep_post_check(uct_ep_h tl_ep);

void uct_hcr_ep_vfs_populate(uct_rc_ep_t *rc_ep);

ucs_status_t uct_hcr_ep_fc_ctrl(uct_ep_t *tl_ep, unsigned op,
                                uct_rc_pending_req_t *req);

ucs_status_t uct_hcr_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr);

ucs_status_t uct_hcr_ep_connect_to_ep(uct_ep_h tl_ep,
                                      const uct_device_addr_t *dev_addr,
                                      const uct_ep_addr_t *ep_addr);

ucs_status_t uct_hcr_ep_put_notify_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                         size_t iovcnt, uint64_t remote_addr,
                                         uct_rkey_t rkey, uint8_t am_id,
                                         uint32_t notify_data,
                                         uct_completion_t *comp);

void uct_hcr_iface_handle_notify(uct_hcr_iface_t *iface, uint32_t imm_data,
                                 uint32_t length);

ucs_status_t uct_hcr_staging_init(uct_hcr_iface_t *iface,
                                  const uct_hcr_iface_config_t *config);

void uct_hcr_staging_cleanup(uct_hcr_iface_t *iface);

unsigned uct_hcr_iface_post_recv_always(uct_hcr_iface_t *iface, unsigned max);

ucs_status_t uct_hcr_iface_prepost_recvs(uct_hcr_iface_t *iface, unsigned max);

#endif
