"""The finding model: the one object every output format, the fixer and the editor read."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from warp_lint.links import documentation_page


def rule_url(code: str) -> str | None:
    """The rule's page under the documentation the package metadata names (the pages are generated
    from the rules themselves: ``warp-lint rule CODE`` prints the same text), or None where it names none."""
    return documentation_page(f"rules/{code}.md")


@dataclasses.dataclass(frozen=True, order=True)
class Position:
    """A place in a source file: 1-based line, 1-based column counted in code points."""

    line: int
    column: int


class Applicability(str, enum.Enum):
    """Whether a fix keeps the program's meaning (safe) or may change it (unsafe)."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace the text between two positions (end exclusive) with ``content``."""

    start: Position
    end: Position
    content: str


@dataclasses.dataclass(frozen=True)
class Fix:
    message: str
    edits: tuple[Edit, ...]
    applicability: Applicability = Applicability.SAFE


@dataclasses.dataclass(frozen=True)
class Related:
    """Another place that explains a finding: the tape that records it, the earlier read, a call."""

    message: str
    path: str
    start: Position
    end: Position


@dataclasses.dataclass
class Confirmation:
    """A runtime verdict on a finding, always with the numbers that decided it."""

    status: str  # confirmed | cleared | inconclusive | not_exercised
    reason: str
    warp_version: str | None = None
    device: str | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    evidence: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Finding:
    """One reported problem at one place.

    ``affected_versions`` is the PEP 440 specifier of Warp releases in which this particular
    occurrence is a hazard (a rule may narrow its default for some forms of the pattern).
    ``data`` carries what the runtime checker needs to reproduce the finding (kernel name,
    arrays read and written); it is plain JSON-able data.
    """

    code: str
    name: str
    message: str
    path: str
    start: Position
    end: Position
    severity: str = "error"
    fix: Fix | None = None
    affected_versions: str = ""
    noqa_row: int | None = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    confirmation: Confirmation | None = None
    related: tuple[Related, ...] = ()

    @property
    def url(self) -> str | None:
        return rule_url(self.code)

    def sort_key(self) -> tuple:
        return (self.path, self.start.line, self.start.column, self.code, self.message)


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    """Lossless plain-data form (the cache's and the runtime child's wire format)."""
    return dataclasses.asdict(finding)


def finding_from_dict(data: dict[str, Any]) -> Finding:
    fix = data.get("fix")
    if fix is not None:
        fix = Fix(
            fix["message"],
            tuple(Edit(Position(**e["start"]), Position(**e["end"]), e["content"]) for e in fix["edits"]),
            Applicability(fix["applicability"]),
        )
    confirmation = data.get("confirmation")
    related = tuple(Related(r["message"], r["path"], Position(**r["start"]), Position(**r["end"]))
                    for r in data.get("related", ()))
    return Finding(
        code=data["code"], name=data["name"], message=data["message"], path=data["path"],
        start=Position(**data["start"]), end=Position(**data["end"]), severity=data["severity"], fix=fix,
        affected_versions=data["affected_versions"], noqa_row=data["noqa_row"], data=data["data"],
        confirmation=Confirmation(**confirmation) if confirmation else None, related=related,
    )
