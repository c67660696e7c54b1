#!/usr/bin/env bash
# Install the docker-buildx CLI plugin from Debian 13 (trixie)'s .deb (bookworm has none), unpacked
# without touching the system's package state. Idempotent. Used to check bake files with the real tool.
set -euo pipefail
PLUGIN_DIR=${PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}
[ -x "$PLUGIN_DIR/docker-buildx" ] && { "$PLUGIN_DIR/docker-buildx" version; exit 0; }
STATE=${BUILDX_STATE_DIR:-/tmp/vllm-forge-buildx}
MIRROR=${MIRROR:-$(bash "$(dirname "$0")/apt-mirror.sh")}
mkdir -p "$STATE/apt/lists/partial" "$STATE/apt/cache/archives/partial" "$STATE/debs" "$PLUGIN_DIR"
echo "deb $MIRROR trixie main" > "$STATE/apt/sources.list"
APT="-o Dir::Etc::sourcelist=$STATE/apt/sources.list -o Dir::Etc::sourceparts=/nonexistent -o Dir::State::Lists=$STATE/apt/lists -o Dir::Cache=$STATE/apt/cache -o Dir::State::status=/dev/null"
apt-get $APT update -qq
(cd "$STATE/debs" && apt-get $APT download docker-buildx >/dev/null)
dpkg-deb -x "$STATE"/debs/docker-buildx_*.deb "$STATE/root"
install -m 0755 "$STATE/root/usr/libexec/docker/cli-plugins/docker-buildx" "$PLUGIN_DIR/docker-buildx"
"$PLUGIN_DIR/docker-buildx" version
