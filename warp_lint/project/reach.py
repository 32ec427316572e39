"""What a call or launch the recordings could not follow may reach, told from names and imports.

A recording follows every call it resolves. What it cannot resolve must not prove anything: a
kernel launched only in ``Model.__call__``, run as ``model(x)`` under a tape by a caller the
recording could not type, is not "outside every recording". And it must not poison what it cannot
reach: one script's unnamed launch does not run the kernels of another script it never meets.

- A call made while a tape records that the recording did not follow (an ``OpaqueCall``: a
  method of an object the recording cannot type, a call of a value) may run any project function
  of its name (the method's name; ``__call__`` for a call of a value) defined in a module
  *related* to the caller's, and whatever those call that resolves statically. Where the object
  is held in an attribute (``a.layouts.update()``), only the classes that project classes put in
  an attribute of that name are candidates: none when every such attribute holds a library's
  object or a container (a dict's ``update``). Launches in them
  may be recorded. Matching names once, not again at every unresolved call below, keeps one
  untyped ``build()`` from reaching half a project; what a matched function calls through values
  it cannot resolve is left out.
- A kernel passed around as a value reaches a launch the model cannot name only in a module
  related to one that names the kernel, unless the launch takes its kernel from a parameter of a
  public function it is written in (or of one enclosing it), or is a wrapper's: then whoever calls
  it, users of a library included, may hand it any kernel (an *open* launch). Test modules and
  names with a leading underscore are not public: only the project calls them.

Two modules are related when one imports the other, directly or through others, or both import a
module that holds a container at module level and both name that container (a registry one fills
and the other reads). Scripts of one folder that import nothing of each other are not related,
nor are two modules that only share a library's internals.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Callable, Iterable, Iterator

from warp_lint.host import HEAD, LAUNCH_FUNCTIONS, Location
from warp_lint.project.index import ModuleInfo, ProjectIndex, Symbol
from warp_lint.project.layout import resolve_relative
from warp_lint.project.recordings import OpaqueCall
from warp_lint.project.summary import (
    MODULE_SCOPE,
    AssignOp,
    CallOp,
    FileSummary,
    FunctionSummary,
    LoopOp,
)

MAX_RUN_BY_OPAQUE = 4_000  # functions an unfollowed call may run, followed this far
CONTAINER_WRITES = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "__setitem__"})
CONTAINER_CALLS = frozenset({"dict", "list", "set", "defaultdict", "collections.defaultdict", "OrderedDict",
                             "collections.OrderedDict"})

StaticCallee = Callable[[ModuleInfo, FunctionSummary, CallOp], "Symbol | None"]


def _memoized(method):
    """A method of one path, remembered by the instance (which goes with its model)."""
    name = f"_{method.__name__}_memo"

    @functools.wraps(method)
    def memoized(self, path: str):
        memo = self.__dict__.setdefault(name, {})
        if path not in memo:
            memo[path] = method(self, path)
        return memo[path]
    return memoized


class Reachability:
    def __init__(self, index: ProjectIndex, infos: Callable[[], Iterator[ModuleInfo]], static_callee: StaticCallee):
        self.index = index
        self._infos = infos
        self._static_callee = static_callee

    # -- modules --------------------------------------------------------------------------
    @functools.cached_property
    def _summaries(self) -> dict[str, tuple[ModuleInfo, FileSummary]]:
        found = {}
        for info in self._infos():
            summary = self.index.summary(info)
            if summary is not None:
                found[info.path] = (info, summary)
        return found

    def _summary(self, path: str) -> tuple[ModuleInfo, FileSummary] | None:
        """Any project file's summary, read when first asked for (files that never mention `warp`,
        a registry of plain dicts, are not among the model's own)."""
        found = self._summaries.get(path)
        if found is None:
            info = self.index.by_path.get(path)
            summary = self.index.summary(info) if info is not None else None
            found = (info, summary) if summary is not None else None
        return found

    @_memoized
    def _direct_imports(self, path: str) -> frozenset[str]:
        found: set[str] = set()
        entry = self._summary(path)
        if entry is None:
            return frozenset()
        info, summary = entry
        for binding in summary.imports:
            absolute = resolve_relative(info.name, info.is_package, binding.level, binding.module)
            names = [absolute] if absolute else []
            if binding.name and binding.name != "*":
                names.append(f"{absolute}.{binding.name}" if absolute else binding.name)
            for name in names:
                module = self.index.module(name, info)
                if module is not None and module.path != path:
                    found.add(module.path)
        return frozenset(found)

    @_memoized
    def imports(self, path: str) -> frozenset[str]:
        """The project modules ``path`` imports, directly or through others."""
        seen: set[str] = set()
        pending = list(self._direct_imports(path))
        while pending:
            current = pending.pop()
            if current in seen or current == path:
                continue
            seen.add(current)
            pending.extend(self._direct_imports(current))
        return frozenset(seen)

    @_memoized
    def _containers(self, path: str) -> frozenset[str]:
        """The names of the containers a module holds at module level (a registry's)."""
        entry = self._summary(path)
        return frozenset(name for name, value in entry[1].values.items()
                         if _is_container(value.value.code, value.callee)) if entry is not None else frozenset()

    @_memoized
    def _words(self, path: str) -> frozenset[str]:
        entry = self._summary(path)
        return frozenset().union(*(f.words for f in entry[1].functions.values())) if entry is not None else frozenset()

    def related(self, first: str, second: str, scope: str = MODULE_SCOPE) -> bool:
        """Whether a value held by ``scope`` of the module ``first`` may reach the module ``second``."""
        if first == second or second in self.imports(first) or first in self.imports(second):
            return True
        # A registry between them: a module both import, whose container both name (the first where
        # it holds the value).
        entry = self._summary(first)
        function = entry[1].functions.get(scope) if entry is not None else None
        shared = (function.words if function is not None else frozenset()) & self._words(second)
        return any(self._containers(path) & shared for path in self.imports(first) & self.imports(second))

    # -- functions ------------------------------------------------------------------------
    @functools.cached_property
    def _by_name(self) -> dict[str, list[tuple[ModuleInfo, FunctionSummary]]]:
        found: dict[str, list[tuple[ModuleInfo, FunctionSummary]]] = {}
        for info, summary in self._summaries.values():
            for function in summary.functions.values():
                if not function.is_module:
                    found.setdefault(function.name, []).append((info, function))
        return found

    def enclosing(self, location: Location) -> FunctionSummary | None:
        """The innermost host function (or the module's statements) whose lines hold ``location``."""
        entry = self._summaries.get(location.path)
        if entry is None:
            return None
        best = None
        for function in entry[1].functions.values():
            if function.is_module or not function.first_line <= location.line <= function.last_line:
                continue
            if best is None or function.first_line >= best.first_line:
                best = function
        return best or entry[1].functions.get(MODULE_SCOPE)

    def open_launch(self, location: Location) -> bool:
        """Whether the launch at ``location`` takes its kernel from a caller (see the module's doc).
        A launch wrapper's launch is at the wrapper's call: there, any argument may be the kernel."""
        function = self.enclosing(location)
        call = call_at(function, location) if function is not None else None
        if call is None:
            return True
        if call.qualified in LAUNCH_FUNCTIONS:
            kernel = call.argument(0, "kernel")
            heads = [HEAD.match(kernel.code) if kernel is not None else None]
            if None in heads:
                return True
        else:  # literals and displays among them hold no kernel
            heads = [HEAD.match(argument.value.code) for argument in call.args]
        return any(self._from_caller(location.path, function, head.group(0).split(".", 1)[0])
                   for head in heads if head is not None)

    def attribute_values(self, location: Location) -> list[tuple[Symbol, FunctionSummary, object]] | None:
        """For a launch of `self.<attribute>` in a method: every value the class's methods assign to
        that attribute ((method, its summary, the value)); None for any other launch, or where no
        method assigns it (it is set from outside the class)."""
        function = self.enclosing(location)
        if function is None or function.owner is None or not function.params:
            return None
        call = call_at(function, location, launch=True)
        kernel = call.argument(0, "kernel") if call is not None else None
        attribute = _attribute_source(function, kernel.code, function.params[0].name) if kernel is not None else None
        if attribute is None:
            return None
        info = self._summaries[location.path][0]
        cls = Symbol("class", info.name, function.owner, info.path)
        return (self.index.attribute_value(cls, attribute) + self._set_on_class.get((cls, attribute), [])) or None

    def container_values(self, location: Location) -> list[tuple[str, str, object]] | None:
        """For a launch whose kernel is an element of a module-level container (`KERNELS[key]`, a
        loop over it): every value put in it, as (file, scope, value): its display and each
        `KERNELS[k] = v`, `KERNELS.append(v)`, ... in the project. None for any other launch."""
        function = self.enclosing(location)
        call = call_at(function, location, launch=True) if function is not None else None
        kernel = call.argument(0, "kernel") if call is not None else None
        name = _container_source(function, kernel.code) if kernel is not None else None
        container = self.index.resolve(location.path, function.qualname, name) if name is not None else None
        entry = self._summary(container.path) if container is not None and container.kind == "value" else None
        held = entry[1].values.get(container.qualname) if entry is not None else None
        if held is None or not _is_container(held.value.code, held.callee):
            return None
        return [(container.path, MODULE_SCOPE, held.value), *self._put_in.get(container, ())]

    @functools.cached_property
    def _put_in(self) -> dict[Symbol, list[tuple[str, str, object]]]:
        """Module-level containers -> what the project puts in them after their display
        (`KERNELS[key] = kernel`, `KERNELS.append(kernel)`, `KERNELS.update(...)`)."""
        found: dict[Symbol, list] = {}
        for info, summary in self._summaries.values():
            for function in summary.functions.values():
                for op in function.ops:
                    if op.__class__ is AssignOp:
                        for target, value in op.pairs:
                            head = re.fullmatch(r"([A-Za-z_][\w.]*)\[.*\]", target, re.DOTALL)
                            if head is not None and value is not None:
                                symbol = self.index.resolve(info.path, function.qualname, head.group(1))
                                if symbol is not None and symbol.kind == "value":
                                    found.setdefault(symbol, []).append((info.path, function.qualname, value))
                    elif op.__class__ is CallOp and op.receiver and op.method in CONTAINER_WRITES:
                        symbol = self.index.resolve(info.path, function.qualname, op.receiver)
                        if symbol is not None and symbol.kind == "value":
                            found.setdefault(symbol, []).extend((info.path, function.qualname, argument.value)
                                                                for argument in op.args)
        return found

    @functools.cached_property
    def _set_on_class(self) -> dict[tuple[Symbol, str], list[tuple[Symbol, FunctionSummary, object]]]:
        """Attributes set on a class from outside its methods (`Cls.attr = value`, a factory's
        `Specialized.step = staticmethod(kernel)`): (class, attribute) -> (the function that sets
        it, its summary, the value), filed under the class and every base of it, since `self` in a
        base's method may be an instance of the class."""
        found: dict[tuple[Symbol, str], list] = {}
        for info, summary in self._summaries.values():
            for function in summary.functions.values():
                for op in function.ops:
                    if op.__class__ is not AssignOp or op.augmented is not None:
                        continue
                    for code, value in op.pairs:
                        head, dot, attribute = code.partition(".")
                        if value is None or not dot or "." in attribute or "[" in code or \
                                head in (p.name for p in function.params[:1]):
                            continue
                        cls = self.index.resolve(info.path, function.qualname, head)
                        if cls is None or cls.kind != "class":
                            continue
                        setter = Symbol("function", info.name, function.qualname, info.path)
                        for klass in self.index.mro(cls):
                            found.setdefault((klass, attribute), []).append((setter, function, value))
        return found

    def _from_caller(self, path: str, function: FunctionSummary, name: str) -> bool:
        """Whether ``name`` in ``function`` is a parameter of it (or of a function enclosing it) that
        users may pass: the function is public."""
        functions = self._summaries[path][1].functions
        qualname = function.qualname
        while True:
            if any(param.name == name for param in function.params):
                return _public(path, function)
            if name in function.local_names:
                return False
            qualname, nested, _ = qualname.rpartition(".<locals>.")
            function = functions.get(qualname) if nested else None
            if function is None:
                return False

    def run_by_opaque(self, calls: Iterable[OpaqueCall]) -> dict[tuple[str, str], OpaqueCall]:
        """(file, qualname) of every function an unfollowed recorded call may run -> that call."""
        run: dict[tuple[str, str], OpaqueCall] = {}
        pending: list[tuple[ModuleInfo, FunctionSummary, OpaqueCall]] = []
        for call in calls:
            for info, function in self._candidates(call):
                pending.append((info, function, call))
        while pending and len(run) < MAX_RUN_BY_OPAQUE:
            info, function, call = pending.pop()
            if (info.path, function.qualname) in run:
                continue
            run[(info.path, function.qualname)] = call
            for op in function.ops:
                if op.__class__ is CallOp and not op.qualified:
                    pending.extend((i, f, call) for i, f in self._callees(info, function, op))
        return run

    def _callees(self, info: ModuleInfo, function: FunctionSummary,
                 op: CallOp) -> list[tuple[ModuleInfo, FunctionSummary]]:
        callee = self._static_callee(info, function, op)
        if callee is None:
            return []
        found, where = self.index.function(callee), self.index.info_of(callee)
        return [(where, found)] if found is not None and where is not None else []

    def _candidates(self, call: OpaqueCall) -> list[tuple[ModuleInfo, FunctionSummary]]:
        named = self._named(call.name, call.location.path)
        held = self._held_in.get(call.attribute) if call.attribute is not None else None
        if held is None:
            return named  # no project class holds anything under that name: any of the name
        methods = {self.index.method(cls, call.name) for cls in held} - {None}
        return [(info, function) for info, function in named
                if Symbol("function", info.name, function.qualname, info.path) in methods]

    @functools.cached_property
    def _held_in(self) -> dict[str, set[Symbol]]:
        """Attribute name -> the project classes whose objects project classes assign to (or
        annotate) an attribute of that name; an empty set where only other values are assigned."""
        held: dict[str, set[Symbol]] = {}
        for info, summary in self._summaries.values():
            for qualname, described in summary.classes.items():
                cls = Symbol("class", info.name, qualname, info.path)
                for attribute in set(described.attributes) | self.index.assigned_attributes(cls):
                    found = self.index.attribute_class(cls, attribute)
                    held.setdefault(attribute, set()).update((found,) if found is not None else ())
        return held

    # -- the public API -------------------------------------------------------------------
    @functools.cached_property
    def _calls_by_name(self) -> dict[str, list[tuple[ModuleInfo, FunctionSummary, CallOp]]]:
        """A called name (a method's, or a dotted callee's last part) -> the calls of that name."""
        found: dict[str, list] = {}
        for info, summary in self._summaries.values():
            for function in summary.functions.values():
                for op in function.ops:
                    if op.__class__ is CallOp and op.dotted and op.qualified is None:
                        found.setdefault(op.method or op.func.rsplit(".", 1)[-1], []).append((info, function, op))
        return found

    @functools.cached_property
    def _exported(self) -> frozenset[Symbol]:
        """The functions and classes a public module defines under a public name or imports at
        module level (its re-exports: `newton/solvers.py`'s `from ._src.solvers import ...`)."""
        found: set[Symbol] = set()
        for info in self.index.infos():
            summary = self.index.summary(info) if public_module(info) else None
            if summary is None:
                continue
            names = [binding.local for binding in summary.imports if binding.scope == MODULE_SCOPE
                     and binding.name not in (None, "*") and not binding.local.startswith("_")]
            names += [name for name in (*summary.functions, *summary.classes)
                      if "." not in name and name != MODULE_SCOPE and not name.startswith("_")]
            for name in names:
                symbol = self.index.resolve(info.path, MODULE_SCOPE, name)
                if symbol is not None and symbol.kind in ("function", "class"):
                    found.add(symbol)
        return frozenset(found)

    def _is_api(self, function: Symbol) -> bool:
        """Whether users of the package call ``function``: an exported function, or a public
        method (dunders included: `__call__`) of an exported class or of one it derives from."""
        if function in self._exported:
            return True
        owner, dot, name = function.qualname.rpartition(".")
        if not dot or "<locals>" in owner or (name.startswith("_") and not name.startswith("__")):
            return False
        return Symbol("class", function.module, owner, function.path) in self._api_classes

    @functools.cached_property
    def _api_classes(self) -> frozenset[Symbol]:
        """The exported classes and every class they derive from: users call their public methods."""
        return frozenset(cls for exported in self._exported if exported.kind == "class"
                         for cls in self.index.mro(exported))

    def api_path(self, function: Symbol, limit: int = 200) -> list[Symbol] | None:
        """The calls from the package's public API down to ``function`` ([api function, ...,
        function]); None when no call the model resolves leads there from the API (within
        ``limit`` functions). Test modules and module-level code call nothing users do."""
        chains = {function: [function]}
        pending = [function]
        while pending and len(chains) < limit:
            current = pending.pop(0)
            if self._is_api(current):
                return chains[current]
            name = current.qualname.rsplit(".", 1)[-1]
            for info, caller, op in self._calls_by_name.get(name, ()):
                if caller.is_module or _test_module(info.path):
                    continue
                symbol = Symbol("function", info.name, caller.qualname, info.path)
                if symbol not in chains and self._static_callee(info, caller, op) == current:
                    chains[symbol] = [symbol, *chains[current]]
                    pending.append(symbol)
        return None

    def _named(self, name: str, near: str) -> list[tuple[ModuleInfo, FunctionSummary]]:
        return [(info, function) for info, function in self._by_name.get(name, ())
                if self.related(near, info.path)]


