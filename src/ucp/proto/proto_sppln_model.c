/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "proto_sppln.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_worker.h>
#include <ucs/calib/calib.h>
#include <ucs/config/field_types.h>
#include <ucs/memory/rcache_int.h>
#include <ucs/sys/sys.h>
#include <ucs/datastruct/khash.h>
#include <ucm/api/ucm.h>
#include <sys/mman.h>
#include <pthread.h>
#include <math.h>


/*
 * The choice per message, and the schedule of the staged paths, from the
 * measured cost model of the lane's device.
 */

const char *ucp_sppln_path_names[] = {
    [UCP_SPPLN_PATH_AUTO]  = "auto",
    [UCP_SPPLN_PATH_BCOPY] = "bcopy",
    [UCP_SPPLN_PATH_SPPLN] = "sppln",
    [UCP_SPPLN_PATH_ZCOPY] = "zcopy",
    [UCP_SPPLN_PATH_LAST]  = NULL
};

const char *ucp_sppln_fresh_names[] = {
    [UCP_SPPLN_FRESH_KCOPY]    = "kcopy",
    [UCP_SPPLN_FRESH_POPULATE] = "populate",
    [UCP_SPPLN_FRESH_FAULT]    = "fault",
    [UCP_SPPLN_FRESH_LAST]     = NULL
};

static ucs_config_field_t ucp_sppln_config_table[] = {
        {"ENABLE", "try",
         "Offer the rndv/sppln rendezvous protocol (per-message choice "
         "between\n"
         "bcopy through staging, a superpipelined copy, and registration +\n"
         "zero-copy, from the measured costs of the device).",
         ucs_offsetof(ucp_sppln_config_t, enable), UCS_CONFIG_TYPE_TERNARY},

        {"TLS", "hcr",
         "Transports on whose lanes rndv/sppln runs, or \"all\" for any lane\n"
         "with put zero-copy. On lanes without uct_ep_put_notify_zcopy() each\n"
         "put is followed by an active message ordered after it.",
         ucs_offsetof(ucp_sppln_config_t, tls), UCS_CONFIG_TYPE_STRING_ARRAY},

        {"PATH", "auto",
         "How rndv/sppln moves a message:\n"
         " auto  - a buffer found in the registration cache goes zero-copy; "
         "else\n"
         "         the measured critical sizes choose bcopy, sppln or zcopy.\n"
         " bcopy - copy through the staging buffers in fixed chunks.\n"
         " sppln - superpipelined copy through the staging buffers.\n"
         " zcopy - register the buffer and send it with UCX's rendezvous.",
         ucs_offsetof(ucp_sppln_config_t, path),
         UCS_CONFIG_TYPE_ENUM(ucp_sppln_path_names)},

        {"THRESH", "auto",
         "Message size from which rndv/sppln takes over from the other\n"
         "protocols (it sends buffers in the registration cache, or sent\n"
         "before, with UCX's rendezvous). auto: the measured C_0, the bytes\n"
         "copied during a rendezvous round trip, from which a staged first "
         "send\n"
         "hides its first copy in the round trip (at least 16k).",
         ucs_offsetof(ucp_sppln_config_t, thresh),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"SLOT_SIZE", "1m",
         "Bytes per staging slot: the largest chunk. Each transfer uses three\n"
         "slots on each side (triple buffering).",
         ucs_offsetof(ucp_sppln_config_t, slot_size),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"SUB_SIZE", "auto",
         "Bytes per notified put: the receiver copies a sub-block out as soon\n"
         "as its notification arrives. auto: the measured size on whose wire\n"
         "time the put's own cost (the network's gap) is about 1/32\n"
         "(ucx_hcr_calib shows it; 64k without a model), at most a slot.",
         ucs_offsetof(ucp_sppln_config_t, sub_size),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"GROUPS", "4",
         "Transfers that can be staged at once per worker and direction; the\n"
         "staging regions are GROUPS x 3 x SLOT_SIZE bytes each, registered "
         "once.",
         ucs_offsetof(ucp_sppln_config_t, groups), UCS_CONFIG_TYPE_COUNT},

        {"C0", "auto",
         "First chunk of the superpipeline. auto: the measured C_0 (the bytes\n"
         "copied during a rendezvous round trip), or an eighth of the message\n"
         "if more.",
         ucs_offsetof(ucp_sppln_config_t, c0), UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"Q", "0",
         "Growth ratio of the superpipeline's chunks. 0: the measured\n"
         "q = copy bandwidth / network bandwidth, at least 2 (chunks double\n"
         "where copies are not twice as fast as the network).",
         ucs_offsetof(ucp_sppln_config_t, q), UCS_CONFIG_TYPE_DOUBLE_STRICT},

        {"COPY_ASYNC", "auto",
         "The sender stages chunks with the asynchronous copy engine instead "
         "of\n"
         "copying them itself, so that it posts puts and progresses while the\n"
         "next chunks are copied. The receiver copies out itself.\n"
         " y    - with the backend of UCX_COPY_ENGINE.\n"
         " n    - never.\n"
         " auto - when the measured model of the lane's device names a "
         "backend\n"
         "        (of those UCX_COPY_ENGINE allows) that hides at least "
         "half\n"
         "        of the copy time net of the CPU time of its own threads, "
         "and\n"
         "        keeps up with the copy by the sender (ucx_hcr_calib shows "
         "it).\n"
         "        A helper thread only gains on cores that would be idle, "
         "which\n"
         "        the model does not assume.",
         ucs_offsetof(ucp_sppln_config_t, copy_async),
         UCS_CONFIG_TYPE_TERNARY_AUTO},

        {"FRESH_COPY", "kcopy",
         "How the receiver copies into a receive buffer whose pages were "
         "never\n"
         "touched (a page fault per page costs 10-12 us on these virtual\n"
         "machines, against 1-2 us when the kernel faults the pages in):\n"
         " kcopy    - the kernel copies, with process_vm_writev() into this\n"
         "            process, and faults the pages in as it goes, the way it\n"
         "            does for a zero-copy receive; falls back to populate\n"
         "            where the call is not allowed.\n"
         " populate - madvise(MADV_POPULATE_WRITE) (Linux 5.14), then memcpy;\n"
         "            falls back to fault where the kernel lacks it.\n"
         " fault    - memcpy, one page fault per page.",
         ucs_offsetof(ucp_sppln_config_t, fresh_copy),
         UCS_CONFIG_TYPE_ENUM(ucp_sppln_fresh_names)},

        {NULL}};

