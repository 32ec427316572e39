from __future__ import annotations

from warp_lint.host import ArrayRef, HostEvent, HostScope, TapeRegion
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext
from warp_lint.replay_plan import host_confirmation_data


class MutationBeforeBackward(Rule):
    """Between a tape block and its `backward()`, a statement overwrites an array the block read.

    ## What it does
    Between the end of a tape recording region and the next `backward()` on that tape (with no
    `reset()` between), flags a statement that writes an array the region read: an unrecorded
    launch (by its kernel's facts, or `outputs=` when the project does not define the kernel),
    `arr.zero_()`, `arr.fill_()`, `arr.assign(...)`, `wp.copy(dest, ...)`, in the function itself
    or in anything it calls (the write is reported where it is written, with the call as a related
    location). "Read" means read by a recorded launch (the kernel's facts, or `inputs=` for a
    kernel the project does not define). Writes to `.grad` buffers, writes to arrays the region
    only wrote, and writes after `backward()` are fine. Writes while the tape records are WL201's.

    ## Why is this bad?
    `backward()` replays each recorded kernel's adjoint from the arrays as they are when it runs,
    not as they were when the kernel was recorded. A statement that overwrites an input between
    the block and `backward()` makes every adjoint that reads it use the new values: the
    gradients are wrong, without an error. Warp's overwrite tracking does not see host-side
    writes (`zero_`, `fill_`, `assign` reset or skip the read mark). A kernel that uses what it
    read only linearly (`z[i] = 3.0 * y[i]`) never reads it again backward, so overwriting it is
    not reported (as for WL201), nor one that reads it only as a factor whose other factors come
    from arrays allocated without `requires_grad`.

    ## Fix safety
    No automatic fix: call `backward()` before the write, or write into another array.

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU), `y = x*x; loss = sum 2y` recorded, then
    `x.assign([5, 5, 5])` before `tape.backward(loss)`: `x.grad` is [20, 20, 20] (right:
    [4, 8, 12]), no warning. Older versions not measured.

    ## Confirmation
    replay: `check --confirm` replays the tape block's launches and then the write, with
    synthesized arrays, and compares the tape's gradient with finite differences of the whole
    sequence, and with the write moved to a fresh buffer (see WL201). Where the sequence cannot
    be replayed the verdict says why and points to `warp-lint trace -- COMMAND`.
    """

    code = "WL211"
    name = "mutation-before-backward"
    runtime_strategy = ("replay",)
    level = "project"

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
        # `backup` copies what it read: its adjoint never needs `q` again.
        Example("""
            import warp as wp

            @wp.kernel
            def backup(q: wp.array(dtype=float), saved: wp.array(dtype=float)):
                i = wp.tid()
                saved[i] = q[i]

            @wp.kernel
            def total_square(q: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, q[i] * q[i])

            def run(q, saved, loss, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(backup, n, inputs=[q], outputs=[saved])
                    wp.launch(total_square, n, inputs=[saved], outputs=[loss])
                q.zero_()
                tape.backward(loss)
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
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, source, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                wp.copy(dest=x, src=source)
                tape.backward(loss)
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            reported: set = set()
            for region in scope.regions:
                if region.key and region.parent is None:
                    self._check(context, scope, region, reported)

    def _check(self, context: ProjectContext, scope: HostScope, region: TapeRegion, reported: set) -> None:
        backward = None
        for event in scope.events:
            if event.order > region.end_order and event.kind == "method" and event.key == region.key and \
                    event.name in ("backward", "reset"):
                backward = event if event.name == "backward" else None
                break
        if backward is None:
            return
        read: dict[str, list[HostEvent]] = {}  # key -> the region's readers, in order
        for event in scope.events_in(region):
            if event.launch is not None and event.launch.recorded:
                for ref in event.launch.reads(convention=True):
                    if event.launch.needs_value(ref, scope.without_gradient):
                        read.setdefault(ref.key, []).append(event)
        for event in scope.events_between(region.end_order + 1, backward.order - 1):
            if event.region is not None or event.location in reported:
                continue
            for ref in _writes(event):
                if ref.key not in read or ref.key.endswith(".grad") or ".grad." in ref.key:
                    continue
                # a reader in another arm of an `if` than the write does not run with it
                reader = next((r for r in read[ref.key] if not r.exclusive_with(event)), None)
                if reader is None or event.exclusive_with(backward):
                    continue
                reported.add(event.location)
                self._report(context, event, ref, reader, backward,
                             host_confirmation_data(context, scope, region, event, ref.key, end=event.order))
                break

    def _report(self, context: ProjectContext, event: HostEvent, ref: ArrayRef, reader: HostEvent,
                backward: HostEvent, confirmation: dict) -> None:
        if event.launch is not None:
            what = f"kernel `{event.launch.kernel_code}`"
        elif event.kind == "method":
            what = f"`{event.receiver}.{event.name}()`"
        else:
            what = f"`{event.name.replace('warp.', 'wp.')}()`"
        tape = backward.receiver
        context.report(self, event, (
            f"{what} overwrites `{ref.code}` after the `with {tape}:` block, where kernel"
            f" `{reader.launch.kernel_code}` read it ({context.where(reader.location, event.location)}), and before"
            f" `{tape}.backward()` ({context.where(backward.location, event.location)}): the backward pass replays"
            f" that read with the new values, so the gradients are wrong, without an error; call `backward()` first"
            f" or write into another array"), data={"array": ref.code, "host": True, **confirmation},
            related=[(f"`{reader.launch.kernel_code}` reads `{ref.code}` here", reader.location),
                     (f"`{tape}.backward()` replays it here", backward.location)])


def _writes(event: HostEvent) -> list[ArrayRef]:
    refs = list(event.writes)
    if event.launch is not None:
        refs += [r for r in event.launch.writes(convention=True) if r not in refs]
    return refs
