#!/usr/bin/env bash
# Undo enable-binfmt.sh: unregister qemu-aarch64 from binfmt_misc (the packages stay installed).
set -euo pipefail
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || exit 0
update-binfmts --disable qemu-aarch64 >/dev/null 2>&1 || echo -1 > /proc/sys/fs/binfmt_misc/qemu-aarch64
[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]
echo "qemu-aarch64 binfmt disabled"
