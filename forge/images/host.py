"""What a build needs from the host before BuildKit runs: a Docker engine that answers, and for a
target of another architecture, qemu-user emulation registered with the kernel's binfmt_misc. Each
missing piece is one line saying what to do (how to start the engine, what to install), instead of
the SDK's nested `('Connection aborted.', FileNotFoundError(...))` or BuildKit's `exec format error`
halfway through the build."""
from __future__ import annotations

import os
from pathlib import Path

from forge.errors import ForgeError
from forge.images.plan import Plan
from forge.untrusted import visible

START_ENGINE = ("start it (`systemctl start docker`, or `dockerd &` as root; Docker Desktop: open "
                "it) or point DOCKER_HOST at one that runs")


def connect():
    """A Docker SDK client that has answered a ping; ForgeError naming the engine address, why it
    did not answer and how to start one, if not."""
    import docker

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        raise ForgeError(f"cannot reach the Docker engine at {visible(where)}: "
                         f"{_engine_silence(exc)}") from exc
    except ValueError as exc:     # the SDK parses DOCKER_HOST with urllib: tcp://[::1 raises
        raise ForgeError(f"$DOCKER_HOST: {visible(where)} is not a Docker engine address "
                         f"({exc}); unix:///var/run/docker.sock or tcp://HOST:PORT") from None
    return client


def _engine_silence(exc: Exception) -> str:
    """Why no engine answered, in words, from the OS error deep inside the SDK's exception (not
    its `('Connection aborted.', FileNotFoundError(2, ...))`)."""
    cause = _os_cause(exc)
    if isinstance(cause, FileNotFoundError):
        return f"no engine is running (the socket does not exist); {START_ENGINE}"
    if isinstance(cause, ConnectionRefusedError):
        return f"no engine is running (nothing listens there); {START_ENGINE}"
    if isinstance(cause, PermissionError):
        return ("permission denied on its socket: run as root or join the `docker` group "
                "(`usermod -aG docker $USER`, then log in again)")
    return f"{_last_line(exc)}; {START_ENGINE}"


def _os_cause(exc: BaseException) -> OSError | None:
    """The socket-level error inside the SDK's, requests' and urllib3's wrappers (found through
    causes, contexts and exception arguments), or None."""
    seen, pending = set(), [exc]
    while pending:
        error = pending.pop(0)
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, (FileNotFoundError, ConnectionRefusedError, PermissionError)):
            return error
        pending += [e for e in (error.__cause__, error.__context__, *error.args)
                    if isinstance(e, BaseException)]
    return None


def check_emulation(plan: Plan, binfmt_dir: Path = Path("/proc/sys/fs/binfmt_misc")) -> None:
    """A target of another architecture than this host's runs its build steps under qemu-user,
    registered with the kernel's binfmt_misc: without it the RUN of `build.py apply` fails with
    `exec format error`. Refused before the build, saying what to install. Only a local engine
    is checked (a remote DOCKER_HOST emulates, or not, on its own host)."""
    import platform

    if not (os.environ.get("DOCKER_HOST") or "unix://").startswith("unix://"):
        return
    host = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower())
    wanted = plan.target.platform.split("/")[1]
    if wanted == host or emulation_registered(wanted, binfmt_dir):
        return
    raise ForgeError(f"target {plan.target.name} is {plan.target.platform} and this host is "
                     f"linux/{host}: its build runs {wanted} programs, which needs qemu-user "
                     f"emulation registered with binfmt_misc (none enabled for {wanted} in "
                     f"{binfmt_dir}); install it (`apt-get install qemu-user-static binfmt-support` "
                     f"on Debian, or `docker run --privileged --rm tonistiigi/binfmt --install "
                     f"{wanted}`) or build on a {wanted} host")


QEMU_NAMES = {"arm64": "aarch64", "amd64": "x86_64"}


def emulation_registered(arch: str, binfmt_dir: Path) -> bool:
    """Whether binfmt_misc holds an enabled qemu handler for `arch` (qemu-aarch64, as Debian's
    qemu-user-static and tonistiigi/binfmt name it)."""
    qemu = QEMU_NAMES.get(arch, arch)
    try:
        entries = [entry for entry in binfmt_dir.iterdir() if qemu in entry.name]
        return any(entry.read_text().splitlines()[:1] == ["enabled"] for entry in entries)
    except OSError:
        return False


def _last_line(value) -> str:
    # Engine and SDK errors end with the line that says what failed.
    text = str(value).strip()
    return text.splitlines()[-1][:300] if text else "(no message)"
