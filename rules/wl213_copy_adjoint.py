from __future__ import annotations

from warp_lint.host import ArrayRef, HostEvent, HostScope
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

COPIES = {"warp.clone", "warp.copy"}


class CopyAdjoint(Rule):
    """`wp.clone`/`wp.copy`/`.assign` inside a tape whose source a later recorded launch reads.

    ## What it does
    Inside a tape recording region, flags `wp.clone(src)`, `wp.copy(dest, src)` and
    `dest.assign(src)` (with a device array as `src`: one that a later recorded launch reads) when
    a launch recorded later on the same tape reads `src` too, so `src` gets gradient from both the
    copy and that launch. Reported on the copy. A copy whose source nothing recorded reads
    afterwards, and `assign` from host data (`x.numpy()`, a NumPy array) are fine.

    ## Why is this bad?
    Before 1.17 the adjoint of a recorded copy assigned the destination's gradient to the
    source's gradient instead of adding it: whatever the later launches had already accumulated
    into `src.grad` during `backward()` was overwritten, so the gradient through the other path is
    lost, without a warning.

    ## Fix safety
    No automatic fix: upgrade to Warp 1.17 or later, or copy with a kernel of your own
    (`dst[i] = src[i]`), whose adjoint accumulates.

    ## Warp versions
    Before 1.17. Measured on 1.16.0 and 1.19.0 (CPU), `y = x*x` recorded, then `c = wp.clone(y)`
    (or `wp.copy(c, y)`, `c.assign(y)`), `loss = sum c + sum y` with both sums recorded: on 1.16.0
    `x.grad` is [2, 4, 6], on 1.19.0 [4, 8, 12] (right). Releases before 1.16 not measured.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL213"
    name = "copy-adjoint"
    affected_versions = "<1.17"
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
                    c = wp.clone(y)
                    wp.launch(total, n, inputs=[c], outputs=[loss])
                tape.backward(loss)
            """),
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
                    c = wp.clone(y)
                    wp.launch(total, n, inputs=[c], outputs=[loss])
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """, target=">=1.17"),
    ]
    INVALID = [
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
                    c = wp.clone(y)
                    wp.launch(total, n, inputs=[c], outputs=[loss])
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, y[i])

            def run(forward, x, y, c, loss, n):
                tape = wp.Tape()
                with tape:
                    forward(x, y)
                    wp.copy(c, y)
                    wp.launch(total, n, inputs=[c], outputs=[loss])
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """, target="==1.16.0"),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for region in scope.regions:
                for event in scope.events_in(region):
                    if event.region is not region:
                        continue
                    source = _source(event)
                    if source is None:
                        continue
                    reader = self._later_reader(scope, event, source)
                    if reader is not None:
                        self._report(context, event, source, reader)

    @staticmethod
    def _later_reader(scope: HostScope, copy: HostEvent, source: ArrayRef) -> HostEvent | None:
        region = copy.region
        for event in scope.events:
            if event.order <= copy.order:
                continue
            if event.kind == "method" and event.name in ("backward", "reset") and region.key and event.key == region.key:
                return None
            launch = event.launch
            if launch is None or not launch.recorded or event.exclusive_with(copy):
                continue
            if not region.same_tape(event.region):
                continue
            if any(r.key == source.key for r in launch.reads(convention=True)):
                return event
        return None

    def _report(self, context: ProjectContext, event: HostEvent, source: ArrayRef, reader: HostEvent) -> None:
        what = f"`{event.receiver}.assign()`" if event.kind == "method" else f"`{event.name.replace('warp.', 'wp.')}()`"
        context.report(self, event, (
            f"{what} copies `{source.code}` on the tape, and kernel `{reader.launch.kernel_code}`"
            f" ({context.where(reader.location, event.location)}) reads `{source.code}` too: before Warp 1.17 the copy's"
            f" adjoint overwrites `{source.code}.grad` instead of adding to it, so the gradient through that kernel is"
            f" lost; upgrade to 1.17+ or copy with a kernel of your own"), data={"array": source.code},
            related=[(f"`{reader.launch.kernel_code}` reads `{source.code}` here", reader.location)])


def _source(event: HostEvent) -> ArrayRef | None:
    if event.kind == "call" and event.name in COPIES:
        return event.reads[0] if event.reads else None
    if event.kind == "method" and event.name == "assign" and not event.pulls and len(event.arguments) == 1:
        argument = event.arguments[0]
        value = event.argument(0, "src")
        if value is not None and argument.code == value.code:
            return argument
    return None
