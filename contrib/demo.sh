#!/usr/bin/env bash
# The main job: what ucx-hcr is for, shown on this host in about a minute.
#
#   demo.sh [--quick | --full] [BUILD_DIR]
#
# 1. what this host costs: the model hcr measured (ucx_hcr_calib): pinning
#    per page, copy bandwidth, the network, the critical sizes and where the
#    superpipeline takes over;
# 2. a first send against a reused send of 1 MiB, ucx_perftest -t tag_bw
#    with and without -F (fresh memory at every iteration), on hcr,
#    rc_verbs (UCX_TLS=rc_v) and shared memory (with UCX 1.13.1's default
#    protocols, v1: see below);
# 3. what the protocol chose for those first sends and why (the
#    UCX_PROTO_INFO row of rndv/sppln, and its per-message log);
# 4. RVMA: how soon a target knows that a put landed, one RVMA put against
#    put + flush + tag (bench/rvma-lat.c);
# 5. a picture of first send against reused send by message size.
#
# --quick (the default, what contrib/setup.sh runs): medians of 3 runs at
# 1 MiB, one run at 64 KiB and 4 MiB. --full: 16 KiB to 16 MiB and tcp too,
# medians of 5 runs (several minutes). Without softverbs (no verbs device) the
# verbs transports, the model and the protocol's choice are skipped, and
# the summary says so. Results, the summary and the pictures go to
# BUILD_DIR/demo/.
set -euo pipefail

mode=quick
build=
for arg in "$@"; do
    case $arg in
    --quick) mode=quick ;;
    --full) mode=full ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "demo.sh: unknown option $arg (--quick, --full)" >&2; exit 2 ;;
    *) build=$arg ;;
    esac
done

top=$(cd "$(dirname "$0")/.." && pwd)
build=${build:-$top/build}
UCX_HCR_PREFIX=$(sed -n 's/^prefix = //p' "$build/Makefile")
export UCX_HCR_PREFIX
# shellcheck source=../bench/lib.sh
. "$top/bench/lib.sh"

