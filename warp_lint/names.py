"""What a name means: which local names stand for Warp, resolved by LibCST's scope metadata.

Imports are resolved by LibCST's ``ScopeProvider`` (its qualified names) on the file's import skeleton (every
import of ``warp`` in the file, plus module-level aliases such as ``kernel = wp.kernel``), which
handles ``import warp``, ``import warp as w``, ``import warp.sim`` and ``from warp import kernel as
k`` the way Python binds them. Running the scope analysis on the skeleton rather than the whole
file keeps its cost independent of the file's size. Function-local bindings that shadow an import
(a parameter named ``wp``) are handled by the callers, which pass the locals they know.
"""

from __future__ import annotations

import ast
import functools
import textwrap

import libcst as cst
from libcst.metadata import MetadataWrapper, ScopeProvider

from warp_lint.triage import Triage


class WarpNames:
    def __init__(self, qualified: dict[str, str]):
        self._qualified = qualified  # local name -> qualified name, Warp names only

    @classmethod
    def from_triage(cls, triage: Triage) -> WarpNames:
        return cls(dict(_qualified_names(import_skeleton(triage))))

    def qualify(self, node: cst.BaseExpression, shadowed: frozenset[str] | set[str] = frozenset()) -> str | None:
        """``wp.vec3`` -> ``warp.vec3``; None when the expression is not a Warp name."""
        return _qualify_with(self._qualified, node, shadowed)

    def is_warp(self, node: cst.BaseExpression, *qualified: str, shadowed=frozenset()) -> bool:
        name = self.qualify(node, shadowed)
        return name is not None and name in qualified

    def local_names_for(self, qualified: str) -> list[str]:
        """How this file spells a Warp name, for text a fix inserts: ``warp.vec3`` -> ``wp.vec3``."""
        spellings = []
        for local, name in self._qualified.items():
            if name == qualified:
                spellings.append(local)
            elif qualified.startswith(name + "."):
                spellings.append(local + qualified[len(name):])
        return sorted(spellings, key=len)


# Most files of a project import Warp the same way, so their skeletons are the same text: resolving
# each distinct skeleton once saved about 7% of a cold run over warp-lang's examples and tests.
@functools.lru_cache(maxsize=256)
def _qualified_names(skeleton: str) -> dict[str, str]:
    module = cst.parse_module(skeleton)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    global_scope = wrapper.resolve(ScopeProvider)[module]
    qualified: dict[str, str] = {}
    for assignment in global_scope.assignments:
        for name in global_scope.get_qualified_names_for(assignment.name):
            if name.name == "warp" or name.name.startswith("warp."):
                qualified.setdefault(assignment.name, name.name)
    for statement in module.body:  # `kernel = wp.kernel`: an alias of a Warp name
        line = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(line, cst.Assign) and len(line.targets) == 1:
            target = line.targets[0].target
            resolved = _qualify_with(qualified, line.value)
            if isinstance(target, cst.Name) and resolved:
                qualified[target.value] = resolved
    return qualified


def dotted_name(node: cst.CSTNode) -> str | None:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _qualify_with(qualified: dict[str, str], node: cst.CSTNode, shadowed=frozenset()) -> str | None:
    dotted = dotted_name(node)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    if head in shadowed or head not in qualified:
        return None
    base = qualified[head]
    return f"{base}.{rest}" if rest else base


def import_skeleton(triage: Triage) -> str:
    lines = [textwrap.dedent(ast.unparse(node)) for node in triage.import_nodes]
    for statement in triage.tree.body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and isinstance(statement.value, (ast.Name, ast.Attribute))
        ):
            lines.append(ast.unparse(statement))
    return "\n".join(lines) + "\n"
