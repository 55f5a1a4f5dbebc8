/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "proto_sppln_model.h"

#include <ucp/core/ucp_context.h>
#include <ucs/config/field_types.h>
#include <ucs/datastruct/khash.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucm/api/ucm.h>
#include <math.h>
#include <sys/mman.h>


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

const char *ucp_sppln_fresh_names[] = {[UCP_SPPLN_FRESH_KCOPY]    = "kcopy",
                                       [UCP_SPPLN_FRESH_POPULATE] = "populate",
                                       [UCP_SPPLN_FRESH_FAULT]    = "fault",
                                       [UCP_SPPLN_FRESH_UFFD]     = "uffd",
                                       [UCP_SPPLN_FRESH_LAST]     = NULL};


/* chunks grow at least not at all, and at most this fast: the third slot
 * must still be worth filling while the first two are in flight */
#define UCP_SPPLN_Q_MIN 1.0
#define UCP_SPPLN_Q_MAX 16.0

/* without a measured model: a superpipeline of 64 KiB puts, doubling */
#define UCP_SPPLN_DEFAULT_C0  (64 * UCS_KBYTE)
#define UCP_SPPLN_DEFAULT_Q   2.0
#define UCP_SPPLN_DEFAULT_SUB (64 * UCS_KBYTE)

/* the old names of the settings, UCX_HCR_SPPLN_* */
#define UCP_SPPLN_RENAMED(_name, _dfl, _field, ...)                            \
    UCS_CONFIG_RENAMED_FIELD("HCR_SPPLN_" _name, "RNDV_SPPLN_" _name, _dfl,    \
                             ucs_offsetof(ucp_sppln_config_t, _field),         \
                             __VA_ARGS__)