out=$build/demo
mkdir -p "$out"
rm -f "$out"/*.dat "$out"/*.log
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export UCX_WARN_UNUSED_ENV_VARS=n

if [ "$mode" = full ]; then
    runs=5
    runs_mib=5
    rvma_iters=1000
    sizes="16384 65536 262144 1048576 4194304 16777216"
else
    runs=1
    runs_mib=3
    rvma_iters=200
    sizes="65536 1048576 4194304"
fi
mib=1048576
t_start=$(date +%s.%N)
skipped=()
nsteps=5

step_t0=
step() { # step N TITLE: a progress line; the time goes after it
    step_t0=$(date +%s.%N)
    printf '[%s/%s] %s ... ' "$1" "$nsteps" "$2"
}
step_done() { # step_done [NOTE]
    printf '%.1f s%s\n' "$(echo "$(date +%s.%N) - $step_t0" | bc)" \
           "${1:+ ($1)}"
}

sv=$(softverbs_env)
have_verbs=0
if [ -n "$sv" ] && have_transport hcr $sv; then
    have_verbs=1
else
    why="no verbs device (softverbs is not installed in $UCX_HCR_PREFIX/lib"
    why+=", or offers no device)"
    skipped+=("hcr, rc_verbs, the host's model and the protocol's choice: $why")
fi

echo "ucx-hcr demo ($mode): $("$UCX_HCR_PREFIX/bin/ucx_info" -v |
    head -n1 | sed 's/^# //'), results in $out"

# name|UCX environment, for the transports this host has
cases=()
if [ $have_verbs = 1 ]; then
    cases+=("hcr|$sv UCX_TLS=hcr" "rc_verbs|$sv UCX_TLS=rc_v")
fi
# shared memory as stock UCX 1.13.1 runs it, with protocols v1: in this
# test (32 sends in flight) its protocols v2 stall about 16 ms per message
# in about half of the runs
cases+=("shm|UCX_TLS=shm UCX_PROTO_ENABLE=n")
if [ "$mode" = full ] || [ $have_verbs = 0 ]; then
    cases+=("tcp|UCX_TLS=tcp")
fi

# ---- 1. the host's costs --------------------------------------------------
step 1 "what this host costs (ucx_hcr_calib)"
calib=
if [ $have_verbs = 1 ]; then
    # shellcheck disable=SC2086
    if env $sv "$UCX_HCR_PREFIX/bin/ucx_hcr_calib" -d softverbs0 -p -s 1m \
           > "$tmp/calib" 2> "$tmp/calib.err"; then
        calib=$tmp/calib
        # shellcheck disable=SC2086
        env $sv "$UCX_HCR_PREFIX/bin/ucx_hcr_calib" -d softverbs0 -s 1m \
            > "$out/calib.txt" 2>&1 || true
        if command -v gnuplot > /dev/null; then
            # shellcheck disable=SC2086
            env $sv "$UCX_HCR_PREFIX/bin/ucx_hcr_calib" -d softverbs0 \
                -P "$out/costs.png" > /dev/null 2>&1 || true
        fi
        step_done
    else
        step_done "failed: $(head -n 1 "$tmp/calib.err")"
    fi
else
    step_done "skipped: no verbs device"
fi
cval() { # cval KEY: a value of ucx_hcr_calib -p
    sed -n "s/^$1=//p" "$calib"
}

# ---- 2. first send vs reused send, and the data of the picture -----------
iters_for() { # enough iterations for a stable number, few for big sizes
    local n=$((64 * mib / $1))
    [ "$mode" = full ] && n=$((n * 2))
    [ $n -gt 200 ] && n=200
    [ $n -lt 10 ] && n=10
    echo $n
}

# one point: median of RUNS runs of tag_bw, overall MB/s; the client's
# output of the last run in $out/NAME-SIZE-MODE.log
point() { # point RUNS NAME ENV SIZE reused|first
    local runs=$1 name=$2 envs=$3 size=$4 kind=$5 r n res flag=
    [ "$kind" = first ] && flag=-F
    n=$(iters_for "$size")
    for r in $(seq "$runs"); do
        res=$(PERFTEST_CLIENT_LOG="$out/$name-$size-$kind.log" \
              perftest_pair "$envs UCX_PROTO_INFO=y UCX_LOG_LEVEL=info" \
                  -t tag_bw -s "$size" -n "$n" -w 5 $flag 2> /dev/null |
              awk '{ print $6 }') || res=
        [ -n "$res" ] && echo "$res"
    done | median
}

step 2 "first send vs reused send of 1 MiB (ucx_perftest tag_bw [-F])"
declare -A bw
for c in "${cases[@]}"; do
    name=${c%%|*}
    for kind in reused first; do
        bw[$name-$mib-$kind]=$(point $runs_mib "$name" "${c#*|}" $mib $kind)
    done
done
step_done "${#cases[@]} transports, $runs_mib runs each"

# ---- 3. the protocol's choice ---------------------------------------------
path_counts() { # path_counts LOG: "bcopy 15, zcopy (staging busy) 56"
    { grep -o 'bytes path [a-z]*[^0-9]*' "$1" 2> /dev/null || true; } |
        awk '{ p = $3; sub(/,$/, "", p)
               if (index($0, "staging group busy")) p = p " (staging busy)"
               n[p]++ }
             END { for (p in n) printf "%s %d, ", p, n[p] }' |
        sed 's/, $//'
}
step 3 "what the protocol chose for hcr's first sends"
row=
if [ $have_verbs = 1 ] && [ -f "$out/hcr-$mib-first.log" ]; then
    row=$(grep -m1 'cached:' "$out/hcr-$mib-first.log" |
          sed 's/^.*\] *//; s/  */ /g') || row=
    paths_first=$(path_counts "$out/hcr-$mib-first.log")
    paths_reused=$(path_counts "$out/hcr-$mib-reused.log")
    step_done
