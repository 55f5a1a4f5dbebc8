#!/usr/bin/env bash
# Two test hosts on one machine for softverbs' network data path: network
# namespaces <prefix>a and <prefix>b joined by a veth pair, addresses
# 10.77.0.1/16 and 10.77.0.2/16 (softverbs LIDs 1 and 2). Traffic stays
# between those two addresses. Needs root (CAP_NET_ADMIN).
#
#   softverbs-netns.sh up                 create (idempotent)
#   softverbs-netns.sh down               delete
#   softverbs-netns.sh run a|b CMD...     run CMD in host a or b, with
#                                         SOFTVERBS_NET set to its address
#   softverbs-netns.sh addr a|b           print the host's address
#   softverbs-netns.sh hosts              print TH_HOSTS for the test harness
#                                         (rank r runs on host r mod 2)
#   softverbs-netns.sh link down|up       cut or restore the link
#   softverbs-netns.sh rate GBIT|off      link model: cap both ends at GBIT
#                                         Gb/s (tc tbf; this kernel has no
#                                         netem)
#
# SV_NETNS_PREFIX (default svh-) names the namespaces and the veth ends, so
# that concurrent users (tests, benchmarks) do not collide.
set -euo pipefail

P=${SV_NETNS_PREFIX:-svh-}
NS_A=${P}a
NS_B=${P}b
IF_A=${P}va
IF_B=${P}vb
ADDR_A=10.77.0.1
ADDR_B=10.77.0.2

ns_of()   { case "$1" in a) echo "$NS_A";; b) echo "$NS_B";; *) exit 2;; esac; }
if_of()   { case "$1" in a) echo "$IF_A";; b) echo "$IF_B";; *) exit 2;; esac; }
addr_of() { case "$1" in a) echo "$ADDR_A";; b) echo "$ADDR_B";; *) exit 2;; esac; }

up() {
    if ip netns list | grep -qw "$NS_A" && ip netns list | grep -qw "$NS_B"; then
        return 0
    fi
    down 2>/dev/null || true
    ip netns add "$NS_A"
    ip netns add "$NS_B"
    ip link add "$IF_A" type veth peer name "$IF_B"
    ip link set "$IF_A" netns "$NS_A"
    ip link set "$IF_B" netns "$NS_B"
    local h
    for h in a b; do
        ip -n "$(ns_of $h)" addr add "$(addr_of $h)/16" dev "$(if_of $h)"
        ip -n "$(ns_of $h)" link set "$(if_of $h)" mtu 65520 up
        ip -n "$(ns_of $h)" link set lo up
    done
}

down() {
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
}

case "${1:-}" in
up)   up ;;
down) down ;;
addr) addr_of "$2" ;;
hosts) echo "$NS_A=$ADDR_A,$NS_B=$ADDR_B" ;;
run)
    h=$2
    shift 2
    exec ip netns exec "$(ns_of "$h")" env SOFTVERBS_NET="$(addr_of "$h")" "$@"
    ;;
link)
    for h in a b; do
        ip -n "$(ns_of $h)" link set "$(if_of $h)" "$2"
    done
    ;;
rate)
    for h in a b; do
        tc -n "$(ns_of $h)" qdisc del dev "$(if_of $h)" root 2>/dev/null || true
        if [ "$2" != off ]; then
            tc -n "$(ns_of $h)" qdisc add dev "$(if_of $h)" root tbf \
                rate "${2}gbit" burst 1mb latency 10ms
        fi
    done
    ;;
*)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
