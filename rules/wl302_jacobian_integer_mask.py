from __future__ import annotations

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.rule import Example, Rule

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
    triggers = frozenset({"jacobian", "jacobian_fd"})

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

    def check(self, context: FileContext) -> None:
        for scope in context.host_scopes:
            bound: dict[str, cst.BaseExpression] = {}
            for event in scope.events:
                if event.kind == "assign" and event.value is not None:
                    bound[event.name] = event.value
                if event.kind != "call" or event.name not in JACOBIANS:
                    continue
                mask = event.argument(None, "input_output_mask")
                if isinstance(mask, cst.Name):
                    mask = bound.get(mask.value)
                if _has_integer_index(mask):
                    function = event.name.rsplit(".", 1)[1]
                    context.report(self, event.node, (
                        f"`{function}` gets integer indices in `input_output_mask`, which Warp before 1.3.2 resolves"
                        f" wrongly (the Jacobian comes back empty); name the arguments instead, e.g. `[('x', 'y')]`,"
                        f" or require Warp >= 1.3.2"))


def _has_integer_index(mask: cst.BaseExpression | None) -> bool:
    if not isinstance(mask, (cst.List, cst.Tuple)):
        return False
    for element in mask.elements:
        pair = element.value
        if isinstance(pair, (cst.Tuple, cst.List)) and any(
                isinstance(item.value, cst.Integer) for item in pair.elements):
            return True
    return False
