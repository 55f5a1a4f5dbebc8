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
    if (!(key in np)) { order[++n] = key }
    np[key] = (key in np) ? np[key] ", " $4 : $4
    what[key] = (key in what && index(what[key], $5) == 0) ? what[key] " + " $5 : (key in what ? what[key] : $5)
    if (res[key] == "FAIL" || $6 == "FAIL") { res[key] = "FAIL" }
    else if (res[key] ~ /hung/ || $6 ~ /hung/) { res[key] = "pass (data checked; MPI_Finalize hung, see below)" }
    else { res[key] = "pass" }
}
END {
    for (i = 1; i <= n; ++i) {
        split(order[i], k, FS)
        printf "| %s | %s | %s | %s | %s | %s |\n", k[1], k[2], k[3], np[order[i]], what[order[i]], res[order[i]]
    }
}'
