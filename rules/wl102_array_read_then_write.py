from __future__ import annotations

from warp_lint.context import FileContext
from warp_lint.dataflow import Use, dataflow_of
from warp_lint.kernel_facts import origin_data
from warp_lint.kernels import ArrayAccess, FunctionModel
from warp_lint.read_then_write import (
    needed_clause,
    needed_use,
    read_element,
    stores_after_reads,
    written_element,
)
from warp_lint.rule import Example, Rule


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
    iteration and overwritten in the next). An index that is computed or assigned more than once
    may be any element. Where the two indices differ by values loaded from arrays (`x[child]`
    after `x[parent]`, `parent` and `child` read from index arrays), only the index data decide
    whether they meet, and a tree's topological order never does: WL115 (opt-in) reports those. The body of a `@wp.func_grad` custom adjoint is
    not checked: it runs in the backward pass and nothing differentiates it. Nor is the body of a
    `@wp.func` given a `@wp.func_grad` in the same file: Warp runs the custom adjoint in its place
    (measured on 1.19: an in-place square with an identity custom adjoint gives gradient 1, the
    same helper without it gives the replayed `2 * a**2`).

    ## Why is this bad?
    Warp's backward pass replays the forward reads from memory. Once the kernel has overwritten
    the array, the replayed read sees the new value, and every gradient that depends on it is
    wrong, without an error. Warp's own overwrite tracking
    (`wp.config.verify_autograd_array_access`) misses reads that are the left operand of a binary
    operator (`a[i] = a[i] * g[i]`) and reports `*=` only at debug log level.

    `+=`/`-=` on array elements and `wp.atomic_add`/`wp.atomic_sub` are accumulations, which Warp
    differentiates correctly: they are not flagged. Writing first and reading later is fine. When
    every use of what was read is linear (sums, differences, copies, casts, component reads,
    vector constructors, `wp.add`, scalings by a value without gradient: `a[i] = a[i] + e`,
    `v = a[i]; a[i] = 0.5 * v - b[i]`, `out[i] = 3.0 * a[i]` then `a[i] = b[i] * b[i]`), the
    backward pass never needs the replayed value: that is right from Warp 1.13, and before that
    the store does not cut the old value's gradient, which is counted twice. A use that needs it
    (a product with a value that carries gradient, a division by it, a nonlinear builtin, a helper
    call, a comparison deciding a branch) makes the store wrong on every version; the message
    names it. A linear update of one component or field (`p = particles[i]; particles[i].vel =
    p.vel + f[i] * dt`) is left to WL101, whose store dropped the gradient before 1.14.

    ## Fix safety
    No automatic fix: write the result to a separate output array (or accumulate with `+=`).

    ## Warp versions
    All versions; where every use of the read is linear, only `<1.13`. Measured on 1.19.0 (CPU,
    float64): right for `v = a[i]; a[i] = v + b[i] * b[i]`, `a[i] = wp.add(a[i], b[i])`,
    `a[i] = 0.5 * a[i] - b[i]` and `out[i] = 3.0 * a[i] + b[i]` then `a[i] = b[i] * b[i]`; wrong for
    `out[i] = a[i] * a[i]` then `a[i] = b[i]`, for `a[i] = a[i] * b[i]`, and for a branch on
    `v = a[i]` before `a[i] = 0.0`. Also measured (AD against finite differences): `a[i] = a[i] * damping` and `v = a[i]; a[i] = v * damping` give AD 2.16 for FD 1.02
    on 1.4.2 and 1.12.1 and match on 1.13.0 and 1.19.0, as does `v = a[i]; a[i] = v + x[i] * x[i]`;
    `prods[i + 1] = x[i] * prods[i]` in a dynamic loop matches on 1.4.2, 1.12.1 through 1.14.0 and
    1.19.0, while `a[i] = a[i + 1] * a[i + 1]` in a `range(n)` loop is wrong on all of them (AD 9.10
    for FD 3.41) and `p = particles[i]; particles[i].vel = wp.cw_mul(p.vel, f[i])` too.

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
            def read_linearly_then_overwrite(a: wp.array(dtype=float), b: wp.array(dtype=float),
                                             out: wp.array(dtype=float)):
                i = wp.tid()
                out[i] = 3.0 * a[i] + b[i]
                a[i] = b[i] * b[i]
            """, target=">=1.13"),
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
        # A custom adjoint's body runs in the backward pass: nothing replays or differentiates it.
        Example("""
            import warp as wp

            @wp.func
            def scaled(x: float, buffer: wp.array(dtype=float)):
                return 2.0 * x * buffer[0]

            @wp.func_grad(scaled)
            def adj_scaled(x: float, buffer: wp.array(dtype=float), adj_ret: float):
                wp.adjoint[x] += adj_ret * 2.0 * buffer[0]
                buffer[0] = adj_ret
            """),
        # ...and the helper it stands in for is never differentiated (Featherstone's dense_cholesky).
        Example("""
            import warp as wp

            @wp.func
            def factor_in_place(n: int, A: wp.array(dtype=float)):
                for j in range(n):
                    A[j] = wp.sqrt(A[j] * A[j] + 1.0)

            @wp.func_grad(factor_in_place)
            def adj_factor_in_place(n: int, A: wp.array(dtype=float)):
                pass
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def clip_and_reset(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                v = a[i]
                if v > 1.0:
                    out[i] = b[i] * 2.0
                else:
                    out[i] = b[i]
                a[i] = 0.0
            """),
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
        for function, write, reads, _ in stores_after_reads(context):
            if not reads:
                continue  # it meets an earlier read only through index data (WL115)
            read, needed = reads[0], needed_use(context, function, write, reads)
            if needed is None and write.component is not None:
                continue  # a component store: its hazard is WL101's, whose versions (<1.14) hold these
            self._report(context, function, write, read, needed)

    def _report(self, context: FileContext, function: FunctionModel, write: ArrayAccess, read: ArrayAccess,
                needed: Use | str | None) -> None:
        array = write.array
        where = written_element(write)
        before_1_13 = needed is None
        if before_1_13:
            message = (f"{where} is overwritten after a read of `{array}` that the kernel uses only linearly (adds,"
                       f" copies, scales by values without gradient): before Warp 1.13 the store does not cut the"
                       f" old value's gradient, which is counted twice; write the result to a separate array")
        elif write.operator:
            message = (f"{where} {write.operator} ... reads and overwrites `{array}` in place: the backward pass"
                       f" replays the read from overwritten memory; write the result to a separate array")
        elif read.statement is write.statement and not read.via:
            message = (f"{where} is overwritten with a value read from `{array}` itself: the backward pass replays"
                       f" that read from overwritten memory; write the result to a separate array")
        else:
            line = context.position(read.node)[0].line
            message = (f"{where} is written after {read_element(read)} was read on line {line}: the backward pass replays"
                       f" that read from overwritten memory; write the result to a separate array")
        message = message.replace(": the backward pass", needed_clause(context, array, needed) + ": the backward pass", 1)
        # The adjoint that reads the overwritten value is that of the statement using it: the gradients
        # at stake are those of what that statement reads.
        origins = origin_data(function, dataflow_of(function, context.names), needed.statement) \
            if isinstance(needed, Use) else {}
        context.report(self, write.node, message, affected_versions="<1.13" if before_1_13 else None,
                       data={**function.runtime_data(), **origins})
