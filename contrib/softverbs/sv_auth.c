/*
 * softverbs authentication: SHA-256 (FIPS 180-4), HMAC-SHA-256 (RFC 2104)
 * and the per-user secret file (see sv_auth.h).
 *
 * Why our own SHA-256: the library links nothing but libc and pthreads
 * (it is preloaded into arbitrary programs), and the handshake needs one
 * hash of a few hundred bytes per connection, so speed does not matter.
 */
#define _GNU_SOURCE
#include "sv_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define SV_SECRET_MIN 16
#define SV_SECRET_MAX 4096
#define SV_SECRET_NEW 32 /* random bytes in a secret we create */

/* ---------------------------------------------------------------------- */
/* SHA-256 */

/* first 32 bits of the fractional parts of the cube roots of the first 64
 * primes */
static const uint32_t sv_sha256_k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
        0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
        0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
        0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
        0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t sv_ror(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static void sv_sha256_block(sv_sha256_t *s, const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
    int i;

    for (i = 0; i < 16; ++i) {
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) |
               ((uint32_t)p[4 * i + 2] << 8) | p[4 * i + 3];
    }
    for (i = 16; i < 64; ++i) {
        uint32_t s0 = sv_ror(w[i - 15], 7) ^ sv_ror(w[i - 15], 18) ^
                      (w[i - 15] >> 3);
        uint32_t s1 = sv_ror(w[i - 2], 17) ^ sv_ror(w[i - 2], 19) ^
                      (w[i - 2] >> 10);

        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = s->h[0];
    b = s->h[1];
    c = s->h[2];
    d = s->h[3];
    e = s->h[4];
    f = s->h[5];
    g = s->h[6];
    h = s->h[7];
    for (i = 0; i < 64; ++i) {
        t1 = h + (sv_ror(e, 6) ^ sv_ror(e, 11) ^ sv_ror(e, 25)) +
             ((e & f) ^ (~e & g)) + sv_sha256_k[i] + w[i];
        t2 = (sv_ror(a, 2) ^ sv_ror(a, 13) ^ sv_ror(a, 22)) +
             ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
    s->h[5] += f;
    s->h[6] += g;
    s->h[7] += h;
}

void sv_sha256_init(sv_sha256_t *s)
{
    /* first 32 bits of the fractional parts of the square roots of the
     * first 8 primes */
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                   0xa54ff53a, 0x510e527f, 0x9b05688c,
                                   0x1f83d9ab, 0x5be0cd19};

    memcpy(s->h, h0, sizeof(h0));
    s->bytes  = 0;
    s->nblock = 0;
}

void sv_sha256_update(sv_sha256_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    size_t n;

    s->bytes += len;
    while (len > 0) {
        n = sizeof(s->block) - s->nblock;
        if (n > len) {
            n = len;
        }
        memcpy(s->block + s->nblock, p, n);
        s->nblock += n;
        p += n;
        len -= n;
        if (s->nblock == sizeof(s->block)) {
            sv_sha256_block(s, s->block);
            s->nblock = 0;
        }
    }
}

void sv_sha256_final(sv_sha256_t *s, uint8_t out[SV_SHA256_LEN])
{
    uint64_t bits = s->bytes * 8;
    uint8_t pad = 0x80, zero = 0, len[8];
    int i;

    /* 0x80, zeros up to 56 mod 64, then the length in bits, big endian */
    sv_sha256_update(s, &pad, 1);
    while (s->nblock != 56) {
        sv_sha256_update(s, &zero, 1);
    }
    for (i = 0; i < 8; ++i) {
        len[i] = (uint8_t)(bits >> (56 - 8 * i));
    }
    sv_sha256_update(s, len, 8);
    for (i = 0; i < 8; ++i) {
        out[4 * i]     = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
    memset(s, 0, sizeof(*s));
}

void sv_hmac_sha256(const uint8_t *key, size_t key_len, const struct iovec *iov,
                    int n, uint8_t out[SV_SHA256_LEN])
{
    uint8_t k[64], pad[64], inner[SV_SHA256_LEN];
    sv_sha256_t s;
    int i;

    /* a key longer than a block is hashed first */
    memset(k, 0, sizeof(k));
    if (key_len > sizeof(k)) {
        sv_sha256_init(&s);
        sv_sha256_update(&s, key, key_len);
        sv_sha256_final(&s, k);
    } else {
        memcpy(k, key, key_len);
    }
    for (i = 0; i < 64; ++i) {
        pad[i] = k[i] ^ 0x36;
    }
    sv_sha256_init(&s);
    sv_sha256_update(&s, pad, sizeof(pad));
    for (i = 0; i < n; ++i) {
        sv_sha256_update(&s, iov[i].iov_base, iov[i].iov_len);
    }
    sv_sha256_final(&s, inner);
    for (i = 0; i < 64; ++i) {
        pad[i] = k[i] ^ 0x5c;
    }
    sv_sha256_init(&s);
    sv_sha256_update(&s, pad, sizeof(pad));
    sv_sha256_update(&s, inner, sizeof(inner));
    sv_sha256_final(&s, out);
    memset(k, 0, sizeof(k));
    memset(pad, 0, sizeof(pad));
}

int sv_auth_equal(const void *a, const void *b, size_t len)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t diff = 0;
    size_t i;

    for (i = 0; i < len; ++i) {
        diff |= x[i] ^ y[i];
    }
    return diff == 0;
}

int sv_auth_random(void *buf, size_t len)
{
    uint8_t *p = buf;
    ssize_t r;

    while (len > 0) {
        r = getrandom(p, len, 0);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* the secret file */

/* the directory of the default secret file, created 0700 if missing */
static int sv_secret_dir(char *dir, size_t len, char *err, size_t err_len)
{
    const char *xdg  = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    struct passwd *pw;
    char base[PATH_MAX];
    struct stat st;

    if (xdg != NULL && xdg[0] == '/') {
        snprintf(base, sizeof(base), "%s", xdg);
    } else {
        if (home == NULL || home[0] != '/') {
            pw   = getpwuid(geteuid());
            home = (pw != NULL) ? pw->pw_dir : NULL;
        }
        if (home == NULL || home[0] != '/') {
            snprintf(err, err_len,
                     "no home directory to keep the "
                     "softverbs secret in; set SOFTVERBS_NET_SECRET_FILE");
            return ENOENT;
        }
        snprintf(base, sizeof(base), "%s/.config", home);
        mkdir(base, 0700);
    }
    if ((size_t)snprintf(dir, len, "%s/softverbs", base) >= len) {
        snprintf(err, err_len, "the secret's directory name is too long");
        return ENAMETOOLONG;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "cannot create %s: %s", dir, strerror(errno));
        return errno;
    }
    /* whoever may write the directory could replace the secret */
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid() || (st.st_mode & 022)) {
        snprintf(err, err_len,
                 "%s must be a directory owned by uid %u and "
                 "writable by nobody else",
                 dir, (unsigned)geteuid());
        return EPERM;
    }
    return 0;
}

/* create a secret at path; another process creating it at the same time
 * is fine: link() makes one of the two files the secret, atomically */
static int sv_secret_create(const char *path, char *err, size_t err_len)
{
    uint8_t raw[SV_SECRET_NEW];
    char tmp[PATH_MAX + 16], hex[2 * SV_SECRET_NEW + 2];
    int fd, i, ret = 0;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp)) {
        snprintf(err, err_len, "the secret file name is too long");
        return ENAMETOOLONG;
    }
    ret = sv_auth_random(raw, sizeof(raw));
    if (ret != 0) {
        snprintf(err, err_len, "getrandom: %s", strerror(ret));
        return ret;
    }
    for (i = 0; i < SV_SECRET_NEW; ++i) {
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    }
    hex[2 * SV_SECRET_NEW]     = '\n';
    hex[2 * SV_SECRET_NEW + 1] = '\0';
    memset(raw, 0, sizeof(raw));
    fd = mkostemp(tmp, O_CLOEXEC); /* mode 0600 */
    if (fd < 0) {
        snprintf(err, err_len, "cannot create %s: %s", tmp, strerror(errno));
        return errno;
    }
    if (fchmod(fd, 0600) != 0 ||
        write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd) != 0) {
        ret = errno ? errno : EIO;
        snprintf(err, err_len, "cannot write %s: %s", tmp, strerror(ret));
    }
    close(fd);
    memset(hex, 0, sizeof(hex));
    if (ret == 0 && link(tmp, path) != 0 && errno != EEXIST) {
        ret = errno;
        snprintf(err, err_len, "cannot create %s: %s", path, strerror(ret));
    }
    unlink(tmp);
    return ret;
}

