from __future__ import annotations

from warp_lint.context import FileContext
from warp_lint.cst_walk import walk
from warp_lint.finding import Applicability
from warp_lint.kernels import AdjointWrite, FunctionModel
from warp_lint.rule import Example, Rule


class CustomGradAssign(Rule):
    """A custom adjoint is assigned (`wp.adjoint[x] = ...`) instead of accumulated (`+=`).

    ## What it does
    Flags `wp.adjoint[x] = value` in a `@wp.func_grad` function. `wp.adjoint[x] += value`,
    `-=`, and an assignment that adds to the adjoint itself
    (`wp.adjoint[x] = wp.adjoint[x] + value`) are fine.

    ## Why is this bad?
    `wp.adjoint[x]` is the caller's adjoint variable of the argument, passed by reference, and it
    may already hold gradient from other uses of the same value. Assigning overwrites that
    gradient: `v = x[i]; out[i] = square(v) + v * v` with `wp.adjoint[x] = 2.0 * x * adj_ret`
    gives half the gradient, because the reverse pass handles `v * v` first and the custom adjoint
    then discards it. Measured on 1.12.1 through 1.19.0: AD `[1.14, 2.31]` against finite
    differences `[2.27, 4.62]`; with `+=` it matches. Whether it shows depends on how the
    function is called (`square(v)` alone, or `v * v + square(v)`, happen to be right).

    ## Fix safety
    The fix turns `=` into `+=`. It is marked unsafe: it changes the gradients the program
    computes (which is the point), and a custom adjoint written to overwrite on purpose would
    change meaning. No fix is offered when the same adjoint is assigned more than once.

    ## Warp versions
    All versions (measured on 1.12.1 through 1.19.0).

    ## Confirmation
    gradcheck of the kernels that call the function.
    """

    code = "WL112"
    name = "custom-grad-assign"
    runtime_strategy = ("gradcheck",)

    VALID = [
        Example("""
            import warp as wp

            @wp.func
            def square(x: float):
                return x * x

            @wp.func_grad(square)
            def adj_square(x: float, adj_ret: float):
                wp.adjoint[x] += 2.0 * x * adj_ret
            """),
        Example("""
            import warp as wp

            @wp.func
            def square(x: float):
                return x * x

            @wp.func_grad(square)
            def adj_square(x: float, adj_ret: float):
                wp.adjoint[x] = wp.adjoint[x] + 2.0 * x * adj_ret
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.func
            def square(x: float):
                return x * x

            @wp.func_grad(square)
            def adj_square(x: float, adj_ret: float):
                wp.adjoint[x] = 2.0 * x * adj_ret
            """, fixed="""
            import warp as wp

            @wp.func
            def square(x: float):
                return x * x

            @wp.func_grad(square)
            def adj_square(x: float, adj_ret: float):
                wp.adjoint[x] += 2.0 * x * adj_ret
            """),
        Example("""
            import warp as wp

            @wp.func
            def scale(x: wp.vec3, s: float):
                return x * s

            @wp.func_grad(scale)
            def adj_scale(x: wp.vec3, s: float, adj_ret: wp.vec3):
                wp.adjoint[x] = adj_ret * s
                wp.adjoint[s] += wp.dot(x, adj_ret)
            """, fixed="""
            import warp as wp

            @wp.func
            def scale(x: wp.vec3, s: float):
                return x * s

            @wp.func_grad(scale)
            def adj_scale(x: wp.vec3, s: float, adj_ret: wp.vec3):
                wp.adjoint[x] += adj_ret * s
                wp.adjoint[s] += wp.dot(x, adj_ret)
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if function.kind != "func_grad":
                continue
            assigned: dict[str, int] = {}
            for write in function.adjoint_writes:
                assigned[write.name] = assigned.get(write.name, 0) + 1
            for write in function.adjoint_writes:
                if write.operator is not None or _reads_own_adjoint(context, write):
                    continue
                fix = _fix(write) if assigned[write.name] == 1 and len(write.node.targets) == 1 else None
                context.report(
                    self, write.node,
                    f"`wp.adjoint[{write.name}]` is assigned, which discards the gradient already accumulated for"
                    f" `{write.name}` by its other uses; accumulate with `+=`",
                    fix=fix,
                    data=_caller_data(context, function),
                )


def _reads_own_adjoint(context: FileContext, write: AdjointWrite) -> bool:
    target = context.code(write.target)
    return any(context.code(node) == target for node in walk(write.value) if node.__class__ is write.target.__class__)


def _fix(write: AdjointWrite):
    def build(context: FileContext):
        content = f"{context.code(write.target)} += {context.code(write.value)}"
        return context.replace_nodes(write.node, write.node, content, f"Accumulate into `wp.adjoint[{write.name}]`",
                                     Applicability.UNSAFE)
    return build


def _caller_data(context: FileContext, function: FunctionModel) -> dict:
    """What to gradcheck: the first differentiable kernel of the file calling the function, else the function."""
    args = function.decorator_args
    target = context.code(args[0].value) if args else None
    for caller in context.kernels.kernels():
        if caller.differentiable and any(call.name == target for call in caller.calls):
            return caller.runtime_data()
    for func in context.kernels.by_name(target or ""):
        if func.kind == "func":
            return func.runtime_data()  # the function itself, run through its custom adjoint
    return {}
