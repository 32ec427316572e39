"""WL207 in a trainer class: self.tape is entered again every step, zeroed but never reset."""

import warp as wp
from kernels import N, buffer, inputs, scalar, square, total


class Trainer:
    def __init__(self):
        self.x, _ = inputs()
        self.y, self.loss = buffer(), scalar()
        self.tape = wp.Tape()

    def forward(self):
        self.loss.zero_()
        wp.launch(square, dim=N, inputs=[self.x], outputs=[self.y])
        wp.launch(total, dim=N, inputs=[self.y], outputs=[self.loss])


def hazard():
    trainer = Trainer()
    for _ in range(3):
        with trainer.tape:
            trainer.forward()
        trainer.tape.backward(trainer.loss)
        trainer.tape.zero()


def twin():
    trainer = Trainer()
    for _ in range(3):
        with trainer.tape:
            trainer.forward()
        trainer.tape.backward(trainer.loss)
        trainer.tape.reset()
