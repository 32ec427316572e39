"""WL205 through a wrapper around wp.launch: one step is launched with record_tape=False."""

import warp as wp
from kernels import N, buffer, inputs, scalar, square, total


def launch(kernel, inputs, outputs, record=True):
    wp.launch(kernel, dim=N, inputs=inputs, outputs=outputs, record_tape=record)


def hazard():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    with tape:
        launch(square, [x], [y], record=False)
        launch(total, [y], [loss])
    tape.backward(loss)


def twin():
    x, _ = inputs()
    y, loss = buffer(), scalar()
    tape = wp.Tape()
    with tape:
        launch(square, [x], [y])
        launch(total, [y], [loss])
    tape.backward(loss)
