"""An array reached through a `@property` (`body.q` returning `self.state.q`) is that same array.

The recording walks a property whose one return is an attribute chain of its object as that chain,
so a write through the property and a read through the attribute (or the reverse) meet on one key.
Before, `body.q` was an array of its own, unknown. The program records a read of `body.state.q`
and writes `body.q` before `backward()` (WL211); its twin writes another property's array. Both
are run: the write makes the tape's gradient disagree with the derivative of what was recorded,
the twin agrees.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import load_module

from warp_lint.testing import lint_code

PROGRAM = '''
import warp as wp


@wp.kernel
def cube_sum(q: wp.array(dtype=wp.float64), energy: wp.array(dtype=wp.float64)):
    i = wp.tid()
    wp.atomic_add(energy, 0, q[i] * q[i] * q[i])


class State:
    def __init__(self, values):
        self.q = wp.array(values, dtype=wp.float64, requires_grad=True, device="cpu")
        self.scratch = wp.zeros(len(values), dtype=wp.float64, device="cpu")


class Body:
    def __init__(self, values):
        self.state = State(values)

    @property
    def q(self):
        return self.state.q

    @property
    def scratch(self):
        return self.state.scratch


def gradient(values):
    body = Body(values)
    energy = wp.zeros(1, dtype=wp.float64, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(cube_sum, len(values), inputs=[body.state.q], outputs=[energy], device="cpu")
    body.{written}.fill_(0.5){marker}
    tape.backward(energy)
    return float(energy.numpy()[0]), body.state.q.grad.numpy().copy()
'''
HAZARD = PROGRAM.format(written="q", marker="  # expect: WL211")
TWIN = PROGRAM.format(written="scratch", marker="")
VALUES = np.array([0.3, 0.7, 1.1])


def test_a_write_through_a_property_to_what_the_tape_read_is_reported():
    marker = next(n for n, line in enumerate(HAZARD.lstrip("\n").splitlines(), 1) if "# expect" in line)
    assert [(f.start.line, f.code) for f in lint_code(HAZARD, select=["WL211"])] == [(marker, "WL211")]
    assert lint_code(TWIN, select=["WL211"]) == []


def test_the_write_makes_the_gradient_wrong_and_the_twin_is_right(tmp_path):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    right = 3 * VALUES**2  # d/dq of sum q^3 at the values the tape recorded
    hazard = load_module(HAZARD, "property_alias_hazard", tmp_path)
    assert not np.allclose(hazard.gradient(VALUES)[1], right)  # the adjoint read q = 0.5
    twin = load_module(TWIN, "property_alias_twin", tmp_path)
    assert np.allclose(twin.gradient(VALUES)[1], right)
