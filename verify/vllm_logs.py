"""Read what a vLLM engine did from its log text: the facts mtp_smoke checks, and the root-cause
line of a failed start. Patterns are vLLM's own messages (0.24-0.33), quoted in docs/reference.md."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RESOLVED_ARCH = re.compile(r"Resolved architecture: (\w+)")
# Any line saying a drafter shares the target's embedding; which wording counts is the family's
# (models/<family>.yaml, drafter.sharing_log_lines): each release and proposer says it its own way.
# Found by a literal scan (sharing_lines), not a regex: `\] ([^\n]*[Ss]haring ...)` tried at
# every "] " of a line reads the rest of the line each time, quadratic in the line (a 200 KiB
# line of "] " took minutes).
SHARING = "haring target model"
# The whole lines that hold these (lines_containing: found by a literal scan, not a regex tried
# at every line of a 64 MiB log).
SEPARATE_EMBEDDINGS = "Keeping separate embedding weights"
SEPARATE_LM_HEAD = "Keeping separate lm_head weights"
# The engine's config line: "... 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>".
# An API server logs its arguments first, before vLLM resolves the mode ("'cudagraph_mode': None"):
# the resolved mode is the last one named.
CUDAGRAPH_MODE = re.compile(r"cudagraph_mode'?\"?[:=]\s*<?(?:CUDAGraphMode\.)?([A-Z_]+|None)\b")
ENFORCE_EAGER = re.compile(r"enforce_eager=(True|False)")
GRAPH_CAPTURED = re.compile(r"Graph capturing finished in (\d+(?:\.\d+)?) secs")
MOE_CONFIG_USED = re.compile(r"Using configuration from (\S+) for MoE layer")
MOE_CONFIG_MISSING = re.compile(r"Using default MoE config\. Performance might be sub-optimal! "
                                r"Config file not found at ([^\n]+)")
MOE_BACKEND = re.compile(r"Using '?(\w+)'? (Unquantized|Fp8|NvFp4|Mxfp4|W4A8) MoE backend")
# The engine config line (vllm/config/vllm.py, VllmConfig.__str__): "... tensor_parallel_size=2,
# ... quantization=modelopt_fp4, quantization_config=..., enforce_eager=False, ...".
# Both start a word (search_word): "kv_quantization=" is not the field.
ENGINE_QUANTIZATION = re.compile(r"quantization=([\w.\-]+),")
TENSOR_PARALLEL = re.compile(r"tensor_parallel_size=(\d+)")
# vllm/platforms/cuda.py: "Using AttentionBackendEnum.TRITON_ATTN backend." (a backend given with
# --attention-backend) or "Using FLASH_ATTN attention backend out of potential backends: [...]"
# (chosen by vLLM); vllm/v1/attention/backends/flash_attn.py: "Using FlashAttention version 4".
ATTENTION_BACKEND = re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]*) "
                               r"(?:attention backend out of|backend\.)")
FLASH_ATTN_VERSION = re.compile(r"Using FlashAttention version (\d+)")
V2_RUNNER = "Using V2 Model Runner"
ENGINE_VERSION = re.compile(r"Initializing a V\d LLM engine \(v([^)\s]+)\)")
# Root causes worth naming, most specific first. The first is vLLM #47794 (the MTP width guard).
KNOWN_CAUSES = [
    re.compile(r"a and b must have same reduction dim[^\n]*"),
    # transformers >= 5.15 with vLLM < 0.28: Gemma 4's config became per-layer (vLLM #51744).
    re.compile(r"AmbiguousGlobalPerLayerAttributeError: [^\n]*"),
    re.compile(r"CUDA out of memory[^\n]*"),
    re.compile(r"No available memory for the cache blocks[^\n]*"),
    re.compile(r"Free memory on device[^\n]*"),
]
ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")


@dataclass
class EngineLogFacts:
    architectures: list[str] = field(default_factory=list)
    embedding_sharing_lines: list[str] = field(default_factory=list)
    separate_embedding_lines: list[str] = field(default_factory=list)
    separate_lm_head_lines: list[str] = field(default_factory=list)
    cudagraph_mode: str | None = None
    enforce_eager: bool | None = None
    graph_capture_s: float | None = None
    moe_config_used: list[str] = field(default_factory=list)
    moe_config_missing: list[str] = field(default_factory=list)
    moe_backends: list[str] = field(default_factory=list)
    v2_runner: bool = False
    quantization: str | None = None          # as the engine config line says; "None" for none
    tensor_parallel_size: int | None = None
    attention_backends: list[str] = field(default_factory=list)
    flash_attn_version: int | None = None
    vllm_version: str | None = None
    root_cause: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def clean(text: str) -> str:
    return ANSI.sub("", text)


def parse_engine_log(text: str) -> EngineLogFacts:
    text = clean(text)
    facts = EngineLogFacts()
    facts.architectures = _unique(RESOLVED_ARCH.findall(text))
    facts.embedding_sharing_lines = _unique(sharing_lines(text))
    facts.separate_embedding_lines = [_strip_prefix(m) for m in lines_containing(text, SEPARATE_EMBEDDINGS)]
    facts.separate_lm_head_lines = [_strip_prefix(m) for m in lines_containing(text, SEPARATE_LM_HEAD)]
    modes = [m for m in CUDAGRAPH_MODE.findall(text) if m != "None"]
    facts.cudagraph_mode = modes[-1] if modes else None
    eager = ENFORCE_EAGER.search(text)
    facts.enforce_eager = (eager.group(1) == "True") if eager else None
    captured = GRAPH_CAPTURED.findall(text)
    facts.graph_capture_s = sum(float(s) for s in captured) if captured else None
    facts.moe_config_used = _unique(MOE_CONFIG_USED.findall(text))
    facts.moe_config_missing = _unique(m.strip() for m in MOE_CONFIG_MISSING.findall(text))
    facts.moe_backends = _unique(f"{b} {kind}" for b, kind in MOE_BACKEND.findall(text))
    facts.v2_runner = V2_RUNNER in text
    quantization = search_word(ENGINE_QUANTIZATION, text)
    facts.quantization = quantization.group(1) if quantization else None
    tensor_parallel = search_word(TENSOR_PARALLEL, text)
    facts.tensor_parallel_size = int(tensor_parallel.group(1)) if tensor_parallel else None
    facts.attention_backends = _unique(ATTENTION_BACKEND.findall(text))
    fa_version = FLASH_ATTN_VERSION.search(text)
    facts.flash_attn_version = int(fa_version.group(1)) if fa_version else None
    version = ENGINE_VERSION.search(text)
    facts.vllm_version = version.group(1) if version else None
    facts.root_cause = root_cause(text)
    return facts


# A passing run's log may still hold an error line that caused nothing (vLLM 0.27.1 logs its chat
# template warm-up failing with "ValueError: Tokenizer not available when
# `skip_tokenizer_init=True`" as a WARNING, and serves on): in a report it goes under this name.
UNRELATED_ERROR = "unrelated_error_line"


def report_log_facts(facts: dict, run_passed: bool) -> dict:
    """The facts as a report holds them: `root_cause` only for a run that failed. A run that passed
    has no cause to name, so the last error line of its log, if any, is kept as
    `unrelated_error_line` and `root_cause` is null: a reader cannot take noise for a cause."""
    reported = dict(facts)
    if run_passed:
        reported[UNRELATED_ERROR] = reported["root_cause"]
        reported["root_cause"] = None
    return reported


def root_cause(text: str) -> str | None:
    """The line that says why an engine failed: a known signature, else the last `XError: msg`
    line (the innermost exception of a Python traceback is printed last). None if no error."""
    text = clean(text)
    for pattern in KNOWN_CAUSES:
        match = pattern.search(text)
        if match:
            return match.group(0).strip()
    errors = []
    # ERROR_LINE needs ": " after Error or Exception: the other lines (most of a long log) are
    # passed over without the per-line prefix strip and match.
    for line in text.splitlines():
        if "Error: " not in line and "Exception: " not in line:
            continue
        match = ERROR_LINE.match(_strip_prefix(line).strip())
        if match:
            errors.append(f"{match.group(1)}: {match.group(2).strip()}")
    # vLLM's front end re-raises an engine core's death as "Engine core initialization failed.
    # See root cause above.": the cause is the error printed before that wrapper.
    causes = [e for e in errors if "See root cause above" not in e]
    found = causes or errors
    return found[-1] if found else None


def lines_containing(text: str, literal: str) -> list[str]:
    """Each line of `text` that holds `literal`, whole and without its newline, once, in order."""
    lines, at = [], text.find(literal)
    while at != -1:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        lines.append(text[start:end])
        at = text.find(literal, end)
    return lines


def sharing_lines(text: str) -> list[str]:
    """What follows the log prefix's "] " on each line saying a drafter shares the target's
    embedding ("Sharing target model ..." or "... sharing target model ..."), stripped; linear in
    the text."""
    found = []
    for line in lines_containing(text, SHARING):
        at = max(line.rfind("S" + SHARING), line.rfind("s" + SHARING))
        start = line.find("] ", 0, at) if at != -1 else -1
        if start != -1:
            found.append(line[start + 2:].strip())
    return found


def search_word(pattern: re.Pattern, text: str) -> re.Match | None:
    """pattern.search(text) where the match must start a word (as a leading \\b would ask). A
    pattern that starts with a literal is found by a fast scan; a leading \\b would make the
    regex engine try it at every position of the text."""
    for match in pattern.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        if not (before.isalnum() or before == "_"):
            return match
    return None


def _strip_prefix(line: str) -> str:
    """Drop vLLM's '(EngineCore pid=1) INFO 11-29 22:00:00 [file.py:12] ' prefix."""
    return re.sub(r"^(\(\S+(?: pid=\d+)?\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
                  r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]+\]\s*)?", "", line).strip()


def _unique(items) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)
