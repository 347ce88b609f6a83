#!/usr/bin/env bash
# Prints the folder that holds Prometheus's `prometheus` and `promtool`, for the test that has a
# real Prometheus scrape two nodes. When they are not on PATH, Debian's package is downloaded and
# unpacked under .build/tools (not installed: no service starts, nothing outside the checkout).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    dirname "$(command -v prometheus)"
    exit 0
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.build/tools/prometheus"
if [ -x "$dest/usr/bin/prometheus" ] && [ -x "$dest/usr/bin/promtool" ]; then
    echo "$dest/usr/bin"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || { echo "no apt-get here to fetch Debian's prometheus package" >&2; exit 1; }
command -v dpkg-deb >/dev/null 2>&1 || { echo "no dpkg-deb here to unpack Debian's prometheus package" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
download() { (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1); }
if ! download; then
    # The package lists may be missing or stale on a fresh machine; only root can renew them.
    if [ "$(id -u)" -eq 0 ] && apt-get update -qq >/dev/null 2>&1 && download; then :; else
        echo "cannot download Debian's prometheus package (apt-get download prometheus failed)" >&2
        exit 1
    fi
fi
mkdir -p "$dest"
dpkg-deb -x "$work"/prometheus_*.deb "$dest"
echo "$dest/usr/bin"
