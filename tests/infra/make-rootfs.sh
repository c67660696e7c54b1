#!/usr/bin/env bash
# Make (once) a Debian bookworm rootfs tarball with python3, python3-yaml and python3-packaging for one
# architecture, from this machine's apt mirror: the stand-in for upstream's vllm/vllm-openai base.
# No maintainer script runs under emulation, so arm64 costs what amd64 does (about 25 CPU-seconds
# each, against 120 for arm64 when dpkg ran under qemu):
#   1. the Essential set (--variant=essential), installed by the host's dpkg into the directory
#      (--mode=chrootless: bookworm's Essential packages honour DPKG_ROOT), /usr merged by the
#      merged-usr hook as debootstrap does (the usrmerge package would pull in perl)
#   2. python3, python3-yaml, python3-packaging and their libraries, unpacked (--variant=extract):
#      their maintainer scripts only byte-compile and register (the libraries sit in the multiarch
#      paths ld.so searches anyway)
#   3. the byte-compiling done here instead, natively, by this machine's Python when it is the
#      rootfs's minor version (a .pyc is per minor version): as in upstream's image, a Python start
#      reads the standard library's .pyc files rather than compiling each module it imports, which
#      under qemu costs about 2 CPU-seconds a start (3.0 -> 1.0 s for forge's imports, measured
#      2026-12-04 on the 2-core test machine)
#   4. no man pages, translations or docs; no apt (nothing runs apt in the stand-in), no
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
LIBRARY=$(cd "$WORK/root/usr/lib" && ls -d python3.[0-9]*)
if [ "$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')" = "$LIBRARY" ]; then
  python3 -m compileall -q -j0 -s "$WORK/root" -p / "$WORK/root/usr/lib/$LIBRARY" \
    "$WORK/root/usr/lib/python3/dist-packages" >/dev/null
else
  echo "not byte-compiled: this machine's Python is not $LIBRARY (each module compiles as imported)" >&2
fi
tar --numeric-owner --sort=name -C "$WORK/root" -cf "${OUT%.tar}.partial.tar" .
mv "${OUT%.tar}.partial.tar" "$OUT"
echo "made: $OUT"
