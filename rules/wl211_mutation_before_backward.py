from __future__ import annotations

from warp_lint.context import FileContext
from warp_lint.host import ArrayRef, HostEvent, HostScope, TapeRegion
from warp_lint.rule import Example, Rule


class MutationBeforeBackward(Rule):
    """Between a tape block and its `backward()`, a statement overwrites an array the block read.

    ## What it does
    Between the end of a tape recording region and the next `backward()` on that tape (with no
    `reset()` between), flags a statement that writes an array the region read: an unrecorded
    launch (by its kernel's summary, or `outputs=` when the kernel is not in the file), a call of
    a helper of the same file whose launches or methods write it, `arr.zero_()`, `arr.fill_()`,
    `arr.assign(...)`, `wp.copy(dest, ...)`. "Read" means read by a recorded launch (the
    kernel's summary, or `inputs=` for a kernel defined elsewhere) or by a helper called in the
    region. Writes to `.grad` buffers, writes to arrays the region only wrote, and writes after
    `backward()` are fine. A write WL201 already reports (a kernel of this file read the array) is
    left to WL201.

    ## Why is this bad?
    `backward()` replays each recorded kernel's adjoint from the arrays as they are when it runs,
    not as they were when the kernel was recorded. A statement that overwrites an input between
    the block and `backward()` makes every adjoint that reads it use the new values: the
    gradients are wrong, without an error. Warp's overwrite tracking does not see host-side
    writes (`zero_`, `fill_`, `assign` reset or skip the read mark).

    ## Fix safety
    No automatic fix: call `backward()` before the write, or write into another array.

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU), `y = x*x; loss = sum 2y` recorded, then
    `x.assign([5, 5, 5])` before `tape.backward(loss)`: `x.grad` is [20, 20, 20] (right:
    [4, 8, 12]), no warning. Older versions not measured.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL211"
    name = "mutation-before-backward"
    # the writing methods too: a helper that only calls `x.zero_()` must be parsed to be seen
    triggers = frozenset({"Tape", "tape", "backward", "zero_", "fill_", "assign"})

    VALID = [
        Example("""
            import warp as wp
            from sim import integrate, total

            def run(x, v, x_next, loss, x0, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(integrate, n, inputs=[x, v], outputs=[x_next])
                    wp.launch(total, n, inputs=[x_next], outputs=[loss])
                tape.backward(loss)
                x.assign(x0)
                x.grad.zero_()
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp
            from sim import integrate, total

            def run(x, v, x_next, loss, x0, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(integrate, n, inputs=[x, v], outputs=[x_next])
                    wp.launch(total, n, inputs=[x_next], outputs=[loss])
                x.assign(x0)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp
            from sim import integrate, total

            def reset_state(x, v):
                x.zero_()
                v.zero_()

            def run(x, v, x_next, loss, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(integrate, n, inputs=[x, v], outputs=[x_next])
                    wp.launch(total, n, inputs=[x_next], outputs=[loss])
                reset_state(x, v)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp
            from sim import integrate, total

            def run(x, v, x_next, loss, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(integrate, n, inputs=[x, v], outputs=[x_next])
                    wp.launch(total, n, inputs=[x_next], outputs=[loss])
                wp.launch(integrate, n, inputs=[x_next, v], outputs=[x])
                tape.backward(loss)
            """),
    ]

    def check(self, context: FileContext) -> None:
        for scope in context.host_scopes:
            reported: set[int] = set()
            for region in scope.regions:
                if region.key and region.parent is None:
                    self._check(context, scope, region, reported)

    def _check(self, context: FileContext, scope: HostScope, region: TapeRegion, reported: set[int]) -> None:
        backward = None
        for event in scope.events:
            if event.order > region.end_order and event.kind == "method" and event.key == region.key and \
                    event.name in ("backward", "reset"):
                backward = event if event.name == "backward" else None
                break
        if backward is None:
            return
        read: dict[str, tuple[HostEvent, ArrayRef]] = {}  # key -> (reader, ref): the region's reads
        precise: set[str] = set()  # keys a kernel of this file reads (WL201 reports writes to these)
        for event in scope.events_in(region):
            if event.launch is not None and event.launch.recorded:
                for ref in event.launch.reads(convention=True):
                    read.setdefault(ref.key, (event, ref))
                precise |= {r.key for r in event.reads}
            elif event.helper:
                for ref in event.helper_reads:
                    read.setdefault(ref.key, (event, ref))
        for event in scope.events_between(region.end_order + 1, backward.order - 1):
            if event.region is not None or id(event.node) in reported:
                continue
            for ref in _writes(event):
                if ref.key not in read or ref.key.endswith(".grad") or ".grad." in ref.key:
                    continue
                reader, _ = read[ref.key]
                if reader.exclusive_with(event) or event.exclusive_with(backward):
                    continue
                if ref.key in precise and ref.key in {w.key for w in event.writes}:
                    continue  # WL201's
                reported.add(id(event.node))
                self._report(context, event, ref, reader, backward)
                break

    def _report(self, context: FileContext, event: HostEvent, ref: ArrayRef, reader: HostEvent,
                backward: HostEvent) -> None:
        if event.launch is not None:
            what = f"kernel `{event.launch.kernel_code}`"
        elif event.helper:
            what = f"`{event.helper}()`"
        elif event.kind == "method":
            what = f"`{event.receiver}.{event.name}()`"
        else:
            what = f"`{event.name.replace('warp.', 'wp.')}()`"
        by = f"kernel `{reader.launch.kernel_code}`" if reader.launch is not None else f"`{reader.helper}()`"
        tape = backward.receiver
        context.report(self, event.node, (
            f"{what} overwrites `{ref.code}` after the `with {tape}:` block, where {by} read it (line"
            f" {context.position(reader.node)[0].line}), and before `{tape}.backward()` (line"
            f" {context.position(backward.node)[0].line}): the backward pass replays that read with the new values, so"
            f" the gradients are wrong, without an error; call `backward()` first or write into another array"),
            data={"array": ref.code})


def _writes(event: HostEvent) -> list[ArrayRef]:
    refs = list(event.writes) + list(event.helper_writes)
    if event.launch is not None:
        refs += [r for r in event.launch.writes(convention=True) if r not in refs]
    return refs
