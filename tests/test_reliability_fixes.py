"""Fixes never lose a byte: atomic, encoding/BOM/line endings/mode kept, converge, re-parse."""

from __future__ import annotations

import ast
import codecs

import pytest

from warp_lint.engine import FileSettings
from warp_lint.fixer import ConcurrentModification, applicable, apply_fixes, write_atomically
from warp_lint.registry import all_rules
from warp_lint.source import decode_source
from warp_lint.workspace import lint_bytes, lint_source
from warp_lint.testing import fix_code, lint_code

FIXABLE = """# -*- coding: latin-1 -*-
import warp as wp

# café: a comment the fix must keep
@wp.kernel
def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i].x = 2.0 * x[i]
    y[i].y = x[i]
    y[i].z = 0.0  # keep me
"""
SETTINGS = FileSettings(tuple(all_rules()), "<1.14")


def _fix_file(path) -> int:
    source = decode_source(str(path), path.read_bytes())
    findings = applicable(lint_source(source, SETTINGS).findings, unsafe=False)
    text, count = apply_fixes(source.text, findings, source.newline)
    write_atomically(source, text)
    return count


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("bom", [False, True])
def test_encoding_bom_line_endings_and_mode_survive(tmp_path, newline, bom):
    text = FIXABLE.replace("\n", newline)
    if bom:  # a BOM means UTF-8: a latin-1 cookie would contradict it
        text = text.replace("# -*- coding: latin-1 -*-", "# -*- coding: utf-8 -*-")
        raw = codecs.BOM_UTF8 + text.encode("utf-8")
    else:
        raw = text.encode("latin-1")
    path = tmp_path / "kernel.py"
    path.write_bytes(raw)
    path.chmod(0o600)
    if newline == "\r" and not bom:
        # Python's own detect_encoding reads the cookie line up to a \n: with \r endings the
        # "first line" is the whole latin-1 file, so the file is reported (E902) and left alone.
        findings = lint_bytes(str(path), raw, SETTINGS).findings
        assert [f.code for f in findings] == ["E902"]
        assert path.read_bytes() == raw
        return
    assert _fix_file(path) == 3
    after = path.read_bytes()
    assert after.startswith(codecs.BOM_UTF8) is bom
    decoded = after[3:].decode("utf-8") if bom else after.decode("latin-1")
    assert "café" in decoded and "# keep me" in decoded
    assert "    y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)  # keep me" + newline in decoded
    assert decoded.count(newline) == text.count(newline) - 2
    if newline != "\n":
        assert "\n" not in decoded.replace("\r\n", "") if newline == "\r\n" else "\n" not in decoded
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["kernel.py"], "no temporary file left behind"


def test_a_file_changed_on_disk_since_it_was_read_is_not_overwritten(tmp_path):
    path = tmp_path / "kernel.py"
    path.write_text(FIXABLE, encoding="latin-1")
    source = decode_source(str(path), path.read_bytes())
    path.write_text(FIXABLE + "# edited meanwhile\n", encoding="latin-1")
    with pytest.raises(ConcurrentModification):
        write_atomically(source, "replacement")
    assert path.read_text(encoding="latin-1").endswith("# edited meanwhile\n")


def _fixable_examples():
    for rule in all_rules().values():
        for number, example in enumerate(rule.INVALID):
            yield pytest.param(rule, example, id=f"{rule.code}-{number}")


@pytest.mark.parametrize("rule, example", list(_fixable_examples()))
def test_every_fix_reparses_and_converges(rule, example):
    for unsafe in (False, True):
        fixed = fix_code(example.code, target=example.target or "", unsafe=unsafe)
        ast.parse(fixed)
        remaining = applicable(lint_code(fixed, target=example.target or ""), unsafe)
        assert remaining == [], f"a second run still fixes: {[f.code for f in remaining]}"
