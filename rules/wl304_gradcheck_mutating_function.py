from __future__ import annotations

from warp_lint.host import HostEvent
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

CHECKS = {"warp.autograd.gradcheck", "warp.autograd.jacobian", "warp.autograd.jacobian_fd"}


class GradcheckMutatingFunction(Rule):
    """`gradcheck`/`jacobian` of a Python function that overwrites an input it reads.

    ## What it does
    Flags `warp.autograd.gradcheck`, `jacobian` or `jacobian_fd` called on a Python function of the
    same file (the function form, not a kernel) that both reads and overwrites one of its array
    parameters: a launch writing it, `zero_()`, `fill_()`, `assign()`, `wp.copy(dest=...)`, also
    through helpers of the same file. Reported on the check. The function is seen when it is
    defined in the function making the check, or when its own code mentions a writing method
    (`zero_`, `fill_`, `assign`) or a tape (the cheap pass parses nothing else). Checks of kernels, of functions that
    only write into arrays they do not read (output buffers), and, on Warp 1.17 and later, calls
    that keep the default `restore_inputs=True` are fine; `restore_inputs=False` is reported on
    every version.

    ## Why is this bad?
    The check evaluates the function many times: once under a tape for the autodiff Jacobian, then
    twice per input entry for finite differences. Without restoring the inputs between the
    evaluations, each one starts from what the previous one left: the finite differences are
    taken at other points than the autodiff Jacobian, and a correct gradient fails the check (or a
    wrong one passes). Warp 1.17 added `restore_inputs` (default `True`), which snapshots and
    restores top-level array inputs (not arrays inside structs).

    ## Fix safety
    No automatic fix: make the function leave its inputs untouched (write into fresh arrays), or
    upgrade to 1.17+ and keep `restore_inputs=True`.

    ## Warp versions
    1.6 up to 1.16 by default (the Python-function form exists from 1.6 per the changelog; not
    measured before 1.16); every version with `restore_inputs=False`. Measured on 1.16.0 and 1.19.0
    (CPU), a function that advances its input in place (`x.assign(x.numpy() + 1)`) and then
    returns `x*x`: `gradcheck` fails on 1.16.0 (the input ends at x+2, having been advanced by
    every evaluation) and passes on 1.19.0; on 1.19.0 with `restore_inputs=False` it fails.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL304"
    name = "gradcheck-mutating-function"
    affected_versions = ">=1.6,<1.17"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def forward(x):
                y = wp.zeros_like(x)
                wp.launch(square, x.shape[0], inputs=[x], outputs=[y])
                return y

            def test_forward(x):
                assert wp.autograd.gradcheck(forward, inputs=[x], atol=1e-5)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def advance(x):
                x.assign(x.numpy() + 1.0)
                y = wp.zeros_like(x)
                wp.launch(square, x.shape[0], inputs=[x], outputs=[y])
                return y

            def test_advance(x):
                assert wp.autograd.gradcheck(advance, inputs=[x], atol=1e-5)
            """, target=">=1.17"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def advance(x):
                x.assign(x.numpy() + 1.0)
                y = wp.zeros_like(x)
                wp.launch(square, x.shape[0], inputs=[x], outputs=[y])
                return y

            def test_advance(x):
                assert wp.autograd.gradcheck(advance, inputs=[x], atol=1e-5)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def test_step(x, v):
                def step(x, v):
                    wp.launch(square, x.shape[0], inputs=[v], outputs=[x])
                    wp.launch(square, x.shape[0], inputs=[x], outputs=[v])
                    return v

                assert wp.autograd.gradcheck(step, inputs=[x, v], atol=1e-5, restore_inputs=False)
            """, target=">=1.17"),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for event in scope.events:
                if event.kind == "call" and event.name in CHECKS:
                    self._check(context, event)

    def _check(self, context: ProjectContext, event: HostEvent) -> None:
        function = event.argument(0, "function")
        if function is None or event.target is None or event.target.kind != "function":
            return  # a kernel (Warp restores its inputs), or nothing the project defines
        target = context.model.record_function(event.target)
        if target is None:
            return
        restore = event.argument(None, "restore_inputs")
        affected = None
        if restore is not None and restore.literal is False:
            affected = ">=1.6"
        elif restore is not None:
            return  # restore_inputs=True (or a value we cannot read): 1.17+ only, where it restores
        mutated = sorted(p for p, kinds in target.parameter_effects().items() if kinds >= {"read", "write"})
        if not mutated:
            return
        check = event.name.rsplit(".", 1)[1]
        why = "with `restore_inputs=False`" if affected else "and Warp before 1.17 does not restore inputs"
        context.report(self, event, (
            f"`{check}()` evaluates `{function.code}()` many times, and `{function.code}()` overwrites its input"
            f" `{mutated[0]}` that it also reads, {why}: each evaluation starts from what the previous one left, so"
            f" the finite differences are taken at other points than the autodiff Jacobian and the check can fail a"
            f" correct gradient; leave the inputs untouched (write into fresh arrays)"
            + ("" if affected else " or use Warp 1.17+ (`restore_inputs=True`)")),
            affected_versions=affected)
