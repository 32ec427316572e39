"""What rewriting a flagged statement does to AD, where the disagreement comes from elsewhere.

The numbers are eig3's (mujoco_warp), line 558, along the random directions of one draw: with the
other statements set aside and the loops made static, rewriting it too moves AD from 0.547 to
0.445 toward finite differences of 0.361; with the loops as written, from 3.151 to 3.112.
"""

from __future__ import annotations

import pytest

from warp_lint.runtime.comparison import DEFAULT_TOLERANCES, PairResult
from warp_lint.runtime.experiments import _adjoint_change

TOLERANCES = DEFAULT_TOLERANCES["float32"]


def pair(status: str = "fail", output: str = "ret1") -> PairResult:
    return PairResult(input="A", output=output, status=status, criterion="", max_abs_error=0.0,
                      max_rel_error=0.0, where=None, ad_at_worst=0.0, fd_at_worst=0.0, directional={},
                      ad_identically_zero=False, fd_identically_zero=False, jacobian_checked=False)


def change(*moves: tuple[PairResult, float, float, float, float]):
    """``moves``: (pair, AD as written, FD as written, AD rewritten, FD rewritten)."""
    written = {id(p): {"directional": {"ad": ad, "fd": fd}} for p, ad, fd, _, _ in moves}
    rewritten = {id(p): {"directional": {"ad": ad, "fd": fd}} for p, _, _, ad, fd in moves}
    return _adjoint_change([m[0] for m in moves], lambda p: written[id(p)], lambda p: rewritten[id(p)], TOLERANCES)


def test_ad_moved_a_share_of_the_way_to_finite_differences_is_closer():
    result = change((pair(), 0.547, 0.361, 0.445, 0.361), (pair(output="ret0"), -0.0353, -0.0354, -0.0353, -0.0354))
    assert result.kind == "closer"
    assert result.moves[0]["share_removed"] == pytest.approx(0.55, abs=0.01)
    assert "0.547 -> 0.445" in result.sentence()


def test_a_move_too_small_beside_a_large_disagreement_decides_nothing():
    # 1.4 % of the disagreement: more than the tolerance, less than a tenth.
    assert change((pair(), 3.151, 0.361, 3.112, 0.361)).kind == "other"


def test_a_move_away_on_any_pair_decides_nothing():
    assert change((pair(), 0.547, 0.361, 0.445, 0.361), (pair(output="ret0"), 0.2, 0.0, 0.5, 0.0)).kind == "other"


def test_the_same_ad_within_the_tolerance_is_the_same():
    assert change((pair(), 3.0037, 0.361, 3.00371, 0.361), (pair("pass", "ret0"), 1.0, 1.0, 1.0, 1.0)).kind == "same"


def test_a_move_below_the_tolerance_is_no_sameness():
    # eig3's line 567: rewriting it moves AD by 0.004 (1 % of finite differences, inside the
    # tolerance). The two kernels compute the same values; AD that moves at all moved because of
    # the statement, so it clears nothing.
    assert change((pair(), 0.4409814, 0.3612708, 0.4451290, 0.3612708)).kind == "other"


def test_other_finite_differences_are_another_function():
    assert change((pair(), 0.0, -3.458, 0.0, 8.526)).kind == "other"


def test_a_pair_that_agreed_is_never_what_moved_closer():
    assert change((pair("pass"), 0.37, 0.361, 0.362, 0.361)).kind == "other"


def test_a_pair_the_rewritten_kernel_lacks_decides_nothing():
    missing = pair()
    assert _adjoint_change([missing], lambda p: {"directional": {"ad": 1.0, "fd": 0.0}}, lambda p: None,
                           TOLERANCES).kind == "other"


def test_a_pair_both_kernels_get_right_for_other_functions_is_the_same():
    # newton's convert_warp_coords_to_mj_kernel: with the store into `mocap_pos` redirected to its
    # own array, d mocap_pos / d mocap_pos loses the untouched elements (FD -0.0206 -> 0); AD
    # agrees with finite differences in both, and the failing pair is unchanged.
    result = change((pair("pass", "mocap_pos"), -0.02056, -0.02055, 0.0, 0.0), (pair(), -0.0348, 0.0189, -0.0348, 0.0189))
    assert result.kind == "same"
    assert result.moves[0]["fd_safe"] == 0.0


def test_a_pair_one_kernel_gets_wrong_for_other_functions_decides_nothing():
    assert change((pair("pass", "mocap_pos"), -0.02056, -0.02055, 0.3, 0.0), (pair(), -0.0348, 0.0189, -0.0348, 0.0189)).kind == "other"
