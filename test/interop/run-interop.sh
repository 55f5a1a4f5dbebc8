#!/usr/bin/env bash
# One cell of the interop suite: a program people run, over one UCX
# transport of this build, with its data checked.
#
#   run-interop.sh CELL TLS [NP]
#
# CELL: ompi       Open MPI (pml ucx, osc ucx): mpi_p2p and mpi_rma
#       mpich      MPICH (ch4:ucx): mpi_p2p and mpi_rma
#       hpcc       HPCC under Open MPI, small input, Success=1
#       ucp-cs     UCX's ucp_client_server example (tag, am, stream)
#       ucp-cs-rdmacm  the same, connecting through rdma_cm alone
#                  (UCX_SOCKADDR_TLS_PRIORITY=rdmacm: softverbs' rdma_cm)
#       ucp-hello  UCX's ucp_hello_world example
# TLS:  a UCX_TLS value (hcr, rc_v, tcp)
#
# Exit 0: passed; 1: failed; 77: skipped (the program is not installed; the
# reason is printed). Every run is bounded in time. One line per cell is
# appended to $INTEROP_RESULTS (default ./interop-results.txt) for
# table.sh. Expects TH_PREFIX (the install prefix); LD_PRELOAD and
# SOFTVERBS_MEMLOCK_LIMIT come from the test runner's environment.
set -uo pipefail

cell=${1:?usage: run-interop.sh CELL TLS [NP]}
tls=${2:?usage: run-interop.sh CELL TLS [NP]}
np=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
prefix=${TH_PREFIX:?TH_PREFIX must name the install prefix}
results=${INTEROP_RESULTS:-$PWD/interop-results.txt}
work=${INTEROP_WORK:-$PWD/interop-work}
limit=${INTEROP_TIMEOUT:-150}
mkdir -p "$work"

export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_TLS=$tls
# A host's other interfaces make UCX open a tcp lane on each; MPICH 4.0.2's
# MPI_Finalize then hangs now and then closing them (Debian's own UCX too,
# with protocol v1 or v2): the suite checks data over the loopback alone.
if [ "$tls" = tcp ]; then
    export UCX_NET_DEVICES=lo
fi

skip() { echo "SKIP: $*"; exit 77; }

record() {
    # stack;version;transport;np;what is checked;result
    echo "$1;$2;$tls;$3;$4;$5" >> "$results"
}

pkg_version() {
    dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed 's/-[^-]*$//'
}

# build SRC with COMPILER into $work/NAME unless it is up to date
build() {
    local cc=$1 src=$2 out=$work/$3
    shift 3
    if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
        "$cc" -O2 -o "$out" "$src" "$@" || return 1
    fi
    echo "$out"
}

run_mpi() {
    local stack=$1 launcher cc ver prog out status=0 p
    case $stack in
    ompi)
        command -v mpirun.openmpi >/dev/null && command -v mpicc.openmpi >/dev/null ||
            skip "Open MPI is not installed (openmpi-bin, libopenmpi-dev)"
        cc=mpicc.openmpi
        ver="Open MPI $(pkg_version openmpi-bin)"
        # Debian's openmpi-mca-params.conf turns pml ucx and osc ucx off
        # (pml = ^ucx, osc = ^ucx,pt2pt); pml_ucx_tls/devices "any" lets the
        # UCX PML run on devices other than mlx5
        launcher=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np"
                  --mca pml ucx --mca osc ucx --mca btl self
                  --mca pml_ucx_tls any --mca pml_ucx_devices any
                  -x LD_PRELOAD -x LD_LIBRARY_PATH -x SOFTVERBS_MEMLOCK_LIMIT
                  -x UCX_TLS -x UCX_NET_DEVICES)
        ;;
    mpich)
        command -v mpirun.mpich >/dev/null && command -v mpicc.mpich >/dev/null ||
            skip "MPICH is not installed (mpich, libmpich-dev)"
        cc=mpicc.mpich
        ver="MPICH $(pkg_version mpich)"
        # NOLOCAL: ranks on one host talk through the UCX netmod, not
        # MPICH's own shared memory, so the transport carries the data
        export MPIR_CVAR_NOLOCAL=1
        launcher=(mpirun.mpich -np "$np")
        ;;
    esac

    local -A checks=(
        [mpi_p2p]="p2p 1 B..16 MiB (reused and fresh buffers), bcast, allreduce, alltoall, allgather"
        [mpi_rma]="put/get under fence 1 B..1 MiB, lock/unlock puts, accumulate"
    )
    # a known MPI_Finalize hang (see below) need not cost the whole limit:
    # both programs take about 1.5 s at np 4 here, and the hang came in 3
    # of 4 clean-clone CI runs, 60 s each time at the limit this had before
    local run_limit=$limit
    if [ "$stack" = mpich ] && [ "$tls" = tcp ]; then
        run_limit=$((limit < 20 ? limit : 20))
    fi
    for p in mpi_p2p mpi_rma; do
        prog=$(build "$cc" "$here/$p.c" "$p.$stack") || {
            echo "FAIL: cannot build $p with $cc"; record "$stack" "$ver" "$np" "${checks[$p]}" FAIL; return 1; }
        out=$(timeout -k 5 "$run_limit" "${launcher[@]}" "$prog" 2>&1)
        status=$?
        echo "$out" | tail -n 20
        if [ $status -eq 0 ] && echo "$out" | grep -q "^$p.*: PASS"; then
            record "$stack" "$ver" "$np" "${checks[$p]}" PASS
        elif [ $status -eq 124 ] && [ "$stack" = mpich ] && [ "$tls" = tcp ] &&
             echo "$out" | grep -q "^$p.*: PASS"; then
            # Every rank checked its data and rank 0 reported the verdict:
            # only MPI_Finalize hung. MPICH 4.0.2 closes its UCX endpoints
            # and then waits in a PMI barrier without progressing UCX, and a
            # tcp endpoint's close can need the peer's progress; it happens
            # with Debian's own libucx0 (protocols v1 and v2) too, now and
            # then on a loaded host. The data verdict stands; the hang is
            # reported, not hidden.
            echo "NOTE: $stack $p over $tls: data checked, MPI_Finalize hung (known MPICH 4.0.2 + UCX tcp issue)"
            record "$stack" "$ver" "$np" "${checks[$p]}" "PASS (finalize hung)"
        else
            echo "FAIL: $stack $p over $tls, np $np (exit $status)"
            record "$stack" "$ver" "$np" "${checks[$p]}" FAIL
            return 1
        fi
    done
}

