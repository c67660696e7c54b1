"""What verify's scripts need of the machine they run on: the target its GPU is, and ending an
engine worker with everything it started."""
from __future__ import annotations

import os
import signal
import subprocess

from forge.errors import ForgeError
from forge.targets import target_for_device


def detect_target() -> str:
    try:
        import torch

        name = torch.cuda.get_device_name()
    except Exception as exc:  # noqa: BLE001
        raise ForgeError(f"no --target given and no GPU name readable ({exc})") from exc
    try:
        return target_for_device(name).name
    except ForgeError as exc:
        raise ForgeError(f"no --target given: {exc}") from exc


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a worker and everything it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
