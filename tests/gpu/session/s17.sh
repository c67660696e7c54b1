#!/bin/bash
# The H200 session of 2026-12-01 (one GPU): vLLM 0.25.0, 0.27.1 and 0.33.0 staged side by side
# (stage.py with 52 MiB parts into .gpu-stage25/, .gpu-stage271/ and .gpu-stage33/, each
# gpu_setup.sh rewritten to install into /tmp/site<R> + /tmp/extra<R>). The jobs run as daemons
# (setsid) so that the staging calls of the next release go on while the GPU works:
#   bash tests/gpu/session/s17.sh stage25|stage271|stage33  copy the carried part; pack, progress
#   PARTS=N bash tests/gpu/session/s17.sh start25          install 0.25.0 (all N parts there), start job 25
#   PARTS=N bash tests/gpu/session/s17.sh start271         install 0.27.1, start job 271
#   PARTS=N bash tests/gpu/session/s17.sh start33          install 0.33.0, start job 33
# Lessons of 2026-12-01 (docs/gpu-evidence.md §8): a call may carry 64 MiB with the work tree (a part
# and the wheelhouse do not fit together); the machine goes back after 30 s without a call, so
# nothing local between staging calls; jobs run from their own copy of the repository.
#   bash tests/gpu/session/s17.sh collect [WAIT_S]         wait up to WAIT_S for the jobs, pack
# Job 25 (vLLM 0.25.0 + the series, PR #47920's backport among it, issue 17 item 2):
#   the V2 smoke with both controls and --lossless.
#   bash tests/gpu/session/s17.sh profile                  start tests/gpu/session/profile17.sh
# Job 271 (vLLM 0.27.1, issue 17 item 1), smokes at once on the one GPU:
#   26B-A4B shapes on the release's default runner for this model (V1) and on V2, both controls;
#   31B shapes with the recipe's k (V2, k=3); transformers 5.15.0 in a copy of the install: the
#   smoke fails naming cause and remedy, `build.py apply` pins 5.14.1, the smoke passes;
#   then the recipe's own serve command (benchmarks/gpu/serve_local.py) with mtp_smoke --endpoint
#   and a 500-request burst; then the bench: the recipe against the release's stock default.
# Job 33 (vLLM 0.33.0): the same smokes (V2 is the default runner for every model there), then the
#   bench: the recipe against the stock default, and FlashAttention 4 against TRITON_ATTN.
# Everything lands under /tmp/s17 (logs/ per step, timeline.txt); `collect` packs it, without model
# folders and caches, into $OUT/s17.tgz.
set -u
PLAN=${1:?plan}
W=/tmp/s17
L=$W/logs
mkdir -p "$W" "$L"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stamp() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$W/timeline.txt"; }
progress() { tail -n "${1:-6}" "$W/timeline.txt" 2>/dev/null; }
pack() {   # what has landed so far, each call: a machine taken back loses nothing already packed
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/s17.tgz" -C /tmp --exclude='*models' --exclude='*/cache' --exclude='*.spec.json' \
    --exclude='*.dist-info' --exclude='*/compile' s17 2>/dev/null
  cp "$W/timeline.txt" "$OUT/" 2>/dev/null
}

SMOKE=(--target h200 --dummy --layers 10 --attention-backend TRITON_ATTN --max-model-len 4096
       --gpu-memory-utilization 0.1 --kv-cache-gib 2 --moe-config-dir patches/moe-configs)
SMOKE26=(--recipe gemma-4-26b-a4b-it "${SMOKE[@]}")
SMOKE31=(--recipe gemma-4-31b-it --shape 31b "${SMOKE[@]}")

site_path() {   # $1 = 25 | 271: the PYTHONPATH gpu_setup.sh printed for that release
  sed -n 's/^export PYTHONPATH=//p' "$L/install$1.txt" | tail -n 1
}

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
  stamp "$name: exit $rc $(grep -E '^(PASS|FAIL)' "$L/$name.txt" | tail -n 1 | cut -c1-120)"
}

job25() {
  local P; P=$(site_path 25)
  { date -u; nvidia-smi -L; versions "$P"; } > "$L/machine25.txt" 2>&1
  PYTHONPATH=$P python3 build.py apply --site-packages /tmp/site25 --vllm 0.25.0 > "$L/apply25.txt" 2>&1
  stamp "25: apply exit $? $(tail -n 1 "$L/apply25.txt" | cut -c1-160)"
  grep -n "seq_lens" /tmp/site25/vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py \
    > "$L/47920-lines25.txt" 2>&1
  smoke smoke25-v2-47920 "$P" 420 "${SMOKE26[@]}" --runner v2 --lossless --compile-backend eager
  stamp "25: done"
}

