#!/bin/bash
# Calls on an nvidia-h200-x2 machine (vLLM 0.25.0 staged in STAGE, parts p0..p6):
#   bash tests/gpu/session/verify11.sh STAGE_DIR [all|a|b]
# "all" is what ran on 2026-11-30 (docs/gpu-evidence.md §5): it needs more than one call's 10
# minutes (the 26B-A4B waves took ~190 s each to start). "a" then "b" split it into two calls
# on the same warm machine: a = both sweeps (31B: the k=3..5 wave the first run missed, with its
# plain and stock engines) and the two smokes; b = tune-moe, then the recipe pass (FA4, MoE
# configs) with the k the 26B sweep of call a picked (3 if that result is gone).
# GPU 0: 26B-A4B sweep (k = 0..5 x runners V1 patched / V2 + stock, eager compile backend, 10
#        layers, agreeing and random model per window), then one Inductor run of the recipe's
#        configuration: stock default (BF16, default runner, default attention = FA4), FP8
#        plain, FP8 + MTP k on Triton attention with the shipped / no / newly tuned MoE config,
#        and on FA4 (vLLM #47275).
# GPU 1: tune-moe at the recipe's token counts, 31B sweep, then mtp_smoke --dummy (controls)
#        on the V2 runner with --lossless and on the V1 runner with a centroid-masked drafter.
# Everything lands under /tmp/v11 and is packed into $OUT/v11.tgz (stdout of each step in
# /tmp/v11/logs); $OUT/timeline.txt says when each step ended.
set -u
STAGE=$1
PLAN=${2:-all}
W=/tmp/v11
# Only two files go to $OUT (a call brings back 8 at most: on 2026-11-30 the archive was the
# ninth and had to be fetched by a second call): logs live in $W/logs, inside the archive.
L=$W/logs
mkdir -p "$W" "$L"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
T0=$(date +%s)
stamp() { echo "$(( $(date +%s) - T0 )) s: $*" >> "$OUT/timeline.txt"; }
bash "$STAGE/gpu_setup.sh" install > "$L/install.txt" 2>&1
stamp "install exit $?"
# transformers must come from /tmp/site (5.12.1), not /tmp/extra (5.15.0 cannot load Gemma 4 on
# 0.25.0); /tmp/extra only for nvidia-cutlass-dsl + quack-kernels (FlashAttention 4).
CUTLASS=$(sed -n 's/^export PYTHONPATH=//p' "$L/install.txt" | tr ':' '\n' | grep '^/tmp/extra/' | paste -sd: -)
# The run of 2026-11-30 found no .pth line there ("No module named 'cutlass'"): name the
# package's python_packages folder directly.
[ -d /tmp/extra/nvidia_cutlass_dsl/python_packages ] && CUTLASS="${CUTLASS:+$CUTLASS:}/tmp/extra/nvidia_cutlass_dsl/python_packages"
export PYTHONPATH="/tmp/site${CUTLASS:+:$CUTLASS}:/tmp/extra"
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; nproc
  python3 -c "import torch, triton, vllm, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__, transformers.__file__)"
  python3 -c "import cutlass, quack; print('cutlass-dsl', cutlass.__file__, 'quack', quack.__file__)"
  echo "PYTHONPATH=$PYTHONPATH"; } > "$L/machine.txt" 2>&1
python3 build.py apply --site-packages /tmp/site --vllm 0.25.0 > "$L/apply.txt" 2>&1
stamp "apply exit $?"

COMMON=(--target h200 --dummy --layers 10 --parallel --gpu-memory-utilization 0.08 --kv-cache-gib 1
        --max-model-len 4096 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs
        --windows "sustained,conc8" --sustained-tokens 256 --repeat 2
        --profile spark343=0.84/0.60/0.39/0.27 --profile seed87=rate@0.87)
SWEEP=(--configs "stock,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3,fp8-mtp4,fp8-mtp5" --runners "v1,v2"
       --compile-backend eager --max-parallel 7 --timeout 260)

sweep26() {
  export CUDA_VISIBLE_DEVICES=0
  stamp "gpu0: 26B sweep"
  timeout 330 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b "${COMMON[@]}" \
    "${SWEEP[@]}" --out $W/sweep-26b > "$L/sweep-26b.txt" 2>&1
  stamp "gpu0: 26B sweep exit $?"
}

