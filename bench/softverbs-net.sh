#!/bin/bash
#
# softverbs across hosts: bandwidth and latency between two network
# namespaces (softverbs-netns.sh, prefix svb-) over softverbs' network data
# path, against the same-host path and UCX's tcp transport between the same
# namespaces, side by side in one run (ucx_perftest, UCP tag_bw and tag_lat,
# median of SV_NET_REPS runs, default 3). The last rows cap the veth pair at
# SV_NET_GBPS (default 10) Gb/s with tc tbf (softverbs-netns.sh rate).
#
# Needs root (network namespaces). Writes bench/results/softverbs-net.txt.
#
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

reps=${SV_NET_REPS:-3}
gbps=${SV_NET_GBPS:-10}
bench_prepare
netns="env SV_NETNS_PREFIX=svb- $UCX_HCR_PREFIX/bin/softverbs-netns.sh"
$netns up || { echo "cannot create network namespaces (root?)" >&2; exit 1; }
trap '$netns down; rm -rf "$tmp"' EXIT
$netns rate off
addr_a=$($netns addr a)
sv=$(softverbs_env)

# row NAME SERVER_HOST CLIENT_HOST ADDR TLS: prints the row
row() {
    local name=$1 sh=$2 ch=$3 addr=$4 tls=$5 spec col r
    local -a cols=()
    for spec in "tag_lat 8" "tag_bw 65536" "tag_bw 1048576" "tag_bw 4194304"; do
        # shellcheck disable=SC2086
        set -- $spec
        col=2   # p50 latency for tag_lat, overall MB/s for tag_bw
        [ "$1" = tag_bw ] && col=6
        for r in $(seq "$reps"); do
            PERFTEST_SERVER_WRAP="$netns run $sh" \
            PERFTEST_CLIENT_WRAP="$netns run $ch" PERFTEST_ADDR=$addr \
                perftest_pair "$sv UCX_TLS=$tls" -t "$1" -s "$2" \
                    -n $([ "$1" = tag_lat ] && echo 20000 || echo 400) |
                awk -v c="$col" '{ print $c }'
        done | median > "$tmp/v"
        cols+=("$(cat "$tmp/v")")
    done
    printf "%-34s %9s %11s %11s %11s\n" "$name" "${cols[@]}"
}

{
    echo "softverbs across hosts (UCP tag_lat p50 us; tag_bw overall MB/s;" \
         "median of $reps runs)"
    printf "%-34s %9s %11s %11s %11s\n" "path" "lat 8B" "bw 64KiB" \
           "bw 1MiB" "bw 4MiB"
    row "same host, rc_verbs (shm path)" a a 127.0.0.1 rc_v
    row "same host, hcr (shm path)"      a a 127.0.0.1 hcr
    row "two hosts, rc_verbs (net path)" a b "$addr_a" rc_v
    row "two hosts, hcr (net path)"      a b "$addr_a" hcr
    row "two hosts, UCX tcp"             a b "$addr_a" tcp
    $netns rate "$gbps"
    row "two hosts, hcr, link ${gbps} Gb/s"  a b "$addr_a" hcr
    row "two hosts, tcp, link ${gbps} Gb/s"  a b "$addr_a" tcp
    $netns rate off
    echo "(link ${gbps} Gb/s = $(echo "$gbps * 1000 / 8" | bc) MB/s)"
} | tee "$out/softverbs-net.txt"
