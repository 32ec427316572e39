"""An array element written after the same kernel read it: the facts WL102 and WL115 share.

A write is paired with the reads that can run before it on the same element (``same_element``).
Those pairs split in two: the ones that meet by arithmetic (the same index, a loop counter against
the thread index), which WL102 reports, and the ones that meet only where values loaded from index
arrays coincide (``body_q[child]`` after ``body_q[parent]``), which only the data decide and WL115
reports on request.
"""

from __future__ import annotations

from warp_lint.context import FileContext
from warp_lint.dataflow import Use, dataflow_of
from warp_lint.kernels import ArrayAccess, FunctionModel
from warp_lint.same_element import index_data_decides, may_touch_same_element
from warp_lint.warp_types import code_of


def stores_after_reads(context: FileContext):
    """Each store into a float array of a differentiable kernel or func, once, with its
    ``overwritten_reads``: (function, write, by arithmetic, by index data)."""
    for function in context.kernels.functions:
        if not function.differentiable:
            continue
        seen: set[int] = set()
        for write in function.accesses:
            if write.kind != "write" or id(write.node) in seen:
                continue
            seen.add(id(write.node))
            if not function.arrays[write.array].type.differentiable:
                continue  # integer arrays carry no gradient
            by_arithmetic, by_data = overwritten_reads(function, write)
            if by_arithmetic or by_data:
                yield function, write, by_arithmetic, by_data


def overwritten_reads(function: FunctionModel, write: ArrayAccess) -> tuple[list[ArrayAccess], list[ArrayAccess]]:
    """The reads of the written element that can run before the write (earlier in the body, or
    later in a loop around both: the previous iteration's), in order: those that meet it by
    arithmetic alone, and those that meet it only where index data coincide. A helper call's own
    read and write of an array share the call's order: the helper reports its own read-then-write."""
    reads = [read for read in function.reads(write.array) if read.order != write.order
             and may_touch_same_element(function, read, write)]
    by_data = [read for read in reads if index_data_decides(function, read, write)]
    return [read for read in reads if read not in by_data], by_data


def needed_use(context: FileContext, function: FunctionModel, write: ArrayAccess, reads: list[ArrayAccess]
               ) -> Use | str | None:
    """Why the backward pass needs the values the kernel read (``reads``) from the element before
    overwriting it: a use of them whose adjoint reads them (a product with an active value, a
    nonlinear call, a branch), or "helper" when a helper reads it; None when every use is linear
    (measured right on Warp 1.19: `v = a[i]; a[i] = v + e`, `a[i] = 0.5 * a[i] - b[i]`,
    `a[i] = wp.add(a[i], b[i])`)."""
    if any(read.via for read in reads):
        return "helper"
    flow = dataflow_of(function, context.names)
    if write.operator in ("*=", "/=") and not flow.free(write.statement.value):
        return "in place"  # `a[i] *= g[i]`: the adjoint multiplies by the replayed value
    if write.operator and write.operator not in ("+=", "-=", "*=", "/="):
        return "in place"
    return flow.needing_use_of_reads(write.array, {id(read.node) for read in reads}, write.component)


def needed_clause(context: FileContext, array: str, needed: Use | str | None) -> str:
    """`` (the value read is multiplied by `b` on line 7, so its adjoint needs the value)``, or ""."""
    if not isinstance(needed, Use) or not needed.how:
        return ""
    line = context.position(needed.statement)[0].line
    what = "the value read" if needed.name == "@" + array else f"`{needed.name}`, computed from it,"
    return f" ({what} is {needed.how} on line {line}, so its adjoint needs the value)"


def read_element(read: ArrayAccess) -> str:
    """`` `x[p]` ``, `` `x[p]` (through `helper()`) `` where a helper reads it at an element its
    arguments name, `` `x` `` where the element is not known."""
    if read.element is not None and (read.via or not read.index):
        index = ", ".join(code_of(part) for part in read.element)
    else:
        index = read.index
    named = f"`{read.array}[{index}]`" if index else f"`{read.array}`"
    return f"{named} (through `{read.via}()`)" if read.via else named


def written_element(write: ArrayAccess) -> str:
    if write.via:
        return f"`{write.array}` (through `{write.via}()`)"
    return f"`{write.array}[{write.index}]`" if write.index else f"`{write.array}`"
