from __future__ import annotations

from warp_lint.host import HostEvent, HostScope, TapeRegion
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

HOST_TO_DEVICE = {"warp.array", "warp.from_numpy"}


class HostRoundtripInTape(Rule):
    """Data leaves the tape's graph for the host and comes back into a later recorded launch.

    ## What it does
    Inside a tape recording region, flags the statement that brings host data back into the
    graph when that data came from an array the tape computed (written by an earlier recorded
    launch) or that requires gradients: `wp.array(y.numpy())`, `wp.from_numpy(...)`,
    `z.assign(y.numpy() * 2)`, and a recorded launch taking a host scalar such as
    `s = float(y.numpy()[0])` as an argument. Names computed from `.numpy()`/`.list()` results
    are followed. A host copy that never feeds a later recorded launch (logging, `dim=`) is
    fine.

    ## Why is this bad?
    The tape records kernel launches, not host code. The new array (or the scalar) has no link to
    the array it was copied from, so `backward()` stops there and every gradient upstream of the
    round trip is silently zero (or misses the path through the scalar).

    ## Fix safety
    No automatic fix: keep the computation on the device (a kernel reading `y` directly, or
    `wp.copy`/`wp.clone`, which are recorded).

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU): `y = x*x` recorded, then
    `y2 = wp.array(y.numpy(), requires_grad=True)` and `loss = sum 2*y2` recorded:
    `x.grad` is [0, 0, 0] (right: [4, 8, 12]), no warning. With `s = float(y.numpy()[0])`
    passed as a scalar to `z = s*x`, the path through `s` is lost: `x.grad` is [1, 1, 1].

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL203"
    name = "host-roundtrip-in-tape"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    print(y.numpy())
                    y2 = wp.clone(y)
                    wp.launch(square, 3, inputs=[y2], outputs=[z])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, counts):
                tape = wp.Tape()
                with tape:
                    n = int(counts.numpy()[0])
                    c = wp.array(counts.numpy())
                    wp.launch(square, n, inputs=[c], outputs=[y])
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    y2 = wp.array(y.numpy(), dtype=float, requires_grad=True)
                    wp.launch(square, 3, inputs=[y2], outputs=[z])
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def scale(x: wp.array(dtype=float), s: float, y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * s

            def run(x, y, z):
                tape = wp.Tape()
                with tape:
                    wp.launch(scale, 3, inputs=[x, 2.0], outputs=[y])
                    s = float(y.numpy()[0])
                    wp.launch(scale, 3, inputs=[x, s], outputs=[z])
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, buffer):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    host = y.numpy() * 2.0
                    buffer.assign(host)
                    wp.launch(square, 3, inputs=[buffer], outputs=[z])
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            if not scope.regions:
                continue
            graded = {e.key for e in scope.events if e.kind == "assign" and e.allocation is not None
                      and e.allocation.requires_grad}
            for region in scope.regions:
                if region.parent is None:
                    self._check_region(context, scope, region, graded)

    def _check_region(self, context: ProjectContext, scope: HostScope, region: TapeRegion, graded: set[str]) -> None:
        computed = set(graded)  # arrays that carry gradient: computed on the tape, or requiring grad
        returned: dict[str, tuple[HostEvent, str]] = {}  # key -> (statement bringing host data back, origin)
        reported: set[int] = set()
        for event in scope.events_in(region):
            origin = next((key for key in event.pulls if key in computed), None)
            if origin is not None:
                if event.kind == "assign" and event.allocation and event.allocation.function in HOST_TO_DEVICE:
                    returned[event.key] = (event, origin)
                elif event.kind == "method" and event.name == "assign":
                    returned[event.key] = (event, origin)
            launch = event.launch
            if launch is None or not launch.recorded:
                continue
            for ref in launch.refs[: launch.input_count] if launch.kernel is None else launch.refs:
                if ref.key in returned and ref not in launch.writes():
                    source, origin_key = returned[ref.key]
                    self._report(context, source, ref.code, _code(origin_key), launch.kernel_code, reported)
            scalar_origin = next((key for key in event.pulls if key in computed), None)
            if scalar_origin is not None:
                self._report(context, event, None, _code(scalar_origin), launch.kernel_code, reported)
            computed.update(w.key for w in launch.writes(convention=True))

    def _report(self, context, source: HostEvent, array: str | None, origin: str, kernel: str, reported) -> None:
        if source.location in reported:
            return
        reported.add(source.location)
        if array is None:
            message = (f"kernel `{kernel}` is launched on the tape with a host value computed from `{origin}`"
                       f" (`.numpy()`/`.list()`): the tape cannot follow it, so no gradient flows back to `{origin}`"
                       f" through it; compute it in a kernel and pass the array instead")
        else:
            message = (f"`{array}` is filled from a host copy of `{origin}` and then read by kernel `{kernel}` on the"
                       f" tape: the tape cannot see through `.numpy()`, so every gradient upstream of `{origin}` is"
                       f" silently zero; keep the data on the device (`wp.clone`, `wp.copy` or a kernel)")
        context.report(self, source, message)


def _code(key: str) -> str:
    """A key's code for messages: the code as written at the key's binding, without the @order marks."""
    import re

    return re.sub(r"@\d+", "", key)
