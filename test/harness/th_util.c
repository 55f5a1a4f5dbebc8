/*
 * th utilities: data patterns, checksums, commands, paths, device probing.
 */
#define _GNU_SOURCE
#include "th.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/userfaultfd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TH_PREFIX
#define TH_PREFIX "/usr/local"
#endif

/* xorshift64*: cheap, and every byte depends on the seed and the offset */
static inline uint64_t th_pattern_word(uint64_t seed, uint64_t index)
{
    uint64_t x = seed ^ (index * 0x9e3779b97f4a7c15ull) ^ 0x2545f4914f6cdd1dull;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545f4914f6cdd1dull;
}

void th_fill_pattern(void *buf, size_t length, uint64_t seed)
{
    uint8_t *p = buf;
    size_t i;

    for (i = 0; i < length; ++i) {
        p[i] = (uint8_t)(th_pattern_word(seed, i / 8) >> ((i % 8) * 8));
    }
}

void th_check_pattern_at(const char *file, int line, const void *buf,
                         size_t length, uint64_t seed)
{
    const uint8_t *p = buf;
    uint8_t expected;
    size_t i;

    for (i = 0; i < length; ++i) {
        expected = (uint8_t)(th_pattern_word(seed, i / 8) >> ((i % 8) * 8));
        if (p[i] != expected) {
            th_fail_at(file, line,
                       "data mismatch at offset %zu of %zu: got 0x%02x, "
                       "expected 0x%02x (seed %llu)",
                       i, length, p[i], expected, (unsigned long long)seed);
        }
    }
}

uint64_t th_checksum(const void *buf, size_t length)
{
    const uint8_t *p = buf;
    uint64_t h      = 0xcbf29ce484222325ull;
    size_t i;

    for (i = 0; i < length; ++i) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

void th_assert_mem_eq_at(const char *file, int line, const char *expr_a,
                         const char *expr_b, const void *a, const void *b,
                         size_t length)
{
    const uint8_t *pa = a, *pb = b;
    size_t i;

    for (i = 0; i < length; ++i) {
        if (pa[i] != pb[i]) {
            th_fail_at(file, line,
                       "%s and %s differ at offset %zu of %zu: 0x%02x vs 0x%02x",
                       expr_a, expr_b, i, length, pa[i], pb[i]);
        }
    }
}

const char *th_prefix(void)
{
    const char *prefix = getenv("TH_PREFIX");

    return (prefix != NULL) ? prefix : TH_PREFIX;
}

int th_run_cmd(char **output, const char *fmt, ...)
{
    char *cmd = NULL, *buf = NULL;
    size_t size = 0, len = 0;
    va_list ap;
    FILE *f;
    int status, n;

    va_start(ap, fmt);
    n = vasprintf(&cmd, fmt, ap);
    va_end(ap);
    TH_ASSERT(n >= 0);

    th_log("$ %s", cmd);
    fflush(NULL);
    f = popen(cmd, "r");
    if (f == NULL) {
        TH_FAIL("popen(%s) failed: %m", cmd);
    }

    for (;;) {
        if (size - len < 4096) {
            size = size ? size * 2 : 65536;
            buf  = realloc(buf, size);
            TH_ASSERT(buf != NULL);
        }
        n = fread(buf + len, 1, size - len - 1, f);
        if (n <= 0) {
            break;
        }
        len += n;
    }
    buf[len] = '\0';

    status = pclose(f);
    free(cmd);
    if (output != NULL) {
        *output = buf;
    } else {
        free(buf);
    }

    if (WIFEXITED(status)) {
        return WEXITSTATUS(status);
    }
    return 128 + WTERMSIG(status);
}

int th_have_verbs_device(const char *name_prefix)
{
    struct ibv_device **list;
    int i, num = 0, found = 0;

    list = ibv_get_device_list(&num);
    if (list == NULL) {
        return 0;
    }
    for (i = 0; i < num; ++i) {
        if (!strncmp(ibv_get_device_name(list[i]), name_prefix,
                     strlen(name_prefix))) {
            found = 1;
        }
    }
    ibv_free_device_list(list);
    return found;
}

int th_tcp_port_used(int port, int any)
{
    char line[256], want[16];
    int found = 0;
    FILE *f;

    f = fopen("/proc/net/tcp", "r");
    if (f == NULL) {
        return 0;
    }
    snprintf(want, sizeof(want), ":%04X ", port);
    while (fgets(line, sizeof(line), f) != NULL) {
        /* local address, then remote, then state 0A = LISTEN */
        if ((strstr(line, want) != NULL) &&
            (any || (strstr(line, " 0A ") != NULL))) {
            found = 1;
        }
    }
    fclose(f);
    return found;
}

int th_free_tcp_port(unsigned attempt)
{
    int port;
    unsigned i;

    for (i = 0; i < 1000; ++i) {
        port = 20000 + (((unsigned)getpid() * 7 + (attempt + i) * 131) % 12000);
        if (!th_tcp_port_used(port, 1)) {
            return port;
        }
    }
    TH_FAIL("no free TCP port in 20000..31999");
    return -1;
}

int th_can_uffd(void)
{
#if defined(__NR_userfaultfd) && defined(UFFD_USER_MODE_ONLY)
    int fd = syscall(__NR_userfaultfd,
                     O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);

    if (fd < 0) {
        return 0;
    }
    close(fd);
    return 1;
#else
    return 0;
#endif
}
