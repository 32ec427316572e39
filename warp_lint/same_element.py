"""Can two accesses in one thread touch the same element? Their index expressions compared, conservatively.

Each index is read as an affine form over symbols: ``2 * i + 1`` is 2 times ``i`` plus 1. A symbol is a name
whose value is the same at both accesses (a parameter never assigned, a module constant, a local
assigned once outside every loop such as ``tid = wp.tid()``; such a local with an affine value is
replaced by that value), or the variable of a ``for ... in range(...)`` loop around the access.
Anything else (a call, an array read, a name assigned twice or inside a loop) makes the index
unknown, and an unknown index may be the same element.

The question is ordered: can a run of ``first`` come before a run of ``second`` on the same
element? ``first`` runs before ``second`` in one pass of every loop around both when it comes first
in evaluation order, and in an earlier iteration of any loop around both (the same statement
included). In an earlier iteration of a ``range`` loop with a positive step the variable was
smaller, which tells ``prods[i + 1] = x[i] * prods[i]`` (each element read after it was written,
never written after it was read) from ``a[i] = a[i + 1] * a[i + 1]`` (``a[i + 1]`` read in one
iteration, overwritten in the next).
"""

from __future__ import annotations

from typing import Protocol

import libcst as cst

from warp_lint.cst_walk import walk
from warp_lint.kernels import FunctionModel, Loop, mutually_exclusive

# An affine form: symbol -> coefficient, and the constant term. A symbol is a name (str) or a loop's
# variable (`_variable(loop)`).
Affine = tuple[dict[object, int], int]


class ElementAccess(Protocol):
    """An ``ArrayAccess`` or a ``ComponentWrite``: where it is, and the element it names."""

    element: tuple[cst.BaseExpression, ...] | None
    loops: tuple[Loop, ...]
    order: int


def may_touch_same_element(function: FunctionModel, first: ElementAccess, second: ElementAccess) -> bool:
    """Whether some run of ``first`` can come before some run of ``second`` with both on the same
    element (of one array, or one component of one local). False only when provably not."""
    shared = _shared_loops(first.loops, second.loops)
    # None: both in one iteration of every shared loop; a Loop: first in an earlier iteration of it.
    # Two arms of one `if` never both run in one iteration of the loops around it.
    same_pass = first.order < second.order and not mutually_exclusive(
        getattr(first, "branches", ()), getattr(second, "branches", ()))
    return _may_meet(function, first, second, ([None] if same_pass else []) + shared)


def index_data_decides(function: FunctionModel, first: ElementAccess, second: ElementAccess) -> bool:
    """Whether ``first`` and ``second`` can meet on one element only when values read from arrays
    coincide: ``body_q[child]`` written after ``body_q[parent]`` was read, ``parent`` and ``child``
    loaded from index arrays. Over a tree's topological order they never meet, over other data they
    may: only the data decides. False when the two may meet by arithmetic alone (the same index, a
    loop counter against the thread index) or provably never meet."""
    if first.element is None or second.element is None or len(first.element) != len(second.element):
        return False
    shared = _shared_loops(first.loops, second.loops)
    same_pass = first.order < second.order and not mutually_exclusive(
        getattr(first, "branches", ()), getattr(second, "branches", ()))
    forms = [(_affine(function, a, first.loops, frozenset()), _affine(function, b, second.loops, frozenset()))
             for a, b in zip(first.element, second.element)]
    meeting = []
    for earlier_loop in ([None] if same_pass else []) + shared:
        same_value = shared if earlier_loop is None else shared[:shared.index(earlier_loop)]
        if not any(_apart(function, a, b, same_value, earlier_loop) for a, b in forms):
            meeting.append((earlier_loop, same_value))
    return bool(meeting) and all(
        any(_loaded_difference(function, nodes, form, (first, second), earlier_loop, same_value)
            for nodes, form in zip(zip(first.element, second.element), forms))
        for earlier_loop, same_value in meeting)


