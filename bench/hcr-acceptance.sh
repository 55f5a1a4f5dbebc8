#!/bin/bash
#
# The acceptance runs of the hcr transport on softverbs: UCX's own
# ucx_perftest, unchanged, with UCT tests on `-x hcr` and UCP tests with
# UCX_TLS=hcr alone (both protocol modes). One line per test: the client's
# Final: fields (iterations p50_us avg_us overall_us avg_MBps overall_MBps
# avg_rate overall_rate), or FAILED.
#
# Usage: bench/hcr-acceptance.sh   (UCX_HCR_PREFIX: the install)
#
set -u
. "$(dirname "$0")/lib.sh"

if ! have_softverbs; then
    echo "softverbs is not installed in $UCX_HCR_PREFIX" >&2
    exit 1
fi
# UCX's receive pools exceed the 8 MiB default memlock softverbs enforces
base="LD_PRELOAD=$SOFTVERBS_LIB SOFTVERBS_MEMLOCK_LIMIT=unlimited"
base="$base UCX_WARN_UNUSED_ENV_VARS=n"
fails=0

run() {
    local name=$1 envs=$2 out
    shift 2
    if out=$(perftest_pair "$base $envs" "$@" 2>/dev/null); then
        printf "%-34s %s\n" "$name" "$out"
    else
        printf "%-34s FAILED\n" "$name"
        fails=$((fails + 1))
    fi
}

echo "UCT, -x hcr -d softverbs0:1"
uct="-x hcr -d softverbs0:1"
run "am_lat 8B short"        "" -t am_lat  -s 8       -n 10000 $uct
run "put_lat 8B short"       "" -t put_lat -s 8       -n 10000 $uct
run "put_bw 64KiB zcopy"     "" -t put_bw  -s 65536   -n 2000 -D zcopy $uct
run "get_bw 64KiB zcopy"     "" -t get     -s 65536   -n 2000 -D zcopy $uct
run "am_bw 4KiB bcopy"       "" -t am_bw   -s 4096    -n 10000 -D bcopy $uct
run "add_lat 8B"             "" -t add_lat -s 8       -n 10000 $uct
for proto in y n; do
    echo "UCP, UCX_TLS=hcr UCX_PROTO_ENABLE=$proto"
    e="UCX_TLS=hcr UCX_PROTO_ENABLE=$proto"
    run "tag_lat 8B"         "$e" -t tag_lat    -s 8       -n 10000
    run "tag_bw 1MiB"        "$e" -t tag_bw     -s 1048576 -n 300
    run "ucp_put_bw 64KiB"   "$e" -t ucp_put_bw -s 65536   -n 2000
    run "ucp_get 64KiB"      "$e" -t ucp_get    -s 65536   -n 2000
    run "ucp_add 8B"         "$e" -t ucp_add    -s 8       -n 10000
done
echo "$fails failed"
[ "$fails" -eq 0 ]
