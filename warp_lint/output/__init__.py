"""Output formats. Every renderer reads the same ``RunReport``: no re-linting per format."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, TextIO

from warp_lint.finding import Finding
from warp_lint.source import source_line


@dataclasses.dataclass
class RunReport:
    findings: list[Finding]  # sorted, suppressions applied
    sources: dict[str, str]  # path -> text, for files with findings (source lines, carets)
    files_checked: int = 0
    fixed: int = 0
    fix_mode: bool = False
    unsafe_fixes: bool = False
    color: bool = False
    show_source: bool = True
    statistics: bool = False
    root: str = "."  # paths in SARIF/GitLab/GitHub are relative to this
    quiet: bool = False
    hidden_by_context: int = 0  # findings whose differentiation context is not reported (see FileResult)
    # code -> Rule class, for formats that describe the rules they report (SARIF); filled by the
    # command line, which may import the registry (a renderer may not: it is a layer below).
    rules: dict[str, Any] = dataclasses.field(default_factory=dict)

    def source_line(self, path: str, line: int) -> str | None:
        text = self.sources.get(path)
        if text is None:
            return None
        return source_line(text, line)


Renderer = Callable[[RunReport, TextIO], None]


def renderers() -> dict[str, Renderer]:
    from warp_lint.output import json_format, text

    found: dict[str, Renderer] = {"text": text.render, "concise": text.render_concise, "json": json_format.render}
    for name, module_name in (("github", "github"), ("sarif", "sarif"), ("gitlab", "gitlab"), ("junit", "junit")):
        try:
            module = __import__(f"warp_lint.output.{module_name}", fromlist=["render"])
        except ImportError:
            continue
        found[name] = module.render
    return found
