#!/usr/bin/env bash
# Print each named Debian package that dpkg does not have installed, one per line.
# .ci/run installs only when this prints something: a kept machine skips apt's index download.
set -euo pipefail
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || echo "$package"
done
