"""The cheap pass: decide which parts of a file can hold a finding before LibCST sees any of it.

Measured on the examples and tests shipped with warp-lang (190k lines, 2 cores): LibCST parses about
7k lines per CPU-second, Python's ``ast`` about 5x faster, and LibCST's scope metadata costs several
parses more. So every file goes through ``ast`` once; LibCST parses only the *regions* that matter:
Warp-decorated definitions, top-level statements that hold host triggers (tapes, backward, ...),
imports, module-level Warp configuration and integer constants. Everything else becomes an empty
line, so the synthetic module keeps the file's line and column layout and every position that
LibCST reports is already a position in the real file.
"""

from __future__ import annotations

import ast
import dataclasses

WARP_MODULE = "warp"


@dataclasses.dataclass
class Triage:
    tree: ast.Module
    warp_aliases: dict[str, str]  # local name -> qualified name, from every import in the file
    regions: list[tuple[int, int]]  # 1-based inclusive line ranges kept for LibCST
    synthetic: str  # the text LibCST parses
    import_nodes: list[ast.stmt]


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def collect_imports(tree: ast.Module) -> tuple[dict[str, str], list[ast.stmt]]:
    aliases: dict[str, str] = {}
    nodes: list[ast.stmt] = []
    for node in ast.walk(tree):
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


def _is_warp_decorated(node: ast.AST, aliases: dict[str, str]) -> bool:
    for decorator in getattr(node, "decorator_list", ()):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        dotted = _dotted(target)
        if dotted and dotted.split(".")[0] in aliases:
            return True
    return False


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None)
    return min([d.lineno for d in decorators] + [node.lineno]) if decorators else node.lineno


def _mentions(node: ast.AST, triggers: frozenset[str]) -> bool:
    for child in ast.walk(node):
        if isinstance(child, ast.Attribute) and child.attr in triggers:
            return True
        if isinstance(child, ast.Name) and child.id in triggers:
            return True
    return False


_MODULE_SETTINGS = frozenset({"config", "set_module_options", "constant"})


def _is_module_setting(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
        return True  # integer constants can bound a loop: range(N)
    return isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr)) and _mentions(node, _MODULE_SETTINGS)


def triage(text: str, host_triggers: frozenset[str], whole_file: bool = False) -> Triage | None:
    """Return the regions of ``text`` worth a LibCST parse, or None when no code uses Warp.

    Raises SyntaxError when Python itself cannot parse the file.
    """
    tree = ast.parse(text)
    aliases, import_nodes = collect_imports(tree)
    if not aliases:
        return None
    lines = text.splitlines(keepends=True)
    if whole_file:
        return Triage(tree, aliases, [(1, len(lines))], text, import_nodes)

    ranges: list[tuple[int, int, int]] = []  # start, end, indentation
    for statement in tree.body:
        if (
            isinstance(statement, (ast.Import, ast.ImportFrom))
            or _is_module_setting(statement)
            or _mentions(statement, host_triggers)
        ):
            ranges.append((_first_line(statement), statement.end_lineno, 0))
            continue
        for node in ast.walk(statement):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _is_warp_decorated(
                node, aliases
            ):
                ranges.append((_first_line(node), node.end_lineno, node.col_offset))
    regions = _merge(ranges, tree)
    return Triage(tree, aliases, [(start, end) for start, end, _ in regions], _synthesize(lines, regions), import_nodes)


def _merge(ranges: list[tuple[int, int, int]], tree: ast.Module) -> list[tuple[int, int, int]]:
    """Drop nested ranges and make every indented range parse on its own.

    An indented range gets an ``if 1:`` on the (blank) line before it. When that line belongs to
    the previous range at another indentation, the range grows to its top-level statement instead.
    """
    ranges.sort(key=lambda item: (item[0], -item[1]))
    merged: list[tuple[int, int, int]] = []
    for start, end, indent in ranges:
        if merged and start <= merged[-1][1]:
            continue  # inside a range already kept
        if indent and merged and merged[-1][1] == start - 1 and merged[-1][2] != indent:
            top = next(s for s in tree.body if _first_line(s) <= start <= s.end_lineno)
            start, end, indent = _first_line(top), top.end_lineno, 0
            while merged and merged[-1][1] >= start:
                merged.pop()
        merged.append((start, end, indent))
    return merged


def _synthesize(lines: list[str], regions: list[tuple[int, int, int]]) -> str:
    out = ["\n"] * len(lines)
    previous_end = 0
    for start, end, indent in regions:
        for number in range(start, end + 1):
            out[number - 1] = lines[number - 1]
        if indent and previous_end != start - 1:  # a range right after its twin shares its block
            out[start - 2] = "if 1:\n"
        previous_end = end
    if out and not out[-1].endswith(("\n", "\r")):
        out[-1] += "\n"
    return "".join(out)
