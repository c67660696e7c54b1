"""Each kind of claim `build.py upgrade` makes beyond patches and pins, against the source it reads:
the defaults a recipe leaves to vLLM (KV cache sizing, block size, the runner variable, Humming
before Marlin), the log lines a family file cites for verify, the drift line, a patch needed but
not carried, and the brief report's shape. Every expectation is read here from the real sdists'
files (regular expressions over their text, never forge's readers) and the project's data."""
from __future__ import annotations

import json
import re

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from forge.models import load_family
from forge.targets import get_target
from forge.upgrade import family_lines
from forge.upstream import pypi, releases
from forge.watch.dependencies import load_watch
from tests.build_cli import run_build
from tests.test_upgrade import V1_RUNNER, brief, target_recipes, upgrade

CACHE = "vllm/config/cache.py"
VLLM_CONFIG = "vllm/config/vllm.py"
INTERFACE = "vllm/platforms/interface.py"
PRIORITY = "vllm/model_executor/layers/quantization/utils/humming/priority.py"
SPLIT_KV = "triton-spec-decode-split-kv"


def source(version: str, path: str) -> str | None:
    file = releases.release_tree(version) / path
    return file.read_text() if file.is_file() else None


def line_of(text: str, pattern: str) -> int:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, pattern
    return text.count("\n", 0, match.start()) + 1


def starting(target: str, version: str):
    """The target's recipes the release serves and can start: not those on the V1 runner where
    its module (vllm/v1/worker/gpu_model_runner.py) is gone."""
    has_v1 = (releases.release_tree(version) / V1_RUNNER).is_file()
    return [r for r in target_recipes(target, version) if has_v1 or r.serve.model_runner != "v1"]


def effective(report: dict, setting: str) -> dict | None:
    return next((c for c in report["defaults"]["effective"] if c["setting"].startswith(setting)),
                None)


# --- defaults the recipes leave to vLLM ------------------------------------------------------

def test_the_extensible_kv_cache_default_is_reported_for_recipes_that_size_no_kv_cache():
    """0.34.0's CacheConfig has enable_extensible_kv_cache (default None: decided at startup,
    off where kv_cache_memory_bytes is set); 0.27.1's has none. The a100 recipes set no KV size,
    the gb10 ones a fixed one."""
    old, new = source("0.27.1", CACHE), source("0.34.0", CACHE)
    assert old and new and "enable_extensible_kv_cache" not in old
    field_line = line_of(new, r"^    enable_extensible_kv_cache: bool = Field\(default=None\)")
    resolver = source("0.34.0", VLLM_CONFIG) or ""
    body = resolver[resolver.index("def _resolve_extensible_kv_cache"):]
    assert "cache_config.kv_cache_memory_bytes is not None" in body[:body.index("\n    def ")]
    for target in ("a100", "gb10"):
        _, report, _ = upgrade("0.27.1", "0.34.0", target)
        unsized = [r.name for r in starting(target, "0.34.0")
                   if r.serve.kv_cache_memory_bytes is None]
        entry = effective(report, "KV cache sizing")
        assert (entry["recipes"] if entry else []) == unsized, target
        if entry:
            assert entry["where"] == f"cache.py:{field_line}"
            assert entry["pin"] and "--no-enable-extensible-kv-cache" in entry["pin"]
            assert "kv_cache_memory_bytes" in entry["detail"]
    assert effective(upgrade("0.27.1", "0.34.0", "a100")[1], "KV cache sizing")
    assert "KV cache sizing (cache.py:" in brief("0.27.1", "0.34.0", "a100")


@pytest.mark.parametrize("before,after,target", [("0.27.1", "0.34.0", "gb10"),
                                                 ("0.33.0", "0.34.0", "h200"),
                                                 ("0.25.0", "0.27.1", "a100")])
