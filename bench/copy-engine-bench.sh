#!/usr/bin/env bash
# Copy engine: overlap of a posted copy with computation per backend and
# size, and the cache-pollution experiment (see copy-engine-bench.c).
#   bench/copy-engine-bench.sh      (uses build/install)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
exe=$(mktemp -d)/copy-engine-bench
cc -O2 -Wall -o "$exe" "$bench_top/bench/copy-engine-bench.c" \
    -I"$UCX_HCR_PREFIX/include" -L"$UCX_HCR_PREFIX/lib" \
    -Wl,-rpath,"$UCX_HCR_PREFIX/lib" -lucs
"$exe"
rm -rf "$(dirname "$exe")"
