/*
 * The interop suite: programs people run (Open MPI, MPICH, HPCC and UCX's
 * own client-server and hello-world examples) over this build's UCX, on
 * hcr, rc_v (rc_verbs + ud_verbs) and tcp, each checking its data. Every
 * cell is one run of run-interop.sh, bounded in time; a cell whose program
 * is not installed is skipped with the package to install. Each cell adds a
 * line to interop-results.txt, from which table.sh makes the README's table
 * of verified stacks.
 */
#include "th.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void interop_run(const char *cell, const char *tls, int np)
{
    char *out = NULL, *skip;
    int status;

    /* the verbs transports need a device: softverbs, preloaded by the
     * runner where it is installed */
    if (strcmp(tls, "tcp") && !th_have_verbs_device("")) {
        TH_SKIP("no verbs device for %s (softverbs is not preloaded)", tls);
    }

    status = th_run_cmd(&out,
                        "TH_PREFIX='%s' timeout -k 10 600 bash "
                        "'%s/test/interop/run-interop.sh' %s %s %d 2>&1",
                        th_prefix(), TH_SRCDIR, cell, tls, np);
    if (status == TH_EXIT_SKIP) {
        skip = strstr(out, "SKIP: ");
        TH_SKIP("%s", (skip != NULL) ? skip + 6 : "skipped");
    }
    if (status != 0) {
        th_log("%s", out);
        TH_FAIL("%s over %s, np %d: exit status %d", cell, tls, np, status);
    }
    free(out);
}

#define INTEROP_TEST(_name, _cell, _tls, _np)                                  \
    TH_TEST_TIMEOUT(interop, _name, 660)                                       \
    {                                                                          \
        interop_run(_cell, _tls, _np);                                         \
    }

INTEROP_TEST(ucp_client_server_hcr, "ucp-cs", "hcr", 2)
INTEROP_TEST(ucp_client_server_rc_v, "ucp-cs", "rc_v", 2)
INTEROP_TEST(ucp_client_server_tcp, "ucp-cs", "tcp", 2)
INTEROP_TEST(ucp_client_server_rdmacm_hcr, "ucp-cs-rdmacm", "hcr", 2)
INTEROP_TEST(ucp_client_server_rdmacm_rc_v, "ucp-cs-rdmacm", "rc_v", 2)
INTEROP_TEST(ucp_hello_world_hcr, "ucp-hello", "hcr", 2)
INTEROP_TEST(ucp_hello_world_rc_v, "ucp-hello", "rc_v", 2)
INTEROP_TEST(ucp_hello_world_tcp, "ucp-hello", "tcp", 2)
INTEROP_TEST(ompi_hcr_np2, "ompi", "hcr", 2)
INTEROP_TEST(ompi_rc_v_np2, "ompi", "rc_v", 2)
INTEROP_TEST(ompi_tcp_np2, "ompi", "tcp", 2)
INTEROP_TEST(ompi_hcr_np4, "ompi", "hcr", 4)
INTEROP_TEST(ompi_rc_v_np4, "ompi", "rc_v", 4)
INTEROP_TEST(ompi_tcp_np4, "ompi", "tcp", 4)
INTEROP_TEST(mpich_hcr_np2, "mpich", "hcr", 2)
INTEROP_TEST(mpich_rc_v_np2, "mpich", "rc_v", 2)
INTEROP_TEST(mpich_tcp_np2, "mpich", "tcp", 2)
INTEROP_TEST(mpich_hcr_np4, "mpich", "hcr", 4)
INTEROP_TEST(mpich_rc_v_np4, "mpich", "rc_v", 4)
INTEROP_TEST(mpich_tcp_np4, "mpich", "tcp", 4)
INTEROP_TEST(hpcc_ompi_hcr, "hpcc", "hcr", 2)