def test_the_block_size_default_is_read_from_each_release(before, after, target):
    pattern = r"^    DEFAULT_BLOCK_SIZE: ClassVar\[int\] = (\d+)"
    sizes = [int(re.search(pattern, source(v, CACHE) or "", re.MULTILINE).group(1))
             for v in (before, after)]
    _, report, _ = upgrade(before, after, target)
    entry = effective(report, "KV block size")
    if sizes[0] == sizes[1]:
        assert entry is None
        return
    assert entry["from"] == str(sizes[0]) and entry["to"].startswith(str(sizes[1]))
    assert entry["where"] == f"cache.py:{line_of(source(after, CACHE), pattern)}"
    assert entry["pin"] == f"--block-size {sizes[0]}"
    assert set(entry["recipes"]) == {r.name for r in starting(target, after)}
    assert "KV block size (cache.py:" in brief(before, after, target)


def test_the_runner_variable_is_a_valueerror_where_the_release_raises_it():
    new = source("0.34.0", INTERFACE) or ""
    body = new[new.index("def validate_environ"):]
    body = body[:body.index("\n    @classmethod")]
    assert '"VLLM_USE_V2_MODEL_RUNNER"' in body and "raise ValueError(" in body
    raise_line = line_of(new, r"def validate_environ") + body[:body.index("raise ValueError(")].count("\n")
    assert "raise ValueError" not in (source("0.27.1", INTERFACE) or "").split(
        "def validate_environ")[-1].split("VLLM_USE_V2_MODEL_RUNNER")[0][-200:]
    _, report, _ = upgrade("0.27.1", "0.34.0", "gb10")
    entry = effective(report, "model runner")
    assert entry["where"] == f"interface.py:{raise_line}" and "ValueError" in entry["to"]


@pytest.mark.parametrize("target", ["gb10", "h200"])
def test_humming_before_marlin_follows_the_capabilities_the_release_names(target):
    text = source("0.34.0", PRIORITY)
    assert text is not None and source("0.27.1", PRIORITY) is None
    found = re.search(r"^_HUMMING_PREFERRED_CAPABILITIES = frozenset\(\{([\d, ]*)\}\)", text,
                      re.MULTILINE)
    preferred = {int(c) for c in found.group(1).split(",") if c.strip()}
    capability = int(get_target(target).cuda_arch.replace(".", ""))
    before, after = "0.27.1", "0.34.0"
    _, report, _ = upgrade(before, after, target)
    entry = effective(report, f"Humming/Marlin on sm_{capability}")
    assert entry["where"] == f"priority.py:{line_of(text, '^_HUMMING_PREFERRED_CAPABILITIES')}"
    assert ("Humming moved ahead of Marlin" in entry["to"]) == (capability in preferred)
    assert f"Humming/Marlin on sm_{capability}" in brief(before, after, target)
    # Where both releases name the same capabilities, nothing moved: no entry.
    same = source("0.33.0", PRIORITY) == text
    assert (effective(upgrade("0.33.0", "0.34.0", "h200")[1], "Humming/Marlin") is None) == same


def test_compilation_fields_new_and_on_by_default_are_named():
    """CompilationConfig fields of 0.34.0 whose default is True and that 0.27.1 lacks, read from
    vllm/config/compilation.py's text (`    name: type = True` lines)."""
    def on_by_default(version: str) -> dict[str, int]:
        text = source(version, "vllm/config/compilation.py") or ""
        body = text[text.index("class CompilationConfig"):]
        return {m.group(1): text.count("\n", 0, len(text) - len(body) + m.start()) + 1
                for m in re.finditer(r"^    (\w+): [^=\n]+ = True$", body, re.MULTILINE)}
    def fields(version: str) -> set[str]:
        text = source(version, "vllm/config/compilation.py") or ""
        body = text[text.index("class CompilationConfig"):]
        return set(re.findall(r"^    (\w+): ", body, re.MULTILINE))
    new = {k: v for k, v in on_by_default("0.34.0").items() if k not in fields("0.27.1")}
    assert new
    _, report, _ = upgrade("0.27.1", "0.34.0", "gb10")
    entry = effective(report, "compilation")
    for name in new:
        assert f"+{name}=True" in entry["to"], name
    assert entry["where"] == f"compilation.py:{min(new.values())}"


