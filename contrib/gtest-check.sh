#!/usr/bin/env bash
# UCX's own googletest suites on this build (make -C build gtest-check):
# configures a second build of the overlaid UCX tree with --enable-gtest,
# builds it and UCX's gtest, and runs the UCT suites of each transport given
# (default: hcr rc_verbs) on softverbs, without the performance-range tests
# (test_uct_perf), which assume a real HCA. Prints per transport the tests
# passed, failed and skipped, side by side; fails if any failed.
#
#   gtest-check.sh UCX_TREE GTEST_BUILD PREFIX [TL...]
#
# UCX_TREE is the patched, overlaid UCX source (build/ucx/src), GTEST_BUILD
# the build directory to use (kept between runs, so a second run rebuilds
# only what changed), PREFIX where the superbuild installed softverbs.
# GTEST_FILTER, when set, narrows the tests further (a gtest pattern on the
# test name after "TL/", e.g. 'test_uct_put_notify*').
#
# UCX 1.13.1's gtest does not build with gcc 12's warnings as errors (a
# use-after-free warning in its ucm/malloc_hook.cc), hence -Wno-error there.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 UCX_TREE GTEST_BUILD PREFIX [TL...]" >&2
    exit 2
fi
tree=$1
build=$2
prefix=$3
shift 3
tls=${*:-hcr rc_verbs}
jobs=${GTEST_JOBS:-2} # two cores are shared here; GTEST_JOBS for more
flags=(--enable-gtest --enable-maintainer-mode --disable-static --enable-mt --with-verbs --with-rdmacm
       --without-mlx5-dv --without-cuda --without-rocm --without-java
       --without-go --without-knem --without-xpmem --without-ugni
       --without-fuse3 --disable-doxygen-doc
       # modules are found next to the build's libucs, never installed ones
       --prefix="$build/unused-prefix")
nowerror=(CFLAGS="-g -O2 -Wno-error" CXXFLAGS="-g -O2 -Wno-error")
cc=gcc
cxx=g++
if command -v ccache > /dev/null; then
    cc="ccache gcc"
    cxx="ccache g++"
fi

if [ ! -f "$prefix/lib/libsoftverbs.so" ]; then
    echo "gtest-check: no softverbs in $prefix/lib (make install first)" >&2
    exit 2
fi

mkdir -p "$build"
log=$build/gtest-check
mkdir -p "$log"
t0=$(date +%s)
if [ ! -f "$build/Makefile" ] || [ "$tree/configure" -nt "$build/Makefile" ]
then
    echo "gtest-check: configure $build"
    (cd "$build" && "$tree/configure" CC="$cc" CXX="$cxx" "${flags[@]}") \
        > "$log/configure.log" 2>&1 ||
        { tail -n 30 "$log/configure.log"; exit 1; }
fi
echo "gtest-check: build UCX and its gtest (log: $log/make.log)"
# the libraries the gtest links as the superbuild builds them (a CXXFLAGS
# given to make would replace what src/tools/perf/lib adds to it), then the
# gtest without -Werror
build_gtest() {
    local dir

    for dir in src/ucm src/ucs src/uct src/ucp src/tools/perf; do
        make -C "$build/$dir" -j"$jobs" || return 1
    done
    make -C "$build/test/gtest" -j"$jobs" "${nowerror[@]}"
}
build_gtest > "$log/make.log" 2>&1 || { tail -n 30 "$log/make.log"; exit 1; }
echo "gtest-check: built in $(( $(date +%s) - t0 )) s"

# the environment of the C tests (test/Makefile.am): softverbs as the
# device, its memlock limit lifted as an RDMA host's limits.conf would; no
# rdmacm, which needs a kernel RDMA stack
run_env=(LD_PRELOAD="$prefix/lib/libsoftverbs.so"
         SOFTVERBS_MEMLOCK_LIMIT=unlimited UCX_MODULES=^rdmacm
         UCX_HANDLE_ERRORS=bt UCX_LOG_LEVEL=warn)

failed_line='^\[  FAILED  \] .* \([0-9]+ ms\)$'
status=0
summary=()
for tl in $tls; do
    out=$log/$tl.log
    t0=$(date +%s)
    env "${run_env[@]}" "$build/test/gtest/gtest" \
        --gtest_filter="$tl/${GTEST_FILTER:-*}-*test_uct_perf*" \
        > "$out" 2>&1 || status=1
    # a skipped test prints UCX's "[     SKIP ]" line, then gtest's OK
    ok=$(grep -c '^\[       OK \]' "$out" || true)
    skipped=$(grep -c '^\[ *SKIP \]' "$out" || true)
    passed=$((ok - skipped))
    # a failed test's own line ends in its time; gtest lists it again,
    # without the time, in its summary
    failed=$(grep -cE "$failed_line" "$out" || true)
    summary+=("$(printf '%-10s %7s %7s %7s %6s s' "$tl" "$passed" "$failed" \
                        "$skipped" "$(( $(date +%s) - t0 ))")")
    grep -E "$failed_line" "$out" | sed "s/^/  $tl: /" || true
    if ! grep -q '^\[  PASSED  \]' "$out"; then
        echo "gtest-check: $tl: the run did not finish, see $out" >&2
        status=1
    fi
done

printf '%-10s %7s %7s %7s %8s\n' transport passed failed skipped time
printf '%s\n' "${summary[@]}"
exit $status
