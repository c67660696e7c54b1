#!/bin/bash
# GPU session call 7 (H200, warm machine with /tmp/site): tune the fused-MoE Triton kernel for
# bf16 and fp8_w8a8 at M = 1, 8, 64, 256 (small search space), tuned vs default re-measured.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
[ -f /tmp/site/.done ] || { echo "no /tmp/site: the machine was recycled"; exit 3; }
for DTYPE in bf16 fp8_w8a8; do
  timeout 270 python3 build.py tune-moe --dtype $DTYPE --batch-sizes 1,8,64,256 --space small \
    --results "$OUT/tune-moe-$DTYPE.json" > "$OUT/tune-$DTYPE.txt" 2>&1
  echo "exit $?" >> "$OUT/tune-$DTYPE.txt"
done
tail -n 12 "$OUT"/tune-*.txt
