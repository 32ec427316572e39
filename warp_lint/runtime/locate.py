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

import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
import textwrap
import typing
from typing import Any

import warp as wp

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
        """The names the definition sees: its module's globals, then its closure (a factory's
        arguments), as Warp resolves them."""
        names = dict(self.func.__globals__)
        closure = getattr(self.func, "__closure__", None) or ()
        for name, cell in zip(self.func.__code__.co_freevars, closure):
            try:
                names[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
        return names


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
    return list(kernels.values()), list(functions.values())


def find_targets(path: str, line: int, name: str | None, kind: str) -> list[Target]:
    """The kernels (``kind="kernel"``) or ``@wp.func`` overloads (``"func"``) defined in ``path``
    whose source spans ``line``, in a stable order (a factory may have made several)."""
    kernels, functions = registered_functions()
    candidates = kernels if kind == "kernel" else functions
    found: list[Target] = []
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
    found.sort(key=lambda t: (t.first_line, str(getattr(t.obj, "key", ""))))
    return found


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
