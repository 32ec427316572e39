"""``confirm_findings`` on real kernels, CPU: verdicts for the hazards and their corrected versions."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from runtime_helpers import FIXTURES, make_finding
from warp_devices import DEVICES

from warp_lint.runtime import Reason, Status, confirm_findings

HAZARDS = FIXTURES / "hazards.py"

# kernel -> (code, reads, writes, expected status, extra make_finding options)
HAZARD_CASES: dict[str, tuple[str, list[str], list[str], str, dict]] = {
    # WL102 array-read-then-write: wrong in every release; the corrected form writes elsewhere.
    "square_in_place": ("WL102", ["a"], ["a"], Status.CONFIRMED, {"strategy": ["gradcheck", "overwrite-tracking"]}),
    "square_to_output": ("WL102", ["a"], ["b"], Status.CLEARED, {}),
    "scale_in_place": ("WL102", ["a", "x"], ["a"], Status.CONFIRMED, {"strategy": ["gradcheck", "overwrite-tracking"]}),
    "scale_to_output": ("WL102", ["a", "x"], ["out"], Status.CLEARED, {}),
    # WL103 vector-component-overwrite (wrong from 1.7 unless enable_vector_component_overwrites).
    "zero_vertical_velocity": ("WL103", ["vel"], ["out"], Status.CONFIRMED, {}),
    "zero_vertical_velocity_rebuilt": ("WL103", ["vel"], ["out"], Status.CLEARED, {}),
    "component_assigned_twice": ("WL103", ["x"], ["out"], Status.CONFIRMED, {}),
    "component_assigned_once": ("WL103", ["x"], ["out"], Status.CLEARED, {}),
    # WL104 dynamic-loop-mutation; a constant range is unrolled and differentiates correctly.
    "horner_dynamic_loop": ("WL104", ["x"], ["out"], Status.CONFIRMED, {}),
    "horner_unrolled_loop": ("WL104", ["x"], ["out"], Status.CLEARED, {}),
    # WL101 array-component-write: dropped the gradient before 1.14, correct since.
    "component_write_on_element": ("WL101", ["x"], ["y"], Status.CLEARED, {}),
    # Branches: reached by widening towards the literal 5.0; never reached at all.
    "hazard_above_threshold": ("WL102", ["a"], ["a"], Status.CONFIRMED, {}),
    "hazard_unreachable": ("WL102", ["a"], ["a", "b"], Status.INCONCLUSIVE, {}),
    # Hazards inside @wp.func helpers, checked through a generated wrapper kernel.
    "scale_first_component_twice": ("WL103", [], [], Status.CONFIRMED, {"function_kind": "func"}),
    "scale_first_component_once": ("WL103", [], [], Status.CLEARED, {"function_kind": "func"}),
    # Generic (Any) kernel: runs in float64.
    "generic_square_in_place": ("WL102", ["a"], ["a"], Status.CONFIRMED, {}),
    # A kernel nested in a function: the finding names the function, not the kernel.
    "make_nested_kernel": ("WL102", ["a"], ["a"], Status.INCONCLUSIVE, {"marker": "nested_square"}),
    # ... and, named as the static pass names it, the kernel made from its source.
    "nested_square": ("WL102", ["a"], ["a"], Status.CONFIRMED, {}),
    # ... unless it needs the function's argument.
    "typed_square": ("WL102", ["a"], ["a"], Status.INCONCLUSIVE, {}),
}


@pytest.fixture(scope="module", params=DEVICES)
def hazard_run(request, kernel_cache_dir):
    """All hazard fixtures confirmed in one call: one child, one compile of the fixture module."""
    findings = [
        make_finding(HAZARDS, kernel, code, reads=reads, writes=writes, **options)
        for kernel, (code, reads, writes, _, options) in HAZARD_CASES.items()
    ]
    before = sorted(os.listdir(FIXTURES))
    messages: list[str] = []
    started = time.perf_counter()
    confirm_findings(findings, device=request.param, timeout=120, progress=messages.append, cache_dir=kernel_cache_dir)
    elapsed = time.perf_counter() - started
    return {f.data["kernel"]: f for f in findings}, messages, before, elapsed


@pytest.mark.parametrize("kernel", list(HAZARD_CASES))
def test_hazard_verdict(hazard_run, kernel):
    by_kernel, *_ = hazard_run
    confirmation = by_kernel[kernel].confirmation
    assert confirmation is not None
    assert confirmation.status == HAZARD_CASES[kernel][3], confirmation.reason
    assert confirmation.warp_version
    assert confirmation.device in DEVICES
    assert set(confirmation.config) >= {"enable_vector_component_overwrites", "verify_autograd_array_access", "mode"}
    assert confirmation.reason.startswith(confirmation.evidence["reason_code"])


def test_confirmed_evidence_names_the_pair_and_numbers(hazard_run):
    confirmation = hazard_run[0]["square_in_place"].confirmation
    worst = confirmation.evidence["worst_pair"]
    assert (worst["input"], worst["output"]) == ("a", "a")
    assert worst["status"] == "fail" and worst["max_abs_error"] > 0.1
    assert worst["where"].startswith("d a[")
    assert "|AD - FD| <= atol + rtol * |FD|" in confirmation.reason
    assert confirmation.evidence["in_place"] == ["a"]
    assert confirmation.evidence["flagged_statement_hits"] > 0


def test_overwrite_tracking_does_not_run_where_the_gradcheck_decided(hazard_run):
    # Tracking forces Warp to rebuild modules; where the gradient experiment decided it adds nothing.
    by_kernel = hazard_run[0]
    for kernel in ("square_in_place", "scale_in_place"):
        confirmation = by_kernel[kernel].confirmation
        assert confirmation.status == Status.CONFIRMED
        assert confirmation.evidence["overwrite_tracking"]["ran"] is False
        assert "decided" in confirmation.evidence["overwrite_tracking"]["why"]
    assert "overwrite_tracking" not in by_kernel["square_to_output"].confirmation.evidence


def test_wl101_cleared_says_the_gradient_is_correct_on_this_version(hazard_run):
    confirmation = hazard_run[0]["component_write_on_element"].confirmation
    assert "the gradient is correct on warp 1." in confirmation.reason
    assert confirmation.evidence["flagged_statement_hits"] > 0
    assert all(draw["passed"] for draw in confirmation.evidence["draws"])


def test_component_overwrite_reports_ad_where_fd_is_zero(hazard_run):
    worst = hazard_run[0]["zero_vertical_velocity"].confirmation.evidence["worst_pair"]
    # v.y = 0 still passes gradient 1 to vel.y: AD 1 where FD 0.
    assert worst["where"].endswith("1] / d vel[0, 1]") or ", 1]" in worst["where"]
    assert worst["ad_at_worst"] == pytest.approx(1.0)
    assert worst["fd_at_worst"] == pytest.approx(0.0, abs=1e-3)


def test_branch_is_reached_by_widening_towards_the_literal(hazard_run):
    evidence = hazard_run[0]["hazard_above_threshold"].confirmation.evidence
    search = evidence["coverage_search"]
    assert search[0]["hits"] == 0
    assert search[-1]["hits"] > 0 and "5" in search[-1]["inputs"]


def test_unreached_hazard_is_not_cleared(hazard_run):
    confirmation = hazard_run[0]["hazard_unreachable"].confirmation
    assert confirmation.evidence["reason_code"] == Reason.NOT_EXECUTED
    assert confirmation.evidence["flagged_statement_hits"] == 0


def test_generic_kernel_runs_in_float32_first(hazard_run):
    evidence = hazard_run[0]["generic_square_in_place"].confirmation.evidence
    assert evidence["precision"] == "float32"
    assert evidence["instantiated_as"] == {"a": "array(dtype=float32, ndim=1)"}


def test_a_nested_kernel_is_made_from_its_source_unless_it_needs_its_functions_arguments(hazard_run):
    assert hazard_run[0]["make_nested_kernel"].confirmation.evidence["reason_code"] == Reason.NOT_IMPORTABLE
    typed = hazard_run[0]["typed_square"].confirmation
    assert typed.evidence["reason_code"] == Reason.NOT_IMPORTABLE and "its arguments" in typed.reason


def test_progress_and_user_files_untouched(hazard_run):
    _, messages, before, _ = hazard_run
    assert len(messages) == len(HAZARD_CASES)
    assert messages[0] == f"confirming WL102 in square_in_place (1/{len(HAZARD_CASES)})"
    # Imported without writing bytecode or anything else next to the user's files.
    assert sorted(os.listdir(FIXTURES)) == before


@pytest.mark.parametrize("device", DEVICES)
def test_process_hazards_end_inconclusive_within_the_time_limit(kernel_cache_dir, device):
    path = FIXTURES / "process_hazards.py"
    findings = [
        make_finding(path, "closest_point_on_mesh", "WL102", reads=["points", "out"], writes=["out"]),
        make_finding(path, "sample_volume", "WL102", reads=["points", "out"], writes=["out"]),
        make_finding(path, "write_far_out_of_bounds", "WL102", reads=["a"], writes=["a"]),
        make_finding(path, "loop_forever", "WL102", reads=["a"], writes=["a"]),
    ]
    timeout = 10.0
    started = time.perf_counter()
    confirm_findings(findings, device=device, timeout=timeout, cache_dir=kernel_cache_dir)
    elapsed = time.perf_counter() - started
    mesh, volume, segfault, hang = (f.confirmation for f in findings)
    # A mesh id gets a real mesh; a volume id nothing can stand for.
    assert mesh.status == Status.CONFIRMED, mesh.reason
    assert any("the id of a real mesh" in note for note in mesh.evidence["domain"])
    assert volume.status == Status.INCONCLUSIVE and volume.evidence["reason_code"] == Reason.UNSUPPORTED_ARGUMENT
    assert "uint64" in volume.reason
    assert segfault.status == Status.INCONCLUSIVE and segfault.evidence["reason_code"] == Reason.CRASH
    assert hang.status == Status.INCONCLUSIVE and hang.evidence["reason_code"] == Reason.TIMEOUT
    # One timeout plus a compile and two restarts: never an unbounded wait.
    assert elapsed < 2 * timeout + 60


def test_a_kernel_that_hangs_costs_one_time_limit_not_one_per_finding(kernel_cache_dir):
    path = FIXTURES / "process_hazards.py"
    findings = [make_finding(path, "loop_forever", "WL102", reads=["a"], writes=["a"]),
                make_finding(path, "loop_forever", "WL104", reads=["a"], writes=["a"], marker="loop_forever_body")]
    timeout = 5.0
    started = time.perf_counter()
    confirm_findings(findings, device="cpu", timeout=timeout, cache_dir=kernel_cache_dir)
    elapsed = time.perf_counter() - started
    hang, sibling = (f.confirmation for f in findings)
    assert hang.evidence["reason_code"] == Reason.TIMEOUT
    assert sibling.evidence["reason_code"] == Reason.TIMEOUT
    assert sibling.reason.startswith("timeout: not run: an experiment on the same kernel")
    assert elapsed < timeout + 60


def test_module_that_exits_at_import_is_inconclusive(kernel_cache_dir):
    finding = make_finding(FIXTURES / "exits_at_import.py", "square_in_place", "WL102", reads=["a"], writes=["a"])
    confirm_findings([finding], device="cpu", timeout=60, cache_dir=kernel_cache_dir)
    assert finding.confirmation.status == Status.INCONCLUSIVE
    assert finding.confirmation.evidence["reason_code"] == Reason.IMPORT_ERROR
    assert "SystemExit(3)" in finding.confirmation.reason


def test_findings_without_strategy_say_that_no_experiment_decides_them(kernel_cache_dir):
    """Nothing runs for them, and the verdict says so: a user of --confirm is never left without one."""
    finding = make_finding(HAZARDS, "square_in_place", "WL102", reads=["a"], writes=["a"])
    del finding.data["strategy"]
    confirm_findings([finding], cache_dir=kernel_cache_dir)
    assert finding.confirmation.status == Status.INCONCLUSIVE
    assert finding.confirmation.evidence["reason_code"] == Reason.NO_EXPERIMENT
    assert finding.confirmation.reason.startswith("no-experiment: --confirm has no experiment for WL102")


def test_importing_the_runtime_package_does_not_import_warp():
    code = "import sys, warp_lint.runtime; assert 'warp' not in sys.modules, 'warp imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(FIXTURES.parent)))


def test_kernel_that_does_not_compile_is_inconclusive(kernel_cache_dir):
    path = FIXTURES / "compile_error.py"
    finding = make_finding(path, "calls_unknown_builtin", "WL102", reads=["a"], writes=["a"])
    confirm_findings([finding], device="cpu", timeout=60, cache_dir=kernel_cache_dir)
    assert finding.confirmation.status == Status.INCONCLUSIVE
    assert finding.confirmation.evidence["reason_code"] in (Reason.COMPILE_ERROR, Reason.IMPORT_ERROR)
    assert "not_a_warp_builtin" in finding.confirmation.reason
