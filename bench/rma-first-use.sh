#!/bin/bash
# RMA put and get from and into buffers never used before, against reused
# ones (issue 6: put/choose and get/choose), side by side in one run
# (bench/rma-first-use.c): hcr automatic, hcr forced bcopy, forced staged put
# (gets bcopy) and forced zcopy (UCX_RNDV_SPPLN_PATH), rc_verbs with its
# registration cache. Each
# configuration runs RUNS times (default 3); the table shows medians and the
# first-use ratio hcr-auto / rc_verbs. Writes bench/results/rma-first-use.txt.
# Extra environment (e.g. SOFTVERBS_REG_COST_US=20) is passed through; with
# SECTIONS=1 the run is repeated at 20 us per registration and appended.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
SIZES=${SIZES:-2048 8192 65536 262144 1048576 4194304}
bench_prepare
bench_cc_ucp "$tmp/rfu" "$bench_top/bench/rma-first-use.c"

declare -A cfg=(
    [hcr-auto]="UCX_TLS=hcr"
    [hcr-bcopy]="UCX_TLS=hcr UCX_RNDV_SPPLN_PATH=bcopy"
    [hcr-staged]="UCX_TLS=hcr UCX_RNDV_SPPLN_PATH=sppln"
    [hcr-zcopy]="UCX_TLS=hcr UCX_RNDV_SPPLN_PATH=zcopy"
    [rcv-rcache]="UCX_TLS=rc_v"
)
names="hcr-auto hcr-bcopy hcr-staged hcr-zcopy rcv-rcache"
size_args=$(for s in $SIZES; do printf -- '-s %s ' "$s"; done)

section() {  # section EXTRA_ENV: one table on stdout
    local r n
    for r in $(seq "$RUNS"); do
        for n in $names; do
            # shellcheck disable=SC2086
            env $(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n $1 ${cfg[$n]} \
                timeout 300 "$tmp/rfu" -n 7 -b 20 $size_args \
                > "$tmp/$n.$r" || { echo "$n run $r failed" >&2; exit 1; }
        done
    done
    python3 - "$tmp" "$RUNS" "$1" $names <<'PY'
import sys, statistics
tmp, runs, extra, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], \
                          sys.argv[4:]
data = {}
for n in names:
    rows = {}
    for r in range(1, runs + 1):
        for line in open(f"{tmp}/{n}.{r}"):
            f = line.split()
            rows.setdefault(int(f[0]), []).append([float(x) for x in f[1:5]])
    data[n] = {s: [statistics.median(v[i] for v in vals) for i in range(4)]
               for s, vals in rows.items()}
sizes = sorted(data[names[0]])
print("# %sMB/s, median of %d runs: put first/best, get first/best"
      % (extra + ": " if extra else "", runs))
print("%-9s" % "size" + "".join("%24s" % n for n in names))
for s in sizes:
    print("%-9d" % s + "".join("%6.0f/%-5.0f %5.0f/%-5.0f" % tuple(data[n][s])
                               for n in names))
print("first use, hcr-auto / rc_verbs+rcache: " + ", ".join(
      "%d: put %.2f get %.2f" % (s, data['hcr-auto'][s][0] /
                                 data['rcv-rcache'][s][0],
                                 data['hcr-auto'][s][2] /
                                 data['rcv-rcache'][s][2]) for s in sizes))
print("reused, hcr-auto / rc_verbs+rcache: put min %.2f, get min %.2f" % (
      min(data['hcr-auto'][s][1] / data['rcv-rcache'][s][1] for s in sizes),
      min(data['hcr-auto'][s][3] / data['rcv-rcache'][s][3] for s in sizes)))
print()
PY
}

{
    section ""
    if [ "${SECTIONS:-0}" = 1 ]; then
        section "SOFTVERBS_REG_COST_US=20"
    fi
} > "$out/rma-first-use.txt"
cat "$out/rma-first-use.txt"
