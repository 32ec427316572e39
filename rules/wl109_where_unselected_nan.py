from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import children
from warp_lint.rule import Example, Rule

OVERFLOWING_CALLS = {"warp.exp", "warp.log", "warp.log2", "warp.log10", "warp.sqrt", "warp.pow", "warp.acos",
                     "warp.asin", "warp.div"}
CLAMPS = {"warp.min", "warp.max", "warp.clamp"}
SELECTS = {"warp.where": (1, 2), "warp.select": (1, 2)}


class WhereUnselectedNan(Rule):
    """A `wp.where`/`wp.select` operand can overflow (`wp.where(x < 20.0, wp.exp(x), 0.0)`).

    ## What it does
    Flags `wp.where(cond, a, b)` and `wp.select(cond, a, b)` when one of the two value operands
    contains a call that can return `inf` or `NaN` for some inputs (`wp.exp`, `wp.log`,
    `wp.log2`, `wp.log10`, `wp.sqrt`, `wp.pow`, `wp.acos`, `wp.asin`) or a division by something
    other than a literal. Operands without such operations (`wp.where(x > 0.0, x * x, -x)`), and
    operations whose argument (or denominator) is bounded by `wp.min`, `wp.max` or `wp.clamp`
    (`wp.exp(wp.min(x, 20.0))`), are not flagged, nor is an exponential whose argument is never
    positive, by the signs of its literals, products and squares (`wp.exp(-128.0 * q * q)` stays
    at most 1).

    ## Why is this bad?
    `wp.where` evaluates both operands, and its adjoint runs the adjoints of both: the unselected
    one gets a zero incoming gradient, and `0 * inf` is `NaN`. The forward value is right, the
    gradient is `NaN`. Whether it happens depends on the values (only where the unselected operand
    overflows), so a test with tame inputs passes. Measured on 1.12.1 through 1.19.0:
    `wp.where(x < 20.0, wp.exp(x), 0.0)` at `x = 100` gives AD `NaN` (finite differences 0);
    `wp.where(x != 0.0, 1.0 / x, 0.0)` at `x = 0` gives `NaN`.

    ## Fix safety
    No automatic fix. Make the unselected operand safe as well, by clamping its argument
    (`wp.exp(wp.min(x, 20.0))`, `1.0 / wp.where(x != 0.0, x, 1.0)`), or use an `if`/`else` block,
    whose adjoint runs only the branch taken.

    ## Warp versions
    All versions (measured on 1.12.1 through 1.19.0).

    ## Confirmation
    gradcheck at inputs where the operand `wp.where` does not select overflows (the checker drives
    it there: equal values, zeros, large magnitudes); confirmed when turning the selection into an
    `if`/`else` block removes the disagreement. Never cleared before that point was reached.
    """

    code = "WL109"
    name = "where-unselected-nan"
    runtime_strategy = ("gradcheck",)
    safe_form = "select-branch"
    singular = "unselected-nonfinite"

    VALID = [
        # `-c * q * q` is never positive: the exponential stays at most 1 and cannot overflow.
        Example("""
            import warp as wp

            @wp.func
            def gaussian(q: float):
                return wp.where(q <= 1.0, wp.exp(-128.0 * q * q), 0.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def soft(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = wp.where(x[i] < 20.0, wp.exp(wp.min(x[i], 20.0)), 0.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def relu_square(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = wp.where(x[i] > 0.0, x[i] * x[i], -x[i] / 2.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def branch(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                if x[i] < 20.0:
                    out[i] = wp.exp(x[i])
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def soft(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = wp.where(x[i] < 20.0, wp.exp(x[i]), 0.0)
            """),
        Example("""
            import warp as wp

            @wp.func
            def inverse(d: float):
                return wp.select(d == 0.0, 1.0 / d, 0.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def safe_sqrt(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                r = wp.where(x[i] > 0.0, wp.sqrt(x[i]), 0.0)
                out[i] = r
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            reported: set[int] = set()
            for call in function.calls:
                positions = SELECTS.get(call.name or "")
                if positions is None or len(call.node.args) <= max(positions):
                    continue
                risk = None
                for position in positions:
                    risk = risk or _overflowing(context, call.node.args[position].value)
                statement = call.statement or call.node
                if risk is None or id(statement) in reported:
                    continue
                reported.add(id(statement))
                select = call.name.replace("warp.", "wp.")
                context.report(
                    self, statement,
                    f"`{select}` evaluates both operands and runs both adjoints: if the unselected `{risk}`"
                    f" overflows (a value-dependent hazard), its zero gradient times inf is NaN; clamp its"
                    f" argument or use an if/else block",
                    data={**function.runtime_data(), "check_nonfinite": True},
                )


def _overflowing(context: FileContext, node: cst.CSTNode) -> str | None:
    """The code of the first operation under ``node`` that can produce inf/NaN."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and context.names.qualify(current.func) in OVERFLOWING_CALLS:
            bounded = current.args and (_clamped(context, current.args[0].value) or (
                context.names.qualify(current.func) == "warp.exp" and _sign(context, current.args[0].value) < 0))
            if not bounded:
                return context.code(current)
        if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, cst.Divide):
            denominator = current.right.expression if isinstance(current.right, cst.UnaryOperation) else current.right
            if not isinstance(denominator, (cst.Integer, cst.Float)) and not _clamped(context, denominator):
                return context.code(current)
        stack.extend(children(current))
    return None


def _clamped(context: FileContext, node: cst.CSTNode) -> bool:
    """`wp.min(x, 20.0)`, `wp.max(d, 1e-6)`, `wp.clamp(...)`: the author bounded the argument."""
    return isinstance(node, cst.Call) and context.names.qualify(node.func) in CLAMPS


NEVER_NEGATIVE_CALLS = {"warp.abs", "warp.length", "warp.length_sq", "warp.sqrt", "warp.exp"}  # never negative


def _sign(context: FileContext, node: cst.BaseExpression) -> int:
    """-1 where ``node`` is never positive, 1 where it is never negative, 0 where it may be either:
    signs of literals carried through negation, products, quotients and squares, so that
    `wp.exp(-128.0 * q * q)` is known to stay at most 1 (it cannot overflow). A call of one literal
    that is no builtin (`scalar_t(128.0)`, a cast to the module's float type) keeps its sign."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return 1
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return -_sign(context, node.expression)
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Power) and isinstance(node.right, cst.Integer) and \
                int(node.right.evaluated_value) % 2 == 0:
            return 1
        if isinstance(node.operator, (cst.Multiply, cst.Divide)):
            if isinstance(node.operator, cst.Multiply) and node.left.deep_equals(node.right):
                return 1  # a square
            # `-c * q * q` parses as `(-c * q) * q`: the square is found across the association
            left, right = node.left, node.right
            if isinstance(node.operator, cst.Multiply) and isinstance(left, cst.BinaryOperation) and \
                    isinstance(left.operator, cst.Multiply) and left.right.deep_equals(right):
                return _sign(context, left.left)
            return _sign(context, left) * _sign(context, right)
    if isinstance(node, cst.Call) and len(node.args) == 1 and isinstance(node.args[0].value, (cst.Integer, cst.Float)):
        callee = context.names.qualify(node.func)
        if callee is None or not callee.startswith("warp.") or callee in ("warp.float16", "warp.float32", "warp.float64"):
            return _sign(context, node.args[0].value)
    if isinstance(node, cst.Call) and context.names.qualify(node.func) in NEVER_NEGATIVE_CALLS:
        return 1
    return 0
