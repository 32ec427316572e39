from __future__ import annotations

from warp_lint.rule import Example, Rule
from warp_lint.project_context import ProjectContext


class TorchGradOutputZeroed(Rule):
    """A `torch.autograd.Function`'s `backward` makes torch's incoming gradient an array's own gradient: Warp zeroes it.

    ## What it does
    In the `backward` of a class deriving from `torch.autograd.Function`, flags a seed that makes
    an incoming gradient tensor's memory a Warp array's gradient:
    `y.grad = wp.from_torch(grad_y)` (also through `.contiguous()`, `.view(...)`, `.detach()`,
    a slice, or a local), or `tape.backward(grads={y: wp.from_torch(grad_y)})` where `y` is an
    array `forward` allocated without a gradient array of its own (`requires_grad` not set).
    A seed made from a copy (`grad_y.clone()`), copied into the array's own gradient
    (`y.grad.assign(...)`), or passed in `grads=` for an array made with `requires_grad=True`
    (Warp copies it) is fine.

    ## Why is this bad?
    `wp.from_torch` copies nothing, so the array's gradient *is* torch's tensor. From 1.13,
    `backward()` zeroes the gradient of every array the recorded launches wrote once their
    adjoints have used it, so torch's tensor is zeroed in place (`tape.zero()` zeroes it too).
    Torch hands one gradient tensor to every term of a sum (`f(a) + g(b)`: both `backward`s get
    the same tensor), and a caller may keep it as a seed buffer: whatever reads it after this
    `backward` gets zeros, so another input's gradient is silently zero.

    ## Fix safety
    No automatic fix: copy into the array's own gradient, `y.grad.assign(wp.from_torch(grad_y))`
    (allocate `y` with `requires_grad=True`; `grads=` then copies too). Seeding from a copy,
    `wp.from_torch(grad_y.clone())`, also keeps torch's tensor, but not where a captured CUDA graph
    runs the backward: the graph keeps reading the gradient array it was captured with.

    ## Warp versions
    1.13 and later (the zeroing came in 1.13), and every version where `backward` calls
    `tape.zero()` or `tape.reset()` after seeding (which zeroes the seed too: such findings carry
    no version tag). Measured on Warp 1.19.0 with torch 2.13 (CPU), `y = x*x` recorded in `forward`, two calls `((F.apply(a) +
    F.apply(b)) * w).sum().backward()`: `a.grad` is [0, 0, 0] (right: [2, 4, 6]) for
    `ctx.y.grad = wp.from_torch(g.contiguous())` and for `grads={ctx.y: wp.from_torch(g)}` with
    `y` allocated without `requires_grad`; right with `g.clone()`, with `ctx.y.grad.assign(...)`,
    and with `grads=` for a `y` made with `requires_grad=True`. On 1.12.1 every one of these gives
    the right [2, 4, 6]: nothing zeroes the seed there, unless `backward` calls `tape.zero()`
    after seeding, which gives [0, 0, 0] on 1.12.1 and 1.19.0 alike (`y.grad =` and `grads=`).

    ## Confirmation
    None at run time: read from the host code (tests measure the pair with torch autograd
    against central differences).
    """

    code = "WL402"
    name = "torch-grad-output-zeroed"
    affected_versions = ">=1.13"
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
                    return wp.to_torch(ctx.x.grad).clone()
            """),
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
                    return wp.to_torch(ctx.y, requires_grad=False)

                @staticmethod
                def backward(ctx, grad_y):
                    ctx.y.grad = wp.from_torch(grad_y.contiguous().clone())
                    ctx.tape.backward()
                    return wp.to_torch(ctx.x.grad).clone()
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
                    ctx.y = wp.zeros_like(ctx.x)
                    with ctx.tape:
                        wp.launch(square, len(x), inputs=[ctx.x], outputs=[ctx.y])
                    return wp.to_torch(ctx.y, requires_grad=False)

                @staticmethod
                def backward(ctx, grad_y):
                    ctx.y.grad = wp.from_torch(grad_y.contiguous())
                    ctx.tape.backward()
                    return wp.to_torch(ctx.x.grad).clone()
            """),
        Example("""
            import torch
            import warp as wp

            class Square(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    ctx.tape = wp.Tape()
                    ctx.x = wp.from_torch(x.detach(), requires_grad=True)
                    ctx.y = wp.empty(len(x), dtype=float)
                    with ctx.tape:
                        wp.launch(square, len(x), inputs=[ctx.x], outputs=[ctx.y])
                    return wp.to_torch(ctx.y, requires_grad=False)

                @staticmethod
                def backward(ctx, *grad_outputs):
                    seed = wp.from_torch(grad_outputs[0])
                    ctx.tape.backward(grads={ctx.y: seed})
                    return wp.to_torch(ctx.x.grad).clone()
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for function in context.torch_functions:
            # one report per seeding statement, citing every call from `backward` that reaches it
            callers: dict[tuple, dict] = {}
            for seed in function.seeds:
                called = callers.setdefault((seed.location.path, seed.location.line, seed.location.column), {})
                for where in seed.via[:1]:
                    note = f"`{function.name}.backward` hands it the incoming gradient here"
                    if seed.replayed_at is not None:
                        note += (f"; this arm then replays a captured graph ({context.where(seed.replayed_at, where)}),"
                                 f" which reads the gradient array it was captured with: there the new one is"
                                 f" ignored, and the copy into `.grad` is the fix too")
                    called.setdefault(where, note)
            for seed in function.seeds:
                if seed.how == "grads" and function.own_gradient(seed.holder, context.model.index) is not False:
                    continue  # Warp copies the seed into the array's own gradient
                if seed.how == "assign":
                    made = f"`{seed.written}` makes `{seed.array}`'s gradient"
                    fix = f"copy it into the array's own gradient instead, `{seed.array}.grad.assign({seed.wrap})`"
                else:
                    made = (f"`{seed.written}`, for an array `{seed.array}` allocated without `requires_grad`, makes"
                            f" its gradient")
                    fix = f"allocate `{seed.array}` with `requires_grad=True`, and Warp copies the seed into it"
                wrapped = f"`{seed.wrap}`"
                if seed.wrapped_at.line != seed.location.line or seed.wrapped_at.path != seed.location.path:
                    wrapped += f" ({context.where(seed.wrapped_at, seed.location)})"
                calls = callers[(seed.location.path, seed.location.line, seed.location.column)]
                # a `tape.zero()`/`reset()` after the seed zeroes torch's tensor on every version
                seeded = seed.via[0] if seed.via else seed.location
                zeroed = any(not z.array and z.location.path == seeded.path and z.location.line > seeded.line
                             for z in function.zeroings)
                context.report(self, seed.location, (
                    f"{made} the memory of torch's incoming gradient ({seed.gradient}) itself: {wrapped} copies"
                    f" nothing, and `tape.backward()` zeroes that gradient in place once it has used it (so does"
                    f" `tape.zero()`), so torch's tensor becomes zeros; torch hands one gradient tensor to every"
                    f" term of a sum (`f(a) + g(b)`), so a term whose `backward` runs after this one gets a zero"
                    f" gradient; {fix}"),
                    data={"host": True},
                    related=[(note, where) for where, note in calls.items()],
                    affected_versions="" if zeroed else None)