drift271() {   # transformers 5.15.0 in a copy of the 0.27.1 install, then build.py apply
  local P=$1 site=/tmp/site271tf
  rm -rf $site && cp -a /tmp/site271 $site
  rm -rf $site/transformers $site/transformers-*.dist-info $site/tokenizers $site/tokenizers-*.dist-info
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site /tmp/whl/a/*.whl \
    > "$L/drift271-pip.txt" 2>&1
  local TP=${P//\/tmp\/site271/$site}
  echo "before: $(versions "$TP")" > "$L/drift271-versions.txt"
  smoke drift271-515 "$TP" 240 "${SMOKE26[@]}" --runner v2 --compile-backend eager
  PYTHONPATH=$TP python3 build.py apply --site-packages $site --vllm 0.27.1 --find-links /tmp/whl/b \
    > "$L/drift271-apply.txt" 2>&1
  echo "exit $?" >> "$L/drift271-apply.txt"
  echo "after apply: $(versions "$TP")" >> "$L/drift271-versions.txt"
  stamp "drift271: apply $(tail -n 2 "$L/drift271-apply.txt" | tr '\n' ' ' | cut -c1-160)"
  smoke drift271-applied "$TP" 420 "${SMOKE26[@]}" --runner v2 --compile-backend eager
}

serve271() {
  local P=$1 S=http://127.0.0.1:8012 up=0
  stamp "serve271: start"
  PYTHONPATH=$P python3 -m benchmarks.gpu.serve_local --vllm 0.27.1 --models $W/serve-models \
    --work $W/serve --gpu-memory-utilization 0.15 --json > "$L/serve271-plan.json" 2>&1
  PYTHONPATH=$P python3 -m benchmarks.gpu.serve_local --vllm 0.27.1 --models $W/serve-models \
    --work $W/serve --gpu-memory-utilization 0.15 > "$W/serve-command.sh" 2>> "$L/serve271-plan.json"
  mkdir -p $W/serve
  PYTHONPATH=$P setsid bash "$W/serve-command.sh" > "$W/serve/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 60); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$S/health" 2>/dev/null && { up=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 8
  done
  stamp "serve271: up=$up"
  if [ $up = 1 ]; then
    PYTHONPATH=$P timeout 120 python3 -m verify.mtp_smoke --recipe gemma-4-26b-a4b-it --target h200 \
      --endpoint $S --dummy --server-log $W/serve/server.log --max-tokens 64 --out $W/serve-smoke \
      > "$L/serve271-smoke.txt" 2>&1
    echo "exit $?" >> "$L/serve271-smoke.txt"
    PYTHONPATH=$P timeout 150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --target h200 \
      --endpoint $S --burst 500 --token-prompts --out $W/serve-burst > "$L/serve271-burst.txt" 2>&1
    echo "exit $?" >> "$L/serve271-burst.txt"
    stamp "serve271: smoke $(tail -n 1 "$L/serve271-smoke.txt"), burst $(tail -n 1 "$L/serve271-burst.txt")"
  fi
  kill -TERM -- -$pid 2>/dev/null; sleep 8; kill -KILL -- -$pid 2>/dev/null
}

bench271() {
  local P=$1
  stamp "bench271: start"
  PYTHONPATH=$P timeout 480 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --target h200 --dummy --layers 10 --parallel --gpu-memory-utilization 0.08 --kv-cache-gib 1 \
    --max-model-len 4096 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs \
    --windows "sustained,conc8" --sustained-tokens 256 --repeat 2 --configs "" \
    --profile spark343=0.84/0.60/0.39/0.27 --profile seed87=rate@0.87 --timeout 460 \
    --engine "name=stock,dtype=auto,runner=default,attention=default,compile=inductor" \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-mtp4-v1,k=4,runner=v1" \
    --out $W/bench271 > "$L/bench271.txt" 2>&1
  stamp "bench271: exit $? $(tail -n 1 "$L/bench271.txt" | cut -c1-120)"
}

bench33() {
  local P=$1
  stamp "bench33: start"
  PYTHONPATH=$P timeout 500 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --target h200 --dummy --layers 10 --parallel --gpu-memory-utilization 0.08 --kv-cache-gib 1 \
    --max-model-len 4096 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs \
    --windows "sustained,conc8" --sustained-tokens 256 --repeat 2 --configs "" \
    --profile spark343=0.84/0.60/0.39/0.27 --profile seed87=rate@0.87 --timeout 480 \
    --engine "name=stock,dtype=auto,runner=default,attention=default,compile=inductor" \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-v2-fa4,k=0,runner=v2,attention=default" \
    --engine "name=fp8-mtp4-v2-fa4,k=4,runner=v2,attention=default" \
    --out $W/bench33 > "$L/bench33.txt" 2>&1
  stamp "bench33: exit $? $(tail -n 1 "$L/bench33.txt" | cut -c1-120)"
}

job33() {
  local P; P=$(site_path 33)
  { date -u; nvidia-smi -L; versions "$P"; } > "$L/machine33.txt" 2>&1
  PYTHONPATH=$P python3 build.py apply --site-packages /tmp/site33 --vllm 0.33.0 > "$L/apply33.txt" 2>&1
  stamp "33: apply exit $? $(tail -n 1 "$L/apply33.txt" | cut -c1-160)"
  smoke smoke33-26b-v2 "$P" 480 "${SMOKE26[@]}" --runner v2 --lossless --compile-backend eager &
  smoke smoke33-26b-v1 "$P" 480 "${SMOKE26[@]}" --runner v1 &
  smoke smoke33-31b-v2 "$P" 480 "${SMOKE31[@]}" --runner v2 --compile-backend eager &
  wait
  bench33 "$P"
  stamp "33: done"
}

job271() {
  local P; P=$(site_path 271)
  { date -u; nvidia-smi -L; versions "$P"; } > "$L/machine271.txt" 2>&1
  PYTHONPATH=$P python3 build.py apply --site-packages /tmp/site271 --vllm 0.27.1 > "$L/apply271.txt" 2>&1
  stamp "271: apply exit $? $(tail -n 1 "$L/apply271.txt" | cut -c1-160)"
  smoke smoke271-26b-v1 "$P" 480 "${SMOKE26[@]}" --runner v1 &
  smoke smoke271-26b-v2 "$P" 480 "${SMOKE26[@]}" --runner v2 --lossless --compile-backend eager &
  smoke smoke271-31b-v2 "$P" 480 "${SMOKE31[@]}" --runner v2 --compile-backend eager &
  drift271 "$P" &
  serve271 "$P" &
  wait
  [ -n "${SKIP_BENCH271:-}" ] || bench271 "$P"
  stamp "271: done"
}

case $PLAN in
  stage25|stage271|stage33)
    bash ".gpu-$PLAN/gpu_setup.sh" | tail -n 1
    [ -d .whl ] && { mkdir -p /tmp/whl && cp -r .whl/* /tmp/whl/ 2>/dev/null; ls /tmp/whl; }
    pack; progress ;;
  start25|start271|start33)
    R=${PLAN#start}
    # Every part must be on the host before the install (2026-12-01: an install that ran without
    # the last part left its wheels out, and no 0.27.1 engine could import vLLM). PARTS=N names
    # how many stage.py wrote.
    have=$(find "/tmp/stage$R" -mindepth 1 -maxdepth 1 -type d -name 'p*' | wc -l)
    if [ -z "${PARTS:-}" ] || [ "$have" -ne "$PARTS" ]; then
      stamp "install $R refused: $have of ${PARTS:-?} parts staged"; exit 3
    fi
    bash ".gpu-stage$R/gpu_setup.sh" install > "$L/install$R.txt" 2>&1
    stamp "install $R exit $?: $(tail -n 1 "$L/install$R.txt")"
    # The job runs from its own copy of the repository: each device call replaces the work tree,
    # and a job reading it meanwhile (2026-12-01: patches/series.yaml mid-copy) fails.
    rm -rf "$W/repo$R" && mkdir -p "$W/repo$R"
    tar cf - --exclude='./.gpu-stage*' --exclude=./.whl . | tar xf - -C "$W/repo$R"
    (cd "$W/repo$R" && setsid nohup bash tests/gpu/session/s17.sh "job$R" > "$L/job$R.txt" 2>&1 < /dev/null &)
    sleep 2; progress ;;
  job25) job25 ;;
  job271) job271 ;;
  job33) job33 ;;
  profile)   # the decode-step profiles (issue 19), as a daemon on whichever release is installed
    setsid nohup bash tests/gpu/session/profile17.sh "$W" > "$L/profile.txt" 2>&1 < /dev/null &
    sleep 2; progress ;;
  collect)
    WAIT=${2:-0}; T0=$(date +%s)
    while [ $(( $(date +%s) - T0 )) -lt "$WAIT" ]; do
      pgrep -f "s17.sh job" > /dev/null || break
      sleep 5
    done
    pack; progress 60; du -h "$OUT/s17.tgz" ;;
  *) echo "unknown plan $PLAN"; exit 2 ;;
esac
