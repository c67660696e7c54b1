"""Hostile cache entries, indexes and archives (issue 48, items 1 and 3).

- Code from data: a line written into the cached serve-args reading must run nothing.
- A cache that writes through links: an entry replaced by a symbolic link to a file outside the
  cache is made again beside the link; the file it names stays as it was.
- Downloads and archives within bounds, from a hostile index on loopback (tests/hostile/mirror.py)
  into a cold cache in the case tree: an sdist past the size the index declares, a gzip bomb, an
  sdist that is no gzip, cut short or nested past PATH_MAX, Ctrl-C mid-download; a FIFO or a
  /dev/zero link in place of a cached sdist; project pages of another shape or without end.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.hostile import harness
from tests.hostile.commands import PATCHES, SERVE, build
from tests.hostile.mirror import mirror_url

VICTIM = "work/victim.json"
VICTIM_TEXT = "a file outside the cache (not JSON), which no cache write may touch\n"


# --- setup actions of these cases (registered beside the harness's own) -------------------------

def _edit_json(tree, rel: str, edit) -> None:
    path = tree.case / rel
    path.write_text(json.dumps(edit(json.loads(path.read_text()), tree)))


def _link_each(tree, pattern: str, target: str) -> None:
    """Each entry matching `pattern` (at least one) replaced by a symbolic link to `target`."""
    found = sorted(tree.case.glob(pattern))
    assert found, f"setup: nothing matches {pattern}"
    for path in found:
        path.unlink()
        path.symlink_to(target)


def _copy_tree(tree, source: str, rel: str) -> None:
    shutil.copytree(tree.case / source, tree.case / rel)


def _remove_each(tree, pattern: str) -> None:
    for path in tree.case.glob(pattern):
        path.unlink()


for _name, _action in (("edit_json", _edit_json), ("link_each", _link_each),
                       ("copy_tree", _copy_tree), ("remove_each", _remove_each)):
    assert harness.ACTIONS.setdefault(_name, _action) is _action, f"action {_name} taken"


def linked(pattern: str) -> list[tuple]:
    return [("write", VICTIM, VICTIM_TEXT), ("link_each", pattern, "{case}/" + VICTIM)]


def _converter_source(data: dict, tree) -> dict:
    """The serve-args entry as the earlier format kept it, its converter source one line longer:
    a folder made in the case tree if it runs."""
    made = str(Path(tree.case) / "work" / "ran")
    data["converters"] = {"names": ["human_readable_int", "human_readable_int_or_auto"],
                          "source": f"import os\nos.mkdir({made!r})\n"
                                    "def human_readable_int(value):\n    return int(value)\n"
                                    "def human_readable_int_or_auto(value):\n    return int(value)\n"}
    return data


def code_and_link_cases() -> list[dict]:
    serve_args = "cache/serve-args/0.27.1.json"
    return [
        {**SERVE, "id": "cache-serve-args-converter-source-runs-nothing",
         "setup": [("edit_json", serve_args, _converter_source)], "creates": [serve_args]},
        {**SERVE, "id": "cache-link-serve-args", "setup": linked(serve_args), "creates": [serve_args]},
        {**PATCHES, "id": "cache-link-requirements", "setup": linked("cache/requirements/0.27.1.json"),
         "creates": ["cache/requirements/0.27.1.json"]},
        {**PATCHES, "id": "cache-link-patch-status", "setup": linked("cache/patch-status/*/0.27.1.json"),
         "creates": ["cache/patch-status/*/0.27.1.json"]},
        # Read again from an index that answers (the run's own releases, on loopback), written
        # over the link.
        {**build("patches", "--vllm", "0.27.1"), "id": "cache-link-index", "setup": linked("cache/index.json"),
         "env": {"VLLM_FORGE_INDEX": mirror_url() + "/real/simple/vllm/"}, "creates": ["cache/index.json"]},
    ]


# --- a cached sdist that is no file -----------------------------------------------------------------

def cached_sdist_cases() -> list[dict]:
    """0.26.0's tree is not in the case cache, nor (removed here) its statuses, which the run's
    own cache may hold: the command must make the tree, from the cached sdist."""
    sdist = "cache/sdists/vllm-0.26.0.tar.gz"
    offline = build("patches", "--vllm", "0.26.0", "--offline")
    no_statuses = ("remove_each", "cache/patch-status/*/0.26.0.json")
    return [
        {**offline, "id": f"cache-sdist-{name}-offline", "setup": [no_statuses, *setup], "exit": 2,
         "stderr": ["{case}/" + sdist, "not cached"], "creates": ["cache/locks", "cache/locks/*"],
         "timeout": 30.0}
        for name, setup in (("fifo", [("fifo", sdist)]),
                            ("dev-zero-link", [("symlink", sdist, "/dev/zero")]))]


# --- downloads and archives from a hostile index, into a cold cache ---------------------------------

COLD = "work/cold"
# What a refused download or extraction may leave in the cold cache: the index it read, its lock
# files, the sdist where its sha256 held, the empty folders; never a partial file or a tree.
COLD_MADE = [COLD, f"{COLD}/index.json", f"{COLD}/locks", f"{COLD}/locks/*", f"{COLD}/sdists",
             f"{COLD}/sdists/vllm-0.27.1.tar.gz", f"{COLD}/trees"]


def from_mirror(scenario: str, **fields) -> dict:
    return {**build("patches", "--vllm", "0.27.1"),
            "setup": [("copy_tree", "cache/pypi", f"{COLD}/pypi")],
            "env": {"VLLM_FORGE_CACHE": "{work}/cold",
                    "VLLM_FORGE_INDEX": f"{mirror_url()}/{scenario}/simple/vllm/"},
            "exit": 2, "creates": COLD_MADE, "timeout": 40.0, **fields}


def archive_cases() -> list[dict]:
    return [
        from_mirror("index-endless", id="index-page-endless", stderr="more than 16.0 MiB"),
        from_mirror("endless", id="download-past-the-declared-size",
                    stderr="more than the size the index declares"),
        from_mirror("bomb", id="sdist-gzip-bomb", stderr=["decompression bomb", "zeros.bin"]),
        from_mirror("not-gzip", id="sdist-not-gzip", stderr="not a whole gzip-compressed tar archive"),
        from_mirror("truncated", id="sdist-truncated", stderr="not a whole gzip-compressed tar archive"),
        from_mirror("deep", id="sdist-member-past-path-max", stderr="folders deep"),
        from_mirror("stall", id="sigint-download-stall", sigint_after=2.0, exit=130,
                    stderr="interrupt", timeout=15.0),
    ]


def page_cases() -> list[dict]:
    online = build("patches", "--vllm", "0.27.1")
    return [{**online, "id": f"pypi-page-{name}", "exit": 2, "stderr": ["the package index page", says],
             "env": {"VLLM_FORGE_PYPI": f"{mirror_url()}/pypi-{name}/pypi/"}, "timeout": 40.0}
            for name, says in (("list", "no list of files"), ("files-strings", "files[0] has no filename"),
                               ("endless", "more than 32.0 MiB"))]


def cache_cases() -> list[dict]:
    return [*code_and_link_cases(), *cached_sdist_cases(), *archive_cases(), *page_cases()]
