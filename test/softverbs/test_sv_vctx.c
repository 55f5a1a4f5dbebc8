/*
 * softverbs: the device context as rdma-core's helpers and other libraries
 * see it. rdma-core's providers return a struct ibv_context that is the last
 * member of a struct verbs_context (verbs_get_ctx()); the inline helpers of
 * verbs.h (ibv_query_device_ex, ibv_query_port, ibv_create_qp_ex,
 * ibv_create_cq_ex, ...) and other providers' direct-verbs libraries
 * (libefa's efadv_query_device, which libfabric's efa provider calls on
 * every device) rely on it. Checked here: the layout, the extended verbs
 * softverbs implements, clean errors for those it does not, and libfabric's
 * verbs provider (fi_info, fi_pingpong) running on softverbs.
 */
#include "svt.h"

#include <infiniband/efadv.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* the fields of struct ibv_port_attr up to link_layer: the compat struct
 * that binaries built against old headers pass */
#define VCTX_PORT_COMPAT_LEN (offsetof(struct ibv_port_attr, link_layer) + 1)

TH_TEST(softverbs, vctx_layout)
{
    struct verbs_context *vctx;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    TH_ASSERT(ep.ctx->abi_compat == __VERBS_ABI_IS_EXTENDED);
    vctx = verbs_get_ctx(ep.ctx);
    TH_ASSERT(vctx != NULL);
    TH_ASSERT(&vctx->context == ep.ctx);
    /* sz covers every op of the struct rdma-core 44 defines */
    TH_ASSERT_EQ(vctx->sz, sizeof(*vctx));
    /* implemented ops are found, the others read as absent */
    TH_ASSERT(verbs_get_ctx_op(ep.ctx, query_port) == vctx);
    TH_ASSERT(verbs_get_ctx_op(ep.ctx, query_device_ex) == vctx);
    TH_ASSERT(verbs_get_ctx_op(ep.ctx, create_qp_ex) == vctx);
    TH_ASSERT(verbs_get_ctx_op(ep.ctx, create_cq_ex) == NULL);
    TH_ASSERT(verbs_get_ctx_op(ep.ctx, open_xrcd) == NULL);
    TH_ASSERT(verbs_get_ctx_op(ep.ctx, alloc_dm) == NULL);
    /* the data path inlines of verbs.h call through the basic ops */
    TH_ASSERT(ep.ctx->ops.post_send != NULL);
    TH_ASSERT(ep.ctx->ops.post_recv != NULL);
    TH_ASSERT(ep.ctx->ops.post_srq_recv != NULL);
    TH_ASSERT(ep.ctx->ops.poll_cq != NULL);
    TH_ASSERT(ep.ctx->ops.req_notify_cq != NULL);
    svt_ep_close(&ep);
}

