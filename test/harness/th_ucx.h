/*
 * th fixtures for UCX: a UCP context/worker/endpoint per rank, and a UCT
 * md/iface/endpoint per rank, connected through the harness' oob channel.
 *
 * Transports and other UCX settings come from the environment, as for any
 * UCX program: a test sets e.g. UCX_TLS with setenv() before it creates the
 * fixture (each test and rank is its own process, so this never leaks).
 */
#ifndef TH_UCX_H_
#define TH_UCX_H_

#include "th.h"

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#define TH_ASSERT_UCS_OK(_expr) \
    do { \
        ucs_status_t _th_status = (_expr); \
        if (_th_status != UCS_OK) { \
            TH_FAIL("%s returned %s", #_expr, \
                    ucs_status_string(_th_status)); \
        } \
    } while (0)


/* ---- UCP ---------------------------------------------------------------- */

typedef struct th_ucp {
    ucp_context_h context;
    ucp_worker_h  worker;
    ucp_ep_h      ep;        /* to the peer given to th_ucp_connect() */
    ucs_status_t  ep_error;  /* set by the error handler, UCS_OK before */
} th_ucp_t;

/*
 * Create a context with the given features (UCP_FEATURE_*) and a worker.
 * UCX_* environment variables apply.
 */
void th_ucp_init(th_ucp_t *ucp, uint64_t features);

/*
 * Exchange worker addresses with a peer rank and create an endpoint to it.
 * With err_mode_peer the endpoint uses UCP_ERR_HANDLING_MODE_PEER and records
 * errors in ucp->ep_error.
 */
void th_ucp_connect(th_ucp_t *ucp, th_oob_t *oob, int peer, int err_mode_peer);

/*
 * Progress until a request from an nbx call completes; returns its status
 * (frees the request). Fails the test after timeout seconds.
 */
ucs_status_t th_ucp_wait(th_ucp_t *ucp, ucs_status_ptr_t request,
                         double timeout);

/*
 * Flush the endpoint, then meet the peer (two ranks), progressing until it
 * has flushed too: the way to end a test before th_ucp_cleanup(). A graceful
 * close flushes too, and a flush may need the peer's endpoint (an RC QP
 * confirms unsignaled sends with a request the peer's QP must answer); the
 * peer destroys that at its own close, so a close that flushes after the
 * peer's has waited for the transport's retry timeout (8 s on RC).
 */
void th_ucp_flush_barrier(th_ucp_t *ucp, th_oob_t *oob);

/*
 * th_oob_recv() that keeps progressing the worker while it waits: a peer's
 * emulated (active-message based) RMA needs this side's progress.
 */
void th_ucp_oob_recv(th_ucp_t *ucp, th_oob_t *oob, int peer, void *buf,
                     size_t length);

/*
 * Send tagged messages of size bytes until a send or the endpoint fails (a
 * dead peer), failing the test after timeout seconds; logs and returns the
 * number of sends.
 */
int th_ucp_send_until_error(th_ucp_t *ucp, const void *buf, size_t size,
                            ucp_tag_t tag, double timeout);

/*
 * Receive the data of a rendezvous active message into buf: cb(request,
 * status, length, arg) runs once when it is there, with a NULL request when
 * it completed at once, or with the error when the receive could not start.
 * The callback frees a non-NULL request.
 */
void th_ucp_am_recv_data(th_ucp_t *ucp, void *data_desc, void *buf,
                         size_t length, ucp_am_recv_data_nbx_callback_t cb,
                         void *arg);

/* Flush, close the endpoint and destroy worker and context */
void th_ucp_cleanup(th_ucp_t *ucp);

/*
 * Create a context with these features and a worker, keeping UCP's warnings
 * about unused UCX_* variables in buf, and clean up. Only the first worker
 * of a process warns.
 */
void th_ucp_unused_vars(uint64_t features, char *buf, size_t max);

/*
 * Set name=value and, misspelt, misspelt=value (with UCX_TLS=tcp), create a
 * worker: UCP must report the misspelt variable as unused, not the other.
 * Skips where UCX_WARN_UNUSED_ENV_VARS=n.
 */
void th_ucp_assert_var_used(uint64_t features, const char *name,
                            const char *value, const char *misspelt);

/* Map an existing buffer for RMA; fails the test on error */
ucp_mem_h th_ucp_mem_map(th_ucp_t *ucp, void *address, size_t length);

/* Pack a memory handle's rkey and send it to / receive it from a peer */
void th_ucp_send_rkey(th_ucp_t *ucp, th_oob_t *oob, int peer, ucp_mem_h memh,
                      void *address);
void th_ucp_recv_rkey(th_ucp_t *ucp, th_oob_t *oob, int peer,
                      ucp_rkey_h *rkey_p, uint64_t *remote_addr_p);


/* ---- UCT ---------------------------------------------------------------- */

typedef struct th_uct {
    ucs_async_context_t *async;
    uct_worker_h         worker;
    uct_component_h      component;
    uct_md_h             md;
    uct_md_attr_t        md_attr;
    uct_iface_h          iface;
    uct_iface_attr_t     iface_attr;
    char                 tl_name[UCT_TL_NAME_MAX];
    char                 dev_name[UCT_DEVICE_NAME_MAX];
} th_uct_t;

/*
 * Open the first device of transport tl_name (or the named device when
 * dev_name is not NULL). Returns UCS_ERR_NO_DEVICE when there is none, so
 * the caller can skip with a reason.
 */
ucs_status_t th_uct_open(th_uct_t *uct, const char *tl_name,
                         const char *dev_name);

/*
 * (Re)open the fixture's iface on its md and device, with an error handler
 * when err_handler is not NULL; closes the iface it had first.
 */
void th_uct_iface_open(th_uct_t *uct, uct_error_handler_t err_handler,
                       void *err_arg);

/*
 * Create an endpoint connected to the same transport in a peer rank
 * (to-ep or to-iface, whichever the transport supports).
 */
uct_ep_h th_uct_connect(th_uct_t *uct, th_oob_t *oob, int peer);

/* Progress until *flag becomes non-zero; fails after timeout seconds */
void th_uct_progress_until(th_uct_t *uct, volatile int *flag, double timeout);

/* th_oob_recv() that keeps progressing the UCT worker while it waits */
void th_uct_oob_recv(th_uct_t *uct, th_oob_t *oob, int peer, void *buf,
                     size_t length);

/* Flush an endpoint (NULL: the iface), waiting for completion */
void th_uct_flush(th_uct_t *uct, uct_ep_h ep);

void th_uct_close(th_uct_t *uct);

#endif
