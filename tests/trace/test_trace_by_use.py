"""What users of ``warp-lint trace`` and ``--confirm`` ran into, each on a small program whose
gradient the program itself prints (tape against the analytical value, CPU):

* Warp's read mark left by a tape dropped without ``backward()`` is no overwrite (no WR201);
  its twin, the same tape kept and differentiated after the write, is one;
* a finding cleared at run time is not counted as an error;
* a ``@wp.func``'s finding is checked on the launches of the kernel in another module that calls it;
* ``--report-forward-only`` traces what the static pass hides;
* ``--confirm`` says which findings it has no experiment for, and points to trace.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

pytest.importorskip("warp")

from trace_helpers import REPO, SCRIPTS, by_code, run, trace  # noqa: E402

BY_USE = SCRIPTS / "by_use"


def _traced(tmp_path, script: str, *options: str):
    source = BY_USE / script
    tmp_path.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, tmp_path / source.name)
        folder, program = tmp_path / source.name, "sim.py"
    else:
        folder, program = tmp_path, source.name
        shutil.copy(source, folder / program)
    result, document, text = trace(folder, [sys.executable, program], *options)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, document, text


def _printed(result) -> list[float]:
    """The gradient the program printed last (numpy's rendering of a 1-d or 2-d array)."""
    line = [line for line in result.stdout.splitlines() if line.startswith("[")][-1]
    return [float(x) for x in line.replace("[", " ").replace("]", " ").split()]


def test_a_read_mark_left_by_a_dropped_tape_is_no_overwrite(tmp_path):
    result, document, _ = _traced(tmp_path, "dropped_tape.py")
    assert _printed(result) == [4.0, 6.0, 8.0]  # 2 (x + 1): the gradient is right
    assert "WR201" not in by_code(document), document["runtime_problems"]


def test_the_same_read_on_a_tape_differentiated_after_the_write_is_one(tmp_path):
    result, document, _ = _traced(tmp_path, "kept_tape.py")
    assert _printed(result) == [8.0, 12.0, 16.0]  # the gradient is 2 (x + 1) + 2 x = [6, 10, 14]
    (problem,) = by_code(document)["WR201"]
    assert "kernel `bump`" in problem["message"] and "`square` read" in problem["message"]


def test_a_finding_cleared_at_run_time_is_not_an_error(tmp_path):
    _, document, text = _traced(tmp_path, "cleared_only.py")
    (finding,) = by_code(document)["WL110"]
    assert finding["confirmation"]["status"] == "cleared"
    assert "Found 1 error" not in text
    assert "1 finding cleared at run time" in text and "not counted as an error" in text


def test_a_helpers_finding_is_checked_on_the_launches_of_its_kernel_in_another_module(tmp_path):
    result, document, _ = _traced(tmp_path, "helper_elsewhere")
    assert _printed(result) == [12.0, 4.0, 6.0]  # d(4 x0^2 + x1^2 + x2^2) is [8, 4, 6]
    (finding,) = by_code(document)["WL103"]
    assert finding["filename"].endswith("helpers.py")
    confirmation = finding["confirmation"]
    assert confirmation["status"] == "confirmed", confirmation
    assert "through kernel `energy`" in confirmation["reason"] and "sim.py:" in confirmation["reason"]


def test_report_forward_only_traces_what_the_static_pass_hides(tmp_path):
    _, hidden, text = _traced(tmp_path / "default", "forward_only.py")
    assert hidden["findings"] == []
    assert "1 finding in code the project does not differentiate" in text
    _, shown, _ = _traced(tmp_path / "shown", "forward_only.py", "--report-forward-only")
    (finding,) = by_code(shown)["WL103"]
    assert finding["confirmation"]["status"] == "not_exercised"
    assert "never recorded on a tape" in finding["confirmation"]["reason"]


def test_confirm_says_which_findings_it_has_no_experiment_for(tmp_path):
    program = REPO / "tests" / "trace" / "catalogue" / "wl202_multiple_tapes.py"
    shutil.copy(program, tmp_path / program.name)
    result = run([sys.executable, "-m", "warp_lint", "check", "--no-cache", "--confirm", "--device", "cpu",
                  "--output-format", "json", program.name], tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    (finding,) = json.loads(result.stdout)
    assert finding["code"] == "WL202"
    confirmation = finding["confirmation"]
    assert confirmation["status"] == "inconclusive"
    assert confirmation["reason"].startswith("no-experiment: --confirm has no experiment for WL202")
    assert "warp-lint trace -- " in confirmation["reason"]

