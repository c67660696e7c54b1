#!/bin/bash
# What every H200 session script from s19 on shares (s15-s18 keep their own copies: they are the
# record of what ran). Source it after setting W (the session's work folder on the GPU host) and
# SESSION (the name of the archive `pack` writes into $OUT).
#
# The scheduling model, learned in §8 and §9 of docs/gpu-evidence.md:
#   untimed work (smokes, serve cases) holds the GPU lock shared, so no timed window runs beside it;
#   timed work (bench, profiles) starts once its GPU memory fits beside what the others reserved,
#   and verify's engines take the lock alone only for each timed window (VLLM_FORGE_MEASURE_LOCK).
: "${W:?set W}" "${SESSION:?set SESSION}"
L=$W/logs
mkdir -p "$W" "$L"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_FORGE_MEASURE_LOCK=$W/measure.lock
CAPACITY_GB=${CAPACITY_GB:-140}   # what the jobs may reserve together (an H200 holds ~149 GB)

stamp() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$W/timeline.txt"; }
progress() { tail -n "${1:-6}" "$W/timeline.txt" 2>/dev/null; }

pack() {   # what has landed so far, each call: a machine taken back loses nothing already packed
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/$SESSION.tgz" -C "$(dirname "$W")" --exclude='*models*' --exclude='*/cache' --exclude='*vllm-forge-cache*' \
    --exclude='*.spec.json' --exclude='*.dist-info' --exclude='*/compile' --exclude='*/plugin' \
    --exclude='repo[0-9]*' --exclude='*.pt.trace.json*' "$(basename "$W")" 2>/dev/null
  [ ! -f "$W/timeline.txt" ] || cp "$W/timeline.txt" "$OUT/"
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
  stamp "$name: exit $rc $(grep -E '^RESULT' "$L/$name.txt" | tail -n 1 | cut -c1-100)"
}

reserve() {   # name, GB: wait until the GB fit beside what the running jobs reserved
  local name=$1 need=$2 used
  while :; do
    used=$( (flock 9; awk '{s += $2} END {print s + 0}' "$W/reserved" 2>/dev/null) 9> "$W/sched.lock")
    if [ $(( used + need )) -le "$CAPACITY_GB" ]; then
      (flock 9; echo "$name $need" >> "$W/reserved") 9> "$W/sched.lock"
      # a second job may have read the same total: the later line of two that overfill leaves
      used=$( (flock 9; awk '{s += $2} END {print s + 0}' "$W/reserved") 9> "$W/sched.lock")
      [ "$used" -le "$CAPACITY_GB" ] && return 0
      release "$name"
    fi
    sleep $(( 3 + RANDOM % 5 ))
  done
}

release() {
  (flock 9; grep -v "^$1 " "$W/reserved" > "$W/reserved.tmp"; mv "$W/reserved.tmp" "$W/reserved") 9> "$W/sched.lock"
}

timed() {   # name, GB, command...: run under a reservation; the output is logs/<name>.txt
  local name=$1 need=$2; shift 2
  reserve "$name" "$need"
  stamp "$name: start ($need GB reserved)"
  "$@" > "$L/$name.txt" 2>&1
  local rc=$?
  release "$name"
  stamp "$name: exit $rc $(tail -n 1 "$L/$name.txt" | cut -c1-120)"
}

untimed() {   # name, GB, command...: its GB reserved, the GPU lock held shared throughout, so
  # no timed window runs beside it (engines of timed jobs may start meanwhile)
  local name=$1 need=$2; shift 2
  reserve "$name" "$need"
  ( flock -s 8; "$@" ) 8>> "$VLLM_FORGE_MEASURE_LOCK"
  release "$name"
}

parts_staged() { find "/tmp/stage$1" -mindepth 1 -maxdepth 1 -type d -name 'p*' 2>/dev/null | wc -l; }

repo_copy() {   # $1 = folder: the job's own copy of the repository (a later call replaces the work tree)
  rm -rf "$1" && mkdir -p "$1"
  tar cf - --exclude='./.gpu-stage*' --exclude=./.whl . | tar xf - -C "$1"
}

jobs_pattern() {   # script: the pgrep pattern of the jobs `start` started from it (§14: a job
  # named by JOB= was not waited for, as the pattern was fixed to `job`)
  local names; names=$(paste -sd'|' "$W/jobs" 2>/dev/null)
  echo "$(basename "$1") (${names:-job[0-9]+})\$"
}

wait_for_jobs() {   # $1 = seconds at most, $2 = pgrep pattern of the jobs
  local t0; t0=$(date +%s)
  while [ $(( $(date +%s) - t0 )) -lt "$1" ]; do
    pgrep -f "$2" > /dev/null || break
    sleep 5
  done
}

