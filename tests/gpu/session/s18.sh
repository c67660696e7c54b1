#!/bin/bash
# The second H200 session of 2026-12-01 (one GPU): vLLM 0.27.1 only (issue 17), the Qwen family on
# it (issue 18), the decode-step profiles and speed candidates (issue 19).
# Staging: stage.py with 52 MiB parts into .gpu-stage271/ (gpu_setup.sh rewritten to install into
# /tmp/site271 + /tmp/extra271); .whl/a = transformers 5.15.0 + tokenizers 0.22.2 + pycountry (the
# drift case), .whl/b = transformers 5.14.1 (what `build.py apply` pins).
#   bash tests/gpu/session/s18.sh stage              copy the carried part (and .whl); progress
#   PARTS=N bash tests/gpu/session/s18.sh start      install 0.27.1 (all N parts there), start the job
#   bash tests/gpu/session/s18.sh collect [WAIT_S]   wait up to WAIT_S for the job, pack into $OUT
#   JOB=job19 PARTS=N bash tests/gpu/session/s18.sh start   the next session's job (see job19 below)
# Lessons of the morning session (docs/gpu-evidence.md §8): a call may carry 64 MiB with the work
# tree; the machine goes back after 30 s without a call, so nothing local between calls; the job
# runs from its own copy of the repository (each call replaces the work tree); never install
# before every part is there.
# The job, in two phases:
#   untimed, all at once (the GPU lock held shared): mtp_smoke --dummy with both controls on 26B-A4B shapes on V1 (0.27.1's
#     default runner for Gemma 4) and V2 (--lossless), on 31B shapes with the recipe's k=3; the
#     transformers 5.15.0 case (fails naming cause, `build.py apply`, passes); the recipe's serve
#     command with mtp_smoke --endpoint and a 500-request burst; the Qwen3.6-35B-A3B smoke.
#   timed, each job started when its GPU memory fits beside the running ones (a reservation in
#     GB, the untimed jobs' included), every timed window alone on the GPU (VLLM_FORGE_MEASURE_LOCK: engine starts hold it
#     shared): the bench (the recipe against 0.27.1's stock default, the vllm-project/recipes
#     command, the per-token FP8 candidates, online and as a checkpoint), the Qwen bench, the profiles (plain and k=4).
# Everything lands under /tmp/s18 (logs/ per step, timeline.txt); `collect` packs it, without
# model folders and caches, into $OUT/s18.tgz.
set -u
PLAN=${1:?plan}
W=/tmp/s18
L=$W/logs
mkdir -p "$W" "$L"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_FORGE_MEASURE_LOCK=$W/measure.lock
CAPACITY_GB=140   # what the timed jobs may reserve together (an H200 holds ~149 GB)
stamp() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$W/timeline.txt"; }
progress() { tail -n "${1:-6}" "$W/timeline.txt" 2>/dev/null; }
pack() {   # what has landed so far, each call: a machine taken back loses nothing already packed
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/s18.tgz" -C /tmp --exclude='*models*' --exclude='*/cache' --exclude='*.spec.json' \
    --exclude='*.dist-info' --exclude='*/compile' --exclude='*/plugin' --exclude='repo' \
    --exclude='*.pt.trace.json*' s18 2>/dev/null
  cp "$W/timeline.txt" "$OUT/" 2>/dev/null
}

SMOKE=(--target h200 --dummy --layers 10 --attention-backend TRITON_ATTN --max-model-len 4096
       --gpu-memory-utilization 0.1 --kv-cache-gib 2 --moe-config-dir patches/moe-configs)
SMOKE26=(--recipe gemma-4-26b-a4b-it "${SMOKE[@]}")
SMOKE31=(--recipe gemma-4-31b-it --shape 31b "${SMOKE[@]}")
SITE=/tmp/site271

site_path() { sed -n 's/^export PYTHONPATH=//p' "$L/install.txt" | tail -n 1; }

versions() {   # $1 = PYTHONPATH
  PYTHONPATH=$1 python3 -c "import torch, vllm, transformers; print('torch', torch.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -n 1
}

smoke() {   # name, PYTHONPATH, timeout, mtp_smoke args...
  local name=$1 path=$2 t=$3; shift 3
  stamp "$name: start"
  PYTHONPATH=$path timeout "$t" python3 -m verify.mtp_smoke "$@" --timeout $(( t - 15 )) \
    --out "$W/$name" > "$L/$name.txt" 2>&1
  local rc=$?
  echo "exit $rc" >> "$L/$name.txt"
  stamp "$name: exit $rc $(grep -E '^RESULT' "$L/$name.txt" | tail -n 1 | cut -c1-100)"
}

