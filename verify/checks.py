"""The gate's checks, as pure functions of what the engine log and the metrics said."""
from __future__ import annotations

from forge.models import Family
from verify.metrics import SpecCounters
from verify.report import INFO, NOT_CHECKED, PASS, Check, failed, passed
from verify.vllm_logs import EngineLogFacts

# The acceptance checks' names (the first is a required gate: forge/verify_report.py).
ACCEPTANCE = "acceptance (temperature 0)"
SAMPLING = "acceptance (recipe sampling)"
NEGATIVE_CONTROL = "acceptance, random model (negative control)"


def check_engine_started(started: bool, facts: EngineLogFacts, error: str | None) -> Check:
    if started:
        return passed("engine started", "vLLM engine up with the recipe's settings")
    cause = facts.root_cause or error or "no error line in the log"
    hint = next((h for signature, h in REMEDIES if facts.root_cause and signature in facts.root_cause),
                "")
    return failed("engine started", f"engine failed to start: {cause}{hint}")


# A known root cause -> what it is and what to do (both fixed by `build.py apply` on the releases
# the series says need it).
REMEDIES = [
    ("same reduction dim", " (vLLM #47794: the MTP draft kept its own embedding; "
                           "apply the patch series: build.py apply)"),
    ("AmbiguousGlobalPerLayerAttributeError",
     " (transformers >= 5.15 made Gemma 4's config per-layer and vLLM < 0.28 reads its head_dim: "
     "vLLM #51744, fixed in 0.28.0 by PR #49797; bring transformers inside the series' constraint "
     "with `python3 build.py apply`, or `python3 -m pip install 'transformers<5.15'`)"),
]


def check_architectures(facts: EngineLogFacts, family: Family) -> Check:
    """The engine resolved one of the family's target architectures and its drafter's."""
    draft = family.drafter_architecture
    targets = [a for a in facts.architectures if a in family.target_architectures]
    if targets and draft in facts.architectures:
        return passed("architectures", f"target {targets[0]}, draft {draft}")
    return failed("architectures", f"need a {family.name} target ({', '.join(family.target_architectures)}) "
                                   f"and {draft}; log resolved {', '.join(facts.architectures) or 'nothing'}")


def shared_check_name(what: str) -> str:
    """The check of one thing a drafter takes from its target (models/<family>.yaml drafter.shares)."""
    return f"draft shares target {what}"


def shared_check_names(family: Family) -> list[str]:
    return [shared_check_name(what) for what in family.shares]


# vLLM's words for a drafter that keeps its own copy (llm_base_proposer.py, 0.21.0-0.33.0).
SEPARATE_LINES = {"embedding": "separate_embedding_lines", "lm_head": "separate_lm_head_lines"}


def check_shared(facts: EngineLogFacts, v2_runner: bool, family: Family, what: str) -> Check:
    """The drafter took the target's `what` (embedding, lm_head): one of the family's lines for it in
    the log (each release and proposer words it its own way), and no 'Keeping separate' line."""
    name = shared_check_name(what)
    separate = getattr(facts, SEPARATE_LINES[what])
    if separate:
        return failed(name, f"draft keeps its own {what}: {separate[0]}")
    said = [line for line in facts.embedding_sharing_lines
            if any(wording in line for wording in family.shares[what])]
    if said:
        return passed(name, f"log: {said[0]}")
    if v2_runner:
        # The V2 runner's speculator always shares and logs nothing about it.
        return passed(name, "V2 model runner: the speculator always shares "
                            f"(no 'Keeping separate {what} weights' line)")
    return failed(name, f"none of {family.source}'s drafter.shares.{what} lines in the log"
                        + (f" (it said: {facts.embedding_sharing_lines[0]})"
                           if facts.embedding_sharing_lines else ""))


def check_shared_embedding(facts: EngineLogFacts, v2_runner: bool, family: Family) -> Check:
    """check_shared for the embedding, the one every family's drafter shares (a required gate)."""
    return check_shared(facts, v2_runner, family, "embedding")


