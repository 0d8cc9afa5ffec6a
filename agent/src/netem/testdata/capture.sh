#!/usr/bin/env bash
# Captures the RTM_NEWQDISC requests iproute2's `tc` sends for netem, as test vectors.
#
# Run as root (needs `ip`, `tc`, `strace`). Works on a kernel without sch_netem: tc's request
# is captured before the kernel answers "unknown qdisc kind". Everything happens on `lo` of a
# throwaway network namespace, which is deleted afterwards.
#
# Output (stdout): one line per request, tab separated:
#   name  verb  tc-netem-arguments  hex-of-the-whole-netlink-message
# with nlmsg_seq, nlmsg_pid and tcm_ifindex zeroed, so the bytes do not depend on the run.
set -euo pipefail

ns="continuum-capture-$$"
ip netns add "$ns"
trap 'ip netns del "$ns"' EXIT

cases=(
  "delay|delay 10ms"
  "delay_jitter|delay 10ms 2ms"
  "loss|loss 1%"
  "delay_loss|delay 10ms loss 1%"
  "delay_jitter_loss|delay 10ms 2ms loss 1%"
  "rate|rate 1mbit"
  "rate64|rate 40gbit"
  "limit|limit 500"
  "edge_side|delay 1.25ms 0.25ms loss 0.02%"
  "cloud_side|delay 3.125ms 0.625ms loss 0.05%"
  "loss10|loss 10%"
  "all|delay 5ms 1ms loss 0.5% rate 10mbit limit 2000"
  "gemodel|loss gemodel 5% 50% 100% 0%"
  "edge_gemodel|delay 1.25ms 0.25ms loss gemodel 1% 25% 70% 0.1%"
  "gemodel_rate|delay 5ms loss gemodel 2% 40% 100% 0% rate 10mbit limit 2000"
  "gemodel_half|loss gemodel 50% 50% 50% 0%"
  "gemodel_tenth|loss gemodel 10% 10% 10% 0%"
)

echo "# iproute2: $(tc -V | head -1); /proc/net/psched: $(cat /proc/net/psched)"
echo "# name	verb	netem arguments	request (seq, pid, ifindex zeroed)"
for entry in "${cases[@]}"; do
  name=${entry%%|*}
  args=${entry#*|}
  for verb in add replace; do
    # -e write=3 dumps every byte given to fd 3 (the netlink socket) by sendmsg.
    # shellcheck disable=SC2086
    # tc fails (exit 2) where the kernel lacks netem; the request is sent all the same.
    trace=$(ip netns exec "$ns" strace -qq -e trace=sendmsg -e write=3 \
              tc qdisc "$verb" dev lo root netem $args 2>&1 >/dev/null || true)
    hex=$(awk '/^ \| [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]  / {
                 for (i = 3; i <= 18 && i <= NF; i++) if ($i ~ /^[0-9a-f][0-9a-f]$/) printf "%s", $i
               }' <<<"$trace")
    if [ -z "$hex" ]; then
      echo "no request captured for: tc qdisc $verb dev lo root netem $args" >&2
      exit 1
    fi
    # nlmsghdr: len(0-3) type(4-5) flags(6-7) seq(8-11) pid(12-15); tcmsg: ifindex at 20-23.
    hex="${hex:0:16}0000000000000000${hex:32:8}00000000${hex:48}"
    printf '%s\t%s\t%s\t%s\n' "$name" "$verb" "$args" "$hex"
  done
done
