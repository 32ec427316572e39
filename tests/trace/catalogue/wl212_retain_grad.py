"""WL212: a retain_grad=True buffer is stored into twice on one tape."""

import warp as wp
from kernels import N, inputs, scalar, scale, square, total


def hazard():
    x, _ = inputs()
    y = wp.zeros(N, dtype=float, requires_grad=True, retain_grad=True)
    loss = scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.launch(scale, dim=N, inputs=[x, 2.0], outputs=[y])
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])
    tape.backward(loss)


def twin():
    x, _ = inputs()
    y = wp.zeros(N, dtype=float, requires_grad=True)
    loss = scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.launch(scale, dim=N, inputs=[x, 2.0], outputs=[y])
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])
    tape.backward(loss)
