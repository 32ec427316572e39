from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import mentions_name
from warp_lint.kernels import ComponentWrite, FunctionModel, LocalBinding
from warp_lint.rule import Example, Rule
from warp_lint.warp_types import BITWISE_AUGMENTED_OPERATORS

OPTION = "enable_vector_component_overwrites"


class VectorComponentOverwrite(Rule):
    """A component of a local vector is overwritten, and its old value's gradient is not cut.

    ## What it does
    Flags component assignments on local vectors, matrices, quaternions and transforms that
    Warp's adjoint gets wrong: a component assigned twice (`v[0] = a; v[0] = v[0] * x`), a
    component read-modify-written with `=` (`f[1] = f[1] - c`), `*=`/`/=` on a component, a
    component assigned inside a loop on a local defined before it, and a component assigned even
    once on a local initialised from a differentiable value (`p = x[i]; p[2] = wp.max(p[2], 0.0)`;
    `v = vel[i]; v.y = 0.0`). Both `v[0]` and `v.x` forms.

    Safe, not flagged: a local from a default or all-literal constructor (`wp.vec3()`,
    `wp.vec3(0.0, 0.0, 0.0)`) with each component assigned once, and `+=`/`-=` on components.

    ## Why is this bad?
    From Warp 1.7.0 a component assignment mutates the local in place and its adjoint does not
    cut the gradient of the value it overwrote: `v = vel[i]; v.y = 0.0` still passes gradient 1
    to `vel[i].y`, and an in-place clamp double counts (measured on 1.19.0; correct on 1.6.2).

    ## Fix safety
    No automatic fix. Build a new value instead (`v = wp.vec3(v.x, 0.0, v.z)`), or set
    `wp.config.enable_vector_component_overwrites = True` before the module is loaded.

    ## Warp versions
    `>=1.7`. Not reported where `wp.config.enable_vector_component_overwrites = True` or the
    module option of that name is set before the kernel is defined.

    ## Confirmation
    gradcheck; confirmed when rebuilding the component write as a new value removes the
    disagreement.
    """

    code = "WL103"
    name = "vector-component-overwrite"
    affected_versions = ">=1.7"
    runtime_strategy = ("gradcheck",)
    safe_form = "rebuild-component"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def zero_y(vel: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                v = vel[i]
                out[i] = wp.vec3(v.x, 0.0, v.z)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def build(x: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                v = wp.vec3()
                v[0] = x[i] * 2.0
                v[1] += x[i]
                out[i] = v
            """),
        Example("""
            import warp as wp

            wp.config.enable_vector_component_overwrites = True

            @wp.kernel
            def zero_y(vel: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                v = vel[i]
                v.y = 0.0
                out[i] = v
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def zero_y(vel: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                v = vel[i]
                v.y = 0.0
                out[i] = v
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def twice(x: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                v = wp.vec3()
                v[0] = x[i] * 2.0
                v[0] = v[0] * x[i]
                out[i] = v
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def clamp(x: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                p = x[i]
                p[2] = wp.max(p[2], 0.0)
                out[i] = p
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def scale(x: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                f = wp.vec3(1.0, 2.0, 3.0)
                f[1] *= x[i]
                out[i] = f
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or context.options.value(OPTION, function.top_level_index, False) is True:
                continue
            assigned: dict[tuple[str, int], set[str]] = {}
            containers = _local_containers(context, function)
            for write in function.component_writes:
                if write.is_field or write.operator in ("+=", "-=") or write.name in containers:
                    continue
                binding = _binding_before(function, write)
                seen = assigned.setdefault((write.name, id(binding)), set())
                reason = _hazard(context, function, write, binding, write.component in seen)
                seen.add(write.component)
                if reason:
                    spelled = (f"{write.name}.{write.component}" if write.component.isidentifier()
                               else f"{write.name}[{write.component}]")
                    context.report(
                        self, write.node,
                        f"`{spelled}` {reason}: from Warp 1.7 the adjoint does not cut the"
                        f" overwritten value's gradient; build a new value instead"
                        f" (or set wp.config.{OPTION} = True)",
                        data=function.runtime_data(),
                    )


# Kernel-local arrays and tiles (`wp.zeros(shape=8, dtype=float)`, `wp.tile_zeros(...)`): stores into
# them are element stores, not vector component overwrites.
LOCAL_CONTAINER_FACTORIES = {"warp.zeros", "warp.empty", "warp.full", "warp.ones", "warp.array"}


def _local_containers(context: FileContext, function: FunctionModel) -> set[str]:
    found = set()
    for binding in function.bindings:
        if isinstance(binding.value, cst.Call):
            callee = context.names.qualify(binding.value.func) or ""
            if callee in LOCAL_CONTAINER_FACTORIES or callee.startswith("warp.tile"):
                found.add(binding.name)
    return found


def _binding_before(function: FunctionModel, write: ComponentWrite) -> LocalBinding | None:
    found = None
    for binding in function.bindings:
        if binding.name == write.name and binding.order < write.order and binding.operator is None:
            found = binding
    return found


def _hazard(context, function, write: ComponentWrite, binding: LocalBinding | None, repeated: bool) -> str | None:
    if write.operator in BITWISE_AUGMENTED_OPERATORS:
        return None  # integer vectors: no gradient to get wrong
    if write.operator:
        return f"is updated in place with `{write.operator}`"
    if mentions_name(write.value, write.name):
        return f"is overwritten with a value computed from `{write.name}` itself"
    if repeated:
        return "is assigned twice"
    outer_loops = binding.loops if binding else ()
    if any(loop not in outer_loops for loop in write.loops):
        return "is assigned inside a loop on a value defined before it"
    if binding is None:
        return None if write.name not in {p.name for p in function.params} else "overwrites a parameter's component"
    if not _constant_constructor(context, binding.value):
        return "overwrites a component of a value that carries a gradient"
    return None


def _constant_constructor(context: FileContext, value) -> bool:
    """`wp.vec3()`, `wp.vec3(0.0, 1.0, 0.0)`, `vec4(1.0, 2.0, 3.0, 4.0)`: a value with no gradient to
    cut. A call whose arguments are all constants computes a constant, whatever it calls."""
    if not isinstance(value, cst.Call):
        return False
    return all(_is_constant(context, argument.value) for argument in value.args)


def _is_constant(context: FileContext, node) -> bool:
    """A literal, or a constructor or tuple built only from literals."""
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return True
    if isinstance(node, (cst.Tuple, cst.List)):
        return all(_is_constant(context, element.value) for element in node.elements)
    return _constant_constructor(context, node) or context.names.qualify(node) is not None
