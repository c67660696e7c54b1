"""The file names vLLM's fused-MoE kernel looks its tuned configs up by (vLLM's
`get_config_file_name` in model_executor/layers/fused_moe/fused_moe.py):

    E={experts},N={n},device_name={device}[,dtype={dtype}][,block_shape=[{k},{n}]][,backend={b}].json

(`backend=` names another kernel's configs, e.g. fused_flydsl_moe.py's on AMD: vLLM 0.27.1 ships
eight; the Triton kernel forge tunes never writes it.)

The one place forge writes or reads that grammar: the tuner names files with it, the manifest
checks moe-config files against it, the patch status reads the device from it, recipes expect it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"E=(?P<experts>\d+),N=(?P<n>\d+),device_name=(?P<device>[^,]+)"
                   r"(?:,dtype=(?P<dtype>[^,]+))?(?:,block_shape=(?P<block_shape>\[\d+,\d+\]))?"
                   r"(?:,backend=(?P<backend>[^,]+))?\.json")


@dataclass(frozen=True)
class MoeConfigName:
    experts: int
    n: int
    device: str                  # as vLLM spells it in the name: spaces became "_"
    dtype: str | None = None     # no dtype field: vLLM asked with dtype=None (unquantized)
    block_shape: str | None = None
    backend: str | None = None

    def __str__(self) -> str:
        dtype_part = f",dtype={self.dtype}" if self.dtype else ""
        block_part = f",block_shape={self.block_shape}" if self.block_shape else ""
        backend_part = f",backend={self.backend}" if self.backend else ""
        return (f"E={self.experts},N={self.n},device_name={self.device}{dtype_part}{block_part}"
                f"{backend_part}.json")


def parse_config_name(file_name: str) -> MoeConfigName | None:
    """The fields of a config file name; None when it is not named by vLLM's grammar."""
    match = _NAME.fullmatch(file_name)
    if match is None:
        return None
    return MoeConfigName(int(match["experts"]), int(match["n"]), match["device"],
                         match["dtype"], match["block_shape"], match["backend"])


def device_file_name(device_name: str) -> str:
    """vLLM's get_config_file_name: spaces become '_', every H200 variant is NVIDIA_H200."""
    name = device_name.replace(" ", "_").replace("/", "_")
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def config_file_name(device_name: str, dtype: str, experts: int, n: int) -> str:
    """The name vLLM looks up for this GPU (as torch names it) and kernel dtype; the tuner's
    "bf16" is the unquantized kernel, which vLLM looks up with dtype=None (no dtype field)."""
    return str(MoeConfigName(experts, n, device_file_name(device_name), None if dtype == "bf16" else dtype))
