"""WL206 in a helper that allocates the intermediate buffer without requires_grad."""

import warp as wp
from kernels import N, inputs, scalar, square, total


def forward(tape, x, y, loss):
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])


def hazard():
    x, _ = inputs()
    y = wp.zeros(N, dtype=float)
    loss = scalar()
    tape = wp.Tape()
    forward(tape, x, y, loss)
    tape.backward(loss)


def twin():
    x, _ = inputs()
    y = wp.zeros(N, dtype=float, requires_grad=True)
    loss = scalar()
    tape = wp.Tape()
    forward(tape, x, y, loss)
    tape.backward(loss)
