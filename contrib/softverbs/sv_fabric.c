/*
 * softverbs fabric: the per-uid shared segment, process slots and their
 * liveness, shared locks, the ring heap and configuration.
 */
#define _GNU_SOURCE
#include "sv.h"
#include "sv_cm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

sv_global_t sv_g = {
    .slot = -1,
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* read by peers (process_vm_readv) to tell a live slot owner from a dead or
 * reused pid */
static volatile uint64_t sv_liveness_cookie;

uint64_t sv_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void sv_delay_ns(uint64_t ns)
{
    uint64_t end = sv_now_ns() + ns;
    struct timespec ts;

    /* sleep most of a long delay, spin the rest for precision */
    if (ns > 200000) {
        ns -= 100000;
        ts.tv_sec  = ns / 1000000000ull;
        ts.tv_nsec = ns % 1000000000ull;
        nanosleep(&ts, NULL);
    }
    while (sv_now_ns() < end) {
        __builtin_ia32_pause();
    }
}

/* ---------------------------------------------------------------------- */

static uint64_t sv_parse_size(const char *s, uint64_t dflt)
{
    char *end;
    double v;

    if (s == NULL || *s == '\0') {
        return dflt;
    }
    if (!strcasecmp(s, "unlimited") || !strcasecmp(s, "inf")) {
        return UINT64_MAX;
    }
    v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (uint64_t)v;
}

static double sv_env_double(const char *name, double dflt)
{
    const char *s = getenv(name);

    return (s && *s) ? strtod(s, NULL) : dflt;
}

/* CAP_IPC_LOCK in the effective set: the kernel lets such a process lock
 * memory past RLIMIT_MEMLOCK */
static int sv_has_cap_ipc_lock(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

    if (syscall(SYS_capget, &hdr, data) != 0) {
        return 0;
    }
    return !!(data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32)));
}