UCS_CONFIG_REGISTER_TABLE(ucp_sppln_config_table,
                          "Superpipelined rendezvous (rndv/sppln)",
                          "HCR_SPPLN_", ucp_sppln_config_t,
                          &ucs_config_global_list)


/* chunks grow at least not at all, and at most this fast: the third slot
 * must still be worth filling while the first two are in flight */
#define UCP_SPPLN_Q_MIN 1.0
#define UCP_SPPLN_Q_MAX 16.0


static ucp_sppln_config_t ucp_sppln_cfg;
static pthread_once_t ucp_sppln_cfg_once = PTHREAD_ONCE_INIT;
static int ucp_sppln_cfg_valid;


int ucp_sppln_geometry_valid(size_t slot_size, size_t sub_size)
{
    return (sub_size >= UCS_KBYTE) && (sub_size <= slot_size) &&
           ((slot_size / sub_size) < UCS_BIT(UCP_SPPLN_SUB_BITS));
}

static void ucp_sppln_config_read(void)
{
    char slot_str[32], sub_str[32];
    ucs_status_t status;

    status = ucs_config_parser_fill_opts(&ucp_sppln_cfg,
                                         ucp_sppln_config_table,
                                         UCS_DEFAULT_ENV_PREFIX, "HCR_SPPLN_",
                                         0);
    if (status != UCS_OK) {
        return;
    }

    if ((ucp_sppln_cfg.slot_size < UCS_KBYTE) ||
        (ucp_sppln_cfg.slot_size > UINT32_MAX) ||
        ((ucp_sppln_cfg.sub_size != UCS_MEMUNITS_AUTO) &&
         !ucp_sppln_geometry_valid(ucp_sppln_cfg.slot_size,
                                   ucp_sppln_cfg.sub_size)) ||
        (ucp_sppln_cfg.groups == 0) ||
        (ucp_sppln_cfg.groups > UCP_SPPLN_MAX_GROUPS)) {
        /* sizes as given: "auto" and "inf", not their numeric codes */
        ucs_memunits_to_str(ucp_sppln_cfg.slot_size, slot_str,
                            sizeof(slot_str));
        ucs_memunits_to_str(ucp_sppln_cfg.sub_size, sub_str, sizeof(sub_str));
        ucs_error("UCX_HCR_SPPLN_*: invalid staging geometry (slot %s, "
                  "sub-block %s, groups %u): need 1k <= SUB_SIZE <= "
                  "SLOT_SIZE < 4g and 1 <= GROUPS <= %lu; rndv/sppln disabled",
                  slot_str, sub_str, ucp_sppln_cfg.groups,
                  UCP_SPPLN_MAX_GROUPS);
        return;
    }

    if ((ucp_sppln_cfg.q != 0) && ((ucp_sppln_cfg.q < UCP_SPPLN_Q_MIN) ||
                                   (ucp_sppln_cfg.q > UCP_SPPLN_Q_MAX))) {
        ucs_error("UCX_HCR_SPPLN_Q=%g: need 0 (measured) or %g to %g; "
                  "rndv/sppln disabled",
                  ucp_sppln_cfg.q, UCP_SPPLN_Q_MIN, UCP_SPPLN_Q_MAX);
        return;
    }

    ucp_sppln_cfg_valid = 1;
}

