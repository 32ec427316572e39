"""WL117 and its table: which builtins Warp does not differentiate comes from Warp's registry, and
each reported one is measured on the CPU (tape against central differences) beside a near miss."""

from __future__ import annotations

import importlib.util

import pytest

from warp_lint.rules.wl117_nondifferentiable_builtin import DERIVATIVE_NOT_ZERO, NO_GRADIENT_TO_LOSE, UNDECIDED
from warp_lint.testing import lint_code
from warp_lint.warp_builtins import not_differentiable, registry_entries
from warp_lint.warp_builtins_table import NOT_DIFFERENTIABLE

wp = pytest.importorskip("warp")
np = pytest.importorskip("numpy")

TILE = 8


def test_the_installed_warp_agrees_with_the_table():
    """The table is generated from each release's registry; the installed release must be in it
    and read the same (`python -m warp_lint.warp_builtins` adds a new one)."""
    assert wp.__version__ in NOT_DIFFERENTIABLE, "run `python -m warp_lint.warp_builtins` for this release"
    assert registry_entries(wp) == NOT_DIFFERENTIABLE[wp.__version__]


def test_every_builtin_of_the_table_is_classified_once():
    listed = set().union(*NOT_DIFFERENTIABLE.values())
    classes = [set(DERIVATIVE_NOT_ZERO), set(UNDECIDED), set(NO_GRADIENT_TO_LOSE)]
    assert listed == set().union(*classes), "classify the new builtins in WL117's sets"
    assert sum(len(c) for c in classes) == len(set().union(*classes)), "a builtin in two sets"


def test_releases_are_read_per_builtin_and_target():
    assert "1.12.1" in not_differentiable("frac") and "1.19.0" in not_differentiable("frac")
    assert not_differentiable("frac", ">=1.17") == {"1.17.0": "all", "1.19.0": "all"}
    assert not_differentiable("mod")["1.19.0"] == ["vector"]
    assert not_differentiable("sqrt") == {}


KERNELS = """
import warp as wp

TILE = 8


@wp.kernel
def run(x: wp.array(dtype=DTYPE), y: wp.array(dtype=float)):
    i = wp.tid()
    BODY
"""

# (builtin, body as flagged, body as its near miss, dtype, tiled)
CASES = [
    ("frac", "y[i] = 2.0 * wp.frac(x[i])", "y[i] = 2.0 * (x[i] - wp.trunc(x[i]))", "float", False),
    ("mod", "m = wp.mod(x[i], wp.vec3(10.0, 10.0, 10.0))\n    y[i] = m[0] + m[1]",
     "y[i] = wp.mod(x[i][0], 10.0) + wp.mod(x[i][1], 10.0)", "wp.vec3", False),
    ("atomic_exch", "wp.atomic_exch(y, i, 2.0 * x[i])", "y[i] = 2.0 * x[i]", "float", False),
    ("tile_max", "t = wp.tile_load(x, shape=TILE)\n    wp.tile_store(y, wp.tile_max(t))",
     "t = wp.tile_load(x, shape=TILE)\n    wp.tile_store(y, wp.tile_sum(t))", "float", True),
    ("tile_scan_inclusive", "t = wp.tile_load(x, shape=TILE)\n    wp.tile_store(y, wp.tile_scan_inclusive(t))",
     "t = wp.tile_load(x, shape=TILE)\n    wp.tile_store(y, t * 2.0)", "float", True),
]


def _gradients(module, dtype, tiled):
    """The tape's gradient of a weighted sum of the outputs and central differences of it."""
    rng = np.random.default_rng(0)
    shape = (TILE, 3) if dtype == "wp.vec3" else (TILE,)
    x0 = rng.uniform(1.1, 4.9, size=shape)
    weights = rng.uniform(0.5, 1.5, size=TILE).astype(np.float32)
    warp_dtype = wp.vec3 if dtype == "wp.vec3" else float

    def run(values, tape=None):
        x = wp.array(values.astype(np.float32), dtype=warp_dtype, requires_grad=True, device="cpu")
        y = wp.zeros(TILE, dtype=float, requires_grad=True, device="cpu")

        def launch():
            if tiled:
                wp.launch_tiled(module.run, dim=[1], inputs=[x], outputs=[y], block_dim=TILE, device="cpu")
            else:
                wp.launch(module.run, TILE, inputs=[x], outputs=[y], device="cpu")
        if tape is None:
            launch()
            return float((y.numpy() * weights).sum())
        with tape:
            launch()
        tape.backward(grads={y: wp.array(weights, dtype=float, device="cpu")})
        return x.grad.numpy().reshape(-1)

    autodiff = run(x0, wp.Tape())
    flat, finite = x0.reshape(-1), []
    for j in range(flat.size):
        step = np.zeros_like(flat)
        step[j] = 1e-3
        finite.append((run((flat + step).reshape(shape)) - run((flat - step).reshape(shape))) / 2e-3)
    return autodiff, np.array(finite)


