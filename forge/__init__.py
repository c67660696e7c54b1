"""vllm-forge: a versioned patch set for vLLM and reproducible per-hardware serving images.

Modules, each owning one kind of knowledge:
  releases  vLLM releases on PyPI: versions, sdists (sha256-checked, cached), source trees
  patches   the patch series: manifest, status per release, atomic apply/revert
  targets   hardware targets (images/targets.yaml)
  images    build context, docker builds, tags, labels, lock, bake
  recipes   model x target serving settings and thresholds
  cli       the argument parser behind build.py
"""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
