"""Reading a committed GPU session (tests/fixtures/gpu/<session>/) the way the evidence tests do:
an engine's result and a smoke's report, a recipe's H200 thresholds, a bench rebuilt from its
engine results with `bench.py --collect`, a profile's analysis rebuilt with `profile.py --report`,
and one numbered section of docs/gpu-evidence.md."""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from forge.serving.recipes import load_recipe
from verify import bench, profile
from verify import checks as gate
from verify.mtp_smoke import window_counters
from verify.report import PASS

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "tests" / "fixtures" / "gpu"
DOC = ROOT / "docs" / "gpu-evidence.md"
# a controlled smoke's two windows: the agreeing model (positive control), the random one (negative)
CONTROL_WINDOWS = (("greedy_agree", "agreeing"), ("greedy_random", "random"))


class Session:
    def __init__(self, name: str):
        self.root = GPU / name

    def result(self, folder: str, name: str = "engine") -> dict:
        return json.loads((self.root / folder / f"{name}.result.json").read_text())

    def report(self, folder: str) -> dict:
        return json.loads((self.root / folder / "mtp_smoke.json").read_text())

    def log(self, path: str) -> str:
        return (self.root / path).read_text(errors="replace")

    def collect_bench(self, captured: str, engines: str, out: Path) -> tuple[int, dict, str]:
        """Rerun `bench.py --collect` with the captured report's own command on its engine
        results: (exit code, bench.json, bench.md) as CI rebuilds them."""
        command = json.loads((self.root / captured).read_text())["command"]
        argv = shlex.split(command)[1:]
        at = argv.index("--out")
        del argv[at:at + 2]
        shutil.copytree(self.root / engines, out / "engines")
        code = bench.main(argv + ["--collect", "--out", str(out)])
        return code, json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()



def assert_committed_report(rebuilt: tuple[int, dict, str], stem: str) -> dict:
    """A bench report committed as benchmarks/results/<stem>.{md,json} holds every table row and
    every engine's figures of the report `bench.py --collect` rebuilt; returns the committed JSON."""
    committed = ROOT / "benchmarks" / "results" / stem
    rows = [line for line in rebuilt[2].splitlines() if line.startswith("|")]
    assert rows and all(row in committed.with_name(stem + ".md").read_text() for row in rows)
    report = json.loads(committed.with_name(stem + ".json").read_text())
    assert {n: e["figures"] for n, e in report["engines"].items()} == \
        {n: e["figures"] for n, e in rebuilt[1]["engines"].items()}
    return report

def thresholds(recipe: str) -> tuple[float, float]:
    t = load_recipe(recipe, "h200").thresholds
    return t.min_acceptance_rate, t.min_mean_acceptance_length


