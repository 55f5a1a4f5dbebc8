/*
 * softverbs-memcpy-bw: single-core "cold" memcpy bandwidth for a message
 * size, the reference that bench/softverbs-bench.sh compares softverbs'
 * put bandwidth to. Cold: every copy reads and writes memory that is not in
 * the caches (the copies walk through buffers much larger than the LLC).
 *
 * usage: softverbs-memcpy-bw [size_bytes] [seconds]  -> prints MiB/s
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL (512u << 20)

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t size = (argc > 1) ? strtoull(argv[1], NULL, 0) : (1u << 20);
    double secs = (argc > 2) ? atof(argv[2]) : 0.5;
    size_t n, i, off = 0;
    char *src, *dst;
    double t0, t, bytes = 0;

    if (size == 0 || size > POOL / 4) {
        fprintf(stderr, "size must be in 1..%u\n", POOL / 4);
        return 1;
    }
    src = malloc(POOL);
    dst = malloc(POOL);
    if (src == NULL || dst == NULL) {
        perror("malloc");
        return 1;
    }
    /* fault everything in, and copy once: on this VM the first copy into a
     * page is several times slower than later ones */
    memset(src, 1, POOL);
    memset(dst, 2, POOL);
    n = POOL / size;
    for (i = 0; i < n; ++i) {
        memcpy(dst + i * size, src + i * size, size);
    }
    t0 = now();
    do {
        for (i = 0; i < 64; ++i) {
            memcpy(dst + off, src + off, size);
            off    = (off + size) % (n * size);
            bytes += size;
        }
        t = now() - t0;
    } while (t < secs);
    printf("%.1f\n", bytes / t / 1048576.0);
    free(src);
    free(dst);
    return 0;
}
