"""The JSON files `build.py tune-moe` reads, as typed models (forge.typed):

    tune-moe-<dtype>.json (--import-results)   TuneResults   forge.serving.moe_tune.tune
    patches/moe-configs/E=...json              ShippedConfig forge.serving.moe_tune.render_config_json
    bench.json (--end-to-end)                  BenchRun      verify/bench.py (the fields read)

A file a model refuses is refused in one line naming the file and the field, before anything is
written. vLLM's config files key the token count M as a string ("64"): such keys are integer-like
in full. Imported only where a file is read (pydantic stays off build.py's start-up path)."""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, model_validator

from forge.patching.moe_config_names import parse_config_name
from forge.typed import STRICT, Name, Seconds, Text, one_of

# A token count: the server runs up to a few thousand per step; a million is far past any.
TokenCount = Annotated[int, Field(ge=1, le=1 << 20)]
# The same count as a JSON key, as vLLM's files write it: digits in full, no sign, no zero.
TokenKey = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,6}$")]
# A tile size, group size, warp or stage count of Triton's kernel: small powers of two.
KernelValue = Annotated[int, Field(ge=1, le=4096)]
Microseconds = Annotated[float, Field(ge=0, le=1e9)]
# tune-moe times a few dozen configs per token count over tens of counts ("full": 1,536 configs).
MAX_COUNTS = 1_000
MAX_TIMINGS = 10_000


def _config_file_name(text: str) -> str:
    if parse_config_name(text) is None:
        raise ValueError("not named like a fused-MoE config (E=...,N=...,device_name=....json)")
    return text


ConfigFileName = Annotated[str, Field(max_length=255), AfterValidator(_config_file_name)]


class KernelConfig(BaseModel):
    """One config of the fused-MoE kernel (moe_tune.CONFIG_KEYS)."""
    model_config = STRICT
    BLOCK_SIZE_M: KernelValue
    BLOCK_SIZE_N: KernelValue
    BLOCK_SIZE_K: KernelValue
    GROUP_SIZE_M: KernelValue
    num_warps: KernelValue
    num_stages: KernelValue


class Decision(BaseModel):
    """moe_tune.choose's verdict at one token count."""
    model_config = STRICT
    M: TokenCount
    tuned_us: Microseconds
    default_us: Microseconds
    speedup: Annotated[float, Field(ge=0, le=1e6)]
    kept: Annotated[str, one_of(("tuned", "default"))]
    tuned_config: KernelConfig
    default_config: KernelConfig


class Timing(BaseModel):
    model_config = STRICT
    us: Microseconds
    config: KernelConfig


class Provenance(BaseModel):
    """Where and how the sweep ran (moe_tune.gpu_provenance)."""
    model_config = STRICT
    device: Name
    driver: Name
    triton: Name
    torch: Name
    vllm: Name
    python: Name
    date: Name
    duration_s: Seconds
    command: Text


class TuneResults(BaseModel):
    """A GPU run's results, as moe_tune.tune returns them and write_results writes them."""
    model_config = STRICT
    configs: Annotated[dict[TokenKey, KernelConfig], Field(max_length=MAX_COUNTS)]
    decisions: Annotated[list[Decision], Field(max_length=MAX_COUNTS)]
    timings: Annotated[dict[TokenKey, Annotated[list[Timing], Field(max_length=MAX_TIMINGS)]],
                       Field(max_length=MAX_COUNTS)]
    duration_s: Seconds
    dtype: Annotated[str, one_of(("bf16", "fp8_w8a8"))]
    space: Annotated[str, one_of(("small", "full"))]
    batch_sizes: Annotated[list[TokenCount], Field(max_length=MAX_COUNTS)]
    file_name: ConfigFileName
    provenance: Provenance


class ShippedConfig(BaseModel):
    """vLLM's config file format: {"<M>": KernelConfig, ..., "triton_version": "3.6.0"}."""
    model_config = ConfigDict(**{**STRICT, "extra": "allow"})
    __pydantic_extra__: dict[str, KernelConfig] = Field(init=False)

    triton_version: Name | None = None

    @model_validator(mode="after")
    def _token_keys(self) -> ShippedConfig:
        extra = self.__pydantic_extra__ or {}
        if len(extra) > MAX_COUNTS:
            raise ValueError(f"over {MAX_COUNTS} token counts")
        for key in extra:
            if not (key.isascii() and key.isdigit() and key[0] != "0" and len(key) <= 7):
                raise ValueError(f"key {key[:40]!r} is no token count (digits, no leading zero)")
        return self

    def configs(self) -> dict[str, dict]:
        """{"<M>": the config as a mapping}, the files' order kept."""
        return {m: config.model_dump() for m, config in (self.__pydantic_extra__ or {}).items()}


# --- bench.json: the fields an end-to-end proof reads; the rest of the run is kept as JSON --------

OPEN = ConfigDict(**{**STRICT, "extra": "allow"})


class BenchFigure(BaseModel):
    model_config = OPEN
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)
    decode_tok_s: Annotated[float, Field(ge=0, le=1e9)] | None = None


class BenchEngine(BaseModel):
    model_config = OPEN
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)
    name: Name
    dtype: Name | None = None
    k: Annotated[int, Field(ge=0, le=1_000)] | None = None
    runner: Name | None = None
    attention: Name | None = None
    compile: Name | None = None
    moe_config_log: Annotated[list[Text], Field(max_length=1_000)] | None = None
    figures: Annotated[dict[Name, BenchFigure], Field(max_length=1_000)] | None = None

    def setting(self, key: str) -> object:
        return getattr(self, key)


class BenchRun(BaseModel):
    model_config = OPEN
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)
    date: Name | None = None
    engines: Annotated[dict[Name, BenchEngine], Field(max_length=1_000)]