ucs_config_field_t ucp_sppln_config_table[] = {
        /* the names of ucx-hcr 0.x, until the next release */
        UCP_SPPLN_RENAMED("ENABLE", "try", enable, UCS_CONFIG_TYPE_TERNARY),
        UCP_SPPLN_RENAMED("TLS", "hcr", tls, UCS_CONFIG_TYPE_STRING_ARRAY),
        UCP_SPPLN_RENAMED("PATH", "auto", path,
                          UCS_CONFIG_TYPE_ENUM(ucp_sppln_path_names)),
        UCP_SPPLN_RENAMED("THRESH", "auto", thresh,
                          UCS_CONFIG_TYPE_MEMUNITS_STRICT),
        UCP_SPPLN_RENAMED("SLOT_SIZE", "1m", slot_size,
                          UCS_CONFIG_TYPE_MEMUNITS_STRICT),
        UCP_SPPLN_RENAMED("SUB_SIZE", "auto", sub_size,
                          UCS_CONFIG_TYPE_MEMUNITS_STRICT),
        UCP_SPPLN_RENAMED("GROUPS", "4", groups, UCS_CONFIG_TYPE_COUNT),
        UCP_SPPLN_RENAMED("C0", "auto", c0, UCS_CONFIG_TYPE_MEMUNITS_STRICT),
        UCP_SPPLN_RENAMED("Q", "auto", q, UCS_CONFIG_TYPE_DOUBLE_AUTO_STRICT),
        UCP_SPPLN_RENAMED("COPY_ASYNC", "auto", copy_async,
                          UCS_CONFIG_TYPE_TERNARY_AUTO),
        UCP_SPPLN_RENAMED("FRESH_COPY", "uffd", fresh_copy,
                          UCS_CONFIG_TYPE_ENUM(ucp_sppln_fresh_names)),

        {"RNDV_SPPLN_ENABLE", "try",
         "Offer the staged protocols: rndv/sppln, a rendezvous that chooses "
         "per\n"
         "message between bcopy through pre-registered staging buffers, a\n"
         "superpipelined copy through them, and UCX's own zero-copy, from the\n"
         "measured costs of the device (ucx_hcr_calib shows them); and\n"
         "put/choose and get/choose, the same choice for RMA. A receiver "
         "always\n"
         "takes a staged message, whatever this setting. try and yes: offer "
         "them\n"
         "on the lanes of UCX_RNDV_SPPLN_TLS that can carry them, and UCX's "
         "own\n"
         "protocols elsewhere (neither fails where none can); no: UCX's own\n"
         "protocols only.",
         ucs_offsetof(ucp_sppln_config_t, enable), UCS_CONFIG_TYPE_TERNARY},

        {"RNDV_SPPLN_TLS", "hcr",
         "Transports on whose lanes the staged protocols run, or \"all\" for "
         "any\n"
         "lane with put zero-copy. On lanes without uct_ep_put_notify_zcopy()\n"
         "each put of the superpipeline is followed by an active message "
         "ordered\n"
         "after it.",
         ucs_offsetof(ucp_sppln_config_t, tls), UCS_CONFIG_TYPE_STRING_ARRAY},

        {"RNDV_SPPLN_PATH", "auto",
         "How the staged protocols move a message:\n"
         " auto  - a buffer found in the registration cache, or sent before, "
         "goes\n"
         "         zero-copy; else the measured critical sizes choose bcopy,\n"
         "         sppln or zcopy.\n"
         " bcopy - copy through the staging buffers in fixed chunks.\n"
         " sppln - superpipelined copy through the staging buffers "
         "(put/choose:\n"
         "         a staged put where it fits in a staging group, else "
         "bcopy).\n"
         " zcopy - register the buffer and send it with UCX's own protocol.",
         ucs_offsetof(ucp_sppln_config_t, path),
         UCS_CONFIG_TYPE_ENUM(ucp_sppln_path_names)},

        {"RNDV_SPPLN_THRESH", "auto",
         "Message size from which rndv/sppln takes over from the other\n"
         "protocols (it sends buffers in the registration cache, or sent\n"
         "before, with UCX's own protocol). auto: 16k, the smallest\n"
         "sub-block, with a measured model (a slot without one), or\n"
         "UCX_RNDV_THRESH where that is set (inf: eager protocols only).",
         ucs_offsetof(ucp_sppln_config_t, thresh),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RNDV_SPPLN_SLOT_SIZE", "1m",
         "Bytes per staging slot: the largest chunk. Each transfer uses three\n"
         "slots on each side (triple buffering), a staging group.",
         ucs_offsetof(ucp_sppln_config_t, slot_size),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RNDV_SPPLN_SUB_SIZE", "auto",
         "Bytes per notified put: the receiver copies a sub-block out as soon\n"
         "as its notification arrives. auto: the measured size on whose wire\n"
         "time the put's own cost (the network's gap) is about 1/32\n"
         "(ucx_hcr_calib shows it; 64k without a model), at most a slot; "
         "for\n"
         "a first send over a wire slower than the receiver's copies into new\n"
         "pages, sqrt(size * gap / copy time per byte), at most that. A slot\n"
         "holds at most 256 sub-blocks.",
         ucs_offsetof(ucp_sppln_config_t, sub_size),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RNDV_SPPLN_GROUPS", "4",
         "Transfers that can be staged at once per worker and direction (at\n"
         "most 64). Staging groups of 3 x SLOT_SIZE bytes are registered as\n"
         "transfers need them, one per side when the worker starts, up to "
         "this\n"
         "many; more transfers wait for a group.",
         ucs_offsetof(ucp_sppln_config_t, groups), UCS_CONFIG_TYPE_COUNT},

        {"RNDV_SPPLN_C0", "auto",
         "First chunk of the superpipeline. auto: the measured C_0 (the bytes\n"
         "copied during a rendezvous round trip), or an eighth of the message\n"
         "if more.",
         ucs_offsetof(ucp_sppln_config_t, c0), UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RNDV_SPPLN_Q", "auto",
         "Growth ratio q of the superpipeline's chunks: chunk i is C_0 * q^i\n"
         "bytes, so that copying chunk i+1 takes as long as sending chunk i.\n"
         "auto: the measured q = copy bandwidth / network bandwidth, at least "
         "2\n"
         "(chunks double where copies are not twice as fast as the network).\n"
         "A number: 1 (fixed chunks) to 16.",
         ucs_offsetof(ucp_sppln_config_t, q),
         UCS_CONFIG_TYPE_DOUBLE_AUTO_STRICT},

        {"RNDV_SPPLN_COPY_ASYNC", "auto",
         "The sender stages chunks with the asynchronous copy engine instead "
         "of\n"
         "copying them itself, so that it posts puts and progresses while the\n"
         "next chunks are copied. The receiver copies out itself.\n"
         " y    - with the backend of UCX_COPY_ENGINE.\n"
         " n    - never.\n"
         " auto - when the measured model of the lane's device names a "
         "backend\n"
         "        (of those UCX_COPY_ENGINE allows) that hides at least half "
         "of\n"
         "        the copy time net of the CPU time of its own threads, and "
         "keeps\n"
         "        up with the copy by the sender (ucx_hcr_calib shows it). A\n"
         "        helper thread only gains on cores that would be idle, which\n"
         "        the model does not assume.",
         ucs_offsetof(ucp_sppln_config_t, copy_async),
         UCS_CONFIG_TYPE_TERNARY_AUTO},

        {"RNDV_SPPLN_FRESH_COPY", "uffd",
         "How the receiver copies into a receive buffer whose pages were "
         "never\n"
         "touched (on a virtual machine a page fault per page can cost ten\n"
         "times what the kernel takes to fault the same pages in):\n"
         " kcopy    - the kernel copies, with process_vm_writev() into this\n"
         "            process, and faults the pages in as it goes, the way it\n"
         "            does for a zero-copy receive; falls back to populate "
         "where\n"
         "            the call is not allowed.\n"
         " populate - madvise(MADV_POPULATE_WRITE) (Linux 5.14), then memcpy;\n"
         "            falls back to fault where the kernel lacks it.\n"
         " fault    - memcpy, one page fault per page.\n"
         " uffd     - the kernel fills each whole page of the buffer with its\n"
         "            data as it lands (userfaultfd, UFFDIO_COPY, Linux "
         "5.11):\n"
         "            pages are not zeroed first and written once; what\n"
         "            UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD says is faulted in\n"
         "            ahead instead (UCX_RNDV_SPPLN_FRESH_AHEAD does not\n"
         "            apply). Until the receive completes, another thread\n"
         "            that touches a page of the buffer the data has not\n"
         "            reached yet waits for it. A buffer whose rest has fewer\n"
         "            whole pages than UCX_RNDV_SPPLN_FRESH_UFFD_MIN, or "
         "given\n"
         "            huge pages (UCX_RNDV_SPPLN_FRESH_THP, _COLLAPSE), is\n"
         "            populated; so are all where the kernel refuses a\n"
         "            user-mode userfaultfd.",
         ucs_offsetof(ucp_sppln_config_t, fresh_copy),
         UCS_CONFIG_TYPE_ENUM(ucp_sppln_fresh_names)},

        {"RNDV_SPPLN_FRESH_AHEAD", "y",
         "Whether the receiver of a staged message into a buffer whose pages\n"
         "were never touched faults all of them in ahead of the data, a\n"
         "sub-block per progress call (madvise(MADV_POPULATE_WRITE), Linux\n"
         "5.14), so that the data lands in resident pages. With n it faults "
         "in\n"
         "the first chunk only (all the staging slots hold, where the model\n"
         "says faults are slower than the network), and a sub-block that "
         "lands\n"
         "beyond is copied the way UCX_RNDV_SPPLN_FRESH_COPY says, as is any\n"
         "where faulting in ahead is not possible. A buffer that\n"
         "UCX_RNDV_SPPLN_FRESH_COPY=uffd fills is not faulted in ahead.",
         ucs_offsetof(ucp_sppln_config_t, fresh_ahead), UCS_CONFIG_TYPE_BOOL},

        {"RNDV_SPPLN_FRESH_THP", "n",
         "Whether the receiver of a staged message into a buffer whose pages\n"
         "were never touched asks for transparent huge pages\n"
         "(madvise(MADV_HUGEPAGE)) on the 2 MiB-aligned pieces the message\n"
         "fills whole, before it faults them in ahead\n"
         "(UCX_RNDV_SPPLN_FRESH_AHEAD): one fault then brings in a huge page\n"
         "instead of 512 small ones (on a virtual machine whose page faults\n"
         "each cost an exit to the hypervisor, 4 MiB in 0.1 ms instead of\n"
         "1.6-1.9). It changes the application's buffer (the range keeps the\n"
         "flag, and the kernel may compact memory to find huge pages), so it\n"
         "is off by default; where the kernel's transparent_hugepage setting\n"
         "is always, large buffers get huge pages without it.",
         ucs_offsetof(ucp_sppln_config_t, fresh_thp), UCS_CONFIG_TYPE_BOOL},

        {"RNDV_SPPLN_FRESH_COLLAPSE", "n",
         "Whether the receiver of a staged message into a buffer whose pages\n"
         "were never touched faults in each 2 MiB-aligned piece that the\n"
         "message fills whole as one transparent huge page: it faults in the\n"
         "piece's first page and has the kernel collapse the piece\n"
         "(madvise(MADV_COLLAPSE), Linux 6.1). That costs about as much as\n"
         "zeroing 2 MiB, against 512 faults in small pages (on the virtual\n"
         "machine of the benches 60 us against 500). Unlike\n"
         "UCX_RNDV_SPPLN_FRESH_THP it leaves the mapping's flags alone, so\n"
         "the mapping is not split and nothing outlives the buffer; the\n"
         "message writes every byte of the piece, so the application's\n"
         "memory does not grow. It is off by default because a collapse may\n"
         "wait for work the kernel queues on the other cores, which a core\n"
         "that busy-polls in user space runs only at its next tick (4 ms on\n"
         "the benches' VM, where a 16 MiB message takes 3). A collapse that\n"
         "takes longer than the calibration says the piece's faults in small\n"
         "pages would leaves the rest of its message and the next few to\n"
         "small pages, twice as many after each slow one in a row, at most\n"
         "64; a worker stops collapsing when the kernel refuses\n"
         "(transparent_hugepage set to never, a kernel without it).",
         ucs_offsetof(ucp_sppln_config_t, fresh_collapse),
         UCS_CONFIG_TYPE_BOOL},

        {"RNDV_SPPLN_FRESH_UFFD_MIN", "auto",
         "With UCX_RNDV_SPPLN_FRESH_COPY=uffd, the fewest bytes of whole "
         "pages\n"
         "the part of an untouched receive buffer that userfaultfd would fill\n"
         "must have; a smaller part is faulted in ahead too. Registering the\n"
         "pages and unregistering them has a fixed cost (the kernel splits\n"
         "the mapping, then merges it back) that pages filled without\n"
         "zeroing must save. auto: where the calibration says filling them\n"
         "costs less than faulting them in and copying into them\n"
         "(ucx_hcr_calib shows it; 384k without a model).",
         ucs_offsetof(ucp_sppln_config_t, fresh_uffd_min),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"RNDV_SPPLN_FRESH_UFFD_AHEAD", "auto",
         "With UCX_RNDV_SPPLN_FRESH_COPY=uffd, the bytes at the start of an\n"
         "untouched receive buffer that the receiver faults in ahead of the\n"
         "data, as populate does; userfaultfd fills the rest. auto: by the\n"
         "calibration (ucx_hcr_calib shows it), what the receiver can fault\n"
         "in while it waits for the first sub-block, which costs it nothing,\n"
         "or all of the buffer where userfaultfd's fixed cost would not pay\n"
         "(where the receiver keeps up with the wire anyway, having no staged\n"
         "sends of its own in flight, or the buffer is small), or none of it\n"
         "where the copy into faulted in pages costs more than userfaultfd's\n"
         "fill (on a virtual machine that traps the first write to each page\n"
         "from user mode); 0 without a model that has these costs. inf: all\n"
         "of it.",
         ucs_offsetof(ucp_sppln_config_t, fresh_uffd_ahead),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {NULL}};


int ucp_sppln_geometry_valid(size_t slot_size, size_t sub_size)
{
    return (sub_size >= UCS_KBYTE) && (sub_size <= slot_size) &&
           (ucs_div_round_up(slot_size, sub_size) <=
            UCS_BIT(UCP_SPPLN_SUB_BITS));
}

ucs_status_t ucp_sppln_config_check(ucp_sppln_config_t *config)
{
    char slot_str[32], sub_str[32];

    if ((config->slot_size < UCS_KBYTE) || (config->slot_size > UINT32_MAX) ||
        ((config->sub_size != UCS_MEMUNITS_AUTO) &&
         !ucp_sppln_geometry_valid(config->slot_size, config->sub_size)) ||
        (config->groups > UCP_SPPLN_MAX_GROUPS)) {
        /* sizes as given: "auto" and "inf", not their numeric codes */
        ucs_memunits_to_str(config->slot_size, slot_str, sizeof(slot_str));
        ucs_memunits_to_str(config->sub_size, sub_str, sizeof(sub_str));
        ucs_error("UCX_RNDV_SPPLN_*: invalid staging geometry (slot %s, "
                  "sub-block %s, groups %u): need 1k <= SUB_SIZE <= "
                  "SLOT_SIZE < 4g, at most %lu sub-blocks per slot and "
                  "GROUPS <= %lu; the staged protocols are disabled",
                  slot_str, sub_str, config->groups,
                  UCS_BIT(UCP_SPPLN_SUB_BITS), UCP_SPPLN_MAX_GROUPS);
        goto err;
    }

    if ((config->q != UCS_CONFIG_DBL_AUTO) &&
        ((config->q < UCP_SPPLN_Q_MIN) || (config->q > UCP_SPPLN_Q_MAX))) {
        ucs_error("UCX_RNDV_SPPLN_Q=%g: need auto or %g to %g; the staged "
                  "protocols are disabled",
                  config->q, UCP_SPPLN_Q_MIN, UCP_SPPLN_Q_MAX);
        goto err;
    }

    return UCS_OK;

err:
    config->enable = UCS_NO;
    return UCS_ERR_INVALID_PARAM;
}


/* The next chunk of a schedule: chunk bytes wanted (growing by q), whole
 * pages, at most a slot and what is left. Its sub-blocks start at
 * k * sub_size in its slot; the last one may be shorter. */
static size_t ucp_sppln_sched_step(double *chunk, double q, size_t slot_size,
                                   size_t left)
{
    size_t size = ucs_min((size_t)*chunk, slot_size);

    /* at least a page, whatever C_0 and q a peer sent */
    size = ucs_min(ucs_align_up(ucs_max(size, 1), UCP_SPPLN_CHUNK_ALIGN),
                   slot_size);
    /* no larger than a slot: grown without a bound, it would pass what a
     * size_t holds after some 50 chunks, and convert to nonsense */
    *chunk = ucs_min(*chunk * q, (double)slot_size);
    return ucs_min(size, left);
}

void ucp_sppln_sched_init(ucp_sppln_sched_t *sched, size_t length,
                          ucp_sppln_path_t path, size_t c0, double q,
                          size_t slot_size)
{
    if (path == UCP_SPPLN_PATH_BCOPY) {
        c0 = slot_size;
        q  = 1.0;
    }

    sched->length    = length;
    sched->slot_size = slot_size;
    sched->q         = q;
    sched->next      = c0;
    sched->offset    = 0;
    sched->index     = 0;
}

int ucp_sppln_sched_next(ucp_sppln_sched_t *sched, size_t *offset_p,
                         size_t *size_p)
{
    size_t size;

    if (sched->offset >= sched->length) {
        return 0;
    }

    size      = ucp_sppln_sched_step(&sched->next, sched->q, sched->slot_size,
                                     sched->length - sched->offset);
    *offset_p = sched->offset;
    *size_p   = size;
    sched->offset += size;
    ++sched->index;
    return 1;
}

unsigned ucp_sppln_sched_count(const ucp_sppln_sched_t *sched)
{
    ucp_sppln_sched_t cursor = *sched;
    size_t offset, size;
    unsigned count = 0;

    while (ucp_sppln_sched_next(&cursor, &offset, &size)) {
        ++count;
    }
    return count;
}

size_t ucp_sppln_sched_chunk(size_t length, size_t offset, size_t c0, double q,
                             size_t slot_size)
{
    ucp_sppln_sched_t sched;
    size_t pos, size;

    ucs_assert(offset < length);
    ucp_sppln_sched_init(&sched, length, UCP_SPPLN_PATH_SPPLN, c0, q,
                         slot_size);
    while (ucp_sppln_sched_next(&sched, &pos, &size) &&
           ((pos + size) <= offset)) {
    }

    return size;
}

size_t ucp_sppln_first_chunk(const ucp_sppln_config_t *config,
                             const ucp_sppln_lane_model_t *lmodel,
                             size_t length)
{
    /* at most a slot: a chunk is no larger, and the RTS carries 32 bits */
    return (config->c0 != UCS_MEMUNITS_AUTO) ?
                   ucs_min(lmodel->c0, config->slot_size) :
                   ucs_min(ucs_calib_sp_first(lmodel->c0, length),
                           config->slot_size);
}

/* The smallest sub-block: UCP_SPPLN_SUB_MIN, or the largest put max_sub if
 * less, and no fewer bytes than a slot's 2^UCP_SPPLN_SUB_BITS sub-blocks
 * cover */
static size_t
ucp_sppln_sub_min(const ucp_sppln_config_t *config, size_t max_sub)
{
    return ucs_max(ucs_min(UCP_SPPLN_SUB_MIN, max_sub),
                   ucs_div_round_up(config->slot_size,
                                    UCS_BIT(UCP_SPPLN_SUB_BITS)));
}

/*
 * A first send's receiver most likely has new pages too: it copies each
 * sub-block into them as it lands, at the cost of faulting them in, and
 * its copy of the last one comes after everything else. Each sub-block
 * costs a gap. Their sum, (length / sub) * gap + sub * t_fresh (t_fresh
 * the time per byte of its copy into untouched pages, the way it fills
 * them: ucs_calib_fresh_recv_time()), is least at
 *   sub = sqrt(length * gap / t_fresh),
 * here taken to the nearest power of two, and no larger than the lane's
 * sub-block (a buffer sent again keeps that: its receiver's pages are
 * likely resident, and its puts long).
 *
 * Only where the wire is slower than that copy: there the gaps of more
 * puts hide behind the wire. Where the wire is faster, the receiver's
 * copies or the sender's (whose core moves the data on softverbs) set the
 * pace, and every put adds its cost to it: on softverbs' default link and
 * at 100 Gb/s the smaller sub-blocks made first sends of 256 KiB-16 MiB
 * 2-15% slower. At 25 Gb/s (gap 1.4 us, 290 ps per byte into new pages,
 * against 340 ps on the wire): 32 KiB for 256 KiB and 64 KiB for 1 MiB,
 * against 128 KiB; forced first sends of 64 KiB and 256 KiB took 16% less
 * by one staged copy (bcopy), and 3-4% less by the superpipeline, up to
 * 1 MiB (medians of 5 interleaved runs), the same from 4 MiB on. (t_fresh
 * was once a copy that takes a page fault per page, which the receiver
 * does not do by default: on a host whose page faults turned ten times
 * slower, 3.1 ns per byte, while userfaultfd's fill stayed at 0.19, that
 * made the wire look the faster, and a first 1 MiB at 25 Gb/s went in
 * two 512 KiB puts, the second one's fill after the wire.)
 */
size_t ucp_sppln_first_send_sub(const ucp_sppln_config_t *config,
                                const ucp_sppln_lane_model_t *lmodel,
                                size_t length)
{
    const ucs_calib_model_t *model = &lmodel->model;
    double t_fresh;
    size_t sub;

    if ((config->sub_size != UCS_MEMUNITS_AUTO) || !lmodel->have_model ||
        (model->net_gap <= 0) || (length == 0)) {
        return lmodel->sub_size;
    }

    t_fresh = ucs_calib_fresh_recv_time(model, length) / length;
    if ((1.0 / t_fresh) <= model->net_bw) {
        return lmodel->sub_size;
    }

    sub = (size_t)(sqrt(length * model->net_gap / t_fresh) * M_SQRT2);
    sub = ucs_rounddown_pow2(ucs_max(sub, 1));
    return ucs_max(ucs_min(sub, lmodel->sub_size),
                   ucp_sppln_sub_min(config, lmodel->sub_size));
}

int ucp_sppln_lane_tl_enabled(ucp_context_h context, ucp_rsc_index_t rsc_index)
{
    const ucp_sppln_config_t *config = &context->config.sppln;
    const char *tl_name = context->tl_rscs[rsc_index].tl_rsc.tl_name;
    unsigned i;

    for (i = 0; i < config->tls.count; ++i) {
        if (!strcmp(config->tls.names[i], "all") ||
            !strcmp(config->tls.names[i], tl_name)) {
            return 1;
        }
    }
    return 0;
}

int ucp_sppln_rcache_hit(ucp_context_h context, const void *buffer,
                         size_t length)
{
    return (context->rcache != NULL) &&
           ucs_rcache_is_cached(context->rcache, (void *)buffer, length,
                                PROT_READ);
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
    ucp_sppln_staged_table_t *table = arg;
    uintptr_t start                 = (uintptr_t)event->vm_unmapped.address;
    uintptr_t end                   = start + event->vm_unmapped.size;
    ucp_sppln_staged_t *entry;
    uintptr_t address;

    for (entry = table->entry; entry < table->entry + UCP_SPPLN_STAGED_HASH;
         ++entry) {
        address = __atomic_load_n(&entry->address, __ATOMIC_RELAXED);
        if ((address != 0) && (address < end) &&
            ((address + entry->length) > start)) {
            __atomic_store_n(&entry->address, 0, __ATOMIC_RELAXED);
        }
    }
}

void ucp_sppln_staged_track(ucp_sppln_staged_table_t *table)
{
    ucs_status_t status;

    status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 0,
                                   ucp_sppln_staged_unmapped, table);
    if (status != UCS_OK) {
        ucs_debug("rndv/sppln: no memory events (%s): a buffer sent before "
                  "is not told from a fresh one at its address",
                  ucs_status_string(status));
        return;
    }
    table->tracked = 1;
}

