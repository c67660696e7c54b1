#!/usr/bin/env bash
# Make (once) a Debian bookworm rootfs tarball with python3, python3-yaml and python3-packaging for one
# architecture, from this machine's apt mirror: the stand-in for upstream's vllm/vllm-openai base.
# No maintainer script runs under emulation, so arm64 costs what amd64 does (about 25 CPU-seconds
# each, against 120 for arm64 when dpkg ran under qemu):
#   1. the Essential set (--variant=essential), installed by the host's dpkg into the directory
#      (--mode=chrootless: bookworm's Essential packages honour DPKG_ROOT), /usr merged by the
#      merged-usr hook as debootstrap does (the usrmerge package would pull in perl)
#   2. python3, python3-yaml, python3-packaging and their libraries, unpacked (--variant=extract):
#      their maintainer scripts only byte-compile and register, which nothing here needs (Python
#      compiles what it imports; the libraries sit in the multiarch paths ld.so searches anyway)
#   3. no man pages, translations or docs; no apt (nothing runs apt in the stand-in), no
#      ca-certificates (the stand-in never reaches the network)
# Usage: make-rootfs.sh ARCH OUT.tar     (ARCH: amd64 | arm64)
# Made in OUT.partial.d and written to OUT.partial.tar first, then renamed, so an interrupted run
# never leaves a half tarball.
set -euo pipefail
ARCH=$1; OUT=$2
[ -s "$OUT" ] && { echo "cached: $OUT"; exit 0; }
command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
MIRROR=$(bash "$(dirname "$0")/apt-mirror.sh")
WORK="${OUT%.tar}.partial.d"
rm -rf "$WORK" && mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
COMMON=(--quiet --architectures="$ARCH" --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
mmdebstrap "${COMMON[@]}" --mode=chrootless --variant=essential bookworm "$WORK/root" "$MIRROR"
mmdebstrap "${COMMON[@]}" --variant=extract --include=python3,python3-yaml,python3-packaging \
  bookworm "$WORK/python" "$MIRROR"
cp -a "$WORK/python/." "$WORK/root/"
rm -rf "$WORK"/root/usr/share/{man,locale,doc}/* "$WORK"/root/var/cache/apt/archives/*.deb
tar --numeric-owner --sort=name -C "$WORK/root" -cf "${OUT%.tar}.partial.tar" .
mv "${OUT%.tar}.partial.tar" "$OUT"
echo "made: $OUT"
