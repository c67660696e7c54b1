"""mtp_smoke --batch N: the gate prompts cycled to N requests sent at once, so a check (lossless
above all) can run where a path depends on the number of sequences, e.g. the split-KV choice of
the candidate triton-attn-group-kv-heads above 16 sequences (record h200-0.27.1-smoke-26b-a4b-v2-groupkv)."""
import subprocess
import sys
from pathlib import Path

import pytest

from forge.serving.recipes import load_recipe
from verify import mtp_smoke
from verify.dummy_models import recipe_shape

REPO = Path(__file__).resolve().parent.parent
RECIPE = "gemma-4-26b-a4b-it"


def prompts(*flags):
    args = mtp_smoke.parse_args(["--recipe", RECIPE, "--target", "h200", "--dummy", *flags])
    args.shape = recipe_shape(load_recipe(RECIPE, "h200"), args.shape)
    return mtp_smoke.smoke_prompts(args)


def test_batch_cycles_the_gate_prompts_to_n_requests():
    gate = prompts()
    batch = prompts("--batch", "32")
    assert len(gate) == 8 and len(batch) == 32
    assert batch == gate * 4
    assert prompts("--batch", "5") == gate[:5]
    # --dummy prompts are token ids (no tokenizer): each a distinct, non-empty list
    assert all(isinstance(p, list) and p for p in batch) and len({str(p) for p in gate}) == 8


@pytest.mark.parametrize("flags, message", [
    (["--batch", "0"], "argument --batch: must be 1 or more (got 0)"),
    (["--batch", "many"], "argument --batch: not a whole number: 'many'"),
    (["--batch", "32", "--endpoint", "http://127.0.0.1:9"],
     "--batch is in-process only (--endpoint sends the gate prompts one at a time)"),
])
def test_a_bad_batch_is_refused_in_one_line_naming_the_flag(flags, message, tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "verify.mtp_smoke", "--recipe", RECIPE, "--target",
                             "h200", "--dummy", "--out", str(out), *flags],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [err] = result.stderr.strip().splitlines()     # one line, not argparse's usage block
    assert message in err
    assert not out.exists()
