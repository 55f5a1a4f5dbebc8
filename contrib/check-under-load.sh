#!/bin/bash
#
# The whole test suite, N times in a row (default 5), while stress-ng loads
# every core: the soak that shows the tests' timing holds on a busy host
# (issue 31). Not part of CI: it takes N x 8-12 minutes on two cores.
#
#   contrib/check-under-load.sh [N]      (from the top of a built tree)
#
# Prints one line per run (exit status, seconds, the runner's last line)
# and the failures' recap; exits non-zero if any run failed.
#
set -u

runs=${1:-5}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$top/build}

command -v stress-ng >/dev/null ||
    { echo "stress-ng is not installed (apt-get install stress-ng)" >&2; exit 2; }
[ -f "$build/Makefile" ] ||
    { echo "no build in $build (run contrib/setup.sh first)" >&2; exit 2; }

log=$(mktemp -d)
trap 'kill "$load" 2>/dev/null; rm -rf "$log"' EXIT
stress-ng --cpu "$(nproc)" >/dev/null 2>&1 &
load=$!
echo "$(git -C "$top" rev-parse --short HEAD): $runs full runs under" \
     "stress-ng --cpu $(nproc)"
failed=0
for i in $(seq "$runs"); do
    t0=$(date +%s)
    make -s -C "$build" check >"$log/run$i" 2>&1
    rc=$?
    [ $rc -eq 0 ] || failed=$((failed + 1))
    echo "run $i: exit $rc, $(($(date +%s) - t0)) s," \
         "$(grep -E '^[0-9]+ passed' "$log/run$i" | tail -n 1)"
    sed -n '/^failed:/,/^[0-9]* passed/p' "$log/run$i" | sed '$d'
done
echo "$failed of $runs runs failed"
[ $failed -eq 0 ]
