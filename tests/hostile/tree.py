"""The tree a hostile case runs in, and what it looked like before and after.

One session folder holds:
  case/          the case's whole tree: the child's cwd, $HOME, $TMPDIR and $VLLM_FORGE_CACHE live
                 here, and nothing else may change (case/repo is the repository copy that forge
                 and verify were imported from, so their REPO_ROOT is inside it)
  capture/       the child's stdout and stderr (outside the case tree: they are not its writes)
  trees/         copies of the release trees the cases read (~/.cache/vllm-forge/trees/<release>),
                 linked from case/cache/trees: readable by the children, not writable

Cases run one at a time in the same case/ folder: after each, the folder is put back to the
pristine snapshot (only what differs is rewritten), so a case costs no copy of the repository.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# What the commands read: the code (forge and verify are imported from the copy) and the data.
COPIED = ("build.py", "pyproject.toml", "README.md", "forge", "verify", "patches", "images",
          "recipes", "models")
# Cache entries copied into the case tree (small; the status entries are written by the commands).
CACHE_COPIED = ("index.json", "pypi", "requirements", "patch-status")
# Release trees the cases read, copied once per session outside the case tree (root's, readable,
# not writable by the children; forge makes each tree's folder 0700, so a bind mount would not do).
RELEASE_TREES = ("0.27.1", "0.25.0")
# Files above this size are fingerprinted by their size and ends, not read whole (sparse files of
# hundreds of MB stand for huge inputs; reading them twice per case would cost seconds).
WHOLE_HASH_LIMIT = 8 << 20
NOBODY = 65534
# The package index the children see: a closed port, so nothing reaches PyPI; the copied cache's
# index pages are re-keyed to it (forge keeps a cached page only for the index it came from).
OFFLINE_PYPI = "http://127.0.0.1:9/pypi/"


_PREPARED = threading.Lock()


def prepared_real_cache() -> Path:
    """The run's own cache ($VLLM_FORGE_CACHE or ~/.cache/vllm-forge), holding what the case tree
    copies from it: on an empty cache the corpus may run before any other test made a tree, so the
    real command makes them (release trees, the release index, requirements, index pages), once."""
    from forge.upstream import releases

    with _PREPARED:
        cache = releases.cache_dir()
        missing = [release for release in RELEASE_TREES
                   if not (releases.tree_path(release) / "vllm" / "__init__.py").exists()
                   or not (cache / "requirements" / f"{release}.json").exists()]
        for release in missing:
            subprocess.run([sys.executable, str(REPO_ROOT / "build.py"), "patches", "--vllm", release],
                           cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
        return cache


@dataclass(frozen=True)
class Entry:
    kind: str          # "file", "dir", "link", "other"
    mode: int          # permission bits
    digest: str        # file content hash, link target, or "" for a folder


def fingerprint(path: str, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        if size <= WHOLE_HASH_LIMIT:
            digest.update(f.read())
        else:
            digest.update(f.read(1 << 20))
            f.seek(size - (1 << 20))
            digest.update(f.read(1 << 20))
            digest.update(str(size).encode())
    return digest.hexdigest()


# (device, inode, size, mtime, ctime) -> content hash: a file whose status is unchanged since it
# was hashed has the same content (every write moves ctime, which no process can set back), so
# each case hashes only what changed, as git's index does.
_HASHED: dict[tuple, str] = {}


def content_hash(path: str, st: os.stat_result) -> str:
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _HASHED:
        _HASHED[key] = fingerprint(path, st.st_size)
    return _HASHED[key]


def snapshot(root: Path) -> dict[str, Entry]:
    """Every entry under root (not following links): kind, mode and content hash."""
    entries: dict[str, Entry] = {}
    pending = [("", str(root))]
    while pending:
        prefix, folder = pending.pop()
        with os.scandir(folder) as listing:
            for item in listing:
                rel = prefix + item.name
                st = item.stat(follow_symlinks=False)
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    entries[rel] = Entry("link", mode, os.readlink(item.path))
                elif stat.S_ISDIR(st.st_mode):
                    entries[rel] = Entry("dir", mode, "")
                    pending.append((rel + "/", item.path))
                elif stat.S_ISREG(st.st_mode):
                    entries[rel] = Entry("file", mode, content_hash(item.path, st))
                else:
                    entries[rel] = Entry("other", mode, stat.filemode(st.st_mode))
    return entries


def differences(before: dict[str, Entry], after: dict[str, Entry]) -> dict[str, str]:
    """path -> what happened to it ("added", "removed", "content", "mode 644->600", "kind")."""
    changed = {}
    for rel in sorted(before.keys() | after.keys()):
        old, new = before.get(rel), after.get(rel)
        if old == new:
            continue
        if old is None:
            changed[rel] = "added"
        elif new is None:
            changed[rel] = "removed"
        elif old.kind != new.kind:
            changed[rel] = f"kind {old.kind}->{new.kind}"
        elif old.digest != new.digest:
            changed[rel] = "content"
        else:
            changed[rel] = f"mode {old.mode:o}->{new.mode:o}"
    return changed


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", *COPIED], cwd=REPO_ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return [name for name in listed if name and (REPO_ROOT / name).is_file()]


class SessionTree:
    """The session folder: the pristine case tree, its snapshot, and the reset between cases."""

    def __init__(self, base: Path):
        self.base = base
        self.case = base / "case"
        self.capture = base / "capture"
        self.shared_cache = base / "trees"
        self.pristine: dict[str, bytes] = {}
        self.state: dict[str, Entry] = {}
        self.last: dict[str, Entry] | None = None     # the tree as the last case left it

    # layout ----------------------------------------------------------------------------------
    @property
    def repo(self) -> Path:
        return self.case / "repo"

    @property
    def ca_bundle(self) -> Path:
        """certifi's bundle lives under root's 0700 home: a copy nobody can read."""
        return self.base / "ca.pem"

    @property
    def cache(self) -> Path:
        return self.case / "cache"

    def build(self) -> None:
        from forge.upstream import releases

        for folder in (self.case, self.capture, self.shared_cache):
            folder.mkdir(parents=True)
        for name in tracked_files():
            target = self.repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, target)
        real_cache = prepared_real_cache()
        for release in RELEASE_TREES:
            subprocess.run(["cp", "-a", str(releases.tree_path(release)), str(self.shared_cache)],
                           check=True)
            os.chmod(self.shared_cache / release, 0o755)
        os.chmod(self.base, 0o755)
        import certifi

        shutil.copy(certifi.where(), self.ca_bundle)
        os.chmod(self.ca_bundle, 0o644)
        self.cache.mkdir()
        for name in CACHE_COPIED:
            source = real_cache / name
            if source.is_dir():
                shutil.copytree(source, self.cache / name)
            elif source.is_file():
                shutil.copy2(source, self.cache / name)
        for page in (self.cache / "pypi").glob("*.json"):
            data = json.loads(page.read_text())
            page.write_text(json.dumps({**data, "index": OFFLINE_PYPI}))
        (self.cache / "trees").symlink_to(self.shared_cache)
        for name in ("home", "tmp", "work"):
            (self.case / name).mkdir()
        self.give_to_nobody()

    def give_to_nobody(self) -> None:
        """The children run as nobody: the case tree is theirs, nothing else is writable."""
        for folder, dirs, files in os.walk(self.case):
            for name in (*dirs, *files):
                path = os.path.join(folder, name)
                if os.lstat(path).st_uid != NOBODY:   # a chown moves ctime: only where needed
                    os.lchown(path, NOBODY, NOBODY)
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        os.chown(self.case, NOBODY, NOBODY)

    def freeze(self) -> None:
        """Take the pristine snapshot (after the warm-up wrote its status cache entries)."""
        self.state = snapshot(self.case)
        self.pristine = {rel: (self.case / rel).read_bytes()
                         for rel, entry in self.state.items() if entry.kind == "file"}

    def close(self) -> None:
        if self.case.exists():
            unmount_below(self.case)
        shutil.rmtree(self.base, ignore_errors=True)

    # reset -----------------------------------------------------------------------------------
    def reset(self, now: dict[str, Entry] | None = None) -> None:
        """Put case/ back as frozen: remove what was added, rewrite what changed. `now`: the
        tree as the last case left it, when its snapshot was taken since (and no mount or
        read-only folder is left in it)."""
        if now is None or mounts_below(self.case) or any(
                e.kind == "dir" and not e.mode & stat.S_IWUSR for e in now.values()):
            unmount_below(self.case)
            make_writable(self.case)
            now = snapshot(self.case)
        for rel in sorted(now.keys() - self.state.keys(), reverse=True):
            remove(self.case / rel)
        for rel, entry in sorted(self.state.items()):
            if now.get(rel) == entry:
                continue
            path = self.case / rel
            if rel in now and now[rel].kind != entry.kind:
                remove(path)
            if entry.kind == "dir":
                path.mkdir(exist_ok=True)
            elif entry.kind == "link":
                if not path.is_symlink():
                    path.symlink_to(entry.digest)
            elif entry.kind == "file":
                if path.is_symlink():
                    path.unlink()
                path.write_bytes(self.pristine[rel])
            os.lchown(path, NOBODY, NOBODY)
            if entry.kind != "link":
                os.chmod(path, entry.mode)
        os.chmod(self.case, 0o755)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def make_writable(root: Path) -> None:
    """Undo a case's read-only folders (its chmod 0555) so the reset can remove and rewrite."""
    for folder, dirs, _files in os.walk(root):
        for name in dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]


def mounts_below(root: Path) -> list[str]:
    prefix = str(root) + "/"
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    return sorted((p for p in points if p.startswith(prefix)), reverse=True)


def unmount_below(root: Path) -> None:
    for point in mounts_below(root):
        subprocess.run(["umount", point], check=True)