void ucp_sppln_staged_untrack(ucp_sppln_staged_table_t *table)
{
    if (table->tracked) {
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED,
                                ucp_sppln_staged_unmapped, table);
        table->tracked = 0;
    }
}

int ucp_sppln_staged_before(ucp_sppln_staged_table_t *table, const void *buffer,
                            size_t length)
{
    uintptr_t address = (uintptr_t)buffer;
    ucp_sppln_staged_t *entry;

    if (!table->tracked) {
        return 0;
    }

    entry = &table->entry[kh_int64_hash_func((address * 31) ^ length) %
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
    size_t page = ucs_get_page_size();
    void *first = (void *)ucs_align_down((uintptr_t)buffer, page);
    unsigned char vec;

    if ((mincore(first, page, &vec) == 0) && (vec & 1)) {
        return UCS_CALIB_PAGES_RESIDENT;
    }
    return UCS_CALIB_PAGES_NONRESIDENT;
}

/*
 * Whether a registered buffer below the model's cached staging threshold is
 * staged all the same. The threshold is where two measured rates cross,
 * zero-copy's and a staged sender's between buffers the caches cannot hold,
 * and both were measured by one process on one core, as the calibration
 * runs: at 100 Gb/s on softverbs they came out within 1% of each other at
 * 16 MiB (6.8 GB/s), which put the threshold at 20 MiB in one calibration
 * and 10 MiB in the next, while between two processes a reused 16 MiB took
 * 1.9-2.1 ms staged and 2.6-2.8 ms by zero-copy (the matrix's worst cell,
 * 29-35% regret in two full runs). So near the threshold, down to a
 * UCP_SPPLN_CACHED_EXPLORE-th of it, one message in
 * UCP_SPPLN_CACHED_BACKOFF of each size class is staged (two, where the
 * first did not beat zero-copy) and checked as the
 * ones above the threshold are (ucp_sppln_cached_staged_check()): one that
 * took less than zero-copy keeps its size class staged, each of its
 * messages checked again, until two in a row take clearly longer
 * (UCP_SPPLN_CACHED_LOSS).
 *
 * Only from the smallest working set at which the calibration measured
 * zero-copy on: below it, the model's zero-copy rate is interpolated from
 * a cache-sized transfer, and too slow for a buffer the caches hold (a
 * reused 4 MiB on softverbs' default link: 9.1 GB/s by the model, 12 by
 * UCX's rendezvous), so a staged message beat it, and stayed staged 4-6%
 * slower than zero-copy. In that range, and from the threshold on, the
 * zero-copy sends of registered buffers are timed, and a staged one is
 * checked against them rather than the model where there are any: the
 * model's zero-copy of a reused 16 MiB on softverbs' default link took
 * 1.4 ms, between two processes 1.8-2.7 ms, staged 1.5-1.7.
 */
static int
ucp_sppln_cached_checked(const ucp_sppln_lane_model_t *lmodel, size_t length)
{
    return (lmodel->model.num_net > 0) &&
           (length >= lmodel->model.net[0].size) &&
           (length >=
            (lmodel->derived.cached_staged_thresh / UCP_SPPLN_CACHED_EXPLORE));
}

static int
ucp_sppln_cached_explore(ucp_sppln_staged_table_t *staged, unsigned size_class)
{
    if (staged->cached_staged_left[size_class] > 0) {
        --staged->cached_staged_left[size_class];
        return 1;
    }

    /* the UCP_SPPLN_CACHED_EXPLORE_FIRST-th message of its size class, and
     * every UCP_SPPLN_CACHED_BACKOFF-th after it (the counter wraps at a
     * multiple of it) */
    return (++staged->cached_explore_count[size_class] %
            UCP_SPPLN_CACHED_BACKOFF) == UCP_SPPLN_CACHED_EXPLORE_FIRST;
}

ucp_sppln_path_t
ucp_sppln_choose(ucp_context_h context, ucp_sppln_staged_table_t *staged,
                 const ucp_sppln_lane_model_t *lmodel, const void *buffer,
                 size_t length, int staging_busy, int *probed_p, int *check_p)
{
    const ucp_sppln_config_t *config = &context->config.sppln;
    const ucs_calib_derived_t *derived;
    ucs_calib_pages_t pages;
    unsigned size_class;
    int reused;

    *probed_p = 0;
    *check_p  = 0;

    if (config->path != UCP_SPPLN_PATH_AUTO) {
        return config->path;
    }

    /* a buffer sent before is likely to be sent again: register it now, so
     * that its next sends hit the cache; a first send is staged. Unless
     * the message is so large that staging it beats zero-copy even from
     * registered memory (on a device that moves buffers the caches cannot
     * hold slower than the staging's chunks) */
    reused = ucp_sppln_rcache_hit(context, buffer, length) ||
             ucp_sppln_staged_before(staged, buffer, length);
    if (reused) {
        if (!lmodel->have_model) {
            return UCP_SPPLN_PATH_ZCOPY;
        }

        /* a staged message of this size is checked against zero-copy: the
         * zero-copy ones are timed for it */
        if ((length < lmodel->derived.cached_staged_thresh) &&
            !ucp_sppln_cached_checked(lmodel, length)) {
            return UCP_SPPLN_PATH_ZCOPY;
        }
        *check_p   = 1;
        size_class = ucs_ilog2(length);

        if (length < lmodel->derived.cached_staged_thresh) {
            if (!ucp_sppln_cached_explore(staged, size_class)) {
                return UCP_SPPLN_PATH_ZCOPY;
            }
        } else {
            /* the model's advantage of staging did not hold for a message
             * of this size lately (ucp_sppln_cached_staged_check()) */
            if (staged->cached_zcopy_left[size_class] > 0) {
                --staged->cached_zcopy_left[size_class];
                return UCP_SPPLN_PATH_ZCOPY;
            }
        }

        /* a size class that stays staged sends one registered message in
         * UCP_SPPLN_CACHED_BACKOFF zero-copy, timed: each staged one is
         * checked against zero-copy as it is now, not as it was when the
         * size class last went zero-copy (a slow period then would keep
         * it staged for good) */
        if ((++staged->cached_refresh_count[size_class] %
             UCP_SPPLN_CACHED_BACKOFF) == 0) {
            return UCP_SPPLN_PATH_ZCOPY;
        }
    }

    /* every staging group is in use: a staged message would start only
     * when another staged transfer ends, a whole transfer's time, while
     * zero-copy starts now for the price of a registration; and with the
     * network busy with the transfers in flight, the copies of a staged one
     * overlap nothing but add to the CPU time all of them share (nor is
     * that zero-copy's time alone) */
    if (staging_busy) {
        *check_p = 0;
        return UCP_SPPLN_PATH_ZCOPY;
    }

    if (!lmodel->have_model) {
        return UCP_SPPLN_PATH_SPPLN;
    }

    /* the pages' residency is a system call (mincore(): 0.9 us on a VM,
     * tens of percent of a 16 KiB message's time here): looked up only
     * where it can change the answer, from a zero-copy threshold up; a
     * registered buffer's registration is paid */
    derived = &lmodel->derived;
    if (!reused &&
        (length >=
         ucs_min(derived->zcopy_thresh[UCS_CALIB_PAGES_RESIDENT],
                 derived->zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT]))) {
        pages     = ucp_sppln_pages(buffer);
        *probed_p = 1;
        if (length >= derived->zcopy_thresh[pages]) {
            return UCP_SPPLN_PATH_ZCOPY;
        }
    }
    return (length >= derived->sp_thresh) ? UCP_SPPLN_PATH_SPPLN :
                                            UCP_SPPLN_PATH_BCOPY;
}

