"""A small differentiable particle simulation, with two host-side gradient hazards planted in it.

`warp-lint trace -- pytest` (run in this folder) runs the tests in `check_sim.py` with
instrumentation on and confirms the planted hazards from what actually happened:

* WL201 in `drag_rollout`: `apply_drag` writes the velocities in place after `integrate` read
  them on the same tape, so `backward()` replays `integrate` with the damped velocities.
* WL202 in `two_stage_loss`: the loss is recorded on a second tape and only that tape's
  `backward()` runs, so the gradient never reaches the launches recorded on the first tape.

`distance_to_target` carries a static WL110 finding (a hand-rolled norm is NaN at zero length)
that the real data never hits, so the trace clears it; the WL103 finding in `floor_contact` is
confirmed by a gradcheck of its real launch; `unused_square` is never launched.
"""

import numpy as np
import warp as wp

DT = 0.05
AIR_DRAG = 0.5


@wp.kernel
def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), dt: float, x_out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    vi = v[i]
    a = -AIR_DRAG * wp.length(vi) * vi  # quadratic air drag: the step is nonlinear in v
    x_out[i] = x[i] + (vi + a * dt) * dt


@wp.kernel
def apply_drag(v: wp.array(dtype=wp.vec3), drag: float, v_out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    v_out[i] = v[i] * drag


@wp.kernel
def distance_to_target(x: wp.array(dtype=wp.vec3), target: wp.vec3, loss: wp.array(dtype=float)):
    i = wp.tid()
    d = x[i] - target
    wp.atomic_add(loss, 0, wp.sqrt(wp.dot(d, d)))


@wp.kernel
def floor_contact(x: wp.array(dtype=wp.vec3), x_out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    p = x[i]
    p[1] = wp.max(p[1], 0.0)  # keeps the gradient of the old p[1] as well (Warp >= 1.7): WL103
    x_out[i] = p


@wp.kernel
def unused_square(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] * a[i]


def make_state(n: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = wp.array(rng.uniform(0.0, 1.0, size=(n, 3)), dtype=wp.vec3, requires_grad=True)
    v = wp.array(rng.uniform(-1.0, 1.0, size=(n, 3)), dtype=wp.vec3, requires_grad=True)
    return x, v


def drag_rollout(x, v, target=(2.0, 2.0, 2.0), drag=0.9):
    """One step with in-place drag; returns the loss and dL/dv."""
    n = x.shape[0]
    x_next = wp.zeros_like(x)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(integrate, dim=n, inputs=[x, v, DT], outputs=[x_next])
        wp.launch(apply_drag, dim=n, inputs=[v, drag], outputs=[v])  # planted WL201: v was read by integrate
        wp.launch(distance_to_target, dim=n, inputs=[x_next, wp.vec3(*target)], outputs=[loss])
    tape.backward(loss=loss)
    return float(loss.numpy()[0]), v.grad.numpy().copy()


def two_stage_loss(x, v, target=(2.0, 2.0, 2.0)):
    """The step on one tape, the loss on another; returns the loss and dL/dx."""
    n = x.shape[0]
    x_next = wp.zeros_like(x)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    step_tape = wp.Tape()
    with step_tape:
        wp.launch(integrate, dim=n, inputs=[x, v, DT], outputs=[x_next])
    loss_tape = wp.Tape()
    with loss_tape:
        wp.launch(distance_to_target, dim=n, inputs=[x_next, wp.vec3(*target)], outputs=[loss])
    loss_tape.backward(loss=loss)  # planted WL202: step_tape.backward() never runs
    return float(loss.numpy()[0]), x.grad.numpy().copy()


def grounded_loss(x, v, target=(2.0, 2.0, 2.0)):
    """A step, then the floor contact, then the loss; returns dL/dx."""
    n = x.shape[0]
    x_next = wp.zeros_like(x)
    grounded = wp.zeros_like(x)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(integrate, dim=n, inputs=[x, v, DT], outputs=[x_next])
        wp.launch(floor_contact, dim=n, inputs=[x_next], outputs=[grounded])
        wp.launch(distance_to_target, dim=n, inputs=[grounded, wp.vec3(*target)], outputs=[loss])
    tape.backward(loss=loss)
    return x.grad.numpy().copy()


def one_tape_loss(x, v, target=(2.0, 2.0, 2.0)):
    """The correct version: step and loss on one tape."""
    n = x.shape[0]
    x_next = wp.zeros_like(x)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(integrate, dim=n, inputs=[x, v, DT], outputs=[x_next])
        wp.launch(distance_to_target, dim=n, inputs=[x_next, wp.vec3(*target)], outputs=[loss])
    tape.backward(loss=loss)
    return float(loss.numpy()[0]), x.grad.numpy().copy()
