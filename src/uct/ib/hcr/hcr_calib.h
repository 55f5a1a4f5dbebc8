/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_HCR_CALIB_H_
#define UCT_HCR_CALIB_H_

#include <uct/ib/base/ib_md.h>
#include <ucs/calib/calib.h>


/**
 * The cost model of an md's device: this process' earlier result, the
 * per-host cache, or a measurement with the device's own verbs.
 */
ucs_status_t uct_hcr_calib_get(uct_ib_md_t *md, ucs_calib_model_t *model,
                               ucs_calib_source_t *source_p);


/**
 * uct_ib_md_open_hook: measure the device; with direct registration, replace
 * the md's constant reg_cost with the measured one (UCX_CALIB_MODE=off
 * keeps it; with a registration cache, the md keeps the lookup cost).
 */
void uct_hcr_calib_md_open(uct_ib_md_t *md);

#endif