def doc_section(number: int) -> str:
    text = DOC.read_text()
    start = text.index(f"## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def control_rows(data: dict, recipe: str, cells: str) -> list[str]:
    """A smoke's table rows, agreeing then random model: the given leading `| a | b ...` cells, the
    role, accepted/draft tokens, mean acceptance length and the gate's verdict on vLLM's counters."""
    rows = []
    for window, role in CONTROL_WINDOWS:
        c = window_counters(data, window)
        verdict = gate.check_acceptance(c, *thresholds(recipe)).status
        rows.append(f"{cells} | {role} | {c.accepted:g}/{c.draft_tokens:g} "
                    f"| {c.mean_acceptance_length:.2f} | {verdict} |")
    return rows


def assert_controls_hold(data: dict, recipe: str, k: int):
    """Every draft of the agreeing model accepted, none of the random one's, and the gate passing
    the one and failing the other as the controls require; returns their counters."""
    agree, random = (window_counters(data, w) for w, _ in CONTROL_WINDOWS)
    assert agree.accepted == agree.draft_tokens == k * agree.drafts > 0
    assert agree.mean_acceptance_length == k + 1
    assert random.accepted == 0 and random.draft_tokens == k * random.drafts > 0
    positive = gate.positive_control(gate.check_acceptance(agree, *thresholds(recipe)))
    negative = gate.negative_control(gate.check_acceptance(random, *thresholds(recipe)))
    assert positive.status == PASS and negative.status == PASS
    return agree, random


def decode_pair(figures: dict, window: str) -> str:
    cells = [figures.get(f"{window}@{c}", {}).get("decode_tok_s") for c in ("agree", "random")]
    return " / ".join("–" if v is None else f"{v:.0f}" for v in cells)


def _fixed(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def step_rows(report: dict) -> list[str]:
    """A bench's step table (docs/gpu-evidence.md §12.2, §13): per engine that measured, its step
    (spread), step x plain ("–" for stock, which has no plain engine), sustained, conc 8 and conc 16
    decode (full / zero acceptance) and the projections at both profiles."""
    rows = []
    for name, e in report["engines"].items():
        f, d = e["figures"], e["derived"]
        projected = " | ".join(f"{d['projected'][p]['tok_s']:.0f}" for p in ("spark343", "seed87"))
        rows.append(f"| {name} | {e['k']} | {d['step_ms']:.2f} ({100 * d['step_ms_spread']:.1f}%) "
                    f"| {_fixed(d.get('step_cost_x_plain'))} | {decode_pair(f, 'sustained')} | {decode_pair(f, 'conc8')} "
                    f"| {decode_pair(f, 'conc16')} | {projected} |")
    return rows


def candidate_rows(report: dict, pairs: dict[str, str], windows: tuple[str, ...]) -> list[str]:
    """Per window, each engine pair's full-acceptance decode without / with the candidate
    and their ratio (same run, same settings otherwise)."""
    rows = []
    for window in windows:
        cells = []
        for base, candidate in pairs.items():
            without = report["engines"][base]["figures"][f"{window}@agree"]["decode_tok_s"]
            with_it = report["engines"][candidate]["figures"][f"{window}@agree"]["decode_tok_s"]
            cells.append(f"{without:.0f} / {with_it:.0f} ({with_it / without:.2f}x)")
        rows.append(f"| {window} | " + " | ".join(cells) + " |")
    return rows


def assert_candidate_copy(session: Session, apply_log: str, copy: str, candidate: str,
                          engine_logs: tuple[str, ...], vllm: str = "0.27.1") -> None:
    """A copy lib.sh's `patched_copy` made carries exactly the candidate, and each engine whose log
    is named imported vLLM from that copy (the copy's own file paths in its log)."""
    first = session.log(apply_log).splitlines()[0]
    assert first == f"applied 1 patch(es) to vLLM {vllm} at /tmp/{copy}/vllm: {candidate}"
    for log in engine_logs:
        assert f"/tmp/{copy}/vllm/" in session.log(log), log


def profile_analysis(stem: str) -> dict:
    """A committed profile analysis: benchmarks/results/<stem>.json's first (only) entry."""
    return json.loads((ROOT / "benchmarks" / "results" / f"{stem}.json").read_text())[0]


def profile_report_args(raw: str, stem: str, baseline: str | None = None) -> list[str]:
    """`verify/profile.py`'s arguments that rebuild benchmarks/results/<stem>.{md,json} from the
    raw profile.json at `raw` (paths from the repository root), its floor from its own record."""
    compared = ["--baseline", baseline] if baseline else []
    return ["--report", raw, *compared, "--roofline", "auto",
            "--md", f"benchmarks/results/{stem}.md", "--json", f"benchmarks/results/{stem}.json"]


def assert_profile_report_rebuilds(report_args: list[str]):
    """A committed profile analysis (`verify/profile.py --report ... --md M --json J`, run from the
    repository root) is what the code makes of its raw profile.json now."""
    args = profile.parse_args(report_args)
    text, entries = profile.report_text(args)
    assert Path(args.md).read_text() == text, f"{args.md} is stale: rebuild it"
    assert json.loads(Path(args.json).read_text()) == json.loads(profile.report_json(entries)), \
        f"{args.json} is stale: rebuild it"


def profile_pair_figures(plain: dict, spec: dict) -> list[str]:
    """What docs/roofline.md states of a recipe's plain and spec step analyses (profile.py
    --report --json): the plain step's wall time, GPU busy share and byte floor, the spec step's
    cost over it, and the per-group table's rows."""
    floor = plain["floor"]
    figures = [
        f"{plain['wall_us_per_token'] / 1e3:.3f} ms/token in wall time "
        f"({1e6 / plain['wall_us_per_token']:.0f} tok/s)",
        f"busy {plain['busy_pct']:.0f}%",
        f"{floor['step_floor_us']:.0f} µs/step ({floor['bytes_per_step'] / 1e9:.2f} GB at "
        f"{floor['bandwidth_tb_s']:.2f} TB/s)",
        f"{floor['pct_of_floor_wall']:.0f}% of it in wall time ({floor['pct_of_floor_kernels']:.0f}% in GPU-busy time",
        f"{spec['wall_us_per_step'] / 1e3:.3f} ms/step in wall time, "
        f"{spec['wall_us_per_step'] / plain['wall_us_per_step']:.2f}x the plain step",
        f"{spec['kernel_us_per_step'] / plain['kernel_us_per_step']:.2f}x in kernel time",
        f"{spec['wall_us_per_token'] / 1e3:.3f} ms/token ({1e6 / spec['wall_us_per_token']:.0f} tok/s)",
    ]
    for name, group in plain["groups"].items():
        other = spec["groups"][name]
        floor_us = "no floor" if group["floor_us"] is None else f"{group['floor_us']:.1f}"
        pct = "–" if group["pct_of_floor"] is None else f"{group['pct_of_floor']:.0f}%"
        figures.append(f"| {name} | {group['us_per_step']:.1f} | {other['us_per_step']:.1f} | "
                       f"{other['us_per_step'] - group['us_per_step']:+.1f} | {floor_us} | {pct} |")
    return figures
