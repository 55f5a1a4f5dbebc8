/*
 * What a process pays at its next system calls for the pages it has just
 * faulted in: the application writes a fresh send buffer (a page fault per
 * page), then sends it, and every staged or rendezvous send begins with
 * system calls on softverbs (the RTS is a process_vm_writev() into the
 * peer; rndv/sppln's residency probe is a mincore() of the buffer's first
 * page). Those calls cost more the more memory the process touched just
 * before: the kernel's path runs from caches and TLBs that the buffer
 * evicted. On this project's VM of 2026-11-28 a 64-byte
 * process_vm_writev() took 2.6-3.3 us, and right after the writer
 * faulted in a fresh buffer 4-8 us (256 KiB), 8-12 (1 MiB), 25-34
 * (4 MiB); after it wrote a resident buffer 2.5-4, 6.5-7 and 10-13 us,
 * after it only read one 2.4-3, 3.5-7 and 4-12 (so it is not the faults
 * alone, nor dirty pages); a one-page mincore() took 2.5-4.5, 5.5-7 and
 * 12-15 us there. A NIC's doorbell is
 * no system call, so the bound of a first send (bench/choice-matrix.sh)
 * leaves this out; it is part of what the bound table calls setup, which
 * it measures on a reused 16 KiB.
 *
 * For each size, reps times: map a fresh buffer, write it whole, time a
 * mincore() of its first page (with -p), then two 64-byte
 * process_vm_writev() into a child process; then the first such copy after
 * the process wrote, and after it read, a resident buffer of the size.
 * Prints per size the medians, in us:
 *   size probe_fresh pvw_fresh pvw_again pvw_written pvw_read
 *
 *   post-fault-syscall [-p] [-n reps] -s size [-s size]...
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PF_MAX_REPS  256
#define PF_MAX_SIZES 16
#define PF_MSG       64

static char pf_target[PF_MSG];

static double pf_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ts.tv_sec * 1e6) + (ts.tv_nsec * 1e-3);
}

static int pf_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double pf_median(double *v, int n)
{
    qsort(v, n, sizeof(*v), pf_cmp);
    return v[n / 2];
}

/* microseconds of one 64-byte process_vm_writev() into pid, or -1 */
static double pf_pvw(pid_t pid)
{
    static char src[PF_MSG];
    struct iovec l = {src, sizeof(src)}, r = {pf_target, sizeof(pf_target)};
    double t = pf_now_us();

    if (process_vm_writev(pid, &l, 1, &r, 1, 0) != sizeof(src)) {
        perror("process_vm_writev");
        return -1;
    }
    return pf_now_us() - t;
}

/* the first copy after the process read the resident buffer whole */
static double pf_after_read(pid_t pid, const char *resident, size_t size)
{
    volatile char sink = 0;
    size_t offset;

    for (offset = 0; offset < size; offset += 64) {
        sink ^= resident[offset];
    }
    (void)sink;
    return pf_pvw(pid);
}

/* One rep: times[0..2] as the header says; fresh: a buffer mapped and
 * faulted in now, else the resident one */
static int
pf_once(pid_t pid, size_t size, int probe, char *resident, double *times)
{
    char *buf = resident;
    unsigned char vec;
    double t;

    if (resident == NULL) {
        buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) {
            perror("mmap");
            return -1;
        }
    }
    memset(buf, 0x5a, size); /* the application writes its data */

    times[0] = 0;
    if (probe) {
        t = pf_now_us();
        if (mincore(buf, 4096, &vec) != 0) {
            perror("mincore");
            return -1;
        }
        times[0] = pf_now_us() - t;
    }
    times[1] = pf_pvw(pid);
    times[2] = pf_pvw(pid);
    if (resident == NULL) {
        munmap(buf, size);
    }
    return ((times[1] < 0) || (times[2] < 0)) ? -1 : 0;
}

int main(int argc, char **argv)
{
    double v[5][PF_MAX_REPS], times[3], again[3];
    size_t sizes[PF_MAX_SIZES];
    int reps = 31, n_sizes = 0, probe = 0, c, i, r, k, ret = 0;
    char *resident;
    pid_t pid;

    while ((c = getopt(argc, argv, "pn:s:")) != -1) {
        switch (c) {
        case 'p':
            probe = 1;
            break;
        case 'n':
            reps = atoi(optarg);
            break;
        case 's':
            if (n_sizes < PF_MAX_SIZES) {
                sizes[n_sizes++] = strtoul(optarg, NULL, 0);
            }
            break;
        default:
            n_sizes = 0;
            break;
        }
    }
    if ((n_sizes == 0) || (reps < 1) || (reps > PF_MAX_REPS)) {
        fprintf(stderr,
                "usage: %s [-p] [-n reps (1..%d)] -s size [-s size]...\n",
                argv[0], PF_MAX_REPS);
        return 2;
    }

    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    } else if (pid == 0) {
        for (;;) {
            pause(); /* the peer, whose memory the copies write */
        }
    }

    for (i = 0; (i < n_sizes) && (ret == 0); ++i) {
        resident = mmap(NULL, sizes[i], PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (resident == MAP_FAILED) {
            perror("mmap");
            ret = 1;
            break;
        }
        memset(resident, 0, sizes[i]);
        for (r = 0; (r < reps) && (ret == 0); ++r) {
            if ((pf_once(pid, sizes[i], probe, NULL, times) != 0) ||
                (pf_once(pid, sizes[i], 0, resident, again) != 0)) {
                ret = 1;
                break;
            }
            for (k = 0; k < 3; ++k) {
                v[k][r] = times[k];
            }
            v[3][r] = again[1];
            v[4][r] = pf_after_read(pid, resident, sizes[i]);
            if (v[4][r] < 0) {
                ret = 1;
                break;
            }
        }
        munmap(resident, sizes[i]);
        if (ret == 0) {
            printf("%zu %.2f %.2f %.2f %.2f %.2f\n", sizes[i],
                   pf_median(v[0], reps), pf_median(v[1], reps),
                   pf_median(v[2], reps), pf_median(v[3], reps),
                   pf_median(v[4], reps));
        }
    }

    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return ret;
}