run_hpcc() {
    local dir out status ver
    command -v hpcc >/dev/null && command -v mpirun.openmpi >/dev/null ||
        skip "HPCC or Open MPI is not installed (hpcc, openmpi-bin)"
    ver="HPCC $(pkg_version hpcc), Open MPI"
    dir=$(mktemp -d "$work/hpcc.XXXXXX")
    # the packaged example input, made small: N 256, NB 32, a 1x2 grid
    sed -e 's/^1000 .*Ns$/256          Ns/' -e 's/^80 .*NBs$/32           NBs/' \
        -e 's/^2 .*Ps$/1            Ps/' \
        /usr/share/doc/hpcc/examples/_hpccinf.txt > "$dir/hpccinf.txt" ||
        skip "hpcc's example input is missing"
    out=$(cd "$dir" && timeout -k 5 "$limit" mpirun.openmpi --allow-run-as-root \
          --oversubscribe -np 2 --mca pml ucx --mca osc ucx --mca btl self \
          --mca pml_ucx_tls any --mca pml_ucx_devices any \
          -x LD_PRELOAD -x LD_LIBRARY_PATH -x SOFTVERBS_MEMLOCK_LIMIT \
          -x UCX_TLS -x UCX_NET_DEVICES hpcc 2>&1)
    status=$?
    echo "$out" | tail -n 5
    if [ $status -eq 0 ] && grep -q '^Success=1' "$dir/hpccoutf.txt" 2>/dev/null; then
        grep -E '^(HPL_Tflops|PTRANS_GBs|MPIRandomAccess_GUPs)=' "$dir/hpccoutf.txt"
        record hpcc "$ver" 2 "HPL, PTRANS, RandomAccess, FFT ... Success=1" PASS
        rm -rf "$dir"
    else
        echo "FAIL: hpcc over $tls (exit $status), output in $dir"
        record hpcc "$ver" 2 "Success=1" FAIL
        return 1
    fi
}

# start a server in the background on a free port; sets server_pid, port.
# A server that listens through rdma_cm alone has no TCP socket to see: it
# is ready when it says so
start_server() {
    local try
    for try in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 12000))  # below the ephemeral ports (32768-)
        timeout -k 5 "$limit" "$@" -p "$port" > "$work/server.$port.log" 2>&1 &
        server_pid=$!
        for _ in $(seq 50); do
            if [ "${UCX_SOCKADDR_TLS_PRIORITY:-}" = rdmacm ]; then
                grep -q "Waiting for connection" "$work/server.$port.log" &&
                    return 0
            elif ss -ltn 2>/dev/null | grep -q ":$port "; then
                return 0
            fi
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
    done
    echo "FAIL: the server did not listen"
    return 1
}

