"""Speculative-decoding counters and the figures derived from them, over a measured window.

Sources: Prometheus text from a server's /metrics, or the snapshot of `LLM.get_metrics()` taken
in-process (names without `_total`; the per-position counter is a Vector). Figures are always a
delta between two readings: a server's lifetime totals include warm-up and other users' traffic.

Every reading and every window is checked where it is made (SpecCounters refuses to exist
otherwise): each counter a finite, non-negative number, no counter going down between two
readings, no more tokens accepted than drafted, and no draft position accepted more often than
there were drafts. A server (or a proxy in front of it) can send anything; figures derived from
counters that cannot be true would pass the gate at 1666% acceptance, or crash it on NaN.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# One Prometheus exposition sample: name{labels} value [timestamp]
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+"
                    r"(?P<value>\S+)(?:\s+\S+)?$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# The most draft positions a reading may name. vLLM labels the per-position counter 0 ..
# num_speculative_tokens - 1 (SpecDecodingProm in vllm/v1/spec_decode/metrics.py), and a drafter
# proposes a handful of tokens a step; a label beyond this is refused, not made into a vector
# of that many zeros (position="100000000" would be 100 million of them).
MAX_POSITIONS = 64


class MetricsError(ValueError):
    pass


@dataclass(frozen=True)
class SpecCounters:
    drafts: float = 0
    draft_tokens: float = 0
    accepted: float = 0
    accepted_per_position: tuple = ()

    def __post_init__(self):
        named = [(DRAFTS, self.drafts), (DRAFT_TOKENS, self.draft_tokens), (ACCEPTED, self.accepted)]
        if not isinstance(self.accepted_per_position, (tuple, list)):
            raise MetricsError(f"{ACCEPTED_PER_POS}: not a list of per-position counts "
                               f"({self.accepted_per_position!r})")
        if len(self.accepted_per_position) > MAX_POSITIONS:
            raise MetricsError(f"{ACCEPTED_PER_POS}: {len(self.accepted_per_position)} draft "
                               f"positions; at most {MAX_POSITIONS} are read")
        named += [(f"{ACCEPTED_PER_POS}{{position={i}}}", v)
                  for i, v in enumerate(self.accepted_per_position)]
        for name, value in named:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise MetricsError(f"counter {name} is {value!r}, not a number")
            if not math.isfinite(value) or value < 0:
                raise MetricsError(f"counter {name} is {value!r}: a counter is a finite number, "
                                   "0 or more")
        if self.accepted > self.draft_tokens:
            raise MetricsError(f"{self.accepted:g} tokens accepted ({ACCEPTED}) of only "
                               f"{self.draft_tokens:g} drafted ({DRAFT_TOKENS}): more accepted than "
                               "drafted cannot be true")
        for i, count in enumerate(self.accepted_per_position):
            if count > self.drafts:
                raise MetricsError(f"draft position {i} accepted {count:g} times in only "
                                   f"{self.drafts:g} drafts ({ACCEPTED_PER_POS} vs {DRAFTS}): "
                                   "a position is accepted at most once per draft")

    def __sub__(self, earlier: SpecCounters) -> SpecCounters:
        positions = max(len(self.accepted_per_position), len(earlier.accepted_per_position))
        mine = _pad(self.accepted_per_position, positions)
        theirs = _pad(earlier.accepted_per_position, positions)
        readings = [(DRAFTS, earlier.drafts, self.drafts),
                    (DRAFT_TOKENS, earlier.draft_tokens, self.draft_tokens),
                    (ACCEPTED, earlier.accepted, self.accepted)]
        readings += [(f"{ACCEPTED_PER_POS}{{position={i}}}", b, a)
                     for i, (a, b) in enumerate(zip(mine, theirs))]
        for name, before, after in readings:
            if after < before:
                raise MetricsError(f"counter {name} went down from {before:g} to {after:g} "
                                   "between the two readings (the server restarted during the "
                                   "window?)")
        return SpecCounters(self.drafts - earlier.drafts, self.draft_tokens - earlier.draft_tokens,
                            self.accepted - earlier.accepted,
                            tuple(a - b for a, b in zip(mine, theirs)))

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        # One token from the target per step, plus the accepted drafts.
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position_rates(self) -> list[float] | None:
        if not self.drafts:
            return None
        return [count / self.drafts for count in self.accepted_per_position]

    def summary(self) -> dict:
        return {**asdict(self), "accepted_per_position": list(self.accepted_per_position),
                "acceptance_rate": self.acceptance_rate,
                "mean_acceptance_length": self.mean_acceptance_length,
                "per_position_rates": self.per_position_rates}


def _pad(values: tuple, length: int) -> tuple:
    return tuple(values) + (0,) * (length - len(values))


def parse_prometheus(text: str) -> dict[str, list[tuple[dict, float]]]:
    """name -> [(labels, value)] for every sample in Prometheus text exposition format."""
    samples: dict[str, list[tuple[dict, float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            raise MetricsError(f"not a Prometheus sample line: {line[:80]!r}")
        labels = dict(LABEL.findall(match["labels"] or ""))
        try:
            value = float(match["value"])
        except ValueError:
            raise MetricsError(f"not a sample value: {line[:80]!r}") from None
        samples.setdefault(match["name"], []).append((labels, value))
    return samples


def counters_from_prometheus(text: str) -> SpecCounters:
    """Sum each spec-decode counter over label sets (model, engine) into one reading.

    A missing counter is an error, not a zero: vLLM registers them only for a server started with
    a speculative config (SpecDecodingProm in vllm/v1/spec_decode/metrics.py), so their absence
    says the drafter is not configured, not that it proposed nothing.
    """
    samples = parse_prometheus(text)
    missing = [name + "_total" for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED)
               if name + "_total" not in samples]
    if missing:
        raise MetricsError(f"no {', '.join(missing)} in the metrics (a server started without "
                           "--speculative-config, or not a vLLM server)")

    # Each sample on its own: a negative one summed with others would hide inside the total, and
    # a label set named twice (a sample repeated by a proxy or a broken exporter) would count twice.
    for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POS):
        seen: set[tuple] = set()
        for labels, value in samples.get(name + "_total", []):
            where = f"{name}_total{{{_labels_text(labels)}}}"
            if not math.isfinite(value) or value < 0:
                raise MetricsError(f"{where} is {value!r}: a counter is a finite number, 0 or more")
            key = tuple(sorted(labels.items()))
            if key in seen:
                raise MetricsError(f"{where}: the same sample appears twice in one reading")
            seen.add(key)

    def total(name: str) -> float:
        return sum(value for _, value in samples.get(name + "_total", []))

    per_position: dict[int, float] = {}
    for labels, value in samples.get(ACCEPTED_PER_POS + "_total", []):
        position = _position(labels)
        per_position[position] = per_position.get(position, 0) + value
    ordered = tuple(per_position.get(i, 0) for i in range(max(per_position, default=-1) + 1))
    return SpecCounters(total(DRAFTS), total(DRAFT_TOKENS), total(ACCEPTED), ordered)


def _labels_text(labels: dict) -> str:
    return ",".join(f"{key}={value!r}" for key, value in labels.items())


def _position(labels: dict) -> int:
    """The draft position a per-position sample counts (vLLM labels it position="0", "1", ...)."""
    name = ACCEPTED_PER_POS + "_total"
    if "position" not in labels:
        raise MetricsError(f"{name}: a sample has no position label")
    text = labels["position"]
    if not re.fullmatch(r"[0-9]+", text):
        raise MetricsError(f"{name}: position={text!r} is not a draft position (0, 1, ...)")
    if len(text) > 6 or int(text) >= MAX_POSITIONS:     # int() of 5000 digits raises
        raise MetricsError(f"{name}: position={text[:20]!r}{'...' if len(text) > 20 else ''} "
                           f"is beyond the {MAX_POSITIONS} draft positions read (0 to "
                           f"{MAX_POSITIONS - 1})")
    return int(text)


def counters_from_snapshot(snapshot: dict) -> SpecCounters:
    """From {name: value or [values]} as verify's engine worker records `LLM.get_metrics()`."""
    if not isinstance(snapshot, dict):
        raise MetricsError(f"a metrics snapshot is a mapping of counters, not {snapshot!r}")
    return SpecCounters(snapshot.get(DRAFTS, 0), snapshot.get(DRAFT_TOKENS, 0),
                        snapshot.get(ACCEPTED, 0), _as_tuple(snapshot.get(ACCEPTED_PER_POS, ())))


def _as_tuple(values):
    """A list as the tuple SpecCounters holds; anything else as it is, for it to refuse."""
    return tuple(values) if isinstance(values, list) else values
