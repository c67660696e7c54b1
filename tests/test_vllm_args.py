"""forge.serving.vllm_args reads `vllm serve`'s flags from real vLLM release sources (PyPI sdists)."""
import ast
import json

import pytest

from forge.serving import value_converters, vllm_args
from forge.serving.vllm_args import release_args

RELEASES = ["0.25.0", "0.27.1", "0.33.0"]


@pytest.mark.parametrize("version", RELEASES)
def test_serve_flags_hold_engine_frontend_and_parser_flags(version):
    args = release_args(version)
    # engine flags (arg_utils.py add_argument literals)
    for flag in ("--model", "--speculative-config", "-sc", "--max-model-len", "--quantization",
                 "-q", "--kv-cache-dtype", "--gpu-memory-utilization", "--max-num-seqs",
                 "--moe-backend", "--enforce-eager", "--enable-prefix-caching"):
        assert flag in args.serve_flags, flag
    # frontend dataclass fields (one --field-name each) and make_arg_parser literals
    for flag in ("--port", "--host", "--api-key", "--headless", "--api-server-count"):
        assert flag in args.serve_flags, flag
    # BooleanOptionalAction flags accept --no-<flag>; value flags do not
    assert "--no-enable-prefix-caching" in args.serve_flags
    assert "--no-enforce-eager" in args.serve_flags
    assert "--no-max-model-len" not in args.serve_flags
    assert "--enforce-eagerly" not in args.serve_flags
    assert not args.has_flag("--speculative-cfg")
    assert args.has_flag("--max_model_len")       # FlexibleArgumentParser accepts underscores
    assert args.has_flag("--max-model-len=4096")
    assert args.has_flag("--limit-mm-per-prompt.audio")   # one key of a JSON-valued flag
    assert not args.has_flag("--limit-mm-per-promt.audio")


def test_make_arg_parser_moved_in_0_33():
    # 0.33 moved the serve parser out of the openai package; the reader follows serve.py's import.
    def module_of(version):
        from forge.upstream import releases
        return vllm_args._make_arg_parser_module(vllm_args._SourceIndex(releases.release_tree(version)))

    assert module_of("0.25.0") == "vllm/entrypoints/openai/cli_args.py"
    assert module_of("0.33.0") == "vllm/entrypoints/common/cli_args.py"
    assert "--port" in release_args("0.33.0").serve_flags


@pytest.mark.parametrize("version", RELEASES)
def test_literal_choices_follow_type_aliases(version):
    args = release_args(version)
    assert {"triton", "auto", "flashinfer_cutlass"} <= args.choices["--moe-backend"]
    assert {"auto", "fp8", "bfloat16"} <= args.choices["--kv-cache-dtype"]
    assert "fp8" in args.choices["--quantization"]
    assert "trion" not in args.choices["--moe-backend"]
    # SpeculativeMethod nests EagleModelTypes, which nests MTPModelTypes ("mtp", "gemma4_mtp")
    assert {"mtp", "gemma4_mtp", "eagle3", "ngram"} <= args.speculative_methods
    assert {"model", "method", "num_speculative_tokens"} <= args.speculative_fields


@pytest.mark.parametrize("version", RELEASES)
def test_engine_fields_and_env_vars(version):
    args = release_args(version)
    assert {"model", "speculative_config", "max_num_seqs", "kv_cache_dtype", "moe_backend",
            "gpu_memory_utilization", "quantization", "max_model_len"} <= args.engine_fields
    assert "enforce_eagerly" not in args.engine_fields
    assert "VLLM_USE_V2_MODEL_RUNNER" in args.env_vars
    assert "VLLM_TUNED_CONFIG_FOLDER" in args.env_vars


