"""WL210 in a class: the loss method runs after the `with self.tape:` block."""

import warp as wp
from kernels import N, buffer, inputs, scalar, square, total


class Model:
    def __init__(self):
        self.x, _ = inputs()
        self.y, self.loss = buffer(), scalar()
        self.tape = wp.Tape()

    def simulate(self):
        wp.launch(square, dim=N, inputs=[self.x], outputs=[self.y])

    def compute_loss(self):
        wp.launch(total, dim=N, inputs=[self.y], outputs=[self.loss])


def hazard():
    model = Model()
    with model.tape:
        model.simulate()
    model.compute_loss()
    model.tape.backward(model.loss)


def twin():
    model = Model()
    with model.tape:
        model.simulate()
        model.compute_loss()
    model.tape.backward(model.loss)
