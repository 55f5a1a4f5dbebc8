/*
 * softverbs per-stage timestamps (sv_trace.h): only with -DSV_TRACE_STAGES.
 *
 * Each thread appends (tsc, stage) to a buffer of its own, so recording
 * takes no lock and shares no cache line; buffers are registered once, on
 * a thread's first event, and written out by an atexit handler. Events past
 * a buffer's capacity are dropped (the files say how many).
 */
#ifdef SV_TRACE_STAGES
#define _GNU_SOURCE
#include "sv.h"
#include "sv_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <x86intrin.h>

#define SV_TRACE_EVENTS  (1u << 20) /* per thread */
#define SV_TRACE_THREADS 16

typedef struct {
    uint64_t tsc;
    uint32_t stage;
} sv_trace_ev_t;

typedef struct {
    sv_trace_ev_t *ev;
    uint32_t n, dropped;
} sv_trace_buf_t;

static sv_trace_buf_t sv_trace_bufs[SV_TRACE_THREADS];
static uint32_t sv_trace_nbufs;
static uint64_t sv_trace_t0_ns, sv_trace_t0_tsc; /* to convert cycles */
static __thread sv_trace_buf_t *sv_trace_mine;

static void sv_trace_dump(void)
{
    const char *dir = getenv("SOFTVERBS_TRACE_DIR");
    char path[4096];
    uint32_t t, i, n;
    FILE *f;

    snprintf(path, sizeof(path), "%s/sv-trace.%d", dir ? dir : "/tmp",
             (int)getpid());
    f = fopen(path, "w");
    if (f == NULL) {
        return;
    }
    fprintf(f, "# tsc_hz %.0f\n",
            (double)(__rdtsc() - sv_trace_t0_tsc) * 1e9 /
                    (double)(sv_now_ns() - sv_trace_t0_ns));
    n = SV_LOAD(&sv_trace_nbufs);
    for (t = 0; t < n && t < SV_TRACE_THREADS; ++t) {
        for (i = 0; i < sv_trace_bufs[t].n; ++i) {
            fprintf(f, "%lu %u %u\n", (unsigned long)sv_trace_bufs[t].ev[i].tsc,
                    t, sv_trace_bufs[t].ev[i].stage);
        }
        if (sv_trace_bufs[t].dropped) {
            fprintf(f, "# thread %u dropped %u events\n", t,
                    sv_trace_bufs[t].dropped);
        }
    }
    fclose(f);
}

void sv_trace(sv_trace_stage_t stage)
{
    uint64_t tsc      = __rdtsc();
    sv_trace_buf_t *b = sv_trace_mine;
    uint32_t t;

    if (b == NULL) {
        t = __atomic_fetch_add(&sv_trace_nbufs, 1, __ATOMIC_ACQ_REL);
        if (t >= SV_TRACE_THREADS) {
            return;
        }
        b     = &sv_trace_bufs[t];
        b->ev = calloc(SV_TRACE_EVENTS, sizeof(*b->ev));
        if (b->ev == NULL) {
            return;
        }
        if (t == 0) {
            sv_trace_t0_ns  = sv_now_ns();
            sv_trace_t0_tsc = __rdtsc();
            atexit(sv_trace_dump);
        }
        sv_trace_mine = b;
    }
    if (b->n == SV_TRACE_EVENTS) {
        ++b->dropped;
        return;
    }
    b->ev[b->n].tsc   = tsc;
    b->ev[b->n].stage = stage;
    ++b->n;
}
#endif
