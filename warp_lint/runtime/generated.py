"""Kernels that warp-lint writes itself (child side: imports warp).

Two kinds, both written as Python source into one generated module per user file, so Warp
compiles them together once (a compile costs seconds, a launch microseconds):

* coverage copies: the user's kernel (or ``@wp.func``) with ``wp.atomic_add(hits, 0, 1)``
  inserted before the flagged statement and the counter array as an extra parameter. Launched
  on the same inputs as the gradient check, it proves the flagged statement actually ran: a
  gradient that matches finite differences only clears a finding whose statement executed.
* wrapper kernels for findings inside ``@wp.func`` helpers: one thread per element, each scalar
  or vector parameter read from an array, the return value(s) stored into arrays.

The source is written to a file under warp-lint's own cache directory (never next to the user's
files) because Warp reads kernel source with ``inspect``; its globals are a copy of the user
module's globals, so helper functions, constants and the user's ``wp`` alias resolve as in the
original. The text is deterministic, so a second run hits Warp's kernel cache.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import os
import sys
import tempfile
import textwrap
import types
import typing
from typing import Any

import warp as wp

WARP_ALIAS = "_wl_wp"
HITS_PARAM = "_wl_hits"
RETURN_PREFIX = "_wl_ret"
THREAD_INDEX = "_wl_i"


class InstrumentationError(Exception):
    """The flagged statement could not be located in the function's source."""


def function_source(func: Any) -> tuple[str, int]:
    """Dedented source of a Python function and the file line of its first source line."""
    lines, first_line = inspect.getsourcelines(func)
    return textwrap.dedent("".join(lines)), first_line


def _statement_lists(node: ast.AST):
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(node, "handlers", []) or []:
        yield handler.body


def _find_statement(block: list[ast.stmt], line: int) -> tuple[list[ast.stmt], int] | None:
    """The innermost statement starting on ``line``: (its enclosing list, its index)."""
    for index, statement in enumerate(block):
        end = getattr(statement, "end_lineno", statement.lineno)
        if statement.lineno <= line <= end:
            for inner in _statement_lists(statement):
                found = _find_statement(inner, line)
                if found is not None:
                    return found
            if statement.lineno == line:
                return block, index
    return None


def coverage_copy(func: Any, flagged_line: int, new_name: str, *, is_kernel: bool) -> str:
    """Source of ``func`` renamed, undecorated, taking ``_wl_hits`` and counting the flagged line."""
    source, first_line = function_source(func)
    tree = ast.parse(source)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise InstrumentationError("not a function definition")
    found = _find_statement(definition.body, flagged_line - first_line + 1)
    if found is None:
        raise InstrumentationError(f"no statement starts on line {flagged_line} of {definition.name}")
    block, index = found
    counter = ast.parse(f"{WARP_ALIAS}.atomic_add({HITS_PARAM}, 0, 1)").body[0]
    block.insert(index, counter)
    definition.name = new_name
    definition.decorator_list = [ast.parse(f"{WARP_ALIAS}.{'kernel' if is_kernel else 'func'}", mode="eval").body]
    definition.args.args.append(
        ast.arg(arg=HITS_PARAM, annotation=ast.parse(f"{WARP_ALIAS}.array(dtype={WARP_ALIAS}.int32)", mode="eval").body)
    )
    return ast.unparse(ast.fix_missing_locations(definition))


@dataclasses.dataclass
class FuncSignature:
    """Parameter and return types of a ``@wp.func``, as Warp resolves them."""

    params: list[tuple[str, Any]]
    returns: list[Any]


def func_signature(function: Any) -> FuncSignature:
    """Read a ``wp.Function``'s parameter types and infer its return types by building its adjoint.

    ``Function.build(None)`` runs Warp's own type inference on the body without compiling
    anything; an explicit return annotation is used when building is not possible.
    """
    params = list(function.input_types.items())
    returns: list[Any] = []
    try:
        function.build(None)
        returns = [var.type for var in (function.adj.return_var or [])]
    except Exception:
        annotation = inspect.signature(function.func).return_annotation
        if annotation not in (inspect.Signature.empty, None):
            returns = list(annotation) if isinstance(annotation, tuple) else [annotation]
    return FuncSignature(params=params, returns=returns)


