from __future__ import annotations

import re

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.dataflow import gradient_free
from warp_lint.kernels import ArrayAccess, FunctionModel, mutually_exclusive
from warp_lint.rule import Example, Rule


class ArrayDoubleStore(Rule):
    """The same array element is stored twice in one kernel, with no read of the array between.

    ## What it does
    Flags the second of two plain stores (`=`) to one array element, the element named by a
    syntactically identical index (`y[i] = a` ... `y[i] = b`), when the array is not read between
    them. Stores in different arms of one `if`, stores to different indices, different components
    of an element, `+=`/`-=` accumulations, a first store of a value without gradient
    (`y[i] = 0.0`, `y[i] = float(j)`), and a first store followed by an early `return` (or
    `break`/`continue`) that skips the second are not flagged; a read between the stores
    (`y[i] = a; t = y[i]; y[i] = b`) is WL102's business.

    ## Why is this bad?
    Before Warp 1.13 the backward pass propagated the output gradient through *both* stores: the
    gradient of the overwritten value is not cut, so it is counted as if both values reached the
    output. Measured with `y[i] = x[i] * 2.0; y[i] = x[i] * x[i]`: on 1.12.1 the AD gradient is
    `2x + 2` (doubled up) instead of `2x`; correct from 1.13.0 (1.13.0 through 1.17.0 and 1.19.0
    measured), where `tape.backward` zeroes the gradients of written arrays.

    ## Fix safety
    No automatic fix: compute the final value in a local and store it once.

    ## Warp versions
    `<1.13`. Measured doubled on 1.12.1, correct on 1.13.0 and later.

    ## Confirmation
    gradcheck.
    """

    code = "WL106"
    name = "array-double-store"
    affected_versions = "<1.13"
    runtime_strategy = ("gradcheck",)

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def store_once(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                v = x[i] * 2.0
                v = x[i] * x[i]
                y[i] = v
            """, target="<1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def two_slots(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[2 * i] = x[i] * 2.0
                y[2 * i + 1] = x[i] * x[i]
            """, target="<1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def branches(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                if x[i] > 0.0:
                    y[i] = x[i]
                else:
                    y[i] = -x[i]
            """, target="<1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def reset_then_set(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = 0.0
                if x[i] > 0.0:
                    y[i] = x[i] * x[i]
            """, target="<1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def twice(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * 2.0
                y[i] = x[i] * x[i]
            """, target=">=1.13"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def twice(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * 2.0
                y[i] = x[i] * x[i]
            """, target="<1.13"),
        Example("""
            import warp as wp

            @wp.kernel
            def default_then_set(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i]
                if x[i] > 1.0:
                    y[i] = x[i] * x[i]
            """, target="<1.13"),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable:
                continue
            stores = [a for a in function.accesses if _plain_store(a)]
            for position, second in enumerate(stores):
                first = next((s for s in reversed(stores[:position]) if _same_element(s, second)), None)
                if first is None or mutually_exclusive(first.branches, second.branches):
                    continue
                if _constant_store(context, function, first) or _exits_between(function, first, second):
                    continue
                if _read_between(function, first, second) or _index_rebound(function, first, second):
                    continue
                line = context.position(first.node)[0].line
                context.report(
                    self, second.node,
                    f"`{second.array}[{second.index}]` is stored again after the store on line {line} with no"
                    f" read between: the backward pass propagates the gradient through both stores (doubled);"
                    f" compute the value in a local and store it once",
                    data=function.runtime_data(),
                )


def _plain_store(access: ArrayAccess) -> bool:
    return access.kind == "write" and access.operator is None and access.via is None and bool(access.index) \
        and access.node is access.statement


def _constant_store(context: FileContext, function: FunctionModel, access: ArrayAccess) -> bool:
    """`y[i] = 0.0`, `y[i] = float(j)`: a doubled gradient of a constant reaches nothing."""
    value = access.statement.value if isinstance(access.statement, cst.Assign) else None
    return value is not None and gradient_free(function, value, context.names)


def _exits_between(function: FunctionModel, first: ArrayAccess, second: ArrayAccess) -> bool:
    """`if c: y[i] = a; return` ... `y[i] = b`: an early exit after the first store skips the second."""
    for site in function.statements:
        if not isinstance(site.node, (cst.Return, cst.Break, cst.Continue)) or not first.order <= site.order <= second.order:
            continue
        if not isinstance(site.node, cst.Return) and not (site.loops and site.loops[-1] in second.loops):
            continue  # a break/continue skips the second store only when both are in its loop
        depth = len(site.branches)
        if site.branches[:len(first.branches)] == first.branches and second.branches[:depth] != site.branches:
            return True
    return False


def _same_element(first: ArrayAccess, second: ArrayAccess) -> bool:
    return (first.array, first.index, first.component) == (second.array, second.index, second.component)


def _index_rebound(function: FunctionModel, first: ArrayAccess, second: ArrayAccess) -> bool:
    """`y[j] = a; j += 1; y[j] = b`: the same text, another element."""
    names = set(re.findall(r"[A-Za-z_]\w*", second.index))
    return any(b.name in names and first.order < b.order < second.order for b in function.bindings)


def _read_between(function: FunctionModel, first: ArrayAccess, second: ArrayAccess) -> bool:
    """A read of the array between the stores, or anywhere in a loop holding both (the next iteration)."""
    shared_loops = [loop for loop in second.loops if loop in first.loops]
    for access in function.accesses:
        if access.array != first.array or access.kind not in ("read", "accumulate"):
            continue
        if first.order < access.order < second.order:
            return True
        if any(loop.start_order <= access.order <= loop.end_order for loop in shared_loops):
            return True
    return False
