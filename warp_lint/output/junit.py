"""``--output-format junit``: JUnit XML in ruff's shape, for CI test-report views.

One ``testsuite`` per file and one failing ``testcase`` per finding (``name="warp-lint.WL102"``,
``classname`` the path without its suffix, ``file``/``line``/``column`` attributes); a clean run
is one passing ``testcase`` named "No errors found".
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import PurePosixPath
from typing import TextIO

from warp_lint.output import RunReport
from warp_lint.output.sarif import relative_path, verdict_text

PACKAGE = "warp-lint"


def render(report: RunReport, stream: TextIO) -> None:
    count = str(len(report.findings))
    suites = ET.Element("testsuites", name=PACKAGE, tests=count, failures=count, errors="0")
    if not report.findings:
        suite = ET.SubElement(suites, "testsuite", name=PACKAGE, tests="1", disabled="0", errors="0", failures="0",
                              package=PACKAGE)
        ET.SubElement(suite, "testcase", name="No errors found", classname=PACKAGE)
        suites.set("tests", "1")
    by_file: dict[str, list] = {}
    for finding in report.findings:
        by_file.setdefault(relative_path(report, finding.path), []).append(finding)
    for path, findings in by_file.items():
        suite = ET.SubElement(suites, "testsuite", name=path, tests=str(len(findings)), disabled="0", errors="0",
                              failures=str(len(findings)), package=PACKAGE)
        classname = str(PurePosixPath(path).with_suffix("")) if PurePosixPath(path).suffix else path
        for finding in findings:
            case = ET.SubElement(suite, "testcase", name=f"{PACKAGE}.{finding.code}", classname=classname,
                                 file=path, line=str(finding.start.line), column=str(finding.start.column))
            body = f"line {finding.start.line}, col {finding.start.column}, {finding.message}"
            if finding.confirmation is not None:
                body += "\n" + verdict_text(finding.confirmation)
            failure = ET.SubElement(case, "failure", message=finding.message, type=finding.code)
            failure.text = body.replace("\r\n", "\n").replace("\r", "\n")  # XML reads a raw CR as LF anyway
    ET.indent(suites, space="    ")
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    stream.write(ET.tostring(suites, encoding="unicode"))
    stream.write("\n")
