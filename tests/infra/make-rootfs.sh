#!/usr/bin/env bash
# Make (once) a Debian bookworm rootfs tarball with python3, python3-yaml and python3-packaging for one
# architecture, from this machine's apt mirror: the stand-in for upstream's vllm/vllm-openai base.
# No ca-certificates: the stand-in never reaches the network, and its postinst is slow under qemu.
# Usage: make-rootfs.sh ARCH OUT.tar     (ARCH: amd64 | arm64; arm64 needs qemu binfmt, see enable-binfmt.sh)
# Written to OUT.partial.tar first and renamed, so an interrupted run never leaves a half tarball
# (mmdebstrap picks its output format from the extension: keep ".tar" last).
set -euo pipefail
ARCH=$1; OUT=$2
[ -s "$OUT" ] && { echo "cached: $OUT"; exit 0; }
command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
MIRROR=$(bash "$(dirname "$0")/apt-mirror.sh")
mkdir -p "$(dirname "$OUT")"
mmdebstrap --quiet --variant=apt --architectures="$ARCH" \
  --include=python3,python3-yaml,python3-packaging \
  bookworm "${OUT%.tar}.partial.tar" "$MIRROR"
mv "${OUT%.tar}.partial.tar" "$OUT"
echo "made: $OUT"
