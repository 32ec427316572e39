from __future__ import annotations

from warp_lint.host import HostEvent, HostScope, zeroes_gradients
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class GradAccumulation(Rule):
    """`tape.backward()` runs again without zeroing the gradients: they add up.

    ## What it does
    Flags a `tape.backward(...)` inside a loop when the same iteration has no `tape.zero()` /
    `tape.reset()` and no zeroing of a `.grad` array (`x.grad.zero_()`, `x.grad = ...`, a launch
    writing `x.grad`), unless every array whose `.grad` the iteration reads is allocated afresh in
    that iteration, or unless it runs in one pass only (`for flag in (False, True):` around
    `if flag:`). Also flags a second `backward()` on one tape with no zeroing between the two
    (calls in different arms of one `if` do not count). A `backward()` called while a CUDA graph
    is captured (between `wp.capture_begin()` and `wp.capture_end()`, or in `with
    wp.ScopedCapture():`) is put in the graph, not run there, and is not counted.

    ## Why is this bad?
    `backward()` adds into the `.grad` buffers; it never clears the gradients of the inputs. An
    optimisation loop without `tape.zero()` steps along the sum of all gradients so far; a
    Jacobian built row by row with `backward(grads=...)` mixes its rows.

    ## Fix safety
    No automatic fix: call `tape.zero()` after using the gradients (or `tape.reset()` when the
    tape is re-recorded each iteration).

    ## Warp versions
    All versions; the factor changed. Measured on 1.19.0 (CPU), `x -> y = x*x -> z = 2y ->
    loss`: the second `backward(loss)` without `zero()` gives `x.grad` = 2x the right value, the
    third 3x (`backward` zeroes the gradients of the arrays the tape wrote from 1.13.0, so only
    the inputs accumulate). Before 1.13 the intermediates' gradients accumulate too and the error
    compounds along the chain (3x for this chain on the second call, per Warp's changelog; not
    measured here).

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL204"
    name = "grad-accumulation"
    level = "project"

    VALID = [
        # Put into a CUDA graph, in a loop, not run: whoever launches the graph runs `backward()`.
        Example("""
            import warp as wp

            def capture_backward(tape, loss, graphs):
                if graphs.get("backward") is None:
                    wp.capture_begin()
                    try:
                        tape.backward(loss)
                    finally:
                        graphs["backward"] = wp.capture_end()

            def train(step, x, loss, graphs, iterations):
                tape = wp.Tape()
                for it in range(iterations):
                    with tape:
                        step(x, loss)
                    capture_backward(tape, loss, graphs)
            """),
        # The loop runs its body with and without gradients: `backward()` runs in one pass only.
        Example("""
            import warp as wp

            def both_paths(forward, x, loss):
                for requires_grad in (False, True):
                    if requires_grad:
                        with wp.Tape() as tape:
                            forward()
                        tape.backward(loss)
                    else:
                        forward()
                return x.grad.numpy()
            """),
        Example("""
            import warp as wp

            def optimise(tape, forward, x, loss, steps):
                for _ in range(steps):
                    with tape:
                        forward()
                    tape.backward(loss)
                    x.assign(x.numpy() - 0.1 * x.grad.numpy())
                    tape.zero()
            """),
        Example("""
            import warp as wp

            def gradients(forward, cases):
                results = []
                for case in cases:
                    x = wp.array(case, dtype=float, requires_grad=True)
                    tape = wp.Tape()
                    with tape:
                        loss = forward(x)
                    tape.backward(loss)
                    results.append(x.grad.numpy())
                return results
            """),
        Example("""
            import warp as wp

            def jacobian_rows(tape, x, y, seeds):
                rows = []
                for seed in seeds:
                    tape.backward(grads={y: seed})
                    rows.append(x.grad.numpy().copy())
                    x.grad.zero_()
                return rows
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            def optimise(forward, optimizer, x, loss, steps):
                tape = wp.Tape()
                for _ in range(steps):
                    with tape:
                        forward()
                    tape.backward(loss)
                    optimizer.step([x.grad])
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
            """),
        Example("""
            import warp as wp

            def twice(forward, x, loss):
                tape = wp.Tape()
                with tape:
                    forward()
                tape.backward(loss)
                first = x.grad.numpy().copy()
                tape.backward(loss)
                return first, x.grad.numpy()
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            # A `backward()` made while a CUDA graph is captured does not run there: it is put in the
            # graph, which runs it where it is launched.
            backwards = [b for b in scope.backwards() if not b.captured]
            if not backwards:
                continue
            for backward in backwards:
                if backward.loops and self._accumulates_in_loop(scope, backward):
                    self._report_loop(context, backward)
                    continue
                previous = self._previous_backward(scope, backwards, backward)
                if previous is not None:
                    where = context.where(previous.location, backward.location)
                    context.report(self, backward, (
                        f"`{backward.receiver}.backward()` runs again after the one on {where} with no"
                        f" `{backward.receiver}.zero()` between: `backward()` adds into the `.grad` buffers, so the"
                        f" gradients are now the sum of both; call `{backward.receiver}.zero()` before it"),
                        related=[("the earlier `backward()`", previous.location)])

    def _accumulates_in_loop(self, scope: HostScope, backward: HostEvent) -> bool:
        span = scope.loop(backward.loops[-1])
        if span.single_pass or any(span.arm_passes.get(arm, 2) <= 1 for arm in backward.branch):
            return False
        events = list(scope.events_between(span.start_order, span.end_order))
        # tape.zero() on this tape (by name: `tape = wp.Tape()` in the loop rebinds it), or a `.grad` reset
        if any(zeroes_gradients(e, e.key if e.kind == "method" and e.receiver == backward.receiver
                                else backward.key) for e in events):
            return False
        # Arrays allocated afresh in the iteration start with zero gradients: fine when every array
        # whose gradient is read (or, with none read, every array the tape's launches read) is one.
        # (key, by when it must be made): a gradient read, by the read; a launch's input, by the backward
        arrays = [(e.key, e.order) for e in events if e.kind == "grad"] or [
            (r.key, backward.order) for e in events if e.launch is not None and e.launch.recorded
            and e.order < backward.order for r in e.launch.reads(convention=True)]
        if arrays and all(scope.created_in(key, span.start_order, by) for key, by in arrays):
            return False
        return True

    def _report_loop(self, context: ProjectContext, backward: HostEvent) -> None:
        tape = backward.receiver
        context.report(self, backward, (
            f"`{tape}.backward()` runs in a loop with no `{tape}.zero()` (nor a `.grad` reset) in the iteration:"
            f" `backward()` adds into the `.grad` buffers, so every iteration's gradient includes all the earlier"
            f" ones; call `{tape}.zero()` once the gradients are used"))

    @staticmethod
    def _previous_backward(scope: HostScope, backwards: list[HostEvent], backward: HostEvent) -> HostEvent | None:
        earlier = [b for b in backwards if b.order < backward.order and b.key == backward.key
                   and not b.exclusive_with(backward)]
        if not earlier:
            return None
        previous = earlier[-1]
        if previous.loops and previous.loops[-1] not in backward.loops and previous.exclusive_with(backward):
            return None
        if any(zeroes_gradients(e, backward.key) for e in scope.events_between(previous.order + 1, backward.order)):
            return None
        return previous

