#!/bin/bash
# A late joiner fetching 100 MiB from 3 holders, real processes on loopback, data dirs on disk
# (/tmp). Prints the joiner's own "fetched" log line (its MiB/s). Used for the loopback rows of
# Docs/BENCHMARKS.md. GM=path/to/groupmesh picks another build.
set -u
B=${GM:-$(dirname "$0")/../.build/release/groupmesh}
D=$(mktemp -d /tmp/late-joiner.XXXXXX)
trap 'pkill -f -- "run --data-dir $D/"; sleep 1; rm -rf "$D"' EXIT
head -c $((100 << 20)) /dev/urandom > "$D/file.bin"
"$B" run --data-dir "$D/a" --listen 127.0.0.1:0 --name a > "$D/a.log" 2>&1 &
for _ in $(seq 1 100); do "$B" status --data-dir "$D/a" > /dev/null 2>&1 && break; sleep 0.1; done
INVITE=$("$B" invite --data-dir "$D/a" | tail -1)
"$B" attach --data-dir "$D/a" "$D/file.bin" > /dev/null
for n in b c; do "$B" run --data-dir "$D/$n" --listen 127.0.0.1:0 --name $n --invite "$INVITE" > "$D/$n.log" 2>&1 & done
for _ in $(seq 1 600); do
    [ "$("$B" attachments --data-dir "$D/b" 2>/dev/null | grep -c 400/400)$("$B" attachments --data-dir "$D/c" 2>/dev/null | grep -c 400/400)" = 11 ] && break
    sleep 0.2
done
"$B" run --data-dir "$D/d" --listen 127.0.0.1:0 --name d --invite "$INVITE" --log-level info > "$D/d.log" 2>&1 &
for _ in $(seq 1 1200); do grep -q fetched "$D/d.log" && break; sleep 0.05; done
grep fetched "$D/d.log" | sed 's/.*MiBps/MiBps/'
