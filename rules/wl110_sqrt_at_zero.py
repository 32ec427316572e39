from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import mentions_name, signed_terms
from warp_lint.kernels import CallSite, FunctionModel, LocalBinding
from warp_lint.rule import Example, Rule
from warp_lint.warp_types import code_of

EARLY_EXITS = (cst.Return, cst.Continue, cst.Break)


class SqrtAtZero(Rule):
    """A hand-rolled norm (`wp.sqrt(wp.dot(d, d))`) has an infinite adjoint at zero.

    ## What it does
    Flags `wp.sqrt(q)` and `wp.pow(q, 0.5)` where `q` is a squared norm written out by hand:
    `wp.dot(d, d)`, `wp.length_sq(d)`, a sum of squares (`x * x + y * y`, `x ** 2.0 + ...`), or a
    local assigned one of these (`d2 = wp.dot(d, d); r = wp.sqrt(d2)`). Not flagged: `wp.length`
    and `wp.normalize`, a squared norm plus anything else (`wp.sqrt(wp.dot(d, d) + eps)`), and a
    `wp.sqrt` inside an `if` (or after an early `return`/`continue`) whose condition tests the
    squared norm, and a norm of values clamped at zero from below with `wp.max(x, 0.0)` (the SDF
    idiom `length(max(q, 0))`: at zero the adjoint goes to the constant, measured right on 1.19;
    `wp.max(0.0, x)` sends it to `x`, NaN) or floored above zero. Nor a root that always divides
    afterwards (`s = wp.sqrt(x * x + w * w)` and, later in the same block, `invs = 1.0 / s`): there
    the forward value is itself inf or NaN wherever the root is zero (measured for `d / n` on 1.19),
    so the gradient does not fail silently, and the fix is a guard before the division.

    ## Why is this bad?
    The adjoint of `sqrt(q)` is `0.5 / sqrt(q)`, infinite at `q = 0`, and the chain rule multiplies
    it by `d = 0`: `inf * 0 = NaN`. Coincident points (a particle on itself, a contact at zero
    distance, a zero velocity) turn every gradient that touches them into `NaN`, while the forward
    value (0) is fine. Value-dependent: only inputs that hit zero show it. `wp.length` and
    `wp.normalize` guard their adjoints at zero. Measured on 1.12.1 through 1.19.0 with
    `d = a[i] - b[i]`, `a[1] == b[1]`: `wp.sqrt(wp.dot(d, d))` and `wp.pow(wp.dot(d, d), 0.5)` give
    AD `NaN` where finite differences give 0; `wp.length(d)` gives 0.

    ## Fix safety
    No automatic fix (the replacement changes the gradient at zero, which is the point, and a
    scalar sum of squares needs a vector built first). Use `wp.length(d)` (or
    `wp.length(wp.vec2(x, y))`), or guard the zero case with an `if`. Where the norm then divides
    (`u = d / n`), `wp.length` alone does not help: `d / wp.length(d)` is NaN at zero too, and so is
    an unused `wp.sqrt(wp.dot(d, d))` left beside the fix (its adjoint multiplies a zero by its
    infinite derivative). The message then gives `wp.normalize(d)` for the direction, whose value
    and adjoint are 0 at zero (measured on 1.19), or a guard before the division.

    ## Warp versions
    All versions (measured on 1.12.1 through 1.19.0).

    ## Confirmation
    gradcheck at inputs where the square root's argument is exactly zero (the checker drives it
    there: coincident points, zeros); confirmed when guarding the square root at zero removes the
    disagreement. Never cleared before that point was reached.
    """

    code = "WL110"
    name = "sqrt-at-zero"
    runtime_strategy = ("gradcheck",)
    safe_form = "guarded-sqrt"
    singular = "sqrt-zero"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def distance(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = wp.length(a[i] - b[i])
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def distance(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
                i = wp.tid()
                d = a[i] - b[i]
                out[i] = wp.sqrt(wp.dot(d, d) + 1.0e-8)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def distance(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
                i = wp.tid()
                d = a[i] - b[i]
                d2 = wp.dot(d, d)
                if d2 > 0.0:
                    out[i] = wp.sqrt(d2)
            """),
        Example("""
            import warp as wp

            @wp.func
            def speed(vx: float, vy: float):
                return wp.sqrt(vx * vy)
            """),
        # The SDF idiom `length(max(q, 0))`: at zero each `max` picks its constant, and the
        # infinite adjoint goes there, not to `q` (measured right on 1.19).
        Example("""
            import warp as wp

            @wp.func
            def box_outside(q: wp.vec2):
                w = wp.vec2()
                w[0] = wp.max(q[0], 0.0)
                w[1] = wp.max(q[1], 0.0)
                return wp.sqrt(w[0] * w[0] + w[1] * w[1])
            """),
        # The forward pass divides by the root whatever runs: at zero its value is inf, not silent.
        Example("""
            import warp as wp

            @wp.func
            def twist_scale(q: wp.quat):
                s = wp.sqrt(q[0] * q[0] + q[3] * q[3])
                invs = 1.0 / s
                return invs * invs * invs
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def distance(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
                i = wp.tid()
                d = a[i] - b[i]
                out[i] = wp.sqrt(wp.dot(d, d))
            """),
        Example("""
            import warp as wp

            @wp.func
            def speed(vx: float, vy: float):
                return wp.sqrt(vx * vx + vy * vy)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def distance(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
                i = wp.tid()
                d = a[i] - b[i]
                d2 = wp.length_sq(d)
                out[i] = wp.pow(d2, 0.5)
            """),
        # `wp.max(0.0, x)` sends the adjoint at `x = 0` to `x` itself (measured NaN on 1.19).
        Example("""
            import warp as wp

            @wp.func
            def outside(q: wp.vec2):
                x = wp.max(0.0, q[0])
                y = wp.max(0.0, q[1])
                return wp.sqrt(x * x + y * y)
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            reported: set[int] = set()
            for call in function.calls:
                argument = _root_argument(call)
                if argument is None:
                    continue
                bases = _squared_norm(context, function, call, argument, follow=True)
                statement = call.statement or call.node
                if bases is None or id(statement) in reported or _guarded(function, call, argument, bases) \
                        or _clamped(context, function, call, bases) or _forward_singular(function, statement):
                    continue
                reported.add(id(statement))
                spelled = call.name.replace("warp.", "wp.")
                zero = " and ".join(f"`{base}`" for base in bases)
                context.report(
                    self, statement,
                    f"`{spelled}` of a squared norm (`{context.code(argument)}`) has an infinite adjoint at zero:"
                    f" gradients are NaN where {zero} {'is' if len(bases) == 1 else 'are'} zero (value-dependent);"
                    f" {_fix(context, function, statement, bases)}",
                    data={**function.runtime_data(), "check_nonfinite": True},
                )


def _fix(context: FileContext, function: FunctionModel, statement: cst.CSTNode, bases: dict[str, bool]) -> str:
    """The guarded norm to use; but where the norm then divides (`d / n`), `wp.length` leaves the
    division by zero in place (measured on 1.19: `x / wp.length(x)` at zero gives NaN, and
    `wp.normalize(x)` gives 0 with a zero gradient), so the fix is the direction or a guard."""
    instead = _instead(bases)
    norm = _assigned_name(statement)
    division = _division_by(function.node, norm) if norm else None
    if division is None:
        return f"use {instead}, whose adjoint is guarded"
    numerator, line = context.code(division.left), context.position(division)[0].line
    if len(bases) == 1 and numerator in bases and bases[numerator]:
        return (f"`{numerator} / {norm}` (line {line}) then divides by the same zero, which {instead} alone does not"
                f" guard: use `wp.normalize({numerator})` for the direction and {instead} for the norm")
    return (f"`{context.code(division)}` (line {line}) then divides by the same zero, which {instead} alone does not"
            f" guard: use {instead} and guard the zero case (`if {norm} > 0.0:`) before dividing")


def _assigned_name(statement: cst.CSTNode) -> str | None:
    """`n` in `n = wp.sqrt(...)`."""
    if isinstance(statement, cst.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0].target, cst.Name):
        return statement.targets[0].target.value
    return None


def _division_by(function: cst.FunctionDef, name: str) -> cst.BinaryOperation | None:
    """The first `x / name` in the function that no test of `name` guards (`if name > eps:` around
    it, or the test of a conditional expression): a guarded division is not singular, and there
    `wp.length` alone is the fix."""
    found: list[cst.BinaryOperation] = []
    guards: list[bool] = []

    class Divisions(cst.CSTVisitor):
        def visit_If(self, node: cst.If) -> None:
            guards.append(mentions_name(node.test, name))

        def leave_If(self, node: cst.If) -> None:
            guards.pop()

        def visit_IfExp(self, node: cst.IfExp) -> None:
            guards.append(mentions_name(node.test, name))

        def leave_IfExp(self, node: cst.IfExp) -> None:
            guards.pop()

        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            if isinstance(node.operator, cst.Divide) and isinstance(node.right, cst.Name) \
                    and node.right.value == name and not any(guards):
                found.append(node)

    function.visit(Divisions())
    return found[0] if found else None


def _forward_singular(function: FunctionModel, statement: cst.CSTNode) -> bool:
    """Whether the forward pass is itself non-finite wherever the square root is zero: its result,
    bound once (`s = wp.sqrt(...)`), divides later in the same block, whatever branch runs
    (`invs = 1.0 / s`: inf; `d / n`: NaN). The hazard is then no silent gradient failure, the
    forward value shows it, and no norm of another spelling mends it; guarding the zero does."""
    name = _assigned_name(statement)
    if name is None or sum(binding.name == name for binding in function.bindings) != 1:
        return False
    block = _enclosing_block(function.node, statement)
    if block is None:
        return False
    after = False
    for line in block.body:
        if line is statement or (isinstance(line, cst.SimpleStatementLine) and statement in line.body):
            after = True
            continue
        if after and isinstance(line, cst.SimpleStatementLine) and any(
                _divides_unconditionally(small, name) for small in line.body):
            return True
    return False


def _enclosing_block(function: cst.FunctionDef, statement: cst.CSTNode) -> cst.BaseSuite | None:
    """The suite whose lines hold ``statement``."""
    found: list[cst.BaseSuite] = []

    class Blocks(cst.CSTVisitor):
        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            if any(line is statement or (isinstance(line, cst.SimpleStatementLine) and statement in line.body)
                   for line in node.body):
                found.append(node)

    function.visit(Blocks())
    return found[0] if found else None


def _divides_unconditionally(small: cst.CSTNode, name: str) -> bool:
    """Whether the statement divides by ``name`` outside any conditional expression."""
    found = []

    class Divisions(cst.CSTVisitor):
        def visit_IfExp(self, node: cst.IfExp) -> bool:
            return False  # one arm may not run

        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            if isinstance(node.operator, cst.Divide) and isinstance(node.right, cst.Name) and node.right.value == name:
                found.append(node)

    small.visit(Divisions())
    return bool(found)


def _instead(bases: dict[str, bool]) -> str:
    codes = list(bases)
    if len(codes) == 1 and bases[codes[0]]:
        return f"`wp.length({codes[0]})`"
    if len(codes) == 1:
        return f"`wp.abs({codes[0]})`"
    if 2 <= len(codes) <= 4 and not any(bases.values()):
        return f"`wp.length(wp.vec{len(codes)}({', '.join(codes)}))`"
    return "`wp.length` of a vector"


def _root_argument(call: CallSite) -> cst.BaseExpression | None:
    args = call.node.args
    if call.name == "warp.sqrt" and len(args) == 1:
        return args[0].value
    if call.name == "warp.pow" and len(args) == 2 and isinstance(args[1].value, cst.Float) \
            and float(args[1].value.value) == 0.5:
        return args[0].value
    return None


def _squared_norm(context: FileContext, function: FunctionModel, call: CallSite, node: cst.BaseExpression,
                  follow: bool) -> dict[str, bool] | None:
    """The values whose squares make up ``node`` (code -> whether it is a vector), or None."""
    if isinstance(node, cst.Name) and follow:
        binding = _binding_before(function, node.value, call.order)
        if binding is None or binding.value is None or binding.operator is not None:
            return None
        return _squared_norm(context, function, call, binding.value, follow=False)
    terms = signed_terms(node)
    bases: dict[str, bool] = {}
    for sign, term in terms:
        base = _square_base(context, term)
        if sign < 0 or base is None:
            return None
        bases[base[0]] = base[1]
    return bases


def _square_base(context: FileContext, term: cst.BaseExpression) -> tuple[str, bool] | None:
    """(the squared value's code, whether it is a vector) for `x * x`, `x ** 2`, `wp.dot(d, d)`."""
    if isinstance(term, cst.BinaryOperation):
        if isinstance(term.operator, cst.Multiply) and code_of(term.left) == code_of(term.right):
            return code_of(term.left), False
        if isinstance(term.operator, cst.Power) and isinstance(term.right, (cst.Integer, cst.Float)) \
                and float(term.right.value) == 2.0:
            return code_of(term.left), False
        return None
    if isinstance(term, cst.Call):
        name = context.names.qualify(term.func)
        args = [a.value for a in term.args]
        if name == "warp.dot" and len(args) == 2 and code_of(args[0]) == code_of(args[1]):
            return code_of(args[0]), True
        if name == "warp.length_sq" and len(args) == 1:
            return code_of(args[0]), True
    return None


def _binding_before(function: FunctionModel, name: str, order: int) -> LocalBinding | None:
    found = None
    for binding in function.bindings:
        if binding.name == name and binding.order <= order:
            found = binding
    return found


def _clamped(context: FileContext, function: FunctionModel, call: CallSite, bases: dict[str, bool]) -> bool:
    """Whether the infinite adjoint at zero never reaches an input: every squared value is
    `wp.max(x, c)` with `c` a literal >= 0 as the second argument (a local assigned so, or a
    component written so: the SDF idiom `length(max(q, 0))`), or one is floored above zero. At
    zero each `max` picks its constant, and its adjoint goes there, not to `x` (measured on 1.19:
    `wp.max(x, 0.0)` gives a gradient of 0 at `x = 0`, `wp.max(0.0, x)` gives NaN)."""
    floors = []
    for base, vector in bases.items():
        value = None if vector else _value_of(function, base, call.order)
        floor = _floor(context, value) if value is not None else None
        if floor is not None and floor[0] > 0:
            return True  # never zero
        floors.append(floor is not None and floor[1])
    return bool(floors) and all(floors)


def _value_of(function: FunctionModel, code: str, order: int) -> cst.BaseExpression | None:
    """The value a local (`x`) or a local's component (`w[0]`) was last given before ``order``,
    where it was given one once, whole."""
    if code.isidentifier():
        bindings = [b for b in function.bindings if b.name == code]
        binding = _binding_before(function, code, order)
        return binding.value if binding is not None and len(bindings) == 1 and binding.operator is None else None
    name, _, rest = code.partition("[")
    writes = [w for w in function.component_writes if w.name == name and f"{name}[{w.component}]" == code]
    if name.isidentifier() and len(writes) == 1 and writes[0].operator is None and writes[0].order <= order:
        return writes[0].value
    return None


def _floor(context: FileContext, value: cst.BaseExpression) -> tuple[float, bool] | None:
    """`wp.max(x, c)` / `wp.max(c, x)` with a literal `c`: (c, whether `c` is the second argument)."""
    if not isinstance(value, cst.Call) or context.names.qualify(value.func) != "warp.max" or len(value.args) != 2:
        return None
    for position, argument in enumerate(a.value for a in value.args):
        literal = argument.expression if isinstance(argument, cst.UnaryOperation) else argument
        if isinstance(literal, (cst.Integer, cst.Float)):
            number = float(literal.value) * (-1 if isinstance(argument, cst.UnaryOperation) else 1)
            return (number, position == 1) if number >= 0 else None
    return None


def _guarded(function: FunctionModel, call: CallSite, argument: cst.BaseExpression, bases: dict[str, bool]) -> bool:
    """An enclosing `if` (or an earlier early exit) tests the squared norm or its vector."""
    names = {argument.value} if isinstance(argument, cst.Name) else set()
    names |= {base for base in bases if base.isidentifier()}
    if not names:
        return False

    def tests_it(node: cst.If) -> bool:
        return any(mentions_name(node.test, name) for name in names)

    if any(tests_it(branch.node) for branch in call.branches):
        return True
    for site in function.statements:
        if site.node is call.statement:
            break
        if isinstance(site.node, EARLY_EXITS) and any(tests_it(branch.node) for branch in site.branches):
            return True
    return False
