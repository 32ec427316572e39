from __future__ import annotations

from warp_lint.context import FileContext
from warp_lint.kernels import ArrayAccess, FunctionModel
from warp_lint.read_then_write import (
    needed_clause,
    needed_use,
    read_element,
    stores_after_reads,
    written_element,
)
from warp_lint.rule import Example, Rule


class IndexedReadThenWrite(Rule):
    """An array element is written at an index loaded from memory, after an element read at another such index.

    ## What it does
    Flags a store `x[c] = ...` into an array that the kernel read earlier as `x[p]`, where the two
    are the same element only when values loaded from arrays coincide: `p = parent[j]` and
    `c = child[j]`, `x[ids[i]]` against `x[i]`. WL102 reports the stores that meet a read by
    arithmetic alone (the same index, a loop counter against the thread index); this rule reports
    the rest, whose hazard the index data decide. Opt-in: select it with `--extend-select WL115`.

    ## Why is this bad?
    When the data make the two indices equal (a child written before a later joint reads it as a
    parent), Warp's backward pass replays the read from memory that the store has overwritten, and
    the gradient is wrong, without an error. When they never do (joints in a tree's topological
    order: every body is written before any later joint reads it, and never written again), the
    gradient is right: forward kinematics, Featherstone's velocity and force recursions. The code
    alone cannot tell the two apart; run the program on its real data with `warp-lint trace`,
    which checks the flagged launch on the arrays it was given, or keep the result in a separate
    array.

    ## Fix safety
    No automatic fix: write the result to a separate array, or check that the index data never
    write an element after it was read (a topological order).

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU): `x[c] = x[p] * x[p] * scale[j]` over joints
    `(parent, child)` in topological order `(0, 1), (1, 2), (1, 3)` matches central finite
    differences (relative error 5e-5); over `(1, 2), (0, 1), (1, 3)`, which writes body 1 after it
    was read, it is off by 23 %.

    ## Confirmation
    gradcheck on synthesized inputs, as WL102 (whose safe form it shares); `trace` on the real
    index data decides it for the program's own runs.
    """

    code = "WL115"
    name = "indexed-read-then-write"
    runtime_strategy = ("gradcheck", "overwrite-tracking")
    safe_form = "redirect-write"
    severity = "warning"
    # The hazard depends on the index data, which the code does not show: trees, permutations and
    # sorted contacts are safe and common in real solvers (judged blind on the real-code corpus:
    # every such finding in newton's Featherstone and tendon solvers was false).
    default = False

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def propagate(parent: wp.array(dtype=int), child: wp.array(dtype=int), x: wp.array(dtype=float),
                          out: wp.array(dtype=float)):
                for j in range(parent.shape[0]):
                    out[child[j]] = x[parent[j]] * x[parent[j]]
            """),
        # The same element by arithmetic: WL102's finding, not this rule's.
        Example("""
            import warp as wp

            @wp.kernel
            def square_in_place(ids: wp.array(dtype=int), x: wp.array(dtype=float)):
                i = ids[wp.tid()]
                x[i] = x[i] * x[i]
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def propagate(parent: wp.array(dtype=int), child: wp.array(dtype=int), scale: wp.array(dtype=float),
                          x: wp.array(dtype=float)):
                for j in range(parent.shape[0]):
                    p = parent[j]
                    c = child[j]
                    x[c] = x[p] * x[p] * scale[j]
            """),
        # A backward (leaves-to-root) accumulation: the parent's sum grows by a product of the child's.
        Example("""
            import warp as wp

            @wp.kernel
            def accumulate_up(parent: wp.array(dtype=int), child: wp.array(dtype=int), f: wp.array(dtype=float)):
                for j in range(parent.shape[0]):
                    p = parent[j]
                    c = child[j]
                    f[p] = f[p] + f[c] * f[c]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def gather_in_place(ids: wp.array(dtype=int), x: wp.array(dtype=float)):
                i = wp.tid()
                v = x[ids[i]]
                x[i] = v * v
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function, write, by_arithmetic, by_data in stores_after_reads(context):
            if not by_data or (by_arithmetic and needed_use(context, function, write, by_arithmetic) is not None):
                continue  # no such read, or WL102 reports the store for a read of the same element
            needed = needed_use(context, function, write, by_data)
            if needed is None:
                continue  # every use linear: right from Warp 1.13
            self._report(context, function, write, by_data[0], needed)

    def _report(self, context: FileContext, function: FunctionModel, write: ArrayAccess, read: ArrayAccess,
                needed) -> None:
        line = context.position(read.node)[0].line
        message = (f"{written_element(write)} is written after {read_element(read)} was read on line {line}"
                   f"{needed_clause(context, read.array, needed)}; the indices differ by values loaded from arrays, so"
                   f" the index data decide whether they are the same element: where they are (an element written"
                   f" after a read of it, as out of topological order), the backward pass replays that read from"
                   f" overwritten memory and the gradient is wrong; check the program's own data with"
                   f" `warp-lint trace`, or write the result to a separate array")
        context.report(self, write.node, message, data=function.runtime_data())