@pytest.mark.parametrize(("builtin", "flagged", "near", "dtype", "tiled"), CASES, ids=[c[0] for c in CASES])
def test_a_flagged_builtin_gives_zero_where_its_near_miss_is_right(builtin, flagged, near, dtype, tiled, tmp_path):
    for body, hazard in ((flagged, True), (near, False)):
        code = KERNELS.replace("DTYPE", dtype).replace("BODY", body)
        found = lint_code(code, select=["WL117"], target="==1.19.0")
        assert [f"`wp.{builtin}`" in f.message for f in found] == ([True] if hazard else []), (body, found)
        path = tmp_path / f"{builtin}_{int(hazard)}.py"
        path.write_text(code)
        spec = importlib.util.spec_from_file_location(f"wl117_{builtin}_{int(hazard)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        autodiff, finite = _gradients(module, dtype, tiled)
        assert np.abs(finite).max() > 0.5, "the example has a gradient to lose"
        if hazard:
            assert np.allclose(autodiff, 0.0), autodiff
        else:
            assert np.allclose(autodiff, finite, atol=2e-2), (autodiff, finite)


def test_a_builtin_on_a_value_without_gradient_is_not_reported():
    code = KERNELS.replace("DTYPE", "float").replace("BODY", "y[i] = x[i] * wp.frac(float(i) * 0.37)")
    assert lint_code(code, select=["WL117"]) == []


CONFIRMED = """
import warp as wp


@wp.kernel
def wrap(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = 2.0 * wp.frac(x[i])


@wp.kernel
def swap_in(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_exch(y, i, 2.0 * x[i])
"""


def test_confirm_decides_with_the_differentiable_form_as_counterfactual(tmp_path):
    """`--confirm` runs each kernel: AD is zero where finite differences are 2, and the same
    statement in its differentiable form (`x - wp.trunc(x)`, a plain store) is right."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "wrap.py").write_text(CONFIRMED)
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-m", "warp_lint", "check", "--no-cache", "--confirm", "--device", "cpu",
                             "--select", "WL117", "--report-contexts", "all", "--output-format", "json", "wrap.py"],
                            cwd=tmp_path, capture_output=True, text=True, env=environment, timeout=900)
    findings = json.loads(result.stdout)
    assert [f["location"]["row"] for f in findings] == [8, 14], result.stderr[-2000:]
    for finding in findings:
        confirmation = finding["confirmation"]
        assert confirmation["status"] == "confirmed", confirmation["reason"]
        assert "AD is identically zero while FD is not" in confirmation["reason"]


TWO_OUTPUTS = """
import numpy as np
import warp as wp


@wp.kernel
def split(x: wp.array(dtype=float), whole: wp.array(dtype=float), fraction: wp.array(dtype=float)):
    i = wp.tid()
    whole[i] = 3.0 * x[i]
    fraction[i] = wp.frac(x[i])


def gradient(values):
    x = wp.array(values, dtype=float, requires_grad=True)
    whole = wp.zeros(len(values), dtype=float, requires_grad=True)
    fraction = wp.zeros(len(values), dtype=float, requires_grad=GRAD)
    tape = wp.Tape()
    with tape:
        wp.launch(split, len(values), inputs=[x], outputs=[whole, fraction])
    tape.backward(grads={whole: wp.ones_like(whole), **({fraction: wp.ones_like(fraction)} if GRAD else {})})
    return x.grad.numpy()
"""


@pytest.mark.parametrize("grad", [True, False])
def test_a_builtin_whose_value_reaches_only_outputs_without_gradients_is_forward_only(grad, tmp_path):
    """`fraction` allocated without `requires_grad` in every recorded launch: no gradient enters
    it, so none is lost through `wp.frac` (the gradient of `x` is 3, all from `whole`, measured).
    With `requires_grad` and a seed on it, `x` should get 4 and gets 3: WL117 is reported."""
    code = TWO_OUTPUTS.replace("GRAD", str(grad))
    assert [f.code for f in lint_code(code, select=["WL117"])] == (["WL117"] if grad else [])
    path = tmp_path / f"two_outputs_{int(grad)}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(f"two_outputs_{int(grad)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert np.allclose(module.gradient(np.array([1.25, 2.5], dtype=np.float32)), 3.0)  # 4.0 were right with GRAD


def test_a_builtin_whose_value_is_only_printed_is_not_reported():
    code = KERNELS.replace("DTYPE", "float").replace(
        "BODY", 'wp.printf("%f\\\\n", wp.frac(x[i]))\n    y[i] = x[i]')
    assert lint_code(code, select=["WL117"]) == []
    assert [f.code for f in lint_code(code.replace("y[i] = x[i]", "wp.tile_store(y, wp.tile_max(wp.tile_load(x, shape=8)))"),
                                      select=["WL117"])] == ["WL117"]
