"""A `gradcheck_tape` that checks nothing: the tape overwrites an array between two launches (WL201).

`wp.autograd.gradcheck_tape` compares each recorded launch alone with finite differences of that
launch, on the arrays as they are when it runs, so it passes a tape whose gradient is wrong because
a later launch overwrote what an earlier one read. WL201 reports the overwrite and says the check
passes; the twin writes into its own buffer and is clean. Both are run: the hazard's tape gradient
disagrees with central differences of the whole program while `gradcheck_tape` returns True.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import load_module

from warp_lint.testing import lint_code

PROGRAM = '''
import numpy as np
import warp as wp
from warp.autograd import gradcheck_tape


@wp.kernel
def bend(q: wp.array(dtype=wp.float64), energy: wp.array(dtype=wp.float64)):
    i = wp.tid()
    energy[i] = wp.cos(q[i]) * q[i]


@wp.kernel
def total_squared(energy: wp.array(dtype=wp.float64), loss: wp.array(dtype=wp.float64)):
    i = wp.tid()
    wp.atomic_add(loss, 0, energy[i] * energy[i])


@wp.kernel
def relax(q: wp.array(dtype=wp.float64), energy: wp.array(dtype=wp.float64)):
    i = wp.tid()
    energy[i] = wp.float64(0.5) * q[i]


def record(values):
    q = wp.array(values, dtype=wp.float64, requires_grad=True, device="cpu")
    energy = wp.zeros(3, dtype=wp.float64, requires_grad=True, device="cpu")
    relaxed = wp.zeros(3, dtype=wp.float64, requires_grad=True, device="cpu")
    loss = wp.zeros(1, dtype=wp.float64, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(bend, 3, inputs=[q], outputs=[energy], device="cpu")
        wp.launch(total_squared, 3, inputs=[energy], outputs=[loss], device="cpu")
        wp.launch(relax, 3, inputs=[q], outputs=[{relaxed}], device="cpu"){marker}
    return q, loss, tape


def check(values):
    q, loss, tape = record(values)
    tape.backward(loss)
    gradient = q.grad.numpy().copy()
    passed = gradcheck_tape(tape, raise_exception=False, show_summary=False)
    return float(loss.numpy()[0]), gradient, passed
'''
HAZARD = PROGRAM.format(relaxed="energy", marker="  # expect: WL201")
TWIN = PROGRAM.format(relaxed="relaxed", marker="")
VALUES = np.array([0.3, 0.7, 1.1])


def test_the_overwrite_is_reported_with_the_check_that_passes_it_and_the_twin_is_clean():
    found = lint_code(HAZARD, select=["WL201"], target="==1.19.0")
    marker = next(n for n, line in enumerate(HAZARD.lstrip("\n").splitlines(), 1) if "# expect" in line)
    check_line = next(n for n, line in enumerate(HAZARD.lstrip("\n").splitlines(), 1) if "passed = " in line)
    assert [f.start.line for f in found] == [marker]
    assert "`gradcheck_tape` (line" in found[0].message and "passes" in found[0].message
    related = [(r.message, r.start.line) for r in found[0].related]
    assert ("`gradcheck_tape` passes this tape here", check_line) in related
    assert lint_code(TWIN, select=["WL201"], target="==1.19.0") == []



def _central_difference(check, values, step=1e-6):
    gradient = np.zeros_like(values)
    for k in range(len(values)):
        shift = np.zeros_like(values)
        shift[k] = step
        gradient[k] = (check(values + shift)[0] - check(values - shift)[0]) / (2 * step)
    return gradient


def test_gradcheck_tape_passes_the_wrong_gradient_and_the_right_one(tmp_path):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    hazard = load_module(HAZARD, "vacuous_check_hazard", tmp_path)
    _, gradient, passed = hazard.check(VALUES)
    assert passed  # the check that checks nothing
    assert not np.allclose(gradient, _central_difference(hazard.check, VALUES), rtol=1e-4)
    twin = load_module(TWIN, "vacuous_check_twin", tmp_path)
    _, gradient, passed = twin.check(VALUES)
    assert passed
    assert np.allclose(gradient, _central_difference(twin.check, VALUES), rtol=1e-4)
