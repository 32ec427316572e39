"""``--output-format sarif``: SARIF 2.1.0 for GitHub code scanning and other SARIF readers.

Beyond the schema, GitHub code scanning wants: every rule with ``shortDescription``,
``fullDescription`` and ``help`` (text and markdown), artifact paths relative to the repository
root (``uriBaseId: %SRCROOT%``), and a ``partialFingerprints`` entry per result so an alert is
tracked across runs when the lines around it move. Only the rules that appear in the results are
described (as ruff does), so ``ruleIndex`` points into a short, stable list.

The path and fingerprint helpers here are shared with the GitLab and GitHub renderers, so every CI
format names a file, and identifies a finding, the same way.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import urllib.parse
from pathlib import Path, PurePath
from typing import Any, TextIO

import warp_lint
from warp_lint.finding import Confirmation, Finding, Fix, rule_url
from warp_lint.links import home_url
from warp_lint.output import RunReport

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = "warpLint/v1"
LEVELS = {"error": "error", "warning": "warning"}  # anything else is a note

# Codes the engine emits itself (no rule class, hence no rule docs).
_ENGINE_CODES = {
    "E902": "A file could not be read.",
    "E999": "A file could not be parsed, so none of its code was checked.",
    "WL900": "A `# noqa` comment suppresses nothing.",
}


def relative_path(report: RunReport, path: str) -> str:
    """``path`` relative to the report's root, with ``/`` separators (absolute when that fails)."""
    root = os.path.abspath(report.root)
    absolute = os.path.normpath(os.path.join(root, path))
    try:
        relative = os.path.relpath(absolute, root)
    except ValueError:  # another drive on Windows
        return PurePath(absolute).as_posix()
    return PurePath(relative).as_posix()


def fingerprints(report: RunReport) -> list[str]:
    """A stable identity per finding, in report order: a hash of the code, the repository-relative
    path, the offending line's text (whitespace-normalised) and the occurrence index among findings
    sharing those three. Moving the line, or editing other lines, keeps it; editing the line or
    renaming the file changes it."""
    seen: collections.Counter[tuple[str, str, str]] = collections.Counter()
    result = []
    for finding in report.findings:
        path = relative_path(report, finding.path)
        text = " ".join((report.source_line(finding.path, finding.start.line) or "").split())
        key = (finding.code, path, text)
        index = seen[key]
        seen[key] += 1
        digest = hashlib.sha256("\0".join((*key, str(index))).encode("utf-8")).hexdigest()
        result.append(digest[:32])
    return result


def verdict_text(confirmation: Confirmation) -> str:
    """One line for the runtime verdict, as the text output prints it."""
    where = ", ".join(x for x in (f"Warp {confirmation.warp_version}" if confirmation.warp_version else "",
                                  confirmation.device or "") if x)
    return f"Runtime check: {confirmation.status}: {confirmation.reason}" + (f" ({where})" if where else "")


def render(report: RunReport, stream: TextIO) -> None:
    json.dump(build(report), stream, indent=2, ensure_ascii=False)
    stream.write("\n")


def build(report: RunReport) -> dict[str, Any]:
    first: dict[str, Finding] = {}
    for finding in report.findings:
        first.setdefault(finding.code, finding)
    codes = sorted(first)
    rule_index = {code: index for index, code in enumerate(codes)}
    results = [
        _result(report, finding, fingerprint, rule_index[finding.code])
        for finding, fingerprint in zip(report.findings, fingerprints(report))
    ]
    root_uri = Path(os.path.abspath(report.root)).as_uri().rstrip("/") + "/"
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": _without_absent({
                        "name": "warp-lint",
                        "version": warp_lint.__version__,
                        "informationUri": home_url(),
                        "rules": [_rule(report, first[code]) for code in codes],
                    })
                },
                "originalUriBaseIds": {SRCROOT: {"uri": root_uri}},
                "columnKind": "unicodeCodePoints",  # Position.column counts code points
                "results": results,
            }
        ],
    }


