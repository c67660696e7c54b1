"""`build.py patch-headers`: write each source diff's header from the manifest."""
from __future__ import annotations

from forge import REPO_ROOT
from forge.patching import headers, journal
from forge.patching.series import load_series

# A killed `patch-headers` run leaves this; the next one finishes it before reading the series.
HEADERS_JOURNAL = REPO_ROOT / "build" / "patch-work" / ".patch-headers.json"


def cmd_patch_headers(args) -> int:
    journal.replay(HEADERS_JOURNAL)
    series = load_series(check_index=False)    # provenance only: no package-index facts needed
    if args.check:
        stale = headers.stale_files(series)
        for _, f, _ in stale:
            print(f"{f.absolute}: the header is not what {series.path.name} generates; "
                  f"run `{headers.COMMAND}`")
        if not stale:
            print(f"every diff header is what {series.path.name} generates")
        return 1 if stale else 0
    written = journal.write_all(HEADERS_JOURNAL, headers.header_writes(series))
    for path in written:
        print(f"wrote {path}")
    if not written:
        print("every diff header is already current")
    return 0

