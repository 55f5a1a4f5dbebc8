/*
 * th multi-process support: N forked ranks joined by an out-of-band channel.
 *
 * The channel is a full mesh of UNIX stream socket pairs created before the
 * fork, one per pair of ranks; each rank keeps its own ends. Transfers are
 * blocking and exact-length, which is all address exchange needs. A rank that
 * dies closes its sockets, so its peers see EOF and fail instead of hanging.
 */
#define _GNU_SOURCE
#include "th.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TH_MAX_PROCS 64

struct th_oob {
    int rank;
    int nprocs;
    int fds[TH_MAX_PROCS]; /* fds[peer]: socket to peer, -1 for self */
};

struct th_procs {
    int   nprocs;
    pid_t pids[TH_MAX_PROCS];
    int   killed[TH_MAX_PROCS];
};

/*
 * TH_HOSTS="ns=addr,ns=addr,...": run rank r on host r mod n, a network
 * namespace (made by softverbs-netns.sh, which prints this list with
 * `hosts`), with SOFTVERBS_NET set to the host's address. Any
 * multi-process test then runs across hosts unchanged.
 */
static void th_enter_host(int rank)
{
    char list[512], path[256], *item, *save = NULL, *addr;
    const char *env = getenv("TH_HOSTS");
    int n = 0, fd;

    if (env == NULL || *env == '\0') {
        return;
    }
    snprintf(list, sizeof(list), "%s", env);
    for (item = strtok_r(list, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        ++n;
    }
    snprintf(list, sizeof(list), "%s", env);
    save = NULL;
    item = strtok_r(list, ",", &save);
    for (fd = 0; fd < rank % n; ++fd) {
        item = strtok_r(NULL, ",", &save);
    }
    addr = strchr(item, '=');
    if (addr == NULL) {
        TH_FAIL("TH_HOSTS: '%s' is not ns=address", item);
    }
    *addr++ = '\0';
    snprintf(path, sizeof(path), "/var/run/netns/%s", item);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if ((fd < 0) || (setns(fd, CLONE_NEWNET) != 0)) {
        TH_FAIL("rank %d: cannot enter network namespace %s: %m", rank,
                item);
    }
    close(fd);
    /* as `ip netns exec` does: a /sys of the namespace, so that what lists
     * network interfaces there (UCX's tcp transport) sees this host's */
    if ((unshare(CLONE_NEWNS) != 0) ||
        (mount("", "/", NULL, MS_SLAVE | MS_REC, NULL) != 0) ||
        (umount2("/sys", MNT_DETACH) != 0) ||
        (mount(item, "/sys", "sysfs", 0, NULL) != 0)) {
        TH_FAIL("rank %d: cannot mount the /sys of %s: %m", rank, item);
    }
    setenv("SOFTVERBS_NET", addr, 1);
}

static void th_oob_check_peer(th_oob_t *oob, int peer)
{
    if ((peer < 0) || (peer >= oob->nprocs) || (peer == oob->rank)) {
        TH_FAIL("rank %d: invalid oob peer %d (nprocs %d)", oob->rank, peer,
                oob->nprocs);
    }
}

void th_oob_send(th_oob_t *oob, int peer, const void *buf, size_t length)
{
    const char *p = buf;
    ssize_t n;

    th_oob_check_peer(oob, peer);
    while (length > 0) {
        n = send(oob->fds[peer], p, length, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            TH_FAIL("rank %d: oob send to rank %d failed: %m", oob->rank,
                    peer);
        }
        p      += n;
        length -= n;
    }
}

void th_oob_recv(th_oob_t *oob, int peer, void *buf, size_t length)
{
    char *p = buf;
    ssize_t n;

    th_oob_check_peer(oob, peer);
    while (length > 0) {
        n = recv(oob->fds[peer], p, length, 0);
        if (n == 0) {
            TH_FAIL("rank %d: oob peer rank %d closed the channel", oob->rank,
                    peer);
        } else if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            TH_FAIL("rank %d: oob recv from rank %d failed: %m", oob->rank,
                    peer);
        }
        p      += n;
        length -= n;
    }
}

void th_oob_exchange(th_oob_t *oob, int peer, const void *buf, size_t length,
                     void **peer_buf, size_t *peer_length)
{
    uint64_t len = length, plen;

    /* socket buffers hold an address easily, so send-then-receive on both
     * sides cannot deadlock for the sizes this is used for */
    th_oob_send(oob, peer, &len, sizeof(len));
    th_oob_send(oob, peer, buf, length);
    th_oob_recv(oob, peer, &plen, sizeof(plen));
    *peer_buf = malloc(plen ? plen : 1);
    TH_ASSERT(*peer_buf != NULL);
    th_oob_recv(oob, peer, *peer_buf, plen);
    if (peer_length != NULL) {
        *peer_length = plen;
    }
}

