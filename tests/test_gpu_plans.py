"""Every plan in benchmarks/gpu/plans/ loads, names only commands that exist here (or vLLM's own
`vllm bench latency`, read from the release's real source), and passes each command flags its
parser takes: a typo would otherwise cost an engine start on the GPU. Plans carry no run ids."""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from benchmarks.gpu.runner.plan import Job, Plan, load_plan
from benchmarks.gpu.runner.schedule import dry_run

ROOT = Path(__file__).resolve().parents[1]
PLANS = sorted((ROOT / "benchmarks" / "gpu" / "plans").glob("*.yaml"))
PYTHON = sys.executable
RUN_ID = re.compile(r"\bs(1[5-9]|2\d)\b")   # the names past runs went by


def argv_of(job: Job, tmp: Path) -> list[str]:
    return job.argv({"out": str(tmp / job.id), "repo": str(ROOT), "python": PYTHON})


def test_the_plans_are_the_kinds_of_run_the_project_repeats():
    assert {plan.stem for plan in PLANS} >= {"smoke", "bench", "profile", "latency"}


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.name)
def test_a_plan_loads_schedules_every_job_and_carries_no_run_id(path):
    plan = load_plan(path)
    assert sorted(job.id for _, job in dry_run(plan)) == sorted(job.id for job in plan.jobs)
    assert not RUN_ID.search(path.read_text()), RUN_ID.search(path.read_text())


def jobs_of(kind: str) -> list[tuple[Plan, Job]]:
    return [(plan, job) for plan in map(load_plan, PLANS) for job in plan.jobs if kind_of(job) == kind]


def kind_of(job: Job) -> str:
    argv = job.command
    if argv[:3] == ("{python}", "-m", "vllm.entrypoints.cli.main"):
        return "vllm"
    if argv[:2] == ("{python}", "-c"):
        return "inline"
    if argv[:2] == ("{python}", "-m"):
        return argv[2]
    if argv[0] == "{python}" and argv[1].startswith("{repo}/") and argv[1].endswith(".py"):
        return argv[1].removeprefix("{repo}/")
    return "unknown"


def test_every_command_is_one_these_tests_check():
    for plan in map(load_plan, PLANS):
        for job in plan.jobs:
            assert kind_of(job) in ("vllm", "inline", *SCRIPTS, *MODULES), \
                f"{plan.path.name}: {job.id}: {job.command[:3]}"
            if kind_of(job) in SCRIPTS:
                assert (ROOT / kind_of(job)).is_file()


def parsed(parse, argv: list[str], capsys, where: str):
    """The script's own parser on the plan's flags; its refusal (argparse exits 2) fails the test."""
    try:
        return parse(argv)
    except SystemExit as stop:
        pytest.fail(f"{where}: its parser refused the flags: {capsys.readouterr().err.strip().splitlines()[-1:]} (exit {stop.code})")


def check_build(argv, capsys, where):
    from forge.commands.cli import build_parser

    parsed(build_parser().parse_args, argv, capsys, where)


def check_smoke(argv, capsys, where):
    from forge.serving.recipes import load_recipe
    from verify import mtp_smoke

    args = parsed(mtp_smoke.parse_args, argv, capsys, where)
    load_recipe(args.recipe, args.target)
    return args


def check_bench(argv, capsys, where):
    from forge.serving.recipes import load_recipe
    from verify import bench

    args = parsed(bench.parse_args, argv, capsys, where)
    load_recipe(args.recipe, args.target)
    for engine in args.engine or []:
        bench.parse_engine(engine, check_site=False)
    bench.parse_configs(args.configs) if args.configs else None
    assert bench.windows(args, bench.load_prompts()), where    # every window is one bench knows
    return args


def check_profile(argv, capsys, where):
    from verify import profile

    args = parsed(profile.parse_args, argv, capsys, where)
    if not args.report:
        args.shape = profile.dummy_shape(args)
        profile.check_lengths(args)        # the prompt and replies fit the context it is given
    return args


SCRIPTS = {"build.py": check_build, "verify/mtp_smoke.py": check_smoke, "verify/bench.py": check_bench,
           "verify/profile.py": check_profile}