def test_every_literal_engine_flag_in_arg_utils_is_found(release_tree):
    # Cross-check by a second route: every "--x" string passed to add_argument anywhere in
    # arg_utils.py must be among the flags the reader attributes to `vllm serve`.
    source = (release_tree("0.27.1") / "vllm/engine/arg_utils.py").read_text()
    literals = {node.value for call in ast.walk(ast.parse(source))
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument"
                for node in call.args
                if isinstance(node, ast.Constant) and str(node.value).startswith("--")}
    assert len(literals) > 150
    assert literals <= release_args("0.27.1").serve_flags


def test_older_releases_lack_what_they_lack():
    # Real older releases: --moe-backend arrived after 0.14.0; the V2-runner switch after 0.10.0.
    assert not release_args("0.14.0").has_flag("--moe-backend")
    assert release_args("0.14.0").has_flag("--speculative-config")
    old = release_args("0.10.0")          # vllm/config.py was still one module then
    assert "VLLM_USE_V2_MODEL_RUNNER" not in old.env_vars
    assert old.has_flag("--speculative-config") and not old.has_flag("--moe-backend")


def _flags_in_release_docs(version: str) -> dict[str, str]:
    """Every --flag on a `vllm serve` command line in the release's own docs/ (sdist), with the
    file it is in. Written by people against the real parser: an independent check of the reader."""
    import re
    import tarfile

    from forge.upstream import releases

    found: dict[str, str] = {}
    # streamed: one pass over the 40 MB archive (each extractfile after getmembers decompressed
    # it again from the start up to that member)
    with tarfile.open(releases.fetch_sdist(version), mode="r|*") as sdist:
        for member in sdist:
            if not (member.isfile() and member.name.startswith(f"vllm-{version}/docs/")
                    and member.name.endswith(".md")):
                continue
            text = sdist.extractfile(member).read().decode(errors="replace").replace("\\\n", " ")
            for line in text.splitlines():
                # skip `vllm serve` quoted inside another command (bench sweeps' --serve-cmd)
                # or named in prose (`vllm serve`)
                match = re.search(r"(?<!['\"`])\bvllm serve\b(?!`)(.*)", line)
                if match and "vllm bench" not in line:
                    for flag in re.findall(r"(?<![\w-])(--[a-zA-Z][\w.-]*)", match.group(1)):
                        found.setdefault(flag, member.name)
    return found


@pytest.mark.parametrize("version", RELEASES)
def test_every_flag_the_releases_docs_pass_to_vllm_serve_is_known(version):
    documented = _flags_in_release_docs(version)
    assert len(documented) > 80
    unknown = {flag: where for flag, where in documented.items()
               if not release_args(version).has_flag(flag)}
    assert unknown == {}


def test_enable_flags_pair_with_disable_from_0_33():
    # 0.33's FlexibleArgumentParser registers EnableDisableAction: its docs use
    # --disable-prefix-caching, which no add_argument call names.
    assert release_args("0.33.0").has_flag("--disable-prefix-caching")
    assert not release_args("0.27.1").has_flag("--disable-prefix-caching")
    assert not release_args("0.33.0").has_flag("--disable-max-model-len")


ALL_RELEASES = ["0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0",
                "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"]
MULTI_NODE_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless",
                    "--tensor-parallel-size", "--pipeline-parallel-size",
                    "--kv-cache-memory-bytes", "--attention-backend")


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_native_multi_node_flags_and_attention_backends_in_every_release(version):
    args = release_args(version)
    for flag in MULTI_NODE_FLAGS:
        assert args.has_flag(flag), (version, flag)
    # --attention-backend takes AttentionBackendEnum member names, read from registry.py
    backends = args.choices["--attention-backend"]
    assert {"TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"} <= backends
    assert "AttentionBackendEnum" not in backends and "triton_attn" not in backends


