#!/usr/bin/env bash
# Make (once) a Debian bookworm rootfs tarball with python3, python3-yaml and python3-packaging for one
# architecture, from this machine's apt mirror: the stand-in for upstream's vllm/vllm-openai base.
# No ca-certificates: the stand-in never reaches the network, and its postinst is slow under qemu.
# Kept small because every package's maintainer scripts run under qemu for arm64, and every image
# the tests build, push and pull carries this layer:
#   --variant=essential        no apt (nothing runs apt in the stand-in)
#   merged-usr hook            /usr merged by symlinks, as debootstrap does, instead of the usrmerge
#                              package, which pulls in perl (46 MB) and converts the tree in perl
#   path-exclude               no man pages, translations or docs
# (2026-12-03: 88 packages and 99 MB for amd64, against 115 packages and 211 MB before.)
# Usage: make-rootfs.sh ARCH OUT.tar     (ARCH: amd64 | arm64; arm64 needs qemu binfmt, see enable-binfmt.sh)
# Written to OUT.partial.tar first and renamed, so an interrupted run never leaves a half tarball
# (mmdebstrap picks its output format from the extension: keep ".tar" last).
set -euo pipefail
ARCH=$1; OUT=$2
[ -s "$OUT" ] && { echo "cached: $OUT"; exit 0; }
command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
MIRROR=$(bash "$(dirname "$0")/apt-mirror.sh")
mkdir -p "$(dirname "$OUT")"
mmdebstrap --quiet --variant=essential --architectures="$ARCH" \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --include=python3,python3-yaml,python3-packaging \
  bookworm "${OUT%.tar}.partial.tar" "$MIRROR"
mv "${OUT%.tar}.partial.tar" "$OUT"
echo "made: $OUT"
