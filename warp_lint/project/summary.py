"""One file's summary for the project model, read from Python's ``ast``.

The summary holds no tree: names, codes, positions and, for every host function (and the
module's own statements), its *operations* in program order: assignments, calls, ``with``
blocks, loops, ``if`` arms, ``.grad`` reads and returns. Nothing in it is resolved against other
files: a call is recorded by its code (``self.solver.step``), and the project model decides what
it means. That keeps a summary a function of the file's text alone, so it is cached by content.

Codes are the source text of the node, except for names and dotted names, which are spelled
directly. Positions are 1-based lines and 1-based columns counted in code points (``ast`` counts
UTF-8 bytes), with exclusive ends, as findings use them.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import hashlib
import operator
import re
from collections.abc import Iterator
from typing import Any

from warp_lint.source import split_lines
from warp_lint.triage import first_line

SUMMARY_VERSION = 14

MODULE_SCOPE = "<module>"


class _NotLiteral:
    """What a value holds when ``ast.literal_eval`` cannot read it. One object, compared with
    ``is``, in every process: a summary a pool worker pickles comes back holding this same one."""

    __slots__ = ()

    def __reduce__(self) -> str:
        return "NOT_LITERAL"

    def __repr__(self) -> str:
        return "NOT_LITERAL"


NOT_LITERAL = _NotLiteral()

WARP_DECORATOR_KINDS = {
    "warp.kernel": "kernel",
    "warp.func": "func",
    "warp.func_grad": "func_grad",
    "warp.func_replay": "func_replay",
    "warp.func_native": "func_native",
    "warp.struct": "struct",
}
OVERLOAD_DECORATORS = {"warp.overload"}
HOST_COPY_METHODS = frozenset({"numpy", "list"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_HOST_COPY = re.compile(r"([A-Za-z_][A-Za-z_0-9.]*(?:\[[^\]]*\])*)\.(?:numpy|list)\(\)")
LAUNCH_FUNCTIONS = frozenset({"warp.launch", "warp.launch_tiled"})


def _summary_class(cls=None, /, **options):
    """A slots dataclass that pickles as its constructor and its fields' values. A run sends every
    file's summary from the pool's workers to the main process, half a million of these objects:
    this form loads 2.5 times as fast as a dataclass's default (a new object, then its
    ``__dict__`` set from a pickled dict)."""
    if cls is None:
        return lambda cls: _summary_class(cls, **options)
    cls = dataclasses.dataclass(cls, slots=True, **options)
    names = [field.name for field in dataclasses.fields(cls)]
    if len(names) > 1:
        values = operator.attrgetter(*names)
    else:
        values = lambda obj: tuple(getattr(obj, name) for name in names)  # attrgetter of one name is no tuple

    def __reduce__(self):
        return cls, values(self)

    cls.__reduce__ = __reduce__
    return cls


# Hashable but not frozen: a frozen dataclass's constructor sets each field through
# ``object.__setattr__``, which made unpickling the spans three times as slow. Spans are shared
# within a file (``_Text``): never assign to one.
@_summary_class(unsafe_hash=True)
class Loc:
    line: int
    column: int
    end_line: int
    end_column: int


# -- operations --------------------------------------------------------------------------------

@_summary_class
class Value:
    """An expression whose value an operation uses."""

    code: str
    plain: bool  # a name, attribute or subscript chain rooted at a name, without calls: an alias
    call: int | None = None  # the index of the call that produces it, when it is a call
    literal: Any = NOT_LITERAL  # its value when ``ast.literal_eval`` reads it
    elements: tuple[Value, ...] | None = None  # a list or tuple display's elements, up to a starred one
    # ... and all of them, the starred ones marked by their ``star``, when a starred one cut them
    spread: tuple[Value, ...] | None = None
    dict_keys: tuple[Value, ...] | None = None  # a dict display's keys
    star: str = ""  # "*" or "**" for a starred argument
    element: int | None = None  # `a, b = f()`: the position this target takes of the call's result

    @property
    def names(self) -> set[str]:
        """The identifiers in it (a few extra, from strings and attributes, are harmless: they only
        ever look up locals that hold host data)."""
        return set(_IDENTIFIER.findall(self.code))

    @property
    def host_copies(self) -> list[str]:
        """The receivers of ``.numpy()`` / ``.list()`` calls in it."""
        return _HOST_COPY.findall(self.code) if "()" in self.code else []


@_summary_class
class Arg:
    keyword: str | None
    value: Value


@_summary_class
class CallOp:
    index: int  # its number among the function's calls (``Value.call`` refers to it)
    func: str  # the callee's code
    dotted: bool  # the callee is a name or a dotted name
    qualified: str | None  # the Warp name the callee stands for ("warp.launch"), else None
    receiver: str | None  # attribute callees: the receiver's code
    method: str | None  # ... and the attribute
    args: tuple[Arg, ...]
    loc: Loc
    stmt: Loc
    role: str  # how the statement uses the value: expr | assign | discard | return | assert | other
    stmt_kind: str  # the statement's ast class name
    target: str | None = None  # `x = f(...)`: the one plain target the call's value is assigned to

    def argument(self, position: int | None, keyword: str) -> Value | None:
        for arg in self.args:
            if arg.keyword == keyword:
                return arg.value
        if position is None:
            return None
        positional = [a.value for a in self.args if a.keyword is None and not a.value.star]
        return positional[position] if position < len(positional) else None

    @property
    def has_star_kwargs(self) -> bool:
        return any(a.value.star == "**" for a in self.args)


@_summary_class
class AssignOp:
    pairs: tuple[tuple[str, Value | None], ...]  # (target code, its value), bound after every value is read
    augmented: str | None  # "+=" ... for augmented assignments
    loc: Loc
    stmt: Loc
    value: Value | None  # the statement's whole right-hand side


@_summary_class
class WithItem:
    value: Value
    qualified: str | None  # the Warp name called, when the item is a call (``wp.Tape()``)
    asname: str | None


@_summary_class
class WithOp:
    items: tuple[WithItem, ...]
    loc: Loc  # the header: from `with` to the end of the last item
    stmt: Loc


@_summary_class
class EndWithOp:
    pass


@_summary_class
class LoopOp:
    id: int
    kind: str  # for | while
    targets: tuple[str, ...]  # names the loop header binds
    single_pass: bool  # the body ends in break/return/raise at its top level
    loc: Loc
    truths: tuple[bool, ...] | None = None  # `for flag in (False, True):`: each pass's truth of the target
    iterable: Value | None = None  # what a `for` loop iterates over


@_summary_class
class EndLoopOp:
    id: int


@_summary_class
class ArmOp:
    """Entering arm ``arm`` of ``if`` number ``id`` (0 the body, 1 the ``else``/``elif`` part).
    ``gradients``: True when the arm runs only where gradients are required (`if x.requires_grad:`),
    False when only where they are not (its `else`, `if not requires_grad:`), None otherwise."""

    id: int
    arm: int
    gradients: bool | None = None
    dead: bool = False  # never runs: the body of `if False:`, the `else` of `if True:`
    on: tuple[str, bool] | None = None  # runs only when this name is truthy (True) or falsy (False)
    # The body's test, one code text per `and` operand (`self.` dropped, so `self.model.n > 0` and
    # `model.n > 0` read alike), leaving out an operand that tests requires_grad.
    conditions: tuple[str, ...] = ()
    # The body raises when the conditions hold and gradients are required (`if model.n > 0 and
    # model.requires_grad: raise NotImplementedError(...)`): no run gets past it with both.
    refuses_gradients: bool = False
    # What the arm needs of plain names to run: (name, "truthy" | "falsy" | "none" | "not-none"),
    # one per `and` operand of the test that is `x`, `not x`, `x is None` or `x is not None` (the
    # `else` of a single such test: its negation). A call passing a literal that fails one never
    # runs the arm.
    requires: tuple[tuple[str, str], ...] = ()


@_summary_class
class EndIfOp:
    id: int


@_summary_class
class GradOp:
    code: str  # the array whose gradient is read: `x` of `x.grad` or `tape.gradients[x]`
    loc: Loc
    stmt: Loc


@_summary_class
class ReturnOp:
    value: Value | None
    loc: Loc


# -- definitions -------------------------------------------------------------------------------

@_summary_class
class Param:
    name: str
    annotation: str  # its code ("" when absent)
    kind: str  # positional | vararg | keyword_only | varkw
    has_default: bool
    default: Any = NOT_LITERAL  # the default's literal value, when it has one


@_summary_class
class Decorator:
    code: str  # the decorator's target: `wp.kernel` of `@wp.kernel(enable_backward=False)`
    qualified: str | None  # its Warp name, when it is one
    called: bool  # written with arguments
    keywords: dict[str, Any]  # literal keyword values (code for non-literals)
    star_kwargs: tuple[str, ...]  # `**OPTIONS`: the names passed
    loc: Loc


@_summary_class
class FunctionSummary:
    """A host function, a method, a Warp-decorated definition, or the module's own statements."""

    qualname: str  # "f", "Cls.m", "outer.<locals>.inner", "<module>"
    name: str
    params: tuple[Param, ...]
    returns: str  # the return annotation's code
    decorators: tuple[Decorator, ...]
    loc: Loc  # the `def` line's name
    first_line: int  # decorators included
    last_line: int
    owner: str | None  # the class qualname for methods
    ops: list = dataclasses.field(default_factory=list)
    words: frozenset[str] = frozenset()  # every identifier in its text: who might call or launch what
    local_functions: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> qualname
    local_names: frozenset[str] = frozenset()  # parameters and every name the body assigns
    calls_in_body: tuple[str, ...] = ()  # Warp definitions: dotted codes of what the body calls
    returns_code: tuple[str, ...] = ()  # codes of the returned expressions; of `wp.overload(k, ...)`, `k`
    returns_warp: tuple[tuple[str, str], ...] = ()  # `return wp.kernel(...)(f)`: (decorator name, the f code)
    # `wp.kernel(f)` / `wp.kernel(**o)(f)` calls in the body that make a Warp definition of a local
    applies_warp: tuple[tuple[str, str, tuple[tuple[str, Any], ...]], ...] = ()

    @property
    def is_module(self) -> bool:
        return self.qualname == MODULE_SCOPE


