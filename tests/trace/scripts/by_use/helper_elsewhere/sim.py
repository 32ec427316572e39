"""Calls the helper of helpers.py from a recorded kernel: the gradient is [12, 4, 6] where it is
[8, 4, 6]."""

import warp as wp

from helpers import stretched

wp.config.log_level = wp.LOG_WARNING


@wp.kernel
def energy(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = stretched(x[i])


def main():
    x = wp.array([wp.vec3(1.0, 2.0, 3.0)], dtype=wp.vec3, requires_grad=True)
    y = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(energy, 1, inputs=[x], outputs=[y])
    tape.backward(grads={y: wp.ones(1, dtype=float)})
    print(x.grad.numpy())


if __name__ == "__main__":
    main()
