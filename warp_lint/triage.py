"""The cheap pass: decide which parts of a file can hold a finding before LibCST sees any of it.

Measured on the examples and tests shipped with warp-lang (190k lines, 2 cores): LibCST parses about
7k lines per CPU-second, Python's ``ast`` about 12x faster, and LibCST's scope metadata costs several
parses more. So every file goes through ``ast`` once; LibCST parses only the *regions* that matter:
Warp-decorated definitions, imports, module-level Warp configuration and integer constants. Host
code never reaches LibCST: the project model reads it from the same ``ast`` tree.

The regions are copied verbatim, one after the other, into the synthetic module LibCST parses (an
indented region gets an ``if 1:`` line before it). Lines outside the regions are left out rather
than blanked: LibCST spends about as long on a blank line as on a short statement, and a typical
file keeps a third of its lines. ``line_map`` takes a synthetic line back to the file's line;
columns are unchanged, since every kept line is a copy. ``statement_lines`` gives the synthetic line
on which each top-level statement of the synthetic module starts, so positions can be computed for
one statement at a time (see ``warp_lint.context``).
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import functools
import re

from warp_lint.closure_constants import Values, captured_values, held_module_options
from warp_lint.source import split_lines

WARP_MODULE = "warp"


@dataclasses.dataclass
class Triage:
    tree: ast.Module
    warp_aliases: dict[str, str]  # local name -> qualified name, from every import in the file
    regions: list[tuple[int, int]]  # 1-based inclusive line ranges kept for LibCST
    synthetic: str  # the text LibCST parses
    import_nodes: list[ast.stmt]
    # line_map[n - 1] is the file's line for line n of ``synthetic``; None when ``synthetic`` is the file.
    line_map: list[int] | None = None
    # The synthetic line on which each top-level statement of ``synthetic`` starts (None: unknown).
    statement_lines: list[int] | None = None

    def file_line(self, line: int) -> int:
        """The file's line number for line ``line`` of ``synthetic``."""
        return self.line_map[line - 1] if self.line_map is not None else line

    @functools.cached_property
    def captured(self) -> dict[str, dict[str, Values]]:
        """What the Warp definitions inside factories capture from them (``closure_constants``):
        read from the whole file, which ``synthetic`` does not hold."""
        return captured_values(self.tree, functools.partial(is_warp_decorated, aliases=self.warp_aliases))

    @functools.cached_property
    def held_options(self) -> dict[str, dict[str, object]]:
        """The options of modules held in names that Warp definitions name (`module=module`):
        read from the whole file, as ``captured`` is."""
        return held_module_options(self.tree, functools.partial(is_warp_decorated, aliases=self.warp_aliases))


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


# Statements hold statements only in these fields (in ``_fields`` order); expressions never do.
_BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")
_BLOCK_TYPES = (ast.stmt, ast.excepthandler, ast.match_case)


def _walk_statements(node: ast.AST):
    """``ast.walk`` restricted to statements (and the except/case clauses that hold them).

    Same breadth-first order as ``ast.walk``, whose other nodes are expressions, which hold no
    statement; skipping them makes the walk several times cheaper.
    """
    queue = [node]
    for current in queue:  # the list grows while it is read: breadth first
        yield current
        for field in _BLOCK_FIELDS:
            block = getattr(current, field, None)
            if block.__class__ is list:
                queue.extend(item for item in block if isinstance(item, _BLOCK_TYPES))


def collect_imports(tree: ast.Module) -> tuple[dict[str, str], list[ast.stmt]]:
    aliases: dict[str, str] = {}
    nodes: list[ast.stmt] = []
    for node in _walk_statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == WARP_MODULE or alias.name.startswith(WARP_MODULE + "."):
                    nodes.append(node)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases[alias.name.split(".")[0]] = WARP_MODULE
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == WARP_MODULE or node.module.startswith(WARP_MODULE + "."):
                nodes.append(node)
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases, nodes


def is_warp_decorated(node: ast.AST, aliases: dict[str, str]) -> bool:
    for decorator in getattr(node, "decorator_list", ()):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        dotted = _dotted(target)
        if dotted and dotted.split(".")[0] in aliases:
            return True
    return False


def first_line(node: ast.AST) -> int:
    """A statement's first line, its decorators included."""
    decorators = getattr(node, "decorator_list", None)
    return min([d.lineno for d in decorators] + [node.lineno]) if decorators else node.lineno


class _WordLines:
    """Which lines hold one of some words: a statement whose lines hold none cannot mention them.

    A cheap text filter in front of ``_mentions`` (a walk of every node of the statement). Only for
    ASCII files: Python normalises non-ASCII identifiers (NFKC), so their spelling in the text may
    differ from the name in the tree; there every statement is walked.
    """

    def __init__(self, text: str, line_starts: list[int], words: frozenset[str]):
        self.lines: list[int] | None = None
        if text.isascii() and words:
            pattern = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, words))) + r")\b")
            self.lines = sorted({bisect.bisect_right(line_starts, m.start()) for m in pattern.finditer(text)})

    def maybe(self, first: int, last: int) -> bool:
        if self.lines is None:
            return True
        index = bisect.bisect_left(self.lines, first)
        return index < len(self.lines) and self.lines[index] <= last


