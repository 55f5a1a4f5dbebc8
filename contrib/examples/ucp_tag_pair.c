/*
 * A small UCP program of the kind that already uses UCX: two processes
 * exchange worker addresses over a TCP socket, then the client sends
 * tagged messages, each from a buffer it allocates and fills for that
 * message, and the server receives each into a buffer of its own and
 * checks it. Nothing in it knows about ucx-hcr: the transport is chosen by
 * the environment (UCX_TLS), as for any UCX program.
 *
 * Installed in <prefix>/share/ucx/examples. With P the prefix (e.g.
 * build/install):
 *
 *   cc -o ucp_tag_pair ucp_tag_pair.c -I$P/include -L$P/lib -lucp -lucs
 *   ./ucp_tag_pair [-p PORT] [-s SIZE] [-n COUNT]          # server
 *   ./ucp_tag_pair [-p PORT] [-s SIZE] [-n COUNT] HOST     # client
 *
 * run as the README's "Using the build with an existing program" says.
 *
 * Defaults: port 13338, 1 MiB, 10 messages. Both sides print one line and
 * exit 0 when every byte arrived as sent.
 */
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TAG_DATA 0x7a6
#define TAG_DONE 0x7a7

static ucp_worker_h worker;

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "ucp_tag_pair: %s: %s\n", what, ucs_status_string(status));
    exit(1);
}

/* wait for a request of a *_nbx call */
static void wait_req(void *req, const char *what)
{
    ucs_status_t status;

    if (UCS_PTR_IS_ERR(req)) {
        die(what, UCS_PTR_STATUS(req));
    } else if (req == NULL) {
        return;
    }

    do {
        ucp_worker_progress(worker);
        status = ucp_request_check_status(req);
    } while (status == UCS_INPROGRESS);
    ucp_request_free(req);
    if (status != UCS_OK) {
        die(what, status);
    }
}

static void sock_io(int fd, void *buf, size_t len, int out)
{
    size_t done = 0;
    ssize_t n;

    while (done < len) {
        n = out ? write(fd, (char *)buf + done, len - done) :
                  read(fd, (char *)buf + done, len - done);
        if (n <= 0) {
            perror("ucp_tag_pair: socket");
            exit(1);
        }
        done += n;
    }
}

/*
 * Both sides are done: each tells the other over the socket and waits for
 * the other's word, progressing its worker meanwhile. A worker that stopped
 * progressing as soon as its own endpoint was closed could leave the peer's
 * close waiting for it forever (over tcp, a lane still connecting needs
 * both sides' progress to finish).
 */
static void sock_barrier(int fd, ucp_worker_h worker)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char byte         = 1;

    sock_io(fd, &byte, 1, 1);
    while (poll(&pfd, 1, 0) == 0) {
        ucp_worker_progress(worker);
    }
    sock_io(fd, &byte, 1, 0);
}

/* whether a connected socket's two ends are one and the same */
static int sock_is_self(int fd)
{
    struct sockaddr_in local, peer;
    socklen_t len = sizeof(local), plen = sizeof(peer);

    return (getsockname(fd, (struct sockaddr *)&local, &len) == 0) &&
           (getpeername(fd, (struct sockaddr *)&peer, &plen) == 0) &&
           (local.sin_port == peer.sin_port) &&
           (local.sin_addr.s_addr == peer.sin_addr.s_addr);
}

/* the server listens, the client connects: one socket for the addresses */
static int sock_connect(const char *host, int port)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct hostent *he;
    int fd, lfd, one = 1, tries;

    if (host != NULL) {
        he = gethostbyname(host);
        if (he == NULL) {
            fprintf(stderr, "ucp_tag_pair: unknown host %s\n", host);
            exit(1);
        }
        memcpy(&addr.sin_addr, he->h_addr_list[0], sizeof(addr.sin_addr));
        /* the server may not listen yet: try again with a new socket (one
         * whose connect failed is in no defined state), and never keep a
         * socket that connected to itself, which TCP allows when the port
         * asked for is the one it picked for the socket */
        for (tries = 0;; ++tries) {
            fd = socket(AF_INET, SOCK_STREAM, 0);
            if ((connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0) &&
                !sock_is_self(fd)) {
                return fd;
            }
            close(fd);
            if (tries == 50) {
                fprintf(stderr, "ucp_tag_pair: cannot connect to %s:%d\n", host,
                        port);
                exit(1);
            }
            usleep(100000);
        }
    }

    lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) || listen(lfd, 1)) {
        perror("ucp_tag_pair: listen");
        exit(1);
    }
    fd = accept(lfd, NULL, NULL);
    close(lfd);
    return fd;
}

