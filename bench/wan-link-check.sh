#!/usr/bin/env bash
# Checks the WAN link emulator (tools/wanlink + tc tbf, as Sources/MeshTestKit/WANLink.swift sets
# it up) against real tools: ping for the delay, iperf3 for the rate cap, and the emulator's own
# count for the loss. Two hosts of our own (network namespaces on a bridge); host 1 is behind the
# emulated link, host 0 is not. TCP is CUBIC unless a row says BBR (this kernel's default is BBR,
# which ignores random loss; CUBIC is the loss-based competitor the bench measures against). Needs root, iproute2, iptables, iperf3, ping, a C compiler and
# libnetfilter-queue-dev (`make deps` installs them as root); prints why and exits 0 otherwise.
#
#   bench/wan-link-check.sh            # every profile, ~2 min
#   SECONDS_PER_RUN=4 bench/wan-link-check.sh
#   ONLY=home10 bench/wan-link-check.sh          # one profile (fiftyMs fiftyMsLossy home50 home10), no baselines
#   WANLINK_BIN=/tmp/old-wanlink bench/wan-link-check.sh   # another build of the emulator
#
# Every namespace, rule and process it makes is removed on exit, also when interrupted.
set -euo pipefail

RUN=${SECONDS_PER_RUN:-8}
ONLY=${ONLY:-}
HERE=$(cd "$(dirname "$0")/.." && pwd)

