from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.dataflow import gradient_free
from warp_lint.kernels import ComponentWrite, FunctionModel, LocalBinding
from warp_lint.rule import Example, Rule


class LocalStructFieldWrite(Rule):
    """A field of a kernel-local `@wp.struct` instance is assigned on its own (`b = Body(); b.pos = x[i]`).

    ## What it does
    Flags each field assignment (`=`, `+=`, ...) on a local created from a `@wp.struct` class of
    the same file, in a kernel or a `@wp.func`: `b = Body()` then `b.pos = x[i]`, `b.mass = m[i]`.
    Fields of an integer, boolean, handle or array type, and fields assigned a value without
    gradient (a literal, a loop counter, a kernel's scalar argument), are not flagged.

    ## Why is this bad?
    Before Warp 1.15 the adjoint of a field store on a local struct was not generated: the forward
    pass is right and the gradient flowing through the field is silently zero. Measured with
    `b = Body(); b.pos = x[i]; b.mass = m[i]; out[i] = b.mass * wp.dot(b.pos, b.pos)`: the AD
    gradient of `x` and `m` is all zeros on 1.12.1, 1.13.0 and 1.14.0 (finite differences 3.41,
    6.82, ...), in a kernel and in a `@wp.func` alike, and matches on 1.15.0, 1.16.0, 1.17.0 and
    1.19.0.

    ## Fix safety
    No automatic fix. Build the struct with its values in one call, `b = Body(x[i], m[i])` (the
    value constructor gives correct gradients on every measured release), or keep the values in
    plain locals.

    ## Warp versions
    `<1.15`. Measured zero gradient on 1.12.1, 1.13.0 and 1.14.0; correct on 1.15.0, 1.16.0,
    1.17.0 and 1.19.0.

    ## Confirmation
    gradcheck.
    """

    code = "WL105"
    name = "local-struct-field-write"
    affected_versions = "<1.15"
    runtime_strategy = ("gradcheck",)

    VALID = [
        Example("""
            import warp as wp

            @wp.struct
            class Body:
                pos: wp.vec3
                mass: float

            @wp.kernel
            def energy(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                b = Body(x[i], m[i])
                out[i] = b.mass * wp.dot(b.pos, b.pos)
            """, target="<1.15"),
        Example("""
            import warp as wp

            @wp.struct
            class Body:
                pos: wp.vec3
                mass: float

            @wp.kernel
            def energy(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                b = Body()
                b.pos = x[i]
                b.mass = m[i]
                out[i] = b.mass * wp.dot(b.pos, b.pos)
            """, target=">=1.15"),
        Example("""
            import warp as wp

            @wp.struct
            class Hit:
                index: int
                scale: float

            @wp.kernel
            def tag(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                h = Hit()
                h.index = i
                h.scale = 1.0
                out[i] = x[i] * h.scale
            """, target="<1.15"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.struct
            class Body:
                pos: wp.vec3
                mass: float

            @wp.kernel
            def energy(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                b = Body()
                b.pos = x[i]
                b.mass = m[i]
                out[i] = b.mass * wp.dot(b.pos, b.pos)
            """, target="<1.15"),
        Example("""
            import warp as wp

            @wp.struct
            class State:
                x: float
                v: float

            @wp.func
            def step(x: float, v: float, dt: float):
                s = State()
                s.v = v
                s.x = x + dt * s.v
                return s
            """, target="<1.15"),
    ]

    def check(self, context: FileContext) -> None:
        structs = context.kernels.structs
        if not structs:
            return
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            for write in function.component_writes:
                struct = _local_struct(function, write, structs)
                if struct is None:
                    continue
                field_type = structs[struct].fields.get(write.component)
                if field_type is None or field_type.is_array or not field_type.differentiable:
                    continue
                if gradient_free(function, write.value, context.names):
                    continue  # a literal, a counter, a kernel's scalar argument: no gradient to drop
                operator = write.operator or "="
                context.report(
                    self, write.node,
                    f"Field `{write.component}` of the local struct `{write.name}` (`{struct}`) is assigned on its"
                    f" own (`{operator}`): its gradient is dropped (zero); construct the struct with its values"
                    f" (`{struct}(...)`) or keep them in plain locals",
                    data=function.runtime_data(),
                )


def _local_struct(function: FunctionModel, write: ComponentWrite, structs) -> str | None:
    """The struct class the local was last created from, when it is one of this file's structs."""
    binding: LocalBinding | None = None
    for candidate in function.bindings:
        if candidate.name == write.name and candidate.order < write.order and candidate.operator is None:
            binding = candidate
    if binding is None or not isinstance(binding.value, cst.Call):
        return None
    callee = binding.value.func
    if isinstance(callee, cst.Name) and callee.value in structs:
        return callee.value
    return None
