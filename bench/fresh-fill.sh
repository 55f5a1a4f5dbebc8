#!/bin/bash
# How the receiver fills a fresh buffer, side by side: first sends of the
# automatic choice (bench/choice-matrix.c, column auto, fresh buffers) with
# the receiver's split by its model (UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD=auto),
# all of the buffer faulted in ahead (inf), and all of it filled by
# userfaultfd (0). One pair of processes per setting and round, the settings
# in another order every round; a cell is the median over RUNS rounds
# (default 11) of each round's median message.
#
# FF_LINKS (default "default 100 25"), FF_SIZES (bytes, default
# "262144 1048576 4194304"), SOFTVERBS_LINK_LAT_US for the modelled links:
# FF_LINK_LAT_US (default 1). About 40 s with the defaults.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-11}
LAT=${FF_LINK_LAT_US:-1}
links=${FF_LINKS:-"default 100 25"}
sizes=${FF_SIZES:-"262144 1048576 4194304"}
settings="auto inf 0"
bench_prepare
bench_cc_ucp "$tmp/cm" "$bench_top/bench/choice-matrix.c"

size_args=""
for s in $sizes; do
    size_args="$size_args -s $s"
done
base="$(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n PAIR_PIN=1 CM_COLUMNS=auto"

for l in $links; do
    link_env=""
    [ "$l" = default ] ||
        link_env="SOFTVERBS_LINK_GBPS=$l SOFTVERBS_LINK_LAT_US=$LAT"
    for _ in $(seq "$RUNS"); do
        # shellcheck disable=SC2086
        for a in $(printf '%s\n' $settings | shuf); do
            # shellcheck disable=SC2086
            env $base $link_env UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD=$a \
                timeout 120 "$tmp/cm" -n 9 $size_args |
                awk -v l="$l" -v a="$a" '$2 == "auto" { print l, a, $1, $3 }' \
                >> "$tmp/times"
        done
    done
done

python3 - "$tmp/times" "$RUNS" "$links" "$sizes" <<'PY'
import statistics, sys
path, runs, links, sizes = sys.argv[1], sys.argv[2], sys.argv[3].split(), \
    sys.argv[4].split()
t = {}
for line in open(path):
    l, a, s, us = line.split()
    t.setdefault((l, a, s), []).append(float(us))
print("# fresh first sends, auto column, medians of %s rounds (us): the "
      "model's split, all faulted in ahead, all filled by userfaultfd" % runs)
print("%-8s %9s %10s %10s %10s" % ("link", "size", "split", "ahead",
                                   "userfaultfd"))
for l in links:
    for s in sizes:
        row = [statistics.median(t[(l, a, s)]) if (l, a, s) in t
               else float("nan") for a in ("auto", "inf", "0")]
        print("%-8s %9s %10.1f %10.1f %10.1f" % (l, s, *row))
PY
