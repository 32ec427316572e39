"""WL211 through a helper: the state is reset between the tape block and backward()."""

import warp as wp
from kernels import N, buffer, inputs, scalar, square, total


def reset_state(x):
    x.fill_(1.0)


def record(tape, x, y, loss):
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])


def hazard():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    record(tape, x, y, loss)
    reset_state(x)
    tape.backward(loss)


def twin():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    record(tape, x, y, loss)
    tape.backward(loss)
    reset_state(x)
