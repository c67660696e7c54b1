"""What `build.py --target T --vllm V` checks before it builds, as a new user meets it: a release
not locked yet, `--locked`, no registry, no Docker engine, no arm64 emulation. Each is one line,
exit 2, nothing written; real processes, a real refused socket, real files."""
import shutil
import socket
from pathlib import Path

from forge.images.host import check_emulation, emulation_registered
from forge.images.plan import resolve_plan
from forge.upstream.releases import release_tree
from tests.build_cli import REPO_ROOT, run_build

VERSION = "0.25.0"
DEAD_PORT = "127.0.0.1:9"   # the discard port: nothing listens there


def one_line_error(result) -> str:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_locked_refuses_to_add_a_pin_and_writes_nothing(tmp_path):
    lock = tmp_path / "lock.yaml"
    for extra in (["--plan", "--locked"], ["--locked"]):
        result = run_build("--target", "a100", "--vllm", VERSION, *extra,
                           env={"VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_BASE_MIRROR": DEAD_PORT})
        line = one_line_error(result)
        assert line == (f"error: {lock}: bases: {DEAD_PORT}/vllm/vllm-openai:v{VERSION} is not locked "
                        f"and --locked forbids adding it; run `python3 build.py lock --vllm {VERSION}` "
                        f"and commit lock.yaml")
        assert not lock.exists()


def _no_docker_hub(lock: Path) -> dict:
    """Docker Hub (every HTTPS host) behind a proxy that does not answer, as on a machine without
    it; the release trees a plan reads come from the shared cache, made beforehand."""
    dead_proxy = f"http://{DEAD_PORT}"
    return {"VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_BASE_MIRROR": "", "HTTPS_PROXY": dead_proxy,
            "https_proxy": dead_proxy, "NO_PROXY": "", "no_proxy": ""}


def test_the_first_plan_without_docker_hub_shows_the_base_it_would_lock(tmp_path):
    """Before: `--plan` of a release the shipped (empty) lock does not pin exited 2 without Docker
    Hub. Now it exits 0: the plan names the base, says its digest is unknown, and a note first
    says why and what pins it; nothing is written."""
    release_tree("0.27.1")   # the plan reads the release; the test is about the registry alone
    lock = tmp_path / "lock.yaml"
    shutil.copyfile(REPO_ROOT / "images" / "lock.yaml", lock)   # a fresh clone's: no pins
    before = lock.read_bytes()
    result = run_build("--target", "gb10", "--vllm", "0.27.1", "--plan", env=_no_docker_hub(lock))
    assert result.returncode == 0, result.stderr
    note = " ".join(result.stderr.split())
    assert note.startswith("note: vllm/vllm-openai:v0.27.1 is not locked and Docker Hub "
                           "(registry-1.docker.io) cannot be reached (registry docker.io unreachable")
    assert "digest cannot be known offline" in note and "python3 build.py lock --vllm 0.27.1" in note
    assert "--allow-unlocked" in note
    plan = result.stdout.splitlines()
    assert plan[0] == "plan: vLLM 0.27.1 for gb10 (linux/arm64, CUDA 13.0, sm 12.1)"
    assert plan[1] == "  base        vllm/vllm-openai:v0.27.1"
    assert plan[2].startswith("  digest      unknown: not locked.")
    assert lock.read_bytes() == before


def test_a_build_that_must_lock_without_a_registry_says_so_before_downloading(tmp_path):
    """Before: the build downloaded and unpacked the release's 78 MB sdist, then refused without
    naming --allow-unlocked. Now the lock is settled first: with an empty cache and a package
    index that does not answer, the one line is about the base, names both ways on, and the
    cache stays empty."""
    lock, cache = tmp_path / "lock.yaml", tmp_path / "cache"
    cache.mkdir()
    env = {**_no_docker_hub(lock), "VLLM_FORGE_CACHE": str(cache),
           "VLLM_FORGE_INDEX": f"http://{DEAD_PORT}/simple/vllm/",
           "VLLM_FORGE_PYPI": f"http://{DEAD_PORT}/simple/"}
    line = one_line_error(run_build("--target", "h200", "--vllm", VERSION, env=env))
    assert line.startswith(f"error: {lock}: bases: vllm/vllm-openai:v{VERSION} is not locked and "
                           "Docker Hub (registry-1.docker.io) cannot be reached to lock it")
    assert f"nothing downloaded or written. On a machine that reaches it, run `python3 build.py " \
           f"lock --vllm {VERSION}` and bring lock.yaml here (--allow-unlocked builds" in line
    assert not lock.exists() and list(cache.iterdir()) == []


