"""WL208 in a rollout loop: a tape per step, state carried on, per-step gradients summed."""

import numpy as np
import warp as wp
from kernels import N, buffer, inputs, integrate, scalar, total


def hazard():
    x, v = inputs()
    x_next = buffer()
    grad_v = np.zeros(N)
    for _ in range(3):
        loss = scalar()
        tape = wp.Tape()
        with tape:
            wp.launch(integrate, dim=N, inputs=[x, v, 0.1], outputs=[x_next])
            wp.launch(total, dim=N, inputs=[x_next], outputs=[loss])
        tape.backward(loss)
        grad_v += v.grad.numpy()
        tape.zero()
        x, x_next = x_next, x


def twin():
    x, v = inputs()
    states = [x] + [buffer() for _ in range(3)]
    loss = scalar()
    tape = wp.Tape()
    with tape:
        for step in range(3):
            wp.launch(integrate, dim=N, inputs=[states[step], v, 0.1], outputs=[states[step + 1]])
        wp.launch(total, dim=N, inputs=[states[-1]], outputs=[loss])
    tape.backward(loss)
