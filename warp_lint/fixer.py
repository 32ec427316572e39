"""Applying fixes: edits to text, and writing a file back atomically without losing a byte."""

from __future__ import annotations

import os
import re
import stat
import tempfile

from warp_lint.finding import Applicability, Finding, Position
from warp_lint.source import SourceFile

_NEWLINE = re.compile(r"\r\n|\r|\n")


class ConcurrentModification(Exception):
    """The file changed on disk after it was read: it is left alone."""


def line_starts(text: str) -> list[int]:
    """Offsets of each line's first character, lines ending at \\n, \\r\\n or \\r as Python's tokenizer does."""
    return [0] + [match.end() for match in _NEWLINE.finditer(text)]


def offset_of(starts: list[int], position: Position, text: str) -> int:
    index = min(position.line - 1, len(starts) - 1)
    return min(starts[index] + position.column - 1, len(text))


def applicable(findings: list[Finding], unsafe: bool) -> list[Finding]:
    return [f for f in findings if f.fix and (unsafe or f.fix.applicability is Applicability.SAFE)]


def apply_fixes(text: str, findings: list[Finding], newline: str = "\n") -> tuple[str, int]:
    """Apply every non-overlapping fix; returns the new text and how many findings it fixed
    (a fix shared by several findings, like WL101's one store for three component writes,
    fixes each of them)."""
    starts = line_starts(text)
    chosen: list[tuple[int, int, str]] = []
    applied = 0
    seen_fixes = set()
    for finding in sorted(findings, key=lambda f: (f.fix.edits[0].start, f.code)):
        if finding.fix in seen_fixes:
            applied += 1
            continue
        spans = [(offset_of(starts, e.start, text), offset_of(starts, e.end, text), e.content) for e in finding.fix.edits]
        if any(_overlaps(span, other) for span in spans for other in chosen):
            continue  # applied on the next pass, against the fixed text
        chosen.extend(spans)
        seen_fixes.add(finding.fix)
        applied += 1
    for start, end, content in sorted(chosen, reverse=True):
        text = text[:start] + content.replace("\n", newline) + text[end:]
    return text, applied


def _overlaps(a: tuple[int, int, str], b: tuple[int, int, str]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def write_atomically(source: SourceFile, text: str) -> None:
    """Replace the file with ``text`` in its own encoding, BOM and mode, via a temporary file and
    a rename in the same directory, unless it changed on disk since it was read."""
    path = source.path
    with open(path, "rb") as handle:
        if handle.read() != source.raw:
            raise ConcurrentModification(f"{path} changed on disk while it was being linted; not fixed")
    data = source.encode(text)
    directory = os.path.dirname(os.path.abspath(path))
    mode = stat.S_IMODE(os.stat(path).st_mode)
    descriptor, temporary = tempfile.mkstemp(prefix=".warp-lint-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
