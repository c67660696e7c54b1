"""Hostile servers and logs beyond a body (tests/hostile/server_network.py): a draft position a hundred
million places out, answers dripped a byte at a time, redirects (to another server, malformed,
endless), charsets no codec has; and a burst of more requests than threads a process may start.

What each asserts beyond the harness's own checks (one line or none on stderr, no traceback, no
control character, under 512 MB, within the case's time): a server's failure is a FAIL check
(exit 1) whose line names the cause on stdout; a redirect on the same server is followed."""
from __future__ import annotations

from tests.hostile.commands import bench_endpoint, build, smoke

# scenario -> (exit, what stdout says, extra flags)
SMOKE = {
    "metrics-position-far": (1, "beyond the 64 draft positions", ()),
    "models-trickle": (1, "within 1 s (--timeout)", ("--timeout", "1")),
    "models-headers-trickle": (1, "within 1 s (--timeout)", ("--timeout", "1")),
    "metrics-trickle": (1, "1 s (--timeout)", ("--timeout", "1")),
    "models-redirect-other-port": (1, "redirects to another server", ()),
    "models-redirect-same-server": (0, "PASS", ()),
    "models-redirect-malformed": (1, "malformed Location", ()),
    "models-redirect-loop": (1, "over 5 redirects", ()),
    "models-charset-unknown": (1, "is not a known text encoding", ()),
    "metrics-charset-unknown": (1, "is not a known text encoding", ()),
}


def network_cases() -> list[dict]:
    cases = [{**smoke(scenario, *extra), "id": f"network-mtp-smoke-{scenario}", "exit": status,
              "stdout": said, "timeout": 12.0}
             for scenario, (status, said, extra) in SMOKE.items()]
    burst = bench_endpoint("healthy")
    argv = list(burst["argv"])
    argv[argv.index("--burst") + 1] = "2000"
    # 4 GiB of address space, not the corpus's 1: glibc reserves (not uses) 64 MiB of it for each
    # thread's malloc arena, up to 8 per core, so 1 GiB holds about 20 threads on a 2-core
    # machine. 2000 threads (16 GiB of 8 MiB stacks) still do not fit; the pool does, and the
    # memory used is held under 512 MB as in every case.
    cases.append({**burst, "id": "network-bench-burst-2000", "argv": argv, "exit": 0,
                  "timeout": 90.0, "memory": 4 << 30})
    # A server log with one 200 KiB line of "] ": the sharing-line regex read the rest of the line
    # at each of them (minutes); a literal scan reads it once.
    cases.append({**smoke("healthy"), "id": "logs-mtp-smoke-200-kib-line", "exit": 0,
                  "setup": [("append", "work/server.log",
                             "INFO 11-29 22:00:00 [x.py:1] " + "] " * 102400 + "\n")],
                  "timeout": 15.0})
    # Package index pages without end: read up to a cap, then refused in one line (they reached
    # 2.5-2.8 GB before). The cached pages are out of the way: the vLLM index removed, the PyPI
    # pages keyed to another index.
    patches = build("patches", "--vllm", "0.27.1")
    cases += [
        {**patches, "id": "network-index-endless", "setup": [("remove", "cache/index.json")],
         "env": {"VLLM_FORGE_INDEX": "{server}/index-endless/{id}/simple/vllm/"}, "exit": 2,
         "stderr": ["release index", "index-endless", "more than 16.0 MiB"], "creates": [], "timeout": 30.0},
        {**patches, "id": "network-pypi-endless",
         "env": {"VLLM_FORGE_PYPI": "{server}/pypi-endless/{id}/simple/"}, "exit": 2,
         "stderr": ["pypi-endless", "more than 32.0 MiB"], "creates": [], "timeout": 30.0},
    ]
    return cases
