#!/bin/bash
# Two vLLM "nodes" on one host with two GPUs (two H200s, vLLM 0.25.0 installed into $SITE): the
# commands `build.py serve --recipe gemma-4-26b-a4b-it --target h200 --nodes 2` lays out, minus
# docker (benchmarks/gpu/two_node_commands.py says what a single host changes), Gemma-4-26B-A4B
# shapes with dummy weights, TP=2 across the two "nodes", the MTP drafter, CUDA graphs on. Then
# verify/mtp_smoke.py --endpoint and a 500-request burst against
# it. Everything (both ranks' logs, smoke report, burst figures, the deciding log lines) goes into
# one tarball under $OUT. Run from the repository root: bash benchmarks/gpu/two_node_local.sh
# Budget: < 9 minutes (engine start up to START_LIMIT s, smoke 60 s, burst 90 s). One file lands
# in $OUT: the tarball.
# Overrides: STAGE (default .gpu-stage), SITE (/tmp/site), LAYERS (10), OUT, WORK, PORT,
# MASTER_PORT, START_LIMIT, POLL_S (seconds between health checks while the engines start, 10),
# STOP_GRACE_S (seconds the nodes get to stop on SIGTERM before SIGKILL, 5).
set -u
T0=$(date +%s)
say() { echo "[two-node +$(( $(date +%s) - T0 ))s] $*"; }
OUT=${OUT:-/tmp/two-node-out}
WORK=${WORK:-/tmp/two-node}
LAYERS=${LAYERS:-10}            # target layers of the dummy 26B-A4B (30 = all; start time grows)
PORT=${PORT:-8011}
MASTER_PORT=${MASTER_PORT:-29611}
START_LIMIT=${START_LIMIT:-330}
POLL_S=${POLL_S:-10}
STOP_GRACE_S=${STOP_GRACE_S:-5}
SITE=${SITE:-/tmp/site}          # where the wheels' gpu_setup.sh installs vLLM
STAGE=${STAGE:-.gpu-stage}       # the release's wheels and their gpu_setup.sh
RECIPE=gemma-4-26b-a4b-it TARGET=h200 VLLM_VERSION=0.25.0
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"

if [ ! -f "$SITE/.done" ]; then
  [ -f "$STAGE/gpu_setup.sh" ] || { say "no $SITE and no $STAGE/gpu_setup.sh: stage vLLM $VLLM_VERSION first"; exit 3; }
  say "installing the staged vLLM $VLLM_VERSION into /tmp/site"
  bash "$STAGE/gpu_setup.sh" install > "$WORK/setup.txt" 2>&1 || { tail -n 20 "$WORK/setup.txt"; exit 3; }
fi
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
  python3 -c "import torch, vllm, transformers; print('torch', torch.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__)"
} > "$WORK/machine.txt" 2>&1
[ "$(nvidia-smi -L | grep -c GPU)" -ge 2 ] || { say "needs two GPUs: $(cat "$WORK/machine.txt")"; exit 3; }
# As the image does: the patch series (the V2 runner starts without it; it is what users run).
python3 build.py apply --site-packages "$SITE" --vllm "$VLLM_VERSION" > "$WORK/apply.txt" 2>&1
say "build.py apply: $(tail -n 1 "$WORK/apply.txt")"

PLAN=(python3 -m benchmarks.gpu.two_node_commands --recipe "$RECIPE" --target "$TARGET"
      --models "$WORK/models" --work "$WORK" --layers "$LAYERS" --port "$PORT" --master-port "$MASTER_PORT")
if ! { "${PLAN[@]}" --json > "$WORK/plan.json" && "${PLAN[@]}" > "$WORK/commands.sh"; }; then
  say "planning failed: $(cat "$WORK/plan.json")"; exit 3
fi
mapfile -t NODE_CMDS < "$WORK/commands.sh"
say "node commands in $WORK/commands.sh (${#NODE_CMDS[@]} nodes, $LAYERS layers)"

