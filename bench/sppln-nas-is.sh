#!/bin/bash
# A benchmark modelled on NAS IS (issue 6; bench/sppln-nas-is.c): keys made
# once, untimed, as NPB's IS does; every timed iteration buckets them, and
# exchanges them from and into buffers never used before. Total
# time and exchange time of hcr with the automatic per-message choice vs
# rc_verbs with UCX's registration cache, side by side: RUNS runs (default
# 5), interleaved; the table shows medians. hcr-thp is the automatic choice
# with UCX_RNDV_SPPLN_FRESH_THP=y (off by default: it gives the
# application's fresh receive buffers transparent huge pages); hcr-collapse
# is the automatic choice with UCX_RNDV_SPPLN_FRESH_COLLAPSE=y (off by
# default: the receiver collapses the whole 2 MiB pieces of its fresh
# buffers into huge pages, and a collapse may wait for the other core's next
# tick); hcr-populate is the automatic choice with the receiver's way for
# fresh pages before UCX_RNDV_SPPLN_FRESH_COPY=uffd became the default
# (faulted in ahead with MADV_POPULATE_WRITE, then copied into).
# hcr-auto-pf and rcv-rcache-pf run with -p, their receive buffers
# written before the exchange is timed: the difference to hcr-auto and
# rcv-rcache is what the receiver's first touch costs each transport inside
# the exchange. Goals: total
# time hcr / rc_verbs <= 0.75 (issue 6), exchange time alone <= 0.75
# (issue 29). Writes bench/results/sppln-nas-is.txt. Extra environment (e.g.
# SOFTVERBS_REG_COST_US=20) is passed through; NAS_IS_ARGS (default
# "-k 23 -m 19 -i 10", class A's keys) sets the problem.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
ARGS=${NAS_IS_ARGS:--k 23 -m 19 -i 10}
bench_prepare
bench_cc_ucp "$tmp/nis" "$bench_top/bench/sppln-nas-is.c"

declare -A cfg=(
    [hcr-auto]="UCX_TLS=hcr"
    [hcr-thp]="UCX_TLS=hcr UCX_RNDV_SPPLN_FRESH_THP=y"
    [hcr-collapse]="UCX_TLS=hcr UCX_RNDV_SPPLN_FRESH_COLLAPSE=y"
    [hcr-populate]="UCX_TLS=hcr UCX_RNDV_SPPLN_FRESH_COPY=kcopy"
    [rcv-rcache]="UCX_TLS=rc_v"
    [hcr-auto-pf]="UCX_TLS=hcr"
    [rcv-rcache-pf]="UCX_TLS=rc_v"
)
declare -A opt=([hcr-auto-pf]=-p [rcv-rcache-pf]=-p)
names="hcr-auto hcr-thp hcr-collapse hcr-populate rcv-rcache hcr-auto-pf"
names="$names rcv-rcache-pf"
base="$(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n"

for r in $(seq "$RUNS"); do
    for n in $names; do
        # shellcheck disable=SC2086
        env $base ${cfg[$n]} timeout 300 "$tmp/nis" $ARGS ${opt[$n]:-} \
            > "$tmp/$n.$r" ||
            { echo "$n run $r failed" >&2; exit 1; }
    done
done

python3 - "$tmp" "$RUNS" "$ARGS" $names > "$out/sppln-nas-is.txt" <<'PY'
import os, statistics, sys
tmp, runs, args, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
med = {}
for n in names:
    rows = [list(map(float, open(f"{tmp}/{n}.{r}").read().split()))
            for r in range(1, runs + 1)]
    med[n] = [statistics.median(row[i] for row in rows) for i in range(4)]
link = os.environ.get("SOFTVERBS_LINK_GBPS")
print("# NAS IS-like exchange (%s), fresh buffers every iteration; medians "
      "of %d runs; %s" % (args, runs,
                          ("softverbs link model %s Gb/s + %s us" %
                           (link, os.environ.get("SOFTVERBS_LINK_LAT_US", "0")))
                          if link else "softverbs' default link"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "unknown CPU")
print("# %s, %d cores (%s)" %
      (os.popen("date -u '+%Y-%m-%d %H:%M UTC'").read().strip(),
       os.cpu_count(), cpu))
print("%-13s %9s %14s %15s %14s" % ("config", "total s", "per iter ms",
                                     "exchange ms", "MiB each way"))
for n in names:
    t, it, ex, b = med[n]
    print("%-13s %9.3f %14.2f %15.2f %14.1f" % (n, t, it, ex, b / 2**20))
h, r = med["hcr-auto"], med["rcv-rcache"]
print()
print("total time hcr-auto / rc_verbs:    %.2f (goal <= 0.75)%s"
      % (h[0] / r[0], "" if h[0] / r[0] <= 0.75 else "    -- missed"))
for n in ("hcr-auto", "hcr-thp", "hcr-collapse", "hcr-populate"):
    x = med[n][2] / r[2]
    print("exchange time %-13s / rc_verbs: %.2f (goal <= 0.75)%s"
          % (n, x, "" if x <= 0.75 else "    -- missed"))
# what the goal leaves to the exchange: the rest of an iteration (keys,
# buckets, ranking, the first touches of their fresh pages) is the same work
# for both transports
print("total time ratio if hcr-auto's exchange took no time: %.2f"
      % ((r[1] - r[2]) / r[1]))
# the decomposition (-p): receive buffers written before the clock starts
hp, rp = med["hcr-auto-pf"], med["rcv-rcache-pf"]
print()
print("exchange with receive pages written beforehand (-p): hcr-auto %.2f ms,"
      " rc_verbs %.2f ms, ratio %.2f" % (hp[2], rp[2], hp[2] / rp[2]))
print("the receiver's first touch inside the exchange: hcr-auto +%.2f ms, "
      "rc_verbs +%.2f ms" % (h[2] - hp[2], r[2] - rp[2]))
PY
cat "$out/sppln-nas-is.txt"
