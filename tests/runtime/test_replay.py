"""The replay executor on hand-written launch plans of real small programs (WL201 and its twins).

Each plan mirrors a program of ``fixtures/replay_programs.py`` step by step; the test also runs
that program itself, so the verdict is checked against what the real program computes.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from warp_devices import DEVICES

from warp_lint.finding import Finding, Position
from warp_lint.runtime import Reason, Status, confirm_findings

PROGRAMS = pathlib.Path(__file__).parent / "fixtures" / "replay_programs.py"
KERNELS = PROGRAMS.parent / "host_replay" / "replay_kernels.py"
TOTAL_LINE = next(n for n, line in enumerate(KERNELS.read_text().splitlines(), 1) if line.startswith("def total"))
N = 8


def plan(reader: str, in_place: bool, **changes) -> dict:
    written = "x" if in_place else "x_next"
    arrays = {
        "x": {"dtype": "float32", "shape": [N]},
        "v": {"dtype": "float32", "shape": [N]},
        "y": {"dtype": "float32", "shape": [N], "init": "zeros"},
        "loss": {"dtype": "float32", "shape": [1], "init": "zeros"},
    }
    if not in_place:
        arrays["x_next"] = {"dtype": "float32", "shape": [N], "init": "zeros"}
    document = {
        "version": 1,
        "kernels": {
            "reader": {"path": "host_replay/replay_kernels.py", "name": reader},  # relative to the finding's file
            "advance": {"path": "host_replay/replay_kernels.py", "name": "advance"},
            "total": {"path": str(KERNELS), "name": "total", "line": TOTAL_LINE},
        },
        "arrays": arrays,
        "steps": [
            {"op": "launch", "kernel": "reader", "dim": [N], "args": {"x": {"array": "x"}, "y": {"array": "y"}}},
            {"op": "launch", "kernel": "advance", "dim": [N],
             "args": {"x": {"array": "x"}, "v": {"array": "v"}, "dt": {"value": 0.1}, "x_next": {"array": written}}},
            {"op": "launch", "kernel": "total", "dim": [N], "args": {"y": {"array": "y"}, "loss": {"array": "loss"}}},
        ],
        "loss": {"array": "loss"},
        "inputs": ["x", "v"],
        "overwrite": {"step": 1, "array": written},
    }
    document.update(changes)
    return document


def finding_for(document: dict) -> Finding:
    return Finding(code="WL201", name="tape-overwrite", message="x is overwritten", path=str(PROGRAMS),
                   start=Position(48, 9), end=Position(48, 60),
                   data={"strategy": ["overwrite-tracking"], "replay_plan": document})


@pytest.fixture(scope="module", params=DEVICES)
def verdicts(request, kernel_cache_dir):
    cases = {
        "overwritten_state": plan("square", True),
        "separate_state": plan("square", False),
        "linear_reader": plan("triple", True),
        "unknown_kernel": plan("square", True,
                               kernels={"reader": {"path": "host_replay/replay_kernels.py", "name": "no_such_kernel"}}),
    }
    findings = {name: finding_for(document) for name, document in cases.items()}
    confirm_findings(list(findings.values()), device=request.param, timeout=300, cache_dir=kernel_cache_dir)
    return request.param, {name: f.confirmation for name, f in findings.items()}


@pytest.fixture(scope="module")
def programs(warp_in_process):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("warp_lint_test_replay_programs", PROGRAMS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


def _real_gradient(programs, name: str, device: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x0 = rng.uniform(0.5, 1.5, N).astype(np.float32)
    v0 = rng.uniform(0.5, 1.5, N).astype(np.float32)
    return getattr(programs, name)(x0, v0, device), x0


def test_tape_overwrite_is_confirmed_and_the_real_program_is_wrong(verdicts, programs):
    device, by_case = verdicts
    confirmation = by_case["overwritten_state"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert confirmation.reason.startswith(Reason.GRADIENT_MISMATCH)
    assert "fresh buffer" in confirmation.reason
    evidence = confirmation.evidence
    assert "fail" in evidence["table"] and "fail" not in evidence["counterfactual_table"]
    assert evidence["counterfactual_steps"][1] == "copy x -> x__wl_fresh1"
    assert evidence["loss"]["original"] == evidence["loss"]["counterfactual"]
    # The real program: d loss / d x should be 2 x, the replayed adjoint reads the advanced x.
    gradient, x0 = _real_gradient(programs, "overwritten_state", device)
    assert not np.allclose(gradient, 2 * x0, rtol=1e-2)


@pytest.mark.parametrize("case, program, expected", [
    ("separate_state", "separate_state", lambda x0: 2 * x0),
    ("linear_reader", "linear_reader", lambda x0: np.full_like(x0, 3.0)),
])
def test_near_miss_twins_are_cleared_and_the_real_programs_are_right(verdicts, programs, case, program, expected):
    device, by_case = verdicts
    confirmation = by_case[case]
    assert confirmation.status == Status.CLEARED, confirmation.reason
    assert "pass" in confirmation.evidence["table"]
    gradient, x0 = _real_gradient(programs, program, device)
    assert np.allclose(gradient, expected(x0), rtol=1e-4)


def test_a_sequence_that_cannot_be_replayed_points_to_trace(verdicts):
    confirmation = verdicts[1]["unknown_kernel"]
    assert confirmation.status == Status.INCONCLUSIVE
    assert confirmation.reason.startswith(Reason.REPLAY_UNSUPPORTED)
    assert "no_such_kernel" in confirmation.reason and "warp-lint trace" in confirmation.reason


def test_a_host_finding_without_a_plan_points_to_trace(kernel_cache_dir):
    finding = finding_for(plan("square", True))
    del finding.data["replay_plan"]
    confirm_findings([finding], device="cpu", cache_dir=kernel_cache_dir)
    assert finding.confirmation.status == Status.INCONCLUSIVE
    assert "warp-lint trace" in finding.confirmation.reason