# Each node leads a process group of its own (setsid), so stopping it stops its engine and workers too.
# (exec: the background job's pid stays the node's own pid, and with setsid its group id)
launch() {
  if command -v setsid > /dev/null; then exec setsid bash -c "exec $1"; else exec bash -c "exec $1"; fi
}
launch "${NODE_CMDS[1]}" > "$WORK/rank1.log" 2>&1 &
PID1=$!
launch "${NODE_CMDS[0]}" > "$WORK/rank0.log" 2>&1 &
PID0=$!
stop_nodes() {
  for pid in $PID0 $PID1; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null; done
  sleep "$STOP_GRACE_S"
  for pid in $PID0 $PID1; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; done
}
healthy() {
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$1" 2> /dev/null
}
trap stop_nodes EXIT
say "rank 0 (API, pid $PID0) and rank 1 (headless, pid $PID1) starting"

UP=0
while [ $(( $(date +%s) - T0 )) -lt "$START_LIMIT" ]; do
  if healthy "http://127.0.0.1:$PORT/health"; then UP=1; break; fi
  kill -0 "$PID0" 2>/dev/null || { say "rank 0 exited"; break; }
  kill -0 "$PID1" 2>/dev/null || { say "rank 1 exited"; break; }
  sleep "$POLL_S"
  say "waiting: $(grep -v 'NCCL INFO' "$WORK/rank0.log" | tail -n 1 | cut -c1-150)"
done
if [ "$UP" = 1 ]; then say "server up"; else say "server NOT up"; fi

S=http://127.0.0.1:$PORT
if [ "$UP" = 1 ]; then
  say "mtp_smoke --endpoint"
  timeout 60 python3 -m verify.mtp_smoke --recipe "$RECIPE" --target "$TARGET" --endpoint "$S" \
    --dummy --server-log "$WORK/rank0.log" --max-tokens 64 --out "$WORK/smoke" > "$WORK/smoke.txt" 2>&1
  echo "exit $?" >> "$WORK/smoke.txt"
  say "burst of 500"
  timeout 90 python3 -m verify.bench --recipe "$RECIPE" --target "$TARGET" --endpoint "$S" \
    --burst 500 --token-prompts --out "$WORK/burst" > "$WORK/burst.txt" 2>&1
  echo "exit $?" >> "$WORK/burst.txt"
fi

# The deciding lines: which fused-MoE config each rank read (N=352 at TP=2), backends, graphs,
# the engine's parallel layout and how NCCL connected the two ranks.
{
  echo "== node commands"; cat "$WORK/commands.sh"
  for r in 0 1; do
    echo "== rank $r"
    grep -hE "MoE config|Using configuration from|Config file not found|MoE backend|attention backend|backend\.|Graph capturing finished|tensor_parallel_size=|headless|DP group leader|world_size=|Resolved architecture|Sharing target model|Error|error:" \
      "$WORK/rank$r.log" | grep -v "NCCL INFO" | cut -c1-400 | sort -u | head -n 60
    echo "-- NCCL transport (rank $r)"
    grep -hE "NCCL INFO (Using network|Channel 00.*via|NET/Socket : Using|comm .* nRanks 2)" "$WORK/rank$r.log" | cut -c1-200 | sort -u | head -n 12
  done
  echo "== smoke"; tail -n 15 "$WORK/smoke.txt" 2>/dev/null
  echo "== burst"; grep -A3 -i "burst" "$WORK/burst/bench.md" 2>/dev/null | head -n 12; tail -n 3 "$WORK/burst.txt" 2>/dev/null
} > "$WORK/summary.txt" 2>&1

stop_nodes
trap - EXIT
TARBALL="$OUT/two-node-h200-vllm$VLLM_VERSION-L$LAYERS.tgz"
tar czf "$TARBALL" -C "$WORK" --exclude=models --exclude='cache-rank*' .
say "wrote $TARBALL"
cat "$WORK/summary.txt"
say "done"
