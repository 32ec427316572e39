from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.dataflow import NONLINEAR, Dataflow, Use, dataflow_of
from warp_lint.kernels import ComponentWrite, FunctionModel
from warp_lint.names import dotted_name
from warp_lint.rule import Example, Rule

OPTION = "enable_vector_component_overwrites"
# In-place component updates that the option leaves in place (measured: `=` becomes a new value).
IN_PLACE_COMPONENT_OPERATORS = ("+=", "-=")


class UpdateAfterWholeRead(Rule):
    """A local vector or struct is updated in place after a call took it whole: that call's adjoint reads the update.

    ## What it does
    Flags an in-place update of part of a local value after a call received the whole value
    (or in the update itself) and needs its value for its adjoint:
    - a vector component incremented, `n = wp.length(v)` then `v[0] += 1.0`, or
      `v[0] += wp.length(v)`;
    - a field of a local `@wp.struct` assigned, `e = energy(b)` then `b.mass = 2.0 * m[i]`, where
      `energy` is a `@wp.func` whose result is nonlinear in `b`.

    Not flagged: a part read into a scalar first (`n = v[0] * v[0]`, `e = b.mass * b.mass`, a copy),
    a builtin given one field (`wp.length(b.pos)`, a copy too), a call linear in the value
    (`b.mass + 1.0` in the helper), a new value (`v = v + wp.vec3(n, 0.0, 0.0)`), and updates
    before the call.

    ## Why is this bad?
    Warp updates the part in place: the local is one variable, and the adjoint of the earlier call
    runs in the backward pass on its value after the update, not the value the forward pass
    passed. The gradient is wrong, without an error. `enable_vector_component_overwrites` makes a
    component `=` and an attribute's `+=` (`v.x += e`) build new values, but not a subscript's
    `+=` (`v[0] += e`, `m[0, 0] += e`), and not a struct field. Measured on 1.19.0 (CPU, against
    central differences), with and without the option: `v = (1, 2, 2)`,
    `v[0] += wp.length(v)`, output `v[0] + v[1]` gives AD 2.33 for `v[0]` where the derivative
    is 1.33; `n = wp.length(v); v[0] += 1.0` gives 0.67 for 0.33; a struct with `mass = m`,
    `pos = (m, 1, 0)`, `e = energy(b)` (`b.mass * wp.dot(b.pos, b.pos)`), then `b.mass = 2 m`,
    output `e + b.mass`, gives 5.45 where it is 4.47; `m[0, 0] += wp.determinant(m)` is wrong
    too. `v.x += wp.length(v)` is wrong (3.33 for 1.33) only without the option. The forms above
    that are not flagged match.

    ## Fix safety
    No automatic fix. Build a new value instead of updating the old one in place:
    `v = v + wp.vec3(wp.length(v), 0.0, 0.0)` (measured right), or a new struct for the later
    values (`b2 = Body(); b2.mass = ...`).

    ## Warp versions
    `>=1.7` for vector components (in-place component updates came with 1.7); struct fields
    from 1.15 (before, WL105: field stores have no adjoint at all). Measured on 1.19.0.

    ## Confirmation
    gradcheck; confirmed when the update is rebuilt as a new value.
    """

    code = "WL116"
    name = "update-after-whole-read"
    affected_versions = ">=1.7"
    runtime_strategy = ("gradcheck",)
    safe_form = "rebuild-component"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def grow(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=float)):
                i = wp.tid()
                v = x[i]
                v = v + wp.vec3(wp.length(v), 0.0, 0.0)
                y[i] = v[0] + v[1]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def grow(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=float)):
                i = wp.tid()
                v = x[i]
                n = v[0] * v[0]
                v[0] += 1.0
                y[i] = n + v[1]
            """),
        Example("""
            import warp as wp

            @wp.struct
            class Body:
                mass: float
                pos: wp.vec3

            @wp.func
            def shifted(b: Body):
                return b.mass + 1.0

            @wp.kernel
            def step(m: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                b = Body()
                b.mass = m[i]
                e = shifted(b)
                b.mass = 2.0 * m[i]
                y[i] = 3.0 * e + b.mass
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            wp.config.enable_vector_component_overwrites = True

            @wp.kernel
            def grow(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=float)):
                i = wp.tid()
                v = x[i]
                v[0] += wp.length(v)
                y[i] = v[0] + v[1]
            """),
        Example("""
            import warp as wp

            @wp.struct
            class Body:
                mass: float
                pos: wp.vec3

            @wp.func
            def energy(b: Body):
                return b.mass * wp.dot(b.pos, b.pos)

            @wp.kernel
            def step(m: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                b = Body()
                b.mass = m[i]
                b.pos = wp.vec3(m[i], 1.0, 0.0)
                e = energy(b)
                b.mass = 2.0 * m[i]
                y[i] = e + b.mass
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable:
                continue
            flow = dataflow_of(function, context.names)
            option = context.options.value(OPTION, function.top_level_index, False) is True
            for write in function.component_writes:
                if not write.is_field and write.operator not in IN_PLACE_COMPONENT_OPERATORS:
                    continue  # a component `=`: WL103's (with the option, a new value)
                if option and write.is_attribute:
                    continue  # the option makes `v.x += e` a new value too (measured); not `v[0] += e`
                if write.name in function.arrays or not flow.carries_gradient(write.name):
                    continue
                reader = _whole_read_before(context, function, flow, write)
                if reader is not None:
                    self._report(context, function, write, reader)

    def _report(self, context: FileContext, function: FunctionModel, write: ComponentWrite, reader: Use) -> None:
        update = f"`{write.spelled} {write.operator or '='} ...`"
        line = context.position(reader.node)[0].line
        option = ("" if write.is_field else f" (wp.config.{OPTION} = True makes `.{write.component}` updates new values)"
                  if write.is_attribute else f", with or without wp.config.{OPTION}")
        context.report(
            self, write.node,
            f"{update} updates `{write.name}` in place after it was {reader.how} (line {line}), whose adjoint"
            f" reads `{write.name}` back after the update: the gradient is wrong{option}; build a new"
            f" {'struct' if write.is_field else 'vector'} for the updated value instead",
            affected_versions=">=1.15" if write.is_field else None,
            data=function.runtime_data(),
        )


def _whole_read_before(context: FileContext, function: FunctionModel, flow: Dataflow,
                       write: ComponentWrite) -> Use | None:
    """The first use of the whole value (`wp.length(v)`, `energy(b)`; not `v[0]` or `b.pos`) as a
    call's argument whose adjoint needs it, after the value's binding and no later than the
    update itself."""
    binding = function.binding_before(write.name, write.order)
    start = flow.sequence.get(id(binding.node), -1) if binding is not None else -1
    end = flow.sequence.get(id(write.node))
    if end is None:
        return None
    calls = {id(argument.value): (call.node, position) for call in function.calls
             for position, argument in enumerate(call.node.args)}
    return next((use for use in flow.uses if use.name == write.name and use.position == NONLINEAR
                 and use.member is None and id(use.node) in calls and start < use.sequence <= end
                 and _adjoint_needs(context, *calls[id(use.node)])), None)


def _adjoint_needs(context: FileContext, call: cst.Call, position: int) -> bool:
    """Whether the call's adjoint reads the argument's value: a Warp builtin the dataflow calls
    nonlinear does; a `@wp.func` of this file does where its body uses the parameter nonlinearly
    (`b.mass * wp.dot(b.pos, b.pos)`), not where it only adds it (`b.mass + 1.0`). A helper of
    another file is not read here: left out rather than guessed."""
    qualified = context.names.qualify(call.func) or ""
    if qualified.startswith("warp."):
        return True
    name = dotted_name(call.func)
    helpers = context.kernels.by_name(name) if name else []
    if not helpers:
        return False
    helper = helpers[0]
    argument = call.args[position]
    parameter = argument.keyword.value if argument.keyword else (
        helper.params[position].name if position < len(helper.params) else None)
    helper_flow = dataflow_of(helper, context.names)
    return any(use.name == parameter and use.position == NONLINEAR for use in helper_flow.uses)
