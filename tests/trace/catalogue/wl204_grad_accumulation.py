"""WL204 in an optimisation loop: backward() every step, never tape.zero()."""

import warp as wp
from kernels import N, buffer, inputs, scalar, square, total


def record():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])
    return tape, x, loss


def hazard():
    tape, x, loss = record()
    for _ in range(3):
        tape.backward(loss)
        print("grad", x.grad.numpy()[0])


def twin():
    tape, x, loss = record()
    for _ in range(3):
        tape.backward(loss)
        print("grad", x.grad.numpy()[0])
        tape.zero()
