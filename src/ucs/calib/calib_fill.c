/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "calib.h"

#include <ucs/debug/log.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * Host part of the model: what filling a receive buffer whose pages were
 * never touched costs, the two ways rndv/sppln's receiver has
 * (UCX_RNDV_SPPLN_FRESH_COPY): faulting the pages in zeroed
 * (MADV_POPULATE_WRITE) and copying into them, or registering them with a
 * userfaultfd and having the kernel allocate each with its data
 * (UFFDIO_COPY). The second writes each page once but pays a fixed cost
 * (the kernel splits the mapping, then merges it back), so which one costs
 * less depends on the size, and on a virtual machine, whose page faults
 * each exit to the hypervisor, by a factor that varies from host to host.
 * The copy into faulted in pages is timed too, as the receiver does it: on
 * a virtual machine that shadows the guest's page tables, its first write
 * to each page still traps to the hypervisor (a 1 MiB first send at
 * 25 Gb/s took 2.0 ms populated, 0.5 ms filled by userfaultfd, where the
 * populate alone was the cheaper of the two).
 * ucs_calib_time_fresh() times an operation on fresh mappings for these
 * and for calib_memcpy.c's copy from untouched pages.
 */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#if defined(__NR_userfaultfd) && defined(UFFD_USER_MODE_ONLY)
#define UCS_CALIB_HAVE_UFFD 1
#else
#define UCS_CALIB_HAVE_UFFD 0
#endif

/* the sizes of receive buffers whose fill the receiver chooses (from a
 * sub-block's pages to a few chunks) */
static const size_t ucs_calib_fill_sizes[] = {64 * UCS_KBYTE, 256 * UCS_KBYTE,
                                              UCS_MBYTE, 4 * UCS_MBYTE};
#define UCS_CALIB_FRESH_MIN_REPS 3
#define UCS_CALIB_FRESH_MAX_REPS 15
/* UFFDIO_COPY in pieces of this size, a call each, as the receiver fills
 * a sub-block (16 KiB to 1 MiB) per call */
#define UCS_CALIB_FILL_PIECE (64 * UCS_KBYTE)


