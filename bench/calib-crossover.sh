#!/usr/bin/env bash
#
# Register-vs-copy crossover: measured against predicted.
#
# For each softverbs registration cost (SOFTVERBS_REG_COST_US = 0, 20, 60):
#  - predicted: the critical sizes zcopy_thresh_resident/_nonresident of
#    ucx_hcr_calib -f -p (median of RUNS fresh calibrations, made beside the
#    measurement in a private cache directory: a cached model may come from
#    another load of the host, and the user's cache is left alone);
#  - measured: bench/calib-crossover.c, which times register + put_zcopy +
#    deregister against memcpy into a registered staging buffer + put_zcopy,
#    on resident and non-resident pages, 4 KiB..16 MiB (median of RUNS runs).
# A row is ok when the two agree within a factor of 2. A crossover outside
# the measured window (above 16 MiB, or zcopy winning already at 4 KiB) is
# known only as a bound: such a row compares the other side with the
# window's edge and prints the ratio as ">=x"; "-" means both sides lie
# beyond the same edge.
#
# The point crossover is ill-conditioned where both methods cost nearly the
# same per byte (resident pages on softverbs: a registration walks the pages
# at about the rate memcpy copies them from DRAM); the band is what the
# measurement establishes there: bench/calib-crossover.c decides each size
# by a paired sign test (5%, two-sided) and reports the band from the
# largest size that staging wins to the smallest size from which zcopy wins
# with no staging win above it ("none": zcopy wins no such size in the
# window). The band of a row is the median of its runs' bounds, and the
# row's band verdict is ok when the band meets [predicted / 2, predicted * 2]
# (a prediction of "never" meets a band open at the top). The band is
# printed for information: the exit status follows the point verdicts, the
# issue's criterion.
#
# The regret column says what the prediction costs where it matters: at
# the worst measured size, how much slower the method the predicted size
# picks is than the faster of the two (0% when it always picks the
# faster).
#
# On non-resident pages softverbs registers without touching them, and the
# zero-copy put faults them in (about 1.5-3.5 us a page here, against 9 us
# for a memcpy that does): the model's xfer_fault term, measured with a
# loopback write from freshly registered pages.
#
# Writes bench/results/calib-crossover.png (times vs size per cost, the
# predicted critical sizes as dashed vertical lines, the measured crossovers
# as short solid ones), whatever the verdict.
#
# Usage: bench/calib-crossover.sh [RUNS]   (default 3; UCX_HCR_PREFIX: the
#        install; CROSSOVER_REG_COSTS overrides "0 20 60")
# Exit status: 0 all rows ok, 1 a row missed, 2 no prediction (the tool is
# not installed or failed), 3 the measurement failed.
#
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

runs=${1:-3}
reg_costs=${CROSSOVER_REG_COSTS:-"0 20 60"}
calib_tool=$UCX_HCR_PREFIX/bin/ucx_hcr_calib
md_name=softverbs0
results=$bench_top/bench/results
plot=$results/calib-crossover.png

if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [RUNS]" >&2
    exit 3
fi
if ! have_softverbs; then
    echo "softverbs is not installed in $UCX_HCR_PREFIX" >&2
    exit 3
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exe=$tmp/calib-crossover
cc -O2 -Wall -o "$exe" "$bench_top/bench/calib-crossover.c" \
    -I"$UCX_HCR_PREFIX/include" -L"$UCX_HCR_PREFIX/lib" \
    -Wl,-rpath,"$UCX_HCR_PREFIX/lib" -luct -lucs -lm

# UCX's default, auto, registers every buffer twice (relaxed and strict
# order) on CPUs that prefer relaxed ordering: part of what a registration
# costs there, so left as the user has it, and shown
relaxed_order=${UCX_IB_PCI_RELAXED_ORDERING:-auto}

# every registration must really register: no registration cache
env_base="$(softverbs_env) UCX_IB_REG_METHODS=direct"
env_base="$env_base UCX_WARN_UNUSED_ENV_VARS=n"

have_tool=1
if [ ! -x "$calib_tool" ]; then
    echo "ucx_hcr_calib not installed ($calib_tool):" \
         "printing the measured side only" >&2
    have_tool=0
fi

