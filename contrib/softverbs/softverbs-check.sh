#!/bin/bash
#
# softverbs-check.sh: run the third-party acceptance programs over softverbs
# (server and client on 127.0.0.1) and print one PASS/FAIL line each: the
# verbs tools, perftest, UCX, and rdmacm-utils' rdma_cm programs.
# With --hosts, the server runs on one host and the client on another: two
# network namespaces made by softverbs-netns.sh (needs root), so everything
# goes over softverbs' network data path.
#
# usage: softverbs-check.sh [--hosts] [path/to/libsoftverbs.so]
# Default library: ../lib next to this script (installed), else the
# superbuild's build/install/lib. Environment: UCX_PREFIX (directory with
# bin/ucx_info and bin/ucx_perftest; default: from PATH).
#
set -u
here=$(cd "$(dirname "$0")" && pwd)
hosts=0
if [ "${1:-}" = --hosts ]; then
    hosts=1
    shift
fi
lib=${1:-}
for c in "$here/../lib/libsoftverbs.so" "$here/../../build/install/lib/libsoftverbs.so"; do
    if [ -z "$lib" ] && [ -f "$c" ]; then
        lib=$c
    fi
done
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    echo "usage: $0 path/to/libsoftverbs.so" >&2
    exit 2
fi
ucx_bin=${UCX_PREFIX:+$UCX_PREFIX/bin/}
export LD_PRELOAD=$lib
# UCX registers more than the default 8 MiB memlock limit (see README.md)
export SOFTVERBS_MEMLOCK_LIMIT=${SOFTVERBS_MEMLOCK_LIMIT:-unlimited}
fails=0
port=$((20000 + RANDOM % 12000))  # below the ephemeral ports (32768-)

# where the server and the client run
srv=()
cli=()
addr=127.0.0.1
if [ $hosts -eq 1 ]; then
    netns="env SV_NETNS_PREFIX=svc- $here/softverbs-netns.sh"
    $netns up || { echo "cannot create the two hosts (root?)" >&2; exit 2; }
    trap '$netns down' EXIT
    read -r -a srv <<< "$netns run a"
    read -r -a cli <<< "$netns run b"
    addr=$($netns addr a)
    echo "server on host a ($addr), client on host b ($($netns addr b))"
fi

report() {
    local rc=$1 name=$2 detail=$3
    if [ "$rc" -eq 0 ]; then
        printf 'PASS  %-44s %s\n' "$name" "$detail"
    else
        printf 'FAIL  %-44s %s\n' "$name" "$detail"
        fails=$((fails + 1))
    fi
}

# pair NAME EXTRACT_AWK CMD ARGS...: server "CMD ARGS", client "CMD ARGS host"
pair() {
    local name=$1 extract=$2 srv_out cli_out spid rc
    shift 2
    port=$((port + 1))
    srv_out=$(mktemp)
    cli_out=$(mktemp)
    "${srv[@]}" timeout 60 "$@" -p $port >"$srv_out" 2>&1 &
    spid=$!
    sleep 0.7
    "${cli[@]}" timeout 60 "$@" -p $port "$addr" >"$cli_out" 2>&1
    rc=$?
    wait $spid || rc=1
    report $rc "$name" "$(awk "$extract" "$cli_out" | tail -n 1)"
    rm -f "$srv_out" "$cli_out"
}

out=$("${srv[@]}" timeout 20 ibv_devinfo 2>&1)
echo "$out" | grep -q 'PORT_ACTIVE'
report $? "ibv_devinfo" "$(echo "$out" | grep -m1 hca_id)"

pp='/iters in/ { print $7, $8 }'
pair "ibv_rc_pingpong" "$pp" ibv_rc_pingpong -d softverbs0
pair "ibv_rc_pingpong -e (events)" "$pp" ibv_rc_pingpong -d softverbs0 -e
pair "ibv_ud_pingpong" "$pp" ibv_ud_pingpong -d softverbs0
pair "ibv_srq_pingpong" "$pp" ibv_srq_pingpong -d softverbs0

bw='/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $1 " B: " $4 " MB/s" }'
lat='/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $1 " B: typical " $5 " us" }'
pair "ib_write_bw" "$bw" ib_write_bw -d softverbs0
pair "ib_write_lat" "$lat" ib_write_lat -d softverbs0
pair "ib_read_bw" "$bw" ib_read_bw -d softverbs0
pair "ib_read_lat" "$lat" ib_read_lat -d softverbs0
pair "ib_send_lat" "$lat" ib_send_lat -d softverbs0
pair "ib_atomic_lat" "$lat" ib_atomic_lat -d softverbs0

out=$("${srv[@]}" timeout 30 "${ucx_bin}ucx_info" -d 2>&1)
echo "$out" | grep -A1 'Transport: rc_verbs' | grep -q softverbs0:1 &&
    echo "$out" | grep -A1 'Transport: ud_verbs' | grep -q softverbs0:1
report $? "ucx_info -d: rc_verbs, ud_verbs on softverbs0:1" ""