int sv_auth_load_secret(uint8_t key[SV_AUTH_KEY_LEN], char *path,
                        size_t path_len, char *err, size_t err_len)
{
    static const char label[] = "softverbs network secret v1";
    const char *env           = getenv("SOFTVERBS_NET_SECRET_FILE");
    uint8_t buf[SV_SECRET_MAX + 1];
    char dir[PATH_MAX];
    sv_sha256_t s;
    struct stat st;
    ssize_t n, r;
    int fd, ret, tries;

    err[0] = '\0';
    if (env != NULL && env[0] != '\0') {
        if ((size_t)snprintf(path, path_len, "%s", env) >= path_len) {
            snprintf(err, err_len, "SOFTVERBS_NET_SECRET_FILE is too long");
            return ENAMETOOLONG;
        }
    } else {
        ret = sv_secret_dir(dir, sizeof(dir), err, err_len);
        if (ret != 0) {
            return ret;
        }
        if ((size_t)snprintf(path, path_len, "%s/secret", dir) >= path_len) {
            snprintf(err, err_len, "the secret file name is too long");
            return ENAMETOOLONG;
        }
    }
    for (tries = 0;; ++tries) {
        /* O_NOFOLLOW: never a symlink; O_NONBLOCK: a FIFO planted there
         * must not block us (it is refused below) */
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT || tries > 0) {
            break;
        }
        ret = sv_secret_create(path, err, err_len);
        if (ret != 0) {
            return ret;
        }
    }
    if (fd < 0) {
        ret = errno;
        snprintf(err, err_len, "cannot open %s: %s%s", path, strerror(ret),
                 (ret == ELOOP) ? " (a symbolic link is not accepted)" : "");
        return ret;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077)) {
        snprintf(err, err_len,
                 "%s must be a regular file owned by uid %u "
                 "with no group or other permissions (chmod 600)",
                 path, (unsigned)geteuid());
        close(fd);
        return EPERM;
    }
    for (n = 0; n < (ssize_t)sizeof(buf); n += r) {
        r = read(fd, buf + n, sizeof(buf) - (size_t)n);
        if (r < 0 && errno == EINTR) {
            r = 0;
            continue;
        }
        if (r <= 0) {
            break;
        }
    }
    close(fd);
    if (n < SV_SECRET_MIN || n > SV_SECRET_MAX) {
        snprintf(err, err_len, "%s must hold %d to %d bytes (it has %s%zd)",
                 path, SV_SECRET_MIN, SV_SECRET_MAX,
                 n > SV_SECRET_MAX ? "more than " : "",
                 n > SV_SECRET_MAX ? (ssize_t)SV_SECRET_MAX : n);
        memset(buf, 0, sizeof(buf));
        return EINVAL;
    }
    sv_sha256_init(&s);
    sv_sha256_update(&s, label, sizeof(label));
    sv_sha256_update(&s, buf, (size_t)n);
    sv_sha256_final(&s, key);
    memset(buf, 0, sizeof(buf));
    return 0;
}
