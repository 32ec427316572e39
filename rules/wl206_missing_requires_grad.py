from __future__ import annotations

from warp_lint.host import HostEvent, HostScope, backward_seeds
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

FLOAT_HINTS = ("float", "half", "vec", "mat", "quat", "transform", "spatial")


class MissingRequiresGrad(Rule):
    """An array on the gradient path is allocated without `requires_grad=True`.

    ## What it does
    Flags an allocation in the function (`wp.zeros`, `wp.empty`, `wp.full`, `wp.ones`,
    `wp.array(...)`, `wp.from_numpy`) without `requires_grad=True` (and not switched on later
    with `arr.requires_grad = True`) when the array is written by one recorded launch and read by a
    later one whose kernel passes a gradient back into it (not one that only compares it or indexes
    with it, nor one writing only integers, nor one whose float outputs are all allocated without
    `requires_grad` themselves: its adjoint reads their missing `.grad` and has nothing to pass
    back), and the writer, with its backward enabled, stores a
    value carrying a gradient into it (not counts or flags built from constants); when its `.grad`
    is read, or
    when it is the loss passed to `tape.backward`. Integer arrays are never flagged.
    `zeros_like`, `empty_like`, `full_like`, `ones_like` and `clone` inherit the flag from their
    source and are not flagged. Also flags `arr.requires_grad = True` set after `arr` was stored in
    a field of a `@wp.struct` instance.

    ## Why is this bad?
    An array without `requires_grad` has no `.grad` buffer: the recorded launch that writes it
    gets no incoming adjoint, so the chain is cut there: every gradient that flows only through
    this array is zero (other paths keep theirs), without a warning. Its `.grad` is `None`. As the loss, `backward()` raises
    `RuntimeError: Scalar loss arrays should have requires_grad=True set before calling
    Tape.backward()`. A struct copies the array's gradient pointer when the field is assigned:
    switching `requires_grad` on afterwards does not reach the struct.

    ## Fix safety
    No automatic fix: add `requires_grad=True` to the allocation (before storing it in a
    struct).

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU), `x -> y = x*x -> z = 2y -> loss` with `y` allocated
    without `requires_grad`: `x.grad` is [0, 0, 0] (right: [4, 8, 12]), `y.grad` is None, no
    warning; the loss without it raises the RuntimeError above; `zeros_like`, `empty_like`,
    `full_like` and `clone` of a `requires_grad` array have `requires_grad=True`. A struct field
    assigned before `requires_grad = True`: `x.grad` [0, 0, 0] (right: [2, 4, 6]).

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL206"
    name = "missing-requires-grad"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(n):
                x = wp.ones(n, dtype=float, requires_grad=True)
                y = wp.zeros_like(x)
                loss = wp.clone(x)
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    wp.launch(square, n, inputs=[y], outputs=[loss])
                tape.backward(grads={loss: wp.ones_like(loss)})
                return x.grad
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def count(x: wp.array(dtype=float), c: wp.array(dtype=int)):
                i = wp.tid()
                c[i] = int(x[i])

            @wp.kernel
            def gather(c: wp.array(dtype=int), x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[c[i]]

            def run(x, y, n):
                counts = wp.zeros(n, dtype=int)
                tape = wp.Tape()
                with tape:
                    wp.launch(count, n, inputs=[x], outputs=[counts])
                    wp.launch(gather, n, inputs=[counts, x], outputs=[y])
            """),
        Example("""
            import warp as wp

            @wp.struct
            class State:
                x: wp.array(dtype=float)

            def make(n):
                x = wp.zeros(n, dtype=float)
                x.requires_grad = True
                state = State()
                state.x = x
                return state
            """),
        # `depth` is read only by a kernel whose float output, `rank`, has no `.grad` either: that
        # adjoint has nothing to pass back into `depth` (`rank`'s own readers would judge `rank`).
        Example("""
            import warp as wp

            @wp.kernel
            def penetration(x: wp.array(dtype=float), depth: wp.array(dtype=float)):
                i = wp.tid()
                depth[i] = x[i] * x[i]

            @wp.kernel
            def ranking(depth: wp.array(dtype=float), rank: wp.array(dtype=float)):
                i = wp.tid()
                rank[i] = wp.exp(depth[i])

            def run(x, n):
                depth = wp.zeros(n, dtype=float)
                rank = wp.zeros(n, dtype=float)
                tape = wp.Tape()
                with tape:
                    wp.launch(penetration, n, inputs=[x], outputs=[depth])
                    wp.launch(ranking, n, inputs=[depth], outputs=[rank])
            """),
        # `score` only decides which contacts are kept: no gradient flows back into it.
        Example("""
            import warp as wp

            @wp.kernel
            def distances(x: wp.array(dtype=float), score: wp.array(dtype=float)):
                i = wp.tid()
                score[i] = x[i] * x[i]

            @wp.kernel
            def keep_close(score: wp.array(dtype=float), x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                if score[i] < 1.0:
                    y[i] = x[i]

            def run(x, y, n):
                score = wp.empty(n, dtype=float)
                tape = wp.Tape()
                with tape:
                    wp.launch(distances, n, inputs=[x], outputs=[score])
                    wp.launch(keep_close, n, inputs=[score, x], outputs=[y])
            """),
        # `counts` holds contact counts built from constants: no gradient is written into it, so
        # none is cut there (newton's per-body contact weights).
        Example("""
            import warp as wp

            @wp.kernel
            def count_contacts(x: wp.array(dtype=float), counts: wp.array(dtype=float)):
                i = wp.tid()
                if x[i] < 0.5:
                    wp.atomic_add(counts, 0, 1.0)

            @wp.kernel
            def weighted(x: wp.array(dtype=float), counts: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i] / wp.max(counts[0], 1.0)

            def run(x, y, n):
                counts = wp.zeros(1, dtype=float)
                tape = wp.Tape()
                with tape:
                    wp.launch(count_contacts, n, inputs=[x], outputs=[counts])
                    wp.launch(weighted, n, inputs=[x, counts], outputs=[y])
            """),
        # The same counts, added by a `@wp.func` helper the kernel passes the array to (newton's
        # XPBD contact solver): the helper stores a constant, so no gradient is cut there either.
        Example("""
            import warp as wp

            @wp.func
            def count_contact(x: wp.array(dtype=float), counts: wp.array(dtype=float), i: int):
                if x[i] < 0.5:
                    wp.atomic_add(counts, 0, 1.0)

            @wp.kernel
            def count_contacts(x: wp.array(dtype=float), counts: wp.array(dtype=float)):
                count_contact(x, counts, wp.tid())

            @wp.kernel
            def weighted(x: wp.array(dtype=float), counts: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i] / wp.max(counts[0], 1.0)

            def run(x, y, n):
                counts = wp.zeros(1, dtype=float)
                tape = wp.Tape()
                with tape:
                    wp.launch(count_contacts, n, inputs=[x], outputs=[counts])
                    wp.launch(weighted, n, inputs=[x, counts], outputs=[y])
            """),
    ]
    INVALID = [
        # A helper that stores the square of what it reads: the gradient stops at `y`.
        Example("""
            import warp as wp

            @wp.func
            def store_square(x: wp.array(dtype=float), y: wp.array(dtype=float), i: int):
                y[i] = x[i] * x[i]

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                store_square(x, y, wp.tid())

            def run(x, loss, n):
                y = wp.zeros(n, dtype=float)
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    wp.launch(square, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, loss, n):
                y = wp.zeros(n, dtype=float)
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    wp.launch(square, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            def run(forward, x):
                loss = wp.zeros(1, dtype=float)
                tape = wp.Tape()
                with tape:
                    forward(x, loss)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            def run(forward, data):
                x = wp.array(data, dtype=float)
                tape = wp.Tape()
                with tape:
                    loss = forward(x)
                tape.backward(loss)
                return x.grad.numpy()
            """),
        Example("""
            import warp as wp

            @wp.struct
            class State:
                x: wp.array(dtype=float)

            def make(n):
                x = wp.zeros(n, dtype=float)
                state = State()
                state.x = x
                x.requires_grad = True
                return state
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            allocations = [e for e in scope.events if e.kind == "assign" and e.allocation is not None
                           and e.allocation.requires_grad is False and not e.allocation.integer]
            if allocations:
                self._check_allocations(context, scope, allocations)
            structs = context.struct_names()
            if structs:
                self._check_struct_fields(context, scope, structs)

    def _check_allocations(self, context: ProjectContext, scope: HostScope, allocations: list[HostEvent]) -> None:
        enabled = {e.owner for e in scope.events if e.kind == "assign" and e.name.endswith(".requires_grad")}
        no_grad = {e.key for e in allocations}
        for allocation in allocations:
            key = allocation.key
            if key in enabled or allocation.allocation.explicit and _dtype_is_integer(allocation.allocation.dtype):
                continue
            reason = self._reason(context, scope, allocation, key, no_grad)
            if reason is not None:
                context.report(self, allocation, (
                    f"`{allocation.name}` is allocated without `requires_grad=True` but {reason}; add"
                    f" `requires_grad=True` to this allocation"), data={"array": allocation.name})

    @staticmethod
    def _reason(context: ProjectContext, scope: HostScope, allocation: HostEvent, key: str, no_grad: set[str]) -> str | None:
        writer = None
        for event in scope.events:
            if event.order <= allocation.order:
                continue
            if event.kind == "grad" and event.key == key:
                return f"its `.grad` is read on this path ({context.where(event.location, allocation.location)}: it is None)"
            if event.kind == "method" and event.name == "backward" and scope.is_tape(event) and any(
                    s.key == key and s.param in ("", "loss") for s in backward_seeds(event)[:1]):
                return ("it is the loss passed to `backward()`, which raises `RuntimeError: Scalar loss arrays"
                        " should have requires_grad=True`")
            launch = event.launch
            if launch is None or not launch.recorded:
                continue
            if writer is not None and any(r.key == key and launch.passes_gradient(r) for r in launch.reads()) and \
                    (event.region is writer.region or event.region.key == writer.region.key) and \
                    _receives_gradient(scope, launch):
                return (f"kernel `{writer.launch.kernel_code}` writes it and kernel `{launch.kernel_code}` reads it"
                        f" on the tape: without a `.grad` the chain is cut there, and what `{writer.launch.kernel_code}`"
                        f" computes it from gets no gradient through it (other paths keep theirs), without a warning")
            written = [w for w in launch.writes() if w.key == key and launch.writes_gradient(w)]
            if written and launch.differentiable and not any(_integer(launch.param_dtype(w)) for w in written) and any(
                    r.key not in no_grad for r in launch.reads()
                    if not _integer(launch.param_dtype(r)) and launch.passes_gradient(r)):
                writer = event
        return None

    def _check_struct_fields(self, context: ProjectContext, scope: HostScope, names: set[str]) -> None:
        structs = {e.key for e in scope.events if e.kind == "assign" and _constructs_struct(e, names)}
        if not structs:
            return
        stored: dict[str, HostEvent] = {}  # array key -> the field assignment storing it
        for event in scope.events:
            if event.kind != "assign":
                continue
            owner, _, field = event.name.rpartition(".")
            if owner and field != "requires_grad" and event.owner in structs and event.value is not None:
                stored.setdefault(event.key, event)  # a plain-name value: the field's key is the array's
            elif field == "requires_grad" and owner and event.value is not None and event.value.literal is True:
                field_event = stored.get(event.owner)
                if field_event is not None:
                    context.report(self, event, (
                        f"`{owner}.requires_grad = True` comes after `{owner}` was stored in struct field"
                        f" `{field_event.name}` ({context.where(field_event.location, event.location)}): the struct"
                        f" keeps the array as it was then, without a `.grad`, so gradients through the struct are"
                        f" zero; set `requires_grad` before assigning the field"),
                        related=[("stored in the struct here", field_event.location)])


def _receives_gradient(scope: HostScope, launch) -> bool:
    """Whether the reader's adjoint gets a gradient to pass back: it reads its outputs' `.grad`, so
    one of the float arrays it stores a gradient into must be able to have one. Outputs that are
    all allocated without `requires_grad` give it none (a selection writing a score to scratch):
    the chain is cut at them already, and each is judged as an allocation of its own."""
    outputs = [w for w in launch.writes() if launch.writes_gradient(w) and not _integer(launch.param_dtype(w))]
    return any(scope.allocated_without_gradients(w.key) is None for w in outputs)


def _integer(dtype: str | None) -> bool:
    return dtype is not None and _dtype_is_integer(dtype)


def _dtype_is_integer(dtype: str) -> bool:
    last = dtype.rsplit(".", 1)[-1]
    return bool(last) and not any(hint in last for hint in FLOAT_HINTS) and last not in ("Any", "")


def _constructs_struct(event: HostEvent, structs: set[str]) -> bool:
    value = event.value
    return value is not None and value.call is not None and value.code.split("(", 1)[0].rsplit(".", 1)[-1] in structs

