"""The project model: recordings and differentiation contexts, built once per run.

Entry points: every function (and module body) that opens a tape region, calls a tape's
``backward()`` or runs a gradient check, directly or through the functions it calls (found by
name, then followed precisely by the recording). Callers come before callees, and a function
already followed inside an earlier recording is not recorded again on its own, so a helper is
seen with its caller's tape, loops and arguments.

A kernel's differentiation context:

- *differentiated*: a recording launches it inside a tape region (and not with
  ``record_tape=False``), or a gradient check targets it;
- *forward-only*: its backward is disabled (its decorator, ``**options``, a project decorator,
  ``wp.set_module_options`` anywhere at module level), or every launch the project makes of it is
  outside any recording;
- *unknown*: the project never launches it (a library's public kernel), or it is passed around
  where a recorded launch the model cannot resolve might run it.

A ``@wp.func`` is differentiated when a differentiated kernel or func calls it, forward-only when
every caller is forward-only, unknown otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterator

from warp_lint.host import AUTOGRAD_CHECKS, LAUNCH_FUNCTIONS, TAPE_CLASSES, HostScope, Location, looks_like_tape
from warp_lint.kernel_facts import KernelFacts
from warp_lint.project.index import ModuleInfo, ProjectIndex, Symbol, WarpDefinition
from warp_lint.project.recordings import Recorder
from warp_lint.project.summary import MODULE_SCOPE, AssignOp, CallOp, FunctionSummary, WithOp

DIFFERENTIATED, FORWARD_ONLY, UNKNOWN = "differentiated", "forward-only", "unknown"


@dataclasses.dataclass(frozen=True)
class Reach:
    """How a recording reaches a launch: the tape, its region, the calls from the entry point."""

    tape: str
    region: Location
    launch: Location
    entry: str
    chain: tuple  # CallSite, from the entry point to the launch

    def describe(self) -> str:
        tape = f"`{self.tape}`" if self.tape else "a tape"
        through = "".join(f" through `{site.callee}`" for site in self.chain)
        return f"recorded on {tape} at {_where(self.region)}{through}"


@dataclasses.dataclass(frozen=True)
class DifferentiationContext:
    state: str  # differentiated | forward-only | unknown
    reason: str  # why, in words
    reach: Reach | None = None  # differentiated: the recording that reaches it
    launches: tuple[Location, ...] = ()  # where the project launches it


@dataclasses.dataclass
class _Launches:
    recorded: dict[Symbol, Reach] = dataclasses.field(default_factory=dict)
    checked: dict[Symbol, Location] = dataclasses.field(default_factory=dict)
    unresolved_recorded: list[Location] = dataclasses.field(default_factory=list)


class ProjectModel:
    def __init__(self, index: ProjectIndex, facts: Callable[[str], dict[str, KernelFacts]],
                 warp_files: Callable[[], Iterator[ModuleInfo]] | None = None):
        self.index = index
        self._facts = facts
        self._warp_files = warp_files or index.infos
        self._facts_by_path: dict[str, dict[str, KernelFacts]] = {}
        self._relevant: set[Symbol] = set()

    # -- kernel facts ---------------------------------------------------------------------
    def facts_of(self, symbol: Symbol) -> KernelFacts | None:
        if symbol.kind != "warp" or not symbol.path:
            return None
        facts = self._facts_by_path.get(symbol.path)
        if facts is None:
            facts = self._facts_by_path[symbol.path] = self._facts(symbol.path)
        return facts.get(symbol.qualname)

    # -- recordings -----------------------------------------------------------------------
    @functools.cached_property
    def _recorded(self) -> tuple[list[HostScope], _Launches]:
        scopes: list[HostScope] = []
        launches = _Launches()
        covered: set[Symbol] = set()
        for info, function in self._entry_points():
            symbol = Symbol("function", info.name, function.qualname, info.path)
            if symbol in covered:
                continue
            owner = self._owner(info, function)
            recorder = Recorder(self.index, self.facts_of, self._relevant)
            scope = recorder.record(info, function, owner)
            if not _records_anything(scope):
                continue
            covered |= recorder.followed
            scopes.append(scope)
            for kernel, event in recorder.launch_symbols:
                if event.launch is None or not event.launch.recorded:
                    continue
                if kernel is None or kernel.kind != "warp":
                    launches.unresolved_recorded.append(event.location)
                elif kernel not in launches.recorded:
                    region = event.region
                    launches.recorded[kernel] = Reach(region.tape, region.location, event.location, scope.entry,
                                                      event.chain)
            for target, event in recorder.checked:
                if target is not None and target.kind == "warp":
                    launches.checked.setdefault(target, event.location)
        return scopes, launches

    def record_function(self, symbol: Symbol) -> HostScope | None:
        """One function on its own, every call followed (what a gradient check runs, say)."""
        function = self.index.function(symbol)
        info = self.index.info_of(symbol)
        if function is None or info is None:
            return None
        owner = self._owner(info, function)
        return Recorder(self.index, self.facts_of, None).record(info, function, owner)

    @property
    def scopes(self) -> list[HostScope]:
        """Every recording: the host rules' input."""
        return self._recorded[0]

    def _owner(self, info: ModuleInfo, function: FunctionSummary) -> Symbol | None:
        if function.owner is None:
            return None
        return Symbol("class", info.name, function.owner, info.path)

    def _entry_points(self) -> list[tuple[ModuleInfo, FunctionSummary]]:
        """Functions that reach a tape or a gradient check, directly or through calls the index
        resolves, callers first."""
        functions: dict[Symbol, tuple[ModuleInfo, FunctionSummary]] = {}
        calls_by_name: dict[str, list[tuple[Symbol, CallOp]]] = {}  # a called name -> (caller, call)
        called: set[str] = set()
        pending: list[Symbol] = []
        for info in self._warp_files():
            summary = self.index.summary(info)
            if summary is None:
                continue
            for function in summary.functions.values():
                symbol = Symbol("function", info.name, function.qualname, info.path)
                functions[symbol] = (info, function)
                if _reaches_a_tape_directly(function):
                    pending.append(symbol)
                for op in function.ops:
                    if op.__class__ is CallOp and op.qualified is None and op.dotted:
                        name = op.method or op.func.rsplit(".", 1)[-1]
                        calls_by_name.setdefault(name, []).append((symbol, op))
                        called.add(name)
        relevant = set(pending)
        while pending:
            target = pending.pop()
            name = target.qualname.rsplit(".", 1)[-1]
            if name == "__init__":
                name = target.qualname.rsplit(".", 2)[-2] if target.qualname.count(".") else name
            for caller, op in calls_by_name.get(name, ()):
                if caller in relevant:
                    continue
                info, function = functions[caller]
                if self.static_callee(info, function, op) == target:
                    relevant.add(caller)
                    pending.append(caller)
        self._relevant = relevant
        ordered = sorted(relevant, key=lambda s: (not functions[s][1].is_module,
                                                  functions[s][1].name in called, s.path, functions[s][1].first_line))
        return [functions[s] for s in ordered]

    def static_callee(self, info: ModuleInfo, function: FunctionSummary, op: CallOp) -> Symbol | None:
        """The project function a call runs (a constructor: its `__init__`), resolved without a
        caller: names and imports, `self.m()`, `self.attr.m()` and `x.m()` through the classes the
        code constructs or annotates."""
        if op.receiver is None:
            target = self.index.resolve(info.path, function.qualname, op.func)
        else:
            cls = self._static_class(info, function, op.receiver)
            if cls is not None:
                return self.index.method(cls, op.method)
            target = self.index.resolve(info.path, function.qualname, op.func)
        if target is not None and target.kind == "class":
            return self.index.method(target, "__init__")
        return target if target is not None and target.kind == "function" else None

    def _static_class(self, info: ModuleInfo, function: FunctionSummary, code: str) -> Symbol | None:
        if "[" in code or "(" in code:
            return None
        head, *attributes = code.split(".")
        if function.owner and function.params and head == function.params[0].name:
            cls = Symbol("class", info.name, function.owner, info.path)
        elif head in function.local_names:
            params = {p.name: p.annotation for p in function.params}
            cls = None
            if params.get(head):
                found = self.index.resolve(info.path, _scope_of(function), params[head].strip("'\""))
                cls = found if found is not None and found.kind == "class" else None
            if cls is None:
                values = [v for op in function.ops if op.__class__ is AssignOp and op.augmented is None
                          for target, v in op.pairs if target == head]
                cls = self.index.constructed_class(info.path, function, values[0]) if len(values) == 1 else None
        else:
            return None
        for attribute in attributes:
            if cls is None:
                return None
            cls = self.index.attribute_class(cls, attribute)
        return cls

    # -- contexts -------------------------------------------------------------------------
    @functools.cached_property
    def definitions(self) -> dict[Symbol, WarpDefinition]:
        found: dict[Symbol, WarpDefinition] = {}
        for info in self._warp_files():
            for definition in self.index.warp_definitions(info):
                found.setdefault(definition.symbol, definition)
        return found

    @functools.cached_property
    def contexts(self) -> dict[Symbol, DifferentiationContext]:
        _, launches = self._recorded
        forward = self._forward_launches()
        contexts: dict[Symbol, DifferentiationContext] = {}
        for symbol, definition in self.definitions.items():
            if definition.kind != "kernel":
                continue
            contexts[symbol] = self._kernel_context(symbol, definition, launches, forward.get(symbol, ()))
        self._func_contexts(contexts)
        return contexts

    def _kernel_context(self, symbol: Symbol, definition: WarpDefinition, launches: _Launches,
                        sites: tuple[Location, ...]) -> DifferentiationContext:
        if definition.backward_disabled:
            return DifferentiationContext(FORWARD_ONLY, f"backward is disabled: {definition.backward_disabled}",
                                          launches=sites)
        reach = launches.recorded.get(symbol)
        if reach is not None:
            return DifferentiationContext(DIFFERENTIATED, reach.describe(), reach, sites)
        checked = launches.checked.get(symbol)
        if checked is not None:
            return DifferentiationContext(DIFFERENTIATED, f"a gradient check at {_where(checked)} targets it",
                                          launches=sites)
        if not sites:
            return DifferentiationContext(UNKNOWN, "the project never launches it", launches=sites)
        if launches.unresolved_recorded and symbol in self._escaped:
            where = _where(launches.unresolved_recorded[0])
            return DifferentiationContext(UNKNOWN, f"it is passed around, and the recorded launch at {where} may run"
                                                   " it", launches=sites)
        return DifferentiationContext(FORWARD_ONLY, f"every launch of it ({len(sites)}, first at {_where(sites[0])}) is"
                                                    " outside any tape recording", launches=sites)

    def _func_contexts(self, contexts: dict[Symbol, DifferentiationContext]) -> None:
        callers: dict[Symbol, list[Symbol]] = {}
        for symbol, definition in self.definitions.items():
            scope = _scope_of(definition.summary)
            for code in definition.summary.calls_in_body:
                callee = self.index.resolve(symbol.path, scope, code)
                if callee is not None and callee.kind == "warp" and callee != symbol:
                    callers.setdefault(callee, []).append(symbol)
        funcs = [s for s, d in self.definitions.items() if d.kind == "func"]
        # Contexts flow from kernels down the call graph: iterate to a fixed point.
        for _ in range(len(funcs) + 1):
            changed = False
            for func in funcs:
                context = self._func_context(func, callers.get(func, []), contexts)
                if contexts.get(func) != context:
                    contexts[func] = context
                    changed = True
            if not changed:
                break

    def _func_context(self, func: Symbol, callers: list[Symbol],
                      contexts: dict[Symbol, DifferentiationContext]) -> DifferentiationContext:
        known = [(c, contexts.get(c)) for c in callers]
        for caller, context in known:
            if context is not None and context.state == DIFFERENTIATED:
                return DifferentiationContext(DIFFERENTIATED, f"`{caller.qualname}` calls it, {context.reason}",
                                              context.reach)
        if known and all(context is not None and context.state == FORWARD_ONLY for _, context in known):
            names = ", ".join(f"`{c.qualname}`" for c, _ in known[:3]) + (" ..." if len(known) > 3 else "")
            return DifferentiationContext(FORWARD_ONLY, f"every caller is forward-only ({names})")
        if not known:
            return DifferentiationContext(UNKNOWN, "no kernel of the project calls it")
        return DifferentiationContext(UNKNOWN, "some callers' context is unknown")

    def _forward_launches(self) -> dict[Symbol, tuple[Location, ...]]:
        """Every launch site the project has, by the kernel it names (resolved without a caller)."""
        sites: dict[Symbol, list[Location]] = {}
        for info in self._warp_files():
            summary = self.index.summary(info)
            if summary is None:
                continue
            for function in summary.functions.values():
                for op in function.ops:
                    if op.__class__ is not CallOp or op.qualified not in LAUNCH_FUNCTIONS:
                        continue
                    kernel = op.argument(0, "kernel")
                    symbol = self.static_value(info, function, kernel) if kernel is not None else None
                    if symbol is not None and symbol.kind == "warp":
                        sites.setdefault(symbol, []).append(Location.of(info.path, op.loc))
        return {symbol: tuple(found) for symbol, found in sites.items()}

    def static_value(self, info: ModuleInfo, function: FunctionSummary, value, depth: int = 0) -> Symbol | None:
        """What a value names without running anything: a name, a local assigned once from a name or
        a factory call, `self.attr` assigned in the class, a factory's product."""
        if value is None or depth > 4:
            return None
        if value.call is not None:
            call = next((op for op in function.ops if op.__class__ is CallOp and op.index == value.call), None)
            if call is None or not call.dotted:
                return None
            callee = self.index.resolve(info.path, function.qualname, call.func)
            return self._product(callee, depth) if callee is not None else None
        if not value.plain or "[" in value.code:
            return None
        head, _, rest = value.code.partition(".")
        if head in function.local_names and function.params and head == function.params[0].name and \
                function.owner and rest and "." not in rest:
            owner = Symbol("class", info.name, function.owner, info.path)
            for method, method_summary, assigned in self.index.attribute_value(owner, rest):
                found = self.static_value(self.index.info_of(method), method_summary, assigned, depth + 1)
                if found is not None:
                    return found
            return None
        if head in function.local_names:
            assigned = [v for op in function.ops if op.__class__ is AssignOp and op.augmented is None
                        for code, v in op.pairs if code == head and v is not None]
            if len(assigned) == 1 and not rest:
                return self.static_value(info, function, assigned[0], depth + 1)
            return None
        return self.index.resolve(info.path, function.qualname, value.code)

    def _product(self, callee: Symbol, depth: int) -> Symbol | None:
        """The kernel a factory function returns: a local Warp definition, or one it makes."""
        if callee.kind == "warp":
            return callee
        if callee.kind != "function":
            return None
        function = self.index.function(callee)
        info = self.index.info_of(callee)
        if function is None or info is None:
            return None
        for code in function.returns_code:
            local = function.local_functions.get(code)
            if local is not None:
                return Symbol("warp", info.name, local, info.path)
        for _, target, _ in function.applies_warp:
            local = function.local_functions.get(target)
            if local is not None:
                return Symbol("warp", info.name, local, info.path)
        return None

    @functools.cached_property
    def _escaped(self) -> set[Symbol]:
        """Kernels named somewhere other than a launch's kernel argument (stored, passed on)."""
        names = {s.qualname.rsplit(".", 1)[-1] for s, d in self.definitions.items() if d.kind == "kernel"}
        found = set()
        for info in self._warp_files():
            summary = self.index.summary(info)
            if summary is None:
                continue
            for name in summary.referenced & names:
                symbol = self.index.resolve(info.path, MODULE_SCOPE, name)
                if symbol is not None and symbol.kind == "warp":
                    found.add(symbol)
        return found

    def definition_at(self, path: str, line: int) -> WarpDefinition | None:
        """The innermost kernel or func whose lines hold ``line`` in the file ``path``."""
        info = self.index.by_path.get(path)
        if info is None:
            return None
        best = None
        for definition in self.index.warp_definitions(info):
            summary = definition.summary
            if summary.first_line <= line <= summary.last_line and (
                    best is None or summary.first_line >= best.summary.first_line):
                best = definition
        return best

    def context_of(self, definition: WarpDefinition) -> DifferentiationContext:
        return self.contexts.get(definition.symbol, DifferentiationContext(UNKNOWN, "not a kernel or func"))


