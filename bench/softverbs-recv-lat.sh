#!/bin/bash
#
# What a receive costs against a write on softverbs (issue 28), with the
# libsoftverbs of an older revision (built here from `git archive`) and the
# installed one, interleaved, medians of RUNS runs (default 5):
#
#   send/write  perftest's ib_send_lat / ib_write_lat (typical latency) at
#               8 B, 512 B and 4 KiB: a SEND the target receives through
#               its CQ against a write whose last byte it polls;
#   wimm/write  bench/verbs-notify-lat.c: a write with immediate whose
#               target polls its CQ against a polled write, 8 B..64 KiB;
#   am_lat      ucx_perftest's UCT active message latency (p50) on hcr and
#               rc_verbs, 8 B (short) and 4 KiB (bcopy): new / old.
#
#   bench/softverbs-recv-lat.sh [REV]          one host
#   bench/softverbs-recv-lat.sh --hosts [REV]  server and client on two
#                                              hosts (network namespaces,
#                                              softverbs-netns.sh; root)
#
# (bench/softverbs-net.sh sets the two hosts' softverbs beside UCX's tcp
# transport.)
#
# REV defaults to 65d1f44 (main before issue 28). The goals (one host):
# send/write <= 1.10 at 8 B..4 KiB, wimm/write <= 1.10 at 8 B..64 KiB,
# am_lat new/old <= 1 within the noise. Writes
# bench/results/softverbs-recv-lat[-hosts].txt.
#
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

hosts=0
if [ "${1:-}" = --hosts ]; then
    hosts=1
    shift
fi
rev=${1:-65d1f44}
runs=${RUNS:-5}
have_softverbs || { echo "softverbs is not installed ($SOFTVERBS_LIB)" >&2; exit 1; }
command -v ib_send_lat >/dev/null || { echo "perftest is not installed" >&2; exit 1; }

tmp=$(mktemp -d)
sv=$bench_top/contrib/softverbs
if [ $hosts = 1 ]; then
    netns="env SV_NETNS_PREFIX=svr- $UCX_HCR_PREFIX/bin/softverbs-netns.sh"
    $netns up || { echo "cannot create network namespaces (root?)" >&2; exit 1; }
    trap '$netns down; rm -rf "$tmp"' EXIT
    $netns rate off
    srv="$netns run a"
    cli="$netns run b"
    addr=$($netns addr a)
    vnl_host="-H /var/run/netns/svr-b,$($netns addr b)"
    suffix=-hosts
else
    trap 'rm -rf "$tmp"' EXIT
    srv=""
    cli=""
    addr=127.0.0.1
    vnl_host=""
    suffix=""
fi

# the old library: its sources only, built the way Makefile.am builds them
git -C "$bench_top" archive "$rev" contrib/softverbs | tar -x -C "$tmp" ||
    { echo "cannot read contrib/softverbs at $rev" >&2; exit 1; }
srcs=$(sed -n '/^libsoftverbs_la_SOURCES/,/^$/p' \
       "$tmp/contrib/softverbs/Makefile.am" | grep -o 'sv[a-z_]*\.c')
# shellcheck disable=SC2046
gcc -O2 -g -Wall -fvisibility=hidden -fPIC -shared -o "$tmp/old.so" \
    $(printf "$tmp/contrib/softverbs/%s " $srcs) -lpthread 2>"$tmp/cc.log" ||
    { cat "$tmp/cc.log" >&2; exit 1; }
gcc -O2 -Wall -I"$sv" -o "$tmp/vnl" "$bench_top/bench/verbs-notify-lat.c" \
    -libverbs || exit 1

# perf LIB TOOL SIZE: perftest's typical latency (us)
perf() {
    local lib=$1 tool=$2 size=$3 port out
    port=$(bench_free_port)
    # shellcheck disable=SC2086
    $srv env LD_PRELOAD="$lib" SOFTVERBS_MEMLOCK_LIMIT=unlimited \
        timeout 120 "$tool" -d softverbs0 -s "$size" -n 5000 -p "$port" \
        >"$tmp/srv" 2>&1 &
    sleep 0.7
    # shellcheck disable=SC2086
    out=$($cli env LD_PRELOAD="$lib" SOFTVERBS_MEMLOCK_LIMIT=unlimited \
          timeout 120 "$tool" -d softverbs0 -s "$size" -n 5000 -p "$port" \
          "$addr" 2>&1)
    wait $! 2>/dev/null
    awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { v = $5 } END {
             if (v == "") exit 1; print v }' <<< "$out" ||
        { echo "$tool $size failed with $lib" >&2; return 1; }
}

