#!/bin/bash
# First send beside reused send with UCX's own benchmark: ucx_perftest -t
# tag_bw with -F (glue 0016: every message from and into memory mapped for
# it, the sender writing its data first) and without (one buffer reused),
# on hcr, rc_verbs (UCX_TLS=rc_v), tcp and shared memory (UCX_TLS=shm, with
# UCX 1.13.1's default protocols, v1: with 32 sends in flight its protocols
# v2 stall about 16 ms per message in about half of the runs).
# RUNS rounds (default 5), every configuration once per round, so that the
# host's drift spreads over all of them; the table shows the median over
# the rounds of perftest's overall MB/s, first / reused for each transport,
# and the first sends of hcr against each other transport. SIZES (default
# 1048576), ITERS (iterations per run, default: 64 MiB worth, 10..200),
# WINDOW (sends in flight, -O; default tag_bw's 32) and extra environment
# (e.g. SOFTVERBS_REG_COST_US=20) pass through. Appends to
# bench/results/perftest-first-send.txt, with the date, the commit and the
# host's load.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
SIZES=${SIZES:-1048576}
have_softverbs || { echo "softverbs not installed: run make install" >&2; exit 1; }
out=$bench_top/bench/results/perftest-first-send.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sv=$(softverbs_env)
declare -A cfg=(
    [hcr]="$sv UCX_TLS=hcr"
    [rc_verbs]="$sv UCX_TLS=rc_v"
    [tcp]="UCX_TLS=tcp"
    [shm]="UCX_TLS=shm UCX_PROTO_ENABLE=n"
)
names="hcr rc_verbs tcp shm"
export UCX_WARN_UNUSED_ENV_VARS=n

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$RUNS"); do
    for size in $SIZES; do
        iters=${ITERS:-$((64 * 1048576 / size))}
        [ "$iters" -gt 200 ] && iters=200
        [ "$iters" -lt 10 ] && iters=10
        for n in $names; do
            for kind in first reused; do
                flag=
                [ $kind = first ] && flag=-F
                # shellcheck disable=SC2086
                bw=$(perftest_pair "${cfg[$n]}" -t tag_bw -s "$size" \
                         -n "$iters" -w 5 ${WINDOW:+-O $WINDOW} $flag |
                     awk '{ print $6 }') ||
                    bw=nan
                echo "$bw" >> "$tmp/$n-$size-$kind"
            done
        done
    done
    echo "round $r of $RUNS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

med() { grep -v nan "$tmp/$1" | median; }
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == "nan" || b == "nan" || b == 0) print "-";
        else printf "%.2f", a / b }'
}

{
    echo
    echo "# ucx_perftest -t tag_bw, first send (-F) beside reused, overall" \
         "MB/s, median of $RUNS rounds, ${WINDOW:-32} sends in flight"
    echo "# $(date -u +%Y-%m-%d), commit $(git -C "$bench_top" rev-parse \
         --short HEAD 2>/dev/null || echo '?'), $(nproc) cores" \
         "($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1))," \
         "$(uname -r)"
    echo "# shm: UCX_TLS=shm UCX_PROTO_ENABLE=n (UCX 1.13.1's default protocols)"
    echo "# load average at the start $load_start, at the end $load_end" \
         "${SOFTVERBS_REG_COST_US:+(SOFTVERBS_REG_COST_US=$SOFTVERBS_REG_COST_US)}"
    for size in $SIZES; do
        echo
        printf '%-9s %-10s %11s %11s %14s\n' size transport "first" reused \
               "first/reused"
        for n in $names; do
            f=$(med "$n-$size-first")
            u=$(med "$n-$size-reused")
            printf '%-9s %-10s %11s %11s %14s\n' "$size" "$n" "$f" "$u" \
                   "$(ratio "$f" "$u")"
        done
        hf=$(med "hcr-$size-first")
        printf 'first send of %s, hcr / rc_verbs %s, hcr / tcp %s,' "$size" \
               "$(ratio "$hf" "$(med "rc_verbs-$size-first")")" \
               "$(ratio "$hf" "$(med "tcp-$size-first")")"
        printf ' hcr / shm %s\n' "$(ratio "$hf" "$(med "shm-$size-first")")"
        printf 'every run (MB/s):'
        for n in $names; do
            for kind in first reused; do
                printf ' %s-%s %s;' "$n" "$kind" \
                       "$(tr '\n' ' ' < "$tmp/$n-$size-$kind" | sed 's/ $//')"
            done
        done
        echo
    done
} | tee -a "$out"
