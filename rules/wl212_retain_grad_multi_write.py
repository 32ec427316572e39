from __future__ import annotations

from warp_lint.host import HostEvent, HostScope
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class RetainGradMultiWrite(Rule):
    """An array made with `retain_grad=True` is overwritten by a second recorded store.

    ## What it does
    Flags an allocation with `retain_grad=True` (reported on the allocation) when, on one tape,
    a recorded launch stores into the array (`y[i] = ...`) after an earlier recorded launch wrote
    it (stored or accumulated), or one recorded launch's kernel stores into it twice. Kernels are
    resolved in the same file; launches of kernels defined elsewhere are not guessed. Several
    launches that only accumulate (`wp.atomic_add`, `y[i] += ...`) are fine: their contributions
    add up, and so do their gradients.

    ## Why is this bad?
    From 1.13, `backward()` zeroes an array's gradient once the adjoint of the store that wrote it
    has read it, so an overwritten, earlier value gets no gradient. `retain_grad=True` keeps the
    gradient instead: the adjoint of the earlier (overwritten) store reads it again, and the
    gradient of whatever that store was computed from double counts, without a warning.

    ## Fix safety
    No automatic fix: drop `retain_grad=True`, or write each value into its own array.

    ## Warp versions
    1.13 and later (the zeroing that `retain_grad` turns off came in 1.13; the start is from the
    changelog, not measured). Measured on 1.19.0 and 1.16.0 (CPU), `y = x` then `y = x*x` stored by
    two recorded launches (or twice in one kernel), `loss = sum y`: `x.grad` is [2, 4, 6] without
    `retain_grad` and [3, 5, 7] with it (right: [2, 4, 6]); two launches accumulating into `y` give
    the right [4, 8, 12] either way.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL212"
    name = "retain-grad-multi-write"
    affected_versions = ">=1.13"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def add_square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(y, i, x[i] * x[i])

            def run(x, loss, forward, n):
                y = wp.zeros(n, dtype=float, requires_grad=True, retain_grad=True)
                tape = wp.Tape()
                with tape:
                    wp.launch(add_square, n, inputs=[x], outputs=[y])
                    wp.launch(add_square, n, inputs=[x], outputs=[y])
                    forward(y, loss)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, a, loss, forward, n):
                y = wp.zeros(n, dtype=float, requires_grad=True)
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    wp.launch(square, n, inputs=[a], outputs=[y])
                    forward(y, loss)
                tape.backward(loss)
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            @wp.kernel
            def copy(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i]

            def run(x, loss, forward, n):
                y = wp.zeros(n, dtype=float, requires_grad=True, retain_grad=True)
                tape = wp.Tape()
                with tape:
                    wp.launch(copy, n, inputs=[x], outputs=[y])
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    forward(y, loss)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def write_twice(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i]
                y[i] = x[i] * x[i]

            def run(x, loss, forward, n):
                y = wp.zeros(n, dtype=float, requires_grad=True, retain_grad=True)
                tape = wp.Tape()
                with tape:
                    wp.launch(write_twice, n, inputs=[x], outputs=[y])
                    forward(y, loss)
                tape.backward(loss)
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for allocation in scope.events:
                if allocation.kind == "assign" and allocation.allocation is not None and \
                        allocation.allocation.retain_grad:
                    reason = self._reason(context, scope, allocation)
                    if reason is not None:
                        context.report(self, allocation, (
                            f"`{allocation.name}` is allocated with `retain_grad=True` but {reason}: with the gradient"
                            f" retained, the adjoint of the overwritten store reads it too and the gradient double"
                            f" counts; drop `retain_grad=True` or store each value in its own array"),
                            data={"array": allocation.name})

    @staticmethod
    def _reason(context: ProjectContext, scope: HostScope, allocation: HostEvent) -> str | None:
        key = allocation.key
        writers: list[HostEvent] = []
        for event in scope.events:
            launch = event.launch
            if event.order <= allocation.order or launch is None or not launch.recorded:
                continue
            if launch.kernel is not None:
                stored = [r for r in launch.stores() if r.key == key]
                for ref in stored:
                    if ref.param in launch.kernel.stores_twice:
                        return (f"kernel `{launch.kernel_code}` ({context.where(event.location, allocation.location)})"
                                f" stores into it twice")
                earlier = next((w for w in writers if not w.exclusive_with(event) and event.region.same_tape(w.region)),
                               None)
                if stored and earlier is not None:
                    return (f"kernel `{launch.kernel_code}` ({context.where(event.location, allocation.location)})"
                            f" stores into it after kernel `{earlier.launch.kernel_code}`"
                            f" ({context.where(earlier.location, allocation.location)}) wrote it on the same tape")
            if any(w.key == key for w in launch.writes()):
                writers.append(event)
        return None