@_summary_class
class ClassSummary:
    qualname: str
    name: str
    bases: tuple[str, ...]
    decorators: tuple[Decorator, ...]
    methods: dict[str, str]  # name -> qualname
    attributes: dict[str, str]  # annotated class-level names -> annotation code
    loc: Loc


@_summary_class
class ImportBinding:
    local: str  # the name bound
    module: str  # the module text as written ("" for `from . import x`)
    name: str | None  # from-imports: the imported name ("*" for a star import)
    level: int
    scope: str  # the function qualname, or MODULE_SCOPE
    line: int


@_summary_class
class Setting:
    """A module-level Warp setting: `wp.config.KEY = v`, `wp.set_module_options({KEY: v})`, or
    `wp.get_module(NAME).options[KEY] = v`."""

    key: str
    value: Any
    source: str  # config | module_options
    loc: Loc
    guarded: bool  # under an `if` (e.g. `if __name__ == "__main__":`)
    module: str | None = None  # `wp.get_module("name").options[KEY] = v`: the named module's; None: this file's


@_summary_class
class ModuleValue:
    """A module-level `NAME = <value>`."""

    name: str
    value: Value
    callee: str | None  # the callee's code when the value is a call
    qualified: str | None  # ... and its Warp name when it is one
    literal: Any  # dict displays too: {"enable_backward": False}
    line: int


@_summary_class
class FileSummary:
    version: int
    digest: str  # of the text it was read from
    warp_aliases: dict[str, str]
    imports: list[ImportBinding]
    functions: dict[str, FunctionSummary]  # host functions and methods, and MODULE_SCOPE
    warp_defs: dict[str, FunctionSummary]  # decorated definitions that may be Warp's (resolved by the index)
    classes: dict[str, ClassSummary]
    settings: list[Setting]
    values: dict[str, ModuleValue]
    all_names: tuple[str, ...] | None  # `__all__` when it is a literal list

    def defines(self, name: str) -> bool:
        return name in self.functions or name in self.warp_defs or name in self.classes or name in self.values


# -- the builder ---------------------------------------------------------------------------------

def _with_call(value: Value, call: int | None) -> Value:
    """``value`` as produced by call number ``call`` (a list element that is a call)."""
    return value if value.call == call else dataclasses.replace(value, call=call)