const ucp_sppln_config_t *ucp_sppln_config(void)
{
    pthread_once(&ucp_sppln_cfg_once, ucp_sppln_config_read);
    return ucp_sppln_cfg_valid ? &ucp_sppln_cfg : NULL;
}

/* The next chunk of a schedule: chunk bytes wanted (growing by q), whole
 * pages, at most a slot and what is left. Its sub-blocks start at
 * k * sub_size in its slot; the last one may be shorter. */
static size_t ucp_sppln_sched_step(double *chunk, double q, size_t slot_size,
                                   size_t left)
{
    size_t size = ucs_min((size_t)*chunk, slot_size);

    /* at least a page, whatever C_0 and q a peer sent */
    size    = ucs_min(ucs_align_up(ucs_max(size, 1), UCP_SPPLN_CHUNK_ALIGN),
                      slot_size);
    /* no larger than a slot: grown without a bound, it would pass what a
     * size_t holds after some 50 chunks, and convert to nonsense */
    *chunk = ucs_min(*chunk * q, (double)slot_size);
    return ucs_min(size, left);
}

size_t ucp_sppln_sched_chunk(size_t length, size_t offset, size_t c0,
                             double q, size_t slot_size)
{
    double chunk = c0;
    size_t pos   = 0;
    size_t size;

    ucs_assert(offset < length);
    do {
        size = ucp_sppln_sched_step(&chunk, q, slot_size, length - pos);
        pos += size;
    } while ((pos <= offset) && (size > 0));

    return size;
}

size_t ucp_sppln_first_chunk(const ucp_sppln_priv_t *spriv, size_t length)
{
    const ucp_sppln_config_t *cfg = ucp_sppln_config();

    /* at most a slot: a chunk is no larger, and the RTS carries 32 bits */
    return (cfg->c0 != UCS_MEMUNITS_AUTO) ?
           ucs_min(spriv->c0, cfg->slot_size) :
           ucs_min(ucs_calib_sp_first(spriv->c0, length), cfg->slot_size);
}