else
    step_done "skipped: no hcr"
fi

# ---- 4. RVMA ---------------------------------------------------------------
step 4 "RVMA: one put vs put + flush + tag (bench/rvma-lat.c)"
rvma_tls=tcp
rvma_env="UCX_TLS=tcp"
if [ $have_verbs = 1 ]; then
    rvma_tls=hcr
    rvma_env="$sv UCX_TLS=hcr"
fi
rvma=
if ! command -v gcc > /dev/null; then
    step_done "skipped: no C compiler"
    skipped+=("RVMA: no C compiler to build bench/rvma-lat.c")
elif ! bench_cc_ucp "$tmp/rvma-lat" "$top/bench/rvma-lat.c" 2> "$tmp/cc.err"
then
    step_done "skipped: bench/rvma-lat.c did not build"
    skipped+=("RVMA: bench/rvma-lat.c did not build: $(head -n1 "$tmp/cc.err")")
else
    # shellcheck disable=SC2086
    for _ in $(seq "$runs_mib"); do
        env $rvma_env timeout 120 "$tmp/rvma-lat" -n "$rvma_iters" -m 1000 -p 1 \
            2> /dev/null | grep '^lat ' || true
    done > "$out/rvma.dat"
    rvma=$out/rvma.dat
    [ $have_verbs = 1 ] ||
        skipped+=("RVMA on hcr (no verbs device): measured on tcp instead")
    step_done "on $rvma_tls"
fi
rvma_med() { # rvma_med SIZE COLUMN: median over the runs
    awk -v s="$1" -v c="$2" '$2 == s { print $c }' "$rvma" | median
}

# ---- 5. the picture ---------------------------------------------------------
step 5 "first send vs reused by size, the picture"
for size in $sizes; do
    [ "$size" = $mib ] && continue
    for c in "${cases[@]}"; do
        name=${c%%|*}
        for kind in reused first; do
            bw[$name-$size-$kind]=$(point $runs "$name" "${c#*|}" "$size" \
                                          $kind)
        done
    done
done
{
    printf '# ucx_perftest -t tag_bw overall MB/s, median of %s run(s)' \
           "$runs"
    printf ' (%s at 1 MiB):' "$runs_mib"
    printf ' first send (-F) and reused, by transport\n# size'
    for c in "${cases[@]}"; do
        printf ' %s-first %s-reused' "${c%%|*}" "${c%%|*}"
    done
    echo
    for size in $sizes; do
        printf '%s' "$size"
        for c in "${cases[@]}"; do
            printf ' %s %s' "${bw[${c%%|*}-$size-first]:-nan}" \
                   "${bw[${c%%|*}-$size-reused]:-nan}"
        done
        echo
    done
} > "$out/first-send.dat"
png=
if command -v gnuplot > /dev/null; then
    {
        echo "set terminal png size 1100,600 noenhanced"
        echo "set output '$out/first-send.png'"
        echo "set title 'first send (new memory for every message) vs reused" \
             "send: ucx_perftest -t tag_bw [-F], $(nproc) cores," \
             "load $(cut -d' ' -f1 /proc/loadavg)'"
        echo "set logscale xy; set grid; set key outside right"
        set -- $sizes
        echo "set xrange [$(($1 * 2 / 3)):$((${!#} * 3 / 2))]"
        echo "set xlabel 'message size'; set ylabel 'MB/s (log scale)'"
        printf 'set xtics ('
        sep=
        for size in $sizes; do
            if [ "$size" -ge $mib ]; then
                label="$((size / mib)) MiB"
            else
                label="$((size / 1024)) KiB"
            fi
            printf "%s'%s' %s" "$sep" "$label" "$size"
            sep=", "
        done
        echo ")"
        printf "plot "
        col=2
        color=1
        sep=
        for c in "${cases[@]}"; do
            name=${c%%|*}
            printf "%s'%s' using 1:%d with linespoints lw 2 pt 7 lc %d" \
                   "$sep" "$out/first-send.dat" $col $color
            printf " title '%s, first send'" "$name"
            printf ", '' using 1:%d with linespoints lw 1 dt 2 pt 6 lc %d" \
                   $((col + 1)) $color
            printf " title '%s, reused'" "$name"
            sep=", "
            col=$((col + 2))
            color=$((color + 1))
        done
        echo
    } > "$tmp/plot.gp"
    if gnuplot "$tmp/plot.gp" 2> "$tmp/gp.err"; then
        png=$out/first-send.png
        step_done "$png"
    else
        step_done "gnuplot failed: $(head -n1 "$tmp/gp.err")"
        skipped+=("the picture: gnuplot failed")
    fi
