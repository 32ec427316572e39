from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import mentions_name, name_uses, signed_terms, walk
from warp_lint.kernels import ArrayAccess, FunctionModel, gradient_free, index_code
from warp_lint.rule import Example, Rule
from warp_lint.same_element import may_touch_same_element


class ArrayReadThenWrite(Rule):
    """An array is written after it was read in the same kernel.

    ## What it does
    Flags a store into an array argument that the same kernel (or a `@wp.func` it calls) read
    earlier: `a[i] = a[i] * a[i]`; `b[i] = a[i] * a[i]` then `a[i] = 1.0`; an in-place clamp
    `f = flux[i]` then `if f > cap: flux[i] = cap`; and `*=`, `/=`, `%=`, `**=` on an array
    element, which lower to a read-modify-write. In a loop, a read in one iteration followed by
    the write in the next counts too.

    Only a store that can hit an element read before it is flagged: the index expressions are
    compared, and elements are told apart only when provably different (`i` and `i + 1`, `2 * i`
    and `2 * i + 1`, with `i` the same thread index or loop counter). So `prods[i + 1] = x[i] *
    prods[i]` in a `range` loop (each element read after it was written, never written after it
    was read) is not flagged, while `a[i] = a[i + 1] * a[i + 1]` is (`a[i + 1]` is read in one
    iteration and overwritten in the next). An index that is computed, read from an array, or
    assigned more than once may be any element.

    ## Why is this bad?
    Warp's backward pass replays the forward reads from memory. Once the kernel has overwritten
    the array, the replayed read sees the new value, and every gradient that depends on it is
    wrong, without an error. Warp's own overwrite tracking
    (`wp.config.verify_autograd_array_access`) misses reads that are the left operand of a binary
    operator (`a[i] = a[i] * g[i]`) and reports `*=` only at debug log level.

    `+=`/`-=` on array elements and `wp.atomic_add`/`wp.atomic_sub` are accumulations, which Warp
    differentiates correctly: they are not flagged. Writing first and reading later is fine. An
    update that only adds to the old value (`a[i] = a[i] + e`, `a` not in `e`) or scales it by a
    value without gradient (`a[i] = a[i] * damping`, `damping` a scalar argument or a literal)
    does not need the replayed value, in the store or through a local copy used nowhere else
    (`v = a[i]; a[i] = v + e`): it is right from Warp 1.13, and before that the store does not cut
    the old value's gradient, which is counted twice. Such an update of one component or field
    (`p = particles[i]; particles[i].vel = p.vel + f[i] * dt`) is left to WL101, whose store
    dropped the gradient before 1.14.

    ## Fix safety
    No automatic fix: write the result to a separate output array (or accumulate with `+=`).

    ## Warp versions
    All versions; an additive or constant-scaled update only `<1.13`. Measured (AD against finite
    differences): `a[i] = a[i] * damping` and `v = a[i]; a[i] = v * damping` give AD 2.16 for FD 1.02
    on 1.4.2 and 1.12.1 and match on 1.13.0 and 1.19.0, as does `v = a[i]; a[i] = v + x[i] * x[i]`;
    `prods[i + 1] = x[i] * prods[i]` in a dynamic loop matches on 1.4.2, 1.12.1 through 1.14.0 and
    1.19.0, while `a[i] = a[i + 1] * a[i + 1]` in a `range(n)` loop is wrong on all of them (AD 9.10
    for FD 3.41) and `p = particles[i]; particles[i].vel = wp.cw_mul(p.vel, f[i])` too.

    ## Confirmation
    gradcheck (the in-place array is restored from a snapshot before every evaluation), with
    Warp's overwrite tracking as supporting evidence.
    """

    code = "WL102"
    name = "array-read-then-write"
    runtime_strategy = ("gradcheck", "overwrite-tracking")

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(a: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = a[i] * a[i]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def accumulate(x: wp.array(dtype=float), a: wp.array(dtype=float)):
                i = wp.tid()
                a[i] += x[i] * x[i]
                wp.atomic_add(a, 0, x[i])
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def write_then_read(x: wp.array(dtype=float), a: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                a[i] = x[i] * 2.0
                out[i] = a[i] * a[i]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def additive(x: wp.array(dtype=float), a: wp.array(dtype=float)):
                i = wp.tid()
                a[i] = a[i] + x[i] * x[i]
            """, target=">=1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def scale_in_place(a: wp.array(dtype=float), damping: float):
                i = wp.tid()
                a[i] = a[i] * damping
            """, target=">=1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def prefix_products(x: wp.array(dtype=float), n: int, prods: wp.array(dtype=float)):
                prods[0] = 1.0
                for i in range(n):
                    prods[i + 1] = x[i] * prods[i]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def shift_down(a: wp.array(dtype=float), n: int):
                for i in range(n - 1, -1, -1):
                    a[i] = a[i + 1] * a[i + 1]
            """, target=">=1.13"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square_in_place(a: wp.array(dtype=float)):
                i = wp.tid()
                a[i] = a[i] * a[i]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def scale_in_place(a: wp.array(dtype=float), g: wp.array(dtype=float)):
                i = wp.tid()
                a[i] *= g[i]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def clamp(flux: wp.array(dtype=float), cap: float):
                i = wp.tid()
                f = flux[i]
                if f > cap:
                    flux[i] = cap
            """),
        Example("""
            import warp as wp

            @wp.func
            def store(a: wp.array(dtype=float), i: int, v: float):
                a[i] = v

            @wp.kernel
            def through_helper(a: wp.array(dtype=float), b: wp.array(dtype=float)):
                i = wp.tid()
                b[i] = a[i] * a[i]
                store(a, i, 1.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def additive(x: wp.array(dtype=float), a: wp.array(dtype=float)):
                i = wp.tid()
                a[i] = a[i] + x[i] * x[i]
            """, target="<1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def shift_up(a: wp.array(dtype=float), n: int):
                for i in range(n):
                    a[i] = a[i + 1] * a[i + 1]
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable:
                continue
            reported: set[int] = set()
            for write in function.accesses:
                if write.kind != "write" or id(write.node) in reported:
                    continue
                if not function.arrays[write.array].type.differentiable:
                    continue  # integer arrays carry no gradient
                read = _earlier_read(function, write)
                if read is None:
                    continue
                operand = _replayed_operand(function, write, read)
                before_1_13 = operand is not None and (
                    _additive(write, operand) or _scaled_by_a_constant(context, function, write, operand))
                if before_1_13 and write.component is not None:
                    continue  # a component store: its hazard is WL101's, whose versions (<1.14) hold these
                reported.add(id(write.node))
                self._report(context, function, write, read, before_1_13)

    def _report(self, context: FileContext, function: FunctionModel, write: ArrayAccess, read: ArrayAccess,
                before_1_13: bool) -> None:
        array = write.array
        where = f"`{array}[{write.index}]`" if write.index else f"`{array}`"
        if write.via:
            where = f"`{array}` (through `{write.via}()`)"
        if before_1_13:
            message = (f"{where} is overwritten with a value that only adds to or scales what was read from it:"
                       f" before Warp 1.13 the store does not cut the old value's gradient, which is counted twice;"
                       f" write the result to a separate array")
        elif write.operator:
            message = (f"{where} {write.operator} ... reads and overwrites `{array}` in place: the backward pass"
                       f" replays the read from overwritten memory; write the result to a separate array")
        elif read.statement is write.statement and not read.via:
            message = (f"{where} is overwritten with a value read from `{array}` itself: the backward pass replays"
                       f" that read from overwritten memory; write the result to a separate array")
        else:
            line = context.position(read.node)[0].line
            via = f" (through `{read.via}()`)" if read.via else ""
            message = (f"{where} is written after `{array}` was read on line {line}{via}: the backward pass replays"
                       f" that read from overwritten memory; write the result to a separate array")
        context.report(self, write.node, message, affected_versions="<1.13" if before_1_13 else None,
                       data=function.runtime_data())


def _earlier_read(function: FunctionModel, write: ArrayAccess) -> ArrayAccess | None:
    """The first read of the written element that can run before the write: earlier in the body, or
    later in a loop around both (the previous iteration's). A helper call's own read and write of
    an array share the call's order: the helper reports its own read-then-write."""
    reads = [read for read in function.reads(write.array) if read.order != write.order]
    return next((read for read in reads if may_touch_same_element(function, read, write)), None)


def _replayed_operand(function: FunctionModel, write: ArrayAccess, read: ArrayAccess) -> cst.CSTNode | None:
    """In a plain store `a[...] = <value>` after the kernel's only earlier read of `a`, the node of
    <value> that holds what was read: the read itself (`a[i] = a[i] + e`), or the one use of a local
    copy of it (`v = a[i]` then `a[i] = v + e`; `p.vel` in `a[i].vel = p.vel + e` after `p = a[i]`)
    when the copy is used nowhere else, other fields of it aside (the store leaves them as they were)."""
    statement = write.statement
    if not isinstance(statement, cst.Assign) or write.via or write.operator:
        return None
    if [r for r in function.reads(write.array) if r.order < write.order] != [read]:
        return None
    if read.statement is statement:
        return read.node
    copy = read.statement
    if not (isinstance(copy, cst.Assign) and copy.value is read.node and len(copy.targets) == 1
            and isinstance(copy.targets[0].target, cst.Name)):
        return None
    name = copy.targets[0].target.value
    if sum(binding.name == name for binding in function.bindings) != 1:
        return None
    in_value = {id(node) for node in walk(statement.value)}
    operands = []
    for use, parent in name_uses(function.node.body, name):
        if use is copy.targets[0].target:
            continue
        operand = _overwritten_part(use, parent, write.component)
        if operand is not None and id(operand) in in_value:
            operands.append(operand)
        elif operand is not None or not _other_field(use, parent, write.component):
            return None
    return operands[0] if len(operands) == 1 else None


def _overwritten_part(use: cst.Name, parent: cst.CSTNode | None, component: str | None) -> cst.CSTNode | None:
    """The expression around a use of the copy that names what the store overwrites: the copy itself
    for a whole-element store, `p.vel` / `p[0]` for a store into that component."""
    if component is None:
        return use
    if isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value == component:
        return parent
    if isinstance(parent, cst.Subscript) and parent.value is use and index_code(parent) == component:
        return parent
    return None


def _other_field(use: cst.Name, parent: cst.CSTNode | None, component: str | None) -> bool:
    """`p.pos` when the store writes `a[i].vel`: memory the store does not touch. Only named fields
    and components count (`v[0]` and `v.x` are the same component)."""
    return component is not None and component.isidentifier() and isinstance(parent, cst.Attribute) \
        and parent.value is use and parent.attr.value != component


def _scaled_by_a_constant(context: FileContext, function: FunctionModel, write: ArrayAccess,
                          operand: cst.CSTNode) -> bool:
    """`a[i] = a[i] * c`, `c * a[i]`, `a[i] / c` or `-a[i]` with `c` carrying no gradient: the
    derivative is `c` whatever value the replay reads (measured correct from 1.13; double counted
    before, like the additive update)."""
    value = write.statement.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        return value.expression is operand
    if not isinstance(value, cst.BinaryOperation):
        return False
    if isinstance(value.operator, cst.Multiply):
        other = value.right if value.left is operand else value.left if value.right is operand else None
    elif isinstance(value.operator, cst.Divide) and value.left is operand:
        other = value.right
    else:
        return False
    return other is not None and gradient_free(function, other, context.names)


def _additive(write: ArrayAccess, operand: cst.CSTNode) -> bool:
    """`a[i] = a[i] + e` with `a` nowhere in `e`: wrong only before 1.13, which double counted it."""
    terms = signed_terms(write.statement.value)
    own = [sign for sign, term in terms if term is operand]
    others = [term for _, term in terms if term is not operand]
    return own == [1] and not any(mentions_name(term, write.array) for term in others)
