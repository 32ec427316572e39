from __future__ import annotations

import re

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.cst_walk import mentions_name, walk
from warp_lint.dataflow import Dataflow, dataflow_of
from warp_lint.kernels import ArrayAccess, CallSite, FunctionModel
from warp_lint.rule import Example, Rule
from warp_lint.warp_types import code_of

# `atomic_inc` is listed for completeness: Warp 1.19 has no such builtin.
COUNTER_ATOMICS = {"warp.atomic_add", "warp.atomic_sub", "warp.atomic_inc"}


class AtomicCounterIndex(Rule):
    """The result of `wp.atomic_add` is used as an array index (`slot = wp.atomic_add(count, 0, 1); out[slot] = v`).

    ## What it does
    Flags `wp.atomic_add` and `wp.atomic_sub` calls whose returned value (the
    counter's old value) becomes, directly or through locals computed from it, the index of an
    access to a floating-point array in a differentiable kernel or `@wp.func`: stream compaction
    and slot allocation. Not flagged: a `@wp.func` that has a `@wp.func_replay`, indices into
    integer arrays (no gradient flows there), stores of values that carry no gradient
    (`out[slot] = float(tid)`: a misplaced zero adjoint changes nothing), and atomics whose result
    is not used as an index.

    Also flags a call to a `@wp.func` that has a `@wp.func_replay` from inside another `@wp.func`
    without one (newton's `counter_increment` called by the helper that appends a contact record):
    Warp uses the replay only where the code it replays calls the function, and the backward pass
    of a kernel replays the outer helper by running its forward in full, atomics and stores
    included.

    ## Why is this bad?
    The backward pass replays the forward code but skips atomics: there the slot the atomic
    returned is 0, so each thread's adjoint reads the gradient of slot 0 instead of its own (on
    1.19.0 the counter is left as the forward pass left it). Measured on 1.12.1 through 1.19.0
    with three threads compacting `out[slot] = 2 * x[i]`: AD `[2.27, 0, 0]` against finite
    differences `[2.27, 1.54, 1.08]`. Moving the reservation into a `@wp.func` with a
    `@wp.func_replay` that returns the slot recorded in the forward pass gives the right gradient.
    Called through another helper, that replay is skipped: measured on 1.19.0 with four threads
    appending `out[slot] = x[i]**2` through a helper, the backward pass counts again (the counter
    goes from 4 to 8, the recorded slots become -1) and the gradient is `[0, 0, 0, 0]` against
    `[2, 4, 6, 8]`; calling the reservation from the kernel, or giving the outer helper a
    `@wp.func_replay` of its own, gives `[2, 4, 6, 8]`.

    ## Fix safety
    No automatic fix. Put the reservation in a `@wp.func` that stores the slot per thread, and
    give it a `@wp.func_replay` that reads the stored slot instead of incrementing the counter; or
    compute the slots in a separate, non-differentiable pass (a prefix sum). For a replayed
    reservation called from a helper: call it from the kernel and pass the slot to the helper, or
    give the helper a `@wp.func_replay` too.

    ## Warp versions
    All versions (measured on 1.12.1 through 1.19.0).

    ## Confirmation
    gradcheck; confirmed when the flagged atomic, made a plain read and store of the counter that
    the backward pass replays (with the counter put back before it, so each thread's adjoint reads
    the slot it wrote, as a `@wp.func_replay` returning the recorded slot gives), removes the
    disagreement.
    """

    code = "WL111"
    name = "atomic-counter-index"
    runtime_strategy = ("gradcheck",)
    safe_form = "replayed-counter"

    VALID = [
        # The stored value is built from the thread index: no gradient to misplace.
        Example("""
            import warp as wp

            @wp.kernel
            def list_ids(counter: wp.array(dtype=wp.int32), ids: wp.array(dtype=float)):
                tid = wp.tid()
                slot = wp.atomic_add(counter, 0, 1)
                ids[slot] = float(tid)
            """),
        Example("""
            import warp as wp

            @wp.func
            def reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
                slot = wp.atomic_add(counter, 0, 1)
                slots[i] = slot
                return slot

            @wp.func_replay(reserve)
            def replay_reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
                return slots[i]

            @wp.kernel
            def compact(x: wp.array(dtype=float), counter: wp.array(dtype=int), slots: wp.array(dtype=int),
                        out: wp.array(dtype=float)):
                i = wp.tid()
                if x[i] > 0.0:
                    slot = reserve(counter, slots, i)
                    out[slot] = x[i] * 2.0
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def collect(x: wp.array(dtype=float), counter: wp.array(dtype=int), ids: wp.array(dtype=int)):
                i = wp.tid()
                if x[i] > 0.0:
                    slot = wp.atomic_add(counter, 0, 1)
                    ids[slot] = i
            """),
        Example("""
            import warp as wp

            @wp.kernel(enable_backward=False)
            def compact(x: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
                i = wp.tid()
                if x[i] > 0.0:
                    slot = wp.atomic_add(counter, 0, 1)
                    out[slot] = x[i] * 2.0
            """),
        # The outer helper has a replay of its own: the kernel's backward runs that, and the
        # helper's adjoint replays the reservation with its own replay.
        Example("""
            import warp as wp

            @wp.func
            def reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
                slot = wp.atomic_add(counter, 0, 1)
                slots[i] = slot
                return slot

            @wp.func_replay(reserve)
            def replay_reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
                return slots[i]

            @wp.func
            def append(counter: wp.array(dtype=int), slots: wp.array(dtype=int), out: wp.array(dtype=float), i: int,
                       value: float):
                out[reserve(counter, slots, i)] = value

            @wp.func_replay(append)
            def replay_append(counter: wp.array(dtype=int), slots: wp.array(dtype=int), out: wp.array(dtype=float),
                              i: int, value: float):
                return
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def compact(x: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
                i = wp.tid()
                if x[i] > 0.0:
                    slot = wp.atomic_add(counter, 0, 1)
                    out[slot] = x[i] * 2.0
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def emit(x: wp.array(dtype=wp.vec3), counter: wp.array(dtype=int), out: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                base = wp.atomic_add(counter, 0, 2)
                out[base + 1] = x[i]
                out[wp.atomic_add(counter, 0, 1)] = x[i] * 2.0
            """),
        Example("""
            import warp as wp

            @wp.func
            def reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
                slot = wp.atomic_add(counter, 0, 1)
                slots[i] = slot
                return slot

            @wp.func_replay(reserve)
            def replay_reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
                return slots[i]

            @wp.func
            def append(counter: wp.array(dtype=int), slots: wp.array(dtype=int), out: wp.array(dtype=float), i: int,
                       value: float):
                slot = reserve(counter, slots, i)
                out[slot] = value
            """),
    ]

    def check(self, context: FileContext) -> None:
        functions = context.kernels.functions
        replayed = {_replay_target(f) for f in functions if f.kind == "func_replay"}
        for function in functions:
            if function.kind == "func" and function.name not in replayed:
                self._replay_skipped(context, function)
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            if function.kind == "func" and function.name in replayed:
                continue
            flow = dataflow_of(function, context.names)
            for call in function.calls:
                if call.name not in COUNTER_ATOMICS:
                    continue
                access = _indexed_access(function, call, flow)
                if access is None:
                    continue
                spelled = call.name.replace("warp.", "wp.")
                context.report(
                    self, call.node,
                    f"The result of `{spelled}` indexes `{access.array}[{access.index}]`: the backward pass replays"
                    f" the atomic, gets another slot and puts the adjoint in the wrong place; record the slot and"
                    f" replay it with a @wp.func_replay, or compute the slots in a separate pass",
                    data=function.runtime_data(),
                )

    def _replay_skipped(self, context: FileContext, function: FunctionModel) -> None:
        """Calls in ``function`` (a `@wp.func` without a replay) to helpers that have one. Backward
        disabled by its options does not excuse it: its callers decide (the project's contexts)."""
        for call in function.helper_calls:
            if call.replayed:
                context.report(
                    self, call.node,
                    f"`{call.helper}` has a @wp.func_replay, but `{function.name}` calls it and has none: a kernel's"
                    f" backward pass replays `{function.name}` by running it in full, so `{call.helper}` runs again"
                    f" (its atomics count again and the slots move) instead of its replay; call `{call.helper}` from"
                    f" the kernel and pass its result in, or give `{function.name}` a @wp.func_replay too",
                    data=function.runtime_data(),
                )


