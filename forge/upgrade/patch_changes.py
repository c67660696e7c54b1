"""The patch series across an upgrade: each patch's status on both releases (real sdists, as an
image for the target sees them: forge.patching.status.release_status with its MoE device) and
what that means for the image: a patch retires (upstream carries it), drops (no longer needed),
is new, is still carried, conflicts (refused until a refreshed patch exists) or is needed but not
carried (the new release has the bug and the series no patch that fits it: the upgrade loses the
fix until a refreshed patch exists)."""
from __future__ import annotations

from dataclasses import dataclass

from forge.patching.series import Series
from forge.patching.status import release_status
from forge.patching.vocabulary import Status

REFRESH_COMMAND = "python3 build.py refresh-patch {id} --vllm {version}"
# What happened, from the statuses on the two releases.
RETIRES, DROPS, NEW, CARRIED, UNCHANGED = "retires", "drops", "new", "carried", "unchanged"
CONFLICT = Status.CONFLICT.value  # the new release's status names the change
NOT_CARRIED = Status.NEEDED_NOT_CARRIED.value
BLOCKING = (CONFLICT, NOT_CARRIED)


@dataclass(frozen=True)
class PatchChange:
    id: str
    kind: str
    change: str
    before: str
    after: str
    detail: str                     # the new release's status detail
    upstream: dict                  # series.yaml upstream: issue, pr, fixed_in (those stated)
    candidate: bool

    @property
    def upstream_text(self) -> str:
        parts = []
        if self.upstream.get("pr"):
            parts.append(f"vLLM PR #{self.upstream['pr']}")
        if self.upstream.get("issue"):
            parts.append(f"issue #{self.upstream['issue']}")
        if self.upstream.get("fixed_in"):
            parts.append(f"fixed in {self.upstream['fixed_in']}")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "change": self.change, "from": self.before,
                "to": self.after, "detail": self.detail, "upstream": self.upstream,
                "candidate": self.candidate}


def classify(before: str, after: str) -> str:
    if after in BLOCKING:
        return str(after)
    if before == Status.APPLIES:
        return {Status.APPLIES: CARRIED, Status.ALREADY_UPSTREAM: RETIRES}.get(Status(after), DROPS)
    return NEW if after == Status.APPLIES else UNCHANGED


def patch_changes(before: str, after: str, series: Series, moe_device: str) -> list[PatchChange]:
    old = {s.id: s for s in release_status(before, series=series, moe_device=moe_device)}
    new = release_status(after, series=series, moe_device=moe_device)
    changes = []
    for status in new:
        patch = series.get(status.id)
        upstream = {k: v for k, v in (patch.upstream or {}).items() if v is not None}
        changes.append(PatchChange(status.id, status.kind, classify(old[status.id].status, status.status),
                                   old[status.id].status, status.status, status.detail, upstream,
                                   patch.candidate))
    return changes


def refresh_commands(changes: list[PatchChange], version: str) -> list[str]:
    return [REFRESH_COMMAND.format(id=c.id, version=version) for c in changes if c.change in BLOCKING]