class _Text:
    """Positions and source segments: ``ast`` gives UTF-8 byte columns; findings count code points."""

    def __init__(self, text: str):
        self.lines = split_lines(text)
        self.ascii = text.isascii()
        # One Loc per span: a call statement's call and statement share theirs. Half of a file's
        # spans repeat, and a shared object is pickled (to the parent, to the cache) once.
        self._locs: dict[tuple[int, int, int, int], Loc] = {}

    def column(self, line: int, offset: int) -> int:
        if self.ascii or line - 1 >= len(self.lines):
            return offset
        text = self.lines[line - 1]
        if text.isascii():
            return offset
        return len(text.encode("utf-8")[:offset].decode("utf-8", "replace"))

    def loc(self, node: ast.AST) -> Loc:
        line, end_line = node.lineno, node.end_lineno or node.lineno
        span = (line, self.column(line, node.col_offset) + 1,
                end_line, self.column(end_line, node.end_col_offset or 0) + 1)
        found = self._locs.get(span)
        if found is None:
            found = self._locs[span] = Loc(*span)
        return found

    def segment(self, node: ast.AST) -> str:
        line, end_line = node.lineno, node.end_lineno or node.lineno
        start = self.column(line, node.col_offset)
        end = self.column(end_line, node.end_col_offset or 0)
        if line == end_line:
            return self.lines[line - 1][start:end]
        parts = [self.lines[line - 1][start:]] + self.lines[line:end_line - 1] + [self.lines[end_line - 1][:end]]
        return "".join(parts)


def dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _plain(node: ast.AST) -> bool:
    """A name, attribute or subscript chain rooted at a name, with no call anywhere in it."""
    slices = []
    while True:
        kind = node.__class__
        if kind is ast.Attribute:
            node = node.value
        elif kind is ast.Subscript:
            slices.append(node.slice)
            node = node.value
        else:
            break
    if node.__class__ is not ast.Name:
        return False
    return not any(piece.__class__ not in _LEAVES and any(child.__class__ is ast.Call for child in ast.walk(piece))
                   for piece in slices)


_LEAVES = frozenset({ast.Name, ast.Constant})


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def children(node: ast.AST):
    """``ast.iter_child_nodes`` without the expression contexts, a little faster."""
    fields = _CHILD_FIELDS.get(node.__class__)
    if fields is None:
        fields = _CHILD_FIELDS[node.__class__] = tuple(f for f in node._fields if f not in ("ctx", "type_comment"))
    for name in fields:
        value = getattr(node, name, None)
        if value.__class__ is list:
            for item in value:
                if isinstance(item, ast.AST):
                    yield item
        elif isinstance(value, ast.AST):
            yield value


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.UnaryOp)) and _constant_parts(node) and _small(node):
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return NOT_LITERAL
    return NOT_LITERAL


def _constant_parts(node: ast.AST) -> bool:
    """A display whose direct parts are constants or displays: worth trying ``literal_eval`` on
    (a launch's `inputs=[x, y]` is not; this spares the attempt)."""
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.operand, ast.Constant)
    parts = node.values + [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else node.elts
    return all(isinstance(p, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.UnaryOp)) for p in parts)


def _small(node: ast.AST, limit: int = 64) -> bool:
    count = 0
    for _ in ast.walk(node):
        count += 1
        if count > limit:
            return False
    return True


def _literal_truths(loop: ast.stmt) -> tuple[bool, ...] | None:
    """`for flag in (False, True):` -> (False, True): one plain name over a literal sequence of constants."""
    if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.target, ast.Name) and \
            isinstance(loop.iter, (ast.Tuple, ast.List)) and \
            all(isinstance(element, ast.Constant) for element in loop.iter.elts):
        return tuple(bool(element.value) for element in loop.iter.elts)
    return None


NEGATED = {"truthy": "falsy", "falsy": "truthy", "none": "not-none", "not-none": "none"}


def _requirements(test: ast.AST) -> tuple[tuple[str, str], ...]:
    """``ArmOp.requires`` of an `if` body: `if x and y is not None and n > 0:` ->
    (("x", "truthy"), ("y", "not-none"))."""
    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    found = []
    for operand in operands:
        named = _name_test(operand)
        if named is not None:
            found.append((named[0], "truthy" if named[1] else "falsy"))
        elif isinstance(operand, ast.Compare) and len(operand.ops) == 1 and isinstance(operand.left, ast.Name) \
                and isinstance(operand.comparators[0], ast.Constant) and operand.comparators[0].value is None \
                and isinstance(operand.ops[0], (ast.Is, ast.IsNot)):
            found.append((operand.left.id, "none" if isinstance(operand.ops[0], ast.Is) else "not-none"))
    return tuple(found)


def _name_test(test: ast.AST) -> tuple[str, bool] | None:
    """`if flag:` -> ("flag", True); `if not flag:` -> ("flag", False)."""
    if isinstance(test, ast.Name):
        return test.id, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return test.operand.id, False
    return None


def _gradient_test(test: ast.AST, values: dict[str, ast.expr] | None = None, depth: int = 0
                   ) -> tuple[bool | None, bool]:
    """Whether an `if` test holds only where gradients are required (True), only where they are
    not (False), or says nothing of it (None); and whether it says nothing else (so its `else`
    holds exactly where it does not). `state.requires_grad`, a local `requires_grad`, `not ...`,
    and `and` with one such operand are read; ``values``: locals the function assigned before the
    test (`compact = on_gpu and not contacts.requires_grad`, then `if compact:`)."""
    if isinstance(test, ast.Attribute) and test.attr == "requires_grad" or \
            isinstance(test, ast.Name) and test.id == "requires_grad":
        return True, True
    if isinstance(test, ast.Name) and values and test.id in values and depth < 4:
        return _gradient_test(values[test.id], values, depth + 1)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner, exact = _gradient_test(test.operand, values, depth)
        # `not (a and not x.requires_grad)` holds where `a` fails too: it says nothing then
        return (None if inner is None or not exact else not inner), exact
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        known = [value for value in (_gradient_test(v, values, depth)[0] for v in test.values) if value is not None]
        if known and all(value == known[0] for value in known):
            return known[0], False
    return None, False


