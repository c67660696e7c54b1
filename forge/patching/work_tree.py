"""The work tree of `build.py new-patch` / `refresh-patch`: a copy of one release's vllm/ package
under build/patch-work/<id>/ (inside the checkout, ignored by git) that the user edits.

Two steps, like `quilt new` + `quilt refresh`: the first makes the tree, the second (`--finish`)
writes the diff, the manifest and their sha256 through a journal kept in the tree, then removes
the tree. A tree only appears complete (it is made under a staging name and renamed), and a
finish killed part way is completed by the next `--finish`, which replays the journal.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forge import REPO_ROOT, files
from forge.data_formats import DataError, load_json
from forge.errors import ForgeError, file_error
from forge.files import write_text_atomically
from forge.json_text import dump_json
from forge.patching import diffs, journal
from forge.patching.series import Patch
from forge.upstream import releases

if TYPE_CHECKING:
    from forge.patching.entries import WorkState

WORK_ROOT = REPO_ROOT / "build" / "patch-work"
STATE_FILE = "patch-work.json"
JOURNAL_FILE = "finish.json"
# '+' is not allowed in patch ids, so one id's leftovers never match another id's names.
STAGING, DONE = ".staging+", ".done+"


@dataclass(frozen=True)
class WorkTree:
    root: Path          # holds vllm/, the state file and, while finishing, the journal
    patch_id: str
    vllm: str
    command: str        # "new-patch" or "refresh-patch": which command's --finish completes it

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL_FILE

    def shown(self) -> str:
        return shown(self.root)


def shown(path: Path) -> str:
    """`path` as the user typed it from the checkout (relative where it lies inside)."""
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def root_of(patch_id: str) -> Path:
    return WORK_ROOT / patch_id


def refuse_existing(patch_id: str) -> None:
    root = root_of(patch_id)
    if root.exists():
        raise ForgeError(f"{shown(root)} exists (a patch in progress): finish it with --finish, "
                         "or delete it to start again")


def create(command: str, patch_id: str, vllm: str) -> WorkTree:
    """Copy release `vllm`'s pristine vllm/ package into a new work tree."""
    refuse_existing(patch_id)
    pristine = releases.release_tree(vllm)
    try:
        WORK_ROOT.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(patch_id)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING}{patch_id}+", dir=WORK_ROOT))
    except OSError as exc:      # a read-only checkout, a full disk: one line, nothing made
        raise file_error(WORK_ROOT, exc, "make a work tree in it") from exc
    try:
        shutil.copytree(pristine / "vllm", staging / "vllm")
        write_text_atomically(staging / STATE_FILE, state_text(patch_id, vllm, command))
        os.replace(staging, root_of(patch_id))
    except OSError as exc:
        raise file_error(WORK_ROOT, exc, "make a work tree in it") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return WorkTree(root_of(patch_id), patch_id, vllm, command)


def state_text(patch_id: str, vllm: str, command: str) -> str:
    """The state file (forge.patching.entries.WorkState): which command made the tree, for what."""
    return dump_json({"id": patch_id, "vllm": vllm, "command": command}, indent=1) + "\n"


def open_tree(command: str, patch_id: str, vllm: str) -> WorkTree:
    """The work tree `command` made for `patch_id` on release `vllm`."""
    root = root_of(patch_id)
    if not files.regular_or_absent(root / STATE_FILE, files.REPORT):
        raise ForgeError(f"--finish: no work tree {shown(root)}; make it first with "
                         f"`python3 build.py {command} {patch_id} --vllm {vllm}`")
    state = _state(root / STATE_FILE)
    if state.id != patch_id:
        raise ForgeError(f"--finish: {shown(root / STATE_FILE)}: id: the tree is {state.id!r}'s, "
                         f"not {patch_id!r}; delete {shown(root)} and start again")
    made_by, made_on = state.command, state.vllm
    if made_by != command:
        raise ForgeError(f"--finish: {shown(root)} was made by {made_by}; finish it with "
                         f"{made_by} {patch_id} --vllm {made_on} --finish")
    if made_on != vllm:
        raise ForgeError(f"--vllm: {shown(root)} holds vLLM {made_on}, not {vllm}")
    if not (root / "vllm" / "__init__.py").is_file():
        raise ForgeError(f"--finish: {shown(root / 'vllm')} is gone or incomplete; delete "
                         f"{shown(root)} and start again")
    return WorkTree(root, patch_id, vllm, command)


