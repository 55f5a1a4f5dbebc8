#!/bin/bash
#
# hcr against rc_verbs on the same softverbs device, in one run: UCT put
# latency and bandwidth, and UCP tag latency and bandwidth (UCX_TLS=hcr
# against UCX_TLS=rc_v), for 8 B, 4 KiB, 64 KiB and 1 MiB, and UCT active
# message latency and bandwidth for 8 B and 4 KiB (an active message is at
# most one receive segment, 8 KiB by default). Each number is the median of
# RUNS runs, hcr and rc_verbs runs interleaved; the ratio columns are
# hcr / rc_verbs (goals: latency ratio <= 1.05, bandwidth ratio >= 0.95).
#
# Usage: bench/hcr-vs-rc-verbs.sh [RUNS]   (UCX_HCR_PREFIX: the install)
# SIZES and AM_SIZES replace the lists of sizes, ITERS the iteration
# counts (a shorter run on a busy host).
#
set -u
. "$(dirname "$0")/lib.sh"

runs=${1:-7}
dev=softverbs0:1
sizes=${SIZES:-8 4096 65536 1048576}
am_sizes=${AM_SIZES:-8 4096}

if ! have_softverbs; then
    echo "softverbs is not installed in $UCX_HCR_PREFIX" >&2
    exit 1
fi
# UCX's receive pools exceed the 8 MiB default memlock softverbs enforces
env_base="LD_PRELOAD=$SOFTVERBS_LIB SOFTVERBS_MEMLOCK_LIMIT=unlimited"
env_base="$env_base UCX_WARN_UNUSED_ENV_VARS=n"
for tl in hcr rc_verbs; do
    if ! have_transport "$tl" $env_base; then
        echo "transport $tl not found on softverbs" >&2
        exit 1
    fi
done

# data layout for a UCT put of this size: inline, copy, zero-copy
layout() {
    if [ "$1" -le 64 ]; then echo short
    elif [ "$1" -le 8192 ]; then echo bcopy
    else echo zcopy
    fi
}

iters() {
    if [ -n "${ITERS:-}" ]; then echo "$ITERS"
    elif [ "$1" -ge 1048576 ]; then echo 300
    elif [ "$1" -ge 65536 ]; then echo 2000
    else echo 10000
    fi
}

# one Final: field of one run (2: p50 latency us, 6: overall MB/s)
field_of() {
    local field=$1 envs=$2 out
    shift 2
    out=$(perftest_pair "$envs" "$@") || return 1
    echo "$out" | awk -v f="$field" '{ print $f }'
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'
}

printf "hcr vs rc_verbs on %s, median of %d runs\n" "$dev" "$runs"
printf "%-12s %8s %12s %12s %8s %6s\n" test size hcr rc_verbs ratio goal

# hcr and rc_verbs runs alternate, so that a slow period of the shared
# host (softverbs' engine and both processes share 2 cores) hits both
row() {
    local name=$1 size=$2 field=$3 goal=$4 h r ok i hs="" rs=""
    shift 4
    for i in $(seq "$runs"); do
        hs="$hs $(field_of "$field" "$env_base $HCR_ENV" "$@" "${HCR_ARGS[@]}")"
        rs="$rs $(field_of "$field" "$env_base $REF_ENV" "$@" "${REF_ARGS[@]}")"
    done
    h=$(echo $hs | tr ' ' '\n' | median)
    r=$(echo $rs | tr ' ' '\n' | median)
    ratio=$(ratio "$h" "$r")
    ok=$(awk -v x="$ratio" -v g="$goal" 'BEGIN {
            if (x == "nan") print "?";
            else if (g ~ /^</) print ((x <= substr(g, 2)) ? "ok" : "MISS");
            else print ((x >= substr(g, 2)) ? "ok" : "MISS") }')
    printf "%-12s %8s %12s %12s %8s %6s %s\n" "$name" "$size" "$h" "$r" \
           "$ratio" "$goal" "$ok"
}

for s in $sizes; do
    D=$(layout "$s")
    n=$(iters "$s")
    HCR_ENV="" REF_ENV=""
    HCR_ARGS=(-x hcr -d "$dev") REF_ARGS=(-x rc_verbs -d "$dev")
    row "put_lat_us" "$s" 2 "<1.05" -t put_lat -D "$D" -s "$s" -n "$n"
    row "put_bw_MBs" "$s" 6 ">0.95" -t put_bw -D "$D" -s "$s" -n "$n"
done
for s in $am_sizes; do
    D=$(layout "$s")
    n=$(iters "$s")
    row "am_lat_us" "$s" 2 "<1.05" -t am_lat -D "$D" -s "$s" -n "$n"
    row "am_bw_MBs" "$s" 6 ">0.95" -t am_bw -D "$D" -s "$s" -n "$n"
done
for s in $sizes; do
    n=$(iters "$s")
    HCR_ENV="UCX_TLS=hcr" REF_ENV="UCX_TLS=rc_v"
    HCR_ARGS=() REF_ARGS=()
    row "tag_lat_us" "$s" 2 "<1.05" -t tag_lat -s "$s" -n "$n"
    row "tag_bw_MBs" "$s" 6 ">0.95" -t tag_bw -s "$s" -n "$n"
done
