"""argparse types the verify scripts share: a bad value is a usage error naming the flag, in one
line (forge.commands.cli.OneLineParser), before anything runs or is written."""
from __future__ import annotations

import argparse
from urllib.parse import urlsplit

# The largest value of each kind of flag: far past any real run, and small enough for what the
# value reaches (a socket's timeout of 10^10 s does not fit the platform's time_t; --burst
# 10^9 would be a billion queued requests).
MOST_SECONDS = 7 * 24 * 3600          # a week
MOST_COUNT = 1_000_000
MOST_BURST = 100_000


def _in_range(text: str, most: int, unit: str = "") -> int:
    """A whole number of `unit`s from 1 to `most`, as argparse types report it."""
    of_units, one, units = (f" of {unit}s", f" {unit}", f" {unit}s") if unit else ("", "", "")
    try:
        value = int(text) if len(text) <= 40 else None   # int() of 5000 digits raises
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"not a whole number{of_units}: {text[:60]!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1{one} or more (got {value})")
    if value > most:
        raise argparse.ArgumentTypeError(f"must be at most {most}{units} (got {value})")
    return value


def positive_count(text: str) -> int:
    return _in_range(text, MOST_COUNT)


def burst_count(text: str) -> int:
    """bench --burst: requests, each a future and a result kept until the burst ends."""
    return _in_range(text, MOST_BURST)


def positive_seconds(text: str) -> int:
    """A timeout of whole seconds, 1 to a week (requests refuses 0 and below; so would the run)."""
    return _in_range(text, MOST_SECONDS, "second")


def endpoint_url(text: str) -> str:
    """--endpoint as argparse types check it: an http(s) URL with a host (and a port that is a
    number), so a typo is a usage error naming the flag, not a request that fails later."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a URL ({exc}): {text!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http:// or https:// URL with a host: {text!r}")
    return text
