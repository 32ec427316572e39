from __future__ import annotations

from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

GRADCHECKS = {"warp.autograd.gradcheck", "warp.autograd.gradcheck_tape"}


class GradcheckDefaultAtol(Rule):
    """`gradcheck` with the default absolute tolerance: small gradients are effectively unchecked.

    ## What it does
    Flags a call of `warp.autograd.gradcheck` or `warp.autograd.gradcheck_tape` that does not pass
    `atol=` (nor a `**kwargs` that might). Reported on the call. A call with an explicit `atol`
    is fine, whatever its value.

    ## Why is this bad?
    The check passes when `|AD - FD| <= atol + rtol * |FD|` for every Jacobian entry, with
    `atol=1e-3` by default. Entries smaller than that (gradients of small losses, small time steps,
    scaled parameters) pass whatever the autodiff gradient is: a gradient off by 30% is reported as
    correct. float64 inputs lower the finite-difference noise, so a small `atol` becomes usable,
    but they do not change the default.

    ## Fix safety
    No automatic fix: pass an `atol` scaled to the expected gradient (a small fraction of the
    typical entry), with float64 inputs where float32 finite differences are too noisy for it.

    ## Warp versions
    All versions with `warp.autograd` (1.3.0 and later). Measured on 1.19.0 and 1.16.0 (CPU): a
    kernel `y = 1e-4 x^2` with a custom adjoint 30% too large (entries 1e-4 to 4e-4) passes
    `gradcheck` with the default tolerances, in float32 and in float64; with `atol=1e-6` it fails.

    ## Confirmation
    None at run time: read from the host code.

    ## Options
    Opt-in: not in the default selection, because the finding is advice about a check, not a wrong
    gradient. Select it with `--extend-select WL303` or `extend-select = ["WL303"]`.
    """

    code = "WL303"
    name = "gradcheck-default-atol"
    severity = "warning"
    # Advice, not a wrong gradient: in Warp's own gradcheck tests the Jacobian entries are of order
    # one or the check is expected to fail, where the tolerance is immaterial (judged blind on the
    # real-code corpus: 5 false, 2 debatable, none true).
    default = False
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            def test_square(kernel, x, y):
                assert wp.autograd.gradcheck(kernel, dim=3, inputs=[x], outputs=[y], atol=1e-6, rtol=1e-3)
            """),
        Example("""
            from warp.autograd import gradcheck_tape

            def test_tape(tape, tolerances):
                assert gradcheck_tape(tape, **tolerances)
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            def test_square(kernel, x, y):
                assert wp.autograd.gradcheck(kernel, dim=3, inputs=[x], outputs=[y])
            """),
        Example("""
            from warp.autograd import gradcheck_tape

            def test_tape(tape):
                assert gradcheck_tape(tape, rtol=1e-3)
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for event in scope.events:
                if event.kind != "call" or event.name not in GRADCHECKS:
                    continue
                if event.argument(None, "atol") is not None or event.call.has_star_kwargs:
                    continue
                function = event.name.rsplit(".", 1)[1]
                context.report(self, event, (
                    f"`{function}()` runs with the default `atol=1e-3`: any Jacobian entry smaller than that passes"
                    f" whatever the autodiff gradient is (a 30% error in entries of 1e-4 passes); pass an `atol` scaled"
                    f" to the expected gradient, with float64 inputs if float32 finite differences are too noisy"))
