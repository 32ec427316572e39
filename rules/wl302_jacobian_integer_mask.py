from __future__ import annotations

from warp_lint.project.summary import Value
from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

JACOBIANS = {"warp.autograd.jacobian", "warp.autograd.jacobian_fd"}


class JacobianIntegerMask(Rule):
    """`jacobian`/`jacobian_fd` with integer indices in `input_output_mask` before Warp 1.3.2.

    ## What it does
    Flags a call of `warp.autograd.jacobian` or `warp.autograd.jacobian_fd` whose
    `input_output_mask` (a list literal, or a name bound to one in the same scope) holds an
    integer index, e.g. `[(0, 1)]`, when the target Warp version is older than 1.3.2.

    ## Why is this bad?
    Before 1.3.2, integer indices in the mask were resolved wrongly: the mask selects nothing and
    the returned Jacobians are empty, so whatever is checked against them checks nothing.

    ## Fix safety
    No automatic fix: name the arguments instead (`[("x", "y")]`), or require Warp 1.3.2 or
    later.

    ## Warp versions
    `<1.3.2` (from Warp's changelog for 1.3.2, not measured here: only 1.19.0 is installed;
    `warp.autograd` exists from 1.3.0). The rule is silent when the target Warp version is newer.

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL302"
    name = "jacobian-integer-mask"
    affected_versions = "<1.3.2"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            def check(kernel, x, y):
                return wp.autograd.jacobian(kernel, dim=3, inputs=[x], outputs=[y], input_output_mask=[("x", "y")])
            """, target="<1.3.2"),
        Example("""
            import warp as wp

            def check(kernel, x, y):
                return wp.autograd.jacobian(kernel, dim=3, inputs=[x], outputs=[y], input_output_mask=[(0, 0)])
            """, target=">=1.3.2"),
    ]
    INVALID = [
        Example("""
            import warp as wp

            def check(kernel, x, y):
                return wp.autograd.jacobian(kernel, dim=3, inputs=[x], outputs=[y], input_output_mask=[(0, 0)])
            """, target="<1.3.2"),
        Example("""
            from warp.autograd import jacobian_fd

            def check(kernel, x, y):
                mask = [("x", 0)]
                return jacobian_fd(kernel, dim=3, inputs=[x], outputs=[y], input_output_mask=mask)
            """, target="==1.3.1"),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            bound: dict[str, Value] = {}
            for event in scope.events:
                if event.kind == "assign" and event.value is not None:
                    bound[event.name] = event.value
                if event.kind != "call" or event.name not in JACOBIANS:
                    continue
                mask = event.argument(None, "input_output_mask")
                if mask is not None and mask.plain and mask.code in bound:
                    mask = bound[mask.code]
                if mask is not None and _has_integer_index(mask.literal):
                    function = event.name.rsplit(".", 1)[1]
                    context.report(self, event, (
                        f"`{function}` gets integer indices in `input_output_mask`, which Warp before 1.3.2 resolves"
                        f" wrongly (the Jacobian comes back empty); name the arguments instead, e.g. `[('x', 'y')]`,"
                        f" or require Warp >= 1.3.2"))


def _has_integer_index(mask: object) -> bool:
    """A literal mask `[(0, "y"), ...]` naming an argument by its position."""
    return isinstance(mask, (list, tuple)) and any(
        isinstance(pair, (list, tuple)) and any(isinstance(item, int) and not isinstance(item, bool) for item in pair)
        for pair in mask)