# --- releases: staged by stage.py into .gpu-stage<R>/, installed into /tmp/site<R> + /tmp/extra<R> --
# R names a release: 25 = 0.25.0, 271 = 0.27.1, 33 = 0.33.0. PARTS<R> = how many parts stage.py wrote
# (never install before every part is there: §8). /tmp/whl/c holds nvidia-cutlass-dsl-libs-core
# (the `cutlass` package FlashAttention 4 imports, §10) and what it needs where the host lacks it.

path_of() { cat "$W/path$1"; }

# --- install -------------------------------------------------------------------------------

cutlass_core() {   # R, cutlass-dsl version: libs-core into libs-base's folder, then what it needs
  local R=$1 v=$2 X=/tmp/extra$1 M=/tmp/more$1 P
  python3 -m zipfile -e /tmp/whl/c/nvidia_cutlass_dsl_libs_core-"$v"-py3-none-any.whl "$X"
  mkdir -p "$M"
  P="$M:$(path_of "$R")"
  PYTHONPATH=$P python3 -c "import cuda.bindings" 2>/dev/null || python3 -m pip install -q --no-index \
    --no-deps --no-compile --target "$M" /tmp/whl/c/cuda_bindings-*.whl /tmp/whl/c/cuda_pathfinder-*.whl
  # protobuf stays the host's (7.36.2): libs-base 4.6.0 asks for <7, but the protobuf 6.33.5 staged
  # in §10's first attempt broke vLLM's own import (the host's generated *_pb2 modules need 7:
  # "module 'google.protobuf.message' has no attribute 'FrozenInstanceError'")
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$M/nvdisasm" /tmp/whl/c/nvidia_cuda_nvdisasm-*.whl
  echo "$P:$M/nvdisasm" > "$W/path$R"
  PYTHONPATH=$(path_of "$R") python3 -c "import cutlass, cutlass.cute, google.protobuf as p; print('cutlass.cute from', cutlass.__file__, 'protobuf', p.__version__)" 2>&1 | tail -n 2
}

install_release() {   # R
  local R=$1 n need
  n=$(parts_staged "$R"); eval "need=\${PARTS$R:-}"
  if [ -z "$need" ] || [ "$n" -ne "$need" ] || [ ! -d /tmp/whl/c ]; then
    stamp "install $R refused: $n of ${need:-?} parts staged, /tmp/whl: $(ls /tmp/whl 2>&1 | tr '\n' ' ')"
    return 3
  fi
  bash ".gpu-stage$R/gpu_setup.sh" install > "$L/install$R.txt" 2>&1
  local rc=$?
  sed -n 's/^export PYTHONPATH=//p' "$L/install$R.txt" | tail -n 1 > "$W/path$R"
  case $R in
    271) # transformers' MistralCommonBackend import needs pycountry (§9: every engine stopped there)
         python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site271 /tmp/whl/a/pycountry-*.whl
         # gpu_setup.sh skips the .pth's import line that names dsl_packages: the Qwen family's
         # linear attention imports cutlass (s23's first Qwen profiles died there)
         grep -q dsl_packages "$W/path271" || echo "$(cat "$W/path271"):/tmp/extra271/nvidia_cutlass_dsl/dsl_packages" > "$W/path271"
         cutlass_core 271 4.6.0 >> "$L/install$R.txt" 2>&1 ;;
    33)  # gpu_setup.sh of 0.33.0 leaves nvidia-cutlass-dsl's import-line .pth out of the path (§8)
         echo "$(cat "$W/path33"):/tmp/extra33/nvidia_cutlass_dsl/dsl_packages" > "$W/path33"
         cutlass_core 33 4.8.0 >> "$L/install$R.txt" 2>&1 ;;
  esac
  stamp "install $R exit $rc: $(tail -n 1 "$L/install$R.txt" | cut -c1-160)"
  return $rc
}

# --- the work ------------------------------------------------------------------------------

record_machine() {   # R: what the engines of this release run on
  { date -u; nvidia-smi -L; versions "$(path_of "$1")"; } > "$L/machine$1.txt" 2>&1
}

apply_series() {   # R, vLLM version, site-packages
  PYTHONPATH=$(path_of "$1") python3 build.py apply --site-packages "$3" --vllm "$2" > "$L/apply$1.txt" 2>&1
  stamp "apply $2 exit $? $(tail -n 1 "$L/apply$1.txt" | cut -c1-140)"
}

