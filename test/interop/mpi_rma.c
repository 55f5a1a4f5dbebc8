/*
 * One-sided MPI with data checks: puts and gets of 1 B .. 1 MiB under fence
 * synchronisation, exclusive lock/unlock epochs, and MPI_Accumulate (SUM)
 * from every rank. Every rank checks every byte it owns after each epoch and
 * the program exits non-zero on the first mismatch, naming it.
 *
 * Written for the interop suite (test/interop/run-interop.sh), which runs it
 * under Open MPI's osc ucx and MPICH's ch4:ucx over several UCX transports.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE  (1u << 20)
#define ACC_COUNT 1000

static int rank, nprocs, errors;

#define CHECK(_cond, ...)                                                      \
    do {                                                                       \
        if (!(_cond)) {                                                        \
            fprintf(stderr, "rank %d: ", rank);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            if (++errors > 5) {                                                \
                MPI_Abort(MPI_COMM_WORLD, 1);                                  \
            }                                                                  \
        }                                                                      \
    } while (0)

/* the byte that origin writes at offset i in epoch iter */
static uint8_t pattern(int origin, size_t i, int iter)
{
    return (uint8_t)(1 + ((origin * 131 + i * 7 + iter * 29) % 251));
}

static void check_window(const uint8_t *win, int origin, size_t size, int iter,
                         const char *what)
{
    size_t i;

    for (i = 0; i < size; ++i) {
        if (win[i] != pattern(origin, i, iter)) {
            CHECK(0, "%s size %zu byte %zu from %d: got %02x expected %02x",
                  what, size, i, origin, win[i], pattern(origin, i, iter));
            return;
        }
    }
}

int main(int argc, char **argv)
{
    uint8_t *win_buf, *src;
    int64_t *acc_buf, *acc_src;
    MPI_Win win, acc_win;
    size_t size, i;
    int iter, right, left, use_create;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    right = (rank + 1) % nprocs;
    left  = (rank + nprocs - 1) % nprocs;

    /* "create": the window is user memory (MPI_Win_create), which MPI
     * libraries register with the network; "allocate": the library's own
     * (MPI_Win_allocate, which may be shared memory within a node) */
    use_create = (argc < 2) || strcmp(argv[1], "allocate");
    src        = malloc(MAX_SIZE);
    if (use_create) {
        win_buf = malloc(MAX_SIZE);
        MPI_Win_create(win_buf, MAX_SIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                       &win);
    } else {
        MPI_Win_allocate(MAX_SIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_buf,
                         &win);
    }

    /* 1. put under fence: each rank writes its right neighbour's window */
    for (iter = 0, size = 1; size <= MAX_SIZE; size *= 4, ++iter) {
        for (i = 0; i < size; ++i) {
            src[i] = pattern(rank, i, iter);
        }
        memset(win_buf, 0, size);
        MPI_Win_fence(0, win);
        MPI_Put(src, (int)size, MPI_BYTE, right, 0, (int)size, MPI_BYTE, win);
        MPI_Win_fence(0, win);
        check_window(win_buf, left, size, iter, "put(fence)");
    }

    /* 2. get under fence: read the right neighbour's window back */
    for (iter = 100, size = 1; size <= MAX_SIZE; size *= 4, ++iter) {
        for (i = 0; i < size; ++i) {
            win_buf[i] = pattern(rank, i, iter);
        }
        memset(src, 0, size);
        MPI_Win_fence(0, win);
        MPI_Get(src, (int)size, MPI_BYTE, right, 0, (int)size, MPI_BYTE, win);
        MPI_Win_fence(0, win);
        check_window(src, right, size, iter, "get(fence)");
    }

    /* 3. passive target: exclusive lock, put, unlock, then the target
     *    checks after a barrier */
    for (iter = 200, size = 1; size <= MAX_SIZE; size *= 8, ++iter) {
        for (i = 0; i < size; ++i) {
            src[i] = pattern(rank, i, iter);
        }
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
        memset(win_buf, 0, size);
        MPI_Win_unlock(rank, win);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win);
        MPI_Put(src, (int)size, MPI_BYTE, right, 0, (int)size, MPI_BYTE, win);
        MPI_Win_unlock(right, win);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
        check_window(win_buf, left, size, iter, "put(lock)");
        MPI_Win_unlock(rank, win);
    }
    MPI_Win_free(&win);
    if (use_create) {
        free(win_buf);
    }

    /* 4. accumulate: every rank adds (rank + 1) * (i + 1) to every element
     *    of every rank's window; the sum is known in closed form */
    acc_src = malloc(ACC_COUNT * sizeof(*acc_src));
    if (use_create) {
        acc_buf = malloc(ACC_COUNT * sizeof(int64_t));
        MPI_Win_create(acc_buf, ACC_COUNT * sizeof(int64_t), sizeof(int64_t),
                       MPI_INFO_NULL, MPI_COMM_WORLD, &acc_win);
    } else {
        MPI_Win_allocate(ACC_COUNT * sizeof(int64_t), sizeof(int64_t),
                         MPI_INFO_NULL, MPI_COMM_WORLD, &acc_buf, &acc_win);
    }
    for (i = 0; i < ACC_COUNT; ++i) {
        acc_buf[i] = 0;
        acc_src[i] = (int64_t)(rank + 1) * (int64_t)(i + 1);
    }
    MPI_Win_fence(0, acc_win);
    for (iter = 0; iter < nprocs; ++iter) {
        MPI_Accumulate(acc_src, ACC_COUNT, MPI_INT64_T, iter, 0, ACC_COUNT,
                       MPI_INT64_T, MPI_SUM, acc_win);
    }
    MPI_Win_fence(0, acc_win);
    for (i = 0; i < ACC_COUNT; ++i) {
        int64_t expect = (int64_t)(i + 1) * nprocs * (nprocs + 1) / 2;
        if (acc_buf[i] != expect) {
            CHECK(0, "accumulate [%zu]=%lld expected %lld", i,
                  (long long)acc_buf[i], (long long)expect);
            break;
        }
    }
    MPI_Win_free(&acc_win);
    if (use_create) {
        free(acc_buf);
    }

    MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_rma %s: %s (%d errors, %d ranks)\n",
               use_create ? "create" : "allocate", errors ? "FAIL" : "PASS",
               errors, nprocs);
    }
    free(acc_src);
    free(src);
    MPI_Finalize();
    return errors ? 1 : 0;
}
