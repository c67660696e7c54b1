"""Run one hostile case and say everything that went wrong with it.

A case (a dict in tests/hostile/cases_*.py) is data; `check_case` sets its tree up, runs it in the
fork server and returns the list of problems (empty: the case holds). What every case asserts:

- the exit status is the expected one (`exit`: a number, or "nonzero");
- stderr is exactly one line (one non-empty line, at most a trailing newline) that contains the
  case's `stderr` needle: the offending path, field or flag, as the user wrote it; with
  `stderr: None`, stderr is empty (the answer is in the report or on stdout);
- "Traceback" appears in neither stream, and neither holds a control character other than
  newline and tab (a server's or a file's escape sequences must not reach the terminal);
- the child's peak resident memory (ru_maxrss from os.wait4) is under 512 MB;
- nothing in the case tree changed, kind, content and mode, except the paths the case `creates`
  (globs under the case tree), and every JSON file it creates or rewrites is strict JSON (no NaN
  or Infinity);
- nothing was left outside the tree: the child runs as `nobody`, which can write only the case
  tree and the world-writable folders, and those must hold nothing new of nobody's;
- it ended before its timeout.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.hostile.tree import NOBODY, OFFLINE_PYPI, SessionTree, differences, snapshot

MEMORY_LIMIT_KB = 512 * 1024
# The child's address space: a runaway read stops at this (MemoryError) before it eats the machine.
ADDRESS_SPACE = 1 << 30
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x9b]")
# A case's wall-clock limit: the slowest command here (a plan, pure-Python YAML over every recipe)
# takes 4-8 s on a busy 2-core machine; a hang is a failure whatever the limit.
DEFAULTS = {"setup": (), "env": {}, "exit": 2, "stderr": None, "stdout": None, "creates": (),
            "timeout": 30.0, "sigint_after": None, "memory": ADDRESS_SPACE}


def expand(value, fields: dict):
    """{case}, {repo}, {work}, {server} and {id} in a case's strings, lists and dicts."""
    if isinstance(value, str):
        for key, text in fields.items():
            value = value.replace("{" + key + "}", text)
        return value
    if isinstance(value, bytes):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(expand(v, fields) for v in value)
    if isinstance(value, dict):
        return {k: expand(v, fields) for k, v in value.items()}
    return value