def test_attention_backend_outside_the_release_enum_is_refused(tmp_path):
    import shutil
    from pathlib import Path

    import yaml

    from forge.errors import ForgeError
    from forge.serving.serve import plan_serve

    root = tmp_path / "recipes"
    shutil.copytree(Path(__file__).resolve().parents[1] / "recipes", root)
    path = root / "gemma-4-31b-it.yaml"
    data = yaml.safe_load(path.read_text())
    data["targets"]["h200"]["serve"]["attention_backend"] = "FLASH_ATTN_V9"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ForgeError) as refused:
        plan_serve("gemma-4-31b-it", "h200", "0.27.1", recipes_dir=str(root))
    message = str(refused.value)
    assert message.startswith(f"{path}: targets.h200.serve.attention_backend: vLLM 0.27.1 accepts "
                              "--attention-backend ")
    assert "TRITON_ATTN" in message and message.endswith("not 'FLASH_ATTN_V9'")


@pytest.mark.parametrize("version", RELEASES)
def test_value_rules_follow_the_releases_own_get_kwargs(version):
    """How `vllm serve` reads each flag's values, from the release's arg_utils.py: switches take
    none, collections one or more, int fields the release's human-readable converter where its
    _compute_kwargs names them, Literal fields their choices (open when str is allowed too)."""
    from forge.upstream import releases

    args = release_args(version)
    rules = args.value_rules
    assert rules["--enforce-eager"].nargs == 0 and rules["--no-enable-prefix-caching"].nargs == 0
    assert rules["--headless"].nargs == 0                   # make_arg_parser's store_true
    assert rules["--cudagraph-capture-sizes"] == vllm_args.ValueRule("+", "int")
    assert rules["--max-model-len"].converter == "human_readable_int_or_auto"
    assert rules["--max-num-batched-tokens"].converter == "human_readable_int"
    assert rules["--gpu-memory-utilization"].converter == "float"
    assert rules["--api-server-count"].converter == "int"   # an explicit type=int
    assert not rules["--dtype"].open_choices and rules["--tokenizer-mode"].open_choices
    assert rules["--allowed-origins"].nargs is None         # its add_cli_args deletes nargs
    assert "--lora-modules" not in rules                     # a custom action: left to vLLM
    assert args.value_problem("--speculative-config", ['{"method": "mtp"}']) is None
    # The converters are named by the release and read by the project's own functions of the
    # same name: the release defines each (vllm/utils/argparse_utils.py), nothing of it runs.
    defined = {node.name for node in ast.parse(
        (releases.release_tree(version) / "vllm/utils/argparse_utils.py").read_text()).body
        if isinstance(node, ast.FunctionDef)}
    named = {rule.converter for rule in rules.values()} - value_converters.AS_TEXT
    assert {"human_readable_int", "human_readable_int_or_auto"} <= named & defined
    assert named & defined <= set(value_converters.CONVERTERS)
    assert args.canonical("-q") == "--quantization" and args.canonical("--max_model_len=1") == "--max-model-len"


@pytest.mark.parametrize("flag, values, problem", [
    ("--max-num-batched-tokens", ["lots"], "takes a whole number (or 2k, 1M, ...), not 'lots'"),
    ("--max-num-batched-tokens", ["2K"], None),
    ("--max-model-len", ["auto"], None),
    ("--max-model-len", ["4k"], None),
    ("--enforce-eager", [], None),
    ("--enforce-eager", ["true"], "is a switch: it takes no value (got 'true')"),
    ("--cudagraph-capture-sizes", [], "takes one or more values (got none)"),
    ("--cudagraph-capture-sizes", ["1", "x"], "takes a whole number, not 'x'"),
    ("--served-model-name", ["a", "b"], None),
    ("--limit-mm-per-prompt.image", ["0"], None),           # one key of a JSON flag
    ("--allowed-origins", ['["*"]'], None),                  # json.loads, set by its add_cli_args
    ("--allowed-origins", ["*"], "takes JSON, not '*'"),
])
def test_value_problem_reads_values_as_the_release_would(flag, values, problem):
    assert release_args("0.27.1").value_problem(flag, values) == problem


# --- the cached reading ---------------------------------------------------------------------

