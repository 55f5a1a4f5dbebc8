/*
 * softverbs memory registration: the key table, pinning with mlock and its
 * accounting against the memlock limit, and the registration cost model.
 *
 * softverbs counts pinned bytes per process and fails ibv_reg_mr with ENOMEM
 * past the limit, as the kernel does for a real HCA: RLIMIT_MEMLOCK, which a
 * process with CAP_IPC_LOCK may exceed, or SOFTVERBS_MEMLOCK_LIMIT when set
 * (sv_config_load()). The first refusal says on stderr which limit it was
 * and how to raise it; later ones only fail (a caller that retries must not
 * flood its log).
 */
#define _GNU_SOURCE
#include "sv.h"
#include "sv_auth.h"
#include "sv_net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static sv_mr_priv_t *sv_mr_list;   /* this process's MRs, under sv_g.lock */

static uintptr_t sv_page_size(void)
{
    static uintptr_t ps;

    if (ps == 0) {
        ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    }
    return ps;
}

/*
 * Keys. Memory must be reachable only through a key that cannot be guessed
 * (an HCA puts a key byte beside the table index; softverbs promises more):
 * every lkey/rkey is 32 random bits from getrandom(), never 0 or ~0, unique
 * among the live keys of the fabric. The key also says where its MR is: at
 * table index (key mod SV_MAX_MR), or one of the next SV_MR_PROBE - 1
 * indices when that one was taken (open addressing in a short window, so a
 * lookup reads at most SV_MR_PROBE entries, usually one). A lookup compares
 * the whole key.
 */
#define SV_MR_PROBE     8
#define SV_MR_KEY_TRIES 64

static inline uint32_t sv_mr_slot(uint32_t key, unsigned probe)
{
    return (key + probe) & (SV_MAX_MR - 1);
}

const sv_mr_t *sv_mr_lookup(uint32_t key, int owner, uint32_t pd,
                            uint64_t addr, uint64_t len, uint32_t access)
{
    const sv_mr_t *mr = NULL;
    unsigned i;
    uint32_t idx;

    if (key == 0) {
        return NULL;
    }
    for (i = 0; i < SV_MR_PROBE; ++i) {
        idx = sv_mr_slot(key, i);
        if (idx != 0 &&
            __atomic_load_n(&sv_g.shm->mrs[idx].key, __ATOMIC_SEQ_CST) == key) {
            mr = &sv_g.shm->mrs[idx];
            break;
        }
    }
    if (mr == NULL || mr->owner != owner || mr->pd != pd ||
        (mr->access & access) != access) {
        return NULL;
    }
    if (addr < mr->iova || len > mr->length ||
        addr - mr->iova > mr->length - len) {
        return NULL;
    }
    return mr;
}

/* a new key and the free table index it names; caller holds the shm lock.
 * 0 when the table is (nearly) full. */
static uint32_t sv_mr_new_key(uint32_t *idx_p)
{
    sv_shm_t *shm = sv_g.shm;
    uint32_t key, idx, free_idx;
    unsigned t, i;

    for (t = 0; t < SV_MR_KEY_TRIES; ++t) {
        if (sv_auth_random(&key, sizeof(key)) != 0) {
            return 0;
        }
        if (key == 0 || key == UINT32_MAX) {
            continue; /* 0: a free entry; ~0: "no key" to many users */
        }
        free_idx = 0;
        for (i = 0; i < SV_MR_PROBE; ++i) {
            idx = sv_mr_slot(key, i);
            if (idx == 0) {
                continue; /* index 0 means "no MR" (sv_mr_priv_t) */
            }
            if (shm->mrs[idx].key == key) {
                free_idx = 0; /* in use: a key is unique */
                break;
            }
            if (shm->mrs[idx].key == 0 && free_idx == 0) {
                free_idx = idx;
            }
        }
        if (free_idx != 0) {
            *idx_p = free_idx;
            return key;
        }
    }
    return 0;
}

/* munlock [start,end) except where another registration of ours still
 * needs the pages (mlock does not nest); caller holds sv_g.lock */
static void sv_unpin(uintptr_t start, uintptr_t end)
{
    uintptr_t ps = sv_page_size(), p;
    sv_mr_priv_t *m;

    for (p = start; p < end; p += ps) {
        for (m = sv_mr_list; m != NULL; m = m->next) {
            if (p >= m->pin_start && p < m->pin_end) {
                break;
            }
        }
        if (m == NULL) {
            uintptr_t q = p + ps;

            /* extend over the following unshared pages: one syscall */
            while (q < end) {
                for (m = sv_mr_list; m != NULL; m = m->next) {
                    if (q >= m->pin_start && q < m->pin_end) {
                        break;
                    }
                }
                if (m != NULL) {
                    break;
                }
                q += ps;
            }
            munlock((void *)p, q - p);
            p = q - ps;
        }
    }
}

