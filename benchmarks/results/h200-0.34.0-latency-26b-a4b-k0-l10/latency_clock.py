"""`vllm bench latency` as vLLM ships it (vllm.benchmarks.latency: its parser, its engine, its
perf_counter clock), with two additions that change no timed code: once the engine is up the
process takes verify's GPU lock ($VLLM_FORGE_MEASURE_LOCK) exclusively, so its warm-up and timed
iterations run alone on the GPU, and the engine's stats stay on so its spec-decode counters can be
written beside vLLM's JSON (--output-json X writes X.counters.json)."""
import fcntl
import json
import os
import sys
import time

from vllm import LLM
from vllm.benchmarks import latency
from vllm.utils.argparse_utils import FlexibleArgumentParser

held = {}
_from_engine_args = LLM.from_engine_args.__func__


def from_engine_args(cls, engine_args):
    engine_args.disable_log_stats = False
    llm = _from_engine_args(cls, engine_args)
    held["llm"] = llm
    print(f"CLOCK engine up {time.time():.1f}", flush=True)
    path = os.environ.get("VLLM_FORGE_MEASURE_LOCK")
    if path:
        held["lock"] = open(path, "a")
        fcntl.flock(held["lock"], fcntl.LOCK_EX)
        print(f"CLOCK lock taken {time.time():.1f}", flush=True)
    return llm


LLM.from_engine_args = classmethod(from_engine_args)
parser = FlexibleArgumentParser()
latency.add_cli_args(parser)
args = parser.parse_args()
latency.main(args)
counters = {}
for metric in held["llm"].get_metrics():
    if metric.name.startswith("vllm:spec_decode") or metric.name in (
            "vllm:generation_tokens", "vllm:prompt_tokens"):
        if hasattr(metric, "values"):
            old = counters.get(metric.name, [0] * len(metric.values))
            counters[metric.name] = [a + b for a, b in zip(old, metric.values)]
        elif hasattr(metric, "value"):
            counters[metric.name] = counters.get(metric.name, 0) + metric.value
print("COUNTERS", json.dumps(counters), flush=True)
if args.output_json:
    with open(args.output_json + ".counters.json", "w") as f:
        json.dump(counters, f, indent=1)
sys.exit(0)
