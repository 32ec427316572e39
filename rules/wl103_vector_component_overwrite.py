from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import mentions_name
from warp_lint.dataflow import BRANCH, NONLINEAR, Dataflow, Use, dataflow_of
from warp_lint.kernel_facts import destination_data, local_containers
from warp_lint.kernels import ComponentWrite, FunctionModel, LocalBinding, Loop, mutually_exclusive
from warp_lint.rule import Example, Rule
from warp_lint.same_element import may_touch_again
from warp_lint.stale_after_loop import StaleUse, first_stale_use, loop_end
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
    `wp.vec3(0.0, 0.0, 0.0)`) with each component assigned once, and `+=`/`-=` on components (WL116
    reports the ones that follow a call that took the whole vector). A
    write in an unrolled loop whose iterations write different components (`m[i, i] = d[i] * k` in
    `for i in range(3)`, the index compared as WL102 compares array indices) assigns each component
    once, so on a constant matrix it is safe too; a second loop over the same diagonal
    (`m[i, i] = m[i, i] + r[i]`) is then the hazard, and only it is flagged. In a dynamic loop
    such a write is flagged, whatever it overwrites, where the local's value is read afterwards
    (or in the passes) where an adjoint needs it: a nonlinear use whose other operand carries a
    gradient, a comparison deciding an `if`, an index; stored or returned as it is (`out[i] = m`,
    `return v`), it is not.

    ## Why is this bad?
    From Warp 1.7.0 a component assignment mutates the local in place and its adjoint does not
    cut the gradient of the value it overwrote: `v = vel[i]; v.y = 0.0` still passes gradient 1
    to `vel[i].y`, and an in-place clamp double counts (measured on 1.19.0; correct on 1.6.2).

    ## Fix safety
    No automatic fix. Build a new value instead (`v = wp.vec3(v.x, 0.0, v.z)`), or set
    `wp.config.enable_vector_component_overwrites = True` before the module is loaded. In a dynamic
    loop whose local is read afterwards neither helps: the backward pass sees the local as it was
    before the loop (measured on 1.19, with the option and without), so the message gives what
    does: unroll the loop up to the
    vector's length (`for k in range(wp.static(N)):` with `if k < n:`), or store the values into an
    array argument (both measured right); a component the passes also read (an accumulator) needs
    a slot per pass. Such a finding holds for every Warp version.

    ## Warp versions
    `>=1.7`. Not reported where `wp.config.enable_vector_component_overwrites = True` is set (at
    module level, or in a test module's `setUpModule()`) before the kernel is defined, except a
    write in a dynamic loop, which the option does not mend. A module option of that name does
    nothing: Warp takes it from `wp.config` (measured on 1.19: `wp.set_module_options(...)` with it
    leaves the overwrite uncut), so it does not silence the rule. Measured on a `wp.mat33` of
    zeros: `for i in range(3): m[i, i] = d[i] * k` matches finite differences on 1.4.2, 1.12.1,
    1.13.0, 1.14.0 and 1.19.0; a second loop `m[i, i] = m[i, i] + r[i]` doubles the gradient of
    `d` (AD 11.94 for FD 5.97) on 1.12.1 through 1.19.0 and matches on 1.4.2. The first loop alone
    as `range(n)`, a dynamic loop, then `out[tid] = m`, matches on 1.19.0 (AD 16.5, 28.5, 40.5 for
    FD 16.5, 28.5, 40.5), and so do a vector filled that way and returned from a `@wp.func`; read
    after the loop in a product (`lam[0] * x[1] + lam[1] * x[2]`) it gives `x[2]` a zero gradient
    (finite differences 0.49), with the option and without, in a kernel and in a `@wp.func`. On
    1.19.0 (float64, against central differences): a swap of two components (`t = e[0]; e[0] =
    e[1]; e[1] = t`, as an eigenvalue sort does), a Jacobi rotation of two matrix rows
    (`vt[0] = c * v_i - s * v_j`) and `r[1] = 0.0` on an active vector are wrong; a constant
    `wp.spatial_vector()` whose slots are set in the two arms of an `if` in an unrolled loop is right.

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
        # A test module that turns the setting on before its tests launch anything (Warp's own
        # `test_quat_assign_copy.py` does).
        Example("""
            import warp as wp

            def setUpModule():
                wp.config.enable_vector_component_overwrites = True

            def tearDownModule():
                wp.config.enable_vector_component_overwrites = False

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
            def diagonal(d: wp.array(dtype=float), k: float, out: wp.array(dtype=wp.mat33)):
                tid = wp.tid()
                m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
                for i in range(3):
                    m[i, i] = d[i] * k
                out[tid] = m
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def active_slots(x: wp.array(dtype=float), dim: int, out: wp.array(dtype=wp.spatial_vector)):
                i = wp.tid()
                result = wp.spatial_vector()
                for slot in range(6):
                    if slot < dim:
                        result[slot] = x[i] * x[slot]
                    else:
                        result[slot] = 0.0
                out[i] = result
            """),
        # The component overwritten was a literal: no gradient to cut (measured right on 1.19).
        Example("""
            import warp as wp

            @wp.kernel
            def torque(f: wp.array(dtype=float), spatial: int, out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                tau = wp.vec3(f[3 * i], f[3 * i + 1], 0.0)
                if spatial == 1:
                    tau[2] = f[3 * i + 2]
                out[i] = tau
            """),
        # Zeros given a length and a type (the keywords hold no value), each component written
        # once in a dynamic loop from other values, returned as it is.
        Example("""
            import warp as wp

            @wp.func
            def wrapped(x: wp.vec3, y: wp.vec3, n: int):
                d = wp.vector(0.0, length=3, dtype=float)
                for i in range(n):
                    d[i] = wp.mod(x[i] - y[i], 1.0)
                return d
            """),
        # Each pass of a dynamic loop writes another component, and what they wrote is only stored
        # after it (linearly): the adjoint needs no value of `m` (measured right on 1.19).
        Example("""
            import warp as wp

            @wp.kernel
            def diagonal(d: wp.array(dtype=float), k: float, n: int, out: wp.array(dtype=wp.mat33)):
                tid = wp.tid()
                m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
                for i in range(n):
                    m[i, i] = d[i] * k
                out[tid] = m
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def sort_pair(x: wp.array(dtype=float), out: wp.array(dtype=wp.vec2)):
                i = wp.tid()
                e = wp.vec2(x[i] * x[i], x[i + 1])
                if e[0] < e[1]:
                    t = e[0]
                    e[0] = e[1]
                    e[1] = t
                out[i] = e
            """),
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
        Example("""
            import warp as wp

            @wp.kernel
            def diagonal(d: wp.array(dtype=float), r: wp.array(dtype=float), k: float,
                         out: wp.array(dtype=wp.mat33)):
                tid = wp.tid()
                m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
                for i in range(3):
                    m[i, i] = d[i] * k
                for i in range(3):
                    m[i, i] = m[i, i] + r[i]
                out[tid] = m
            """),
        # Read after the dynamic loop where the adjoint needs the value: it sees `lam` as it was
        # before the loop (measured on 1.19: the gradient of `x[2]` is 0 where finite differences
        # give 0.49).
        Example("""
            import warp as wp

            @wp.kernel
            def weights(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                lam = wp.vec4()
                for k in range(n):
                    lam[k] = x[k] * x[k]
                out[0] = lam[0] * x[1] + lam[1] * x[2]
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable:
                continue
            # The option cuts an overwritten component's gradient, but in a dynamic loop the backward
            # pass still sees the local as it was before the loop (measured on 1.19): those stay.
            option_on = context.options.value(OPTION, function.top_level_index, False) is True
            assigned: dict[tuple[str, int], list[ComponentWrite]] = {}
            containers = local_containers(context.names, function)
            flow = dataflow_of(function, context.names)
            for write in function.component_writes:
                if write.is_field or write.operator in ("+=", "-=") or write.name in containers:
                    continue
                if not flow.carries_gradient(write.name):
                    continue  # an integer vector, or a value that never reaches an output: no gradient
                binding = function.binding_before(write.name, write.order)
                earlier = assigned.setdefault((write.name, id(binding)), [])
                repeated = any(e.component == write.component and not mutually_exclusive(e.branches, write.branches)
                               for e in earlier)
                reason = _hazard(context, function, write, binding, repeated)
                earlier.append(write)
                dynamic = _dynamic_loop(function, write, binding)
                stale = _stale_read(flow, write, dynamic) if dynamic is not None else None
                if stale is not None:
                    # Whatever the write overwrites: what the passes wrote is read where an adjoint
                    # needs it, and the backward pass sees the local as it was before the loop.
                    message = _in_dynamic_loop(context, function, flow, write, dynamic, stale)
                    if reason and not option_on and not isinstance(stale, Use):
                        # Unrolled, the loop still overwrites a component that carries a gradient, which the
                        # option mends (measured: right only unrolled and with the option). Slots per pass,
                        # the fix for a local the passes read, write no component at all.
                        message += (f"; unrolled, `{write.spelled}` still {reason}, whose gradient from Warp 1.7"
                                    f" the adjoint does not cut: build the new value instead of writing components, or"
                                    f" set wp.config.{OPTION} = True as well")
                    context.report(self, write.node, message, affected_versions="",
                                   data={**function.runtime_data(), **destination_data(function, flow, {write.name})})
                elif option_on:
                    continue
                elif reason:
                    context.report(
                        self, write.node,
                        f"`{write.spelled}` {reason}: from Warp 1.7 the adjoint does not cut the"
                        f" overwritten value's gradient; build a new value instead"
                        f" (or set wp.config.{OPTION} = True)",
                        data={**function.runtime_data(), **destination_data(function, flow, {write.name})},
                    )


def _dynamic_loop(function: FunctionModel, write: ComponentWrite, binding: LocalBinding | None) -> Loop | None:
    """The dynamic loop, entered after the local was defined, that the write sits in."""
    outer = binding.loops if binding else ()
    return next((loop for loop in write.loops if loop.dynamic and loop not in outer), None)


def _stale_read(flow: Dataflow, write: ComponentWrite, loop: Loop) -> Use | StaleUse | None:
    """Where an adjoint needs the value of what the passes wrote: a use of the local in the loop that
    needs its value, or the first one after it (``stale_after_loop``). None where there is none:
    the backward pass, which sees the local as it was before the loop, then needs nothing of it
    (`return v` or `out[i] = m` after `for k in range(n): v[k] = x[k] * x[k]` is right, measured
    on 1.19)."""
    inside = next((use for use in flow.uses if use.name == write.name and loop in use.loops
                   and use.position in (NONLINEAR, BRANCH)), None)
    return inside or first_stale_use(flow, loop, {write.name})


def _in_dynamic_loop(context: FileContext, function: FunctionModel, flow: Dataflow, write: ComponentWrite,
                     loop: Loop, stale: Use | StaleUse) -> str:
    """A component written in every pass of a dynamic loop and read where an adjoint needs it: the
    backward pass sees the local as it was before the loop there (measured on 1.19, with or without
    the overwrite option), so the fix is a static loop or memory the adjoint reads back; a local the
    passes also read (an accumulator) needs its own slot per pass."""
    name = write.name
    if isinstance(stale, Use):  # read in the passes
        fix = ("keep each pass's values in their own array slots (one per thread and pass, `acc[tid, it, k]`),"
               " which the adjoint reads back as stored, or move the loop into a @wp.func with a custom adjoint")
        carried, read_after = _carried_besides(function, flow, loop, name)
        if carried or read_after:  # slots for this one alone leave the gradient wrong (measured by a judge on newton)
            also = [f"carries {_names(carried)} from pass to pass"] if carried else []
            also += [f"sets {_names(read_after)}, read after it" if len(read_after) > 1 else
                     f"sets {_names(read_after)}, which is read after it"] if read_after else []
            fix += f" (the loop also {' and '.join(also)}: those need the same)"
        line = context.position(stale.statement)[0].line
        return (f"`{write.spelled}` is written in each pass of a dynamic loop ({loop.reason}), and the passes read"
                f" `{name}` ({stale.how or 'used'} on line {line}): the backward pass replays the passes starting from"
                f" `{name}` as it was before the loop, so their adjoints read values they never saw and the gradient is"
                f" wrong, with or without wp.config.{OPTION}; {fix}")
    fix = (f"unroll the loop up to the length of `{name}` (`for k in range(wp.static(N)):` with `if k < n:`"
           f" inside), or store the values into an array argument, which the adjoint reads back as stored")
    line = context.position(stale.node)[0].line
    how = stale.use.how or "used"
    where = (f"`{name}` is {how} on line {line} after it" if stale.origins == [stale.use.name] else
             f"`{stale.use.name}`, computed from `{name}`, is {how} on line {line} after it")
    return (f"`{write.spelled}` is written in each pass of a dynamic loop ({loop.reason}), and {where}: the backward"
            f" pass sees `{name}` there as it was before the loop, so that gradient is wrong, with or without"
            f" wp.config.{OPTION}; {fix}")


def _carried_besides(function: FunctionModel, flow: Dataflow, loop: Loop, name: str
                     ) -> tuple[list[str], list[str]]:
    """The other locals ``loop`` changes that the backward pass would see stale, in the order the
    loop first assigns them: defined before it (or parameters) and assigned again in it, then either
    read by a pass before it assigns them (``Dataflow.carried``; a temporary each pass assigns first
    is not carried) or read after the loop (a flag: `fired = True` in it, `if not fired:` after)."""
    before = {b.name for b in function.bindings if b.order < loop.start_order}
    before |= {p.name for p in function.params if not p.type.is_array}
    end = loop_end(flow, loop)
    carried: list[str] = []
    read_after: list[str] = []
    for binding in function.bindings:
        other = binding.name
        if loop not in binding.loops or other not in before or other == name or other in carried + read_after:
            continue
        if flow.carried(other, loop):
            carried.append(other)
        elif any(u.name == other and u.sequence > end and loop not in u.loops for u in flow.uses):
            read_after.append(other)
    return carried, read_after


def _names(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


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
    if any(loop not in outer_loops and _overwrites_itself(function, write, loop) for loop in write.loops):
        return "is assigned inside a loop on a value defined before it"
    if binding is None:
        return None if write.name not in {p.name for p in function.params} else "overwrites a parameter's component"
    if not _constant_constructor(context, binding.value) and not _constant_component(context, binding.value, write):
        return "overwrites a component of a value that carries a gradient"
    return None


COMPONENT_INDEX = {"x": 0, "y": 1, "z": 2, "w": 3}
TYPE_KEYWORDS = frozenset({"length", "shape", "dtype"})  # `wp.vector(..., length=n, dtype=float)`


def _constant_component(context: FileContext, value, write: ComponentWrite) -> bool:
    """The overwritten component was built from a literal: `tau = wp.vec3(f[a], f[a + 1], 0.0)`, then
    `tau[2] = f[a + 2]` cuts no gradient, whatever the other components carry."""
    if not isinstance(value, cst.Call) or len(value.args) < 2 or any(a.keyword or a.star for a in value.args):
        return False
    component = write.component
    index = COMPONENT_INDEX.get(component) if not component.isdigit() else int(component)
    return index is not None and index < len(value.args) and _is_constant(context, value.args[index].value)


def _overwrites_itself(function: FunctionModel, write: ComponentWrite, loop: Loop) -> bool:
    """Whether a later iteration of ``loop`` can overwrite what an earlier one wrote. A loop whose
    iterations write different components (`m[i, i]` in `for i in range(3)`, or in `range(n)`)
    overwrites only the value before the loop (measured right on 1.19, static and dynamic, where
    nothing reads the local's value after the loop: ``_stale_read``)."""
    return may_touch_again(function, write, loop)


def _constant_constructor(context: FileContext, value) -> bool:
    """`wp.vec3()`, `wp.vec3(0.0, 1.0, 0.0)`, `vec4(1.0, 2.0, 3.0, 4.0)`: a value with no gradient to
    cut. A call whose arguments are all constants computes a constant, whatever it calls."""
    if not isinstance(value, cst.Call):
        return False
    # `wp.vector(0.0, length=x.length, dtype=float)`: the keywords that give the type hold no value.
    return all(_is_constant(context, argument.value) for argument in value.args
               if not (argument.keyword is not None and argument.keyword.value in TYPE_KEYWORDS))


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
