"""verify/: scripts that prove a serving image still works after a vLLM upgrade.

Run them as modules from the repository root (`python3 -m verify.mtp_smoke ...`; in the image,
from /opt/vllm-forge) or, after `pip install .`, as `vllm-forge-mtp-smoke` / `vllm-forge-bench`.
"""
