"""Safe forms applied together: the rewrites the counterfactual and the isolation build."""

from __future__ import annotations

import re
import textwrap

import pytest

from warp_lint.runtime.rewrite import (
    MIN_GUESSED_TRIPS,
    STATIC_ALL_LOOPS,
    UNROLL,
    UNROLL_STATEMENTS,
    RewriteError,
    instrument,
    instrument_in_setting,
    safe_forms,
)

# newton's SVD: line 5 is flagged twice (a selection that divides, a component write in a loop),
# and line 3 holds a selection of another type.
SOURCE = textwrap.dedent('''
    def svd_tail(at: Any, sigma: float, n: int):
        ut = wp.identity(n=4, dtype=float)
        ratio = wp.where(sigma > 0.0, 1.0 / sigma, 0.0)
        for i in range(n):
            ut[i] = wp.where(sigma > 1.0e-12, at[i] / sigma, ut[i] * 0.0)
        return ut, ratio
''').lstrip("\n")


def rewritten(specs):
    form, skipped = safe_forms(specs, SOURCE, "copy", "wp.func", ["at", "sigma", "n"])
    return form, skipped


def test_two_rules_on_one_statement_both_rewrite_it_whichever_is_named_first():
    for specs in ([("rebuild-component", 5), ("select-branch", 5)], [("select-branch", 5), ("rebuild-component", 5)]):
        form, skipped = rewritten(specs)
        assert skipped == [], skipped
        assert "_wl_sel" in form.source and "_wl_e_ut" in form.source
        assert "wp.where" not in form.source.split("for i in range(n):")[1]


def test_each_selection_of_a_function_has_a_name_of_its_own():
    form, skipped = rewritten([("select-branch", 3), ("select-branch", 5)])
    assert skipped == []
    assert "_wl_sel0 = 1.0 / sigma" in form.source  # a float ...
    assert "_wl_sel1 = at[i] / sigma" in form.source  # ... and a vector: two names


@pytest.mark.parametrize("loop", ["while n > 0:\n        n -= 1", "for k in range(n):\n        y = y + 1.0"])
def test_a_long_loop_of_unknown_bound_gets_as_many_trips_as_fit_rather_than_no_safe_form(loop):
    body = "".join(f"        y = y * 0.5 + {k}.0\n" for k in range(100))
    source = f"def settle(x: float, c: wp.array(dtype=int)):\n    y = x\n    n = c[0]\n    {loop}\n{body}    return y\n"
    form, skipped = safe_forms([("static-enclosing-loops", 6)], source, "copy", "wp.func", ["x", "c"])
    assert skipped == [], skipped
    trips = re.search(r"range\(_wl_wp\.static\((\d+)\)\)", form.source)
    assert trips and MIN_GUESSED_TRIPS <= int(trips.group(1)) < UNROLL
    assert int(trips.group(1)) * 100 <= UNROLL_STATEMENTS


@pytest.mark.parametrize(("loop", "trips"), [
    ("range(n)", 4), ("range(n - 1)", 3), ("range(2 * n + 1)", 9), ("range(n + m)", 8), ("range(n - m)", UNROLL),
    ("range(n - 1, -1, -1)", 4), ("range(n, 0, -1)", 4), ("range(n - 1, 1, -2)", 1), ("range(n - m, -1, -1)", UNROLL),
])
def test_a_loop_over_arithmetic_on_integer_parameters_runs_as_far_as_their_bounds_let_it(loop, trips):
    # The synthesized integers are at most 4: `n - 1` needs 3 trips, not the 16 of a guess, which
    # would make a nest of such loops too large to unroll. `n - m` needs the least m could be.
    # A loop counting down is bounded by its start: newton's dense_subs solves L^T x = y with
    # `range(n - 1, -1, -1)`, which bounded by its stop (-1) had no trips at all, and the isolation
    # with every loop made static compared a kernel without its backward substitution.
    source = f"def total(x: float, n: int, m: int):\n    y = x\n    for k in {loop}:\n        y = y * x\n    return y\n"
    form, skipped = safe_forms([("static-enclosing-loops", 4)], source, "copy", "wp.func", ["x", "n", "m"],
                               int_bounds={"n": 4, "m": 4})
    assert skipped == [], skipped
    assert re.search(r"range\(_wl_wp\.static\((\d+)\)\)", form.source).group(1) == str(trips)


def test_a_counter_atomic_becomes_a_replayed_read_and_store_of_the_counter_put_back_before_backward():
    source = textwrap.dedent('''
        def compact(x: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
            i = wp.tid()
            slot = wp.atomic_add(counter, 0, 1)
            out[slot] = x[i]
    ''').lstrip("\n")
    form, skipped = safe_forms([("replayed-counter", 3)], source, "copy", "wp.kernel", ["x", "counter", "out"])
    assert skipped == [], skipped
    assert "slot = _wl_take(counter, 0, 1)" in form.source
    assert form.rewound == ["counter"] and form.preserves_forward


def test_a_loop_an_earlier_rewrite_made_static_is_not_unrolled_again_for_a_nested_loops_break():
    source = textwrap.dedent('''
        def walk(x: float, n: int, m: int):
            y = x
            while n > 0:
                n -= 1
                y = y * 0.5
                for k in range(m):
                    if y > 1.0:
                        break
                    y = y + 1.0
            return y
    ''').lstrip("\n")
    form, skipped = safe_forms([("static-enclosing-loops", 5), ("static-enclosing-loops", 9)], source, "copy",
                               "wp.func", ["x", "n", "m"])
    assert [spec for spec, _ in skipped] == [], skipped
    assert "while" not in form.source and "break" not in form.source


