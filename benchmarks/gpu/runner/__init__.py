"""The GPU runner behind benchmarks/gpu/run.py: a plan (YAML, benchmarks/gpu/plans/) lists jobs
with their GPU-memory reservations, timeouts and dependencies; the runner checks the host's vLLM
against the plan, runs the jobs (untimed ones side by side while their reservations fit, timed
ones alone), and writes one log per job, a timeline and run.json under --out.

Standard library and PyYAML only: it runs on the GPU host beside vLLM, and on the CPU for its
tests. Modules: plan (load and validate), schedule (what starts next; the dry run), processes
(start, stop a process group, probe a server), host (the installed versions, the GPU, the job
environment), loop (one run: start, watch, record), record (run.json, the timeline, the
archive), main (the command line, the dry run).
"""
