#!/bin/bash
# GPU session calls 5 and 6 (H200, after smoke.sh on the same warm machine): bench.sh RUNNER
# Five engines of one model runner start at once (10 target layers, dummy weights), then
# measure one at a time. With RUNNER=v2 a `vllm serve` (FP8 + MTP k=3, the recipe's V2 runner,
# 6 layers) starts beside them: mtp_smoke --endpoint and a 500-request burst run against it.
set -u
RUNNER=$1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site TORCHINDUCTOR_COMPILE_THREADS=2
[ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine was recycled"; exit 3; }
python3 build.py apply --site-packages /tmp/site --vllm 0.25.0 > "$OUT/apply-$RUNNER.txt" 2>&1
WAIT=()
if [ "$RUNNER" = v2 ]; then
  python3 -c "from verify.dummy_models import write_dummy_models as w; w('/tmp/server-models', 6)"
  M=/tmp/server-models
  VLLM_USE_V2_MODEL_RUNNER=1 VLLM_CACHE_ROOT=/tmp/vllm-forge-bench-cache/server \
  python3 -m vllm.entrypoints.cli.main serve $M/gemma-4-26b-a4b-L6 --load-format dummy \
    --skip-tokenizer-init --quantization fp8 --max-model-len 4096 --max-num-seqs 64 \
    --speculative-config "{\"model\":\"$M/gemma-4-26b-a4b-assistant\",\"method\":\"mtp\",\"num_speculative_tokens\":3}" \
    --gpu-memory-utilization 0.08 --kv-cache-memory-bytes 2147483648 \
    --attention-backend TRITON_ATTN --port 8011 > /tmp/server.log 2>&1 &
  SERVER=$!
  WAIT=(--wait-server http://127.0.0.1:8011/health $SERVER)
fi
timeout 430 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --target h200 --dummy --layers 10 \
  --runners $RUNNER --parallel --gpu-memory-utilization 0.1 --kv-cache-gib 1 --max-model-len 4096 \
  --attention-backend TRITON_ATTN --sustained-tokens 384 --out /tmp/bench-$RUNNER --timeout 420 \
  "${WAIT[@]}" > "$OUT/bench-$RUNNER.txt" 2>&1
echo "exit $?" >> "$OUT/bench-$RUNNER.txt"
if [ "$RUNNER" = v2 ]; then
  S=http://127.0.0.1:8011
  curl -s $S/metrics > /tmp/server-metrics-before.prom
  timeout 60 python3 -m verify.mtp_smoke --recipe gemma-4-26b-a4b-it --target h200 --endpoint $S \
    --dummy --server-log /tmp/server.log --max-tokens 64 --out /tmp/smoke-endpoint > "$OUT/smoke-endpoint.txt" 2>&1
  echo "exit $?" >> "$OUT/smoke-endpoint.txt"
  curl -s $S/metrics > /tmp/server-metrics-after.prom
  timeout 90 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --target h200 --endpoint $S \
    --burst 500 --token-prompts --out /tmp/bench-burst > "$OUT/burst.txt" 2>&1
  echo "exit $?" >> "$OUT/burst.txt"
  kill $SERVER
  EXTRA="bench-burst smoke-endpoint server.log server-metrics-before.prom server-metrics-after.prom"
fi
tar czf "$OUT/bench-$RUNNER.tgz" -C /tmp --exclude='*/models' --exclude='*/barrier' bench-$RUNNER ${EXTRA:-}
tail -n 30 "$OUT"/*.txt