def test_an_unpacked_tuple_is_not_probed_and_leaves_the_other_probes_of_its_copy():
    # newton's GJK: `point_a, point_b = simplex_get_closest(...)` was wrapped whole in the probe,
    # which has no overload for a tuple: the instrumented copy did not build with its probes, and
    # every other flagged statement of the function lost its own.
    source = textwrap.dedent('''
        def closest(v: wp.vec3):
            a, b = split(v)
            c = a * b
            return c
    ''').lstrip("\n")
    made = instrument(source, [(2, None), (3, None)], "copy", "wp.func")
    assert made.probed[made.slots[2]] is None
    assert made.probed[made.slots[3]] == "the assigned value"
    assert "a, b = split(v)" in made.source


# A solver loop as long as one rewrite may unroll, and a short loop after it (newton's GJK).
LONG_THEN_SHORT = (
    "def solve(x: float, c: wp.array(dtype=int)):\n    y = x\n    n = c[0]\n    while n > 0:\n        n -= 1\n"
    + "".join(f"        y = y * 0.5 + {k}.0\n" for k in range(145))
    + "    z = y\n    for k in range(c[1]):\n" + "".join(f"        z = z * y + {k}.0\n" for k in range(5))
    + "    return z\n"
)


def test_the_loops_left_once_the_flagged_ones_are_unrolled_are_made_static_too():
    # The setting with every loop static: the flagged loop's unroll nearly fills the allowance of
    # one rewrite; the short loop after it still fits in the function's.
    form, skipped = safe_forms([("static-enclosing-loops", 6), (STATIC_ALL_LOOPS, 0)], LONG_THEN_SHORT, "copy",
                               "wp.func", ["x", "c"])
    assert skipped == [], skipped
    assert "while" not in form.source and "in range(c[1])" not in form.source


def test_a_statement_is_instrumented_in_the_setting_with_one_probe_for_every_iteration():
    form_source = textwrap.dedent('''
        def horner(x: float, n: int):
            y = float(0.0)
            v = wp.vec3(0.0)
            for k in range(n):
                v[k % 3] = x * float(k)
                y = y * x + v[k % 3]
            return y
    ''').lstrip("\n")
    made = instrument_in_setting([("static-enclosing-loops", 6)], form_source, [(5, None)], "copy", "wp.func",
                                 ["x", "n"])
    assert made.setting is not None and "made static" in made.setting.description
    assert "for k in range(n)" not in made.source  # the loop is static ...
    assert made.source.count("_wl_probe[0]") == 1 and made.probed == {0: "the assigned value"}  # ... one probe
    # A form that replaces the flagged statement itself leaves nothing to instrument as written.
    with pytest.raises(RewriteError, match="rewritten itself"):
        instrument_in_setting([("rebuild-component", 5)], form_source, [(5, None)], "copy", "wp.func", ["x", "n"])


class _Native:
    """What the native-adjoint form reads of a ``@wp.func_native`` (Warp's Function has these)."""

    def __init__(self, input_types, result, adjoint=None):
        self.native_snippet = "return x;"
        self.adj_native_snippet = adjoint
        self.input_types = input_types
        self.func = type("F", (), {"__annotations__": {**input_types, "return": result}})


NATIVE_CALLER = textwrap.dedent('''
    def caller(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = rsqrt_native(x[i]) * rsqrt_native(2.0)
        out[i] = out[i] + rsqrt_native(x[i])
''').lstrip("\n")


def test_a_native_without_an_adjoint_is_called_through_a_copy_named_after_each_copy_everywhere():
    constants = {"rsqrt_native": _Native({"value": float}, float)}
    for name in ("first_copy", "second_copy"):
        form, skipped = safe_forms([("native-adjoint", 3)], NATIVE_CALLER, name, "wp.kernel", ["x", "out"], constants)
        assert skipped == []
        assert form.preserves_forward
        assert not re.search(r"(?<!_)rsqrt_native\(", form.source.split(f"def {name}(")[1])  # every call, not only line 3
        assert form.source.count(f"_wl_fdadj_{name}_rsqrt_native(") == 4  # the copy's def and three calls
        assert f"@_wl_wp.func_grad(_wl_fdadj_{name}_rsqrt_native)" in form.source
        assert "(rsqrt_native(value + _wl_h) - rsqrt_native(value - _wl_h)) * adj_ret" in form.source


def test_a_native_with_an_adjoint_or_one_that_writes_an_array_has_no_finite_difference_copy():
    with_adjoint = {"rsqrt_native": _Native({"value": float}, float, adjoint="adj_value += adj_ret;")}
    _, skipped = safe_forms([("native-adjoint", 3)], NATIVE_CALLER, "copy", "wp.kernel", ["x", "out"], with_adjoint)
    assert "no native function without an adjoint" in str(skipped[0][1])
    writer = {"rsqrt_native": _Native({"value": float, "out": type("array", (), {})}, None)}
    _, skipped = safe_forms([("native-adjoint", 3)], NATIVE_CALLER, "copy", "wp.kernel", ["x", "out"], writer)
    assert "writes through its arguments" in str(skipped[0][1])