def _else_gradients(test: ast.AST, values: dict[str, ast.expr] | None = None) -> bool | None:
    """``_gradient_test`` of where the test fails (its `else`): the negation of an exact test, or
    what the operand of `not` says (`if not compact: continue` leaves the rest to `compact`)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _gradient_test(test.operand, values)[0]
    gradients, exact = _gradient_test(test, values)
    return (not gradients) if exact and gradients is not None else None


def _conditions(test: ast.AST) -> tuple[str, ...]:
    """The operands of an `and` test (or the test itself) as code, but those that test requires_grad."""
    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return tuple(_SELF.sub("", ast.unparse(operand)) for operand in operands if _gradient_test(operand)[0] is None)


_SELF = re.compile(r"\bself\.")


def _single_pass(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Break, ast.Return, ast.Raise))


_FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _scope_facts(function: ast.AST) -> tuple[set[str], dict[str, ast.AST], list[ast.stmt]]:
    """From the function's own statements (not nested scopes', and without entering expressions):
    the names it binds (parameters included), the functions and classes it defines directly, and
    its imports."""
    names = set()
    arguments = function.args
    for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                     *(a for a in (arguments.vararg, arguments.kwarg) if a is not None)):
        names.add(argument.arg)
    nested: dict[str, ast.AST] = {}
    imports: list[ast.stmt] = []
    stack = list(function.body)
    while stack:
        node = stack.pop()
        kind = node.__class__
        if kind in _NESTED_SCOPES:
            names.add(node.name)
            nested.setdefault(node.name, node)
            continue
        if kind is ast.Import or kind is ast.ImportFrom:
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
            imports.append(node)
            continue
        targets = _BINDING_TARGETS.get(kind)
        if targets is not None:
            for target in targets(node):
                if target is not None:
                    names.update(_bound_names(target))
        if kind is ast.ExceptHandler and node.name:
            names.add(node.name)
        for field in _BLOCK_FIELDS:
            block = getattr(node, field, None)
            if block:
                stack.extend(block)
    return names, nested, imports


def _bound_names(target: ast.AST) -> Iterator[str]:
    """The names an assignment target binds: `x`, the elements of `a, (b, *c)`; none for
    `wp.config.mode = ...` or `cache[key] = ...`, which set something of an existing value."""
    kind = target.__class__
    if kind is ast.Name:
        yield target.id
    elif kind is ast.Tuple or kind is ast.List:
        for element in target.elts:
            yield from _bound_names(element)
    elif kind is ast.Starred:
        yield from _bound_names(target.value)


_BINDING_TARGETS = {
    ast.Assign: lambda node: node.targets,
    ast.AnnAssign: lambda node: [node.target],
    ast.AugAssign: lambda node: [node.target],
    ast.For: lambda node: [node.target],
    ast.AsyncFor: lambda node: [node.target],
    ast.With: lambda node: [item.optional_vars for item in node.items],
    ast.AsyncWith: lambda node: [item.optional_vars for item in node.items],
}
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


_NESTED_SCOPES = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})


class StatementMemo:
    """What the top-level statements of earlier summaries defined (functions, Warp definitions,
    classes and their imports), by the statement's text, its first line and the file's Warp names:
    a summary of edited text reads again only the statements the edit changed or moved. The
    least recently used entries are dropped past ``capacity``."""

    def __init__(self, capacity: int = 50_000):
        self.capacity = capacity
        self._entries: collections.OrderedDict[tuple, list] = collections.OrderedDict()

    def get(self, key: tuple) -> list | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: tuple, found: list) -> None:
        self._entries[key] = found
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)


class _Builder:
    def __init__(self, tree: ast.Module, text: str, warp_aliases: dict[str, str], memo: StatementMemo | None = None):
        self.tree = tree
        self.text = _Text(text)
        self.warp_aliases = warp_aliases
        self.memo = memo
        # Names, dotted names and constants that no call produces: one Value each per file (they
        # are most of a file's values, and a shared object is pickled once).
        self._values: dict[tuple[str, bool, str], Value] = {}
        self._args: dict[tuple[str | None, str, bool, str], Arg] = {}
        self._found: list | None = None  # what the top-level statement being read defines, for the memo
        self.imports: list[ImportBinding] = []
        self.functions: dict[str, FunctionSummary] = {}
        self.warp_defs: dict[str, FunctionSummary] = {}
        self.classes: dict[str, ClassSummary] = {}
        self.settings: list[Setting] = []
        self.values: dict[str, ModuleValue] = {}
        self.all_names: tuple[str, ...] | None = None

    def qualify(self, node: ast.AST, shadowed: frozenset[str] | set[str] = frozenset()) -> str | None:
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in shadowed or head not in self.warp_aliases:
            return None
        base = self.warp_aliases[head]
        return f"{base}.{rest}" if rest else base

    def code(self, node: ast.AST) -> str:
        name = dotted(node)
        return name if name is not None else self.text.segment(node)

    def build(self, digest: str) -> FileSummary:
        module_function = FunctionSummary(MODULE_SCOPE, MODULE_SCOPE, (), "", (), Loc(1, 1, 1, 1), 1,
                                          len(self.text.lines), None)
        module_function.words = self.words(1, len(self.text.lines))
        self.functions[MODULE_SCOPE] = module_function
        self._module_statements(self.tree.body, guarded=False)
        module_function.ops = _OpScanner(self, module_function, frozenset()).scan(self.tree.body)
        names = tuple(sorted(self.warp_aliases.items()))
        for statement in self.tree.body:
            self._top_level_definitions(statement, names)
        return FileSummary(SUMMARY_VERSION, digest, dict(self.warp_aliases), self.imports, self.functions,
                           self.warp_defs, self.classes, self.settings, self.values, self.all_names)

    def shared_value(self, code: str, plain: bool, call_index: int | None, star: str,
                     literal: Any = NOT_LITERAL) -> Value:
        """A name's, dotted name's or constant's Value (``literal`` follows from ``code``); one per
        file where no call produces it. Values are not changed once made."""
        if call_index is not None:
            return Value(code, plain, call_index, literal, star=star)
        key = (code, plain, star)
        found = self._values.get(key)
        if found is None:
            found = self._values[key] = Value(code, plain, None, literal, star=star)
        return found

    def shared_arg(self, keyword: str | None, value: Value) -> Arg:
        """An argument; one per file for each keyword and shared value (`device=device`)."""
        if self._values.get((value.code, value.plain, value.star)) is not value:
            return Arg(keyword, value)
        key = (keyword, value.code, value.plain, value.star)
        found = self._args.get(key)
        if found is None:
            found = self._args[key] = Arg(keyword, value)
        return found

    def _top_level_definitions(self, statement: ast.stmt, names: tuple) -> None:
        """The definitions in one top-level statement; from the memo when it read the same statement
        at the same line with the same Warp names (what it defines depends on nothing else)."""
        if self.memo is None:
            self._definitions([statement], "", None)
            return
        first = first_line(statement)
        key = (first, "".join(self.text.lines[first - 1:statement.end_lineno or statement.lineno]), names)
        found = self.memo.get(key)
        if found is None:
            self._found = []
            self._definitions([statement], "", None)
            found, self._found = self._found, None
            self.memo.put(key, found)
        else:
            for kind, qualname, value in found:
                self._put(kind, qualname, value)

    def _put(self, kind: str, qualname: str, value: Any) -> None:
        """Enter a definition or a function's import into the summary: the one place they enter, so
        that a top-level statement's can be entered again from the memo."""
        if self._found is not None:
            self._found.append((kind, qualname, value))
        if kind == "function":
            self.functions.setdefault(qualname, value)
        elif kind == "warp":  # a second definition of a name is keyed by its first line too
            self.warp_defs[qualname if qualname not in self.warp_defs else f"{qualname}#{value.first_line}"] = value
        elif kind == "struct":
            self.warp_defs[qualname] = value
        elif kind == "class":
            self.classes[qualname] = value
        else:
            self.imports.append(value)

    def words(self, first: int, last: int) -> frozenset[str]:
        return frozenset(_IDENTIFIER.findall("".join(self.text.lines[first - 1:last])))

    # -- module level ---------------------------------------------------------------------
    def _module_statements(self, body: list[ast.stmt], guarded: bool) -> None:
        for statement in body:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                self._import(statement, MODULE_SCOPE)
            elif isinstance(statement, (ast.If, ast.Try)):
                blocks = [statement.body, statement.orelse]
                if isinstance(statement, ast.Try):
                    blocks += [h.body for h in statement.handlers] + [statement.finalbody]
                for block in blocks:
                    self._module_statements(block, guarded=True)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                self._module_assignment(statement, guarded)
            elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
                self._module_call(statement.value, guarded)

    def _import(self, statement: ast.Import | ast.ImportFrom, scope: str) -> None:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    self._put("import", "", ImportBinding(alias.asname, alias.name, None, 0, scope, statement.lineno))
                else:  # `import a.b` binds `a` and loads `a.b`
                    self._put("import", "", ImportBinding(alias.name.split(".")[0], alias.name, None, 0, scope,
                                                          statement.lineno))
        else:
            for alias in statement.names:
                self._put("import", "", ImportBinding(alias.asname or alias.name, statement.module or "", alias.name,
                                                      statement.level, scope, statement.lineno))

    def _module_assignment(self, statement: ast.Assign | ast.AnnAssign, guarded: bool) -> None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        value = statement.value
        if value is None:
            return
        for target in targets:
            qualified = self.qualify(target)
            named = _named_module_option(target, self.qualify)
            if qualified and qualified.startswith("warp.config."):
                self.settings.append(Setting(qualified.rsplit(".", 1)[1], _literal(value), "config",
                                             self.text.loc(statement), guarded))
            elif named is not None:
                module, key = named
                self.settings.append(Setting(key, _literal(value), "module_options", self.text.loc(statement),
                                             guarded, module))
            elif isinstance(target, ast.Name):
                callee = self.code(value.func) if isinstance(value, ast.Call) else None
                qualified_call = self.qualify(value.func) if isinstance(value, ast.Call) else None
                if target.id == "__all__" and isinstance(value, (ast.List, ast.Tuple)):
                    literal = _literal(value)
                    if isinstance(literal, (list, tuple)):
                        self.all_names = tuple(str(item) for item in literal)
                if not guarded or target.id not in self.values:
                    self.values[target.id] = ModuleValue(target.id, _OpScanner.value_of(self, value),
                                                         callee, qualified_call, _literal(value), statement.lineno)
            elif isinstance(target, (ast.Tuple, ast.List)):
                # `first, second = make_pair()`: each name holds a part of a value nothing here reads
                whole = Value(self.code(value), False)
                for element in target.elts:
                    if isinstance(element, ast.Name) and (not guarded or element.id not in self.values):
                        self.values[element.id] = ModuleValue(element.id, whole, None, None, NOT_LITERAL,
                                                              statement.lineno)

    def _module_call(self, call: ast.Call, guarded: bool) -> None:
        if self.qualify(call.func) != "warp.set_module_options" or not call.args:
            return
        options = call.args[0]
        if isinstance(options, ast.Dict):
            for key, value in zip(options.keys, options.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    self.settings.append(Setting(key.value, _literal(value), "module_options", self.text.loc(call),
                                                 guarded))

    # -- definitions ----------------------------------------------------------------------
    def _definitions(self, body: list[ast.stmt], prefix: str, owner: str | None) -> None:
        """Every function and class, at any depth (a kernel made inside a factory too)."""
        for statement in body:
            if isinstance(statement, _FUNCTION_TYPES):
                self._function(statement, prefix, owner)
            elif isinstance(statement, ast.ClassDef):
                self._class(statement, prefix)
            elif isinstance(statement, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                blocks = [getattr(statement, "body", []), getattr(statement, "orelse", [])]
                if isinstance(statement, ast.Try):
                    blocks += [h.body for h in statement.handlers] + [statement.finalbody]
                for block in blocks:
                    self._definitions(block, prefix, owner)

    def _decorators(self, node: ast.AST, shadowed=frozenset()) -> tuple[Decorator, ...]:
        found = []
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            keywords: dict[str, Any] = {}
            stars: list[str] = []
            if isinstance(decorator, ast.Call):
                for keyword in decorator.keywords:
                    if keyword.arg is None:
                        stars.append(self.code(keyword.value))
                    else:
                        literal = _literal(keyword.value)
                        keywords[keyword.arg] = self.code(keyword.value) if literal is NOT_LITERAL else literal
            found.append(Decorator(self.code(target), self.qualify(target, shadowed), isinstance(decorator, ast.Call),
                                   keywords, tuple(stars), self.text.loc(decorator)))
        return tuple(found)

    def _params(self, function) -> tuple[Param, ...]:
        arguments = function.args
        params = []
        positional = [*arguments.posonlyargs, *arguments.args]
        defaults = len(arguments.defaults)
        first_default = len(positional) - defaults
        for index, argument in enumerate(positional):
            default = _literal(arguments.defaults[index - first_default]) if index >= first_default else NOT_LITERAL
            params.append(Param(argument.arg, self.code(argument.annotation) if argument.annotation else "",
                                "positional", index >= first_default, default))
        if arguments.vararg is not None:
            params.append(Param(arguments.vararg.arg, "", "vararg", True))
        for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
            params.append(Param(argument.arg, self.code(argument.annotation) if argument.annotation else "",
                                "keyword_only", default is not None,
                                _literal(default) if default is not None else NOT_LITERAL))
        if arguments.kwarg is not None:
            params.append(Param(arguments.kwarg.arg, "", "varkw", True))
        return tuple(params)

    def _function(self, node, prefix: str, owner: str | None) -> None:
        qualname = f"{prefix}{node.name}"
        decorators = self._decorators(node)
        name_node = ast.Name(node.name)
        ast.copy_location(name_node, node)
        summary = FunctionSummary(qualname, node.name, self._params(node),
                                  self.code(node.returns) if node.returns else "", decorators, self.text.loc(node),
                                  first_line(node), node.end_lineno or node.lineno, owner)
        warp_kind = next((WARP_DECORATOR_KINDS.get(d.qualified or "") for d in decorators
                          if d.qualified in WARP_DECORATOR_KINDS), None)
        overloaded = any(d.qualified in OVERLOAD_DECORATORS for d in decorators)
        if warp_kind or overloaded or (decorators and not self._plain_decorators(decorators)):
            # A Warp definition, or one whose decorator only the index can judge (a project's own
            # decorator around `wp.kernel`): its body is kernel code, summarised by its calls.
            summary.calls_in_body = self._body_calls(node)
            self._put("warp", qualname, summary)
            if warp_kind:
                return
        names, nested, imports = _scope_facts(node)
        summary.local_functions = {name: f"{qualname}.<locals>.{name}" for name in nested}
        summary.local_names = frozenset(names)
        summary.words = self.words(summary.first_line, summary.last_line)
        for statement in imports:
            self._import(statement, qualname)
        if nested:  # a factory or a decorator: what it returns and which Warp decorators it applies
            _factory_facts(self, summary, node)
        summary.ops = _OpScanner(self, summary, summary.local_names).scan(node.body)
        self._put("function", qualname, summary)
        self._definitions(node.body, f"{qualname}.<locals>.", None)

    @staticmethod
    def _plain_decorators(decorators: tuple[Decorator, ...]) -> bool:
        """Decorators that leave a function a host function (staticmethod, property, caches...)."""
        return all(d.code.split(".")[-1] in _HOST_DECORATORS for d in decorators)

    def _body_calls(self, node) -> tuple[str, ...]:
        """What a Warp definition's body calls, read from its text (its callees, over-approximated)."""
        text = _COMMENT.sub("", "".join(self.text.lines[node.lineno:node.end_lineno or node.lineno]))
        return tuple(dict.fromkeys(_CALLED.findall(text) + _STATIC_CALLED.findall(text)))

    def _class(self, node: ast.ClassDef, prefix: str) -> None:
        qualname = f"{prefix}{node.name}"
        methods: dict[str, str] = {}
        attributes: dict[str, str] = {}
        for statement in node.body:
            if isinstance(statement, _FUNCTION_TYPES):
                methods.setdefault(statement.name, f"{qualname}.{statement.name}")
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                attributes[statement.target.id] = self.code(statement.annotation)
        decorators = self._decorators(node)
        summary = ClassSummary(qualname, node.name, tuple(self.code(b) for b in node.bases), decorators, methods,
                               attributes, self.text.loc(node))
        self._put("class", qualname, summary)
        if any(d.qualified == "warp.struct" for d in decorators):
            struct = FunctionSummary(qualname, node.name, (), "", decorators, self.text.loc(node), first_line(node),
                                     node.end_lineno or node.lineno, None)
            self._put("struct", qualname, struct)
            return
        self._definitions(node.body, f"{qualname}.", qualname)


_HOST_DECORATORS = frozenset({"staticmethod", "classmethod", "property", "setter", "getter", "deleter", "cache",
                              "lru_cache", "cached_property", "wraps", "abstractmethod", "override", "contextmanager",
                              "fixture", "parametrize", "skip", "skipif", "xfail", "mark", "jit", "njit",
                              "dataclass", "total_ordering", "singledispatch", "register", "overload",
                              "unittest", "expectedFailure", "skipUnless", "skipIf", "no_type_check",
                              "deprecated", "final", "runtime_checkable", "timeout", "slow", "usefixtures"})


class _OpScanner:
    """A function body's operations in the order the host runs them (the old host scanner's order:
    a statement's value before its targets, calls inside-out and left to right)."""

    def __init__(self, builder: _Builder, function: FunctionSummary, shadowed: frozenset[str]):
        self.builder = builder
        self.function = function
        self.shadowed = shadowed
        self.ops: list = []
        self.calls = 0
        self.blocks = 0  # numbering for loops and ifs
        self.statement: ast.stmt | None = None
        # Locals by their last plain assignment so far (`compact = ... and not x.requires_grad`), for
        # the tests that name them.
        self.local_values: dict[str, ast.expr] = {}

    def scan(self, body: list[ast.stmt]) -> list:
        self.ops = []
        self.visit_block(body)
        return self.ops

    # -- values ---------------------------------------------------------------------------
    @staticmethod
    def value_of(builder: _Builder, node: ast.AST, call_index: int | None = None) -> Value:
        star = ""
        if node.__class__ is ast.Starred:
            star, node = "*", node.value
        kind = node.__class__
        if kind is ast.Name:  # the common cases, without a walk
            return builder.shared_value(node.id, True, call_index, star)
        if kind is ast.Constant:
            return builder.shared_value(builder.text.segment(node), False, call_index, star, node.value)
        name = dotted(node) if kind is ast.Attribute else None
        if name is not None:
            return builder.shared_value(name, True, call_index, star)
        value = Value(builder.code(node), _plain(node), call_index, _literal(node), star=star)
        if isinstance(node, (ast.List, ast.Tuple)):
            elements = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    value.spread = tuple(_OpScanner.value_of(builder, e) for e in node.elts)
                    break
                elements.append(_OpScanner.value_of(builder, element))
            value.elements = tuple(elements)
        elif isinstance(node, ast.Dict):
            value.dict_keys = tuple(_OpScanner.value_of(builder, k) for k in node.keys if k is not None)
        return value

    def value(self, node: ast.AST, calls: dict[int, int]) -> Value:
        value = self.value_of(self.builder, node, calls.get(id(node)))
        if value.elements is not None and isinstance(node, (ast.List, ast.Tuple)):
            value.elements = tuple(_with_call(element, calls.get(id(element_node)))
                                   for element, element_node in zip(value.elements, node.elts))
        return value

    # -- statements -----------------------------------------------------------------------
    def loc(self, node: ast.AST) -> Loc:
        return self.builder.text.loc(node)

    def visit_block(self, body: list[ast.stmt]) -> None:
        for position, statement in enumerate(body):
            if position + 1 < len(body) and isinstance(statement, ast.If) and not statement.orelse and \
                    statement.body and isinstance(statement.body[-1], (ast.Return, ast.Continue, ast.Break)):
                # `if not compact: continue`: what follows runs only where the test fails, as an `else`
                self.visit_if(statement, body[position + 1:])
                return
            self.visit_statement(statement)

    def visit_statement(self, statement: ast.stmt) -> None:
        self.statement = statement
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            value = statement.value
            calls = self.expression(value, "assign") if value is not None else {}
            if isinstance(statement, ast.AugAssign):
                if isinstance(statement.target, ast.Name):
                    self.local_values.pop(statement.target.id, None)
                operator = _AUGMENTED.get(type(statement.op), "?=")
                self.ops.append(AssignOp(((self.builder.code(statement.target), self.value(value, calls)),),
                                         operator, self.loc(statement), self.loc(statement), self.value(value, calls)))
                return
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        self.local_values.pop(name.id, None)
            if len(targets) == 1 and isinstance(targets[0], ast.Name) and value is not None:
                self.local_values[targets[0].id] = value
            whole = self.value(value, calls) if value is not None else None
            pairs: list[tuple[str, Value | None]] = []
            for target in targets:
                if isinstance(target, (ast.Tuple, ast.List)):
                    elements = [e.value if isinstance(e, ast.Starred) else e for e in target.elts]
                    values = [None] * len(elements)
                    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elements):
                        values = [self.value(v, calls) for v in value.elts]
                    elif value is not None and whole.call is not None and not any(
                            isinstance(e, ast.Starred) for e in target.elts):
                        values = [Value(whole.code, False, whole.call, element=position)
                                  for position in range(len(elements))]
                    elif value is not None:
                        values = [Value(whole.code, False, None)] * len(elements)
                    pairs += [(self.builder.code(e), v) for e, v in zip(elements, values)]
                else:
                    pairs.append((self.builder.code(target), whole))
            if pairs:
                self.ops.append(AssignOp(tuple(pairs), None, self.loc(statement), self.loc(statement), whole))
        elif isinstance(statement, ast.Expr):
            role = "expr"
            self.expression(statement.value, role)
        elif isinstance(statement, ast.Return):
            calls = self.expression(statement.value, "return") if statement.value is not None else {}
            value = self.value(statement.value, calls) if statement.value is not None else None
            self.ops.append(ReturnOp(value, self.loc(statement)))
        elif isinstance(statement, ast.Assert):
            self.expression(statement.test, "assert")
        elif isinstance(statement, (ast.With, ast.AsyncWith)):
            items = []
            for item in statement.items:
                calls = self.expression(item.context_expr, "other")
                qualified = self.builder.qualify(item.context_expr.func, self.shadowed) if isinstance(
                    item.context_expr, ast.Call) else None
                asname = self.builder.code(item.optional_vars) if item.optional_vars is not None else None
                items.append(WithItem(self.value(item.context_expr, calls), qualified, asname))
            last = statement.items[-1]
            last = last.optional_vars if last.optional_vars is not None else last.context_expr
            start, end = self.loc(statement), self.loc(last)
            header = Loc(start.line, start.column, end.end_line, end.end_column)
            self.ops.append(WithOp(tuple(items), header, self.loc(statement)))
            self.visit_block(statement.body)
            self.ops.append(EndWithOp())
        elif isinstance(statement, (ast.For, ast.AsyncFor, ast.While)):
            if isinstance(statement, (ast.For, ast.AsyncFor)):
                for name in ast.walk(statement.target):
                    if isinstance(name, ast.Name):
                        self.local_values.pop(name.id, None)
            header = statement.iter if isinstance(statement, (ast.For, ast.AsyncFor)) else statement.test
            header_calls = self.expression(header, "other")
            targets: tuple[str, ...] = ()
            if isinstance(statement, (ast.For, ast.AsyncFor)):
                targets = tuple(n.id for n in ast.walk(statement.target) if isinstance(n, ast.Name))
            self.blocks += 1
            number = self.blocks
            self.ops.append(LoopOp(number, "while" if isinstance(statement, ast.While) else "for", targets,
                                   _single_pass(statement.body), self.loc(statement), _literal_truths(statement),
                                   self.value(header, header_calls) if not isinstance(statement, ast.While) else None))
            self.visit_block(statement.body)
            self.ops.append(EndLoopOp(number))
            if statement.orelse:
                self.visit_block(statement.orelse)
        elif isinstance(statement, ast.If):
            self.visit_if(statement, statement.orelse)
        elif isinstance(statement, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self.visit_block(statement.body)
            for handler in statement.handlers:
                self.visit_block(handler.body)
            self.visit_block(statement.orelse)
            self.visit_block(statement.finalbody)
        elif isinstance(statement, ast.Match):
            self.expression(statement.subject, "other")
            self.blocks += 1
            number = self.blocks
            for arm, case in enumerate(statement.cases):
                self.ops.append(ArmOp(number, arm))
                self.visit_block(case.body)
            self.ops.append(EndIfOp(number))
        # definitions are their own scopes; imports, pass, global, delete... hold no operation

    def visit_if(self, statement: ast.If, orelse: list[ast.stmt]) -> None:
        """An `if`, with ``orelse`` as its `else` part: its own, or the statements after an `if`
        whose body leaves the block."""
        self.statement = statement
        self.expression(statement.test, "other")
        self.blocks += 1
        number = self.blocks
        values = self.local_values
        gradients, _ = _gradient_test(statement.test, values)
        constant = statement.test.value if isinstance(statement.test, ast.Constant) else None
        on = _name_test(statement.test)
        conditions = _conditions(statement.test)
        requires = _requirements(statement.test)
        self.ops.append(ArmOp(number, 0, gradients, dead=constant is not None and not constant, on=on,
                              conditions=conditions, refuses_gradients=bool(
                                  gradients and conditions and statement.body and
                                  isinstance(statement.body[-1], ast.Raise)), requires=requires))
        self.visit_block(statement.body)
        if orelse:
            single = requires if len(requires) == 1 and not isinstance(statement.test, ast.BoolOp) else ()
            self.ops.append(ArmOp(number, 1, _else_gradients(statement.test, values),
                                  dead=constant is not None and bool(constant),
                                  on=(on[0], not on[1]) if on is not None else None,
                                  requires=tuple((name, NEGATED[kind]) for name, kind in single)))
            self.visit_block(orelse)
        self.ops.append(EndIfOp(number))

    def expression(self, node: ast.AST, role: str) -> dict[int, int]:
        """Record the `.grad` reads, then the calls (arguments before the call, left to right).

        Returns id(call node) -> its call index, so values can name the call that makes them.
        """
        calls: list[ast.Call] = []
        grads: list[tuple[str, ast.AST]] = []
        self._collect(node, calls, grads)
        for code, where in grads:
            self.ops.append(GradOp(code, self.loc(where), self.loc(self.statement)))
        indices: dict[int, int] = {}
        for call in calls:
            indices[id(call)] = self.call(call, indices, role if call is node else "other")
        return indices

    def _collect(self, node: ast.AST, calls: list, grads: list) -> None:
        kind = node.__class__
        if kind is ast.Name:
            return
        if kind is ast.Constant or kind is ast.Lambda or kind in _NESTED_SCOPES:
            return
        if (kind is ast.Compare and _identity_test(node)) or (kind is ast.Call and _identity_assertion(node)):
            for child in children(node):  # `x.grad is None` asks whether there is one: it reads no data
                if not (child.__class__ is ast.Attribute and child.attr == "grad"):
                    self._collect(child, calls, grads)
            if kind is ast.Call:
                calls.append(node)  # the assertion is still a call, as any other
            return
        if kind is ast.Attribute:
            if node.attr == "grad" and node.ctx.__class__ is ast.Load:
                grads.append((self.builder.code(node.value), node))
            self._collect(node.value, calls, grads)
            return
        if kind is ast.Subscript and node.value.__class__ is ast.Attribute and node.value.attr == "gradients" and \
                node.slice.__class__ is not ast.Slice:
            grads.append((self.builder.code(node.slice), node))  # tape.gradients[x]
        for child in children(node):
            self._collect(child, calls, grads)
        if kind is ast.Call:
            calls.append(node)

    def call(self, call: ast.Call, indices: dict[int, int], role: str) -> int:
        index = self.calls
        self.calls += 1
        func = call.func
        name = dotted(func)
        qualified = self.builder.qualify(func, self.shadowed)
        receiver = method = None
        if isinstance(func, ast.Attribute):
            receiver, method = self.builder.code(func.value), func.attr
        args = [self.builder.shared_arg(None, self.value(a, indices)) for a in call.args]
        for keyword in call.keywords:
            value = self.value(keyword.value, indices)
            if keyword.arg is None:
                value = dataclasses.replace(value, star="**")
            args.append(self.builder.shared_arg(keyword.arg, value))
        statement = self.statement
        if role == "expr":
            role = "discard"
        elif role == "assign" and isinstance(statement, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id == "_" for t in statement.targets):
            role = "discard"
        target = None
        if role == "assign" and isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is call:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if len(targets) == 1 and dotted(targets[0]) is not None:
                target = dotted(targets[0])
        op = CallOp(index, name or self.builder.code(func), name is not None, qualified, receiver, method, tuple(args),
                    self.loc(call), self.loc(statement), role, type(statement).__name__, target)
        self.ops.append(op)
        return index


_CALLED = re.compile(r"(?<![A-Za-z_])([A-Za-z_][A-Za-z_0-9]*(?:\s*\.\s*[A-Za-z_][A-Za-z_0-9]*)*)\s*\(")
# a comment ending in a full stop must not join the call on the next line to its last word
_COMMENT = re.compile(r"#[^\n]*")
# `wp.static(solve.portal_core)(...)`: the function a kernel picks at build time, then calls
_STATIC_CALLED = re.compile(r"static\s*\(\s*([A-Za-z_][A-Za-z_0-9]*(?:\s*\.\s*[A-Za-z_][A-Za-z_0-9]*)*)\s*\)\s*\(")

_AUGMENTED = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=", ast.Mod: "%=",
              ast.Pow: "**=", ast.BitAnd: "&=", ast.BitOr: "|=", ast.BitXor: "^=", ast.LShift: "<<=",
              ast.RShift: ">>=", ast.MatMult: "@="}


def _factory_facts(builder: _Builder, summary: FunctionSummary, node: ast.AST) -> None:
    """What a function that defines functions returns (`return kernel`) and the Warp decorators it
    applies to them (`wp.kernel(enable_backward=False)(template)`), from its own statements."""
    returns, applies = [], []
    shadowed = summary.local_names
    stack = list(node.body)
    while stack:
        statement = stack.pop()
        kind = statement.__class__
        if kind in _NESTED_SCOPES:
            continue
        value = getattr(statement, "value", None) if kind in (ast.Return, ast.Assign, ast.Expr, ast.AnnAssign) else None
        if kind is ast.Return and value is not None:
            returns.append(builder.code(_overloaded(builder, value, shadowed) or value))
        if isinstance(value, ast.Call):
            application = _warp_application(builder, value, shadowed)
            if application is not None:
                applies.append(application)
        for field in _BLOCK_FIELDS:
            block = getattr(statement, field, None)
            if block:
                stack.extend(block)
    summary.returns_code = tuple(returns)
    summary.applies_warp = tuple(applies)


def _overloaded(builder: _Builder, value: ast.expr, shadowed) -> ast.Name | None:
    """`k` of `wp.overload(k, [...])`: an overload runs the source of the kernel it specialises."""
    if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Name) and \
            builder.qualify(value.func, shadowed) == "warp.overload":
        return value.args[0]
    return None


