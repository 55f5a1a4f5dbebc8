#!/bin/bash
# RVMA put latency and message rate (issue 7), side by side in one run on
# UCX_TLS=hcr over softverbs (bench/rvma-lat.c): for 8 B..64 KiB, the time
# until the target knows the data is there, for
#   rvma  - ucp_rvma_put_nbx() and the target's completion pointer,
#   flush - put + flush + tag send (what InfiniBand needs to signal a put),
#   poll  - put whose last byte the target polls;
# and the message rate of 1 and 4 initiators into one window, and the
# fabric's floors without UCX (perftest's send/write latencies, and
# bench/verbs-notify-lat.c: a write with immediate whose target polls its
# CQ against a write whose target polls its last byte). Each run goes
# twice, with the hcr fast path (UCX_RVMA_FAST=y, the default: one
# write-with-immediate per put, of the data up to UCX_RVMA_FAST_MAX and
# above it of a record the target reads the data by) and without it
# (=n: the active message path every transport has). RUNS runs
# (default 5); the table shows medians and the ratios the issue's goals
# name. Writes bench/results/rvma-lat.txt. Extra environment (e.g. UCX_TLS=tcp
# or SOFTVERBS_LINK_GBPS=25) is passed through.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
bench_prepare
bench_cc_ucp "$tmp/rvma-lat" "$bench_top/bench/rvma-lat.c"

env_run="$(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=${UCX_TLS:-hcr}"
r=1
tries=0
while [ "$r" -le "$RUNS" ]; do
    # shellcheck disable=SC2086
    if env $env_run UCX_RVMA_FAST=y timeout 300 "$tmp/rvma-lat" \
           -n 1000 -m 20000 -p 4 > "$tmp/run.$r" &&
       [ "$(grep -c '^rate' "$tmp/run.$r")" = 2 ] &&
       env $env_run UCX_RVMA_FAST=n timeout 300 "$tmp/rvma-lat" \
           -n 1000 -m 20000 -p 4 > "$tmp/am.$r" &&
       [ "$(grep -c '^rate' "$tmp/am.$r")" = 2 ]; then
        r=$((r + 1))
    else
        tries=$((tries + 1))
        echo "run $r incomplete, retrying" >&2
        [ "$tries" -lt 3 ] || { echo "rvma-lat keeps failing" >&2; exit 1; }
    fi
done

# The fabric's own floor, without UCX: a receive completion (what the
# target of a write-with-immediate waits for) against a polled byte, as
# perftest measures them on softverbs (typical latency, us)
verbs_lat() {  # verbs_lat TOOL SIZE PORT
    local srv_out
    srv_out=$(mktemp)
    # shellcheck disable=SC2086
    env $(softverbs_env) timeout 60 "$1" -d softverbs0 -s "$2" -n 5000 \
        -p "$3" > "$srv_out" 2>&1 &
    sleep 0.7
    # shellcheck disable=SC2086
    env $(softverbs_env) timeout 60 "$1" -d softverbs0 -s "$2" -n 5000 \
        -p "$3" localhost 2>/dev/null |
        awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $5 }' | tail -n 1
    wait
    rm -f "$srv_out"
}
: > "$tmp/floor"
if have_softverbs && command -v ib_send_lat > /dev/null &&
   [ -z "${SOFTVERBS_NET:-}" ]; then
    port=18515
    for r in $(seq 1 "$RUNS"); do
        for s in 8 4096; do
            port=$((port + 2))
            echo "floor $s $(verbs_lat ib_send_lat "$s" "$port")" \
                 "$(verbs_lat ib_write_lat "$s" $((port + 1)))" >> "$tmp/floor"
        done
    done
