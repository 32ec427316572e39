"""`check --confirm` on host findings: the launch plan built from the recording, replayed.

``fixtures/host_replay`` holds one small program per case (kernels in ``replay_kernels.py``, imported by
name): a real tape overwrite (confirmed, with numbers), an overwrite whose reader is linear in the
array (cleared), one whose effect hides inside finite differences' tolerance (confirmed by the
two tape gradients), a step loop with two overwrites (one confirmed and one cleared, each judged with
the other removed), a write between the tape block and ``backward()`` (WL211, confirmed), an
overwrite through a struct field (no plan: the verdict says why and points to ``warp-lint trace``),
and the near-miss with one buffer per step (no finding at all). The planted findings carry
``# expect: CODE`` markers; the static pass must find exactly those.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from runtime_helpers import FIXTURES
from warp_devices import DEVICES

from expect_markers import expected
from warp_lint.replay_plan import launch_plan
from warp_lint.testing import lint_code

pytest.importorskip("warp")

PROGRAMS = FIXTURES / "host_replay"
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=DEVICES)
def verdicts(request, tmp_path_factory) -> tuple[str, dict[tuple[str, int], dict]]:
    cache = tmp_path_factory.mktemp("xdg")
    result = subprocess.run(
        [sys.executable, "-m", "warp_lint", "check", "--no-cache", "--confirm", "--select", "WL201,WL211",
         "--device", request.param, "--output-format", "json", str(PROGRAMS)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "XDG_CACHE_HOME": str(cache)}, timeout=900)
    assert result.returncode == 1, result.stderr[-3000:]
    found = {}
    for finding in json.loads(result.stdout):
        found[(pathlib.Path(finding["filename"]).name, finding["location"]["row"])] = finding
    return request.param, found


def _line(program: str, text: str) -> int:
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


def test_the_static_pass_finds_exactly_the_planted_host_findings(verdicts):
    _, found = verdicts
    planted = {(path.name, line, code) for path in PROGRAMS.glob("*.py") for line, code in expected(path.read_text())}
    assert {(name, line, f["code"]) for (name, line), f in found.items()} == planted


def test_a_real_tape_overwrite_is_confirmed_with_numbers(verdicts):
    device, found = verdicts
    confirmation = found[("overwrite.py", _line("overwrite.py", "# expect: WL201"))]["confirmation"]
    assert confirmation["status"] == "confirmed", confirmation["reason"]
    assert confirmation["device"] == device
    reason = confirmation["reason"]
    assert reason.startswith("gradient-mismatch") and "d loss / d x" in reason and "fresh buffer" in reason
    evidence = confirmation["evidence"]
    assert "fail" in evidence["table"] and "fail" not in evidence["counterfactual_table"]
    assert evidence["loss"]["original"] == evidence["loss"]["counterfactual"]


def test_an_overwrite_inside_the_finite_difference_tolerance_is_confirmed_by_the_tape_gradients(verdicts):
    _, found = verdicts
    confirmation = found[("small_effect.py", _line("small_effect.py", "# expect: WL201"))]["confirmation"]
    assert confirmation["status"] == "confirmed", confirmation["reason"]
    assert "fail" not in confirmation["evidence"]["table"]
    shift = confirmation["evidence"]["gradient_shift"]
    assert shift["input"] == "x" and shift["relative"] > 1e-3 and shift["ad"] != shift["ad_without"]
    assert "only the tape gradients tell them apart" in confirmation["reason"]


def test_an_overwrite_a_linear_reader_never_needs_is_cleared(verdicts):
    _, found = verdicts
    confirmation = found[("linear_reader.py", _line("linear_reader.py", "# expect: WL201"))]["confirmation"]
    assert confirmation["status"] == "cleared", confirmation["reason"]
    assert "fail" not in confirmation["evidence"]["table"]


def test_a_step_loop_overwrite_is_confirmed_and_the_linear_one_not_reported(verdicts):
    _, found = verdicts
    harmful = found[("step_loop.py", _line("step_loop.py", "outputs=[self.x])"))]["confirmation"]
    assert harmful["status"] == "confirmed", harmful["reason"]
    # The other overwrite (of `y`, which `triple` reads linearly) is one the static pass no longer
    # reports: its reader's adjoint needs none of the values (KernelFacts.value_reads).
    assert ("step_loop.py", _line("step_loop.py", "outputs=[self.y])")) not in found


def test_a_write_between_the_tape_block_and_backward_is_confirmed(verdicts):
    _, found = verdicts
    finding = found[("after_block.py", _line("after_block.py", "# expect: WL211"))]
    assert finding["code"] == "WL211"
    assert finding["confirmation"]["status"] == "confirmed", finding["confirmation"]["reason"]


def test_a_sequence_without_a_plan_says_why_and_points_to_trace(verdicts):
    _, found = verdicts
    confirmation = found[("struct_state.py", _line("struct_state.py", "# expect: WL201"))]["confirmation"]
    assert confirmation["status"] == "inconclusive"
    assert confirmation["reason"].startswith("replay-unsupported")
    assert "struct" in confirmation["reason"] and "warp-lint trace" in confirmation["reason"]


def test_the_plan_binds_arguments_by_name_with_literal_sizes_and_scalars():
    source = (PROGRAMS / "overwrite.py").read_text().replace("from replay_kernels import advance, square, total\n",
                                                                (PROGRAMS / "replay_kernels.py").read_text())
    (finding,) = lint_code(source, select=["WL201"], target=">=1.19", path=str(PROGRAMS / "overwrite.py"))
    plan = finding.data["replay_plan"]
    assert [s["op"] for s in plan["steps"]] == ["launch", "launch", "launch"]
    advance = plan["steps"][1]
    assert advance["args"] == {"x": {"array": "x"}, "v": {"array": "v"}, "dt": {"value": 0.1},
                               "x_next": {"array": "x"}}
    assert advance["dim"] == [16] and plan["arrays"]["x"] == {"dtype": "float32", "shape": [16]}
    assert plan["arrays"]["loss"]["shape"] == [1]
    assert plan["overwrite"] == {"step": 1, "array": "x", "param": "x_next"}
    assert plan["loss"] == {"array": "loss"} and plan["inputs"] == ["x", "v"]


def test_a_step_loop_runs_twice_with_per_pass_buffers():
    code = '''
import warp as wp

@wp.kernel
def advance(x: wp.array(dtype=float), x_next: wp.array(dtype=float)):
    i = wp.tid()
    x_next[i] = x[i] * x[i]

def run(tmp, states, steps):
    tape = wp.Tape()
    with tape:
        for t in range(steps):
            wp.launch(advance, 4, inputs=[states[t]], outputs=[tmp])
            wp.launch(advance, 4, inputs=[tmp], outputs=[states[t + 1]])
    tape.backward(states[steps])
'''
    (finding,) = lint_code(code, select=["WL201"], target=">=1.19")  # tmp, overwritten in the next pass
    plan = finding.data["replay_plan"]
    bound = [(s["args"]["x"]["array"], s["args"]["x_next"]["array"]) for s in plan["steps"]]
    assert bound == [("states[0]", "tmp"), ("tmp", "states[1]"), ("states[1]", "tmp"), ("tmp", "states[2]")]
    assert plan["overwrite"] == {"step": 2, "array": "tmp"} and plan["other_overwrites"] == []
    assert plan["loss"] == {"array": "states[2]"} and plan["inputs"] == ["states[0]"]
