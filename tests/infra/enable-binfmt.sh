#!/usr/bin/env bash
# Let this amd64 machine run arm64 binaries (image builds for linux/arm64) through qemu-user-static.
set -euo pipefail
if ! command -v qemu-aarch64-static >/dev/null || ! command -v update-binfmts >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null
fi
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
grep -q enabled /proc/sys/fs/binfmt_misc/qemu-aarch64
echo "qemu-aarch64 binfmt enabled"
