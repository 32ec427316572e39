"""WL209: a wp.utils reduction inside the tape block feeds the loss."""

import warp as wp
from kernels import N, buffer, inputs, scalar, scale_scalar, square, total


def hazard():
    x, _ = inputs()
    y, s, loss = buffer(), scalar(), scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.utils.array_sum(y, out=s)
        wp.launch(scale_scalar, dim=1, inputs=[s], outputs=[loss])
    tape.backward(loss)


def twin():
    x, _ = inputs()
    y, s, loss = buffer(), scalar(), scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.launch(total, dim=N, inputs=[y], outputs=[s])
        wp.launch(scale_scalar, dim=1, inputs=[s], outputs=[loss])
    tape.backward(loss)