def _warp_application(builder: _Builder, call: ast.Call, shadowed) -> tuple | None:
    """`wp.kernel(f)`, `wp.kernel(enable_backward=False)(f)`: a Warp definition made from a local."""
    outer = call.func
    if isinstance(outer, ast.Call) and call.args and isinstance(call.args[0], ast.Name):
        decorator = builder.qualify(outer.func, shadowed)
        if decorator in WARP_DECORATOR_KINDS:
            return decorator, call.args[0].id, tuple((k.arg, _literal(k.value)) for k in outer.keywords
                                                     if k.arg is not None)
    qualified = builder.qualify(call.func, shadowed)
    if qualified in WARP_DECORATOR_KINDS and call.args and isinstance(call.args[0], ast.Name):
        return qualified, call.args[0].id, tuple((k.arg, _literal(k.value)) for k in call.keywords
                                                 if k.arg is not None)
    return None


def text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def summarize(tree: ast.Module, text: str, warp_aliases: dict[str, str], memo: StatementMemo | None = None
              ) -> FileSummary:
    """The summary of one file, from its ``ast`` tree (the triage's) and its text. ``memo``: what
    earlier summaries' top-level statements defined, reused where a statement is unchanged."""
    return _Builder(tree, text, warp_aliases, memo).build(text_digest(text))


