"""A flagged square root of a squared norm (WL110) that the run never takes at zero: cleared."""

import warp as wp
wp.config.log_level = wp.LOG_WARNING


@wp.kernel
def dist(x: wp.array(dtype=wp.vec3), target: wp.vec3, y: wp.array(dtype=float)):
    i = wp.tid()
    d = x[i] - target
    wp.atomic_add(y, 0, wp.sqrt(wp.dot(d, d)))


def main():
    x = wp.array([wp.vec3(1.0, 2.0, 3.0)], dtype=wp.vec3, requires_grad=True)
    y = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(dist, 1, inputs=[x, wp.vec3(0.0, 0.0, 0.0)], outputs=[y])
    tape.backward(y)
    print(x.grad.numpy())


main()
