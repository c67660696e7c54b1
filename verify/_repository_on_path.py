"""Imported only when a verify script runs as a file (`python3 verify/mtp_smoke.py`, from any
directory; in the image `python3 /opt/vllm-forge/verify/mtp_smoke.py`).

Python then puts the script's own folder, verify/, first on sys.path instead of the repository,
so neither `forge` nor `verify` would import, and verify's modules (report, metrics, ...) would
shadow any top-level module of the same name. This swaps that entry for the folder that holds
verify/, found from this file's own path. Run as a module (`python3 -m verify.mtp_smoke`) or as
an installed entry point (`vllm-forge-mtp-smoke`), a script never imports this.

Nor when multiprocessing's `spawn` start method re-runs the script in a child (vLLM does once CUDA
is initialised): the child takes the parent's sys.path, already swapped here, so verify/ is not
on it and this module would not import (the H200 run of 2026-12-01 died with `No module named
'_repository_on_path'`); it re-runs the file as `__mp_main__`, hence the scripts import this
only when their `__name__` is `__main__` as well as their `__package__` empty.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = str(HERE.parent)

sys.path[:] = [ROOT] + [entry for entry in sys.path
                        if entry != ROOT and Path(entry or ".").resolve() != HERE]
