"""Progress for long work (sdist downloads, extraction, image pushes, tuning sweeps), on stderr.

On a terminal: one line, rewritten in place at most every REDRAW_S seconds, ended by a line that
says what was done and how long it took. Not on a terminal (pipes, files, tests capturing stderr):
nothing, so a command's stderr is its own messages alone (a refusal stays its one `error:` line,
whether or not the release had to be downloaded first). $VLLM_FORGE_PROGRESS=lines asks for a start
and an end line there instead, for logs (CI). Output meant for programs (stdout) is never touched.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from forge.errors import ForgeError
from forge.untrusted import visible, visible_lines

REDRAW_S = 0.1
CLEAR_LINE = "\r\x1b[K"
MODE_ENV = "VLLM_FORGE_PROGRESS"

Item = TypeVar("Item")


def _size(count: float) -> str:
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("kB", "MB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    return f"{count / 1000:.1f} GB"


def _amount(count: float, unit: str) -> str:
    return _size(count) if unit == "bytes" else f"{count:.0f} {unit}"


class Progress:
    """One piece of long work: `what` (e.g. "downloading vLLM 0.25.0 sdist"), counted in `unit`
    ("bytes" shows kB/MB/GB) up to `total` when it is known. Use as a context manager; an exception
    ends the line with "failed" and lets the exception through."""

    def __init__(self, what: str, total: float | None = None, unit: str = "bytes", stream=None):
        # visible: what names a release or an image tag, a detail may quote a server's words
        self.what, self.total, self.unit = visible(what), total, unit
        self.stream = stream or sys.stderr
        self.live = _is_terminal(self.stream)
        self.logged = not self.live and _lines_asked()
        self.done = 0.0
        self.detail = ""
        self._started = time.monotonic()
        self._drawn_at = float("-inf")  # the first update is always drawn

    def start(self) -> Progress:
        global _live
        self._started = time.monotonic()
        self._write(self.what if self.live else f"{self.what} ...\n")
        if self.live:
            _live = self
        return self

    def __enter__(self) -> Progress:
        return self.start()

    def __exit__(self, kind, error, trace) -> None:
        # GeneratorExit: a loop over track() that stopped early (break) is not a failure.
        self.finish("done" if kind is None else "stopped" if kind is GeneratorExit else "failed")

    def advance(self, count: float = 1) -> None:
        self.update(self.done + count)

    def update(self, done: float, total: float | None = None, detail: str | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        if detail is not None:
            self.detail = visible(detail)
        now = time.monotonic()
        if self.live and now - self._drawn_at >= REDRAW_S:
            self._drawn_at = now
            self.redraw()

    def redraw(self) -> None:
        self._write(f"{CLEAR_LINE}{self.what}: {self._figures()}")

    def finish(self, outcome: str) -> None:
        global _live
        if _live is self:
            _live = None
        elapsed = time.monotonic() - self._started
        line = f"{self.what}: {outcome}, {self._figures(final=True)} in {elapsed:.1f} s\n"
        self._write(CLEAR_LINE + line if self.live else line)

    def _figures(self, final: bool = False) -> str:
        text = _amount(self.done, self.unit)
        if self.total and not (final and self.done == self.total):
            counted = _amount(self.total, self.unit)
            if self.unit != "bytes":  # "2 of 3 files", not "2 files of 3 files"
                text = f"{self.done:.0f}"
            text += f" of {counted} ({100 * self.done / self.total:.0f}%)"
        return f"{text}, {self.detail}" if self.detail else text

    def _write(self, text: str) -> None:
        if not (self.live or self.logged):
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr must not stop the work it describes


_live: Progress | None = None   # the line being rewritten now, if any: say() writes above it


def say(text: str) -> None:
    """Print `text` on stdout (results worth keeping, e.g. a sweep's best config per step) without
    garbling a progress line on the terminal: that line is cleared first and redrawn after."""
    live = _live
    if live:
        live._write(CLEAR_LINE)
    print(visible_lines(text), flush=True)
    if live:
        live.redraw()


def _lines_asked() -> bool:
    """$VLLM_FORGE_PROGRESS=lines: a start and an end line where stderr is not a terminal."""
    mode = os.environ.get(MODE_ENV, "").strip()
    if mode not in ("", "auto", "lines"):
        raise ForgeError(f"${MODE_ENV}: must be `lines` (a start and an end line when stderr is "
                         f"not a terminal) or `auto` (the default: nothing there); got {mode!r}")
    return mode == "lines"


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def track(items: Iterable[Item], what: str, unit: str = "steps", total: int | None = None
          ) -> Iterator[Item]:
    """Yield `items`, counting each one finished (e.g. a tuning sweep over token counts)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(what, total=total, unit=unit) as progress:
        for item in items:
            yield item
            progress.advance()


class PushProgress(Progress):
    """An image push from the engine's push stream: bytes of every layer summed into one line
    (layers that the registry already holds or mounts count as done, without bytes). Fed every
    message; it starts at the first and ends at the digest (`aux`) or an `error` message."""

    def __init__(self, tag: str, stream=None):
        super().__init__(f"pushing {tag}", unit="bytes", stream=stream)
        self.layers: dict[str, tuple[int, int]] = {}   # layer id -> (bytes sent, layer size)
        self.finished: set[str] = set()
        self.state = "new"

    def feed(self, chunk: dict) -> None:
        """One decoded message of `client.api.push(..., stream=True, decode=True)`."""
        if self.state == "new":
            self.state = "running"
            self.start()
        if self.state != "running":
            return
        if "error" in chunk or chunk.get("aux", {}).get("Digest"):
            self.state = "ended"
            self.finish("failed" if "error" in chunk else "done")
        elif chunk.get("id") and chunk.get("status"):
            self._layer(chunk["id"], str(chunk["status"]), chunk.get("progressDetail") or {})

    def _layer(self, layer: str, status: str, detail: dict) -> None:
        sent, size = self.layers.get(layer, (0, 0))
        if status == "Pushing" and detail.get("total"):
            sent, size = int(detail.get("current", 0)), int(detail["total"])
        elif status in ("Pushed", "Layer already exists") or status.startswith("Mounted"):
            sent = size
            self.finished.add(layer)
        self.layers[layer] = (sent, size)
        self.update(sum(s for s, _ in self.layers.values()),
                    total=sum(z for _, z in self.layers.values()) or None,
                    detail=f"{len(self.finished)} of {len(self.layers)} layers")