def _replay_target(function: FunctionModel) -> str | None:
    args = function.decorator_args
    return args[0].value.value if args and isinstance(args[0].value, cst.Name) else None


def _stores_no_gradient(access: ArrayAccess, flow: Dataflow) -> bool:
    """A plain store of a value that carries no gradient (`out[slot] = float(tid)`): its adjoint is
    zero, so a misplaced one changes nothing."""
    statement = access.statement
    return access.kind == "write" and isinstance(statement, (cst.Assign, cst.AnnAssign)) and \
        statement.value is not None and flow.free(statement.value)


def _indexed_access(function: FunctionModel, call: CallSite, flow: Dataflow) -> ArrayAccess | None:
    """The first access to a differentiable array whose index holds the atomic's result, of a
    value that carries a gradient."""
    statement = call.statement
    derived: set[str] = set()
    if isinstance(statement, (cst.Assign, cst.AnnAssign)) and statement.value is not None and any(
            node is call.node for node in walk(statement.value)):
        targets = statement.targets if isinstance(statement, cst.Assign) else [statement]
        derived |= {t.target.value for t in targets if isinstance(t.target, cst.Name)}
    for binding in function.bindings:  # locals computed from the slot
        if binding.order > call.order and binding.value is not None and any(
                mentions_name(binding.value, name) for name in derived):
            derived.add(binding.name)
    code = code_of(call.node)
    for access in function.accesses:
        if access.via is not None or access.order < call.order:
            continue
        param = function.arrays.get(access.array)
        if param is None or not param.type.differentiable or _stores_no_gradient(access, flow):
            continue
        if access.statement is statement and code in access.index:
            return access  # out[wp.atomic_add(counter, 0, 1)] = v
        if derived & set(re.findall(r"[A-Za-z_]\w*", access.index)):
            return access
    return None
