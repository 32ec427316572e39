from __future__ import annotations

from warp_lint.host import HostEvent, HostScope, LoopSpan, mentions, zeroes_gradients
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class PerStepTapeTruncation(Rule):
    """A tape and `backward()` per time step, state carried on, per-step gradients summed.

    ## What it does
    Flags a `tape.backward(...)` inside a loop when the tape is fresh every pass (created in the
    loop, or `tape.reset()` there), the state the recorded launches read is carried to the next
    pass (written again in the loop, `wp.copy(x, x_next)`, or rebound to an array the loop wrote:
    `x, x_next = x_next, x`), and the per-pass gradients are summed: `total += p.grad.numpy()`
    (or `total = total + ...`) after the `backward()`, or gradients never zeroed in the loop and
    read after it. Reported on the `backward()`. One tape over the whole episode, a per-step tape
    whose gradient is used per step (an optimiser step each pass), and a loop whose passes share
    no state are fine.

    ## Why is this bad?
    Each pass's tape starts at the state the previous pass produced and knows nothing of how that
    state depends on the parameters. Every window's gradient is right for its window, but their sum
    misses every path through the carried state (truncated backpropagation through time): it is not
    the gradient of the episode's loss, and nothing warns.

    ## Fix safety
    No automatic fix: record the whole episode on one tape (one buffer per step, `backward()` once
    after the loop), or keep the truncation deliberately and say so (`# noqa: WL208`).

    ## Warp versions
    All versions. Measured on 1.19.0 and 1.16.0 (CPU): `x_{t+1} = p x_t + 1`, loss = sum over 3
    steps of sum x_t^2, p = 0.9: one tape over the episode gives dL/dp = 162.39; a tape and
    `backward()` per step with the state carried and the gradients summed gives 92.99.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL208"
    name = "per-step-tape-truncation"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def step(x: wp.array(dtype=float), p: wp.array(dtype=float), x_next: wp.array(dtype=float)):
                i = wp.tid()
                x_next[i] = x[i] * p[0] + 1.0

            def episode(states, p, loss, steps, n):
                tape = wp.Tape()
                with tape:
                    for t in range(steps):
                        wp.launch(step, n, inputs=[states[t], p], outputs=[states[t + 1]])
                tape.backward(loss)
                return p.grad.numpy()
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def step(x: wp.array(dtype=float), p: wp.array(dtype=float), x_next: wp.array(dtype=float)):
                i = wp.tid()
                x_next[i] = x[i] * p[0] + 1.0

            def train(x, x_next, p, loss, steps, n):
                total = 0.0
                for t in range(steps):
                    tape = wp.Tape()
                    with tape:
                        wp.launch(step, n, inputs=[x, p], outputs=[x_next])
                    tape.backward(loss)
                    total += p.grad.numpy()
                    tape.zero()
                return total
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def step(x: wp.array(dtype=float), p: wp.array(dtype=float), x_next: wp.array(dtype=float)):
                i = wp.tid()
                x_next[i] = x[i] * p[0] + 1.0

            def train(x, x_next, p, loss, steps, n):
                total = 0.0
                for t in range(steps):
                    tape = wp.Tape()
                    with tape:
                        wp.launch(step, n, inputs=[x, p], outputs=[x_next])
                    tape.backward(loss)
                    total += p.grad.numpy()
                    tape.zero()
                    x, x_next = x_next, x
                return total
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def step(x: wp.array(dtype=float), p: wp.array(dtype=float), x_next: wp.array(dtype=float)):
                i = wp.tid()
                x_next[i] = x[i] * p[0] + 1.0

            def train(x, x_next, p, loss, steps, n):
                for t in range(steps):
                    tape = wp.Tape()
                    with tape:
                        wp.launch(step, n, inputs=[x, p], outputs=[x_next])
                    tape.backward(loss)
                    wp.copy(x, x_next)
                return p.grad
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            if not scope.loops:
                continue
            for backward in scope.backwards():
                span = next((scope.loop(loop) for loop in reversed(backward.loops)
                             if not scope.loop(loop).single_pass), None)
                if span is not None:
                    self._check(context, scope, backward, span)

    def _check(self, context: ProjectContext, scope: HostScope, backward: HostEvent, span: LoopSpan) -> None:
        tape = backward.key
        events = list(scope.events_between(span.start_order, span.end_order))
        regions = [r for r in scope.regions if r.key == tape and span.start_order <= r.start_order <= span.end_order]
        if not regions:
            return
        fresh = scope.created_in(tape, span.start_order, span.end_order) or any(
            e.kind == "method" and e.name == "reset" and e.key == tape for e in events)
        if not fresh:
            return  # re-entered without reset: WL207
        launches = [e for r in regions for e in scope.events_in(r) if e.launch is not None and e.launch.recorded]
        state = self._carried(scope, span, events, launches)
        if state is None:
            return
        summed = self._summed(scope, span, events, backward)
        if summed is None:
            return
        context.report(self, backward, (
            f"`{backward.receiver}.backward()` runs once per pass on a fresh tape while the state (`{state}`) is"
            f" carried to the next pass, and the per-pass gradients are summed ({summed}): each window's gradient"
            f" stops at the state it started from, so the sum is not the gradient of the episode's loss; record"
            f" the episode on one tape and call `backward()` once after the loop"))

    @staticmethod
    def _carried(scope: HostScope, span: LoopSpan, events: list[HostEvent], launches: list[HostEvent]) -> str | None:
        """An array a recorded launch reads before the pass writes it and that the loop writes again
        (the value it reads is the previous pass's), or whose name is rebound to one it wrote. An
        array written earlier in the pass than it is read (`x` computed, then summed into the loss)
        carries nothing across passes, and neither does a parameter updated from its own gradient."""
        first_write: dict[str, int] = {}
        written: set[str] = set()
        descended: set[str] = set()
        for event in events:
            refs = list(event.writes)
            if event.launch is not None:
                refs += event.launch.writes(convention=True)
            written |= {r.key for r in refs}
            descended |= _descended(event, refs)
            for ref in refs:
                first_write.setdefault(ref.key, event.order)
        reads = {}
        for event in launches:
            for ref in event.launch.reads(convention=True):
                if not scope.per_iteration(ref, span) and event.order <= first_write.get(ref.key, event.order):
                    reads.setdefault(ref.key, ref.code)
        for key, code in reads.items():
            if key in written and key not in descended:
                return code
        codes = set(reads.values())
        for event in events:
            if event.kind == "assign" and event.name in codes and event.key in written - descended:
                return event.name
        return None

    @staticmethod
    def _summed(scope: HostScope, span: LoopSpan, events: list[HostEvent], backward: HostEvent) -> str | None:
        for event in events:
            if event.kind != "grad" or event.order < backward.order:
                continue
            assign = next((e for e in events if e.kind == "assign" and e.statement == event.statement
                           and e.value is not None), None)
            if assign is None:
                continue
            if assign.augmented == "+=":
                return f"`{assign.name} += {assign.value.code}`"
            if not assign.augmented and "." not in assign.name and mentions(assign.value.code, {assign.name}):
                return f"`{assign.name} = {assign.value.code}`"
        if any(zeroes_gradients(e, e.key if e.kind == "method" else backward.key) for e in events):
            return None
        after = next((e for e in scope.events if e.kind == "grad" and e.order > span.end_order), None)
        if after is not None:
            return f"the `.grad` buffers add up over the passes and `{after.receiver}.grad` is read after the loop"
        return None


def _descended(event: HostEvent, written: list) -> set[str]:
    """The arrays this event writes from their own gradient (`descend(p, p.grad)`,
    `p.assign(p - rate * p.grad)`): a parameter that the training loop updates, not state that a
    simulation carries from one pass to the next. A per-pass tape is how such a loop is written."""
    if event.launch is not None:
        arguments = {ref.code for ref in event.launch.refs} | set(event.launch.inputs) | set(event.launch.outputs)
        return {ref.key for ref in written if f"{ref.code}.grad" in arguments}
    value = event.value.code if event.value is not None else ""
    return {ref.key for ref in written if f"{ref.code}.grad" in value}
