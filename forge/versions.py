"""vLLM release numbers, parsed once at the command-line boundary (PEP 440 through `packaging`)
and passed on in one normal form, so base tags, image tags, statuses and comparisons agree:
`--vllm 0.27.01` and `--vllm v0.27.1` both mean 0.27.1 everywhere."""
from __future__ import annotations

from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError


def normal_release(text: str, where: str = "--vllm") -> str:
    """`text` in PEP 440's normal form ("v0.27.01" -> "0.27.1"); a one-line refusal otherwise."""
    try:
        return str(Version(str(text)))
    except InvalidVersion:
        raise ForgeError(f"{where}: not a vLLM version: {text!r} (a PEP 440 release such as "
                         f"0.27.1)") from None


def normalize_vllm_argument(args) -> None:
    """Rewrite a parsed `--vllm` (one value, or a list of them) to the normal form in place."""
    value = getattr(args, "vllm", None)
    if isinstance(value, list):
        args.vllm = [normal_release(v) for v in value]
    elif value is not None:
        args.vllm = normal_release(value)
