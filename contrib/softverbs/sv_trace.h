/*
 * softverbs per-stage timestamps, for finding where a message's time goes
 * (issue 28). Compiled out unless the library is built with -DSV_TRACE
 * (bench/softverbs-stages.sh does that): then every SV_TRACE(stage) stores
 * the time stamp counter and the stage in a per-thread buffer, and each
 * process writes its buffers to $SOFTVERBS_TRACE_DIR/sv-trace.<pid> at exit
 * (one line per event: tsc, thread, stage). The counter is the CPU's
 * invariant TSC, the same on every core, so the files of two processes
 * merge into one timeline (bench/softverbs-stages.py).
 */
#ifndef SV_TRACE_H_
#define SV_TRACE_H_

typedef enum {
    SV_T_POST_SEND, /* ibv_post_send entered */
    SV_T_EXEC, /* a send WR starts executing */
    SV_T_RQ_TAKEN, /* the target's receive WQE is ours */
    SV_T_XFER, /* the data copy (a system call) starts */
    SV_T_XFER_DONE, /* ... and returned */
    SV_T_CQE, /* a completion is published */
    SV_T_POST_SEND_RET, /* ibv_post_send returns */
    SV_T_POLL_HIT, /* ibv_poll_cq found completions */
    SV_T_POST_RECV, /* ibv_post_recv entered */
    SV_T_POST_RECV_RET, /* ibv_post_recv returns */
    SV_T_NSTAGES
} sv_trace_stage_t;

#ifdef SV_TRACE_STAGES
void sv_trace(sv_trace_stage_t stage);
#define SV_TRACE(_stage) sv_trace(_stage)
#else
#define SV_TRACE(_stage)                                                       \
    do {                                                                       \
    } while (0)
#endif

#endif
