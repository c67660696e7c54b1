"""Engines of vLLM run on this machine: vLLM's CPU build per release (images/cpu-engines.yaml), its
cached environment, and the smoke run on it (`build.py smoke --device cpu`)."""