uf='/^Final:/ { printf "p50 %s us, %s MB/s", $3, $6 }'
uct() {
    local tl=$1
    shift
    pair "ucx_perftest $tl $*" "$uf" "${ucx_bin}ucx_perftest" -x "$tl" -d softverbs0:1 "$@"
}
uct rc_verbs -t am_lat -n 20000
uct rc_verbs -t put_lat -n 20000
uct rc_verbs -t put_bw -D zcopy -s 1048576 -n 2000
uct rc_verbs -t get -D zcopy -s 1048576 -n 2000
uct rc_verbs -t add_lat -n 20000
uct ud_verbs -t am_lat -n 20000
uct ud_verbs -t am_bw -D bcopy -s 4000 -n 20000
# hcr, where the UCX build has it (ucx-hcr's transport)
if echo "$out" | grep -q 'Transport: hcr'; then
    uct hcr -t am_lat -n 20000
    uct hcr -t put_lat -n 20000
    uct hcr -t put_bw -D zcopy -s 1048576 -n 2000
fi

ucp() {
    local tls=$1
    shift
    pair "ucx_perftest UCX_TLS=$tls $*" "$uf" env UCX_TLS="$tls" "${ucx_bin}ucx_perftest" "$@"
}
tls_list="rc_v ud_verbs"
echo "$out" | grep -q 'Transport: hcr' && tls_list="$tls_list hcr"
for tls in $tls_list; do
    ucp $tls -t tag_lat -n 20000
    ucp $tls -t tag_bw -s 1048576 -n 1000
    ucp $tls -t ucp_put_bw -s 1048576 -n 1000
    ucp $tls -t ucp_get -s 1048576 -n 1000
done

# rdma_cm (sv_cm.c): rdmacm-utils' programs connect by address; each
# server takes one client and ends
cmpair() {  # cmpair NAME PASS_REGEX SERVER... -- CLIENT... (-p PORT added)
    local name=$1 want=$2 srv_out cli_out spid rc s=() c=() p=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do s+=("$1"); shift; done
    shift
    c=("$@")
    port=$((port + 1))
    # udaddy takes no port (its -p is the port space): its own, 7174
    [ "${s[0]}" = udaddy ] || p=(-p $port)
    srv_out=$(mktemp)
    cli_out=$(mktemp)
    "${srv[@]}" timeout 60 "${s[@]}" "${p[@]}" >"$srv_out" 2>&1 &
    spid=$!
    sleep 0.7
    "${cli[@]}" timeout 60 "${c[@]}" "${p[@]}" >"$cli_out" 2>&1
    rc=$?
    wait $spid || rc=1
    grep -Eq "$want" "$cli_out" || rc=1
    report $rc "$name" "$(grep -E "$want" "$cli_out" | tail -n 1)"
    rm -f "$srv_out" "$cli_out"
}
if command -v rping >/dev/null; then
    cmpair "rping -C 1000 -V" "rdma-ping-999:" rping -s -a "$addr" -C 1000 -- \
        rping -c -a "$addr" -C 1000 -V -v
    cmpair "ucmatose (4 connections)" "test complete" ucmatose -c 4 -C 100 -- \
        ucmatose -s "$addr" -c 4 -C 100
    cmpair "udaddy (4 connections)" "test complete" udaddy -c 4 -C 100 -- \
        udaddy -s "$addr" -c 4 -C 100
    cmpair "rdma_server / rdma_client" "end 0" rdma_server -- \
        rdma_client -s "$addr"
    port=$((port + 1))
    out=$("${cli[@]}" timeout 20 rping -c -a "$addr" -p $port -C 1 2>&1)
    echo "$out" | grep -q "RDMA_CM_EVENT_REJECTED, error 8"
    report $? "rping to a port nobody listens on" "$(echo "$out" | tail -n 1)"
else
    echo "SKIP  rdma_cm programs: rdmacm-utils is not installed"
fi

# UCX's rdmacm component: its client-server example connecting by socket
# address through rdma_cm alone
ex=${UCX_PREFIX:-$(dirname "$(command -v ucx_info)")/..}/share/ucx/examples
if [ -f "$ex/ucp_client_server.c" ] && command -v cc >/dev/null; then
    bin=$(mktemp -d)
    if cc -O2 -o "$bin/ucs" "$ex/ucp_client_server.c" -I"$ex/../../../include" \
          -L"$ex/../../../lib" -Wl,-rpath,"$ex/../../../lib" -lucp -luct -lucs \
          2>/dev/null; then
        for tls in hcr rc_v; do
            port=$((port + 1))
            "${srv[@]}" env UCX_TLS=$tls UCX_SOCKADDR_TLS_PRIORITY=rdmacm \
                timeout 60 stdbuf -o0 "$bin/ucs" -c tag -s 100000 -p $port \
                >"$bin/srv" 2>&1 &
            spid=$!
            for _ in $(seq 100); do
                grep -q "Waiting for connection" "$bin/srv" && break
                sleep 0.1
            done
            "${cli[@]}" env UCX_TLS=$tls UCX_SOCKADDR_TLS_PRIORITY=rdmacm \
                timeout 60 "$bin/ucs" -c tag -s 100000 -a "$addr" -p $port \
                >"$bin/cli" 2>&1
            rc=$?
            sleep 0.5
            kill $spid 2>/dev/null   # it waits for the next client forever
            wait $spid 2>/dev/null
            grep -q "ABCDEFGHIJKLMNOPQRSTUVWXYZ" "$bin/srv" || rc=1
            report $rc "ucp_client_server UCX_TLS=$tls over rdma_cm" \
                "$(grep -c . "$bin/srv") lines from the server"
        done
    fi
    rm -rf "$bin"
fi

echo "$fails failed"
[ $fails -eq 0 ]