ucs_status_t ucs_calib_time_fresh(const size_t *sizes, unsigned n, size_t skip,
                                  ucs_calib_fresh_op_t prepare,
                                  ucs_calib_fresh_op_t op, void *arg,
                                  double *medians)
{
    double t[UCS_CALIB_FRESH_MAX_REPS];
    ucs_status_t status;
    ucs_time_t start;
    unsigned i, r, reps;
    void *buf;

    for (i = 0; i < n; ++i) {
        reps = ucs_min(ucs_max(UCS_MBYTE / sizes[i], UCS_CALIB_FRESH_MIN_REPS),
                       UCS_CALIB_FRESH_MAX_REPS);
        for (r = 0; r < reps; ++r) {
            buf = mmap(NULL, sizes[i], PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (buf == MAP_FAILED) {
                ucs_error("calib: failed to map %zu bytes: %m", sizes[i]);
                return UCS_ERR_NO_MEMORY;
            }

            memset(buf, 0, skip);
            status = (prepare == NULL) ? UCS_OK :
                                         prepare(UCS_PTR_BYTE_OFFSET(buf, skip),
                                                 sizes[i] - skip, arg);
            start  = ucs_get_time();
            if (status == UCS_OK) {
                status = op(UCS_PTR_BYTE_OFFSET(buf, skip), sizes[i] - skip,
                            arg);
            }
            t[r] = ucs_time_to_sec(ucs_get_time() - start);
            munmap(buf, sizes[i]);
            if (status != UCS_OK) {
                return status;
            }
        }
        medians[i] = ucs_calib_median(t, reps);
    }
    return UCS_OK;
}

static ucs_status_t ucs_calib_fill_populate(void *buf, size_t size, void *arg)
{
    return (madvise(buf, size, MADV_POPULATE_WRITE) == 0) ? UCS_OK :
                                                            UCS_ERR_UNSUPPORTED;
}

/* the receiver's copy out of its staging, @a arg resident as that is */
static ucs_status_t ucs_calib_fill_copy(void *buf, size_t size, void *arg)
{
    memcpy(buf, arg, size);
    return UCS_OK;
}

#if UCS_CALIB_HAVE_UFFD
typedef struct {
    int fd;
    const void *src; /* resident, as the receiver's staging is */
} ucs_calib_fill_uffd_t;

static ucs_status_t ucs_calib_fill_uffd(void *buf, size_t size, void *arg)
{
    ucs_calib_fill_uffd_t *uffd = arg;
    struct uffdio_register reg  = {.range = {(uintptr_t)buf, size},
                                   .mode  = UFFDIO_REGISTER_MODE_MISSING};
    ucs_status_t status         = UCS_OK;
    struct uffdio_copy copy;
    size_t at;

    if (ioctl(uffd->fd, UFFDIO_REGISTER, &reg) != 0) {
        return UCS_ERR_UNSUPPORTED;
    }

    for (at = 0; at < size; at += copy.len) {
        copy.dst  = (uintptr_t)buf + at;
        copy.src  = (uintptr_t)uffd->src + at;
        copy.len  = ucs_min(size - at, UCS_CALIB_FILL_PIECE);
        copy.mode = 0;
        if (ioctl(uffd->fd, UFFDIO_COPY, &copy) != 0) {
            status = UCS_ERR_UNSUPPORTED;
            break;
        }
    }

    ioctl(uffd->fd, UFFDIO_UNREGISTER, &reg.range);
    return status;
}
#endif

/* Fit the time @a fill takes for fresh mappings of the sizes above, but
 * for their first @a skip bytes, after @a prepare; with @a model, less a
 * copy of as many bytes into resident memory. One the kernel refuses
 * leaves @a func at 0 */
static ucs_status_t
ucs_calib_measure_fill_func(const char *name, ucs_calib_fresh_op_t prepare,
                            ucs_calib_fresh_op_t fill, void *arg, size_t skip,
                            const ucs_calib_model_t *model,
                            ucs_linear_func_t *func)
{
    unsigned i, n = ucs_static_array_size(ucs_calib_fill_sizes);
    double x[ucs_static_array_size(ucs_calib_fill_sizes)];
    double y[ucs_static_array_size(ucs_calib_fill_sizes)];
    ucs_status_t status;

    status = ucs_calib_time_fresh(ucs_calib_fill_sizes, n, skip, prepare, fill,
                                  arg, y);
    if (status == UCS_ERR_UNSUPPORTED) {
        ucs_debug("calib: %s failed: %m; not measured", name);
        return UCS_OK;
    } else if (status != UCS_OK) {
        return status;
    }

    for (i = 0; i < n; ++i) {
        x[i] = ucs_calib_fill_sizes[i] - skip;
        if (model != NULL) {
            y[i] -= ucs_calib_copy_time(model, ucs_calib_fill_sizes[i] - skip,
                                        UCS_CALIB_PAGES_RESIDENT);
        }
    }
    *func = ucs_calib_fit(x, y, n);
    ucs_debug("calib: %s: %.2f us + %.3f ns/byte", name, func->c * 1e6,
              func->m * 1e9);
    return UCS_OK;
}

ucs_status_t ucs_calib_measure_fill(ucs_calib_model_t *model)
{
    size_t num      = ucs_static_array_size(ucs_calib_fill_sizes);
    size_t max_size = ucs_calib_fill_sizes[num - 1];
    ucs_status_t status;
    void *src;
#if UCS_CALIB_HAVE_UFFD
    struct uffdio_api api = {.api = UFFD_API};
    ucs_calib_fill_uffd_t uffd;
#endif

    status = ucs_calib_measure_fill_func("populate", NULL,
                                         ucs_calib_fill_populate, NULL, 0, NULL,
                                         &model->fill_populate);
    if (status != UCS_OK) {
        return status;
    }

    src = mmap(NULL, max_size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED) {
        ucs_error("calib: failed to map %zu bytes: %m", max_size);
        return UCS_ERR_NO_MEMORY;
    }
    memset(src, 0x5a, max_size);

    /* where the kernel refuses to populate, this is not measured either */
    status = ucs_calib_measure_fill_func("copy into populated pages",
                                         ucs_calib_fill_populate,
                                         ucs_calib_fill_copy, src, 0, model,
                                         &model->fill_copy);
    if (status != UCS_OK) {
        goto out;
    }

#if UCS_CALIB_HAVE_UFFD
    /* user mode only: what an unprivileged receiver may open */
    uffd.fd = syscall(__NR_userfaultfd,
                      O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (uffd.fd < 0) {
        ucs_debug("calib: userfaultfd() failed: %m; not measured");
        goto out;
    }
    if (ioctl(uffd.fd, UFFDIO_API, &api) != 0) {
        ucs_debug("calib: ioctl(UFFDIO_API) failed: %m; not measured");
        close(uffd.fd);
        goto out;
    }

    /* the receiver registers the pages after those it faults in ahead,
     * which splits the mapping (and unregistering merges it back): so does
     * this, after a first page faulted in */
    uffd.src = src;
    status   = ucs_calib_measure_fill_func("userfaultfd", NULL,
                                           ucs_calib_fill_uffd, &uffd,
                                           ucs_get_page_size(), NULL,
                                           &model->fill_uffd);
    close(uffd.fd);
#endif

out:
    munmap(src, max_size);
    return status;
}
