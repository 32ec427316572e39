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

A model is updated, not rebuilt, after an edit that leaves the edited files' names alone (an
editor's keystroke, a fix): built from the model before (``previous``), it keeps the recordings
that never read an edited file, and the other files' entry-point candidates, launch sites and
kernel facts; only what read an edited file is recorded or resolved again.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import re
from typing import Callable, Iterable, Iterator

from warp_lint.host import (
    AUTOGRAD_CHECKS,
    HEAD,
    LAUNCH_FUNCTIONS,
    TAPE_CLASSES,
    HostEvent,
    HostScope,
    Location,
    looks_like_tape,
)
from warp_lint.kernel_facts import KernelFacts
from warp_lint.project.contexts import (
    DIFFERENTIATED,
    FORWARD_ONLY,
    PUBLIC,
    UNKNOWN,
    UNREACHABLE,
    DifferentiationContext,
    Reach,
)
from warp_lint.project.contexts import (
    where as _where,
)
from warp_lint.project.factories import FactoryFlow, _is_name, _scope_of
from warp_lint.project.finding_contexts import FindingContexts
from warp_lint.project.index import ModuleInfo, ProjectIndex, Symbol, WarpDefinition
from warp_lint.project.reach import Reachability, call_at, public_module
from warp_lint.project.recordings import OpaqueCall, Recorder
from warp_lint.project.summary import (
    MODULE_SCOPE,
    NOT_LITERAL,
    AssignOp,
    CallOp,
    FileSummary,
    FunctionSummary,
    LoopOp,
    ReturnOp,
    Value,
    WithOp,
)


@dataclasses.dataclass
class _Launches:
    recorded: dict[Symbol, Reach] = dataclasses.field(default_factory=dict)
    # recorded launches binding only arrays allocated without requires_grad: kernel -> the first
    gradient_free: dict[Symbol, tuple[Location, list[HostEvent]]] = dataclasses.field(default_factory=dict)
    checked: dict[Symbol, Location] = dataclasses.field(default_factory=dict)
    # recorded only on a tape nothing can differentiate (`with wp.Tape():` binds no name): kernel ->
    # where that tape records
    unnamed_tape: dict[Symbol, Location] = dataclasses.field(default_factory=dict)
    unresolved_recorded: list[Location] = dataclasses.field(default_factory=list)
    opaque: list[OpaqueCall] = dataclasses.field(default_factory=list)  # calls under a tape not followed


@dataclasses.dataclass
class _Recording:
    """What recording one entry point gave, and every file whose summary it may have read: a
    model where none of those files changed takes it as it is."""

    scope: HostScope
    records: bool  # it holds something a host rule reads
    followed: set[Symbol]
    launch_symbols: list
    checked: list
    opaque: list[OpaqueCall]
    files: frozenset[str]


@dataclasses.dataclass
class _FileEntries:
    """One file's share of finding the entry points: read from its summary, and the functions its
    calls run as far as they were needed, with the files read to resolve them."""

    summary: FileSummary
    functions: dict[Symbol, tuple[ModuleInfo, FunctionSummary]]
    direct: list[Symbol]  # functions that reach a tape themselves: their callers are entry points too
    local: list[Symbol]  # a requires_grad setting, a gradient check: read where it is written
    calls: list[tuple[str, Symbol, CallOp]]  # (called name, caller, call) of calls the index may resolve
    callees: dict[int, Symbol | None] = dataclasses.field(default_factory=dict)  # position in calls -> callee
    reads: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class _FileSites:
    """Where one file launches which kernel, and the files read to resolve the kernels."""

    summary: FileSummary
    sites: list[tuple[Symbol | None, Location, bool]]  # (kernel, launch, whether it runs the adjoint)
    reads: set[str]


class _ReadingIndex:
    """The index as one recording reads it, noting every file whose summary it may read: the
    files of the symbols, modules and paths it asks about or gets back (and a class's bases')."""

    def __init__(self, index: ProjectIndex):
        self.index = index
        self.files: set[str] = set()

    def __getattr__(self, name: str):
        found = getattr(self.index, name)
        if not callable(found):
            return found

        def read(*args):
            for argument in args:
                self._note(argument)
            result = found(*args)
            self._note(result)
            return result

        self.__dict__[name] = read  # a recording asks tens of thousands of times: make the wrapper once
        return read

    def _note(self, value) -> None:
        kind = value.__class__
        if kind is Symbol:
            if value.path:
                self.files.add(value.path)
                if value.kind == "class":
                    self.files.update(base.path for base in self.index.mro(value) if base.path)
        elif kind is ModuleInfo:
            self.files.add(value.path)
        elif kind is str:
            if value in self.index.by_path:
                self.files.add(value)
        elif kind is list or kind is tuple:
            for item in value:
                self._note(item)


