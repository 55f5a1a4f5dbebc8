/*
 * A benchmark modelled on NAS IS (integer sort), two ranks on this host, one
 * transport configuration per run (set by the environment: UCX_TLS, ...).
 * As in NPB's IS, each rank generates its keys once, before the timed loop
 * (uniform in [0, max_key), max_key a power of two), and each timed
 * iteration, on each rank:
 *  1. changes two keys (NPB's key_array[iter] and key_array[iter + 10]);
 *  2. counts its keys by owner (rank r owns the keys of half r of the
 *     range, NPB's buckets with a shift) and places them, by owner, into a
 *     fresh send buffer (key_buff1);
 *  3. exchanges the counts, then the keys: the peer's part of the send
 *     buffer goes out, the peer's keys for this rank land in a fresh
 *     receive buffer (key_buff2) (tagged send and receive, both in flight);
 *  4. ranks the keys it owns: counts each key of its half into a fresh
 *     array and sums them up, checking that every key arrived in range;
 *  5. unmaps the iteration's buffers.
 * So every exchange is from and into buffers never used before, as in the
 * superpipeline paper's NAS IS experiment: registration caches cannot help.
 * Prints, on rank 0, after one untimed iteration (NPB's rank(1)):
 *   total_s per_iter_ms exchange_ms_per_iter bytes_sent_per_iter
 * (the exchange: step 3, as rank 0 sees it)
 *
 * -p is a decomposition, not NPB: each rank maps its receive buffer (as
 * large as all its keys, which bounds what the peer sends) and writes every
 * page of it before the exchange's clock starts, so that the exchange no
 * longer pays for the first touch of the receive buffer. The difference
 * between the two exchange times is what that first touch costs each
 * transport inside the exchange, hidden or not.
 *
 *   sppln-nas-is [-k log2_total_keys] [-m log2_max_key] [-i iterations] [-p]
 */
#include "ucp_pair.h"

#include <stdint.h>

#define TAG_SIZE 10
#define TAG_KEYS 11

static uint64_t lcg_next(uint64_t *state)
{
    *state = (*state * 6364136223846793005ull) + 1442695040888963407ull;
    return *state >> 33;
}

/* bytes of a mapping of n keys (at least one: mmap refuses 0) */
static size_t keys_bytes(size_t n)
{
    return ((n > 0) ? n : 1) * sizeof(uint32_t);
}

static void *map_keys(size_t n)
{
    return map(keys_bytes(n));
}

/* exchange 8 bytes each way */
static uint64_t swap_u64(uint64_t mine)
{
    ucp_request_param_t param = {0};
    uint64_t theirs;
    void *rreq, *sreq;

    rreq = ucp_tag_recv_nbx(worker, &theirs, sizeof(theirs), TAG_SIZE,
                            (ucp_tag_t)-1, &param);
    sreq = ucp_tag_send_nbx(ep, &mine, sizeof(mine), TAG_SIZE, &param);
    wait_req(sreq);
    wait_req(rreq);
    return theirs;
}

/* -p: the receive buffer is touched before the exchange is timed */
static int prefault;