# median of values on stdin, where "inf"/"none" sort above every number
# and an unbounded median prints as $1; an even count takes the geometric
# mean of the middle two, or the larger when it is unbounded
median_size() {
    local unbounded=$1

    awk '{ print ($1 == "inf" || $1 == "none") ? "1e300" : $1 }' |
        sort -g | awk -v unbounded="$unbounded" '{ v[NR] = $1 + 0 }
        END {
            n = NR
            if (n == 0) { print "?"; exit }
            if (n % 2) m = v[(n + 1) / 2]
            else if (v[n / 2 + 1] >= 1e300) m = 1e300
            else m = sqrt(v[n / 2] * v[n / 2 + 1])
            if (m >= 1e300) print unbounded; else printf "%.0f\n", m
        }'
}

# predicted critical sizes for one cost: "resident nonresident" (each a
# byte count, 0 or inf), or "? ?" when the tool cannot tell
predict() {
    local cost=$1 out r res="" non=""
    local dir=$tmp/calib-cache-$cost

    if [ $have_tool -eq 0 ]; then
        echo "? ?"
        return
    fi
    mkdir -p "$dir"
    for r in $(seq "$runs"); do
        # shellcheck disable=SC2086
        if ! out=$(env $env_base SOFTVERBS_REG_COST_US="$cost" \
                   UCX_CALIB_DIR="$dir" "$calib_tool" -d "$md_name" \
                   -f -p 2>"$tmp/calib.err"); then
            echo "ucx_hcr_calib failed (REG_COST_US=$cost):" >&2
            tail -n 5 "$tmp/calib.err" >&2
            echo "? ?"
            return
        fi
        res="$res $(sed -n 's/^zcopy_thresh_resident=//p' <<< "$out")"
        non="$non $(sed -n 's/^zcopy_thresh_nonresident=//p' <<< "$out")"
    done
    echo "calib REG_COST_US=$cost resident:$res nonresident:$non" \
        >> "$tmp/calib.log"
    echo "$(tr ' ' '\n' <<< "$res" | grep . | median_size inf)" \
         "$(tr ' ' '\n' <<< "$non" | grep . | median_size inf)"
}

# ratio and verdict of predicted $1 against measured $2 in the measured
# window [$3, $4]; see the header for bounds
compare() {
    awk -v p="$1" -v m="$2" -v lo="$3" -v hi="$4" 'BEGIN {
        if (p == "?" || m == "?") { print "? n/a"; exit }
        # where each side lies: B at or below the window, W inside,
        # A above it, N never (the model says zcopy never wins)
        pc = (p == "inf") ? "N" : (p + 0 <= lo) ? "B" : (p + 0 > hi) ? "A" : "W"
        mc = (m == "none") ? "A" : (m + 0 <= lo) ? "B" : "W"
        if (pc == "N") {
            print (mc == "A") ? "- ok" : "inf MISS"; exit
        }
        if (pc == mc && pc != "W") { print "- ok"; exit }
        if (mc == "W" && (pc != "B" || p > 0)) {
            # both known exactly
            r = (p > m) ? p / m : m / p; bound = ""
        } else if (mc == "A") {
            r = (p > 0) ? hi / p : 1e300; bound = ">="
        } else if (mc == "B") {
            r = p / lo; bound = ">="
        } else {
            r = m / lo; bound = ">=" # p == 0: below the search floor
        }
        if (r >= 1e300) { print "inf MISS"; exit }
        printf "%s%.2f %s\n", bound, r, (r <= 2) ? "ok" : "MISS"
    }'
}

# band_verdict PRED LO HI: does [PRED / 2, PRED * 2] meet the band [LO, HI]?
band_verdict() {
    awk -v p="$1" -v lo="$2" -v hi="$3" 'BEGIN {
        if (p == "?" || lo == "?") { print "n/a"; exit }
        if (p == "inf") { print (hi == "none") ? "ok" : "MISS"; exit }
        top = (hi == "none") ? 1e300 : hi + 0
        print ((2 * p >= lo + 0) && (p / 2 <= top)) ? "ok" : "MISS"
    }'
}

human() {
    awk -v v="$1" 'BEGIN {
        if (v !~ /^[0-9.]+$/) { print v; exit }
        if (v >= 1048576) printf "%.2fM\n", v / 1048576
        else if (v >= 1024) printf "%.1fK\n", v / 1024
        else print v }'
}