/* Seconds per byte of the faster of the timed zero-copy sends of a size
 * class; 0 where none was timed */
static double ucp_sppln_cached_zcopy_byte_time(ucp_sppln_staged_table_t *staged,
                                               unsigned size_class)
{
    double best = 0;
    unsigned i;

    for (i = 0; i < UCP_SPPLN_ZCOPY_SAMPLES; ++i) {
        if ((staged->zcopy_byte_time[size_class][i] > 0) &&
            ((best == 0) || (staged->zcopy_byte_time[size_class][i] < best))) {
            best = staged->zcopy_byte_time[size_class][i];
        }
    }
    return best;
}

void ucp_sppln_cached_zcopy_timed(ucp_sppln_staged_table_t *staged,
                                  size_t length, double seconds)
{
    unsigned size_class;
    uint8_t *next;

    if ((length == 0) || !(seconds > 0)) {
        return;
    }

    size_class = ucs_ilog2(length);
    next       = &staged->zcopy_next[size_class];
    staged->zcopy_byte_time[size_class][*next] = seconds / length;
    *next = (*next + 1) % UCP_SPPLN_ZCOPY_SAMPLES;
}

/*
 * The model stages a registered buffer from the size where a staged sender
 * measured faster than zero-copy between buffers the caches cannot hold.
 * Its copies, three per byte against zero-copy's one, are what a host's
 * other load slows first: on the virtual machine of the bench, for minutes
 * at a time, a reused 16 MiB staged took 3.5-8.9 ms where zero-copy kept
 * its 2.6-2.9 (1.7-2.2 for staging otherwise). Each staged message of a
 * registered buffer is checked against zero-copy's time, and a size class
 * whose message lost by more than the model's error
 * (UCP_SPPLN_CACHED_LOSS) goes zero-copy for a while; then staging is
 * tried again.
 *
 * Zero-copy's time is the faster of the last zero-copy sends of its size
 * class the sender timed (ucp_sppln_cached_zcopy_timed()), each one alone
 * in flight, from its start to its completion as the staged one is; where
 * none was, the model's.
 */
