#!/usr/bin/env bash
# The main job: a short demonstration of what the build gives. It lists the
# transports UCX finds, then runs UCX's own ucx_perftest (an unchanged
# program) over each transport that works on this host, side by side:
# tcp and shared memory always; rc_verbs, ud_verbs and hcr on softverbs once
# those components are installed.
#
#   demo.sh [BUILD_DIR]
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
UCX_HCR_PREFIX=$(sed -n 's/^prefix = //p' "$build/Makefile")
export UCX_HCR_PREFIX
# shellcheck source=../bench/lib.sh
. "$top/bench/lib.sh"

sv=$(softverbs_env)
echo "UCX: $("$UCX_HCR_PREFIX/bin/ucx_info" -v | head -n1 | sed 's/^# //')" \
     "in $UCX_HCR_PREFIX"
echo "proto v2 default: $("$UCX_HCR_PREFIX/bin/ucx_info" -c | grep '^UCX_PROTO_ENABLE=')"
echo "transports found:"
# shellcheck disable=SC2086
env $sv "$UCX_HCR_PREFIX/bin/ucx_info" -d | \
    awk '/# Memory domain:/ { md = $4 } /Transport:/ { tl = $3 }
         /Device:/ { printf "    %-10s %-14s (md %s)\n", tl, $3, md }'

# name | UCX environment
cases=("tcp|UCX_TLS=tcp UCX_NET_DEVICES=all"
       "shm|UCX_TLS=shm")
if [ -n "$sv" ]; then
    have_transport rc_verbs $sv && cases+=("rc_verbs|$sv UCX_TLS=rc_v")
    have_transport ud_verbs $sv && cases+=("ud_verbs|$sv UCX_TLS=ud_v")
    have_transport hcr $sv && cases+=("hcr|$sv UCX_TLS=hcr")
fi

echo
echo "ucx_perftest between two processes on this host (UCP tag API):"
printf '%-10s %16s %20s\n' transport "tag_lat 8B (us)" "tag_bw 1MiB (MB/s)"
for c in "${cases[@]}"; do
    name=${c%%|*}
    envs=${c#*|}
    lat=$(perftest_pair "$envs" -t tag_lat -s 8 -n 20000 | awk '{print $3}') || lat=failed
    bw=$(perftest_pair "$envs" -t tag_bw -s 1048576 -n 500 | awk '{print $6}') || bw=failed
    printf '%-10s %16s %20s\n' "$name" "$lat" "$bw"
done