skip() { echo "wan-link-check: skipped: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, iptables, tc)"
for tool in ip tc iptables iperf3 ping cc pkg-config; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool is missing (make deps installs it as root)"
done
pkg-config --exists libnetfilter_queue || skip "libnetfilter-queue-dev is missing (make deps installs it as root)"

WORK=$(mktemp -d /tmp/wan-link-check.XXXXXX)
if [ -n "${WANLINK_BIN:-}" ]; then
    WANLINK=$WANLINK_BIN      # a binary given (e.g. an older version, to compare)
else
    WANLINK=$WORK/wanlink
    make -s -C "$HERE/tools/wanlink" OUT="$WANLINK" >/dev/null || skip "tools/wanlink did not build"
fi

TAG=wl$(printf '%04x' $((RANDOM % 65536)))
BR=${TAG}br H0=${TAG}h0 H1=${TAG}h1
PORT1=${TAG}p1 IFB1=${TAG}i1      # host 1's port on the bridge, and the uplink's shaping device
A0=10.213.99.1 A1=10.213.99.2
PIDS=()

cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "$H0" "$H1" "$BR"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# `ip netns exec` execs the command itself, so `$!` of a background `ip netns exec` is its pid.
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# --- the lab: as NamespaceLab builds it --------------------------------------------------------
ip netns add "$BR"
in_ns "$BR" ip link add br0 type bridge
in_ns "$BR" ip link set br0 up
in_ns "$BR" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null \
    || skip "the kernel has no bridge netfilter (br_netfilter), which the delay rules need"
for i in 0 1; do
    ns=${TAG}h$i
    ip netns add "$ns"
    ip link add "${TAG}v$i" netns "$ns" type veth peer name "${TAG}p$i" netns "$BR"
    in_ns "$ns" ip addr add "10.213.99.$((i + 1))/24" dev "${TAG}v$i"
    in_ns "$ns" ip link set "${TAG}v$i" up
    in_ns "$ns" ip link set lo up
    # TCP buffers big enough for a fast path at 50 ms (the per-namespace defaults allow 4 MiB).
    in_ns "$ns" sysctl -qw net.ipv4.tcp_wmem="4096 16384 67108864" net.ipv4.tcp_rmem="4096 131072 67108864"
    in_ns "$BR" ip link set "${TAG}p$i" master br0
    in_ns "$BR" ip link set "${TAG}p$i" up
done

# --- the link: as WANLink applies it ----------------------------------------------------------
WL_PID=
# link_up RTT_MS JITTER_MS LOSS_PCT RATE_MBIT QUEUE_MS   (RATE_MBIT 0: no cap)
link_up() {
    local rtt=$1 jitter=$2 loss=$3 rate=$4 queue_ms=$5
    local one_way; one_way=$(awk -v r="$rtt" 'BEGIN { printf "%.3f", r / 2 }')
    ip netns exec "$BR" "$WANLINK" --queue 1 --delay "$one_way" --jitter "$jitter" --loss "$loss" --max-seconds 600 \
        >"$WORK/wanlink.out" 2>"$WORK/wanlink.err" &
    WL_PID=$!; PIDS+=("$WL_PID")
    for _ in $(seq 50); do grep -q ready "$WORK/wanlink.out" 2>/dev/null && break; sleep 0.1; done
    grep -q ready "$WORK/wanlink.out" || { cat "$WORK/wanlink.err"; exit 1; }
    in_ns "$BR" iptables -t mangle -A PREROUTING -m physdev --physdev-in "$PORT1" -j NFQUEUE --queue-num 1 --queue-bypass
    in_ns "$BR" iptables -t mangle -A POSTROUTING -m physdev --physdev-out "$PORT1" -j NFQUEUE --queue-num 1 --queue-bypass
    if [ "$rate" != 0 ]; then
        # Queue in bytes = the rate times the queue's length in time; bucket = 2 ms of the rate, >= 8 KiB.
        local limit burst
        limit=$(awk -v r="$rate" -v q="$queue_ms" 'BEGIN { printf "%d", r * 1e6 / 8 * q / 1000 }')
        burst=$(awk -v r="$rate" 'BEGIN { b = r * 1e6 / 8 * 0.002; if (b < 8192) b = 8192; printf "%d", b }')
        # Downlink: the bridge's port toward host 1. Uplink: what host 1 sends, redirected at the
        # port's ingress to an ifb device and shaped there (after it left host 1's sockets).
        in_ns "$BR" tc qdisc add dev "$PORT1" root tbf rate "${rate}mbit" burst "$burst" limit "$limit"
        in_ns "$BR" ip link add "$IFB1" type ifb
        in_ns "$BR" ip link set "$IFB1" up
        in_ns "$BR" tc qdisc add dev "$IFB1" root tbf rate "${rate}mbit" burst "$burst" limit "$limit"
        in_ns "$BR" tc qdisc add dev "$PORT1" handle ffff: ingress
        in_ns "$BR" tc filter add dev "$PORT1" parent ffff: protocol all u32 match u32 0 0 \
            action mirred egress redirect dev "$IFB1"
    fi
}

# link_down: removes the link, and leaves the emulator's summary line in $WORK/summary.
link_down() {
    in_ns "$BR" iptables -t mangle -F
    in_ns "$BR" tc qdisc del dev "$PORT1" root 2>/dev/null || true
    in_ns "$BR" tc qdisc del dev "$PORT1" ingress 2>/dev/null || true
    in_ns "$BR" ip link del "$IFB1" 2>/dev/null || true
    if [ -n "$WL_PID" ]; then
        kill "$WL_PID" 2>/dev/null || true
        wait "$WL_PID" 2>/dev/null || true
        grep '^wanlink:' "$WORK/wanlink.err" > "$WORK/summary" || true
        WL_PID=
    fi
}

# CPU the emulator used so far, in clock ticks (user + system).
wl_ticks() { [ -n "$WL_PID" ] && awk '{ print $14 + $15 }' "/proc/$WL_PID/stat" 2>/dev/null || echo 0; }

# ping_stats COUNT: average and maximum RTT (ms) from host 1 to host 0.
ping_stats() {
    in_ns "$H1" ping -q -n -c "$1" -i 0.05 -W 2 "$A0" 2>/dev/null \
        | awk -F'[/ ]' '/^rtt/ { printf "%.1f/%.1f", $8, $9 }' || true
}

# iperf3_run ARGS...: runs a client on host 1 against a fresh server on host 0 for $RUN seconds;
# prints the receiver's rate in Mbit/s, and for UDP its loss.
IPERF_PORT=5201
iperf3_run() {
    IPERF_PORT=$((IPERF_PORT + 1))
    ip netns exec "$H0" iperf3 -s -1 -p "$IPERF_PORT" >/dev/null 2>&1 &
    local server=$!; PIDS+=("$server")
    sleep 0.3
    in_ns "$H1" timeout $((RUN + 20)) iperf3 -c "$A0" -p "$IPERF_PORT" -t "$RUN" -f m -J "$@" > "$WORK/iperf.json" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    python3 - "$WORK/iperf.json" <<'EOF'
import json, sys
try:
    end = json.load(open(sys.argv[1]))["end"]
except Exception:
    print("failed"); sys.exit()
if "sum_received" in end:
    print("%.1f Mbit/s" % (end["sum_received"]["bits_per_second"] / 1e6))
else:
    s = end["sum"]
    print("%.1f Mbit/s (%.0f kpps, %.1f%% lost)" % (s["bits_per_second"] / 1e6,
          (s["packets"] - s["lost_packets"]) / s["seconds"] / 1e3, s["lost_percent"]))
EOF
}

ROWS=()
row() { ROWS+=("$(printf '%-40s | %-36s | %s' "$1" "$2" "$3")"); echo "  $1: $2${3:+ ($3)}"; }
cpu_share() { awk -v t="$1" -v s="$RUN" 'BEGIN { printf "emulator %.0f%% of a core", t / s }'; }

measure_throughput() {   # label, iperf3 args...
    local label=$1; shift
    local before after rate
    before=$(wl_ticks)
    rate=$(iperf3_run "$@")
    after=$(wl_ticks)
    if [ -n "$WL_PID" ]; then row "$label" "$rate" "$(cpu_share $((after - before)))"; else row "$label" "$rate" ""; fi
}

echo "== wan-link-check: lab $TAG, ${RUN} s per iperf3 run, load $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -z "$ONLY" ]; then
echo "-- no emulator (baseline)"
row "baseline: ping RTT avg/max ms" "$(ping_stats 20)" ""
measure_throughput "baseline: TCP down" -R -C cubic
measure_throughput "baseline: UDP down, 1200 B, -b 2G" -R -u -b 2G -l 1200 -w 4M

echo "-- emulator with 0 ms delay (its cost alone)"
link_up 0 0 0 0 0
measure_throughput "0 ms: TCP down" -R -C cubic
measure_throughput "0 ms: UDP down, 1200 B, -b 2G" -R -u -b 2G -l 1200 -w 4M
# Two UDP senders at once: the most packets per second this machine can push through it.
before=$(wl_ticks)
IPERF_PORT=$((IPERF_PORT + 1)); p1=$IPERF_PORT; IPERF_PORT=$((IPERF_PORT + 1)); p2=$IPERF_PORT
for p in $p1 $p2; do ip netns exec "$H0" iperf3 -s -1 -p "$p" >/dev/null 2>&1 & PIDS+=("$!"); done
sleep 0.3
for p in $p1 $p2; do
    ip netns exec "$H1" timeout $((RUN + 20)) iperf3 -c "$A0" -p "$p" -t "$RUN" -J -u -b 2G -l 1200 -w 4M > "$WORK/udp$p.json" 2>/dev/null &
    PIDS+=("$!")
done
wait "${PIDS[@]: -2}" 2>/dev/null || true
after=$(wl_ticks)
pps=$(python3 - "$WORK/udp$p1.json" "$WORK/udp$p2.json" <<'EOF'
import json, sys
total = 0
for path in sys.argv[1:]:
    try:
        s = json.load(open(path))["end"]["sum"]; total += (s["packets"] - s["lost_packets"]) / s["seconds"]
    except Exception:
        pass
print("%.0f kpps delivered" % (total / 1e3))
EOF
)
row "0 ms: 2 UDP senders up, 1200 B" "$pps" "$(cpu_share $((after - before)))"
link_down
echo "   $(cat "$WORK/summary")"
fi

profile() {   # name rtt jitter loss rate queue_ms
    local name=$1
    [ -z "$ONLY" ] || [ "$ONLY" = "$name" ] || return 0
    echo "-- $name: RTT $2 ms, jitter $3 ms, loss $4% each way, rate ${5} Mbit/s (0: none), queue $6 ms"
    link_up "$2" "$3" "$4" "$5" "$6"
    row "$name: ping RTT avg/max ms" "$(ping_stats 40)" "configured $2"
    measure_throughput "$name: TCP down" -R -C cubic
    if [ "$5" = 0 ]; then
        measure_throughput "$name: TCP up" -C cubic
        measure_throughput "$name: TCP down, BBR" -R -C bbr
        measure_throughput "$name: UDP down, 1200 B, -b 2G" -R -u -b 2G -l 1200 -w 4M
    else
        # The bounded queue: the RTT while a TCP download fills it (at most RTT + queue).
        ip netns exec "$H1" ping -q -n -c $((RUN * 4)) -i 0.25 -W 2 "$A0" > "$WORK/ping-load" 2>&1 &
        local pinger=$!; PIDS+=("$pinger")
        iperf3_run -R -C cubic > /dev/null
        wait "$pinger" 2>/dev/null || true
        row "$name: ping under a TCP download" "$(awk -F'[/ ]' '/^rtt/ { printf "%.1f/%.1f", $8, $9 }' "$WORK/ping-load")" \
            "avg/max ms; at most $2 + $6 queue"
    fi
    link_down
    local loss
    loss=$(awk '{ for (i = 1; i <= NF; i++) { if ($i == "packets") p = $(i - 1); if ($i == "dropped") d = $(i - 1) } }
                END { if (p > 0) printf "%.2f%% of %d packets", 100 * d / p, p }' "$WORK/summary")
    row "$name: emulator dropped" "$loss" "configured $4% each way"
    echo "   $(cat "$WORK/summary")"
}

profile fiftyMs      50 0 0   0  0
profile fiftyMsLossy 50 0 1   0  0
profile home50       40 0 0   50 100
profile home10       80 0 0.5 10 100

echo
echo "== wan-link-check results (host 1 behind the link; down = host 0 to host 1)"
printf '%-40s | %-36s | %s\n' "what" "measured" "note"
printf '%s\n' "-----------------------------------------+--------------------------------------+------------------"
printf '%s\n' "${ROWS[@]}"
