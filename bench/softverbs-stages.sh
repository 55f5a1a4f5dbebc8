#!/bin/bash
#
# Where a softverbs message's time goes: builds libsoftverbs from this tree
# with per-stage timestamps (-DSV_TRACE_STAGES, contrib/softverbs/
# sv_trace.h), runs bench/verbs-notify-lat.c's ping-pong for one operation
# and size under it, and prints the chain of stages with their median times
# (bench/softverbs-stages.py): the poster's stages, the data copy, the
# completion, and the hops from one process to the other. The time stamps
# cost some 10 ns each, so the totals read a little above the untraced
# benchmark's.
#
#   bench/softverbs-stages.sh [write|wimm] [SIZE] [ITERATIONS]
#
# e.g. "bench/softverbs-stages.sh wimm 8" next to "bench/softverbs-stages.sh
# write 8" shows what a receive completion costs over a polled write.
#
set -euo pipefail
source "$(dirname "$0")/lib.sh"
op=${1:-wimm}
size=${2:-8}
iters=${3:-20000}
sv=$bench_top/contrib/softverbs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

srcs=$(sed -n '/^libsoftverbs_la_SOURCES/,/^$/p' "$sv/Makefile.am" |
       grep -o 'sv[a-z_]*\.c')
# shellcheck disable=SC2046
gcc -DSV_TRACE_STAGES -O2 -g -Wall -fvisibility=hidden -fPIC -shared \
    -o "$tmp/libsoftverbs-trace.so" $(printf "$sv/%s " $srcs) -lpthread
gcc -O2 -Wall -I"$sv" -o "$tmp/vnl" "$bench_top/bench/verbs-notify-lat.c" \
    -libverbs
mkdir "$tmp/trace"
SOFTVERBS_TRACE_DIR=$tmp/trace LD_PRELOAD=$tmp/libsoftverbs-trace.so \
    SOFTVERBS_MEMLOCK_LIMIT=unlimited \
    "$tmp/vnl" -s "$size" -o "$op" -n "$iters"
python3 "$bench_top/bench/softverbs-stages.py" --pair xfer:post_send \
    --pair xfer_done:poll_hit --pair post_send:post_send "$tmp"/trace/*
