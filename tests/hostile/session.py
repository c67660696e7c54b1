"""What the corpus needs once per run: the case tree, the fork server, the hostile HTTP server."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.hostile.forkserver import ForkServer
from tests.hostile.harness import ADDRESS_SPACE, base_env
from tests.hostile.tree import REPO_ROOT, SessionTree

# Valid inputs the cases spoil, in case/work/ (a report of each kind the commands read).
RESULTS = REPO_ROOT / "benchmarks" / "results"
INPUTS = {
    "bench.json": RESULTS / "h200-0.27.1-bench-26b-a4b-l30-splitkv" / "bench.json",
    "profile.json": RESULTS / "h200-0.27.1-profile-26b-a4b-l30-k4" / "profile.json",
    "profile-plain.json": RESULTS / "h200-0.27.1-profile-26b-a4b-l30-plain" / "profile.json",
    "server.log": RESULTS / "h200-0.25.0-smoke-26b-a4b-v1-l6-patched" / "engine.log",
}
# Cache entries computed once (as nobody, by the real commands) and kept in the pristine cache,
# so a case reading patch statuses or serve flags for these releases neither recomputes them
# nor changes the tree by writing them.
WARM_RELEASES = ("0.27.1", "0.25.0")
WARM_COMMANDS = [["patches", "--vllm", release, "--offline"] for release in WARM_RELEASES] + [
    ["serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "gb10", "--vllm", "0.27.1"]]


class Session:
    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="hostile-corpus-"))
        self.tree = SessionTree(self.base)
        self.http = None
        self.forks = None
        try:
            self.tree.build()
            self._write_inputs()
            self.tree.give_to_nobody()
            self.forks = ForkServer(self.tree.repo, self.tree.case)
            self._warm_up()
            self.tree.freeze()
            self.http = subprocess.Popen([sys.executable, "-m", "tests.hostile.server"], cwd=REPO_ROOT,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert self.http.stdout is not None
            self.port = int(self.http.stdout.readline())
        except BaseException:
            self.close()
            raise

    def fields(self, case_id: str) -> dict:
        return {"case": str(self.tree.case), "repo": str(self.tree.repo),
                "work": str(self.tree.case / "work"), "server": f"http://127.0.0.1:{self.port}",
                "id": case_id}

    def _write_inputs(self) -> None:
        from tests.test_published import write_report

        work = self.tree.case / "work"
        for name, source in INPUTS.items():
            shutil.copy2(source, work / name)
        write_report(work, True, "report.json")
        write_report(work, False, "report-failed.json")

    def _warm_up(self) -> None:
        assert self.forks is not None
        capture = self.tree.capture
        for argv in WARM_COMMANDS:
            answer = self.forks.run({
                "entry": "build", "argv": argv,
                "env": base_env(self.tree, {}), "cwd": str(self.tree.repo),
                "stdout": str(capture / "stdout"), "stderr": str(capture / "stderr"),
                "timeout": 120, "sigint_after": None, "user": "nobody", "memory": ADDRESS_SPACE})
            assert answer["status"] == 0, (answer, (capture / "stderr").read_text()[-2000:])

    def close(self) -> None:
        for process in (self.http,):
            if process is not None and process.stdin:
                process.stdin.close()
                process.wait(timeout=30)
        if self.forks is not None:
            self.forks.close()
        self.tree.close()
