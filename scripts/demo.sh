#!/usr/bin/env bash
# make demo: what GroupMesh does, on loopback, in under a minute after the build.
# Starts three nodes from one invite, sends a message, attaches a file, stops its uploader,
# lets a late joiner fetch it from the two others, checks its SHA-256, and stops everything
# it started (also when interrupted).
set -euo pipefail
BIN=${GROUPMESH_BIN:-.build/debug/groupmesh}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/groupmesh-demo.XXXXXX")
PIDS=()
cleanup() {
    for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# start NAME [ARGS...]: runs a node in the background and waits (bounded) for its invite line.
start() {
    local name=$1; shift
    "$BIN" run --data-dir "$WORK/$name" --listen 127.0.0.1:0 --name "$name" --print-invite "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    for _ in $(seq 1 100); do grep -q '^invite:' "$WORK/$name.out" 2>/dev/null && return 0; sleep 0.1; done
    echo "node $name did not start: $(cat "$WORK/$name.err")" >&2
    exit 1
}

# wait_until DESCRIPTION COMMAND...: polls a command for up to 30 s.
wait_until() {
    local what=$1; shift
    for _ in $(seq 1 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "timed out waiting for $what" >&2
    exit 1
}

alive_count() { "$BIN" status --json --data-dir "$WORK/$1" | grep -o '"state":"alive"' | wc -l; }
has_members() { [ "$(alive_count "$1")" -ge "$2" ]; }
holds_all() { "$BIN" attachments --json --data-dir "$WORK/$1" | python3 -c 'import json,sys; a=json.load(sys.stdin); sys.exit(0 if a and all(x["chunksHave"]==x["chunks"] for x in a) else 1)'; }

say "Three nodes join one session through one invite"
start alice
INVITE=$(sed -n 's/^invite: //p' "$WORK/alice.out")
echo "alice: $(head -1 "$WORK/alice.out")"
echo "invite: ${INVITE:0:40}…"
start bob --invite "$INVITE"
start carol --invite "$INVITE"
for node in alice bob carol; do wait_until "$node to see 3 members" has_members "$node" 3; done
"$BIN" status --data-dir "$WORK/alice"

say "A reliable message from alice reaches bob"
"$BIN" listen --json --data-dir "$WORK/bob" >"$WORK/bob.listen" 2>"$WORK/bob.listen.err" &
PIDS+=($!)
wait_until "bob's listener" grep -q ready "$WORK/bob.listen.err"
"$BIN" send --data-dir "$WORK/alice" --to bob "hello from alice"
wait_until "the message at bob" grep -q "hello from alice" "$WORK/bob.listen"
echo "bob heard: $(cat "$WORK/bob.listen")"

say "alice attaches a 4 MiB file; bob and carol replicate it"
head -c $((4 * 1024 * 1024)) /dev/urandom >"$WORK/photo.bin"
ID=$("$BIN" attach --data-dir "$WORK/alice" "$WORK/photo.bin" --metadata '{"name":"photo.bin"}')
echo "attachment id: $ID"
wait_until "bob to hold it" holds_all bob
wait_until "carol to hold it" holds_all carol
"$BIN" attachments --data-dir "$WORK/carol"

say "alice leaves; dave joins late and pulls the file from bob and carol"
"$BIN" leave --data-dir "$WORK/alice"
start dave --invite "$("$BIN" invite --data-dir "$WORK/bob")" --lazy
wait_until "dave to list the attachment" sh -c "'$BIN' attachments --json --data-dir '$WORK/dave' | grep -q $ID"
"$BIN" get --data-dir "$WORK/dave" "$ID" --output "$WORK/dave-photo.bin"
ORIGINAL=$(sha256sum "$WORK/photo.bin" | cut -d' ' -f1)
COPY=$(sha256sum "$WORK/dave-photo.bin" | cut -d' ' -f1)
echo "sha256 original: $ORIGINAL"
echo "sha256 at dave:  $COPY"
[ "$ORIGINAL" = "$COPY" ] && echo "identical" || { echo "MISMATCH" >&2; exit 1; }

say "Final status, seen from dave"
"$BIN" status --data-dir "$WORK/dave"
