"""The language server's pure parts: positions, edits, command arguments; and its exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.workspace import PositionCodec

from warp_lint import suppression
from warp_lint.finding import Position
from warp_lint.lsp import TextMap, minimal_edit, noqa_code_at, noqa_edit, parse_confirm_arguments

UTF16 = PositionCodec(types.PositionEncodingKind.Utf16)
UTF8 = PositionCodec(types.PositionEncodingKind.Utf8)
UTF32 = PositionCodec(types.PositionEncodingKind.Utf32)


def test_columns_in_each_encoding():
    text = 'x = "é😀"; y\n'
    y = Position(1, text.index("y") + 1)
    assert TextMap(text, UTF32).to_client(y) == types.Position(0, 10)
    assert TextMap(text, UTF16).to_client(y) == types.Position(0, 11)
    assert TextMap(text, UTF8).to_client(y) == types.Position(0, 14)
    for codec in (UTF8, UTF16, UTF32):
        text_map = TextMap(text, codec)
        assert text_map.from_client(text_map.to_client(y)) == y


def test_lines_split_as_python_and_lsp_do():
    # A form feed and U+2028 end no line for Python's tokenizer nor for LSP (str.splitlines disagrees).
    text = "a = 1\x0c\nb = '\u2028'\r\nc = 3\rd = 4\n"
    text_map = TextMap(text, UTF16)
    assert [text_map.content(i) for i in range(4)] == ["a = 1\x0c", "b = '\u2028'", "c = 3", "d = 4"]
    assert text_map.to_client(Position(4, 1)) == types.Position(3, 0)
    assert text_map.position_at(text.index("d")) == Position(4, 1)
    assert text_map.from_client(types.Position(99, 0)) == Position(5, 1)  # past the end: clamped


def test_minimal_edit_spans_only_the_change():
    before = "one\ntwo 😀 three\nfour\n"
    after = "one\ntwo 😀 3\nfour\n"
    edit = minimal_edit(before, after, TextMap(before, UTF16))
    assert edit.range == types.Range(types.Position(1, 7), types.Position(1, 12))
    assert edit.new_text == "3"


def test_minimal_edit_never_splits_crlf():
    before = "a\r\nb\r\n"
    after = "a\r\nc\r\nb\r\n"
    edit = minimal_edit(before, after, TextMap(before, UTF16))
    text_map = TextMap(before, UTF16)
    start = text_map.offset(text_map.from_client(edit.range.start))
    end = text_map.offset(text_map.from_client(edit.range.end))
    assert before[:start] + edit.new_text + before[end:] == after
    assert before[start - 1:start] != "\r"


@pytest.mark.parametrize("line, expected", [
    ("    a[i] = a[i] * a[i]   ", "    a[i] = a[i] * a[i]  # noqa: WL102"),
    ("    a[i] = a[i] * a[i]  # noqa: WL101", "    a[i] = a[i] * a[i]  # noqa: WL101, WL102"),
    ("    a[i] = a[i] * a[i]  # noqa:WL101,WL104  # why", "    a[i] = a[i] * a[i]  # noqa: WL101, WL104, WL102  # why"),
    ("    a[i] = a[i] * \\", None),
    ("    a[i] = a[i] * a[i]  # noqa", None),
])
def test_noqa_edit(line, expected):
    text = line + "\n"
    text_map = TextMap(text, UTF16)
    edit = noqa_edit(text_map, suppression.parse_directives(text), 1, "WL102")
    if expected is None:
        assert edit is None
        return
    start, end = text_map.offset(edit.start), text_map.offset(edit.end)
    assert (text[:start] + edit.content + text[end:]).rstrip("\n") == expected


def test_noqa_code_under_the_cursor():
    line = "x = 1  # noqa: WL101, WL104"
    directive = suppression.parse_directives(line + "\n")[1]
    assert noqa_code_at(line, line.index("WL104") + 3, directive) == ["WL104"]
    assert noqa_code_at(line, line.index("WL101") + 1, directive) == ["WL101"]
    assert noqa_code_at(line, line.index("noqa") + 1, directive) == ["WL101", "WL104"]
    assert noqa_code_at(line, 1, directive) == []


@pytest.mark.parametrize("arguments, expected", [
    (["file:///k.py", 5], ("file:///k.py", 5, None)),
    ([{"uri": "file:///k.py", "line": 5}], ("file:///k.py", 5, None)),
    ([{"uri": "file:///k.py", "line": 5, "code": "WL102"}], ("file:///k.py", 5, "WL102")),
    (["file:///k.py", {"range": {"start": {"line": 7, "character": 4}, "end": {"line": 7, "character": 9}},
                       "code": "WL101", "message": "..."}], ("file:///k.py", 7, "WL101")),
    ([{"uri": "file:///k.py", "diagnostic": {"range": {"start": {"line": 2, "character": 0},
                                                       "end": {"line": 2, "character": 1}}}}], ("file:///k.py", 2, None)),
])
def test_confirm_arguments(arguments, expected):
    assert parse_confirm_arguments(arguments) == expected


@pytest.mark.parametrize("arguments", [[], ["file:///k.py"], [5, 5], ["file:///k.py", "5"], ["file:///k.py", True]])
def test_confirm_arguments_rejected(arguments):
    with pytest.raises(ValueError):
        parse_confirm_arguments(arguments)


def test_server_exit_status_follows_the_protocol(tmp_path: Path):
    """0 after shutdown then exit, as LSP asks; the CLI passes serve()'s status through."""

    def message(payload: dict) -> bytes:
        body = json.dumps(payload).encode()
        return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)

    requests = (message({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"processId": None, "rootUri": None, "capabilities": {}}})
                + message({"jsonrpc": "2.0", "method": "initialized", "params": {}})
                + message({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
                + message({"jsonrpc": "2.0", "method": "exit"}))
    done = subprocess.run([sys.executable, "-m", "warp_lint", "server"], input=requests, capture_output=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert b'"id": 2' in done.stdout or b'"id":2' in done.stdout