TH_TEST(softverbs, vctx_query_ex)
{
    struct ibv_query_device_ex_input in;
    struct ibv_device_attr_ex ax;
    struct ibv_port_attr pa, pc;
    struct verbs_context *vctx;
    struct ibv_device_attr da;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    vctx = verbs_get_ctx(ep.ctx);
    TH_ASSERT(vctx != NULL);

    /* ibv_query_device_ex: the basic attributes and the extended ones
     * (verbs.h's legacy fallback leaves phys_port_cnt_ex zero) */
    TH_ASSERT_EQ(ibv_query_device(ep.ctx, &da), 0);
    memset(&ax, 0xa5, sizeof(ax));
    TH_ASSERT_EQ(ibv_query_device_ex(ep.ctx, NULL, &ax), 0);
    TH_ASSERT_MEM_EQ(&ax.orig_attr, &da, sizeof(da));
    TH_ASSERT_EQ(ax.comp_mask, 0);
    TH_ASSERT_EQ(ax.phys_port_cnt_ex, 1);
    TH_ASSERT_EQ(ax.device_cap_flags_ex & 0xffffffffULL, da.device_cap_flags);
    TH_ASSERT_EQ(ax.odp_caps.general_caps, 0);
    TH_ASSERT_EQ(ax.max_dm_size, 0);
    /* an input with unknown requests, a caller's struct too small */
    memset(&in, 0, sizeof(in));
    in.comp_mask = 1;
    TH_ASSERT_EQ(ibv_query_device_ex(ep.ctx, &in, &ax), EINVAL);
    TH_ASSERT_EQ(vctx->query_device_ex(ep.ctx, NULL, &ax, 16), EINVAL);
    /* an older, smaller struct is filled up to its size only */
    memset(&ax, 0xa5, sizeof(ax));
    TH_ASSERT_EQ(vctx->query_device_ex(ep.ctx, NULL, &ax,
                                       offsetof(struct ibv_device_attr_ex,
                                                odp_caps)),
                 0);
    TH_ASSERT_MEM_EQ(&ax.orig_attr, &da, sizeof(da));
    TH_ASSERT_EQ(ax.phys_port_cnt_ex, 0xa5a5a5a5);

    /* ibv_query_port through the extended op, and the exported compat
     * symbol that old binaries call: the same port */
    memset(&pa, 0xa5, sizeof(pa));
    TH_ASSERT_EQ(ibv_query_port(ep.ctx, 1, &pa), 0);
    TH_ASSERT_EQ(pa.state, IBV_PORT_ACTIVE);
    TH_ASSERT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    TH_ASSERT_EQ(pa.flags, 0);
    TH_ASSERT_EQ(pa.port_cap_flags2, 0);
    memset(&pc, 0, sizeof(pc));
#undef ibv_query_port
    TH_ASSERT_EQ(ibv_query_port(ep.ctx, 1, (struct _compat_ibv_port_attr *)&pc),
                 0);
    TH_ASSERT_MEM_EQ(&pc, &pa, VCTX_PORT_COMPAT_LEN);
    TH_ASSERT_EQ(ibv_query_port(ep.ctx, 2, (struct _compat_ibv_port_attr *)&pc),
                 EINVAL);
    TH_ASSERT_EQ(vctx->query_port(ep.ctx, 2, &pa, sizeof(pa)), EINVAL);
    TH_ASSERT_EQ(vctx->query_port(ep.ctx, 1, &pa, 8), EINVAL);
    memset(&pc, 0xa5, sizeof(pc));
    TH_ASSERT_EQ(vctx->query_port(ep.ctx, 1, &pc, VCTX_PORT_COMPAT_LEN), 0);
    TH_ASSERT_EQ(pc.flags, 0xa5);
    svt_ep_close(&ep);
}

/* ibv_create_qp_ex makes a QP that works; the extensions softverbs does not
 * emulate fail with EOPNOTSUPP, not a crash */
