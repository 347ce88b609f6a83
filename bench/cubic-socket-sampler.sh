#!/bin/sh
# Samples the CUBIC competitor's sending socket while `BENCH_ONLY=wan` runs (root): every 0.25 s,
# `ss -tin` in the lab's host 0 namespace (the iperf3 server, which sends with -R). One line per
# CUBIC socket per sample: unix time, local port (one competitor per round), send queue, cwnd,
# rtt (smoothed/variance, ms), bytes retransmitted, bytes acknowledged. Stops by itself after
# SECONDS (default 600).
#
#   bench/cubic-socket-sampler.sh 600 > /tmp/cubic.txt &
#   WAN_ONLY=home10 WAN_MODES=nothing,replication WAN_ROUNDS=4 BENCH_ONLY=wan .build/release/MeshBench
#
# A round's 8 s alone are 4–12 s after its socket's first sample; its fetch starts about 12 s in.
end=$(( $(date +%s) + ${1:-600} ))
while [ "$(date +%s)" -lt "$end" ]; do
  ns=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^gm.*h0$' | head -1)
  if [ -n "$ns" ]; then
    ip netns exec "$ns" ss -tin 2>/dev/null | tr '\n' ' ' | sed 's/ESTAB/\nESTAB/g' | grep -E " cubic " | \
      awk -v t="$(date +%s.%N)" '{n = split($4, a, ":"); c = ""; r = ""; rt = ""; ac = "";
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^cwnd:/) c = $i; if ($i ~ /^rtt:/) r = $i
          if ($i ~ /^bytes_retrans:/) rt = $i; if ($i ~ /^bytes_acked:/) ac = $i
        }
        print t, a[n], $3, c, r, rt, ac}'
  fi
  sleep 0.25
done