start=$(date +%s)
rows=()
status=0
for cost in $reg_costs; do
    read -r pred_res pred_non < <(predict "$cost")

    for r in $(seq "$runs"); do
        out=$tmp/run-$cost-$r.txt
        # shellcheck disable=SC2086
        if ! env $env_base SOFTVERBS_REG_COST_US="$cost" \
                UCX_CALIB_DIR="$tmp/calib-cache-$cost" \
                "$exe" > "$out" 2> "$tmp/run.err"; then
            echo "calib-crossover failed (REG_COST_US=$cost):" >&2
            tail -n 5 "$tmp/run.err" >&2
            exit 3
        fi
    done

    window=$(sed -n 's/^# .* sizes \([0-9]*\)\.\.\([0-9]*\)$/\1 \2/p' \
             "$tmp/run-$cost-1.txt")
    read -r lo hi <<< "$window"

    # per residency and size: median times over the runs, for the plot
    for res in resident nonresident; do
        cat "$tmp"/run-"$cost"-*.txt | awk -v r="$res" '
            # median of the n values in v[1..n] (insertion sort: n is RUNS)
            function med(v, n,   i, j, x) {
                for (i = 2; i <= n; ++i) {
                    x = v[i]
                    for (j = i - 1; j >= 1 && v[j] > x; --j) v[j + 1] = v[j]
                    v[j + 1] = x
                }
                return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            }
            /^[0-9]/ && $2 == r {
                if (!($1 in cnt)) order[++nsizes] = $1
                k = ++cnt[$1]; z[$1, k] = $3; s[$1, k] = $4
            }
            END {
                for (i = 1; i <= nsizes; ++i) {
                    size = order[i]; n = cnt[size]
                    for (k = 1; k <= n; ++k) {
                        a[k] = z[size, k]; b[k] = s[size, k]
                    }
                    print size, med(a, n), med(b, n)
                }
            }' > "$tmp/times-$cost-$res.txt"
    done

    for res in resident nonresident; do
        meas=$(awk -v r="$res" '$1 == "crossover" && $2 == r { print $3 }' \
               "$tmp"/run-"$cost"-*.txt | median_size none)
        pred=$pred_res
        [ "$res" = nonresident ] && pred=$pred_non
        read -r ratio verdict < <(compare "$pred" "$meas" "$lo" "$hi")
        band_lo=$(awk -v r="$res" '$1 == "band" && $2 == r { print $3 }' \
                  "$tmp"/run-"$cost"-*.txt | median_size none)
        band_hi=$(awk -v r="$res" '$1 == "band" && $2 == r { print $4 }' \
                  "$tmp"/run-"$cost"-*.txt | median_size none)
        [ "$band_lo" = none ] && band_lo=0
        bverdict=$(band_verdict "$pred" "$band_lo" "$band_hi")
        case $verdict in
        MISS) status=1 ;;
        n/a)  [ $status -eq 0 ] && status=2 ;;
        esac
        # the predicted size's choice against the faster measured method
        regret=$(awk -v p="$pred" '{
                best = ($2 < $3) ? $2 : $3
                if (p == "inf" || p == "?") t = $3
                else t = ($1 + 0 >= p + 0) ? $2 : $3
                r = t / best - 1; if (r > worst) worst = r
            } END { printf "%.0f%%\n", worst * 100 }' \
            "$tmp/times-$cost-$res.txt")
        all=$(awk -v r="$res" '$1 == "crossover" && $2 == r { print $3 }' \
              "$tmp"/run-"$cost"-*.txt | tr '\n' ' ')
        rows+=("$(printf "%-11s %-11s %10s %10s %8s %-4s %17s %-4s %7s  runs: %s" \
                  "$cost" "$res" "$(human "$pred")" "$(human "$meas")" \
                  "$ratio" "$verdict" \
                  "$(human "$band_lo")..$(human "$band_hi")" "$bverdict" \
                  "$regret" "$all")")
        echo "$cost $res $pred $meas $band_lo $band_hi" >> "$tmp/crossovers.txt"
    done
done
elapsed=$(( $(date +%s) - start ))

echo "register+zcopy+deregister vs copy into a registered staging buffer"
echo "hcr on softverbs0:1, sizes $(human "$lo")..$(human "$hi")," \
     "medians of $runs runs (UCX_IB_REG_METHODS=direct," \
     "UCX_IB_PCI_RELAXED_ORDERING=$relaxed_order)"
