#!/usr/bin/env python3
"""On a GPU host with vLLM: forge's MoE config-name grammar (forge/patching/moe_config_names.py)
against vLLM's own `get_config_file_name` on this GPU, for the shapes forge tunes and recipes name.

    PYTHONPATH=<vllm site> python3 -m benchmarks.gpu.moe_config_names [--json FILE]

Prints one line per case (the name vLLM builds, the name forge builds, whether forge parses vLLM's
name back to the same fields) and exits 1 on any disagreement.
"""
from __future__ import annotations

import argparse
import sys

from forge.errors import exit_on_interrupt
from forge.files import write_text_atomically
from forge.json_text import dump_json
from forge.patching.moe_config_names import config_file_name, parse_config_name

# (experts, N, the tuner's dtype): the 26B-A4B at TP=1 and TP=2, the unquantized kernel, and a
# foreign shape so the check is not only about Gemma's numbers.
CASES = [(128, 704, "fp8_w8a8"), (128, 352, "fp8_w8a8"), (128, 704, "bf16"), (64, 1408, "int8_w8a16")]


def compare(device_name: str) -> list[dict]:
    from vllm.model_executor.layers.fused_moe.fused_moe import get_config_file_name

    rows = []
    for experts, n, dtype in CASES:
        theirs = get_config_file_name(experts, n, None if dtype == "bf16" else dtype)
        ours = config_file_name(device_name, dtype, experts, n)
        parsed = parse_config_name(theirs)
        fields_match = parsed is not None and (parsed.experts, parsed.n) == (experts, n)
        rows.append({"vllm": theirs, "forge": ours, "same_name": theirs == ours,
                     "forge_parses_vllm_name": fields_match})
    block = get_config_file_name(128, 704, "fp8_w8a8", [128, 128])
    parsed = parse_config_name(block)
    rows.append({"vllm": block, "forge": str(parsed) if parsed else None,
                 "same_name": parsed is not None and str(parsed) == block,
                 "forge_parses_vllm_name": parsed is not None and parsed.block_shape == "[128,128]"})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    import torch
    import vllm

    device = torch.cuda.get_device_name()
    rows = compare(device)
    for row in rows:
        ok = row["same_name"] and row["forge_parses_vllm_name"]
        print(f"{'OK ' if ok else 'BAD'} vllm={row['vllm']} forge={row['forge']}")
    summary = {"device": device, "vllm": vllm.__version__, "rows": rows}
    if args.json:
        write_text_atomically(args.json, dump_json(summary, args.json, indent=1) + "\n")
    bad = [r for r in rows if not (r["same_name"] and r["forge_parses_vllm_name"])]
    print(f"{len(rows) - len(bad)}/{len(rows)} names agree (vLLM {vllm.__version__}, {device})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
