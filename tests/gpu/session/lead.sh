#!/bin/bash
# The second H200 x2 session of 2026-11-30 (vLLM 0.25.0 staged in STAGE, parts p0..p6):
#   bash tests/gpu/session/lead.sh STAGE a    (one call, < 9.5 min)
#   bash tests/gpu/session/lead.sh STAGE b    (the next call on the same warm machine)
# a, GPU 0: the transformers drift proof (issue 9) on a copy of the install: transformers 5.15.0
#           in -> mtp_smoke --dummy fails naming cause and remedy -> build.py apply (wheelhouse
#           .whl/b) -> the same mtp_smoke passes the agreeing control and fails the random one,
#           with --lossless -> apply --revert brings 5.15.0 back; then the V1 (patched) sweep.
#   GPU 1: the V2 sweep of the 26B-A4B shapes (stock, FP8, k = 1..5), then the recipe run
#           (stock default, FP8 plain, the recipe's k with the shipped / no / newly tuned MoE
#           config, FlashAttention 4 with and without the drafter).
# b: the two-node proof (benchmarks/gpu/two_node_local.sh) on both GPUs.
# Two files come back: $OUT/lead-<plan>.tgz (everything under /tmp/lead, no model dirs) and
# $OUT/timeline.txt.
set -u
STAGE=$1
PLAN=${2:?plan a or b}
W=/tmp/lead
WHEELS=${WHEELS:-.whl}   # a/: transformers 5.15.0 + tokenizers 0.22.2; b/: transformers 5.14.1
L=$W/logs
mkdir -p "$W" "$L"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
# The lent host's rule: NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
LIMIT=${LIMIT:-540}
stamp() { echo "$(( $(date +%s) - T0 )) s: $*" | tee -a "$OUT/timeline.txt"; }
left() { echo $(( LIMIT - ($(date +%s) - T0) - 15 )); }

if [ ! -f /tmp/site/.done ] || [ ! -f /tmp/lead/.installed ]; then
  bash "$STAGE/gpu_setup.sh" install > "$L/install.txt" 2>&1
  stamp "install exit $?"
  touch /tmp/lead/.installed
fi
# transformers from /tmp/site (5.12.1); /tmp/extra only for nvidia-cutlass-dsl + quack (FA4).
CUTLASS=""
[ -d /tmp/extra/nvidia_cutlass_dsl/python_packages ] && CUTLASS=/tmp/extra/nvidia_cutlass_dsl/python_packages
BASE_PATH="/tmp/site${CUTLASS:+:$CUTLASS}:/tmp/extra"

COMMON=(--target h200 --dummy --layers 10 --parallel --gpu-memory-utilization 0.08 --kv-cache-gib 1
        --max-model-len 4096 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs
        --windows "sustained,conc8" --sustained-tokens 256 --repeat 2
        --profile spark343=0.84/0.60/0.39/0.27 --profile seed87=rate@0.87)
SMOKE=(--recipe gemma-4-26b-a4b-it --target h200 --dummy --layers 10 --attention-backend TRITON_ATTN
       --max-model-len 4096 --gpu-memory-utilization 0.12 --kv-cache-gib 2
       --moe-config-dir patches/moe-configs)

transformers_version() {
  PYTHONPATH=$1 python3 -c "import transformers; print(transformers.__version__, transformers.__file__)" 2>&1 | tail -n 1
}

