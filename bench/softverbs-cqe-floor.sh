#!/bin/bash
#
# How close softverbs' receive path can come to a polled write (issue 28):
# bench/softverbs-cqe-floor.c's ping-pongs of process_vm_writev() without
# softverbs (a polled write; a completion flag stored after the call at no
# software cost; the flag written by the same call after the data) beside
# softverbs' own write with immediate against its polled write
# (bench/verbs-notify-lat.c), in the same rounds, medians of RUNS rounds
# (default 9) of each round's ratio. Writes
# bench/results/softverbs-cqe-floor.txt.
#
#   bench/softverbs-cqe-floor.sh
#
set -eu
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
runs=${RUNS:-9}
have_softverbs || { echo "softverbs is not installed ($SOFTVERBS_LIB)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gcc -O2 -Wall -o "$tmp/floor" "$bench_top/bench/softverbs-cqe-floor.c"
gcc -O2 -Wall -I"$bench_top/contrib/softverbs" -o "$tmp/vnl" \
    "$bench_top/bench/verbs-notify-lat.c" -libverbs

: >"$tmp/samples"
for r in $(seq "$runs"); do
    for s in 8 4096 65536; do
        "$tmp/floor" -s "$s" -n 20000 >>"$tmp/samples"
        LD_PRELOAD="$SOFTVERBS_LIB" SOFTVERBS_MEMLOCK_LIMIT=unlimited \
            "$tmp/vnl" -s "$s" -n 4000 >>"$tmp/samples"
    done
done

python3 - "$tmp/samples" "$runs" <<'PY' | tee "$bench_top/bench/results/softverbs-cqe-floor.txt"
import os, platform, statistics, sys, time
path, runs = sys.argv[1], int(sys.argv[2])
floor, sv = {}, {}
for line in open(path):
    f = line.split()
    if f[0] == "floor":
        floor.setdefault(int(f[1]), []).append([float(x) for x in f[2:5]])
    elif f[0] == "notify":
        sv.setdefault(int(f[1]), []).append([float(x) * 1e3 for x in f[2:4]])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")
print("# process_vm_writev ping-pong floors against softverbs, %s; %s "
      "(%d cores), kernel %s" % (time.strftime("%Y-%m-%d"), cpu,
                                 os.cpu_count(), platform.release()))
print("# half round trips in ns, medians of %d rounds; ratios: medians of "
      "each round's ratio to the polled write of the same program" % runs)
print("%-7s %8s %8s %8s %7s %7s   %9s %9s %7s" % (
    "size", "polled", "after", "ride", "after/", "ride/", "sv write",
    "sv wimm", "wimm/"))
print("%-7s %8s %8s %8s %7s %7s   %9s %9s %7s" % (
    "", "", "", "", "polled", "polled", "", "", "write"))
med = statistics.median
for s in sorted(floor):
    fl, v = floor[s], sv.get(s, [[float("nan")] * 2])
    print("%-7d %8.0f %8.0f %8.0f %7.3f %7.3f   %9.0f %9.0f %7.3f" % (
        s, med(x[0] for x in fl), med(x[1] for x in fl),
        med(x[2] for x in fl), med(x[1] / x[0] for x in fl),
        med(x[2] / x[0] for x in fl), med(x[0] for x in v),
        med(x[1] for x in v), med(x[1] / x[0] for x in v)))
PY
