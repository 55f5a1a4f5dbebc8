/*
 * The first staged message of a fresh worker against its later ones: does
 * the first message pay for the staging memory (registering and faulting in
 * its slots)? Two processes on this host (fork + socketpair), a fresh pair
 * per run. The sender sends -m messages of -s bytes, each from and into
 * buffers mapped fresh for it, and the receiver answers each with 1 byte.
 * Prints the first message's time and the median of the others, in us.
 * A 1-byte message goes first, so that the endpoint is wired up (a
 * connection's own cost is not the staging's).
 *
 *   sppln-first-message [-s size] [-m messages]
 */
#include "ucp_pair.h"

static double one(int sender, void *buf, size_t size)
{
    ucp_request_param_t param = {0};
    char ack                  = 0;
    double t0                 = now();

    if (sender) {
        wait_req(ucp_tag_send_nbx(ep, buf, size, 1, &param));
        wait_req(ucp_tag_recv_nbx(worker, &ack, 1, 2, (ucp_tag_t)-1, &param));
    } else {
        wait_req(ucp_tag_recv_nbx(worker, buf, size, 1, (ucp_tag_t)-1, &param));
        wait_req(ucp_tag_send_nbx(ep, &ack, 1, 2, &param));
    }
    return now() - t0;
}

int main(int argc, char **argv)
{
    size_t size = 1024 * 1024;
    int n       = 10, c, i, parent;
    double t[64], first;
    void *buf;
    pid_t pid;

    while ((c = getopt(argc, argv, "s:m:")) != -1) {
        switch (c) {
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        case 'm':
            n = atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: %s [-s size] [-m messages]\n", argv[0]);
            return 2;
        }
    }
    n = (n < 2) ? 2 : (n > 64) ? 64 : n;

    parent = pair_start(&pid);
    buf    = map(1);
    one(parent, buf, 1);
    munmap(buf, 1);
    for (i = 0; i < n; ++i) {
        buf = map(size);
        if (parent) {
            memset(buf, i, size); /* the application wrote its data */
        }
        t[i] = one(parent, buf, size);
        munmap(buf, size);
    }

    if (parent) {
        first = t[0];
        printf("%zu %.1f %.1f\n", size, first * 1e6,
               median(t + 1, n - 1) * 1e6);
    }
    return pair_end(parent, pid);
}
