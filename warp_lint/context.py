"""One file's analysis: the parsed regions, the shared providers, and the reports rules make.

Providers are computed once, on first use, and shared by every rule. Positions are the expensive
part of LibCST metadata (a code generation of everything they cover), so rules report nodes, and
positions are resolved only for files that have something to report, and there only for the
top-level statements that hold a reported node (see ``Positions``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Callable

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from warp_lint import versions
from warp_lint.cst_walk import walk
from warp_lint.finding import Edit, Finding, Fix, Position
from warp_lint.kernel_facts import KernelFacts, kernel_facts
from warp_lint.kernels import KernelIndex, build_kernel_index
from warp_lint.module_options import ModuleOptions, build_module_options
from warp_lint.names import WarpNames
from warp_lint.project.summary import WARP_DECORATOR_KINDS, FileSummary
from warp_lint.source import SourceFile
from warp_lint.triage import Triage

if TYPE_CHECKING:
    from warp_lint.rule import Rule


@dataclasses.dataclass
class Report:
    rule: type[Rule]
    node: cst.CSTNode
    message: str
    fix: Any  # a callable (context) -> Fix | None, built lazily once positions exist, or None
    affected_versions: str
    data: dict[str, Any]
    end_node: cst.CSTNode | None = None


class Positions:
    """``positions[node]``: the node's ``CodeRange`` in the file (1-based lines, 0-based columns).

    LibCST's ``PositionProvider`` generates the code of the whole module to find every node's
    range, which cost more than parsing it (measured: about 40% of a cold run over warp-lang's own
    code, where most files have a finding). Here the provider runs on a module holding just the
    top-level statement that contains the node, and the ranges are moved down by the line that
    statement starts on (``Triage.statement_lines``) and mapped to the file's lines
    (``Triage.line_map``). That is exact because each top-level statement of the synthetic module
    starts at column 0 of its line with no leading lines: its code is laid out identically in
    both modules. When that does not hold (a whole-file parse, a module not built by the triage)
    the provider runs on the whole module, as LibCST would.
    """

    def __init__(self, module: cst.Module, triage: Triage):
        self._module = module
        self._triage = triage
        starts = triage.statement_lines
        usable = starts is not None and len(starts) == len(module.body) and not module.header and not any(
            statement.leading_lines for statement in module.body
        )
        self._starts = starts if usable else None
        self._owner: dict[cst.CSTNode, int] | None = None  # node -> index of its top-level statement
        self._statement_ranges: dict[int, Any] = {}  # index -> that statement's ranges
        self._whole: Any = None  # the ranges of the whole module, when it came to that

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        ranges, shift = self._ranges_holding(node)
        code_range = ranges[node]
        file_line = self._triage.file_line
        return CodeRange(CodePosition(file_line(code_range.start.line + shift), code_range.start.column),
                         CodePosition(file_line(code_range.end.line + shift), code_range.end.column))

    def _ranges_holding(self, node: cst.CSTNode) -> tuple[Any, int]:
        if self._starts is not None:
            if self._owner is None:
                self._owner = {n: index for index, statement in enumerate(self._module.body) for n in walk(statement)}
            index = self._owner.get(node)  # None for whitespace and punctuation, which walk() skips
            if index is not None:
                ranges = self._statement_ranges.get(index)
                if ranges is None:
                    alone = self._module.with_changes(body=[self._module.body[index]], header=(), footer=())
                    ranges = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
                    self._statement_ranges[index] = ranges
                return ranges, self._starts[index] - 1
        if self._whole is None:
            self._whole = MetadataWrapper(self._module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self._whole, 0


class FileContext:
    def __init__(self, source: SourceFile, triage: Triage, module: cst.Module, target_version: str,
                 imported_helpers: dict | None = None):
        self.source = source
        self.path = source.path
        self.triage = triage
        self.module = module
        self.target_version = target_version
        self.imported_helpers = imported_helpers  # finds other files' @wp.func helpers by the code calling them
        self.reports: list[Report] = []

    # -- shared providers -----------------------------------------------------------------
    @functools.cached_property
    def names(self) -> WarpNames:
        return WarpNames.from_triage(self.triage)

    @functools.cached_property
    def options(self) -> ModuleOptions:
        return build_module_options(self.module, self.names)

    @functools.cached_property
    def kernels(self) -> KernelIndex:
        return build_kernel_index(self.module, self.names, self.options, self.imported_helpers, self.triage.captured,
                                  self.triage.held_options)

    def kernel_facts(self, summary: FileSummary, within: Callable[[str], bool] | None = None
                     ) -> dict[str, KernelFacts]:
        """Each kernel's and func's facts, by its qualified name in the file's summary.

        The kernel model and the summary list the file's Warp definitions in source order, so the
        n-th model named `f` is the n-th definition named `f`. ``within``: the summary keys of the
        definitions this module holds, when it holds only some of the file's (an incremental
        analysis).
        """
        defined: dict[str, list[str]] = {}
        for key, function in sorted(summary.warp_defs.items(), key=lambda item: item[1].first_line):
            if within is not None and not within(key):
                continue
            if any(d.qualified in WARP_DECORATOR_KINDS for d in function.decorators):
                defined.setdefault(function.name, []).append(key)
        seen: dict[str, int] = {}
        facts: dict[str, KernelFacts] = {}
        for function in self.kernels.functions:
            number = seen.get(function.name, 0)
            seen[function.name] = number + 1
            keys = defined.get(function.name, [])
            if number < len(keys):
                facts[keys[number]] = kernel_facts(function, self.kernels, self.names)
        return facts

    @functools.cached_property
    def positions(self) -> Positions:
        return Positions(self.module, self.triage)

    # -- reporting ------------------------------------------------------------------------
    def report(self, rule: type[Rule], node: cst.CSTNode, message: str, *, fix=None,
               affected_versions: str | None = None, data: dict[str, Any] | None = None,
               end_node: cst.CSTNode | None = None) -> None:
        affected = rule.affected_versions if affected_versions is None else affected_versions
        if not versions.overlaps(affected, self.target_version):
            return
        self.reports.append(Report(rule, node, message, fix, affected, dict(data or {}), end_node))

    def position(self, node: cst.CSTNode) -> tuple[Position, Position]:
        code_range = self.positions[node]
        return (Position(code_range.start.line, code_range.start.column + 1),
                Position(code_range.end.line, code_range.end.column + 1))

    def replace_nodes(self, first: cst.CSTNode, last: cst.CSTNode, content: str, message: str,
                      applicability) -> Fix:
        """A fix replacing the text from ``first``'s start to ``last``'s end."""
        start, _ = self.position(first)
        _, end = self.position(last)
        return Fix(message, (Edit(start, end, content),), applicability)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def findings(self) -> list[Finding]:
        results = []
        for report in self.reports:
            start, end = self.position(report.node)
            if report.end_node is not None:
                end = self.position(report.end_node)[1]
            message = report.message
            if report.affected_versions:
                message += f" [{versions.describe(report.affected_versions)}]"
            fix = report.fix(self) if callable(report.fix) else report.fix
            data = dict(report.data)
            if report.rule.runtime_strategy:
                data.setdefault("strategy", list(report.rule.runtime_strategy))
                data.setdefault("flagged_lines", [start.line, end.line])
                if report.rule.safe_form:
                    data.setdefault("safe_form", report.rule.safe_form)
                if report.rule.singular:
                    data.setdefault("singular", report.rule.singular)
                    data.setdefault("value_dependent", True)
            results.append(Finding(
                code=report.rule.code, name=report.rule.name, message=message, path=self.path, start=start,
                end=end, severity=report.rule.severity, fix=fix, affected_versions=report.affected_versions,
                data=data,
            ))
        return results
