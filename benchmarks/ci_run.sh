#!/usr/bin/env bash
# Time .ci/run as CI runs it: a fresh clone of HEAD, CI=true, no stdin, root.
#
#   bash benchmarks/ci_run.sh warm    # the machine kept ~/.cache/vllm-forge
#   bash benchmarks/ci_run.sh cold    # an empty cache: every vLLM sdist and base rootfs made anew
#
# Prints .ci/run's own per-phase lines and pytest's closing line; the whole log stays in the
# printed path. Results: benchmarks/results/ci_run.md.
set -euo pipefail

MODE=${1:-warm}
case $MODE in
  warm|cold) ;;
  *) echo "usage: $0 warm|cold" >&2; exit 2 ;;
esac

REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
WORK=$(mktemp -d /tmp/vllm-forge-ci-run.XXXXXX)
LOG="$WORK/ci-run.log"
# Keep only the log: the clone and a cold cache (1.4 GB of vLLM sources) go when the run ends.
trap 'rm -rf "$WORK/clone" "$WORK/cache"' EXIT
git clone -q "$REPO" "$WORK/clone"

ENV=(CI=true)
if [ "$MODE" = cold ]; then
  ENV+=(VLLM_FORGE_CACHE="$WORK/cache")
fi

echo "commit $(git -C "$WORK/clone" rev-parse --short HEAD), $MODE cache, $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
set +e
(cd "$WORK/clone" && env "${ENV[@]}" bash .ci/run < /dev/null > "$LOG" 2>&1)
STATUS=$?
set -e
grep -E '^=== \[ci\]|^=+ .*(passed|failed|error).* in ' "$LOG" || true
echo "exit $STATUS; log: $LOG"
exit "$STATUS"
