from __future__ import annotations

from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

GRADCHECKS = {"warp.autograd.gradcheck", "warp.autograd.gradcheck_tape"}


class UncheckedGradcheck(Rule):
    """`gradcheck(..., raise_exception=False)` whose result is thrown away.

    ## What it does
    Flags a call of `warp.autograd.gradcheck` or `warp.autograd.gradcheck_tape` with
    `raise_exception=False` whose boolean result is discarded (an expression statement, or bound
    to `_`).

    ## Why is this bad?
    With `raise_exception=False` the check only prints its verdict to stdout and returns it. When
    the result is dropped, a failing gradient check passes silently: the test or script goes on
    as if the gradients were right.

    ## Fix safety
    No automatic fix: `assert` the result, or leave `raise_exception` at its default (`True`).

    ## Warp versions
    All versions with `warp.autograd` (1.3.0 and later).

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL301"
    name = "unchecked-gradcheck"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            def test_square(kernel, x, y):
                assert wp.autograd.gradcheck(kernel, dim=3, inputs=[x], outputs=[y], raise_exception=False)
                wp.autograd.gradcheck(kernel, dim=3, inputs=[x], outputs=[y])
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            def test_square(kernel, x, y):
                wp.autograd.gradcheck(kernel, dim=3, inputs=[x], outputs=[y], raise_exception=False)
            """),
        Example("""
            from warp.autograd import gradcheck_tape

            def test_tape(tape):
                _ = gradcheck_tape(tape, raise_exception=False)
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for event in scope.events:
                if event.kind != "call" or event.name not in GRADCHECKS:
                    continue
                flag = event.argument(None, "raise_exception")
                if flag is None or flag.literal is not False:
                    continue
                if event.call.role == "discard":  # an expression statement, or `_ = ...`
                    function = event.name.rsplit(".", 1)[1]
                    context.report(self, event, (
                        f"`{function}(..., raise_exception=False)` returns whether the check passed, and the result is"
                        f" discarded: a failing gradient check goes unnoticed; `assert` the result or drop"
                        f" `raise_exception=False`"))