def _type_name(t: Any) -> str:
    return {float: "float32", int: "int32", bool: "bool"}.get(t, getattr(t, "__name__", str(t)))


def func_wrapper(
    function_name: str,
    signature: FuncSignature,
    index_params: list[str],
    wrapper_name: str,
    type_names: dict[str, Any],
    *,
    hits: bool = False,
) -> str:
    """Source of a kernel that calls ``function_name`` once per thread.

    Array parameters pass through; integer parameters named in ``index_params`` receive the thread
    index, other integers a kernel argument; every other parameter is read from a per-thread array
    of its type; return values are stored into ``_wl_ret0``, ``_wl_ret1``... ``type_names``
    receives the type objects the source refers to (injected into the module's globals).
    """

    def type_ref(t: Any) -> str:
        if t is typing.Any:
            t = wp.float64  # generic helpers run in float64
        t = {float: wp.float32, int: wp.int32, bool: wp.bool}.get(t, t)
        key = f"_wl_t_{_type_name(t)}_{len(type_names)}"
        for existing, value in type_names.items():
            if value is t:
                return existing
        type_names[key] = t
        return key

    params: list[str] = []
    call_args: list[str] = []
    for name, t in signature.params:
        if isinstance(t, wp.array):
            dtype = wp.float64 if t.dtype is typing.Any else t.dtype
            params.append(f"{name}: {WARP_ALIAS}.array(dtype={type_ref(dtype)}, ndim={t.ndim})")
            call_args.append(name)
        elif t in (int, wp.int32, wp.int64) and name in index_params:
            call_args.append(THREAD_INDEX if t in (int, wp.int32) else f"{type_ref(t)}({THREAD_INDEX})")
        elif t in (int, wp.int32, wp.int64, wp.bool, bool):
            params.append(f"{name}: {type_ref(t)}")
            call_args.append(name)
        else:
            params.append(f"{name}: {WARP_ALIAS}.array(dtype={type_ref(t)})")
            call_args.append(f"{name}[{THREAD_INDEX}]")
    for k, t in enumerate(signature.returns):
        params.append(f"{RETURN_PREFIX}{k}: {WARP_ALIAS}.array(dtype={type_ref(t)})")
    if hits:
        params.append(f"{HITS_PARAM}: {WARP_ALIAS}.array(dtype={WARP_ALIAS}.int32)")
        call_args.append(HITS_PARAM)
    call = f"{function_name}({', '.join(call_args)})"
    body = [f"{THREAD_INDEX} = {WARP_ALIAS}.tid()"]
    if len(signature.returns) == 1:
        body.append(f"{RETURN_PREFIX}0[{THREAD_INDEX}] = {call}")
    elif signature.returns:
        names = [f"_wl_r{k}" for k in range(len(signature.returns))]
        body.append(f"{', '.join(names)} = {call}")
        body.extend(f"{RETURN_PREFIX}{k}[{THREAD_INDEX}] = {n}" for k, n in enumerate(names))
    else:
        body.append(call)
    return (
        f"@{WARP_ALIAS}.kernel\ndef {wrapper_name}({', '.join(params)}):\n"
        + "".join(f"    {line}\n" for line in body)
    )


def load_generated_module(name: str, definitions: list[str], user_globals: dict[str, Any], extra_globals: dict[str, Any], directory: str) -> types.ModuleType:
    """Write ``definitions`` to ``directory/name.py`` and execute it over a copy of the user's globals."""
    source = f"# Generated by warp-lint for runtime confirmation; safe to delete.\nimport warp as {WARP_ALIAS}\n\n\n" + "\n\n".join(definitions)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.py")
    try:
        with open(path, encoding="utf-8") as existing:
            unchanged = existing.read() == source
    except OSError:
        unchanged = False
    if not unchanged:
        # Atomic replace: parallel warp-lint runs may write the same file.
        handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(source)
        os.replace(temporary, path)
    module = types.ModuleType(name)
    module.__dict__.update({k: v for k, v in user_globals.items() if not (k.startswith("__") and k.endswith("__"))})
    module.__dict__.update(extra_globals)
    module.__file__ = path
    module.__name__ = name
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def stable_name(prefix: str, *parts: str) -> str:
    digest = hashlib.sha1("\0".join(parts).encode()).hexdigest()[:10]
    return f"{prefix}_{digest}"