def public_module(info: ModuleInfo) -> bool:
    """Whether users of a package may import the module: a module of a package (a dotted name, or
    a package's `__init__`) with no part of its name private (`_src`) or a test's."""
    parts = info.name.split(".")
    if len(parts) < 2 and not info.is_package:
        return False  # a script, or a module beside scripts
    return not any(part.startswith("_") or part in ("tests", "test") or part.startswith("test_")
                   or part.endswith("_test") or part == "conftest" for part in parts)


def _public(path: str, function: FunctionSummary) -> bool:
    """Whether users may call ``function``: not private (a leading underscore in its qualified
    name), not in a test module (pytest's names: ``test_*.py``, ``*_test.py``, ``conftest.py``,
    a ``tests`` folder)."""
    if _test_module(path):
        return False
    return not any(part.startswith("_") and not part.startswith("__") for part in function.qualname.split("."))


def call_at(function: FunctionSummary, location: Location, launch: bool = False) -> CallOp | None:
    """The call written at ``location`` in ``function`` (with ``launch``, only a `wp.launch`)."""
    return next((op for op in function.ops if op.__class__ is CallOp
                 and (op.loc.line, op.loc.column) == (location.line, location.column)
                 and (not launch or op.qualified in LAUNCH_FUNCTIONS)), None)