TH_TEST(softverbs, vctx_create_ex)
{
    struct ibv_cq_init_attr_ex cqa;
    struct ibv_qp_init_attr_ex qx;
    struct ibv_xrcd_init_attr xa;
    struct ibv_alloc_dm_attr dma;
    struct ibv_td_init_attr tda;
    struct ibv_mr *mr;
    struct ibv_sge sge;
    struct ibv_wc wc;
    svt_info_t ia, ib;
    struct ibv_qp *qp;
    uint8_t *buf;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    memset(&qx, 0, sizeof(qx));
    qx.send_cq          = ep.scq;
    qx.recv_cq          = ep.rcq;
    qx.qp_type          = IBV_QPT_RC;
    qx.cap.max_send_wr  = 16;
    qx.cap.max_recv_wr  = 16;
    qx.cap.max_send_sge = 1;
    qx.cap.max_recv_sge = 1;
    qx.comp_mask        = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    qx.pd               = ep.pd;

    qx.create_flags = IBV_QP_CREATE_SCATTER_FCS;
    errno           = 0;
    TH_ASSERT(ibv_create_qp_ex(ep.ctx, &qx) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    qx.create_flags = 0;
    qx.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    errno = 0;
    TH_ASSERT(ibv_create_qp_ex(ep.ctx, &qx) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    qx.comp_mask &= ~IBV_QP_INIT_ATTR_XRCD;
    qp = ibv_create_qp_ex(ep.ctx, &qx);
    TH_ASSERT(qp != NULL);
    TH_ASSERT(qp->context == ep.ctx);

    /* connect it to the endpoint's QP and write through it */
    buf = aligned_alloc(4096, 8192);
    TH_ASSERT(buf != NULL);
    memset(buf, 0, 8192);
    th_fill_pattern(buf, 4096, 27);
    mr = ibv_reg_mr(ep.pd, buf, 8192, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    ia     = svt_info(&ep, mr);
    ib     = ia;
    ib.qpn = qp->qp_num;
    svt_rc_connect(&ep, &ib);
    {
        svt_ep_t ex = ep;

        ex.qp = qp;
        svt_rc_connect(&ex, &ia);
    }
    sge = svt_sge(buf, 4096, mr);
    TH_ASSERT_EQ(svt_post(qp, IBV_WR_RDMA_WRITE, &sge, 1, (uintptr_t)buf + 4096,
                          mr->rkey, 7, IBV_SEND_SIGNALED),
                 0);
    svt_poll(ep.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.wr_id, 7);
    TH_CHECK_PATTERN(buf + 4096, 4096, 27);
    TH_ASSERT_EQ(ibv_destroy_qp(qp), 0);
    TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
    free(buf);

    /* extended CQs: not emulated; UCX falls back to ibv_create_cq on this */
    memset(&cqa, 0, sizeof(cqa));
    cqa.cqe = 16;
    errno   = 0;
    TH_ASSERT(ibv_create_cq_ex(ep.ctx, &cqa) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);

    memset(&xa, 0, sizeof(xa));
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd        = -1;
    xa.oflags    = O_CREAT;
    errno        = 0;
    TH_ASSERT(ibv_open_xrcd(ep.ctx, &xa) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    memset(&dma, 0, sizeof(dma));
    dma.length = 64;
    errno      = 0;
    TH_ASSERT(ibv_alloc_dm(ep.ctx, &dma) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    memset(&tda, 0, sizeof(tda));
    errno = 0;
    TH_ASSERT(ibv_alloc_td(ep.ctx, &tda) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    TH_ASSERT(ibv_alloc_mw(ep.pd, IBV_MW_TYPE_1) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    TH_ASSERT(ibv_qp_to_qp_ex(ep.qp) == NULL);
    svt_ep_close(&ep);
}

/* libibverbs entry points that dispatch through its private provider table:
 * softverbs answers them with clean errors (libibverbs' own versions crash
 * on a softverbs context) */
TH_TEST(softverbs, vctx_unemulated)
{
    struct ibv_ece ece;
    struct ibv_mr *mr;
    uint8_t buf[4096];
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    mr = ibv_reg_mr(ep.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(mr != NULL);

    errno = 0;
    TH_ASSERT(ibv_import_device(ep.ctx->cmd_fd) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    TH_ASSERT(ibv_import_pd(ep.ctx, ep.pd->handle) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    TH_ASSERT(ibv_import_mr(ep.pd, mr->handle) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    TH_ASSERT(ibv_import_dm(ep.ctx, 1) == NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    memset(&ece, 0, sizeof(ece));
    TH_ASSERT_EQ(ibv_query_ece(ep.qp, &ece), EOPNOTSUPP);
    TH_ASSERT_EQ(ibv_set_ece(ep.qp, &ece), EOPNOTSUPP);
    TH_ASSERT_EQ(ibv_query_qp_data_in_order(ep.qp, IBV_WR_RDMA_WRITE, 0), 0);
    errno = 0;
    TH_ASSERT(ibv_reg_dmabuf_mr(ep.pd, 0, 4096, 0, 0, IBV_ACCESS_LOCAL_WRITE) ==
              NULL);
    TH_ASSERT_EQ(errno, EOPNOTSUPP);
    /* the old MR stays valid */
    TH_ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf,
                              1024, IBV_ACCESS_LOCAL_WRITE),
                 IBV_REREG_MR_ERR_INPUT);
    TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
    svt_ep_close(&ep);
}

/* device helpers: index, GUID, the provider part of the device (another
 * provider's library must not take it for its own), foreign pointers */
TH_TEST(softverbs, vctx_device)
{
    static const uint8_t zero[64];
    struct ibv_device **list;
    struct ibv_device_attr da;
    struct ibv_context *ctx;
    struct ibv_device bogus;
    int i, n = 0;

    svt_need_device();
    list = ibv_get_device_list(&n);
    TH_ASSERT(list != NULL);
    TH_ASSERT_GT(n, 0);
    for (i = 0; i < n; ++i) {
        TH_ASSERT_EQ(ibv_get_device_index(list[i]), i);
        /* where rdma-core's struct verbs_device has its provider ops */
        TH_ASSERT_MEM_EQ((const uint8_t *)(list[i] + 1), zero, sizeof(zero));
        ctx = ibv_open_device(list[i]);
        TH_ASSERT(ctx != NULL);
        TH_ASSERT_EQ(ibv_query_device(ctx, &da), 0);
        TH_ASSERT_EQ(ibv_get_device_guid(list[i]), da.node_guid);
        TH_ASSERT_EQ(ibv_close_device(ctx), 0);
    }
    memset(&bogus, 0, sizeof(bogus));
    TH_ASSERT_EQ(ibv_get_device_index(&bogus), -1);
    TH_ASSERT_EQ(ibv_get_device_guid(&bogus), 0);
    errno = 0;
    TH_ASSERT(ibv_open_device(&bogus) == NULL);
    TH_ASSERT_EQ(errno, ENODEV);
    ibv_free_device_list(list);
}

/* what libfabric's efa provider does with every device it finds */
TH_TEST(softverbs, vctx_efadv)
{
    int (*query)(struct ibv_context *, struct efadv_device_attr *, uint32_t);
    struct efadv_device_attr attr;
    void *lib;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    lib = dlopen("libefa.so.1", RTLD_NOW);
    if (lib == NULL) {
        TH_SKIP("libefa.so.1 (ibverbs-providers) is not installed: %s",
                dlerror());
    }
    query = (int (*)(struct ibv_context *, struct efadv_device_attr *,
                     uint32_t))dlsym(lib, "efadv_query_device");
    TH_ASSERT(query != NULL);
    memset(&attr, 0, sizeof(attr));
    TH_ASSERT_EQ(query(ep.ctx, &attr, sizeof(attr)), EOPNOTSUPP);
    dlclose(lib);
    svt_ep_close(&ep);
}

/* ---------------------------------------------------------------------- */

#define VCTX_FI_TIMEOUT 60 /* seconds, for each libfabric program */

static void vctx_need_libfabric(void)
{
    char path[512];

    svt_need_device();
    if (th_run_cmd(NULL, "command -v fi_info fi_pingpong >/dev/null") != 0) {
        TH_SKIP("libfabric's fi_info/fi_pingpong are not installed "
                "(Debian package libfabric-bin, contrib/install-deps.sh)");
    }
    snprintf(path, sizeof(path), "%s/lib/libsoftverbs.so", th_prefix());
    if (access(path, R_OK) != 0) {
        TH_SKIP("%s is not installed", path);
    }
}

/* the environment a libfabric program needs to see softverbs */
#define VCTX_FI_ENV                                                            \
    "LD_PRELOAD=%s/lib/libsoftverbs.so SOFTVERBS_MEMLOCK_LIMIT=unlimited"

TH_TEST_TIMEOUT(softverbs, libfabric_info, 2 * VCTX_FI_TIMEOUT)
{
    char *out;
    int rc;

    vctx_need_libfabric();
    /* every provider probes the devices, efa with efadv_query_device */
    rc = th_run_cmd(&out, "timeout %d env " VCTX_FI_ENV " fi_info 2>&1",
                    VCTX_FI_TIMEOUT, th_prefix());
    th_log("%s", out);
    TH_ASSERT_EQ(rc, 0);
    free(out);
    rc = th_run_cmd(&out,
                    "timeout %d env " VCTX_FI_ENV " fi_info -p verbs "
                    "2>&1",
                    VCTX_FI_TIMEOUT, th_prefix());
    th_log("%s", out);
    TH_ASSERT_EQ(rc, 0);
    TH_ASSERT(strstr(out, "domain: softverbs0\n") != NULL);
    /* RDM over the UD endpoints (ofi_rxd): what fi_pingpong -e rdm uses.
     * The MSG endpoints are listed too, but need rdma_cm, which softverbs
     * does not emulate: creating one fails (contrib/softverbs/README.md) */
    TH_ASSERT(strstr(out, "domain: softverbs0-dgram\n") != NULL);
    TH_ASSERT(strstr(out, "provider: verbs;ofi_rxd\n") != NULL);
    free(out);
}

/* is a TCP port in the LISTEN state on this host (IPv4 or IPv6)? */
static int vctx_listening(unsigned port)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    unsigned lport, st, i;
    char line[512];
    FILE *f;
    int found = 0;

    for (i = 0; (i < 2) && !found; ++i) {
        f = fopen(files[i], "r");
        if (f == NULL) {
            continue;
        }
        while (!found && (fgets(line, sizeof(line), f) != NULL)) {
            /* "sl: local_addr:port rem_addr:port st ..." in hex */
            if ((sscanf(line, " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x",
                        &lport, &st) == 2) &&
                (lport == port) && (st == 0x0a)) {
                found = 1;
            }
        }
        fclose(f);
    }
    return found;
}

/* a port that is free now (the kernel's pick) */
static unsigned vctx_free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    TH_ASSERT_SYS(fd);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TH_ASSERT_SYS(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
    TH_ASSERT_SYS(getsockname(fd, (struct sockaddr *)&sa, &len));
    close(fd);
    return ntohs(sa.sin_port);
}

/* the size lines of fi_pingpong's report ("bytes #sent #ack ..."): how many
 * there are with every one of 'iters' transfers acknowledged, and whether
 * one of them is the 1 MiB size */
static int vctx_pingpong_sizes(const char *out, unsigned iters, int *has_1m)
{
    unsigned sent, ack;
    const char *line;
    char size[16];
    int n = 0;

    *has_1m = 0;
    for (line = out; line != NULL; line = strchr(line, '\n')) {
        line += (*line == '\n');
        if ((sscanf(line, "%15s %u =%u", size, &sent, &ack) == 3) &&
            (sent == iters) && (ack == iters)) {
            ++n;
            *has_1m |= (strcmp(size, "1m") == 0);
        }
    }
    return n;
}

/* fi_pingpong of provider prov and endpoint type ep, server and client on
 * this host, every size of its list (1 B to 6 MiB), with data checks (-c) */
#define VCTX_PP_ITERS 5
static void vctx_pingpong(const char *prov, const char *ep)
{
    char srv_log[] = "/tmp/th-fi-pingpong-XXXXXX";
    char *out, *srv_out, cmd[1024];
    unsigned port;
    double end;
    pid_t srv;
    int fd, st, rc, srv_rc, has_1m;

    vctx_need_libfabric();
    port = vctx_free_port();
    fd   = mkstemp(srv_log);
    TH_ASSERT_SYS(fd);
    snprintf(cmd, sizeof(cmd),
             "exec timeout %d env " VCTX_FI_ENV " fi_pingpong -p '%s' "
             "-e %s -c -I %d -S all -B %u",
             VCTX_FI_TIMEOUT, th_prefix(), prov, ep, VCTX_PP_ITERS, port);
    th_log("$ %s &", cmd);
    srv = fork();
    TH_ASSERT_SYS(srv);
    if (srv == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd);

    /* the client connects to the server's control port: wait for it */
    end = th_time() + VCTX_FI_TIMEOUT;
    while (!vctx_listening(port)) {
        if ((waitpid(srv, &st, WNOHANG) == srv) || (th_time() > end)) {
            th_run_cmd(&srv_out, "cat %s", srv_log);
            th_log("server: %s", srv_out);
            unlink(srv_log);
            TH_FAIL("fi_pingpong server did not listen on port %u", port);
        }
        usleep(10000);
    }

    rc = th_run_cmd(&out,
                    "timeout %d env " VCTX_FI_ENV " fi_pingpong "
                    "-p '%s' -e %s -c -I %d -S all -P %u 127.0.0.1 2>&1",
                    VCTX_FI_TIMEOUT, th_prefix(), prov, ep, VCTX_PP_ITERS,
                    port);
    th_log("client: %s", out);

    /* the server ends with the client (or its own timeout) */
    end = th_time() + VCTX_FI_TIMEOUT + 10;
    while (waitpid(srv, &st, WNOHANG) != srv) {
        if (th_time() > end) {
            kill(srv, SIGKILL);
            waitpid(srv, &st, 0);
            break;
        }
        usleep(10000);
    }
    srv_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    th_run_cmd(&srv_out, "cat %s", srv_log);
    th_log("server: %s", srv_out);
    unlink(srv_log);

    TH_ASSERT_EQ(rc, 0);
    TH_ASSERT_EQ(srv_rc, 0);
    /* one line per size, every transfer acknowledged */
    TH_ASSERT_GE(vctx_pingpong_sizes(out, VCTX_PP_ITERS, &has_1m), 20);
    TH_ASSERT(has_1m);
    TH_ASSERT_GE(vctx_pingpong_sizes(srv_out, VCTX_PP_ITERS, &has_1m), 20);
    TH_ASSERT(has_1m);
    free(out);
    free(srv_out);
}

/* RDM over the UD endpoints (ofi_rxd). Named: with rdma_cm, libfabric also
 * lists verbs;ofi_rxm (RDM over MSG) first, which does not run over
 * softverbs (README, Limitations) */
TH_TEST_TIMEOUT(softverbs, libfabric_pingpong_rdm, 3 * VCTX_FI_TIMEOUT)
{
    vctx_pingpong("verbs;ofi_rxd", "rdm");
}

/* MSG endpoints: connected through softverbs' rdma_cm, an EQ for its
 * events */
TH_TEST_TIMEOUT(softverbs, libfabric_pingpong_msg, 3 * VCTX_FI_TIMEOUT)
{
    vctx_pingpong("verbs", "msg");
}
