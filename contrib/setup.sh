#!/usr/bin/env bash
# One command from a fresh clone to a working build and a demonstration:
# installs the Debian packages, configures the superbuild in build/ (extra
# arguments go to configure, e.g. --with-ucx-src=DIR or --prefix=DIR),
# builds and installs UCX 1.13.1 with the ucx-hcr pieces, then runs the
# main job (contrib/demo.sh --quick, about a minute; --full for every size
# and five runs). SETUP_NO_DEMO=1 skips the demonstration.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
jobs=$(nproc 2>/dev/null || echo 2)

step() {
    local name=$1 t0 t1
    shift
    echo "==> $name"
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    printf '==> %s: %.1f s\n' "$name" "$(echo "$t1 - $t0" | bc)"
}

configure_build() {
    mkdir -p "$build"
    cd "$build"
    # reconfigure only when asked to, or when there is no configuration yet
    if [ ! -f config.status ] || [ $# -gt 0 ]; then
        "$top/configure" "$@"
    fi
}

step "install dependencies" bash "$top/contrib/install-deps.sh"
step "autogen" "$top/autogen.sh"
step "configure" configure_build "$@"
step "build" make -C "$build" -j"$jobs"
step "install" make -C "$build" install
if [ "${SETUP_NO_DEMO:-0}" != 1 ]; then
    step "demo" bash "$top/contrib/demo.sh" --quick "$build"
fi
echo "ucx-hcr is installed in $(sed -n 's/^prefix = //p' "$build/Makefile")"
echo "run the tests with: make -C $build check"