def _without_absent(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` without its None values: the URIs the package metadata names none for. The schema
    wants a URI string wherever ``informationUri`` or ``helpUri`` is present, and a made-up one
    would mislead."""
    return {key: value for key, value in entry.items() if value is not None}


def _rule(report: RunReport, example: Finding) -> dict[str, Any]:
    code, name, severity = example.code, example.name, example.severity
    rule = report.rules.get(code)
    if rule is None:
        # An engine code (E902, E999, WL900), or a report built without ``rules``.
        summary = _ENGINE_CODES.get(code, f"{name} ({code})")
        return _without_absent({
            "id": code,
            "name": name,
            "shortDescription": {"text": summary},
            "fullDescription": {"text": summary},
            "help": {"text": summary, "markdown": summary},
            "helpUri": rule_url(code),  # the engine's codes have pages too (warp_lint.rule_pages)
            "defaultConfiguration": {"level": LEVELS.get(severity, "note")},
            "properties": {"tags": ["warp-lint"]},
        })
    sections = rule.sections()
    full = "\n\n".join(s for s in (sections.get("What it does"), sections.get("Why is this bad?")) if s)
    full = full or rule.summary()
    docs = rule.docs()
    return _without_absent({
        "id": code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary()},
        "fullDescription": {"text": _unwrap(full), "markdown": full},
        "help": {"text": docs, "markdown": docs},
        "helpUri": rule_url(code),
        "defaultConfiguration": {"level": LEVELS.get(rule.severity, "note")},
        "properties": {
            "tags": ["warp", "autodiff", "correctness"],
            "precision": "high",
            "affectedWarpVersions": rule.affected_versions or "all",
            "fixable": rule.fixable(),
            "runtimeStrategy": list(rule.runtime_strategy),
        },
    })


def _unwrap(markdown: str) -> str:
    """Join the docstring's hard-wrapped lines, keeping paragraph breaks (for plain-text fields)."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", markdown)


def _artifact(report: RunReport, path: str) -> dict[str, Any]:
    relative = relative_path(report, path)
    if os.path.isabs(relative) or relative == ".." or relative.startswith("../"):
        # Outside the root: GitHub cannot show it, but other readers can open an absolute URI.
        return {"uri": Path(os.path.abspath(os.path.join(report.root, path))).as_uri()}
    return {"uri": urllib.parse.quote(relative, safe="/"), "uriBaseId": SRCROOT}


def _region(start, end) -> dict[str, int]:
    return {"startLine": start.line, "startColumn": start.column, "endLine": end.line, "endColumn": end.column}


def _result(report: RunReport, finding: Finding, fingerprint: str, index: int) -> dict[str, Any]:
    text = finding.message
    if finding.confirmation is not None:
        text += "\n\n" + verdict_text(finding.confirmation)
    region = _region(finding.start, finding.end)
    line = report.source_line(finding.path, finding.start.line)
    if line is not None:
        region["snippet"] = {"text": line}
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": index,
        "level": LEVELS.get(finding.severity, "note"),
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(report, finding.path), "region": region}}],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
    }
    if finding.fix is not None:
        result["fixes"] = [_fix(report, finding.path, finding.fix)]
    if finding.related:
        result["relatedLocations"] = [
            {"id": number, "message": {"text": related.message},
             "physicalLocation": {"artifactLocation": _artifact(report, related.path),
                                  "region": _region(related.start, related.end)}}
            for number, related in enumerate(finding.related, start=1)]
    properties: dict[str, Any] = {}
    if finding.data.get("context"):
        properties["differentiationContext"] = finding.data["context"]
    if finding.affected_versions:
        properties["affectedWarpVersions"] = finding.affected_versions
    if finding.confirmation is not None:
        properties["confirmation"] = finding.confirmation.to_dict()
    if properties:
        result["properties"] = properties
    return result


def _fix(report: RunReport, path: str, fix: Fix) -> dict[str, Any]:
    return {
        "description": {"text": fix.message},
        "artifactChanges": [
            {
                "artifactLocation": _artifact(report, path),
                "replacements": [
                    {"deletedRegion": _region(edit.start, edit.end), "insertedContent": {"text": edit.content}}
                    for edit in fix.edits
                ],
            }
        ],
        "properties": {"applicability": fix.applicability.value},
    }