void sv_config_load(sv_config_t *cfg)
{
    const char *s;
    struct rlimit rl;

    cfg->ndevs = (int)sv_env_double("SOFTVERBS_NDEVS", 1);
    if (cfg->ndevs < 1) {
        cfg->ndevs = 1;
    } else if (cfg->ndevs > SV_MAX_DEVS) {
        cfg->ndevs = SV_MAX_DEVS;
    }

    s = getenv("SOFTVERBS_MOVER");
    cfg->mover = SV_MOVER_AUTO;
    if (s && !strcmp(s, "inline")) {
        cfg->mover = SV_MOVER_INLINE;
    } else if (s && !strcmp(s, "engine")) {
        cfg->mover = SV_MOVER_ENGINE;
    }
    cfg->engine_thresh  = sv_parse_size(getenv("SOFTVERBS_ENGINE_THRESH"),
                                        64 * 1024);
    cfg->engine_spin_us = (unsigned)sv_env_double("SOFTVERBS_ENGINE_SPIN_US",
                                                  50);

    cfg->engine_help    = (int)sv_env_double("SOFTVERBS_ENGINE_HELP", 1);

    /* the kernel's rule for pinning: RLIMIT_MEMLOCK, which a process with
     * CAP_IPC_LOCK may exceed; SOFTVERBS_MEMLOCK_LIMIT, when set, is the
     * emulated HCA's own limit and binds every process */
    s = getenv("SOFTVERBS_MEMLOCK_LIMIT");
    if (s != NULL && *s != '\0') {
        cfg->memlock_limit  = sv_parse_size(s, UINT64_MAX);
        cfg->memlock_source = SV_MEMLOCK_ENV;
    } else if (sv_has_cap_ipc_lock()) {
        cfg->memlock_limit  = UINT64_MAX;
        cfg->memlock_source = SV_MEMLOCK_CAP;
    } else {
        cfg->memlock_limit  = (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 ||
                              rl.rlim_cur == RLIM_INFINITY) ?
                                      UINT64_MAX :
                                      rl.rlim_cur;
        cfg->memlock_source = SV_MEMLOCK_RLIMIT;
    }

    cfg->reg_cost_us = (unsigned)sv_env_double("SOFTVERBS_REG_COST_US", 0);
    cfg->link_gbps   = sv_env_double("SOFTVERBS_LINK_GBPS", 0);
    cfg->link_lat_us = sv_env_double("SOFTVERBS_LINK_LAT_US", 0);
    cfg->create_dev_node = (int)sv_env_double("SOFTVERBS_DEV_NODE", 1);
    cfg->cm_port         = (unsigned)sv_env_double("SOFTVERBS_CM_PORT",
                                                   SV_CM_PORT_DEFAULT);
    if ((cfg->cm_port == 0) || (cfg->cm_port > 65535)) {
        cfg->cm_port = SV_CM_PORT_DEFAULT;
    }
    cfg->cm_timeout_ms = (unsigned)sv_env_double("SOFTVERBS_CM_TIMEOUT_MS",
                                                 4000);
    if ((cfg->cm_timeout_ms == 0) || (cfg->cm_timeout_ms > 3600000)) {
        cfg->cm_timeout_ms = 4000;
    }
    cfg->cm_send_delay_us = (unsigned)
            sv_env_double("SOFTVERBS_CM_SEND_DELAY_US", 0);
    if (cfg->cm_send_delay_us > 1000000) {
        cfg->cm_send_delay_us = 0;
    }
    s = getenv("SOFTVERBS_LOOPBACK");
    cfg->loopback_kernel = !(s && !strcmp(s, "memcpy"));

    s = getenv("SOFTVERBS_SHM_NAME");
    if (s && *s) {
        snprintf(cfg->shm_name, sizeof(cfg->shm_name), "%s", s);
    } else {
        /* builds with another layout must never share a segment: the
         * name carries the version and the size of the layout. A network
         * namespace is a host of its own (that is how the tests build
         * several hosts on one machine), so it gets its own fabric; the
         * initial namespace keeps the plain name. */
        struct stat ns, init_ns;
        char netns[32] = "";

        if (stat("/proc/self/ns/net", &ns) == 0 &&
            (stat("/proc/1/ns/net", &init_ns) != 0 ||
             ns.st_ino != init_ns.st_ino)) {
            snprintf(netns, sizeof(netns), "-n%lu", (unsigned long)ns.st_ino);
        }
        snprintf(cfg->shm_name, sizeof(cfg->shm_name),
                 "softverbs-%u-v%u-%zx%s", (unsigned)getuid(),
                 SV_SHM_VERSION, sizeof(sv_shm_t), netns);
    }
    sv_net_config(cfg);
}

/*
 * The firmware version a real HCA reports names what its operations cost;
 * softverbs' costs are its settings, so it reports those (a program that
 * caches measurements of a device, such as UCX's hcr calibration, keys them
 * on the device's attributes and needs to know no emulator). Version 1.1:
 * loopback transfers go through the kernel. A setting too long for the
 * field is reported as a hash of them all.
 */
void sv_config_fw_ver(const sv_config_t *cfg, char *buf, size_t max)
{
    static const char *movers[] = {[SV_MOVER_AUTO]   = "auto",
                                   [SV_MOVER_INLINE] = "inline",
                                   [SV_MOVER_ENGINE] = "engine"};
    uint64_t hash               = 14695981039346656037ULL; /* FNV-1a */
    char full[256];
    const char *p;
    int n;

    n = snprintf(full, sizeof(full), "softverbs-1.1 reg%u link%g/%g %s/%zu %s",
                 cfg->reg_cost_us, cfg->link_gbps, cfg->link_lat_us,
                 movers[cfg->mover], cfg->engine_thresh,
                 cfg->loopback_kernel ? "kcopy" : "memcpy");
    if ((n >= 0) && ((size_t)n < max)) {
        memcpy(buf, full, n + 1);
        return;
    }

    for (p = full; *p != '\0'; ++p) {
        hash = (hash ^ (unsigned char)*p) * 1099511628211ULL;
    }
    snprintf(buf, max, "softverbs-1.1 #%016llx", (unsigned long long)hash);
}

/* ---------------------------------------------------------------------- */

void sv_shm_lock(void)
{
    if (pthread_mutex_lock(&sv_g.shm->lock) == EOWNERDEAD) {
        pthread_mutex_consistent(&sv_g.shm->lock);
    }
}

