/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_PROTO_SPPLN_CONFIG_H_
#define UCP_PROTO_SPPLN_CONFIG_H_

#include <ucs/config/parser.h>


/* How a staged protocol moves a message */
typedef enum {
    UCP_SPPLN_PATH_AUTO, /* configuration only: choose per message */
    UCP_SPPLN_PATH_BCOPY, /* staging, fixed chunks of the slot size */
    UCP_SPPLN_PATH_SPPLN, /* staging, geometric chunks */
    UCP_SPPLN_PATH_ZCOPY, /* register, UCX's own protocol */
    UCP_SPPLN_PATH_LAST
} ucp_sppln_path_t;


/* How the receiver copies into destination pages nobody touched yet */
typedef enum {
    UCP_SPPLN_FRESH_KCOPY, /* the kernel copies (process_vm_writev into
                                 our own process), faulting pages in as it
                                 goes */
    UCP_SPPLN_FRESH_POPULATE, /* the kernel populates the pages
                                 (MADV_POPULATE_WRITE), then memcpy */
    UCP_SPPLN_FRESH_FAULT, /* memcpy, taking a page fault per page */
    UCP_SPPLN_FRESH_UFFD, /* the kernel fills the pages with the data
                                 (userfaultfd's UFFDIO_COPY): no zeroing,
                                 no second pass */
    UCP_SPPLN_FRESH_LAST
} ucp_sppln_fresh_t;


/*
 * Settings of the staged protocols (UCX_RNDV_SPPLN_*): rndv/sppln, and the
 * per-message choice of put/choose and get/choose. Part of UCP's context
 * configuration (ucp_config_read(), ucx_info -c).
 */
typedef struct {
    int enable; /* ternary: offer the protocols */
    ucs_config_names_array_t tls; /* transports whose lanes they run
                                            on */
    ucp_sppln_path_t path; /* forced path, or auto */
    size_t thresh; /* from this size on, or auto */
    size_t slot_size; /* bytes per staging slot */
    size_t sub_size; /* bytes per notified sub-block, or
                                            auto */
    unsigned groups; /* transfers staged at once per
                                            worker and direction */
    size_t c0; /* first chunk, or auto */
    double q; /* growth ratio, or 0 for auto */
    int copy_async; /* ternary-auto: the sender stages
                                            chunks with the copy engine */
    ucp_sppln_fresh_t fresh_copy; /* receiver: how it copies into
                                            untouched destination pages */
    int fresh_ahead; /* receiver: fault an untouched
                                            destination in ahead of the
                                            data, all of it */
    int fresh_thp; /* receiver: ask for transparent huge
                                            pages where the message fills
                                            them */
    int fresh_collapse; /* receiver: have the kernel build
                                            a huge page for each piece the
                                            message fills whole */
    size_t fresh_uffd_min; /* receiver, fresh_copy uffd: the
                                            fewest bytes of whole pages a
                                            destination registers */
    size_t fresh_uffd_ahead; /* ... the bytes it faults in ahead
                                instead (UCS_MEMUNITS_AUTO: by the model) */
} ucp_sppln_config_t;


extern ucs_config_field_t ucp_sppln_config_table[];


/**
 * Check the settings that depend on each other (the staging geometry, the
 * growth ratio): a bad combination disables the staged protocols, with one
 * error that says why.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM (then @a config->enable is
 *         UCS_NO).
 */
ucs_status_t ucp_sppln_config_check(ucp_sppln_config_t *config);

#endif
