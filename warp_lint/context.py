"""One file's analysis: the parsed regions, the shared providers, and the reports rules make.

Providers are computed once, on first use, and shared by every rule. Positions are the expensive
part of LibCST metadata, so rules report nodes and positions are resolved only for files that have
something to report.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from warp_lint import versions
from warp_lint.finding import Edit, Finding, Fix, Position
from warp_lint.host import HostScope, build_host_scopes
from warp_lint.kernels import KernelIndex, build_kernel_index
from warp_lint.module_options import ModuleOptions, build_module_options
from warp_lint.names import WarpNames
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


class FileContext:
    def __init__(self, source: SourceFile, triage: Triage, module: cst.Module, target_version: str):
        self.source = source
        self.path = source.path
        self.triage = triage
        self.module = module
        self.target_version = target_version
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
        return build_kernel_index(self.module, self.names, self.options)

    @functools.cached_property
    def host_scopes(self) -> list[HostScope]:
        return build_host_scopes(self.module, self.names, self.kernels)

    @functools.cached_property
    def positions(self):
        return MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)

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
            results.append(Finding(
                code=report.rule.code, name=report.rule.name, message=message, path=self.path, start=start,
                end=end, severity=report.rule.severity, fix=fix, affected_versions=report.affected_versions,
                data=data,
            ))
        return results
