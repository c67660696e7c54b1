#!/bin/bash
# GPU session call 4 (H200): install the staged vLLM 0.25.0, run mtp_smoke UNPATCHED on the V1
# runner (must fail naming the #47794 shape error), apply the patch series, run it PATCHED
# (engine starts under CUDA graphs; the acceptance gate fails: dummy weights accept nothing).
set -u
export PYTHONUNBUFFERED=1
bash .gpu-stage/gpu_setup.sh install > "$OUT/install.txt" 2>&1 || { cat "$OUT/install.txt"; exit 1; }
export PYTHONPATH=/tmp/site
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, triton, vllm, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__)"
} > "$OUT/machine.txt" 2>&1
SMOKE="-m verify.mtp_smoke --recipe gemma-4-26b-a4b-it --target h200 --dummy --layers 30 --runner v1
       --attention-backend TRITON_ATTN --max-model-len 4096 --gpu-memory-utilization 0.5 --timeout 230"
timeout 250 python3 $SMOKE --out /tmp/smoke-unpatched > "$OUT/smoke-unpatched.txt" 2>&1
echo "exit $?" >> "$OUT/smoke-unpatched.txt"
python3 build.py apply --site-packages /tmp/site --vllm 0.25.0 > "$OUT/apply.txt" 2>&1
echo "exit $?" >> "$OUT/apply.txt"
timeout 290 python3 $SMOKE --out /tmp/smoke-patched > "$OUT/smoke-patched.txt" 2>&1
echo "exit $?" >> "$OUT/smoke-patched.txt"
tar czf "$OUT/smoke-runs.tgz" -C /tmp --exclude='*/models' smoke-unpatched smoke-patched
tail -n 25 "$OUT"/machine.txt "$OUT"/smoke-unpatched.txt "$OUT"/apply.txt "$OUT"/smoke-patched.txt
