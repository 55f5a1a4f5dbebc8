/*
 * th UCT fixture: md, worker, iface and an endpoint to one peer rank.
 */
#include "th_ucx.h"

#include <alloca.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

void th_uct_iface_open(th_uct_t *uct, uct_error_handler_t err_handler,
                       void *err_arg)
{
    uct_iface_params_t params = {0};
    uct_iface_config_t *iface_config;
    ucs_status_t status;

    if (uct->iface != NULL) {
        uct_iface_close(uct->iface);
        uct->iface = NULL;
    }

    TH_ASSERT_UCS_OK(uct_md_iface_config_read(uct->md, uct->tl_name, NULL,
                                              NULL, &iface_config));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_STATS_ROOT |
                                  UCT_IFACE_PARAM_FIELD_RX_HEADROOM |
                                  UCT_IFACE_PARAM_FIELD_CPU_MASK;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = uct->tl_name;
    params.mode.device.dev_name = uct->dev_name;
    params.stats_root           = NULL;
    params.rx_headroom          = 0;
    UCS_CPU_ZERO(&params.cpu_mask);
    if (err_handler != NULL) {
        params.field_mask       |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler       = err_handler;
        params.err_handler_arg   = err_arg;
        params.err_handler_flags = 0;
    }

    status = uct_iface_open(uct->md, uct->worker, &params, iface_config,
                            &uct->iface);
    uct_config_release(iface_config);
    if (status != UCS_OK) {
        TH_FAIL("uct_iface_open(%s/%s) failed: %s", uct->tl_name,
                uct->dev_name, ucs_status_string(status));
    }
    TH_ASSERT_UCS_OK(uct_iface_query(uct->iface, &uct->iface_attr));
    uct_iface_progress_enable(uct->iface,
                              UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

static ucs_status_t th_uct_open_iface(th_uct_t *uct, uct_component_h comp,
                                      const char *md_name)
{
    uct_md_config_t *md_config;
    ucs_status_t status;

    TH_ASSERT_UCS_OK(uct_md_config_read(comp, NULL, NULL, &md_config));
    status = uct_md_open(comp, md_name, md_config, &uct->md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        return status;
    }
    TH_ASSERT_UCS_OK(uct_md_query(uct->md, &uct->md_attr));
    th_uct_iface_open(uct, NULL, NULL);
    return UCS_OK;
}

ucs_status_t th_uct_open(th_uct_t *uct, const char *tl_name,
                         const char *dev_name)
{
    uct_component_attr_t comp_attr;
    uct_tl_resource_desc_t *tls;
    uct_component_h *comps;
    unsigned num_comps, c, m, t, num_tls;
    uct_md_config_t *md_config;
    uct_md_h md;

    memset(uct, 0, sizeof(*uct));
    TH_ASSERT_UCS_OK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                              &uct->async));
    TH_ASSERT_UCS_OK(uct_worker_create(uct->async, UCS_THREAD_MODE_SINGLE,
                                       &uct->worker));
    TH_ASSERT_UCS_OK(uct_query_components(&comps, &num_comps));

    for (c = 0; c < num_comps; ++c) {
        comp_attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                               UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        TH_ASSERT_UCS_OK(uct_component_query(comps[c], &comp_attr));
        comp_attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        comp_attr.md_resources = alloca(sizeof(*comp_attr.md_resources) *
                                        comp_attr.md_resource_count);
        TH_ASSERT_UCS_OK(uct_component_query(comps[c], &comp_attr));

        for (m = 0; m < comp_attr.md_resource_count; ++m) {
            const char *md_name = comp_attr.md_resources[m].md_name;

            TH_ASSERT_UCS_OK(uct_md_config_read(comps[c], NULL, NULL,
                                                &md_config));
            if (uct_md_open(comps[c], md_name, md_config, &md) != UCS_OK) {
                uct_config_release(md_config);
                continue;
            }
            uct_config_release(md_config);
            TH_ASSERT_UCS_OK(uct_md_query_tl_resources(md, &tls, &num_tls));
            for (t = 0; t < num_tls; ++t) {
                if (strcmp(tls[t].tl_name, tl_name) ||
                    ((dev_name != NULL) &&
                     strcmp(tls[t].dev_name, dev_name))) {
                    continue;
                }
                snprintf(uct->tl_name, sizeof(uct->tl_name), "%s",
                         tls[t].tl_name);
                snprintf(uct->dev_name, sizeof(uct->dev_name), "%s",
                         tls[t].dev_name);
                uct_release_tl_resource_list(tls);
                uct_md_close(md);
                uct->component = comps[c];
                uct_release_component_list(comps);
                return th_uct_open_iface(uct, uct->component, md_name);
            }
            uct_release_tl_resource_list(tls);
            uct_md_close(md);
        }
    }

    uct_release_component_list(comps);
    uct_worker_destroy(uct->worker);
    ucs_async_context_destroy(uct->async);
    memset(uct, 0, sizeof(*uct));
    return UCS_ERR_NO_DEVICE;
}

