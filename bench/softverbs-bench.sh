#!/bin/bash
#
# softverbs benchmark: is the emulator's own overhead small enough?
#
# Prints one table:
#   - rc_verbs put_bw at 1 MiB, as a ratio to single-core cold memcpy
#     bandwidth measured in the same run (goal >= 0.8)
#   - rc_verbs put_lat and am_lat at 8 B (goal < 5 us)
#   - the same with the link model at SV_BENCH_GBPS (default 25) Gb/s and
#     SV_BENCH_LAT_US (default 2) us: bandwidth within 10% of the link rate,
#     latencies within 10% of (no-link latency + link latency)
#
# Environment: UCX_HCR_PREFIX (see lib.sh), SV_BENCH_REPS (3),
# SOFTVERBS_* knobs are passed through (e.g. SOFTVERBS_MOVER=inline).
# Falls back to ucx_perftest and libsoftverbs.so from PATH / SOFTVERBS_LIB
# when the prefix has none.
#
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

reps=${SV_BENCH_REPS:-3}
gbps=${SV_BENCH_GBPS:-25}
lat_us=${SV_BENCH_LAT_US:-2}

if [ ! -x "$PERFTEST" ]; then
    PERFTEST=$(command -v ucx_perftest) || {
        echo "softverbs-bench: no ucx_perftest (build or apt-get install ucx-utils)" >&2
        exit 1
    }
fi
if [ ! -f "$SOFTVERBS_LIB" ]; then
    for c in "${SV_BENCH_LIB:-}" /tmp/sv/libsoftverbs.so; do
        if [ -n "$c" ] && [ -f "$c" ]; then
            SOFTVERBS_LIB=$c
            break
        fi
    done
fi
if [ ! -f "$SOFTVERBS_LIB" ]; then
    echo "softverbs-bench: libsoftverbs.so not found (build it first)" >&2
    exit 1
fi
memcpy_tool=$UCX_HCR_PREFIX/bin/softverbs-memcpy-bw
if [ ! -x "$memcpy_tool" ]; then
    memcpy_tool=$(mktemp -d)/softverbs-memcpy-bw
    cc -O2 -o "$memcpy_tool" "$bench_top/contrib/softverbs/sv_memcpy_bw.c" || exit 1
fi

# UCX registers ~36 MiB of receive buffers per rc_verbs iface: more than the
# default 8 MiB RLIMIT_MEMLOCK that softverbs enforces
base_env="LD_PRELOAD=$SOFTVERBS_LIB SOFTVERBS_MEMLOCK_LIMIT=unlimited"
for v in $(env | grep -o '^SOFTVERBS_[A-Z_]*=[^ ]*' | grep -v MEMLOCK); do
    base_env="$base_env $v"
done
link_env="$base_env SOFTVERBS_LINK_GBPS=$gbps SOFTVERBS_LINK_LAT_US=$lat_us"
uct="-x rc_verbs -d softverbs0:1"

# run a perftest $reps times; print the median of field $1 of "Final:"
# (after lib.sh's shift: 2=p50_us 3=avg_us 5=avg_MBps)
med() {
    local field=$1 envs=$2 r out
    shift 2
    for r in $(seq "$reps"); do
        out=$(perftest_pair "$envs" "$@") || { echo nan; return; }
        echo "$out" | awk -v f="$field" '{ print $f }'
    done | median
}

memcpy_bw=$(for r in $(seq "$reps"); do "$memcpy_tool" 1048576 0.5; done | median)
bw=$(med 5 "$base_env" $uct -t put_bw -D zcopy -s 1048576 -n 2000 -w 200)
plat=$(med 2 "$base_env" $uct -t put_lat -s 8 -n 20000 -w 2000)
alat=$(med 2 "$base_env" $uct -t am_lat -s 8 -n 20000 -w 2000)
# the link run keeps 8 puts in flight (-O 8), as a NIC pipeline would: with
# one at a time, each put pays serialisation, link latency and the copy in
# turn and the link idles in between
lbw=$(med 5 "$link_env" $uct -t put_bw -D zcopy -s 1048576 -n 500 -w 50 -O 8)
lplat=$(med 2 "$link_env" $uct -t put_lat -s 8 -n 5000 -w 500)
lalat=$(med 2 "$link_env" $uct -t am_lat -s 8 -n 5000 -w 500)

awk -v mc="$memcpy_bw" -v bw="$bw" -v pl="$plat" -v al="$alat" \
    -v lbw="$lbw" -v lpl="$lplat" -v lal="$lalat" -v gbps="$gbps" \
    -v lat="$lat_us" -v mover="${SOFTVERBS_MOVER:-auto}" 'BEGIN {
    link = gbps * 1e9 / 8 / 1048576          # MiB/s
    ser8 = 8 * 8 / (gbps * 1e3)              # us for 8 bytes
    printf "softverbs bench (mover=%s, medians of runs; MiB/s = 2^20 B/s)\n", mover
    printf "%-40s %12s %12s %-14s %s\n", "metric", "value", "reference", "goal", "ok"
    r = bw / mc
    printf "%-40s %12.1f %12.1f %-14s\n", "memcpy cold 1 MiB, 1 core [MiB/s]", mc, mc, "-"
    printf "%-40s %12.1f %12.2f %-14s %s\n", "rc_verbs put_bw 1 MiB [MiB/s] / ratio", bw, r, "ratio >= 0.8", (r >= 0.8 ? "yes" : "NO")
    printf "%-40s %12.2f %12s %-14s %s\n", "rc_verbs put_lat 8 B [us]", pl, "-", "< 5 us", (pl < 5 ? "yes" : "NO")
    printf "%-40s %12.2f %12s %-14s %s\n", "rc_verbs am_lat 8 B [us]", al, "-", "< 5 us", (al < 5 ? "yes" : "NO")
    d = (lbw - link) / link
    printf "%-40s %12.1f %12.1f %-14s %s\n", sprintf("link %g Gb/s: put_bw 1 MiB [MiB/s]", gbps), lbw, link, "within 10%", (d < 0.1 && d > -0.1 ? "yes" : "NO")
    e = pl + lat + ser8
    d = (lpl - e) / e
    printf "%-40s %12.2f %12.2f %-14s %s\n", sprintf("link %g us: put_lat 8 B [us]", lat), lpl, e, "within 10%", (d < 0.1 && d > -0.1 ? "yes" : "NO")
    e = al + lat + ser8
    d = (lal - e) / e
    printf "%-40s %12.2f %12.2f %-14s %s\n", sprintf("link %g us: am_lat 8 B [us]", lat), lal, e, "within 10%", (d < 0.1 && d > -0.1 ? "yes" : "NO")
}'
