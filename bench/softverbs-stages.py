#!/usr/bin/env python3
"""Merge softverbs stage traces (sv_trace.h) of the processes of one run
into one timeline and print, for each transition between consecutive events
(stage in this process -> stage in the same or the other process), how often
it happened and its median time. In a ping-pong every message walks the
same chain of transitions, so the chain reads as a latency breakdown.

    softverbs-stages.py [--min-share F] [--pair FROM:TO ...] sv-trace.PID ...

--pair FROM:TO also prints, from each FROM event to the next TO event of
the other process (the message's hop from one side to the other), the
median time.
"""
import statistics
import sys

STAGES = ["post_send", "exec", "rq_taken", "xfer", "xfer_done", "cqe",
          "post_send_ret", "poll_hit", "post_recv", "post_recv_ret"]


def main(argv):
    min_share, pairs = 0.2, []
    while len(argv) > 2 and argv[1] in ("--min-share", "--pair"):
        if argv[1] == "--min-share":
            min_share = float(argv[2])
        else:
            pairs.append(tuple(STAGES.index(x) for x in argv[2].split(":")))
        argv = argv[:1] + argv[3:]
    events, hz = [], []
    for proc, path in enumerate(argv[1:]):
        for line in open(path):
            f = line.split()
            if line.startswith("# tsc_hz"):
                hz.append(float(f[2]))
            elif not line.startswith("#") and len(f) == 3:
                events.append((int(f[0]), proc, int(f[2])))
    if not events or not hz:
        sys.exit("no events")
    ns_per_tick = 1e9 / statistics.median(hz)
    events.sort()
    trans = {}
    for (t0, p0, s0), (t1, p1, s1) in zip(events, events[1:]):
        key = (STAGES[s0], STAGES[s1], "same" if p0 == p1 else "other")
        trans.setdefault(key, []).append((t1 - t0) * ns_per_tick)
    top = max(len(v) for v in trans.values())
    print("%-14s -> %-14s %-6s %8s %9s" % ("from", "to", "proc", "count",
                                            "median ns"))
    for key, v in sorted(trans.items(), key=lambda kv: -len(kv[1])):
        if len(v) >= min_share * top:
            print("%-14s -> %-14s %-6s %8d %9.0f" %
                  (key[0], key[1], key[2], len(v), statistics.median(v)))


    for s_from, s_to in pairs:
        hops, pending = [], {}
        for t, p, s in events:
            if s == s_to:
                for q, t0 in list(pending.items()):
                    if q != p:
                        hops.append((t - t0) * ns_per_tick)
                        del pending[q]
            if s == s_from:
                pending[p] = t
        if hops:
            print("hop %s -> %s (other process): %d, median %.0f ns" %
                  (STAGES[s_from], STAGES[s_to], len(hops),
                   statistics.median(hops)))


if __name__ == "__main__":
    main(sys.argv)
