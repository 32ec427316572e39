"""Arrays and tapes the host model follows through two spellings of the same object, linted and run.

- A tuple returned by a call (`q, energy, tape = record(values)`): each target is bound to what the
  callee returned in that place, so the caller's `backward()` runs the tape `record` filled and its
  arrays are `record`'s. Before, each target was a new, unknown array.
- A `@property` whose one return is an attribute chain of its object (`body.q` returning
  `self.state.q`): it is walked as that chain, so a write through the property and a read through
  the attribute meet on one array. Before, `body.q` was an array of its own.

Each program records a read, then writes the array before `backward()` (WL211); its twin writes
another array. Both are run on the CPU: the write makes the tape's gradient disagree with the
derivative of what was recorded (3q², q the recorded values), the twin agrees.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import load_module

from warp_lint.testing import lint_code

RETURNED_TUPLE = '''
import warp as wp


@wp.kernel
def stretch(q: wp.array(dtype=wp.float64), energy: wp.array(dtype=wp.float64)):
    i = wp.tid()
    wp.atomic_add(energy, 0, q[i] * q[i] * q[i])


def record(values):
    q = wp.array(values, dtype=wp.float64, requires_grad=True, device="cpu")
    energy = wp.zeros(1, dtype=wp.float64, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(stretch, len(values), inputs=[q], outputs=[energy], device="cpu")
    return q, energy, tape


def gradient(values):
    q, energy, tape = record(values)
    {reset}.fill_(0.5){marker}
    tape.backward(energy)
    return float(energy.numpy()[0]), q.grad.numpy().copy()
'''
PROPERTY = '''
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
VALUES = np.array([0.3, 0.7, 1.1])
MARKER = "  # expect: WL211"
PAIRS = {
    "returned tuple": (RETURNED_TUPLE.format(reset="q", marker=MARKER),
                       RETURNED_TUPLE.format(reset="wp.clone(q)", marker="")),
    "property": (PROPERTY.format(written="q", marker=MARKER), PROPERTY.format(written="scratch", marker="")),
}


@pytest.mark.parametrize("shape", PAIRS)
def test_a_write_to_what_the_tape_read_is_reported_through_the_alias(shape):
    hazard, twin = PAIRS[shape]
    marker = next(n for n, line in enumerate(hazard.lstrip("\n").splitlines(), 1) if "# expect" in line)
    assert [(f.start.line, f.code) for f in lint_code(hazard, select=["WL211"])] == [(marker, "WL211")]
    assert lint_code(twin, select=["WL211"]) == []


@pytest.mark.parametrize("shape", PAIRS)
def test_the_write_makes_the_gradient_wrong_and_the_twin_is_right(shape, tmp_path):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    hazard, twin = PAIRS[shape]
    name = shape.replace(" ", "_")
    right = 3 * VALUES**2  # d/dq of sum q^3 at the values the tape recorded
    assert not np.allclose(load_module(hazard, f"{name}_hazard", tmp_path).gradient(VALUES)[1], right)
    assert np.allclose(load_module(twin, f"{name}_twin", tmp_path).gradient(VALUES)[1], right)


def test_properties_that_return_one_another_end_the_walk():
    """`a` returning `self.b` and `b` returning `self.a` recurse forever in Python; the walk stops
    after a bounded number of properties and the file is linted."""
    program = '''
import warp as wp


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


class Loop:
    @property
    def a(self):
        return self.b

    @property
    def b(self):
        return self.a


def run(loop, y):
    tape = wp.Tape()
    with tape:
        wp.launch(square, 3, inputs=[loop.a], outputs=[y])
    loop.a.fill_(0.0)
    tape.backward(grads={y: y})
'''
    assert [f.code for f in lint_code(program, select=["WL211"])] == ["WL211"]