def test_a_build_with_a_mirror_out_of_reach_names_the_mirror(tmp_path):
    lock = tmp_path / "lock.yaml"
    result = run_build("--target", "a100", "--vllm", VERSION,
                       env={"VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_BASE_MIRROR": DEAD_PORT})
    line = one_line_error(result)
    assert line.startswith(f"error: {lock}: bases: {DEAD_PORT}/vllm/vllm-openai:v{VERSION} is not locked "
                           f"and {DEAD_PORT} cannot be reached to lock it (registry {DEAD_PORT} unreachable")
    assert not lock.exists() and result.stdout == ""


def _build_on(host: str, tmp_path):
    # --allow-unlocked: the plan needs no registry, so the engine is the first thing asked.
    return run_build("--target", "a100", "--vllm", VERSION, "--allow-unlocked",
                     env={"DOCKER_HOST": host, "VLLM_FORGE_LOCK": str(tmp_path / "lock.yaml")})


def test_no_engine_at_the_socket_says_how_to_start_one(tmp_path):
    """Before: `('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))`."""
    host = f"unix://{tmp_path}/docker.sock"
    line = one_line_error(_build_on(host, tmp_path))
    assert line == (f"error: cannot reach the Docker engine at {host}: no engine is running (the "
                    f"socket does not exist); start it (`systemctl start docker`, or `dockerd &` as "
                    f"root; Docker Desktop: open it) or point DOCKER_HOST at one that runs")


def test_a_socket_nobody_listens_on_says_how_to_start_one(tmp_path):
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as stale:   # bound, never listening: a dead engine's socket
        stale.bind(str(path))
        line = one_line_error(_build_on(f"unix://{path}", tmp_path))
    assert "no engine is running (nothing listens there); start it (`systemctl start docker`" in line
    assert "Connection" not in line and "Errno" not in line


def test_arm64_on_amd64_without_emulation_says_what_it_needs(tmp_path):
    """The kernel's binfmt_misc as a directory of real files: without an enabled qemu-aarch64
    entry, a gb10 build is refused before it starts, naming what to install."""
    plan = resolve_plan("gb10", VERSION, allow_unlocked=True)
    binfmt = tmp_path / "binfmt_misc"
    binfmt.mkdir()
    (binfmt / "qemu-aarch64").write_text("disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    assert not emulation_registered("arm64", binfmt)
    try:
        check_emulation(plan, binfmt)
    except Exception as exc:  # noqa: BLE001 (the message is what is checked)
        message = str(exc)
    else:
        message = ""
    assert message.startswith("target gb10 is linux/arm64 and this host is linux/amd64: its build "
                              "runs arm64 programs, which needs qemu-user emulation")
    assert "apt-get install qemu-user-static binfmt-support" in message and "\n" not in message
    (binfmt / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    assert emulation_registered("arm64", binfmt)
    check_emulation(plan, binfmt)   # registered: nothing to say
    check_emulation(resolve_plan("a100", VERSION, allow_unlocked=True), tmp_path / "none")  # native


def test_a_bake_that_must_lock_without_a_registry_says_so_before_downloading(tmp_path):
    """`bake` pins every target's base as the build does: with no registry and an empty cache,
    the one line is about the base (bake takes no --allow-unlocked: its file names digests), and
    nothing is downloaded or written."""
    lock, cache, output = tmp_path / "lock.yaml", tmp_path / "cache", tmp_path / "docker-bake.json"
    cache.mkdir()
    env = {"VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_BASE_MIRROR": DEAD_PORT,
           "VLLM_FORGE_CACHE": str(cache), "VLLM_FORGE_INDEX": f"http://{DEAD_PORT}/simple/vllm/",
           "VLLM_FORGE_PYPI": f"http://{DEAD_PORT}/simple/"}
    line = one_line_error(run_build("bake", "--vllm", VERSION, "-o", str(output), env=env))
    assert line.startswith(f"error: {lock}: bases: {DEAD_PORT}/vllm/vllm-openai:v{VERSION} is not "
                           f"locked and {DEAD_PORT} cannot be reached to lock it")
    assert line.endswith("and bring lock.yaml here") and "--allow-unlocked" not in line
    assert not lock.exists() and not output.exists() and list(cache.iterdir()) == []