ucs_status_t ucp_sppln_sched_init(ucp_sppln_sched_t *sched, size_t length,
                                  ucp_sppln_path_t path, size_t c0, double q,
                                  size_t slot_size, size_t sub_size)
{
    double chunk;
    unsigned n;
    size_t offset;

    if (path == UCP_SPPLN_PATH_BCOPY) {
        c0 = slot_size;
        q  = 1.0;
    }

    /* count the chunks, then note where each starts */
    for (n = 0, offset = 0, chunk = c0; offset < length; ++n) {
        offset += ucp_sppln_sched_step(&chunk, q, slot_size, length - offset);
    }

    sched->length   = length;
    sched->c0       = c0;
    sched->q        = q;
    sched->sub_size = sub_size;
    sched->n_chunks = n;
    sched->offset   = ucs_malloc(sizeof(*sched->offset) * (n + 1),
                                 "sppln_sched");
    if (sched->offset == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (n = 0, offset = 0, chunk = c0; offset < length; ++n) {
        sched->offset[n] = offset;
        offset          += ucp_sppln_sched_step(&chunk, q, slot_size,
                                                length - offset);
    }
    sched->offset[n] = length;
    return UCS_OK;
}

void ucp_sppln_sched_cleanup(ucp_sppln_sched_t *sched)
{
    ucs_free(sched->offset);
    sched->offset = NULL;
}

/* Whether UCX_HCR_SPPLN_TLS enables the transport of this resource */
int ucp_sppln_lane_tl_enabled(ucp_context_h context, ucp_rsc_index_t rsc_index)
{
    const ucp_sppln_config_t *cfg = ucp_sppln_config();
    const char *tl_name = context->tl_rscs[rsc_index].tl_rsc.tl_name;
    unsigned i;

    for (i = 0; i < cfg->tls.count; ++i) {
        if (!strcmp(cfg->tls.names[i], "all") ||
            !strcmp(cfg->tls.names[i], tl_name)) {
            return 1;
        }
    }
    return 0;
}

/* Whether the UCP registration cache holds all of [buffer, buffer+length)
 * already: a peek at its page table, without taking a reference. An unmap
 * that found the page table busy is queued and removed from it only at the
 * cache's next operation, so while the queue is not empty a region in the
 * table may be stale (its range unmapped, maybe mapped again fresh): then
 * nothing counts as a hit. */
int ucp_sppln_rcache_hit(ucp_context_h context, const void *buffer,
                         size_t length)
{
    ucs_rcache_t *rcache = context->rcache;
    ucs_pgt_region_t *pgt_region;
    ucs_rcache_region_t *region;
    int hit = 0;
    int stale;

    if (rcache == NULL) {
        return 0;
    }

    pthread_rwlock_rdlock(&rcache->pgt_lock);
    ucs_spin_lock(&rcache->lock);
    stale = !ucs_queue_is_empty(&rcache->inv_q);
    ucs_spin_unlock(&rcache->lock);
    pgt_region = stale ? NULL :
                 ucs_pgtable_lookup(&rcache->pgtable, (uintptr_t)buffer);
    if (pgt_region != NULL) {
        region = ucs_derived_of(pgt_region, ucs_rcache_region_t);
        hit    = (region->flags & UCS_RCACHE_REGION_FLAG_REGISTERED) &&
                 (region->super.end >= ((uintptr_t)buffer + length));
    }
    pthread_rwlock_unlock(&rcache->pgt_lock);
    return hit;
}

/*
 * Buffers staged once: a small direct-mapped table of (address, length).
 *
 * A range that is unmapped may come back, fresh and non-resident, at the
 * same address (mmap reuses it at once), so the table forgets every entry
 * the unmapped range overlaps. The event may come from any thread while the
 * worker's thread reads the table; an entry torn by that race can only
 * change which path one send takes, never what it sends. Without memory
 * events (UCX_MEM_EVENTS=n) the table is not used: every buffer the cache
 * does not hold is judged by its size and residency.
 */
static void ucp_sppln_staged_unmapped(ucm_event_type_t event_type,
                                      ucm_event_t *event, void *arg)
{
    ucp_sppln_worker_t *sw = arg;
    uintptr_t start        = (uintptr_t)event->vm_unmapped.address;
    uintptr_t end          = start + event->vm_unmapped.size;
    ucp_sppln_staged_t *entry;
    uintptr_t address;

    for (entry = sw->staged; entry < sw->staged + UCP_SPPLN_STAGED_HASH;
         ++entry) {
        address = __atomic_load_n(&entry->address, __ATOMIC_RELAXED);
        if ((address != 0) && (address < end) &&
            ((address + entry->length) > start)) {
            __atomic_store_n(&entry->address, 0, __ATOMIC_RELAXED);
        }
    }
}

void ucp_sppln_staged_track(ucp_sppln_worker_t *sw)
{
    ucs_status_t status;

    status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 0,
                                   ucp_sppln_staged_unmapped, sw);
    if (status != UCS_OK) {
        ucs_debug("rndv/sppln: no memory events (%s): a buffer sent before "
                  "is not told from a fresh one at its address",
                  ucs_status_string(status));
        return;
    }
    sw->staged_tracked = 1;
}

