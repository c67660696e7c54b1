"""verify/: scripts that prove a serving image still works after a vLLM upgrade.

They run inside the image from /opt/vllm-forge/verify (or from a checkout); each script puts the
repository root on sys.path itself so `forge` and `verify` import without installation.
"""
