"""A small differentiable particle simulation with gradient hazards planted in it.

`warp-lint check examples/` reports each of them; the comment on each line says which rule and
why the gradient is wrong. Run it with `python examples/particles.py` (needs warp-lang) to see that
the forward pass looks fine.
"""

import numpy as np
import warp as wp

DT = 0.01


@wp.kernel
def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), x_out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    x_out[i] = x[i] + v[i] * DT


@wp.kernel
def damp(v: wp.array(dtype=wp.vec3), drag: wp.array(dtype=float)):
    i = wp.tid()
    v[i] = v[i] * drag[i]  # WL102: v is read, then overwritten: d/d drag replays the new v


@wp.kernel
def floor_contact(x: wp.array(dtype=wp.vec3), x_out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    p = x[i]
    p[1] = wp.max(p[1], 0.0)  # WL103: the clamp keeps the old value's gradient (Warp >= 1.7)
    x_out[i] = p


@wp.kernel
def trail_energy(x: wp.array(dtype=wp.vec3), steps: int, energy: wp.array(dtype=float)):
    i = wp.tid()
    e = float(0.0)
    for s in range(steps):
        e = e * wp.length(x[i]) + 1.0  # WL104: non-additive update in a dynamic loop
    wp.atomic_add(energy, 0, e)


def simulate(n: int = 16) -> float:
    rng = np.random.default_rng(0)
    x = wp.array(rng.uniform(0.0, 1.0, size=(n, 3)), dtype=wp.vec3, requires_grad=True)
    v = wp.array(rng.uniform(-1.0, 1.0, size=(n, 3)), dtype=wp.vec3, requires_grad=True)
    moved = wp.zeros_like(x)
    grounded = wp.zeros_like(x)
    drag = wp.full(n, 0.98, dtype=float, requires_grad=True)
    energy = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(integrate, dim=n, inputs=[x, v], outputs=[moved])
        wp.launch(damp, dim=n, inputs=[v, drag])
        wp.launch(floor_contact, dim=n, inputs=[moved], outputs=[grounded])
        wp.launch(trail_energy, dim=n, inputs=[grounded, 4], outputs=[energy])
    tape.backward(loss=energy)
    return float(energy.numpy()[0])


if __name__ == "__main__":
    print("energy", simulate())
