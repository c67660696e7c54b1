#!/bin/bash
# The next H200 session (prepared after §14 of docs/gpu-evidence.md, not run yet), vLLM 0.27.1 only
# (24 parts + .whl), on the shipped series (`build.py apply` carries triton-spec-decode-split-kv):
# what s23's two leases left (the first lease went back mid-job, the second had time for the
# 31B and Qwen profiles alone).
#   first, alone on the GPU:
#     bench-long-attn: issue 19's attention candidates at long context, where attention's share of
#       the step is largest: the recipe and its plain engine with and without
#       triton-attn-head512-launch (PR #43257) and triton-attn-group-kv-heads (PRs #54191/#56996),
#       each on a copy of the shipped install (patched_copy, taken before the series is applied:
#       `--with-candidate` refuses an install applied without it), at 8k and 32k tokens and 1, 8
#       and 16 sequences. At 16 sequences or fewer group-kv's threshold takes the path the release
#       takes (docs/reference.md §8): its engines there are the control that the copy costs nothing.
#   then, together: profile-26b-k4, the 26B-A4B recipe's spec step at 30 layers on the shipped
#     series (§9.4's was before the split-KV patch; the plain step is the same code with or without
#     it); profile-qwen40-plain, the Qwen recipe's plain step at all 40 layers: at 8 the GPU idled
#     half the step (§14.1); a fixed host cost per step would shrink as a share at full depth;
#     profile-26b10-plain, the 26B's plain step at 10 layers, the depth of most benches: whether
#     its kernels (about 1.42 ms by the 30-layer profile) leave the GPU idle as Qwen's did.
# Calls: `stagewhl` (carrying .whl), `stage 271` x24 (the staging call's tree must stay under 64 MiB
# with its part: move tests/fixtures out of the checkout for those calls, §13), `PARTS271=24 ...
# start 271` (carrying .gpu-stage271/gpu_setup.sh, never piped), then `collect 240` calls until
# done: long calls leave fewer idle gaps between them (§14: the machine went back in one).
set -u
W=/tmp/s24 SESSION=s24
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/benches.sh"

job271() {
  local P; P=$(path_of 271)
  record_machine 271
  patched_copy "$P" 0.27.1 /tmp/site271 "$HEAD512" head512 triton-attn-head512-launch
  patched_copy "$P" 0.27.1 /tmp/site271 "$GROUPKV" groupkv triton-attn-group-kv-heads
  apply_series 271 0.27.1 /tmp/site271   # the shipped series: its log names triton-spec-decode-split-kv
  timed bench-long-attn 132 bench_long_attn "$P"
  timed profile-26b-k4 34 profile_recipe profile-26b-k4 "$P" gemma-4-26b-a4b-it 30 4 0.25 &
  sleep 1; timed profile-qwen40-plain 43 profile_recipe profile-qwen40-plain "$P" qwen3.6-35b-a3b 40 0 0.3 &
  sleep 1; timed profile-26b10-plain 21 profile_recipe profile-26b10-plain "$P" gemma-4-26b-a4b-it 10 0 0.15 &
  wait
  stamp "job271 done"
}

case ${1:?plan} in
  job271) job271 ;;
  *) session_plan "$0" "$@" ;;
esac
