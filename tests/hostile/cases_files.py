"""Hostile files where the commands read data: every kind of bad file at every file a command reads.

A row of FILES names a file (relative to the case tree), the command that reads it and how the
command is expected to answer; FILE_KINDS are the ways to spoil it. Their product is the table.
"""
from __future__ import annotations

from forge.files import SERVER_LOG
from tests.hostile.commands import (
    BENCH_RENDER,
    MTP_SMOKE_HEALTHY,
    PATCHES,
    PLAN,
    PROFILE_REPORT,
    PUBLISH,
    PUBLISHED,
    RECIPE,
    ROOFLINE,
    SERVE,
    UPSTREAM_WATCH,
    out_dir,
)

MiB = 1 << 20
HUGE = 200 * MiB          # sparse: costs no disk, reads as 200 MB of NULs

# kind -> setup actions for the file at `rel` (YAML-or-JSON kinds apply to both; text kinds to logs)
COMMON_KINDS = {
    "fifo": lambda rel: [("fifo", rel)],
    "dev-zero": lambda rel: [("symlink", rel, "/dev/zero")],
    "dev-urandom": lambda rel: [("symlink", rel, "/dev/urandom")],
    "directory": lambda rel: [("directory", rel)],
    "huge-sparse": lambda rel: [("sparse", rel, HUGE)],
    "binary": lambda rel: [("write", rel, bytes(range(256)) * 64)],
    "invalid-utf8": lambda rel: [("append", rel, b"\n# caf\xe9 \xff\xfe\n")],
    "nul-byte": lambda rel: [("append", rel, b"\n\x00\x00\n")],
    "unreadable": lambda rel: [("chmod", rel, 0o000)],
    "dangling-link": lambda rel: [("symlink", rel, "/nonexistent/hostile")],
    "escaping-link": lambda rel: [("symlink", rel, "/etc/passwd")],
}
YAML_KINDS = {
    "empty": lambda rel: [("write", rel, "")],
    "list-top-level": lambda rel: [("write", rel, "- a\n- b\n")],
    "scalar-top-level": lambda rel: [("write", rel, "just text\n")],
    "deep-flow-nesting": lambda rel: [("write", rel, "a: " + "[" * 1500 + "]" * 1500 + "\n")],
    "deep-block-nesting": lambda rel: [("write", rel, "".join(" " * i + f"k{i}:\n" for i in range(3000)))],
    "list-key": lambda rel: [("append", rel, "\n? [a, b]\n: 1\n")],
    "mapping-key": lambda rel: [("append", rel, "\n? {a: 1}\n: 1\n")],
    "duplicate-key": lambda rel: [("duplicate_top_key", rel)],
    "alias-bomb": lambda rel: [("write", rel, "".join(
        [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" if i else "l0: &l0 [lol, lol]\n"
         for i in range(9)]))],
    "python-tag": lambda rel: [("write", rel, "a: !!python/object/apply:os.system ['true']\n")],
    "tab-indent": lambda rel: [("write", rel, "a:\n\tb: 1\n")],
    "huge-text": lambda rel: [("repeat", rel, b"# " + b"x" * 78 + b"\n", 16 * MiB)],
}
JSON_KINDS = {
    "empty": lambda rel: [("write", rel, "")],
    "list-top-level": lambda rel: [("write", rel, "[1, 2]")],
    "nan": lambda rel: [("write", rel, '{"a": NaN}')],
    "infinity": lambda rel: [("write", rel, '{"a": Infinity, "b": -Infinity}')],
    "deep-nesting": lambda rel: [("write", rel, "[" * 200000 + "]" * 200000)],
    "deep-object": lambda rel: [("write", rel, '{"a":' * 100000 + "1" + "}" * 100000)],
    "truncated": lambda rel: [("truncate_half", rel)],
    "duplicate-key": lambda rel: [("json_duplicate_key", rel)],
    "huge-number": lambda rel: [("write", rel, '{"a": 1' + "0" * 100000 + "}")],
    "huge-text": lambda rel: [("repeat", rel, b" " * 1023 + b"\n", 16 * MiB)],
}
TEXT_KINDS = {k: COMMON_KINDS[k] for k in ("fifo", "dev-zero", "dev-urandom", "directory",
                                             "huge-sparse", "binary", "unreadable")}
