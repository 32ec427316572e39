"""Helpers for testing rules, ours and anyone's: lint a snippet, check a rule's examples."""

from __future__ import annotations

import dataclasses
import textwrap

from warp_lint.engine import FileSettings, analyse_source
from warp_lint.finding import Finding
from warp_lint.host import HostScope
from warp_lint.fixer import applicable, apply_fixes
from warp_lint.registry import all_rules
from warp_lint.rule import Rule
from warp_lint.source import decode_source
from warp_lint.workspace import Workspace, lint_source


def snippet(code: str) -> str:
    """A triple-quoted example as the file it stands for: dedented, first line on line 1."""
    return textwrap.dedent(code).lstrip("\n")


def lint_code(code: str, *, select: list[str] | None = None, target: str = "", path: str = "example.py",
              whole_file: bool = False, report_unused_noqa: bool = False) -> list[Finding]:
    """Lint ``code`` (dedented) as if it were the file ``path``; every rule unless ``select``."""
    source = decode_source(path, snippet(code).encode("utf-8"))
    codes = tuple(select) if select else tuple(all_rules())
    result = lint_source(source, FileSettings(codes, target, report_unused_noqa, whole_file))
    return result.findings


def recordings(code: str, *, path: str = "example.py") -> list[HostScope]:
    """Every function of ``code`` (dedented) recorded on its own, every call followed: the module's
    own statements first, then the functions in source order. For tests of the host model."""
    from warp_lint.project.index import Symbol

    source = decode_source(path, snippet(code).encode("utf-8"))
    analysis = analyse_source(source, FileSettings((), ""))
    workspace = Workspace.alone(analysis, FileSettings((), ""))
    info = workspace.index.by_path[path]
    functions = sorted(analysis.summary.functions.values(), key=lambda f: (not f.is_module, f.first_line))
    return [workspace.model.record_function(Symbol("function", info.name, f.qualname, path)) for f in functions]


def fix_code(code: str, *, select: list[str] | None = None, target: str = "", unsafe: bool = False,
             report_unused_noqa: bool = False, passes: int = 10) -> str:
    """What ``--fix`` (``--unsafe-fixes`` with ``unsafe``) makes of ``code`` (dedented)."""
    text = snippet(code)
    for _ in range(passes):
        findings = applicable(lint_code(text, select=select, target=target, report_unused_noqa=report_unused_noqa),
                              unsafe)
        if not findings:
            return text
        text, _ = apply_fixes(text, findings)
    return text


def check_examples(rule: type[Rule]) -> list[str]:
    """Every problem with a rule's examples, as messages; empty when they all hold."""
    problems = []
    for number, example in enumerate(rule.VALID):
        found = [f for f in lint_code(example.code, select=[rule.code], target=example.target or "")]
        if found:
            problems.append(f"{rule.code} VALID[{number}] reported: {[f.message for f in found]}")
    for number, example in enumerate(rule.INVALID):
        found = lint_code(example.code, select=[rule.code], target=example.target or "")
        if not found:
            problems.append(f"{rule.code} INVALID[{number}] reported nothing")
            continue
        if any(f.fix is not None for f in found) and not rule.fixable():
            problems.append(f"{rule.code} INVALID[{number}] emits a fix but the rule has no fixed example")
        if example.fixed is not None:
            fixed = fix_code(example.code, select=[rule.code], target=example.target or "", unsafe=True)
            if fixed != snippet(example.fixed):
                problems.append(f"{rule.code} INVALID[{number}] fixes to:\n{fixed}")
    return problems


@dataclasses.dataclass
class ExampleCase:
    rule: type[Rule]
    kind: str
    index: int

    @property
    def id(self) -> str:
        return f"{self.rule.code}-{self.kind}-{self.index}"


def example_cases() -> list[ExampleCase]:
    cases = []
    for rule in all_rules().values():
        cases += [ExampleCase(rule, "VALID", i) for i in range(len(rule.VALID))]
        cases += [ExampleCase(rule, "INVALID", i) for i in range(len(rule.INVALID))]
    return cases
