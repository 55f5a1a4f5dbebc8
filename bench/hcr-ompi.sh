#!/bin/bash
#
# Debian's Open MPI (its UCX PML links libucp.so.0) over this build with
# UCX_TLS=hcr: a two-process ping-pong and an allreduce, with the UCX log
# showing the transport. Needs openmpi-bin and libopenmpi-dev (mpicc).
# pml_ucx_tls/devices=any: Open MPI 4.1 otherwise only takes UCX on mlx5;
# btl self and no ofi mtl: libfabric's verbs provider does not run on
# softverbs (it crashes in fi_getinfo), and only the UCX PML is wanted.
#
# Usage: bench/hcr-ompi.sh   (UCX_HCR_PREFIX: the install)
#
set -eu
. "$(dirname "$0")/lib.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/pp.c" <<'SRC'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, iters = 1000, i, n;
    static char buf[1 << 20];
    double t, sum, in;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (n = 8; n <= (1 << 20); n *= 128) {
        memset(buf, rank + 1, n);
        MPI_Barrier(MPI_COMM_WORLD);
        t = MPI_Wtime();
        for (i = 0; i < iters; ++i) {
            if (rank == 0) {
                MPI_Send(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                MPI_Send(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
            }
        }
        t = MPI_Wtime() - t;
        if (rank == 0) {
            printf("ping-pong %7d B: %8.2f us one-way\n", n,
                   t / iters / 2 * 1e6);
        }
    }
    in = rank + 1;
    MPI_Allreduce(&in, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("allreduce of 1..%d = %g (%s)\n", size, sum,
               (sum == size * (size + 1) / 2.0) ? "correct" : "WRONG");
    }
    MPI_Finalize();
    return 0;
}
SRC
mpicc -O2 -o "$tmp/pp" "$tmp/pp.c"

export LD_LIBRARY_PATH=$UCX_HCR_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mpirun --allow-run-as-root --oversubscribe -np 2 \
    --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
    --mca btl self --mca mtl ^ofi --mca osc ^ucx \
    -x LD_PRELOAD="$SOFTVERBS_LIB" -x SOFTVERBS_MEMLOCK_LIMIT=unlimited \
    -x LD_LIBRARY_PATH -x UCX_TLS=hcr -x UCX_LOG_LEVEL=info \
    -x UCX_PROTO_INFO=y \
    "$tmp/pp" 2>&1 | grep -E "ping-pong|allreduce|hcr/|ucp_context|UCX  (ERROR|WARN)" | \
    awk '!seen[$0]++' | head -40