def use_a_cache_of_its_own(tmp_path, monkeypatch, version: str) -> None:
    """An empty cache but for the release's tree: its vllm/ linked from the run's cache (a link
    in place of the tree's folder would be an installed vLLM, which is never cached)."""
    from forge.upstream import releases

    tree = releases.release_tree(version)
    (tmp_path / "cache" / "trees" / version).mkdir(parents=True)
    (tmp_path / "cache" / "trees" / version / "vllm").symlink_to(tree / "vllm")
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))


def fields_of(args) -> dict:
    return {name: getattr(args, name) for name in args.__dataclass_fields__}


@pytest.mark.parametrize("version", RELEASES)
def test_the_cached_reading_is_the_release_reading_and_judges_values_alike(version, tmp_path, monkeypatch):
    use_a_cache_of_its_own(tmp_path, monkeypatch, version)
    fresh = vllm_args._read_release_args(version)
    vllm_args.release_args.cache_clear()
    try:
        written = vllm_args.release_args(version)          # reads the release, writes the cache
        assert vllm_args._cached_args_file(version).is_file()
        cached = vllm_args._from_cache(version)
    finally:
        vllm_args.release_args.cache_clear()
    assert cached is not None
    assert fields_of(cached) == fields_of(fresh) == fields_of(written)
    for values in (["32k"], ["abc"], ["-1"], ["auto"]):
        assert cached.value_problem("--max-model-len", values) == fresh.value_problem("--max-model-len", values)
    assert fresh.value_problem("--max-model-len", ["abc"]) is not None


def test_a_damaged_or_other_code_cache_is_read_again(tmp_path, monkeypatch):
    use_a_cache_of_its_own(tmp_path, monkeypatch, "0.27.1")
    entry = vllm_args._cached_args_file("0.27.1")
    entry.parent.mkdir(parents=True)
    good = json.loads(vllm_args._to_cache(vllm_args._read_release_args("0.27.1")))
    code = vllm_args._CODE
    for damaged in ("{not json", '{"code": "another", "version": "0.27.1"}', "[]",
                    f'{{"code": "{code}", "version": "0.27.1"}}',
                    # a key more (an earlier format's converter source), a value of another type
                    json.dumps({**good, "converters": {"names": [], "source": "import os"}}),
                    json.dumps({**good, "serve_flags": [1]}),
                    json.dumps({**good, "value_rules": {"--x": {"nargs": "?", "converter": "int"}}}),
                    json.dumps({**good, "value_rules": {"--x": {**good["value_rules"]["--model"],
                                                                "accepts_none": 1}}})):
        entry.write_text(damaged)
        assert vllm_args._from_cache("0.27.1") is None, damaged
    entry.write_text(json.dumps(good))
    assert vllm_args._from_cache("0.27.1") is not None
    vllm_args.release_args.cache_clear()
    try:
        assert "--speculative-config" in vllm_args.release_args("0.27.1").serve_flags
    finally:
        vllm_args.release_args.cache_clear()
    assert vllm_args._from_cache("0.27.1") is not None      # rewritten whole


def test_an_installed_vllm_linked_in_as_the_tree_is_read_each_time_and_never_cached(tmp_path, monkeypatch):
    from forge.upstream import releases

    tree = releases.release_tree("0.27.1")
    (tmp_path / "cache" / "trees").mkdir(parents=True)
    (tmp_path / "cache" / "trees" / "0.27.1").symlink_to(tree)
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    vllm_args.release_args.cache_clear()
    try:
        assert "--speculative-config" in vllm_args.release_args("0.27.1").serve_flags
    finally:
        vllm_args.release_args.cache_clear()
    assert not vllm_args._cached_args_file("0.27.1").exists()


# --- converters: the project's own, by name -------------------------------------------------