fi
# and the floor under the polled-put goal for a put placed straight into a
# posted buffer: the target learns of it from its receive CQ
# (bench/verbs-notify-lat.c)
: > "$tmp/notify"
if have_softverbs && [ -z "${SOFTVERBS_NET:-}" ] &&
   gcc -O2 -Wall -I"$bench_top/contrib/softverbs" -o "$tmp/vnl" \
       "$bench_top/bench/verbs-notify-lat.c" -libverbs 2> /dev/null; then
    for r in $(seq 1 "$RUNS"); do
        # shellcheck disable=SC2046
        env $(softverbs_env) timeout 120 "$tmp/vnl" >> "$tmp/notify" ||
            echo "verbs-notify-lat run $r failed" >&2
    done
fi

python3 - "$tmp" "$RUNS" "${UCX_TLS:-hcr}" > "$out/rvma-lat.txt" <<'PY'
import sys, statistics
tmp, runs, tls = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lat, rate, lat_am, rate_am = {}, {}, {}, {}
def parse(path, lat, rate):
    for line in open(path):
        f = line.split()
        if f[0] == "lat":
            lat.setdefault(int(f[1]), []).append([float(x) for x in f[2:5]])
        elif f[0] == "rate":
            rate.setdefault(int(f[1]), []).append(float(f[2]))
for r in range(1, runs + 1):
    parse(f"{tmp}/run.{r}", lat, rate)
    parse(f"{tmp}/am.{r}", lat_am, rate_am)
med = {s: [statistics.median(v[i] for v in vals) for i in range(3)]
       for s, vals in lat.items()}
med_am = {s: statistics.median(v[0] for v in vals)
          for s, vals in lat_am.items()}
print(f"# UCX_TLS={tls}: time until the target knows the data is there, us,"
      f" median of {runs} runs (each the median of 1000 ping-pongs)")
print("# rvma: fast path on (hcr: one write-with-immediate; the data copied"
      " through the ring up to FAST_MAX, read by the target above it);"
      " rvma-am: UCX_RVMA_FAST=n")
print("%-7s %8s %8s %8s %8s %10s %10s" % ("size", "rvma", "rvma-am", "flush",
                                          "poll", "rvma/flush", "rvma/poll"))
for s in sorted(med):
    a, b, c = med[s]
    print("%-7d %8.2f %8.2f %8.2f %8.2f %10.2f %10.2f" %
          (s, a, med_am[s], b, c, a / b, a / c))
small = [s for s in med if s <= 4096]
print()
print("rvma / flush, 8 B..4 KiB: max %.2f (goal <= 0.60)" %
      max(med[s][0] / med[s][1] for s in small))
print("rvma / poll, 8 B..64 KiB: max %.2f (goal <= 1.15)" %
      max(med[s][0] / med[s][2] for s in med))
floor = {}
for line in open(f"{tmp}/floor"):
    f = line.split()
    if len(f) == 4:
        floor.setdefault(int(f[1]), []).append((float(f[2]), float(f[3])))
for s in sorted(floor):
    send = statistics.median(v[0] for v in floor[s])
    write = statistics.median(v[1] for v in floor[s])
    print("fabric floor, %d B (perftest, no UCX): ib_send_lat %.2f us / "
          "ib_write_lat %.2f us = %.2f" % (s, send, write, send / write))
notify = {}
for line in open(f"{tmp}/notify"):
    f = line.split()
    if len(f) == 4 and f[0] == "notify":
        notify.setdefault(int(f[1]), []).append((float(f[2]), float(f[3])))
for s in sorted(notify):
    write = statistics.median(v[0] for v in notify[s])
    wimm = statistics.median(v[1] for v in notify[s])
    print("fabric floor, %d B (verbs, no UCX): write with immediate, target "
          "polls its CQ %.2f us / write, target polls the last byte %.2f us "
          "= %.2f" % (s, wimm, write, wimm / write))
for p in sorted(rate):
    print("message rate, %d initiator(s) into one window, 8 B puts: "
          "%.0f puts/s fast path, %.0f active messages (medians)" %
          (p, statistics.median(rate[p]), statistics.median(rate_am[p])))
PY
cat "$out/rvma-lat.txt"
