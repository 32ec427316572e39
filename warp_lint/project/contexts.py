"""The differentiation contexts a kernel or ``@wp.func`` can be in, and which are reported.

A context says whether a gradient can flow through a definition, decided over the whole program
(``warp_lint.project.model``):

- *differentiated*: a recording of the project reaches it (a tape, a gradient check, a launch
  with ``adjoint=True``);
- *public*: only the package's public API reaches it, outside every recording of the project:
  its users may record it on their own tape;
- *unknown*: the model cannot decide (a call or launch it cannot follow), and says what stopped it;
  in a project that launches kernels and records none, what it cannot follow leads to no
  recording, and such a definition is *public* instead;
- *forward-only*: every path to it is outside recordings, or backward is disabled for it, or it
  is reached only through a custom adjoint;
- *unreachable*: nothing the project runs reaches it, and it is not public API.

Findings in a context that is not reported are counted, never lost: the summary line says how
many and how to see them. The default is the measured one: in the blind-judged seed-37 sample of
the real-code corpus (``benchmarks/bench_realcode.py``, ``benchmarks/judgements/realcode.json``),
none of the 14 findings now in *public* code was true (11 false: collision, rendering, code the
library refuses to differentiate; 3 debatable: a library path nothing in the project
differentiates), so a library author opts in with ``report-contexts``. *Unknown* stays reported
although its 8 judged findings were false: hiding it would let what the model cannot follow
prove code forward-only.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warp_lint.host import Location

DIFFERENTIATED, PUBLIC, UNKNOWN = "differentiated", "public", "unknown"
FORWARD_ONLY, UNREACHABLE = "forward-only", "unreachable"
CONTEXTS = (DIFFERENTIATED, PUBLIC, UNKNOWN, FORWARD_ONLY, UNREACHABLE)
DEFAULT_REPORTED = frozenset({DIFFERENTIATED, UNKNOWN})


def parse_contexts(items: list[str] | str) -> frozenset[str]:
    """Context names from a list or a comma-separated string; ValueError names an unknown one.
    ``all`` stands for every context."""
    names = [part.strip() for item in ([items] if isinstance(items, str) else items) for part in item.split(",")]
    names = [name for name in names if name]
    if "all" in names:
        return frozenset(CONTEXTS)
    unknown = [name for name in names if name not in CONTEXTS]
    if unknown:
        raise ValueError(f"unknown context '{unknown[0]}' (known: {', '.join(CONTEXTS)}, all)")
    return frozenset(names)


@dataclasses.dataclass(frozen=True)
class Reach:
    """How a recording reaches a launch: the tape, its region, the calls from the entry point."""

    tape: str
    region: Location
    launch: Location
    entry: str
    chain: tuple  # CallSite, from the entry point to the launch
    # (parameter, literal, function): the launch sits in an arm this recording's own argument skips
    # (`step(..., contacts=None)`): what other callers of the function reach, not this one
    skipped_by: tuple | None = None

    def describe(self) -> str:
        tape = f"`{self.tape}`" if self.tape else "a tape"
        through = "".join(f" through `{site.callee}`" for site in self.chain)
        return f"recorded on {tape} at {where(self.region)}{through}{self.skipped()}"

    def skipped(self) -> str:
        """`, in an arm that `contacts=None` skips there: callers passing other values reach it`."""
        if not self.skipped_by:
            return ""
        name, literal, function = self.skipped_by
        return (f", in an arm of `{function.rsplit('.', 1)[-1]}` that `{name}={literal!r}` skips in this recording:"
                f" callers passing other values reach it")


@dataclasses.dataclass(frozen=True)
class DifferentiationContext:
    state: str  # differentiated | forward-only | unknown
    reason: str  # why, in words
    reach: Reach | None = None  # differentiated: the recording that reaches it
    launches: tuple[Location, ...] = ()  # where the project launches it
    runs: bool = True  # False: nothing in the project launches or calls it (nor what calls it)


def where(location: Location) -> str:
    """`sim.py:12`: a location for messages."""
    return f"{os.path.basename(location.path)}:{location.line}"
