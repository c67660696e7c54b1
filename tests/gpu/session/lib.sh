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
  tar czf "$OUT/$SESSION.tgz" -C "$(dirname "$W")" --exclude='*models*' --exclude='*/cache' \
    --exclude='*.spec.json' --exclude='*.dist-info' --exclude='*/compile' --exclude='*/plugin' \
    --exclude='repo[0-9]*' --exclude='*.pt.trace.json*' "$(basename "$W")" 2>/dev/null
  cp "$W/timeline.txt" "$OUT/" 2>/dev/null
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

wait_for_jobs() {   # $1 = seconds at most, $2 = pgrep pattern of the jobs
  local t0; t0=$(date +%s)
  while [ $(( $(date +%s) - t0 )) -lt "$1" ]; do
    pgrep -f "$2" > /dev/null || break
    sleep 5
  done
}
