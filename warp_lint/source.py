"""Reading a Python file exactly as Python would, remembering how to write it back byte for byte."""

from __future__ import annotations

import codecs
import dataclasses
import io
import re
import tokenize


class SourceError(Exception):
    """A file that cannot be read or decoded. ``code`` is the E9xx code to report."""

    def __init__(self, code: str, message: str, line: int = 1, column: int = 1):
        super().__init__(message)
        self.code = code
        self.line = line
        self.column = column


@dataclasses.dataclass
class SourceFile:
    path: str
    raw: bytes
    text: str  # decoded, BOM stripped, line endings as in the file
    encoding: str
    bom: bool

    @property
    def newline(self) -> str:
        """The file's dominant line ending, used for text that a fix inserts."""
        crlf = self.text.count("\r\n")
        lf = self.text.count("\n") - crlf
        return "\r\n" if crlf > lf else "\n"

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def decode_source(path: str, raw: bytes) -> SourceFile:
    """Decode with the PEP 263 cookie or BOM, as the interpreter does."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:
        raise SourceError("E902", f"cannot determine the encoding: {error}") from None
    bom = encoding == "utf-8-sig"
    body = raw[len(codecs.BOM_UTF8):] if bom else raw
    codec = "utf-8" if bom else encoding
    try:
        text = body.decode(codec)
    except UnicodeDecodeError as error:
        line = body.count(b"\n", 0, error.start) + 1
        column = error.start - (body.rfind(b"\n", 0, error.start) + 1) + 1
        raise SourceError(
            "E902",
            f"cannot decode as {codec}: byte {body[error.start]:#04x} at offset {error.start}"
            " (declare the file's encoding with a '# -*- coding: ... -*-' line or re-save it as UTF-8)",
            line,
            column,
        ) from None
    except LookupError:
        raise SourceError("E902", f"unknown encoding {codec!r} in the coding cookie") from None
    return SourceFile(path=path, raw=raw, text=text, encoding=codec, bom=bom)


# Python ends a line at \r\n, \r or \n, and nowhere else; str.splitlines() also splits at form
# feeds, \x0b, \x1c-\x1e, \x85, \u2028 and \u2029, which would shift every line after them.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """The file's lines with their endings, numbered as Python numbers them."""
    return _LINE.findall(text)


def common_ends(old, new) -> tuple[int, int]:
    """How many items two sequences (texts, lists of lines) share at their start, and then at
    their end (not counting those at the start): what an edit between them left alone."""
    limit = min(len(old), len(new))
    prefix = 0
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    return prefix, suffix


def source_line(text: str, line: int) -> str | None:
    """Line ``line`` (1-based) without its ending, or None past the end."""
    lines = split_lines(text)
    return lines[line - 1].rstrip("\r\n") if 0 < line <= len(lines) else None