def _loaded_difference(function: FunctionModel, nodes: tuple[cst.BaseExpression, cst.BaseExpression],
                       forms: tuple[Affine | None, Affine | None], accesses: tuple[ElementAccess, ElementAccess],
                       earlier_loop: Loop | None, same_value: list[Loop]) -> bool:
    """Whether one index dimension of two accesses differs by a value loaded from memory."""
    if forms[0] is not None and forms[1] is not None:
        shared_values = {_variable(loop) for loop in same_value}
        difference: dict[object, int] = {}
        for side, (terms, _) in ((1, forms[1]), (-1, forms[0])):
            for symbol, coefficient in terms.items():
                key = symbol if not isinstance(symbol, tuple) or symbol in shared_values else (symbol, side)
                difference[key] = difference.get(key, 0) + side * coefficient
        return any(c and isinstance(symbol, str) and _loads(function, cst.Name(symbol), frozenset())
                   for symbol, c in difference.items())
    if nodes[0].deep_equals(nodes[1]) and _same_value_at_both(function, nodes[0], accesses, earlier_loop):
        return False
    return any(_loads(function, node, frozenset()) for node in nodes)


def _same_value_at_both(function: FunctionModel, node: cst.BaseExpression, accesses: tuple[ElementAccess, ...],
                        earlier_loop: Loop | None) -> bool:
    """Whether an index expression written alike at two accesses has one value at both: no name in
    it is reassigned between them (in one pass), nor inside the loop whose earlier iteration ran the
    first (in another)."""
    names = {n.value for n in walk(node) if isinstance(n, cst.Name)}
    if earlier_loop is not None:
        return not any(b.name in names and earlier_loop.start_order <= b.order <= earlier_loop.end_order
                       for b in function.bindings) and not (names & _targets(earlier_loop))
    low, high = sorted(access.order for access in accesses)
    return not any(b.name in names and low < b.order < high for b in function.bindings)


def _loads(function: FunctionModel, node: cst.BaseExpression, seen: frozenset[str]) -> bool:
    """Whether a value is (computed from) an element read from an array: `joint_parent[j]`,
    `int(ids[i]) + 1`, a local assigned from one."""
    for part in walk(node):
        if isinstance(part, cst.Subscript) and not _is_local_value(function, part.value):
            return True
        if isinstance(part, cst.Name) and part.value not in seen:
            values = [b.value for b in function.bindings if b.name == part.value and b.value is not None]
            if any(_loads(function, value, seen | {part.value}) for value in values):
                return True
    return False


def _is_local_value(function: FunctionModel, node: cst.BaseExpression) -> bool:
    """A subscript of a local vector or matrix reads a component, not memory."""
    return isinstance(node, cst.Name) and node.value not in function.arrays and \
        any(b.name == node.value for b in function.bindings)


def may_touch_again(function: FunctionModel, access: ElementAccess, loop: Loop) -> bool:
    """Whether ``access``, run in a later iteration of ``loop`` (one of its loops), can touch an
    element it touched in an earlier one: ``m[i, i] = ...`` in ``for i in range(3)`` cannot."""
    return _may_meet(function, access, access, [loop])


def _may_meet(function: FunctionModel, first: ElementAccess, second: ElementAccess, scenarios: list[Loop | None]
              ) -> bool:
    if not scenarios:
        return False
    if first.element is None or second.element is None or len(first.element) != len(second.element):
        return True
    shared = _shared_loops(first.loops, second.loops)
    dimensions = [(_affine(function, a, first.loops, frozenset()), _affine(function, b, second.loops, frozenset()))
                  for a, b in zip(first.element, second.element)]
    for earlier_loop in scenarios:
        same_value = shared if earlier_loop is None else shared[:shared.index(earlier_loop)]
        if not any(_apart(function, a, b, same_value, earlier_loop) for a, b in dimensions):
            return True
    return False


def _shared_loops(first: tuple[Loop, ...], second: tuple[Loop, ...]) -> list[Loop]:
    shared = []
    for a, b in zip(first, second):
        if a is not b:
            break
        shared.append(a)
    return shared


