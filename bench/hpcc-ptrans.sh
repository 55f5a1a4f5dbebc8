#!/bin/bash
#
# HPCC's PTRANS (parallel matrix transpose) under Debian's Open MPI over this
# build, UCX_TLS=hcr against UCX_TLS=rc_v (rc_verbs, wired up by ud_verbs),
# interleaved, medians. PTRANS reports its first transposes, so it shows
# whatever a transport pays at its first large messages: the staged
# protocols used to register 12 MiB of staging inside the first one.
# Needs hpcc and openmpi-bin (contrib/install-deps.sh installs them).
#
# Usage: bench/hpcc-ptrans.sh [RUNS]   (default 5; N 1000, NB 80, 1 x 2)
#
set -eu
. "$(dirname "$0")/lib.sh"

runs=${1:-5}
command -v hpcc >/dev/null && command -v mpirun.openmpi >/dev/null || {
    echo "hpcc-ptrans: hpcc or Open MPI is not installed (hpcc, openmpi-bin)"
    exit 77
}
have_softverbs || { echo "hpcc-ptrans: softverbs is not installed"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the packaged example input on a 1 x 2 grid: N 1000, NB 80
sed -e 's/^2 .*Ps$/1            Ps/' \
    /usr/share/doc/hpcc/examples/_hpccinf.txt > "$tmp/hpccinf.txt"

# one HPCC run over a transport: prints PTRANS_GBs (empty on failure)
ptrans() {
    local tls=$1 dir
    dir=$(mktemp -d "$tmp/run.XXXXXX")
    cp "$tmp/hpccinf.txt" "$dir/"
    (cd "$dir" && LD_LIBRARY_PATH=$UCX_HCR_PREFIX/lib timeout 300 \
        mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 \
        --mca pml ucx --mca osc ucx --mca btl self \
        --mca pml_ucx_tls any --mca pml_ucx_devices any \
        -x LD_PRELOAD="$SOFTVERBS_LIB" -x SOFTVERBS_MEMLOCK_LIMIT=unlimited \
        -x LD_LIBRARY_PATH -x UCX_TLS="$tls" hpcc > hpcc.log 2>&1) || true
    sed -n 's/^PTRANS_GBs=//p' "$dir/hpccoutf.txt" 2>/dev/null | head -n 1
}

median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
        print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A vals
for tls in hcr rc_v; do vals[$tls]=""; done
for r in $(seq "$runs"); do
    # interleaved, the order alternating, so that a drift of the host hits
    # both alike
    if [ $((r % 2)) = 1 ]; then order="hcr rc_v"; else order="rc_v hcr"; fi
    for tls in $order; do
        v=$(ptrans "$tls")
        echo "run $r $tls: PTRANS ${v:-failed} GB/s"
        [ -z "$v" ] || vals[$tls]+="$v"$'\n'
    done
done

m_hcr=$(printf '%s' "${vals[hcr]}" | median)
m_rcv=$(printf '%s' "${vals[rc_v]}" | median)
printf 'PTRANS GB/s, median of %s: hcr %s, rc_v %s, hcr / rc_v %s\n' \
    "$runs" "$m_hcr" "$m_rcv" \
    "$(awk -v a="$m_hcr" -v b="$m_rcv" 'BEGIN { printf (b > 0) ? "%.3f" : "nan", a / b }')"
