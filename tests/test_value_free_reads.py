"""A read whose value no adjoint uses may be overwritten: an element read only for its type.

Generic helpers take an argument for its type alone (`zero_like(y[i])` returning `type(v)() * 0.0`,
one overload per type, some of them taking an array only to read `type(a[0])`). The value read
there reaches no result, so the backward pass replays the read but uses nothing it returns, and
storing into the same element afterwards changes no gradient. The model tells it from the helper's
dataflow (``dataflow.parameter_roles``: a parameter whose value reaches no result), across files
through the helper's facts, every overload agreeing; `type(...)` reads no value.

Measured on the CPU (tape against central differences): the program that zeroes its accumulator
with such a helper and then overwrites the element it read is right, and not reported; its twin,
whose helper squares the value, is wrong and reported (WL102).
"""

from __future__ import annotations

import pytest
from programs import expected, findings, measure, write_program

HELPERS = """
from typing import Any

import warp as wp


@wp.func
def zero_like(value: Any):
    return type(value)() * 0.0


@wp.func
def zero_like(value: wp.float32):
    return wp.float32(0.0)


@wp.func
def zero_like(values: wp.array(dtype=Any)):
    return type(values[0])() * 0.0


@wp.func
def squared(value: Any):
    return value * value
"""

TRAIN = """
import warp as wp

from helpers import HELPER


@wp.kernel
def copy(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i]


@wp.kernel
def accumulate_square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    total = HELPER(y[i])
    for k in range(3):
        total += x[i] * x[i]
    y[i] = totalMARKER


@wp.kernel
def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i])


def main(values):
    n = len(values)
    x = wp.array(values, dtype=float, requires_grad=True)
    y = wp.zeros(n, dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(copy, n, inputs=[x], outputs=[y])
        wp.launch(accumulate_square, n, inputs=[x], outputs=[y])
        wp.launch(total, n, inputs=[y], outputs=[loss])
    tape.backward(loss)
    return float(loss.numpy()[0]), x.grad.numpy().copy()
"""

PROGRAMS = {
    "type-only": {"helpers.py": HELPERS, "train.py": TRAIN.replace("HELPER", "zero_like").replace("MARKER", "")},
    "value-needed": {"helpers.py": HELPERS,
                     "train.py": TRAIN.replace("HELPER", "squared").replace("MARKER", "  # expect: WL102")},
}
MEASURED = {"type-only": "match", "value-needed": "wrong"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("value_free_reads")
    return {name: write_program(root / name, files) for name, files in PROGRAMS.items()}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_an_overwrite_is_reported_only_where_an_adjoint_uses_the_value_read(name, folders, tmp_path):
    assert findings(folders[name], tmp_path) == expected(folders[name])


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_linted_alone_the_file_gets_the_same_answer(name, folders, tmp_path):
    train = folders[name] / "train.py"
    alone = [(row, code) for _, row, code in findings(train, tmp_path)]
    assert alone == [(row, code) for _, row, code in expected(folders[name])]


@pytest.mark.parametrize(("name", "verdict"), list(MEASURED.items()))
def test_the_gradient_is_as_the_findings_say(name, verdict, folders, tmp_path):
    pytest.importorskip("warp")
    measured = measure(folders, [name], tmp_path)
    assert measured[name]["verdict"] == verdict, measured[name]
