"""vllm-forge: a versioned patch set for vLLM and reproducible per-hardware serving images.

Subpackages, each owning one kind of knowledge, in layers: a module imports only from its own
package or from a LOWER layer (tests/test_import_graph.py checks this and that there is no cycle).

  0 core      forge/*.py: errors (and Ctrl-C's one line), files (the file layer: capped reads of
              regular files only, atomic writes, output checks, one maker per cache entry),
              data_formats (the one YAML and the one JSON loader, depth- and key-checked),
              json_text (strict JSON out: no NaN or Infinity), untrusted (what a server or log
              said, shown with its control characters escaped), schema (YAML validation), progress,
              http_session, versions (--vllm parsed once into a Release: the PEP 440 normal
              form and its Version), targets (images/targets.yaml, read once per process: every
              layer needs the hardware), models (models/<family>.yaml:
              shapes and facts of a model family), image_names (repository, moving and immutable
              tags: serving names the image it runs), verify_report (a verify report's checks and
              their verdict: verify/ writes by it, publish reads by it), family_writer (a new
              models/<family>.yaml: `new-family`)
  1 upstream  vLLM releases on PyPI (sdists, source trees), the PyPI JSON index, archives, cached
              per-package Python environments, a CPU build's wheel compared with the release
  1 evidence  the result records (benchmarks/results/<id>/result.json: schema, loader) and the
              page generated from them (docs/evidence.md)
  2 patching  the patch series: manifest (series), its vocabulary (Kind, Status), diffs, status
              per release or install, atomic apply, the installed vLLM, dependency constraints,
              MoE config file names, the status report and README table, the diffs' generated
              headers, writing patches (work tree, diff writer, authoring, journal), and the
              files a CPU engine run must share with the release (engine_sources)
  3 serving   recipes, the vLLM arguments of a release, `serve`, MoE kernel tuning, writing a
              recipe (`new-recipe`) and recipes/README.md's thresholds table
  3 engines   vLLM's CPU build per release (images/cpu-engines.yaml), its cached environment, and
              `build.py smoke --device cpu` on it (the series applied as apply applies it)
  4 watch     the upstream watch: new releases, dependency drift (its probe), the watched deps
  4 images    lock, plan, build context, BuildKit build and bake, host checks (engine, emulation),
              registry, retag, published index, the release matrix, a new target's entry
              (`new-target`) (watch and images do not import each other)
  5 upgrade   two releases compared for a target (`build.py upgrade`): patch statuses, declared
              requirements, serve checks, defaults and kernel builds read from the sources, the
              image plans and the commands that follow
  6 commands  the argparse CLI behind build.py / `vllm-forge` and every command handler (`cmd_*`):
              each turns arguments into values, calls the packages below and prints; patches
              (patches, apply, readme-table), evidence (evidence), patch_work (new-patch, refresh-patch,
              patch-headers), images (build, lock, bake, release-matrix, publish,
              published), serving (serve, tune-moe), watch (drift, upstream-watch), upgrade
              (upgrade), data_writers (new-target, new-recipe, new-family, recipes-table). The
              packages below compute and raise; none defines a `cmd_*`.

Above forge, outside the package, the code that uses it (the same test walks it: it imports
forge, nothing in forge imports it, and it has no cycle either):

  7 verify     the image-side checks (verify/): the scripts (mtp_smoke, bench, profile and the
               engine_worker they start) on top, the modules they share (report, checks,
               endpoint, machine, metrics, ...) below them, never importing a script
  8 benchmarks timings of builds and patch runs, and the GPU host's serve and two-node runs
"""
import os
from pathlib import Path


def is_data_home(root: Path) -> bool:
    """Whether `root` holds the project's data (a checkout, or the image's /opt/vllm-forge)."""
    return (root / "patches" / "series.yaml").is_file()


def _repo_root() -> Path:
    """The checkout whose data (patches/, images/, recipes/) forge reads: the one this package
    sits in (a checkout, an editable install, the image's /opt/vllm-forge); for a plain
    `pip install .`, $VLLM_FORGE_HOME, else the current directory."""
    here = Path(__file__).resolve().parent.parent
    if is_data_home(here):
        return here
    return Path(os.environ.get("VLLM_FORGE_HOME") or Path.cwd()).resolve()


REPO_ROOT = _repo_root()

LAYERS = {"core": 0, "upstream": 1, "evidence": 1, "patching": 2, "serving": 3, "engines": 3, "watch": 4,
          "images": 4, "upgrade": 5, "commands": 6}
# The top-level folders above forge (by name: forge never imports them).
ABOVE_FORGE = {"verify": 7, "benchmarks": 8}
