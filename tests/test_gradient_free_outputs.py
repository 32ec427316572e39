"""Outputs no gradient enters: a kernel whose every gradient-carrying output is an array allocated
without `requires_grad` gets zeros for its adjoint, so what it reads, and how it computes what it
writes there, changes no gradient.

Two faces of that one fact, each a small program measured at run time (tape against central
differences) beside its twin whose output does require gradients:
- a host overwrite (WL201) of an array that only such a kernel read (a diagnostic written beside
  the simulation: contact impulses scaled by a contact count) is no hazard; the twin, whose
  diagnostic is part of the loss, is reported once (the `zero_()` and the count that rebuilds the
  array are one overwrite) and measured wrong;
- a kernel finding (WL104 here) whose value reaches only such outputs is forward-only, and
  `explain` says why; the twin is reported and measured wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from programs import expected, findings, measure, write_program

from warp_lint.cli import main as warp_lint

# The loss: the sum of an array (added once more for an array that is in it).
TOTAL = """
@wp.kernel
def total(x: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i])
""".strip()

CONTACT_COUNT = """
import numpy as np
import warp as wp


@wp.kernel
def count_close(x: wp.array(dtype=float), weight: wp.array(dtype=float)):
    i = wp.tid()
    if x[i] < 1.0:
        wp.atomic_add(weight, 0, 1.0)


@wp.kernel
def record_impulse(x: wp.array(dtype=float), weight: wp.array(dtype=float), impulse: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(impulse, i, x[i] / weight[0])


@wp.kernel
def advance(x: wp.array(dtype=float), x_out: wp.array(dtype=float)):
    i = wp.tid()
    x_out[i] = 1.5 * x[i] + 0.1 * x[i] * x[i]


TOTAL


def main(values):
    n = len(values)
    xs = [wp.array(values, dtype=float, requires_grad=True)]
    xs += [wp.zeros(n, dtype=float, requires_grad=True) for _ in range(2)]
    weight = wp.zeros(1, dtype=float)
    impulse = wp.zeros(n, dtype=float, GRAD)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        for k in range(2):
            weight.zero_()  # EXPECT
            wp.launch(count_close, n, inputs=[xs[k]], outputs=[weight])
            wp.launch(record_impulse, n, inputs=[xs[k], weight], outputs=[impulse])
            wp.launch(advance, n, inputs=[xs[k]], outputs=[xs[k + 1]])
        wp.launch(total, n, inputs=[xs[2]], outputs=[loss])
        IN_LOSS(impulse)
    tape.backward(loss)
    return float(loss.numpy()[0]), xs[0].grad.numpy().copy()
"""

NEAREST = """
import numpy as np
import warp as wp


@wp.kernel
def nearest(x: wp.array(dtype=float), n: int, min_dist: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    best = float(1.0e6)
    for j in range(n):
        if j != i:
            best = wp.min(best, (x[i] - x[j]) * (x[i] - x[j]))  # EXPECT
    min_dist[i] = best
    y[i] = x[i] * x[i]


TOTAL


def main(values):
    n = len(values)
    x = wp.array(values, dtype=float, requires_grad=True)
    min_dist = wp.zeros(n, dtype=float, GRAD)
    y = wp.zeros(n, dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(nearest, n, inputs=[x, n], outputs=[min_dist, y])
        wp.launch(total, n, inputs=[y], outputs=[loss])
        IN_LOSS(min_dist)
    tape.backward(loss)
    return float(loss.numpy()[0]), x.grad.numpy().copy()
"""


def _program(template: str, needed: bool, code: str) -> dict[str, str]:
    """The diagnostic (``needed`` False: allocated without gradients, not in the loss) or its twin,
    which adds it to the loss."""
    text = template.replace("TOTAL", TOTAL).replace("GRAD", "requires_grad=True" if needed else "requires_grad=False")
    lines = []
    for line in text.splitlines():
        if "IN_LOSS(" in line:
            if not needed:
                continue
            array = line.split("IN_LOSS(")[1].rstrip(")")
            line = line.replace(f"IN_LOSS({array})", f"wp.launch(total, n, inputs=[{array}], outputs=[loss])")
        lines.append(line.replace("  # EXPECT", f"  # expect: {code}" if needed else ""))
    return {"train.py": "\n".join(lines) + "\n"}


PROGRAMS = {
    "diagnostic-count": _program(CONTACT_COUNT, False, "WL201"),
    "needed-count": _program(CONTACT_COUNT, True, "WL201"),
    "diagnostic-distance": _program(NEAREST, False, "WL104"),
    "needed-distance": _program(NEAREST, True, "WL104"),
}
MEASURED = {"diagnostic-count": "match", "needed-count": "wrong", "diagnostic-distance": "match",
            "needed-distance": "wrong"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gradient_free")
    return {name: write_program(root / name, files) for name, files in PROGRAMS.items()}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_findings_are_where_the_outputs_take_gradients(name, folders, tmp_path):
    assert findings(folders[name], tmp_path) == expected(folders[name])


def test_an_overwrite_is_reported_once_with_the_reader_that_needs_the_value(folders, tmp_path, capsys):
    warp_lint(["check", "--no-cache", "--output-format", "concise", str(folders["needed-count"])])
    out = capsys.readouterr().out
    assert out.count("WL201") == 1, out
    assert "which kernel `record_impulse`" in out and "wherever they differ from those it read" in out


def test_a_finding_whose_value_reaches_only_outputs_without_gradients_is_forward_only(folders, capsys):
    path = folders["diagnostic-distance"] / "train.py"
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "best = wp.min" in text)
    warp_lint(["check", "--no-cache", "--report-contexts", "all", "--output-format", "concise", str(path.parent)])
    out = capsys.readouterr().out
    assert f"train.py:{line}:" in out and "WL104" in out  # found, and hidden by default only for its context
    warp_lint(["explain", "--no-cache", f"{path}:{line}"])
    out = capsys.readouterr().out
    assert "forward-only" in out and "reaches only `min_dist`" in out, out


@pytest.fixture(scope="module")
def measured(folders, tmp_path_factory) -> dict[str, dict]:
    pytest.importorskip("warp")
    return measure(folders, MEASURED, tmp_path_factory.mktemp("manifest"))


@pytest.mark.parametrize(("name", "verdict"), list(MEASURED.items()))
def test_the_gradient_is_as_the_findings_say(name, verdict, measured):
    assert measured[name]["verdict"] == verdict, measured[name]