drift() {   # transformers 5.15.0 in a copy of the install, then build.py apply
  local P=$1 site=/tmp/site271tf
  rm -rf $site && cp -a $SITE $site
  rm -rf $site/transformers $site/transformers-*.dist-info $site/tokenizers $site/tokenizers-*.dist-info
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site /tmp/whl/a/*.whl \
    > "$L/drift-pip.txt" 2>&1
  local TP=${P//$SITE/$site}
  echo "before: $(versions "$TP")" > "$L/drift-versions.txt"
  smoke drift-515 "$TP" 300 "${SMOKE26[@]}" --runner v2 --compile-backend eager
  PYTHONPATH=$TP python3 build.py apply --site-packages $site --vllm 0.27.1 --find-links /tmp/whl/b \
    > "$L/drift-apply.txt" 2>&1
  echo "exit $?" >> "$L/drift-apply.txt"
  echo "after apply: $(versions "$TP")" >> "$L/drift-versions.txt"
  stamp "drift: apply $(tail -n 2 "$L/drift-apply.txt" | tr '\n' ' ' | cut -c1-160)"
  smoke drift-applied "$TP" 420 "${SMOKE26[@]}" --runner v2 --compile-backend eager
}

serve() {
  local P=$1 S=http://127.0.0.1:8012 up=0   # --installed: the GPU host has no index (12:28: the plan died there)
  stamp "serve: start"
  PYTHONPATH=$P python3 -m benchmarks.gpu.serve_local --installed --vllm 0.27.1 --models $W/serve-models \
    --work $W/serve --gpu-memory-utilization 0.15 --json > "$L/serve-plan.json" 2>&1
  PYTHONPATH=$P python3 -m benchmarks.gpu.serve_local --installed --vllm 0.27.1 --models $W/serve-models \
    --work $W/serve --gpu-memory-utilization 0.15 > "$W/serve-command.sh" 2>> "$L/serve-plan.json"
  mkdir -p $W/serve
  PYTHONPATH=$P setsid bash "$W/serve-command.sh" > "$W/serve/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 60); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$S/health" 2>/dev/null && { up=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 6
  done
  stamp "serve: up=$up"
  if [ $up = 1 ]; then
    PYTHONPATH=$P timeout 150 python3 -m verify.mtp_smoke --recipe gemma-4-26b-a4b-it --target h200 \
      --endpoint $S --dummy --server-log $W/serve/server.log --max-tokens 64 --out $W/serve-smoke \
      > "$L/serve-smoke.txt" 2>&1
    echo "exit $?" >> "$L/serve-smoke.txt"
    PYTHONPATH=$P timeout 200 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --target h200 \
      --endpoint $S --burst 500 --token-prompts --out $W/serve-burst > "$L/serve-burst.txt" 2>&1
    echo "exit $?" >> "$L/serve-burst.txt"
    stamp "serve: smoke $(tail -n 1 "$L/serve-smoke.txt"), burst $(tail -n 1 "$L/serve-burst.txt")"
  fi
  kill -TERM -- -$pid 2>/dev/null; sleep 8; kill -KILL -- -$pid 2>/dev/null
}

reserve() {   # name, GB: wait until the GB fit beside what the running timed jobs reserved
  local name=$1 need=$2 used
  while :; do
    used=$( (flock 9; awk '{s += $2} END {print s + 0}' "$W/reserved" 2>/dev/null) 9> "$W/sched.lock")
    if [ $(( used + need )) -le $CAPACITY_GB ]; then
      (flock 9; echo "$name $need" >> "$W/reserved") 9> "$W/sched.lock"
      # a second job may have read the same total: the later line of two that overfill leaves
      used=$( (flock 9; awk '{s += $2} END {print s + 0}' "$W/reserved") 9> "$W/sched.lock")
      [ "$used" -le $CAPACITY_GB ] && return 0
      release "$name"
    fi
    sleep $(( 3 + RANDOM % 5 ))
  done
}
release() { (flock 9; grep -v "^$1 " "$W/reserved" > "$W/reserved.tmp"; mv "$W/reserved.tmp" "$W/reserved") 9> "$W/sched.lock"; }
timed() {   # name, GB, command...: run under a reservation
  local name=$1 need=$2; shift 2
  reserve "$name" "$need"
  stamp "$name: start ($need GB reserved)"
  "$@" > "$L/$name.txt" 2>&1
  local rc=$?
  release "$name"
  stamp "$name: exit $rc $(tail -n 1 "$L/$name.txt" | cut -c1-120)"
}

BENCH=(--target h200 --dummy --parallel --gpu-memory-utilization 0.08 --kv-cache-gib 1
       --max-model-len 4096 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs
       --windows "sustained,conc8" --sustained-tokens 256 --repeat 2 --configs ""
       --profile spark343=0.84/0.60/0.39/0.27 --profile seed87=rate@0.87 --timeout 1100)

bench26() {   # the recipe (fp8, V2, k=4), stock, the vllm-project/recipes command, per-token FP8
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" \
    --engine "name=stock,dtype=auto,runner=default,attention=default,compile=inductor" \
    --engine "name=peer-bf16-mtp4,dtype=bf16,k=4,runner=default,attention=default,compile=inductor,moe=none" \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8pc-v2,dtype=fp8_per_channel,k=0,runner=v2" \
    --engine "name=fp8pc-mtp4-v2,dtype=fp8_per_channel,k=4,runner=v2" \
    --engine "name=fp8dyn-v2,dtype=fp8-dynamic,k=0,runner=v2" \
    --out $W/bench26
}

bench_qwen() {   # the Qwen recipe (fp8, V1, k=2) against its plain engine
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe qwen3.6-35b-a3b --layers 8 "${BENCH[@]}" \
    --engine "name=fp8-v1,k=0,runner=v1" --engine "name=fp8-mtp2-v1,k=2,runner=v1" \
    --engine "name=fp8-mtp1-v1,k=1,runner=v1" --out $W/bench-qwen
}

profile() {   # name, PYTHONPATH, k, extra args
  local name=$1 P=$2 k=$3; shift 3
  PYTHONPATH=$P timeout 1150 python3 -m verify.profile --recipe gemma-4-26b-a4b-it --target h200 \
    --dummy --layers 30 --k "$k" --tokens 128 --attention-backend TRITON_ATTN \
    --moe-config-dir patches/moe-configs --gpu-memory-utilization 0.25 --kv-cache-gib 2 \
    --max-model-len 8192 --max-seconds 1100 "$@" --out "$W/$name"
}

untimed() {   # name, GB, command...: its GB reserved, the GPU lock held shared throughout, so
  # no timed window runs beside it (engines of timed jobs may start meanwhile)
  local name=$1 need=$2; shift 2
  reserve "$name" "$need"
  ( flock -s 8; "$@" ) 8>> "$VLLM_FORGE_MEASURE_LOCK"
  release "$name"
}

job() {
  local P; P=$(site_path)
  { date -u; nvidia-smi -L; versions "$P"; } > "$L/machine.txt" 2>&1
  PYTHONPATH=$P python3 build.py apply --site-packages $SITE --vllm 0.27.1 > "$L/apply.txt" 2>&1
  stamp "apply exit $? $(tail -n 1 "$L/apply.txt" | cut -c1-160)"
  # GB: 26B-A4B at 10 layers ~21 (BF16) / ~12 (FP8) an engine, at 30 layers FP8 ~32; Qwen at 8
  # layers FP8 ~10
  untimed smoke-26b-v1 14 smoke smoke-26b-v1 "$P" 480 "${SMOKE26[@]}" --runner v1 &
  untimed smoke-26b-v2 14 smoke smoke-26b-v2 "$P" 480 "${SMOKE26[@]}" --runner v2 --lossless \
    --compile-backend eager &
  untimed smoke-31b-v2 14 smoke smoke-31b-v2 "$P" 480 "${SMOKE31[@]}" --runner v2 --compile-backend eager &
  untimed smoke-qwen-v1 20 smoke smoke-qwen-v1 "$P" 480 --recipe qwen3.6-35b-a3b --target h200 \
    --dummy --layers 8 --lossless --max-model-len 4096 --gpu-memory-utilization 0.15 \
    --kv-cache-gib 2 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs &
  [ -n "${SKIP_DRIFT:-}" ] || untimed drift 14 drift "$P" &
  untimed serve 21 serve "$P" &
  sleep 3   # the untimed jobs reserve first
  timed profile-plain 32 profile profile-plain "$P" 0 &
  sleep 1; timed profile-k4 34 profile profile-k4 "$P" 4 &
  sleep 1; timed bench-qwen 30 bench_qwen "$P" &
  sleep 1; timed bench26 102 bench26 "$P" &
  wait
  stamp "done"
}

# --- the next 0.27.1 session's job (prepared after §9, not run yet): what §9 left ------------
# JOB=job19 PARTS=N bash tests/gpu/session/s18.sh start. The serve case (now --installed), the
# Qwen smoke and bench (the spawn fix), and the first candidate patch measured end to end:
# triton-spec-decode-split-kv (#52879's backport; the k=4 step's attention ran 25 µs a launch on
# the 2D path, §9.4) in a copy of the install, its lossless smoke, the bench against the recipe at
# 30 layers, and its k=4 profile.
PATCHED=/tmp/site-splitkv

patched_copy() {   # the install's vllm/ in a copy, with the candidate applied
  rm -rf $PATCHED && mkdir -p $PATCHED && cp -a $SITE/vllm $SITE/vllm-0.27.1*.dist-info $PATCHED/
  PYTHONPATH=$1 python3 build.py apply --site-packages $PATCHED --vllm 0.27.1 \
    --with-candidate triton-spec-decode-split-kv > "$L/apply-splitkv.txt" 2>&1
  stamp "splitkv: apply exit $? $(head -n 1 "$L/apply-splitkv.txt" | cut -c1-160)"
}

bench_splitkv() {   # the recipe against the recipe with the candidate, 30 layers, one run
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 30 "${BENCH[@]}" --gpu-memory-utilization 0.25 --kv-cache-gib 2 \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-mtp4-v2-splitkv,k=4,runner=v2,site=$PATCHED" --out $W/bench-splitkv
}

job19() {
  local P; P=$(site_path)
  { date -u; nvidia-smi -L; versions "$P"; } > "$L/machine.txt" 2>&1
  PYTHONPATH=$P python3 build.py apply --site-packages $SITE --vllm 0.27.1 > "$L/apply.txt" 2>&1
  stamp "apply exit $? $(tail -n 1 "$L/apply.txt" | cut -c1-160)"
  patched_copy "$P"
  local PP="$PATCHED:$P"
  untimed serve 21 serve "$P" &
  untimed smoke-qwen-v1 20 smoke smoke-qwen-v1 "$P" 480 --recipe qwen3.6-35b-a3b --target h200 \
    --dummy --layers 8 --lossless --max-model-len 4096 --gpu-memory-utilization 0.15 \
    --kv-cache-gib 2 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs &
  untimed smoke-splitkv-v2 14 smoke smoke-splitkv-v2 "$PP" 480 "${SMOKE26[@]}" --runner v2 \
    --lossless --compile-backend eager &
  sleep 3
  timed bench-qwen 30 bench_qwen "$P" &
  sleep 1; timed profile-k4-splitkv 34 profile profile-k4-splitkv "$PP" 4 &
  sleep 1; timed bench-splitkv 100 bench_splitkv "$P" &
  wait
  stamp "done"
}

case $PLAN in
  stage)
    bash .gpu-stage271/gpu_setup.sh | tail -n 1
    [ -d .whl ] && { mkdir -p /tmp/whl && cp -r .whl/* /tmp/whl/ 2>/dev/null; ls /tmp/whl; }
    echo "parts: $(find /tmp/stage271 -mindepth 1 -maxdepth 1 -type d -name 'p*' | wc -l)"
    pack; progress ;;
  start)
    have=$(find /tmp/stage271 -mindepth 1 -maxdepth 1 -type d -name 'p*' | wc -l)
    if [ -z "${PARTS:-}" ] || [ "$have" -ne "$PARTS" ] || [ ! -d /tmp/whl/a ]; then
      stamp "install refused: $have of ${PARTS:-?} parts staged, /tmp/whl: $(ls /tmp/whl 2>&1)"; exit 3
    fi
    bash .gpu-stage271/gpu_setup.sh install > "$L/install.txt" 2>&1
    stamp "install exit $?: $(tail -n 1 "$L/install.txt")"
    # transformers' MistralCommonBackend import needs pycountry, which 0.27.1's wheel set leaves
    # out (12:23 UTC: every engine stopped there; the `restart` plan below is how it was mended)
    python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE /tmp/whl/a/pycountry-*.whl 2>&1 | tail -n 2
    rm -rf "$W/repo" && mkdir -p "$W/repo"
    tar cf - --exclude='./.gpu-stage*' --exclude=./.whl . | tar xf - -C "$W/repo"
    (cd "$W/repo" && setsid nohup bash tests/gpu/session/s18.sh "${JOB:-job}" > "$L/job.txt" 2>&1 < /dev/null &)
    sleep 2; progress ;;
  restart)   # pycountry was missing from the install (transformers' MistralCommonBackend import)
    python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE /tmp/whl/a/pycountry-*.whl 2>&1 | tail -n 2
    stamp "restart: pycountry into $SITE"
    rm -rf "$W/repo" && mkdir -p "$W/repo"
    tar cf - --exclude='./.gpu-stage*' --exclude=./.whl . | tar xf - -C "$W/repo"
    (cd "$W/repo" && SKIP_DRIFT=1 setsid nohup bash tests/gpu/session/s18.sh job > "$L/job2.txt" 2>&1 < /dev/null &)
    sleep 2; progress ;;
  job) job ;;
  job19) job19 ;;
  collect)
    WAIT=${2:-0}; T0=$(date +%s)
    while [ $(( $(date +%s) - T0 )) -lt "$WAIT" ]; do
      pgrep -f "s18.sh job" > /dev/null || break
      sleep 5
    done
    pack; progress 40; nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
    du -h "$OUT/s18.tgz" ;;
  *) echo "unknown plan $PLAN"; exit 2 ;;
esac
