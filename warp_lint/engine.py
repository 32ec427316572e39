"""Lint one file: read, triage, parse the regions once, run every selected rule, suppress."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import traceback
from typing import Callable

import libcst as cst

from warp_lint import suppression
from warp_lint.context import FileContext
from warp_lint.finding import Applicability, Edit, Finding, Fix, Position
from warp_lint.incremental import AnalysisMemory
from warp_lint.kernel_facts import KernelFacts
from warp_lint.project.contexts import DEFAULT_REPORTED
from warp_lint.project.summary import FileSummary, summarize
from warp_lint.registry import EXTRA_CODES, all_rules
from warp_lint.source import SourceError, SourceFile, decode_source, split_lines
from warp_lint.triage import triage

# Bigger files are reported, not linted: a generated 10 MB module holds no hand-written kernel,
# and parsing it would stall an editor or a commit hook.
MAX_FILE_BYTES = 8 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class FileSettings:
    """Everything that decides one file's findings; picklable, and the cache key's basis."""

    rule_codes: tuple[str, ...]
    target_version: str
    report_unused_noqa: bool = False
    whole_file: bool = False  # analyse the whole file instead of the triaged regions (tests)
    report_contexts: frozenset[str] = DEFAULT_REPORTED  # the differentiation contexts whose findings are reported


@dataclasses.dataclass
class FileAnalysis:
    """One file's own share of a run: its summary for the project model, its kernels' facts, and
    what its own rules found (kernel rules, input errors), before project facts and suppressions."""

    path: str
    findings: list[Finding]
    summary: FileSummary | None = None
    facts: dict[str, KernelFacts] = dataclasses.field(default_factory=dict)
    source: SourceFile | None = None  # not cached: read again when needed
    # files whose helpers the kernel model followed -> the digest of their text then: a cached
    # analysis is stale when one of them changed
    dependencies: dict[str, str] = dataclasses.field(default_factory=dict)

    def without_source(self) -> FileAnalysis:
        return dataclasses.replace(self, source=None)


@dataclasses.dataclass
class FileResult:
    path: str
    findings: list[Finding]
    source: SourceFile | None = None
    internal_error: str | None = None
    # Kernel findings left out because their differentiation context is not reported (public,
    # forward-only, unreachable by default), and no suppression comment hides them: what
    # `--report-contexts all` would add.
    hidden_by_context: int = 0


class InternalError(Exception):
    def __init__(self, path: str, detail: str):
        super().__init__(f"internal error while linting {path}: {detail}")
        self.path = path
        self.detail = detail


def input_error(path: str, code: str, message: str, line: int = 1, column: int = 1) -> Finding:
    from warp_lint.registry import EXTRA_CODES

    position = Position(line, column)
    return Finding(code=code, name=EXTRA_CODES[code], message=message, path=path, start=position, end=position)


@functools.lru_cache(maxsize=32)
def file_rules(rule_codes: tuple[str, ...]) -> tuple[str, ...]:
    """The codes among ``rule_codes`` of rules that read one file (kernel rules)."""
    rules = all_rules()
    return tuple(code for code in rule_codes if code in rules and rules[code].level == "file")


def analyse_bytes(path: str, raw: bytes, settings: FileSettings,
                  helpers: Callable[[str, FileSummary], Callable] | None = None) -> FileAnalysis:
    """Analyse one file's bytes. Never raises for bad input; raises InternalError for a bug of ours."""
    if b"warp" not in raw:  # cheap before expensive: no Warp, nothing to find
        return FileAnalysis(path, [])
    if len(raw) > MAX_FILE_BYTES:
        return FileAnalysis(path, [input_error(path, "E902", f"file is {len(raw) // 1024 // 1024} MB, larger than the"
                                               f" {MAX_FILE_BYTES // 1024 // 1024} MB limit; not linted")])
    try:
        source = decode_source(path, raw)
    except SourceError as error:
        return FileAnalysis(path, [input_error(path, error.code, str(error), error.line, error.column)])
    return analyse_source(source, settings, helpers=helpers)


