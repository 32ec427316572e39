"""The bundled example project under ``warp-lint trace -- pytest``: the planted WL201 and WL202
are confirmed, the flagged-but-correct kernel is cleared, the unused kernel is not exercised."""

from __future__ import annotations

import sys

import pytest

from trace_helpers import by_code, trace


@pytest.fixture(scope="module")
def traced(project):
    return trace(project, [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"])


def test_the_tests_pass_and_the_exit_status_is_theirs(traced):
    result, document, _ = traced
    assert result.returncode == 0, result.stdout + result.stderr
    assert document["exit_code"] == 0
    assert "4 passed" in result.stdout
    assert document["processes"] == 1 and document["instrumentation_errors"] == []


def test_planted_wl201_is_confirmed_with_the_launch_that_overwrote(traced):
    (finding,) = by_code(traced[1])["WL201"]
    confirmation = finding["confirmation"]
    assert confirmation["status"] == "confirmed"
    assert confirmation["reason"].startswith("overwrite-observed")
    overwrite = confirmation["evidence"]["overwrites"][0]
    assert overwrite["reader"]["kernel"] == "integrate" and overwrite["site"]["line"] == finding["location"]["row"]


def test_planted_wl202_is_confirmed_with_both_tapes(traced):
    (finding,) = by_code(traced[1])["WL202"]
    confirmation = finding["confirmation"]
    assert confirmation["status"] == "confirmed", confirmation
    crossing = confirmation["evidence"]["crossings"][0]
    assert crossing["writer"]["kernel"] == "integrate" and crossing["reader"]["kernel"] == "distance_to_target"
    assert crossing["writer"]["tape"] != crossing["reader"]["tape"]


def test_correct_kernel_is_cleared_by_a_gradcheck_of_its_real_launches(traced):
    (finding,) = by_code(traced[1])["WL110"]
    confirmation = finding["confirmation"]
    assert confirmation["status"] == "cleared", confirmation
    assert "pass" in confirmation["evidence"]["table"]
    checks = confirmation["evidence"]["checks"]
    assert 1 <= len(checks) <= 3  # --max-checks-per-kernel defaults to 3
    assert all(check["hits"] > 0 for check in checks)  # the flagged statement ran


def test_kernel_hazard_is_confirmed_with_the_ad_fd_table(traced):
    (finding,) = by_code(traced[1])["WL103"]
    confirmation = finding["confirmation"]
    assert confirmation["status"] == "confirmed"
    assert confirmation["reason"].startswith("gradient-mismatch")
    assert "fail" in confirmation["evidence"]["table"]


def test_unused_kernel_is_not_exercised(traced):
    (finding,) = by_code(traced[1])["WL102"]
    assert finding["confirmation"]["status"] == "not_exercised"
    assert "never launched" in finding["confirmation"]["reason"]


def test_summary_and_text_report(traced):
    _, document, text = traced
    assert document["summary"] == {"confirmed": 3, "cleared": 1, "not_exercised": 1, "inconclusive": 0,
                                   "runtime_only": 0}
    assert "= confirmed: overwrite-observed" in text
    assert "3 confirmed, 1 cleared, 1 not exercised" in text
