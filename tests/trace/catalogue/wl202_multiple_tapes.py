"""WL202 with helpers: the simulation and the loss are recorded on two tapes."""

import warp as wp
from kernels import N, buffer, inputs, scalar, square, total


def simulate(tape, x, y):
    with tape:
        wp.launch(square, dim=N, inputs=[x], outputs=[y])


def hazard():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    sim_tape, loss_tape = wp.Tape(), wp.Tape()
    simulate(sim_tape, x, y)
    with loss_tape:
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])
    loss_tape.backward(loss)


def twin():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    simulate(tape, x, y)
    with tape:
        wp.launch(total, dim=N, inputs=[y], outputs=[loss])
    tape.backward(loss)