void sv_shm_unlock(void)
{
    pthread_mutex_unlock(&sv_g.shm->lock);
}

int sv_pid_alive(pid_t pid)
{
    char path[64], buf[256], *p;
    ssize_t n;
    int fd;

    if (pid <= 0) {
        return 0;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) {
        return 0;
    }
    /* a zombie still answers kill(); it no longer has an address space */
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY);
    if (fd < 0) {
        return errno != ENOENT;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

void sv_lock(sv_lock_t *lock)
{
    uint32_t me = (uint32_t)sv_g.pid, expected;
    unsigned spins = 0;

    for (;;) {
        expected = 0;
        if (__atomic_compare_exchange_n(&lock->owner, &expected, me, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            return;
        }
        __builtin_ia32_pause();
        if ((++spins & 0xff) == 0) {
            sched_yield();   /* 2 cores: let the holder run */
        }
        if ((spins & 0xffff) == 0 && expected != me &&
            !sv_pid_alive((pid_t)expected)) {
            __atomic_compare_exchange_n(&lock->owner, &expected, me, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
            if (SV_LOAD(&lock->owner) == me) {
                return;
            }
        }
    }
}

void sv_unlock(sv_lock_t *lock)
{
    __atomic_store_n(&lock->owner, 0, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------------- */

/* heap blocks: a 64-byte header, sizes rounded to powers of two >= 4 KiB */
typedef struct {
    uint32_t cls;
    uint32_t owner;
    uint64_t next;
    uint8_t  pad[48];
} sv_heap_hdr_t;

static uint64_t sv_heap_start(void)
{
    return (sizeof(sv_shm_t) + 0xfffff) & ~0xfffffULL;
}

uint64_t sv_heap_alloc(size_t size, int owner)
{
    size_t total = size + sizeof(sv_heap_hdr_t);
    unsigned cls = 12;
    sv_heap_hdr_t *h;
    uint64_t off;

    while (((size_t)1 << cls) < total) {
        ++cls;
    }
    if (cls >= SV_NCLASS) {
        return 0;
    }
    off = sv_g.shm->free_list[cls];
    if (off != 0) {
        h = sv_ptr(off);
        sv_g.shm->free_list[cls] = h->next;
        /* give the pages back; they read as zero on next touch */
        madvise(h, (size_t)1 << cls, MADV_REMOVE);
    } else {
        off = sv_g.shm->heap_brk;
        if (off + ((uint64_t)1 << cls) > sv_heap_start() + SV_HEAP_SIZE) {
            return 0;
        }
        sv_g.shm->heap_brk = off + ((uint64_t)1 << cls);
        h = sv_ptr(off);
    }
    h->cls   = cls;
    h->owner = (uint32_t)owner;
    h->next  = 0;
    return off + sizeof(sv_heap_hdr_t);
}

void sv_heap_free(uint64_t off)
{
    sv_heap_hdr_t *h;

    if (off == 0) {
        return;
    }
    h = sv_ptr(off - sizeof(sv_heap_hdr_t));
    h->next = sv_g.shm->free_list[h->cls];
    sv_g.shm->free_list[h->cls] = off - sizeof(sv_heap_hdr_t);
}

int sv_ring_init(sv_ring_t *ring, uint32_t min_entries, uint32_t stride,
                 int owner)
{
    uint32_t size = 1;

    while (size < min_entries) {
        size <<= 1;
    }
    sv_shm_lock();
    ring->off = sv_heap_alloc((size_t)size * stride, owner);
    sv_shm_unlock();
    if (ring->off == 0) {
        return ENOMEM;
    }
    /* the heap hands out zero-filled memory: no entry has a sequence */
    ring->size            = size;
    ring->stride          = stride;
    ring->prod_lock.owner = 0;
    ring->prod            = 0;
    ring->cons_seen       = 0;
    ring->retired         = 0;
    ring->cons_lock.owner = 0;
    ring->cons            = 0;
    return 0;
}

void sv_ring_fini(sv_ring_t *ring)
{
    sv_shm_lock();
    sv_heap_free(ring->off);
    sv_shm_unlock();
    ring->off = 0;
}

uint64_t sv_new_id(void)
{
    return __atomic_add_fetch(&sv_g.shm->next_id, 1, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------------- */

pid_t sv_proc_pid(int slot)
{
    return (pid_t)SV_LOAD(&sv_g.shm->procs[slot].pid);
}

int sv_proc_alive(int slot)
{
    sv_proc_t *p = &sv_g.shm->procs[slot];
    uint64_t cookie = 0;
    struct iovec l = { &cookie, sizeof(cookie) };
    struct iovec r = { (void *)(uintptr_t)p->cookie_addr, sizeof(cookie) };
    pid_t pid = sv_proc_pid(slot);

    if (pid == 0) {
        return 0;
    }
    if (pid == sv_g.pid) {
        return 1;
    }
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) != sizeof(cookie)) {
        return errno == EPERM; /* cannot tell: assume alive */
    }
    return cookie == p->cookie;
}

/* free what a dead process left in the tables; caller holds the shm lock */
static void sv_reclaim_slot(int slot)
{
    sv_shm_t *shm = sv_g.shm;
    unsigned i;

    for (i = 0; i < SV_MAX_MR; ++i) {
        if (shm->mrs[i].key != 0 && shm->mrs[i].owner == slot) {
            shm->mrs[i].key = 0;
        }
    }
    for (i = 0; i < SV_MAX_QP; ++i) {
        if (shm->qps[i].in_use && shm->qps[i].owner == slot) {
            shm->qps[i].state  = IBV_QPS_ERR;
            shm->qps[i].in_use = 0;
            sv_heap_free(shm->qps[i].rq.ring.off);
        }
    }
    for (i = 0; i < SV_MAX_CQ; ++i) {
        if (shm->cqs[i].in_use && shm->cqs[i].owner == slot) {
            shm->cqs[i].in_use = 0;
            sv_heap_free(shm->cqs[i].ring.off);
        }
    }
    for (i = 0; i < SV_MAX_SRQ; ++i) {
        if (shm->srqs[i].in_use && shm->srqs[i].owner == slot) {
            shm->srqs[i].in_use = 0;
            sv_heap_free(shm->srqs[i].rq.ring.off);
        }
    }
    sv_cm_ports_reclaim(slot);
    sv_cm_boxes_reclaim(slot);
    shm->procs[slot].pid = 0;
}

static int sv_register_proc(void);

/* the segment this process mapped, to know it again at exit */
static dev_t sv_shm_dev;
static ino_t sv_shm_ino;

/*
 * Open the fabric segment, locked (flock) for this process: created with
 * O_EXCL | O_NOFOLLOW, or opened with O_NOFOLLOW, and used only when it is
 * a regular file of this user with mode 0600. The name is predictable, and
 * /dev/shm is writable by everyone: a symlink planted there must not make
 * us write through it, and a file another user made (and can read and
 * write) must not hold our fabric. Under the lock, the name must still be
 * this file: the last process of a fabric unlinks it (sv_shm_atexit), and
 * whoever opened it just before must then start a new one.
 */
static int sv_shm_open(const char *path, int *fd_p)
{
    struct stat st, now;
    int fd, tries, err;

    for (tries = 0; tries < 100; ++tries) {
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
        if (fd >= 0) {
            fchmod(fd, 0600); /* the umask may have taken bits away */
        } else if (errno == EEXIST) {
            fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT) {
                continue; /* unlinked meanwhile */
            }
        }
        if (fd < 0) {
            err = errno;
            fprintf(stderr,
                    "softverbs: cannot open the fabric segment %s: "
                    "%s%s\n",
                    path, strerror(err),
                    (err == ELOOP) ? " (a symbolic link is never followed; "
                                     "remove it, or "
                                     "set SOFTVERBS_SHM_NAME)" :
                                     "");
            return err;
        }
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid() || (st.st_mode & 07777) != 0600) {
            fprintf(stderr,
                    "softverbs: the fabric segment %s is not a "
                    "regular file of uid %u with mode 0600 (another user "
                    "may have made it); not using it. Remove it, or set "
                    "SOFTVERBS_SHM_NAME\n",
                    path, (unsigned)geteuid());
            close(fd);
            return EPERM;
        }
        flock(fd, LOCK_EX);
        if (lstat(path, &now) == 0 && now.st_ino == st.st_ino &&
            now.st_dev == st.st_dev) {
            sv_shm_dev = st.st_dev;
            sv_shm_ino = st.st_ino;
            *fd_p      = fd;
            return 0;
        }
        close(fd); /* unlinked or replaced: again */
    }
    return EAGAIN;
}

/* At exit, the last process of a fabric removes its segment (a crashed
 * one leaves it; the next process re-initialises it). */
static void sv_shm_atexit(void)
{
    char path[160];
    struct stat st;
    int fd, i;

    if (sv_g.shm == NULL || sv_g.slot < 0 || sv_g.pid != getpid()) {
        return;
    }
    snprintf(path, sizeof(path), "/dev/shm/%s", sv_g.cfg.shm_name);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    if (fstat(fd, &st) == 0 && st.st_ino == sv_shm_ino &&
        st.st_dev == sv_shm_dev) {
        /* under the lock: no process registers meanwhile */
        flock(fd, LOCK_EX);
        for (i = 0; i < SV_MAX_PROCS; ++i) {
            if (i != sv_g.slot && sv_g.shm->procs[i].pid != 0 &&
                sv_proc_alive(i)) {
                break;
            }
        }
        if (i == SV_MAX_PROCS) {
            unlink(path);
        }
        flock(fd, LOCK_UN);
    }
    close(fd);
}

/* map the segment and register this process, under the file lock so that a
 * process starting at the same time cannot take the fabric for unused */
static int sv_shm_map(void)
{
    static int atexit_done;
    char path[160];
    pthread_mutexattr_t ma;
    struct stat st;
    size_t size = sv_heap_start() + SV_HEAP_SIZE;
    sv_shm_t *shm;
    int fd = -1, i, live = 0;

    snprintf(path, sizeof(path), "/dev/shm/%s", sv_g.cfg.shm_name);
    i = sv_shm_open(path, &fd);
    if (i != 0) {
        return i;
    }
    if (!atexit_done) {
        atexit(sv_shm_atexit);
        atexit_done = 1;
    }
    if (fstat(fd, &st) != 0 ||
        ((size_t)st.st_size != size && ftruncate(fd, size) != 0)) {
        i = errno;
        close(fd);
        return i;
    }
    /* a forked child maps it where the parent's was (MAP_FIXED replaces
     * that mapping): objects it inherited keep pointing into a mapping */
    shm = mmap(sv_g.shm, size, PROT_READ | PROT_WRITE,
               MAP_SHARED | (sv_g.shm != NULL ? MAP_FIXED : 0), fd, 0);
    if (shm == MAP_FAILED) {
        i = errno;
        close(fd);
        return i;
    }
    sv_g.shm = shm;

    if (shm->magic == SV_SHM_MAGIC && shm->version == SV_SHM_VERSION) {
        for (i = 0; i < SV_MAX_PROCS; ++i) {
            if (shm->procs[i].pid && sv_proc_alive(i)) {
                ++live;
            }
        }
    }
    if (live == 0) {
        /* nobody uses the fabric: start it afresh (also after a crash or a
         * layout change) */
        ftruncate(fd, 0);
        ftruncate(fd, size);
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&shm->lock, &ma);
        pthread_mutexattr_destroy(&ma);
        shm->heap_brk = sv_heap_start();
        shm->next_mr  = 1;
        shm->version  = SV_SHM_VERSION;
        __atomic_store_n(&shm->magic, SV_SHM_MAGIC, __ATOMIC_RELEASE);
    }
    i = sv_register_proc();
    flock(fd, LOCK_UN);
    close(fd);
    return i;
}

static int sv_register_proc(void)
{
    sv_shm_t *shm = sv_g.shm;
    int i, slot = -1;

    sv_g.pid    = getpid();
    sv_g.cookie = ((uint64_t)sv_g.pid << 32) ^ sv_now_ns() ^
                  ((uint64_t)(uintptr_t)&slot << 7);
    sv_liveness_cookie = sv_g.cookie;

    sv_shm_lock();
    for (i = 0; i < SV_MAX_PROCS; ++i) {
        if (shm->procs[i].pid != 0 && !sv_proc_alive(i)) {
            sv_reclaim_slot(i);
        }
        if (shm->procs[i].pid == 0 && slot < 0) {
            slot = i;
        }
    }
    if (slot >= 0) {
        shm->procs[slot].cookie      = sv_g.cookie;
        shm->procs[slot].cookie_addr = (uintptr_t)&sv_liveness_cookie;
        shm->procs[slot].gen++;
        SV_STORE(&shm->procs[slot].pid, (uint32_t)sv_g.pid);
    }
    sv_shm_unlock();
    if (slot < 0) {
        return EAGAIN;
    }
    sv_g.slot = slot;
    return 0;
}

static void sv_atfork_child(void)
{
    /* the child is a new process on the fabric; verbs objects of the parent
     * are not usable in it (as with real verbs without fork support) */
    pthread_mutex_init(&sv_g.lock, NULL);
    sv_g.slot   = -1;
    sv_g.pid    = getpid();
    sv_g.pinned = 0;
    sv_engine_atfork_child();
    sv_net_atfork_child();
    sv_cm_atfork_child();
}

int sv_init(void)
{
    static int atfork_done;
    int ret = 0;

    if (SV_LOAD(&sv_g.slot) >= 0) {
        return 0;
    }
    pthread_mutex_lock(&sv_g.lock);
    if (sv_g.slot >= 0) {
        goto out;
    }
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, sv_atfork_child);
        atfork_done = 1;
    }
    sv_g.pid = getpid();
    if (sv_g.shm == NULL) {
        sv_config_load(&sv_g.cfg);
        ret = sv_shm_map();
    } else {
        /* a forked child: it may have set its own SOFTVERBS_* variables,
         * or moved to another network namespace, which is another host
         * with a fabric of its own. It maps the segment again in any case:
         * the parent's may have been unlinked by its last process. */
        sv_config_load(&sv_g.cfg);
        ret = sv_shm_map();
    }
    if (ret == 0 && sv_net_enabled()) {
        /* other hosts reach this process's QPs through its port */
        ret = sv_net_start();
    }
out:
    pthread_mutex_unlock(&sv_g.lock);
    return ret;
}

