"""Load the user's file as Python does and find the flagged kernel or ``@wp.func`` in it (child side).

* **Import.** A module of a package (a folder above it holds ``__init__.py``) is imported by its
  dotted name with the project root first on ``sys.path``, so relative imports work and the module is the same object the rest of the package sees. A script (no package) is
  imported by path under a unique name, never ``__main__`` (its ``if __name__ == "__main__"``
  block stays off). If the dotted import yields another file (a different installed package of
  the same name), the file is imported by path instead.
* **Find.** Kernels and functions are found by source location among everything Warp registered
  while the module ran: module-level definitions, kernels made by factories that ran at import
  time, and every overload of an overloaded ``@wp.func``. Generic instantiations are not targets
  of their own: the generic definition is.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import textwrap
import typing
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import warp as wp

from warp_lint.triage import first_line

_KERNEL_TYPE = getattr(wp, "Kernel", None) or wp.context.Kernel
_FUNCTION_TYPE = getattr(wp, "Function", None) or wp.context.Function


def _context() -> Any:
    return wp._src.context if hasattr(wp, "_src") else wp.context


def package_name(path: str) -> tuple[str, str] | None:
    """(dotted module name, project root) for a file inside a package, None for a script.

    The package is the highest folder above the file that holds an ``__init__.py``; folders
    between it and the file may lack one (namespace portions, like ``newton/_src``)."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    top = None
    folder = directory
    while True:
        if os.path.exists(os.path.join(folder, "__init__.py")):
            top = folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if top is None:
        return None
    root = os.path.dirname(top)
    parts = os.path.relpath(os.path.splitext(path)[0], root).split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts), root


def _same_file(a: str | None, b: str) -> bool:
    return bool(a) and os.path.realpath(a) == os.path.realpath(b)


def import_by_path(path: str, module_name: str) -> Any:
    """Import a file by path under ``module_name`` (its folder first on ``sys.path``)."""
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)  # sibling imports work as when the user runs the file
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def import_user_module(path: str, fallback_name: str) -> tuple[Any, str]:
    """Import ``path`` as Python would: (module, how it was imported)."""
    package = package_name(path)
    if package is None:
        return import_by_path(path, fallback_name), f"by path (a script: no __init__.py beside it) as {fallback_name}"
    dotted, root = package
    if root not in sys.path:
        sys.path.insert(0, root)
    existing = sys.modules.get(dotted)
    if existing is not None and not _same_file(getattr(existing, "__file__", None), path):
        return import_by_path(path, fallback_name), f"by path: {dotted} is another module already loaded"
    module = importlib.import_module(dotted)
    if not _same_file(getattr(module, "__file__", None), path):
        # A package of the same name elsewhere on the path won: load the file itself.
        return import_by_path(path, fallback_name), f"by path: {dotted} resolves to {module.__file__}"
    return module, f"as {dotted} (project root {root} on sys.path)"


# -- targets -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Target:
    """One kernel or ``@wp.func`` overload found at the flagged location."""

    kind: str  # "kernel" | "func"
    obj: Any  # the wp.Kernel, or the wp.Function of this overload
    name: str
    source: str  # dedented source of the definition
    first_line: int  # file line of the source's first line (decorators included)
    last_line: int

    @property
    def func(self) -> Any:
        return self.obj.func

    def relative(self, line: int) -> int:
        return line - self.first_line + 1

    def namespace(self) -> dict[str, Any]:
        return function_namespace(self.func)