recipe26() {
  export CUDA_VISIBLE_DEVICES=0
  K=$(python3 -c "import json; print(json.load(open('$W/sweep-26b/bench.json'))['picks']['spark343']['k'] or 3)" 2>/dev/null || echo 3)
  R=$(python3 -c "import json; print(json.load(open('$W/sweep-26b/bench.json'))['picks']['spark343']['runner'])" 2>/dev/null || echo v2)
  [ "$K" -ge 1 ] 2>/dev/null || K=3
  echo "recipe config from the sweep: k=$K runner=$R" > "$L/pick.txt"
  for _ in $(seq 60); do [ -e $W/tune.done ] && break; sleep 2; done
  MERGED=()
  ls $W/moe-merged/*.json >/dev/null 2>&1 && MERGED=(--engine "name=fp8-mtp$K-$R-moe-tuned-now,k=$K,runner=$R,moe=$W/moe-merged")
  stamp "gpu0: recipe run k=$K runner=$R merged=${#MERGED[@]}"
  timeout 250 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b "${COMMON[@]}" \
    --configs "" --timeout 235 \
    --engine "name=stock,dtype=auto,runner=default,attention=default" \
    --engine "name=fp8-$R,k=0,runner=$R" \
    --engine "name=fp8-mtp$K-$R,k=$K,runner=$R" \
    --engine "name=fp8-mtp$K-$R-moe-none,k=$K,runner=$R,moe=none" \
    --engine "name=fp8-$R-fa4,k=0,runner=$R,attention=default" \
    --engine "name=fp8-mtp$K-$R-fa4,k=$K,runner=$R,attention=default" \
    "${MERGED[@]}" --out $W/recipe-26b > "$L/recipe-26b.txt" 2>&1
  stamp "gpu0: recipe run exit $?"
}

tune() {
  export CUDA_VISIBLE_DEVICES=1
  stamp "gpu1: tune-moe"
  timeout 110 python3 build.py tune-moe --dtype fp8_w8a8 --recipe gemma-4-26b-a4b-it --target h200 \
    --k "3,4" --concurrency 1 --batch-sizes 32 --space small --results $W/tune-moe-fp8.json \
    --merge-into $W/moe-merged > "$L/tune-moe.txt" 2>&1
  stamp "gpu1: tune-moe exit $?"
  touch $W/tune.done
}

sweep31() {
  export CUDA_VISIBLE_DEVICES=1
  CONFIGS=(--configs "stock,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3,fp8-mtp4,fp8-mtp5")
  [ "$PLAN" = a ] && CONFIGS=(--configs "stock,fp8,fp8-mtp3,fp8-mtp4,fp8-mtp5" --max-parallel 9)
  timeout 330 python3 -m verify.bench --recipe gemma-4-31b-it --shape 31b "${COMMON[@]}" \
    "${SWEEP[@]}" "${CONFIGS[@]}" --out $W/sweep-31b > "$L/sweep-31b.txt" 2>&1
  stamp "gpu1: 31B sweep exit $?"
}

smokes() {
  export CUDA_VISIBLE_DEVICES=1
  SMOKE=(--recipe gemma-4-26b-a4b-it --target h200 --dummy --layers 10 --attention-backend TRITON_ATTN
         --max-model-len 4096 --gpu-memory-utilization 0.1 --kv-cache-gib 2
         --moe-config-dir patches/moe-configs --timeout 190)
  timeout 200 python3 -m verify.mtp_smoke "${SMOKE[@]}" --lossless --out $W/smoke-v2 \
    > "$L/smoke-v2.txt" 2>&1 &
  A=$!
  timeout 200 python3 -m verify.mtp_smoke "${SMOKE[@]}" --runner v1 --centroids \
    --out $W/smoke-v1-centroids > "$L/smoke-v1-centroids.txt" 2>&1
  echo "exit $?" >> "$L/smoke-v1-centroids.txt"
  wait $A; echo "exit $?" >> "$L/smoke-v2.txt"
  stamp "gpu1: smokes done"
}

case $PLAN in
  all) { sweep26; recipe26; } & P0=$!; { tune; sweep31; smokes; } & P1=$! ;;
  a) sweep26 & P0=$!; { sweep31; smokes; } & P1=$! ;;
  b) recipe26 & P0=$!; tune & P1=$! ;;
  *) echo "plan must be all, a or b"; exit 2 ;;
esac
# Leave time to pack whatever is done before the call's limit.
LIMIT=${LIMIT:-540}
while kill -0 $P0 2>/dev/null || kill -0 $P1 2>/dev/null; do
  [ $(( $(date +%s) - T0 )) -ge "$LIMIT" ] && { stamp "limit reached: packing"; break; }
  sleep 3
done

tar czf "$OUT/v11.tgz" -C /tmp --exclude='*/models' --exclude='*/moe-none' v11 2>/dev/null
stamp "packed"
tail -n 4 "$L"/sweep-26b.txt "$L"/sweep-31b.txt "$L"/recipe-26b.txt "$L"/tune-moe.txt
tail -n 14 "$L"/smoke-v2.txt "$L"/smoke-v1-centroids.txt
cat "$OUT/timeline.txt"