else
    step_done "skipped: no gnuplot"
    skipped+=("the picture: gnuplot is not installed (Debian: gnuplot-nox)")
fi

# ---- the summary ------------------------------------------------------------
ratio() { # ratio A B: A / B with two decimals, or -
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == "" || b == "" || a == "nan" || b == "nan" || b == 0) print "-";
        else printf "%.2f", a / b }'
}
us() { awk -v v="$1" 'BEGIN { printf "%.2f", v * 1e6 }'; }
pg() { awk -v v="$1" 'BEGIN { printf "%.0f", v * 1e9 * 4096 }'; }
mbs() { awk -v v="$1" 'BEGIN { printf "%.1f", v / 1e9 }'; }
kib() {
    awk -v v="$1" 'BEGIN {
        if (v == "inf") print "never";
        else if (v >= 1048576) printf "%.1f MiB", v / 1048576;
        else printf "%.0f KiB", v / 1024 }'
}

{
echo
echo "==== what ucx-hcr does on this host ($(nproc) cores, load" \
     "$(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)) ===="
if [ -n "$calib" ]; then
    copy_large=$({ grep '^copy_bw_' "$calib" || true; } | tail -n1)
    echo
    echo "1. What a first send costs here (the model hcr measured; ucx_hcr_calib):"
    echo "   pinning     $(us "$(cval reg_resident_c)") us + $(pg "$(cval reg_resident_m)")" \
         "ns per resident page, $(us "$(cval reg_nonresident_c)") us +" \
         "$(pg "$(cval reg_nonresident_m)") ns per untouched page"
    echo "   copying     $(mbs "${copy_large#*=}") GB/s (a $(kib "$(echo "$copy_large" |
         sed 's/copy_bw_//; s/=.*//')") working set)"
    echo "   network     latency $(us "$(cval net_latency)") us, gap" \
         "$(us "$(cval net_gap)") us between messages, $(mbs "$(cval net_bw)") GB/s"
    echo "   critical    register + zero-copy beats a copy from" \
         "$(kib "$(cval zcopy_thresh_resident)") (pages the sender wrote) or" \
         "$(kib "$(cval zcopy_thresh_nonresident)") (untouched pages);"
    echo "   sizes       one staged copy up to what three staging slots hold," \
         "the superpipeline from $(kib "$(cval sppln_from)"),"
    echo "               in chunks C_0 * q^i (C_0 $(kib "$(cval sp_c0)")," \
         "q $(printf %.1f "$(cval sp_q)"))"
    echo "   a first send of 1 MiB written by the sender: register" \
         "$(us "$(cval msg_reg_time_resident)") us, copy" \
         "$(us "$(cval msg_copy_time_resident)") us -> $(cval msg_path_resident)"
    echo "   (all of it: $out/calib.txt; picture: $out/costs.png)"
fi
echo
echo "2. First send vs reused send of 1 MiB, ucx_perftest -t tag_bw -s 1048576" \
     "[-F], MB/s (median of $runs_mib):"
printf '   %-10s %12s %12s %16s\n' transport "first send" reused "first / reused"
for c in "${cases[@]}"; do
    name=${c%%|*}
    printf '   %-10s %12s %12s %16s\n' "$name" "${bw[$name-$mib-first]:-failed}" \
           "${bw[$name-$mib-reused]:-failed}" \
           "$(ratio "${bw[$name-$mib-first]:-}" "${bw[$name-$mib-reused]:-}")"
done
if [ $have_verbs = 1 ]; then
    echo "   first send, hcr / rc_verbs: $(ratio "${bw[hcr-$mib-first]:-}" \
         "${bw[rc_verbs-$mib-first]:-}"); hcr / shared memory:" \
         "$(ratio "${bw[hcr-$mib-first]:-}" "${bw[shm-$mib-first]:-}")"
    echo "   (-F maps new pages for every message and the sender writes them:" \
         "that costs every transport alike;"
    echo "   shm with stock UCX 1.13.1's protocols v1: its v2, this build's" \
         "default, stalls in this test)"
fi
if [ -n "$row" ]; then
    echo
    echo "3. What the protocol chose for hcr's first sends (UCX_PROTO_INFO=y):"
    echo "   $row"
    echo "   - 'cached: eager <E< zcopy': a buffer in the registration cache," \
         "or sent before, goes zero-copy:"
    echo "     below E with UCX's eager protocols, else UCX's own rendezvous:" \
         "the reused sends (log: ${paths_reused:-none});"
    echo "     'cached-sppln S': from S (inf: never) staging beats" \
         "zero-copy even from registered memory"
    echo "   - else by size and the model: 'bcopy <A<': one copy through" \
         "pre-registered staging slots"
    echo "     below A, each sub-block put once it is copied; 'sppln': the" \
         "superpipeline, chunks growing"
    echo "     as C_0 * q^i for what the slots cannot hold at once;" \
         "'<B< zcopy': register and send"
    echo "     zero-copy from B for untouched pages" \
         "($(kib "$(cval zcopy_thresh_resident 2>/dev/null)") for pages the" \
         "sender wrote). 'put+notify': each"
    echo "     sub-block is a put that notifies the receiver, which copies" \
         "it out as it lands"
    echo "   - these first sends: 1 MiB the sender had just written, so" \
         "copying beats registering, but for"
    echo "     those posted while every send staging group was in use" \
         "(tag_bw keeps a window of them):"
    echo "     the per-message log (UCX_LOG_LEVEL=info) says: ${paths_first:-none}"
fi
if [ -n "$rvma" ]; then
    echo
    r8=$(rvma_med 64 3); f8=$(rvma_med 64 4)
    r4k=$(rvma_med 4096 3); f4k=$(rvma_med 4096 4)
    echo "4. RVMA on $rvma_tls: until the target knows its data is there" \
         "(half round trip, us, median of $runs_mib):"
    printf '   %-8s %12s %22s %8s\n' size "RVMA put" "put + flush + tag" ratio
    printf '   %-8s %12s %22s %8s\n' "64 B" "$r8" "$f8" "$(ratio "$r8" "$f8")"
    printf '   %-8s %12s %22s %8s\n' "4 KiB" "$r4k" "$f4k" "$(ratio "$r4k" "$f4k")"
    echo "   (one ucp_rvma_put_nbx() into a receiver-managed window against" \
         "the put, flush and tag"
    echo "   message that signal a put without it)"
fi
echo
if [ -n "$png" ]; then
    echo "5. Picture: $png (data: $out/first-send.dat)"
else
    echo "5. Picture: not drawn (see below); data: $out/first-send.dat"
fi
for s in "${skipped[@]}"; do
    echo "skipped: $s"
done
printf 'demo: %.0f s\n' "$(echo "$(date +%s.%N) - $t_start" | bc)"
} | tee "$out/summary.txt"