def function_namespace(func: Any) -> dict[str, Any]:
    """The names a definition sees: its module's globals, then its closure (a factory's
    arguments), as Warp resolves them."""
    names = dict(func.__globals__)
    closure = getattr(func, "__closure__", None) or ()
    for name, cell in zip(func.__code__.co_freevars, closure):
        try:
            names[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return names


def function_source(func: Any) -> str | None:
    """The dedented source of a definition, None where Python cannot read it back."""
    lines = _definition_lines(func)
    return None if lines is None else lines[0]


def _definition_lines(func: Any) -> tuple[str, int, int] | None:
    try:
        lines, first = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return None
    return textwrap.dedent("".join(lines)), first, first + len(lines) - 1


# warp-lint's own generated modules (the user's file may itself be loaded as warp_lint_target_...).
OWN_MODULE_PREFIXES = ("warp_lint_generated", "warp_lint_tracking", "warp_lint_trace")


def registered_functions() -> tuple[list[Any], list[Any]]:
    """Every live kernel and every ``@wp.func`` overload Warp knows of, outside warp-lint's own."""
    kernels: dict[int, Any] = {}
    functions: dict[int, Any] = {}
    for name, module in list(getattr(_context(), "user_modules", {}).items()):
        if str(name).startswith(OWN_MODULE_PREFIXES):
            continue
        live = getattr(module, "_get_live_kernels", None)
        for kernel in [*(live() if live else ()), *module.kernels.values()]:
            if getattr(kernel, "generic_parent", None) is None:
                kernels[id(kernel)] = kernel
        for function in list(module.functions.values()):
            functions[id(function)] = function
            for overload in [*getattr(function, "user_overloads", {}).values(),
                             *getattr(function, "user_templates", {}).values()]:
                if getattr(overload, "generic_parent", None) is None:
                    functions[id(overload)] = overload
    for function in _held_in_closures([*kernels.values(), *functions.values()]):
        functions.setdefault(id(function), function)
    return list(kernels.values()), list(functions.values())


def _held_in_closures(definitions: list[Any]) -> list[Any]:
    """``@wp.func``s that only the closures of live definitions still hold. A factory called
    twice registers two functions under one key, and the module keeps the last: newton's
    ``create_shape_support_function`` makes its ``center_ties`` variant first, which only the MPR
    solver built from it still calls."""
    found: dict[int, Any] = {}
    pending = list(definitions)
    while pending:
        func = getattr(pending.pop(), "func", None)
        for cell in getattr(func, "__closure__", None) or ():
            try:
                held = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(held, _FUNCTION_TYPE) and id(held) not in found and getattr(held, "func", None) is not None:
                found[id(held)] = held
                pending.append(held)
    return list(found.values())


def registered_structs() -> list[Any]:
    """Every ``@wp.struct`` Warp knows of, outside warp-lint's own modules, in a stable order."""
    found: dict[int, Any] = {}
    for name, module in list(getattr(_context(), "user_modules", {}).items()):
        if str(name).startswith(OWN_MODULE_PREFIXES):
            continue
        for struct in list(getattr(module, "structs", {}).values()):
            found[id(struct)] = struct
    return sorted(found.values(), key=lambda s: str(getattr(s, "key", "")))


def find_targets(path: str, line: int, name: str | None, kind: str) -> list[Target]:
    """The kernels (``kind="kernel"``) or ``@wp.func`` overloads (``"func"``) defined in ``path``
    whose source spans ``line``, in a stable order (a factory may have made several); else the one
    definition of that name in the file."""
    kernels, functions = registered_functions()
    candidates = kernels if kind == "kernel" else functions
    found: list[Target] = []
    named: list[Target] = []  # of that name, elsewhere in the file
    for obj in candidates:
        func = getattr(obj, "func", None)
        code = getattr(func, "__code__", None)
        if code is None or not _same_file(code.co_filename, path):
            continue
        if name and func.__name__ != name:
            continue
        lines = _definition_lines(func)
        if lines is None:
            continue
        source, first, last = lines
        if first <= line <= last:
            found.append(Target(kind, obj, func.__name__, source, first, last))
        elif name:
            named.append(Target(kind, obj, func.__name__, source, first, last))
    if not found and len({t.first_line for t in named}) == 1 and not _defines_at(path, line, name):
        found = named  # the finding is on a helper the kernel calls (a native function, say)
    found.sort(key=lambda t: (t.first_line, str(getattr(t.obj, "key", ""))))
    return found


def _defines_at(path: str, line: int, name: str | None) -> bool:
    """Whether a definition named ``name`` spans ``line`` in the file: then the finding is in that
    definition (one a factory did not make at import, beside another of the same name that it
    did), not in a helper that a kernel of that name calls."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
               and first_line(node) <= line <= (node.end_lineno or node.lineno) for node in ast.walk(tree))


# -- argument types ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ArrayType:
    """What an array parameter holds, whichever way it was annotated (``wp.array(dtype=float)``,
    ``wp.array[float]``, ``wp.array2d[wp.vec3]``: the last two are annotation objects in 1.19)."""

    dtype: Any
    ndim: int


def array_type(t: Any) -> ArrayType | None:
    """An :class:`ArrayType` for plain array annotations; None for anything else (indexed and
    fabric arrays included: they are not plain arrays)."""
    kind = type(t).__name__
    if "indexed" in kind.lower() or "fabric" in kind.lower():
        return None
    is_array = getattr(wp.types, "is_array", None)
    if isinstance(t, wp.array) or (is_array is not None and is_array(t) and hasattr(t, "dtype") and hasattr(t, "ndim")):
        return ArrayType(t.dtype, int(t.ndim))
    return None


def is_special_array(t: Any) -> bool:
    kind = type(t).__name__.lower()
    return "indexed" in kind or "fabric" in kind


def parameters(target: Target) -> list[tuple[str, Any]]:
    """(name, Warp type) of each parameter, in order."""
    if target.kind == "kernel":
        return [(arg.label, arg.type) for arg in target.obj.adj.args]
    return list(target.obj.input_types.items())


def is_generic(t: Any) -> bool:
    if t is typing.Any:
        return True
    array = array_type(t)
    if array is not None:
        return array.dtype is typing.Any
    checker = getattr(wp.types, "type_is_generic", None)
    return bool(checker(t)) if checker is not None else False


def backward_disabled(target: Target) -> str | None:
    """Why the code has no backward pass (kernel option, module option, ``wp.config``), or None."""
    if target.kind == "kernel" and target.obj.options.get("enable_backward") is False:
        return "the kernel is declared with enable_backward=False"
    module = getattr(target.obj, "module", None)
    options = getattr(module, "options", {}) or {}
    if options.get("enable_backward") is False:
        return f"its module {module.name} sets enable_backward=False (wp.set_module_options)"
    if getattr(wp.config, "enable_backward", True) is False:
        return "wp.config.enable_backward is False"
    return None


# Module options a copy of the user's kernel must share to behave the same.
COPIED_OPTIONS = ("max_unroll", "enable_backward", "fast_math", "fuse_fp", "mode")


def module_options(target: Target) -> dict[str, Any]:
    options = getattr(getattr(target.obj, "module", None), "options", {}) or {}
    return {k: options[k] for k in COPIED_OPTIONS if k in options}


# -- kernels defined inside functions ------------------------------------------------------------
def nested_targets(module: Any, path: str, line: int, name: str | None, directory: str,
                   kind: str = "kernel") -> list[Target]:
    """A kernel or ``@wp.func`` defined inside a function that import never calls (a test's body,
    a factory called at run time): made here from its source, over the module's globals and what
    the enclosing functions define before it (assignments, ``@wp.func``, ``@wp.struct`` and native
    helpers), each run on its own. The enclosing functions' parameters are bound where their
    signature offers a value (a default, None for an optional one, or an annotated class that
    builds without arguments, like a configuration dataclass); a statement that needs another one (``device``, a parametrised
    ``dtype``) is left out, and if the definition needs it too, nothing is made."""
    if module is None or not name:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    chain = _enclosing_definitions(tree, line, name)
    if len(chain) < 2:
        return []
    lines = text.splitlines(keepends=True)
    namespace = dict(vars(module))
    os.makedirs(directory, exist_ok=True)
    annotations = _type_checking_names(tree, namespace)
    missing: set[str] = set()
    for outer, inner in zip(chain, chain[1:]):
        offered = _offered_arguments(outer, namespace, annotations)
        namespace.update(offered)
        arguments = outer.args
        missing |= {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs} - set(offered)
        for statement in _flat_body(outer.body):
            if statement is inner:
                break
            if isinstance(statement, _PRELUDE_STATEMENTS):
                _run_statement(statement, lines, namespace, directory)
    definition = chain[-1]
    if missing & {n.id for n in ast.walk(definition) if isinstance(n, ast.Name)}:
        return []  # it reads an argument no value stands for (a function the factory is given, say)
    if not _run_statement(definition, lines, namespace, directory):
        return []
    made = namespace.get(name)
    if not isinstance(made, _KERNEL_TYPE if kind == "kernel" else _FUNCTION_TYPE):
        return []
    source, first, last = _statement_source(definition, lines)
    return [Target(kind, made, name, source, first, last)]


_PRELUDE_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


def _flat_body(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A function body's statements in order, those of its ``if``/``with``/``try`` blocks included
    (a factory that defines one of two variants under ``if``), not those of loops or nested
    definitions."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.If, ast.With, ast.Try)):
            for block in (statement.body, getattr(statement, "orelse", []), getattr(statement, "finalbody", [])):
                yield from _flat_body(block)


def _type_checking_names(tree: ast.Module, namespace: dict[str, Any]) -> dict[str, Any]:
    """What the module imports only for type checkers (``if TYPE_CHECKING:``), for reading its
    annotations: a factory's ``config: RenderContext.Config``."""
    names: dict[str, Any] = {}
    for statement in tree.body:
        test = statement.test if isinstance(statement, ast.If) else None
        if test is None or attribute_path(test) not in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            continue
        for inner in statement.body:
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                scope = {k: namespace[k] for k in ("__name__", "__package__", "__spec__") if k in namespace}
                try:
                    exec(compile(ast.Module([inner], []), "<type-checking import>", "exec"), scope)  # noqa: S102
                except Exception:  # noqa: BLE001 - a name only a type checker can resolve
                    continue
                names.update({k: v for k, v in scope.items() if not k.startswith("__")})
    return names


def attribute_path(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name (or the name), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _offered_arguments(function: ast.FunctionDef, namespace: dict[str, Any],
                       annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    """Values for a function's parameters from its signature alone: defaults, None where the
    annotation admits it, and instances of annotated classes that build without arguments
    (``annotations``: names to read them with)."""
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]], arguments.defaults))
    defaults.update({a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None})
    offered: dict[str, Any] = {}
    for parameter in positional + arguments.kwonlyargs:
        try:
            if parameter.arg in defaults:
                offered[parameter.arg] = eval(compile(ast.Expression(defaults[parameter.arg]), "<default>", "eval"),
                                              namespace)  # noqa: S307 - the user's own default
            elif parameter.annotation is not None:
                annotation = eval(compile(ast.Expression(parameter.annotation), "<annotation>", "eval"),  # noqa: S307
                                  {**(annotations or {}), **namespace})
                if type(None) in typing.get_args(annotation):
                    offered[parameter.arg] = None  # `flags: str | None`: None is a value it takes
                elif isinstance(annotation, type) and annotation.__module__ not in ("builtins", "typing"):
                    offered[parameter.arg] = annotation()
        except Exception:  # noqa: BLE001 - no value offered: statements that need it are left out
            continue
    return offered


