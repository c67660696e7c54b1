"""Run a GPU plan: python3 benchmarks/gpu/run.py benchmarks/gpu/plans/smoke.yaml --out DIR [--dry-run].
What a plan holds and how its jobs are scheduled: benchmarks/gpu/README.md, benchmarks/gpu/runner/."""
import sys
from pathlib import Path

# Run as a file from anywhere: the repository root on the path, for benchmarks.gpu.runner.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.runner.main import main  # noqa: E402
from forge.errors import exit_on_interrupt  # noqa: E402

if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
