"""Files written whole or not at all: a temp file beside the target, then an atomic rename."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_text_atomically(path: Path | str, text: str,
                          check: Callable[[Path], object] | None = None) -> Path:
    """Replace `path` with `text`. `check(temp_path)` may raise to refuse the new content, which
    then never reaches `path` (the temp file sits in the same directory, so relative paths the
    content names resolve as they will for the real file)."""
    return write_bytes_atomically(path, text.encode(), check)


def write_bytes_atomically(path: Path | str, data: bytes,
                           check: Callable[[Path], object] | None = None) -> Path:
    """write_text_atomically for bytes (diffs are compared and hashed byte for byte)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(data)
    try:
        if check is not None:
            check(Path(tmp.name))
        os.replace(tmp.name, path)
    except BaseException:
        os.unlink(tmp.name)
        raise
    return path