def _enclosing_definitions(tree: ast.Module, line: int, name: str) -> list[ast.FunctionDef]:
    """The functions around ``line`` from the outermost down to the definition named ``name``: the
    one spanning the line, or one of that name in the body of the innermost function around it
    (a finding on a helper names the kernel that calls it)."""
    chain: list[ast.FunctionDef] = []
    body = tree.body
    while True:
        candidates = list(_flat_body(body)) if chain else body
        holder = next((s for s in candidates if isinstance(s, (ast.FunctionDef, ast.ClassDef))
                       and first_line(s) <= line <= (s.end_lineno or s.lineno)), None)
        if isinstance(holder, ast.FunctionDef) and holder.name == name:
            return chain + [holder]
        named = [s for s in candidates if isinstance(s, ast.FunctionDef) and s.name == name]
        if chain and named:
            return chain + named[-1:]
        if not isinstance(holder, ast.FunctionDef):
            return []
        chain.append(holder)
        body = holder.body


def _statement_source(statement: ast.stmt, lines: list[str]) -> tuple[str, int, int]:
    first, last = first_line(statement), statement.end_lineno or statement.lineno
    return textwrap.dedent("".join(lines[first - 1:last])), first, last


def _run_statement(statement: ast.stmt, lines: list[str], namespace: dict[str, Any], directory: str) -> bool:
    """Run one statement of an enclosing function's body at module level, from a file of its own
    (Warp reads a definition's source back with ``inspect``); False when it raises."""
    source, _, _ = _statement_source(statement, lines)
    digest = hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    file = os.path.join(directory, f"warp_lint_nested_{digest}.py")
    if not os.path.exists(file):
        with open(file, "w", encoding="utf-8") as handle:
            handle.write(source)
    try:
        exec(compile(source, file, "exec"), namespace)  # noqa: S102 - the user's own definitions, as their test runs them
    except Exception:  # noqa: BLE001 - it needs what only a call of the function provides
        return False
    return True


def call_of_helper(target: Target, path: str, line: int) -> int | None:
    """The file line of the target's first call of the helper defined at ``line`` (a finding on a
    native function names the kernel calling it: the experiment watches that call)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        body = ast.parse(target.source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    around = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
              and first_line(node) <= line <= (node.end_lineno or node.lineno)]
    innermost = max(around, key=first_line, default=None)  # not the test function around both
    helper = innermost.name if innermost is not None and innermost.name != target.name else None
    calls = [node.lineno for node in ast.walk(body) if isinstance(node, ast.Call) and helper is not None
             and (getattr(node.func, "id", None) == helper or getattr(node.func, "attr", None) == helper)]
    return target.first_line + min(calls) - 1 if calls else None
