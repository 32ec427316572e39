"""WL118: `wp.atomic_max`/`wp.atomic_min` of a value with a gradient, linted and run on the CPU.

A batch of environments drops particles; the loss wants each environment's highest particle at a
target height. Environment 0 holds eight identical particles (a tie), environment 1 three distinct
ones. The gradient of the loss by gravity, which every particle shares, is defined at the tie (all
tied heights move together), so central differences in float64 give it exactly. The hazard takes
the highest height with `wp.atomic_max` on the value that carries the gradient: Warp's adjoint
gives the slot's gradient to each of the eight tied particles. Its twin applies the rule's fix:
the maximum found without gradient, one tied particle owning the slot, and only that particle
storing its height in the recorded kernel.
"""

from __future__ import annotations

import pytest
from expect_markers import expected
from programs import load_module

from warp_lint.testing import lint_code, snippet

COMMON = '''
import numpy as np
import warp as wp

f64 = wp.float64


@wp.func
def height(x0: wp.vec3d, v0: wp.vec3d, g: f64, t: f64):
    x = x0 + v0 * t
    return x[1] - f64(0.5) * g * t * t


@wp.kernel
def clearance(apex: wp.array(dtype=f64), target: f64, loss: wp.array(dtype=f64)):
    e = wp.tid()
    d = apex[e] - target
    wp.atomic_add(loss, 0, d * d)
'''

TAPED = '''

def gradients(x0, v0, gravity, env_of, envs, t, target):
    tape = wp.Tape()
    with tape:
        loss = loss_of(x0, v0, gravity, env_of, envs, t, target)
    tape.backward(loss)
    return gravity.grad.numpy()[0], x0.grad.numpy()[:, 1].sum()
'''

HAZARD = COMMON + '''

@wp.kernel
def apex_height(x0: wp.array(dtype=wp.vec3d), v0: wp.array(dtype=wp.vec3d), gravity: wp.array(dtype=f64),
                env_of: wp.array(dtype=int), t: f64, apex: wp.array(dtype=f64)):
    p = wp.tid()
    y = height(x0[p], v0[p], gravity[0], t)
    wp.atomic_max(apex, env_of[p], y)  # expect: WL118


def loss_of(x0, v0, gravity, env_of, envs, t, target):
    apex = wp.full(envs, -1.0e30, dtype=f64, requires_grad=True)
    loss = wp.zeros(1, dtype=f64, requires_grad=True)
    wp.launch(apex_height, len(env_of), inputs=[x0, v0, gravity, env_of, f64(t)], outputs=[apex])
    wp.launch(clearance, envs, inputs=[apex, f64(target)], outputs=[loss])
    return loss
''' + TAPED

TWIN = COMMON + '''

@wp.kernel(enable_backward=False)
def apex_value(x0: wp.array(dtype=wp.vec3d), v0: wp.array(dtype=wp.vec3d), gravity: wp.array(dtype=f64),
               env_of: wp.array(dtype=int), t: f64, apex: wp.array(dtype=f64)):
    p = wp.tid()
    wp.atomic_max(apex, env_of[p], height(x0[p], v0[p], gravity[0], t))


@wp.kernel(enable_backward=False)
def apex_owner(x0: wp.array(dtype=wp.vec3d), v0: wp.array(dtype=wp.vec3d), gravity: wp.array(dtype=f64),
               env_of: wp.array(dtype=int), t: f64, apex: wp.array(dtype=f64), owner: wp.array(dtype=int)):
    p = wp.tid()
    if height(x0[p], v0[p], gravity[0], t) == apex[env_of[p]]:
        wp.atomic_min(owner, env_of[p], p)


@wp.kernel
def apex_height(x0: wp.array(dtype=wp.vec3d), v0: wp.array(dtype=wp.vec3d), gravity: wp.array(dtype=f64),
                env_of: wp.array(dtype=int), t: f64, owner: wp.array(dtype=int), apex: wp.array(dtype=f64)):
    p = wp.tid()
    if owner[env_of[p]] == p:
        apex[env_of[p]] = height(x0[p], v0[p], gravity[0], t)


def loss_of(x0, v0, gravity, env_of, envs, t, target):
    peak = wp.full(envs, -1.0e30, dtype=f64)
    owner = wp.full(envs, 1 << 30, dtype=int)
    apex = wp.zeros(envs, dtype=f64, requires_grad=True)
    loss = wp.zeros(1, dtype=f64, requires_grad=True)
    inputs = [x0, v0, gravity, env_of, f64(t)]
    wp.launch(apex_value, len(env_of), inputs=inputs, outputs=[peak], record_tape=False)
    wp.launch(apex_owner, len(env_of), inputs=[*inputs, peak], outputs=[owner], record_tape=False)
    wp.launch(apex_height, len(env_of), inputs=[*inputs, owner], outputs=[apex])
    wp.launch(clearance, envs, inputs=[apex, f64(target)], outputs=[loss])
    return loss
''' + TAPED

T, TARGET, STEP = 0.2, 2.0, 1.0e-6


def _findings(text: str) -> list[tuple[int, str]]:
    return [(f.start.line, f.code) for f in lint_code(text, select=["WL118"], target="==1.19.0")]


def test_the_hazard_is_flagged_on_its_line_and_the_twin_is_not():
    assert expected(snippet(HAZARD)) and _findings(HAZARD) == expected(snippet(HAZARD))
    assert _findings(TWIN) == []