# --- the log lines a family file cites ------------------------------------------------------

def logged_in(version: str, line: str) -> bool:
    """Whether some .py file of the release holds the line as one string, adjacent literals
    ("a " "b" over lines) joined: the test's own reading, a plain text search."""
    joined = re.compile(r'"\s*\n\s*"')
    probe = line[:16]
    for path in (releases.release_tree(version) / "vllm").rglob("*.py"):
        text = path.read_text(errors="replace")
        if probe in text and line in joined.sub("", text):
            return True
    return False


def test_the_cited_log_lines_are_checked_against_each_release():
    """models/gemma4.yaml's drafter.shares.embedding lines are V1 proposer messages: in 0.27.1's
    source, in none of 0.34.0's (vllm/v1/spec_decode/gemma4.py and llm_base_proposer.py are gone),
    so `upgrade` says the verify check cannot see them there."""
    from verify.checks import shared_check_name

    assert family_lines.CHECK_NAME.format(what="embedding") == shared_check_name("embedding")
    family = load_family("gemma4")
    for name in ("vllm/v1/spec_decode/gemma4.py", "vllm/v1/spec_decode/llm_base_proposer.py"):
        assert (releases.release_tree("0.27.1") / name).is_file()
        assert not (releases.release_tree("0.34.0") / name).exists()
    _, report, _ = upgrade("0.27.1", "0.34.0", "gb10")
    cited = [c for c in report["family_lines"] if c["family_file"] == "models/gemma4.yaml"]
    assert {c["line"] for c in cited} == set(family.shares["embedding"])
    for check in cited:
        for version in ("0.27.1", "0.34.0"):
            assert bool(check["found"][version]) == logged_in(version, check["line"]), \
                (version, check["line"])
        assert check["check"] == "draft shares target embedding"
    assert not any(c["found"]["0.34.0"] for c in cited)
    text = brief("0.27.1", "0.34.0", "gb10")
    assert "models/gemma4.yaml drafter.shares embedding: no cited log line in 0.34.0" in text
    assert "'draft shares target' checks" in text


@pytest.mark.slow
def test_every_cited_log_line_is_read_on_every_release_the_family_covers():
    """forge's reading (string literals, by ast) against the test's (a text search with adjacent
    literals joined) on each release the family file covers (its vllm range, else the series')."""
    from forge.patching.readme_table import checked_releases
    from forge.patching.series import load_series

    for name in ("gemma4", "qwen3_5_moe"):
        family = load_family(name)
        covered = checked_releases(load_series())
        if family.values.get("vllm"):
            covered = [v for v in covered if Version(v) in SpecifierSet(family.values["vllm"])]
        for check in family_lines.check_family(family, covered):
            for version in covered:
                assert bool(check.found[version]) == logged_in(version, check.line), \
                    (name, version, check.line)


def test_a_package_index_the_new_release_drops_is_named():
    """0.27.1's requirements/cuda.txt points pip at FlashInfer's own index; 0.34.0's CUDA
    requirements (cuda.txt and its -r includes) name no such option."""
    from tests.test_upgrade import sdist_text

    def options(version: str, name: str = "requirements/cuda.txt") -> dict[str, int]:
        found = {}
        for number, line in enumerate(sdist_text(version, name).splitlines(), 1):
            if line.startswith("-r "):
                found.update(options(version, f"requirements/{line.split()[1]}"))
            elif line.startswith("--extra-index-url"):
                found[line.replace("=", " ", 1).strip()] = (name, number)
        return found
    old, new = options("0.27.1"), options("0.34.0")
    dropped = sorted(set(old) - set(new))
    assert dropped
    _, report, _ = upgrade("0.27.1", "0.34.0", "gb10")
    indexes = {c["option"]: c for c in report["dependencies"]["indexes"]}
    for option in dropped:
        name, number = old[option]
        assert indexes[option] == {"option": option, "from": f"{name}:{number}", "to": None}
        assert f"dropped {option} ({name}:{number})" in brief("0.27.1", "0.34.0", "gb10")


# --- the drift line ----------------------------------------------------------------------------

