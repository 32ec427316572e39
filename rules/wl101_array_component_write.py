from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import walk
from warp_lint.finding import Applicability
from warp_lint.kernels import FunctionModel
from warp_lint.rule import Example, Rule
from warp_lint.warp_types import BITWISE_AUGMENTED_OPERATORS


class ArrayComponentWrite(Rule):
    """A component of an array element is assigned in place (`y[i].x = v`, `particles[i].vel = v`).

    ## What it does
    Flags assignments and augmented assignments to one component of an array element:
    `y[i].x = v`, `y[i][0] = v`, `y[i][0, 1] = v`, `y[i].x += v`, and to one field of an element
    of a `@wp.struct` array: `particles[i].vel = v` (fields without gradient, such as integers,
    aside).

    ## Why is this bad?
    Before Warp 1.14 the adjoint of a component store into an array element was not generated:
    the forward pass is right, and the gradient flowing back through `y` to `v` is silently zero
    (measured on 1.4.2: the AD Jacobian is all zeros; correct from 1.14.0). A struct field store
    is the same store: `p = particles[i]; particles[i].vel = p.vel + f[i] * dt` gives `f` a zero
    gradient on 1.4.2, 1.12.1 and 1.13.0 (finite differences 0.05 to 0.14) and matches from 1.14.0.
    An augmented assignment to a component or field (`y[i].y += v`, `y[i][1] -= v`,
    `particles[i].vel += v`) stayed wrong longer: `v` gets a zero gradient through 1.17.0 and the
    right one from 1.18.0, which also rejects `*=`/`/=` on a component at compile time.

    ## Fix safety
    When every component (every field) of the element is assigned in consecutive statements, the
    fix replaces them with one store of a constructed value of the array's dtype
    (`y[i] = wp.vec3(a, b, c)`, `particles[i] = Particle(pos, vel)` with the fields in declaration
    order), read from the kernel's annotation and the struct's definition. It is safe when the
    components are assigned in order (the values are evaluated in the same order and none of them
    reads `y`), unsafe when they are not. The struct constructor gives the right gradient on every
    measured release (1.4.2, 1.12.1, 1.13.0, 1.14.0, 1.19.0). No fix is offered for a partial
    update, since the only rewrite (`v = y[i]; v.x = a; y[i] = v`, or
    `particles[i] = Particle(p.pos, p.vel + f[i] * dt)`) reads then writes `y`, which is WL102
    (measured for the struct: right from 1.13.0, the old value counted twice on 1.12.1); storing
    into another array is right on every release.

    ## Warp versions
    `<1.14` for a plain store (`=`), `<1.18` for an augmented one (`+=`, `-=`, `*=`, ...); the rule
    is silent when the target Warp version is newer. Measured for struct fields: zero gradient on
    1.4.2, 1.12.1 and 1.13.0, right on 1.14.0 and 1.19.0. For `+=` on a `wp.vec3` component and on
    a struct field: zero gradient on 1.4.2, 1.12.1 and each of 1.13.0 to 1.17.0, right on 1.18.0
    and 1.19.0; `y[i][1] -= v`: zero on 1.4.2 and 1.17.0, right from 1.18.0 (it does not compile on
    1.12.1 to 1.14.0); `y[i].y *= 2.0`: AD 1.31 for FD 2.63 up to 1.17.0, a compile error from 1.18.0.

    ## Confirmation
    gradcheck: the kernel's autodiff gradient is compared with finite differences.
    """

    code = "WL101"
    name = "array-component-write"
    affected_versions = "<1.18"  # `=` only <1.14
    runtime_strategy = ("gradcheck",)

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)
            """, target="<1.14"),
        Example("""
            import warp as wp

            @wp.kernel
            def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                y[i].x = 2.0 * x[i]
            """, target=">=1.14"),
        Example("""
            import warp as wp

            @wp.struct
            class Particle:
                pos: wp.vec3
                vel: wp.vec3

            @wp.kernel
            def step(particles: wp.array(dtype=Particle), f: wp.array(dtype=wp.vec3), dt: float):
                tid = wp.tid()
                p = particles[tid]
                particles[tid].vel = p.vel + f[tid] * dt
            """, target=">=1.14"),
        Example("""
            import warp as wp

            @wp.kernel
            def bump(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                y[i][1] += x[i]
            """, target=">=1.18"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                y[i].x = 2.0 * x[i]
                y[i].y = x[i]
                y[i].z = 0.0
            """, fixed="""
            import warp as wp

            @wp.kernel
            def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)
            """, target="<1.14"),
        Example("""
            import warp as wp

            @wp.kernel
            def bump(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                y[i][1] += x[i]
            """, target=">=1.14,<1.18"),
        Example("""
            from warp import array, kernel, mat22, tid

            @kernel
            def fill(x: array(dtype=float), m: array(dtype=mat22)):
                i = tid()
                m[i][0, 1] = x[i]
            """, target="<1.14"),
        Example("""
            import warp as wp

            @wp.struct
            class Particle:
                pos: wp.vec3
                vel: wp.vec3

            @wp.kernel
            def step(particles: wp.array(dtype=Particle), f: wp.array(dtype=wp.vec3), dt: float):
                tid = wp.tid()
                p = particles[tid]
                particles[tid].vel = p.vel + f[tid] * dt
            """, target="<1.14"),
        Example("""
            import warp as wp

            @wp.struct
            class Particle:
                pos: wp.vec3
                vel: wp.vec3
                id: int

            @wp.kernel
            def spawn(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), out: wp.array(dtype=Particle)):
                tid = wp.tid()
                out[tid].pos = x[tid]
                out[tid].vel = v[tid] * 2.0
                out[tid].id = tid
            """, fixed="""
            import warp as wp

            @wp.struct
            class Particle:
                pos: wp.vec3
                vel: wp.vec3
                id: int

            @wp.kernel
            def spawn(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), out: wp.array(dtype=Particle)):
                tid = wp.tid()
                out[tid] = Particle(x[tid], v[tid] * 2.0, tid)
            """, target="<1.14"),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable:
                continue
            fixes = _whole_element_runs(context, function)
            for access in function.accesses:
                if access.component is None or access.via is not None or access.kind == "read":
                    continue
                if access.operator in BITWISE_AUGMENTED_OPERATORS:
                    continue  # bitwise: an integer element, no gradient
                param_type = function.arrays[access.array].type
                struct = context.kernels.structs.get(param_type.dtype or "")
                if struct is not None:
                    field = struct.fields.get(access.component)
                    carries_gradient = field is not None and not field.is_array and field.differentiable
                else:
                    carries_gradient = param_type.differentiable
                if not carries_gradient:
                    continue  # integer components and fields have no gradient, nor do array fields
                operator = access.operator or "="
                # Measured: a plain store is right from 1.14.0, `+=`/`-=` only from 1.18.0 (other
                # augmented operators on a component are rejected at compile time from 1.18.0).
                affected = "<1.14" if access.operator is None else "<1.18"
                element = f"`{access.array}[{access.index}]`"
                if struct:
                    advice = (f"store a whole `{param_type.dtype_code or struct.name}(...)` instead, into another array"
                              f" if it is built from this element")
                    what = f"Field `{access.component}`"
                else:
                    advice, what = f"build the value in a local and store {element} once", f"Component `{access.component}`"
                context.report(
                    self,
                    access.statement,
                    f"{what} of {element} is written in place (`{operator}`): its gradient is dropped; {advice}",
                    fix=fixes.get(id(access.statement)),
                    affected_versions=affected,
                    data=function.runtime_data(),
                )