class ProjectModel(FactoryFlow, FindingContexts):
    def __init__(self, index: ProjectIndex, facts: Callable[[str], dict[str, KernelFacts]],
                 warp_files: Callable[[], Iterator[ModuleInfo]] | None = None,
                 previous: ProjectModel | None = None, changed: Iterable[str] = (),
                 entries_from: ProjectModel | None = None):
        """``previous``: the model before the summaries and kernel facts of the files ``changed``
        changed, none of the names they define (what other files import or resolve through them,
        see ``Workspace``): its recordings that read none of those files are taken as they are,
        and so are the other files' facts and entry-point candidates. ``entries_from``: a model
        of other summaries of some files, whose entry-point candidates are read again only from the
        files whose summaries changed (every call is resolved again)."""
        self.index = index
        self._facts = facts
        self._warp_files = warp_files or index.infos
        self._facts_by_path: dict[str, dict[str, KernelFacts]] = {}
        self._relevant: set[Symbol] = set()
        self._definitions: dict[str, list[WarpDefinition]] = {}
        self._contexts: dict[Symbol, DifferentiationContext] = {}
        self._open: dict[Symbol, int] = {}  # definitions whose context is being decided -> their depth
        self._low = 1 << 30  # the shallowest open definition the one being decided has consulted
        self._recordings: dict[Symbol, _Recording] = {}
        self._file_entries: dict[str, _FileEntries] = {}
        self._file_sites: dict[str, _FileSites] = {}
        self._code_words_memo: dict[tuple[str, str], frozenset[str]] = {}
        self._merged: tuple[dict, dict, dict] | None = None  # see _merge_entries
        self._changed = frozenset(changed)
        self._previous = None
        self._refused: tuple[frozenset[str], ...] | None = None  # the refusals its recordings followed
        if previous is not None:
            if "_recorded" not in previous.__dict__ and previous._previous is not None:
                # never recorded: build on the model it was built on
                self._changed |= previous._changed
                previous = previous._previous
            self._previous = previous
            changed = self._changed
            self._facts_by_path = {path: facts for path, facts in previous._facts_by_path.items()
                                   if path not in changed}
            # A file's functions and calls are its own summary's; only the callees resolved through
            # a changed file are resolved again.
            self._file_entries = {path: entries if not entries.reads & changed else dataclasses.replace(
                entries, callees={}, reads=set()) for path, entries in previous._file_entries.items()
                if path not in changed}
            self._file_sites = {path: sites for path, sites in previous._file_sites.items()
                                if path not in changed and not sites.reads & changed}
        elif entries_from is not None:
            self._file_entries = {path: dataclasses.replace(entries, callees={}, reads=set())
                                  for path, entries in entries_from._file_entries.items()}

    @contextlib.contextmanager
    def _reading(self) -> Iterator[set[str]]:
        """Note the files whose summaries the index reads meanwhile (what the result depends on)."""
        index = self.index
        reading = _ReadingIndex(index)
        self.index = reading  # type: ignore[assignment]
        try:
            yield reading.files
        finally:
            self.index = index

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
        entries = self._entry_points()
        self._refused = self.index.gradient_free_conditions()
        previous, dirty = self._reusable_recordings()
        for info, function in entries:
            symbol = Symbol("function", info.name, function.qualname, info.path)
            if symbol in covered:
                continue
            recording = previous.get(symbol)
            if recording is None or recording.files & dirty:
                recording = self._record(info, function)
            self._recordings[symbol] = recording
            launches.opaque.extend(recording.opaque)
            if not recording.records:
                continue
            scope = recording.scope
            covered |= recording.followed
            scopes.append(scope)
            for kernel, event in recording.launch_symbols:
                if event.launch is None or not event.launch.recorded:
                    continue
                kernels = (kernel,) if kernel is not None and kernel.kind == "warp" else \
                    (self._named_at(event.location) or self._passed_to_wrapper(event))
                if not kernels:
                    launches.unresolved_recorded.append(event.location)
                free = scope.gradient_free(event.launch)
                region = event.region
                for kernel in kernels:
                    if region is not None and not region.key and not region.tape:
                        # `with wp.Tape():` holds its tape nowhere: no `backward()` can ever run it
                        launches.unnamed_tape.setdefault(kernel, region.location)
                    elif free is not None:
                        launches.gradient_free.setdefault(kernel, (event.location, free))
                    elif kernel not in launches.recorded or (launches.recorded[kernel].skipped_by
                                                              and not event.skipped_by):
                        # A recording whose own arguments run the launch names it best.
                        launches.recorded[kernel] = Reach(region.tape, region.location, event.location,
                                                          scope.entry, event.chain, event.skipped_by)
            for target, event in recording.checked:
                if target is not None and target.kind == "warp":
                    launches.checked.setdefault(target, event.location)
        self._previous = None  # taken what it could: let it go
        return scopes, launches

    def _record(self, info: ModuleInfo, function: FunctionSummary) -> _Recording:
        reading = _ReadingIndex(self.index)
        reading.files.add(info.path)
        recorder = Recorder(reading, self.facts_of, self._relevant)
        scope = recorder.record(info, function, self._owner(info, function))
        return _Recording(scope, _records_anything(scope), recorder.followed, recorder.launch_symbols,
                          recorder.checked, recorder.opaque, frozenset(reading.files))

    def _reusable_recordings(self) -> tuple[dict[Symbol, _Recording], frozenset[str]]:
        """The previous model's recordings, and the files whose change makes one of them stale: the
        changed files, and those of the functions whose relevance (whether a call of them is
        followed before a tape opens) changed."""
        previous = self._previous
        if previous is None or "_recorded" not in previous.__dict__:
            return {}, frozenset()
        if set(previous._refused or ()) != set(self._refused or ()):
            # A refusal anywhere decides which arms every recording follows: none is kept.
            return {}, frozenset()
        moved = previous._relevant ^ self._relevant
        return previous._recordings, self._changed | {symbol.path for symbol in moved}

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
        resolves, callers first. Only functions whose words could say so are scanned."""
        current: dict[str, _FileEntries] = {}
        for info in self._warp_files():
            summary = self.index.summary(info)
            if summary is None:
                continue
            entries = self._file_entries.get(info.path)
            if entries is None or entries.summary is not summary:
                entries = self._file_entries[info.path] = _file_entries(info, summary)
            current[info.path] = entries
        functions, calls_by_name = self._merge_entries(current)
        pending = [symbol for entries in current.values() for symbol in entries.direct]
        local = {symbol for entries in current.values() for symbol in entries.local}
        relevant = set(pending)
        called: set[Symbol] = set()
        while pending:
            target = pending.pop()
            name = target.qualname.rsplit(".", 1)[-1]
            if name == "__init__" and "." in target.qualname:
                name = target.qualname.rsplit(".", 2)[-2]
            calls = calls_by_name.get(name, ())
            if name == "forward":  # torch's `Cls.apply(...)` runs it
                calls = (*calls, *calls_by_name.get("apply", ()))
            for caller, op, entries, position in calls:
                if caller == target:
                    continue
                if position in entries.callees:
                    callee = entries.callees[position]
                else:
                    info, function = functions[caller]
                    with self._reading() as read:
                        callee = entries.callees[position] = self.static_callee(info, function, op)
                    entries.reads |= read
                if callee == target:
                    called.add(target)
                    if caller not in relevant:
                        relevant.add(caller)
                        pending.append(caller)
        # Objects whose methods record are built by their constructors: follow those too, so the
        # arrays they allocate (and their requires_grad) are in the recording.
        self._relevant = relevant | {init for symbol in relevant if functions[symbol][1].owner
                                     for init in [self.index.method(self._owner(*functions[symbol]), "__init__")]
                                     if init is not None}
        ordered = sorted(relevant | local, key=lambda s: (not functions[s][1].is_module, s in called, s.path,
                                                  functions[s][1].first_line))
        return [functions[s] for s in ordered]

    def _merge_entries(self, current: dict[str, _FileEntries]) -> tuple[dict, dict]:
        """Every file's functions, and every call by the name it calls ((caller, call, its file's
        entries, its position there)): the previous model's, changed where a file's entries did."""
        previous = self._previous._merged if self._previous is not None else None
        if previous is None:
            before, functions, calls_by_name = {}, {}, {}
        else:
            before, functions, calls_by_name = previous[0], dict(previous[1]), dict(previous[2])
        for path in [p for p in before if current.get(p) is not before[p]] + [p for p in current if p not in before]:
            old, new = before.get(path), current.get(path)
            if old is not None:
                for symbol in old.functions:
                    functions.pop(symbol, None)
                for name in {name for name, _, _ in old.calls}:
                    calls_by_name[name] = tuple(call for call in calls_by_name[name] if call[2] is not old)
            if new is not None:
                functions.update(new.functions)
                added: dict[str, list] = {}
                for position, (name, symbol, op) in enumerate(new.calls):
                    added.setdefault(name, []).append((symbol, op, new, position))
                for name, calls in added.items():
                    calls_by_name[name] = calls_by_name.get(name, ()) + tuple(calls)
        self._merged = (current, functions, calls_by_name)
        return functions, calls_by_name

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
            if target is None and op.method == "apply":  # `Cls.apply(...)` of a torch.autograd.Function
                cls = self.index.resolve(info.path, function.qualname, op.receiver)
                return self.index.autograd_forward(cls) if cls is not None and cls.kind == "class" else None
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
                values = _assigned(function.ops, head)
                cls = self.index.constructed_class(info.path, function, values[0]) if len(values) == 1 else None
        else:
            return None
        for attribute in attributes:
            if cls is None:
                return None
            cls = self.index.attribute_class(cls, attribute)
        return cls

    # -- contexts -------------------------------------------------------------------------
    def definitions_in(self, info: ModuleInfo) -> list[WarpDefinition]:
        found = self._definitions.get(info.path)
        if found is None:
            found = self._definitions[info.path] = self.index.warp_definitions(info)
        return found

    def definition(self, symbol: Symbol) -> WarpDefinition | None:
        info = self.index.info_of(symbol)
        if info is None:
            return None
        return next((d for d in self.definitions_in(info) if d.symbol == symbol), None)

    @functools.cached_property
    def _struct_names(self) -> frozenset[str]:
        names = set()
        for info in self._warp_files():
            summary = self.index.summary(info)
            for function in (summary.warp_defs.values() if summary is not None else ()):
                if any(d.qualified == "warp.struct" for d in function.decorators):
                    names.add(function.name)
        return frozenset(names)

    def struct_names(self) -> frozenset[str]:
        return self._struct_names

    def context_of(self, definition: WarpDefinition) -> DifferentiationContext:
        """A definition's context. Its callers' contexts decide a func's; a caller that leads back
        to a definition still being decided (two products of one factory calling each other) adds
        nothing to what reaches the cycle from outside, and what was decided inside a cycle is
        kept only once the cycle's first definition is decided."""
        symbol = definition.symbol
        context = self._contexts.get(symbol)
        if context is not None:
            if symbol in self._open:
                self._low = min(self._low, self._open[symbol])
            return context
        depth = len(self._open)
        self._open[symbol] = depth
        self._contexts[symbol] = DifferentiationContext(UNKNOWN, "its callers call it back", runs=False)
        outer, self._low = self._low, depth
        try:
            if definition.kind == "kernel":
                context = self._kernel_context(symbol, definition)
            elif definition.kind in ("func", "func_native"):
                context = self._func_context(symbol, definition)
            else:
                context = DifferentiationContext(UNKNOWN, f"a `@wp.{definition.kind}`")
        finally:
            del self._open[symbol]
        if context.state == UNKNOWN and self._records_nothing:
            # What the model could not follow can only lead to a recording the project makes: in a
            # program that runs its kernels forward only, users' own tapes alone may differentiate
            # it, as they may the public API.
            context = dataclasses.replace(context, state=PUBLIC, reason=f"{context.reason}; but nothing in the"
                                          " project records a tape, checks a gradient or launches an adjoint, so"
                                          " only its users' own tapes could differentiate it")
        if self._low < depth:
            del self._contexts[symbol]  # it consulted a definition still open: decided again later
        else:
            self._contexts[symbol] = context
        self._low = min(outer, self._low)
        return context

    def _kernel_context(self, symbol: Symbol, definition: WarpDefinition) -> DifferentiationContext:
        _, launches = self._recorded
        sites = self.launch_sites(symbol)
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
        adjoint = sorted(self._adjoint_launches.intersection(sites))
        if adjoint:
            return DifferentiationContext(DIFFERENTIATED, f"its adjoint is launched at {_where(adjoint[0])}"
                                                          " (`adjoint=True`)", launches=sites)
        unfollowed = set(sites).intersection(launches.unresolved_recorded)
        if unfollowed:
            return DifferentiationContext(UNKNOWN, f"the recorded launch at {_where(min(unfollowed))} runs it, and"
                                                   " the recording could not tell which kernel it is", launches=sites)
        for site in sites:
            call = self._run_under_tape(site)
            if call is not None:
                return DifferentiationContext(UNKNOWN, _opaque_reason(site, call), launches=sites)
        escapes = self._escapes(symbol)
        if escapes:
            flowing = [where for where in launches.unresolved_recorded if self._may_flow(symbol, where)]
            if flowing:
                return DifferentiationContext(UNKNOWN, f"it is passed around, and the recorded launch at"
                                                       f" {_where(flowing[0])} may run it", launches=sites)
        free = launches.gradient_free.get(symbol)
        if free is not None:
            where, allocations = free
            named = ", ".join(f"`{a.name}` ({_where(a.location)})" for a in allocations[:3])
            return DifferentiationContext(FORWARD_ONLY, f"every recorded launch of it (first at {_where(where)}) binds"
                                                        f" only arrays allocated without `requires_grad`: {named}; no"
                                                        " gradient reaches it", launches=sites)
        unnamed = launches.unnamed_tape.get(symbol)
        if unnamed is not None:
            return DifferentiationContext(FORWARD_ONLY, f"it is recorded only on a tape that nothing differentiates:"
                                                        f" `with wp.Tape():` at {_where(unnamed)} holds its tape in no"
                                                        " name, so no `backward()` can run it", launches=sites)
        if sites:
            return self._api_launch(sites, sites) or DifferentiationContext(
                FORWARD_ONLY, f"every launch of it ({len(sites)}, first at {_where(sites[0])}) is outside any tape"
                              " recording", launches=sites)
        unnamed = [where for where in self._unnamed_launch_sites if self._may_flow(symbol, where)] if escapes else []
        if not unnamed:
            if self._public(symbol):
                return DifferentiationContext(PUBLIC, "the project never launches it; it is public API, so users"
                                                      " may launch it under their own tape")
            if self._in_package(symbol) and not escapes:
                return DifferentiationContext(UNREACHABLE, "the project never launches it, and it is not public"
                                                           " API", runs=False)
            if ".<locals>." in symbol.qualname and not escapes:
                return DifferentiationContext(UNREACHABLE, "it is made inside a function that neither launches it"
                                                           " nor hands it on", runs=False)
            return DifferentiationContext(UNKNOWN, "the project never launches it", runs=escapes)
        for where in unnamed:
            call = self._run_under_tape(where)
            if call is not None:
                return DifferentiationContext(UNKNOWN, _opaque_reason(where, call), launches=sites)
        return self._api_launch(unnamed, sites) or DifferentiationContext(
            FORWARD_ONLY, f"it is passed around, and every launch that may run it ({len(unnamed)}, first at"
                          f" {_where(unnamed[0])}) is outside any tape recording", launches=sites)

    @functools.cached_property
    def _records_nothing(self) -> bool:
        """Whether the project runs kernels and records none: it launches some, and nothing in it
        records a tape, runs one backward, checks a gradient or launches an adjoint (no function of
        it so much as opens or runs a tape). A project that launches nothing (a file of kernels
        alone, written before the program that runs them) says nothing of how they will run."""
        named, unnamed, _ = self._all_launch_sites
        if not named and not unnamed:
            return False
        _, launches = self._recorded
        if launches.recorded or launches.unresolved_recorded or launches.opaque or launches.checked or \
                launches.unnamed_tape or launches.gradient_free or self._adjoint_launches:
            return False
        current = self._merged[0] if self._merged is not None else {}
        return not any(entries.direct for entries in current.values())

    def _api_launch(self, launches: list[Location] | tuple[Location, ...], sites: tuple[Location, ...]
                    ) -> DifferentiationContext | None:
        """*public* when one of ``launches`` (each outside the project's recordings) is reached
        from the package's public API: users may call that under their own tape."""
        for where in launches:
            function = self._reachability.enclosing(where)
            info = self.index.by_path.get(where.path)
            if function is None or function.is_module or info is None:
                continue
            path = self._reachability.api_path(Symbol("function", info.name, function.qualname, where.path))
            if path is not None:
                through = "".join(f" through `{step.qualname}`" for step in path[1:])
                return DifferentiationContext(PUBLIC, f"the project launches it only outside tape recordings, but"
                                                      f" `{path[0].qualname}` is public API and launches it (at"
                                                      f" {_where(where)}{through}): users may call it under their"
                                                      " own tape", launches=sites)
        return None

    @functools.cached_property
    def _reachability(self) -> Reachability:
        return Reachability(self.index, self._warp_files, self.static_callee)

    @functools.cached_property
    def _run_by_opaque(self) -> dict[tuple[str, str], OpaqueCall]:
        return self._reachability.run_by_opaque(self._recorded[1].opaque)

    def _run_under_tape(self, location: Location) -> OpaqueCall | None:
        """The unfollowed recorded call that may run the function holding ``location``, if any."""
        if not self._run_by_opaque:
            return None
        function = self._reachability.enclosing(location)
        return self._run_by_opaque.get((location.path, function.qualname)) if function is not None else None

    def _may_flow(self, kernel: Symbol, location: Location) -> bool:
        """Whether a kernel passed around may reach the launch at ``location``. A launch of
        `self.<attribute>` runs what the class's methods assign there; another one, what a public
        function's caller passes (anything), or a kernel held in a module related to the launch's
        (``Reachability``)."""
        factory, made, _ = kernel.qualname.rpartition(".<locals>.")
        names = (kernel.qualname.rsplit(".", 1)[-1],) + ((factory.rsplit(".", 1)[-1],) if made else ())
        named = {Symbol("function", kernel.module, factory, kernel.path) if made else kernel}
        holders = self._holders(kernel, names, named)
        assigned = self._reachability.attribute_values(location)
        if assigned is not None:
            # `self._step_kernel`: only what the class's methods put there: the kernel by name or
            # through its factory, a container of the module holding it, or whatever a parameter
            # or a local the model cannot name brings from the method's callers.
            for method, function, value in assigned:
                made = self._call_products(method, function, value)
                if made is not None:
                    if made & named:
                        return True
                    continue
                receiver = function.params[0].name if function.params else None
                for name in value.names - {receiver}:  # the object's own state is the class's
                    resolved = self.index.resolve(method.path, function.qualname, name)
                    if resolved in named or (resolved is not None and resolved.kind == "value"
                                             and any(path == resolved.path for path, _ in holders)):
                        return True
                    if resolved is None and name in function.local_names:
                        # A local every assignment of which names something: it holds only those.
                        values = self.static_values(self.index.info_of(method), function, Value(name, plain=True))
                        if values is not None:
                            if values & named:
                                return True
                            continue
                    if resolved is None and (name in function.local_names or
                                             any(p.name == name for p in function.params)) and \
                            any(self._reachability.related(path, method.path, held) for path, held in holders):
                        return True
            return False
        put = self._reachability.container_values(location)
        if put is not None:
            # `KERNELS[key]`: only what the project puts in the container.
            return any(self._may_mean(path, scope, name, named)
                       for path, scope, value in put for name in value.names if name in names)
        if self._reachability.open_launch(location):
            return True
        return any(self._reachability.related(path, location.path, scope) for path, scope in holders)

    def _call_products(self, where: Symbol, function: FunctionSummary, value) -> frozenset[Symbol] | None:
        """The Warp definitions a value made by calls may be: what a called project function
        returns (all of a tuple's: `a, b = make_kernels(...)`), through conditional expressions
        (`make(n) if meshes else None`); None where it may be something else (a parameter the
        function returns, a value it computes) or a call is not resolved."""
        if value is not None and value.call is None:  # an element of `a, b = make_kernels(...)`: the call's
            whole = next((op.value for op in function.ops if op.__class__ is AssignOp and op.value is not None
                          and op.value.code == value.code and any(v == value for _, v in op.pairs)), None)
            value = whole if whole is not None and whole.call is not None else value
        if value is None:
            return None
        if value.call is not None:
            return self._returned(self._callee(where.path, function, value))
        leaves = _conditional_leaves(value.code)
        if leaves is None or len(leaves) < 2:  # only a conditional expression's branches
            return None
        return _union(self._leaf_products(where, function, leaf) for leaf in leaves)

    def _leaf_products(self, where: Symbol, function: FunctionSummary, leaf: ast.expr) -> frozenset[Symbol] | None:
        """What one branch of a conditional expression may be: nothing for `None`, a called
        project function's returns, a name's ``static_values``."""
        if isinstance(leaf, ast.Constant) and leaf.value is None:
            return frozenset()
        if isinstance(leaf, ast.Call) and _dotted(leaf.func) is not None:
            return self._returned(self.index.resolve(where.path, function.qualname, _dotted(leaf.func)))
        code = _dotted(leaf)
        return self.static_values(self.index.info_of(where), function, Value(code, plain=True)) \
            if code is not None else None

    def _callee(self, path: str, function: FunctionSummary, value) -> Symbol | None:
        """What the call that makes ``value`` calls, resolved by name (`make_kernel(...)`)."""
        call = next((op for op in function.ops if op.__class__ is CallOp and op.index == value.call), None)
        return self.index.resolve(path, function.qualname, call.func) if call is not None and call.dotted else None

    def _returned(self, callee: Symbol | None) -> frozenset[Symbol] | None:
        """The Warp definitions a project function returns (every name of a returned tuple); None
        where it returns anything else."""
        maker = self.index.function(callee) if callee is not None and callee.kind == "function" else None
        if maker is None or not maker.returns_code:
            return None
        found: set[Symbol] = set()
        for code in maker.returns_code:
            for part in code.strip("()").split(","):
                part = part.strip()
                local = maker.local_functions.get(part)
                if local is not None:
                    found.add(Symbol("warp", callee.module, local, callee.path))
                    continue
                if not part.isidentifier():
                    return None
                named = self.static_values(self.index.info_of(callee), maker, Value(part, plain=True))
                if named is None or any(symbol.kind != "warp" for symbol in named):
                    return None
                found |= named
        return frozenset(found)

    def _holders(self, kernel: Symbol, names: tuple[str, ...], named: set[Symbol]) -> set[tuple[str, str]]:
        """(file, scope) of the code that holds the kernel by name: its module, and where its name
        (or its factory's) resolves to it (another module's `simulate` is another kernel; a module
        reaching it as `kernels.simulate` relates through the kernel's own module). A kernel made
        inside a function is held by its module only where the module's code names it or its
        factory: the naming places say that."""
        own = set() if ".<locals>." in kernel.qualname else {(kernel.path, MODULE_SCOPE)}
        return own | {
            (path, scope) for name in names for path, scope in self._naming.get(name, ())
            if self.index.resolve(path, scope, name) in named}

    def _may_mean(self, path: str, scope: str, name: str, named: set[Symbol]) -> bool:
        """Whether ``name`` in ``scope`` of ``path`` may stand for one of ``named``: not where it
        resolves to another definition or is a local variable of that name; yes where it resolves
        to one of them, or where the index cannot tell (`module.kernel`)."""
        resolved = self.index.resolve(path, scope, name)
        if resolved is not None:
            return resolved in named
        info = self.index.by_path.get(path)
        summary = self.index.summary(info) if info is not None else None
        function = summary.functions.get(scope) if summary is not None else None
        if function is None:
            return True
        if name in function.local_names and name not in function.local_functions:
            return False
        return name in self._code_words(path, function)

    def _code_words(self, path: str, function: FunctionSummary) -> frozenset[str]:
        """The words of a function's operations: its ``words`` hold its docstring's and comments'
        too, and only code names a value."""
        key = (path, function.qualname)
        words = self._code_words_memo.get(key)
        if words is None:
            words = self._code_words_memo[key] = frozenset(
                word for op in function.ops for word in re.findall(r"\w+", repr(op)))
        return words

    def _func_context(self, func: Symbol, definition: WarpDefinition) -> DifferentiationContext:
        callers = self._callers(func, definition.summary.name)
        made = self._made_callers(func, definition.summary.name)
        # A product of a factory that another product of the same factory calls (`shape_support`
        # handed to the factory that made it): the call adds nothing to what reaches it otherwise.
        reached = [(caller, self._through(caller, definition)) for caller, definition in callers + (made or [])
                   if caller != func]
        # A caller nothing in the project runs differentiates nothing: it decides nothing here.
        known = [(caller, context) for caller, context in reached if context.runs]
        for caller, context in known:
            if context.state == DIFFERENTIATED:
                return DifferentiationContext(DIFFERENTIATED, f"`{caller.qualname}` calls it, {context.reason}",
                                              context.reach)
        if made is None:
            return DifferentiationContext(UNKNOWN, "the factory that makes it hands it on where it is not followed"
                                                   " (stored on an object, put in a container, passed to a call"
                                                   " outside the project)")
        if known and all(context.state == FORWARD_ONLY for _, context in known):
            names = ", ".join(f"`{c.qualname}`" for c, _ in known[:3]) + (" ..." if len(known) > 3 else "")
            why = f": {known[0][1].reason}" if len(known) == 1 else ""
            return DifferentiationContext(FORWARD_ONLY, f"every caller is forward-only ({names}){why}")
        if not known:
            return self._uncalled(func, [caller for caller, _ in reached])
        for state in (UNKNOWN, PUBLIC):  # what the model cannot decide first; then what users may run
            for caller, context in known:
                if context.state == state:
                    return DifferentiationContext(state, f"`{caller.qualname}` calls it ({context.state}:"
                                                         f" {context.reason})", context.reach)
        return DifferentiationContext(UNKNOWN, "its callers' contexts disagree")

    def _uncalled(self, func: Symbol, idle_callers: list[Symbol]) -> DifferentiationContext:
        """A func that no kernel the project runs calls. Warp compiles a func only into the kernels
        that call it: in a package and out of users' reach, no gradient goes through it
        (*unreachable*). A public one users' kernels may call; a script's or a snippet's is code
        being written: both stay reported."""
        if idle_callers:
            names = ", ".join(f"`{c.qualname}`" for c in idle_callers[:3]) + (" ..." if len(idle_callers) > 3 else "")
            why = f"only code the project never runs calls it ({names})"
        else:
            why = "no kernel of the project calls it"
        if self._public(func):
            return DifferentiationContext(PUBLIC, f"{why}; it is public API, so users' kernels may")
        if self._in_package(func):
            return DifferentiationContext(UNREACHABLE, f"{why}, and it is not public API", runs=False)
        return DifferentiationContext(UNKNOWN, why, runs=False)

    def _through(self, caller: Symbol, definition: WarpDefinition) -> DifferentiationContext:
        """The context a caller passes on to what it calls: its own, but a func whose adjoint is
        never its body's (a `@wp.func_grad` replaces it, or its backward is off) differentiates
        nothing it calls."""
        if definition.kind in ("func_grad", "func_replay"):
            # Warp differentiates once: a custom adjoint runs in the backward pass (a replay in its
            # forward replay), and nothing differentiates what its body calls.
            return DifferentiationContext(FORWARD_ONLY, f"`{caller.qualname}` calls it, and a custom adjoint's"
                                                        f" body (`@wp.{definition.kind}`) runs in the backward pass,"
                                                        " which Warp does not differentiate")
        if definition.kind in ("func", "func_native"):
            facts = self.facts_of(caller)
            if facts is not None and not facts.differentiable:
                return DifferentiationContext(FORWARD_ONLY, f"`{caller.qualname}` calls it, and its adjoint is not its"
                                                            " body's (a custom `@wp.func_grad`, or backward disabled)")
        return self.context_of(definition)

    def _in_package(self, symbol: Symbol) -> bool:
        info = self.index.info_of(symbol)
        return info is not None and ("." in info.name or info.is_package)

    def _public(self, symbol: Symbol) -> bool:
        """Whether users of the package can reach a definition (a factory's product through its
        factory): a public name of a public module, or one a public module re-exports."""
        factory, made, _ = symbol.qualname.rpartition(".<locals>.")
        name = factory if made else symbol.qualname
        info = self.index.info_of(symbol)
        if info is not None and public_module(info) and not name.startswith("_") and "." not in name:
            return True
        return symbol in self._reexported

    @functools.cached_property
    def _reexported(self) -> frozenset[Symbol]:
        """The Warp definitions a public module imports at module level (its API re-exports)."""
        found: set[Symbol] = set()
        for info in self._warp_files():
            summary = self.index.summary(info) if public_module(info) else None
            for binding in summary.imports if summary is not None else ():
                if binding.scope == MODULE_SCOPE and binding.name not in (None, "*"):
                    symbol = self.index.resolve(info.path, MODULE_SCOPE, binding.local)
                    if symbol is not None and symbol.kind == "warp":
                        found.add(symbol)
        return frozenset(found)

    def kernels_calling(self, definition: WarpDefinition, limit: int = 16) -> list[tuple[WarpDefinition, str]]:
        """The kernels that run a func, each with the name its body calls on the way (the func's
        own, or that of the func through which it is reached), nearest first: a run of those
        kernels is where the func's code runs (``trace`` checks a helper's finding there)."""
        found: list[tuple[WarpDefinition, str]] = []
        seen = {definition.symbol}
        frontier = [definition]
        while frontier and len(found) < limit:
            callee = frontier.pop(0)
            name = callee.summary.name
            callers = self._callers(callee.symbol, name) + (self._made_callers(callee.symbol, name) or [])
            for symbol, caller in callers:
                if symbol in seen:
                    continue
                seen.add(symbol)
                if caller.kind == "kernel":
                    found.append((caller, name))
                elif caller.kind in ("func", "func_native"):
                    frontier.append(caller)
        return found[:limit]

    def _callers(self, func: Symbol, name: str) -> list[tuple[Symbol, WarpDefinition]]:
        """The kernels and funcs whose bodies call ``func``."""
        found = []
        for definition, code in self._calls_by_name.get(name, ()):
            if definition.symbol == func or any(d.symbol == definition.symbol for _, d in found):
                continue
            scope = _scope_of(definition.summary)
            if self.index.resolve(definition.symbol.path, scope, code) == func:
                found.append((definition.symbol, definition))
        return found


    def _host_calls_passing(self, name: str) -> list[tuple[ModuleInfo, FunctionSummary, CallOp]]:
        """The host calls with an argument that mentions ``name``."""
        return self._calls_passing.get(name, [])

    @functools.cached_property
    def _calls_passing(self) -> dict[str, list[tuple[ModuleInfo, FunctionSummary, CallOp]]]:
        found: dict[str, list[tuple[ModuleInfo, FunctionSummary, CallOp]]] = {}
        for calls in self._host_calls.values():
            for entry in calls:
                for name in set().union(*(argument.value.names for argument in entry[2].args)):
                    found.setdefault(name, []).append(entry)
        return found

    @functools.cached_property
    def _host_calls(self) -> dict[str, list[tuple[ModuleInfo, FunctionSummary, CallOp]]]:
        """A called name (its last part) -> the host calls of it: (file, function, call)."""
        calls: dict[str, list[tuple[ModuleInfo, FunctionSummary, CallOp]]] = {}
        for info in self._warp_files():
            summary = self.index.summary(info)
            for function in (summary.functions.values() if summary is not None else ()):
                for op in function.ops:
                    if op.__class__ is CallOp and op.dotted:
                        calls.setdefault(op.func.rsplit(".", 1)[-1], []).append((info, function, op))
        return calls

    @functools.cached_property
    def _calls_by_name(self) -> dict[str, list[tuple[WarpDefinition, str]]]:
        """A called name -> the Warp definitions whose bodies call it, with the code that calls it."""
        calls: dict[str, list[tuple[WarpDefinition, str]]] = {}
        for info in self._warp_files():
            for definition in self.definitions_in(info):
                for code in definition.summary.calls_in_body:
                    calls.setdefault(code.rsplit(".", 1)[-1], []).append((definition, code))
        return calls

    def launch_sites(self, kernel: Symbol) -> tuple[Location, ...]:
        """Where the project launches ``kernel`` (resolved without a caller)."""
        return self._launch_sites.get(kernel, ())

    @property
    def _launch_sites(self) -> dict[Symbol, tuple[Location, ...]]:
        return self._all_launch_sites[0]

    @property
    def _unnamed_launch_sites(self) -> tuple[Location, ...]:
        """Launches whose kernel the code does not name statically (a value passed in, picked from
        a container): each may run any kernel that is passed around and reaches it."""
        return self._all_launch_sites[1]

    @property
    def _adjoint_launches(self) -> frozenset[Location]:
        """Launches with `adjoint=True`: they run a kernel's adjoint by hand (a custom
        `torch.autograd.Function.backward`, a hand-written optimizer), which differentiates it."""
        return self._all_launch_sites[2]

    @functools.cached_property
    def _all_launch_sites(self) -> tuple[dict[Symbol, tuple[Location, ...]], tuple[Location, ...],
                                         frozenset[Location]]:
        sites: dict[Symbol, list[Location]] = {}
        unnamed: list[Location] = []
        adjoint: set[Location] = set()
        for info in self._warp_files():
            summary = self.index.summary(info)
            if summary is None:
                continue
            found = self._file_sites.get(info.path)
            if found is None or found.summary is not summary:
                with self._reading() as read:
                    found = _FileSites(summary, self._sites_in(info, summary), set())
                found.reads = read
                self._file_sites[info.path] = found
            for symbol, location, runs_adjoint in found.sites:
                if symbol is None:
                    unnamed.append(location)
                else:
                    sites.setdefault(symbol, []).append(location)
                if runs_adjoint:
                    adjoint.add(location)
        return {symbol: tuple(found) for symbol, found in sites.items()}, tuple(unnamed), frozenset(adjoint)

    def _named_at(self, location: Location) -> tuple[Symbol, ...]:
        """The kernels a launch the recording could not resolve names statically (`a if c else
        b`): its recorded launch may run each of them; () when it names none for sure."""
        return tuple(symbol for symbol, where, _ in self._launch_sites_of_file(location.path)
                     if where == location and symbol is not None)

    def _passed_to_wrapper(self, event: HostEvent) -> tuple[Symbol, ...]:
        """The kernels a launch wrapper's recorded launch may run, where the recording could not
        name it: every value the caller may pass as the wrapper's parameter the launch takes its
        kernel from (`_tape_gradients(kernel, ...)` in `for kernel in (a, b):`); () when the
        caller's argument cannot be named statically."""
        launch, location = event.launch, event.location
        head = launch.kernel_code.split(".", 1)[0] if launch is not None else ""
        caller = self._reachability.enclosing(location)
        info = self.index.by_path.get(location.path)
        call = call_at(caller, location) if caller is not None and info is not None else None
        callee = self.index.resolve(location.path, caller.qualname, call.func) \
            if call is not None and call.dotted and call.qualified not in LAUNCH_FUNCTIONS else None
        wrapper = self.index.function(callee) if callee is not None and callee.kind == "function" else None
        if wrapper is None or not _is_name(head):
            return ()
        params = [p.name for p in wrapper.params if p.kind not in ("vararg", "varkw")]
        if wrapper.owner is not None and params:
            params = params[1:]  # `self`: the receiver, not an argument
        if head not in params:
            return ()
        symbols = self.static_values(info, caller, call.argument(params.index(head), head), line=location.line)
        return tuple(s for s in symbols if s.kind == "warp") if symbols else ()

    def _launch_sites_of_file(self, path: str) -> list[tuple[Symbol | None, Location, bool]]:
        self._all_launch_sites  # noqa: B018 - fills the per-file sites
        found = self._file_sites.get(path)
        return found.sites if found is not None else []

    def _sites_in(self, info: ModuleInfo, summary: FileSummary) -> list[tuple[Symbol | None, Location, bool]]:
        found = []
        for function in summary.functions.values():
            if not function.words & _LAUNCH_WORDS:
                continue
            for op in function.ops:
                if op.__class__ is CallOp and op.qualified in LAUNCH_FUNCTIONS:
                    adjoint = op.argument(None, "adjoint")
                    runs_adjoint = adjoint is not None and adjoint.literal not in (False, None, 0)
                    location = Location.of(info.path, op.loc)
                    symbols = self.static_values(info, function, op.argument(0, "kernel"), line=op.loc.line)
                    for symbol in symbols if symbols is not None else (None,):
                        if symbol is None or symbol.kind == "warp":
                            found.append((symbol, location, runs_adjoint))
        return found

    def static_values(self, info: ModuleInfo, function: FunctionSummary, value, depth: int = 0,
                      line: int | None = None) -> frozenset[Symbol] | None:
        """Every definition a value may name without running anything: a name; a factory call's
        product; the branches of a conditional expression (`a if compact else b`); every value
        assigned to a local (`if edge: k = a` / `else: k = b`) or, for `self.attr`, by the class's
        methods; a module value a factory made; the elements of a display a `for` loop binds it
        from, where the use is on ``line`` (None: anywhere) at or after the loop. None when one of
        them cannot be named."""
        if value is None or depth > 4:
            return None
        if value.call is not None:
            callee = self._callee(info.path, function, value)
            return _one(self.index.product(callee) if callee is not None else None)
        if not value.plain:
            leaves = _conditional_leaves(value.code)
            codes = [_dotted(leaf) for leaf in leaves] if leaves is not None else [None]
            return None if None in codes else _union(
                self.static_values(info, function, Value(code, plain=True), depth + 1, line) for code in codes)
        if "[" in value.code:
            return None
        head, _, attribute = value.code.partition(".")
        if attribute and "." not in attribute and function.owner and function.params \
                and head == function.params[0].name:
            # `self.first`: every value the class's methods put there.
            owner = Symbol("class", info.name, function.owner, info.path)
            return _union(self.static_values(self.index.info_of(method), method_summary, assigned, depth + 1)
                          for method, method_summary, assigned in self.index.attribute_value(owner, attribute)) or None
        if head in function.local_names and head not in function.local_functions and \
                not self.index.imports_name(info, function.qualname, head):
            if attribute:
                return None
            assigned = _assigned(function.ops, head)
            looped = _loop_elements(function, head, line)
            if looped is None:
                if not assigned:
                    return None
                # A loop also binds it from what cannot be named; the assignments are read as the
                # values a launch sees, as the assignments alone always were (flow is not followed).
                looped = []
            return _union(self.static_values(info, function, value, depth + 1)
                          for value in assigned + looped) or None
        resolved = self.index.resolve(info.path, function.qualname, value.code)
        if resolved is not None and resolved.kind == "value":
            # A module's `simulate = make_simulate(config)`: what the factory makes.
            holder = self.index.info_of(resolved)
            summary = self.index.summary(holder) if holder is not None else None
            assigned = summary.values.get(resolved.qualname) if summary is not None else None
            if assigned is not None and assigned.callee is not None and HEAD.fullmatch(assigned.callee):
                factory = self.index.resolve(holder.path, MODULE_SCOPE, assigned.callee)
                made = self.index.product(factory) if factory is not None else None
                if made is not None:
                    return frozenset({made})
        return _one(resolved)

    def _escapes(self, kernel: Symbol) -> bool:
        """Whether the kernel is named somewhere other than a launch's kernel argument (stored in a
        list, passed on): a launch the model cannot resolve might then run it. A kernel a factory
        makes is named by its factory, which must do nothing with it but return it, and then by
        whoever keeps what the factory returns: every file that names the factory must launch it."""
        launching = {site.path for site in self.launch_sites(kernel)}
        name = kernel.qualname.rsplit(".", 1)[-1]
        factory, made, _ = kernel.qualname.rpartition(".<locals>.")
        if not made:
            return any(path not in launching for path, scope in self._naming.get(name, ())
                       if self._may_mean(path, scope, name, {kernel}))
        maker_symbol = Symbol("function", kernel.module, factory, kernel.path)
        maker = self.index.function(maker_symbol)
        if maker is None or not _only_returns(maker, name):
            return True
        if not any(op.__class__ is ReturnOp and op.value is not None and name in op.value.names for op in maker.ops):
            return False  # made, launched and dropped where it is made: a test's local kernel
        # Only what the factory returns leaves it: whoever names the factory holds the kernel.
        own = (kernel.path, factory)  # its words hold its own name and the kernel's
        made_by = factory.rsplit(".", 1)[-1]
        return any(path not in launching and (path, scope) != own
                   and self._may_mean(path, scope, made_by, {maker_symbol})
                   for path, scope in self._naming.get(made_by, ()))

    @functools.cached_property
    def _naming(self) -> dict[str, set[tuple[str, str]]]:
        """A kernel's name, or the name of a factory that makes one -> where host code names it:
        (file, function), the module's values and calls as the module scope."""
        names = set()
        for info in self._warp_files():
            for definition in self.definitions_in(info):
                if definition.kind == "kernel":
                    names.add(definition.symbol.qualname.rsplit(".", 1)[-1])
                    factory, made, _ = definition.symbol.qualname.rpartition(".<locals>.")
                    if made:
                        names.add(factory.rsplit(".", 1)[-1])
        naming: dict[str, set[tuple[str, str]]] = {}
        for info in self._warp_files():
            summary = self.index.summary(info)
            if summary is None:
                continue
            for function in summary.functions.values():
                if not function.is_module:  # the module scope's words hold every definition's name
                    for name in function.words & names:
                        naming.setdefault(name, set()).add((info.path, function.qualname))
                else:
                    for op in function.ops:
                        if op.__class__ is CallOp:
                            for argument in op.args:
                                for name in argument.value.names & names:
                                    naming.setdefault(name, set()).add((info.path, MODULE_SCOPE))
                        elif op.__class__ is AssignOp:  # `registry.KERNELS["k"] = k`, not `__all__`'s strings
                            for _, value in op.pairs:
                                held = value.names if value is not None and value.literal is NOT_LITERAL else set()
                                for name in held & names:
                                    naming.setdefault(name, set()).add((info.path, MODULE_SCOPE))
            for value in summary.values.values():
                held = value.value.names if value.literal is NOT_LITERAL else set()  # `__all__`'s strings hold none
                for name in ({value.name} | held) & names:
                    naming.setdefault(name, set()).add((info.path, MODULE_SCOPE))
        return naming

    def definition_at(self, path: str, line: int) -> WarpDefinition | None:
        """The innermost kernel or func whose lines hold ``line`` in the file ``path``."""
        info = self.index.by_path.get(path)
        if info is None:
            return None
        best = None
        for definition in self.definitions_in(info):
            summary = definition.summary
            if summary.first_line <= line <= summary.last_line and (
                    best is None or summary.first_line >= best.summary.first_line):
                best = definition
        return best


