"""WL305: `jacobian()` of a kernel in a module that turns backward off, linted and run.

The hazard (zeros, no error) is in Warp before 1.17; the rule is silent for newer targets, and this
test measures why on the installed Warp: from 1.17 `jacobian` raises for such a kernel, while the
twin (backward on) gives the right Jacobian. Under an older Warp the runtime test takes its other
branch and asserts the silent zero Jacobian (measured on 1.12.1 with the same program: the rule's
page gives the figures).
"""

from __future__ import annotations

import textwrap

import pytest
from packaging.version import Version
from programs import load_module

from warp_lint.testing import lint_code

PROGRAM = '''
import numpy as np
import warp as wp
import warp.autograd
{options}

@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def check_square():
    x = wp.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True, device="cpu")
    y = wp.zeros(3, dtype=float, requires_grad=True, device="cpu")
    jacobians = wp.autograd.jacobian(square, dim=3, inputs=[x], outputs=[y], plot_jacobians=False){marker}
    return jacobians[0, 0].numpy()
'''
HAZARD = PROGRAM.format(options='wp.set_module_options({"enable_backward": False})', marker="  # expect: WL305")
TWIN = PROGRAM.format(options="", marker="")


def _codes(text: str, target: str) -> list[tuple[int, str]]:
    return [(f.start.line, f.code) for f in lint_code(text, select=["WL305"], target=target)]


def test_the_hazard_is_flagged_for_old_warp_and_its_twin_is_not():
    marker = next(n for n, line in enumerate(textwrap.dedent(HAZARD).lstrip("\n").splitlines(), 1) if "expect" in line)
    assert _codes(HAZARD, "==1.16.0") == [(marker, "WL305")]
    assert _codes(HAZARD, "==1.19.0") == []
    assert _codes(TWIN, "==1.16.0") == []



def test_installed_warp_raises_for_the_hazard_and_measures_the_twin(tmp_path):
    import numpy as np

    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    twin = load_module(TWIN, "wl305_twin", tmp_path)
    assert np.allclose(twin.check_square(), np.diag([2.0, 4.0, 6.0]))
    hazard = load_module(HAZARD, "wl305_hazard", tmp_path)
    if Version(wp.config.version) >= Version("1.17"):
        with pytest.raises(ValueError, match="backward"):
            hazard.check_square()
    else:  # the rule's hazard: a silent zero Jacobian
        assert np.allclose(hazard.check_square(), 0.0)
