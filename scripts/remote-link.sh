#!/usr/bin/env bash
# A "remote host" on this machine: network namespace NAME joined to this one by a veth pair,
# 10.77.N.1 here and 10.77.N.2 there, each end shaped to RATE by htb (this kernel has no netem:
# latency comes from scripts/delay-relay.py). Root only. No traffic leaves the machine.
#
#   scripts/remote-link.sh up NAME N RATE      e.g. up sheaf-db 77 1gbit
#   scripts/remote-link.sh down NAME N
# The veth ends are shf<N>h (here) and shf<N>r (there).
set -euo pipefail
cmd=$1 name=$2 n=$3
h=shf${n}h r=shf${n}r
case $cmd in
  up)
    rate=$4
    ip netns add "$name"
    ip link add "$h" type veth peer name "$r"
    ip link set "$r" netns "$name"
    ip addr add "10.77.$n.1/24" dev "$h"
    ip link set "$h" up
    # While this end is down (a test cuts the link), its connected route goes with it: the
    # unreachable route behind it keeps 10.77.N.0/24 from following the default route off the
    # machine, and a new connection fails here at once (EHOSTUNREACH).
    ip route replace unreachable "10.77.$n.0/24" metric 4000
    ip netns exec "$name" ip addr add "10.77.$n.2/24" dev "$r"
    ip netns exec "$name" ip link set "$r" up
    ip netns exec "$name" ip link set lo up
    for side in "" "ip netns exec $name"; do
      dev=$([ -z "$side" ] && echo "$h" || echo "$r")
      $side tc qdisc add dev "$dev" root handle 1: htb default 10
      $side tc class add dev "$dev" parent 1: classid 1:10 htb rate "$rate" ceil "$rate" quantum 60000
    done
    ;;
  down)
    ip netns del "$name" 2>/dev/null || true
    ip link del "$h" 2>/dev/null || true
    ip route del unreachable "10.77.$n.0/24" metric 4000 2>/dev/null || true
    ;;
  *) echo "usage: $0 up NAME N RATE | down NAME N" >&2; exit 2 ;;
esac
