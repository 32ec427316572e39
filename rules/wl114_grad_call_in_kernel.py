from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.kernels import CallSite, FunctionModel
from warp_lint.rule import Example, Rule


class GradCallInKernel(Rule):
    """`wp.grad(f)(...)` is called in a backward-enabled kernel, outside a `@wp.func_grad`.

    ## What it does
    Flags calls of `wp.grad(f)` (directly, `wp.grad(f)(x)`, or through a local,
    `df = wp.grad(f); df(x)`) in kernels and `@wp.func` functions with backward enabled. Calls
    inside `@wp.func_grad` functions, and in kernels with `enable_backward=False` (per kernel or
    through `wp.set_module_options`), are fine.

    ## Why is this bad?
    `wp.grad(f)` evaluates the derivative in the forward pass only; the call does not take part in
    automatic differentiation, so the backward pass treats its result as a constant and every
    second-order term through it vanishes. Measured on 1.13.0 through 1.19.0 with
    `out[i] = wp.grad(cube)(x[i])` (`cube(x) = x**3`): AD gradient `[0, 0]` against finite
    differences `[3.41, 6.93]`. Warp logs a warning, but only when the module is compiled: a
    kernel-cache hit is silent.

    ## Fix safety
    No automatic fix. Write the derivative as an ordinary `@wp.func` (`3.0 * x * x`) so that it is
    differentiated, or launch with `enable_backward=False` when no gradient through it is wanted.

    ## Warp versions
    All versions that have `wp.grad` (measured on 1.12.1 through 1.19.0).

    ## Confirmation
    gradcheck.
    """

    code = "WL114"
    name = "grad-call-in-kernel"
    runtime_strategy = ("gradcheck",)

    VALID = [
        Example("""
            import warp as wp

            @wp.func
            def cube(x: float):
                return x * x * x

            @wp.func
            def cube_derivative(x: float):
                return 3.0 * x * x

            @wp.kernel
            def slope(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = cube_derivative(x[i])
            """),
        Example("""
            import warp as wp

            @wp.func
            def cube(x: float):
                return x * x * x

            @wp.kernel(enable_backward=False)
            def slope(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = wp.grad(cube)(x[i])
            """),
        Example("""
            import warp as wp

            @wp.func
            def soft(x: float):
                return wp.log(1.0 + wp.exp(x))

            @wp.func
            def softer(x: float):
                return soft(x) * 0.5

            @wp.func_grad(softer)
            def adj_softer(x: float, adj_ret: float):
                wp.adjoint[x] += 0.5 * wp.grad(soft)(x) * adj_ret
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.func
            def cube(x: float):
                return x * x * x

            @wp.kernel
            def slope(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = wp.grad(cube)(x[i])
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def angle_slopes(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                d_atan2 = wp.grad(wp.atan2)
                db, da = d_atan2(b[i], a[i])
                out[i] = db * da
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            handles = _grad_handles(context, function)
            for call in function.calls:
                target = _grad_target(context, call, handles)
                if target is None:
                    continue
                context.report(
                    self, call.node,
                    f"`wp.grad({target})` is evaluated in the forward pass only: the backward pass treats its"
                    f" result as a constant and the second-order terms vanish; write the derivative as a"
                    f" @wp.func, or launch with enable_backward=False (Warp warns only when it compiles the module)",
                    data=function.runtime_data(),
                )


def _grad_handles(context: FileContext, function: FunctionModel) -> dict[str, str]:
    """Locals bound to `wp.grad(f)`: name -> the code of f."""
    handles = {}
    for binding in function.bindings:
        if _is_grad_call(context, binding.value):
            handles[binding.name] = context.code(binding.value.args[0].value)
        else:
            handles.pop(binding.name, None)
    return handles


def _grad_target(context: FileContext, call: CallSite, handles: dict[str, str]) -> str | None:
    callee = call.node.func
    if _is_grad_call(context, callee):
        return context.code(callee.args[0].value)
    if isinstance(callee, cst.Name) and callee.value in handles:
        return handles[callee.value]
    return None


def _is_grad_call(context: FileContext, node) -> bool:
    return (isinstance(node, cst.Call) and len(node.args) == 1
            and context.names.qualify(node.func) == "warp.grad")