@pytest.mark.parametrize("name, value, expected", [
    # the examples vllm/utils/argparse_utils.py's docstrings give, and its refusals
    ("human_readable_int", "1k", 1000), ("human_readable_int", "1K", 1024),
    ("human_readable_int", "25.6k", 25600), ("human_readable_int", " 7 ", 7),
    ("human_readable_int", "2M", 2 * 2**20), ("human_readable_int", "1.5K", None),
    ("human_readable_int", "lots", None), ("human_readable_int", "auto", None),
    ("human_readable_int_or_auto", "auto", -1), ("human_readable_int_or_auto", "AUTO", -1),
    ("human_readable_int_or_auto", "-1", -1), ("human_readable_int_or_auto", "32k", 32000),
])
def test_the_projects_converters_read_values_as_the_releases_describe(name, value, expected):
    convert = value_converters.CONVERTERS[name][0]
    assert value_converters.converts(name, value) is (expected is not None)
    if expected is not None:
        assert convert(value) == expected


def test_a_converter_not_known_here_checks_values_as_strings_and_says_so_in_one_line():
    """0.34.0 reads --reasoning-parser with parse_reasoning_parser, a function of its own: any
    value passes the check, and the one note names the flag and the converter."""
    args = release_args("0.34.0")
    rule = args.value_rules["--reasoning-parser"]
    assert rule.converter not in value_converters.CONVERTERS
    assert args.value_problem("--reasoning-parser", ["anything at all"]) is None
    note = args.unchecked_note("--reasoning-parser")
    assert note is not None and "\n" not in note
    assert "--reasoning-parser" in note and rule.converter in note and "checked as a string" in note
    assert args.unchecked_note("--max-model-len") is None      # a converter known here
    assert args.unchecked_note("--dtype") is None              # Literal choices
    assert args.unchecked_note("--served-model-name") is None  # text


def test_a_crafted_cache_entry_runs_nothing(tmp_path, monkeypatch):
    """An entry as the earlier format wrote it, its converter source rewritten to make a file:
    refused as damaged (a key this code does not write) and rebuilt; nothing runs."""
    use_a_cache_of_its_own(tmp_path, monkeypatch, "0.27.1")
    marker = tmp_path / "ran"
    good = json.loads(vllm_args._to_cache(vllm_args._read_release_args("0.27.1")))
    crafted = {**good, "converters": {"names": ["human_readable_int"], "source":
                                      f"open({str(marker)!r}, 'w')\ndef human_readable_int(v): return 1"}}
    entry = vllm_args._cached_args_file("0.27.1")
    entry.parent.mkdir(parents=True)
    entry.write_text(json.dumps(crafted))
    vllm_args.release_args.cache_clear()
    try:
        args = vllm_args.release_args("0.27.1")
    finally:
        vllm_args.release_args.cache_clear()
    assert not marker.exists()
    assert args.value_problem("--max-num-batched-tokens", ["lots"]) is not None
    assert "converters" not in json.loads(entry.read_text())        # rebuilt as this code writes it


def test_the_cache_model_holds_exactly_what_the_reading_writes():
    """forge.serving.args_cache's model and _to_cache agree key for key (a key written but not
    modelled would make every entry damaged; one modelled but not written, every entry too)."""
    from forge.serving.args_cache import RuleEntry, ServeArgsEntry, parse_entry

    written = json.loads(vllm_args._to_cache(release_args("0.27.1")))
    assert set(ServeArgsEntry.model_fields) == set(written)
    assert {frozenset(rule) for rule in written["value_rules"].values()} == {frozenset(RuleEntry.model_fields)}
    assert parse_entry(written) is not None
    for strays in ({"nargs": 1.0}, {"nargs": "2"}, {"open_choices": 0}, {"converter": None}):
        rule = {**written["value_rules"]["--model"], **strays}
        assert parse_entry({**written, "value_rules": {"--model": rule}}) is None, strays
    assert parse_entry({**written, "serve_flags": ["--x"] * 20_001}) is None
