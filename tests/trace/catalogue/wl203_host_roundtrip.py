"""WL203 in a step: the intermediate result goes to the host and comes back as a new array."""

import warp as wp
from kernels import N, buffer, inputs, scalar, scale, square, total


def hazard():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        doubled = wp.array(y.numpy() * 2.0, dtype=float, requires_grad=True)
        wp.launch(total, dim=N, inputs=[doubled], outputs=[loss])
    tape.backward(loss)


def twin():
    x, _ = inputs()
    y, doubled, loss = buffer(), buffer(), scalar()
    tape = wp.Tape()
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])
        wp.launch(scale, dim=N, inputs=[y, 2.0], outputs=[doubled])
        wp.launch(total, dim=N, inputs=[doubled], outputs=[loss])
    tape.backward(loss)
    print("loss", y.numpy().sum() * 2.0)
