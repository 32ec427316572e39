"""``--output-format github``: GitHub Actions workflow commands, one annotation per finding.

    ::error file=sim/k.py,line=6,col=5,endLine=6,endColumn=23,title=WL102 (array-read-then-write)::message

Escaping follows the runner's parser (actions/toolkit ``core/src/command.ts``): in the message,
``%`` -> ``%25``, CR -> ``%0D``, LF -> ``%0A``; in property values also ``:`` -> ``%3A`` and
``,`` -> ``%2C``. ``%`` goes first so the escapes themselves are not escaped again. Columns are
1-based; ``endColumn`` is exclusive, as everywhere in warp-lint (and in ruff's github output).
"""

from __future__ import annotations

from typing import TextIO

from warp_lint.output import RunReport
from warp_lint.output.sarif import relative_path, verdict_text

COMMANDS = {"error": "error", "warning": "warning"}  # anything else is a notice


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(report: RunReport, stream: TextIO) -> None:
    for finding in report.findings:
        properties = {
            "file": relative_path(report, finding.path),
            "line": finding.start.line,
            "col": finding.start.column,
            "endLine": finding.end.line,
            "endColumn": finding.end.column,
            "title": f"{finding.code} ({finding.name})",
        }
        message = finding.message
        if finding.confirmation is not None:
            message += "\n" + verdict_text(finding.confirmation)
        rendered = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
        command = COMMANDS.get(finding.severity, "notice")
        stream.write(f"::{command} {rendered}::{escape_data(message)}\n")