def _records_anything(scope: HostScope) -> bool:
    """Whether a recording holds something a host rule reads: a tape, a gradient check, a
    `requires_grad` or `retain_grad` setting."""
    return any(e.kind == "region" or (e.kind == "method" and e.name == "backward" and scope.is_tape(e)) or
               (e.kind == "call" and e.name in AUTOGRAD_CHECKS) or
               (e.kind == "assign" and e.name.endswith(".requires_grad")) or
               (e.allocation is not None and e.allocation.retain_grad) for e in scope.events)


def _reaches_a_tape_directly(function: FunctionSummary) -> bool:
    """Whether the function's own operations hold what ``_records_anything`` looks for."""
    tapes: set[str] = set()
    for op in function.ops:
        kind = op.__class__
        if kind is AssignOp:
            if any(code.endswith(".requires_grad") for code, _ in op.pairs):
                return True
        elif kind is CallOp:
            if op.qualified in AUTOGRAD_CHECKS:
                return True
            if op.argument(None, "retain_grad") is not None and op.qualified is not None:
                return True
            if op.qualified in TAPE_CLASSES and op.target:
                tapes.add(op.target)
            if op.method == "backward" and op.receiver is not None and (
                    looks_like_tape(op.receiver) or op.receiver in tapes):
                return True
        elif kind is WithOp:
            for item in op.items:
                if item.qualified in TAPE_CLASSES or (item.value.plain and (
                        looks_like_tape(item.value.code) or item.value.code in tapes)):
                    return True
    return False


def _called_names(function: FunctionSummary) -> set[str]:
    return {op.method or op.func.rsplit(".", 1)[-1] for op in function.ops
            if op.__class__ is CallOp and op.qualified is None and op.dotted}


def _class_name(function: FunctionSummary) -> str | None:
    return function.owner.rsplit(".", 1)[-1] if function.owner else None


def _scope_of(function: FunctionSummary) -> str:
    head, separator, _ = function.qualname.rpartition(".<locals>.")
    return head if separator else MODULE_SCOPE


def _where(location: Location) -> str:
    import os

    return f"{os.path.basename(location.path)}:{location.line}"
