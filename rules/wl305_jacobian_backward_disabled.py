from __future__ import annotations

from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext

JACOBIANS = {"warp.autograd.jacobian"}


class JacobianBackwardDisabled(Rule):
    """`jacobian()` of a kernel whose module turns backward off: before Warp 1.17 it is all zeros, with no error.

    ## What it does
    Flags a call of `warp.autograd.jacobian` whose kernel is defined in a module that disables
    backward (`wp.set_module_options({"enable_backward": False})`, or `wp.config.enable_backward =
    False`). A kernel whose own decorator says `enable_backward=False` is not flagged: Warp raises
    for it.

    ## Why is this bad?
    The autodiff Jacobian is built by running the kernel's adjoint, which such a module never
    generates. Before 1.17 `jacobian` does not check the module's setting and returns a Jacobian of
    zeros; a test comparing it with a reference, or with `jacobian_fd`, sees "no gradient" instead of
    "no adjoint", and one that only looks for NaNs passes.

    ## Fix safety
    No automatic fix: enable backward for the module whose kernels are checked, or compare against
    `jacobian_fd` only.

    ## Warp versions
    Before 1.17 (the check came in 1.17; the boundary is from the changelog). Measured on 1.12.1
    (CPU), `y = x*x` in a module with `enable_backward` off: `jacobian` returns a 3x3 zero matrix
    (right: diag(2, 4, 6)); on 1.19.0 it raises `ValueError: Kernel must have backward pass enabled
    to compute Jacobians`, as both versions do for a kernel whose decorator turns backward off.

    ## Confirmation
    None at run time: read from the host code and the module's options.
    """

    code = "WL305"
    name = "jacobian-backward-disabled"
    affected_versions = "<1.17"
    level = "project"

    VALID = [
        Example("""
            import warp as wp
            import warp.autograd

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def test_square(x, y):
                jacobians = wp.autograd.jacobian(square, dim=3, inputs=[x], outputs=[y])
                assert jacobians[0, 0].numpy()[1, 1] == 4.0
            """, target="<1.17"),
    ]
    INVALID = [
        Example("""
            import warp as wp
            import warp.autograd

            wp.set_module_options({"enable_backward": False})

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def test_square(x, y):
                jacobians = wp.autograd.jacobian(square, dim=3, inputs=[x], outputs=[y])
                assert jacobians[0, 0].numpy()[1, 1] == 4.0
            """, target="<1.17"),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            for event in scope.events:
                if event.kind != "call" or event.name not in JACOBIANS or event.target is None:
                    continue
                definition = context.model.definition(event.target)
                if definition is None or definition.kind != "kernel" or not definition.backward_disabled or \
                        definition.disabled_by == "decorator":
                    continue
                kernel = event.target.qualname
                context.report(self, event, (
                    f"`jacobian()` of `{kernel}`, whose backward is off ({definition.backward_disabled}):"
                    f" Warp before 1.17 does not check that and returns a Jacobian of zeros, with no error, so"
                    f" the check compares nothing; enable backward for that module, or check against"
                    f" `jacobian_fd` only"))

