"""A flagged kernel (WL103) launched only outside any tape: forward-only, hidden unless asked for."""

import warp as wp
wp.config.log_level = wp.LOG_WARNING


@wp.kernel
def stretch(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]
    v[0] = 2.0 * v[0]
    y[i] = wp.dot(v, v)


def main():
    x = wp.array([wp.vec3(1.0, 2.0, 3.0)], dtype=wp.vec3)
    y = wp.zeros(1, dtype=float)
    wp.launch(stretch, 1, inputs=[x], outputs=[y])
    print(y.numpy())


main()
