/*
 * th UCP fixture: context, worker and an endpoint to one peer rank.
 */
#include "th_ucx.h"

#include <ucs/debug/log_def.h>

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void th_ucp_init(th_ucp_t *ucp, uint64_t features)
{
    ucp_worker_params_t wparams = {0};
    ucp_params_t params         = {0};
    ucp_config_t *config;

    memset(ucp, 0, sizeof(*ucp));
    TH_ASSERT_UCS_OK(ucp_config_read(NULL, NULL, &config));

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = features;
    TH_ASSERT_UCS_OK(ucp_init(&params, config, &ucp->context));
    ucp_config_release(config);

    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    TH_ASSERT_UCS_OK(ucp_worker_create(ucp->context, &wparams, &ucp->worker));
}

static void th_ucp_ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    th_ucp_t *ucp = arg;

    th_log("endpoint %p error: %s", (void*)ep, ucs_status_string(status));
    ucp->ep_error = status;
}

void th_ucp_connect(th_ucp_t *ucp, th_oob_t *oob, int peer, int err_mode_peer)
{
    ucp_ep_params_t params = {0};
    ucp_address_t *address;
    size_t address_length;
    void *peer_address;

    TH_ASSERT_UCS_OK(ucp_worker_get_address(ucp->worker, &address,
                                            &address_length));
    th_oob_exchange(oob, peer, address, address_length, &peer_address, NULL);
    ucp_worker_release_address(ucp->worker, address);

    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address    = peer_address;
    if (err_mode_peer) {
        params.field_mask     |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb  = th_ucp_ep_error_cb;
        params.err_handler.arg = ucp;
    }
    TH_ASSERT_UCS_OK(ucp_ep_create(ucp->worker, &params, &ucp->ep));
    free(peer_address);
}

ucs_status_t th_ucp_wait(th_ucp_t *ucp, ucs_status_ptr_t request,
                         double timeout)
{
    double deadline = th_time() + timeout;
    ucs_status_t status;

    if (request == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }

    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        ucp_worker_progress(ucp->worker);
        if (th_time() > deadline) {
            TH_FAIL("UCP request %p did not complete in %.1f s", request,
                    timeout);
        }
    }
    ucp_request_free(request);
    return status;
}

void th_ucp_flush_barrier(th_ucp_t *ucp, th_oob_t *oob)
{
    ucp_request_param_t param = {0};
    int peer                  = 1 - th_oob_rank(oob);
    char token                = 'f';

    TH_ASSERT_EQ(th_oob_nprocs(oob), 2);
    if ((ucp->ep != NULL) && (ucp->ep_error == UCS_OK)) {
        TH_ASSERT_UCS_OK(th_ucp_wait(ucp, ucp_ep_flush_nbx(ucp->ep, &param),
                                     30.0));
    }
    /* the peer's flush may need this side's progress (RMA emulated by
     * active messages, as on tcp) */
    th_oob_send(oob, peer, &token, 1);
    th_ucp_oob_recv(ucp, oob, peer, &token, 1);
}

int th_ucp_send_until_error(th_ucp_t *ucp, const void *buf, size_t size,
                            ucp_tag_t tag, double timeout)
{
    ucp_request_param_t param = {0};
    double deadline           = th_time() + timeout;
    ucs_status_t status       = UCS_OK;
    int n                     = 0;

    while ((ucp->ep_error == UCS_OK) && (status == UCS_OK)) {
        status = th_ucp_wait(ucp, ucp_tag_send_nbx(ucp->ep, buf, size, tag,
                                                   &param), timeout);
        ++n;
        TH_ASSERT(th_time() < deadline);
    }
    th_log("dead peer detected after %d sends: request %s, ep error %s", n,
           ucs_status_string(status), ucs_status_string(ucp->ep_error));
    return n;
}

void th_ucp_oob_recv(th_ucp_t *ucp, th_oob_t *oob, int peer, void *buf,
                     size_t length)
{
    struct pollfd pfd = {.fd = th_oob_fd(oob, peer), .events = POLLIN};

    while (poll(&pfd, 1, 0) == 0) {
        ucp_worker_progress(ucp->worker);
    }
    th_oob_recv(oob, peer, buf, length);
}

void th_ucp_am_recv_data(th_ucp_t *ucp, void *data_desc, void *buf,
                         size_t length, ucp_am_recv_data_nbx_callback_t cb,
                         void *arg)
{
    ucp_request_param_t param = {0};
    void *req;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am   = cb;
    param.user_data    = arg;
    req = ucp_am_recv_data_nbx(ucp->worker, data_desc, buf, length, &param);
    if (UCS_PTR_IS_ERR(req)) {
        cb(NULL, UCS_PTR_STATUS(req), 0, arg);
    } else if (req == NULL) {
        cb(NULL, UCS_OK, length, arg);
    }
}

