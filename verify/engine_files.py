"""An engine worker's two files as typed models (forge.typed), read where each crosses a process:

    <out>/engines/<name>.spec.json    EngineSpec    verify/supervisor.py start_worker (from the
                                                    specs of bench.py and mtp_smoke.py)
    <out>/engines/<name>.result.json  EngineResult  verify/engine_worker.py _write

A spec the model refuses stops the worker in one line naming the file and the field, before vLLM
is imported; a result it refuses is an engine that did not start, that line its error. vLLM's
engine keywords and sampling parameters are vLLM's vocabulary, not enumerated here: they are
typed as a mapping of names to bounded JSON (forge.typed.BoundedJson). A window's name becomes
a file name (its Prometheus snapshots): it is a plain name in full."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge.typed import STRICT, BoundedJson, Name, Seconds, Text, one_of
from verify.controls import CONTROLS
from verify.device import DEVICES

# A window's or an engine's name: letters, digits and . _ - @ (sustained@agree, conc8@random,
# fa4-k3), no leading dot, 128 characters: it becomes a file name (<name>.log, <name>.spec.json).
PLAIN_NAME = r"^[A-Za-z0-9][A-Za-z0-9@._+-]{0,127}$"
WindowName = Annotated[str, Field(pattern=PLAIN_NAME)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")]
Settings = Annotated[dict[Name, BoundedJson], Field(max_length=1_000)]
# A prompt: text, or token ids (a long window's: up to a model's context, 2**21 tokens at most).
TokenIds = Annotated[list[Annotated[int, Field(ge=0, lt=1 << 31)]], Field(max_length=1 << 21)]
Prompts = Annotated[list[Text | TokenIds], Field(max_length=10_000)]


class Window(BaseModel):
    """One measured window (bench.py _all_windows/_long_window, mtp_smoke.py inprocess_checks)."""
    model_config = STRICT
    name: WindowName
    prompts: Prompts
    sampling: Settings
    warmup_prompts: Prompts | None = None
    prompt_tokens: Annotated[int, Field(ge=1, le=1 << 21)] | None = None
    repeat: Annotated[int, Field(ge=1, le=10_000)] = 1
    warmup: bool = False
    sequential: bool = False
    keep_token_ids: bool = False
    save_prometheus: bool = False
    kind: Literal["followup"] | None = None
    control: Annotated[str, one_of(CONTROLS)] | None = None


class Barrier(BaseModel):
    """Where the engines of one group say they started (or failed), and how long each waits."""
    model_config = STRICT
    dir: Name
    name: Name
    count: Annotated[int, Field(ge=1, le=1_000)]
    timeout_s: Annotated[Seconds, Field(le=7 * 24 * 3600)] = 600


class EngineSpec(BaseModel):
    model_config = STRICT
    name: Name
    result_file: Name
    engine_kwargs: Settings
    env: Annotated[dict[EnvName, Text], Field(max_length=1_000)] = {}
    windows: Annotated[list[Window], Field(max_length=1_000)] = []
    device: Annotated[str, one_of(DEVICES)] = "cuda"
    prometheus_dir: Name | None = None
    barrier: Barrier | None = None
    lock_file: Name | None = None
    meta: Settings | None = None             # bench.py's record of the engine; not read here


OPEN = ConfigDict(**{**STRICT, "extra": "allow"})


class EngineInfo(BaseModel):
    """What start_engine found (and max_rss_mib, once the windows ran); a later worker's other
    facts are kept as JSON."""
    model_config = OPEN
    __pydantic_extra__: dict[str, BoundedJson] = Field(init=False)
    started: bool
    init_s: Seconds | None = None
    vllm: Name | None = None
    torch: Name | None = None
    device: Name | None = None
    cudagraph_mode: Name | None = None
    enforce_eager: bool | None = None
    max_rss_mib: Annotated[int, Field(ge=0)] | None = None


class EngineResult(BaseModel):
    model_config = STRICT
    name: Name | None = None
    versions: Annotated[dict[Name, Name], Field(max_length=64)] | None = None   # results before it
    engine: EngineInfo
    windows: Annotated[dict[Name, Settings], Field(max_length=1_000)] = {}
    window_errors: Annotated[dict[Name, Text], Field(max_length=1_000)] | None = None
    error: Text | None = None
