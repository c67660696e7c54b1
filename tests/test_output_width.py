"""What build.py prints fits a terminal of 100 columns: the patch table of one release and the
build plan (wrapped; `patches --wide` keeps a row on one line), with no heading left empty, and
`build.py --help` says how to see the default command's own flags. Real commands on real release
sources (the shared cache)."""
import re

from forge.images.plan import WIDTH as PLAN_WIDTH
from forge.patching.report import WIDTH as TABLE_WIDTH
from forge.patching.series import load_series
from forge.upstream.releases import release_tree
from tests.build_cli import run_build

WIDTH = 100
RELEASE = "0.27.1"
DIGEST = "sha256:" + "5" * 64   # a pin as `lock` writes one; the plan asks no registry for it


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


def _empty_headings(text: str) -> list[str]:
    """Heading lines (indented, one or more words without a value column) that no deeper-indented
    line follows."""
    lines = text.splitlines()
    empty = []
    for i, line in enumerate(lines):
        if not re.fullmatch(r"  [a-z][a-z ()A-Z0-9_,-]*", line) or re.search(r"\S {2,}\S", line):
            continue
        indent = len(line) - len(line.lstrip())
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if len(following) - len(following.lstrip()) <= indent:
            empty.append(line)
    return empty


def test_the_widths_are_the_same_number():
    assert PLAN_WIDTH == TABLE_WIDTH == WIDTH


def test_the_patch_table_of_a_release_fits_and_wide_keeps_one_line_a_patch():
    release_tree(RELEASE)
    result = run_build("patches", "--vllm", RELEASE, "--offline")
    assert result.returncode == 0, result.stderr
    assert _too_wide(result.stdout) == []
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["id", "kind", "status", "detail"] and set(lines[2]) <= {"-", " "}
    # every patch of the series has its row, starting with its id (wrapped text goes on indented)
    rows = [line for line in lines[3:] if not line.startswith(" ")]
    ids = [p.id for p in load_series().patches]
    assert [row.split()[0].rstrip("*") for row in rows if row.split()[0].rstrip("*") in ids] == ids
    wide = run_build("patches", "--vllm", RELEASE, "--offline", "--wide")
    assert wide.returncode == 0, wide.stderr
    assert not any(line.startswith("    ") for line in wide.stdout.splitlines())
    assert _too_wide(wide.stdout), "the series' details no longer need --wide: drop this check"
    # the same words either way (the rule aside): wrapping only moves line breaks
    def words(text):
        return [word for word in text.split() if set(word) != {"-"}]
    assert words(result.stdout) == words(wide.stdout)


def test_the_matrix_of_every_release_fits_and_holds_what_wide_holds():
    """`patches --all`: a patch a row, the releases in blocks of columns (before: a release a row,
    390 columns); --wide keeps the release-a-row table. Both give every cell the same status."""
    result = run_build("patches", "--all", "--offline")
    assert result.returncode == 0, result.stderr
    assert _too_wide(result.stdout) == []
    ids = [p.id + "*" * p.candidate for p in load_series().patches]
    seen: dict[tuple[str, str], str] = {}
    for block in result.stdout.split("\n\n"):
        lines = block.splitlines()
        if not lines[0].startswith("patch "):
            break                                   # the legend follows the last block
        releases = lines[0].split()[1:]
        assert [line.split()[0] for line in lines[2:2 + len(ids)]] == ids
        for line in lines[2:2 + len(ids)]:
            for release, cell in zip(releases, line.split()[1:]):
                seen[(line.split()[0], release.rstrip("?"))] = cell
    wide = run_build("patches", "--all", "--offline", "--wide").stdout.splitlines()
    header = wide[0].split()
    rows = [line.split() for line in wide[2:] if re.match(r"\d", line)]
    assert rows and len(seen) == len(rows) * len(ids)
    for row in rows:
        cells = row[2:] if row[1:2] == ["(unchecked)"] else row[1:]
        for patch_id, cell in zip(header[1:], cells):
            assert seen[(patch_id, row[0])] == cell, (patch_id, row[0])


def test_a_locked_plan_fits_and_shows_no_empty_heading(tmp_path):
    release_tree(RELEASE)
    lock = tmp_path / "lock.yaml"
    ref = f"vllm/vllm-openai:v{RELEASE}"
    lock.write_text(f"bases:\n  {ref}: {DIGEST}\nplatforms:\n  {ref}: [linux/amd64, linux/arm64]\n")
    result = run_build("--target", "gb10", "--vllm", RELEASE, "--plan", "--lock", str(lock))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert _too_wide(result.stdout) == [] and _empty_headings(result.stdout) == []
    lines = result.stdout.splitlines()
    assert f"  digest      {DIGEST}" in lines
    labels = lines.index("  labels (--json prints each whole)")
    assert lines[labels + 1].startswith("    org.opencontainers.image.")


def test_an_unlocked_plan_fits_and_shows_no_empty_heading(tmp_path):
    release_tree(RELEASE)
    result = run_build("--target", "gb10", "--vllm", RELEASE, "--plan", "--locked",
                       "--lock", str(tmp_path / "none.yaml"))
    assert result.returncode == 2      # --locked: the plan is shown, then refused as a build is
    assert _too_wide(result.stdout) == [] and _empty_headings(result.stdout) == []
    assert "  labels      unknown until the base digest is (they name it)" in result.stdout.splitlines()


def test_the_heading_check_finds_an_empty_heading():
    assert _empty_headings("plan: x\n  labels\n  tags\n    a\n") == ["  labels"]
    assert _empty_headings("  moe configs (for NVIDIA_GB10): none\n  tags\n    a") == []


def test_help_says_how_to_see_the_build_flags():
    listing = " ".join(run_build("--help").stdout.split())
    assert "`python3 build.py build --help` lists the build's own flags" in listing
    build_help = run_build("build", "--help").stdout
    for flag in re.findall(r"--[a-z-]+", listing.split("lists the build's own flags")[1]
                           .split(")")[0]):
        assert flag in build_help
