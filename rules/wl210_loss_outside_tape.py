from __future__ import annotations

from warp_lint.host import ArrayRef, HostEvent, HostScope, backward_seeds
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class LossOutsideTape(Rule):
    """The loss is computed after the `with tape:` block that `backward(loss)` relies on.

    ## What it does
    Flags a launch that writes the array passed to `tape.backward(loss)` (or a key of
    `backward(grads={...})`) when it runs after the tape's last recording region before that
    `backward()` and outside it, and nothing recorded on that tape writes the loss later. A call
    of a helper of the same file (a function, or a `self.` method) whose launches write the loss
    counts the same and is reported on the call (a module-level helper is seen when its own code
    mentions a tape or `backward`, or the file is parsed whole; methods are always seen with their
    class). Launches inside a tape block (`record_tape=False`:
    WL205; another tape: WL202) are not this rule's. Computing the loss inside the block, or a launch after the block that only reads it
    (logging), is fine.

    ## Why is this bad?
    `backward(loss)` seeds `loss.grad` with 1 and replays only the recorded launches. The
    launch that computed the loss from the simulation's outputs is not among them, so the seed
    reaches nothing: every gradient is zero, without a warning.

    ## Fix safety
    No automatic fix: move the loss launch (or the helper call) into the `with tape:` block.

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU), `y = x*x` recorded, `loss = sum 2y` launched after the
    block, `tape.backward(loss)`: `x.grad` is [0, 0, 0] (right: [4, 8, 12]), no warning. Older
    versions not measured; the tape has only ever replayed the launches it recorded.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL210"
    name = "loss-outside-tape"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, y[i])

            def run(simulate, x, y, loss, log, n):
                tape = wp.Tape()
                with tape:
                    simulate(x, y)
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                wp.launch(total, n, inputs=[loss], outputs=[log])
                tape.backward(loss)
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, y[i])

            def run(simulate, x, y, loss, n):
                tape = wp.Tape()
                with tape:
                    simulate(x, y)
                wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, y[i])

            class Optimizer:
                def compute_loss(self):
                    wp.launch(total, self.n, inputs=[self.y], outputs=[self.loss])

                def step(self):
                    with self.tape:
                        self.simulate()
                    self.compute_loss()
                    self.tape.backward(self.loss)
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            if not scope.regions:
                continue
            for backward in scope.backwards():
                self._check(context, scope, backward)

    def _check(self, context: ProjectContext, scope: HostScope, backward: HostEvent) -> None:
        regions = [r for r in scope.regions if r.key == backward.key and r.end_order < backward.order]
        if not regions:
            return
        region = regions[-1]
        seeds = {seed.key for seed in backward_seeds(backward)}
        if not seeds:
            return
        for event in scope.events_between(region.end_order + 1, backward.order - 1):
            if event.exclusive_with(backward) or event.region is not None:
                continue  # recorded on this tape, or on another (WL202's)
            written = _loss_writes(event, seeds)
            if written is None:
                continue
            if any(e.order > event.order and e.region is not None and e.region.key == backward.key and
                   _loss_writes(e, seeds) for e in scope.events_between(event.order, backward.order)):
                continue
            self._report(context, event, written, backward)
            return

    def _report(self, context: ProjectContext, event: HostEvent, loss: ArrayRef, backward: HostEvent) -> None:
        tape = backward.receiver
        context.report(self, event, (
            f"kernel `{event.launch.kernel_code}` writes the loss `{loss.code}` after the `with {tape}:` block, and"
            f" `{tape}.backward()` ({context.where(backward.location, event.location)}) starts from it: the tape never"
            f" recorded this launch, so the seed reaches nothing and every gradient is zero; move it into the"
            f" `with {tape}:` block"), data={"array": loss.code},
            related=[(f"`{tape}.backward()` starts from the loss here", backward.location)])


def _loss_writes(event: HostEvent, seeds: set[str]) -> ArrayRef | None:
    if event.launch is None:
        return None
    return next((r for r in event.launch.writes(convention=True) if r.key in seeds), None)