def _named_module_option(target: ast.expr, qualify) -> tuple[str | None, str] | None:
    """`wp.get_module("name").options["KEY"]` as ("name", "KEY"); `wp.get_module(__name__)` is this
    file's module (None); anything else, None."""
    if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
            and isinstance(target.slice.value, str) and isinstance(target.value, ast.Attribute)
            and target.value.attr == "options" and isinstance(target.value.value, ast.Call)):
        return None
    call = target.value.value
    if qualify(call.func) != "warp.get_module" or len(call.args) != 1:
        return None
    argument = call.args[0]
    if isinstance(argument, ast.Name) and argument.id == "__name__":
        return None, target.slice.value
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value, target.slice.value
    return None


IDENTITY_ASSERTIONS = {"assertIs", "assertIsNot", "assertIsNone", "assertIsNotNone"}


def _identity_assertion(node: ast.Call) -> bool:
    """`self.assertIs(a, b)`: unittest's spelling of `a is b`."""
    return node.func.__class__ is ast.Attribute and node.func.attr in IDENTITY_ASSERTIONS


def _identity_test(node: ast.Compare) -> bool:
    """`a is None`, `a is not b`: a comparison of identities, not of values."""
    return all(op.__class__ in (ast.Is, ast.IsNot) for op in node.ops)
