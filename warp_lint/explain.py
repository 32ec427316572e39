"""``warp-lint explain PATH:LINE``: why a finding is (or is not) reported, in the user's terms.

For the kernel or ``@wp.func`` holding the line: its differentiation context and what decided
it (the recording that reaches it: the tape, where it records, the calls from the entry point;
or why it is forward-only; or why the project does not know). For each finding on the line: the
finding, and the places that explain it (its related locations).
"""

from __future__ import annotations

import os

from warp_lint.finding import Finding
from warp_lint.project.contexts import DEFAULT_REPORTED
from warp_lint.project.model import DIFFERENTIATED
from warp_lint.workspace import Workspace


def _where(path: str, line: int, root: str) -> str:
    relative = os.path.relpath(path, root) if os.path.isabs(path) else path
    return f"{relative}:{line}"


def explain(workspace: Workspace, path: str, line: int, findings: list[Finding], root: str = ".") -> str:
    parts: list[str] = []
    definition = workspace.model.definition_at(path, line)
    if definition is not None:
        context = workspace.model.context_of(definition)
        kind = {"kernel": "kernel", "func": "@wp.func"}.get(definition.kind, definition.kind)
        parts.append(f"{kind} `{definition.summary.qualname}` ({_where(path, definition.summary.loc.line, root)}):"
                     f" {context.state}")
        parts.append(f"  because {context.reason}")
        if context.state == DIFFERENTIATED and context.reach is not None:
            reach = context.reach
            parts.append(f"  recording: entry point `{reach.entry}`")
            for site in reach.chain:
                parts.append(f"    calls `{site.callee}` at {_where(site.location.path, site.location.line, root)}")
            tape = f"`{reach.tape}`" if reach.tape else "an anonymous tape"
            parts.append(f"    records on {tape} at {_where(reach.region.path, reach.region.line, root)}")
            parts.append(f"    launches it at {_where(reach.launch.path, reach.launch.line, root)}")
        if context.launches:
            shown = ", ".join(_where(site.path, site.line, root) for site in context.launches[:5])
            more = f" and {len(context.launches) - 5} more" if len(context.launches) > 5 else ""
            parts.append(f"  launched at {shown}{more}")
        if context.state not in DEFAULT_REPORTED:
            parts.append(f"  its findings are not reported by default (`--report-contexts {context.state}`, or"
                         f" `report-contexts` in [tool.warp-lint], adds them)")
    else:
        parts.append(f"{_where(path, line, root)} is not inside a kernel or @wp.func: host code")
    on_line = [f for f in findings if f.path == path and f.start.line <= line <= f.end.line]
    if not on_line:
        parts.append(f"no finding on line {line}")
    definition_state = workspace.model.context_of(definition).state if definition is not None else None
    for finding in on_line:
        parts.append(f"{finding.code} {finding.name} ({_where(finding.path, finding.start.line, root)}):"
                     f" {finding.message}")
        state = finding.data.get("context")
        if state and state != definition_state:
            # a finding's own context: the gradient it is about may exist nowhere (``finding_context``)
            parts.append(f"  this finding: {state}, because {finding.data.get('context_reason', '')}")
            if state not in DEFAULT_REPORTED:
                parts.append(f"  it is not reported by default (`--report-contexts {state}` adds it)")
        for related in finding.related:
            parts.append(f"  - {related.message} at {_where(related.path, related.start.line, root)}")
    return "\n".join(parts) + "\n"

