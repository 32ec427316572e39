from __future__ import annotations

from warp_lint.host import HostScope, TapeRegion
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class TapeReuseWithoutReset(Rule):
    """A tape made outside a loop is re-entered in it, with `backward()` each pass and no `reset()`.

    ## What it does
    Flags a `with tape:` inside a loop when `tape` was created (or passed in) outside that loop,
    the same iteration calls `tape.backward(...)`, and nothing in the loop calls `tape.reset()`.
    Reported on the `with` that re-enters the tape. A tape created in the loop (`tape = wp.Tape()`
    or `with wp.Tape() as tape:` in the body), a `tape.reset()` anywhere in the loop, and a loop
    that records one step per pass on one tape with a single `backward()` after the loop (the usual
    way to differentiate a whole episode) are fine.

    ## Why is this bad?
    Entering a tape does not clear it: every pass appends its launches to those of the earlier
    passes, and `backward()` replays all of them, so each gradient also contains the contributions
    of every earlier iteration's launches (and the tape grows without bound). `tape.zero()` only
    zeroes the gradients; the launches stay. Nothing warns.

    ## Fix safety
    No automatic fix: call `tape.reset()` once the gradients are used (it clears the launches and
    zeroes the gradients), or create the tape inside the loop.

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU), `y = x*x; loss = sum 2y`, a tape made before the loop
    and re-entered with `tape.zero()` after each `backward(loss)`: the tape holds 2, 4, 6 launches
    and `x.grad` is [4, 8, 12], [8, 16, 24], [12, 24, 36] on passes 1, 2, 3 (right: [4, 8, 12]
    every pass); with `tape.reset()` instead: 2 launches and [4, 8, 12] every pass. Older versions
    not measured; `Tape.__enter__` has never cleared the launch list.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL207"
    name = "tape-reuse-without-reset"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            def optimise(forward, x, loss, steps):
                tape = wp.Tape()
                for _ in range(steps):
                    with tape:
                        forward()
                    tape.backward(loss)
                    x.assign(x.numpy() - 0.1 * x.grad.numpy())
                    tape.reset()
            """),
        Example("""
            import warp as wp

            def optimise(forward, x, loss, steps):
                for _ in range(steps):
                    tape = wp.Tape()
                    with tape:
                        forward()
                    tape.backward(loss)
                    x.assign(x.numpy() - 0.1 * x.grad.numpy())
                    tape.zero()
            """),
        Example("""
            import warp as wp

            def episode(step, states, loss, steps):
                tape = wp.Tape()
                for t in range(steps):
                    with tape:
                        step(states[t], states[t + 1])
                tape.backward(loss)
                return tape
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            def optimise(forward, x, loss, steps):
                tape = wp.Tape()
                for _ in range(steps):
                    with tape:
                        forward()
                    tape.backward(loss)
                    x.assign(x.numpy() - 0.1 * x.grad.numpy())
                    tape.zero()
            """),
        Example("""
            import warp as wp

            class Trainer:
                def train(self, iterations):
                    for _ in range(iterations):
                        with self.tape:
                            self.forward()
                        self.tape.backward(self.loss)
                        self.step()
                        self.tape.zero()
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for region in scope.regions:
                if region.key:
                    self._check_region(context, scope, region)

    def _check_region(self, context: ProjectContext, scope: HostScope, region: TapeRegion) -> None:
        opening = next((e for e in scope.events if e.kind == "region" and e.order == region.start_order - 1), None)
        if opening is None:
            return
        span = next((scope.loop(loop) for loop in reversed(opening.loops) if not scope.loop(loop).single_pass), None)
        if span is None:
            return
        if scope.created_in(region.key, span.start_order, span.end_order):
            return  # a fresh tape every pass
        events = list(scope.events_between(span.start_order, span.end_order))
        if any(e.kind == "method" and e.name == "reset" and e.key == region.key for e in events):
            return
        backward = next((e for e in events if e.kind == "method" and e.name == "backward" and e.key == region.key
                         and not e.exclusive_with(opening)), None)
        if backward is None:
            return  # one episode recorded step by step, differentiated after the loop
        tape = region.tape
        zero = any(e.kind == "method" and e.name == "zero" and e.key == region.key for e in events)
        note = f" (`{tape}.zero()` clears the gradients, not the launches)" if zero else ""
        context.report(self, region, (
            f"`{tape}` is created outside this loop and re-entered here every pass with no `{tape}.reset()`{note}:"
            f" the launches of every pass pile up on it and each `{tape}.backward()`"
            f" ({context.where(backward.location, region.location)}) replays all of them, so the gradients include"
            f" the earlier passes; call `{tape}.reset()` once the gradients are used, or create the tape inside the loop"),
            related=[(f"`{tape}.backward()`", backward.location)])

