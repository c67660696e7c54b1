"""Acceptance profiles: per-position acceptance rates of a drafter, and the mean accepted length
they give at k draft tokens. verify/bench.py projects speeds with them, `build.py roofline` the
speculative ceiling; one parser for both."""
from __future__ import annotations

from forge.errors import ForgeError

Rates = list[float] | float


def parse_rates(value: str, text: str | None = None) -> Rates:
    """'0.84/0.60/0.39' -> per-position rates; 'rate@0.87' -> one rate at every position."""
    try:
        if value.startswith("rate@"):
            rates: Rates = float(value[5:])
        else:
            rates = [float(v) for v in value.split("/")]
    except ValueError as exc:
        raise ForgeError(f"--profile {text or value!r}: rates must be numbers "
                         f"(NAME=0.84/0.6 or NAME=rate@0.87)") from exc
    values = [rates] if isinstance(rates, float) else rates
    if any(not 0 <= r <= 1 for r in values):
        raise ForgeError(f"--profile {text or value!r}: rates are fractions in [0, 1]")
    return rates


def parse_profile(text: str) -> tuple[str, Rates]:
    """'NAME=p1/p2/..' or 'NAME=rate@RATE' -> (NAME, rates)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ForgeError(f"--profile {text!r}: expected NAME=p1/p2/.. or NAME=rate@RATE")
    return name, parse_rates(value, text)


def profile_length(rates: Rates, k: int) -> float | None:
    """Mean acceptance length at k draft tokens: 1 + the first k per-position rates (a single
    rate counts at every position); None where the profile does not reach position k."""
    if isinstance(rates, (int, float)):
        return 1 + k * rates
    return 1 + sum(rates[:k]) if k <= len(rates) else None
