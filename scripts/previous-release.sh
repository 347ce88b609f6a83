#!/bin/sh
# Builds the previous release's groupmesh once, into the cache the compatibility tests run it
# from, and prints its path (DEVELOPMENT.md, "The previous release"). `make test` starts it in
# the background beside the real-time tests, which mostly wait on the network; the test calls it
# too, and waits for the build another run holds (`flock` on the cache's lock file).
#
# usage: scripts/previous-release.sh [COMMIT|TAG]   (default: scripts/previous-release's pin)
set -eu
repository=$(cd "$(dirname "$0")/.." && pwd)
pin=$(cat "$repository/scripts/previous-release")
# The pinned commit, or the commit its tag names (a clone holds every commit, a tag only when
# it was fetched with tags).
wanted=${1:-${pin#* }}
commit=$(git -C "$repository" rev-parse --verify -q "$wanted^{commit}" 2>/dev/null) \
    || { [ $# -eq 0 ] && wanted=${pin%% *} && commit=$(git -C "$repository" rev-parse --verify -q "$wanted^{commit}" 2>/dev/null); } \
    || {
        echo "$wanted is not in $repository (a shallow clone? git fetch --unshallow)" >&2
        exit 2
    }
name=${1:-${pin%% *}}
# A tag moved after the pin was written (or a pin edited by hand): the pin is what is built.
if [ $# -eq 0 ]; then
    tagged=$(git -C "$repository" rev-parse --verify -q "${pin%% *}^{commit}" 2>/dev/null || true)
    if [ -n "$tagged" ] && [ "$tagged" != "$commit" ]; then
        echo "note: ${pin%% *} names $(echo "$tagged" | cut -c1-12) here, the pin $(echo "$commit" | cut -c1-12); building the pin" >&2
    fi
fi
directory=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/groupmesh/compat/$commit
binary=$directory/groupmesh
if [ -x "$binary" ]; then echo "$binary"; exit 0; fi
mkdir -p "$directory"
# Held until this script ends: a second run waits here for the first one's build.
command -v flock >/dev/null || { echo "flock(1) is missing (util-linux): cannot build the previous release" >&2; exit 1; }
exec 9>>"$directory/lock"
flock -w 3600 9 || { echo "another run held $directory/lock for an hour" >&2; exit 1; }
if [ -x "$binary" ]; then echo "$binary"; exit 0; fi
# A build takes minutes: one that failed is not tried again for a day, or until its log goes.
if [ -n "$(find "$directory/failed.log" -mmin -1440 2>/dev/null)" ]; then
    echo "building $name failed before; see $directory/failed.log (remove it to try again)" >&2
    exit 1
fi
echo "building groupmesh $name ($(echo "$commit" | cut -c1-12)) into $directory; this takes minutes, once" >&2
started=$(date +%s)
# Each step checked on its own (`set -e` does not reach into a command whose status is tested).
build() {
    if [ ! -f "$directory/source/Package.swift" ]; then
        rm -rf "$directory/source" "$directory/source.partial" "$directory/source.tar" || return 1
        git -C "$repository" archive -o "$directory/source.tar" "$commit" || return 1
        mkdir -p "$directory/source.partial" || return 1
        tar -x -f "$directory/source.tar" -C "$directory/source.partial" || return 1
        rm -f "$directory/source.tar"
        mv "$directory/source.partial" "$directory/source" || return 1
    fi
    cd "$directory/source" || return 1
    # timeout(1) runs the build in a process group of its own and ends all of it.
    timeout -k 10 3600 swift build --product groupmesh --scratch-path "$directory/build" || return 1
    bin=$(swift build --product groupmesh --scratch-path "$directory/build" --show-bin-path) || return 1
    case $bin in "$directory/build"/*) ;; *) echo "the build's binaries are not under $directory/build: $bin"; return 1 ;; esac
    cp "$bin/groupmesh" "$binary.partial" && mv "$binary.partial" "$binary"
}
if ! build >"$directory/build.log" 2>&1; then
    mv "$directory/build.log" "$directory/failed.log"
    echo "building $name failed; see $directory/failed.log" >&2
    exit 1
fi
echo "built groupmesh $name in $(( $(date +%s) - started )) s" >&2
echo "$binary"
