from __future__ import annotations

from typing import ClassVar

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.dataflow import STORING, Dataflow, dataflow_of
from warp_lint.kernels import CallSite, FunctionModel
from warp_lint.rule import Example, Rule
from warp_lint.warp_types import code_of

EXTREMES = {"warp.atomic_max": "maximum", "warp.atomic_min": "minimum"}
INDEX_KEYWORDS = ("i", "j", "k", "l")


class AtomicExtremeTie(Rule):
    """`wp.atomic_max`/`wp.atomic_min` of a value that carries a gradient: on a tie every tied thread gets the slot's whole gradient.

    ## What it does
    Flags `wp.atomic_max(a, i, v)` and `wp.atomic_min(a, i, v)` (any index count, `a[i, j]` as
    `wp.atomic_max(a, i, j, v)`, vector values, the value given as `value=`, and the returned old
    value assigned or stored, `old[i] = wp.atomic_max(a, k, v)`) in a differentiable kernel or
    `@wp.func`, into a float array, where the value carries a gradient (depends on a float input)
    and several threads, or several passes of a loop, may reach the same slot. Not flagged: integer
    arrays, values without gradient (integers, literals, a kernel's scalar arguments), kernels
    with backward off, and a slot indexed by every `wp.tid()` component as it is
    (`wp.atomic_max(a, i, v)` with `i = wp.tid()`, outside any loop): one value per slot, no tie is
    possible (measured right). Nor, in a project, a kernel whose every recorded launch binds the
    slot's array to one allocated without `requires_grad`: the adjoint then skips the atomic, and
    there is no gradient to multiply.

    ## Why is this bad?
    Warp's adjoint of an atomic extreme (`adj_atomic_minmax` in `warp/native/builtin.h`, the same
    on 1.12.1 and 1.19.0) runs once per thread, after the forward pass: each thread whose value
    equals the slot's final value adds the slot's whole gradient to its value's gradient. The
    slot's gradient is not split between tied threads, nor given to one: with `k` tied values the
    gradient is multiplied by `k`. Ties are ordinary, not rare: clamped values, symmetric or
    quantised data, identical particles (a batch of equal environments), a value shared by every
    thread. The old value it returns gets no gradient at all (its adjoint is dropped). Measured
    on 1.12.1 and 1.19.0 (CPU, float64, tape against central differences): the peak height of
    16 identical particles and of 4 distinct ones (`h = z0 + v t - g t^2 / 2`, `wp.atomic_max(peak,
    env[i], h)`) gives `d loss / d g = -0.085` where it is `-0.01` (16x on the tied environment),
    the same with `wp.atomic_min`; a 2x2 max pooling of a quantised image
    (`wp.atomic_max(pooled, i // 2, j // 2, img[i, j] * s)`) gives `d / d s = 11` for `3.25`; the
    upper corner of three `vec3d` points with ties per component gives a gradient that sums to 7
    for 3; `old[i] = wp.atomic_max(...)` gives 0 where the old values have gradient 3. One value
    per slot (`wp.atomic_max(out, i, x[i] * x[i])`, `i = wp.tid()`) is right; the same in a
    `for k in range(3)` loop with two equal passes doubles the gradient.

    ## Fix safety
    No automatic fix: the fix takes more launches. Find the extreme without gradient (a kernel with
    `enable_backward=False`, or launched with `record_tape=False`), let one tied thread own the
    slot (in another such kernel, `if v == peak[s]: wp.atomic_min(owner, s, tid)`), and store the
    value only from that thread in the recorded kernel (`if owner[s] == tid: out[s] = v`): measured
    right on 1.12.1 and 1.19.0 (`-0.01`, the tied environment's gradient given to one particle).
    Within one tile, `wp.tile_argmax`/`wp.tile_argmin` and a read of the value at that index give
    the gradient to one element (measured right with 8 tied of 16). Where the passes of a loop
    reach the thread's own slot, keep the extreme in a local (`best = wp.max(best, v)`, whose
    adjoint gives a tie to one operand) and store it once: measured right in a loop of constant
    range (a dynamic loop has WL107's hazard instead).

    ## Warp versions
    All versions (measured on 1.12.1 and 1.19.0; the adjoint's source is the same in both).

    ## Confirmation
    None at run time: random inputs almost never tie, so a gradient check would clear a real
    finding; the hazard shows only at ties, which the checker does not drive the inputs to.
    """

    code = "WL118"
    name = "atomic-extreme-tie"

    VALID: ClassVar[list[Example]] = [
        # The extreme itself is found without gradient; one tied thread owns the slot; it alone
        # stores the value that carries the gradient.
        Example("""
            import warp as wp

            @wp.kernel(enable_backward=False)
            def peak_value(h: wp.array(dtype=float), peak: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_max(peak, 0, h[i])

            @wp.kernel(enable_backward=False)
            def peak_owner(h: wp.array(dtype=float), peak: wp.array(dtype=float), owner: wp.array(dtype=int)):
                i = wp.tid()
                if h[i] == peak[0]:
                    wp.atomic_min(owner, 0, i)

            @wp.kernel
            def peak_store(h: wp.array(dtype=float), owner: wp.array(dtype=int), out: wp.array(dtype=float)):
                i = wp.tid()
                if owner[0] == i:
                    out[0] = h[i] * 2.0
            """),
        # One slot per thread: nothing to tie with.
        Example("""
            import warp as wp

            @wp.kernel
            def floor_at(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_max(out, i, x[i] * x[i])
            """),
        # Integers carry no gradient.
        Example("""
            import warp as wp

            @wp.kernel
            def deepest(x: wp.array(dtype=float), cell: wp.array(dtype=int), level: wp.array(dtype=int)):
                i = wp.tid()
                wp.atomic_max(level, cell[i], int(x[i] * 4.0))
            """),
    ]
    INVALID: ClassVar[list[Example]] = [
        Example("""
            import warp as wp

            @wp.kernel
            def peak(h: wp.array(dtype=float), group: wp.array(dtype=int), out: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_max(out, group[i], h[i] * 2.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def pool(img: wp.array2d(dtype=float), pooled: wp.array2d(dtype=float)):
                i, j = wp.tid()
                wp.atomic_min(pooled, i // 2, j // 2, img[i, j])
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def upper(p: wp.array(dtype=wp.vec3), box: wp.array(dtype=wp.vec3), old: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                old[i] = wp.atomic_max(box, 0, p[i])
            """),
        # The thread's own slot, but three passes of a loop reach it.
        Example("""
            import warp as wp

            @wp.kernel
            def best(x: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                for k in range(3):
                    wp.atomic_max(out, i, x[i] * w[k])
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            for call in function.calls:
                extreme = EXTREMES.get(call.name or "")
                if extreme is None:
                    continue
                flow = dataflow_of(function, context.names, fields=True)
                parts = _parts(call.node)
                if parts is None:
                    continue
                target, indices, value = parts
                array = _float_array(function, flow, target)
                if array is None or flow.free(value):
                    continue
                own_slot = _own_slot(context, function, indices)
                if own_slot and not call.loops:
                    continue
                self._report(context, function, flow, call, extreme, array, indices, own_slot)

    def _report(self, context: FileContext, function: FunctionModel, flow: Dataflow, call: CallSite, extreme: str,
                array: str, indices: list[cst.BaseExpression], own_slot: bool) -> None:
        spelled = call.name.replace("warp.", "wp.")
        slot = f"{array}[{', '.join(code_of(index) for index in indices)}]"
        who = ("every pass of the loop around it reaches the thread's own slot" if own_slot
               else "other threads may reach the same slot")
        returned = ("; the old value it returns gets no gradient (its adjoint is dropped)"
                    if _returned_value_used(function, flow, call) else "")
        owner = "wp.atomic_min(owner, s, tid)"
        if own_slot:
            fix = (f"keep the {extreme} in a local (`best = wp.{extreme[:3]}(best, v)`, which gives a tie to one"
                   f" operand) and store it once after the loop")
        else:
            fix = (f"find the {extreme} in a kernel without backward (`enable_backward=False`), let one tied thread"
                   f" own the slot (`if v == best[s]: {owner}` in another) and store the value only from it in the"
                   f" recorded kernel (`if owner[s] == tid: out[s] = v`), or use `wp.tile_arg{extreme[:3]}` within a"
                   f" tile")
        context.report(
            self, call.node,
            f"`{spelled}` into `{slot}` of a value that carries a gradient, and {who}: on a tie (equal values:"
            f" clamped, symmetric or quantised inputs, identical particles) Warp's adjoint gives the slot's whole"
            f" gradient to every {'pass' if own_slot else 'thread'} whose value equals the {extreme}, so it is"
            f" multiplied by the number of tied values (measured 16x for 16 tied particles){returned}; {fix}",
            # The slot's gradient is what is multiplied: where every recorded launch binds the slot's
            # array to one allocated without `requires_grad`, there is none (the adjoint is skipped).
            data={**function.runtime_data(), **_destination(function, flow, array)},
        )


def _parts(node: cst.Call) -> tuple[cst.BaseExpression, list[cst.BaseExpression], cst.BaseExpression] | None:
    """(array, index expressions, value) of `wp.atomic_max(arr, i, ..., value)`, keywords allowed."""
    positional = [a.value for a in node.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
    target = keywords.get("arr") or (positional.pop(0) if positional else None)
    value = keywords.get("value") or (positional.pop() if positional else None)
    if target is None or value is None:
        return None
    indices = positional + [keywords[k] for k in INDEX_KEYWORDS if k in keywords]
    return (target, indices, value) if indices else None


def _float_array(function: FunctionModel, flow: Dataflow, node: cst.BaseExpression) -> str | None:
    """The name of the array written, as the code spells it, where it holds floats (or its type is
    not known: a generic array): a parameter, a view of one (`row = a[i]`), a struct's field."""
    params = function.arrays
    if isinstance(node, cst.Name):
        name = flow.views.get(node.value, node.value)
        param = params.get(name)
        if param is None:
            return None
        return node.value if param.type.differentiable or param.type.kind == "generic" else None
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
        field = f"{node.value.value}.{node.attr.value}"
        return field if flow.fields.get(field) else None
    return None


def _destination(function: FunctionModel, flow: Dataflow, array: str) -> dict:
    """The kernel's array parameter the slot lies in, as the finding's ``destinations``: the
    project model reads it to tell whether any recorded launch gives that array a gradient."""
    base = flow.views.get(array, array)
    return {"destinations": [base]} if function.kind == "kernel" and base in function.arrays else {}


def _tid_names(context: FileContext, function: FunctionModel) -> set[str]:
    """The locals `wp.tid()` is unpacked into, each bound once."""
    found = set()
    for binding in function.bindings:
        if isinstance(binding.value, cst.Call) and context.names.qualify(binding.value.func) == "warp.tid":
            found.add(binding.name)
    return {name for name in found if sum(b.name == name for b in function.bindings) == 1}


def _own_slot(context: FileContext, function: FunctionModel, indices: list[cst.BaseExpression]) -> bool:
    """Whether every thread reaches a slot of its own: each component of `wp.tid()` is an index as
    it is (whatever the other indices are, two threads differ in one of them)."""
    names = _tid_names(context, function)
    if not names or function.tid_arity != len(names):
        return False
    plain = {index.value for index in indices if isinstance(index, cst.Name)}
    return names <= plain


def _returned_value_used(function: FunctionModel, flow: Dataflow, call: CallSite) -> bool:
    """Whether the old value the call returns reaches an output: stored (`old[i] = wp.atomic_max(...)`),
    returned, or assigned to a local that reaches one."""
    statement = call.statement
    if isinstance(statement, cst.Expr):
        value = statement.value
        return value is not call.node and isinstance(value, cst.Call) and flow.qualify(value.func) in STORING
    if isinstance(statement, (cst.Assign, cst.AnnAssign)):
        targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
        names = [t.value for t in targets if isinstance(t, cst.Name)]
        return any(name in flow.useful for name in names) if names else True
    return isinstance(statement, (cst.Return, cst.AugAssign))
