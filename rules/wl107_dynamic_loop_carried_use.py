from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import children, mentions_name
from warp_lint.kernels import FunctionModel, Loop, gradient_free
from warp_lint.rule import Example, Rule
from warp_lint.warp_types import COMPOSITE_TYPES, is_integer_expression

# Calls whose adjoint does not read their arguments' values: a use through them stays linear.
LINEAR_CALLS = {"float", "int", "warp.float32", "warp.float64", "warp.float16", "warp.neg", "warp.add", "warp.sub",
                "warp.vector", "warp.matrix", "warp.atomic_add", "warp.atomic_sub", *COMPOSITE_TYPES}
# Calls with no adjoint that reads the argument's value: assertions, printing, stores.
NON_DIFFERENTIABLE_USES = {"warp.expect_eq", "warp.expect_neq", "warp.expect_near", "warp.printf", "warp.print",
                           "print", "warp.tile_store", "warp.tile_atomic_add", "warp.atomic_min", "warp.atomic_max",
                           "warp.store"}


class DynamicLoopCarriedUse(Rule):
    """A local accumulated in a dynamic loop is used non-linearly after the loop (`return s / norm`).

    ## What it does
    Flags the first use after a dynamic loop (see WL104 for what makes a loop dynamic) of a local
    the loop updates, when the use needs the local's *value* in the backward pass: a division
    (`l = s / norm`, `return s / norm`), a product with something that is not a literal
    (`s * w`), a power, or a call such as `wp.sqrt(s)`. Locals computed after the loop from such
    a local carry the problem on, so `m = s + 1.0` followed by `out[0] = m * m` is flagged at the
    product. Linear uses (`return s`, `out[0] = 2.0 * s`, `s + c`), products and numerators whose
    other operand carries no gradient (a literal, a module constant, a kernel's scalar argument),
    assertions and prints (`wp.expect_eq`), integer counters and tiles are not flagged.

    ## Why is this bad?
    Warp's backward pass for a function replays its forward code, but a dynamic loop's forward
    iterations are not replayed before the code after it: the reverse code after the loop sees
    the local's value from *before* the loop (often `0.0`). The adjoint of `s / norm` then divides
    by zero, and the gradient is `inf`/`NaN` or silently wrong. Measured on 1.12.1 through 1.17.0
    and 1.19.0 with a weighted mean (`s += x[j] * w[j]; norm += w[j]` in a
    `range(n)` loop, then `s / norm`): AD gives `inf`/`NaN` for every element where finite
    differences give 0.19, 0.38, ..., in a `@wp.func` and in a kernel alike; `return wp.sqrt(s)`
    gives `inf`; `out[0] = s * c[0]` in a kernel gives 0 for `c` (finite differences 4.55).
    `return s * 2.0` is correct, and so is a product with a kernel's scalar argument or a constant,
    whose adjoint does not read the stale value (those are not flagged).

    ## Fix safety
    No automatic fix. Return the accumulated values from a `@wp.func` that holds the loop and do
    the division in its caller (`weighted_sum(x, w, n) / weight_sum(w, n)`, measured correct on
    every release above): the caller's backward pass replays the whole call.

    ## Warp versions
    All versions (measured on 1.12.1 through 1.19.0); loops that are dynamic only because of a
    `continue`, `<1.17`.

    ## Confirmation
    gradcheck (a wrong gradient is usually `inf`/`NaN`); confirmed when unrolling the dynamic loops
    that feed the use removes the disagreement.
    """

    code = "WL107"
    name = "dynamic-loop-carried-use"
    runtime_strategy = ("gradcheck",)
    safe_form = "static-feeding-loops"

    VALID = [
        Example("""
            import warp as wp

            @wp.func
            def weighted_sum(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * w[j]
                return s

            @wp.func
            def weight_sum(w: wp.array(dtype=float), n: int):
                s = float(0.0)
                for j in range(n):
                    s += w[j]
                return s

            @wp.kernel
            def mean(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                out[0] = weighted_sum(x, w, n) / weight_sum(w, n)
            """),
        Example("""
            import warp as wp

            @wp.func
            def total(x: wp.array(dtype=float), n: int):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * x[j]
                return 2.0 * s
            """),
        Example("""
            import warp as wp

            @wp.func
            def norm(x: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(4):
                    s += x[j] * x[j]
                return wp.sqrt(s)
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.func
            def weighted_mean(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int):
                s = float(0.0)
                norm = float(0.0)
                for j in range(n):
                    s += x[j] * w[j]
                    norm += w[j]
                return s / norm
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def rms(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * x[j]
                m = s / float(n)
                out[0] = wp.sqrt(m)
            """),
        Example("""
            import warp as wp

            @wp.func
            def length(x: wp.array(dtype=float)):
                s = float(0.0)
                j = int(0)
                while j < x.shape[0]:
                    s += x[j] * x[j]
                    j += 1
                l = wp.sqrt(s)
                return l
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            reported: set[int] = set()
            for loop in function.loops:
                if not loop.dynamic:
                    continue
                carried = _carried_locals(context, function, loop)
                if carried:
                    self._check_after(context, function, loop, carried, reported)

    def _check_after(self, context, function: FunctionModel, loop: Loop, carried: set[str], reported: set[int]):
        stale = set(carried)
        for site in function.statements:
            if loop in site.loops or site.order < loop.end_order or not stale:
                continue
            if site.order < loop.start_order:
                continue
            node = site.node
            value, bound = _value_and_targets(node)
            if value is None:
                continue
            use = _nonlinear_use(context, function, value, stale)
            if use is not None and id(node) not in reported:
                reported.add(id(node))
                name, how = use
                if name in carried:
                    subject = f"`{name}` is updated in a dynamic loop ({loop.reason}) and used after it in a {how}"
                else:
                    subject = (f"`{name}`, computed from a local updated in a dynamic loop ({loop.reason}), is used"
                               f" in a {how}")
                context.report(
                    self, node,
                    f"{subject}: the backward pass sees the value from before the loop and the gradient is"
                    f" inf/NaN or wrong; return the loop's results from a @wp.func and do the {how} in its caller",
                    affected_versions=loop.affected_versions or None,
                    data=function.runtime_data(),
                )
                return
            for target in bound:
                if any(mentions_name(value, name) for name in stale):
                    stale.add(target)
                elif target in stale and isinstance(node, cst.Assign):
                    stale.discard(target)


def _carried_locals(context: FileContext, function: FunctionModel, loop: Loop) -> set[str]:
    """Locals defined before the loop and reassigned in it, leaving out integer counters and tiles."""
    names = set()
    for binding in function.bindings:
        if loop not in binding.loops:
            continue
        before = [b for b in function.bindings if b.name == binding.name and b.order < loop.start_order]
        defined_before = before or any(p.name == binding.name and not p.type.is_array for p in function.params)
        if not defined_before or any(p.name == binding.name and not p.type.differentiable for p in function.params):
            continue
        if before and (is_integer_expression(before[-1].value, context.names) or _tile(context, before[-1].value)):
            continue
        names.add(binding.name)
    return names


def _tile(context: FileContext, value) -> bool:
    callee = _callee(context, value) if isinstance(value, cst.Call) else None
    return bool(callee and callee.startswith("warp.tile"))


def _callee(context: FileContext, call: cst.Call) -> str | None:
    return context.names.qualify(call.func) or (call.func.value if isinstance(call.func, cst.Name) else None)


def _value_and_targets(node: cst.CSTNode) -> tuple[cst.BaseExpression | None, list[str]]:
    if isinstance(node, cst.Assign):
        return node.value, [t.target.value for t in node.targets if isinstance(t.target, cst.Name)]
    if isinstance(node, cst.AnnAssign):
        return node.value, [node.target.value] if isinstance(node.target, cst.Name) else []
    if isinstance(node, cst.AugAssign):
        return node.value, []
    if isinstance(node, (cst.Return, cst.Expr)):
        return node.value, []
    return None, []


def _nonlinear_use(context: FileContext, function: FunctionModel, node: cst.CSTNode,
                   stale: set[str]) -> tuple[str, str] | None:
    """(name, 'a division' ...) for the first use of a stale local whose adjoint needs its value.

    A product or a numerator is harmless when the other operand carries no gradient (a literal, a
    kernel's scalar argument, an array's shape): only that operand's adjoint reads the stale value.
    """
    def free(other):
        return gradient_free(function, other, context.names)

    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.BinaryOperation):
            operator = current.operator
            if isinstance(operator, (cst.Divide, cst.FloorDivide, cst.Modulo)):
                name = _stale_in(current.right, stale) or (
                    None if free(current.right) else _stale_in(current.left, stale))
                if name:
                    return name, "division"
            elif isinstance(operator, cst.Multiply):
                for this, other in ((current.left, current.right), (current.right, current.left)):
                    name = _stale_in(this, stale)
                    if name and not free(other):
                        return name, "product"
            elif isinstance(operator, cst.Power):
                name = _stale_in(current, stale)
                if name:
                    return name, "power"
        elif isinstance(current, cst.Call):
            qualified = _callee(context, current)
            if qualified in NON_DIFFERENTIABLE_USES:
                continue
            if qualified not in LINEAR_CALLS:
                for argument in current.args:
                    name = _stale_in(argument.value, stale)
                    if name:
                        callee = (qualified or "").replace("warp.", "wp.")
                        return name, f"`{callee}()` call" if callee else "call"
        stack.extend(children(current))
    return None


def _stale_in(node: cst.CSTNode, stale: set[str]) -> str | None:
    return next((name for name in sorted(stale) if mentions_name(node, name)), None)
