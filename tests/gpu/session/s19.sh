#!/bin/bash
# The third H200 session of 2026-12-01 (one GPU): what §9 of docs/gpu-evidence.md left, on three
# releases staged side by side (issues 17, 18, 19).
#   vLLM 0.27.1 (24 parts, .gpu-stage271/): the recipe's serve command with `mtp_smoke --endpoint`
#     and a 500-request burst; the Qwen3.6-35B-A3B smoke (V1, lossless) and bench; the recipe
#     against 0.27.1's stock default (BF16, FlashAttention 4, its default runner) at 30 layers, with
#     the split-KV candidate (#52879's backport) in the same run; the vllm-project/recipes command
#     (the peer) beside stock and the recipe at 10 layers; the candidate's lossless smoke and k=4 profile.
#   vLLM 0.25.0 (5 parts, .gpu-stage25/): `build.py apply` (PR #47920's backport among the patches),
#     the V2 smoke with both controls and --lossless, its report committed this time.
#   vLLM 0.33.0 (28 parts, .gpu-stage33/): stock (FlashAttention 4 chosen per layer) against the
#     recipe on TRITON_ATTN and on FA4; the Qwen smoke on V2, 0.33.0's default runner.
# FlashAttention 4 needs `cutlass.cute`: nvidia-cutlass-dsl's libs-base wheel holds only
# `cutlass/_mlir*`; the Python package is in nvidia-cutlass-dsl-libs-core (a dependency of
# libs-base, METADATA `Requires-Dist: nvidia-cutlass-dsl-libs-core==4.6.0`), which §8 and §9 never
# staged. .whl/c carries it (4.6.0 for 0.27.1, 4.8.0 for 0.33.0), unpacked into the same
# nvidia_cutlass_dsl/dsl_packages/ as libs-base, plus what it needs if the host lacks it
# (cuda-bindings 13.4.4, nvidia-cuda-nvdisasm). Not protobuf: the 6.33.5 staged at first broke
# vLLM's import (§10), the host's 7.36.2 serves.
# .whl/a = transformers 5.15.0 + tokenizers 0.22.2 + pycountry, .whl/b = transformers 5.14.1.
#
#   bash tests/gpu/session/s19.sh stage R          R = 271, 25 or 33: copy the carried part
#   bash tests/gpu/session/s19.sh stagewhl         copy the carried .whl/
#   PARTS271=24 PARTS25=5 bash tests/gpu/session/s19.sh start 271 25    install, start their jobs
#   PARTS33=28 bash tests/gpu/session/s19.sh start 33
#   bash tests/gpu/session/s19.sh collect [WAIT_S] wait up to WAIT_S for the jobs, pack into $OUT
set -u
PLAN=${1:?plan}
W=/tmp/s19 SESSION=s19
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/benches.sh"

patched_copy_splitkv() {   # 0.27.1's vllm/ in a copy, with the split-KV candidate applied
  patched_copy "$1" 0.27.1 /tmp/site271 "$SPLITKV" splitkv triton-spec-decode-split-kv
}

# GB: 26B-A4B at 10 layers ~21 (BF16) / ~12 (FP8) an engine, at 30 layers ~57 / ~33; Qwen at 8
# layers FP8 ~10 (§9's logs: "Model loading took" 9.5-10.3 GiB at 10 layers FP8, 24.7-25.5 at 30)
job271() {
  local P; P=$(path_of 271)
  record_machine 271
  apply_series 271 0.27.1 /tmp/site271
  patched_copy_splitkv "$P"
  untimed serve 21 serve "$P" 0.27.1 &
  untimed smoke271-qwen-v1 20 smoke smoke271-qwen-v1 "$P" 480 "${QWEN[@]}" &
  untimed smoke271-splitkv-v2 14 smoke smoke271-splitkv-v2 "$SPLITKV:$P" 480 "${SMOKE26[@]}" \
    --runner v2 --lossless --compile-backend eager &
  sleep 3   # the untimed jobs reserve first
  timed bench30 92 bench30 "$P" &
  sleep 1; timed bench-qwen 30 bench_qwen "$P" &
  sleep 1; timed bench10 58 bench10 "$P" &
  sleep 1; timed profile-k4-splitkv 34 profile profile-k4-splitkv "$SPLITKV:$P" 4 &
  wait
  stamp "job271 done"
}

job271b() {   # the second machine (15:26, the first went back idle): stock, the peer and the recipe only
  local P; P=$(path_of 271)
  record_machine 271
  apply_series 271 0.27.1 /tmp/site271
  timed bench10 58 bench10 "$P"
  stamp "job271b done"
}

job25() {
  local P; P=$(path_of 25)
  record_machine 25
  apply_series 25 0.25.0 /tmp/site25
  # PR #47920: target_seq_len loaded before `if ADVANCE_DRAFT_POSITIONS:`, seq_lens stored outside it
  grep -n "target_seq_len\|ADVANCE_DRAFT_POSITIONS\|seq_lens_ptr" \
    /tmp/site25/vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py > "$L/47920-lines25.txt" 2>&1
  untimed smoke25-26b-v2 14 smoke smoke25-26b-v2 "$P" 480 "${SMOKE26[@]}" --runner v2 --lossless \
    --compile-backend eager
  stamp "job25 done"
}

job33() {
  local P; P=$(path_of 33)
  record_machine 33
  apply_series 33 0.33.0 /tmp/site33
  untimed smoke33-qwen-v2 20 smoke smoke33-qwen-v2 "$P" 480 "${QWEN[@]}" --runner v2 &
  sleep 3
  timed bench33 60 bench33 "$P" &
  wait
  stamp "job33 done"
}

case $PLAN in
  job271) job271 ;;
  job271b) job271b ;;
  job25) job25 ;;
  job33) job33 ;;
  *) session_plan "$0" "$@" ;;
esac
