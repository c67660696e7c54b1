#!/bin/bash
# The next H200 session (prepared after §15 of docs/gpu-evidence.md, not run yet), vLLM 0.27.1 only
# (24 parts + .whl), on the shipped series (`build.py apply` carries triton-spec-decode-split-kv):
# what issue 19 still asks after s24, the profiles one after another (s24 ran three at once), so
# that no step's time includes another engine's kernels:
#   profile-26b-k4-32k: the 26B-A4B recipe's spec step at all 30 layers over a 32000-token prompt.
#     s24's bench put the k=4 step at 12.0 ms at 32k tokens against 5.0 ms at 8k (10 layers) while
#     the plain step stayed at 2.8 ms: where the extra 7 ms go (the five full-attention layers'
#     verify pass over the whole context, by the byte floor's attention share) decides the recipe's
#     k at long context;
#   profile-26b-plain-32k: the plain step at the same depth and context, its baseline;
#   profile-e4b-plain: Gemma-4-E4B's plain step at all 42 layers (models/gemma4.yaml's shape,
#     no drafter: no public source gives the E4B assistant's), the recipe's BF16 on TRITON_ATTN.
# Calls: `stagewhl` (carrying .whl), `stage 271` x24 (the staging call's tree must stay under 64 MiB
# with its part: move tests/fixtures out of the checkout for those calls, §13), `PARTS271=24 ...
# start 271` (carrying .gpu-stage271/gpu_setup.sh, never piped), then `collect 270` calls until done.
set -u
W=/tmp/s25 SESSION=s25
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/benches.sh"

job271() {
  local P; P=$(path_of 271)
  record_machine 271
  apply_series 271 0.27.1 /tmp/site271   # the shipped series: its log names triton-spec-decode-split-kv
  timed profile-26b-k4-32k 90 profile_long profile-26b-k4-32k "$P" gemma-4-26b-a4b-it 30 4 0.3 32000
  timed profile-26b-plain-32k 90 profile_long profile-26b-plain-32k "$P" gemma-4-26b-a4b-it 30 0 0.3 32000
  timed profile-e4b-plain 90 profile_recipe profile-e4b-plain "$P" gemma-4-e4b-it 42 0 0.25
  stamp "job271 done"
}

case ${1:?plan} in
  job271) job271 ;;
  *) session_plan "$0" "$@" ;;
esac
