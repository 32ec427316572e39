"""``--output-format json``: an array shaped like ruff's JSON, so tools that read ruff's read ours."""

from __future__ import annotations

import json
from typing import Any, TextIO

from warp_lint.finding import Finding
from warp_lint.output import RunReport


def finding_to_json(finding: Finding) -> dict[str, Any]:
    fix = None
    if finding.fix:
        fix = {
            "applicability": finding.fix.applicability.value,
            "message": finding.fix.message,
            "edits": [
                {
                    "content": edit.content,
                    "location": {"row": edit.start.line, "column": edit.start.column},
                    "end_location": {"row": edit.end.line, "column": edit.end.column},
                }
                for edit in finding.fix.edits
            ],
        }
    result = {
        "code": finding.code,
        "name": finding.name,
        "message": finding.message,
        "filename": finding.path,
        "location": {"row": finding.start.line, "column": finding.start.column},
        "end_location": {"row": finding.end.line, "column": finding.end.column},
        "fix": fix,
        "url": finding.url,
        "noqa_row": finding.noqa_row,
        "severity": finding.severity,
        "affected_warp_versions": finding.affected_versions or None,
    }
    if finding.related:
        result["related"] = [{"message": r.message, "filename": r.path,
                              "location": {"row": r.start.line, "column": r.start.column},
                              "end_location": {"row": r.end.line, "column": r.end.column}} for r in finding.related]
    context = finding.data.get("context")
    if context:
        result["differentiation_context"] = {"state": context, "reason": finding.data.get("context_reason", "")}
    if finding.confirmation is not None:
        result["confirmation"] = finding.confirmation.to_dict()
    return result


def render(report: RunReport, stream: TextIO) -> None:
    json.dump([finding_to_json(f) for f in report.findings], stream, indent=2)
    stream.write("\n")
