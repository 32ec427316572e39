"""Human output: ``path:line:col: CODE message``, the source line with a caret, a summary."""

from __future__ import annotations

import collections
from typing import TextIO

from warp_lint.finding import Applicability
from warp_lint.output import RunReport

MAX_SOURCE_WIDTH = 120
_STYLES = {"bold": "1", "red": "31", "cyan": "36", "dim": "2", "yellow": "33", "green": "32"}


def _paint(report: RunReport, text: str, *styles: str) -> str:
    if not report.color:
        return text
    codes = ";".join(_STYLES[s] for s in styles)
    return f"\x1b[{codes}m{text}\x1b[0m"


def _location(report: RunReport, finding) -> str:
    return (f"{_paint(report, finding.path, 'bold')}:{finding.start.line}:{finding.start.column}:"
            f" {_paint(report, finding.code, 'bold', 'red')}")


def render_concise(report: RunReport, stream: TextIO) -> None:
    for finding in report.findings:
        marker = " [*]" if finding.fix and finding.fix.applicability is Applicability.SAFE else ""
        stream.write(f"{_location(report, finding)}{marker} {finding.message}\n")
        _confirmation(report, finding, stream)
    _summary(report, stream)


def _related(report: RunReport, finding, stream: TextIO) -> None:
    """The places that explain a finding: the tape that records it, the calls that lead there."""
    for related in finding.related:
        where = related.path if related.path != finding.path else ""
        stream.write(f"  = {_paint(report, 'note', 'bold', 'cyan')}: {related.message}"
                     f" ({where + ':' if where else 'line '}{related.start.line})\n")


def render(report: RunReport, stream: TextIO) -> None:
    for finding in report.findings:
        marker = " [*]" if finding.fix and finding.fix.applicability is Applicability.SAFE else ""
        stream.write(f"{_location(report, finding)}{marker} {finding.message}\n")
        line = report.source_line(finding.path, finding.start.line) if report.show_source else None
        if line is not None:
            number = str(finding.start.line)
            gutter = " " * len(number)
            width = (finding.end.column - finding.start.column) if finding.end.line == finding.start.line else (
                len(line) - finding.start.column + 1)
            start = finding.start.column - 1
            if len(line) > MAX_SOURCE_WIDTH:  # a generated one-liner: show a window around the caret
                offset = max(0, start - 20)
                line = ("…" if offset else "") + line[offset:offset + MAX_SOURCE_WIDTH] + "…"
                start = start - offset + (1 if offset else 0)
                width = min(width, MAX_SOURCE_WIDTH - (start - 1))
            caret = " " * start + "^" * max(1, width)
            stream.write(f"  {_paint(report, number, 'cyan')} | {line}\n")
            stream.write(f"  {gutter} | {_paint(report, caret, 'red')}\n")
        _related(report, finding, stream)
        _confirmation(report, finding, stream)
        stream.write("\n")
    _summary(report, stream)


def _confirmation(report: RunReport, finding, stream: TextIO) -> None:
    confirmation = finding.confirmation
    if confirmation is None:
        return
    colour = {"confirmed": "red", "cleared": "green"}.get(confirmation.status, "yellow")
    where = ", ".join(x for x in (f"Warp {confirmation.warp_version}" if confirmation.warp_version else "",
                                  confirmation.device or "") if x)
    stream.write(f"  = {_paint(report, confirmation.status, 'bold', colour)}: {confirmation.reason}"
                 f"{f' ({where})' if where else ''}\n")
    table = confirmation.evidence.get("table") if isinstance(confirmation.evidence, dict) else None
    if isinstance(table, str):
        for row in table.splitlines():
            stream.write(f"    {row}\n")


def _summary(report: RunReport, stream: TextIO) -> None:
    if report.statistics:
        counts = collections.Counter((f.code, f.name) for f in report.findings)
        fixable = collections.Counter(f.code for f in report.findings if f.fix)
        for (code, name), count in counts.most_common():
            star = "[*]" if fixable[code] == count else "   "
            stream.write(f"{count:>5}\t{code}\t{star} {name}\n")
    cleared = sum(1 for f in report.findings if f.confirmation is not None and f.confirmation.status == "cleared")
    count = len(report.findings) - cleared
    if report.fixed:
        stream.write(f"Fixed {report.fixed} error{'s' if report.fixed != 1 else ''}.\n")
    if cleared and not report.quiet:
        # A finding a run-time check cleared is shown with its evidence, but it is not an error.
        stream.write(f"{cleared} finding{'s' if cleared != 1 else ''} cleared at run time (its evidence is"
                     f" shown with it): not counted as {'errors' if cleared != 1 else 'an error'}.\n")
    if count:
        stream.write(_paint(report, f"Found {count} error{'s' if count != 1 else ''}.", "bold") + "\n")
        safe = sum(1 for f in report.findings if f.fix and f.fix.applicability is Applicability.SAFE)
        unsafe = sum(1 for f in report.findings if f.fix and f.fix.applicability is Applicability.UNSAFE)
        if safe and not report.fix_mode:
            stream.write(f"[*] {safe} fixable with the `--fix` option.\n")
        if unsafe and not report.unsafe_fixes:
            stream.write(f"{unsafe} hidden fix{'es' if unsafe != 1 else ''} can be enabled with the"
                         " `--unsafe-fixes` option.\n")
    elif not report.quiet:
        stream.write(_paint(report, "All checks passed!", "green") + "\n")
    hidden = report.hidden_by_context
    if hidden and not report.quiet:
        stream.write(f"{hidden} finding{'s' if hidden != 1 else ''} in code the project does not differentiate"
                     f" (public API, forward-only, unreachable) {'are' if hidden != 1 else 'is'} not shown:"
                     f" `--report-contexts all` shows {'them' if hidden != 1 else 'it'}, `warp-lint explain"
                     f" PATH:LINE` says why.\n")
