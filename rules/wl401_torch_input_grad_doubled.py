from __future__ import annotations

from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class TorchInputGradDoubled(Rule):
    """A `torch.autograd.Function` wraps an input tensor itself and also returns its gradient: torch adds it twice.

    ## What it does
    In a class deriving from `torch.autograd.Function`, flags a `wp.from_torch(x)` in `forward`
    that wraps one of `forward`'s input tensors itself (`x`, or `x.contiguous()`, `x.float()`,
    `x.to(...)`, which are `x` when no conversion is needed), without `requires_grad=False` and
    without `.detach()`, and kept on `ctx` for `backward`, when `backward` returns a tensor made
    from that array's gradient (`wp.to_torch(ctx.x.grad)`, `tape.gradients[ctx.x]`, cloned or
    not), unless `backward` zeroes that gradient after reading it (`tape.zero()`, `tape.reset()`,
    `ctx.x.grad.zero_()`). Reported on the `from_torch` call; the return is a related location.
    Helpers that return `wp.from_torch(t, ...)` of their parameter are followed.

    ## Why is this bad?
    `wp.from_torch(x)` of a tensor that requires grad takes `x.grad` itself as the array's
    gradient (it makes one when missing). `tape.backward()` accumulates the input's gradient
    straight into `x.grad`, and torch then adds what `backward` returns into `x.grad` again: a
    leaf input gets twice its gradient, more on every later call (the tape's buffer is `x.grad`,
    which torch keeps adding to), and `torch.autograd.grad` sees the buffer change under it. No
    error, no warning.

    ## Fix safety
    No automatic fix: wrap a detached tensor, which has a `.grad` of its own:
    `wp.from_torch(x.detach(), requires_grad=x.requires_grad)`, and return its gradient cloned.

    ## Warp versions
    All versions with `wp.from_torch`. Measured on Warp 1.19.0 and 1.12.1 with torch 2.13 (CPU), `y = x*x` in
    a Warp kernel recorded in `forward`, `backward` seeding `y.grad` and returning
    `wp.to_torch(ctx.x.grad)`, `(F.apply(x) * w).sum().backward()`: `x.grad` is [4, 8, 12]
    (right: [2, 4, 6]) for `from_torch(x)`, `from_torch(x, requires_grad=True)`,
    `from_torch(x.contiguous())`, a returned `.clone()` and `tape.gradients[ctx.x]` alike; a
    second call gives [12, 24, 36] (right: [4, 8, 12]). `from_torch(x.detach(),
    requires_grad=True)` gives [2, 4, 6], and so does a cloned return followed by `tape.zero()`
    (which empties `x.grad` before torch adds the copy; also with a second call and with `x` used by
    torch too). The same on both versions.

    ## Confirmation
    None at run time: read from the host code (tests measure the pair with torch autograd
    against central differences).
    """

    code = "WL401"
    name = "torch-input-grad-doubled"
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
                    ctx.y = wp.zeros_like(ctx.x)
                    with ctx.tape:
                        wp.launch(square, len(x), inputs=[ctx.x], outputs=[ctx.y])
                    return wp.to_torch(ctx.y)

                @staticmethod
                def backward(ctx, grad_y):
                    ctx.tape.backward(grads={ctx.y: wp.from_torch(grad_y.clone())})
                    return wp.to_torch(ctx.x.grad).clone()
            """),
        Example("""
            import torch
            import warp as wp

            class Scale(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weights):
                    ctx.tape = wp.Tape()
                    ctx.x = wp.from_torch(x, requires_grad=False)
                    ctx.w = wp.from_torch(weights.detach(), requires_grad=True)
                    ctx.y = wp.zeros_like(ctx.w)
                    with ctx.tape:
                        wp.launch(scale, len(x), inputs=[ctx.x, ctx.w], outputs=[ctx.y])
                    return wp.to_torch(ctx.y)

                @staticmethod
                def backward(ctx, grad_y):
                    ctx.tape.backward(grads={ctx.y: wp.from_torch(grad_y.clone())})
                    return None, wp.to_torch(ctx.w.grad).clone()
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
                    ctx.x = wp.from_torch(x)
                    ctx.y = wp.zeros_like(ctx.x)
                    with ctx.tape:
                        wp.launch(square, len(x), inputs=[ctx.x], outputs=[ctx.y])
                    return wp.to_torch(ctx.y)

                @staticmethod
                def backward(ctx, grad_y):
                    ctx.y.grad = wp.from_torch(grad_y.clone())
                    ctx.tape.backward()
                    return wp.to_torch(ctx.x.grad)
            """),
        Example("""
            import torch
            import warp as wp

            def as_warp(tensor, grad=True):
                return wp.from_torch(tensor.contiguous(), requires_grad=grad)

            class Scale(torch.autograd.Function):
                @staticmethod
                def forward(context, x, weights):
                    tape = wp.Tape()
                    w = as_warp(weights)
                    y = wp.zeros_like(w)
                    with tape:
                        wp.launch(scale, len(x), inputs=[as_warp(x, False), w], outputs=[y])
                    context.tape, context.w, context.y = tape, w, y
                    return wp.to_torch(y)

                @staticmethod
                def backward(context, grad_y):
                    context.tape.backward(grads={context.y: wp.from_torch(grad_y.clone())})
                    grad_w = wp.to_torch(context.tape.gradients[context.w]).clone()
                    return None, grad_w
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for function in context.torch_functions:
            # A gradient zeroed after it is read (`tape.zero()`) no longer holds the tape's part: a copy
            # returned then is right (measured), and a view returned then is WL403's.
            returned = {r.holder: r for r in function.returned_gradients
                        if r.holder and not any(z.clears(r) for z in function.zeroings)}
            for wrapped in function.wrapped_inputs:
                reads = returned.get(wrapped.holder)
                if reads is None:
                    continue
                name = wrapped.parameter
                context.report(self, wrapped.location, (
                    f"`{function.name}.forward` wraps its input `{name}` itself, so the tape accumulates"
                    f" `{name}`'s gradient straight into `{name}.grad`, and `backward` also returns it"
                    f" (`{reads.code}`, {context.where(reads.location, wrapped.location)}): torch adds it into `{name}.grad` a second time, and a leaf `{name}`"
                    f" gets twice its gradient; wrap a detached tensor,"
                    f" `wp.from_torch({name}.detach(), requires_grad={name}.requires_grad)`"),
                    data={"host": True},
                    related=[(f"`backward` returns what `{reads.code}` reads here", reads.location)])
