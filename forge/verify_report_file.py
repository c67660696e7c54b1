"""A verify report (verify/report.py write_report, as verify/mtp_smoke.py calls it) read back as a
typed model (forge.typed), for `build.py publish`: the fields publish reads are typed, each check
is one (name, status of the vocabulary, detail, gating), and every other field the run wrote (its
context: the recipe, the shape, the log's facts) is JSON whose numbers are finite. A report the
model refuses is refused in one line naming the file and the field, before anything is recorded.

Apart from forge.verify_report so that verify's scripts, which import that, do not import pydantic
with it."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from forge import files
from forge.data_formats import load_json
from forge.errors import ForgeError
from forge.typed import STRICT, Name, Text, loaded, one_of
from forge.verify_report import STATUSES, Check

# A run writes a few dozen checks; a report of thousands is no report of this project's.
MAX_CHECKS = 1_000


class CheckEntry(BaseModel):
    model_config = STRICT
    name: Name
    status: Annotated[str, one_of(STATUSES)]
    detail: Text
    gating: bool = True          # reports written before the field gate every check

    def check(self) -> Check:
        return Check(self.name, self.status, self.detail, self.gating)


class VerifyReport(BaseModel):
    # The context a run adds (write_report's **context) is open: extra keys are kept, as JSON.
    model_config = ConfigDict(**{**STRICT, "extra": "allow"})
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)

    passed: bool
    checks: Annotated[list[CheckEntry], Field(min_length=1, max_length=MAX_CHECKS)]
    versions: Annotated[dict[Name, Name], Field(max_length=64)] | None = None   # reports before the field
    target: Name | None = None
    vllm: Name | None = None
    image_digest: Name | None = None
    device: Name = "cuda"
    recipe: Name | None = None
    report_url: Name | None = None
    checked_at: Name | None = None
    summary: Annotated[dict[Name, JsonValue], Field(max_length=1_000)] | None = None


def read_report(path: Path) -> VerifyReport:
    """The report at `path`, or one ForgeError naming the file and the field."""
    try:
        return loaded(VerifyReport, load_json(path, files.REPORT), path)
    except ForgeError as exc:
        raise ForgeError(f"{exc}; not a verify report as verify/report.py writes one: nothing recorded, "
                         "moving tag not moved") from None
