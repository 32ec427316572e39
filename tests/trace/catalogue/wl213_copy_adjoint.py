"""WL213: a clone on the tape whose source a later recorded launch reads too."""

import warp as wp
from kernels import N, buffer, inputs, scalar, square, total


def hazard():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        copied = wp.clone(y)
        wp.launch(total, dim=N, inputs=[copied], outputs=[loss])
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])
    tape.backward(loss)


def twin():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        copied = wp.clone(y)
        wp.launch(total, dim=N, inputs=[copied], outputs=[loss])
    tape.backward(loss)
