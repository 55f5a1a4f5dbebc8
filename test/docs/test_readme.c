/*
 * The README's recipe for running an existing program on this build works
 * as written: run-readme-recipe.sh runs its lines word for word with a
 * small UCP program (contrib/examples/ucp_tag_pair.c) as server and client,
 * without the environment this runner adds.
 */
#include "th.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void readme_recipe(const char *tls)
{
    char *out = NULL, *skip, lib[1024];
    int status;

    snprintf(lib, sizeof(lib), "%s/lib/libsoftverbs.so", th_prefix());
    if (strcmp(tls, "tcp") && (access(lib, R_OK) != 0)) {
        TH_SKIP("softverbs is not installed (%s)", lib);
    }

    status = th_run_cmd(&out,
                        "TH_PREFIX='%s' timeout -k 10 200 bash "
                        "'%s/test/docs/run-readme-recipe.sh' %s 2>&1",
                        th_prefix(), TH_SRCDIR, tls);
    th_log("%s", out);
    if (status == TH_EXIT_SKIP) {
        skip = strstr(out, "SKIP: ");
        TH_SKIP("%s", (skip != NULL) ? skip + 6 : "skipped");
    }
    TH_ASSERT_EQ(status, 0);
    free(out);
}

TH_TEST_TIMEOUT(readme, recipe_hcr, 150)
{
    readme_recipe("hcr");
}

TH_TEST_TIMEOUT(readme, recipe_tcp, 150)
{
    readme_recipe("tcp");
}

/* the installed examples build with their header's own command and run;
 * the bound is the script's own bounds added up (two compilations, then
 * 60 s for each example), which a loaded host may use */
TH_TEST_TIMEOUT(readme, examples_build_and_run, 240)
{
    char *out = NULL;
    int status;

    status = th_run_cmd(&out,
                        "TH_PREFIX='%s' timeout -k 10 200 bash "
                        "'%s/test/docs/run-examples.sh' 2>&1",
                        th_prefix(), TH_SRCDIR);
    th_log("%s", out);
    TH_ASSERT_EQ(status, 0);
    free(out);
}