def _attribute_source(function: FunctionSummary, code: str, receiver: str) -> str | None:
    """The attribute of the method's object a kernel value comes from: `self.step`, an element of
    a container held there (`self.kernels[key]`, `self.kernels.get(key)`), or a local taken from
    one (`for size, kernel in self.kernels.items():`, `kernel = self.kernels[size]`)."""
    return _source(function, code, rf"{re.escape(receiver)}\.(\w+)", bare=True)


def _container_source(function: FunctionSummary, code: str) -> str | None:
    """The (dotted) name of the container a kernel value is an element of: `KERNELS[key]`,
    `kernels.TABLE.get(key)`, or a local taken from one (a loop over it, `k = KERNELS[n]`)."""
    return _source(function, code, r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)", bare=False)


def _source(function: FunctionSummary, code: str, holder: str, bare: bool) -> str | None:
    element = re.compile(holder + (r"(?:\[.*\]|\.(?:get|pop)\(.*\))" + ("?" if bare else "")), re.DOTALL)
    found = element.fullmatch(code)
    if found is not None:
        return found.group(1)
    if not code.isidentifier() or code not in function.local_names:
        return None
    sources = set()
    for op in function.ops:
        if op.__class__ is LoopOp and code in op.targets:
            iterated = re.fullmatch(holder + r"(?:\.(?:items|values)\(\))?", op.iterable.code) \
                if op.iterable is not None else None
            sources.add(iterated.group(1) if iterated is not None else None)
        elif op.__class__ is AssignOp:
            for target, value in op.pairs:
                if target == code:
                    taken = element.fullmatch(value.code) if value is not None else None
                    sources.add(taken.group(1) if taken is not None else None)
    return sources.pop() if len(sources) == 1 else None


def _test_module(path: str) -> bool:
    """pytest's names: ``test_*.py``, ``*_test.py``, ``conftest.py``, a ``tests`` folder."""
    parts = Path(path).parts
    name = parts[-1] if parts else ""
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" or "tests" in parts[:-1]


def _is_container(code: str, callee: str | None) -> bool:
    return code[:1] in "{[" or callee in CONTAINER_CALLS
