/*
 * Client-server endpoints (ucp_ep_create() by socket address), the way
 * UCX's ucp_client_server example and most UCP services connect:
 *
 * - a send posted right after ucp_ep_create(), before the connection is
 *   made, waits on the "reconfig" stub protocol and must be replayed on the
 *   real one once the endpoint is connected (glue 0004; UCX 1.13.1 asserted
 *   in proto_reconfig.c);
 * - on a host whose only enabled transports are RDMA ones (UCX_TLS=hcr or
 *   rc_v) and no rdma_cm, the endpoint must still get data lanes on them
 *   through the TCP sockcm (glue 0005; before: "device lo is not enabled");
 * - a connection refused while a send waits must fail that send and call
 *   the error handler, not abort the process (the stub's abort asserted).
 */
#include "th.h"
#include "th_ucx.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SA_TAG      0x5a
#define SA_SIZE_BIG (256 * 1024)

typedef struct {
    th_ucp_t ucp;
    ucp_conn_request_h conn_request;
} sa_server_t;

static void sa_conn_handler(ucp_conn_request_h conn_request, void *arg)
{
    sa_server_t *server = arg;

    TH_ASSERT(server->conn_request == NULL);
    server->conn_request = conn_request;
}

static void sa_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    th_ucp_t *ucp = arg;

    th_log("endpoint %p error: %s", (void *)ep, ucs_status_string(status));
    ucp->ep_error = status;
}

static void sa_addr(struct sockaddr_in *sin, uint16_t port)
{
    memset(sin, 0, sizeof(*sin));
    sin->sin_family      = AF_INET;
    sin->sin_port        = htons(port);
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static ucp_ep_h sa_client_ep(th_ucp_t *ucp, uint16_t port)
{
    ucp_ep_params_t params = {0};
    struct sockaddr_in sin;
    ucp_ep_h ep;

    sa_addr(&sin, port);
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS |
                        UCP_EP_PARAM_FIELD_SOCK_ADDR |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr    = (const struct sockaddr *)&sin;
    params.sockaddr.addrlen = sizeof(sin);
    params.err_mode         = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb   = sa_error_cb;
    params.err_handler.arg  = ucp;
    TH_ASSERT_UCS_OK(ucp_ep_create(ucp->worker, &params, &ep));
    return ep;
}

/* the endpoint's lanes as ucp_ep_print_info() shows them */
static char *sa_ep_info(ucp_ep_h ep)
{
    char *text = NULL;
    size_t size;
    FILE *f;

    f = open_memstream(&text, &size);
    TH_ASSERT(f != NULL);
    ucp_ep_print_info(ep, f);
    fclose(f);
    return text;
}

static void sa_send_recv_proc(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    const char *tl_prefix     = arg;
    size_t sizes[]            = {1024, SA_SIZE_BIG};
    ucp_request_param_t param = {0};
    ucs_status_ptr_t reqs[2];
    ucp_listener_params_t lparams = {0};
    ucp_listener_attr_t lattr;
    ucp_listener_h listener;
    ucp_ep_params_t eparams = {0};
    struct sockaddr_in sin;
    sa_server_t server = {0};
    th_ucp_t ucp;
    uint16_t port;
    char *bufs[2], *info;
    double deadline;
    int i;

    for (i = 0; i < 2; ++i) {
        bufs[i] = malloc(sizes[i]);
        TH_ASSERT(bufs[i] != NULL);
    }

    if (rank == 0) {
        th_ucp_init(&server.ucp, UCP_FEATURE_TAG);
        sa_addr(&sin, 0);
        lparams.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                             UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lparams.sockaddr.addr    = (const struct sockaddr *)&sin;
        lparams.sockaddr.addrlen = sizeof(sin);
        lparams.conn_handler.cb  = sa_conn_handler;
        lparams.conn_handler.arg = &server;
        TH_ASSERT_UCS_OK(
                ucp_listener_create(server.ucp.worker, &lparams, &listener));
        lattr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        TH_ASSERT_UCS_OK(ucp_listener_query(listener, &lattr));
        port = ntohs(((struct sockaddr_in *)&lattr.sockaddr)->sin_port);
        th_oob_send(oob, 1, &port, sizeof(port));

        /* post the receives before the client connects */
        for (i = 0; i < 2; ++i) {
            memset(bufs[i], 0, sizes[i]);
            reqs[i] = ucp_tag_recv_nbx(server.ucp.worker, bufs[i], sizes[i],
                                       SA_TAG + i, (ucp_tag_t)-1, &param);
            TH_ASSERT(!UCS_PTR_IS_ERR(reqs[i]));
        }

        deadline = th_time() + 30;
        while (server.conn_request == NULL) {
            ucp_worker_progress(server.ucp.worker);
            TH_ASSERT(th_time() < deadline);
        }
        eparams.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
        eparams.conn_request = server.conn_request;
        TH_ASSERT_UCS_OK(
                ucp_ep_create(server.ucp.worker, &eparams, &server.ucp.ep));
        for (i = 0; i < 2; ++i) {
            TH_ASSERT_UCS_OK(th_ucp_wait(&server.ucp, reqs[i], 60));
            TH_CHECK_PATTERN(bufs[i], sizes[i], 100 + i);
        }
        th_ucp_flush_barrier(&server.ucp, oob);
        ucp_listener_destroy(listener);
        th_ucp_cleanup(&server.ucp);
    } else {
        th_ucp_init(&ucp, UCP_FEATURE_TAG);
        th_oob_recv(oob, 0, &port, sizeof(port));
        ucp.ep = sa_client_ep(&ucp, port);
        /* sent at once: both wait for the connection, then are replayed */
        for (i = 0; i < 2; ++i) {
            th_fill_pattern(bufs[i], sizes[i], 100 + i);
            reqs[i] = ucp_tag_send_nbx(ucp.ep, bufs[i], sizes[i], SA_TAG + i,
                                       &param);
            TH_ASSERT(!UCS_PTR_IS_ERR(reqs[i]));
        }
        for (i = 0; i < 2; ++i) {
            TH_ASSERT_UCS_OK(th_ucp_wait(&ucp, reqs[i], 60));
        }
        TH_ASSERT_EQ(ucp.ep_error, UCS_OK);

        /* the data lanes are on the transport asked for */
        info = sa_ep_info(ucp.ep);
        th_log("%s", info);
        if (strstr(info, tl_prefix) == NULL) {
            TH_FAIL("no lane on %s in the endpoint's configuration", tl_prefix);
        }
        free(info);
        th_ucp_flush_barrier(&ucp, oob);
        th_ucp_cleanup(&ucp);
    }

    for (i = 0; i < 2; ++i) {
        free(bufs[i]);
    }
}

static void sa_run(const char *tls, const char *tl_prefix)
{
    if (strcmp(tls, "tcp") && !th_have_verbs_device("")) {
        TH_SKIP("no verbs device for %s (softverbs is not preloaded)", tls);
    }
    setenv("UCX_TLS", tls, 1);
    th_run_procs(2, sa_send_recv_proc, (void *)tl_prefix);
}

TH_TEST(ucp_sockaddr, send_on_connect_tcp)
{
    sa_run("tcp", "tcp/");
}

TH_TEST(ucp_sockaddr, send_on_connect_rc_v)
{
    sa_run("rc_v", "rc_verbs/");
}

TH_TEST(ucp_sockaddr, send_on_connect_hcr)
{
    sa_run("hcr", "hcr/");
}

/* a port with no listener: bound, then closed */
static uint16_t sa_closed_port(void)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int fd;

    sa_addr(&sin, 0);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    TH_ASSERT_SYS(fd);
    TH_ASSERT_SYS(bind(fd, (struct sockaddr *)&sin, sizeof(sin)));
    TH_ASSERT_SYS(getsockname(fd, (struct sockaddr *)&sin, &len));
    close(fd);
    return ntohs(sin.sin_port);
}