def _apart(function: FunctionModel, first: Affine | None, second: Affine | None, same_value: list[Loop],
           earlier_loop: Loop | None) -> bool:
    """Whether the two indices differ in every pair of runs: ``first`` in an earlier iteration of
    ``earlier_loop`` (or the same iteration, for None), in the same iteration of ``same_value``."""
    if first is None or second is None:
        return False
    shared_values = {_variable(loop) for loop in same_value}
    difference: dict[object, int] = {}
    for side, (terms, _) in ((1, second), (-1, first)):
        for symbol, coefficient in terms.items():
            if isinstance(symbol, tuple) and symbol not in shared_values:
                symbol = (symbol, side)  # the two runs see different values of this loop's variable
            difference[symbol] = difference.get(symbol, 0) + side * coefficient
    constant = second[1] - first[1]
    varying = {symbol: c for symbol, c in difference.items() if c}
    if not varying:
        return constant != 0
    # Only earlier_loop's variable may remain: c * later - c * earlier, where later - earlier is a
    # positive multiple of the step. Any other loop's variable is unrelated between the two runs.
    if earlier_loop is None:
        return False
    later, earlier = (_variable(earlier_loop), 1), (_variable(earlier_loop), -1)
    if set(varying) != {later, earlier} or varying[earlier] != -varying[later]:
        return False
    coefficient = varying[later]
    step = _range_step(function, earlier_loop)
    if step is None:  # some nonzero step: c * (later - earlier) is never zero, anything else may cancel
        return constant == 0
    iterations, remainder = divmod(-constant, coefficient * step)
    return remainder != 0 or iterations < 1


def _range_step(function: FunctionModel, loop: Loop) -> int | None:
    """The step of ``for ... in range(...)`` when it is a nonzero literal integer."""
    arguments = loop.node.iter.args
    if len(arguments) < 3:
        return 1
    form = _affine(function, arguments[2].value, (), frozenset())
    return form[1] if form is not None and not form[0] and form[1] else None


def _affine(function: FunctionModel, node: cst.BaseExpression, loops: tuple[Loop, ...], seen: frozenset[str]
            ) -> Affine | None:
    """``node`` as an affine form, read where ``loops`` are the loops around it; None when it is not one."""
    if isinstance(node, cst.Integer):
        return {}, int(node.value, 0)
    if isinstance(node, cst.Name):
        return _name(function, node.value, loops, seen)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        inner = _affine(function, node.expression, loops, seen)
        return inner if inner is None or isinstance(node.operator, cst.Plus) else _scale(inner, -1)
    if isinstance(node, cst.BinaryOperation):
        left = _affine(function, node.left, loops, seen)
        right = _affine(function, node.right, loops, seen)
        if left is None or right is None:
            return None
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            sign = 1 if isinstance(node.operator, cst.Add) else -1
            terms = dict(left[0])
            for symbol, coefficient in right[0].items():
                terms[symbol] = terms.get(symbol, 0) + sign * coefficient
            return terms, left[1] + sign * right[1]
        if isinstance(node.operator, cst.Multiply):
            if not left[0]:
                return _scale(right, left[1])
            if not right[0]:
                return _scale(left, right[1])
    return None


def _scale(form: Affine, factor: int) -> Affine:
    return {symbol: factor * coefficient for symbol, coefficient in form[0].items()}, factor * form[1]


def _name(function: FunctionModel, name: str, loops: tuple[Loop, ...], seen: frozenset[str]) -> Affine | None:
    if name in seen:
        return None
    bindings = [b for b in function.bindings if b.name == name]
    loop = next((loop for loop in reversed(loops) if name in _targets(loop)), None)
    if loop is not None:
        reassigned = any(loop.start_order <= b.order <= loop.end_order for b in bindings)
        counter = isinstance(loop.node.target, cst.Name) and _is_range(loop)
        return ({_variable(loop): 1}, 0) if counter and not reassigned else None
    if any(name in _targets(other) for other in function.loops):
        return None  # a loop's variable read outside it: whatever the last iteration left
    if not bindings:  # a parameter or a module-level name: one value for the whole call
        return {name: 1}, 0
    if len(bindings) > 1 or bindings[0].operator is not None or bindings[0].loops or \
            name in {p.name for p in function.params}:
        return None
    value = bindings[0].value
    form = _affine(function, value, (), seen | {name}) if value is not None else None
    return form if form is not None else ({name: 1}, 0)


def _variable(loop: Loop) -> tuple[str, int]:
    """The symbol of a loop's variable (Loop itself is unhashable: a dataclass compared by value)."""
    return "loop", id(loop)


def _targets(loop: Loop) -> set[str]:
    node = loop.node
    return {n.value for n in walk(node.target) if isinstance(n, cst.Name)} if isinstance(node, cst.For) else set()


def _is_range(loop: Loop) -> bool:
    iterator = loop.node.iter
    return isinstance(iterator, cst.Call) and isinstance(iterator.func, cst.Name) and iterator.func.value == "range" \
        and 1 <= len(iterator.args) <= 3 and not any(a.keyword or a.star for a in iterator.args)