void ucp_sppln_staged_untrack(ucp_sppln_worker_t *sw)
{
    if (sw->staged_tracked) {
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED,
                                ucp_sppln_staged_unmapped, sw);
        sw->staged_tracked = 0;
    }
}

/* Whether this buffer was staged before (and remember it if not) */
int ucp_sppln_staged_before(ucp_sppln_worker_t *sw, const void *buffer,
                            size_t length)
{
    uintptr_t address = (uintptr_t)buffer;
    ucp_sppln_staged_t *entry;

    if (!sw->staged_tracked) {
        return 0;
    }

    entry = &sw->staged[kh_int64_hash_func((address * 31) ^ length) %
                        UCP_SPPLN_STAGED_HASH];
    if ((__atomic_load_n(&entry->address, __ATOMIC_RELAXED) == address) &&
        (entry->length == length)) {
        return 1;
    }

    entry->length = length;
    __atomic_store_n(&entry->address, address, __ATOMIC_RELAXED);
    return 0;
}

ucs_calib_pages_t ucp_sppln_pages(const void *buffer)
{
    size_t page    = ucs_get_page_size();
    void *first    = (void*)ucs_align_down((uintptr_t)buffer, page);
    unsigned char vec;

    if ((mincore(first, page, &vec) == 0) && (vec & 1)) {
        return UCS_CALIB_PAGES_RESIDENT;
    }
    return UCS_CALIB_PAGES_NONRESIDENT;
}

ucp_sppln_path_t ucp_sppln_choose(ucp_worker_h worker, ucp_sppln_worker_t *sw,
                                  const ucp_sppln_priv_t *spriv,
                                  const void *buffer, size_t length)
{
    const ucp_sppln_config_t *cfg = ucp_sppln_config();
    ucs_calib_pages_t pages;

    if (cfg->path != UCP_SPPLN_PATH_AUTO) {
        return cfg->path;
    }

    if (ucp_sppln_rcache_hit(worker->context, buffer, length)) {
        return UCP_SPPLN_PATH_ZCOPY;
    }

    /* a buffer sent before is likely to be sent again: register it now, so
     * that its next sends hit the cache; a first send is staged */
    if (ucp_sppln_staged_before(sw, buffer, length)) {
        return UCP_SPPLN_PATH_ZCOPY;
    }

    if (!spriv->have_model) {
        return UCP_SPPLN_PATH_SPPLN;
    }

    pages = ucp_sppln_pages(buffer);
    if (length >= spriv->derived.zcopy_thresh[pages]) {
        return UCP_SPPLN_PATH_ZCOPY;
    } else if (length >= spriv->derived.sp_thresh) {
        return UCP_SPPLN_PATH_SPPLN;
    }
    return UCP_SPPLN_PATH_BCOPY;
}

/* Whether the copy engine stages the sender's chunks, and with which
 * backend (UCS_COPY_BACKEND_AUTO: the one UCX_COPY_ENGINE names) */