def analyse_source(source: SourceFile, settings: FileSettings, kernels: bool = True,
                   helpers: Callable[[str, FileSummary], Callable] | None = None,
                   memory: AnalysisMemory | None = None) -> FileAnalysis:
    """Triage, summarise and (with ``kernels``) run the file's own rules and digest its kernels.

    ``helpers(path, summary)`` gives a lookup of the ``@wp.func`` helpers of other files that the
    file's kernels call (its project's), so the kernel model follows calls into them; the lookup's
    ``found`` are what the analysis depends on.

    ``memory``: what earlier analyses left (an editor session, a fix's re-lint): only the top-level
    statements that changed (or whose imported helpers did) are parsed and analysed again, with
    the same result.
    """
    path = source.path
    try:
        tree = memory.trees.parse(path, source.text) if memory is not None else None
        triaged = triage(source.text, settings.whole_file, tree)
    except SyntaxError as error:
        return FileAnalysis(path, [_syntax_error(path, error)], source=source)
    except (ValueError, RecursionError, MemoryError) as error:  # NUL bytes, absurd nesting
        return FileAnalysis(path, [input_error(path, "E999", f"cannot parse: {error or type(error).__name__}")],
                            source=source)
    try:
        with _recursion_limit(ANALYSIS_RECURSION_LIMIT):
            summary = summarize(triaged.tree, source.text, triaged.warp_aliases,
                                memory.statements if memory is not None else None)
    except RecursionError:
        return FileAnalysis(path, [input_error(path, "E999", "expression nested too deeply to analyse")],
                            source=source)
    analysis = FileAnalysis(path, [], summary, source=source)
    if not kernels or not triaged.regions:
        return analysis
    if memory is not None and not settings.whole_file:
        lookup = helpers(path, summary) if helpers is not None else None
        with _recursion_limit(ANALYSIS_RECURSION_LIMIT):
            done = memory.units.analyse(source, triaged, summary, settings.target_version,
                                        file_rules(settings.rule_codes), lookup)
        if done is not None:
            analysis.findings, analysis.facts = done
            analysis.dependencies = dict(lookup.read) if lookup is not None else {}
            return analysis
    try:
        module = cst.parse_module(triaged.synthetic)
    except cst.ParserSyntaxError as error:
        analysis.findings = [input_error(
            path, "E999", f"LibCST cannot parse this file: {error.message} (Python itself can: the syntax may be"
            " newer than the installed libcst supports; upgrade libcst)", error.raw_line, error.raw_column + 1)]
        return analysis
    except RecursionError:
        analysis.findings = [input_error(path, "E999", "expression nested too deeply to analyse")]
        return analysis
    try:
        with _recursion_limit(ANALYSIS_RECURSION_LIMIT):
            lookup = helpers(path, summary) if helpers is not None else None
            context = FileContext(source, triaged, module, settings.target_version, lookup)
            for code in file_rules(settings.rule_codes):
                all_rules()[code]().check(context)
            analysis.findings = context.findings()
            analysis.facts = context.kernel_facts(summary)
            if lookup is not None:
                analysis.dependencies = dict(lookup.read)
    except RecursionError:
        analysis.findings = [input_error(path, "E999", "expression nested too deeply to analyse")]
    except Exception as error:  # a bug in warp-lint: name the file, keep the traceback
        detail = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        raise InternalError(path, detail) from error
    return analysis


def _syntax_error(path: str, error: SyntaxError) -> Finding:
    line = error.lineno or 1
    column = error.offset or 1
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return input_error(path, "E999", f"SyntaxError: {error.msg} (parsed as Python {version})", line, column)


# LibCST's code generation (positions, code_for_node) recurses a few frames per nesting level, so a
# 500-term sum needs more than Python's default 1000 frames. Pure-Python frames do not use the C
# stack on 3.11+, so a deeper limit is safe; past it the file is reported as E999.
ANALYSIS_RECURSION_LIMIT = 20_000


@contextlib.contextmanager
def _recursion_limit(limit: int):
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def finalize(source: SourceFile | None, path: str, findings: list[Finding], settings: FileSettings,
             hidden: list[Finding] = ()) -> FileResult:
    """Suppressions, unused suppressions and order: the last step of every file's findings.
    ``hidden``: the findings their differentiation context leaves out, counted where no
    suppression comment would hide them anyway."""
    if not findings and not hidden and not settings.report_unused_noqa:
        return FileResult(path, [], source)
    # Unused suppressions are reported from every directive; otherwise only the findings' lines matter.
    only_lines = None if settings.report_unused_noqa else {finding.start.line for finding in findings}
    directives = suppression.parse_directives(source.text, only_lines) if source is not None else {}
    kept = []
    for finding in findings:
        if finding.code in EXTRA_CODES or not suppression.is_suppressed(directives, finding.start.line, finding.code):
            finding.noqa_row = finding.start.line
            kept.append(finding)
    if settings.report_unused_noqa and source is not None:
        kept.extend(_unused_noqa(source, directives, set(settings.rule_codes)))
    kept.sort(key=Finding.sort_key)
    if hidden and source is not None and not directives:
        directives = suppression.parse_directives(source.text, {finding.start.line for finding in hidden})
    left_out = sum(1 for finding in hidden if not suppression.covers(directives, finding.start.line, finding.code))
    return FileResult(path, kept, source, hidden_by_context=left_out)


