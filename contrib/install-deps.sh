#!/usr/bin/env bash
# Install everything ucx-hcr needs to build, test and benchmark, from Debian's
# archive only. Idempotent: packages already present are left alone, and apt's
# index is refreshed only when something is missing.
set -euo pipefail

PKGS=(
    # build tools for the superbuild and for UCX itself
    build-essential autoconf automake libtool pkg-config dpkg-dev ccache
    # verbs: headers and libraries UCX builds against, plus third-party tools
    # that softverbs is checked with
    libibverbs-dev librdmacm-dev ibverbs-utils perftest
    # rdma_cm programs that softverbs' connection manager is checked with
    # (rping, ucmatose, udaddy, rdma_server/rdma_client)
    rdmacm-utils
    # per-stage profiles of softverbs (bench/softverbs-stages.sh and perf)
    linux-perf
    # UCX build dependencies
    libnuma-dev
    # tests and benchmarks
    gnuplot-nox iproute2 procps bc
    # libfabric's fi_info and fi_pingpong, run on softverbs by the tests
    libfabric-bin
    # the interop suite (test/interop): MPI stacks and HPCC, and ss(8) and
    # stdbuf(1) for its client-server runs
    openmpi-bin libopenmpi-dev mpich libmpich-dev hpcc coreutils
    # CI: UCX's code style on new and changed lines (contrib/check-format.sh)
    clang-format-14
)

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PKGS[@]} packages already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO=sudo
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