static void ucp_sppln_copy_backend(ucp_sppln_priv_t *spriv,
                                   const ucp_sppln_config_t *cfg)
{
    ucs_status_t status;

    spriv->copy_async   = (cfg->copy_async != UCS_NO);
    spriv->copy_backend = UCS_COPY_BACKEND_AUTO;
    if (cfg->copy_async != UCS_AUTO) {
        return;
    }

    /* most bytes of a large message travel in full slots */
    status = spriv->have_model ?
             ucs_calib_engine_choose(&spriv->model,
                                     ucs_copy_engine_config_backend(),
                                     cfg->slot_size, &spriv->copy_backend) :
             UCS_ERR_UNSUPPORTED;
    spriv->copy_async = (status == UCS_OK);
    ucs_debug("rndv/sppln: the %s stages %zu-byte chunks with %s",
              spriv->have_model ? "measured model" : "lack of a model",
              cfg->slot_size, spriv->copy_async ?
              ucs_copy_backend_name(spriv->copy_backend) :
              "the sender's own copy");
}

void ucp_sppln_priv_model(ucp_sppln_priv_t *spriv, const char *dev_name,
                          size_t max_put)
{
    const ucp_sppln_config_t *cfg = ucp_sppln_config();
    char dev[UCS_CALIB_DEV_NAME_MAX];
    size_t max_sub;
    char *colon;

    /* models are per device; md names may carry a suffix */
    ucs_strncpy_zero(dev, dev_name, sizeof(dev));
    colon = strchr(dev, ':');
    if (colon != NULL) {
        *colon = '\0';
    }

    spriv->have_model = (ucs_calib_find(dev, &spriv->model, NULL) == UCS_OK);
    if (spriv->have_model) {
        ucs_calib_derive(&spriv->model, &spriv->derived);
        spriv->c0       = spriv->derived.sp_c0;
        spriv->q        = spriv->derived.sp_q;
        spriv->sub_size = spriv->derived.sp_sub;
    } else {
        /* no measurement (UCX_CALIB_MODE=off, or not an IB device) */
        spriv->c0       = 64 * UCS_KBYTE;
        spriv->q        = 2.0;
        spriv->sub_size = 64 * UCS_KBYTE;
    }

    if (cfg->c0 != UCS_MEMUNITS_AUTO) {
        spriv->c0 = cfg->c0;
    }
    if (cfg->q > 0) {
        spriv->q = cfg->q;
    }
    if (cfg->sub_size != UCS_MEMUNITS_AUTO) {
        spriv->sub_size = cfg->sub_size;
    } else {
        /* the measured size, within a slot and a put the lane can do (the
         * lane puts at least UCP_SPPLN_SUB_MIN) */
        max_sub         = ucs_min(max_put, UCS_GBYTE);
        max_sub         = ucs_min(ucs_rounddown_pow2(max_sub),
                                  cfg->slot_size);
        spriv->sub_size = ucs_min(spriv->sub_size, max_sub);
        spriv->sub_size = ucs_max(spriv->sub_size,
                                  ucs_min(UCP_SPPLN_SUB_MIN, max_sub));
    }

    spriv->q = ucs_min(ucs_max(spriv->q, UCP_SPPLN_Q_MIN), UCP_SPPLN_Q_MAX);
    /* the receiver builds its schedule from the ratio in the RTS: the
     * sender must build its own from the same, rounded, value, or the
     * chunk boundaries of the two sides part after a few chunks */
    spriv->q = (uint32_t)(spriv->q * UCP_SPPLN_Q_WIRE_SCALE) /
               UCP_SPPLN_Q_WIRE_SCALE;

    ucp_sppln_copy_backend(spriv, cfg);
}

/* Modelled time of a staged transfer: both copies, overlapped with the
 * network by the superpipeline, or one after another for fixed chunks */
static double ucp_sppln_model_time(const ucp_sppln_priv_t *spriv, size_t length,
                                   ucp_sppln_path_t path)
{
    const ucs_calib_model_t *model = &spriv->model;
    ucs_calib_derived_t derived    = spriv->derived;
    double copy;

    switch (path) {
    case UCP_SPPLN_PATH_ZCOPY:
        /* register and deregister on both sides, then one transfer */
        return 2 * ucs_calib_reg_time(model, length,
                                      UCS_CALIB_PAGES_NONRESIDENT) +
               model->net_latency + (length / model->net_bw);
    case UCP_SPPLN_PATH_SPPLN:
        derived.sp_c0 = spriv->c0;
        derived.sp_q  = spriv->q;
        derived.sp_sub = spriv->sub_size;
        return ucs_calib_sp_time(model, &derived, length);
    default:
        copy = ucs_calib_copy_time(model, length, UCS_CALIB_PAGES_RESIDENT);
        return 2 * copy + model->net_latency + (length / model->net_bw);
    }
}