def _whole_element_runs(context: FileContext, function: FunctionModel) -> dict[int, object]:
    """Runs of consecutive statements that assign every component of one element, once each."""
    fixes: dict[int, object] = {}
    for block in walk(function.node.body):
        if not isinstance(block, cst.IndentedBlock):
            continue
        run: list[tuple[cst.SimpleStatementLine, cst.Assign, str, str, str]] = []
        for statement in list(block.body) + [None]:
            store = _component_store(statement, function)
            if store and run and store[2:4] == run[-1][2:4]:
                run.append(store)
                continue
            _offer_fix(context, function, run, fixes)
            run = [store] if store else []
    return fixes


def _comments_inside(run) -> bool:
    """Comments the replaced span would swallow: a trailing one before the last statement, or a
    comment line before any statement but the first."""
    statements = [statement for statement, *_ in run]
    if any(s.trailing_whitespace.comment is not None for s in statements[:-1]):
        return True
    return any(line.comment is not None for s in statements[1:] for line in s.leading_lines)


def _component_store(statement, function: FunctionModel):
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Subscript):
        element, component = target.value, target.attr.value
    elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Subscript) and len(target.slice) == 1:
        element = target.value
        index = target.slice[0].slice
        if not (isinstance(index, cst.Index) and isinstance(index.value, cst.Integer)):
            return None
        component = index.value.value
    else:
        return None
    if not isinstance(element.value, cst.Name) or element.value.value not in function.arrays:
        return None
    index_code = cst.Module(body=[]).code_for_node(element.slice[0]) if len(element.slice) == 1 else None
    if index_code is None:
        return None
    return statement, assign, element.value.value, index_code, component


def _offer_fix(context: FileContext, function: FunctionModel, run, fixes) -> None:
    if len(run) < 2 or _comments_inside(run):
        return
    array, index = run[0][2], run[0][3]
    param_type = function.arrays[array].type
    keys = [component for *_, component in run]
    order = _constructor_order(context, param_type, keys)
    if order is None or param_type.dtype_code is None or sorted(keys) != sorted(order):
        return
    values = {component: assign.value for _, assign, _, _, component in run}
    if any(isinstance(node, cst.Name) and node.value == array for value in values.values() for node in walk(value)):
        return
    arguments = ", ".join(context.code(values[key]) for key in order)
    content = f"{array}[{index}] = {param_type.dtype_code}({arguments})"
    first, last = run[0][1], run[-1][1]
    # Reordering the component values changes their evaluation order: only unsafe then.
    applicability = Applicability.SAFE if keys == order else Applicability.UNSAFE

    def build(ctx: FileContext):
        return ctx.replace_nodes(first, last, content, f"Store `{array}[{index}]` once", applicability)

    for statement, *_ in run:
        fixes[id(statement.body[0])] = build


def _constructor_order(context: FileContext, param_type, keys: list[str]) -> list[str] | None:
    """The components a constructor of the element's dtype takes, in its argument order: a struct's
    fields as declared; a vector's `x, y, z, w`, or `0, 1, ...` for the `y[i][0]` form."""
    struct = context.kernels.structs.get(param_type.dtype or "")
    if struct is not None:
        return list(struct.fields)
    composite = param_type.composite
    if composite is None:
        return None
    names = list(composite.attribute_names)
    return names if set(keys) == set(names) else [str(n) for n in range(composite.length)]