int ucp_sppln_cached_staged_check(ucp_sppln_staged_table_t *staged,
                                  const ucp_sppln_lane_model_t *lmodel,
                                  size_t length, double since_start,
                                  double since_rtr)
{
    unsigned size_class = ucs_ilog2(length);
    double t_zcopy, byte_time, seconds, ratio, pending;

    if (!lmodel->have_model) {
        return 0;
    }

    /* zero-copy as this pair of processes moved a registered buffer of
     * this size, start to completion as the staged one; else the model's
     * rate, against the staged one's data time */
    byte_time = ucp_sppln_cached_zcopy_byte_time(staged, size_class);
    if (byte_time > 0) {
        t_zcopy = byte_time * length;
        seconds = since_start;
    } else {
        t_zcopy = ucs_calib_zcopy_time(&lmodel->model, length);
        seconds = since_rtr;
    }

    /* the faster of this one and a previous one that lost */
    ratio   = seconds / t_zcopy;
    pending = staged->cached_pending_ratio[size_class];
    staged->cached_pending_ratio[size_class] = 0;
    if (pending > 0) {
        ratio = ucs_min(ratio, pending);
    }

    if (ratio <= 1) {
        if (length < lmodel->derived.cached_staged_thresh) {
            /* staged below the threshold (ucp_sppln_cached_explore()),
             * and it paid */
            staged->cached_staged_left[size_class] = UCP_SPPLN_CACHED_BACKOFF;
        }
        return 0;
    }

    if (pending == 0) {
        /* one staged message alone does not decide: the first one after a
         * run of zero-copy sends of its size took 1.3-1.7x the next ones
         * (a reused 16 MiB at 100 Gb/s on softverbs: 2.2-2.7 ms, then
         * 1.6, zero-copy 1.7-1.9), and that one message kept the size
         * class zero-copy for the next UCP_SPPLN_CACHED_BACKOFF; the next
         * message of its size is staged too, and the faster of the two
         * counts. Where staging does lose, that costs one message more in
         * UCP_SPPLN_CACHED_BACKOFF */
        staged->cached_pending_ratio[size_class] = ratio;
        if (length < lmodel->derived.cached_staged_thresh) {
            staged->cached_staged_left[size_class] =
                    ucs_max(staged->cached_staged_left[size_class], 1);
        }
        return 0;
    }

    if (ratio <= UCP_SPPLN_CACHED_LOSS) {
        /* within the model's own error: nothing changes (below the
         * threshold, a size class staged after a win stays staged for
         * the messages it has left) */
        return 0;
    }

    ucs_debug("rndv/sppln: two registered %zu-byte buffers staged, the "
              "faster in %.2f times the %.1f us zero-copy takes %s: the next "
              "%d of its size go zero-copy",
              length, ratio, t_zcopy * 1e6,
              (byte_time > 0) ? "as timed" : "by the model",
              UCP_SPPLN_CACHED_BACKOFF);
    staged->cached_zcopy_left[size_class]  = UCP_SPPLN_CACHED_BACKOFF;
    staged->cached_staged_left[size_class] = 0;
    return 1;
}