def _file_entries(info: ModuleInfo, summary: FileSummary) -> _FileEntries:
    functions: dict[Symbol, tuple[ModuleInfo, FunctionSummary]] = {}
    direct: list[Symbol] = []
    local: list[Symbol] = []
    calls: list[tuple[str, Symbol, CallOp]] = []
    for function in summary.functions.values():
        symbol = Symbol("function", info.name, function.qualname, info.path)
        functions[symbol] = (info, function)
        if _may_reach_a_tape(function.words):
            relevance = _relevance(function.ops)
            if relevance == "tape":
                direct.append(symbol)
            elif relevance == "local":
                local.append(symbol)
        for op in function.ops:
            if op.__class__ is CallOp and op.qualified is None and op.dotted:
                calls.append((op.method or op.func.rsplit(".", 1)[-1], symbol, op))
    return _FileEntries(summary, functions, direct, local, calls)


def _records_anything(scope: HostScope) -> bool:
    """Whether a recording holds something a host rule reads: a tape, a gradient check, a
    `requires_grad` or `retain_grad` setting."""
    return any(e.kind == "region" or (e.kind == "method" and e.name == "backward" and scope.is_tape(e)) or
               (e.kind == "call" and e.name in AUTOGRAD_CHECKS) or
               (e.kind == "assign" and e.name.endswith(".requires_grad")) or
               (e.allocation is not None and e.allocation.retain_grad) for e in scope.events)


