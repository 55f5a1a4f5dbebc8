#!/bin/bash
# RVMA put latency and message rate (issue 7), side by side in one run on
# UCX_TLS=hcr over softverbs (bench/rvma-lat.c): for 8 B..64 KiB, the time
# until the target knows the data is there, for
#   rvma  - ucp_rvma_put_nbx() and the target's completion pointer,
#   flush - put + flush + tag send (what InfiniBand needs to signal a put),
#   poll  - put whose last byte the target polls;
# and the message rate of 1 and 4 initiators into one window. RUNS runs
# (default 5); the table shows medians and the ratios the issue's goals
# name. Writes bench/results/rvma-lat.txt. Extra environment (e.g. UCX_TLS=tcp
# or SOFTVERBS_LINK_GBPS=25) is passed through.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
out=$bench_top/bench/results
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

have_softverbs || { echo "softverbs not installed: run make install" >&2; exit 1; }
gcc -O2 -Wall -o "$tmp/rvma-lat" "$bench_top/bench/rvma-lat.c" \
    -I"$UCX_HCR_PREFIX/include" -L"$UCX_HCR_PREFIX/lib" \
    -Wl,-rpath,"$UCX_HCR_PREFIX/lib" -lucp -lucs

env_run="$(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=${UCX_TLS:-hcr}"
r=1
tries=0
while [ "$r" -le "$RUNS" ]; do
    # shellcheck disable=SC2086
    if env $env_run timeout 300 "$tmp/rvma-lat" -n 1000 -m 20000 -p 4 \
           > "$tmp/run.$r" && [ "$(grep -c '^rate' "$tmp/run.$r")" = 2 ]; then
        r=$((r + 1))
    else
        tries=$((tries + 1))
        echo "run $r incomplete, retrying" >&2
        [ "$tries" -lt 3 ] || { echo "rvma-lat keeps failing" >&2; exit 1; }
    fi
done

python3 - "$tmp" "$RUNS" "${UCX_TLS:-hcr}" > "$out/rvma-lat.txt" <<'PY'
import sys, statistics
tmp, runs, tls = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lat, rate = {}, {}
for r in range(1, runs + 1):
    for line in open(f"{tmp}/run.{r}"):
        f = line.split()
        if f[0] == "lat":
            lat.setdefault(int(f[1]), []).append([float(x) for x in f[2:5]])
        elif f[0] == "rate":
            rate.setdefault(int(f[1]), []).append(float(f[2]))
med = {s: [statistics.median(v[i] for v in vals) for i in range(3)]
       for s, vals in lat.items()}
print(f"# UCX_TLS={tls}: time until the target knows the data is there, us,"
      f" median of {runs} runs (each the median of 1000 ping-pongs)")
print("%-7s %8s %8s %8s %10s %10s" % ("size", "rvma", "flush", "poll",
                                      "rvma/flush", "rvma/poll"))
for s in sorted(med):
    a, b, c = med[s]
    print("%-7d %8.2f %8.2f %8.2f %10.2f %10.2f" % (s, a, b, c, a / b, a / c))
small = [s for s in med if s <= 4096]
print()
print("rvma / flush, 8 B..4 KiB: max %.2f (goal <= 0.60)" %
      max(med[s][0] / med[s][1] for s in small))
print("rvma / poll, 8 B..64 KiB: max %.2f (goal <= 1.15)" %
      max(med[s][0] / med[s][2] for s in med))
for p in sorted(rate):
    print("message rate, %d initiator(s) into one window, 8 B puts: "
          "%.0f puts/s (median)" % (p, statistics.median(rate[p])))
PY
cat "$out/rvma-lat.txt"
