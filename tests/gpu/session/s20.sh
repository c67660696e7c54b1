#!/bin/bash
# The next H200 session (prepared after §10 of docs/gpu-evidence.md, not run yet): every speed
# figure §10 left, on vLLM 0.27.1 first, 0.33.0 staged during its jobs as in §10.
#   0.27.1 (24 parts + .whl): at once, as the job starts (untimed work only then: §10's late
#     untimed job held every timed window for five minutes):
#       the recipe's serve command (fixed KV cache) with `mtp_smoke --endpoint` and a 500 burst;
#       the Qwen smoke with the drafter's pin in its speculative config (§10.3);
#     timed, in this order of priority as GPU memory frees (bench30, -groupkv, -long wait for
#     bench33 to reserve its memory first, or 11 minutes):
#       bench10: stock (BF16, FA4), the peer (vllm-project/recipes, BF16 k=4), the recipe, 10 layers;
#       bench-qwen: the Qwen recipe against its plain engine;
#       bench30: stock and the recipe, then the plain engine and the split-KV candidate, 30 layers
#         (the goal figures of issue 19: recipe vs stock at eugr#343's profile and at conc 8/16);
#       bench-long: the recipe with and without an FP8 KV cache at 8k and 32k context;
#       bench-groupkv: the recipe and its plain engine with and without the candidate
#         triton-attn-group-kv-heads (PRs #54191/#56996) at 16, 32 and 64 sequences (where its
#         split-KV threshold differs: 17-64 on the 26B-A4B).
#   0.33.0 (28 parts): bench33 (stock, the recipe on TRITON_ATTN and on FA4).
# Calls: `stagewhl` (carrying .whl), `stage 271` x24, `PARTS271=24 ... start 271` (carrying
# .gpu-stage271/gpu_setup.sh, never piped), `stage 33` x28 while it runs, `PARTS33=28 ... start 33`,
# then `collect 40` calls until done: nothing read locally between calls (a call every < 30 s).
set -u
W=/tmp/s20 SESSION=s20
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/benches.sh"

bench_long() {   # 0.27.1: the recipe (k=4) with BF16 and with FP8 KV cache at long context
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --max-model-len 33024 --kv-cache-gib 8 --timeout 1100 \
    --windows "long8k,long32k,long8k-conc8" --long-tokens 128 \
    --engine "name=fp8-mtp4-v2,k=4,runner=v2" --engine "name=fp8-mtp4-v2-kv8,k=4,runner=v2,kv=fp8" \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-v2-kv8,k=0,runner=v2,kv=fp8" --out $W/bench-long
}

GROUPKV=/tmp/site-groupkv   # 0.27.1 with the candidate triton-attn-group-kv-heads

bench_groupkv() {   # 0.27.1, 10 layers: with and without the candidate, beyond 16 sequences
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --kv-cache-gib 2 --timeout 1100 --windows "conc16,conc32,conc64" \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-v2-groupkv,k=0,runner=v2,site=$GROUPKV" \
    --engine "name=fp8-mtp4-v2-groupkv,k=4,runner=v2,site=$GROUPKV" --out $W/bench-groupkv
}

after_bench33() {   # seconds at most: issue 17's 0.33.0 bench goes before issue 19's candidates
  # (their GPU memory would hold it out until the budget ends); a failed 0.33.0 install opens the gate
  local t0; t0=$(date +%s)
  until grep -qE 'bench33: start|install 33 (refused|exit [1-9])|job33 done' "$W/timeline.txt" 2>/dev/null \
      || [ $(( $(date +%s) - t0 )) -ge "$1" ]; do sleep 5; done
}

job271() {
  local P; P=$(path_of 271)
  record_machine 271
  apply_series 271 0.27.1 /tmp/site271
  patched_copy "$P" 0.27.1 /tmp/site271 "$SPLITKV" splitkv triton-spec-decode-split-kv
  patched_copy "$P" 0.27.1 /tmp/site271 "$GROUPKV" groupkv triton-attn-group-kv-heads
  untimed serve 21 serve "$P" 0.27.1 &
  untimed smoke271-qwen-v1 20 smoke smoke271-qwen-v1 "$P" 480 "${QWEN[@]}" &
  sleep 3
  timed bench10 58 bench10 "$P" &
  sleep 1; timed bench-qwen 30 bench_qwen "$P" &
  (after_bench33 660; timed bench30 92 bench30 "$P") &
  (after_bench33 680; timed bench-groupkv 52 bench_groupkv "$P") &
  (after_bench33 700; timed bench-long 60 bench_long "$P") &
  wait
  stamp "job271 done"
}

job33() {
  local P; P=$(path_of 33)
  record_machine 33
  apply_series 33 0.33.0 /tmp/site33
  timed bench33 60 bench33 "$P"
  stamp "job33 done"
}

case ${1:?plan} in
  job271) job271 ;;
  job33) job33 ;;
  *) session_plan "$0" "$@" ;;
esac
