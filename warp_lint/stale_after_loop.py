"""What code after a dynamic loop reads of the values the loop changed, where the adjoint needs them.

Warp's backward pass replays a function's forward code, but not a dynamic loop's forward passes
before the code after the loop: there, a local the loop changed (reassigned, or a component of it
written) holds its value from *before* the loop. That is harmless where the adjoint after the loop
needs no value of it (`return v`, `out[i] = m`, `s * 2.0`: measured right on 1.19), and wrong where
it does: a nonlinear use whose other operand carries a gradient (`lam[0] * x[1]`, `s / norm`), a
comparison deciding an `if` whose arms move gradients, an index into an array (measured wrong on
1.19, in kernels and in `@wp.func`s alike). WL107 reports such a use; WL103 reports a component
written in a dynamic loop only where such a use reads the vector (otherwise the passes' values
reach no adjoint that needs them).
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from warp_lint.cst_walk import walk_statements
from warp_lint.dataflow import BRANCH, INDEX, LINEAR, NONLINEAR, Dataflow, Use
from warp_lint.kernels import Loop


@dataclasses.dataclass(frozen=True)
class StaleUse:
    """A use after ``loop`` that needs the value of one of the loop's locals."""

    node: cst.CSTNode  # the statement that uses it
    use: Use
    origins: list[str]  # the loop's locals the used value is computed from


def first_stale_use(flow: Dataflow, loop: Loop, carried: set[str]) -> StaleUse | None:
    """The first use after ``loop`` whose adjoint needs the value of a local in ``carried`` (which
    the loop changes), or of a local computed from one after the loop, in program order."""
    end = loop_end(flow, loop)
    # Each stale local, with the carried locals its value comes from.
    stale: dict[str, set[str]] = {name: {name} for name in carried}
    statements: dict[int, list[Use]] = {}
    for use in flow.uses:
        if use.sequence > end and loop not in use.loops:
            statements.setdefault(use.sequence, []).append(use)
    for sequence in sorted(statements):
        uses = statements[sequence]
        node = uses[0].statement
        value = getattr(node, "value", None) if not isinstance(node, (cst.If, cst.While, cst.For)) else None
        for use in uses:
            if use.name not in stale:
                continue
            index = use.position == INDEX and use.indexes is not None and use.name in carried
            needed = use.position == NONLINEAR and value is not None and not flow.free(value)
            decides = use.position == BRANCH and isinstance(node, cst.If) and arms_carry_gradient(flow, node)
            if index or needed or decides:
                return StaleUse(node, use, sorted(stale[use.name]))
        if isinstance(node, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            names = [t.value for t in targets if isinstance(t, cst.Name)]
            sources = set().union(*(stale[u.name] for u in uses
                                    if u.name in stale and u.position in (LINEAR, NONLINEAR)))
            for name in names:
                if sources:
                    stale[name] = sources
                else:
                    stale.pop(name, None)
    return None


def loop_end(flow: Dataflow, loop: Loop) -> int:
    """The sequence number of the last use inside ``loop`` (of the loop itself where it has none):
    a use numbered after it, outside the loop, comes after the loop."""
    return max((u.sequence for u in flow.uses if loop in u.loops), default=flow.sequence.get(id(loop.node), 0))


def arms_carry_gradient(flow: Dataflow, branch: cst.If) -> bool:
    """Whether an arm of the `if` reads an array element or a value carrying a gradient outside a
    test: then the arm the adjoint replays decides the gradient (measured: `if dot >= 0.0:
    y = x[0] * 3.0 else: y = 0.0` after a `range(n)` loop summing `dot` gives AD 3 where finite
    differences give 0, the test seeing `dot` from before the loop)."""
    inside = {id(statement) for arm in _arms(branch) for statement in _small_statements(arm)}
    # `@x` (an element of array `x`) carries a gradient where `x` is a float array that reaches an output.
    if any(id(use.statement) in inside and use.position in (LINEAR, NONLINEAR) and flow.carries_gradient(use.name)
           for use in flow.uses):
        return True
    # An arm that leaves (`if not found: return`, `continue`, `break`) guards what follows the `if`
    # as much as its own statements (measured on 1.12.1 and 1.19.0: a flag set in a `range(n)` loop,
    # then `if not fired: return` and `out[0] = x[0] * x[1]`, gives AD 0 where finite differences
    # give [0.7, 0.3]; the same with `continue` in an enclosing loop, 0 where they give 1.1).
    exit_kind = exit_of(branch)
    if exit_kind is None:
        return False
    test = next((use for use in flow.uses if use.statement is branch), None)
    if test is None:
        return False
    end = max((use.sequence for use in flow.uses if id(use.statement) in inside), default=test.sequence)
    scope = test.loops if exit_kind != "return" else ()
    return any(use.sequence > end and use.loops[:len(scope)] == scope and use.position in (LINEAR, NONLINEAR)
               and flow.carries_gradient(use.name) for use in flow.uses)


def exit_of(branch: cst.If) -> str | None:
    """"return", "continue" or "break" where an arm of the `if` ends by leaving the function or the loop."""
    return next((kind for arm in _arms(branch) if (kind := _leaves(arm)) is not None), None)


def _arms(branch: cst.If) -> list[cst.CSTNode]:
    return [branch.body] + ([branch.orelse] if branch.orelse is not None else [])


def _leaves(arm: cst.CSTNode) -> str | None:
    """"return", "continue" or "break" where the arm's last statement leaves the function or the loop."""
    body = getattr(arm, "body", None)
    statements = body.body if isinstance(body, cst.IndentedBlock) else body if isinstance(body, (list, tuple)) else None
    if not statements:
        return None
    last = statements[-1]
    smalls = last.body if isinstance(last, cst.SimpleStatementLine) else ()
    final = smalls[-1] if smalls else None
    return {cst.Return: "return", cst.Continue: "continue", cst.Break: "break"}.get(type(final))


def _small_statements(node: cst.CSTNode) -> list[cst.BaseSmallStatement]:
    return [small for line in walk_statements(node) if isinstance(line, cst.SimpleStatementLine) for small in line.body]