/* ---------------------------------------------------------------------- */

/* A local duplicate of another process's eventfd, to signal its completion
 * channel (pidfd_getfd needs the same ptrace access as process_vm_*). */
#define SV_FD_CACHE 64

static struct {
    pid_t    pid;
    int      rfd;
    uint64_t id;
    int      lfd;
} sv_fd_cache[SV_FD_CACHE];
static pthread_mutex_t sv_fd_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned sv_fd_cache_next;

int sv_remote_fd(int slot, int fd, uint64_t id)
{
    pid_t pid = sv_proc_pid(slot);
    int i, pidfd, lfd = -1;

    if (pid == sv_g.pid) {
        return fd;
    }
    pthread_mutex_lock(&sv_fd_cache_lock);
    for (i = 0; i < SV_FD_CACHE; ++i) {
        if (sv_fd_cache[i].pid == pid && sv_fd_cache[i].rfd == fd &&
            sv_fd_cache[i].id == id && sv_fd_cache[i].lfd > 0) {
            lfd = sv_fd_cache[i].lfd;
            goto out;
        }
    }
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        goto out;
    }
    /* the pidfd pins the process: check it is still the slot's owner and
     * not an unrelated process that got a reused pid */
    if (!sv_proc_alive(slot)) {
        close(pidfd);
        goto out;
    }
    lfd = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    close(pidfd);
    if (lfd < 0) {
        goto out;
    }
    fcntl(lfd, F_SETFD, FD_CLOEXEC);
    i = sv_fd_cache_next++ % SV_FD_CACHE;
    if (sv_fd_cache[i].lfd > 0) {
        close(sv_fd_cache[i].lfd);
    }
    sv_fd_cache[i].pid = pid;
    sv_fd_cache[i].rfd = fd;
    sv_fd_cache[i].id  = id;
    sv_fd_cache[i].lfd = lfd;
out:
    pthread_mutex_unlock(&sv_fd_cache_lock);
    return lfd;
}
