#!/bin/bash
#
# What softverbs' hardening (issue 26: random key bits, per-QP connection
# check, challenge-response authentication at connect, bounded responder
# pool) costs per operation: perftest's ib_write_bw and ib_write_lat between
# the two network namespaces of softverbs-netns.sh (the TCP data path), with
# the libsoftverbs of an older revision (built here from `git archive`) and
# the installed one, interleaved, median of SV_AUTH_REPS runs (default 5).
#
#   bench/softverbs-auth-cost.sh [REV]
#
# REV defaults to 59223ee, main just before the hardening was merged.
# Authentication happens once per connection, so the goal is ratios of 1
# within the noise. Needs root (network namespaces). Writes
# bench/results/softverbs-auth-cost.txt.
#
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rev=${1:-59223ee}
reps=${SV_AUTH_REPS:-5}
have_softverbs || { echo "softverbs is not installed ($SOFTVERBS_LIB)" >&2; exit 1; }
command -v ib_write_bw >/dev/null || { echo "perftest is not installed" >&2; exit 1; }

tmp=$(mktemp -d)
netns="env SV_NETNS_PREFIX=sva- $UCX_HCR_PREFIX/bin/softverbs-netns.sh"
$netns up || { echo "cannot create network namespaces (root?)" >&2; exit 1; }
trap '$netns down; rm -rf "$tmp"' EXIT
$netns rate off
addr=$($netns addr a)

# the old library: its sources only, built the way Makefile.am builds them
git -C "$bench_top" archive "$rev" contrib/softverbs | tar -x -C "$tmp" ||
    { echo "cannot read contrib/softverbs at $rev" >&2; exit 1; }
srcs=$(sed -n '/^libsoftverbs_la_SOURCES/,/^$/p' \
       "$tmp/contrib/softverbs/Makefile.am" | grep -o 'sv[a-z_]*\.c')
gcc -O2 -g -Wall -fvisibility=hidden -fPIC -shared -o "$tmp/old.so" \
    $(printf "$tmp/contrib/softverbs/%s " $srcs) -lpthread 2>"$tmp/cc.log" ||
    { cat "$tmp/cc.log" >&2; exit 1; }

# one LIB TOOL SIZE: prints the client's figure (bw: average MB/s, lat:
# typical us)
one() {
    local lib=$1 tool=$2 size=$3 port col=4 n=5000 out
    port=$(bench_free_port)
    if [ "$tool" = ib_write_lat ]; then
        col=5
        n=10000
    fi
    $netns run a env LD_PRELOAD="$lib" SOFTVERBS_MEMLOCK_LIMIT=unlimited \
        timeout 120 "$tool" -d softverbs0 -s "$size" -n $n -p "$port" \
        >"$tmp/srv" 2>&1 &
    sleep 0.7
    out=$($netns run b env LD_PRELOAD="$lib" SOFTVERBS_MEMLOCK_LIMIT=unlimited \
          timeout 120 "$tool" -d softverbs0 -s "$size" -n $n -p "$port" \
          "$addr" 2>&1)
    wait $! 2>/dev/null
    awk -v c=$col '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { v = $c } END {
                       if (v == "") exit 1; print v }' <<< "$out" ||
        { echo "$tool failed with $lib:" >&2; tail -n 3 <<< "$out" >&2; return 1; }
}

{
    echo "softverbs across hosts (two network namespaces), $rev vs installed;"
    echo "ib_write_bw: average MB/s, ib_write_lat: typical us; median of $reps"
    echo "interleaved runs"
    printf "%-24s %12s %12s %8s\n" "test" "$rev" "now" "now/old"
    fails=0
    for spec in "ib_write_lat 8" "ib_write_lat 4096" "ib_write_bw 65536" \
                "ib_write_bw 1048576"; do
        # shellcheck disable=SC2086
        set -- $spec
        : >"$tmp/o"
        : >"$tmp/n"
        for _ in $(seq "$reps"); do
            # a run that fails (the old library hung now and then) is
            # tried once more, and counted
            one "$tmp/old.so" "$1" "$2" >>"$tmp/o" ||
                { fails=$((fails + 1)); one "$tmp/old.so" "$1" "$2" >>"$tmp/o"; }
            one "$SOFTVERBS_LIB" "$1" "$2" >>"$tmp/n" ||
                { fails=$((fails + 1)); one "$SOFTVERBS_LIB" "$1" "$2" >>"$tmp/n"; }
        done
        o=$(median <"$tmp/o")
        n=$(median <"$tmp/n")
        printf "%-24s %12s %12s %8.2f\n" "$1 $2 B" "$o" "$n" \
               "$(echo "$n / $o" | bc -l)"
    done
    echo "runs that failed and were tried again: $fails"
} | tee "$bench_top/bench/results/softverbs-auth-cost.txt"