serve() {   # PYTHONPATH, vLLM version[, control, port]: the recipe's own serve command, then the
  # endpoint smoke and a burst. With a control (agree|random) the server serves verify's control
  # model (serve_local.py --control) and the smoke holds it to that control (--expect-control);
  # no burst against the agreeing one (it would time a model whose every draft is accepted).
  local P=$1 V=$2 C=${3:-} port=${4:-8012} up=0 pid N=serve${3:+-$3}
  local S=http://127.0.0.1:$port ctl=() expect=()
  [ -z "$C" ] || { ctl=(--control "$C"); expect=(--expect-control "$C"); }
  stamp "$N: start"
  # --installed: the GPU host has no index (§9: the plan died there)
  local plan=(--installed --vllm "$V" --models "$W/$N-models" --work "$W/$N" --port "$port"
              --gpu-memory-utilization 0.15 --kv-cache-gib 2 "${ctl[@]}")
  PYTHONPATH=$P python3 -m benchmarks.gpu.serve_local "${plan[@]}" --json > "$L/$N-plan.json" 2>&1
  PYTHONPATH=$P python3 -m benchmarks.gpu.serve_local "${plan[@]}" > "$W/$N-command.sh" 2>> "$L/$N-plan.json"
  mkdir -p "$W/$N"
  PYTHONPATH=$P setsid bash "$W/$N-command.sh" > "$W/$N/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 80); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$S/health" 2>/dev/null && { up=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 6
  done
  stamp "$N: up=$up"
  if [ $up = 1 ]; then
    PYTHONPATH=$P timeout 150 python3 -m verify.mtp_smoke --recipe gemma-4-26b-a4b-it --target h200 \
      --endpoint $S --dummy "${expect[@]}" --server-log "$W/$N/server.log" --max-tokens 64 \
      --out "$W/$N-smoke" > "$L/$N-smoke.txt" 2>&1
    echo "exit $?" >> "$L/$N-smoke.txt"
    if [ "$C" != agree ]; then
      PYTHONPATH=$P timeout 200 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --target h200 \
        --endpoint $S --burst 500 --token-prompts --out "$W/$N-burst" > "$L/$N-burst.txt" 2>&1
      echo "exit $?" >> "$L/$N-burst.txt"
    fi
    stamp "$N: smoke $(tail -n 1 "$L/$N-smoke.txt"), burst $(tail -n 1 "$L/$N-burst.txt" 2>/dev/null || echo none)"
  fi
  kill -TERM -- -$pid 2>/dev/null; sleep 8; kill -KILL -- -$pid 2>/dev/null
}

patched_copy() {   # PYTHONPATH, vLLM version, site, copy, log name, candidate ids...: the
  # install's vllm/ in a copy with the candidates applied (bench's site=, mtp_smoke on its path)
  local P=$1 V=$2 site=$3 copy=$4 name=$5; shift 5
  local with=() id
  for id in "$@"; do with+=(--with-candidate "$id"); done
  rm -rf "$copy" && mkdir -p "$copy" && cp -a "$site/vllm" "$site"/vllm-"$V"*.dist-info "$copy/"
  PYTHONPATH=$P python3 build.py apply --site-packages "$copy" --vllm "$V" "${with[@]}" \
    > "$L/apply-$name.txt" 2>&1
  stamp "$name: apply exit $? $(head -n 1 "$L/apply-$name.txt" | cut -c1-160)"
}

summary() {   # each step's verdict, so nothing has to be read between calls (§10: the machine went
  # back while its logs were read here)
  local f
  for f in "$L"/*.txt; do
    [ -f "$f" ] || continue
    printf '%-28s %s
' "$(basename "$f" .txt)" \
      "$(grep -E '^RESULT|^exit |Error|error:' "$f" | grep -v Warning | tail -n 2 | tr '\n' ' ' | cut -c1-150)"
  done
}

session_plan() {   # script, plan, args: what every session script answers besides its own jobs
  local script=$1 plan=$2; shift 2
  case $plan in
    stage)   # R: copy the part this call carries
      bash ".gpu-stage$1/gpu_setup.sh" | tail -n 1
      echo "parts $1: $(parts_staged "$1")"; pack; progress 3 ;;
    stagewhl)
      mkdir -p /tmp/whl && cp -r .whl/* /tmp/whl/ && ls /tmp/whl /tmp/whl/c ;;
    start)   # R...: install each (every part there), start its job (JOB= another job name)
      local R
      for R in "$@"; do
        install_release "$R" || continue
        repo_copy "$W/repo$R"
        # never pipe this call's output: the daemon's start is what the call waits for (§10: a
        # start call piped into tail held the machine until its time ran out)
        echo "${JOB:-job$R}" >> "$W/jobs"
        (cd "$W/repo$R" && setsid nohup bash "tests/gpu/session/$(basename "$script")" "${JOB:-job$R}" \
          > "$L/job$R.txt" 2>&1 < /dev/null &)
      done
      sleep 2; progress 8 ;;
    collect)   # [WAIT_S]: wait up to WAIT_S for the jobs, pack, each step's verdict
      wait_for_jobs "${1:-0}" "$(jobs_pattern "$script")"
      pack; progress 12; summary; nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
      du -h "$OUT/$SESSION.tgz" ;;
    *) echo "unknown plan $plan"; exit 2 ;;
  esac
}