static uint8_t pattern(size_t msg, size_t i)
{
    return (uint8_t)((msg * 131) + (i * 7) + (i >> 12));
}

int main(int argc, char **argv)
{
    ucp_params_t params         = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                                   .features   = UCP_FEATURE_TAG};
    ucp_worker_params_t wparams = {0};
    ucp_request_param_t rparam  = {0};
    size_t size = 1024 * 1024, count = 10, m, i, addr_len, peer_len;
    int port = 13338, fd, c, bad = 0;
    ucp_address_t *addr;
    ucp_ep_params_t eparams;
    ucs_status_t status;
    struct timespec t0, t1;
    const char *host;
    ucp_context_h context;
    void *peer, *req;
    ucp_ep_h ep;
    uint8_t *buf, done = 1;
    double sec;

    while ((c = getopt(argc, argv, "p:s:n:")) != -1) {
        switch (c) {
        case 'p':
            port = atoi(optarg);
            break;
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        case 'n':
            count = strtoul(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr,
                    "usage: %s [-p port] [-s size] [-n count] "
                    "[server-host]\n",
                    argv[0]);
            return 2;
        }
    }
    host = (optind < argc) ? argv[optind] : NULL;

    status = ucp_init(&params, NULL, &context);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }
    status = ucp_worker_create(context, &wparams, &worker);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }
    status = ucp_worker_get_address(worker, &addr, &addr_len);
    if (status != UCS_OK) {
        die("ucp_worker_get_address", status);
    }

    /* worker addresses over the socket, then an endpoint each way */
    fd = sock_connect(host, port);
    sock_io(fd, &addr_len, sizeof(addr_len), 1);
    sock_io(fd, addr, addr_len, 1);
    sock_io(fd, &peer_len, sizeof(peer_len), 0);
    peer = malloc(peer_len);
    sock_io(fd, peer, peer_len, 0);
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    status             = ucp_ep_create(worker, &eparams, &ep);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (m = 0; m < count; ++m) {
        /* a new buffer for every message, as an application's own data */
        buf = malloc(size);
        if (host != NULL) {
            for (i = 0; i < size; ++i) {
                buf[i] = pattern(m, i);
            }
            req = ucp_tag_send_nbx(ep, buf, size, TAG_DATA, &rparam);
            wait_req(req, "ucp_tag_send_nbx");
        } else {
            req = ucp_tag_recv_nbx(worker, buf, size, TAG_DATA, (ucp_tag_t)-1,
                                   &rparam);
            wait_req(req, "ucp_tag_recv_nbx");
            for (i = 0; i < size; ++i) {
                bad += (buf[i] != pattern(m, i));
            }
        }
        free(buf);
    }

    /* the server answers when it has all the data */
    if (host != NULL) {
        req = ucp_tag_recv_nbx(worker, &done, 1, TAG_DONE, (ucp_tag_t)-1,
                               &rparam);
    } else {
        req = ucp_tag_send_nbx(ep, &done, 1, TAG_DONE, &rparam);
    }
    wait_req(req, "done message");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sec = (t1.tv_sec - t0.tv_sec) + ((t1.tv_nsec - t0.tv_nsec) * 1e-9);

    if (host != NULL) {
        printf("ucp_tag_pair: sent %zu messages of %zu bytes in %.3f s "
               "(%.0f MB/s)\n",
               count, size, sec, count * size / sec / 1e6);
    } else {
        printf("ucp_tag_pair: received %zu messages of %zu bytes, %s\n", count,
               size, bad ? "DATA CORRUPTED" : "data as sent");
    }

    /* both sides close their endpoint, flushing what it still owes the
     * peer, before either worker goes */
    req = ucp_ep_close_nbx(ep, &rparam);
    if (!UCS_PTR_IS_ERR(req) && (req != NULL)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        ucp_request_free(req);
    }
    sock_barrier(fd, worker);
    close(fd);
    free(peer);
    ucp_worker_release_address(worker, addr);
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return bad ? 1 : 0;
}
