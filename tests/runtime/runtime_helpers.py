"""Helpers shared by the runtime checker tests (imported by name: a ``conftest`` is not a module to import).

The static engine fills ``finding.data`` in production; here ``make_finding`` builds the same
contract by hand from the ``# flag: NAME`` marker on the flagged line of a fixture file.
"""

from __future__ import annotations

import pathlib

from warp_lint.finding import Finding, Position
from warp_lint.registry import all_rules

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def flagged_line(path: pathlib.Path, marker: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# flag: {marker}"):
            return number
    raise LookupError(f"no '# flag: {marker}' in {path}")


def make_finding(
    path: pathlib.Path,
    kernel: str,
    code: str,
    *,
    reads: list[str],
    writes: list[str],
    marker: str | None = None,
    function_kind: str = "kernel",
    index_params: list[str] | None = None,
    strategy: str | list[str] = "gradcheck",
) -> Finding:
    """A finding as the static engine would emit it for the statement marked ``# flag: MARKER``."""
    line = flagged_line(path, marker or kernel)
    rule = all_rules()[code]
    return Finding(
        code=code,
        name=code.lower(),
        message=f"{code} at {kernel}",
        path=str(path),
        start=Position(line, 5),
        end=Position(line, 40),
        data={
            "strategy": strategy,
            "kernel": kernel,
            "function_kind": function_kind,
            "params": [],
            "reads": reads,
            "writes": writes,
            "index_params": index_params or [],
            "flagged_lines": [line, line],
            "safe_form": rule.safe_form,
            "singular": rule.singular,
            "value_dependent": rule.singular is not None,
        },
    )
