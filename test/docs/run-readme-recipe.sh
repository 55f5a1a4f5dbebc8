#!/usr/bin/env bash
# Runs the README's "Using the build with an existing program" recipe as a
# user would: the lines of its first code block, word for word, with
# `my_ucx_program ...` replaced by contrib/examples/ucp_tag_pair (a server
# and a client on this host), in an environment without the test runner's
# own additions (LD_PRELOAD, SOFTVERBS_MEMLOCK_LIMIT).
#
#   run-readme-recipe.sh TLS       (the recipe line that sets UCX_TLS=TLS)
#
# Exit 0 when both processes end and say the data arrived as sent, 77 (skip)
# when the host cannot run the verbs line as the README says it should not
# (no CAP_IPC_LOCK and a memlock limit below what a verbs interface pins).
set -euo pipefail

tls=$1
top=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${TH_PREFIX:-$top/build/install}
readme=$top/README.md

# the first code block after the section's heading
block=$(awk '/^## Using the build with an existing program/ { s = 1; next }
             s && /^```/ { if (c) exit; c = 1; next }
             c { print }' "$readme")
line=$(grep -E "UCX_TLS=$tls +my_ucx_program \.\.\.\$" <<< "$block") || {
    echo "README.md: no line running my_ucx_program with UCX_TLS=$tls in" \
         "\"Using the build with an existing program\":" >&2
    echo "$block" >&2
    exit 1
}
setp=$(grep -E '^P=' <<< "$block") || {
    echo "README.md: the recipe does not set P" >&2
    exit 1
}
echo "recipe: $setp"
echo "recipe: $line"

if [[ $line == *libsoftverbs.so* ]]; then
    # CAP_IPC_LOCK is bit 14 of the effective capabilities
    capeff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
    if (( (16#$capeff >> 14 & 1) == 0 )) &&
       [ "$(ulimit -l)" != unlimited ] && [ "$(ulimit -l)" -lt 131072 ]; then
        echo "SKIP: no CAP_IPC_LOCK and ulimit -l $(ulimit -l) KiB: the" \
             "README says to raise it or set SOFTVERBS_MEMLOCK_LIMIT"
        exit 77
    fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -o "$tmp/ucp_tag_pair" "$top/contrib/examples/ucp_tag_pair.c" \
    -I"$prefix/include" -L"$prefix/lib" -lucp -lucs

port=$((20000 + RANDOM % 12000))  # below the ephemeral ports (32768-)
run_side() { # run_side OUT ARGS...: the recipe's line with our program
    local out=$1
    shift
    # the block's P line in the repository's root, then the line itself;
    # $PWD/build/install is the prefix unless the build was configured
    # with another one
    (cd "$top" && env -u LD_PRELOAD -u SOFTVERBS_MEMLOCK_LIMIT \
        PREFIX_OVERRIDE="$prefix" bash -c "
            set -e
            $setp
            [ -d \"\$P/lib\" ] || P=\$PREFIX_OVERRIDE
            ${line%my_ucx_program ...} timeout 60 $tmp/ucp_tag_pair $*
        ") > "$out" 2>&1
}

run_side "$tmp/server" -p "$port" -n 4 &
spid=$!
run_side "$tmp/client" -p "$port" -n 4 localhost && crc=0 || crc=$?
wait "$spid" && src=0 || src=$?
echo "server (exit $src):"; cat "$tmp/server"
echo "client (exit $crc):"; cat "$tmp/client"
[ "$src" = 0 ] && [ "$crc" = 0 ] &&
    grep -q "received 4 messages of 1048576 bytes, data as sent" "$tmp/server" &&
    grep -q "sent 4 messages" "$tmp/client"
