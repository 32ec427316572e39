from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.kernels import FunctionModel
from warp_lint.rule import Example, Rule


class TernaryArraySelect(Rule):
    """A conditional expression has a bare array element as a branch (`a[i] / t[i] if flag else a[i]`).

    ## What it does
    Flags a Python conditional expression (`x if c else y`) in a kernel or `@wp.func` when one of
    its branches is an array element read on its own: `a[i] / t[i] if flag else a[i]`,
    `a[i] if flag else t[i]`, `a[i] if flag else 0.0`. Branches that compute a value from the
    element (`a[i] * 2.0`), or locals loaded before (`x = a[i]; v = x if c else y`), are fine.

    ## Why is this bad?
    From Warp 1.7 (conditional expressions were rejected in kernels before) to 1.16, the code
    generator merged a branch that is an array *reference* without copying it, and the adjoint of
    that branch was lost: when the bare element is the branch taken, its gradient is zero, without
    an error (NVIDIA/warp#1736, fixed in 1.17). Measured on 1.16.0 (`flag` a `wp.bool`):
    `v = a[i] / t[i] if flag else a[i]` with `flag` false, `a[i] if flag else t[i]`,
    `a[i] if flag else 0.0` and the same with `wp.vec3` arrays all give an all-zero AD gradient
    for the taken bare element (finite differences 1.14, 0.77, ...); the computed branch taken,
    and an `if`/`else` block, are correct. Correct on 1.17.0 and 1.19.0.

    ## Fix safety
    No automatic fix. Use an `if`/`else` block (`v = a[i]` then `if flag: v = a[i] / t[i]`), or
    load the elements into locals first.

    ## Warp versions
    `>=1.7,<1.17`. Measured zero gradient on 1.12.1 through 1.16.0, correct on 1.17.0 and 1.19.0.

    ## Confirmation
    gradcheck, when the inputs make the bare branch the one taken; confirmed when turning the
    conditional expression into an `if`/`else` block removes the disagreement.
    """

    code = "WL108"
    name = "ternary-array-select"
    affected_versions = ">=1.7,<1.17"
    runtime_strategy = ("gradcheck",)
    safe_form = "select-branch"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def correct(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
                i = wp.tid()
                v = a[i]
                if flag:
                    v = a[i] / t[i]
                out[i] = v
            """, target="<1.17"),
        Example("""
            import warp as wp

            @wp.kernel
            def computed(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = a[i] / t[i] if flag else a[i] * 2.0
            """, target="<1.17"),
        Example("""
            import warp as wp

            @wp.kernel
            def loaded(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
                i = wp.tid()
                x = a[i]
                out[i] = x / t[i] if flag else x
            """, target="<1.17"),
        Example("""
            import warp as wp

            @wp.kernel
            def correct(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = a[i] / t[i] if flag else a[i]
            """, target=">=1.17"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def correct(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
                i = wp.tid()
                v = a[i] / t[i] if flag else a[i]
                out[i] = v
            """, target="<1.17"),
        Example("""
            import warp as wp

            @wp.func
            def pick(flag: bool, i: int, a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3)):
                return a[i] if flag else b[i]
            """, target="<1.17"),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func") or not function.conditionals:
                continue
            reported: set[int] = set()
            for conditional in function.conditionals:
                bare = _bare_element(function, conditional.node.body) or _bare_element(function, conditional.node.orelse)
                statement = conditional.statement or conditional.node
                if bare is None or id(statement) in reported:
                    continue
                reported.add(id(statement))
                context.report(
                    self, statement,
                    f"A conditional expression selects the bare array element `{context.code(bare)}`: when that"
                    f" branch is taken its gradient is zero; use an if/else block (or load the element into a"
                    f" local first)",
                    data=function.runtime_data(),
                )


def _bare_element(function: FunctionModel, node: cst.BaseExpression) -> cst.Subscript | None:
    """``a[i]`` (a whole element of an array argument), parentheses aside."""
    if not isinstance(node, cst.Subscript) or not isinstance(node.value, cst.Name):
        return None
    param = function.arrays.get(node.value.value)
    if param is None or len(node.slice) < param.type.ndim:
        return None
    return node
