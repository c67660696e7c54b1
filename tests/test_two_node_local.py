"""benchmarks/gpu/two_node_local.sh: the commands it runs are `build.py serve --nodes 2`'s own node
commands (checked against vLLM 0.25.0's real parser) with only the listed single-host changes,
and the exact lines the script execs reach the program as that argv and environment."""
import json
import os
import subprocess
import sys
from pathlib import Path

from forge.serving.recipes import load_recipe
from forge.serving.vllm_args import release_args

REPO = Path(__file__).resolve().parents[1]
STAND_IN_FLAGS = ["--load-format", "dummy", "--skip-tokenizer-init",
                  "--compilation-config", '{"pass_config":{"fuse_allreduce_rms":false}}']


def _plan(tmp_path, *extra):
    result = subprocess.run([sys.executable, "-m", "benchmarks.gpu.two_node_commands",
                             "--models", str(tmp_path / "models"), "--work", str(tmp_path / "work"), *extra],
                            cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    return result.stdout


def test_plan_is_the_recipes_node_commands_plus_the_listed_stand_ins(tmp_path):
    plan = json.loads(_plan(tmp_path, "--json", "--layers", "10"))
    release = release_args("0.25.0")
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    runs = plan["runs"]
    assert [r["rank"] for r in runs] == [0, 1] and [r["headless"] for r in runs] == [False, True]
    for run in runs:
        argv = run["argv"]
        assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
        args = argv[5:]
        for token in args:
            if token.startswith("--"):
                assert release.has_flag(token), f"{token} is not a `vllm serve` flag in 0.25.0"
        assert args[args.index("--tensor-parallel-size") + 1] == "2"
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--node-rank") + 1] == str(run["rank"])
        assert args[args.index("--master-addr") + 1] == "127.0.0.1"
        assert ("--headless" in args) == run["headless"]
        assert ("--port" in args) != run["headless"]
        assert args[-len(STAND_IN_FLAGS):] == STAND_IN_FLAGS
        # the recipe's own settings, unchanged (CUDA graphs: never --enforce-eager)
        recipe_args = recipe.cli_args()
        spec_at = recipe_args.index("--speculative-config")
        assert args[:spec_at] == recipe_args[:spec_at]
        spec = json.loads(args[args.index("--speculative-config") + 1])
        recipe_k = json.loads(recipe_args[spec_at + 1])["num_speculative_tokens"]
        assert spec["method"] == "mtp" and spec["num_speculative_tokens"] == recipe_k
        assert Path(spec["model"]).name == "gemma-4-26b-a4b-assistant"
        assert Path(argv[4]).name == "gemma-4-26b-a4b-L10"
        assert "--enforce-eager" not in args
        env = run["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == str(run["rank"])
        # NVLink multicast off everywhere it could start (lent machines' rule)
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1" and env["VLLM_ALLREDUCE_USE_SYMM_MEM"] == "0"
        assert json.loads(args[args.index("--compilation-config") + 1]) == {
            "pass_config": {"fuse_allreduce_rms": False}}
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "lo"
        assert env["VLLM_HOST_IP"] == "127.0.0.1"
        assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
        assert env["VLLM_TUNED_CONFIG_FOLDER"].endswith("patches/moe-configs")
        assert all(name in release.env_vars for name in env if name.startswith("VLLM_"))
    # the dummy target config carries the 26B-A4B MoE shape: at TP=2 vLLM looks for N=352
    config = json.loads((tmp_path / "models" / "gemma-4-26b-a4b-L10" / "config.json").read_text())
    assert config["moe_intermediate_size"] // 2 == 352 and config["num_experts"] == 128
    # the pass it turns off is a field of 0.25.0's PassConfig, and FlashInfer picks "mnnvl"
    # (NVSwitch multicast) there whenever vLLM counts more than one node
    from forge.upstream.releases import release_tree

    tree = release_tree("0.25.0") / "vllm"
    # and vLLM turns its custom all-reduce off by itself across nodes
    assert "Disabled the custom all-reduce since we are running on multi-node." in (
        tree / "config" / "parallel.py").read_text()
    assert "fuse_allreduce_rms: bool" in (tree / "config" / "compilation.py").read_text()
    assert 'backend = "mnnvl"' in (tree / "distributed/device_communicators/flashinfer_all_reduce.py").read_text()
    # the recipe commands it started from are build.py serve --nodes 2's, minus docker
    assert len(plan["recipe_commands"]) == 2 and "--headless" in plan["recipe_commands"][1]


def test_each_line_the_script_execs_reaches_the_program_as_planned(tmp_path):
    """Run every line exactly as two_node_local.sh does (bash -c "exec LINE") with a stand-in
    `vllm.entrypoints.cli.main` that records its argv and environment."""
    fake = tmp_path / "fake" / "vllm" / "entrypoints" / "cli"
    fake.mkdir(parents=True)
    for d in (fake.parents[1], fake.parents[0], fake):
        (d / "__init__.py").write_text("")
    (fake / "main.py").write_text(
        "import json, os, sys\n"
        "rank = sys.argv[sys.argv.index('--node-rank') + 1]\n"
        "open(os.path.join(os.environ['RECORD'], rank + '.json'), 'w').write(json.dumps("
        "{'argv': sys.argv[1:], 'env': dict(os.environ)}))\n")
    plan = json.loads(_plan(tmp_path, "--json"))
    lines = _plan(tmp_path).splitlines()
    record = tmp_path / "record"
    record.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "RECORD": str(record)}
    for line in lines:
        subprocess.run(["bash", "-c", f"exec {line}"], env=env, check=True, timeout=60)
    for run in plan["runs"]:
        seen = json.loads((record / f"{run['rank']}.json").read_text())
        assert seen["argv"] == run["argv"][3:]
        for name, value in run["env"].items():
            assert seen["env"][name] == value


def test_script_passes_shellcheck_and_keeps_nvls_off():
    script = REPO / "benchmarks" / "gpu" / "two_node_local.sh"
    subprocess.run(["shellcheck", str(script)], check=True, timeout=60)
    text = script.read_text()
    assert "--burst 500" in text and "--server-log" in text and "mtp_smoke.py" in text


# --- a rehearsal of the whole script on the CPU ---------------------------------------------------
# No GPU here: a stand-in `vllm.entrypoints.cli.main` takes each node's exact command line, writes
# an engine log captured from vLLM 0.25.0 on an H200 (made TP=2: tensor_parallel_size=2 and the
# N=352 file it looks for), and on rank 0 serves vLLM's HTTP surface (/health, /v1/models,
# /v1/completions, /metrics with the captured Prometheus text). The real proof is the GPU run;
# this proves the script starts both nodes, waits, runs the smoke and the burst, stops the nodes
# and packs everything.

STAND_IN_MAIN = r'''
import json, os, signal, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
argv = sys.argv[1:]
assert argv[0] == "serve", argv
rank = int(argv[argv.index("--node-rank") + 1])
print(open(os.environ["STAND_IN_LOG"]).read().replace("tensor_parallel_size=1", "tensor_parallel_size=2")
      .replace("N=704", "N=352"), flush=True)
print("ARGV " + json.dumps(argv), flush=True)
if "--headless" in argv:
    print("INFO Launching vLLM (v0.25.0) headless multiproc executor", flush=True)
    signal.pause()
prom = open(os.environ["STAND_IN_PROM"]).read()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, body, kind="application/json"):
        data = body.encode(); self.send_response(200); self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health": self._send("")
        elif self.path == "/v1/models": self._send(json.dumps({"data": [{"id": argv[1]}]}))
        elif self.path == "/metrics": self._send(prom, "text/plain")
        else: self.send_error(404)
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send(json.dumps({"choices": [{"index": 0, "text": "ok"}]}))
class S(ThreadingHTTPServer):
    request_queue_size = 1024
S(("127.0.0.1", int(argv[argv.index("--port") + 1])), H).serve_forever()
'''


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_script_rehearsal_on_the_cpu(tmp_path):
    import tarfile

    site = tmp_path / "site"
    main = site / "vllm" / "entrypoints" / "cli"
    main.mkdir(parents=True)
    for d in (site / "vllm", site / "vllm" / "entrypoints", main):
        (d / "__init__.py").write_text("")
    (main / "main.py").write_text(STAND_IN_MAIN)
    (site / ".done").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    results = REPO / "benchmarks" / "results"
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SITE": str(site),
           "OUT": str(out), "WORK": str(work), "PORT": str(_free_port()),
           "MASTER_PORT": str(_free_port()), "START_LIMIT": "60",
           # the stand-ins start and stop in well under a second: the GPU run's 10 s between
           # health checks and 5 s to stop were most of this test's time
           "POLL_S": "0.5", "STOP_GRACE_S": "1",
           "STAND_IN_LOG": str(results / "h200-0.25.0-bench-26b-a4b-l6" / "engines" / "fp8-mtp3-v2.log"),
           "STAND_IN_PROM": str(results / "h200-0.25.0-smoke-26b-a4b-v1-l6-patched" / "prometheus" / "greedy.after.prom")}
    result = subprocess.run(["bash", "benchmarks/gpu/two_node_local.sh"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "server up" in result.stdout and "done" in result.stdout
    tarball = out / "two-node-h200-vllm0.25.0-L10.tgz"
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        summary = archive.extractfile("./summary.txt").read().decode()
        smoke = json.loads(archive.extractfile("./smoke/mtp_smoke.json").read())
        burst = json.loads(archive.extractfile("./burst/bench.json").read())
        rank1 = archive.extractfile("./rank1.log").read().decode()
    assert {"./rank0.log", "./rank1.log", "./commands.sh", "./plan.json", "./smoke.txt",
            "./burst.txt"} <= names
    assert not any("/models/" in n or "cache-rank" in n for n in names)
    # each node got exactly its planned command line
    plan = json.loads((work / "plan.json").read_text())
    for run in plan["runs"]:
        log = (work / f"rank{run['rank']}.log").read_text()
        assert "ARGV " + json.dumps(run["argv"][3:]) in log
    assert "headless multiproc executor" in rank1
    # the deciding lines: which MoE config the TP=2 engine looked for, and the smoke's reading
    assert "E=128,N=352,device_name=NVIDIA_H200,dtype=fp8_w8a8.json" in summary
    checks = {c["name"]: c["status"] for c in smoke["checks"]}
    assert checks["tuned MoE config"] == "INFO"          # none expected at TP=2
    assert checks["attention backend"] == "PASS" and checks["MoE backend"] == "PASS"
    assert burst["server_burst"]["answered"] == 500
    # both nodes were stopped (their command lines carry this run's master port)
    still = subprocess.run(["pgrep", "-f", "--", f"--master-port {env['MASTER_PORT']}"],
                           capture_output=True, text=True)
    assert still.returncode == 1, still.stdout
