"""The traced command's output and exit status are its own; the user's arrays and gradients too."""

from __future__ import annotations

import shutil
import sys

from trace_helpers import SCRIPTS, by_code, run, trace

from warp_lint import links


def test_output_exit_status_and_gradients_are_unchanged(tmp_path):
    shutil.copy(SCRIPTS / "hazards.py", tmp_path / "hazards.py")
    script = tmp_path / "hazards.py"
    script.write_text(script.read_text() + "\n    raise SystemExit(3)\n".replace("\n    raise", "\nif __name__ == '__main__':\n    raise"))
    plain = run([sys.executable, "hazards.py"], tmp_path)
    traced, document, _ = trace(tmp_path, [sys.executable, "hazards.py"])
    assert plain.returncode == 3 and traced.returncode == 3 and document["exit_code"] == 3
    # The script prints the gradients it got: the checks and the tracker changed none of them.
    assert "accumulated [4.0, 8.0, 12.0]" in plain.stdout
    assert traced.stdout == plain.stdout
    assert traced.stderr == plain.stderr  # the report went to --output-file; Warp's tracker stays quiet

    found = by_code(document)
    assert found["WL204"][0]["confirmation"]["status"] == "confirmed"
    assert [p["location"]["row"] for p in found["WR201"]] == [_line(script, "a.zero_()")]
    assert [p["location"]["row"] for p in found["WR204"]] == [_line(script, "tape.backward(loss)  # runtime-only")]
    for problem in found["WR201"] + found["WR204"]:
        assert problem["confirmation"]["status"] == "confirmed"
        assert problem["url"] == links.documentation_page(f"trace.md#{problem['code'].lower()}")


def test_a_failing_test_still_fails(project, tmp_path):
    failing = tmp_path / "failing"
    shutil.copytree(project, failing, ignore=shutil.ignore_patterns("trace*", "__pycache__"))
    (failing / "check_failing.py").write_text("def test_fails():\n    assert 1 == 2\n")
    traced, document, _ = trace(failing, [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                                          "check_failing.py"])
    assert traced.returncode == 1 and document["exit_code"] == 1
    assert "1 failed" in traced.stdout


def test_missing_command_and_usage_errors(tmp_path):
    result = run([sys.executable, "-m", "warp_lint", "trace", "--no-cache", "--", "no-such-command-xyz"], tmp_path)
    assert result.returncode == 127 and "cannot run no-such-command-xyz" in result.stderr
    result = run([sys.executable, "-m", "warp_lint", "trace"], tmp_path)
    assert result.returncode == 2 and "needs a command" in result.stderr


def _line(path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)
