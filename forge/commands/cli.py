"""The argument parser behind build.py.

Each command's parser names its handler, a `cmd_*` function of forge/commands, by module and
name (Handler): build.py -> main -> the handler -> the packages below can be followed by a reader
and by a tool. A handler's module is imported only when its command runs, so one command does not
pay for importing every other (a build.py call is most of a second of Python otherwise). A handler
takes the parsed arguments and returns an exit code (None means 0). Importing the handler modules
imports neither the Docker SDK nor requests (the functions that use them do), so `build.py apply`
inside an image needs neither (tests/test_cli.py checks).
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import sys

from forge.commands import data_writers
from forge.errors import ForgeError, file_error
from forge.files import check_stdout
from forge.image_names import check_repository_argument
from forge.untrusted import visible
from forge.versions import Release

# Typing `python3 build.py --target gb10 --vllm 0.27.1` means "build": no command word needed.
DEFAULT_COMMAND = "build"

# The files each command writes (flag, argument name): checked before the handler runs, so a
# command never writes one output and then fails on the next (`published --index` only reads).
OUTPUT_FILES = {
    "bake": (("--output", "output"),),
    "publish": (("--index", "index"), ("--github-output", "github_output")),
    "release-matrix": (("--github-output", "github_output"),),
    "tune-moe": (("--results", "results"),),          # written after a GPU run of minutes
    "upstream-watch": (("--pr-body", "pr_body"), ("--github-output", "github_output")),
}


class Handler:
    """A command's handler, `forge.commands.<module>.<name>`, imported when it is called."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, args: argparse.Namespace):
        return getattr(importlib.import_module(f"forge.commands.{self.module}"), self.name)(args)

    def __repr__(self) -> str:
        return f"forge.commands.{self.module}.{self.name}"


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, like every other refusal, naming the command and the flag:
    `error: build.py serve: argument --port: invalid int value: 'abc' (build.py serve --help)`.
    (argparse prints the whole usage first, which buries the one line that matters.) What the
    user typed is shown with its control characters escaped, never sent to the terminal raw."""

    def error(self, message: str):  # type: ignore[override]  # argparse's NoReturn, by SystemExit
        shown = visible(" ".join(message.split()))
        print(f"error: {self.prog}: {shown} ({self.prog} --help lists the flags)", file=sys.stderr)
        raise SystemExit(2)


def _add_repository_flag(p) -> None:
    p.add_argument("--repository", help="image repository (default ghcr.io/<owner>/vllm-forge)")


def _add_offline_flag(p) -> None:
    p.add_argument("--offline", action="store_true",
                   help="use only the cached release index and sources (no network)")


def _add_locked_flag(p) -> None:
    p.add_argument("--locked", action="store_true",
                   help="refuse a base that the lock file does not pin instead of pinning it "
                        "there (CI and releases: the lock never changes)")


def _add_build(commands) -> None:
    p = commands.add_parser("build", help="build a serving image for a target (the default command)")
    p.add_argument("--target", required=True, help="hardware target from images/targets.yaml")
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION", help="vLLM release, e.g. 0.27.1")
    _add_repository_flag(p)
    p.add_argument("--push", action="store_true",
                   help="push the immutable tag (the moving tag moves only by `publish --move-tag`, "
                        "after verify passed)")
    p.add_argument("--plan", action="store_true", help="print the resolved plan; build nothing")
    _add_locked_flag(p)
    p.add_argument("--allow-unlocked", action="store_true",
                   help="build from a base that images/lock.yaml does not pin, without pinning it "
                        "(not reproducible)")
    p.add_argument("--allow-base-change", action="store_true",
                   help="build from the locked digest even though the base tag has moved since")
    p.add_argument("--base-image", help="override the target's base image tag (repo:tag)")
    p.add_argument("--lock", metavar="FILE", help="lock file (default images/lock.yaml, $VLLM_FORGE_LOCK)")
    p.add_argument("--json", action="store_true", help="with --plan: print the plan as JSON")
    p.add_argument("--no-attest", action="store_true",
                   help="no SBOM/provenance attestations (default: on where the engine's image "
                        "store keeps them, i.e. the containerd image store)")
    p.set_defaults(handler=Handler("images", "cmd_build"))


def _add_patches(commands) -> None:
    p = commands.add_parser("patches", help="status of every patch against vLLM release sources")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--vllm", type=Release, metavar="VERSION", help="one release")
    which.add_argument("--all", action="store_true", help="every release from 0.21.0 to the newest")
    which.add_argument("--site-packages", metavar="DIR",
                       help="an installed vLLM as it is now: dependencies as installed (a drift "
                            "after apply shows as applies), patches in the apply record as applied")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--wide", action="store_true",
                   help="one line per patch (--all: per release), however long (default: "
                        "every line fits 100 columns)")
    _add_offline_flag(p)
    p.set_defaults(handler=Handler("patches", "cmd_patches"))


def _add_apply(commands) -> None:
    p = commands.add_parser("apply", help="apply (or --revert) the patch series to an installed vLLM")
    p.add_argument("--site-packages", metavar="DIR",
                   help="directory holding the vllm package (default: found on sys.path)")
    p.add_argument("--vllm", type=Release, metavar="VERSION",
                   help="expected installed version (refuse if the install differs)")
    p.add_argument("--revert", action="store_true", help="restore every patched file byte for byte")
    p.add_argument("--moe-config-dir", metavar="DIR",
                   help="install the series' tuned fused-MoE configs here "
                        "(images export it as VLLM_TUNED_CONFIG_FOLDER)")
    p.add_argument("--moe-device", metavar="NAME",
                   help="only the MoE configs tuned for this GPU (device_name in vLLM's file names, "
                        "e.g. NVIDIA_H200); default: every config")
    p.add_argument("--offline", action="store_true",
                   help="never reach the package index: a dependency outside its constraint is "
                        "refused with the pip command to run (or use --find-links)")
    p.add_argument("--find-links", metavar="DIR",
                   help="bring dependencies inside their constraints from this local wheelhouse "
                        "(pip --no-index --find-links DIR), for hosts without the index")
    p.add_argument("--pin", action="append", metavar="PACKAGE==VERSION",
                   help="install exactly this version where a constraint on PACKAGE is in range "
                        "and the installed version differs (repeatable; an image build pins what "
                        "its plan chose)")
    p.add_argument("--with-candidate", action="append", metavar="ID",
                   help="apply this candidate patch too (series.yaml `candidate: true`; left out "
                        "by default and by image builds; repeatable)")
    p.set_defaults(handler=Handler("patches", "cmd_apply"))


def _add_lock(commands) -> None:
    p = commands.add_parser("lock", help="pin every base image tag to its registry digest")
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION")
    p.add_argument("--target", action="append", help="only these targets (repeatable)")
    p.add_argument("--lock", metavar="FILE", help="lock file (default images/lock.yaml, $VLLM_FORGE_LOCK)")
    p.set_defaults(handler=Handler("images", "cmd_lock"))


def _add_bake(commands) -> None:
    p = commands.add_parser("bake", help="write a docker buildx bake file for every target")
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION")
    p.add_argument("--target", action="append", help="only these targets (repeatable)")
    _add_repository_flag(p)
    p.add_argument("--lock", metavar="FILE", help="lock file (default images/lock.yaml, $VLLM_FORGE_LOCK)")
    _add_locked_flag(p)
    p.add_argument("--output", "-o", default="docker-bake.json", help="file to write")
    p.add_argument("--no-attest", action="store_true",
                   help="no SBOM/provenance attestations: for the plain docker driver (Docker "
                        "Engine before 26 without the containerd image store, e.g. Debian 12's)")
    p.set_defaults(handler=Handler("images", "cmd_bake"))


def _add_serve(commands) -> None:
    p = commands.add_parser("serve", help="print (or --run) the docker command that serves a recipe")
    p.add_argument("--recipe", required=True, help="recipe name from recipes/")
    p.add_argument("--target", required=True)
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION")
    _add_repository_flag(p)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--hf-cache", default="~/.cache/huggingface", help="Hugging Face cache to mount")
    p.add_argument("--run", action="store_true", help="run the command instead of printing it")
    p.add_argument("--recipes-dir", metavar="DIR",
                   help="read recipes from DIR/<recipe>.yaml (default: recipes/)")
    _add_serve_nodes(p)
    p.set_defaults(handler=Handler("serving", "cmd_serve"))


def _add_serve_nodes(p) -> None:
    g = p.add_argument_group("multi-node (vLLM's native engine; the recipe's multi_node layout)")
    g.add_argument("--nodes", type=int, default=1, help="nodes to span (default 1)")
    g.add_argument("--master-addr", help="node 0's address on the interconnect")
    g.add_argument("--master-port", type=int, default=29501)
    g.add_argument("--node-ips", metavar="IP,IP", help="every node's interconnect address, rank order")
    g.add_argument("--ifname", help="interconnect interface (default: the one routing to --master-addr)")
    g.add_argument("--ib-hca", metavar="DEV,DEV",
                   help="RoCE devices for NCCL_IB_HCA (default: those in /sys/class/infiniband)")
    g.add_argument("--node-rank", type=int, help="with --run: which node this host is")


def _add_roofline(commands) -> None:
    p = commands.add_parser("roofline", help="the bytes one decode token reads, per weight group, and the "
                                             "speed floor and speculative ceiling they allow on the target")
    p.add_argument("--recipe", required=True, help="recipe name from recipes/")
    p.add_argument("--target", required=True)
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION",
                   help="the release whose weight layout counts")
    p.add_argument("--dtype", choices=["bf16", "fp8"], help="weights (default: the recipe's)")
    p.add_argument("--context", type=int, default=0, metavar="N",
                   help="tokens of context whose KV cache each token reads (default 0: weights only)")
    p.add_argument("--layers", type=int, metavar="N",
                   help="the target's first N decoder layers, as a dummy-weight run at that depth "
                        "(verify's --layers) builds it (default: all)")
    p.add_argument("--profile", metavar="P1/P2/..",
                   help="per-position acceptance rates (or NAME=P1/P2/.., rate@R) for the ceiling "
                        "(default: every draft accepted)")
    p.add_argument("--step-cost-ratio", type=positive_number, metavar="X",
                   help="one speculative step's cost over a plain one (default: the recipe's)")
    p.add_argument("--device", help="one of the target's device_names (default: the first)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--recipes-dir", metavar="DIR", help="read recipes from DIR (default: recipes/)")
    p.set_defaults(handler=Handler("serving", "cmd_roofline"))


def counts(text: str) -> list[int]:
    """A comma-separated list of whole numbers of 1 or more (token counts, draft tokens, requests)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated whole numbers: {text!r}") from None
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"every number must be 1 or more: {text!r}")
    return values


