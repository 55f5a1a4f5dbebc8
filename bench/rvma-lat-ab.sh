#!/bin/bash
# RVMA put latency (bench/rvma-lat.c, UCX_TLS=hcr, fast path) with the
# libsoftverbs of an older revision (built here from `git archive`) and the
# installed one, interleaved run by run (RUNS, default 5), so that a busy
# period of the host hits both: the ratios issue 7 names (RVMA put / polled
# put, 8 B..64 KiB; RVMA put / put + flush + tag, 8 B..4 KiB), medians, old
# and new side by side. bench/rvma-lat.sh is the full benchmark of one
# library.
#
#   bench/rvma-lat-ab.sh [REV]      (REV default 65d1f44, before issue 28)
#
# Writes bench/results/rvma-lat-ab.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rev=${1:-65d1f44}
RUNS=${RUNS:-5}
bench_prepare
bench_cc_ucp "$tmp/rvma-lat" "$bench_top/bench/rvma-lat.c"

git -C "$bench_top" archive "$rev" contrib/softverbs | tar -x -C "$tmp"
srcs=$(sed -n '/^libsoftverbs_la_SOURCES/,/^$/p' \
       "$tmp/contrib/softverbs/Makefile.am" | grep -o 'sv[a-z_]*\.c')
# shellcheck disable=SC2046
gcc -O2 -g -Wall -fvisibility=hidden -fPIC -shared -o "$tmp/old.so" \
    $(printf "$tmp/contrib/softverbs/%s " $srcs) -lpthread

for r in $(seq "$RUNS"); do
    for v in old new; do
        lib=$tmp/old.so
        [ $v = new ] && lib=$SOFTVERBS_LIB
        env LD_PRELOAD="$lib" SOFTVERBS_MEMLOCK_LIMIT=unlimited \
            UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=hcr UCX_HCR_RVMA_FAST=y \
            timeout 300 "$tmp/rvma-lat" -n 1000 -m 20000 -p 1 |
            awk -v v=$v '/^lat / { print v, $2, $3, $4, $5 }' >> "$tmp/lat" ||
            echo "run $r ($v) failed" >&2
    done
done

python3 - "$tmp/lat" "$rev" "$RUNS" <<'PY' | tee "$out/rvma-lat-ab.txt"
import sys, statistics, time, os, platform
d = {}
for line in open(sys.argv[1]):
    v, s, rv, fl, po = line.split()
    d.setdefault((v, int(s)), []).append((float(rv), float(fl), float(po)))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")
print("# RVMA put on hcr over softverbs, %s; %s (%d cores), kernel %s"
      % (time.strftime("%Y-%m-%d"), cpu, os.cpu_count(), platform.release()))
print("# old = libsoftverbs of %s, new = the installed one; us, medians of %s"
      " interleaved runs (each the median of 1000 ping-pongs)"
      % (sys.argv[2], sys.argv[3]))
print("%-6s %8s %8s %9s %9s %8s %8s %9s %9s" % (
    "size", "old rvma", "old poll", "rvma/poll", "rvma/flsh", "new rvma",
    "new poll", "rvma/poll", "rvma/flsh"))
worst = {"old": [0, 0], "new": [0, 0]}
for s in sorted({k[1] for k in d}):
    row = [s]
    for v in ("old", "new"):
        x = d.get((v, s), [])
        if not x:
            row += [float("nan")] * 4
            continue
        rv, fl, po = (statistics.median(t[i] for t in x) for i in range(3))
        row += [rv, po, rv / po, rv / fl]
        worst[v][0] = max(worst[v][0], rv / po)
        if s <= 4096:
            worst[v][1] = max(worst[v][1], rv / fl)
    print("%-6d %8.2f %8.2f %9.2f %9.2f %8.2f %8.2f %9.2f %9.2f" % tuple(row))
for v in ("old", "new"):
    print("%s: rvma / poll max %.2f (goal <= 1.15), rvma / flush max %.2f up"
          " to 4 KiB (goal <= 0.60)" % (v, worst[v][0], worst[v][1]))
PY
