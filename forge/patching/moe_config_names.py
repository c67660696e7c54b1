"""The file names vLLM's fused-MoE kernel looks its tuned configs up by (vLLM's
`get_config_file_name` in model_executor/layers/fused_moe/fused_moe.py): the tuner writes files
under these names, recipes and the patch status check them.
"""


def device_file_name(device_name: str) -> str:
    """vLLM's get_config_file_name: spaces become '_', every H200 variant is NVIDIA_H200."""
    name = device_name.replace(" ", "_").replace("/", "_")
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def config_file_name(device_name: str, dtype: str, experts: int = 128, n: int = 704) -> str:
    dtype_part = "" if dtype == "bf16" else f",dtype={dtype}"
    return f"E={experts},N={n},device_name={device_file_name(device_name)}{dtype_part}.json"
