#!/bin/bash
# The regret matrix (issue 29): does hcr's automatic per-message choice pick
# the best path for each message on each fabric, and how far is a first send
# from what the hardware allows?
#
# Cells: link {softverbs' default, 100, 25, 10 Gb/s} x registration cost
# {measured, +20 us} x buffers {fresh, reused} x size {16K..16M by 4x}.
# Columns (bench/choice-matrix.c, one pair of processes each, the columns
# of a link and registration cost one after another in a shuffled order):
#   auto   UCX_TLS=hcr, the automatic choice
#   eager  hcr with no rendezvous at all (RNDV_THRESH=inf)
#   bcopy  rndv/sppln forced to copy through its staging buffers
#   sppln  rndv/sppln forced to the superpipeline
#   zcopy  rndv/sppln forced to hand every message to UCX's own choice
#          (its rendezvous zero-copy, with the registration cache)
#   rcv    rc_verbs with UCX's registration cache, the reference
#   rcv2   the same as rcv again, a control: the summary counts how often
#          two identical columns land more than 5% apart (rcv2 / rcv), and
#          how large a "regret" the one shows against the other, which is
#          what this bench reads where there is no difference at all
# Each pair of processes sends every size's fresh messages first, then
# every size's reused buffers (a fresh phase after another size's reused
# one paid for its traffic: bench/choice-matrix.c, "Order").
# Fresh buffers are mapped for each message; reused ones are timed after
# at least eight untimed sends that last CM_REUSED_WARM_MS (default 100) ms
# (the automatic choice stages a buffer's first send and registers it on
# the second, and every column's next sends are slower than its steady
# state for tens of milliseconds, by how much depending on the column's
# fresh messages before: see bench/choice-matrix.c).
# Each rank runs on a core of its own (PAIR_PIN=1). A cell's time is the
# median over RUNS rounds (default 5) of each round's median message: of
# CM_MSGS (default 9) fresh messages from 4 MiB, of CM_CHEAP_MSGS (default
# 27) in the cheaper cells, reused buffers and fresh ones up to 1 MiB, whose
# single messages range over 1.5-2x their median here. The best column is
# the fastest of eager, bcopy, sppln and zcopy by those times; a cell's
# regret is auto / best - 1, taken round by round (the two columns' pairs
# of processes ran seconds apart in it) and the median of those over the
# rounds. This host's speed drifts over minutes: in the two full runs of
# one invocation on a2c0dee, the regret of the medians (auto's median over
# the best's) moved by 14.7 points from one run to the next in the 90th
# percentile of cells, the median of the rounds' regrets by 7.9. The table
# prints both ("of med."), the summary counts both, the goals are judged on
# the rounds'. The whole matrix is measured REPEAT times (default 2) to
# show how much a cell's regret moves from one full run to the next.
#
# The bound of a first send (fresh buffers): the slowest of the wire time
# (size / link bandwidth + latency, as the calibration measured under that
# link), the receiver's first touch of its pages (faulting in a fresh
# buffer of the message's size on the receiving rank's core, which every
# receive into it pays at least: bench/first-touch.c, the fastest of 9
# fresh mappings, as a floor should be (on a VM the same fill takes one of
# two times, ten times apart), and the cheaper of
# populating the pages and filling them by userfaultfd, between which
# rndv/sppln's receiver splits them by default (UCX_RNDV_SPPLN_FRESH_COPY=
# uffd; the second time includes the copy into the pages), or its whole
# 2 MiB pieces collapsed into huge pages where
# UCX_RNDV_SPPLN_FRESH_COLLAPSE=y is set), and the sender's
# copy or registration of its (resident) buffer, as the calibration
# measured them; plus the latency of the 1-byte answer each message waits
# for. Each round measures these again after its columns (ucx_hcr_calib -f
# into a private cache), and a cell's bound is the median over the rounds:
# this host's memory has periods of minutes in which faulting pages in takes
# 1.5-2x as long, and a bound from a model measured at another time mixes
# two hosts. The table also prints the bound earlier tables printed (the
# cached model alone, its receiver's share fitted up to 4 MiB), and what
# the bound leaves out: the staged protocol's own cost per message at that
# link (setup: its reused 16 KiB message less the wire time and latencies
# the bound counts for it), and auto's time against the bound plus that.
#
# SOFTVERBS_LINK_LAT_US for the modelled links: CM_LINK_LAT_US (default 1,
# a NIC and a switch). CM_LINKS and CM_REGS narrow the settings (e.g.
# CM_LINKS="default 25" CM_REGS=measured). The whole run (RUNS=5,
# REPEAT=2) takes about 23 minutes here. Writes
# bench/results/choice-matrix.{txt,png}, and each round's output (the
# columns, calibrations and first touches) to
# bench/results/choice-matrix-raw.tar.xz; CM_FROM=that file analyses it
# again without measuring (with the same RUNS, REPEAT, CM_LINKS and
# CM_REGS).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
REPEAT=${REPEAT:-2}
MSGS=${CM_MSGS:-9}
CHEAP=${CM_CHEAP_MSGS:-$((3 * MSGS))}
WARM_MS=${CM_REUSED_WARM_MS:-100}
LAT=${CM_LINK_LAT_US:-1}
bench_prepare
bench_cc_ucp "$tmp/cm" "$bench_top/bench/choice-matrix.c"
gcc -O2 -Wall -o "$tmp/first-touch" "$bench_top/bench/first-touch.c"
# the receiver's way for untouched pages, as these settings make it
touch_args=
if [ "${UCX_RNDV_SPPLN_FRESH_COLLAPSE:-n}" = y ]; then
    touch_args=-c
