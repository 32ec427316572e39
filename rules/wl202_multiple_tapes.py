from __future__ import annotations

from warp_lint.host import HostEvent, HostScope
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class MultipleTapes(Rule):
    """The gradient must cross from one tape to another, or tape recording regions are nested.

    ## What it does
    Flags a `tape2.backward()` when a launch recorded on `tape2` reads an array that a launch
    recorded on another tape `tape1` wrote, while `tape1` was still pending (no `backward()` or
    `reset()` since it recorded that launch), and `tape1.backward()` is not called after
    `tape2.backward()`. Also flags a tape recording region opened inside another one
    (`with tape2:` inside `with tape1:`), reported on the inner `with`. Several tapes that never
    share arrays, or that run one after the other (`tape1.backward()` before `tape2` records), are
    fine.

    ## Why is this bad?
    A tape only replays the launches it recorded. `tape2.backward()` stops at the array `tape1`
    wrote: that array's `.grad` is filled, but nothing flows on to `tape1`'s inputs, whose
    gradients stay zero without an error, unless `tape1.backward()` is called afterwards to carry
    them on. A nested `with wp.Tape():` raises `RuntimeError: Warp: Error, entering a tape while
    one is already active` in every 1.x release: only one tape records at a time.

    ## Fix safety
    No automatic fix: record the whole computation on one tape, or call `tape1.backward()` after
    `tape2.backward()` (without a loss: it carries the gradients already in the arrays' `.grad`).

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU): `y = x*x` recorded on `tape1`, `loss = sum 2y` on
    `tape2`; after `tape2.backward(loss)`, `y.grad` is [2, 2, 2] and `x.grad` is [0, 0, 0]; a
    following `tape1.backward()` gives the right [4, 8, 12]. The nested `with` raises the
    RuntimeError above.

    ## Confirmation
    None at run time: the nested case raises on its own, the cross-tape case is read from the host
    code.
    """

    code = "WL202"
    name = "multiple-tapes"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, loss, a, b, loss2):
                tape1 = wp.Tape()
                with tape1:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    wp.launch(square, 3, inputs=[y], outputs=[loss])
                tape2 = wp.Tape()
                with tape2:
                    wp.launch(square, 3, inputs=[a], outputs=[b])
                    wp.launch(square, 3, inputs=[b], outputs=[loss2])
                tape1.backward(loss)
                tape2.backward(loss2)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, loss):
                tape1 = wp.Tape()
                with tape1:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                tape2 = wp.Tape()
                with tape2:
                    wp.launch(square, 3, inputs=[y], outputs=[loss])
                tape2.backward(loss)
                tape1.backward()
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
                tape1 = wp.Tape()
                with tape1:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                tape2 = wp.Tape()
                with tape2:
                    wp.launch(square, 3, inputs=[y], outputs=[loss])
                tape2.backward(loss)
            """),
        Example("""
            import warp as wp

            def run(simulate, loss):
                tape = wp.Tape()
                with tape:
                    simulate()
                    with wp.Tape() as inner:
                        simulate()
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for region in scope.regions:
                if region.parent is not None:
                    outer = f"`{region.parent.tape}`" if region.parent.tape else "another tape"
                    context.report(self, region, (
                        f"this tape recording region is opened while {outer} is recording"
                        f" ({context.where(region.parent.location, region.location)}): Warp raises `RuntimeError:"
                        f" entering a tape while one is already active`; record on one tape, or close the first"
                        f" region first"), related=[(f"{outer} starts recording here", region.parent.location)])
            if len({r.key for r in scope.regions if r.key}) > 1:
                self._check_crossing(context, scope)

    def _check_crossing(self, context: ProjectContext, scope: HostScope) -> None:
        events = scope.events
        for backward in scope.backwards():
            tape2 = backward.key
            crossing = self._crossing(scope, backward, tape2)
            if crossing is None:
                continue
            writer, reader, array = crossing
            tape1 = writer.region.key
            if any(e.order > backward.order and e.kind == "method" and e.name == "backward" and e.key == tape1
                   for e in events):
                continue  # tape1.backward() carries the gradient on
            name1, name2 = writer.region.tape, backward.receiver
            context.report(self, backward, (
                f"`{name2}.backward()` does not reach the launches recorded on `{name1}`: `{array}` is written by"
                f" kernel `{writer.launch.kernel_code}` ({context.where(writer.location, backward.location)}) on"
                f" `{name1}` and read by kernel `{reader.launch.kernel_code}`"
                f" ({context.where(reader.location, backward.location)}) on `{name2}`, so the gradients of `{name1}`'s"
                f" inputs stay zero; record both on one tape, or call `{name1}.backward()` after this one"),
                data={"array": array}, related=[(f"written on `{name1}` here", writer.location),
                                                (f"read on `{name2}` here", reader.location)])

    @staticmethod
    def _crossing(scope: HostScope, backward: HostEvent, tape2: str):
        writers: dict[str, HostEvent] = {}  # array key -> the latest launch writing it on a pending tape
        for event in scope.events:
            if event.order >= backward.order:
                break
            if event.kind == "method" and event.name in ("backward", "reset"):
                for key, writer in list(writers.items()):
                    if writer.region.key == event.key:
                        del writers[key]
                continue
            launch = event.launch
            if launch is None or not launch.recorded or not event.region.key:
                continue
            if event.region.key == tape2:
                for read in launch.reads(convention=True):
                    writer = writers.get(read.key)
                    if writer is not None and writer.region.key != tape2:
                        return writer, event, read.code
            for write in launch.writes(convention=True):
                writers[write.key] = event
        return None
