# Shared helpers for bench/ scripts and the demo (source this file).
#
# UCX_HCR_PREFIX: the installed build (default: build/install of this repo).

bench_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${UCX_HCR_PREFIX:=$bench_top/build/install}"
PERFTEST=$UCX_HCR_PREFIX/bin/ucx_perftest
# SOFTVERBS_LIB may name another build of the library (a before/after run)
SOFTVERBS_LIB=${SOFTVERBS_LIB:-$UCX_HCR_PREFIX/lib/libsoftverbs.so}

# Environment that loads softverbs, or nothing when it is not installed
# (softverbs enforces RLIMIT_MEMLOCK; UCX's verbs ifaces register more than
# the 8 MiB default, so benchmarks lift it as an RDMA host would)
softverbs_env() {
    if [ -f "$SOFTVERBS_LIB" ]; then
        echo "LD_PRELOAD=$SOFTVERBS_LIB SOFTVERBS_MEMLOCK_LIMIT=${SOFTVERBS_MEMLOCK_LIMIT:-unlimited}"
    fi
}

have_softverbs() {
    [ -f "$SOFTVERBS_LIB" ]
}

# Does ucx_info -d (with the given environment) list this transport?
have_transport() {
    local tl=$1
    shift
    local out
    # not a pipe into grep -q: under pipefail, ucx_info's SIGPIPE would
    # make a match look like a failure
    out=$(env "$@" "$UCX_HCR_PREFIX/bin/ucx_info" -d 2>/dev/null) || return 1
    grep -q "Transport: $tl\$" <<< "$out"
}

bench_free_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % 12000))  # below the ephemeral ports (32768-)
        if ! ss -ltn 2>/dev/null | grep -q ":$port "; then
            echo "$port"
            return
        fi
    done
}

# perftest_pair "ENV=.. ENV=.." ARGS...
# Runs ucx_perftest as server and client on this host and prints the
# client's "Final:" fields: iterations p50_us avg_us overall_us
# avg_MBps overall_MBps avg_rate overall_rate. Returns non-zero on failure.
# PERFTEST_CLIENT_LOG (a file) keeps the client's whole output.
# PERFTEST_SERVER_WRAP / PERFTEST_CLIENT_WRAP (a command prefix, e.g.
# "softverbs-netns.sh run a") and PERFTEST_ADDR (the server's address,
# default 127.0.0.1) put the two sides on other hosts.
perftest_pair() {
    local envs=$1 port spid out rc i
    local swrap=${PERFTEST_SERVER_WRAP:-} cwrap=${PERFTEST_CLIENT_WRAP:-}
    shift
    port=$(bench_free_port)
    # shellcheck disable=SC2086
    $swrap env $envs "$PERFTEST" -p "$port" "$@" >/dev/null 2>&1 &
    spid=$!
    for i in $(seq 100); do
        # shellcheck disable=SC2086
        $swrap ss -ltn 2>/dev/null | grep -q ":$port " && break
        sleep 0.05
    done
    # shellcheck disable=SC2086
    out=$(timeout 120 $cwrap env $envs "$PERFTEST" \
          "${PERFTEST_ADDR:-127.0.0.1}" -p "$port" "$@" 2>&1)
    rc=$?
    wait "$spid" 2>/dev/null || rc=1
    if [ -n "${PERFTEST_CLIENT_LOG:-}" ]; then
        printf '%s\n' "$out" > "$PERFTEST_CLIENT_LOG"
    fi
    if [ $rc -ne 0 ] || ! echo "$out" | grep -q '^Final:'; then
        echo "perftest failed (rc=$rc): env $envs ucx_perftest $*" >&2
        echo "$out" | tail -n 5 >&2
        return 1
    fi
    echo "$out" | awk '/^Final:/ { $1 = ""; print }'
}

# median of the numbers on stdin
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# bench_prepare: the start every bench/ script that runs a program of its own
# shares: softverbs installed, results in $out, a scratch folder $tmp that is
# removed on exit.
bench_prepare() {
    have_softverbs || { echo "softverbs not installed: run make install" >&2; exit 1; }
    out=$bench_top/bench/results
    mkdir -p "$out"
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
}

# bench_cc_ucp OUT SRC: build a bench program against the installed UCX
bench_cc_ucp() {
    gcc -O2 -Wall -o "$1" "$2" -I"$UCX_HCR_PREFIX/include" \
        -L"$UCX_HCR_PREFIX/lib" -Wl,-rpath,"$UCX_HCR_PREFIX/lib" -lucp -lucs
}