/* Whether the copy engine stages the sender's chunks, and with which
 * backend (UCS_COPY_BACKEND_AUTO: the one UCX_COPY_ENGINE names) */
static void ucp_sppln_copy_backend(ucp_sppln_lane_model_t *lmodel,
                                   const ucp_sppln_config_t *config)
{
    ucs_status_t status;

    lmodel->copy_async   = (config->copy_async != UCS_NO);
    lmodel->copy_backend = UCS_COPY_BACKEND_AUTO;
    if (config->copy_async != UCS_AUTO) {
        return;
    }

    /* most bytes of a large message travel in full slots */
    status             = lmodel->have_model ?
                                 ucs_calib_engine_choose(&lmodel->model,
                                                         ucs_copy_engine_config_backend(),
                                                         config->slot_size,
                                                         &lmodel->copy_backend) :
                                 UCS_ERR_UNSUPPORTED;
    lmodel->copy_async = (status == UCS_OK);
    ucs_debug("rndv/sppln: the %s stages %zu-byte chunks with %s",
              lmodel->have_model ? "measured model" : "lack of a model",
              config->slot_size,
              lmodel->copy_async ? ucs_copy_backend_name(lmodel->copy_backend) :
                                   "the sender's own copy");
}

int ucp_sppln_find_model(const char *md_name, ucs_calib_model_t *model)
{
    char dev[UCS_CALIB_DEV_NAME_MAX];
    char *colon;

    /* models are per device; md names may carry a suffix */
    ucs_strncpy_zero(dev, md_name, sizeof(dev));
    colon = strchr(dev, ':');
    if (colon != NULL) {
        *colon = '\0';
    }

    return ucs_calib_find(dev, model, NULL) == UCS_OK;
}