def check_cuda_graphs(facts: EngineLogFacts, reported_mode: str | None) -> Check:
    mode = reported_mode or facts.cudagraph_mode
    if facts.enforce_eager:
        return failed("CUDA graphs", "engine ran eager (enforce_eager=True)")
    if not mode or mode == "NONE":
        return failed("CUDA graphs", f"cudagraph mode {mode or 'unknown'}: no graphs")
    if facts.graph_capture_s is None:
        return failed("CUDA graphs", f"cudagraph mode {mode}, but no 'Graph capturing finished' line")
    return passed("CUDA graphs", f"mode {mode}, captured in {facts.graph_capture_s:.0f} s")


def check_moe_config(facts: EngineLogFacts, expected_name: str | None, expected: bool) -> Check:
    name = "tuned MoE config"
    backend = ", ".join(facts.moe_backends) or "no MoE backend line"
    used = [p for p in facts.moe_config_used if expected_name and p.endswith(expected_name)]
    if expected:
        if used:
            return passed(name, f"{expected_name} used; backend {backend}")
        missing = (f" (log: Config file not found: {_looked_for(facts)})"
                   if facts.moe_config_missing else "")
        return failed(name, f"expected {expected_name}, not used{missing}; backend {backend}")
    state = (f"default config (Config file not found: {_looked_for(facts)})"
             if facts.moe_config_missing
             else ", ".join(facts.moe_config_used) or "no MoE config line")
    return Check(name, INFO, f"none expected by the recipe; {state}; backend {backend}")


def _looked_for(facts: EngineLogFacts) -> str:
    """The file names vLLM looked for (its line lists every path it tried, joined by ", ";
    the names hold commas themselves)."""
    names = {path.strip().rsplit("/", 1)[-1] for line in facts.moe_config_missing
             for path in line.split(", ") if path.strip().endswith(".json")}
    return ", ".join(sorted(names)) or "?"


def check_acceptance(window: SpecCounters | None, min_rate: float, min_length: float,
                     label: str = ACCEPTANCE) -> Check:
    if window is None:
        return Check(label, NOT_CHECKED, "no metrics window (engine did not run the prompts)")
    if not window.drafts:
        return failed(label, "no drafts proposed in the window: speculative decoding is not running")
    rate, length = window.acceptance_rate, window.mean_acceptance_length
    if rate is None or length is None:
        return failed(label, "drafts proposed but no draft tokens counted: the spec-decode counters disagree")
    positions = ", ".join(f"{r:.0%}" for r in window.per_position_rates or [])
    figures = (f"rate {rate:.1%} (min {min_rate:.0%}), mean length {length:.2f} "
               f"(min {min_length:.2f}), per position [{positions}], "
               f"{int(window.accepted)}/{int(window.draft_tokens)} draft tokens accepted")
    if window.accepted == 0:
        return failed(label, f"the drafter's proposals were all rejected: {figures}; a collapsed "
                             "drafter (dummy weights, a broken draft load, or vLLM #41789)")
    if rate < min_rate or length < min_length:
        return failed(label, f"below the recipe's thresholds: {figures}")
    return passed(label, figures)


def counters_refused(label: str, why: str) -> Check:
    """A window whose spec-decode counters cannot be true (verify/metrics.py says why): FAIL,
    whatever the gate would have made of them, and never run through a control (a negative
    control passes a failed gate)."""
    return failed(label, f"the spec-decode counters cannot be true: {why}")


def report_sampling(window: SpecCounters | None, sampling: dict) -> Check:
    label = SAMPLING
    settings = ", ".join(f"{k}={v}" for k, v in sampling.items() if k != "source")
    if window is None or not window.drafts:
        return Check(label, NOT_CHECKED, f"{settings}: no drafts in the window", gating=False)
    if window.acceptance_rate is None or window.mean_acceptance_length is None:
        return failed(label, f"{settings}: drafts proposed but no draft tokens counted: the "
                             "spec-decode counters disagree")
    return Check(label, INFO, f"{settings}: rate {window.acceptance_rate:.1%}, mean length "
                              f"{window.mean_acceptance_length:.2f} (reported, not gated)")


