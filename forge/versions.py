"""vLLM release numbers, parsed once at the command-line boundary (PEP 440 through `packaging`)
and passed on as one value, so base tags, image tags, statuses and comparisons agree:
`--vllm 0.27.01` and `--vllm v0.27.1` both mean 0.27.1 everywhere.

    p.add_argument("--vllm", type=Release)     # args.vllm: Release("0.27.1")
    args.vllm == "0.27.1"                      # the normal form, as text
    args.vllm.version >= Version("0.25.0")     # the parsed version, no second parse
"""
from __future__ import annotations

from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError


class Release(str):
    """A vLLM release: text in PEP 440's normal form ("v0.27.01" -> "0.27.1"), so tags, file
    names, JSON and the releases recorded in files compare with it as they are, and `.version`,
    the Version it was parsed into once, for ranges and order.

    Release(text) refuses a non-version in one line naming `where`. Release(release) is that same
    release, parsed no second time: the library's entry points take text from their other callers
    and wrap what they get, so the command line's value flows through untouched."""

    version: Version

    def __new__(cls, text: str, where: str = "--vllm") -> Release:
        if isinstance(text, Release):
            return text
        try:
            version = Version(str(text))
        except InvalidVersion:
            raise ForgeError(f"{where}: not a vLLM version: {text!r} (a PEP 440 release such as "
                             f"0.27.1)") from None
        release = super().__new__(cls, str(version))
        release.version = version
        return release
