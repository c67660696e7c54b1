"""docs/evidence.md, generated from the records (`build.py evidence`): per vLLM release the
smokes that passed and failed with their controls, per recipe and target the step cost, the speed
against stock and the share of the byte floor, and every record with its id. Nothing on the page
is typed by hand: a figure changes by changing its record."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forge import REPO_ROOT, files
from forge.evidence.records import Record, load_records

COMMAND = "python3 build.py evidence"
PAGE = REPO_ROOT / "docs" / "evidence.md"
# the figures a smoke record holds for its two controls (verify/controls.py): the agreeing model
# must have every draft accepted, the random one none
CONTROLS = (("agree", "agreeing"), ("random", "random"))
# the per-recipe table's columns: (figure, heading, format)
STEP_COLUMNS = (("step_cost_x_plain", "step cost (x plain)", "{:.2f}"),
                ("x_stock", "x stock", "{:.2f}"),
                ("pct_of_floor", "% of byte floor", "{:.0f}%"))


def _release_key(release: str):
    try:
        return (0, Version(release))
    except InvalidVersion:
        return (1, Version("0"))


def _cell(record: Record, figure: str, form: str) -> str:
    value = record.figures.get(figure)
    return "–" if value is None else form.format(value)


def _what(record: Record) -> str:
    return " ".join(str(x) for x in (record.recipe, record.target) if x) or "–"


def smoke_section(records: list[Record]) -> list[str]:
    lines = ["## Smokes per vLLM release", "",
             "The controlled smoke (`verify/mtp_smoke.py`): the agreeing drafter must have every "
             "draft accepted (positive control), the random one none (negative control); "
             "accepted/drafted tokens and the mean acceptance length per control.", ""]
    by_release: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        by_release[record.vllm or "?"].append(record)
    for release in sorted(by_release, key=_release_key, reverse=True):
        group = by_release[release]
        passed = sum(r.verdict == "pass" for r in group)
        lines += [f"### vLLM {release}: {passed} passed, {len(group) - passed} failed", "",
                  "| record | recipe | target | runner | k | agreeing | random | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in group:
            cells = [_control(r, key) for key, _ in CONTROLS]
            lines.append(f"| `{r.id}` | {r.recipe or '–'} | {r.target or '–'} "
                         f"| {r.settings.get('model_runner', '–')} "
                         f"| {r.settings.get('num_speculative_tokens', '–')} | {' | '.join(cells)} "
                         f"| {r.verdict} |")
        lines.append("")
    return lines


def _control(record: Record, key: str) -> str:
    f = record.figures
    if f"{key}_accepted" not in f:
        return "–"
    return (f"{f[f'{key}_accepted']:g}/{f[f'{key}_draft_tokens']:g}, "
            f"{f[f'{key}_mean_acceptance_length']:.2f}")


def step_section(records: list[Record]) -> list[str]:
    lines = ["## Step cost per recipe and target", "",
             "Step cost: a speculative decode step's time over a plain step's, same engine "
             "settings otherwise. x stock: decode speed over vLLM's stock engine at the "
             "acceptance profile named in the record. % of byte floor: the step's wall time "
             "against the bytes it must read at the GPU's bandwidth (docs/roofline.md).", "",
             "| recipe | target | vLLM | layers | k | "
             + " | ".join(h for _, h, _ in STEP_COLUMNS) + " | record |",
             "|---|---|---|---|---|" + "---|" * len(STEP_COLUMNS) + "---|"]
    rows = [r for r in records if r.recipe and any(c in r.figures for c, _, _ in STEP_COLUMNS)]
    rows.sort(key=lambda r: (r.recipe, r.target or "", _release_key(r.vllm or "?"), r.id))
    for r in rows:
        cells = " | ".join(_cell(r, figure, form) for figure, _, form in STEP_COLUMNS)
        lines.append(f"| {r.recipe} | {r.target or '–'} | {r.vllm or '–'} "
                     f"| {r.settings.get('layers', '–')} "
                     f"| {r.settings.get('num_speculative_tokens', '–')} | {cells} | `{r.id}` |")
    return lines + [""]


ENGINE_COLUMNS = (("step_ms", "{:.2f}"), ("step_cost_x_plain", "{:.2f}"),
                  ("projected_tok_s", "{:.0f}"), ("x_stock", "{:.2f}"))


def engine_section(records: list[Record]) -> list[str]:
    """Per bench record, every engine it ran (the figures `<engine>.<figure>`)."""
    lines = ["## Benches by engine", "",
             "Per bench record, each engine: its decode step at full acceptance, the step over "
             "the plain engine's, the speed projected at the field acceptance profile and that "
             "over stock's (docs/gpu-evidence.md).", ""]
    for r in sorted(records, key=lambda r: (r.recipe or "", r.vllm or "", r.id)):
        engines = sorted({k.rsplit(".", 1)[0] for k in r.figures
                          if k.endswith(".step_ms") and "@" not in k})
        if not engines:
            continue
        lines += [f"### `{r.id}`: {r.summary or _what(r)}", "",
                  "| engine | step ms | x plain | projected tok/s | x stock |", "|---|---|---|---|---|"]
        for e in engines:
            cells = " | ".join(_cell(r, f"{e}.{f}", form) for f, form in ENGINE_COLUMNS)
            lines.append(f"| {e} | {cells} |")
        lines.append("")
    return lines


def group_section(records: list[Record]) -> list[str]:
    """Per profile record, its decode step by kernel group (verify/kernel_groups.yaml)."""
    lines = ["## Decode step by kernel group", "",
             "Per profiled step: each kernel group's time a step, the time its bytes take at the "
             "GPU's bandwidth (floor) and the share of the group's time that is (docs/roofline.md).", ""]
    for r in sorted(records, key=lambda r: (r.recipe or "", r.id)):
        groups = sorted({k.split(".")[1] for k in r.figures if k.startswith("group.")},
                        key=lambda g: (-r.figures.get(f"group.{g}.us_per_step", 0), g))
        if not groups:
            continue
        lines += [f"### `{r.id}`: {r.summary or _what(r)}", "",
                  "| kernel group | µs/step | floor µs | % of floor |", "|---|---|---|---|"]
        for g in groups:
            lines.append(f"| {g} | {_cell(r, f'group.{g}.us_per_step', '{:.1f}')} "
                         f"| {_cell(r, f'group.{g}.floor_us', '{:.1f}')} "
                         f"| {_cell(r, f'group.{g}.pct_of_floor', '{:.0f}%')} |")
        lines.append("")
    return lines


def suite_section(records: list[Record]) -> list[str]:
    """Per `.ci/run` record (benchmarks/ci_run.py): the README's test command on a fresh clone."""
    if not records:
        return []
    lines = ["## The test suite on a CI machine", "",
             "`.ci/run` on a fresh clone (benchmarks/ci_run.py): the machine, the cache it started "
             "with, its tests phase (the README's test command) and whole run in seconds, the suite's "
             "own CPU-seconds in the tests (its processes and the services it started; – in records "
             "from before .ci/run counted them), what every core of the machine did meanwhile (busy; "
             "stolen: taken by the host of a virtual machine), pytest's counts.", "",
             "| record | date | commit | cache | cores | tests s | total s | suite CPU s | CPU busy s "
             "| CPU stolen s | passed | failed | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r.date, r.id)):
        cells = " | ".join(_cell(r, name, "{:.0f}") for name in
                           ("cores", "phase.tests_s", "total_s", "phase.tests_cpu_suite_s",
                            "phase.tests_cpu_busy_s", "phase.tests_cpu_stolen_s", "passed", "failed"))
        lines.append(f"| `{r.id}` | {r.date} | {r.settings.get('commit', '–')} "
                     f"| {r.settings.get('cache', '–')} | {cells} | {r.verdict} |")
    return lines + [""]


def index_section(records: list[Record]) -> list[str]:
    lines = ["## Every record", "",
             "| record | kind | date | recipe / target | GPU | verdict | what |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r.date, r.id)):
        gpu = f"{r.gpu['count']}x {r.gpu['name']}" if r.gpu else "CPU"
        lines.append(f"| `{r.id}` | {r.kind} | {r.date} | {_what(r)} | {gpu} | {r.verdict} "
                     f"| {r.summary or '–'} |")
    return lines + [""]


def render(records: dict[str, Record]) -> str:
    every = list(records.values())
    smokes = [r for r in every if r.kind == "smoke"]
    return "\n".join([
        "# Evidence", "",
        f"_Generated by `{COMMAND}` from `benchmarks/results/<id>/result.json`; do not edit. "
        "How to read a record: docs/gpu-evidence.md._", "",
        *smoke_section(smokes), *step_section(every),
        *engine_section([r for r in every if r.kind == "bench"]),
        *group_section([r for r in every if r.kind == "profile"]),
        *suite_section([r for r in every if r.kind == "suite"]), *index_section(every)])


def regenerate(page: Path, name: str, results: Path | None = None) -> tuple[str, str]:
    """(the page's text now, or "" when it does not exist; the text the records make)."""
    found = files.read_if_present(page, files.REPORT)   # a generated page, as a report
    current = "" if found is None else files.decode_utf8(found, name)
    return current, render(load_records(results))
