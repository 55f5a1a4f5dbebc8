#!/usr/bin/env bash
# Print the README's table of verified stacks from the interop suite's
# results (test/interop-results.txt in the build tree after make check):
# one row per program and transport, with the process counts it ran with.
set -euo pipefail
results=${1:-build/test/interop-results.txt}
[ -f "$results" ] || { echo "no results in $results: run make -C build check" >&2; exit 1; }

echo "| program | version | transport | processes | checked | result |"
echo "|---|---|---|---|---|---|"
# later runs of a cell replace earlier ones
tac "$results" | awk -F';' '!seen[$1 FS $3 FS $4 FS $5]++' | tac |
awk -F';' '{
    key = $1 FS $2 FS $3
    if (!(key in res)) {
        order[++n] = key
        np[key] = ""; what[key] = ""; res[key] = "pass"
    }
    if (index(" " np[key] ",", " " $4 ",") == 0) {
        np[key] = (np[key] == "") ? $4 : np[key] ", " $4
    }
    if (index(what[key], $5) == 0) {
        what[key] = (what[key] == "") ? $5 : what[key] "; " $5
    }
    if ($6 == "FAIL") { res[key] = "FAIL" }
    else if ($6 ~ /hung/ && res[key] != "FAIL") {
        res[key] = "pass (data checked; MPI_Finalize hung, see below)"
    }
}
END {
    for (i = 1; i <= n; ++i) {
        split(order[i], k, FS)
        printf "| %s | %s | %s | %s | %s | %s |\n", k[1], k[2], k[3], np[order[i]], what[order[i]], res[order[i]]
    }
}'
