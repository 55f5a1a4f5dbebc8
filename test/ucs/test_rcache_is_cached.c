/*
 * ucs_rcache_is_cached() (glue patch 0006): whether a registered region of a
 * registration cache covers a range, without registering anything or taking
 * a reference. Unit tests in the way of UCX's gtest test_rcache: a cache
 * with counting registration callbacks over real mappings.
 */
#include "th.h"

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include <limits.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* the system page size */
#define rct_page() ((size_t)sysconf(_SC_PAGESIZE))

typedef struct {
    unsigned regs; /* mem_reg calls */
    unsigned deregs; /* mem_dereg calls */
    int fail; /* mem_reg fails */
} rct_ctx_t;

static ucs_status_t rct_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                ucs_rcache_region_t *region, uint16_t flags)
{
    rct_ctx_t *ctx = context;

    ++ctx->regs;
    return ctx->fail ? UCS_ERR_IO_ERROR : UCS_OK;
}

static void
rct_mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
    rct_ctx_t *ctx = context;

    ++ctx->deregs;
}

static void rct_dump_region(void *context, ucs_rcache_t *rcache,
                            ucs_rcache_region_t *region, char *buf, size_t max)
{
    buf[0] = '\0';
}

static const ucs_rcache_ops_t rct_ops = {.mem_reg     = rct_mem_reg,
                                         .mem_dereg   = rct_mem_dereg,
                                         .dump_region = rct_dump_region};

static ucs_rcache_t *rct_create(rct_ctx_t *ctx)
{
    ucs_rcache_params_t params;
    ucs_rcache_t *rcache;

    memset(&params, 0, sizeof(params));
    params.region_struct_size = sizeof(ucs_rcache_region_t);
    params.alignment          = rct_page();
    params.max_alignment      = rct_page();
    params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    params.ucm_event_priority = 1000;
    params.ops                = &rct_ops;
    params.context            = ctx;
    params.flags              = 0;
    params.max_regions        = ULONG_MAX;
    params.max_size           = SIZE_MAX;
    params.max_unreleased     = SIZE_MAX;
    TH_ASSERT_EQ(ucs_rcache_create(&params, "th_rcache", NULL, &rcache),
                 UCS_OK);
    return rcache;
}

static void *rct_map(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    TH_ASSERT(p != MAP_FAILED);
    return p;
}

/* a registered range and every range within it is cached; around it, and
 * before it is registered, nothing is; asking registers nothing */
TH_TEST(ucs_rcache, is_cached_covers_registered_range)
{
    const size_t page = rct_page();
    rct_ctx_t ctx     = {0};
    ucs_rcache_t *rcache;
    ucs_rcache_region_t *region;
    uint8_t *buf;

    rcache = rct_create(&ctx);
    buf    = rct_map(8 * page);

    TH_ASSERT(!ucs_rcache_is_cached(rcache, buf + page, 2 * page, PROT_READ));
    TH_ASSERT_EQ(ctx.regs, 0);

    TH_ASSERT_EQ(ucs_rcache_get(rcache, buf + page, 2 * page,
                                PROT_READ | PROT_WRITE, NULL, &region),
                 UCS_OK);
    TH_ASSERT_EQ(ctx.regs, 1);

    TH_ASSERT(ucs_rcache_is_cached(rcache, buf + page, 2 * page, PROT_READ));
    TH_ASSERT(ucs_rcache_is_cached(rcache, buf + page + 100, 64,
                                   PROT_READ | PROT_WRITE));
    /* past its end, or starting before it */
    TH_ASSERT(!ucs_rcache_is_cached(rcache, buf + page, 3 * page, PROT_READ));
    TH_ASSERT(!ucs_rcache_is_cached(rcache, buf, 2 * page, PROT_READ));
    TH_ASSERT(!ucs_rcache_is_cached(rcache, buf + 5 * page, page, PROT_READ));

    /* released by its user, the region stays in the cache */
    ucs_rcache_region_put(rcache, region);
    TH_ASSERT(ucs_rcache_is_cached(rcache, buf + page, 2 * page, PROT_READ));

    /* none of the questions registered anything */
    TH_ASSERT_EQ(ctx.regs, 1);
    TH_ASSERT_EQ(ctx.deregs, 0);

    ucs_rcache_destroy(rcache);
    munmap(buf, 8 * page);
}

/* a region registered for reading does not answer for writing */
TH_TEST(ucs_rcache, is_cached_checks_access)
{
    const size_t page = rct_page();
    rct_ctx_t ctx     = {0};
    ucs_rcache_t *rcache;
    ucs_rcache_region_t *region;
    uint8_t *buf;

    rcache = rct_create(&ctx);
    buf    = rct_map(4 * page);

    TH_ASSERT_EQ(ucs_rcache_get(rcache, buf, 2 * page, PROT_READ, NULL,
                                &region),
                 UCS_OK);
    TH_ASSERT(ucs_rcache_is_cached(rcache, buf, 2 * page, PROT_READ));
    TH_ASSERT(!ucs_rcache_is_cached(rcache, buf, 2 * page, PROT_WRITE));

    ucs_rcache_region_put(rcache, region);
    ucs_rcache_destroy(rcache);
    munmap(buf, 4 * page);
}

/* a range that was unmapped is not cached any more: its pages may come back
 * fresh at the same address */
TH_TEST(ucs_rcache, is_cached_forgets_unmapped)
{
    const size_t page = rct_page();
    rct_ctx_t ctx     = {0};
    ucs_rcache_t *rcache;
    ucs_rcache_region_t *region;
    uint8_t *buf;

    rcache = rct_create(&ctx);
    buf    = rct_map(4 * page);

    TH_ASSERT_EQ(ucs_rcache_get(rcache, buf, 2 * page, PROT_READ, NULL,
                                &region),
                 UCS_OK);
    ucs_rcache_region_put(rcache, region);
    TH_ASSERT(ucs_rcache_is_cached(rcache, buf, 2 * page, PROT_READ));

    munmap(buf, 4 * page);
    TH_ASSERT(!ucs_rcache_is_cached(rcache, buf, 2 * page, PROT_READ));

    ucs_rcache_destroy(rcache);
    TH_ASSERT_EQ(ctx.deregs, 1);
}

/* a registration that failed leaves nothing that counts as cached */
TH_TEST(ucs_rcache, is_cached_not_after_failed_registration)
{
    const size_t page = rct_page();
    rct_ctx_t ctx     = {.fail = 1};
    ucs_rcache_t *rcache;
    ucs_rcache_region_t *region;
    uint8_t *buf;

    rcache = rct_create(&ctx);
    buf    = rct_map(2 * page);

    TH_ASSERT(ucs_rcache_get(rcache, buf, page, PROT_READ, NULL, &region) !=
              UCS_OK);
    TH_ASSERT_EQ(ctx.regs, 1);
    TH_ASSERT(!ucs_rcache_is_cached(rcache, buf, page, PROT_READ));

    ucs_rcache_destroy(rcache);
    munmap(buf, 2 * page);
}
