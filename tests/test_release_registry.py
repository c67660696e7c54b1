"""The release path against a real registry (Debian's docker-registry, started by the test setup):
images pushed by the real Docker engine, `build.py publish --move-tag` re-tagging in the registry,
and release.yml's own guard step run as the workflow runs it."""
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from forge.images import published
from tests.build_cli import run_build
from tests.fixtures_docker import push
from tests.workflow_steps import run_step, step_script, workflow_checkout

pytestmark = [pytest.mark.docker]

REPO_ROOT = Path(__file__).resolve().parents[1]
REPOSITORY_PATH = "acme/vllm-forge"


def tiny_image(client, content: str) -> str:
    """A one-file image built by the engine (FROM scratch: nothing to pull); returns its id."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        for name, data in (("Dockerfile", b"FROM scratch\nCOPY payload /payload\n"),
                           ("payload", content.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    image, _ = client.images.build(fileobj=io.BytesIO(context.getvalue()), custom_context=True,
                                   rm=True)
    return image.id


def push_build(client, registry, tag: str, content: str) -> str:
    """Push a distinct image under `tag`; return the digest the registry gives it."""
    push(client, tiny_image(client, content), f"{registry.host}/{REPOSITORY_PATH}:{tag}")
    digest = registry.digest(REPOSITORY_PATH, tag)
    assert digest and digest.startswith("sha256:")
    return digest


def smoke_checks(passed: bool):
    """The checks of an mtp_smoke run; a failed one has its drafts all rejected."""
    from verify.report import REQUIRED_GATES, failed
    from verify.report import passed as ok

    checks = [ok("server answers", "serves gemma-4-26b-a4b-it")] + [ok(n, "ok") for n in REQUIRED_GATES]
    if not passed:
        checks[-1] = failed("acceptance (temperature 0)", "the drafter's proposals were all rejected")
    return checks


def report(tmp_path: Path, passed: bool, digest: str, target: str = "gb10") -> Path:
    """A verify report of the image `digest`, by verify's own writer (verify/report.py)."""
    from verify.report import installed_versions, write_report

    return write_report(tmp_path / f"report-{passed}-{digest[7:19]}.json", smoke_checks(passed),
                        installed_versions(), recipe="gemma-4-26b-a4b-it", target=target,
                        vllm="0.27.1", image_digest=digest)


def publish(registry, index: Path, tag: str, digest: str, report_path: Path, target: str = "gb10",
            vllm: str = "0.27.1"):
    return run_build("publish", "--index", str(index), "--repository", f"{registry.host}/{REPOSITORY_PATH}",
                     "--target", target, "--vllm", vllm, "--immutable-tag", tag, "--digest", digest,
                     "--verify-report", str(report_path), "--move-tag", timeout=300)


def test_moving_tag_follows_only_verified_digests(docker_engine, local_registry, tmp_path):
    index = tmp_path / "published.json"
    first_tag, second_tag = "vllm0.27.1-gb10-111111111111", "vllm0.27.1-gb10-222222222222"
    first = push_build(docker_engine, local_registry, first_tag, "first build")

    failed = publish(local_registry, index, first_tag, first, report(tmp_path, False, first))
    assert failed.returncode == 1, failed.stderr
    assert "verify did not pass" in failed.stderr and not index.exists()
    assert local_registry.digest(REPOSITORY_PATH, "vllm0.27.1-gb10") is None

    passed = publish(local_registry, index, first_tag, first, report(tmp_path, True, first))
    assert passed.returncode == 0, passed.stderr
    # Exactly the verified digest, not a new index wrapped around it.
    assert local_registry.digest(REPOSITORY_PATH, "vllm0.27.1-gb10") == first

    second = push_build(docker_engine, local_registry, second_tag, "second build")
    assert second != first
    before = index.read_bytes()
    bad_second = publish(local_registry, index, second_tag, second, report(tmp_path, False, second))
    assert bad_second.returncode == 1
    assert index.read_bytes() == before
    assert local_registry.digest(REPOSITORY_PATH, "vllm0.27.1-gb10") == first
    # A passed report of the first image does not verify the second.
    other = publish(local_registry, index, second_tag, second, report(tmp_path, True, first))
    assert other.returncode == 2 and "image_digest: the report verified" in other.stderr
    assert local_registry.digest(REPOSITORY_PATH, "vllm0.27.1-gb10") == first
    good_second = publish(local_registry, index, second_tag, second, report(tmp_path, True, second))
    assert good_second.returncode == 0, good_second.stderr
    assert local_registry.digest(REPOSITORY_PATH, "vllm0.27.1-gb10") == second
    assert published.known_good(published.load_index(index), "gb10", "0.27.1")["digest"] == second