drift_proof() {      # GPU 0
  export CUDA_VISIBLE_DEVICES=0
  local site=/tmp/site9
  rm -rf $site && cp -a /tmp/site $site
  # The drift as users meet it: a newer transformers in the same environment. tokenizers 0.22.2
  # beside it, because both 5.14.1 and 5.15.0 declare tokenizers<=0.23.0 and the host has 0.23.2.
  rm -rf $site/transformers $site/transformers-*.dist-info
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site "$WHEELS"/a/*.whl > "$L/i9-pip.txt" 2>&1
  echo "before: $(transformers_version $site)" > "$L/i9-versions.txt"
  stamp "gpu0: transformers 5.15.0 in; smoke"
  PYTHONPATH=$site timeout 240 python3 -m verify.mtp_smoke "${SMOKE[@]}" --timeout 220 \
    --out $W/i9-smoke-515 > "$L/i9-smoke-515.txt" 2>&1
  echo "exit $?" >> "$L/i9-smoke-515.txt"
  stamp "gpu0: smoke on 5.15.0 done"
  PYTHONPATH=$site python3 build.py apply --site-packages $site --vllm 0.25.0 --find-links "$WHEELS/b" \
    > "$L/i9-apply.txt" 2>&1
  echo "exit $?" >> "$L/i9-apply.txt"
  echo "after apply: $(transformers_version $site)" >> "$L/i9-versions.txt"
  stamp "gpu0: applied; smoke with controls"
  PYTHONPATH=$site timeout 330 python3 -m verify.mtp_smoke "${SMOKE[@]}" --lossless --timeout 310 \
    --out $W/i9-smoke-applied > "$L/i9-smoke-applied.txt" 2>&1
  echo "exit $?" >> "$L/i9-smoke-applied.txt"
  stamp "gpu0: smoke after apply done"
  PYTHONPATH=$site python3 build.py apply --site-packages $site --revert > "$L/i9-revert.txt" 2>&1
  echo "exit $?" >> "$L/i9-revert.txt"
  echo "after revert: $(transformers_version $site)" >> "$L/i9-versions.txt"
  stamp "gpu0: reverted"
}

sweep_v1() {         # GPU 0, after the drift proof: whatever time is left
  export CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$BASE_PATH
  local t; t=$(left)
  [ "$t" -gt 120 ] || { stamp "gpu0: no time left for the V1 sweep"; return; }
  stamp "gpu0: 26B V1 sweep (${t} s)"
  timeout "$t" python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b "${COMMON[@]}" \
    --configs "fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3,fp8-mtp4,fp8-mtp5" --runners v1 \
    --compile-backend eager --max-parallel 6 --timeout $(( t - 10 )) --out $W/sweep-26b-v1 \
    > "$L/sweep-26b-v1.txt" 2>&1
  stamp "gpu0: V1 sweep exit $?"
}

sweep_v2_and_recipe() {   # GPU 1
  export CUDA_VISIBLE_DEVICES=1 PYTHONPATH=$BASE_PATH
  stamp "gpu1: 26B V2 sweep"
  timeout 270 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b "${COMMON[@]}" \
    --configs "stock,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3,fp8-mtp4,fp8-mtp5" --runners v2 \
    --compile-backend eager --max-parallel 7 --timeout 260 --out $W/sweep-26b-v2 \
    > "$L/sweep-26b-v2.txt" 2>&1
  stamp "gpu1: V2 sweep exit $?"
  local k; k=$(python3 -c "import json; print(json.load(open('$W/sweep-26b-v2/bench.json'))['picks']['spark343']['k'] or 3)" 2>/dev/null || echo 3)
  [ "$k" -ge 1 ] 2>/dev/null || k=3
  echo "recipe run k=$k (V2 sweep's pick for the spark343 profile, else 3)" > "$L/pick.txt"
  local t; t=$(left)
  stamp "gpu1: recipe run k=$k (${t} s)"
  timeout "$t" python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b "${COMMON[@]}" \
    --configs "" --timeout $(( t - 10 )) \
    --engine "name=stock,dtype=auto,runner=default,attention=default" \
    --engine "name=fp8-v2,k=0,runner=v2" \
    --engine "name=fp8-mtp$k-v2,k=$k,runner=v2" \
    --engine "name=fp8-mtp$k-v2-moe-none,k=$k,runner=v2,moe=none" \
    --engine "name=fp8-mtp$k-v2-moe-tuned-kplus1,k=$k,runner=v2,moe=tests/fixtures/gpu/v11-h200x2-2026-11-30/tune" \
    --engine "name=fp8-v2-fa4,k=0,runner=v2,attention=default" \
    --engine "name=fp8-mtp$k-v2-fa4,k=$k,runner=v2,attention=default" \
    --out $W/recipe-26b > "$L/recipe-26b.txt" 2>&1
  stamp "gpu1: recipe run exit $?"
}

pack() {
  tar czf "$OUT/lead-$PLAN.tgz" -C /tmp --exclude='*/models' --exclude='*/site9' lead 2>/dev/null
  stamp "packed"
}

case $PLAN in
  a)
    PYTHONPATH=$BASE_PATH python3 build.py apply --site-packages /tmp/site --vllm 0.25.0 > "$L/apply.txt" 2>&1
    stamp "apply on /tmp/site exit $?"
    { drift_proof; sweep_v1; } & P0=$!
    sweep_v2_and_recipe & P1=$!
    while kill -0 $P0 2>/dev/null || kill -0 $P1 2>/dev/null; do
      [ $(( $(date +%s) - T0 )) -ge "$LIMIT" ] && { stamp "limit reached: packing"; break; }
      sleep 3
    done
    pack
    tail -n 12 "$L"/i9-smoke-515.txt "$L"/i9-apply.txt "$L"/i9-smoke-applied.txt "$L"/i9-versions.txt
    tail -n 5 "$L"/sweep-26b-v2.txt "$L"/recipe-26b.txt "$L"/sweep-26b-v1.txt
    ;;
  b)
    export PYTHONPATH=$BASE_PATH
    STAGE=$STAGE SITE=/tmp/site LAYERS=10 START_LIMIT=300 OUT=$W WORK=/tmp/lead/two-node \
      timeout $(( LIMIT - 20 )) bash benchmarks/gpu/two_node_local.sh > "$L/two-node.txt" 2>&1
    stamp "two-node exit $?"
    pack
    tail -n 40 "$L/two-node.txt"
    ;;
  *) echo "plan must be a or b"; exit 2 ;;
esac
cat "$OUT/timeline.txt"