void th_ucp_cleanup(th_ucp_t *ucp)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t request;

    if (ucp->ep != NULL) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = (ucp->ep_error != UCS_OK) ?
                             UCP_EP_CLOSE_FLAG_FORCE : 0;
        request = ucp_ep_close_nbx(ucp->ep, &param);
        /* a peer that already left makes a graceful close fail: not an
         * error of the test */
        (void)th_ucp_wait(ucp, request, 30.0);
        ucp->ep = NULL;
    }
    if (ucp->worker != NULL) {
        ucp_worker_destroy(ucp->worker);
    }
    if (ucp->context != NULL) {
        ucp_cleanup(ucp->context);
    }
    memset(ucp, 0, sizeof(*ucp));
}

ucp_mem_h th_ucp_mem_map(th_ucp_t *ucp, void *address, size_t length)
{
    ucp_mem_map_params_t params = {0};
    ucp_mem_h memh;

    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address    = address;
    params.length     = length;
    TH_ASSERT_UCS_OK(ucp_mem_map(ucp->context, &params, &memh));
    return memh;
}

void th_ucp_send_rkey(th_ucp_t *ucp, th_oob_t *oob, int peer, ucp_mem_h memh,
                      void *address)
{
    uint64_t addr = (uintptr_t)address;
    void *rkey_buf;
    size_t rkey_size;
    uint64_t len;

    TH_ASSERT_UCS_OK(ucp_rkey_pack(ucp->context, memh, &rkey_buf,
                                   &rkey_size));
    len = rkey_size;
    th_oob_send(oob, peer, &addr, sizeof(addr));
    th_oob_send(oob, peer, &len, sizeof(len));
    th_oob_send(oob, peer, rkey_buf, rkey_size);
    ucp_rkey_buffer_release(rkey_buf);
}

void th_ucp_recv_rkey(th_ucp_t *ucp, th_oob_t *oob, int peer,
                      ucp_rkey_h *rkey_p, uint64_t *remote_addr_p)
{
    uint64_t len;
    void *buf;

    th_oob_recv(oob, peer, remote_addr_p, sizeof(*remote_addr_p));
    th_oob_recv(oob, peer, &len, sizeof(len));
    buf = malloc(len);
    TH_ASSERT(buf != NULL);
    th_oob_recv(oob, peer, buf, len);
    TH_ASSERT(ucp->ep != NULL);
    TH_ASSERT_UCS_OK(ucp_ep_rkey_unpack(ucp->ep, buf, rkey_p));
    free(buf);
}


static char *th_ucp_unused_buf;
static size_t th_ucp_unused_max;

static ucs_log_func_rc_t
th_ucp_unused_log(const char *file, unsigned line, const char *function,
                  ucs_log_level_t level,
                  const ucs_log_component_config_t *comp_conf,
                  const char *message, va_list ap)
{
    size_t len = strlen(th_ucp_unused_buf);
    va_list aq;

    if (strstr(message, "unused env") != NULL) {
        va_copy(aq, ap);
        vsnprintf(th_ucp_unused_buf + len, th_ucp_unused_max - len, message,
                  aq);
        va_end(aq);
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

void th_ucp_unused_vars(uint64_t features, char *buf, size_t max)
{
    th_ucp_t ucp;

    buf[0]             = '\0';
    th_ucp_unused_buf  = buf;
    th_ucp_unused_max  = max;
    ucs_log_push_handler(th_ucp_unused_log);
    th_ucp_init(&ucp, features);
    ucs_log_pop_handler();
    th_ucp_cleanup(&ucp);
}

void th_ucp_assert_var_used(uint64_t features, const char *name,
                            const char *value, const char *misspelt)
{
    const char *warn = getenv("UCX_WARN_UNUSED_ENV_VARS");
    char unused[1024];

    if ((warn != NULL) && (strchr("nN0", warn[0]) != NULL)) {
        TH_SKIP("UCX_WARN_UNUSED_ENV_VARS=%s: UCP reports no unused "
                "variables", warn);
    }

    /* set after UCX read its configuration (in the test runner), as a
     * program would before its first worker */
    setenv("UCX_TLS", "tcp", 1);
    setenv(name, value, 1);
    setenv(misspelt, value, 1);
    th_ucp_unused_vars(features, unused, sizeof(unused));
    th_log("%s", unused);
    TH_ASSERT(strstr(unused, misspelt) != NULL);
    TH_ASSERT(strstr(unused, name) == NULL);
}
