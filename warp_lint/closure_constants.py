"""The integer values a kernel captures from the Python function that makes it.

A kernel or ``@wp.func`` defined inside a factory (`def make_kernel(start, stop, step): @wp.kernel
...`) reads the factory's parameters and locals as free variables. Warp evaluates them when it
builds the kernel: each is a compile-time constant, so `range(n)` over one is unrolled when its
trip count is within ``max_unroll``, like `range(6)`, and dynamic past it (measured on Warp 1.19:
a product carried through `range(n)` with `n` captured as 6 or 16 has the right gradient, with 17
or 40 it does not).

What the values are is read where the file calls the factory: an integer written in the call, a
default, a name the call's enclosing `for` takes from a literal table (`for start, stop, step in
((5, -1, -1), (0, 6, 2)):`), or a local the factory assigns an integer once. Where a call passes
anything else, or the file never calls the factory, the value is not known (None).

Read from the file's ``ast`` tree: the kernel model parses only the Warp definitions, without the
factories around them.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable, Iterator

Values = frozenset[int] | None  # the integers a captured name may hold; None: not known
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
# How many callers up a parameter passed on (`def grad(n): make(n)`) is followed.
CALLER_DEPTH = 3


@dataclasses.dataclass(frozen=True)
class CallIn:
    """A call, with the `for` loops (and comprehensions) around it in its function, and that
    function (None: module level)."""

    call: ast.Call
    loops: tuple[ast.For | ast.comprehension, ...]
    function: FunctionNode | None


Calls = dict[str, list[CallIn]]


def captured_values(tree: ast.Module, is_warp: Callable[[ast.AST], bool]) -> dict[str, dict[str, Values]]:
    """The name of each Warp definition that sits inside a ``def`` -> the names its enclosing
    functions bind (parameters, assigned names) -> their values. Definitions of one name made by
    several factories (or one factory twice) share one map: a name's values are all of theirs,
    unknown where one of them does not know."""
    found: dict[str, dict[str, Values]] = {}
    calls: Calls | None = None
    for definition, enclosing in _definitions(tree):
        if not enclosing or not is_warp(definition):
            continue
        if calls is None:
            calls = _calls_by_name(tree)
        own = _bound_names(definition) | {a.arg for a in _all_params(definition)}
        captured: dict[str, Values] = {}
        for function in enclosing:  # outermost first: an inner function's names shadow the outer's
            captured.update(_names_of(function, calls))
        merged = found.setdefault(definition.name, {})
        for name, values in captured.items():
            if name in own:
                continue
            earlier = merged.get(name, frozenset())
            merged[name] = None if values is None or earlier is None else earlier | values
    return found


def held_module_options(tree: ast.Module, is_warp: Callable[[ast.AST], bool]) -> dict[str, dict[str, object]]:
    """The name of each Warp definition declared `module=NAME`, NAME a name that holds a module
    (`module = wp.get_module(...)`) -> the options its own scope or an enclosing one gives that
    module (`module.options.update({"enable_backward": False})`, `module.options["k"] = v`):
    newton makes a module per factory this way."""
    found: dict[str, dict[str, object]] = {}
    for definition, enclosing in _definitions(tree):
        if not is_warp(definition):
            continue
        holder = _module_keyword(definition)
        if holder is None:
            continue
        options: dict[str, object] = {}
        for scope in (tree, *enclosing):
            options.update(_options_given(scope, holder))
        if options:
            found.setdefault(definition.name, {}).update(options)
    return found


def _module_keyword(definition: FunctionNode) -> str | None:
    for decorator in definition.decorator_list:
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "module" and isinstance(keyword.value, ast.Name):
                    return keyword.value.id
    return None


def _options_given(scope: ast.AST, holder: str) -> dict[str, object]:
    """`holder.options.update({...})` and `holder.options[KEY] = v` in a scope's own statements."""
    options: dict[str, object] = {}
    body = scope.body if isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) else []
    for statement in body:
        for node in ast.walk(statement) if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                       ast.ClassDef)) else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                    and _is_options_of(node.func.value, holder) and node.args and isinstance(node.args[0], ast.Dict):
                for key, value in zip(node.args[0].keys, node.args[0].values):
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                        options[key.value] = value.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript) \
                    and _is_options_of(node.targets[0].value, holder) and isinstance(node.targets[0].slice, ast.Constant) \
                    and isinstance(node.value, ast.Constant):
                options[node.targets[0].slice.value] = node.value.value
    return options


def _is_options_of(node: ast.AST, holder: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "options" and isinstance(node.value, ast.Name) \
        and node.value.id == holder


def _definitions(tree: ast.Module) -> Iterator[tuple[FunctionNode, tuple[FunctionNode, ...]]]:
    """Every function definition in source order, with the functions around it, outermost first."""
    found = []
    stack: list[tuple[ast.AST, tuple[FunctionNode, ...]]] = [(tree, ())]
    while stack:
        node, enclosing = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((child, enclosing))
                stack.append((child, enclosing + (child,)))
            elif isinstance(child, ast.stmt) or isinstance(child, ast.excepthandler):
                stack.append((child, enclosing))
    found.sort(key=lambda item: (item[0].lineno, item[0].col_offset))
    return iter(found)


def _all_params(function: FunctionNode) -> list[ast.arg]:
    arguments = function.args
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
            *([arguments.vararg] if arguments.vararg else []), *([arguments.kwarg] if arguments.kwarg else [])]