def _relevance(ops: list) -> str | None:
    """What a function's own operations hold of what ``_records_anything`` looks for: "tape" (a
    recording region, a tape's `backward()`: what its callers do around it matters too), "local"
    (a `requires_grad` setting, `retain_grad`, a gradient check: read where it is written), or None."""
    tapes: set[str] = set()
    found = None
    for op in ops:
        kind = op.__class__
        if kind is AssignOp:
            if any(code.endswith(".requires_grad") for code, _ in op.pairs):
                found = "local"
        elif kind is CallOp:
            if op.qualified in AUTOGRAD_CHECKS or (op.argument(None, "retain_grad") is not None and op.qualified):
                found = "local"
            if op.qualified in TAPE_CLASSES and op.target:
                tapes.add(op.target)
            if op.method == "backward" and op.receiver is not None and (
                    looks_like_tape(op.receiver) or op.receiver in tapes):
                return "tape"
        elif kind is WithOp:
            for item in op.items:
                if item.qualified in TAPE_CLASSES or (item.value.plain and (
                        looks_like_tape(item.value.code) or item.value.code in tapes)):
                    return "tape"
    return found


def _conditional_leaves(code: str) -> list[ast.expr] | None:
    """The values a conditional expression may take (`a if c else (make(n) if d else None)` -> a,
    make(n), None), the expression itself when it is not one; None for code that does not parse."""
    try:
        node = ast.parse(f"({code})", mode="eval").body  # parenthesized: it may span lines
    except SyntaxError:
        return None
    pending, leaves = [node], []
    while pending:
        node = pending.pop()
        if isinstance(node, ast.IfExp):
            pending += [node.orelse, node.body]
        else:
            leaves.append(node)
    return leaves


