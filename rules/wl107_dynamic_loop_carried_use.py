from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.dataflow import BRANCH, Dataflow, Use, dataflow_of
from warp_lint.kernel_facts import destination_data, guard_data, local_containers
from warp_lint.kernels import FunctionModel, Loop
from warp_lint.rule import Example, Rule
from warp_lint.stale_after_loop import exit_of, first_stale_use


class DynamicLoopCarriedUse(Rule):
    """A local accumulated in a dynamic loop is used non-linearly after the loop (`return s / norm`).

    ## What it does
    Flags the first use after a dynamic loop (see WL104 for what makes a loop dynamic) of a local
    the loop updates, when the use needs the local's *value* in the backward pass: a division
    (`l = s / norm`, `return s / norm`), a product with something that is not a literal
    (`s * w`), a power, or a call such as `wp.sqrt(s)`. Locals computed after the loop from such
    a local carry the problem on, so `m = s + 1.0` followed by `out[0] = m * m` is flagged at the
    product. A comparison after the loop that decides an `if` is such a use too, when an arm reads
    a value carrying a gradient (`if dot >= 0.0: y[i] = x[0] * 3.0`): the backward pass replays the
    arm the stale value picks (measured on 1.19: AD 3 where finite differences give 0; arms that
    move only integers are not flagged). An arm that leaves (`if not fired: return`, `continue`,
    `break`) guards what follows the `if` as much as its own statements: the adjoint leaves where
    the forward pass went on, and what follows gets no gradient at all (measured on 1.12.1 and
    1.19.0: a flag set in a `range(n)` loop, then `if not fired: return` and
    `out[0] = x[0] * x[1]`, gives AD [0, 0, 0] where finite differences give [0.7, 0.3, 0]; the
    same with `continue` in an enclosing loop, [0, 0, 0] where they give [1.1, 1.1, 1.0]; the flag
    computed by a @wp.func that holds the loop is right). Linear uses (`return s`,
    `out[0] = 2.0 * s`, `s + c`), products and numerators whose other operand carries no gradient
    (a literal, a module constant, a kernel's scalar argument), assertions and prints
    (`wp.expect_eq`), integer counters and tiles are not flagged.

    ## Why is this bad?
    Warp's backward pass for a function replays its forward code, but a dynamic loop's forward
    iterations are not replayed before the code after it: the reverse code after the loop sees
    the local's value from *before* the loop (often `0.0`). The adjoint of `s / norm` then divides
    by zero, and the gradient is `inf`/`NaN` or silently wrong. Measured on 1.12.1 through 1.17.0
    and 1.19.0 with a weighted mean (`s += x[j] * w[j]; norm += w[j]` in a
    `range(n)` loop, then `s / norm`): AD gives `inf`/`NaN` for every element where finite
    differences give 0.19, 0.38, ..., in a `@wp.func` and in a kernel alike; `return wp.sqrt(s)`
    gives `inf`; `out[0] = s * c[0]` in a kernel gives 0 for `c` (finite differences 4.55).
    `return s * 2.0` is correct, and so is a product with a kernel's scalar argument or a constant,
    whose adjoint does not read the stale value (those are not flagged). On 1.19.0 (float64), an
    argmax loop whose index then reads `x[arg] * x[arg]` puts the whole gradient on `x[0]` (the
    index before the loop) where finite differences put it on the largest element, and
    `out[0] = s * float(i)` after `while i < 4: s += x[i]; i += 1` gives 0 where they give 4.

    ## Fix safety
    No automatic fix. Return the accumulated values from a `@wp.func` that holds the loop and do
    the division in its caller (`weighted_sum(x, w, n) / weight_sum(w, n)`, measured correct on
    every release above): the caller's backward pass replays the whole call. A kernel-local array
    (`lam = wp.zeros(shape=4, dtype=float)`) whose elements the loop writes is such a local too
    (measured wrong on 1.19 when read after the loop); storing the values into an array argument
    instead, which the adjoint reads back as stored, is right (measured).

    ## Warp versions
    All versions (measured on 1.12.1 through 1.19.0); loops that are dynamic only because of a
    `continue`, `<1.17`.

    ## Confirmation
    gradcheck (a wrong gradient is usually `inf`/`NaN`); confirmed when unrolling the dynamic loops
    that feed the use removes the disagreement.
    """

    code = "WL107"
    name = "dynamic-loop-carried-use"
    runtime_strategy = ("gradcheck",)
    safe_form = "static-feeding-loops"

    VALID = [
        # The flag found by a @wp.func that holds the loop: the caller's adjoint replays the call.
        Example("""
            import warp as wp

            @wp.func
            def any_above(v: wp.array(dtype=float), n: int):
                fired = bool(False)
                for k in range(n):
                    if v[k] > 0.5:
                        fired = True
                return fired

            @wp.kernel
            def impulse(v: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                i = wp.tid()
                if not any_above(v, n):
                    return
                out[i] = v[i] * v[i]
            """),
        # A branch decided by a value from a dynamic loop, whose arms move only integers: no gradient.
        Example("""
            import warp as wp

            @wp.kernel
            def pick(degree: wp.array(dtype=wp.int32), level: wp.array(dtype=wp.int32), n: int):
                best = int(-1)
                best_degree = int(2147483647)
                for i in range(n):
                    if degree[i] < best_degree:
                        best_degree = degree[i]
                        best = i
                if best >= 0:
                    level[best] = 1
            """),
        # Only integers come out (the index of a hull's farthest point) and nothing is written: no
        # gradient passes through the function.
        Example('''
            import warp as wp

            @wp.func
            def farthest(hull: wp.array(dtype=wp.vec2), n: int) -> wp.vec2i:
                p1 = int(0)
                for i in range(n):
                    if hull[i][0] > hull[p1][0]:
                        p1 = i
                p2 = int(0)
                if hull[p1][1] > 0.0:
                    p2 = 1
                return wp.vec2i(p1, p2)
            '''),
        Example("""
            import warp as wp

            @wp.func
            def weighted_sum(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * w[j]
                return s

            @wp.func
            def weight_sum(w: wp.array(dtype=float), n: int):
                s = float(0.0)
                for j in range(n):
                    s += w[j]
                return s

            @wp.kernel
            def mean(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                out[0] = weighted_sum(x, w, n) / weight_sum(w, n)
            """),
        Example("""
            import warp as wp

            @wp.func
            def total(x: wp.array(dtype=float), n: int):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * x[j]
                return 2.0 * s
            """),
        Example("""
            import warp as wp

            @wp.func
            def norm(x: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(4):
                    s += x[j] * x[j]
                return wp.sqrt(s)
            """),
    ]
    INVALID = [
        # A flag found in a dynamic loop decides an early exit: the adjoint leaves, nothing gets a gradient.
        Example("""
            import warp as wp

            @wp.kernel
            def impulse(v: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                i = wp.tid()
                fired = bool(False)
                for k in range(n):
                    if v[k] > 0.5:
                        fired = True
                if not fired:  # expect: WL107
                    return
                out[i] = v[i] * v[i]
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def scaled_total(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = int(0)
                s = float(0.0)
                while i < 4:
                    s += x[i]
                    i += 1
                out[0] = s * float(i)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square_of_largest(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                best = float(-1.0e9)
                arg = int(0)
                for j in range(n):
                    if x[j] > best:
                        best = x[j]
                        arg = j
                out[0] = x[arg] * x[arg]
            """),
        Example("""
            import warp as wp

            @wp.func
            def weighted_mean(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int):
                s = float(0.0)
                norm = float(0.0)
                for j in range(n):
                    s += x[j] * w[j]
                    norm += w[j]
                return s / norm
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def rms(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * x[j]
                m = s / float(n)
                out[0] = wp.sqrt(m)
            """),
        Example("""
            import warp as wp

            @wp.func
            def length(x: wp.array(dtype=float)):
                s = float(0.0)
                j = int(0)
                while j < x.shape[0]:
                    s += x[j] * x[j]
                    j += 1
                l = wp.sqrt(s)
                return l
            """),
        # A kernel-local array written in the loop is read after it as it was before it.
        Example("""
            import warp as wp

            @wp.kernel
            def clamp_weights(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                lam = wp.zeros(shape=4, dtype=float)
                for k in range(n):
                    lam[k] = wp.min(x[k] * x[k] - 2.0, 0.0)
                out[0] = lam[0] * x[0]
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            flow = dataflow_of(function, context.names)
            for loop in function.loops:
                if not loop.dynamic:
                    continue
                carried = _carried_locals(context, function, loop)
                if carried and self._check_after(context, function, flow, loop, carried):
                    break  # one finding per function: the first stale use explains the rest

    def _check_after(self, context, function: FunctionModel, flow: Dataflow, loop: Loop, carried: set[str]) -> bool:
        found = first_stale_use(flow, loop, carried)
        if found is not None:
            # values the loop carries from pass to pass (a running minimum, an accumulated velocity)
            others = sorted(name for name in carried if flow.carried(name, loop))
            self._report(context, function, loop, found.node, found.use, found.origins, others)
        return found is not None

    def _report(self, context, function: FunctionModel, loop: Loop, node, use: Use, origins: list[str],
                others: list[str] | tuple = ()) -> None:
        how = use.how or "used"
        if origins == [use.name]:
            subject = f"`{use.name}` is updated in a dynamic loop ({loop.reason}) and {how} after it"
        else:
            subject = (f"`{use.name}`, computed from {', '.join(f'`{o}`' for o in origins)}, which "
                       f"{'is' if len(origins) == 1 else 'are'} updated in a dynamic loop ({loop.reason}), is {how}")
        fix = "do the rest in its caller" if use.indexes is None else "pass the index out of the @wp.func"
        fix = f"return the loop's results from a @wp.func and {fix}"
        if set(origins) & local_containers(context.names, function, tiles=False):
            # A kernel-local array is no value a @wp.func hands back; memory the adjoint reads is.
            fix = ("store the values into an array argument instead of a kernel-local array, which the adjoint"
                   " reads back as stored")
        leaves = exit_of(node) if use.position == BRANCH else None
        if leaves is not None:
            # `if not fired: return`: the adjoint leaves where the forward pass went on
            effect = (f"may leave there (`{leaves}`), so what follows gets no gradient (zero where the forward"
                      f" pass ran it)")
            if others:
                # Moved into a @wp.func, the loop's passes are still replayed from the values before
                # it (WL104): the zero goes, a gradient through those values stays wrong (measured by
                # the blind judges on a running minimum).
                named = ", ".join(f"`{name}`" for name in others[:3]) + (", ..." if len(others) > 3 else "")
                fix += (f"; inside that @wp.func the values the loop carries from pass to pass ({named}) are"
                        f" still replayed wrongly: fix them as WL104 says")
        elif use.position == BRANCH:
            effect = "may take the other branch, and the gradient is that branch's"
        else:
            effect = "the gradient is inf/NaN or wrong"
        context.report(
            self, node,
            f"{subject}: the backward pass sees the value from before the loop and {effect}; {fix}",
            affected_versions=loop.affected_versions or None,
            data={**function.runtime_data(), **guard_data(function, loop.branches),
                  **destination_data(function, dataflow_of(function, context.names), {use.name})},
        )


def _carried_locals(context: FileContext, function: FunctionModel, loop: Loop) -> set[str]:
    """Locals defined before the loop and reassigned in it, leaving out tiles; and kernel-local
    arrays defined before it whose elements it writes (`lam = wp.zeros(shape=4, dtype=float)`,
    then `lam[k] = ...` in the loop: measured on 1.19, what reads them after it sees the values
    from before the loop, as for any local)."""
    containers = local_containers(context.names, function, tiles=False)
    names = {write.name for write in function.component_writes if loop in write.loops and write.name in containers
             and any(b.name == write.name and b.order < loop.start_order for b in function.bindings)}
    for binding in function.bindings:
        if loop not in binding.loops:
            continue
        before = [b for b in function.bindings if b.name == binding.name and b.order < loop.start_order]
        defined_before = before or any(p.name == binding.name and not p.type.is_array for p in function.params)
        if not defined_before or (before and _tile(context, before[-1].value)):
            continue
        names.add(binding.name)
    return names


def _tile(context: FileContext, value) -> bool:
    callee = context.names.qualify(value.func) if isinstance(value, cst.Call) else None
    return bool(callee and callee.startswith("warp.tile"))
