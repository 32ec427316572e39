"""The command line as users meet it: a real subprocess per test where the process matters."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warp_lint.cli import main
from warp_lint.finding import rule_url

ROOT = Path(__file__).resolve().parents[1]

HAZARD = """import warp as wp


@wp.kernel
def square(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] * a[i]
"""

FIXABLE = """import warp as wp


@wp.kernel
def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i].x = 2.0 * x[i]
    y[i].y = x[i]
    y[i].z = 0.0
"""

FIXED = """import warp as wp


@wp.kernel
def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)
"""


def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "NO_COLOR": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "warp_lint", *args], cwd=cwd, capture_output=True, text=True,
                          env=environment, timeout=120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "hazard.py").write_text(HAZARD)
    (tmp_path / "pkg" / "clean.py").write_text("import warp as wp\n")
    (tmp_path / "notes.txt").write_text("not python: a[i] = a[i] * a[i]\n")
    return tmp_path


def test_findings_exit_1_with_location_source_and_caret(project):
    result = run("check", cwd=project)
    assert result.returncode == 1
    assert "pkg/hazard.py:7:5: WL102 " in result.stdout
    assert "  7 |     a[i] = a[i] * a[i]\n    |     ^^^^^^^^^^^^^^^^^^" in result.stdout
    assert "Found 1 error." in result.stdout
    assert "\x1b[" not in result.stdout, "no colour when not on a terminal"


def test_clean_exit_0_and_exit_zero(project):
    assert run("check", "pkg/clean.py", cwd=project).returncode == 0
    assert run("check", "--exit-zero", cwd=project).returncode == 0


def test_usage_errors_exit_2_with_a_message(project):
    result = run("check", "--select", "WL999", cwd=project)
    assert result.returncode == 2
    assert "unknown rule code 'WL999'" in result.stderr
    assert run("check", "--output-format", "yaml", cwd=project).returncode == 2
    assert run("check", "--target-warp-version", "not a version", cwd=project).returncode == 2


def test_select_and_ignore(project):
    assert run("check", "--select", "WL101", cwd=project).returncode == 0
    assert run("check", "--ignore", "WL1", cwd=project).returncode == 0
    assert run("check", "--select", "WL1", "--ignore", "WL101", cwd=project).returncode == 1


def test_json_output_is_shaped_like_ruffs(project):
    result = run("check", "--output-format", "json", cwd=project)
    findings = json.loads(result.stdout)
    assert len(findings) == 1
    finding = findings[0]
    assert {"code", "message", "filename", "location", "end_location", "fix", "url", "noqa_row"} <= set(finding)
    assert finding["location"] == {"row": 7, "column": 5}
    assert finding["code"] == "WL102" and finding["noqa_row"] == 7
    assert finding["url"] == rule_url("WL102")  # null where the package metadata names no documentation


def test_output_format_from_the_environment(project):
    result = run("check", cwd=project, env={"WARP_LINT_OUTPUT_FORMAT": "json"})
    assert json.loads(result.stdout)[0]["code"] == "WL102"


def test_statistics(project):
    result = run("check", "--statistics", cwd=project)
    assert "    1\tWL102\t    array-read-then-write" in result.stdout


def test_config_in_pyproject_and_command_line_override(project):
    (project / "pyproject.toml").write_text('[tool.warp-lint]\nignore = ["WL102"]\n')
    assert run("check", cwd=project).returncode == 0
    assert run("check", "--select", "WL102", cwd=project).returncode == 1


def test_per_file_ignores(project):
    (project / "pyproject.toml").write_text('[tool.warp-lint.per-file-ignores]\n"pkg/hazard.py" = ["WL102"]\n')
    assert run("check", cwd=project).returncode == 0


@pytest.mark.parametrize("table, expected", [
    ('colour = "always"', "unknown key 'colour'"),
    ('select = ["WL777"]', "unknown rule code 'WL777'"),
    ('ignore = "WL101"', "'ignore' must be a list"),
    ('target-warp-version = "one point two"', "'target-warp-version' is not a version specifier"),
])
def test_bad_configuration_names_the_file_and_key(project, table, expected):
    (project / "pyproject.toml").write_text(f"[tool.warp-lint]\n{table}\n")
    result = run("check", cwd=project)
    assert result.returncode == 2
    assert str(project / "pyproject.toml") in result.stderr and expected in result.stderr
    assert "Traceback" not in result.stderr


def test_target_version_from_the_projects_warp_requirement(project):
    (project / "pkg" / "hazard.py").write_text(FIXABLE)
    (project / "pyproject.toml").write_text('[project]\nname = "sim"\ndependencies = ["warp-lang<1.14"]\n')
    assert run("check", cwd=project).returncode == 1
    (project / "pyproject.toml").write_text('[project]\nname = "sim"\ndependencies = ["warp-lang>=1.16"]\n')
    assert run("check", cwd=project).returncode == 0


def test_excludes_and_gitignore(project):
    (project / ".gitignore").write_text("pkg/hazard.py\n")
    assert run("check", cwd=project).returncode == 0
    (project / ".gitignore").unlink()
    (project / "pyproject.toml").write_text('[tool.warp-lint]\nextend-exclude = ["pkg"]\n')
    assert run("check", cwd=project).returncode == 0
    assert run("check", "pkg/hazard.py", cwd=project).returncode == 1, "an explicit file is linted"
    assert run("check", "--force-exclude", "pkg/hazard.py", cwd=project).returncode == 0


def test_fix_writes_atomically_keeping_bom_crlf_and_mode(project):
    target = project / "pkg" / "fixable.py"
    target.write_bytes(codecs.BOM_UTF8 + FIXABLE.replace("\n", "\r\n").encode())
    target.chmod(0o640)
    result = run("check", "--fix", "--target-warp-version", "<1.14", "pkg/fixable.py", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Fixed 3 errors." in result.stdout
    assert target.read_bytes() == codecs.BOM_UTF8 + FIXED.replace("\n", "\r\n").encode()
    assert target.stat().st_mode & 0o777 == 0o640
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".warp-lint-")]


def test_fixing_unused_noqa_keeps_a_bare_noqa_and_leaves_no_trailing_whitespace(project):
    target = project / "pkg" / "suppressed.py"
    target.write_text(HAZARD.replace("a[i] * a[i]", "a[i] * a[i]  # noqa").replace(
        "i = wp.tid()", "i = wp.tid()  # noqa: WL102"))
    result = run("check", "--report-unused-noqa", "--fix", "pkg/suppressed.py", cwd=project)
    assert "Fixed 1 error." in result.stdout, result.stdout + result.stderr
    assert target.read_text() == HAZARD.replace("a[i] * a[i]", "a[i] * a[i]  # noqa")
    assert result.returncode == 0  # the bare noqa is used: it suppresses WL102


def test_an_unused_bare_noqa_survives_fix_and_goes_with_unsafe_fixes(project):
    target = project / "pkg" / "suppressed.py"
    target.write_text(HAZARD.replace("i = wp.tid()", "i = wp.tid()  # noqa").replace("a[i] * a[i]", "2.0"))
    result = run("check", "--report-unused-noqa", "--fix", "pkg/suppressed.py", cwd=project)
    assert result.returncode == 1 and "WL900" in result.stdout
    assert "i = wp.tid()  # noqa\n" in target.read_text()
    run("check", "--report-unused-noqa", "--fix", "--unsafe-fixes", "pkg/suppressed.py", cwd=project)
    assert "    i = wp.tid()\n" in target.read_text()


def test_diff_shows_the_fix_and_writes_nothing(project):
    target = project / "pkg" / "fixable.py"
    target.write_text(FIXABLE)
    result = run("check", "--diff", "--target-warp-version", "<1.14", "pkg/fixable.py", cwd=project)
    assert result.returncode == 1
    assert "+    y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)" in result.stdout
    assert target.read_text() == FIXABLE


def test_bad_files_are_reported_and_the_run_goes_on(project):
    (project / "pkg" / "broken.py").write_text("import warp\ndef f(:\n")
    (project / "pkg" / "latin.py").write_bytes(b"import warp\nname = '\xe9'\n")
    result = run("check", "--output-format", "json", cwd=project)
    codes = sorted((Path(f["filename"]).name, f["code"]) for f in json.loads(result.stdout))
    assert codes == [("broken.py", "E999"), ("hazard.py", "WL102"), ("latin.py", "E902")]
    assert result.returncode == 1


def test_missing_path_is_reported(project):
    result = run("check", "no/such/file.py", cwd=project)
    assert "no such file or directory" in result.stderr


def test_rule_and_rules_commands(capsys):
    assert main(["rule", "WL101"]) == 0
    page = capsys.readouterr().out
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety",
                    "## Warp versions", "## Confirmation"):
        assert section in page
    assert main(["rules"]) == 0
    listing = capsys.readouterr().out
    assert "WL101  array-component-write" in listing
    assert main(["rule", "WL999"]) == 2


def test_help_explains(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = capsys.readouterr().out
    assert "--target-warp-version" in text and "exit status" in text


def test_bundled_example_has_real_findings():
    result = run("check", "--no-cache", "--output-format", "json", "examples", cwd=ROOT)
    assert result.returncode == 1
    found = {f["code"] for f in json.loads(result.stdout)}
    assert {"WL102", "WL103", "WL104"} <= found


def test_source_line_is_the_right_one_after_a_form_feed(tmp_path):
    (tmp_path / "ff.py").write_text("import warp as wp\n# page one\x0cpage two\n" + HAZARD.split("\n", 1)[1])
    result = run("check", "--no-cache", "ff.py", cwd=tmp_path)
    assert "ff.py:8:5: WL102" in result.stdout
    assert "  8 |     a[i] = a[i] * a[i]\n" in result.stdout
