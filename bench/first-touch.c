/*
 * The receiver's share of a first send's bound (bench/choice-matrix.sh):
 * how long faulting in the pages of a buffer nobody touched yet takes, at
 * the message's size. Every receive into fresh memory pays at least this
 * much: rndv/sppln's receiver faults the pages in (MADV_POPULATE_WRITE) or
 * has the kernel copy into them, a zero-copy receive registers them, which
 * faults them in and pins them, and an eager one copies into them, a fault
 * per page.
 *
 * Measured per size rather than fitted: on this host a page's first touch
 * costs more in a large buffer than in a small one (MADV_POPULATE_WRITE,
 * 4 KiB pages: 240-270 ns per KiB up to 4 MiB, 320 at 16 MiB, 350-380 at
 * 64 MiB), and the calibration's registration of untouched pages stops at
 * 4 MiB.
 *
 * With -c, the pieces of 2 MiB on a huge page boundary that the buffer
 * holds whole are faulted in as rndv/sppln's receiver does with
 * UCX_RNDV_SPPLN_FRESH_COLLAPSE=y: the piece's first page, then
 * MADV_COLLAPSE into one huge page (a piece the kernel refuses is faulted
 * in small pages); the rest in small pages.
 *
 * With -u, the cheaper of two ways rndv/sppln's receiver has with
 * UCX_RNDV_SPPLN_FRESH_COPY=uffd (the default), each timed on its own
 * fresh mappings: populated as above, or registered with a user-mode
 * userfaultfd, filled from a resident buffer by UFFDIO_COPY in 64 KiB
 * pieces and unregistered. The kernel faults each page in with its data
 * rather than zeroed, so the second time includes the copy that the other
 * ways leave to the receiver's copy out. The receiver faults in ahead what
 * its model says (UCX_RNDV_SPPLN_FRESH_UFFD_AHEAD) and has userfaultfd fill
 * the rest, so its first touch costs at least the cheaper of the two. A
 * buffer with fewer bytes than -m (default 0) is only populated.
 *
 * A populated buffer (without -c) counts one more thing: what the first
 * copy into its pages costs beyond a copy into resident ones (timed in the
 * same mapping right after, untimed in the sum). That is about nothing
 * where the CPU walks the guest kernel's page tables; on a virtual machine
 * that shadows them, the first write to each page from user mode traps to
 * the hypervisor although the kernel has faulted it in (4.5 us a page on
 * one such VM, 2026-11-28), and the receiver's copy out pays that trap.
 *
 * Each way is timed on reps fresh mappings (default 9), and the fastest
 * counts: a bound is a floor, and on a virtual machine the same fill takes
 * one of two times, as the hypervisor happens to back the pages the guest
 * kernel hands out (2026-11-28, userfaultfd's fill of a fresh 1 MiB: 0.1-0.2
 * ms, or 1.4-1.9 ms in the first mapping of a process and in some others;
 * a median of 5 read 1.1 ms in some rounds of the regret matrix, whose
 * first 1 MiB itself took 0.47 ms, 0.42 times its "bound").
 *
 * Usage: first-touch [-c | -u [-m uffd_min]] [-n reps] -s size [-s size]...
 * Prints "size seconds" per size: the fastest of reps fresh mappings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

#define FT_HUGE       (2ul << 20)
#define FT_UFFD_PIECE (64ul << 10)

#define FT_MAX_REPS  64
#define FT_MAX_SIZES 64

static double ft_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

static int ft_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int ft_populate(char *start, char *end)
{
    if ((end > start) && (madvise(start, end - start, MADV_POPULATE_WRITE))) {
        perror("madvise(MADV_POPULATE_WRITE)");
        return -1;
    }
    return 0;
}

/* fault in [buf, buf + size): whole huge pieces collapsed, the rest in
 * small pages */
static int ft_collapse(char *buf, size_t size)
{
    char *piece = (char *)(((uintptr_t)buf + FT_HUGE - 1) & ~(FT_HUGE - 1));
    char *end = buf + size, *done = buf;

    for (; piece + FT_HUGE <= end; piece += FT_HUGE) {
        if (ft_populate(done, piece + 4096) != 0) {
            return -1;
        }
        done = piece + 4096;
        if (madvise(piece, FT_HUGE, MADV_COLLAPSE) == 0) {
            done = piece + FT_HUGE;
        }
    }
    return ft_populate(done, end);
}

/* -u: the userfaultfd; the resident buffer the data comes from */
static int ft_uffd        = -1;
static size_t ft_uffd_min = 0;
static char *ft_src;

static int ft_src_alloc(size_t max_size)
{
    ft_src = malloc(max_size);
    if (ft_src == NULL) {
        perror("malloc");
        return -1;
    }
    memset(ft_src, 0x5a, max_size);
    return 0;
}

/* seconds that the first copy into the populated [buf, buf + size) takes
 * more than a second one */