# amlat LIB TL SIZE: ucx_perftest UCT am_lat p50 (us)
amlat() {
    local lib=$1 tl=$2 size=$3 layout=short
    [ "$size" -gt 64 ] && layout=bcopy
    PERFTEST_SERVER_WRAP="$srv" PERFTEST_CLIENT_WRAP="$cli" \
    PERFTEST_ADDR=$addr perftest_pair \
        "LD_PRELOAD=$lib SOFTVERBS_MEMLOCK_LIMIT=unlimited UCX_WARN_UNUSED_ENV_VARS=n" \
        -t am_lat -x "$tl" -d softverbs0:1 -D "$layout" -s "$size" \
        -n 20000 | awk '{ print $2 }'
}

: >"$tmp/samples"
for r in $(seq "$runs"); do
    for v in old new; do
        lib=$tmp/old.so
        [ $v = new ] && lib=$SOFTVERBS_LIB
        for s in 8 512 4096; do
            echo "$v send $s $(perf "$lib" ib_send_lat "$s")" >>"$tmp/samples"
            echo "$v write $s $(perf "$lib" ib_write_lat "$s")" >>"$tmp/samples"
        done
        # shellcheck disable=SC2086
        $srv env LD_PRELOAD="$lib" SOFTVERBS_MEMLOCK_LIMIT=unlimited \
            timeout 300 "$tmp/vnl" -n 3000 $vnl_host |
            awk -v v=$v '{ print v, "nwrite", $2, $3; print v, "nwimm", $2, $4 }' \
            >>"$tmp/samples"
        for tl in hcr rc_verbs; do
            for s in 8 4096; do
                echo "$v am_$tl $s $(amlat "$lib" $tl $s)" >>"$tmp/samples"
            done
        done
    done
done

python3 - "$tmp/samples" "$rev" "$runs" "$hosts" <<'PY' | tee "$bench_top/bench/results/softverbs-recv-lat$suffix.txt"
import sys, statistics, time, platform, os
path, rev, runs, hosts = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
d = {}
for line in open(path):
    f = line.split()
    if len(f) == 4:
        try:
            d.setdefault((f[0], f[1], int(f[2])), []).append(float(f[3]))
        except ValueError:
            pass
def m(v, k, s):
    x = d.get((v, k, s))
    return statistics.median(x) if x else float("nan")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")
print("# softverbs receive path against a write, %s; %s (%d cores), "
      "kernel %s" % (time.strftime("%Y-%m-%d"), cpu, os.cpu_count(),
                     platform.release()))
print("# %s; old = %s, new = the installed library; medians of %d "
      "interleaved runs" % ("two hosts (network namespaces, TCP path)"
                            if hosts else "one host", rev, runs))
print("# latencies in us (perftest typical, verbs-notify-lat median of "
      "3000, ucx_perftest p50)")
print("%-22s %9s %9s %9s %9s %9s %9s" % ("size", "old send", "old write",
      "old ratio", "new send", "new write", "new ratio"))
for s in (8, 512, 4096):
    print("%-22s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f" % (
        "send/write %d B" % s, m("old", "send", s), m("old", "write", s),
        m("old", "send", s) / m("old", "write", s), m("new", "send", s),
        m("new", "write", s), m("new", "send", s) / m("new", "write", s)))
print("%-22s %9s %9s %9s %9s %9s %9s" % ("", "old wimm", "old write",
      "old ratio", "new wimm", "new write", "new ratio"))
for s in (8, 512, 4096, 16384, 65536):
    print("%-22s %9.3f %9.3f %9.2f %9.3f %9.3f %9.2f" % (
        "wimm/write %d B" % s, m("old", "nwimm", s), m("old", "nwrite", s),
        m("old", "nwimm", s) / m("old", "nwrite", s), m("new", "nwimm", s),
        m("new", "nwrite", s), m("new", "nwimm", s) / m("new", "nwrite", s)))
print("%-22s %9s %9s %9s" % ("", "old", "new", "new/old"))
for tl in ("hcr", "rc_verbs"):
    for s in (8, 4096):
        print("%-22s %9.2f %9.2f %9.2f" % (
            "am_lat %s %d B" % (tl, s), m("old", "am_" + tl, s),
            m("new", "am_" + tl, s), m("new", "am_" + tl, s) /
            m("old", "am_" + tl, s)))
PY
