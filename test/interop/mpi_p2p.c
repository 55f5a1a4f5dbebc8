/*
 * Point-to-point and collectives with data checks, for the interop suite.
 *
 * p2p: every rank exchanges messages of 1 B .. 16 MiB with its ring
 * neighbours (MPI_Sendrecv, and MPI_Isend/MPI_Irecv into a fresh buffer
 * each size so that first sends are exercised too), checking every byte.
 * coll: MPI_Bcast, MPI_Allreduce (SUM of int64 with a known closed form),
 * MPI_Alltoall and MPI_Allgather with per-rank patterns.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (16u << 20)

static int rank, nprocs, errors;

static uint8_t pattern(int origin, size_t i, int tag)
{
    return (uint8_t)((origin * 37 + i * 13 + tag * 101 + (i >> 12)) % 256);
}

static void fail(const char *what, size_t size, size_t i, int got, int exp)
{
    fprintf(stderr, "rank %d: %s size %zu index %zu: got %d expected %d\n",
            rank, what, size, i, got, exp);
    if (++errors > 5) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void check_bytes(const uint8_t *buf, size_t size, int origin, int tag,
                        const char *what)
{
    size_t i;

    for (i = 0; i < size; ++i) {
        if (buf[i] != pattern(origin, i, tag)) {
            fail(what, size, i, buf[i], pattern(origin, i, tag));
            return;
        }
    }
}

static void test_p2p(void)
{
    int right = (rank + 1) % nprocs, left = (rank + nprocs - 1) % nprocs;
    uint8_t *sbuf, *rbuf;
    MPI_Request req[2];
    MPI_Status sts[2];
    MPI_Status st;
    size_t size, i;
    int tag, count;

    sbuf = malloc(MAX_SIZE);
    rbuf = malloc(MAX_SIZE);
    for (tag = 0, size = 1; size <= MAX_SIZE; size *= 2, ++tag) {
        for (i = 0; i < size; ++i) {
            sbuf[i] = pattern(rank, i, tag);
        }
        memset(rbuf, 0, size);
        MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, right, tag, rbuf, (int)size,
                     MPI_BYTE, left, tag, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        if ((size_t)count != size) {
            fail("sendrecv count", size, 0, count, (int)size);
        }
        check_bytes(rbuf, size, left, tag, "sendrecv");
    }

    /* fresh buffers for every size: nonblocking, the other direction */
    for (tag = 1000, size = 1; size <= MAX_SIZE; size *= 4, ++tag) {
        uint8_t *fs = malloc(size), *fr = malloc(size);
        for (i = 0; i < size; ++i) {
            fs[i] = pattern(rank, i, tag);
        }
        MPI_Irecv(fr, (int)size, MPI_BYTE, right, tag, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(fs, (int)size, MPI_BYTE, left, tag, MPI_COMM_WORLD, &req[1]);
        MPI_Waitall(2, req, sts);
        check_bytes(fr, size, right, tag, "isend/irecv fresh");
        free(fs);
        free(fr);
    }
    free(sbuf);
    free(rbuf);
}

static void test_coll(void)
{
    const int n = 100000;
    int64_t *a  = malloc(n * sizeof(*a));
    uint8_t *s, *r;
    size_t blk = 4096, i;
    int p;

    /* allreduce: sum over ranks of (rank + 1) * (i + 1) */
    for (i = 0; i < (size_t)n; ++i) {
        a[i] = (int64_t)(rank + 1) * (int64_t)(i + 1);
    }
    MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (i = 0; i < (size_t)n; ++i) {
        if (a[i] != (int64_t)(i + 1) * nprocs * (nprocs + 1) / 2) {
            fail("allreduce", n, i, (int)a[i], -1);
            break;
        }
    }

    /* bcast of 1 MiB from the last rank */
    s = malloc(1 << 20);
    if (rank == nprocs - 1) {
        for (i = 0; i < (1u << 20); ++i) {
            s[i] = pattern(rank, i, 7);
        }
    } else {
        memset(s, 0, 1 << 20);
    }
    MPI_Bcast(s, 1 << 20, MPI_BYTE, nprocs - 1, MPI_COMM_WORLD);
    check_bytes(s, 1 << 20, nprocs - 1, 7, "bcast");
    free(s);

    /* alltoall: block p of rank q's send buffer is pattern(q, .., p) */
    s = malloc(blk * nprocs);
    r = malloc(blk * nprocs);
    for (p = 0; p < nprocs; ++p) {
        for (i = 0; i < blk; ++i) {
            s[p * blk + i] = pattern(rank, i, p);
        }
    }
    MPI_Alltoall(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
    for (p = 0; p < nprocs; ++p) {
        check_bytes(r + p * blk, blk, p, rank, "alltoall");
    }

    /* allgather */
    for (i = 0; i < blk; ++i) {
        s[i] = pattern(rank, i, 55);
    }
    MPI_Allgather(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
    for (p = 0; p < nprocs; ++p) {
        check_bytes(r + p * blk, blk, p, 55, "allgather");
    }
    free(s);
    free(r);
    free(a);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    test_p2p();
    test_coll();
    MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_p2p: %s (%d errors, %d ranks)\n", errors ? "FAIL" : "PASS",
               errors, nprocs);
    }
    MPI_Finalize();
    return errors ? 1 : 0;
}
