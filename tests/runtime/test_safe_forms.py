"""Safe forms applied together: the rewrites the counterfactual and the isolation build."""

from __future__ import annotations

import textwrap

from warp_lint.runtime.rewrite import safe_forms

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