def base_env(tree: SessionTree, fields: dict) -> dict:
    """A clean environment: no network the child could reach by accident (PyPI and Docker point
    at closed ports), home, temp and cache inside the case tree."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": str(tree.case / "home"), "TMPDIR": str(tree.case / "tmp"),
            "VLLM_FORGE_CACHE": str(tree.cache), "VLLM_FORGE_PYPI": OFFLINE_PYPI,
            "DOCKER_HOST": f"unix://{tree.case}/no-docker.sock",
            # Any other host through a proxy on a closed port: a command that would reach the
            # internet (Docker Hub, PyPI) fails at once; the loopback server is reached directly.
            "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "127.0.0.1,localhost", "REQUESTS_CA_BUNDLE": str(tree.ca_bundle)}


# --- setup actions: (name, *args), each a small change a hostile user could make --------------------

def act(tree: SessionTree, action: tuple) -> None:
    name, *args = action
    ACTIONS[name](tree, *args)


def _path(tree: SessionTree, rel: str) -> Path:
    return tree.case / rel


def _write(tree, rel, content):
    path = _path(tree, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.write_bytes(content if isinstance(content, bytes) else content.encode())


def _append(tree, rel, content):
    with open(_path(tree, rel), "ab") as f:
        f.write(content if isinstance(content, bytes) else content.encode())


def _replace(tree, rel, old, new):
    path = _path(tree, rel)
    text = path.read_text()
    assert old in text, f"setup: {old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1))


def _replace_with(tree, rel, make):
    path = _path(tree, rel)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)


def _fifo(tree, rel):
    _replace_with(tree, rel, os.mkfifo)


def _symlink(tree, rel, target):
    _replace_with(tree, rel, lambda p: p.symlink_to(target))


def _directory(tree, rel):
    _replace_with(tree, rel, lambda p: p.mkdir())


def _sparse(tree, rel, size):
    def make(p):
        with open(p, "wb") as f:
            f.truncate(size)
    _replace_with(tree, rel, make)


def _repeat(tree, rel, line, size):
    """A real (not sparse) big file: `line` repeated to `size` bytes."""
    def make(p):
        chunk = line * max(1, (1 << 20) // len(line))
        with open(p, "wb") as f:
            written = 0
            while written < size:
                f.write(chunk)
                written += len(chunk)
    _replace_with(tree, rel, make)


def _remove(tree, rel):
    _replace_with(tree, rel, lambda p: None)


def _chmod(tree, rel, mode):
    os.chmod(_path(tree, rel), mode)


def _read_only(tree, rel):
    """Every folder under rel (and rel) 0555, every file 0444: nobody can change nothing there."""
    root = _path(tree, rel)
    for folder, dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o444)
        for name in dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o555)
    os.chmod(root, 0o555 if root.is_dir() else 0o444)


def _copy(tree, source, rel):
    path = _path(tree, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(_path(tree, source), path)


def _tmpfs(tree, rel, size, *copies):
    """A small tmpfs at rel holding copies of case files, then filled to the last byte."""
    point = _path(tree, rel)
    point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
                   check=True)
    for source in copies:
        shutil.copy2(_path(tree, source), point / Path(source).name)
    fd = os.open(point / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for block in (4096, 1):                 # whole pages, then the last bytes
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError:
                pass
    finally:
        os.close(fd)


def _duplicate_top_key(tree, rel):
    """The file's first top-level key once more at the end, with another value."""
    path = _path(tree, rel)
    text = path.read_text()
    key = re.search(r"^([A-Za-z_][\w.-]*):", text, re.M)
    assert key, f"setup: no top-level key in {rel}"
    path.write_text(text + f"\n{key[1]}: {{}}\n")


def _json_duplicate_key(tree, rel):
    """The first object's first key twice (Python's json keeps the last without a word)."""
    path = _path(tree, rel)
    text = path.read_text()
    match = re.search(r'\{\s*("(?:[^"\\]|\\.)*")\s*:', text)
    assert match, f"setup: no object key in {rel}"
    path.write_text(text[:match.start() + 1] + f"{match[1]}: 7, " + text[match.start() + 1:])


def _truncate_half(tree, rel):
    path = _path(tree, rel)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _json(tree, rel, data):
    _write(tree, rel, json.dumps(data))


ACTIONS = {"write": _write, "append": _append, "replace": _replace, "fifo": _fifo,
           "symlink": _symlink, "directory": _directory, "sparse": _sparse, "repeat": _repeat,
           "remove": _remove, "chmod": _chmod, "read_only": _read_only, "copy": _copy,
           "tmpfs": _tmpfs, "json": _json, "duplicate_top_key": _duplicate_top_key,
           "json_duplicate_key": _json_duplicate_key, "truncate_half": _truncate_half}


# --- running and judging -------------------------------------------------------------------------

def nobody_entries() -> set[str]:
    found = set()
    for folder in WORLD_WRITABLE:
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if entry.stat(follow_symlinks=False).st_uid == NOBODY:
                            found.add(entry.path)
                    except OSError:
                        pass
        except OSError:
            pass
    return found


