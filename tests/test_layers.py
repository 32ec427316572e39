"""The layers import downwards only (see the layering in STYLE.md and warp_lint/project/__init__):
the project model never imports the engine or a face, and no face imports another face's module
except the command line, which starts the others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "warp_lint"
FACES = ("warp_lint.cli", "warp_lint.lsp", "warp_lint.trace")


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("warp_lint")}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


MODULES = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith("warp_lint.project")])
def test_the_project_model_reads_summaries_not_the_engine_or_a_face(module):
    upward = {"warp_lint.engine", "warp_lint.workspace", "warp_lint.runner", "warp_lint.context",
              "warp_lint.rules", "warp_lint.output", *FACES}
    assert not {i for i in MODULES[module] if any(i == u or i.startswith(u + ".") for u in upward)}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_entry_point_imports_the_command_line(module):
    if module in ("warp_lint.__main__", "warp_lint.cli"):
        return
    assert "warp_lint.cli" not in MODULES[module], f"{module} imports warp_lint.cli: use warp_lint.options"


@pytest.mark.parametrize("face", ["warp_lint.lsp", "warp_lint.trace.command"])
def test_faces_do_not_import_each_other(face):
    others = [f for f in FACES if not face.startswith(f)]
    assert not {i for i in MODULES[face] if any(i.startswith(o) for o in others)}


def _runtime_imports(path: Path) -> set[str]:
    """The warp_lint modules a module imports when it runs: at its top or inside functions, but not
    under `if TYPE_CHECKING:` (annotations only)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for statement in tree.body if isinstance(statement, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(statement.test) for node in ast.walk(statement)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("warp_lint")}


def test_no_module_imports_one_that_imports_it_back():
    """No import cycle, not even through an import inside a function (the kernel model and its
    dataflow, the engine and the workspace once had one each)."""
    graph = {module_name(p): _runtime_imports(p) & set(MODULES) for p in sorted(PACKAGE.rglob("*.py"))}
    cycles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            module, path = stack.pop()
            for imported in graph[module] - {module}:
                if imported == start:
                    cycles.append(path + (start,))
                elif imported not in seen:
                    seen.add(imported)
                    stack.append((imported, path + (imported,)))
    assert not cycles, f"import cycles: {sorted(set(' -> '.join(c) for c in cycles))[:5]}"
