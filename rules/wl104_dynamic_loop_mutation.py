from __future__ import annotations

import dataclasses

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import walk
from warp_lint.dataflow import BRANCH, NONLINEAR, dataflow_of
from warp_lint.kernel_facts import destination_data, guard_data
from warp_lint.kernels import FunctionModel, Loop
from warp_lint.rule import Example, Rule


class DynamicLoopMutation(Rule):
    """A local carried from one pass of a dynamic loop to the next is used where its adjoint needs it.

    ## What it does
    A loop is dynamic when Warp cannot unroll it: its trip count is not a compile-time constant
    (`range(n)` with `n` a kernel argument or an array's shape), a literal range exceeds the unroll
    limit (`max_unroll`, 16 by default; `wp.config.max_unroll` and the module option of that name
    are honoured), its body has a `break` (or a `continue`, before Warp 1.17), and every `while`.
    `range(wp.static(...))` unrolls, and so does a range bounded by module constants or by a local
    the kernel assigns an integer literal once at its top (`num_terms = 2`: measured on 1.19, a
    product carried through `range(0, n)` is right with `n = 3` assigned so, wrong with `n` an
    argument). A name the kernel captures from the function that makes it (`def make(n):
    @wp.kernel ...`) is a constant too: unrolled when the values the file passes keep the trip
    count within the limit, dynamic past it, not called dynamic when they are not shown (measured
    on 1.19: `n` captured as 16 is right, 17 wrong). Inside a dynamic loop this rule flags the
    reassignment of a local defined before the loop whose value flows from one pass into the next (it is read in the
    loop before the pass assigns it) when the loop's adjoint needs that value:

    - it carries a gradient and is used nonlinearly in the loop: `s = s * x[i] + c`,
      `prod *= x[i]`, `s += x[i]` followed by `t += s * s`, `m = wp.max(m, x[i])`;
    - it carries a gradient and decides a branch: the running maximum `if x[i] > best: best = x[i]`;
    - it picks the element of an array that carries gradient: the counter of
      `while j < n: s += x[j]; j += 1`, or `k //= 2` in `out[k] += x[k]`.

    Linear carries (`s += e`, `s = 0.5 * s + x[i]`), locals every path through a pass assigns
    before reading them (`k = x[j]; out[j] = k * k`; `C` set in both arms of an `if`, then used),
    and values that carry no gradient (built from constants, counts returned by an integer helper,
    never reaching an output) are fine. Only uses of the previous pass's value count: a use after
    the pass has assigned the local reads this pass's value (`acc += p; p = x[i] * k; acc += p * p`
    is right, measured on 1.19).

    ## Why is this bad?
    Warp generates a dynamic loop's adjoint without keeping each pass's forward values: it applies
    the passes' updates again, in reverse order, starting from the carried locals' values before
    the loop, and each pass's adjoint reads what that gives (measured on 1.19: `s = s *
    x[i]` over x = [2, 3, 5] gives the gradient [450, 75, 5] where it is [15, 10, 6]: the last
    pass reads 5, not 6). Where the adjoint reads a carried value (a product, a nonlinear builtin)
    or uses it to pick an element, the gradient is wrong, silently.

    ## Fix safety
    No automatic fix. The message gives the one that applies: keep each pass's value in its own
    array slot (which the adjoint reads back as it was), keep a running extreme's index instead of
    its value, in a `@wp.func` that returns it, and compute the value again from it in the caller
    (measured on 1.19: right that way; with the index used after the loop in the same function the
    backward pass sees the index from before the loop, WL107's hazard, and the gradient is wrong),
    or, for a constant trip count over the module's `max_unroll` (16 by default), raise
    `max_unroll` so that Warp unrolls the loop (measured on 1.19: a 20-pass `s = s * x[i]` gives
    61.87 against 50.54 by finite differences with the default, and matches with
    `wp.set_module_options({"max_unroll": 32})`). A `range(wp.static(N))` loop is unrolled only up
    to `max_unroll` too.

    ## Warp versions
    All versions; loops that are dynamic only because of a `continue`, `<1.17`. Measured on 1.19.0
    (CPU, float64, tape against central differences): wrong for `s = s * x[j]`, for `s += x[j]`
    then `t += s * s` in the loop, for `while j < n: s += x[j]; j += 1`, for `k //= 2` indexing
    `out[k] += x[k]`, for a carried `k` indexing `x[k]` in a `range(n)` loop, for a running maximum
    (`m = wp.max(m, x[j])` or `if x[j] > m: m = x[j]`, then `out[0] = m`: the whole gradient goes to
    the last element unless the maximum is last); right for `s = 0.5 * s + x[j]`, for
    `k = x[j]; out[j] = k * k`, for `C` assigned in both arms of an `if` then `acc += C * C`, and for
    a `wp.hash_grid_query_next(q, index)` loop (the query call sets `index` each pass).

    ## Confirmation
    gradcheck; confirmed when unrolling the dynamic loops around the statement removes the
    disagreement.
    """

    code = "WL104"
    name = "dynamic-loop-mutation"
    runtime_strategy = ("gradcheck",)
    safe_form = "static-enclosing-loops"

    VALID = [
        # A local assigned an integer literal once is a constant to Warp: this loop is unrolled.
        Example("""
            import warp as wp

            @wp.kernel
            def two_terms(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                num_terms = 2
                s = float(1.0)
                for term in range(0, num_terms):
                    s = s * x[i]
                out[i] = s
            """),
        # The carried `mask` is the integer element of what the helper returns: no gradient.
        Example("""
            import warp as wp

            @wp.func
            def nearer(a: wp.vec3, b: wp.vec3) -> tuple[wp.vec3, wp.uint32]:
                if wp.length(a) < wp.length(b):
                    return a, wp.uint32(1)
                return b, wp.uint32(2)

            @wp.kernel
            def pick(x: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                mask = wp.uint32(0)
                while mask == wp.uint32(0):
                    best, mask = nearer(x[0], x[i])
                out[i] = best * float(mask)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def smooth(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                s = float(0.0)
                k = float(1.0)
                for j in range(n):
                    k = x[j]
                    out[j] = k * k
                    s = 0.5 * s + x[j]
                out[0] += s
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def total(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(n):
                    s += x[j] * x[j]
                    s = s + x[j]
                out[0] = s
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def product(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(4):
                    p = p * x[j]
                out[0] = p
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def product(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(wp.static(32)):
                    p = p * x[j]
                out[0] = p
            """),
        Example("""
            import warp as wp

            @wp.func
            def count_above(count: int, value: float) -> int:
                if value > 0.5:
                    return count + 1
                return count

            @wp.kernel
            def strain(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                c = float(0.0)
                v = float(0.0)
                count = int(0)
                for term in range(n):
                    if term == 0:
                        c = x[0] * x[1]
                    else:
                        c = x[term] * x[term]
                    out[term] = c * c + float(count) * x[term]
                    count = count_above(count, x[term])
                    if x[term] > 0.5:
                        v = x[term] * 3.0
                        out[term] += v * v
            """),
        # Only `acc += p` reads the previous pass's `p`, linearly; `p * p` squares this pass's value
        # (measured right on 1.19).
        Example("""
            import warp as wp

            @wp.kernel
            def refine(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                i = wp.tid()
                p = x[i]
                acc = float(0.0)
                for k in range(n):
                    acc += p
                    p = x[i] * float(k + 1)
                    acc += p * p
                out[i] = acc
            """),
        # `j` indexes `a`, but `a` is only compared: no gradient flows through what it picks.
        Example("""
            import warp as wp

            @wp.kernel
            def first_above(a: wp.array(dtype=float), tol: float, n: int, level: wp.array(dtype=int)):
                i = wp.tid()
                j = int(0)
                while j < n:
                    if wp.abs(a[j]) > tol:
                        level[i] = j
                    j += 1
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def largest(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                best = float(0.0)
                for j in range(n):
                    if x[j] > best:
                        best = x[j]
                out[0] = best
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def halving(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                k = n // 2
                while k > 0:
                    out[k] += x[k]
                    k //= 2
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def horner(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                s = float(0.0)
                for j in range(n):
                    s = s * x[j] + x[j]
                out[0] = s
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def product(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(32):
                    p *= x[j]
                out[0] = p
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def largest(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                best = float(0.0)
                j = int(0)
                while j < x.shape[0]:
                    v = x[j]
                    if v > best:
                        best = v
                    j += 1
                out[0] = best
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable:
                continue
            flow = dataflow_of(function, context.names)
            reported: set[str] = set()
            for loop in function.loops:
                if not loop.dynamic:
                    continue
                for binding in function.bindings:
                    name = binding.name
                    if name in reported or loop not in binding.loops or not _defined_before(function, name, loop):
                        continue
                    if not flow.carried(name, loop):
                        continue  # assigned afresh before each pass reads it
                    # A value carrying no gradient (built from constants) matters only as an index.
                    gradient = flow.carries_gradient(name)
                    # The update's own nonlinear use first (`x = step(x)`), a comparison after it.
                    uses = [_as_needed(flow, u) for u in flow.needing_uses_in({name}, loop) if gradient or u.indexes]
                    use = min((u for u in uses if u is not None), key=lambda u: u.position != NONLINEAR, default=None)
                    if use is None:
                        continue  # carried only linearly (`s = 0.5 * s + x[i]`): the adjoint needs no value
                    reported.add(name)
                    # Named by what it starts from before the loop, where that carries a gradient.
                    start = function.binding_before(name, loop.start_order)
                    initial = {n.value for n in walk(start.value) if isinstance(n, cst.Name)} \
                        if start is not None and start.value is not None else set()
                    origin = flow.origin(name, initial) if use.indexes is None else None
                    # `A` carries the gradient of `A` says nothing: a value named as its origin is just named.
                    why = f"`{name}` carries the gradient of `{origin}` and" if origin and origin != name else f"`{name}`"
                    used = f"`{use.name}` is {use.how}" if use.name != name else f"is {use.how}"
                    # Measured on 1.19 (`s = x0; s = s * x1` twice, x = [2, 3]: AD 60 for 12, the
                    # passes' adjoints reading 6 and 18): each update is applied again from the start.
                    order = " in reverse order" if isinstance(loop.node, cst.For) else ""
                    replay = (f"the adjoint does not keep each pass's `{name}`: it applies the passes' updates"
                              f" again{order}, starting from `{name}`'s value before the loop")
                    if use.position == BRANCH:
                        effect = (f"{replay}, so its comparisons can take other branches than the forward pass did,"
                                  f" and the gradient goes to what they pick (in a search, the last candidate)")
                    else:
                        effect = f"{replay}, so the passes' adjoints read values they never saw and the gradient is wrong"
                    context.report(
                        self, binding.node,
                        f"{why} is reassigned inside a dynamic loop ({loop.reason}), where its value from the"
                        f" previous pass {used}: {effect}; {_fix(function, name, use, loop)}",
                        affected_versions=loop.affected_versions or None,
                        # the arrays whose gradients the carried value holds, and those it reaches:
                        # where every launch binds either to arrays without gradients, none is wrong
                        data={**function.runtime_data(), **guard_data(function, loop.branches),
                              **({"origins": sorted(flow.origins(name)),
                                  **destination_data(function, flow, {name})} if use.indexes is None else {})},
                    )


def _fix(function: FunctionModel, name: str, use, loop: Loop) -> str:
    """The fix that applies to this loop and this use: a running extreme keeps its index, anything
    else keeps each pass's value where the adjoint can read it back; unrolling only where Warp can
    (a constant trip count over the `max_unroll` limit), never for a runtime count or a `while`."""
    if any(f"`wp.{extreme}`" in use.how for extreme in ("max", "min")) or use.how.startswith("compared"):
        # The extreme may be of values the loop computes (distances to candidates), not of stored
        # ones: the index is what to carry, the value is read or computed again from it.
        # After the loop in the same function the backward pass sees the index from before the
        # loop (WL107; measured on 1.19): the value is computed again in the caller.
        where = ("return them from this @wp.func" if function.kind == "func"
                 else "do it in a @wp.func that returns them")
        vectors = (" (one per component, for a component-wise extreme of vectors)"
                   if any(f"`wp.{extreme}`" in use.how for extreme in ("max", "min")) else "")
        fix = (f"carry only the index (or the arguments) of the running extreme{vectors} through the loop, {where}, and"
               f" read or compute the extreme's value again from them in the caller, so that `{name}` carries"
               f" no gradient through the passes (after the loop in the same function, the backward pass would"
               f" see the index from before the loop)")
    elif function.kind == "func":
        # A @wp.func runs per thread, with no scratch array of its own to keep the passes in.
        fix = ("give this @wp.func a custom adjoint (`@wp.func_grad`), or have it return only what the loop"
               " finds without a gradient (an index, a step, weights) and compute the values that carry the"
               " gradient from them in the caller")
    else:
        fix = (f"keep each pass's `{name}` in its own array slot (`history[k + 1] = f(history[k])`), which the"
               f" adjoint reads back as it was, or move the loop into a @wp.func with a custom adjoint")
    if "exceeds the unroll limit" in loop.reason:
        fix += "; or raise the module's `max_unroll` above the trip count so that Warp unrolls the loop"
    return fix


def _as_needed(flow, use):
    """A nonlinear use whose result is assigned to locals that reach no output (`da = wp.dot(grad,
    a)`, then only `if db <= da:`) passes no gradient: its value is needed only for the comparisons
    those locals decide (a comparison use, named by its statement), or not at all (None)."""
    statement = use.statement
    if use.position != NONLINEAR or not isinstance(statement, (cst.Assign, cst.AnnAssign)):
        return use
    targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
    if not all(isinstance(t, cst.Name) for t in targets) or any(t.value in flow.useful for t in targets):
        return use
    derived = flow.linear_derivatives({t.value for t in targets})
    if not any(u.name in derived and u.position == BRANCH for u in flow.uses):
        return None
    code = cst.Module([]).code_for_node(statement).strip()
    return dataclasses.replace(use, position=BRANCH, how=f"used in `{code}`, which is only compared")


def _defined_before(function: FunctionModel, name: str, loop: Loop) -> bool:
    if any(p.name == name and not p.type.is_array for p in function.params):
        return True
    return any(b.name == name and b.order < loop.start_order for b in function.bindings)