void th_oob_barrier(th_oob_t *oob)
{
    char token = 'b';
    int peer;

    for (peer = 0; peer < oob->nprocs; ++peer) {
        if (peer != oob->rank) {
            th_oob_send(oob, peer, &token, 1);
        }
    }
    for (peer = 0; peer < oob->nprocs; ++peer) {
        if (peer != oob->rank) {
            th_oob_recv(oob, peer, &token, 1);
        }
    }
}

int th_oob_fd(th_oob_t *oob, int peer)
{
    th_oob_check_peer(oob, peer);
    return oob->fds[peer];
}

int th_oob_rank(th_oob_t *oob)
{
    return oob->rank;
}

int th_oob_nprocs(th_oob_t *oob)
{
    return oob->nprocs;
}

th_procs_t *th_procs_start(int nprocs, th_proc_fn_t fn, void *arg)
{
    static int mesh[TH_MAX_PROCS][TH_MAX_PROCS];
    th_procs_t *procs;
    th_oob_t oob;
    int i, j, sv[2];

    if ((nprocs < 1) || (nprocs > TH_MAX_PROCS)) {
        TH_FAIL("th_procs_start: nprocs %d out of range 1..%d", nprocs,
                TH_MAX_PROCS);
    }

    procs = calloc(1, sizeof(*procs));
    TH_ASSERT(procs != NULL);
    procs->nprocs = nprocs;

    for (i = 0; i < nprocs; ++i) {
        mesh[i][i] = -1;
        for (j = i + 1; j < nprocs; ++j) {
            TH_ASSERT_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
                                     sv));
            mesh[i][j] = sv[0];
            mesh[j][i] = sv[1];
        }
    }

    fflush(stdout);
    fflush(stderr);
    for (i = 0; i < nprocs; ++i) {
        procs->pids[i] = fork();
        if (procs->pids[i] < 0) {
            TH_FAIL("fork of rank %d failed: %m", i);
        }
        if (procs->pids[i] == 0) {
            /* a rank dies with its parent test process */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            oob.rank   = i;
            oob.nprocs = nprocs;
            for (j = 0; j < nprocs; ++j) {
                oob.fds[j] = mesh[i][j];
            }
            /* close the other ranks' ends */
            for (j = 0; j < nprocs; ++j) {
                int k;
                for (k = 0; k < nprocs; ++k) {
                    if ((j != i) && (k != j) && (mesh[j][k] >= 0)) {
                        close(mesh[j][k]);
                    }
                }
            }
            th_enter_host(i);
            fn(&oob, i, nprocs, arg);
            fflush(stdout);
            fflush(stderr);
            _exit(TH_EXIT_PASS);
        }
    }

    for (i = 0; i < nprocs; ++i) {
        for (j = 0; j < nprocs; ++j) {
            if (mesh[i][j] >= 0) {
                close(mesh[i][j]);
            }
        }
    }
    return procs;
}

pid_t th_procs_pid(th_procs_t *procs, int rank)
{
    TH_ASSERT((rank >= 0) && (rank < procs->nprocs));
    return procs->pids[rank];
}

void th_procs_kill(th_procs_t *procs, int rank, int sig)
{
    TH_ASSERT((rank >= 0) && (rank < procs->nprocs));
    procs->killed[rank] = 1;
    kill(procs->pids[rank], sig);
}

int th_procs_wait(th_procs_t *procs, int *exit_status)
{
    int i, status, code, result = TH_EXIT_PASS;

    for (i = 0; i < procs->nprocs; ++i) {
        while (waitpid(procs->pids[i], &status, 0) < 0) {
            if (errno != EINTR) {
                TH_FAIL("waitpid for rank %d failed: %m", i);
            }
        }

        code = WIFEXITED(status) ? WEXITSTATUS(status) :
                                   128 + WTERMSIG(status);
        if (exit_status != NULL) {
            exit_status[i] = code;
        }
        if (procs->killed[i]) {
            continue;
        }
        if (WIFSIGNALED(status)) {
            fprintf(stderr, "rank %d (pid %d) killed by signal %d\n", i,
                    procs->pids[i], WTERMSIG(status));
            result = TH_EXIT_FAIL;
        } else if (code == TH_EXIT_SKIP) {
            if (result == TH_EXIT_PASS) {
                result = TH_EXIT_SKIP;
            }
        } else if (code != TH_EXIT_PASS) {
            fprintf(stderr, "rank %d (pid %d) exited with %d\n", i,
                    procs->pids[i], code);
            result = TH_EXIT_FAIL;
        }
    }

    free(procs);
    return result;
}

void th_run_procs(int nprocs, th_proc_fn_t fn, void *arg)
{
    switch (th_procs_wait(th_procs_start(nprocs, fn, arg), NULL)) {
    case TH_EXIT_PASS:
        return;
    case TH_EXIT_SKIP:
        /* the rank already reported its reason */
        _exit(TH_EXIT_SKIP);
    default:
        TH_FAIL("%d-process run failed (see the ranks' messages above)",
                nprocs);
    }
}