/* returns the seconds of step 3, the exchange */
static double iteration(int rank, int iter, uint32_t *keys, size_t n_keys,
                        int log_max)
{
    ucp_request_param_t param = {0};
    uint32_t max_key = 1u << log_max, half = max_key / 2, lo = rank * half;
    int shift        = log_max - 1;
    uint32_t *sendbuf, *recvbuf = NULL, *counts, key;
    size_t n_mine = 0, n_peer, n_recv, i, at_mine, at_peer, total;
    void *rreq, *sreq;
    double t_exchange;

    /* 1. as NPB does to its keys every iteration (iter is 1..10) */
    keys[iter]      = (uint32_t)iter;
    keys[iter + 10] = max_key - (uint32_t)iter;

    /* 2. count by owner, then place: this rank's keys first, the peer's
     *    after them (NPB's bucket order) */
    for (i = 0; i < n_keys; ++i) {
        n_mine += ((keys[i] >> shift) == (uint32_t)rank);
    }
    n_peer  = n_keys - n_mine;
    sendbuf = map_keys(n_keys);
    for (i = 0, at_mine = 0, at_peer = n_mine; i < n_keys; ++i) {
        if ((keys[i] >> shift) == (uint32_t)rank) {
            sendbuf[at_mine++] = keys[i];
        } else {
            sendbuf[at_peer++] = keys[i];
        }
    }

    /* 3. exchange */
    if (prefault) {
        recvbuf = map_keys(n_keys);
        memset(recvbuf, 0xff, keys_bytes(n_keys));
        swap_u64(0); /* both ranks start the clock with their pages in */
    }
    t_exchange = now();
    n_recv     = swap_u64(n_peer);
    if (!prefault) {
        recvbuf = map_keys(n_recv);
    } else if (n_recv > n_keys) {
        fprintf(stderr, "rank %d: the peer sends %zu keys, more than %zu\n",
                rank, n_recv, n_keys);
        exit(1);
    }
    rreq    = ucp_tag_recv_nbx(worker, recvbuf, n_recv * sizeof(uint32_t),
                               TAG_KEYS, (ucp_tag_t)-1, &param);
    sreq    = ucp_tag_send_nbx(ep, sendbuf + n_mine,
                               n_peer * sizeof(uint32_t), TAG_KEYS, &param);
    wait_req(sreq);
    wait_req(rreq);
    t_exchange = now() - t_exchange;

    /* 4. rank this rank's keys: count them over its half of the range */
    counts = map_keys(half);
    for (i = 0; i < n_mine + n_recv; ++i) {
        key = (i < n_mine) ? sendbuf[i] : recvbuf[i - n_mine];
        if ((key < lo) || (key >= lo + half)) {
            fprintf(stderr, "rank %d: key %u out of [%u, %u)\n", rank, key,
                    lo, lo + half);
            exit(1);
        }
        ++counts[key - lo];
    }
    for (i = 0, total = 0; i < half; ++i) {
        total += counts[i];
    }
    if (total != n_mine + n_recv) {
        fprintf(stderr, "rank %d: ranked %zu keys of %zu\n", rank, total,
                n_mine + n_recv);
        exit(1);
    }

    /* 5. every buffer of this iteration goes */
    munmap(counts, keys_bytes(half));
    munmap(recvbuf, keys_bytes(prefault ? n_keys : n_recv));
    munmap(sendbuf, keys_bytes(n_keys));
    return t_exchange;
}

int main(int argc, char **argv)
{
    int log_keys = 23, log_max = 19, iters = 10, c, i, parent;
    double t0, t_total, t_exchange = 0;
    uint64_t seed;
    uint32_t *keys;
    size_t n_keys, k;
    pid_t pid;

    while ((c = getopt(argc, argv, "k:m:i:p")) != -1) {
        switch (c) {
        case 'k': log_keys = atoi(optarg); break;
        case 'm': log_max = atoi(optarg); break;
        case 'i': iters = atoi(optarg); break;
        case 'p':
            prefault = 1;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [-k log2_keys] [-m log2_max_key] "
                    "[-i iterations] [-p]\n",
                    argv[0]);
            return 2;
        }
    }
    if ((log_keys < 6) || (log_keys > 30) || (log_max < 2) ||
        (log_max > 31) || (iters < 1) || (iters > 10)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }

    n_keys = (size_t)1 << (log_keys - 1); /* per rank */
    parent = pair_start(&pid);
    /* the keys, once, before the timed loop (NPB's create_seq) */
    keys = malloc(keys_bytes(n_keys));
    if (keys == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    seed = (uint64_t)!parent + 1;
    for (k = 0; k < n_keys; ++k) {
        keys[k] = (uint32_t)lcg_next(&seed) & ((1u << log_max) - 1);
    }
    iteration(!parent, 1, keys, n_keys, log_max); /* untimed, as NPB */
    swap_u64(0);
    t0 = now();
    for (i = 1; i <= iters; ++i) {
        t_exchange += iteration(!parent, i, keys, n_keys, log_max);
    }
    swap_u64(0);
    t_total = now() - t0;
    if (parent) {
        printf("%.6f %.3f %.3f %zu\n", t_total, t_total * 1e3 / iters,
               t_exchange * 1e3 / iters, n_keys * sizeof(uint32_t) / 2);
    }
    return pair_end(parent, pid);
}
