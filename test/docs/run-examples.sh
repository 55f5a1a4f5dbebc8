#!/usr/bin/env bash
# The installed example programs build with the command their own header
# gives, word for word, and run: the cc line of each file in
# <prefix>/share/ucx/examples (with P the prefix), then rvma_halo as its
# header shows on tcp (fewer steps), and ucp_tag_pair as a server and a
# client on tcp.
set -euo pipefail

P=${TH_PREFIX:?TH_PREFIX: the installation prefix}
examples=$P/share/ucx/examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for name in rvma_halo ucp_tag_pair; do
    src=$examples/$name.c
    [ -f "$src" ] || { echo "$src is not installed" >&2; exit 1; }
    # the header's "cc -o NAME NAME.c ..." line and its continuations
    cmd=$(awk -v n="$name" '
        $0 ~ "^ \\*   cc -o " n " " { on = 1 }
        on { line = $0; sub(/^ \* +/, "", line); cont = sub(/\\$/, "", line)
             printf "%s", line; if (!cont) exit }' "$src")
    [ -n "$cmd" ] || { echo "$src: no 'cc -o $name' line in its header" >&2
                       exit 1; }
    echo "$name: $cmd"
    (cd "$tmp" && cp "$src" . && P=$P bash -c "set -e; $cmd")
done

out=$(cd "$tmp" && UCX_TLS=tcp timeout 60 ./rvma_halo 3 20 2>&1)
echo "$out"
grep -q "^halo exchange: 3 ranks, 20 steps, .*: ok" <<< "$out"

port=$((20000 + RANDOM % 12000))  # below the ephemeral ports (32768-)
(cd "$tmp" && LD_LIBRARY_PATH=$P/lib UCX_TLS=tcp timeout 60 ./ucp_tag_pair -p "$port" -n 3 \
     > server.out 2>&1) &
spid=$!
out=$(cd "$tmp" && LD_LIBRARY_PATH=$P/lib UCX_TLS=tcp timeout 60 ./ucp_tag_pair -p "$port" -n 3 \
          localhost 2>&1)
wait "$spid"
echo "$out"; cat "$tmp/server.out"
grep -q "received 3 messages of 1048576 bytes, data as sent" "$tmp/server.out"
