"""verify/: scripts that prove a serving image still works after a vLLM upgrade.

Run them as files from any directory (`python3 verify/mtp_smoke.py ...`; in the image
`python3 /opt/vllm-forge/verify/mtp_smoke.py ...`), as modules from the repository root
(`python3 -m verify.mtp_smoke ...`) or, after `pip install .`, as `vllm-forge-mtp-smoke` /
`vllm-forge-bench`.
"""