int ucp_sppln_recv_bound(const ucs_calib_model_t *model)
{
    /* copy_fault is the model's cost of faulting a page in (measured as a
     * copy from untouched pages) */
    return (model->copy_fault.m > 0) &&
           ((1.0 / model->copy_fault.m) < model->net_bw);
}

void ucp_sppln_lane_model_init(ucp_sppln_lane_model_t *lmodel,
                               const ucp_sppln_config_t *config,
                               const char *md_name, size_t max_put)
{
    size_t max_sub;

    lmodel->have_model = ucp_sppln_find_model(md_name, &lmodel->model);
    if (lmodel->have_model) {
        ucs_calib_derive(&lmodel->model, &lmodel->derived);
        /* what a transfer's slots hold goes through one staged copy */
        lmodel->derived.sp_thresh = ucs_calib_sp_from(
                &lmodel->derived, UCP_SPPLN_NUM_SLOTS * config->slot_size);
        lmodel->c0       = lmodel->derived.sp_c0;
        lmodel->q        = lmodel->derived.sp_q;
        lmodel->sub_size = lmodel->derived.sp_sub;
    } else {
        /* no measurement (UCX_CALIB_MODE=off, or not an IB device) */
        lmodel->c0       = UCP_SPPLN_DEFAULT_C0;
        lmodel->q        = UCP_SPPLN_DEFAULT_Q;
        lmodel->sub_size = UCP_SPPLN_DEFAULT_SUB;
    }

    if (config->c0 != UCS_MEMUNITS_AUTO) {
        lmodel->c0 = config->c0;
    }
    if (config->q != UCS_CONFIG_DBL_AUTO) {
        lmodel->q = config->q;
    }
    if (config->sub_size != UCS_MEMUNITS_AUTO) {
        lmodel->sub_size = config->sub_size;
    } else {
        /* the measured size, within a slot, a put the lane can do (the lane
         * puts at least UCP_SPPLN_SUB_MIN) and the sub-blocks a slot holds */
        max_sub = ucs_min(max_put, UCS_GBYTE);
        max_sub = ucs_min(ucs_rounddown_pow2(max_sub), config->slot_size);
        lmodel->sub_size = ucs_max(ucs_min(lmodel->sub_size, max_sub),
                                   ucp_sppln_sub_min(config, max_sub));
    }

    lmodel->q = ucs_min(ucs_max(lmodel->q, UCP_SPPLN_Q_MIN), UCP_SPPLN_Q_MAX);
    /* the receiver builds its schedule from the ratio in the RTS: the
     * sender must build its own from the same, rounded, value, or the
     * chunk boundaries of the two sides part after a few chunks */
    lmodel->q = (uint32_t)(lmodel->q * UCP_SPPLN_Q_WIRE_SCALE) /
                UCP_SPPLN_Q_WIRE_SCALE;

    ucp_sppln_copy_backend(lmodel, config);
}

/* Modelled time of a transfer by one path, for a first send */
static double ucp_sppln_model_time(const ucp_sppln_lane_model_t *lmodel,
                                   size_t length, ucp_sppln_path_t path)
{
    const ucs_calib_model_t *model = &lmodel->model;
    ucs_calib_derived_t derived    = lmodel->derived;
    double copy;

    switch (path) {
    case UCP_SPPLN_PATH_ZCOPY:
        /* register and deregister on both sides, then one transfer */
        return 2 * ucs_calib_reg_time(model, length,
                                      UCS_CALIB_PAGES_NONRESIDENT) +
               model->net_latency + (length / model->net_bw);
    case UCP_SPPLN_PATH_SPPLN:
        derived.sp_c0  = lmodel->c0;
        derived.sp_q   = lmodel->q;
        derived.sp_sub = lmodel->sub_size;
        return ucs_calib_sp_time(model, &derived, length);
    default:
        copy = ucs_calib_copy_time(model, length, UCS_CALIB_PAGES_RESIDENT);
        return 2 * copy + model->net_latency + (length / model->net_bw);
    }
}