# the string UCX's examples send (hello_world_util.h: 'A' + i % 26, then a
# NUL), as ucp_client_server prints it on receipt, with a '.'
expected_string() {
    awk -v n="$1" 'BEGIN { for (i = 0; i < n - 1; ++i) {
        printf "%c", 65 + i % 26 }; print "." }'
}

run_ucp_example() {
    local name=$1 ver prog mode status=0 cstatus sstatus stream_reset= stream_retried=
    local src=$prefix/share/ucx/examples/$name.c
    [ -f "$src" ] || skip "$src is not installed"
    ver=$("$prefix/bin/ucx_info" -v 2>/dev/null | sed -n 's/^# Version \(.*\)/UCX \1 + ucx-hcr/p')
    prog=$(build cc "$src" "$name" -I"$prefix/include" -L"$prefix/lib" \
           -Wl,-rpath,"$prefix/lib" -lucp -luct -lucs) || {
        echo "FAIL: cannot build $name"; return 1; }
    if [ "$name" = ucp_client_server ]; then
        for mode in tag am stream stream-again; do
            if [ "$mode" = stream-again ]; then
                # The example's client closes its endpoint by force as soon
                # as its stream send completes locally, which races the
                # server's receive against the disconnect (UCX's example,
                # on any fabric; on two loaded cores the server's thread
                # can lose it). One server reset is run again, once; any
                # other failure, or a second reset, fails.
                [ -n "${stream_reset:-}" ] || continue
                mode=stream
                echo "$name -c stream over $tls: the server was reset" \
                     "before its receive (the example's forced close); again"
            fi
            stream_reset=
            # unbuffered: the server is killed once the client is done
            start_server stdbuf -o0 "$prog" -c "$mode" -s 100000 ||
                { status=1; break; }
            timeout -k 5 "$limit" "$prog" -c "$mode" -s 100000 -a 127.0.0.1 \
                -p "$port" > "$work/client.log" 2>&1
            cstatus=$?
            # the example's server waits for the next client forever: it
            # passed if it is still alive (no crash) and printed the data
            sleep 0.5
            if kill -0 "$server_pid" 2>/dev/null; then
                sstatus=0
                kill "$server_pid"
            else
                sstatus=dead
            fi
            wait "$server_pid" 2>/dev/null
            if [ "$mode" = stream ] && [ $cstatus -eq 0 ] &&
               [ $sstatus != 0 ] && [ -z "${stream_retried:-}" ] &&
               grep -q "unable to receive UCX message (Connection reset by remote peer)" \
                   "$work/server.$port.log"; then
                stream_reset=1
                stream_retried=1
            elif [ $cstatus -ne 0 ] || [ $sstatus != 0 ] ||
               ! expected_string 100000 | grep -qxFf - "$work/server.$port.log"; then
                echo "FAIL: $name -c $mode over $tls: client exit $cstatus, server exit $sstatus"
                tail -n 15 "$work/client.log" "$work/server.$port.log" | cut -c1-200
                status=1
            else
                echo "$name -c $mode over $tls: passed"
            fi
        done
        record "ucp_client_server${cm_label:-}" "$ver" 2 \
            "connect by socket address, tag, am and stream of 100 kB" \
            "$([ $status = 0 ] && echo PASS || echo FAIL)"
    else
        start_server "$prog" || return 1
        timeout -k 5 "$limit" "$prog" -n 127.0.0.1 -p "$port" > "$work/client.log" 2>&1
        cstatus=$?
        wait "$server_pid"
        sstatus=$?
        if [ $cstatus -ne 0 ] || [ $sstatus -ne 0 ] ||
           ! grep -q "UCP TEST SUCCESS" "$work/client.log" ||
           ! grep -q "^ABCDEFGHIJKLMNO$" "$work/client.log"; then
            echo "FAIL: $name over $tls: client exit $cstatus, server exit $sstatus"
            tail -n 15 "$work/client.log" "$work/server.$port.log" | cut -c1-200
            status=1
        else
            echo "$name over $tls: passed"
        fi
        record "ucp_hello_world" "$ver" 2 "worker addresses out of band, one message" \
            "$([ $status = 0 ] && echo PASS || echo FAIL)"
    fi
    return $status
}

case $cell in
ompi|mpich) run_mpi "$cell" ;;
hpcc)       run_hpcc ;;
ucp-cs)     run_ucp_example ucp_client_server ;;
ucp-cs-rdmacm)
    export UCX_SOCKADDR_TLS_PRIORITY=rdmacm
    cm_label=" (rdma_cm)"
    run_ucp_example ucp_client_server ;;
ucp-hello)  run_ucp_example ucp_hello_world ;;
*)          echo "unknown cell '$cell'"; exit 2 ;;
esac