def _target_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if not isinstance(
        target, (ast.Attribute, ast.Subscript)) else set()


def _assignments(function: FunctionNode) -> Iterator[tuple[ast.AST, ast.expr | None]]:
    """(target, value) of each binding in the body, outside nested definitions; value None for
    augmented assignments and `for` targets."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield target, node.value if len(node.targets) == 1 else None
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
            yield node.target, node.value if isinstance(node, ast.AnnAssign) else None
        stack.extend(ast.iter_child_nodes(node))


def _bound_names(function: FunctionNode) -> set[str]:
    return {name for target, _ in _assignments(function) for name in _target_names(target)}


def _names_of(function: FunctionNode, calls: Calls) -> dict[str, Values]:
    names: dict[str, Values] = {a.arg: None for a in _all_params(function)}
    for param in function.args.posonlyargs + function.args.args:
        names[param.arg] = _parameter_values(function, param.arg, calls, CALLER_DEPTH)
    assigned: dict[str, list[ast.expr | None]] = {}
    for target, value in _assignments(function):
        for name in _target_names(target):
            assigned.setdefault(name, []).append(value if isinstance(target, ast.Name) else None)
    for name, values in assigned.items():
        single = _integer(values[0]) if len(values) == 1 and name not in names else None
        names[name] = frozenset({single}) if single is not None else None
    return names


def _parameter_values(function: FunctionNode, param: str, calls: Calls, depth: int) -> Values:
    """What the file's calls of ``function`` pass for its positional parameter ``param``."""
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    position = positional.index(param)
    defaults = function.args.defaults
    first_default = len(positional) - len(defaults)
    default = defaults[position - first_default] if position >= first_default else None
    if isinstance(function, ast.FunctionDef) and function.args.args and function.args.args[0].arg in ("self", "cls"):
        position -= 1  # `self.make(n)` passes `n` first
    found = calls.get(function.name, [])
    if not found or depth == 0 or any(site.function is function for site in found):  # none, or recursive
        return None
    values: set[int] = set()
    for site in found:
        call = site.call
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        keyword = next((k.value for k in call.keywords if k.arg == param), None)
        argument = keyword if keyword is not None else (
            call.args[position] if 0 <= position < len(call.args) else default)
        more = _expression_values(argument, site, calls, depth) if argument is not None else None
        if more is None:
            return None
        values |= more
    return frozenset(values)


def _expression_values(expression: ast.expr, site: CallIn, calls: Calls, depth: int) -> set[int] | None:
    """An integer written there, a name an enclosing `for` takes from a literal table, or a
    parameter of the calling function, followed to its own callers."""
    number = _integer(expression)
    if number is not None:
        return {number}
    if not isinstance(expression, ast.Name):
        return None
    for loop in reversed(site.loops):
        if expression.id not in _target_names(loop.target):
            continue
        table = _literal(loop.iter)
        if isinstance(loop.target, ast.Name):
            rows, place = [(row,) for row in table] if isinstance(table, (tuple, list)) else None, 0
        elif isinstance(loop.target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in loop.target.elts):
            rows, place = table, [e.id for e in loop.target.elts].index(expression.id)
        else:
            return None
        if not isinstance(rows, (tuple, list)) or not all(
                isinstance(row, (tuple, list)) and len(row) > place and type(row[place]) is int for row in rows):
            return None
        return {row[place] for row in rows}
    caller = site.function
    if caller is not None and expression.id in [a.arg for a in caller.args.posonlyargs + caller.args.args] and \
            expression.id not in _bound_names(caller):
        values = _parameter_values(caller, expression.id, calls, depth - 1)
        return set(values) if values is not None else None
    return None


def _integer(expression: ast.expr | None) -> int | None:
    value = _literal(expression) if expression is not None else None
    return value if type(value) is int else None


def _literal(expression: ast.expr) -> object:
    try:
        return ast.literal_eval(expression)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _calls_by_name(tree: ast.Module) -> Calls:
    """Calls by the name they call (`make(...)`, `self.make(...)`), each with the `for` loops and
    the function around it."""
    found: Calls = {}
    stack: list[tuple[ast.AST, tuple[ast.For, ...], FunctionNode | None]] = [(tree, (), None)]
    while stack:
        node, loops, function = stack.pop()
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name is not None:
                found.setdefault(name, []).append(CallIn(node, loops, function))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend((child, (), node) for child in node.body)
            continue
        if isinstance(node, ast.For):
            stack.append((node.iter, loops, function))
            stack.extend((child, loops + (node,), function) for child in [*node.body, *node.orelse])
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            stack.extend((generator.iter, loops, function) for generator in node.generators)
            inner = loops + tuple(node.generators)
            elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            stack.extend((child, inner, function) for child in
                         [*elements, *(test for generator in node.generators for test in generator.ifs)])
            continue
        stack.extend((child, loops, function) for child in ast.iter_child_nodes(node))
    return found