def check_case(case: dict, tree: SessionTree, server, fields: dict) -> list[str]:
    case = {**DEFAULTS, **expand(case, fields)}
    tree.reset(tree.last)
    tree.last = None
    for action in case["setup"]:
        act(tree, action)
    if case["setup"]:
        tree.give_to_nobody()        # what the setup made is root's
        before = snapshot(tree.case)
    else:
        # The reset put back the frozen tree, owned by nobody: a reset that missed an entry
        # shows as this case's change, a loud failure, never a hidden one.
        before = tree.state
    outside_before = nobody_entries()
    env = {**base_env(tree, fields), **case["env"]}
    env = {k: v for k, v in env.items() if v is not None}
    out, err = tree.capture / "stdout", tree.capture / "stderr"
    answer = server.run({"entry": case["run"], "argv": case["argv"], "env": env,
                         "cwd": str(case.get("cwd", tree.repo)), "stdout": str(out),
                         "stderr": str(err), "timeout": case["timeout"],
                         "sigint_after": case["sigint_after"], "user": "nobody",
                         "memory": case["memory"]})
    after = snapshot(tree.case)
    tree.last = after
    outside = nobody_entries() - outside_before
    stdout = out.read_bytes().decode(errors="replace")
    stderr = err.read_bytes().decode(errors="replace")
    problems = judge(case, answer, stdout, stderr)
    problems += tree_problems(case, tree, before, after)
    if outside:
        problems.append(f"left outside the tree: {sorted(outside)}")
        for path in outside:
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
    return problems


def judge(case: dict, answer: dict, stdout: str, stderr: str) -> list[str]:
    problems = []
    if answer["timed_out"]:
        problems.append(f"hung: still running after {case['timeout']} s (killed)")
    expected = case["exit"]
    status = answer["status"]
    if (expected == "nonzero" and status == 0) or (expected != "nonzero" and status != expected):
        problems.append(f"exit {status}, expected {expected}")
    for name, text in (("stderr", stderr), ("stdout", stdout)):
        if "Traceback" in text:
            last = [line for line in text.splitlines() if line.strip()][-1:]
            problems.append(f"traceback on {name}: {last[0][:160] if last else ''}")
        if CONTROL.search(text):
            problems.append(f"control character on {name}: {CONTROL.search(text)[0]!r}")
    lines = stderr.rstrip("\n").split("\n") if stderr.strip() else []
    problems += stderr_problems(case["stderr"], lines, stderr)
    if case["stdout"] and case["stdout"] not in stdout:
        problems.append(f"stdout lacks {case['stdout']!r}")
    if answer["maxrss_kb"] >= MEMORY_LIMIT_KB:
        problems.append(f"peak memory {answer['maxrss_kb'] // 1024} MB (limit 512 MB)")
    return problems


def stderr_problems(needle, lines: list[str], stderr: str) -> list[str]:
    """needle None: stderr empty; "": at most one line; a string: one line holding it; a list:
    one line holding all; a tuple: one line holding at least one (the flag or the path given)."""
    if "Traceback" in stderr:
        return []                              # said already, once
    if needle is None:
        return [f"stderr not empty: {lines[0][:200]!r}"] if lines else []
    if needle == "" and len(lines) <= 1:
        return []
    if len(lines) != 1:
        return [f"stderr is {len(lines)} lines, not one: {stderr[-300:]!r}"]
    if isinstance(needle, str):
        found = needle in lines[0]
    elif isinstance(needle, tuple):
        found = any(part in lines[0] for part in needle)
    else:
        found = all(part in lines[0] for part in needle)
    return [] if found else [f"stderr does not name {needle!r}: {lines[0][:300]!r}"]


def tree_problems(case: dict, tree: SessionTree, before: dict, after: dict) -> list[str]:
    problems = []
    allowed = case["creates"]
    for rel, change in differences(before, after).items():
        if any(fnmatch.fnmatch(rel, pattern) for pattern in allowed):
            if change != "removed" and rel.endswith(".json") and after[rel].kind == "file":
                problems += strict_json_problems(tree.case / rel, rel)
            continue
        problems.append(f"tree changed: {rel} ({change})")
    return problems


def strict_json_problems(path: Path, rel: str) -> list[str]:
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    try:
        json.loads(path.read_bytes(), parse_constant=refuse)
    except ValueError as exc:
        return [f"{rel} is not strict JSON: {str(exc)[:120]}"]
    return []
