"""A program that runs its kernels and records none: what the model cannot follow is no recording.

*Unknown* means a recording of the project may reach a definition through something the model
could not follow. In a project that launches kernels and has no recording anywhere (no tape opened
or run, no gradient check, no adjoint launch), there is none to reach: only its users' own tapes
could differentiate such a definition, as they may the public API, so it is *public* and, by the
measured default, not reported. A project that records somewhere keeps its *unknown* ones; a file
of kernels alone, which launches nothing yet, says nothing of how they will run and keeps them too.
"""

from __future__ import annotations

import pytest
from programs import expected, explain, findings, line_of, write_program

from warp_lint.cli import main as warp_lint

# A func made in one object's constructor and called from a kernel another object makes: the model
# cannot follow the attribute, so it cannot tell whether a recording reaches the func.
OPERATORS = """
import warp as wp


class Helpers:
    def __init__(self):
        @wp.func
        def squared_first(v: wp.vec3):
            v[0] = v[0] * v[0]{marker}
            return v

        self.squared_first = squared_first


class Operator:
    def __init__(self, helpers):
        squared_first = helpers.squared_first

        @wp.kernel
        def apply(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=wp.vec3)):
            i = wp.tid()
            y[i] = squared_first(x[i])

        self.kernel = apply

    def __call__(self, x, y):
        wp.launch(self.kernel, len(x), inputs=[x], outputs=[y])
"""

# Somewhere else in the project, a tape records and runs backward.
TRAIN = """
import warp as wp


@wp.kernel
def total(x: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i] * x[i])


def main(values):
    x = wp.array(values, dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(total, len(values), inputs=[x], outputs=[loss])
    tape.backward(loss)
    return x.grad.numpy()
"""

KERNELS_ONLY = """
import warp as wp


@wp.func
def squared_first(v: wp.vec3):
    v[0] = v[0] * v[0]  # expect: WL103
    return v
"""

PROGRAMS = {
    "forward-only": {"ops/__init__.py": "from .operators import Helpers, Operator\n",
                     "ops/operators.py": OPERATORS.format(marker="")},
    "records-elsewhere": {"ops/__init__.py": "from .operators import Helpers, Operator\n",
                          "ops/operators.py": OPERATORS.format(marker="  # expect: WL103"), "train.py": TRAIN},
    "kernels-only": {"helpers.py": KERNELS_ONLY},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("forward_only")
    return {name: write_program(root / name, files) for name, files in PROGRAMS.items()}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_unknown_is_reported_only_where_the_project_records(name, folders, tmp_path):
    assert findings(folders[name], tmp_path) == expected(folders[name])


def test_explain_says_the_project_records_nothing(folders, capsys):
    operators = folders["forward-only"] / "ops" / "operators.py"
    out = explain(operators, "v[0] = v[0]", capsys)
    assert ": public" in out and "nothing in the project records a tape" in out, out
    warp_lint(["check", "--no-cache", "--report-contexts", "public", "--output-format", "concise",
               str(folders["forward-only"])])
    assert f"operators.py:{line_of(operators, 'v[0] = v[0]')}:" in capsys.readouterr().out  # found, and hidden by default only for its context
