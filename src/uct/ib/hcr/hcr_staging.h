/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_HCR_STAGING_H
#define UCT_HCR_STAGING_H

#include <ucs/type/status.h>
#include <uct/api/uct_def.h>
#include <ucs/datastruct/mpool.h>
#include <stddef.h>
#include <stdint.h>


/**
 * A buffer of the hcr staging pool. The pool is one memory region registered
 * once when the interface is created (UCX_HCR_STAGING_*); protocols use its
 * buffers for copies to and from the network without registering memory on
 * the data path.
 */
typedef struct uct_hcr_staging_buf {
    uint32_t lkey;   /* Local key, for the sge of a work request */
    uint32_t rkey;   /* Remote key, for a peer's RDMA to this buffer */
    size_t   length; /* Usable bytes at data[] */
    char     data[]  UCS_V_ALIGNED(64);
} uct_hcr_staging_buf_t;


/**
 * Staging pool of an hcr interface.
 */
typedef struct uct_hcr_staging {
    ucs_mpool_t mp;          /* Buffers, one registered chunk */
    size_t      buf_size;    /* Bytes per buffer */
    unsigned    count;       /* Number of buffers */
} uct_hcr_staging_t;


/**
 * The staging pool of an interface, or NULL when the interface is not hcr or
 * its pool is disabled (UCX_HCR_STAGING_COUNT=0).
 */
uct_hcr_staging_t *uct_hcr_iface_staging(uct_iface_h iface);


/**
 * Take a buffer from the staging pool.
 *
 * @return A buffer, or NULL when all of them are in use.
 */
uct_hcr_staging_buf_t *uct_hcr_staging_get(uct_hcr_staging_t *staging);


/**
 * Return a buffer to its staging pool.
 */
void uct_hcr_staging_put(uct_hcr_staging_buf_t *buf);

#endif