static void sa_refused(const char *tls)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t req;
    ucs_status_t status;
    char buf[4096];
    th_ucp_t ucp;
    double deadline;

    if (strcmp(tls, "tcp") && !th_have_verbs_device("")) {
        TH_SKIP("no verbs device for %s (softverbs is not preloaded)", tls);
    }
    setenv("UCX_TLS", tls, 1);
    th_ucp_init(&ucp, UCP_FEATURE_TAG);
    ucp.ep = sa_client_ep(&ucp, sa_closed_port());
    memset(buf, 'x', sizeof(buf));
    req = ucp_tag_send_nbx(ucp.ep, buf, sizeof(buf), SA_TAG, &param);
    TH_ASSERT(req != NULL);
    if (UCS_PTR_IS_ERR(req)) {
        status = UCS_PTR_STATUS(req);
    } else {
        deadline = th_time() + 30;
        while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS) {
            ucp_worker_progress(ucp.worker);
            TH_ASSERT(th_time() < deadline);
        }
        ucp_request_free(req);
    }
    th_log("send on a refused connection: %s, endpoint error %s",
           ucs_status_string(status), ucs_status_string(ucp.ep_error));
    TH_ASSERT(status != UCS_OK);
    deadline = th_time() + 10;
    while (ucp.ep_error == UCS_OK) {
        ucp_worker_progress(ucp.worker);
        TH_ASSERT(th_time() < deadline);
    }
    th_ucp_cleanup(&ucp);
}

TH_TEST(ucp_sockaddr, send_on_refused_tcp)
{
    sa_refused("tcp");
}

TH_TEST(ucp_sockaddr, send_on_refused_hcr)
{
    sa_refused("hcr");
}
