from __future__ import annotations

from warp_lint.host import (UTILITY_MODULES, UTILITY_OPS, HostEvent, HostScope, Launch, TapeRegion, backward_seeds,
                             integer_dtype)
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class UntapedUtilityOp(Rule):
    """A `wp.utils` reduction, scan or sort inside a tape block feeds the loss: the tape never sees it.

    ## What it does
    Inside a tape recording region, flags a call of `wp.utils.array_sum`, `array_inner`,
    `array_scan`, `radix_sort_pairs`, `segmented_sort_pairs` or `runlength_encode` when its result
    (the `out=`/output array it writes, or the value it returns) reaches the loss: it is the array
    passed to that tape's `backward()`, or a later recorded launch reads it and the loss depends
    on that launch (with no `backward()` in the function: a later recorded launch reads it).
    Reported on the call. The same call outside the tape block, one whose result only goes to
    logging, and a sort whose results later launches take only as integer arrays (an index
    permutation for a recorded gather) are fine.

    ## Why is this bad?
    These helpers run native code, not recorded kernel launches: the tape has no record of them
    and `backward()` passes nothing through them. Every gradient upstream of the result is zero,
    without a warning.

    ## Fix safety
    No automatic fix: compute the reduction in a kernel (`wp.atomic_add(loss, 0, x[i])`, a tile
    reduction), which the tape records.

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU), `y = x*x` recorded, then `wp.utils.array_sum(y,
    out=s)` and `loss = s` recorded: `x.grad` is [0, 0, 0] (right: [2, 4, 6]) and the tape holds
    only the two user launches; the same for `array_inner` and `array_scan`. `wp.utils.array_cast`
    launches a kernel and is recorded, so it is not flagged. Older versions not measured.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL209"
    name = "untaped-utility-op"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, y[i])

            def run(forward, x, y, loss, n):
                tape = wp.Tape()
                with tape:
                    forward(x, y)
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
                print(wp.utils.array_sum(y))
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, y[i])

            def run(forward, x, y, loss, stats, n):
                tape = wp.Tape()
                with tape:
                    forward(x, y)
                    wp.utils.array_sum(y, out=stats)
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def gather(src: wp.array(dtype=float), order: wp.array(dtype=wp.int32), dst: wp.array(dtype=float)):
                i = wp.tid()
                dst[i] = src[order[i]]

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, y[i] * y[i])

            def run(x, keys, order, sorted_x, loss, n):
                tape = wp.Tape()
                with tape:
                    wp.utils.radix_sort_pairs(keys, order, n)
                    wp.launch(gather, n, inputs=[x, order], outputs=[sorted_x])
                    wp.launch(total, n, inputs=[sorted_x], outputs=[loss])
                tape.backward(loss)
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            def run(forward, x, y, loss):
                tape = wp.Tape()
                with tape:
                    forward(x, y)
                    wp.utils.array_sum(y, out=loss)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def scale(s: wp.array(dtype=float), loss: wp.array(dtype=float)):
                wp.atomic_add(loss, 0, 2.0 * s[0])

            def run(forward, x, y, s, loss):
                tape = wp.Tape()
                with tape:
                    forward(x, y)
                    wp.utils.array_inner(y, y, out=s)
                    wp.launch(scale, 1, inputs=[s], outputs=[loss])
                tape.backward(loss)
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for region in scope.regions:
                for event in scope.events_in(region):
                    if event.kind == "call" and event.region is region and _utility(event.name):
                        result = self._result(scope, event)
                        if result and self._reaches_loss(scope, region, event, result):
                            self._report(context, event)

    @staticmethod
    def _result(scope: HostScope, event: HostEvent) -> set[str]:
        keys = {w.key for w in event.writes}
        if event.call is not None and event.call.role == "assign":  # `s = wp.utils.array_sum(y)`
            keys |= {e.key for e in scope.events if e.kind == "assign" and e.statement == event.statement}
        return keys

    @staticmethod
    def _reaches_loss(scope: HostScope, region: TapeRegion, event: HostEvent, result: set[str]) -> bool:
        backward = next((e for e in scope.events if e.order > event.order and e.kind == "method"
                         and e.name == "backward" and region.key and e.key == region.key), None)
        later = [e for e in scope.events if e.launch is not None and e.launch.recorded and e.order > event.order
                 and region.same_tape(e.region)
                 and (backward is None or e.order < backward.order)]
        if backward is None or not backward_seeds(backward):
            return any(result & _float_refs(e.launch) for e in later)
        needed = {seed.key for seed in backward_seeds(backward)}
        if result & needed:
            return True
        for launch in reversed(later):  # walk back from the loss: what does it depend on?
            if needed & {w.key for w in launch.launch.writes(convention=True)}:
                needed |= {r.key for r in launch.launch.reads(convention=True)}
                if result & _float_refs(launch.launch):
                    return True
        return False

    def _report(self, context: ProjectContext, event: HostEvent) -> None:
        function = event.name.rsplit(".", 1)[1]
        context.report(self, event, (
            f"`wp.utils.{function}()` runs inside the tape block but is not recorded, and its result reaches the"
            f" loss: `backward()` passes no gradient through it, so everything upstream gets zero gradient, without"
            f" a warning; compute it in a kernel (e.g. `wp.atomic_add`) that the tape records"))


def _float_refs(launch: Launch) -> set[str]:
    """The arrays a launch takes, but those its kernel declares integer: a sorted index permutation
    that a recorded gather reads carries no gradient to lose."""
    return {r.key for r in launch.refs if not integer_dtype(launch.param_dtype(r))}


def _utility(name: str) -> bool:
    return name.startswith(UTILITY_MODULES) and name.rsplit(".", 1)[1] in UTILITY_OPS