static double ft_first_copy_extra(char *buf, size_t size)
{
    double t1, t2;

    t1 = ft_now();
    memcpy(buf, ft_src, size);
    t1 = ft_now() - t1;
    t2 = ft_now();
    memcpy(buf, ft_src, size);
    t2 = ft_now() - t2;
    return (t1 > t2) ? (t1 - t2) : 0;
}

static int ft_uffd_open(void)
{
    struct uffdio_api api = {.api = UFFD_API};

#ifndef UFFD_USER_MODE_ONLY
    fprintf(stderr, "-u: built with headers older than Linux 5.11\n");
    return -1;
#else
    ft_uffd = syscall(__NR_userfaultfd,
                      O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
#endif
    if ((ft_uffd < 0) || (ioctl(ft_uffd, UFFDIO_API, &api) != 0)) {
        perror("userfaultfd");
        return -1;
    }
    return 0;
}

/* fill [buf, buf + size) (a whole mapping) by UFFDIO_COPY */
static int ft_uffd_fill(char *buf, size_t size)
{
    struct uffdio_register reg = {.range = {(uintptr_t)buf, size},
                                  .mode  = UFFDIO_REGISTER_MODE_MISSING};
    struct uffdio_copy copy;
    size_t at, len;
    int ret = 0;

    if (ioctl(ft_uffd, UFFDIO_REGISTER, &reg) != 0) {
        perror("UFFDIO_REGISTER");
        return -1;
    }
    for (at = 0; at < size; at += len) {
        len       = (size - at < FT_UFFD_PIECE) ? size - at : FT_UFFD_PIECE;
        copy.dst  = (uintptr_t)buf + at;
        copy.src  = (uintptr_t)ft_src + at;
        copy.len  = len;
        copy.mode = 0;
        if (ioctl(ft_uffd, UFFDIO_COPY, &copy) != 0) {
            perror("UFFDIO_COPY");
            ret = -1;
            break;
        }
    }
    if (ioctl(ft_uffd, UFFDIO_UNREGISTER, &reg.range) != 0) {
        perror("UFFDIO_UNREGISTER");
        ret = -1;
    }
    return ret;
}

/* seconds to fault in a fresh mapping of size bytes (by userfaultfd where
 * uffd is set), or a negative value */
static double ft_once(size_t size, int collapse, int uffd)
{
    void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double t;
    int ret;

    if (buf == MAP_FAILED) {
        perror("mmap");
        return -1;
    }
    t = ft_now();
    if (uffd) {
        ret = ft_uffd_fill(buf, size);
    } else if (collapse) {
        ret = ft_collapse(buf, size);
    } else {
        ret = ft_populate(buf, buf + size);
    }
    t = ft_now() - t;
    if ((ret == 0) && !uffd && !collapse) {
        t += ft_first_copy_extra(buf, size);
    }
    if (ret != 0) {
        munmap(buf, size);
        return -1;
    }
    munmap(buf, size);
    return t;
}

int main(int argc, char **argv)
{
    size_t sizes[FT_MAX_SIZES];
    double t[FT_MAX_REPS];
    int reps = 9, n_sizes = 0, collapse = 0, uffd = 0, c, i, r, way;
    double best;
    size_t max_size = 0;

    while ((c = getopt(argc, argv, "cum:n:s:")) != -1) {
        switch (c) {
        case 'c':
            collapse = 1;
            break;
        case 'u':
            uffd = 1;
            break;
        case 'm':
            ft_uffd_min = strtoul(optarg, NULL, 0);
            break;
        case 'n':
            reps = atoi(optarg);
            break;
        case 's':
            if (n_sizes < FT_MAX_SIZES) {
                sizes[n_sizes] = strtoul(optarg, NULL, 0);
                if (sizes[n_sizes] > max_size) {
                    max_size = sizes[n_sizes];
                }
                ++n_sizes;
            }
            break;
        default:
            n_sizes = 0;
            break;
        }
    }
    if ((n_sizes == 0) || (reps < 1) || (reps > FT_MAX_REPS) ||
        (collapse && uffd)) {
        fprintf(stderr,
                "usage: %s [-c | -u [-m uffd_min]] [-n reps (1..%d)] -s size "
                "[-s size]...\n",
                argv[0], FT_MAX_REPS);
        return 2;
    }
    if ((ft_src_alloc(max_size) != 0) || (uffd && (ft_uffd_open() != 0))) {
        return 1;
    }

    for (i = 0; i < n_sizes; ++i) {
        best = -1;
        for (way = 0; way <= (uffd && (sizes[i] >= ft_uffd_min)); ++way) {
            for (r = 0; r < reps; ++r) {
                t[r] = ft_once(sizes[i], collapse, way);
                if (t[r] < 0) {
                    return 1;
                }
            }
            qsort(t, reps, sizeof(t[0]), ft_cmp);
            if ((best < 0) || (t[0] < best)) {
                best = t[0];
            }
        }
        printf("%zu %.9e\n", sizes[i], best);
    }
    return 0;
}
