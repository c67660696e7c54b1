#!/bin/bash
# The H200 session of 2026-12-02 (docs/gpu-evidence.md §13), prepared after §12, vLLM 0.27.1 only
# (24 parts + .whl), on the shipped series: `build.py apply` now carries triton-spec-decode-split-kv.
#   phase 1 (issue 19's last missing figures first; §12's lesson: the jobs' GB reservations
#   undercount their engines, so no 30-layer bench starts beside these):
#     bench-static2: online FP8 against the static FP8 preset, every engine's MoE held to Triton
#       (`moe_backend=triton`: in §12.4 the static checkpoint made vLLM pick FlashInfer CUTLASS and
#       its engines had not started after six minutes), plain and k=4, and a second instance of the
#       plain online engine (fp8-v2-again): in §12.3 two instances of one plain engine, same settings,
#       stepped 2.21 and 2.74 ms while the k=4 engine's two stepped 4.03 and 4.04, so a plain A/B
#       needs its A/A beside it;
#       An engine not up 480 s in is killed alone (bench --start-timeout; s21's 10-layer engines
#       were up in 280-333 s, its static ones hung after 170 s and held every window back);
#     (not the Qwen V2 smoke, out of memory in §12: its compile beside six others would push
#     phase 2 past the device time, and issue 18's V2 evidence stands from §11.4);
#     (nor the recipe's smoke on the shipped series: the first lease of 2026-12-02 went back during
#     staging, and the second leaves 27 device-minutes, too few for both phases beside it);
#   phase 2, alone on the GPU:
#     bench30c: stock, the recipe (split-KV in), the recipe without it (a copy of the install taken
#       before `build.py apply`: the series applies nothing else to 0.27.1, §12's apply271.txt) and
#       the plain FP8 engine at all 30 layers, three at a time: issue 19's recipe-against-stock ratio
#       at eugr#343's profile in one run, the split-KV patch's second A/B, and the plain step.
# Calls: `stagewhl` (carrying .whl), `stage 271` x24, `PARTS271=24 ... start 271` (carrying
# .gpu-stage271/gpu_setup.sh, never piped), then `collect 40` calls until done (a call every < 30 s).
set -u
W=/tmp/s22 SESSION=s22
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/benches.sh"
NOSPLIT=/tmp/site-nosplit   # 0.27.1 as released: the shipped series minus triton-spec-decode-split-kv

bench30c() {   # 0.27.1 at 30 layers: stock, the recipe (split-KV in) and plain in the first wave (the
  # goal ratios, should the device time end in the second), then the recipe without split-KV
  PYTHONPATH=$1 timeout 1300 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 30 "${BENCH[@]}" --gpu-memory-utilization 0.25 --kv-cache-gib 2 --max-parallel 3 --timeout 900 \
    --start-timeout 720 \
    --engine "$STOCK" --engine "name=fp8-mtp4-v2,k=4,runner=v2" --engine "name=fp8-v2,k=0,runner=v2" \
    --engine "name=fp8-mtp4-v2-nosplit,k=4,runner=v2,site=$NOSPLIT" \
    --out $W/bench30c
}

bench_static2() {   # 0.27.1, 10 layers: online FP8 against the static preset, one MoE kernel for all
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --timeout 1100 --start-timeout 480 \
    --engine "name=fp8-v2,k=0,runner=v2,moe_backend=triton" \
    --engine "name=fp8-v2-again,k=0,runner=v2,moe_backend=triton" \
    --engine "name=fp8-mtp4-v2,k=4,runner=v2,moe_backend=triton" \
    --engine "name=fp8static-v2,dtype=fp8-static,k=0,runner=v2,moe_backend=triton" \
    --engine "name=fp8static-mtp4-v2,dtype=fp8-static,k=4,runner=v2,moe_backend=triton" --out $W/bench-static2
}

job271() {
  local P; P=$(path_of 271)
  record_machine 271
  # the copy must be taken from an install no apply has touched (a second job on one machine would not)
  if [ -e /tmp/site271/vllm/.vllm-forge ]; then stamp "nosplit: refused, /tmp/site271 already patched"
  else rm -rf "$NOSPLIT" && mkdir -p "$NOSPLIT" && cp -a /tmp/site271/vllm /tmp/site271/vllm-0.27.1*.dist-info "$NOSPLIT/"
  fi
  apply_series 271 0.27.1 /tmp/site271   # the shipped series: its log names triton-spec-decode-split-kv
  timed bench-static2 78 bench_static2 "$P" &
  wait
  timed bench30c 130 bench30c "$P"
  stamp "job271 done"
}

case ${1:?plan} in
  job271) job271 ;;
  *) session_plan "$0" "$@" ;;
esac