def _state(path: Path) -> WorkState:
    """The state file as create writes it; one line naming the file and the field otherwise."""
    from forge.patching.entries import WorkState
    from forge.typed import loaded

    try:
        return loaded(WorkState, load_json(path, files.REPORT), shown(path))
    except DataError as exc:
        raise ForgeError(f"--finish: {exc} (not a work tree's record); delete {shown(path.parent)} "
                         "and start again") from None


def finish(work: WorkTree, writes: dict[Path, bytes]) -> list[Path]:
    """Write the files (manifest last) through the tree's journal, then remove the tree."""
    written = journal.write_all(work.journal, writes, remove=False)
    _discard(work)
    return written


def resume(work: WorkTree) -> list[Path] | None:
    """Complete a finish that was killed after its journal was written; None if there was none."""
    if not work.journal.exists():
        return None
    written = journal.replay(work.journal, remove=False)
    _discard(work)
    return written


def _discard(work: WorkTree) -> None:
    # The rename is the moment the finish is done: a kill during the removal leaves only a
    # leftover that the next start of this id deletes.
    done = Path(tempfile.mkdtemp(prefix=f"{DONE}{work.patch_id}+", dir=WORK_ROOT))
    os.replace(work.root, done)
    shutil.rmtree(done, ignore_errors=True)


def _remove_leftovers(patch_id: str) -> None:
    for prefix in (STAGING, DONE):
        for leftover in WORK_ROOT.glob(f"{prefix}{patch_id}+*"):
            shutil.rmtree(leftover, ignore_errors=True)


def rejects(work: WorkTree) -> list[Path]:
    return sorted(work.root.rglob("*.rej"))


def apply_existing(work: WorkTree, patch: Patch) -> str:
    """Put `patch`'s change into the tree: exactly (the series' own engine) where it fits, else
    with git's reduced context (fuzz), leaving a .rej file beside each file with a hunk that
    fits nowhere. Returns how it went, in a sentence."""
    try:
        planned = diffs.plan_diff(work.root, patch.diffs)
    except diffs.HunkError as exact_error:
        return _apply_with_fuzz(work, patch, exact_error)
    for rel, content in planned.items():
        if content is None:
            (work.root / rel).unlink()
        else:
            (work.root / rel).write_bytes(content)
    return "its diff applies exactly"


def _apply_with_fuzz(work: WorkTree, patch: Patch, exact_error: diffs.HunkError) -> str:
    # Outside any repository (the checkout around the tree must not be found): git apply then
    # patches the tree like GNU patch, -C1 accepting a hunk whose outer context lines moved.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(work.root.parent)}
    command = ["git", "apply", "--reject", "-C1", "--whitespace=nowarn"]
    failures = []
    try:
        for f in patch.files:
            run = subprocess.run([*command, str(f.absolute)], cwd=work.root, env=env,
                                 capture_output=True, text=True)
            if run.returncode != 0:
                failures.append((run.stderr.strip().splitlines() or ["git apply failed"])[0])
    except FileNotFoundError:
        raise ForgeError(f"{exact_error}; and git, which would apply it with fuzz, is not on "
                         "PATH") from None
    left = rejects(work)
    not_exact = f"its diff does not apply exactly ({exact_error})"
    if left:
        return (f"{not_exact}; the hunks that fit nowhere are in "
                + ", ".join(shown(path) for path in left))
    if failures:
        return f"{not_exact}; git could not apply it either ({failures[0]}): make the change by hand"
    return f"{not_exact}; git applied it with fuzz: check the result"
