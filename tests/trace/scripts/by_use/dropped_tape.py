"""A tape dropped without backward() leaves Warp's read mark on `x`: the later write warns, but no
backward() replays the read, and the gradient printed is right (2 (x + 1) = [4, 6, 8])."""

import warp as wp
wp.config.log_level = wp.LOG_WARNING


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


@wp.kernel
def bump(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] + 1.0


@wp.kernel
def total(x: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i] * x[i])


def probe(x):
    y = wp.zeros(3, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(square, 3, inputs=[x], outputs=[y])
    return y.numpy().sum()  # the tape is dropped: no backward() ever runs


def main():
    x = wp.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True)
    print(probe(x))
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(bump, 3, inputs=[x])
        wp.launch(total, 3, inputs=[x], outputs=[loss])
    tape.backward(loss)
    print(x.grad.numpy())


main()