void ucp_sppln_perf(const ucp_sppln_priv_t *spriv, ucp_proto_caps_t *caps,
                    double ctrl_time)
{
    static const char *names[] = {
        [UCP_SPPLN_PATH_BCOPY] = "sppln/bcopy",
        [UCP_SPPLN_PATH_SPPLN] = "sppln/superpipeline",
        [UCP_SPPLN_PATH_ZCOPY] = "sppln/reg+zcopy"
    };
    size_t bounds[UCP_SPPLN_PATH_LAST];
    ucp_sppln_path_t path;
    size_t lo, hi;
    double t_lo, t_hi;
    unsigned i;

    if (!spriv->have_model) {
        return; /* keep the estimate of UCX's rendezvous */
    }

    /* ranges end where the measured critical sizes are, for a buffer that
     * is not in the registration cache and not resident (first send) */
    bounds[UCP_SPPLN_PATH_BCOPY] = spriv->derived.sp_thresh;
    bounds[UCP_SPPLN_PATH_SPPLN] =
            spriv->derived.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT];
    bounds[UCP_SPPLN_PATH_ZCOPY] = SIZE_MAX;

    caps->num_ranges = 0;
    lo               = caps->min_length;
    for (path = UCP_SPPLN_PATH_BCOPY; path < UCP_SPPLN_PATH_LAST; ++path) {
        hi = ucs_max(bounds[path], lo + 1);
        if ((path != UCP_SPPLN_PATH_ZCOPY) && (bounds[path] <= lo)) {
            continue;
        }

        /* a line through the model's times at the ends of the range */
        hi   = ucs_min(hi - 1, (size_t)UCS_GBYTE);
        t_lo = ucp_sppln_model_time(spriv, ucs_max(lo, 1), path);
        t_hi = ucp_sppln_model_time(spriv, ucs_max(hi, lo + 1), path);

        i = caps->num_ranges++;
        caps->ranges[i].name       = names[path];
        caps->ranges[i].max_length = ((path == UCP_SPPLN_PATH_ZCOPY) ||
                                      (bounds[path] == SIZE_MAX)) ?
                                     SIZE_MAX : bounds[path] - 1;
        caps->ranges[i].perf[UCP_PROTO_PERF_TYPE_SINGLE].m =
                (t_hi - t_lo) / (double)(ucs_max(hi, lo + 1) - ucs_max(lo, 1));
        caps->ranges[i].perf[UCP_PROTO_PERF_TYPE_SINGLE].c =
                ctrl_time + t_lo -
                caps->ranges[i].perf[UCP_PROTO_PERF_TYPE_SINGLE].m *
                        ucs_max(lo, 1);
        caps->ranges[i].perf[UCP_PROTO_PERF_TYPE_MULTI] =
                caps->ranges[i].perf[UCP_PROTO_PERF_TYPE_SINGLE];
        lo = bounds[path];
        if (caps->ranges[i].max_length == SIZE_MAX) {
            break;
        }
    }
}

/* The values are read at first use, so that a process can still set them
 * before it creates its first endpoint; a worker notes them as used when it
 * starts, before UCP warns about unused variables (parsing notes them; its
 * errors are reported at the first use) */
void ucp_proto_sppln_config_mark_used(void)
{
    ucp_sppln_config_t config;

    if (ucs_config_parser_fill_opts(&config, ucp_sppln_config_table,
                                    UCS_DEFAULT_ENV_PREFIX, "HCR_SPPLN_",
                                    1) == UCS_OK) {
        ucs_config_parser_release_opts(&config, ucp_sppln_config_table);
    }
}