def _gradients(module, wp, np):
    """(AD, central differences) of the loss by gravity and by a shift of every particle's height."""
    rng = np.random.default_rng(7)
    x0 = np.zeros((11, 3))
    v0 = np.zeros((11, 3))
    x0[:8] = [0.2, 1.0, -0.3]  # environment 0: eight identical particles, tied at every step
    v0[:8] = [0.5, 3.0, 0.0]
    x0[8:] = rng.uniform(0.0, 1.0, size=(3, 3))
    v0[8:] = rng.uniform(1.0, 2.0, size=(3, 3))
    env_of = wp.array(np.r_[np.zeros(8), np.ones(3)].astype(np.int32), dtype=int, device="cpu")

    def loss(x, g, grad=False):
        arrays = (wp.array(x, dtype=wp.vec3d, requires_grad=grad, device="cpu"),
                  wp.array(v0, dtype=wp.vec3d, device="cpu"),
                  wp.array([g], dtype=wp.float64, requires_grad=grad, device="cpu"))
        with wp.ScopedDevice("cpu"):
            if grad:
                return module.gradients(*arrays, env_of, 2, T, TARGET)
            return float(module.loss_of(*arrays, env_of, 2, T, TARGET).numpy()[0])

    up = np.zeros_like(x0)
    up[:, 1] = STEP
    autodiff = loss(x0, 9.81, grad=True)
    finite = ((loss(x0, 9.81 + STEP) - loss(x0, 9.81 - STEP)) / (2 * STEP),
              (loss(x0 + up, 9.81) - loss(x0 - up, 9.81)) / (2 * STEP))
    return np.array(autodiff), np.array(finite)


def test_the_hazard_multiplies_the_tied_gradient_and_the_twin_is_right(tmp_path):
    """Measured on 1.19.0 (and the same on 1.12.1): the hazard's gradients by gravity and by a
    common height shift are about eight times too large (eight tied particles); the twin's match."""
    wp = pytest.importorskip("warp")
    np = pytest.importorskip("numpy")
    wp.config.quiet = True
    hazard_ad, hazard_fd = _gradients(load_module(HAZARD, "wl118_hazard", tmp_path), wp, np)
    twin_ad, twin_fd = _gradients(load_module(TWIN, "wl118_twin", tmp_path), wp, np)
    assert np.allclose(hazard_fd, twin_fd, rtol=1e-6), "the same loss"
    assert np.allclose(twin_ad, twin_fd, rtol=1e-5, atol=1e-8), (twin_ad, twin_fd)
    assert not np.allclose(hazard_ad, hazard_fd, rtol=0.5), (hazard_ad, hazard_fd)
    assert abs(hazard_ad[0]) > 3 * abs(hazard_fd[0]), (hazard_ad, hazard_fd)


SPELLINGS = [
    # (body, flagged)
    ("wp.atomic_max(out, i, value=x[i] * x[i])", False),  # the thread's own slot
    ("wp.atomic_min(out, 0, value=x[i])", True),
    ("wp.atomic_max(out, i // 4, wp.abs(x[i]))", True),
    ("wp.atomic_max(out, 0, 1.5)", False),  # a constant: no gradient
    ("wp.atomic_max(out, 0, x[i] * scale)", True),
    ("wp.atomic_max(out, 0, scale)", False),  # a kernel's scalar argument: its adjoint is never returned
    ("for k in range(2):\n        wp.atomic_max(out, i, x[i] * float(k))", True),  # two passes reach one slot
]


@pytest.mark.parametrize(("body", "flagged"), SPELLINGS, ids=[s[0].split("(")[0] + str(n) for n, s in
                                                               enumerate(SPELLINGS)])
def test_spellings(body, flagged):
    code = f"""
import warp as wp


@wp.kernel
def reduce(x: wp.array(dtype=float), scale: float, out: wp.array(dtype=float)):
    i = wp.tid()
    {body}
"""
    assert [f.code for f in lint_code(code, select=["WL118"])] == (["WL118"] if flagged else [])


def test_a_grid_index_made_of_every_thread_component_is_the_threads_own_slot():
    code = """
import warp as wp


@wp.kernel
def keep(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float), rows: wp.array2d(dtype=float)):
    i, j = wp.tid()
    wp.atomic_max(out, j, i, x[i, j] * 2.0)
    wp.atomic_max(rows, i, 0, x[i, j])  # expect: WL118
"""
    assert _findings(code) == expected(snippet(code))


def test_the_returned_old_value_is_named_where_it_is_stored():
    code = """
import warp as wp


@wp.kernel
def track(x: wp.array(dtype=float), best: wp.array(dtype=float), before: wp.array(dtype=float)):
    i = wp.tid()
    before[i] = wp.atomic_max(best, 0, x[i])
"""
    (finding,) = lint_code(code, select=["WL118"])
    assert "the old value it returns gets no gradient" in finding.message


SLOT_WITHOUT_GRADIENT = """
import warp as wp


@wp.kernel
def nearest(x: wp.array(dtype=float), cell: wp.array(dtype=int), closest: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_min(closest, cell[i], wp.abs(x[i]))


@wp.kernel
def energy(x: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i] * x[i])


def step(values, cells):
    x = wp.array(values, dtype=float, requires_grad=True)
    closest = wp.zeros(4, dtype=float, requires_grad=GRAD)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(nearest, len(values), inputs=[x, cells], outputs=[closest])
        wp.launch(energy, len(values), inputs=[x], outputs=[loss])
    tape.backward(loss)
    return x.grad.numpy(), closest.numpy()
"""


@pytest.mark.parametrize("grad", [True, False])
def test_a_slot_array_without_gradient_in_every_recorded_launch_is_forward_only(grad):
    """The gradient a tie multiplies is the slot array's: an array allocated without
    `requires_grad` has none (Warp's adjoint skips the atomic: no `.grad`, no adjoint buffer)."""
    code = SLOT_WITHOUT_GRADIENT.replace("GRAD", str(grad))
    assert [f.code for f in lint_code(code, select=["WL118"])] == (["WL118"] if grad else [])
