"""``--output-format gitlab``: a GitLab Code Quality report (the Code Climate subset GitLab reads).

A JSON array; each issue has ``description`` (prefixed with the code, since GitLab does not show
``check_name``, as ruff does), ``check_name``, a unique ``fingerprint`` (the SARIF partial
fingerprint, so both reports name a finding alike), ``severity`` (info, minor, major, critical,
blocker) and ``location.path`` (relative to ``$CI_PROJECT_DIR`` when set, else to the report's
root) with ``location.lines.begin``/``end``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, TextIO

from warp_lint.output import RunReport
from warp_lint.output.sarif import fingerprints, relative_path, verdict_text

SEVERITIES = {"error": "major", "warning": "minor", "info": "info"}


def render(report: RunReport, stream: TextIO) -> None:
    project_dir = os.environ.get("CI_PROJECT_DIR")
    located = dataclasses.replace(report, root=project_dir) if project_dir else report
    issues: list[dict[str, Any]] = []
    for finding, fingerprint in zip(report.findings, fingerprints(located)):
        description = f"{finding.code}: {finding.message}"
        if finding.confirmation is not None:
            description += f" ({verdict_text(finding.confirmation)})"
        issues.append({
            "description": description,
            "check_name": finding.code,
            "fingerprint": fingerprint,
            "severity": SEVERITIES.get(finding.severity, "info"),
            "location": {
                "path": relative_path(located, finding.path),
                "lines": {"begin": finding.start.line, "end": finding.end.line},
            },
        })
    json.dump(issues, stream, indent=2, ensure_ascii=False)
    stream.write("\n")
