from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import mentions_name, signed_terms
from warp_lint.kernels import FunctionModel, LocalBinding, Loop, gradient_free
from warp_lint.rule import Example, Rule
from warp_lint.warp_types import INT_SCALARS, is_integer_expression


class DynamicLoopMutation(Rule):
    """A local defined before a dynamic loop is reassigned non-additively inside it.

    ## What it does
    A loop is dynamic when Warp cannot unroll it: its trip count is not a compile-time constant
    (`range(n)` with `n` a kernel argument or an array's shape), a literal range exceeds the unroll
    limit (`max_unroll`, 16 by default; `wp.config.max_unroll` and the module option of that name
    are honoured), its body has a `break` (or a `continue`, before Warp 1.17), and every `while`.
    `range(wp.static(...))` unrolls. Inside a dynamic loop this rule flags a non-additive
    reassignment of a local defined before the loop: `s = s * x[i] + c`, `prod *= x[i]`,
    `if v > best: best = v`. `s += e`, `s -= e` and `s = s + e` (with `s` not in `e`) are safe.

    ## Why is this bad?
    Warp generates a dynamic loop's adjoint by replaying the loop with the *final* values of the
    locals it mutates, not the per-iteration values; for a non-additive update the gradient is
    wrong, silently (measured on every release: `s = s*x[i] + x[i]` gives a wrong gradient).

    ## Fix safety
    No automatic fix. Make the loop static (`range(wp.static(N))`), accumulate additively, or
    store per-iteration values in an array.

    ## Warp versions
    All versions; loops that are dynamic only because of a `continue`, `<1.17`.

    ## Confirmation
    gradcheck; confirmed when unrolling the dynamic loops around the statement removes the
    disagreement.
    """

    code = "WL104"
    name = "dynamic-loop-mutation"
    runtime_strategy = ("gradcheck",)
    safe_form = "static-enclosing-loops"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def total(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * x[j]
                    s = s + x[j]
                out[0] = s
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def product(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(4):
                    p = p * x[j]
                out[0] = p
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def product(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(wp.static(32)):
                    p = p * x[j]
                out[0] = p
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def halving(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                k = n // 2
                while k > 0:
                    out[k] += x[k]
                    k //= 2
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def horner(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(n):
                    s = s * x[j] + x[j]
                out[0] = s
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def product(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(32):
                    p *= x[j]
                out[0] = p
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def largest(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                best = float(0.0)
                j = int(0)
                while j < x.shape[0]:
                    v = x[j]
                    if v > best:
                        best = v
                    j += 1
                out[0] = best
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable:
                continue
            reported: set[int] = set()
            for loop in function.loops:
                if not loop.dynamic:
                    continue
                for binding in function.bindings:
                    if id(binding.node) in reported or loop not in binding.loops:
                        continue
                    if not _defined_before(function, binding.name, loop) or _additive(binding):
                        continue
                    if _integer_local(context, function, binding.name) or gradient_free(
                            function, cst.Name(binding.name), context.names):
                        continue  # an integer counter, or a value built from constants: no gradient
                    reported.add(id(binding.node))
                    context.report(
                        self, binding.node,
                        f"`{binding.name}` is reassigned inside a dynamic loop ({loop.reason}): the adjoint"
                        f" replays the loop with its final value and the gradient is wrong; accumulate"
                        f" with `+=`, or unroll with `range(wp.static(...))`",
                        affected_versions=loop.affected_versions or None,
                        data=function.runtime_data(),
                    )


def _defined_before(function: FunctionModel, name: str, loop: Loop) -> bool:
    if any(p.name == name and not p.type.is_array for p in function.params):
        return True
    return any(b.name == name and b.order < loop.start_order for b in function.bindings)


def _integer_local(context: FileContext, function: FunctionModel, name: str) -> bool:
    if any(p.name == name and p.type.dtype in INT_SCALARS for p in function.params):
        return True
    first = next((b for b in function.bindings if b.name == name), None)
    return first is not None and is_integer_expression(first.value, context.names)


def _additive(binding: LocalBinding) -> bool:
    if binding.operator in ("+=", "-="):
        return True
    if binding.operator is not None or binding.value is None:
        return False
    terms = signed_terms(binding.value)
    own = [sign for sign, term in terms if _is_name(term, binding.name)]
    others = [term for sign, term in terms if not _is_name(term, binding.name)]
    return own == [1] and not any(mentions_name(term, binding.name) for term in others)


def _is_name(node, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name
