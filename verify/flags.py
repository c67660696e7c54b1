"""argparse types the verify scripts share: a bad value is a usage error naming the flag, in one
line (forge.commands.cli.OneLineParser), before anything runs or is written."""
from __future__ import annotations

import argparse
from urllib.parse import urlsplit


def _at_least_one(text: str, unit: str = "") -> int:
    """A whole number of `unit`s, 1 or more, as argparse types report it."""
    of_units, units = (f" of {unit}s", f" {unit}") if unit else ("", "")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number{of_units}: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1{units} or more (got {value})")
    return value


def positive_count(text: str) -> int:
    return _at_least_one(text)


def positive_seconds(text: str) -> int:
    """A timeout of whole seconds, 1 or more (requests refuses 0 and below; so would the run)."""
    return _at_least_one(text, "second")


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
