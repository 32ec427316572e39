"""WL119: tile operations whose adjoint a Warp release gets wrong, as measured version data.

Each case is a small program with the hazard and its twin (the workaround measured right on the old
release). Linted for an old target the hazard is flagged on its marked line and the twin is not;
linted for 1.19.0 neither is. On the installed Warp (1.19.0 in CI) both run on the CPU and the
tape's gradient is compared with central differences: from the fixing release on, both agree.
The old releases' figures are in the rule's docstring (measured with the scripts of its report).
"""

from __future__ import annotations

import textwrap

import pytest
from packaging.version import Version
from programs import load_module

from warp_lint.testing import lint_code

PRELUDE = """
import numpy as np
import warp as wp

N = 8
M = 4
"""

# Two parts of a tile: the assignment's target loses elements 2-5, so x[2:6] has no gradient.
ASSIGN = PRELUDE + """
@wp.kernel
def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
    d = wp.tile_load(x, shape=N, storage="shared")
    s = wp.tile_load(z, shape=M, storage="shared")
    wp.tile_assign(d, s, offset=(2,))  # expect: WL119
    wp.tile_store(y, d)
"""
ASSIGN_TWIN = PRELUDE + """
@wp.kernel
def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
    d = wp.tile_load(x, shape=N)
    wp.tile_store(y, d)
    s = wp.tile_load(z, shape=M)
    wp.tile_store(y, s, offset=2)
"""

# One element replaced: x[1] has no gradient.
ELEMENT = PRELUDE + """
@wp.kernel
def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_load(x, shape=N)
    t[1] = z[0] * 2.0  # expect: WL119
    wp.tile_store(y, t)
"""
ELEMENT_TWIN = PRELUDE + """
@wp.kernel
def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_zeros(shape=N, dtype=float)
    for k in range(N):
        t[k] = wp.where(k == 1, z[0] * 2.0, x[k])
    wp.tile_store(y, t)
"""

# The array stored twice at the same place: only z reaches y.
STORE = PRELUDE + """
@wp.kernel
def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
    a = wp.tile_load(x, shape=N)
    wp.tile_store(y, a)
    b = wp.tile_load(z, shape=N)
    wp.tile_store(y, b)  # expect: WL119
"""
STORE_TWIN = PRELUDE + """
@wp.kernel
def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
    b = wp.tile_load(z, shape=N)
    wp.tile_store(y, b)
"""

# (hazard, twin, an old target that has the bug, the fixing release, the sizes of x and z)
CASES = {
    "tile_assign": (ASSIGN, ASSIGN_TWIN, "==1.11.1", "1.12.0", (8, 4)),
    "element": (ELEMENT, ELEMENT_TWIN, "==1.16.0", "1.17.0", (8, 1)),
    "tile_store": (STORE, STORE_TWIN, "==1.10.0", "1.10.1", (8, 8)),
}


def _codes(text: str, target: str) -> list[tuple[int, str]]:
    return [(f.start.line, f.code) for f in lint_code(text, select=["WL119"], target=target)]


def _marker(text: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1) if "expect" in line)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tile_hazard_is_flagged_for_an_affected_release_only(case):
    hazard, twin, old, fixed, _ = CASES[case]
    assert _codes(hazard.lstrip("\n"), old) == [(_marker(hazard), "WL119")]
    assert _codes(hazard.lstrip("\n"), f"=={fixed}") == []
    assert _codes(hazard.lstrip("\n"), "==1.19.0") == []
    assert _codes(twin.lstrip("\n"), old) == []
    assert _codes(twin.lstrip("\n"), "==1.19.0") == []


def test_tile_store_at_other_offsets_is_not_a_double_store():
    text = PRELUDE + """
@wp.kernel
def halves(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    a = wp.tile_load(x, shape=M)
    wp.tile_store(y, a)
    wp.tile_store(y, a, offset=M)
"""
    assert _codes(text, "==1.9.1") == []


def test_tile_element_write_into_gradient_free_tile_is_silent():
    text = PRELUDE + """
@wp.kernel
def fill(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_zeros(shape=N, dtype=float)
    t[0] = x[0]
    wp.tile_store(y, t)
"""
    assert _codes(text, "==1.16.0") == []



def _gradients(wp, np, kernel, sizes, eps=1e-2):
    """Tape gradient and central differences of loss = sum_i (i + 1) y_i, on the CPU."""
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(0.5, 1.5, n).astype(np.float32) for n in sizes]
    weights = np.arange(1, 9, dtype=np.float32)

    def forward(values, record):
        arrays = [wp.array(v, dtype=float, device="cpu", requires_grad=True) for v in values]
        y = wp.zeros(8, dtype=float, device="cpu", requires_grad=True)
        tape = wp.Tape()
        if record:
            with tape:
                wp.launch_tiled(kernel, dim=[1], inputs=[*arrays, y], block_dim=1, device="cpu")
        else:
            wp.launch_tiled(kernel, dim=[1], inputs=[*arrays, y], block_dim=1, device="cpu")
        return arrays, y, tape

    arrays, y, tape = forward(inputs, True)
    tape.backward(grads={y: wp.array(weights, dtype=float, device="cpu")})
    ad = [a.grad.numpy().copy() for a in arrays]
    fd = []
    for which, value in enumerate(inputs):
        column = np.zeros_like(value)
        for k in range(value.size):
            losses = []
            for step in (eps, -eps):
                shifted = [v.copy() for v in inputs]
                shifted[which][k] += step
                losses.append(float(np.dot(forward(shifted, False)[1].numpy(), weights)))
            column[k] = (losses[0] - losses[1]) / (2 * eps)
        fd.append(column)
    return ad, fd


@pytest.fixture(scope="module")
def warp_cpu(tmp_path_factory):
    """The installed Warp on the CPU; kernels build into this run's own cache (conftest sets
    WARP_CACHE_PATH for the run before Warp is imported)."""
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    wp.init()
    return wp


@pytest.mark.parametrize("case", sorted(CASES))
def test_installed_warp_tile_gradients_against_central_differences(case, warp_cpu, tmp_path):
    import numpy as np

    wp = warp_cpu
    hazard, twin, _, fixed, sizes = CASES[case]
    twin_module = load_module(twin, f"wl119_{case}_twin", tmp_path)
    for ad, fd in zip(*_gradients(wp, np, twin_module.patch, sizes)):
        assert np.allclose(ad, fd, atol=1e-2, rtol=1e-2), (ad, fd)
    hazard_module = load_module(hazard, f"wl119_{case}_hazard", tmp_path)
    agree = all(np.allclose(ad, fd, atol=1e-2, rtol=1e-2)
                for ad, fd in zip(*_gradients(wp, np, hazard_module.patch, sizes)))
    # From the fixing release on, the hazard's gradient is right; before it, the overwritten values
    # keep theirs (the rule's measured figures).
    assert agree == (Version(wp.config.version) >= Version(fixed))
