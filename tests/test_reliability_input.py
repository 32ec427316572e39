"""Hostile input: every file is linted or reported with a clear code and position, and the run goes on."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warp_lint.cli import main
from warp_lint.engine import FileSettings
from warp_lint.registry import all_rules
from warp_lint.workspace import lint_bytes

KERNEL = "import warp as wp\n\n@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    i = wp.tid()\n    a[i] = a[i] * a[i]\n"
SETTINGS = FileSettings(tuple(all_rules()), "")


def lint(raw: bytes) -> list[tuple[str, int]]:
    return [(f.code, f.start.line) for f in lint_bytes("input.py", raw, SETTINGS).findings]


@pytest.mark.parametrize("raw, expected", [
    pytest.param(KERNEL.encode(), [("WL102", 6)], id="plain"),
    pytest.param(KERNEL.replace("\n", "\r\n").encode(), [("WL102", 6)], id="crlf"),
    pytest.param(KERNEL.replace("\n", "\r").encode(), [("WL102", 6)], id="cr-only"),
    pytest.param(b"import warp as wp\r\n\n@wp.kernel\rdef k(a: wp.array(dtype=float)):\r\n    i = wp.tid()\n"
                 b"    a[i] = a[i] * a[i]\r", [("WL102", 6)], id="mixed-line-endings"),
    pytest.param(codecs.BOM_UTF8 + KERNEL.encode(), [("WL102", 6)], id="utf8-bom"),
    pytest.param(b"# -*- coding: latin-1 -*-\n" + KERNEL.encode() + b"# caf\xe9\n", [("WL102", 7)], id="latin1-cookie"),
    pytest.param(b"# coding: klingon\n" + KERNEL.encode(), [("E902", 1)], id="unknown-cookie"),
    pytest.param(b"# coding: utf-8\n" + KERNEL.encode() + b"x = '\xe9'\n", [("E902", 8)], id="wrong-cookie"),
    pytest.param(KERNEL.encode() + b"x = '\xff'\n", [("E902", 7)], id="undecodable-no-cookie"),
    pytest.param(b"import warp\nx = 1\x00\n", [("E999", 1)], id="nul-byte"),
    pytest.param(b"", [], id="empty"),
    pytest.param(b"import warp\nprint 'hello'\n", [("E999", 2)], id="python2"),
    pytest.param(b"import warp\nx = t'hi'\n", [("E999", 2)], id="newer-syntax"),
    pytest.param(b"import warp\nx = " + b"(" * 300 + b"1" + b")" * 300 + b"\n", [("E999", 2)], id="paren-nesting"),
    pytest.param(b"import warp\nx = " + b"-" * 100_000 + b"1\n", [("E999", 1)], id="recursion-in-parser"),
])
def test_input(raw, expected):
    assert lint(raw) == expected


def test_long_sums_inside_a_kernel_are_analysed():
    terms = " + ".join(["a[i]"] * 900)
    raw = f"import warp as wp\n\n@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    i = wp.tid()\n    a[i] = {terms}\n"
    assert lint(raw.encode()) == [("WL102", 6)]


def test_a_huge_generated_file_is_reported_not_linted():
    block = b"@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    i = wp.tid()\n    a[i] = a[i] + 1.0\n\n"
    raw = b"import warp as wp\n" + block * (10 * 1024 * 1024 // len(block) + 1)
    findings = lint_bytes("huge.py", raw, SETTINGS).findings
    assert [f.code for f in findings] == ["E902"] and "limit" in findings[0].message


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "good.py").write_text(KERNEL)
    (tmp_path / "broken.py").write_text("import warp\ndef f(:\n")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # a link to itself
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "back").symlink_to(tmp_path)  # a directory cycle
    (tmp_path / "notes.md").write_text("# Notes on warp\n\nUse `wp.Tape` here.\n")
    return tmp_path


def _json(tree: Path, *args: str) -> tuple[int, list[dict], str]:
    result = subprocess.run([sys.executable, "-m", "warp_lint", "check", "--no-cache", "--output-format", "json",
                             *args], cwd=tree, capture_output=True, text=True, timeout=120)
    return result.returncode, json.loads(result.stdout or "[]"), result.stderr


def test_symlink_loops_and_non_python_files_do_not_stop_the_run(tree):
    code, findings, stderr = _json(tree)
    assert code == 1
    assert sorted((Path(f["filename"]).name, f["code"]) for f in findings) == [("broken.py", "E999"), ("good.py", "WL102")]
    assert "Traceback" not in stderr


def test_an_explicit_non_python_file_is_reported_not_crashed_on(tree):
    code, findings, _ = _json(tree, "notes.md", "good.py")
    assert sorted(f["code"] for f in findings) == ["E999", "WL102"]


def test_files_that_vanish_or_cannot_be_read_are_reported(tree, monkeypatch, capsys):
    from warp_lint import runner

    real = Path.read_bytes

    def flaky(path: Path) -> bytes:
        if path.name == "good.py":
            raise PermissionError(13, "Permission denied", str(path))
        if path.name == "broken.py":
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", flaky)
    monkeypatch.chdir(tree)
    assert main(["check", "--no-cache", "--output-format", "json", "--jobs", "1"]) == 1
    findings = json.loads(capsys.readouterr().out)
    assert sorted((Path(f["filename"]).name, f["code"], f["message"]) for f in findings) == [
        ("broken.py", "E902", "cannot read: No such file or directory"),
        ("good.py", "E902", "cannot read: Permission denied"),
    ]
    assert runner.PARALLEL_MIN_FILES > 2


def test_an_internal_bug_exits_2_and_names_the_file(tree, monkeypatch, capsys):
    rule = all_rules()["WL102"]

    def broken_check(self, context):
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr(rule, "check", broken_check)
    monkeypatch.chdir(tree)
    assert main(["check", "--no-cache", "--jobs", "1", "good.py"]) == 2
    stderr = capsys.readouterr().err
    assert "internal error while linting good.py" in stderr and "ZeroDivisionError" in stderr


def test_unreadable_directory_is_reported(tree):
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    locked = tree / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        _, _, stderr = _json(tree)
        assert "cannot read directory" in stderr
    finally:
        locked.chmod(0o755)
