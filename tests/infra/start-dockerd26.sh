#!/usr/bin/env bash
# A second, private Docker Engine 26 (Debian 13's docker.io .deb, unpacked, not installed) with the
# containerd image store: BuildKit with multi-platform builds and SBOM/provenance attestations, for
# the `docker buildx bake` test. It listens on its own socket and uses its own bridge, data and exec
# roots, so it runs beside the bookworm engine (20.10) without touching it. Needs bookworm's
# docker.io installed (containerd, runc). Prints the DOCKER_HOST to use. Idempotent.
set -euo pipefail
STATE=${DOCKER26_STATE_DIR:-${VLLM_FORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-forge}/engines/dockerd26}
SOCK="unix://$STATE/docker.sock"
BRIDGE=fd26br
mkdir -p "$STATE/apt/lists/partial" "$STATE/apt/cache/archives/partial" "$STATE/debs"
if DOCKER_HOST=$SOCK docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then echo "$SOCK"; exit 0; fi
command -v containerd >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; }
if [ ! -x "$STATE/root/usr/sbin/dockerd" ]; then
  MIRROR=${MIRROR:-$(bash "$(dirname "$0")/apt-mirror.sh")}
  echo "deb $MIRROR trixie main" > "$STATE/apt/sources.list"
  APT="-o Dir::Etc::sourcelist=$STATE/apt/sources.list -o Dir::Etc::sourceparts=/nonexistent -o Dir::State::Lists=$STATE/apt/lists -o Dir::Cache=$STATE/apt/cache -o Dir::State::status=/dev/null"
  apt-get $APT update -qq
  (cd "$STATE/debs" && apt-get $APT download docker.io >/dev/null 2>&1)
  dpkg-deb -x "$STATE"/debs/docker.io_*.deb "$STATE/root"
fi
# Its own bridge: two engines must not both manage docker0. No iptables rules: builds need no NAT.
ip link show "$BRIDGE" >/dev/null 2>&1 || { ip link add "$BRIDGE" type bridge; ip addr add 172.29.0.1/16 dev "$BRIDGE"; ip link set "$BRIDGE" up; }
echo '{"features":{"containerd-snapshotter":true}}' > "$STATE/daemon.json"
PATH="$STATE/root/usr/sbin:$STATE/root/usr/bin:$PATH" nohup dockerd --config-file "$STATE/daemon.json" \
  -H "$SOCK" --data-root "$STATE/data" --exec-root "$STATE/exec" --pidfile "$STATE/dockerd.pid" \
  --bridge "$BRIDGE" --iptables=false --ip-masq=false >"$STATE/dockerd.log" 2>&1 &
for i in $(seq 1 60); do DOCKER_HOST=$SOCK docker version >/dev/null 2>&1 && break; sleep 0.5; done
DOCKER_HOST=$SOCK docker version --format '{{.Server.Version}}' >/dev/null || { tail -30 "$STATE/dockerd.log" >&2; exit 1; }
echo "$SOCK"