def _mentions(node: ast.AST, words: frozenset[str]) -> bool:
    for child in ast.walk(node):
        if isinstance(child, ast.Attribute) and child.attr in words:
            return True
        if isinstance(child, ast.Name) and child.id in words:
            return True
    return False


_MODULE_SETTINGS = frozenset({"config", "set_module_options", "constant"})


MODULE_SETUP_HOOKS = ("setUpModule", "setup_module")  # unittest's and pytest's: run before any test


def is_setup_hook(node: ast.stmt) -> bool:
    """A test module's set-up function: the ``wp.config`` settings in it hold for all its kernels."""
    return isinstance(node, ast.FunctionDef) and node.name in MODULE_SETUP_HOOKS


def _is_module_setting(node: ast.stmt, settings_lines: _WordLines) -> bool:
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
        return True  # integer constants can bound a loop: range(N)
    return (
        (isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr)) or is_setup_hook(node))
        and settings_lines.maybe(node.lineno, node.end_lineno)
        and _mentions(node, _MODULE_SETTINGS)
    )


def triage(text: str, whole_file: bool = False, tree: ast.Module | None = None) -> Triage:
    """The regions of ``text`` worth a LibCST parse: Warp-decorated definitions, imports, module
    settings (none when no code imports Warp). Host code is read from the ``ast`` tree alone (the
    project model's summaries), never parsed by LibCST. ``tree``: ``text`` already parsed.

    Raises SyntaxError when Python itself cannot parse the file.
    """
    if tree is None:
        tree = ast.parse(text)
    aliases, import_nodes = collect_imports(tree)
    if not aliases:
        return Triage(tree, aliases, [], "", import_nodes, [], [])
    lines = split_lines(text)
    if whole_file:
        return Triage(tree, aliases, [(1, len(lines))], text, import_nodes)

    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line))
    settings_lines = _WordLines(text, line_starts, _MODULE_SETTINGS)
    ranges: list[tuple[int, int, int]] = []  # start, end, indentation
    definitions = 0
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)) or _is_module_setting(statement, settings_lines):
            ranges.append((first_line(statement), statement.end_lineno, 0))
            continue
        for node in _walk_statements(statement):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and is_warp_decorated(
                node, aliases
            ):
                ranges.append((first_line(node), node.end_lineno, node.col_offset))
                definitions += 1
    if not definitions:
        return Triage(tree, aliases, [], "", import_nodes, [], [])  # no Warp definition: nothing for LibCST
    regions = _merge(ranges, tree)
    synthetic, line_map, statement_lines = synthesize(lines, regions)
    return Triage(tree, aliases, [(start, end) for start, end, _ in regions], synthetic, import_nodes, line_map,
                  statement_lines)


def _merge(ranges: list[tuple[int, int, int]], tree: ast.Module) -> list[tuple[int, int, int]]:
    """Drop nested ranges and make every indented range parse on its own.

    An indented range gets an ``if 1:`` line before it. When the line before it belongs to the
    previous range at another indentation, the range grows to its top-level statement instead.
    """
    ranges.sort(key=lambda item: (item[0], -item[1]))
    merged: list[tuple[int, int, int]] = []
    for start, end, indent in ranges:
        if merged and start <= merged[-1][1]:
            continue  # inside a range already kept
        if indent and merged and merged[-1][1] == start - 1 and merged[-1][2] != indent:
            top = next(s for s in tree.body if first_line(s) <= start <= s.end_lineno)
            start, end, indent = first_line(top), top.end_lineno, 0
            while merged and merged[-1][1] >= start:
                merged.pop()
        merged.append((start, end, indent))
    return merged


def synthesize(lines: list[str], regions: list[tuple[int, int, int]]) -> tuple[str, list[int], list[int]]:
    """The regions one after the other; the file line of each synthetic line; where statements start.

    Each region at indentation 0 is one top-level statement. An indented region opens an ``if 1:``
    block, attributed to the line before the region (a line outside every region), unless it
    directly follows its twin: a region ending on the line before it, whose block it joins.
    """
    out: list[str] = []
    line_map: list[int] = []
    statement_lines: list[int] = []
    previous_end = 0
    for start, end, indent in regions:
        if not indent or previous_end != start - 1:
            statement_lines.append(len(out) + 1)
            if indent:
                out.append("if 1:\n")
                line_map.append(start - 1)
        out.extend(lines[start - 1:end])
        line_map.extend(range(start, end + 1))
        previous_end = end
    if out and not out[-1].endswith(("\n", "\r")):
        out[-1] += "\n"
    return "".join(out), line_map, statement_lines
