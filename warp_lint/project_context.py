"""What a host rule sees: the project model's recordings, and a way to report in any file.

A host rule reads ``context.host_scopes`` (one recording per entry point, calls followed across
functions, classes and files) and reports on an event, a tape region or a location. The finding
sits where the offending statement is written, in whichever file; its related locations give the
path that leads there (the calls from the entry point, the tape region) plus what the rule adds
(the earlier read, the ``backward()``). The same statement reached by several recordings is
reported once.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterable

from warp_lint import versions
from warp_lint.finding import Finding, Related
from warp_lint.host import HostEvent, HostScope, Launch, Location, TapeRegion
from warp_lint.project.index import WarpDefinition
from warp_lint.project.model import ProjectModel
from warp_lint.project.torch_functions import TorchFunction, torch_functions

if TYPE_CHECKING:
    from warp_lint.rule import Rule


class ProjectContext:
    def __init__(self, model: ProjectModel, scopes: list[HostScope] | None = None):
        """``scopes``: the recordings the rules read, when not all of the model's (one at a time,
        so that a recording's findings can be kept while it is)."""
        self.model = model
        self.findings: list[Finding] = []
        self._reported: set[tuple[str, str, int, int]] = set()
        self._scopes = scopes
        self._torch_functions: list[TorchFunction] | None = None

    @property
    def host_scopes(self) -> list[HostScope]:
        return self.model.scopes if self._scopes is None else self._scopes

    # -- facts ----------------------------------------------------------------------------
    def definition(self, launch: Launch) -> WarpDefinition | None:
        """The kernel definition a launch names (its decorator, why its backward is off)."""
        return self.model.definition(launch.symbol) if launch.symbol is not None else None

    @property
    def torch_functions(self) -> list[TorchFunction]:
        """The project's `torch.autograd.Function` classes, with what their `forward` wraps and
        their `backward` seeds and returns."""
        if self._torch_functions is None:
            self._torch_functions = list(torch_functions(self.model.index))
        return self._torch_functions

    def struct_names(self) -> set[str]:
        return self.model.struct_names()

    @staticmethod
    def where(location: Location, relative_to: Location | None = None) -> str:
        """`line 12` in the same file as ``relative_to``, else `sim.py:12`."""
        if relative_to is not None and relative_to.path == location.path:
            return f"line {location.line}"
        return f"{os.path.basename(location.path)}:{location.line}"

    # -- reporting ------------------------------------------------------------------------
    def report(self, rule: type[Rule] | Rule, at: HostEvent | TapeRegion | Location, message: str, *,
               related: Iterable[tuple[str, Location]] = (), data: dict[str, Any] | None = None,
               affected_versions: str | None = None, end: Location | None = None) -> None:
        location = at.location if not isinstance(at, Location) else at
        marker = (rule.code, location.path, location.line, location.column)
        if marker in self._reported:
            return
        self._reported.add(marker)
        affected = rule.affected_versions if affected_versions is None else affected_versions
        if affected:
            message += f" [{versions.describe(affected)}]"
        chain = at.chain if isinstance(at, (HostEvent, TapeRegion)) else ()
        notes = [(f"called from here (`{site.callee}`)", site.location) for site in reversed(chain)]
        if isinstance(at, HostEvent) and at.region is not None and at.region.location != location:
            tape = f"`{at.region.tape}`" if at.region.tape else "the tape"
            notes.append((f"recorded on {tape} here", at.region.location))
        notes = list(related) + notes
        finding_data = dict(data or {})
        if rule.runtime_strategy:
            finding_data.setdefault("strategy", list(rule.runtime_strategy))
            finding_data.setdefault("flagged_lines", [location.line, (end or location).end_line])
        self.findings.append(Finding(
            code=rule.code, name=rule.name, message=message, path=location.path, start=location.start,
            end=(end or location).end, severity=rule.severity, affected_versions=affected, data=finding_data,
            related=tuple(Related(note, where.path, where.start, where.end) for note, where in _unique(notes)),
        ))


def _unique(notes: list[tuple[str, Location]]) -> list[tuple[str, Location]]:
    seen = set()
    kept = []
    for message, where in notes:
        if (where.path, where.line, where.column) not in seen:
            seen.add((where.path, where.line, where.column))
            kept.append((message, where))
    return kept