/* say once which limit refused a registration of @a len bytes */
static void sv_memlock_refused(uint64_t len, int kernel)
{
    uint64_t limit = sv_g.cfg.memlock_limit;
    static int said;
    struct rlimit rl;

    if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
        return;
    }
    if (!kernel && sv_g.cfg.memlock_source == SV_MEMLOCK_ENV) {
        fprintf(stderr,
                "softverbs: ibv_reg_mr of %llu bytes refused: %llu "
                "bytes already pinned, SOFTVERBS_MEMLOCK_LIMIT is %llu bytes "
                "(raise it, e.g. SOFTVERBS_MEMLOCK_LIMIT=unlimited)\n",
                (unsigned long long)len, (unsigned long long)sv_g.pinned,
                (unsigned long long)sv_g.cfg.memlock_limit);
    } else {
        /* the kernel's mlock() enforces the rlimit of now */
        if (kernel && (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)) {
            limit = (rl.rlim_cur == RLIM_INFINITY) ? UINT64_MAX : rl.rlim_cur;
        }
        fprintf(stderr,
                "softverbs: ibv_reg_mr of %llu bytes refused%s: %llu "
                "bytes already pinned, RLIMIT_MEMLOCK (ulimit -l) is %llu "
                "bytes (raise it with ulimit -l or limits.conf, or run "
                "with CAP_IPC_LOCK)\n",
                (unsigned long long)len, kernel ? " by the kernel's mlock" : "",
                (unsigned long long)sv_g.pinned, (unsigned long long)limit);
    }
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                          size_t length, uint64_t iova,
                                          unsigned int access)
{
    uintptr_t ps = sv_page_size();
    uintptr_t start = (uintptr_t)addr & ~(ps - 1);
    uintptr_t end = ((uintptr_t)addr + length + ps - 1) & ~(ps - 1);
    sv_pd_t *spd = (sv_pd_t *)pd;
    sv_mr_priv_t *m;
    sv_shm_t *shm = sv_g.shm;
    uint32_t idx  = 0, key;
    sv_mr_t *e;

    if (((access & IBV_ACCESS_REMOTE_WRITE) ||
         (access & IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }

    pthread_mutex_lock(&sv_g.lock);
    if (length > 0) {
        if (sv_g.pinned + (end - start) > sv_g.cfg.memlock_limit) {
            sv_memlock_refused(end - start, 0);
            pthread_mutex_unlock(&sv_g.lock);
            free(m);
            errno = ENOMEM;
            return NULL;
        }
        /* the cost of pinning: faulting in and locking every page */
        if (mlock((void *)start, end - start) != 0) {
            int err = errno;

            if ((err == EAGAIN) || (err == ENOMEM) || (err == EPERM)) {
                sv_memlock_refused(end - start, 1);
            }
            pthread_mutex_unlock(&sv_g.lock);
            free(m);
            errno = (err == EAGAIN) ? ENOMEM : err;
            return NULL;
        }
        sv_g.pinned += end - start;
    }
    m->pin_start = start;
    m->pin_end   = (length > 0) ? end : start;
    m->next      = sv_mr_list;
    sv_mr_list   = m;
    pthread_mutex_unlock(&sv_g.lock);

    sv_shm_lock();
    key = sv_mr_new_key(&idx);
    if (key != 0) {
        e         = &shm->mrs[idx];
        e->owner  = (uint16_t)sv_g.slot;
        e->dev    = (uint16_t)ibv_get_device_index(pd->context->device);
        e->pd     = spd->id;
        e->access = access;
        e->addr   = (uintptr_t)addr;
        e->iova   = iova;
        e->length = length;
        /* published last: a lookup that finds the key sees the fields */
        __atomic_store_n(&e->key, key, __ATOMIC_SEQ_CST);
    } else {
        idx = 0;
    }
    sv_shm_unlock();
    if (idx == 0) {
        ibv_dereg_mr(&m->ibmr);
        errno = ENOMEM;
        return NULL;
    }

    if (sv_g.cfg.reg_cost_us) {
        sv_delay_ns((uint64_t)sv_g.cfg.reg_cost_us * 1000);
    }

    m->idx          = idx;
    m->ibmr.context = pd->context;
    m->ibmr.pd      = pd;
    m->ibmr.addr    = addr;
    m->ibmr.length  = length;
    m->ibmr.handle  = idx;
    m->ibmr.lkey    = key;
    m->ibmr.rkey    = key;
    return &m->ibmr;
}

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
SV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
                                    size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr,
                            (unsigned)access);
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
                                         size_t length, uint64_t iova,
                                         int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

SV_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    sv_mr_priv_t *m = (sv_mr_priv_t *)mr, **pp;

    if (m->idx != 0) {
        sv_shm_lock();
        __atomic_store_n(&sv_g.shm->mrs[m->idx].key, 0, __ATOMIC_SEQ_CST);
        sv_shm_unlock();
        if (sv_net_enabled()) {
            /* a remote request still placing data into it finishes (or
             * loses its connection) before the memory may go */
            sv_net_resp_fence(0, m->idx);
        }
    }
    pthread_mutex_lock(&sv_g.lock);
    for (pp = &sv_mr_list; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    if (m->pin_end > m->pin_start) {
        sv_g.pinned -= m->pin_end - m->pin_start;
        sv_unpin(m->pin_start, m->pin_end);
    }
    pthread_mutex_unlock(&sv_g.lock);
    free(m);
    return 0;
}
