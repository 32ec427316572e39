from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import mentions_name, signed_terms
from warp_lint.kernels import ArrayAccess, FunctionModel, gradient_free
from warp_lint.rule import Example, Rule


class ArrayReadThenWrite(Rule):
    """An array is written after it was read in the same kernel.

    ## What it does
    Flags a store into an array argument that the same kernel (or a `@wp.func` it calls) read
    earlier: `a[i] = a[i] * a[i]`; `b[i] = a[i] * a[i]` then `a[i] = 1.0`; an in-place clamp
    `f = flux[i]` then `if f > cap: flux[i] = cap`; and `*=`, `/=`, `%=`, `**=` on an array
    element, which lower to a read-modify-write. In a loop, a read in one iteration followed by
    the write in the next counts too.

    ## Why is this bad?
    Warp's backward pass replays the forward reads from memory. Once the kernel has overwritten
    the array, the replayed read sees the new value, and every gradient that depends on it is
    wrong, without an error. Warp's own overwrite tracking
    (`wp.config.verify_autograd_array_access`) misses reads that are the left operand of a binary
    operator (`a[i] = a[i] * g[i]`) and reports `*=` only at debug log level.

    `+=`/`-=` on array elements and `wp.atomic_add`/`wp.atomic_sub` are accumulations, which Warp
    differentiates correctly: they are not flagged. `a[i] = a[i] + e` (with `a` not in `e`) was
    wrong only before Warp 1.13, which double counted it. Writing first and reading later is fine,
    and so is scaling in place by a value that carries no gradient (`a[i] = a[i] * damping` with
    `damping` a scalar argument or a literal): the derivative does not depend on the replayed value.

    ## Fix safety
    No automatic fix: write the result to a separate output array (or accumulate with `+=`).

    ## Warp versions
    All versions; the additive form `a[i] = a[i] + e` only `<1.13`.

    ## Confirmation
    gradcheck (the in-place array is restored from a snapshot before every evaluation); a
    disagreement is confirmed when it vanishes with the store redirected to a separate array.
    Warp's overwrite tracking runs as a step of its own, as supporting evidence, only when the
    gradcheck does not decide.
    """

    code = "WL102"
    name = "array-read-then-write"
    runtime_strategy = ("gradcheck", "overwrite-tracking")
    safe_form = "redirect-write"

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
            """),
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
                if read is None or _scaled_by_a_constant(context, function, write, read):
                    continue
                reported.add(id(write.node))
                self._report(context, function, write, read)

    def _report(self, context: FileContext, function: FunctionModel, write: ArrayAccess, read: ArrayAccess) -> None:
        array = write.array
        where = f"`{array}[{write.index}]`" if write.index else f"`{array}`"
        if write.via:
            where = f"`{array}` (through `{write.via}()`)"
        if write.operator:
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
        additive = _additive_update(function, write, read)
        context.report(self, write.node, message, affected_versions="<1.13" if additive else None,
                       data=function.runtime_data())


def _earlier_read(function: FunctionModel, write: ArrayAccess) -> ArrayAccess | None:
    reads = function.reads(write.array)
    for read in reads:
        if read.order < write.order:
            return read
    for loop in function.loops:  # a read later in the body runs before the next iteration's write
        if loop.start_order <= write.order <= loop.end_order:
            for read in reads:
                if write.order < read.order <= loop.end_order:
                    return read
    return None


def _sole_read_in_the_store(function: FunctionModel, write: ArrayAccess, read: ArrayAccess) -> bool:
    """A plain `a[...] = <value>` whose value holds the kernel's only earlier read of `a`."""
    statement = write.statement
    if not isinstance(statement, cst.Assign) or write.via or write.operator:
        return False
    earlier = [r for r in function.reads(write.array) if r.order < write.order]
    return earlier == [read] and read.statement is statement


def _scaled_by_a_constant(context: FileContext, function: FunctionModel, write: ArrayAccess,
                          read: ArrayAccess) -> bool:
    """`a[i] = a[i] * c`, `c * a[i]`, `a[i] / c` or `-a[i]` with `c` carrying no gradient: the
    derivative is `c` whatever value the replay reads, so the gradient is right (the runtime checker
    clears it: measured on 1.19)."""
    if not _sole_read_in_the_store(function, write, read):
        return False
    value = write.statement.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        return value.expression is read.node
    if not isinstance(value, cst.BinaryOperation):
        return False
    if isinstance(value.operator, cst.Multiply):
        other = value.right if value.left is read.node else value.left if value.right is read.node else None
    elif isinstance(value.operator, cst.Divide) and value.left is read.node:
        other = value.right
    else:
        return False
    return other is not None and gradient_free(function, other, context.names)


def _additive_update(function: FunctionModel, write: ArrayAccess, read: ArrayAccess) -> bool:
    """`a[i] = a[i] + e` with `a` nowhere in `e`, and no other read of `a` before: wrong only before 1.13."""
    if not _sole_read_in_the_store(function, write, read):
        return False
    terms = signed_terms(write.statement.value)
    own = [sign for sign, term in terms if term is read.node]
    others = [term for _, term in terms if term is not read.node]
    return own == [1] and not any(mentions_name(term, write.array) for term in others)

