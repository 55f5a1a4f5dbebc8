/*
 * RMA from and into buffers never used before, against reused ones (issue
 * 6: put/choose and get/choose), one transport configuration per run (set
 * by the environment: UCX_TLS, UCX_RNDV_SPPLN_PATH, ...). Two processes on
 * this host: the child exposes a region (ucp_mem_map, rkey sent by a tagged
 * message), the parent puts into it and gets from it. For each size:
 *  first - a put (and flush) from a buffer mapped fresh and written by the
 *          application, and a get into a buffer mapped fresh, median;
 *  best  - the same with reused buffers, fastest.
 * Prints: size put_first_MBps put_best_MBps get_first_MBps get_best_MBps
 *
 *   rma-first-use [-n first_iters] [-b best_iters] [-s size]...
 */
#include "ucp_pair.h"

static ucp_rkey_h rkey;
static uint64_t remote;

/* one put and flush, or one get; returns seconds */
static double one(int is_put, void *buf, size_t size)
{
    ucp_request_param_t param = {0};
    double t0                 = now();

    if (is_put) {
        wait_req(ucp_put_nbx(ep, buf, size, remote, rkey, &param));
        wait_req(ucp_ep_flush_nbx(ep, &param));
    } else {
        wait_req(ucp_get_nbx(ep, buf, size, remote, rkey, &param));
    }
    return now() - t0;
}

static void run(size_t size, int n_first, int n_best)
{
    double t[2][256], best[2] = {1e9, 1e9}, ti;
    int i, is_put;
    void *buf;

    for (i = 0; i < n_first; ++i) {
        for (is_put = 1; is_put >= 0; --is_put) {
            buf = map(size);
            if (is_put) {
                memset(buf, i, size); /* the application wrote its data */
            }
            t[is_put][i] = one(is_put, buf, size);
            munmap(buf, size);
        }
    }
    qsort(t[0], n_first, sizeof(t[0][0]), cmp_double);
    qsort(t[1], n_first, sizeof(t[1][0]), cmp_double);

    buf = map(size);
    memset(buf, 1, size);
    for (i = 0; i < n_best; ++i) {
        for (is_put = 1; is_put >= 0; --is_put) {
            ti           = one(is_put, buf, size);
            best[is_put] = (ti < best[is_put]) ? ti : best[is_put];
        }
    }
    munmap(buf, size);

    printf("%zu %.1f %.1f %.1f %.1f\n", size, size / t[1][n_first / 2] / 1e6,
           size / best[1] / 1e6, size / t[0][n_first / 2] / 1e6,
           size / best[0] / 1e6);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    ucp_request_param_t param = {0};
    size_t sizes[64], max = 0, rkey_len;
    int n_sizes, n_first = 9, n_best = 20, c = 0, i, parent;
    void *region, *rkey_buf;
    ucp_mem_map_params_t mp;
    ucp_mem_h memh;
    ucs_status_t status;
    uint64_t hdr[2];
    pid_t pid;

    n_sizes = first_use_options(argc, argv, sizes, 64, &n_first, &n_best);
    for (i = 0; i < n_sizes; ++i) {
        max = (sizes[i] > max) ? sizes[i] : max;
    }

    pair_features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    parent        = pair_start(&pid);
    if (!parent) {
        /* the target: a registered region, its rkey, then wait */
        region        = map(max);
        memset(region, 0, max);
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address    = region;
        mp.length     = max;
        status        = ucp_mem_map(ctx, &mp, &memh);
        if (status != UCS_OK) {
            die("ucp_mem_map", status);
        }
        status = ucp_rkey_pack(ctx, memh, &rkey_buf, &rkey_len);
        if (status != UCS_OK) {
            die("ucp_rkey_pack", status);
        }
        hdr[0] = (uintptr_t)region;
        hdr[1] = rkey_len;
        wait_req(ucp_tag_send_nbx(ep, hdr, sizeof(hdr), 1, &param));
        wait_req(ucp_tag_send_nbx(ep, rkey_buf, rkey_len, 2, &param));
        wait_req(ucp_tag_recv_nbx(worker, &c, 1, 3, (ucp_tag_t)-1, &param));
        ucp_rkey_buffer_release(rkey_buf);
        ucp_mem_unmap(ctx, memh);
        return pair_end(parent, pid);
    }

    wait_req(ucp_tag_recv_nbx(worker, hdr, sizeof(hdr), 1, (ucp_tag_t)-1,
                              &param));
    rkey_buf = malloc(hdr[1]);
    wait_req(ucp_tag_recv_nbx(worker, rkey_buf, hdr[1], 2, (ucp_tag_t)-1,
                              &param));
    status = ucp_ep_rkey_unpack(ep, rkey_buf, &rkey);
    if (status != UCS_OK) {
        die("ucp_ep_rkey_unpack", status);
    }
    free(rkey_buf);
    remote = hdr[0];

    for (i = 0; i < n_sizes; ++i) {
        run(sizes[i], n_first, n_best);
    }

    wait_req(ucp_tag_send_nbx(ep, &c, 1, 3, &param));
    wait_req(ucp_ep_flush_nbx(ep, &param));
    ucp_rkey_destroy(rkey);
    return pair_end(parent, pid);
}