def test_the_drift_line_names_the_newest_admitted_version_checked_and_what_is_newer():
    _, report, _ = upgrade("0.27.1", "0.34.0", "gb10")
    text = brief("0.27.1", "0.34.0", "gb10")
    for entry in load_watch().dependencies:
        drift = next(d for d in report["dependencies"]["drift"] if d["package"] == entry.package)
        spec = SpecifierSet(drift["declared"] or "")
        published = sorted(pypi.published_versions(entry.package))
        covered = [v for v in published if v in spec and v <= Version(entry.checked_through)]
        newest = max(v for v in published if not v.is_prerelease)
        assert drift["newest_checked"] == str(max(covered))
        assert drift["newest_published"] == str(newest)
        line = next(line for line in text.splitlines() if f"drift {entry.package}:" in line)
        assert f"checked through {max(covered)}" in line
        if newest > max(covered):
            assert str(newest) in line


# --- a patch needed but not carried ------------------------------------------------------------

def test_an_upgrade_to_a_release_the_patch_is_needed_on_but_does_not_fit_blocks():
    """0.32.0 keeps the 2D-only gate the split-KV patch lifts (its fixes_marker is in the file)
    and its diff does not fit there: `upgrade --to 0.32.0` says so, never not-needed."""
    launcher = source("0.32.0", "vllm/v1/attention/ops/triton_unified_attention.py") or ""
    assert "or max_seqlen_q > 1" in launcher and "MAX_3D_QUERY_LEN" not in launcher
    args = ["upgrade", "--from", "0.27.1", "--to", "0.32.0", "--target", "h200"]
    result = run_build(*args, "--json")
    report = json.loads(result.stdout)
    patch = next(p for p in report["patches"] if p["id"] == SPLIT_KV)
    assert (patch["from"], patch["to"], patch["change"]) == \
        ("applies", "needed-not-carried", "needed-not-carried")
    assert result.returncode == 1 and any(SPLIT_KV in line for line in report["blocking"])
    assert f"python3 build.py refresh-patch {SPLIT_KV} --vllm 0.32.0" in report["next"]
    text = run_build(*args).stdout
    assert f"patch {SPLIT_KV}: needed on 0.32.0" in text and "not-needed" not in text


# --- brief by default ----------------------------------------------------------------------------

@pytest.mark.parametrize("before,after,target", [("0.27.1", "0.34.0", "gb10"),
                                                 ("0.27.1", "0.34.0", "a100"),
                                                 ("0.33.0", "0.34.0", "h200"),
                                                 ("0.25.0", "0.27.1", "a100")])
def test_the_default_report_is_brief(before, after, target):
    text = brief(before, after, target)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert len(lines) <= 40, len(lines)
    code, report, verbose = upgrade(before, after, target)
    assert lines[0] == verbose.splitlines()[0] and lines[0].endswith(report["verdict"])
    # The verdict's blocking items come first.
    if report["blocking"]:
        assert lines[1] == "blocking:"
    # Recipes that share a reason share a line: each V1-runner recipe is named once.
    removed = report["defaults"]["runners"]["recipes"]
    for name in removed:
        assert sum(re.search(rf"\b{re.escape(name)}\b(?!-)", line) is not None
                   for line in lines[:next(i for i, line in enumerate(lines)
                                            if line.startswith("patches"))]) == 1, name
    assert len(verbose.splitlines()) > len(lines)


def test_gb10_names_the_humming_marlin_order_the_block_size_and_the_v1_log_lines():
    text = brief("0.27.1", "0.34.0", "gb10")
    assert len(text.splitlines()) <= 40
    assert "Humming/Marlin on sm_121" in text and "KV block size" in text
    assert "drafter.shares embedding" in text
    assert "Marlin: native -> PTX-JIT only" in text


def test_a100_keeps_native_marlin_and_hears_of_the_kv_cache_default():
    text = brief("0.27.1", "0.34.0", "a100")
    assert "no native code" not in text and "PTX-JIT only" not in text
    assert "Marlin native" in text and "KV cache sizing" in text
