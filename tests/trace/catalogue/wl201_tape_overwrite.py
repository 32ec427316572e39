"""WL201 in a class holding its tape: the step overwrites the state `square` read on the tape."""

import warp as wp
from kernels import N, buffer, inputs, integrate, scalar, square, total


class Sim:
    def __init__(self):
        self.x, self.v = inputs()
        self.y, self.loss = buffer(), scalar()
        self.tape = wp.Tape()


def hazard():
    sim = Sim()
    with sim.tape:
        wp.launch(square, dim=N, inputs=[sim.x], outputs=[sim.y])
        wp.launch(integrate, dim=N, inputs=[sim.x, sim.v, 0.1], outputs=[sim.x])
        wp.launch(total, dim=N, inputs=[sim.y], outputs=[sim.loss])
    sim.tape.backward(sim.loss)


def twin():
    sim = Sim()
    x_next = buffer()
    with sim.tape:
        wp.launch(square, dim=N, inputs=[sim.x], outputs=[sim.y])
        wp.launch(integrate, dim=N, inputs=[sim.x, sim.v, 0.1], outputs=[x_next])
        wp.launch(total, dim=N, inputs=[sim.y], outputs=[sim.loss])
    sim.tape.backward(sim.loss)
