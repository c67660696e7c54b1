#!/bin/bash
# The H200 session of 2026-12-02 05:24-06:00 UTC (docs/gpu-evidence.md §14), prepared after §13,
# vLLM 0.27.1 only (24 parts + .whl), on the shipped series (`build.py apply` carries
# triton-spec-decode-split-kv). The first lease ran job271 until the machine went back during its
# profiles; the second, staged afresh, ran profiles271 (the 31B and Qwen profiles) and nothing
# more; s24.sh holds what is left.
#   phase 1: the decode-step profiles issue 19 still lacks (verify/profile.py, plain and the recipe's
#     k, every draft accepted; what ran is each profile.json's own record):
#       profile-31b-plain / -k3: the Gemma 4 31B recipe, 10 of its 60 layers (their floor:
#         `verify/profile.py --report ... --roofline auto`, build.py roofline at the recorded depth);
#       profile-qwen-plain / -k2: the Qwen3.6-35B-A3B recipe, 8 of its 40 layers, with its own kernel
#         map (verify/kernel_groups.yaml qwen3_5_moe, named from 0.27.1's source: this is its first
#         recorded trace);
#       profile-26b-k4: the 26B-A4B recipe's spec step again at 30 layers, now on the shipped series
#         (§9.4's was before the split-KV patch; the plain step is the same code with or without it);
#     (the E4B recipe has no dummy-weight profile: models/ has no assistant shape for it);
#   phase 2, alone on the GPU:
#     bench-long-attn: issue 19's attention candidates at long context, where attention's share of
#       the step is largest: the recipe and its plain engine with and without
#       triton-attn-head512-launch (PR #43257) and triton-attn-group-kv-heads (PRs #54191/#56996),
#       each on a copy of the shipped install (patched_copy), at 8k and 32k tokens and 1, 8 and 16
#       sequences. At 16 sequences or fewer group-kv's threshold takes the path the release takes
#       (docs/reference.md §8): its engines there are the control that the copy itself costs nothing.
#   Not here (time): the recipe's smoke on the shipped series, the Qwen V2 smoke.
# Calls: `stagewhl` (carrying .whl), `stage 271` x24 (the staging call's tree must stay under 64 MiB
# with its part: move tests/fixtures out of the checkout for those calls, §13), `PARTS271=24 ...
# start 271` (carrying .gpu-stage271/gpu_setup.sh, never piped), then `collect 40` calls until done.
set -u
W=/tmp/s23 SESSION=s23
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/benches.sh"

job271() {
  local P; P=$(path_of 271)
  record_machine 271
  apply_series 271 0.27.1 /tmp/site271   # the shipped series: its log names triton-spec-decode-split-kv
  # (2026-12-02: both copies were refused here, being taken after the series was applied; reverted
  # and applied by hand, logs/apply-head512.txt; s24.sh takes them first)
  patched_copy "$P" 0.27.1 /tmp/site271 "$HEAD512" head512 triton-attn-head512-launch
  patched_copy "$P" 0.27.1 /tmp/site271 "$GROUPKV" groupkv triton-attn-group-kv-heads
  timed profile-26b-k4 34 profile_recipe profile-26b-k4 "$P" gemma-4-26b-a4b-it 30 4 0.25 &
  sleep 1; timed profile-31b-plain 16 profile_recipe profile-31b-plain "$P" gemma-4-31b-it 10 0 0.15 &
  sleep 1; timed profile-31b-k3 17 profile_recipe profile-31b-k3 "$P" gemma-4-31b-it 10 3 0.15 &
  sleep 1; timed profile-qwen-plain 15 profile_recipe profile-qwen-plain "$P" qwen3.6-35b-a3b 8 0 0.15 &
  sleep 1; timed profile-qwen-k2 16 profile_recipe profile-qwen-k2 "$P" qwen3.6-35b-a3b 8 2 0.15 &
  wait
  timed bench-long-attn 132 bench_long_attn "$P"
  stamp "job271 done"
}

profiles271() {   # phase 1 without the 26B spec step (JOB=profiles271): what the second lease of 2026-12-02 had time for
  local P; P=$(path_of 271)
  record_machine 271
  apply_series 271 0.27.1 /tmp/site271
  timed profile-31b-plain 16 profile_recipe profile-31b-plain "$P" gemma-4-31b-it 10 0 0.15 &
  sleep 1; timed profile-31b-k3 17 profile_recipe profile-31b-k3 "$P" gemma-4-31b-it 10 3 0.15 &
  sleep 1; timed profile-qwen-plain 15 profile_recipe profile-qwen-plain "$P" qwen3.6-35b-a3b 8 0 0.15 &
  sleep 1; timed profile-qwen-k2 16 profile_recipe profile-qwen-k2 "$P" qwen3.6-35b-a3b 8 2 0.15 &
  wait
  stamp "profiles271 done"
}

case ${1:?plan} in
  job271) job271 ;;
  profiles271) profiles271 ;;
  *) session_plan "$0" "$@" ;;
esac