def _dotted(node: ast.expr) -> str | None:
    """A name or dotted name's code (`kernels.step`), else None."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        code = ast.unparse(node)
        return code if HEAD.fullmatch(code) else None
    return None


def _one(symbol: Symbol | None) -> frozenset[Symbol] | None:
    return frozenset({symbol}) if symbol is not None else None


def _union(parts: Iterable[frozenset[Symbol] | None]) -> frozenset[Symbol] | None:
    """The union of every part; None as soon as one is None (something that cannot be named)."""
    found: set[Symbol] = set()
    for part in parts:
        if part is None:
            return None
        found |= part
    return frozenset(found)


def _loop_elements(function: FunctionSummary, name: str, line: int | None = None) -> list | None:
    """The values a `for` loop of ``function`` binds to the local ``name``, read from the display it
    iterates (`for kernel in (a, b)`, `for shape, kernel in cases` with `cases` a local tuple of
    tuples, the target's names in order): [] when no loop binds it (before ``line``), None where a
    loop binds it from something else."""
    found: list = []
    for op in function.ops:
        if op.__class__ is not LoopOp or name not in op.targets:
            continue
        if line is not None and line < op.loc.line and not any(
                outer.__class__ is LoopOp and outer.loc.line <= line and op.loc.end_line <= outer.loc.end_line
                for outer in function.ops):
            continue  # a use before the loop, and no loop around both: it sees another binding
        iterable, targets = op.iterable, op.targets
        if iterable is not None and iterable.call is not None and iterable.code.startswith("enumerate("):
            # `for i, (a, kernel) in enumerate(cases)`: the counter, then the elements' names
            call = next((c for c in function.ops if c.__class__ is CallOp and c.index == iterable.call), None)
            iterable = call.argument(0, "iterable") if call is not None else None
            if name == targets[0]:
                continue
            targets = targets[1:]
        if iterable is not None and iterable.plain and _is_name(iterable.code):
            displays = _assigned(function.ops, iterable.code)
            iterable = displays[0] if len(displays) == 1 else None
        if iterable is None or iterable.elements is None:
            return None
        position = targets.index(name)
        for element in iterable.elements:
            if len(targets) == 1:
                found.append(element)
            elif element.elements is not None and len(element.elements) == len(targets):
                found.append(element.elements[position])
            else:
                return None
    return found


def _assigned(ops: list, name: str) -> list:
    """The values a function assigns to the local ``name``."""
    return [v for op in ops if op.__class__ is AssignOp and op.augmented is None
            for target, v in op.pairs if target == name and v is not None]


_TAPE_WORDS = frozenset({"Tape", "backward", "gradcheck", "gradcheck_tape", "jacobian", "jacobian_fd",
                         "requires_grad", "retain_grad"})
_LAUNCH_WORDS = frozenset({"launch", "launch_tiled"})


def _may_reach_a_tape(words: frozenset[str]) -> bool:
    # One string: no word holds a space, so "tape" is found only inside a word.
    return bool(words & _TAPE_WORDS) or "tape" in " ".join(words).lower()


def _class_name(function: FunctionSummary) -> str | None:
    return function.owner.rsplit(".", 1)[-1] if function.owner else None


def _only_returns(factory: FunctionSummary, name: str) -> bool:
    """Whether ``factory``'s own statements do nothing with ``name`` but return it (an overload of
    it included) or launch it. Reading its attributes (`k.module.hash_module()`, `k.adj`) hands
    nothing on that a launch could run."""
    for op in factory.ops:
        kind = op.__class__
        if kind is ReturnOp:
            if op.value is not None and _handed_on(op.value, name) and op.value.code != name and op.value.call is None:
                return False
        elif kind is CallOp:
            mentioned = any(_handed_on(argument.value, name) for argument in op.args)
            if mentioned and not (op.args[0].value.code == name and (
                    op.qualified in LAUNCH_FUNCTIONS or (op.qualified == "warp.overload" and op.role == "return"))):
                return False
        elif kind is AssignOp:
            if any(value is not None and _handed_on(value, name) for _, value in op.pairs):
                return False
        elif kind is WithOp and any(_handed_on(item.value, name) for item in op.items):
            return False
    return True


def _handed_on(value: Value, name: str) -> bool:
    """Whether ``value`` uses ``name`` itself, not only an attribute of it."""
    return name in value.names and re.search(rf"(?<![\w.]){re.escape(name)}\b(?!\s*\.)", value.code) is not None




def _opaque_reason(site: Location, call: OpaqueCall) -> str:
    return (f"its launch at {_where(site)} may run under the tape through `{call.code}(...)` at"
            f" {_where(call.location)}, a call the recording could not follow")
