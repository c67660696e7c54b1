"""What `build.py --target T --vllm V` checks before it builds, as a new user meets it: a release
not locked yet, `--locked`, no registry, no Docker engine, no arm64 emulation. Each is one line,
exit 2, nothing written; real processes, a real refused socket, real files."""
import socket

from forge.images.host import check_emulation, emulation_registered
from forge.images.plan import resolve_plan
from tests.build_cli import run_build

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


def test_a_first_plan_without_a_registry_says_so_and_how_to_lock_elsewhere(tmp_path):
    """Before: `... is not locked; run python3 build.py lock`, although the plan could have locked
    it; now it tries, and says exactly why it could not and what to run where."""
    lock = tmp_path / "lock.yaml"
    result = run_build("--target", "a100", "--vllm", VERSION, "--plan",
                       env={"VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_BASE_MIRROR": DEAD_PORT})
    line = one_line_error(result)
    assert line.startswith(f"error: {lock}: bases: {DEAD_PORT}/vllm/vllm-openai:v{VERSION} is not locked "
                           f"and {DEAD_PORT} cannot be reached to lock it (registry {DEAD_PORT} unreachable")
    assert line.endswith(f"nothing written. On a machine that reaches it, run `python3 build.py lock "
                         f"--vllm {VERSION}` and bring lock.yaml here")
    assert not lock.exists() and result.stdout == ""


def test_docker_hub_out_of_reach_is_named_as_such(tmp_path):
    """The real base, vllm/vllm-openai on Docker Hub, through a proxy that does not answer."""
    lock = tmp_path / "lock.yaml"
    dead_proxy = f"http://{DEAD_PORT}"
    env = {"VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_BASE_MIRROR": "", "HTTPS_PROXY": dead_proxy,
           "https_proxy": dead_proxy, "NO_PROXY": "", "no_proxy": ""}
    line = one_line_error(run_build("--target", "h200", "--vllm", VERSION, "--plan", env=env))
    assert f"bases: vllm/vllm-openai:v{VERSION} is not locked and Docker Hub (registry-1.docker.io) " \
           "cannot be reached to lock it" in line
    assert f"run `python3 build.py lock --vllm {VERSION}`" in line and not lock.exists()


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