def positive_number(text: str) -> float:
    """A finite number above 0 (a ratio, a cost): NaN, infinities, 0 and below make no figure."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0 (got {text!r})")
    return value


def _add_tune_moe(commands) -> None:
    p = commands.add_parser("tune-moe", help="tune fused-MoE Triton configs on this GPU")
    p.add_argument("--dtype", choices=["bf16", "fp8_w8a8"],
                   help="weight dtype to tune (required unless --import-results)")
    p.add_argument("--batch-sizes", type=counts,
                   help="token counts to tune, comma-separated (default: every count a server runs)")
    p.add_argument("--recipe", help="derive the token counts from this recipe: M = k+1 and "
                                    "(k+1) x each --concurrency, k the recipe's draft tokens")
    p.add_argument("--target", help="with --recipe: the recipe's target (e.g. h200)")
    p.add_argument("--k", type=counts,
                   help="with --recipe: these draft token counts instead of the recipe's")
    p.add_argument("--concurrency", type=counts,
                   help="with --recipe: concurrent requests per decode step (default 1,8 and "
                        "the recipe's max_num_seqs)")
    p.add_argument("--merge-into", metavar="DIR",
                   help="write the chosen configs merged over the shipped file of the same name "
                        "(patches/moe-configs) into DIR, for VLLM_TUNED_CONFIG_FOLDER")
    p.add_argument("--space", default="small", choices=["small", "full"],
                   help="kernel config search space (default small)")
    p.add_argument("--results", metavar="FILE",
                   help="where the GPU run writes its results JSON (default tune-moe-DTYPE.json)")
    p.add_argument("--import-results", metavar="FILE",
                   help="no GPU: write a GPU run's tuned JSON into patches/moe-configs and "
                        "register it in patches/series.yaml, only with an end-to-end win")
    p.add_argument("--end-to-end", metavar="BENCH_JSON", action="append", default=[],
                   help="with --import-results (repeatable): verify/bench.py's bench.json of a run "
                        "with the same engine with the tuned config and without it; it must win "
                        "by 1%% in every run given")
    p.add_argument("--with-engine", metavar="NAME", help="with --end-to-end: the engine that read the config")
    p.add_argument("--without-engine", metavar="NAME",
                   help="with --end-to-end: the same engine on vLLM's default config")
    p.add_argument("--window", default="sustained@agree",
                   help="with --end-to-end: the bench window compared (default sustained@agree: "
                        "batch 1, every draft accepted)")
    p.set_defaults(handler=Handler("serving", "cmd_tune_moe"))


def _add_publish(commands) -> None:
    p = commands.add_parser("publish", help="record a pushed image in images/published.json; "
                                            "move its moving tag when verify passed")
    p.add_argument("--target", required=True)
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION")
    p.add_argument("--immutable-tag", required=True, help="the tag the build was pushed under")
    p.add_argument("--digest", required=True, help="the pushed image's sha256:... digest")
    p.add_argument("--verify-report", metavar="JSON", action="append",
                   help="verify/ report, one per recipe, or a directory of them "
                        "(repeatable; none: not verified)")
    _add_repository_flag(p)
    p.add_argument("--index", help="the known-good index file (default images/published.json)")
    p.add_argument("--move-tag", action="store_true",
                   help="when verify passed, point the moving tag at the digest in the registry, "
                        "then record it as known-good (without: the build is recorded, the moving "
                        "tag and the known-good entry stay as they are)")
    p.add_argument("--github-output", metavar="FILE",
                   help="append moving_ref= and source_ref= (a GitHub Actions step output file)")
    p.set_defaults(handler=Handler("images", "cmd_publish"))


def _add_published(commands) -> None:
    p = commands.add_parser("published", help="list the known-good (verified) image per target and release")
    p.add_argument("--target")
    p.add_argument("--vllm", type=Release, metavar="VERSION")
    p.add_argument("--index", help="the known-good index file (default images/published.json)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=Handler("images", "cmd_published"))


def _add_upstream_watch(commands) -> None:
    p = commands.add_parser("upstream-watch", help="check vLLM releases newer than the manifest's "
                                                   "checked_through and new versions of the watched "
                                                   "dependencies; propose the edits")
    p.add_argument("--series", help="the patch manifest (default patches/series.yaml, $VLLM_FORGE_SERIES)")
    p.add_argument("--write", action="store_true", help="apply the proposed edits to the manifest")
    p.add_argument("--json", action="store_true", help="print the proposal as JSON")
    p.add_argument("--pr-body", metavar="FILE", help="write the pull request (or issue) body here")
    p.add_argument("--github-output", metavar="FILE",
                   help="append newest=, changed=, conflicts=, findings=, branch= and title= "
                        "(a GitHub Actions step output file)")
    p.add_argument("--dependency-watch", metavar="FILE",
                   help="the watched dependencies (default dependency-watch.yaml beside the series); "
                        "each new version on PyPI goes through the drift check (see `drift --help`)")
    p.add_argument("--dependency-through", action="append", metavar="PACKAGE==VERSION",
                   help="check the package's new versions only up to this one (repeatable)")
    _add_offline_flag(p)
    p.set_defaults(handler=Handler("watch", "cmd_upstream_watch"))


def _add_drift(commands) -> None:
    p = commands.add_parser(
        "drift", help="does a dependency version break Gemma 4 on a supported vLLM release?",
        description="Dependency drift check. Installs the given version of the dependency from "
                    "PyPI into a cached environment, loads the Gemma 4 target and assistant "
                    "configs (verify/dummy_models.py) with it, and runs each supported vLLM "
                    "release's own engine-start code on them (taken from the release sources: "
                    "get_hf_text_config and the model's arch-config convertor, head size). Per "
                    "release: works, breaks (exception and release line), covered-by-constraint "
                    "(a `kind: dependency` entry of the series keeps the version out) or "
                    "probe-error. Exit 1 when the version breaks a supported release that no "
                    "constraint covers (a finding), 2 when the check could not run.")
    p.add_argument("--package", default="transformers", help="the dependency (default transformers)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", help="the dependency version to check, e.g. 5.15.0")
    which.add_argument("--newest", action="store_true", help="the newest final release on PyPI")
    p.add_argument("--vllm", type=Release, action="append", metavar="VERSION",
                   help="only this vLLM release (repeatable; default every release from the "
                        "series' checked_from to checked_through)")
    p.add_argument("--series", help="the patch manifest (default patches/series.yaml, $VLLM_FORGE_SERIES)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_offline_flag(p)
    p.set_defaults(handler=Handler("watch", "cmd_drift"))


def _add_readme_table(commands) -> None:
    p = commands.add_parser("readme-table", help="regenerate README.md's per-release patch status table")
    p.add_argument("--readme", help="the README to update (default the repository's README.md)")
    p.add_argument("--check", action="store_true", help="exit 1 if the table is stale; write nothing")
    _add_offline_flag(p)
    p.set_defaults(handler=Handler("patches", "cmd_readme_table"))


def _add_evidence(commands) -> None:
    p = commands.add_parser("evidence", help="regenerate docs/evidence.md from the result records "
                                             "(benchmarks/results/<id>/result.json)")
    p.add_argument("--page", help="the page to write (default docs/evidence.md)")
    p.add_argument("--results", help="the records' folder (default benchmarks/results)")
    p.add_argument("--derive", action="append", metavar="ID",
                   help="first set this record's figures from its raw report (repeatable)")
    p.add_argument("--check", action="store_true", help="exit 1 if the page is stale; write nothing")
    p.set_defaults(handler=Handler("evidence", "cmd_evidence"))


def _add_new_patch(commands) -> None:
    p = commands.add_parser("new-patch", help="make a source patch: unpack a release into "
                                              "build/patch-work/ID, edit it, then --finish")
    p.add_argument("id", metavar="ID", help="the new patch's id (letters, digits, - . _)")
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION", help="the release to write it on")
    p.add_argument("--finish", action="store_true",
                   help="write the diff of the edited tree, its sha256 and the manifest entry")
    g = p.add_argument_group("the manifest entry (with --finish)")
    g.add_argument("--title", help="one line")
    g.add_argument("--why", help="what breaks without it (prose)")
    g.add_argument("--issue", type=int, help="vllm-project/vllm issue number")
    g.add_argument("--pr", type=int, help="vllm-project/vllm pull request with the fix")
    g.add_argument("--fixed-in", metavar="VERSION", help="the release that carries the fix")
    g.add_argument("--introduced-by", type=int, metavar="PR", help="the PR that brought the bug")
    g.add_argument("--releases", metavar="SPEC", help="PEP 440 specifier (default >=VERSION)")
    g.add_argument("--fixes-marker", metavar="TEXT",
                   help="text of the buggy code: where it is absent the patch is not-needed")
    p.set_defaults(handler=Handler("patch_work", "cmd_new_patch"))


def _add_refresh_patch(commands) -> None:
    p = commands.add_parser("refresh-patch", help="refresh a source patch for a release: apply it "
                                                  "to build/patch-work/ID, fix it, then --finish")
    p.add_argument("id", metavar="ID", help="the patch's id in patches/series.yaml")
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION", help="the release to refresh it for")
    p.add_argument("--finish", action="store_true",
                   help="write the diff of the fixed tree and its sha256 (a variant entry where "
                        "the new diff no longer serves the earlier releases)")
    p.add_argument("--releases", metavar="SPEC",
                   help="with --finish: the refreshed diff's releases (default: computed)")
    p.set_defaults(handler=Handler("patch_work", "cmd_refresh_patch"))


def _add_patch_headers(commands) -> None:
    p = commands.add_parser("patch-headers", help="write each source diff's provenance header from "
                                                  "patches/series.yaml (and its new sha256)")
    p.add_argument("--check", action="store_true", help="exit 1 if a header is stale; write nothing")
    p.set_defaults(handler=Handler("patch_work", "cmd_patch_headers"))


def _add_release_matrix(commands) -> None:
    p = commands.add_parser("release-matrix", help="the release workflow's per-target job matrix (JSON)")
    p.add_argument("--tag", help="release tag: vllm-<version>[-r<N>]")
    p.add_argument("--vllm", type=Release, metavar="VERSION", help="vLLM release (instead of --tag)")
    p.add_argument("--target", action="append", help="only these targets (repeatable)")
    _add_repository_flag(p)
    p.add_argument("--runner", action="append", metavar="PLATFORM=RUNNER",
                   help="runner label for a platform (default linux/amd64=ubuntu-24.04, "
                        "linux/arm64=ubuntu-24.04-arm)")
    p.add_argument("--pretty", action="store_true", help="indented JSON")
    p.add_argument("--github-output", metavar="FILE", help="append vllm= and matrix= lines")
    p.set_defaults(handler=Handler("images", "cmd_release_matrix"))


def _add_upgrade(commands) -> None:
    p = commands.add_parser("upgrade", help="what moving a target's image from one vLLM release to "
                                            "another changes: patches, dependencies, recipes, image")
    p.add_argument("--from", dest="from_release", type=lambda v: Release(v, "--from"),
                   required=True, metavar="VERSION", help="the release the image is on")
    p.add_argument("--to", dest="to_release", type=lambda v: Release(v, "--to"), required=True,
                   metavar="VERSION", help="the release to move to")
    p.add_argument("--target", required=True, help="hardware target from images/targets.yaml")
    p.add_argument("--recipe", action="append", metavar="NAME",
                   help="only this recipe of the target (repeatable; default: all of them)")
    p.add_argument("--allow-downgrade", action="store_true", help="allow --to older than --from")
    p.add_argument("--json", action="store_true",
                   help="print the report as JSON (schema: forge/upgrade/schema.py)")
    p.add_argument("--verbose", action="store_true",
                   help="print every detail (default: a brief report of what changes)")
    p.add_argument("--run", action="store_true",
                   help="when ready: build the --to image, then smoke each recipe in it on this "
                        "host's GPU (stops at the first failure; pushes and publishes nothing)")
    _add_repository_flag(p)
    p.set_defaults(handler=Handler("upgrade", "cmd_upgrade"))


def _add_smoke(commands) -> None:
    p = commands.add_parser("smoke", help="verify's gate on a real vLLM engine without a GPU: vLLM's CPU "
                                          "build, the series applied, the family's tiny model")
    p.add_argument("--vllm", type=Release, required=True, metavar="VERSION",
                   help="the release (one pinned in images/cpu-engines.yaml)")
    p.add_argument("--device", choices=["cpu"], required=True,
                   help="cpu: vLLM's CPU build (a GPU host runs verify/mtp_smoke.py in the image instead)")
    p.add_argument("--no-patches", action="store_true",
                   help="run the release as pip installs it, without the patch series' source patches")
    p.add_argument("--recipe", default="gemma-4-26b-a4b-it", help="whose family, drafter, k and controls "
                   "(default gemma-4-26b-a4b-it)")
    p.add_argument("--target", help="whose entry of the recipe (default: the recipe's first target)")
    p.add_argument("--drift", action="append", default=[], metavar="PACKAGE==VERSION",
                   help="install this version into the engine's environment first, as an upgrade by pip "
                        "would (e.g. transformers==5.15.0); the series then pins it back where it has "
                        "a constraint (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for mtp_smoke.json and the engine logs")
    p.add_argument("--timeout", type=int, default=900, metavar="SECONDS",
                   help="seconds the engines may run (default 900)")
    p.add_argument("--max-tokens", type=int, default=32, metavar="N",
                   help="tokens per prompt in each window (default 32)")
    p.add_argument("--no-lossless", action="store_true",
                   help="skip the second engine, the one without the drafter whose greedy output must "
                        "equal the drafter's (half the run's time)")
    _add_offline_flag(p)
    p.set_defaults(handler=Handler("engines", "cmd_smoke"))


def _add_cpu_lock(commands) -> None:
    p = commands.add_parser("cpu-lock", help="pin every wheel a CPU engine environment installs (version and "
                                             "sha256), as pip resolves it today")
    p.add_argument("--vllm", type=Release, action="append", default=[], metavar="VERSION",
                   help="only this release's entry (repeatable; default: every release in "
                        "images/cpu-engines.yaml); the others are kept")
    p.add_argument("--lock", metavar="FILE",
                   help="the lock file (default images/cpu-engines-lock.yaml)")
    p.set_defaults(handler=Handler("engines", "cmd_cpu_lock"))


COMMAND_BUILDERS = [_add_build, _add_patches, _add_apply, _add_lock, _add_bake, _add_serve, _add_smoke,
                    _add_cpu_lock, _add_roofline, _add_tune_moe, _add_publish, _add_published,
                    _add_upstream_watch,
                    _add_drift, _add_readme_table, _add_evidence, _add_new_patch, _add_refresh_patch,
                    _add_patch_headers, _add_release_matrix, _add_upgrade, data_writers.add_parsers]


def program_name() -> str:
    """What the user typed: `build.py` in a checkout, `vllm-forge` as the installed command."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name in ("build.py", "vllm-forge") else "vllm-forge"


