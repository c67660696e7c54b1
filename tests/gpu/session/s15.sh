#!/bin/bash
# The H200 x2 session of 2026-11-30 15:12-15:36 UTC (vLLM 0.25.0 staged in STAGE, parts p0..pN), three
# calls (five: plans a..e) on one warm machine:
#   LIMIT=560 bash tests/gpu/session/s15.sh STAGE a
#   LIMIT=580 bash tests/gpu/session/s15.sh STAGE b
#   LIMIT=420 bash tests/gpu/session/s15.sh STAGE c
# a, setup: install, build.py apply, forge's MoE config names against vLLM's own on this GPU.
#   GPU 0: two mtp_smoke --dummy invocations at once (issue 11 item 1): V2 runner with --lossless
#          (eager compile backend: CUDA graphs still captured) and V1 (patched) with a
#          centroid-masked drafter (Inductor, what users run). Each must pass the agreeing model
#          and fail the random one in one run.
#   GPU 1: the recipe run (issues 11 item 4/5, 13 item 4): stock default (vLLM's own: BF16,
#          default runner, FlashAttention 4, Inductor), FP8 V2 plain and k=4 with Triton attention
#          and the shipped / no / newly tuned (M = k+1) MoE config, FP8 V2 plain and k=4 on FA4.
# b: the two-node proof (benchmarks/gpu/two_node_local.sh) on both GPUs, START_LIMIT 440 s.
# c: the 31B sweep, k = 3..5 (issue 11 item 3): V1 (patched) on GPU 0, V2 on GPU 1, each with
#    the plain FP8 engine and the stock default of the same run.
# One file per plan comes back: $OUT/s15-<plan>.tgz (everything under /tmp/s15 but model dirs),
# plus $OUT/timeline.txt.
set -u
STAGE=$1
PLAN=${2:?plan a, b or c}
W=/tmp/s15
L=$W/logs
mkdir -p "$W" "$L"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
# The lent host's rule: NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
LIMIT=${LIMIT:-540}
stamp() { echo "$PLAN $(( $(date +%s) - T0 )) s: $*" | tee -a "$OUT/timeline.txt"; }
left() { echo $(( LIMIT - ($(date +%s) - T0) - 20 )); }

if [ ! -f /tmp/site/.done ] || [ ! -f $W/.installed ]; then
  bash "$STAGE/gpu_setup.sh" install > "$L/install.txt" 2>&1
  stamp "install exit $?"
  touch $W/.installed
fi
# transformers from /tmp/site (5.12.1); /tmp/extra for nvidia-cutlass-dsl + quack (FA4).
CUTLASS=""
[ -d /tmp/extra/nvidia_cutlass_dsl/python_packages ] && CUTLASS=/tmp/extra/nvidia_cutlass_dsl/python_packages
BASE_PATH="/tmp/site${CUTLASS:+:$CUTLASS}:/tmp/extra"

COMMON=(--target h200 --dummy --layers 10 --parallel --gpu-memory-utilization 0.08 --kv-cache-gib 1
        --max-model-len 4096 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs
        --windows "sustained,conc8" --sustained-tokens 256
        --profile spark343=0.84/0.60/0.39/0.27 --profile seed87=rate@0.87)
SMOKE=(--recipe gemma-4-26b-a4b-it --target h200 --dummy --layers 10 --attention-backend TRITON_ATTN
       --max-model-len 4096 --gpu-memory-utilization 0.1 --kv-cache-gib 2
       --moe-config-dir patches/moe-configs)

setup() {
  { date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
    PYTHONPATH=$BASE_PATH python3 -c "import torch, vllm, transformers; print('torch', torch.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__)"
  } > "$L/machine.txt" 2>&1
  PYTHONPATH=$BASE_PATH python3 build.py apply --site-packages /tmp/site --vllm 0.25.0 > "$L/apply.txt" 2>&1
  stamp "apply on /tmp/site exit $?"
  CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$BASE_PATH python3 -m benchmarks.gpu.moe_config_names \
    --json "$L/moe-config-names.json" > "$L/moe-config-names.txt" 2>&1
  echo "exit $?" >> "$L/moe-config-names.txt"
  stamp "moe config names: $(tail -n 2 "$L/moe-config-names.txt" | tr '\n' ' ')"
}

smokes() {     # GPU 0
  export CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$BASE_PATH
  local t; t=$(left)
  stamp "gpu0: smokes (${t} s)"
  timeout "$t" python3 -m verify.mtp_smoke "${SMOKE[@]}" --lossless --runner v2 --compile-backend eager \
    --timeout $(( t - 10 )) --out $W/smoke-v2-lossless > "$L/smoke-v2-lossless.txt" 2>&1 &
  local a=$!
  timeout "$t" python3 -m verify.mtp_smoke "${SMOKE[@]}" --runner v1 --centroids \
    --timeout $(( t - 10 )) --out $W/smoke-v1-centroids > "$L/smoke-v1-centroids.txt" 2>&1
  echo "exit $?" >> "$L/smoke-v1-centroids.txt"
  stamp "gpu0: V1 centroids smoke done"
  wait $a; echo "exit $?" >> "$L/smoke-v2-lossless.txt"
  stamp "gpu0: smokes done"
}

