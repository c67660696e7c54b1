#!/bin/bash
# The next H200 session (prepared after §11 of docs/gpu-evidence.md, not run yet), vLLM 0.27.1 only
# (24 parts + .whl; no 0.33.0 staging: nothing below needs it, and its 28 calls cost ~5 minutes):
#   untimed, at once as the job starts (each holds the GPU lock shared, so only then):
#     smoke271-qwen-v2: the Qwen controlled smoke on V2, the recipe's runner since §11.4, lossless;
#     serve-agree / serve-random: the recipe's server serving verify's agreeing control (the endpoint
#       smoke must PASS: the positive control through a real `vllm serve`) and the random one (it
#       must FAIL, plus the 500 burst), ports 8012 and 8013;
#     smoke271-groupkv-b32: the recipe's smoke on the copy with `triton-attn-group-kv-heads`, V2,
#       lossless, at a decode batch of 32 (`--batch 32`: where the candidate changes the path). What
#       it can show: the path runs under CUDA graphs without a fault and the random model's tokens
#       (INFO) stay those of the plain engine; the agreeing model's logits are zero whatever
#       attention computes, so its lossless PASS says nothing of the kernel's numerics;
#   timed, as memory frees:
#     bench-groupkv2: the candidate's second run (three repeats) at 16, 32 and 64 sequences;
#     bench30b: the recipe against the split-KV candidate at 30 layers (first wave), then the plain
#       FP8 engine (second wave): the split-KV speed figure and a 30-layer plain step;
#     bench-head512: the candidate `triton-attn-head512-launch` (PR #43257's 8 warps / 2 stages at
#       head size 512) against the recipe and its plain engine, batch 1 and 8/16 sequences;
#     bench-static: online FP8 against the static FP8 preset (dtype=fp8-static: per-tensor weights,
#       stored per-tensor activation scales, no activation max reduced at run time), plain and k=4.
# Calls: `stagewhl` (carrying .whl), `stage 271` x24, `PARTS271=24 ... start 271` (carrying
# .gpu-stage271/gpu_setup.sh, never piped), then `collect 40` calls until done (a call every < 30 s).
set -u
W=/tmp/s21 SESSION=s21
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/benches.sh"
GROUPKV=/tmp/site-groupkv   # 0.27.1 with the candidate triton-attn-group-kv-heads
HEAD512=/tmp/site-head512   # 0.27.1 with the candidate triton-attn-head512-launch

bench_groupkv2() {   # 0.27.1, 10 layers: with and without the candidate, three repeats
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --kv-cache-gib 2 --repeat 3 --timeout 1100 --windows "conc16,conc32,conc64" \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-v2-groupkv,k=0,runner=v2,site=$GROUPKV" \
    --engine "name=fp8-mtp4-v2-groupkv,k=4,runner=v2,site=$GROUPKV" --out $W/bench-groupkv2
}

bench30b() {   # 0.27.1 at 30 layers: the recipe and the split-KV candidate together, then plain
  PYTHONPATH=$1 timeout 1450 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 30 "${BENCH[@]}" --gpu-memory-utilization 0.25 --kv-cache-gib 2 --max-parallel 2 --timeout 700 \
    --engine "name=fp8-mtp4-v2,k=4,runner=v2" --engine "name=fp8-mtp4-v2-splitkv,k=4,runner=v2,site=$SPLITKV" \
    --engine "name=fp8-v2,k=0,runner=v2" --out $W/bench30b
}

bench_head512() {   # 0.27.1, 10 layers: with and without the candidate, the recipe and plain
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --timeout 1100 \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-v2-head512,k=0,runner=v2,site=$HEAD512" \
    --engine "name=fp8-mtp4-v2-head512,k=4,runner=v2,site=$HEAD512" --out $W/bench-head512
}

bench_static() {   # 0.27.1, 10 layers: online FP8 (the recipe) against the static FP8 checkpoint
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --timeout 1100 \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8static-v2,dtype=fp8-static,k=0,runner=v2" \
    --engine "name=fp8static-mtp4-v2,dtype=fp8-static,k=4,runner=v2" --out $W/bench-static
}

job271() {
  local P; P=$(path_of 271)
  record_machine 271
  apply_series 271 0.27.1 /tmp/site271
  patched_copy "$P" 0.27.1 /tmp/site271 "$SPLITKV" splitkv triton-spec-decode-split-kv
  patched_copy "$P" 0.27.1 /tmp/site271 "$GROUPKV" groupkv triton-attn-group-kv-heads
  patched_copy "$P" 0.27.1 /tmp/site271 "$HEAD512" head512 triton-attn-head512-launch
  untimed smoke271-qwen-v2 20 smoke smoke271-qwen-v2 "$P" 480 "${QWEN[@]}" --runner v2 &
  untimed serve-agree 21 serve "$P" 0.27.1 agree 8012 &
  untimed serve-random 21 serve "$P" 0.27.1 random 8013 &
  untimed smoke271-groupkv-b32 20 smoke smoke271-groupkv-b32 "$GROUPKV:$P" 480 "${SMOKE26[@]}" \
    --runner v2 --lossless --batch 32 &
  sleep 3
  timed bench-groupkv2 52 bench_groupkv2 "$P" &
  sleep 1; timed bench30b 80 bench30b "$P" &
  sleep 1; timed bench-head512 50 bench_head512 "$P" &
  sleep 1; timed bench-static 50 bench_static "$P" &
  wait
  stamp "job271 done"
}

case ${1:?plan} in
  job271) job271 ;;
  *) session_plan "$0" "$@" ;;
esac
