from __future__ import annotations

from warp_lint.host import HostEvent, HostScope
from warp_lint.project.summary import NOT_LITERAL, Value
from warp_lint.project_context import ProjectContext
from warp_lint.rule import Example, Rule

# `wp.copy(dest, src, dest_offset=0, src_offset=0, count=0, stream=None)`
DEST_OFFSET = (2, "dest_offset")
SRC_OFFSET = (3, "src_offset")
COUNT = (4, "count")


class CopyOffsetAdjoint(Rule):
    """`wp.copy(..., dest_offset=..., src_offset=...)` with two different offsets recorded on a tape.

    ## What it does
    Inside a tape recording region, flags `wp.copy(dest, src, dest_offset=d, src_offset=s, count=n)`
    when the two offsets may differ (one given and not the literal 0, or the two written
    differently) and both arrays can carry a gradient. A copy without offsets (`count` alone is
    fine), with the same offset on both sides, outside a tape, or from or into an array allocated
    without `requires_grad` (Warp records no adjoint for it) is not reported.

    ## Why is this bad?
    Before 1.15 the adjoint Warp records for the copy passes the offsets on unswapped: it copies
    `dest.grad[s : s + n]` into `src.grad[d : d + n]` instead of `dest.grad[d : d + n]` into
    `src.grad[s : s + n]`. The gradient lands on the wrong elements of `src`, without a warning
    (or `backward()` raises "Trying to copy source buffer ..." when the swapped range runs past the
    end of one of the gradient arrays).

    ## Fix safety
    No automatic fix: upgrade to Warp 1.15 or later, or copy between slices without offsets
    (`wp.copy(dst[d:d + n], src[s:s + n])`), or copy with a kernel of your own
    (`dst[d + i] = src[s + i]`). Both were measured right on 1.14.0.

    ## Warp versions
    Before 1.15. Measured on the CPU (`y = x*x` recorded, then the copy, loss = Σ (i+1)·dst[i], tape
    against central differences) on 1.9.1, 1.12.1, 1.13.0, 1.14.0, 1.15.0 and 1.19.0. With
    `dest_offset=1, src_offset=2, count=3`, 1.14.0 gives AD [0, 4.62, 4.33, 5.17, 0, 0] against FD
    [0, 0, 2.16, 3.10, 10.51, 0]; `src_offset=2` alone and `dest_offset=2` alone are wrong the same
    way (1.9.1, 1.12.1, 1.13.0, 1.14.0); equal offsets (`dest_offset=2, src_offset=2`) and `count=3` alone are right
    on every release measured. From 1.15.0 every case is right. A `src_offset=3` copy into a
    smaller destination raises in `backward()` before 1.15. The slice copy and the kernel copy are
    right on every release measured. Warp's source has the same unswapped adjoint from 1.9.1 to
    1.14.0; older releases were not measured.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL215"
    name = "copy-offset-adjoint"
    affected_versions = "<1.15"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            def run(forward, x, src, dst, loss):
                tape = wp.Tape()
                with tape:
                    forward(x, src)
                    wp.copy(dst[1:4], src[2:5])
                    loss_of(dst, loss)
                tape.backward(loss)
            """, target="==1.14.0"),
        Example("""
            import warp as wp

            @wp.kernel
            def gather(src: wp.array(dtype=float), dst: wp.array(dtype=float), dest_offset: int, src_offset: int):
                i = wp.tid()
                dst[dest_offset + i] = src[src_offset + i]

            def run(forward, x, src, dst, loss):
                tape = wp.Tape()
                with tape:
                    forward(x, src)
                    wp.launch(gather, dim=3, inputs=[src, dst, 1, 2])
                    loss_of(dst, loss)
                tape.backward(loss)
            """, target="==1.14.0"),
        Example("""
            import warp as wp

            def run(forward, x, src, dst, loss, k, n):
                tape = wp.Tape()
                with tape:
                    forward(x, src)
                    wp.copy(dst, src, dest_offset=k, src_offset=k, count=n)
                    wp.copy(dst, src, count=n)
                    loss_of(dst, loss)
                tape.backward(loss)
            """, target="==1.14.0"),
        Example("""
            import warp as wp

            def run(forward, x, src, loss, n):
                dst = wp.zeros(n, dtype=float)
                tape = wp.Tape()
                with tape:
                    forward(x, src)
                    wp.copy(dst, src, dest_offset=1, src_offset=2, count=3)
                tape.backward(loss)
                wp.copy(src, dst, dest_offset=1, src_offset=2, count=3)
            """, target="==1.14.0"),
        Example("""
            import warp as wp

            def run(forward, x, src, dst, loss):
                tape = wp.Tape()
                with tape:
                    forward(x, src)
                    wp.copy(dst, src, dest_offset=1, src_offset=2, count=3)
                    loss_of(dst, loss)
                tape.backward(loss)
            """, target=">=1.15"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            def run(forward, x, src, dst, loss):
                tape = wp.Tape()
                with tape:
                    forward(x, src)
                    wp.copy(dst, src, dest_offset=1, src_offset=2, count=3)
                    loss_of(dst, loss)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            def gather(dst, src, start, n):
                wp.copy(dst, src, 0, start, n)

            def run(forward, x, src, loss, n):
                dst = wp.zeros(n, dtype=float, requires_grad=True)
                with wp.Tape() as tape:
                    forward(x, src)
                    gather(dst, src, 2, n)
                    loss_of(dst, loss)
                tape.backward(loss)
            """, target="==1.14.0"),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for event in scope.events:
                if event.kind != "call" or event.name != "warp.copy" or event.region is None:
                    continue
                if event.call is None or any(arg.value.star for arg in event.call.args):
                    continue  # `*args` / `**kwargs`: which offset is which is unknown
                dest_offset, src_offset = event.argument(*DEST_OFFSET), event.argument(*SRC_OFFSET)
                if _same_offset(dest_offset, src_offset) or _gradient_free(scope, event):
                    continue
                self._report(context, event, dest_offset, src_offset)

    def _report(self, context: ProjectContext, event: HostEvent, dest_offset: Value | None,
                src_offset: Value | None) -> None:
        dest = event.writes[0].code if event.writes else "dest"
        src = event.reads[0].code if event.reads else "src"
        d = dest_offset.code if dest_offset is not None else "0"
        s = src_offset.code if src_offset is not None else "0"
        count = event.argument(*COUNT)
        count = None if count is not None and count.literal == 0 else count  # 0 copies the whole source
        n = count.code if count is not None else f"{src}.size"
        dest_range, src_range = (_range(o, n, count) for o in (dest_offset, src_offset))
        written = f", count={count.code}" if count is not None else ""
        context.report(self, event, (
            f"`wp.copy({dest}, {src}, dest_offset={d}, src_offset={s}{written})` is recorded on the tape: before"
            f" Warp 1.15 its adjoint does not swap the offsets (it copies `{dest}.grad[{s}:]` into"
            f" `{src}.grad[{d}:]`), so `backward()` either puts the gradient of `{src}` on the wrong elements,"
            f" without an error, or raises where the swapped range runs past an array's end (which one depends"
            f" on the arrays' sizes); upgrade to 1.15+, or copy between slices without offsets"
            f" (`wp.copy({dest}[{dest_range}], {src}[{src_range}])`) or with a kernel of your own"),
            data={"dest_offset": d, "src_offset": s})


def _literal(value: Value | None) -> object:
    """An offset's value when it is a literal (an absent one is 0), else NOT_LITERAL."""
    return 0 if value is None else value.literal


def _range(offset: Value | None, n: str, count: Value | None) -> str:
    """The slice a copy's offset and count select, for the message: `1:4`, `k:k + n`."""
    start, size = _literal(offset), _literal(count)
    if type(start) is int and count is not None and type(size) is int:
        return f"{start}:{start + size}"
    code = offset.code if offset is not None else "0"
    return f"{code}:{code} + {n}" if code != "0" else f":{n}"


def _same_offset(dest_offset: Value | None, src_offset: Value | None) -> bool:
    """Whether the two offsets are certainly equal: the same literal, or the same expression."""
    dest, src = _literal(dest_offset), _literal(src_offset)
    if dest is not NOT_LITERAL and src is not NOT_LITERAL:
        return dest == src
    return dest_offset is not None and src_offset is not None and dest_offset.code == src_offset.code


def _gradient_free(scope: HostScope, event: HostEvent) -> bool:
    """Whether the source or the destination was allocated without `requires_grad`: Warp records
    the copy's adjoint only when both arrays have a gradient."""
    return any(ref.key and scope.without_gradient(ref.key) for ref in (*event.reads, *event.writes))