elif [ "${UCX_RNDV_SPPLN_FRESH_COPY:-uffd}" = uffd ] &&
     [ "${UCX_RNDV_SPPLN_FRESH_THP:-n}" != y ]; then
    touch_args=-u
fi
# the receiving rank's core (the second one a process may use: ucp_pair.h)
recv_cpu=$(python3 -c 'import os; c = sorted(os.sched_getaffinity(0));
print(c[min(1, len(c) - 1)])')

links=${CM_LINKS:-"default 100 25 10"}
regs=${CM_REGS:-"measured plus20"}
# each rank on a core of its own (bench/ucp_pair.h), as MPI launchers bind
# ranks: unbound, the scheduler's placement of the two busy-polling ranks
# moved a configuration's time by up to 2x from one run to the next
base="$(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n PAIR_PIN=1"

link_env() {
    [ "$1" = default ] || echo "SOFTVERBS_LINK_GBPS=$1 SOFTVERBS_LINK_LAT_US=$LAT"
}
reg_env() {
    [ "$1" = measured ] || echo "SOFTVERBS_REG_COST_US=20"
}

if [ -z "${CM_FROM:-}" ]; then
    # the calibration of each fabric setting: the bound's inputs, and a warm
    # cache so that no timed run measures it (bound to one core, as the ranks
    # are: the cache keeps a model per number of CPUs a process may use)
    for l in $links; do
        for g in $regs; do
            # shellcheck disable=SC2046,SC2086
            env $base $(link_env "$l") $(reg_env "$g") \
                taskset -c 0 "$UCX_HCR_PREFIX/bin/ucx_hcr_calib" -p \
                -d softverbs0 > "$tmp/calib.$l.$g"
        done
    done

    cols="auto eager bcopy sppln zcopy rcv rcv2"
    size_args=""
    for s in 16384 65536 262144 1048576 4194304 16777216; do
        size_args="$size_args -s $s"
    done
    start=$(date +%s)
    for rep in $(seq "$REPEAT"); do
        for r in $(seq "$RUNS"); do
            for l in $links; do
                for g in $regs; do
                    # one pair of processes per column, the columns in another
                    # order every round
                    for c in $(printf '%s\n' $cols | shuf); do
                        # shellcheck disable=SC2046,SC2086
                        env $base $(link_env "$l") $(reg_env "$g") \
                            CM_COLUMNS=$c CM_CHEAP_MSGS=$CHEAP \
                            CM_REUSED_WARM_MS=$WARM_MS \
                            timeout 300 "$tmp/cm" -n "$MSGS" \
                            >> "$tmp/$rep.$r.$l.$g" ||
                            { echo "$c at link $l, reg $g, run $r failed" >&2;
                              exit 1; }
                    done
                    # the bound's inputs as the host is now, beside the columns
                    # (a private cache: the timed runs keep the model they read)
                    # shellcheck disable=SC2046,SC2086
                    env $base $(link_env "$l") $(reg_env "$g") \
                        UCX_CALIB_DIR="$tmp/calib-now" taskset -c 0 \
                        "$UCX_HCR_PREFIX/bin/ucx_hcr_calib" -f -p \
                        -d softverbs0 > "$tmp/calib.$rep.$r.$l.$g"
                    # shellcheck disable=SC2086
                    taskset -c "$recv_cpu" "$tmp/first-touch" $touch_args \
                        $size_args \
                        > "$tmp/touch.$rep.$r.$l.$g"
                done
            done
            echo "full run $rep, round $r of $RUNS done" \
                 "($(( $(date +%s) - start )) s)" >&2
        done
    done
    elapsed=$(( $(date +%s) - start ))
    echo "$elapsed" > "$tmp/elapsed"
    (cd "$tmp" && tar -cJf "$out/choice-matrix-raw.tar.xz" [0-9]*.* \
         calib.* touch.* elapsed)
else
    # a saved run, analysed again
    tar -C "$tmp" -xJf "$CM_FROM"
    elapsed=$(cat "$tmp/elapsed")
fi

python3 - "$tmp" "$RUNS" "$REPEAT" "$elapsed" "$MSGS" "$LAT" "$links" "$regs" \
    "$CHEAP" "$WARM_MS" \
    > "$out/choice-matrix.txt" <<'PY'
import math, os, statistics, sys
tmp, runs, repeat, elapsed, msgs, lat = sys.argv[1:7]
runs, repeat = int(runs), int(repeat)
links = sys.argv[7].split()
regs = sys.argv[8].split()
cheap = sys.argv[9]
warm_ms = sys.argv[10]
cols = ["auto", "eager", "bcopy", "sppln", "zcopy", "rcv", "rcv2"]
forced = ["eager", "bcopy", "sppln", "zcopy"]
bufs = ["fresh", "reused"]

raw = {}
for rep in range(1, repeat + 1):
    for r in range(1, runs + 1):
        for l in links:
            for g in regs:
                for line in open(f"{tmp}/{rep}.{r}.{l}.{g}"):
                    s, c, f, u, fp, up = line.split()
                    raw.setdefault((rep, r, l, g, c), {})[int(s)] = {
                        "fresh": (float(f), fp), "reused": (float(u), up)}
sizes = sorted(raw[(1, 1, links[0], regs[0], "auto")])
# runs saved before the control column was added have none
if (1, 1, links[0], regs[0], "rcv2") not in raw:
    cols.remove("rcv2")
control = "rcv2" in cols
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")

def cell(rep, l, g, b, s, c):
    return statistics.median(raw[(rep, r, l, g, c)][s][b][0]
                             for r in range(1, runs + 1))

# a / column c - 1 in each round (the pairs of one round ran seconds
# apart), the median over the rounds
def paired(rep, l, g, b, s, c, a="auto"):
    return statistics.median(raw[(rep, r, l, g, a)][s][b][0] /
                             raw[(rep, r, l, g, c)][s][b][0]
                             for r in range(1, runs + 1)) - 1

# column c's median over rc_verbs' in every reused cell of a full run (the
# medians' ratio: taken round by round it moved as much from one full run
# to the next, 90th percentile 0.084 against 0.064)
def reused_vs_rcv(rep, c):
    return [cell(rep, l, g, "reused", s, c) /
            cell(rep, l, g, "reused", s, "rcv")
            for l in links for g in regs for s in sizes]

def path(rep, l, g, b, s):
    ps = [raw[(rep, r, l, g, "auto")][s][b][1] for r in range(1, runs + 1)]
    return max(sorted(set(ps)), key=ps.count)

def calib(name):
    kv = {}
    for line in open(f"{tmp}/calib.{name}"):
        if "=" in line:
            k, v = line.strip().split("=", 1)
            try:
                kv[k] = float(v)
            except ValueError:
                kv[k] = v
    return kv

# bandwidth at size between measured points, log-linear in the size and
# constant beyond them (ucs_calib_points_bw())
def points_bw(pts, size):
    if size <= pts[0][0]:
        return pts[0][1]
    for (s0, b0), (s1, b1) in zip(pts, pts[1:]):
        if size <= s1:
            t = math.log(size / s0) / math.log(s1 / s0)
            return b0 + t * (b1 - b0)
    return pts[-1][1]

def copy_bw(kv, size):
    return points_bw(sorted((int(k[8:]), v) for k, v in kv.items()
                            if k.startswith("copy_bw_")), size)

# the network's bandwidth at size, as the model has it (ucs_calib_net_bw()):
# net_bw up to 1 MiB, then the points measured with larger transfers (at
# 25 Gb/s net_bw read 2.91 GB/s, its 4 and 32 MiB points 3.11-3.12, and a
# 16 MiB first send took 0.98 times a bound drawn with net_bw)
def net_bw(kv, size):
    return points_bw([(1 << 20, kv["net_bw"])] +
                     sorted((int(k[7:]), v) for k, v in kv.items()
                            if k.startswith("net_bw_")), size)

# recv: the receiver's first touch of its pages; None: the calibration's
# (the cheaper of a copy into them and their registration, fitted up to
# 4 MiB: what the tables of earlier sessions printed)
def bound_of(kv, size, recv=None):
    lin = lambda p: kv[p + "_c"] + kv[p + "_m"] * size
    wire = size / net_bw(kv, size) + kv["net_latency"]
    copy = size / copy_bw(kv, size)
    if recv is None:
        recv = min(copy + lin("copy_fault"), lin("reg_nonresident"))
    send = min(copy, lin("reg_resident"))
    parts = {"wire": wire, "recv": recv, "send": send}
    worst = max(parts, key=parts.get)
    return (parts[worst] + kv["net_latency"]) * 1e6, worst

def touch(name, size):
    for line in open(f"{tmp}/touch.{name}"):
        s, t = line.split()
        if int(s) == size:
            return float(t)
    raise KeyError(size)

# a full run's bound: the median over its rounds of the bound their own
# measurements give (the host's memory gets 1.5-2x slower for minutes at a
# time, so a model measured before the run, or read from the cache, can
# be another host's), with the receiver's first touch measured at the
# message's size (bench/first-touch.c); by: what bounds it in most rounds
def bound(rep, l, g, size):
    bs = [bound_of(calib(f"{rep}.{r}.{l}.{g}"), size,
                   touch(f"{rep}.{r}.{l}.{g}", size))
          for r in range(1, runs + 1)]
    by = [b[1] for b in bs]
    return (statistics.median(b[0] for b in bs),
            max(sorted(set(by)), key=by.count))

# the staged protocol's own cost per message at a link: its reused 16 KiB
# message (the faster of the two staged columns) less what the bound counts
# for it (its wire time and the two latencies): the RTS/RTR round trip, a
# copy at each end, and the system call softverbs pays for each message
def setup(rep, l, g):
    s = 16 << 10
    t = min(cell(rep, l, g, "reused", s, c) for c in ("bcopy", "sppln"))
    w = statistics.median(
        (s / kv["net_bw"] + 2 * kv["net_latency"]) * 1e6
        for kv in (calib(f"{rep}.{r}.{l}.{g}") for r in range(1, runs + 1)))
    return t - w

# the same for a first send: its fresh 16 KiB (the faster staged column)
# less that message's own bound. It counts what a fresh buffer adds to
# each message on this host beyond its bound: the system calls softverbs
# makes, which cost more after the application touched the buffer
# (bench/post-fault-syscall.c), the receiver's residency probe and
# userfaultfd registration before its RTR. Larger buffers evict more, so
# their setup is larger still: this is a floor.
def fresh_setup(rep, l, g):
    s = 16 << 10
    t = min(cell(rep, l, g, "fresh", s, c) for c in ("bcopy", "sppln"))
    return t - bound(rep, l, g, s)[0]

def sz(s):
    return "%dK" % (s >> 10) if s < (1 << 20) else "%dM" % (s >> 20)

regret = {}
regret_med = {}
ctl_regret = {}
print("# Regret matrix: hcr's automatic choice against each forced path, "
      "on softverbs")
print("# times in us per message (with its 1-byte answer), medians of %d "
      "rounds of %s messages (fresh from 4M) or %s (the others), reused "
      "ones after %s ms of untimed sends; %d full runs; links modelled "
      "with %s us one way; measured in %d s" %
      (runs, msgs, cheap, warm_ms, repeat, lat, int(elapsed)))
print("# %s, %d cores (%s), load average at the end %s" %
      (os.popen("date -u '+%Y-%m-%d %H:%M UTC'").read().strip(),
       os.cpu_count(), cpu, open("/proc/loadavg").read().split()[0]))
print("# path: what rndv/sppln made of auto's messages (ucx: UCX's own "
      "protocols took them; eager: a registered buffer handed to UCX's eager "
      "protocols); best: the fastest forced path")
print("# regret: the median over the rounds of auto / best - 1 in each "
      "round (the goals are judged on it); of med.: auto's median / the "
      "best's - 1")
if control:
    print("# rcv2: rc_verbs again, a control; ctl: rcv2's median / rcv's "
          "(what two identical columns read)")
for rep in range(1, repeat + 1):
    print()
    print("## full run %d" % rep)
    for l in links:
        for g in regs:
            print()
            print("link %s, registration %s" %
                  (l if l == "default" else l + " Gb/s",
                   "as measured" if g == "measured" else "+20 us"))
            print("%-5s %-6s " % ("size", "bufs") +
                  " ".join("%9s" % c for c in cols) +
                  "  %-6s %-6s %7s %8s %8s" %
                  ("path", "best", "regret", "of med.", "auto/rcv") +
                  (" %5s" % "ctl" if control else ""))
            for b in bufs:
                for s in sizes:
                    t = {c: cell(rep, l, g, b, s, c) for c in cols}
                    best = min(forced, key=t.get)
                    rg = paired(rep, l, g, b, s, best)
                    regret[(rep, l, g, b, s)] = rg
                    regret_med[(rep, l, g, b, s)] = t["auto"] / t[best] - 1
                    if control:
                        ctl_regret[(rep, l, g, b, s)] = paired(
                                rep, l, g, b, s, "rcv", "rcv2")
                    print("%-5s %-6s " % (sz(s), b) +
                          " ".join("%9.1f" % t[c] for c in cols) +
                          "  %-6s %-6s %6.1f%% %7.1f%% %8.2f" %
                          (path(rep, l, g, b, s), best, 100 * rg,
                           100 * regret_med[(rep, l, g, b, s)],
                           t["auto"] / t["rcv"]) +
                          (" %5.2f" % (t["rcv2"] / t["rcv"])
                           if control else ""))

print()
print("## summary")
for rep in range(1, repeat + 1):
    v = [x for k, x in regret.items() if k[0] == rep]
    worst = max((x, k) for k, x in regret.items() if k[0] == rep)
    reused = reused_vs_rcv(rep, "auto")
    # counts, and shares to a tenth: 86 of 96 is 89.6%, not the goal's 90
    n10 = sum(x <= 0.10 for x in v)
    n25 = sum(x <= 0.25 for x in v)
    n_over = sum(x > 1.05 for x in reused)
    vm = [x for k, x in regret_med.items() if k[0] == rep]
    print("run %d: %d cells, regret <= 10%% in %d (%.1f%%; goal >= 90%%: "
          "%s), <= 25%% in %d (%.1f%%; goal all: %s); worst %.1f%% (link "
          "%s, reg %s, %s, %s)" %
          (rep, len(v), n10, 100.0 * n10 / len(v),
           "met" if n10 >= 0.9 * len(v) else "missed", n25,
           100.0 * n25 / len(v), "met" if n25 == len(v) else "missed",
           100 * worst[0], worst[1][1], worst[1][2], worst[1][3],
           sz(worst[1][4])))
    print("       the regret of the medians: <= 10%% in %d, <= 25%% in %d, "
          "worst %.1f%%" %
          (sum(x <= 0.10 for x in vm), sum(x <= 0.25 for x in vm),
           100 * max(vm)))
    print("       reused buffers, auto / rc_verbs: max %.3f, median %.2f, "
          "%d of %d cells over 1.05 (goal: none)" %
          (max(reused), statistics.median(reused), n_over, len(reused)))
    if control:
        # the same ratio between two identical columns: how many cells
        # read over 1.05 with no difference to find
        ctl = reused_vs_rcv(rep, "rcv2")
        zc = reused_vs_rcv(rep, "zcopy")
        cv = [x for k, x in ctl_regret.items() if k[0] == rep]
        print("       control, rcv2 / rc_verbs (the same column twice), "
              "reused: max %.3f, %d of %d cells over 1.05, %d under 0.95; "
              "forced zero-copy / rc_verbs (the same protocol): max %.3f, "
              "%d over 1.05" %
              (max(ctl), sum(x > 1.05 for x in ctl), len(ctl),
               sum(x < 0.95 for x in ctl), max(zc),
               sum(x > 1.05 for x in zc)))
        print("       the control's \"regret\" (rcv2 / rcv - 1 by rounds), "
              "every cell: over 10%% in %d of %d, over 25%% in %d, worst "
              "%.1f%%" %
              (sum(x > 0.10 for x in cv), len(cv),
               sum(x > 0.25 for x in cv), 100 * max(cv)))
if repeat > 1:
    for what, rgs in (("regret", regret), ("regret of the medians",
                                            regret_med)):
        spread = {k[1:]: max(rgs[(rep,) + k[1:]] for rep in
                             range(1, repeat + 1)) -
                         min(rgs[(rep,) + k[1:]] for rep in
                             range(1, repeat + 1))
                  for k in rgs if k[0] == 1}
        sp = sorted(spread.values())
        wk = max(spread, key=spread.get)
        print("run-to-run spread of a cell's %s: median %.1f points, 90th "
              "percentile %.1f, max %.1f (link %s, reg %s, %s, %s)" %
              (what, 100 * statistics.median(sp),
               100 * sp[int(0.9 * (len(sp) - 1))], 100 * sp[-1], wk[0],
               wk[1], wk[2], sz(wk[3])))

print()
print("## first sends against their bound (fresh buffers, last full run)")
print("# bound: median over the run's rounds of each round's own "
      "calibration and first touch; cached: the bound earlier tables "
      "printed (the cached model alone)")
print("# setup: the staged protocol's own cost per message at that link "
      "(its reused 16 KiB less the wire time and latencies the bound "
      "counts); net: auto / (bound + setup)")
print("# fsetup: the same on fresh buffers (the fresh 16 KiB less its bound: "
      "what touching new buffers adds to each message's system calls and "
      "setup here, a floor for larger ones); fnet: auto / (bound + fsetup)")
print("%-8s %-8s %-5s %10s %-5s %10s %10s %7s %8s %6s %5s %6s %5s" %
      ("link", "reg", "size", "bound us", "by", "cached us", "auto us",
       "ratio", "goal", "setup", "net", "fsetup", "fnet"))
rep = repeat
for l in links:
    for g in regs:
        su = setup(rep, l, g)
        fsu = fresh_setup(rep, l, g)
        for s in sizes:
            bd, by = bound(rep, l, g, s)
            bc = bound_of(calib(f"{l}.{g}"), s)[0]
            a = cell(rep, l, g, "fresh", s, "auto")
            goal = "<=1.25" if (l in ("25", "10") and s >= 256 << 10) else ""
            flag = "missed" if goal and a / bd > 1.25 else ""
            print("%-8s %-8s %-5s %10.1f %-5s %10.1f %10.1f %7.2f %8s %6.1f "
                  "%5.2f %6.1f %5.2f %s" %
                  (l, g, sz(s), bd, by, bc, a, a / bd, goal, su,
                   a / (bd + su), fsu, a / (bd + fsu), flag))

# the heat map's data: one row per link, registration and buffers
with open(f"{tmp}/heat.dat", "w") as f:
    for i, (l, g, b) in enumerate((l, g, b) for l in links for g in regs
                                  for b in bufs):
        for j, s in enumerate(sizes):
            f.write("%d %d %.1f\n" % (j, i, 100 * regret[(repeat, l, g, b, s)]))
        f.write("\n")
with open(f"{tmp}/heat.labels", "w") as f:
    f.write("set ytics (%s)\n" % ", ".join(
        '"%s %s %s" %d' % (l if l == "default" else l + "G",
                           "reg" if g == "measured" else "reg+20", b, i)
        for i, (l, g, b) in enumerate((l, g, b) for l in links for g in regs
                                      for b in bufs)))
    f.write("set xtics (%s)\n" % ", ".join('"%s" %d' % (sz(s), j)
                                           for j, s in enumerate(sizes)))
    f.write("set yrange [-0.5:%.1f]\n" % (len(links) * len(regs) * 2 - 0.5))
    f.write("set xrange [-0.5:%.1f]\n" % (len(sizes) - 0.5))
PY

if command -v gnuplot > /dev/null; then
    gnuplot <<GP
set terminal png size 900,700
set output "$out/choice-matrix.png"
set title "Regret of hcr's automatic choice (%, auto / best forced path - 1)"
load "$tmp/heat.labels"
set cbrange [0:50]
set palette defined (0 "white", 10 "yellow", 25 "orange", 50 "red")
unset key
plot "$tmp/heat.dat" using 1:2:3 with image, \
     "$tmp/heat.dat" using 1:2:(sprintf("%.0f", \$3)) with labels
GP
else
    echo "gnuplot not installed: no heat map" >&2
fi
cat "$out/choice-matrix.txt"