# verify's own time limit, below the runner's: a script stopped by its own limit writes its report
OWN_LIMIT = {"verify/mtp_smoke.py": "--timeout", "verify/bench.py": "--timeout", "verify/profile.py": "--max-seconds"}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_scripts_flags_are_ones_its_parser_takes(script, tmp_path, capsys):
    jobs = jobs_of(script)
    if script != "build.py":
        assert jobs, f"no plan runs {script}"
    for plan, job in jobs:
        where = f"{plan.path.name}: {job.id}"
        args = SCRIPTS[script](argv_of(job, tmp_path)[2:], capsys, where)
        flag = OWN_LIMIT.get(script)
        if flag and args is not None and not getattr(args, "report", None):
            own = getattr(args, flag[2:].replace("-", "_"))
            assert own < job.timeout_s, f"{where}: {flag} {own} is not below timeout_s {job.timeout_s:g}"


def test_inline_python_compiles_and_imports_what_the_repository_has(tmp_path):
    for plan, job in jobs_of("inline"):
        code = argv_of(job, tmp_path)[2]
        tree = ast.parse(code)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                        f"{plan.path.name}: {job.id}: {names}"


def flag_values(argv: list[str]) -> list[tuple[str, list[str]]]:
    pairs: list[tuple[str, list[str]]] = []
    for part in argv:
        if part.startswith("--"):
            pairs.append((part, []))
        else:
            pairs[-1][1].append(part)
    return pairs


def test_vllm_bench_latency_flags_are_the_releases(tmp_path):
    from forge.serving.vllm_args import bench_latency_flags, release_args

    jobs = jobs_of("vllm")
    assert jobs
    for plan, job in jobs:
        argv = argv_of(job, tmp_path)[3:]
        assert argv[:2] == ["bench", "latency"], job.id
        flags = bench_latency_flags(plan.vllm)
        engine = release_args(plan.vllm)
        for flag, values in flag_values(argv[2:]):
            assert flag in flags, f"{plan.path.name}: {job.id}: vLLM {plan.vllm}'s bench latency has no {flag}"
            problem = engine.value_problem(flag, values) if flag in engine.serve_flags else None
            assert problem is None, f"{plan.path.name}: {job.id}: {flag} {problem}"


def test_bench_latency_reads_flags_a_typo_would_miss():
    """The reading itself: latency.py's own flags and the engine's are there, serve's frontend not."""
    from forge.serving.vllm_args import bench_latency_flags

    flags = bench_latency_flags("0.27.1")
    assert {"--input-len", "--num-iters", "--output-json", "--speculative-config", "--load-format"} <= flags
    assert "--port" not in flags and "--num-iter" not in flags


def check_serve_local(plan: Plan, job: Job, argv: list[str], capsys, where: str):
    """A server job: serve_local's own parser takes its flags, it serves the plan's release,
    runs the server in its place (--exec) and is up when its ready_url answers on its --port."""
    from urllib.parse import urlsplit

    from benchmarks.gpu import serve_local

    args = parsed(serve_local.parse_args, argv, capsys, where)
    assert args.vllm == plan.vllm, f"{where}: --vllm {args.vllm} is not the plan's {plan.vllm}"
    assert args.exec and args.installed, f"{where}: a server job runs the installed release (--installed --exec)"
    assert job.ready_url and urlsplit(job.ready_url).port == args.port, f"{where}: ready_url is not its --port"


MODULES = {"benchmarks.gpu.serve_local": check_serve_local}


def test_server_jobs_serve_the_plans_release_on_the_port_they_wait_for(tmp_path, capsys):
    jobs = jobs_of("benchmarks.gpu.serve_local")
    assert jobs
    for plan, job in jobs:
        MODULES[kind_of(job)](plan, job, argv_of(job, tmp_path)[3:], capsys, f"{plan.path.name}: {job.id}")
    # each endpoint client depends on the server of the port it talks to
    for plan in map(load_plan, PLANS):
        servers = {job.ready_url.rsplit(":", 1)[1].split("/")[0]: job.id for job in plan.jobs if job.ready_url}
        for job in plan.jobs:
            if "--endpoint" in job.command:
                port = job.command[job.command.index("--endpoint") + 1].rsplit(":", 1)[1]
                assert servers[port] in job.depends_on, f"{plan.path.name}: {job.id} talks to {port}"
