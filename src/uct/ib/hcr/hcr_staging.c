/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "hcr.h"

#include <uct/ib/base/ib_md.h>
#include <ucs/arch/cpu.h>
#include <ucs/debug/log.h>


static void uct_hcr_staging_buf_init(uct_iface_h tl_iface, void *obj,
                                     uct_mem_h memh)
{
    uct_hcr_iface_t *iface     = ucs_derived_of(tl_iface, uct_hcr_iface_t);
    uct_hcr_staging_buf_t *buf = obj;
    uct_ib_mem_t *ib_memh      = memh;

    buf->lkey   = ib_memh->lkey;
    buf->rkey   = ib_memh->rkey;
    buf->length = iface->staging.buf_size;
}

/*
 * One mpool chunk holds every buffer, so the pool is registered once, here,
 * and never grows on the data path.
 */
ucs_status_t uct_hcr_staging_init(uct_hcr_iface_t *iface,
                                  const uct_hcr_iface_config_t *config)
{
    uct_iface_mpool_config_t mp_config = {
        .max_bufs  = config->staging_count,
        .bufs_grow = config->staging_count
    };
    uct_hcr_staging_t *staging         = &iface->staging;
    ucs_status_t status;

    staging->buf_size = config->staging_buf_size;
    staging->count    = config->staging_count;
    if (staging->count == 0) {
        ucs_debug("hcr iface %p: staging pool disabled", iface);
        return UCS_OK;
    }

    status = uct_iface_mpool_init(&iface->super.super.super, &staging->mp,
                                  sizeof(uct_hcr_staging_buf_t) +
                                          staging->buf_size,
                                  sizeof(uct_hcr_staging_buf_t),
                                  UCS_SYS_CACHE_LINE_SIZE, &mp_config,
                                  staging->count, uct_hcr_staging_buf_init,
                                  "hcr_staging");
    if (status != UCS_OK) {
        return status;
    }

    ucs_mpool_grow(&staging->mp, staging->count);
    if (staging->mp.freelist == NULL) {
        status = UCS_ERR_NO_MEMORY;
        ucs_error("hcr iface %p: failed to register a staging pool of %u x "
                  "%zu bytes: %s", iface, staging->count, staging->buf_size,
                  ucs_status_string(status));
        ucs_mpool_cleanup(&staging->mp, 0);
        return status;
    }

    ucs_debug("hcr iface %p: staging pool of %u x %zu bytes", iface,
              staging->count, staging->buf_size);
    return UCS_OK;
}

void uct_hcr_staging_cleanup(uct_hcr_iface_t *iface)
{
    if (iface->staging.count != 0) {
        ucs_mpool_cleanup(&iface->staging.mp, 1);
    }
}

/**
 * The staging pool of an hcr interface, for in-tree protocols (NULL when the
 * interface is not hcr or the pool is disabled).
 */
uct_hcr_staging_t *uct_hcr_iface_staging(uct_iface_h tl_iface)
{
    uct_hcr_iface_t *iface = ucs_derived_of(tl_iface, uct_hcr_iface_t);

    if ((tl_iface->ops.ep_put_short != uct_hcr_ep_put_short) ||
        (iface->staging.count == 0)) {
        return NULL;
    }

    return &iface->staging;
}

uct_hcr_staging_buf_t *uct_hcr_staging_get(uct_hcr_staging_t *staging)
{
    return (uct_hcr_staging_buf_t*)ucs_mpool_get(&staging->mp);
}

void uct_hcr_staging_put(uct_hcr_staging_buf_t *buf)
{
    ucs_mpool_put(buf);
}
