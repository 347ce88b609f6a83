#!/usr/bin/env bash
# A late joiner on loopback, by hand: node a attaches SIZE random bytes, b and c replicate it
# (HOLDERS=1: a alone), then a --lazy node d joins and `get`s it. Prints the replication time,
# the uploader's payload ratio, d's `get` wall time and its own "fetched" figure, d's counters
# and peak memory. The figures of Docs/BENCHMARKS.md's "what each change bought" come from this.
# Usage: scripts/late-joiner.sh   (env: BIN, SIZE bytes, HOLDERS 1 or 3, LOSS share for d,
#        PERF_OUT file: `perf record -g` of d during the get, TMPDIR for the data dirs: /tmp)
set -euo pipefail
BIN=${BIN:-.build/release/groupmesh}
SIZE=${SIZE:-104857600}
HOLDERS=${HOLDERS:-3}
LOSS=${LOSS:-0}
# Data dirs on ordinary disk by default (/tmp here): what a user's `get` meets, writeback
# included. TMPDIR=/dev/shm takes the disk out of the figure.
D=$(mktemp -d "${TMPDIR:-/tmp}/groupmesh-late-XXXXXX")
trap 'pkill -f "data-dir $D" || true; sleep 0.3; rm -rf "$D"' EXIT INT TERM

wait_for() {  # data dir, python condition on the status JSON `s`; bounded to 60 s
    for _ in $(seq 600); do
        "$BIN" status --json --data-dir "$1" 2>/dev/null \
            | python3 -c "import json,sys; s=json.load(sys.stdin); sys.exit(0 if $2 else 1)" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "timed out waiting for $2 on $1" >&2; exit 1
}

"$BIN" run --listen 127.0.0.1:0 --data-dir "$D/a" --print-invite > "$D/a.out" 2> "$D/a.err" &
for _ in $(seq 100); do grep -q invite: "$D/a.out" 2>/dev/null && break; sleep 0.1; done
INVITE=$(awk '/^invite:/ {print $2}' "$D/a.out")
HOLDER_DIRS=("$D/a")
if [ "$HOLDERS" -ge 2 ]; then
    for n in b c; do
        "$BIN" run --listen 127.0.0.1:0 --data-dir "$D/$n" --invite "$INVITE" > "$D/$n.out" 2> "$D/$n.err" &
        HOLDER_DIRS+=("$D/$n")
    done
fi
head -c "$SIZE" /dev/urandom > "$D/payload.bin"
wait_for "$D/a" "sum(1 for m in s['members'] if m['state']=='alive')==${#HOLDER_DIRS[@]}"
start=$(date +%s.%N)
ID=$("$BIN" attach --data-dir "$D/a" "$D/payload.bin")
for dir in "${HOLDER_DIRS[@]}"; do
    wait_for "$dir" "len(s['attachments'])==1 and s['attachments'][0]['chunksHave']==s['attachments'][0]['chunks']"
done
echo "attached and replicated to ${#HOLDER_DIRS[@]} holder(s) in $(echo "$(date +%s.%N) - $start" | bc) s"
"$BIN" status --json --data-dir "$D/a" | python3 -c "import json,sys; c=json.load(sys.stdin)['counters']; print('uploader sent', round(c['chunkPayloadBytesSent']/$SIZE, 2), 'x the size')"

"$BIN" run --listen 127.0.0.1:0 --data-dir "$D/d" --invite "$INVITE" --lazy --log-level info \
    --simulate-loss "$LOSS" > "$D/d.out" 2> "$D/d.err" &
wait_for "$D/d" "len(s['attachments'])==1 and sum(1 for m in s['members'] if m['state']=='alive')==$(( ${#HOLDER_DIRS[@]} + 1 ))"
if [ -n "${PERF_OUT:-}" ]; then  # profile the joiner during the get: perf report -i $PERF_OUT
    perf record -g -o "$PERF_OUT" -p "$(pgrep -f "data-dir $D/d")" 2> /dev/null &
    PERF_PID=$!
    sleep 0.5
fi
start=$(date +%s.%N)
"$BIN" get --data-dir "$D/d" "$ID" --output "$D/out.bin" > /dev/null
if [ -n "${PERF_OUT:-}" ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" || true; fi
took=$(echo "$(date +%s.%N) - $start" | bc)
echo "late joiner: get took $took s ($(echo "$SIZE / 1048576 / $took" | bc) MiB/s; the file written and synced included)"
cmp -s "$D/payload.bin" "$D/out.bin" || { echo "the file got differs from the one attached" >&2; exit 1; }
grep -o 'MiBps=[0-9.]*.*seconds=[0-9.]*' "$D/d.err" || true
"$BIN" status --json --data-dir "$D/d" | python3 -c "import json,sys; c=json.load(sys.stdin)['counters']; print({k: c[k] for k in ['datagramsReceived','chunksFetched','pieceReasks','piecesUnsolicited','requestTimeouts','simulatedDrops']})"
grep VmHWM "/proc/$(pgrep -f "data-dir $D/d")/status"
