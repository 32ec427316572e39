"""A recording that reaches a launch only through an arm its own arguments skip says so.

Under a tape, the recordings follow an arm that the call's literal fails (`if contacts is not
None:` in `step`, called with `contacts=None`): what the function reaches with other arguments is
what its other callers differentiate. The finding stays, but the tape it cites does not run the
kernel itself, so its context and its note say that the arm is skipped there; where another
recording runs the launch with its own arguments, that recording is the one named.
"""

from __future__ import annotations

import json

import pytest
from programs import write_program

from warp_lint.cli import main as warp_lint

SOLVER = """
import warp as wp


@wp.kernel
def contact_impulse(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]
    x[i] = 0.0


def step(x, y, contacts=None):
    if contacts is not None:
        wp.launch(contact_impulse, len(x), inputs=[x], outputs=[y])
"""

ONLY_WITHOUT = """
import warp as wp

from solver import step


def test_free_fall(x, y, loss):
    tape = wp.Tape()
    with tape:
        step(x, y, contacts=None)
    tape.backward(loss)
"""

ALSO_WITH = ONLY_WITHOUT + """

def test_contacts(x, y, loss, contacts):
    tape = wp.Tape()
    with tape:
        step(x, y, contacts=contacts)
    tape.backward(loss)
"""


@pytest.mark.parametrize(("tests", "skipped"), [(ONLY_WITHOUT, True), (ALSO_WITH, False)])
def test_the_cited_recording_says_whether_its_arguments_run_the_launch(tests, skipped, tmp_path, capsys):
    folder = write_program(tmp_path / "program", {"solver.py": SOLVER, "test_solver.py": tests})
    warp_lint(["check", "--no-cache", "--output-format", "json", "--exit-zero", str(folder)])
    (finding,) = json.loads(capsys.readouterr().out)
    notes = [r["message"] for r in finding["related"]]
    assert finding["code"] == "WL102" and finding["differentiation_context"]["state"] == "differentiated"
    note = "in an arm of `step` that `contacts=None` skips in this recording: callers passing other values reach it"
    assert any(note in n for n in notes) == skipped, notes
    assert (note in finding["differentiation_context"]["reason"]) == skipped
