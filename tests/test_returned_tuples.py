"""A tape and arrays handed back as a tuple (`q, loss, tape = record(x)`) are the caller's same tape and arrays.

The recording binds each target of a tuple assignment from a call to what the callee returned in
that place, so host rules see a `backward()`, a write or a gradient check in the caller as acting
on the arrays and tape the callee recorded. Before, each target was a new, unknown array: the
caller's `tape.backward(loss)` named no known tape. The program below records in one function and
differentiates in another; a write between them (WL211) is reported, its twin (the write goes to a
copy) is not, and both are run: the write makes the tape's gradient disagree with the derivative
of what was recorded (3q², q the recorded values), the twin agrees.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import load_module

from warp_lint.testing import lint_code

PROGRAM = '''
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
HAZARD = PROGRAM.format(reset="q", marker="  # expect: WL211")
TWIN = PROGRAM.format(reset="wp.clone(q)", marker="")
VALUES = np.array([0.3, 0.7, 1.1])


def test_a_write_between_a_returned_tape_and_its_backward_is_reported():
    marker = next(n for n, line in enumerate(HAZARD.lstrip("\n").splitlines(), 1) if "# expect" in line)
    assert [(f.start.line, f.code) for f in lint_code(HAZARD, select=["WL211"])] == [(marker, "WL211")]
    assert lint_code(TWIN, select=["WL211"]) == []



def test_the_write_makes_the_gradient_wrong_and_the_twin_is_right(tmp_path):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    right = 3 * VALUES**2  # d/dq of sum q^3 at the values the tape recorded
    hazard = load_module(HAZARD, "returned_tuple_hazard", tmp_path)
    assert not np.allclose(hazard.gradient(VALUES)[1], right)  # the adjoint read q = 0.5: 0.75 each
    twin = load_module(TWIN, "returned_tuple_twin", tmp_path)
    assert np.allclose(twin.gradient(VALUES)[1], right)