recipe_run() {   # GPU 1
  export CUDA_VISIBLE_DEVICES=1 PYTHONPATH=$BASE_PATH
  local k=4 t; t=$(left)
  stamp "gpu1: recipe run k=$k (${t} s)"
  timeout "$t" python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b "${COMMON[@]}" \
    --repeat 3 --configs "" --compile-backend eager --timeout $(( t - 10 )) \
    --engine "name=stock,dtype=auto,runner=default,attention=default,compile=inductor" \
    --engine "name=fp8-v2,k=0,runner=v2" \
    --engine "name=fp8-mtp$k-v2,k=$k,runner=v2" \
    --engine "name=fp8-mtp$k-v2-moe-none,k=$k,runner=v2,moe=none" \
    --engine "name=fp8-mtp$k-v2-moe-tuned-kplus1,k=$k,runner=v2,moe=tests/fixtures/gpu/v11-h200x2-2026-11-30/tune" \
    --engine "name=fp8-v2-fa4,k=0,runner=v2,attention=default" \
    --engine "name=fp8-mtp$k-v2-fa4,k=$k,runner=v2,attention=default" \
    --out $W/recipe-26b > "$L/recipe-26b.txt" 2>&1
  stamp "gpu1: recipe run exit $?"
}

sweep31() {   # $1 = runner, $2 = GPU
  export CUDA_VISIBLE_DEVICES=$2 PYTHONPATH=$BASE_PATH
  local t; t=$(left)
  stamp "gpu$2: 31B $1 sweep (${t} s)"
  timeout "$t" python3 -m verify.bench --recipe gemma-4-31b-it --shape 31b "${COMMON[@]}" \
    --repeat 2 --configs "stock,fp8,fp8-mtp3,fp8-mtp4,fp8-mtp5" --runners "$1" \
    --compile-backend eager --max-parallel 5 --timeout $(( t - 10 )) --out $W/sweep-31b-$1 \
    > "$L/sweep-31b-$1.txt" 2>&1
  stamp "gpu$2: 31B $1 sweep exit $?"
}

pack() {
  tar czf "$OUT/s15-$PLAN.tgz" -C /tmp --exclude='*/models' --exclude='*/moe-none' \
    --exclude='cache-rank*' s15 2>/dev/null
  stamp "packed $(du -h "$OUT/s15-$PLAN.tgz" | cut -f1)"
}

wait_or_limit() {
  while [ -n "$(jobs -rp)" ]; do
    [ $(( $(date +%s) - T0 )) -ge "$LIMIT" ] && { stamp "limit reached: packing"; break; }
    sleep 3
  done
}

case $PLAN in
  a)
    setup
    smokes &
    recipe_run &
    wait_or_limit
    pack
    tail -n 16 "$L"/smoke-v2-lossless.txt "$L"/smoke-v1-centroids.txt
    tail -n 6 "$L"/recipe-26b.txt "$L"/moe-config-names.txt
    ;;
  b)
    export PYTHONPATH=$BASE_PATH
    STAGE=$STAGE SITE=/tmp/site LAYERS=10 START_LIMIT=${START_LIMIT:-440} OUT=$W WORK=$W/two-node \
      timeout $(( LIMIT - 15 )) bash benchmarks/gpu/two_node_local.sh > "$L/two-node.txt" 2>&1
    stamp "two-node exit $?"
    pack
    tail -n 45 "$L/two-node.txt"
    ;;
  c)
    sweep31 v1 0 &
    sweep31 v2 1 &
    wait_or_limit
    pack
    tail -n 6 "$L"/sweep-31b-v1.txt "$L"/sweep-31b-v2.txt
    ;;
  d|e)  # full depth (30 layers): the MoE configs end to end on GPU 0, FA4 vs Triton on GPU 1;
        # e: the replicate, GPUs swapped, the stock default beside the attention engines
    G0=0 G1=1 STOCK=() RUN=""
    [ "$PLAN" = e ] && { G0=1 G1=0 RUN=-r2; STOCK=(--engine "name=stock,dtype=auto,runner=default,attention=default,compile=inductor"); }
    FULL=(--recipe gemma-4-26b-a4b-it --shape 26b-a4b "${COMMON[@]}" --layers 30 --configs ""
          --compile-backend eager --timeout $(( LIMIT - 40 )))
    CUDA_VISIBLE_DEVICES=$G0 PYTHONPATH=$BASE_PATH timeout $(( LIMIT - 30 )) python3 -m verify.bench "${FULL[@]}" --repeat 5 \
      --engine "name=fp8-mtp4-v2,k=4,runner=v2" --engine "name=fp8-mtp4-v2-moe-none,k=4,runner=v2,moe=none" \
      --engine "name=fp8-mtp4-v2-moe-tuned-kplus1,k=4,runner=v2,moe=tests/fixtures/gpu/v11-h200x2-2026-11-30/tune" \
      --out $W/moe-26b-L30$RUN > "$L/moe-26b-L30$RUN.txt" 2>&1 &
    CUDA_VISIBLE_DEVICES=$G1 PYTHONPATH=$BASE_PATH timeout $(( LIMIT - 30 )) python3 -m verify.bench "${FULL[@]}" --repeat 3 "${STOCK[@]}" \
      --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-v2-fa4,k=0,runner=v2,attention=default" \
      --engine "name=fp8-mtp4-v2,k=4,runner=v2" --engine "name=fp8-mtp4-v2-fa4,k=4,runner=v2,attention=default" \
      --out $W/attention-26b-L30$RUN > "$L/attention-26b-L30$RUN.txt" 2>&1 &
    wait_or_limit
    pack
    tail -n 8 "$L"/moe-26b-L30$RUN.txt "$L"/attention-26b-L30$RUN.txt
    ;;
  *) echo "plan must be a, b, c, d or e"; exit 2 ;;
esac
cat "$OUT/timeline.txt"