# Past the cap a server log is read from (its last SERVER_LOG.cap bytes): what comes before is never
# read, so a quarter more shows it as well as ten times more would.
TEXT_KINDS["huge-text"] = lambda rel: [("repeat", rel, b"INFO engine step " + b"x" * 60 + b"\n",
                                        SERVER_LOG.cap + SERVER_LOG.cap // 4)]

# Kinds a reader must refuse without reading them through: a refusal takes well under a second,
# so a short timeout costs the corpus little while these still hang or read without end.
QUICK_REFUSALS = {"fifo", "dev-zero", "dev-urandom", "huge-sparse", "huge-text"}

# (name, file, kinds, command row): the command row gives run, argv and the expected answer
FILES = [
    ("targets", "repo/images/targets.yaml", "yaml", SERVE),
    ("series", "repo/patches/series.yaml", "yaml", PATCHES),
    ("recipe", f"repo/recipes/{RECIPE}.yaml", "yaml", SERVE),
    ("model-family", "repo/models/gemma4.yaml", "yaml", ROOFLINE),
    ("lock", "work/lock.yaml", "yaml", PLAN),
    ("dependency-watch", "repo/patches/dependency-watch.yaml", "yaml", UPSTREAM_WATCH),
    ("prompts", "repo/verify/prompts.yaml", "yaml", MTP_SMOKE_HEALTHY),
    ("index", "repo/images/published.json", "json", PUBLISHED),
    ("report", "work/report.json", "json", PUBLISH),
    ("bench-json", "work/bench.json", "json", BENCH_RENDER),
    ("profile-json", "work/profile.json", "json", PROFILE_REPORT),
    ("release-index", "cache/index.json", "json", PATCHES),
    ("server-log", "work/server.log", "text", MTP_SMOKE_HEALTHY),
]
KINDS = {"yaml": {**COMMON_KINDS, **YAML_KINDS}, "json": {**COMMON_KINDS, **JSON_KINDS},
         "text": TEXT_KINDS}
# Kinds a command may take as it is and succeed with: the file is still what it should be.
HARMLESS = {("server-log", "binary")}
# The release index in the cache is a cache: a spoiled one is read again from PyPI, and offline
# that is a refusal naming the cache file.


# /dev/urandom is /dev/zero's twin (an endless read): a few files stand for all.
URANDOM_FILES = {"targets", "index", "server-log"}


def file_cases() -> list[dict]:
    cases = []
    for name, rel, kind_set, command in FILES:
        for kind, setup in KINDS[kind_set].items():
            if (name, kind) in HARMLESS or (kind == "dev-urandom" and name not in URANDOM_FILES):
                continue
            case = {**command, "id": f"file-{name}-{kind}", "setup": [*command.get("setup", []),
                                                                      *setup(rel)]}
            if command.get("reports_in") is not None:
                # verify's endpoint run: the server log (or prompts) is a failed check in the
                # report, or a one-line refusal before the run
                case.update(exit="nonzero", stderr=None, creates=out_dir(command["reports_in"]))
                if name == "prompts":
                    case.update(exit=2, stderr=("{case}/" + rel, rel.removeprefix("repo/")), creates=[])
            else:
                # the file's path, absolute or as the command names it inside the checkout
                case.update(exit=2, stderr=("{case}/" + rel, rel.removeprefix("repo/")))
            if name == "server-log" and kind.startswith("huge"):
                case["timeout"] = 60.0   # a server log's last 64 MiB are read and parsed, not refused
            elif kind in QUICK_REFUSALS:
                case["timeout"] = 5.0    # a refusal, after the command's own start (plan: ~1.7 s)
            elif kind.startswith("deep"):
                case["timeout"] = 15.0

            cases.append(case)
    return cases