def test_republishing_an_immutable_tag_moves_nothing(docker_engine, local_registry, tmp_path):
    index = tmp_path / "published.json"
    tag = "vllm0.27.1-gb10-333333333333"
    original = push_build(docker_engine, local_registry, tag, "original")
    assert publish(local_registry, index, tag, original, report(tmp_path, True, original)).returncode == 0
    # Someone overwrote the tag in the registry; the index still refuses the new digest.
    overwritten = push_build(docker_engine, local_registry, tag, "overwritten")
    before = index.read_bytes()
    result = publish(local_registry, index, tag, overwritten, report(tmp_path, True, overwritten))
    assert result.returncode == 3
    assert f"already names {original}" in result.stderr
    assert index.read_bytes() == before
    assert local_registry.digest(REPOSITORY_PATH, "vllm0.27.1-gb10") == original


def test_endpoint_report_without_the_server_log_never_moves_the_tag(docker_engine, local_registry,
                                                                    tmp_path, monkeypatch):
    """As a new user would: `mtp_smoke --endpoint` against a server (vLLM 0.25.0 on an H200, as
    captured) whose drafts are accepted, without --server-log, then `publish --move-tag` with its
    report, honest or edited to claim a pass; then with the log, which moves the tag."""
    from tests.test_verify_endpoint import AFTER, FakeServer, log_with_tuned_config, with_acceptance
    from verify import mtp_smoke

    tag, moving_tag = "vllm0.25.0-h200-888888888888", "vllm0.25.0-h200"
    digest = push_build(docker_engine, local_registry, tag, "endpoint-verified build")
    window = with_acceptance(AFTER, 200, 0.8)
    # As gpu-verify.yml hands it over: the RepoDigest of the pulled image, in the environment.
    monkeypatch.setenv("VLLM_FORGE_IMAGE_DIGEST", f"{local_registry.host}/{REPOSITORY_PATH}@{digest}")

    def smoke(out: Path, *extra) -> Path:
        with FakeServer([AFTER, window, window], release="0.25.0") as server:
            mtp_smoke.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--endpoint",
                            server.url, "--out", str(out), "--max-tokens", "8", *extra])
        return out / "mtp_smoke.json"

    def publish_h200(report_path: Path):
        return publish(local_registry, index, tag, digest, report_path, "h200", "0.25.0")

    index = tmp_path / "published.json"
    unchecked = smoke(tmp_path / "no-log")
    assert json.loads(unchecked.read_text())["passed"] is False
    refused = publish_h200(unchecked)
    assert refused.returncode == 1 and "CUDA graphs: NOT CHECKED" in refused.stderr
    claimed = json.loads(unchecked.read_text())
    unchecked.write_text(json.dumps({**claimed, "passed": True}))
    refused = publish_h200(unchecked)
    assert refused.returncode == 1 and "contradicted by its checks" in refused.stderr
    assert not index.exists()
    assert local_registry.digest(REPOSITORY_PATH, moving_tag) is None

    checked = smoke(tmp_path / "with-log", "--server-log", str(log_with_tuned_config(tmp_path)))
    moved = publish_h200(checked)
    assert moved.returncode == 0, moved.stderr
    assert local_registry.digest(REPOSITORY_PATH, moving_tag) == digest


def test_release_guard_step_refuses_an_existing_immutable_tag(docker_engine, local_registry, buildx):
    script = step_script("release.yml", "build", "Refuse to re-point an immutable tag")
    tag = "vllm0.27.1-gb10-444444444444"
    push_build(docker_engine, local_registry, tag, "already pushed")

    def guard(ref: str):
        return run_step(script, REPO_ROOT, {**os.environ, "IMMUTABLE_REF": ref, "VLLM": "0.27.1"})

    existing = guard(f"{local_registry.host}/{REPOSITORY_PATH}:{tag}")
    assert existing.returncode == 1
    assert existing.stdout.startswith(f"::error::{local_registry.host}/{REPOSITORY_PATH}:{tag} "
                                      "already exists")
    fresh = guard(f"{local_registry.host}/{REPOSITORY_PATH}:vllm0.27.1-gb10-555555555555")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr


@pytest.mark.parametrize("verified", [True, False])
def test_release_publish_step_records_and_moves_only_when_verified(docker_engine, local_registry,
                                                                   tmp_path, verified):
    from verify.report import installed_versions, write_report

    checkout = workflow_checkout(tmp_path)
    tag = f"vllm0.27.1-h200-{'6' if verified else '7'}{'0' * 11}"
    digest = push_build(docker_engine, local_registry, tag, f"h200 build verified={verified}")
    (checkout / "build-record").mkdir()
    (checkout / "build-record" / "digest").write_text(digest + "\n")
    for recipe in ("gemma-4-26b-a4b-it", "gemma-4-31b-it"):  # as download-artifact lays them out
        write_report(checkout / "verify-reports" / f"verify-h200-{recipe}" / recipe / "mtp_smoke.json",
                     smoke_checks(verified), installed_versions(), recipe=recipe, target="h200",
                     vllm="0.27.1", image_digest=digest)
    outputs = tmp_path / "github_output"
    env = {**os.environ, "TARGET": "h200", "VLLM": "0.27.1", "IMMUTABLE_TAG": tag,
           "REPOSITORY": f"{local_registry.host}/{REPOSITORY_PATH}", "GITHUB_OUTPUT": str(outputs)}
    index_file = checkout / "images" / "published.json"
    before = index_file.read_bytes()

    result = run_step(step_script("release.yml", "publish", "publish"), checkout, env)

    build = published.find_build(published.load_index(index_file), env["REPOSITORY"], tag)
    moving = local_registry.digest(REPOSITORY_PATH, "vllm0.27.1-h200")
    if verified:
        assert result.returncode == 0, result.stderr
        assert build["digest"] == digest and build["verify"]["passed"] is True
        assert sorted(build["verify"]["summary"]) == ["gemma-4-26b-a4b-it", "gemma-4-31b-it"]
        assert moving == digest
        assert f"moving_ref={env['REPOSITORY']}:vllm0.27.1-h200" in outputs.read_text()
    else:
        assert result.returncode == 1
        assert "verify did not pass: acceptance (temperature 0): FAIL" in result.stderr
        assert build is None and index_file.read_bytes() == before
        assert moving != digest
        assert not outputs.exists()


def test_gpu_verify_digest_step_names_the_digest_it_pulled(docker_engine, local_registry, tmp_path):
    """gpu-verify.yml's "Image digest" step, run as the runner runs it after `docker pull`: the
    digest it hands mtp_smoke (VLLM_FORGE_IMAGE_DIGEST) is the registry's, the one publish gets."""
    script = step_script("gpu-verify.yml", "mtp-smoke", "Image digest")
    repository = f"{local_registry.host}/{REPOSITORY_PATH}"
    tag = "vllm0.27.1-h200-999999999999"
    digest = push_build(docker_engine, local_registry, tag, "gpu-verify pulls this")
    docker_engine.images.remove(f"{repository}:{tag}")
    docker_engine.images.pull(repository, tag=tag)  # a fresh runner pulls by the immutable tag

    def step(image: str):
        outputs = tmp_path / f"output-{len(list(tmp_path.iterdir()))}"
        result = run_step(script, REPO_ROOT, {**os.environ, "IMAGE": image, "GITHUB_OUTPUT": str(outputs)})
        return result, outputs.read_text() if outputs.exists() else ""

    for image in (f"{repository}:{tag}", f"{repository}@{digest}"):
        result, outputs = step(image)
        assert result.returncode == 0, result.stderr
        assert outputs == f"digest={digest}\n"

    docker_engine.images.get(tiny_image(docker_engine, "built here")).tag(repository, "local-only")
    result, outputs = step(f"{repository}:local-only")
    assert result.returncode == 1 and outputs == ""
    assert result.stdout == (f"::error::{repository}:local-only has no registry digest: "
                             "pull it from its registry first\n")
