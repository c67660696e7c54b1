"""Several files changed as one step (a diff and the manifest that records its sha256): the new
contents go into a journal first, then each file is replaced atomically. A run killed part way
leaves the journal; the next run replays it, so the files never stay half changed (a diff whose
sha256 the manifest does not know would stop every command from loading the series)."""
from __future__ import annotations

from pathlib import Path

from forge.data_formats import load_json
from forge.files import INDEX, check_output_file, regular_or_absent, write_bytes_atomically, write_text_atomically
from forge.json_text import dump_json


def write_all(journal: Path, files: dict[Path, bytes], remove: bool = True) -> list[Path]:
    """Write `files` (in their order: put the manifest last) through `journal`. Each file is
    checked writable first: a read-only or full checkout leaves no journal to replay."""
    for path in files:
        check_output_file(path)
    # surrogateescape: any byte survives the JSON round trip, UTF-8 or not.
    entries = {str(path): data.decode("utf-8", "surrogateescape") for path, data in files.items()}
    write_text_atomically(journal, dump_json(entries, indent=1))
    return replay(journal, remove)


def replay(journal: Path, remove: bool = True) -> list[Path]:
    """Finish the writes `journal` records (none when there is no journal); return their paths.
    `remove=False` keeps the journal for a caller that removes it with more state around it."""
    if not regular_or_absent(journal, INDEX):
        return []
    from forge.patching.entries import Journal
    from forge.typed import loaded

    entries = loaded(Journal, load_json(journal, INDEX), journal).root
    written = []
    for name, text in entries.items():
        written.append(write_bytes_atomically(Path(name), text.encode("utf-8", "surrogateescape")))
    if remove:
        journal.unlink()
    return written
