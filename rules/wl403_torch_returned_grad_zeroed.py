from __future__ import annotations

from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class TorchReturnedGradZeroed(Rule):
    """A `torch.autograd.Function`'s `backward` returns a view of a Warp gradient, then zeroes it: torch gets zeros.

    ## What it does
    In the `backward` of a class deriving from `torch.autograd.Function`, flags a call that zeroes
    gradients (`tape.zero()`, `tape.reset()`, `x.grad.zero_()`) made after reading a Warp array's
    gradient into what `backward` returns as a view, not a copy (`wp.to_torch(ctx.x.grad)`,
    `wp.to_torch(tape.gradients[x])`, returned directly or through a local), and before that
    return. Reported on the zeroing call; the read is a related location. Returning
    `wp.to_torch(ctx.x.grad).clone()` is fine.

    ## Why is this bad?
    `wp.to_torch` copies nothing: the tensor `backward` returns is the Warp gradient's memory.
    Zeroing the tape's gradients to ready it for the next call (a common tidy-up) zeroes the
    tensor torch is about to add into the input's gradient, so the input's gradient is zero, with
    no error.

    ## Fix safety
    No automatic fix: return a copy (`wp.to_torch(ctx.x.grad).clone()`), or zero the tape at the
    start of the next `backward` instead.

    ## Warp versions
    All versions. Measured on Warp 1.19.0 with torch 2.13 (CPU), `y = x*x` recorded in `forward`,
    `backward` running the tape, reading `out = wp.to_torch(ctx.x.grad)`, then `tape.zero()`,
    `tape.reset()` or `ctx.x.grad.zero_()`, and returning `out`: `x.grad` is [0, 0, 0] (right:
    [2, 8, 18]) whether `forward` wrapped `x` itself or `x.detach()`; with `.clone()` it is right.

    ## Confirmation
    None at run time: read from the host code (tests measure the pair with torch autograd
    against central differences).
    """

    code = "WL403"
    name = "torch-returned-grad-zeroed"
    level = "project"
    reads_recordings = False

    VALID = [
        Example("""
            import torch
            import warp as wp

            class Square(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    ctx.tape = wp.Tape()
                    ctx.x = wp.from_torch(x.detach(), requires_grad=True)
                    ctx.y = wp.zeros_like(ctx.x, requires_grad=True)
                    with ctx.tape:
                        wp.launch(square, len(x), inputs=[ctx.x], outputs=[ctx.y])
                    return wp.to_torch(ctx.y, requires_grad=False)

                @staticmethod
                def backward(ctx, grad_y):
                    ctx.tape.backward(grads={ctx.y: wp.from_torch(grad_y.contiguous())})
                    grad_x = wp.to_torch(ctx.x.grad).clone()
                    ctx.tape.zero()
                    return grad_x
            """),
    ]
    INVALID = [
        Example("""
            import torch
            import warp as wp

            class Square(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    ctx.tape = wp.Tape()
                    ctx.x = wp.from_torch(x.detach(), requires_grad=True)
                    ctx.y = wp.zeros_like(ctx.x, requires_grad=True)
                    with ctx.tape:
                        wp.launch(square, len(x), inputs=[ctx.x], outputs=[ctx.y])
                    return wp.to_torch(ctx.y, requires_grad=False)

                @staticmethod
                def backward(ctx, grad_y):
                    ctx.tape.backward(grads={ctx.y: wp.from_torch(grad_y.contiguous())})
                    grad_x = wp.to_torch(ctx.x.grad)
                    ctx.tape.zero()
                    return grad_x
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for function in context.torch_functions:
            for gradient in function.returned_gradients:
                if not gradient.shared:
                    continue
                for zeroing in function.zeroings:
                    if not zeroing.clears(gradient):
                        continue
                    context.report(self, zeroing.location, (
                        f"`{zeroing.code}` zeroes the gradient that `{function.name}.backward` returns as a view"
                        f" (`{gradient.code}`, {context.where(gradient.location, zeroing.location)}: `wp.to_torch`"
                        f" copies nothing), before torch reads it: torch adds zeros into the input's gradient;"
                        f" return a copy (`.clone()` it), or zero at the start of the next `backward`"),
                        data={"host": True}, related=[("the returned gradient is read here", gradient.location)])
                    break