/* Address blob sent to the peer: three lengths, then the addresses */
typedef struct {
    uint32_t dev_len;
    uint32_t iface_len;
    uint32_t ep_len;
} th_uct_addr_hdr_t;

uct_ep_h th_uct_connect(th_uct_t *uct, th_oob_t *oob, int peer)
{
    int to_ep = !!(uct->iface_attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP);
    uct_ep_params_t params = {0};
    th_uct_addr_hdr_t hdr, *peer_hdr;
    char *blob, *peer_blob, *p;
    uct_ep_h ep = NULL;
    size_t blob_len;

    hdr.dev_len   = uct->iface_attr.device_addr_len;
    hdr.iface_len = to_ep ? 0 : uct->iface_attr.iface_addr_len;
    hdr.ep_len    = to_ep ? uct->iface_attr.ep_addr_len : 0;
    blob_len      = sizeof(hdr) + hdr.dev_len + hdr.iface_len + hdr.ep_len;
    blob          = calloc(1, blob_len);
    TH_ASSERT(blob != NULL);
    memcpy(blob, &hdr, sizeof(hdr));
    p = blob + sizeof(hdr);

    TH_ASSERT_UCS_OK(uct_iface_get_device_address(uct->iface,
                                                  (uct_device_addr_t*)p));
    p += hdr.dev_len;
    if (to_ep) {
        params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
        params.iface      = uct->iface;
        TH_ASSERT_UCS_OK(uct_ep_create(&params, &ep));
        TH_ASSERT_UCS_OK(uct_ep_get_address(ep, (uct_ep_addr_t*)p));
    } else {
        TH_ASSERT(uct->iface_attr.cap.flags &
                  UCT_IFACE_FLAG_CONNECT_TO_IFACE);
        TH_ASSERT_UCS_OK(uct_iface_get_address(uct->iface,
                                               (uct_iface_addr_t*)p));
    }

    th_oob_exchange(oob, peer, blob, blob_len, (void**)&peer_blob, NULL);
    peer_hdr = (th_uct_addr_hdr_t*)peer_blob;
    p        = peer_blob + sizeof(*peer_hdr);

    if (to_ep) {
        TH_ASSERT_UCS_OK(uct_ep_connect_to_ep(
                ep, (uct_device_addr_t*)p,
                (uct_ep_addr_t*)(p + peer_hdr->dev_len)));
    } else {
        params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                            UCT_EP_PARAM_FIELD_DEV_ADDR |
                            UCT_EP_PARAM_FIELD_IFACE_ADDR;
        params.iface      = uct->iface;
        params.dev_addr   = (uct_device_addr_t*)p;
        params.iface_addr = (uct_iface_addr_t*)(p + peer_hdr->dev_len);
        TH_ASSERT_UCS_OK(uct_ep_create(&params, &ep));
    }

    free(blob);
    free(peer_blob);
    return ep;
}

void th_uct_progress_until(th_uct_t *uct, volatile int *flag, double timeout)
{
    double deadline = th_time() + timeout;

    while (!*flag) {
        uct_worker_progress(uct->worker);
        if (th_time() > deadline) {
            TH_FAIL("%s/%s: condition not reached in %.1f s", uct->tl_name,
                    uct->dev_name, timeout);
        }
    }
}

void th_uct_oob_recv(th_uct_t *uct, th_oob_t *oob, int peer, void *buf,
                     size_t length)
{
    struct pollfd pfd = {.fd = th_oob_fd(oob, peer), .events = POLLIN};

    while (poll(&pfd, 1, 0) == 0) {
        uct_worker_progress(uct->worker);
    }
    th_oob_recv(oob, peer, buf, length);
}

static void th_uct_flush_comp(uct_completion_t *self)
{
}

void th_uct_flush(th_uct_t *uct, uct_ep_h ep)
{
    uct_completion_t comp = {.func = th_uct_flush_comp, .count = 1,
                             .status = UCS_OK};
    double deadline       = th_time() + 30.0;
    ucs_status_t status;

    do {
        status = (ep != NULL) ? uct_ep_flush(ep, 0, &comp) :
                                uct_iface_flush(uct->iface, 0, &comp);
        uct_worker_progress(uct->worker);
        TH_ASSERT(th_time() < deadline);
    } while (status == UCS_ERR_NO_RESOURCE);

    if (status == UCS_INPROGRESS) {
        while (comp.count > 0) {
            uct_worker_progress(uct->worker);
            TH_ASSERT(th_time() < deadline);
        }
        status = comp.status;
    }
    TH_ASSERT_UCS_OK(status);
}

void th_uct_close(th_uct_t *uct)
{
    if (uct->iface != NULL) {
        uct_iface_close(uct->iface);
    }
    if (uct->md != NULL) {
        uct_md_close(uct->md);
    }
    if (uct->worker != NULL) {
        uct_worker_destroy(uct->worker);
    }
    if (uct->async != NULL) {
        ucs_async_context_destroy(uct->async);
    }
    memset(uct, 0, sizeof(*uct));
}
