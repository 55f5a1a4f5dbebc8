#!/usr/bin/env bash
# Copy engine: overlap of a posted copy with computation per backend and
# size (gross, and net of the engine threads' CPU time), and the
# cache-pollution experiment (see copy-engine-bench.c).
#   bench/copy-engine-bench.sh      (uses build/install)
# Writes bench/results/copy-engine.txt.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
exe=$(mktemp -d)/copy-engine-bench
cc -O2 -Wall -o "$exe" "$bench_top/bench/copy-engine-bench.c" \
    -I"$UCX_HCR_PREFIX/include" -L"$UCX_HCR_PREFIX/lib" \
    -Wl,-rpath,"$UCX_HCR_PREFIX/lib" -lucs
mkdir -p "$bench_top/bench/results"
"$exe" | tee "$bench_top/bench/results/copy-engine.txt"
rm -rf "$(dirname "$exe")"