def _unused_noqa(source: SourceFile, directives, selected: set[str]) -> list[Finding]:
    findings = []
    lines = None
    for directive in directives.values():
        codes = directive.codes
        if codes is None:
            unused = [] if directive.used else ["(all)"]
        else:
            # A code warp-lint does not know belongs to another linter sharing the comment.
            unused = [c for c in codes if c not in directive.used and (c in selected or c.startswith("WL"))]
        if not unused:
            continue
        start, end = Position(directive.line, directive.column), Position(directive.line, directive.end_column)
        keep = [c for c in (codes or ()) if c not in unused]
        if keep:
            fix = Fix("Remove the unused codes", (Edit(start, end, f"# noqa: {', '.join(keep)}"),), Applicability.SAFE)
        else:
            lines = lines or split_lines(source.text)
            removal = _directive_removal(lines, directive)
            # A bare `# noqa` silences every linter on the line, and warp-lint only knows it silenced
            # none of its own findings: removing it is the user's call (ruff's RUF100 leaves it too).
            fix = (Fix("Remove the unused suppression", (removal,), Applicability.SAFE) if codes is not None
                   else Fix("Remove the bare `# noqa` (other linters may rely on it)", (removal,), Applicability.UNSAFE))
        what = "`# noqa`" if codes is None else f"`# noqa` for {', '.join(unused)}"
        findings.append(Finding(code="WL900", name="unused-noqa", message=f"Unused {what}: nothing is reported here",
                                path=source.path, start=start, end=end, severity="warning", fix=fix,
                                noqa_row=directive.line))
    return findings


def _directive_removal(lines: list[str], directive) -> Edit:
    """The edit that deletes a directive with the whitespace that only set it apart: the spaces before
    it at the end of a line, the line itself when it held nothing else. Text after it in the same
    comment (`# noqa: WL102 because ...`) stays a comment; a second comment after it stays as it was."""
    row = directive.line
    line = lines[row - 1].rstrip("\r\n")
    before, after = line[:directive.column - 1], line[directive.end_column - 1:]
    if after.strip():
        if after.lstrip().startswith("#"):  # `# noqa: WL102  # why`: the next comment takes its place
            return Edit(Position(row, directive.column), Position(row, len(line) - len(after.lstrip()) + 1), "")
        return Edit(Position(row, directive.column), Position(row, directive.end_column), "#")
    if before.strip():
        return Edit(Position(row, len(before.rstrip()) + 1), Position(row, len(line) + 1), "")
    if row < len(lines) or lines[row - 1] != line:  # the comment's whole line, with its line ending
        return Edit(Position(row, 1), Position(row + 1, 1), "")
    return Edit(Position(row, 1), Position(row, len(line) + 1), "")


MAX_FIX_PASSES = 10


def fix_until_stable(result: FileResult, unsafe: bool,
                     relint: Callable[[SourceFile], FileResult]) -> tuple[FileResult, int]:
    """Apply fixes and re-lint until nothing fixable is left (at most MAX_FIX_PASSES passes).

    ``relint`` lints the fixed text the way ``result`` was linted (in its project). Returns the result for the fixed text (its ``source.text`` is that text) and how
    many findings the fixes resolved. Writes nothing: the CLI writes atomically, the editor sends
    edits.
    """
    from warp_lint.fixer import applicable, apply_fixes

    source = result.source
    current = result
    total = 0
    for _ in range(MAX_FIX_PASSES):
        chosen = applicable(current.findings, unsafe)
        if not chosen:
            break
        text, count = apply_fixes(current.source.text, chosen, source.newline)
        if not count or text == current.source.text:
            break
        total += count
        fixed_source = dataclasses.replace(source, text=text)
        current = relint(fixed_source)
        current.source = fixed_source
    return current, total
