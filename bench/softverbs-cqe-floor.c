/*
 * The floor under softverbs' receive path against a polled write (issue
 * 28), without softverbs: two processes on this host, each pinned to a
 * core of its own, ping-pong a message moved by process_vm_writev() into
 * the other's private buffer, as softverbs moves every message between
 * processes. The target learns of the message by:
 *   polled  - polling the message's last bytes (an RDMA write whose target
 *             polls memory);
 *   after   - polling a word of a shared segment that the initiator stores
 *             as soon as its system call returns (a receive completion
 *             that costs nothing at all to produce, find and consume: no
 *             receive queue, no CQ, no post_recv);
 *   ride    - polling the same word, written by the same system call as
 *             a second remote iovec after the data (the kernel copies
 *             remote iovecs in order, each pinned and copied on its own).
 * The target answers at once the same way. Prints "floor SIZE polled_ns
 * after_ns ride_ns", half round trips, medians of the iterations.
 *
 *   softverbs-cqe-floor [-n iterations] [-s size]
 *
 * bench/softverbs-cqe-floor.sh runs it several times and prints the ratios.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FLOOR_MAX_SIZE (1 << 20)

enum {
    FLOOR_POLLED,
    FLOOR_AFTER,
    FLOOR_RIDE,
    FLOOR_MODES
};

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ts.tv_sec * 1e9) + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void pin(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

/* one ping-pong run of a mode; returns the median half round trip (ns) on
 * rank 0 */
static double floor_run(int mode, size_t size, int iters)
{
    /* one page of flags per rank, shared: each rank polls its own */
    volatile uint64_t *flags = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
                                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *buf                = aligned_alloc(4096, FLOOR_MAX_SIZE);
    char *src                = aligned_alloc(4096, FLOOR_MAX_SIZE);
    double *samples          = calloc(iters, sizeof(*samples)), t0, med;
    volatile uint64_t *last, *mine, *theirs;
    struct iovec l[2], r[2];
    pid_t child, peer;
    uint64_t i, value;
    int rank, turn, status;

    if ((flags == MAP_FAILED) || !buf || !src || !samples) {
        fprintf(stderr, "softverbs-cqe-floor: out of memory\n");
        exit(1);
    }
    memset(buf, 0, FLOOR_MAX_SIZE);
    memset(src, 0, FLOOR_MAX_SIZE);
    child = fork();
    if (child < 0) {
        perror("fork");
        exit(1);
    }
    rank = (child == 0);
    peer = rank ? getppid() : child;
    pin(rank);
    last   = (volatile uint64_t *)(buf + size - 8);
    mine   = flags + (rank ? 512 : 0);
    theirs = flags + (rank ? 0 : 512);
    /* the buffers and the flags are at the same addresses in both (fork) */
    l[0].iov_base = src;
    l[0].iov_len  = size;
    r[0].iov_base = buf;
    r[0].iov_len  = size;
    l[1].iov_base = &value;
    l[1].iov_len  = sizeof(value);
    r[1].iov_base = (void *)theirs;
    r[1].iov_len  = sizeof(value);

    for (i = 1; i <= (uint64_t)iters; ++i) {
        t0 = now_ns();
        for (turn = 0; turn < 2; ++turn) {
            if (turn == rank) {
                if (mode == FLOOR_POLLED) {
                    while (*last != i) {
                    }
                } else {
                    while (*mine != i) {
                    }
                }
                continue;
            }
            memcpy(src + size - 8, &i, 8);
            value = i;
            if (process_vm_writev(peer, l, (mode == FLOOR_RIDE) ? 2 : 1, r,
                                  (mode == FLOOR_RIDE) ? 2 : 1,
                                  0) < (ssize_t)size) {
                perror("process_vm_writev");
                exit(1);
            }
            if (mode == FLOOR_AFTER) {
                __atomic_store_n(theirs, i, __ATOMIC_RELEASE);
            }
        }
        samples[i - 1] = (now_ns() - t0) / 2;
    }
    if (rank) {
        _exit(0);
    }
    waitpid(child, &status, 0);
    qsort(samples, iters, sizeof(*samples), cmp_double);
    med = samples[iters / 2];
    free(samples);
    free(src);
    free(buf);
    munmap((void *)flags, 8192);
    return med;
}

int main(int argc, char **argv)
{
    size_t sizes[] = {8, 4096, 65536}, size = 0, k;
    double t[FLOOR_MODES];
    int iters = 20000, opt, mode;

    while ((opt = getopt(argc, argv, "n:s:")) != -1) {
        switch (opt) {
        case 'n':
            iters = atoi(optarg);
            break;
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: %s [-n iterations] [-s size]\n", argv[0]);
            return 1;
        }
    }
    if ((iters < 1) ||
        ((size != 0) && ((size < 8) || (size > FLOOR_MAX_SIZE)))) {
        fprintf(stderr, "softverbs-cqe-floor: -n >= 1, -s 8..%d\n",
                FLOOR_MAX_SIZE);
        return 1;
    }
    for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
        if ((size != 0) && (sizes[k] != size)) {
            continue;
        }
        for (mode = 0; mode < FLOOR_MODES; ++mode) {
            t[mode] = floor_run(mode, (size != 0) ? size : sizes[k], iters);
        }
        printf("floor %zu %.0f %.0f %.0f\n", (size != 0) ? size : sizes[k],
               t[FLOOR_POLLED], t[FLOOR_AFTER], t[FLOOR_RIDE]);
        fflush(stdout);
    }
    return 0;
}