printf "%-11s %-11s %10s %10s %8s %-4s %17s %-4s %7s\n" reg_cost_us \
       residency predicted "point" ratio ok "band" ok regret
printf "%s\n" "${rows[@]}"
if [ -f "$tmp/calib.log" ]; then
    echo "predictions per calibration:"
    sed 's/^calib /  /' "$tmp/calib.log"
fi
echo "elapsed ${elapsed}s"

# the plot: one panel per cost, log-log, both residencies; the predicted
# critical sizes as dashed vertical lines, the measured crossovers as short
# solid ones
mkdir -p "$results"
{
    ncost=$(wc -w <<< "$reg_costs")
    echo "set terminal pngcairo size $((460 * ncost)),420 font ',9'"
    echo "set output '$plot'"
    echo "set multiplot layout 1,$ncost title" \
         "'register+zcopy+deregister vs copy+zcopy from staging (hcr on" \
         "softverbs, median of $runs runs," \
         "UCX\\_IB\\_PCI\\_RELAXED\\_ORDERING=$relaxed_order)'"
    echo "set logscale xy; set grid; set key top left font ',8'"
    echo "set xlabel 'size (bytes)'; set ylabel 'time (us)'"
    echo "set xrange [$lo / 1.3:$hi * 1.3]"
    echo "set xtics ('4K' 4096, '16K' 16384, '64K' 65536, '256K' 262144," \
         "'1M' 1048576, '4M' 4194304, '16M' 16777216, '64M' 67108864)"
    for cost in $reg_costs; do
        echo "unset arrow; unset label"
        echo "set title 'SOFTVERBS\\_REG\\_COST\\_US=$cost'"
        y=0.04
        while read -r c res pred meas blo bhi; do
            [ "$c" = "$cost" ] || continue
            color=$([ "$res" = resident ] && echo "#1f77b4" || echo "#d62728")
            # predicted: dashed across the panel; measured: a solid tick
            if [[ $pred =~ ^[0-9]+$ ]] && [ "$pred" -ge "$lo" ] &&
               [ "$pred" -le "$hi" ]; then
                echo "set arrow from $pred, graph 0 to $pred, graph 1" \
                     "nohead lw 1.5 dt 2 lc rgb '$color'"
            fi
            if [[ $meas =~ ^[0-9]+$ ]]; then
                echo "set arrow from $meas, graph 0 to $meas, graph 0.12" \
                     "nohead lw 3 lc rgb '$color'"
            fi
            # the measured band: a bar along the bottom
            b0=$blo; b1=$bhi
            [ "$b0" -lt "$lo" ] && b0=$lo
            [ "$b1" = none ] && b1=$hi
            echo "set arrow from $b0, graph $y to $b1, graph $y" \
                 "nohead lw 5 lc rgb '$color'"
            echo "set label '$res: predicted $(human "$pred")," \
                 "measured $(human "$meas"), band" \
                 "$(human "$blo")..$(human "$bhi")' at graph 0.97," \
                 "graph $y + 0.03 right font ',8' tc rgb '$color'"
            y=0.09
        done < "$tmp/crossovers.txt"
        fr=$tmp/times-$cost-resident.txt
        fn=$tmp/times-$cost-nonresident.txt
        echo "plot '$fr' using 1:2 w lp pt 7 ps 0.5 lc rgb '#1f77b4'" \
             "t 'zcopy, resident'," \
             "'$fr' using 1:3 w lp pt 5 ps 0.5 dt 3 lc rgb '#1f77b4'" \
             "t 'staging, resident'," \
             "'$fn' using 1:2 w lp pt 7 ps 0.5 lc rgb '#d62728'" \
             "t 'zcopy, non-resident'," \
             "'$fn' using 1:3 w lp pt 5 ps 0.5 dt 3 lc rgb '#d62728'" \
             "t 'staging, non-resident'"
    done
    echo "unset multiplot"
} > "$tmp/plot.gp"
if command -v gnuplot > /dev/null; then
    if gnuplot "$tmp/plot.gp" 2> "$tmp/gnuplot.err"; then
        echo "plot: $plot"
    else
        echo "gnuplot failed:" >&2
        tail -n 5 "$tmp/gnuplot.err" >&2
    fi
else
    echo "gnuplot not installed: no plot" >&2
fi

exit $status
