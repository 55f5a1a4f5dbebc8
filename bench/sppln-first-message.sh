#!/bin/bash
# The first staged message of a fresh worker beside its later ones (issue
# 25, item 4: nothing a user did not ask for is registered inside a
# message): for each size, RUNS fresh process pairs each send messages from
# fresh buffers, over hcr (the staged protocols) and over rc_v (UCX's
# rendezvous: what any first rendezvous costs, e.g. the first protocol
# selection of a receive and the first remote key's configuration);
# prints the medians over the runs of the first message's time and of the
# later messages' median, and their ratio.
#
#   bench/sppln-first-message.sh [RUNS]   (default 5; SIZES overrides)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
runs=${1:-5}
sizes=${SIZES:-"65536 1048576 4194304"}
bench_prepare
bench_cc_ucp "$tmp/sfm" "$bench_top/bench/sppln-first-message.c"
base="$(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n"

median() {
    sort -g | awk '{ v[NR] = $1 }
        END { if (NR % 2) print v[(NR + 1) / 2];
              else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

printf '%-6s %-10s %12s %12s %12s\n' tls size first_us later_us first/later
for s in $sizes; do
    for tls in hcr rc_v; do
        : > "$tmp/f.$tls"; : > "$tmp/l.$tls"
    done
    for r in $(seq "$runs"); do
        for tls in hcr rc_v; do
            # shellcheck disable=SC2086
            out=$(env $base UCX_TLS=$tls timeout 120 "$tmp/sfm" -s "$s" -m 10)
            echo "$out" | awk '{ print $2 }' >> "$tmp/f.$tls"
            echo "$out" | awk '{ print $3 }' >> "$tmp/l.$tls"
        done
    done
    for tls in hcr rc_v; do
        f=$(median < "$tmp/f.$tls"); l=$(median < "$tmp/l.$tls")
        printf '%-6s %-10s %12s %12s %12.2f\n' "$tls" "$s" "$f" "$l" \
            "$(awk -v a="$f" -v b="$l" 'BEGIN { print a / b }')"
    done
done