def build_parser() -> argparse.ArgumentParser:
    prog = program_name()
    example = "python3 build.py" if prog == "build.py" else prog
    parser = OneLineParser(
        prog=prog,
        description="vllm-forge: patched, verified vLLM serving images per GPU target.",
        epilog=f"Without a command, {prog} builds: {example} --target gb10 --vllm 0.27.1 "
               f"(`{example} build --help` lists the build's own flags: --plan, --push, "
               f"--allow-unlocked, --locked, ...). `{example} COMMAND --help` lists a command's.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in COMMAND_BUILDERS:
        add_command(commands)
    return parser


def _with_default_command(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    known = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr,arg-type]  # argparse has no API
    if argv and argv[0] not in known and argv[0] not in ("-h", "--help"):
        return [DEFAULT_COMMAND, *argv]
    return argv


def _check_output_files(args) -> None:
    from forge.files import check_output_file

    for flag, name in OUTPUT_FILES.get(args.command, ()):
        if getattr(args, name, None):
            check_output_file(getattr(args, name), flag)


def data_home_hint(message: str) -> str:
    """Installed outside a checkout, forge reads patches/, images/ and recipes/ from
    $VLLM_FORGE_HOME or the current directory: an error about a file there says so."""
    from forge import REPO_ROOT, is_data_home

    if is_data_home(REPO_ROOT) or str(REPO_ROOT) not in message:
        return ""
    where = "$VLLM_FORGE_HOME" if os.environ.get("VLLM_FORGE_HOME") else \
        "the current directory ($VLLM_FORGE_HOME is not set)"
    return (f" (not a vllm-forge checkout: {REPO_ROOT}, from {where}; set $VLLM_FORGE_HOME to a "
            f"checkout's root, the folder holding patches/, images/ and recipes/)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        parser.print_help()
        return 2
    try:
        # --vllm is parsed here, once (type=Release); a bad one is a one-line ForgeError, not usage
        args = parser.parse_args(_with_default_command(argv, parser))
        check_repository_argument(args)
        _check_output_files(args)
        check_stdout()
        status = args.handler(args) or 0
        sys.stdout.flush()          # a full disk under `> file` fails here, inside the handler
        return status
    except ForgeError as exc:
        # A message may quote what a file, a server or a registry said: shown, never obeyed.
        print(f"error: {visible(str(exc))}{data_home_hint(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `build.py patches --all | head`: the reader left; say nothing more, as cat would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        if exc.filename is not None:
            # a fault no layer below turned into a ForgeError: still one line naming the file
            print(f"error: {visible(file_error(exc.filename, exc, 'read or write it'))}", file=sys.stderr)
            return 2
        # standard output refused what was printed (a full disk, an I/O error): one line, and
        # the rest of the buffer is dropped, not written at exit with a second traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"error: {file_error('standard output', exc, 'write it')}", file=sys.stderr)
        return 2
