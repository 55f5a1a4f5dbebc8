/*
 * softverbs authentication of connections between hosts: SHA-256, HMAC over
 * it, and the per-user secret file.
 *
 * Self-contained (libc and the kernel's getrandom only), so that the tests
 * can compile it into a raw wire client of their own.
 */
#ifndef SV_AUTH_H_
#define SV_AUTH_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SV_SHA256_LEN   32
#define SV_AUTH_KEY_LEN SV_SHA256_LEN

typedef struct {
    uint32_t h[8];
    uint64_t bytes; /* message length so far */
    uint8_t block[64];
    size_t nblock; /* bytes in block */
} sv_sha256_t;

void sv_sha256_init(sv_sha256_t *s);
void sv_sha256_update(sv_sha256_t *s, const void *data, size_t len);
void sv_sha256_final(sv_sha256_t *s, uint8_t out[SV_SHA256_LEN]);

/* HMAC-SHA-256 (RFC 2104) of the concatenation of iov[0..n) */
void sv_hmac_sha256(const uint8_t *key, size_t key_len, const struct iovec *iov,
                    int n, uint8_t out[SV_SHA256_LEN]);

/* equality in time that does not depend on where the buffers differ */
int sv_auth_equal(const void *a, const void *b, size_t len);

/* len random bytes from the kernel (getrandom); 0 or an errno */
int sv_auth_random(void *buf, size_t len);

/*
 * The secret of this user: SOFTVERBS_NET_SECRET_FILE if set, else
 * $XDG_CONFIG_HOME/softverbs/secret, else ~/.config/softverbs/secret. A
 * missing file is created (32 random bytes, hex, mode 0600; the directory
 * mode 0700). The file is used only if it is a regular file owned by this
 * user with no group or other permission bits, and holds 16 to 4096 bytes;
 * the key is the SHA-256 of its contents. Returns 0, or an errno with a
 * sentence for the user in err. path gets the file's name.
 */
int sv_auth_load_secret(uint8_t key[SV_AUTH_KEY_LEN], char *path,
                        size_t path_len, char *err, size_t err_len);

#endif
