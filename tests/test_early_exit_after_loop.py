"""WL107: a flag found in a dynamic loop decides an early exit (`if not hit: continue`), linted and run.

Each body scans its contacts in a `range(count)` loop for a penetration, then skips the rest of its
pass when there is none and otherwise applies an impulse built from its velocity. Warp's backward
pass does not replay the scan before the code after it: the flag is `False` there, the adjoint
skips the impulse, and the velocities get no gradient. The twin finds the flag in a @wp.func that
holds the loop, whose call the adjoint replays. Both are linted (the hazard flagged on its `if`,
the twin clean) and run on the CPU against central differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import load_module

from warp_lint.testing import lint_code

PROGRAM = '''
import warp as wp

f64 = wp.float64
{helper}

@wp.kernel
def contact_impulse(depth: wp.array(dtype=f64), velocity: wp.array(dtype=f64), count: int,
                    impulse: wp.array(dtype=f64)):
    for body in range(2):
{scan}
        wp.atomic_add(impulse, 0, velocity[body] * velocity[body] * f64(0.5))


def total_impulse(velocities, depths):
    velocity = wp.array(velocities, dtype=f64, requires_grad=True, device="cpu")
    depth = wp.array(depths, dtype=f64, device="cpu")
    impulse = wp.zeros(1, dtype=f64, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(contact_impulse, 1, inputs=[depth, velocity, len(depths)], outputs=[impulse], device="cpu")
    tape.backward(impulse)
    return float(impulse.numpy()[0]), velocity.grad.numpy().copy()
'''
HAZARD = PROGRAM.format(helper="", scan='''        hit = int(0)
        for k in range(count):
            if depth[k] < f64(0.0):
                hit = 1
        if hit == 0:  # expect: WL107
            continue''')
TWIN = PROGRAM.format(helper='''

@wp.func
def penetrates(depth: wp.array(dtype=f64), count: int):
    hit = int(0)
    for k in range(count):
        if depth[k] < f64(0.0):
            hit = 1
    return hit
''', scan='''        if penetrates(depth, count) == 0:
            continue''')
VELOCITIES = np.array([0.4, -1.3, 0.8])
DEPTHS = np.array([0.2, -0.05, 0.1])


def test_the_early_exit_is_flagged_and_the_twin_is_not():
    marker = next(n for n, line in enumerate(HAZARD.lstrip("\n").splitlines(), 1) if "# expect" in line)
    found = lint_code(HAZARD, select=["WL107"], target="==1.19.0")
    assert [(f.start.line, f.code) for f in found] == [(marker, "WL107")]
    assert "may leave there (`continue`)" in found[0].message
    assert lint_code(TWIN, select=["WL107"], target="==1.19.0") == []


def _central_difference(module, step=1e-6):
    gradient = np.zeros_like(VELOCITIES)
    for k in range(len(VELOCITIES)):
        shift = np.zeros_like(VELOCITIES)
        shift[k] = step
        gradient[k] = (module.total_impulse(VELOCITIES + shift, DEPTHS)[0]
                       - module.total_impulse(VELOCITIES - shift, DEPTHS)[0]) / (2 * step)
    return gradient


def test_the_hazard_loses_the_gradient_and_the_twin_keeps_it(tmp_path):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    hazard = load_module(HAZARD, "early_exit_hazard", tmp_path)
    expected = _central_difference(hazard)
    assert np.allclose(expected, [0.4, -1.3, 0.0])  # the two bodies that run the impulse
    assert np.allclose(hazard.total_impulse(VELOCITIES, DEPTHS)[1], 0.0)
    twin = load_module(TWIN, "early_exit_twin", tmp_path)
    assert np.allclose(twin.total_impulse(VELOCITIES, DEPTHS)[1], expected)
