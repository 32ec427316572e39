from __future__ import annotations

from warp_lint.host import HostEvent, HostScope, Launch, Location, TapeRegion, backward_seeds
from warp_lint.project.index import WarpDefinition
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class UnrecordedLaunch(Rule):
    """A launch inside a tape block is not differentiated, yet its output reaches the loss.

    ## What it does
    Inside a tape recording region, flags a launch with `record_tape=False`, and a launch of a
    kernel made non-differentiable by `@wp.kernel(enable_backward=False)`,
    `wp.set_module_options({"enable_backward": False})` or `wp.config.enable_backward = False`,
    when what it writes reaches the loss: the loss passed to that tape's `backward()` depends on
    it through the recorded launches (when the scope has no such `backward`, when a later recorded
    launch in the region reads it). Only reads that pass a gradient back count: a kernel that uses
    what it read only in comparisons or indices (a broad phase reading bounding boxes, contact
    matching), or writes no float array, carries no gradient to it, so an integer output (counts,
    pairs, match indices) does not reach the loss. Of a chain of recorded launches without backward
    (a backup and a gather of contact records), the first is reported: a launch whose every
    gradient-carrying input is written earlier on the tape only by launches that pass none back
    themselves (backward disabled, storing counts and flags, or, for a recorded launch, not
    recorded) is cut upstream already.
    `record_tape=False` is reported on the launch; a disabled backward on the decorator,
    `set_module_options` or `wp.config` line that disables it (once per line), naming the launch.

    ## Why is this bad?
    An unrecorded launch is invisible to `backward()`; a kernel without an adjoint contributes
    nothing to it. Either way the chain stops at that launch's outputs: every gradient that
    reaches the loss only through them is zero (other paths keep theirs). Warp only warns for the `enable_backward=False` case, at `backward()` time.

    ## Fix safety
    No automatic fix: drop `record_tape=False` / `enable_backward=False` for kernels on the
    gradient path.

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU), `x -> y = x*x -> z = 2y -> loss`: with the first
    launch `record_tape=False`, `x.grad` is [0, 0, 0] (right: [4, 8, 12]) with no warning; with its
    kernel `enable_backward=False` (decorator, module option or `wp.config`) also [0, 0, 0], with a
    "may produce incorrect gradients" warning from `backward()`.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL205"
    name = "unrecorded-launch"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            @wp.kernel(enable_backward=False)
            def render(x: wp.array(dtype=float), image: wp.array(dtype=float)):
                i = wp.tid()
                image[i] = x[i]

            def run(x, y, loss, image):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    wp.launch(square, 3, inputs=[y], outputs=[loss])
                    wp.launch(render, 3, inputs=[y], outputs=[image])
                    wp.launch(square, 3, inputs=[x], outputs=[image], record_tape=False)
                tape.backward(loss)
            """),
        # The bounds only decide which pairs are close: no gradient flows back into them.
        Example("""
            import warp as wp

            @wp.kernel(enable_backward=False)
            def bounds(x: wp.array(dtype=float), lower: wp.array(dtype=float)):
                i = wp.tid()
                lower[i] = x[i] - 0.1

            @wp.kernel
            def pair_energy(x: wp.array(dtype=float), lower: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                if lower[i] < 1.0:
                    wp.atomic_add(loss, 0, x[i] * x[i])

            def run(x, lower, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(bounds, 3, inputs=[x], outputs=[lower])
                    wp.launch(pair_energy, 3, inputs=[x, lower], outputs=[loss])
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

            def run(x, y, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y], record_tape=False)
                    wp.launch(square, 3, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel(enable_backward=False)
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    wp.launch(square, 3, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            wp.set_module_options({"enable_backward": False})

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z):
                with wp.Tape():
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    wp.launch(square, 3, inputs=[y], outputs=[z])
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        reported: set[int] = set()
        for scope in context.host_scopes:
            for region in scope.regions:
                candidates = [e for e in scope.events_in(region) if e.launch is not None and (
                    e.launch.record_tape is False or _backward_disabled(context, e.launch))]
                if not candidates:
                    continue
                for event in candidates:
                    if event.location in reported:
                        continue
                    if self._reaches_loss(scope, region, event) and not self._cut_upstream(scope, region, event):
                        self._report(context, event, reported)

    @staticmethod
    def _reaches_loss(scope: HostScope, region: TapeRegion, launch_event: HostEvent) -> bool:
        written = {w.key for w in launch_event.launch.writes(convention=True)}
        if not written:
            return False
        backward = next((e for e in scope.events if e.order > launch_event.order and e.kind == "method"
                         and e.name == "backward" and region.key and e.key == region.key), None)
        later = [e for e in scope.events if e.launch is not None and e.launch.recorded and e.order > launch_event.order
                 and region.same_tape(e.region) and (backward is None or e.order < backward.order)]
        def differentiable_reads(event: HostEvent) -> set[str]:
            return {r.key for r in event.launch.reads(convention=True) if event.launch.passes_gradient(r)}

        if backward is None or not backward_seeds(backward):
            return any(written & differentiable_reads(e) for e in later)
        needed = {seed.key for seed in backward_seeds(backward)}
        for event in reversed(later):  # walk back from the loss: what does it depend on?
            if needed & {w.key for w in event.launch.writes(convention=True)}:
                needed |= differentiable_reads(event)
        return bool(written & needed)

    @staticmethod
    def _cut_upstream(scope: HostScope, region: TapeRegion, launch_event: HostEvent) -> bool:
        """Whether the launch has nothing to pass back: every array through which its adjoint would
        pass a gradient is written earlier on this tape only by recorded launches that pass none
        back either (their backward disabled, or storing values that carry no gradient). The chain
        is then cut upstream, at a launch whose output reaches the loss through this one, and that
        is the one reported (a gather of contact records that a backward-disabled backup copied).
        A `record_tape=False` writer cuts the chain too when this launch is recorded: the chain
        starts there, and that writer is reported itself where its output reaches the loss through
        this launch; a stage left unrecorded on purpose (a narrow phase whose records are constants
        to the gradient) loses nothing more at the backup after it. Under an unrecorded launch it
        does not: its output reaches the loss only through this one, which is reported."""
        launch = launch_event.launch
        reads = [r for r in launch.reads(convention=True) if launch.passes_gradient(r)]
        if not reads:
            return True
        on_tape = [e for e in scope.events if e.launch is not None and e.order < launch_event.order
                   and region.same_tape(e.region)]
        for ref in reads:
            writers = [(e, w) for e in on_tape for w in e.launch.writes(convention=True) if w.key == ref.key]
            if not writers or any(e.launch.differentiable and e.launch.writes_gradient(w) if e.launch.recorded
                                  else not launch.recorded for e, w in writers):
                return False
            if any(ref.key in {w.key for w in e.writes} for e in scope.events
                   if e.launch is None and region.start_order <= e.order < launch_event.order):
                return False  # copied or filled on the tape: the writer is not only a launch
        return True

    def _report(self, context: ProjectContext, event: HostEvent, reported: set) -> None:
        launch = event.launch
        if launch.record_tape is False:
            reported.add(event.location)
            context.report(self, event, (
                f"kernel `{launch.kernel_code}` is launched with `record_tape=False` inside the tape block, but its"
                f" output reaches the loss: `backward()` never sees this launch, so its inputs get no gradient through it"
                f" (nor does what they are computed from, along this path); drop `record_tape=False`"))
            return
        definition = _backward_disabled(context, launch)
        named = definition.options.get("module") if isinstance(definition.options.get("module"), str) else None
        where = {"decorator": "this decorator", "config": "`wp.config.enable_backward = False`"}.get(
            definition.disabled_by, f"this option of module `{named}`" if named else "this `set_module_options`")
        at = Location.of(definition.symbol.path, definition.disabled_at)
        if at in reported:
            return
        reported.add(at)
        region = event.region
        tape = f"`{region.tape}`" if region is not None and region.tape else "a tape"
        # The launch may sit in a helper that a caller runs inside `with tape:`: name both places.
        recording = f" (`with` at {context.where(region.location, at)})" if region is not None else ""
        context.report(self, at, (
            f"kernel `{definition.summary.name}` has no backward ({where} disables it), but its launch at"
            f" {context.where(event.location, at)} runs while {tape} records{recording} and its output reaches the"
            f" loss: `backward()` skips it, so its inputs get no gradient through it (nor does what they are computed"
            f" from, along this path); enable backward for kernels on the gradient path"),
            related=[("launched here", event.location)]
            + ([(f"{tape} records from here", region.location)] if region is not None else []))


def _backward_disabled(context: ProjectContext, launch: Launch) -> WarpDefinition | None:
    """The launched kernel's definition when its backward is switched off."""
    definition = context.definition(launch)
    return definition if definition is not None and definition.disabled_at is not None else None