def check_lossless(with_draft: list[list[int]] | None, without: list[list[int]] | None) -> Check:
    label = "lossless (greedy, draft vs none)"
    if with_draft is None or without is None:
        return failed(label, "one of the two greedy runs produced no output")
    for index, (a, b) in enumerate(zip(with_draft, without)):
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return failed(label, f"prompt {index}: outputs differ from token {at} "
                                 f"({len(a)} vs {len(b)} tokens)")
    if len(with_draft) != len(without):
        return failed(label, f"{len(with_draft)} vs {len(without)} outputs")
    tokens = sum(len(a) for a in with_draft)
    return passed(label, f"{len(with_draft)} prompts, {tokens} tokens identical")


# ------------------------------------------------------------------------------------------
# Controls: the same gate on a drafter that agrees with its target by construction (positive)
# and on a random one (negative), in one run. A gate that fails the first or passes the second
# is itself broken, whatever it says about a real drafter.

BROKEN = "verify is broken: "


def positive_control(gate: Check) -> Check:
    """Keeps the gate's own name ("acceptance (temperature 0)", a required gate of every report):
    under --dummy the acceptance gate is the one run on the agreeing model."""
    label = gate.name
    if gate.status == NOT_CHECKED:
        return Check(label, NOT_CHECKED, f"agreeing model (positive control): {gate.detail}")
    if gate.status == PASS:
        return passed(label, f"agreeing model (positive control): {gate.detail}")
    return failed(label, f"{BROKEN}the gate did not pass a drafter that agrees with its target "
                         f"by construction (verify/controls.py): {gate.detail}")


def negative_control(gate: Check) -> Check:
    label = NEGATIVE_CONTROL
    if gate.status == NOT_CHECKED:
        return Check(label, NOT_CHECKED, gate.detail)
    if gate.failed:
        return passed(label, f"the gate failed it, as it must: {gate.detail}")
    return failed(label, f"{BROKEN}the gate did not fail a random drafter "
                         f"(gate said {gate.status}): {gate.detail}")


def controls_broken(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.failed and c.detail.startswith(BROKEN)]


# --- what vLLM says it runs: quantization, MoE backend, attention backend (recipe `expect`) ---

def check_quantization(facts: EngineLogFacts, expected: str | None) -> Check:
    """The quantization method on the engine config line: `fp8` when asked for, and for a
    pre-quantized checkpoint the format vLLM detected (modelopt_fp4, compressed-tensors)."""
    name = "quantization"
    want = expected or "None"
    if facts.quantization is None:
        return failed(name, f"expected {want}; no engine config line (quantization=...) in the log")
    if facts.quantization != want:
        return failed(name, f"expected {want}, engine runs quantization={facts.quantization}")
    return passed(name, f"engine config: quantization={facts.quantization}")


def check_moe_backend(facts: EngineLogFacts, expected: str | None) -> Check:
    """The fused-MoE kernel family vLLM picked ("TRITON Fp8", "MARLIN Fp8",
    "FLASHINFER_CUTLASS NvFp4"): which kernel runs decides which tuned config, if any, is read."""
    name = "MoE backend"
    found = ", ".join(facts.moe_backends) or "no MoE backend line"
    if expected is None:
        return Check(name, INFO, f"not stated by the recipe; log: {found}")
    if expected in facts.moe_backends:
        return passed(name, f"Using {expected} MoE backend")
    return failed(name, f"expected {expected}, log: {found}")


def check_attention_backend(facts: EngineLogFacts, expected: str,
                            flash_attn_version: int | None = None) -> Check:
    name = "attention backend"
    found = ", ".join(facts.attention_backends) or "no attention backend line"
    if expected not in facts.attention_backends:
        return failed(name, f"expected {expected}, log: {found}")
    others = [b for b in facts.attention_backends if b != expected]
    if others:
        return failed(name, f"expected {expected} only, log also: {', '.join(others)}")
    if flash_attn_version and facts.flash_attn_version != flash_attn_version:
        return failed(name, f"expected FlashAttention {flash_attn_version}, log: "
                            f"{facts.flash_attn_version or 'no version line'}")
    version = f" (FlashAttention {facts.flash_attn_version})" if facts.flash_attn_version else ""
    return passed(name, f"{expected}{version}")
