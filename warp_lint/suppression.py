"""``# noqa`` comments with ruff's semantics: ``# noqa`` silences every code on its line,
``# noqa: WL101, WL102`` just those. Comments are found with ``tokenize``, so text inside strings
that looks like a directive is not one.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tokenize

from warp_lint.source import split_lines

NOQA = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


@dataclasses.dataclass
class Directive:
    line: int
    column: int  # 1-based start of the directive within the line
    end_column: int
    codes: tuple[str, ...] | None  # None: every code
    used: set[str] = dataclasses.field(default_factory=set)


def parse_directives(text: str, only_lines: set[int] | None = None) -> dict[int, Directive]:
    """The file's directives by line. With ``only_lines``, the directives of other lines may be left
    out: a file is tokenized (the slow part, pure Python) only when one of those lines mentions
    ``noqa``."""
    if "noqa" not in text.lower():
        return {}
    if only_lines is not None:
        lines = split_lines(text)
        if not any(0 < line <= len(lines) and "noqa" in lines[line - 1].lower() for line in only_lines):
            return {}
    found: dict[int, Directive] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = NOQA.search(token.string)
            if match:
                codes = match.group("codes")
                parsed = tuple(c.upper() for c in re.split(r"[,\s]+", codes.strip())) if codes else None
                column = token.start[1] + match.start() + 1
                found[token.start[0]] = Directive(token.start[0], column, token.start[1] + match.end() + 1, parsed)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass  # the file parsed already; a tokenizer quirk only loses suppressions, never findings
    return found


def covers(directives: dict[int, Directive], line: int, code: str) -> bool:
    """Whether a directive on ``line`` names ``code`` (or is bare), without counting it as used."""
    directive = directives.get(line)
    return directive is not None and (directive.codes is None or code in directive.codes)


def is_suppressed(directives: dict[int, Directive], line: int, code: str) -> bool:
    if covers(directives, line, code):
        directives[line].used.add(code)
        return True
    return False