/*
 * A registered buffer goes with no copy either way; what differs is the
 * trips. A rendezvous takes three before the receiver has the data (RTS,
 * the get's request, its data), two more one-way latencies than an eager
 * send, which takes one, in fragments that the receiver copies out of its
 * bounce buffers. Both pay the wire's time for the data. The fragments
 * pipeline: while one is on the wire the hosts work on the one before, so
 * eager pays what each fragment after the first costs the hosts beyond its
 * wire time (net_frag_gap, a stream of such fragments, less the wire's
 * share of it). So eager is cheaper while
 *   (fragments - 1) * max(0, fragment gap - fragment / bandwidth)
 *     < 2 * latency.
 * The calibration's stream runs both sides in one thread and the eager
 * protocol's own work is not in it, so on softverbs it counts 55-70% of
 * what a fragment costs beyond the wire in UCX's eager protocol between two
 * processes; the rendezvous' control messages, whose cost the right side
 * leaves out, make up for that. Measured on softverbs (choice-matrix,
 * reused buffers, 2026-11-28):
 *  - default link (the wire a copy, 7 GB/s): fragment gap 2.9 us, 1.1 us of
 *    it the wire; eager wins at 16 KiB (14.9 against 16.0 us), loses from
 *    32 KiB (26.7 against 16.6): eager up to 16 KiB;
 *  - 25 Gb/s: 3.8 us, 2.7 the wire; 32 KiB about even (25.8 against 25.4),
 *    64 KiB eager loses (45.3 against 37.9): up to 24 KiB;
 *  - 10 Gb/s: 6.6 us, all of it the wire: eager wins or ties at every size
 *    up to 256 KiB (16 KiB 20.4 against 28.3, 256 KiB 218 against 230):
 *    up to UCP_SPPLN_EAGER_MAX_FRAGS fragments.
 * A model without the fragment gap (a file from before it) charges every
 * fragment but two a message's gap, in series with the wire:
 *   (fragments - 2) * gap + length / copy bandwidth < 2 * latency.
 */
size_t
ucp_sppln_eager_max(const ucp_sppln_lane_model_t *lmodel, size_t seg_size)
{
    const ucs_calib_model_t *model = &lmodel->model;
    size_t length, eager_max = 0;
    double frag_excess, cost;
    unsigned frags;

    if (!lmodel->have_model || (seg_size == 0)) {
        return 0;
    }

    frag_excess = ucs_max(0.0, model->net_frag_gap -
                                       (UCS_CALIB_FRAG_SIZE /
                                        ucs_calib_net_bw(model,
                                                         UCS_CALIB_FRAG_SIZE)));
    for (frags = 1; frags <= UCP_SPPLN_EAGER_MAX_FRAGS; ++frags) {
        length = frags * seg_size;
        if (model->net_frag_gap > 0) {
            cost = ((double)frags - 1) * frag_excess;
        } else {
            cost = (((double)frags - 2) * model->net_gap) +
                   (length / ucs_calib_copy_bw(model, length));
        }
        if (cost >= 2 * model->net_latency) {
            break;
        }
        eager_max = length;
    }
    return eager_max;
}

void ucp_sppln_perf(const ucp_sppln_lane_model_t *lmodel,
                    ucp_proto_caps_t *caps, double ctrl_time)
{
    static const char *names[] = {
        [UCP_SPPLN_PATH_BCOPY] = "sppln/bcopy",
        [UCP_SPPLN_PATH_SPPLN] = "sppln/superpipeline",
        [UCP_SPPLN_PATH_ZCOPY] = "sppln/reg+zcopy"
    };
    size_t bounds[UCP_SPPLN_PATH_LAST];
    ucp_proto_perf_range_t *range;
    ucp_sppln_path_t path;
    double t_lo, t_hi;
    size_t lo, hi;

    if (!lmodel->have_model) {
        return; /* keep the estimate of UCX's rendezvous */
    }

    /* ranges end where the measured critical sizes are, for a buffer that
     * is not in the registration cache and not resident (first send) */
    bounds[UCP_SPPLN_PATH_BCOPY] = lmodel->derived.sp_thresh;
    bounds[UCP_SPPLN_PATH_SPPLN] =
            lmodel->derived.zcopy_thresh[UCS_CALIB_PAGES_NONRESIDENT];
    bounds[UCP_SPPLN_PATH_ZCOPY] = SIZE_MAX;

    caps->num_ranges = 0;
    lo               = caps->min_length;
    for (path = UCP_SPPLN_PATH_BCOPY; path < UCP_SPPLN_PATH_LAST; ++path) {
        hi = ucs_max(bounds[path], lo + 1);
        if ((path != UCP_SPPLN_PATH_ZCOPY) && (bounds[path] <= lo)) {
            continue;
        }

        /* a line through the model's times at the ends of the range */
        hi          = ucs_min(hi - 1, (size_t)UCS_GBYTE);
        t_lo        = ucp_sppln_model_time(lmodel, ucs_max(lo, 1), path);
        t_hi        = ucp_sppln_model_time(lmodel, ucs_max(hi, lo + 1), path);
        range       = &caps->ranges[caps->num_ranges++];
        range->name = names[path];
        range->max_length = ((path == UCP_SPPLN_PATH_ZCOPY) ||
                             (bounds[path] == SIZE_MAX)) ?
                                    SIZE_MAX :
                                    bounds[path] - 1;
        range->perf[UCP_PROTO_PERF_TYPE_SINGLE].m =
                (t_hi - t_lo) / (double)(ucs_max(hi, lo + 1) - ucs_max(lo, 1));
        range->perf[UCP_PROTO_PERF_TYPE_SINGLE].c =
                ctrl_time + t_lo -
                (range->perf[UCP_PROTO_PERF_TYPE_SINGLE].m * ucs_max(lo, 1));
        range->perf[UCP_PROTO_PERF_TYPE_MULTI] =
                range->perf[UCP_PROTO_PERF_TYPE_SINGLE];
        lo = bounds[path];
        if (range->max_length == SIZE_MAX) {
            break;
        }
    }
}
