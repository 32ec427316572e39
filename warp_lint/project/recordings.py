"""Recordings: what each entry point of a program does to arrays and tapes, calls followed.

An entry point's operations (from its file's summary) are run symbolically, in program order.
A call into the project (a module function, an imported function, ``self.m(...)``, a method of an
object built from a project class, a constructor, which runs ``__init__``) is followed: the
callee's operations run in a new frame whose parameters are bound to the caller's arguments (the
same arrays: the same keys), whose own locals are new arrays per call, and whose events sit in
the caller's tape region, loops and ``if`` arms, carrying the call path (``chain``). Array keys
follow attributes through calls (``self.states[t].particle_q`` in a method is
``example.states[t].particle_q`` of the object it was called on), so a tape opened in one method,
recorded on in another and run backward in a third is one recording when a caller runs them in
turn. Depth and size are bounded; past the bounds a call is not followed.
"""

from __future__ import annotations

import builtins
import dataclasses
import re
from typing import Callable

from warp_lint.host import (
    AUTOGRAD_CHECKS,
    FRESH_ALLOCATIONS,
    HEAD,
    HOST_COPY_METHODS,
    INHERITING_ALLOCATIONS,
    LAUNCH_FUNCTIONS,
    LAUNCH_PARAMETERS,
    TAPE_CLASSES,
    UTILITY_MODULES,
    UTILITY_OPS,
    WRITING_METHODS,
    Allocation,
    ArrayRef,
    CallSite,
    HostEvent,
    HostScope,
    Launch,
    Location,
    LoopSpan,
    TapeRegion,
    looks_like_tape,
)
from warp_lint.kernel_facts import KernelFacts
from warp_lint.project.index import ModuleInfo, ProjectIndex, Symbol
from warp_lint.project.summary import (
    MODULE_SCOPE,
    NOT_LITERAL,
    ArmOp,
    AssignOp,
    CallOp,
    EndIfOp,
    EndLoopOp,
    EndWithOp,
    FunctionSummary,
    GradOp,
    LoopOp,
    ReturnOp,
    Value,
    WithOp,
)

BUILTIN_NAMES = frozenset(dir(builtins))
MAX_CALL_DEPTH = 8
GRAPH_CAPTURES = frozenset({"warp.ScopedCapture", "warp.utils.ScopedCapture"})
MAX_EVENTS = 10_000
# A name in an element's index (not an attribute, not already a key).
PICKED = re.compile(r"\[[^\]]*[A-Za-z_]")  # a subscript whose index names something
SUBSCRIPT_NAME = re.compile(r"(?<![\w.@])[A-Za-z_]\w*(?![\w@])")


@dataclasses.dataclass(frozen=True)
class Result:
    """What an expression evaluated to, as far as the recording knows."""

    key: str | None  # the array (or object) it names
    symbol: Symbol | None = None  # the definition it is (a kernel, a function, a class, a module)
    instance: Symbol | None = None  # the class of the object it is
    elements: tuple[Result, ...] | None = None  # a returned tuple's elements (`return q, tape`)


PROPERTY_DECORATORS = ("property", "functools.cached_property")
PROPERTY_EXPANSIONS = 16  # properties walked through in one name (`a.b` returning `self.c`, ...)
UNKNOWN = Result(None)  # shared: most calls evaluate to nothing the recording knows
NO_KEYS: frozenset[str] = frozenset()


@dataclasses.dataclass
class Frame:
    info: ModuleInfo
    function: FunctionSummary
    chain: tuple[CallSite, ...]
    names: dict[str, str] = dataclasses.field(default_factory=dict)  # local name -> key
    host_values: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    # name -> the list display bound to it, its elements' (code, key) resolved where it was written
    lists: dict[str, list[tuple[str, str]]] = dataclasses.field(default_factory=dict)
    literals: dict[str, object] = dataclasses.field(default_factory=dict)  # parameter -> the literal passed
    # parameters whose literal is only their default, in a function recorded on its own: its
    # callers may pass anything, so no arm is pruned on them
    assumed: set[str] = dataclasses.field(default_factory=set)
    calls: dict[int, CallOp] = dataclasses.field(default_factory=dict)
    results: dict[int, Result] = dataclasses.field(default_factory=dict)
    returned: Result | None = None
    host_copies: bool = False  # whether a `.numpy()`/`.list()` ran in this frame yet
    open_regions: list[list[TapeRegion]] = dataclasses.field(default_factory=list)
    open_captures: list[int] = dataclasses.field(default_factory=list)  # per open `with`: its graph captures
    ids: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)  # an `if`/loop of this frame -> its id

    @property
    def path(self) -> str:
        return self.info.path


@dataclasses.dataclass(frozen=True)
class OpaqueCall:
    """A call made while a tape records that the recording could not follow."""

    name: str  # the name of the project functions it may run (a method's, or `__call__`)
    location: Location
    code: str  # the callee's code, for messages
    attribute: str | None = None  # `a.b.m(...)`: the attribute holding the object (`b`)


@dataclasses.dataclass
class RecordedLaunch:
    """A launch seen in a recording, for the differentiation contexts."""

    kernel: Symbol | None
    event: HostEvent
    scope: HostScope


class Recorder:
    """Runs one entry point; ``record()`` returns its recording."""

    def __init__(self, index: ProjectIndex, facts_of: Callable[[Symbol], KernelFacts | None],
                 relevant: set[Symbol] | frozenset[Symbol] | None = frozenset()):
        self.index = index
        self.facts_of = facts_of
        # Before the first tape region opens, only calls that lead to a tape are followed (model
        # building, file loading and the like would swamp the recording); from then on, every call.
        # None: follow every call from the start.
        self.relevant = relevant
        self.order = 0
        self.events: list[HostEvent] = []
        self.regions: list[TapeRegion] = []
        self.region_stack: list[TapeRegion] = []
        # CUDA graph captures open (`wp.capture_begin()` not yet ended, `with wp.ScopedCapture():`):
        # what is called then is put in the graph, and runs when the graph is launched.
        self.capturing = 0
        self.loop_stack: list[int] = []
        self.loop_frames: dict[int, int] = {}  # loop id -> id() of the frame that opened it
        self.loop_spans: dict[int, LoopSpan] = {}
        self.branch_stack: list[tuple[int, int]] = []
        # Arms followed under a tape that the call's own literal skips: (if, arm) -> (parameter,
        # literal, function)
        self.skipped_arms: dict[tuple[int, int], tuple[str, object, str]] = {}
        self.launches: list[Launch] = []
        self.launch_symbols: list[tuple[Symbol | None, HostEvent]] = []
        self.checked: list[tuple[Symbol | None, HostEvent]] = []  # gradcheck / jacobian targets
        # Calls made while a tape records that were not followed and may run project code: what
        # they may run is recorded too, unseen (see project.reach).
        self.opaque: list[OpaqueCall] = []
        self.paths: dict[str, str] = {}  # "key.attribute" -> the key it is bound to
        self.symbols: dict[str, Symbol] = {}  # key -> the definition it holds
        self.types: dict[str, Symbol] = {}  # key -> the class of the object it holds
        self.tape_keys: set[str] = set()
        self.allocated: set[str] = set()  # keys of arrays a Warp allocation made
        self.external: set[str] = set()  # keys of objects a library's call made (`wp.get_device()`)
        self.active: list[Symbol] = []  # the functions being run, for recursion
        self.followed: set[Symbol] = set()  # every function whose operations ran in this recording
        self.next_id = 0

    # -- entry points ---------------------------------------------------------------------
    def record(self, info: ModuleInfo, function: FunctionSummary, owner: Symbol | None) -> HostScope:
        symbol = Symbol("function", info.name, function.qualname, info.path)
        frame = Frame(info, function, ())
        params = tuple(p.name for p in function.params)
        for param in function.params:
            frame.names[param.name] = param.name
            self._annotate(info, function, param.name, param.name, param.annotation)
            if param.default is not NOT_LITERAL:  # `def run(n=16)` run on its own: n is 16
                frame.literals[param.name] = param.default
                frame.assumed.add(param.name)
        if owner is not None and function.params:
            receiver = function.params[0].name
            self.types[receiver] = owner
            initializer = self.index.method(owner, "__init__")
            if initializer is not None and initializer != symbol:
                # A method on its own: the object it runs on was built by `__init__` first.
                self._follow(frame, None, initializer, Result(receiver, None, owner), ())
        self.followed.add(symbol)
        self.active.append(symbol)
        self._run(frame)
        self.active.pop()
        location = Location.of(info.path, function.loc)
        return HostScope(function.qualname, location, self.events, self.regions, self.launches, self.loop_spans,
                         params)

    # -- keys -----------------------------------------------------------------------------
    def key(self, frame: Frame, code: str) -> str:
        """The key of the array ``code`` names now: aliases followed, rebindings distinguished."""
        return self._resolve(frame, code).key or code

    def _resolve(self, frame: Frame, code: str) -> Result:
        match = HEAD.match(code)
        if match is None:
            return Result(code)
        dotted = match.group(0)
        rest = code[len(dotted):]
        head, *attributes = dotted.split(".")
        if head in frame.names:
            key = frame.names[head]
            symbol, instance = self.symbols.get(key), self.types.get(key)
        else:
            key = head
            symbol, instance = self.symbols.get(key), None
            if symbol is None and (head not in frame.function.local_names or head in frame.function.local_functions):
                symbol = self.index.resolve(frame.path, frame.function.qualname, head)
        attributes.reverse()  # a stack: a property's own attributes are walked in its place
        expansions = 0  # properties walked: a bound, for properties that return one another
        while attributes:
            attribute = attributes.pop()
            owner = key
            path = f"{key}.{attribute}"
            key = self.paths.get(path, path)
            if key in self.symbols or key in self.types:
                symbol, instance = self.symbols.get(key), self.types.get(key)
            elif instance is not None:
                member = self.index.class_member(instance, attribute)
                if member is not None and self._picks_by_counter(member):
                    # `drone.state` returning `self.states[self.sim_tick]`: each access may be another
                    # array, made where it is read (so a loop that reads it reads a new one each pass)
                    key, symbol, instance = f"{path}@{self.order}", None, None
                    continue
                chain = self._property_chain(member) if member is not None else None
                if chain is not None and expansions < PROPERTY_EXPANSIONS:
                    # `detector.min_dist` returning `self.collision_info.min_dist`: the same array
                    expansions += 1
                    key = owner
                    attributes.extend(reversed(chain))
                    continue
                symbol, instance = (member, None) if member is not None else (None, self.index.attribute_class(instance,
                                                                                                         attribute))
            elif symbol is not None:
                symbol = self.index.member(symbol, attribute)
            else:
                symbol = instance = None
        if rest:
            symbol = instance = None
            # `states[t + 1]`, `coms[frame]`: the index names by their keys, so a callee's `frame`
            # is known as the caller's loop counter it was passed
            rest = SUBSCRIPT_NAME.sub(lambda m: frame.names.get(m.group(0), m.group(0)), rest)
        return Result(key + rest, symbol, instance)

    def _property(self, member: Symbol) -> FunctionSummary | None:
        """The function of a `@property` (or `functools.cached_property`) member; None for another member."""
        function = self.index.function(member) if member.kind == "function" else None
        if function is None or not any(d.code in PROPERTY_DECORATORS for d in function.decorators):
            return None
        return function

    def _property_chain(self, member: Symbol) -> list[str] | None:
        """The attributes of its object a `@property` returns (`return self.info.min_dist`:
        ["info", "min_dist"]), where its one return is such a chain; None otherwise."""
        function = self._property(member)
        if function is None or not function.params:
            return None
        returns = [op.value for op in function.ops if isinstance(op, ReturnOp)]
        receiver = function.params[0].name
        if len(returns) != 1 or returns[0] is None or not returns[0].plain or not HEAD.fullmatch(returns[0].code):
            return None
        head, *chain = returns[0].code.split(".")
        return chain if head == receiver and chain else None

    def _picks_by_counter(self, member: Symbol) -> bool:
        """A `@property` whose value is an element picked by something other than a literal
        (`return self.states[self.sim_tick if self.requires_grad else 0]`)."""
        function = self._property(member)
        if function is None:
            return False
        return any(PICKED.search(op.value.code) for op in function.ops if isinstance(op, ReturnOp) and op.value)

    def _annotate(self, info: ModuleInfo, function: FunctionSummary, key: str, name: str, annotation: str) -> None:
        if not annotation or key in self.types:
            return
        code = annotation.strip("'\"")
        if not HEAD.fullmatch(code):
            return
        found = self.index.resolve(info.path, _definition_scope(function), code)
        if found is not None and found.kind == "class":
            self.types[key] = found

    def bind(self, frame: Frame, code: str, alias: str | None) -> str:
        """Bind ``code`` to the array ``alias`` names (a key) or to a fresh value; return its key."""
        if HEAD.fullmatch(code) is None:
            return self.key(frame, code)  # x[i] = ..., f(x).y = ...: no new binding
        new = alias if alias is not None else f"{code}@{self.order}"
        head, _, attribute = code.rpartition(".")
        if not head:
            frame.names[code] = new
            frame.literals.pop(code, None)  # rebound: no longer the literal passed
        else:
            self.paths[f"{self.key(frame, head)}.{attribute}"] = new
        return new

    def evaluate(self, frame: Frame, value: Value | None) -> Result:
        if value is None:
            return UNKNOWN
        if value.call is not None:
            result = frame.results.get(value.call, UNKNOWN)
            if value.element is None:
                return result
            elements = result.elements  # `q, tape = record(x)`: what `record` returned in that place
            return elements[value.element] if elements is not None and value.element < len(elements) else UNKNOWN
        if value.plain:
            return self._resolve(frame, value.code)
        return UNKNOWN

    def pulls_of(self, frame: Frame, value: Value | None) -> frozenset[str]:
        """Keys of the arrays whose host copies flow into ``value``."""
        if value is None or not (frame.host_copies or frame.host_values):
            return NO_KEYS  # nothing in this frame left the device
        found = {self.key(frame, code) for code in value.host_copies}
        for name in value.names:
            found |= frame.host_values.get(name, frozenset())
        return frozenset(found)

    # -- events ---------------------------------------------------------------------------
    def event(self, frame: Frame, kind: str, loc, stmt, at: Location | None = None, **fields) -> HostEvent:
        """An event of ``frame``'s code; ``at``: report it at this call of the frame instead."""
        self.order += 1
        location = at or Location.of(frame.path, loc)
        statement = at or Location.of(frame.path, stmt)
        chain = frame.chain[:-1] if at is not None else frame.chain
        event = HostEvent(kind, location, statement, self.order,
                          self.region_stack[-1] if self.region_stack else None, tuple(self.loop_stack),
                          branch=tuple(self.branch_stack), chain=chain, captured=self.capturing > 0,
                          skipped_by=next((self.skipped_arms[arm] for arm in self.branch_stack
                                           if arm in self.skipped_arms), None), **fields)
        self.events.append(event)
        return event

    def _uid(self, frame: Frame, kind: str, number: int) -> int:
        key = (kind, number)
        if key not in frame.ids:
            self.next_id += 1
            frame.ids[key] = self.next_id
        return frame.ids[key]

    # -- operations -----------------------------------------------------------------------
    def _run(self, frame: Frame) -> None:
        skipping = None  # the `if` whose arm is not followed (``_not_followed``)
        for op in frame.function.ops:
            kind = op.__class__
            if skipping is not None:
                if (kind is ArmOp or kind is EndIfOp) and op.id == skipping:
                    skipping = None
                else:
                    continue
            if kind is ArmOp and self._not_followed(frame, op):
                skipping = op.id
                if op.arm == 0:
                    self.branch_stack.append((self._uid(frame, "if", op.id), 0))
                continue
            if kind is CallOp:
                frame.calls[op.index] = op
                frame.results[op.index] = self.visit_call(frame, op)
            elif kind is AssignOp:
                self.visit_assign(frame, op)
            elif kind is GradOp:
                self.event(frame, "grad", op.loc, op.stmt, receiver=op.code, key=self.key(frame, op.code))
            elif kind is WithOp:
                self.visit_with(frame, op)
            elif kind is EndWithOp:
                self.capturing -= frame.open_captures.pop() if frame.open_captures else 0
                for region in reversed(frame.open_regions.pop() if frame.open_regions else []):
                    region.end_order = self.order
                    self.region_stack.pop()
            elif kind is LoopOp:
                for name in op.targets:
                    self.bind(frame, name, None)
                    frame.host_values.pop(name, None)
                loop_id = self._uid(frame, "loop", op.id)
                # An order of its own for the loop's start and end, so that a name bound in the body
                # before its first event (`a = make()`), or after the loop before the next one, is
                # known to be bound inside it, or after it (``HostScope.created_in``).
                self.order += 1
                self.loop_spans[loop_id] = LoopSpan(loop_id, Location.of(frame.path, op.loc), self.order, 0,
                                                    frozenset(op.targets), op.single_pass,
                                                    frozenset(frame.names[name] for name in op.targets), op.truths)
                self.loop_stack.append(loop_id)
                self.loop_frames[loop_id] = id(frame)
            elif kind is EndLoopOp:
                loop_id = self.loop_stack.pop()
                self.loop_spans[loop_id].end_order = self.order
                self.order += 1
            elif kind is ArmOp:
                branch_id = self._uid(frame, "if", op.id)
                if op.arm == 0:
                    self.branch_stack.append((branch_id, 0))
                else:
                    self.branch_stack[-1] = (branch_id, op.arm)
                if self.region_stack:
                    failing = self._failing_literal(frame, op)
                    if failing is not None:
                        self.skipped_arms[(branch_id, op.arm)] = (*failing, frame.function.qualname)
                if op.on is not None:
                    self._count_arm_passes(frame, branch_id, op)
            elif kind is EndIfOp:
                self.branch_stack.pop()
            elif kind is ReturnOp:
                if frame.returned is None and op.value is not None:
                    frame.returned = self.evaluate(frame, op.value) if op.value.elements is None else Result(
                        None, elements=tuple(self.evaluate(frame, element) for element in op.value.elements))

    def _not_followed(self, frame: Frame, op: ArmOp) -> bool:
        """Whether the arm is not followed: it never runs (`if False:`, or, outside tapes, a test of
        a parameter the call's literal fails), or, while a tape records, runs only without
        gradients (`else` of `if x.requires_grad:`, or under conditions the project refuses to
        meet with gradients)."""
        if op.dead:
            return True
        if not self.region_stack:
            return self._failing_literal(frame, op) is not None
        return op.gradients is False or bool(op.conditions) and any(
            refused <= set(op.conditions) for refused in self.index.gradient_free_conditions())

    @staticmethod
    def _failing_literal(frame: Frame, op: ArmOp) -> tuple[str, object] | None:
        """The parameter and the literal this call passes it where the arm needs of it (`if on_tape:`,
        `if contacts is not None:`) what the literal does not give: the arm never runs here
        (`_loss(q, on_tape=False)`). Outside tapes such an arm is not followed; under a tape it is
        (what a recorded call can reach with other arguments is what users of the same function
        differentiate: `solver.step(..., contacts=None)` in a test still reaches the contact
        kernels `step` launches for callers that pass contacts), and its events say so."""
        for name, kind in op.requires:
            literal = frame.literals.get(name, NOT_LITERAL) if name not in frame.assumed else NOT_LITERAL
            if literal is NOT_LITERAL:
                continue
            holds = {"truthy": bool(literal), "falsy": not literal, "none": literal is None,
                     "not-none": literal is not None}[kind]
            if not holds:
                return name, literal
        return None

    def _count_arm_passes(self, frame: Frame, branch_id: int, op: ArmOp) -> None:
        """An arm that tests the target of an enclosing loop over literal constants runs in as many
        passes as the constants have that truth (`for g in (False, True): if g: ...` runs once)."""
        name, truth = op.on
        for loop_id in reversed(self.loop_stack):
            span = self.loop_spans[loop_id]
            if self.loop_frames.get(loop_id) == id(frame) and name in span.targets:
                if span.truths is not None:
                    span.arm_passes[(branch_id, op.arm)] = sum(1 for value in span.truths if value == truth)
                return

    def visit_assign(self, frame: Frame, op: AssignOp) -> None:
        if op.augmented:
            pulls = self.pulls_of(frame, op.value)
            for code, value in op.pairs:
                self.event(frame, "assign", op.stmt, op.stmt, name=code, value=value, key=self.key(frame, code),
                           pulls=pulls, augmented=op.augmented)
            return
        pulls = self.pulls_of(frame, op.value)
        # Every value is read before any target is bound: a, b = b, a
        evaluated = [(code, value, self.evaluate(frame, value)) for code, value in op.pairs]
        counters = [self._counter_spans(frame, value) for _, value, _ in evaluated]
        for (code, value, result), spans in zip(evaluated, counters):
            element_pulls = self.pulls_of(frame, value) if len(op.pairs) > 1 and value is not None else pulls
            self.bind_event(frame, op, code, value, result, element_pulls)
            for span in spans:  # `t = step * substeps + i`: `states[t]` is picked anew each pass too
                span.targets |= {code}
                span.target_keys |= {frame.names.get(code, code)}

    def _counter_spans(self, frame: Frame, value: Value | None) -> list[LoopSpan]:
        """The open loops whose counter ``value`` is computed from (a call's result is not)."""
        if value is None or value.call is not None or not self.loop_stack:
            return []
        keys = {frame.names.get(name, name) for name in value.names}
        return [span for span in map(self.loop_spans.get, self.loop_stack) if span.target_keys & keys]

    def bind_event(self, frame: Frame, op: AssignOp, code: str, value: Value | None, result: Result,
                   pulls: frozenset[str]) -> None:
        call = frame.calls.get(value.call) if value is not None and value.call is not None else None
        if call is not None and call.qualified in TAPE_CLASSES:
            key = self.bind(frame, code, None)
            self.tape_keys.add(key)
            self.event(frame, "tape", op.stmt, op.stmt, name=code, value=value, key=key)
            return
        allocation = self.allocation(frame, call) if call is not None and call.qualified else None
        head, _, _ = code.rpartition(".")
        owner = self.key(frame, head) if head and HEAD.fullmatch(code) else ""
        alias = result.key if (value is not None and (value.plain or value.call is not None)) else None
        key = self.bind(frame, code, alias)
        if allocation is not None:
            self.allocated.add(key)
        elif self._library_value(frame, value, call):
            self.external.add(key)
        else:
            self.external.discard(key)
        if result.symbol is not None:
            self.symbols[key] = result.symbol
        if result.instance is not None:
            self.types[key] = result.instance
        if not head and HEAD.fullmatch(code):
            device = allocation is not None or (call is not None and (call.qualified or "").startswith("warp."))
            if pulls and not device:  # a host value; an array built from host data lives on the device
                frame.host_values[code] = pulls
            else:
                frame.host_values.pop(code, None)
            listed = self.spread_elements(frame, value) if value is not None and value.elements is not None else None
            if listed is not None:
                frame.lists[code] = listed
            else:
                frame.lists.pop(code, None)
        self.event(frame, "assign", op.stmt, op.stmt, name=code, value=value, key=key, pulls=pulls,
                   allocation=allocation, owner=owner)

    def allocation(self, frame: Frame, call: CallOp) -> Allocation | None:
        function = call.qualified
        if function not in FRESH_ALLOCATIONS and function not in INHERITING_ALLOCATIONS:
            return None
        flag = call.argument(None, "requires_grad")
        requires_grad: bool | None = False
        if flag is not None:
            requires_grad = flag.literal if isinstance(flag.literal, bool) else None
        source = None
        if function in INHERITING_ALLOCATIONS:
            first = call.argument(0, "a") or call.argument(None, "src")
            if first is not None:
                source = ArrayRef(first.code, self.key(frame, first.code))
            if flag is None:
                requires_grad = None
        dtype = call.argument(None, "dtype")
        if dtype is None and function in ("warp.zeros", "warp.empty", "warp.ones"):
            dtype = call.argument(1, "dtype")
        retain = call.argument(None, "retain_grad")
        shape = None
        if function in ("warp.zeros", "warp.empty", "warp.ones", "warp.full"):
            literal = self.literal(frame, call.argument(0, "shape"))
            shape = literal if _is_shape(literal) else None
        return Allocation(function, requires_grad, flag is not None, source, dtype.code if dtype is not None else "",
                          retain_grad=retain is not None and retain.literal is True, shape=shape)

    def visit_with(self, frame: Frame, op: WithOp) -> None:
        opened: list[TapeRegion] = []
        captures = sum(1 for item in op.items if item.qualified in GRAPH_CAPTURES)
        self.capturing += captures
        frame.open_captures.append(captures)
        for item in op.items:
            tape = self._tape_of(frame, item)
            if tape is None:
                continue
            key = ""
            if tape:
                key = self.bind(frame, item.asname, None) if item.asname is not None else self.key(frame, tape)
                self.tape_keys.add(key)
            self.event(frame, "region", op.loc, op.stmt, name=tape, key=key)
            region = TapeRegion(tape, Location.of(frame.path, op.loc), self.order + 1,
                                parent=self.region_stack[-1] if self.region_stack else None, key=key,
                                chain=frame.chain)
            self.regions.append(region)
            self.region_stack.append(region)
            opened.append(region)
        frame.open_regions.append(opened)

    def _tape_of(self, frame: Frame, item) -> str | None:
        if item.qualified in TAPE_CLASSES:
            return item.asname if item.asname is not None else ""
        if not item.value.plain or "[" in item.value.code:
            return None
        code = item.value.code
        if self.key(frame, code) in self.tape_keys or looks_like_tape(code):
            # A tape made here, or one passed in or kept on an object under a tape-like name.
            return code
        return None

    # -- calls ----------------------------------------------------------------------------
    def visit_call(self, frame: Frame, op: CallOp) -> Result:
        qualified = op.qualified
        if qualified in LAUNCH_FUNCTIONS:
            self.launch(frame, op)
            return UNKNOWN
        if qualified:
            if qualified == "warp.capture_begin":
                self.capturing += 1
            elif qualified == "warp.capture_end":
                self.capturing = max(0, self.capturing - 1)
            self.warp_call(frame, op, qualified)
            if qualified == "warp.overload":  # runs the source of the kernel it specialises
                return self.evaluate(frame, op.argument(0, "kernel"))
            return UNKNOWN
        if op.method in HOST_COPY_METHODS:
            frame.host_copies = True
        followed = self.follow_call(frame, op)
        if followed is not None:
            return followed
        if self.region_stack:
            name = self._opaque_name(frame, op)
            if name is not None:
                head, dot, attribute = (op.receiver or "").rpartition(".")
                held = attribute if dot and HEAD.fullmatch(op.receiver or "") else None
                self.opaque.append(OpaqueCall(name, Location.of(frame.path, op.loc), op.func, held))
        if op.receiver is not None:
            receiver = op.receiver
            key = self.key(frame, receiver)
            writes = (ArrayRef(receiver, key),) if op.method in WRITING_METHODS else ()
            self.event(frame, "method", op.loc, op.stmt, name=op.method, receiver=receiver, key=key, writes=writes,
                       pulls=self._argument_pulls(frame, op), arguments=self.argument_refs(frame, op), call=op)
        return UNKNOWN

    def follow_call(self, frame: Frame, op: CallOp) -> Result | None:
        """Run a project function, method or constructor the call names; its result, or None."""
        if not op.dotted:
            return None
        if op.receiver is not None:
            receiver = self._resolve(frame, op.receiver)
            if receiver.instance is not None:
                method = self.index.method(receiver.instance, op.method)
                if method is not None and self._worth_following(method):
                    return self._follow(frame, op, method, receiver, op.args)
                return None
            target = self.index.member(receiver.symbol, op.method) if receiver.symbol is not None else None
            if target is None and op.method == "apply" and receiver.symbol is not None and \
                    receiver.symbol.kind == "class":
                forward = self.index.autograd_forward(receiver.symbol)
                if forward is not None and self._worth_following(forward):
                    # torch runs `forward(ctx, *args)`: `ctx` is a new object each call
                    return self._follow(frame, op, forward, Result(f"ctx@{self.order}"), op.args)
                return None
        else:
            called = self._resolve(frame, op.func)
            target = called.symbol
            if target is None and called.instance is not None:  # `model(x)`: its class's `__call__`
                method = self.index.method(called.instance, "__call__")
                if method is not None and self._worth_following(method):
                    return self._follow(frame, op, method, called, op.args)
                return None
        if target is None:
            return None
        if target.kind == "function":
            if self._worth_following(target):
                return self._follow(frame, op, target, None, op.args)
            # A kernel factory called before the tape opens: what it makes is what a launch names.
            made = self.index.product(target)
            return Result(None, made) if made is not None else None
        if target.kind == "class":
            instance = f"{op.target or target.qualname.rsplit('.', 1)[-1] + '()'}@{self.order}"
            self.types[instance] = target
            initializer = self.index.method(target, "__init__")
            result = Result(instance, None, target)
            if initializer is not None and self._worth_following(initializer):
                self._follow(frame, op, initializer, result, op.args)
            return result
        if target.kind == "warp":
            return Result(None, target)
        return None

    def _opaque_name(self, frame: Frame, op: CallOp) -> str | None:
        """The name of the project functions an unfollowed call may run: the method's name for
        ``obj.m(...)`` on an object the recording cannot type, ``__call__`` for a call of a value
        (``model(x)``, ``layers[i](x)``); None where it runs nothing of the project (a library's
        function, a builtin, a tape's or an array's method, a definition it did not follow)."""
        if not op.dotted:  # `Solver(cubic=True).run(x)`: a method of a value; `layers[i](x)`: a call of one
            return op.method if op.method is not None else "__call__"
        if op.receiver is not None:
            receiver = self._resolve(frame, op.receiver)
            if receiver.symbol is not None or receiver.instance is not None or receiver.key in self.tape_keys:
                return None  # a module's, a class's or a typed object's member: resolved or external
            if receiver.key in self.allocated or self._library_object(frame, op.receiver):
                return None  # an array's method, a library object's
            return op.method
        head = op.func.split(".", 1)[0]
        if head in frame.names or head in frame.function.local_names:
            resolved = self._resolve(frame, op.func)
            return "__call__" if resolved.symbol is None else None
        return None

    def _library_value(self, frame: Frame, value: Value | None, call: CallOp | None) -> bool:
        """Whether a value is an object no project code defines: a display (``{}``, ``[...]``), a
        builtin's result (``dict(...)``), a library call's (``wp.get_device()``, ``np.zeros(3)``)."""
        if value is not None and value.call is None and value.code[:1] in "{[(" and not value.plain:
            return True
        if call is None:
            return False
        if call.qualified:
            return True
        resolved = self._resolve(frame, call.func).symbol if call.dotted else None
        if resolved is None:
            return call.dotted and "." not in call.func and call.func in BUILTIN_NAMES and \
                call.func not in frame.function.local_names
        return resolved.kind == "external"

    def _library_object(self, frame: Frame, code: str) -> bool:
        """Whether ``code`` names an object a library made: a local bound to a library call's result,
        or an attribute of a project object that its class types or fills from a library."""
        match = HEAD.match(code)
        parts = match.group(0).split(".") if match is not None else []
        for length in range(1, len(parts) + 1):
            prefix = self._resolve(frame, ".".join(parts[:length]))
            if prefix.key in self.external or (prefix.symbol is not None and prefix.symbol.kind == "external"):
                return True
            if length < len(parts) and prefix.instance is not None and \
                    self.index.attribute_is_external(prefix.instance, parts[length]):
                return True
        return False

    def _worth_following(self, target: Symbol) -> bool:
        return self.relevant is None or bool(self.regions) or target in self.relevant

    def _follow(self, frame: Frame, op: CallOp | None, target: Symbol, receiver: Result | None,
                args) -> Result | None:
        function = self.index.function(target)
        info = self.index.info_of(target)
        if function is None or info is None or target in self.active or len(self.active) > MAX_CALL_DEPTH or \
                len(self.events) > MAX_EVENTS:
            return None
        site = CallSite(Location.of(frame.path, op.loc), target.qualname) if op is not None else None
        callee = Frame(info, function, frame.chain + ((site,) if site is not None else ()))
        positional = [p for p in function.params if p.kind == "positional"]
        bound: dict[str, Result] = {}
        if receiver is not None and positional:
            bound[positional[0].name] = receiver
            positional = positional[1:]
        given = [a for a in args if a.keyword is None and not a.value.star]
        for param, arg in zip(positional, given):
            bound[param.name] = self.evaluate(frame, arg.value)
        names = {p.name for p in function.params}
        for arg in args:
            if arg.keyword is not None and arg.keyword in names:
                bound[arg.keyword] = self.evaluate(frame, arg.value)
        passed = {p.name: a.value for p, a in zip(positional, given)}
        passed.update({a.keyword: a.value for a in args if a.keyword is not None and a.keyword in names})
        for name, value in passed.items():  # lists and literals travel with the call: a launch wrapper
            listed = self.spread_elements(frame, value) if value.elements is not None or (
                value.plain and value.code in frame.lists) else None
            if listed is not None:
                callee.lists[name] = listed
            literal = self.literal(frame, value)
            if literal is not NOT_LITERAL:
                callee.literals[name] = literal
        for param in function.params:  # not passed: the default's literal
            if param.name not in passed and param.default is not NOT_LITERAL:
                callee.literals[param.name] = param.default
        for param in function.params:
            result = bound.get(param.name)
            key = result.key if result is not None and result.key else f"{param.name}@{self.order}"
            callee.names[param.name] = key
            if result is not None and result.symbol is not None:
                self.symbols.setdefault(key, result.symbol)
            if result is not None and result.instance is not None:
                self.types.setdefault(key, result.instance)
            else:
                self._annotate(info, function, key, param.name, param.annotation)
        # A returned factory product or object is known by what the callee returned.
        self.active.append(target)
        self.followed.add(target)
        self._run(callee)
        self.active.pop()
        return callee.returned if callee.returned is not None else UNKNOWN

    def warp_call(self, frame: Frame, op: CallOp, qualified: str) -> None:
        reads: tuple[ArrayRef, ...] = ()
        writes: tuple[ArrayRef, ...] = ()
        if qualified == "warp.copy":
            dest, src = op.argument(0, "dest"), op.argument(1, "src")
            writes = (ArrayRef(dest.code, self.key(frame, dest.code)),) if dest is not None else ()
            reads = (ArrayRef(src.code, self.key(frame, src.code)),) if src is not None else ()
        elif qualified == "warp.clone":
            src = op.argument(0, "src")
            reads = (ArrayRef(src.code, self.key(frame, src.code)),) if src is not None else ()
        elif qualified.startswith(UTILITY_MODULES) and qualified.rsplit(".", 1)[1] in UTILITY_OPS:
            effects: dict[str, list[ArrayRef]] = {"read": [], "write": []}
            for param, position, effect in UTILITY_OPS[qualified.rsplit(".", 1)[1]]:
                value = op.argument(position, param)
                if value is not None and value.plain:
                    effects[effect].append(ArrayRef(value.code, self.key(frame, value.code), param))
            reads, writes = tuple(effects["read"]), tuple(effects["write"])
        event = self.event(frame, "call", op.loc, op.stmt, name=qualified, reads=reads, writes=writes,
                           pulls=self._argument_pulls(frame, op), arguments=self.argument_refs(frame, op), call=op)
        if qualified in AUTOGRAD_CHECKS:
            checked = op.argument(0, "function") or op.argument(None, "kernel")
            event.target = self.evaluate(frame, checked).symbol if checked is not None else None
            self.checked.append((event.target, event))

    def _argument_pulls(self, frame: Frame, op: CallOp) -> frozenset[str]:
        return frozenset().union(*(self.pulls_of(frame, a.value) for a in op.args))

    def argument_refs(self, frame: Frame, op: CallOp) -> tuple[ArrayRef, ...]:
        refs = []
        for arg in op.args:
            values = list(arg.value.dict_keys) if arg.value.dict_keys is not None else [arg.value]
            for value in values:
                if value.plain:
                    refs.append(ArrayRef(value.code, self.key(frame, value.code), arg.keyword or ""))
        return tuple(refs)

    def elements(self, frame: Frame, value: Value | None) -> list[tuple[str, str]]:
        """(code, key) of each element of `inputs=[a, b]`, of `inputs=args` where `args = [a, b]`
        earlier in the function, or of a list a caller passed as the parameter `args`."""
        if value is None:
            return []
        if value.elements is None:
            return list(frame.lists.get(value.code, ())) if value.plain else []
        return [(e.code, self.key(frame, e.code)) for e in value.elements]

    def spread_elements(self, frame: Frame, value: Value | None) -> list[tuple[str, str]] | None:
        """``elements``, a starred list expanded where the function or its caller wrote it out
        (`inputs=[*common, tid_base]`); None where one cannot be, so that no position after it is
        known."""
        if value is None or value.spread is None:
            return self.elements(frame, value)
        found: list[tuple[str, str]] = []
        for element in value.spread:
            if not element.star:
                found.append((element.code, self.key(frame, element.code)))
            elif element.plain and element.code in frame.lists:
                found += frame.lists[element.code]
            else:
                return None
        return found

    @staticmethod
    def _aligned(frame: Frame, value: Value | None) -> list[Value | None]:
        """The elements written in a launch's list, one per position of ``spread_elements``: those
        of a list made earlier or expanded from a starred one as None (their values are not kept,
        only their keys)."""
        if value is not None and value.elements is None and value.spread is None and value.plain:
            return [None] * len(frame.lists.get(value.code, ()))  # `outputs=outputs`, a list made earlier
        if value is None or value.spread is None:
            return _displayed(value)
        found: list[Value | None] = []
        for element in value.spread:
            if not element.star:
                found.append(element)
            else:
                found += [None] * len(frame.lists.get(element.code, ()))
        return found

    def literal(self, frame: Frame, value: Value | None) -> object:
        """A value's literal: written there, or passed by the caller for this parameter."""
        if value is None:
            return NOT_LITERAL
        if value.literal is not NOT_LITERAL:
            return value.literal
        return frame.literals.get(value.code, NOT_LITERAL) if value.plain else NOT_LITERAL

    def launch(self, frame: Frame, op: CallOp) -> None:
        keywords: dict[str, Value] = {}
        for position, arg in enumerate(op.args):
            if arg.keyword is not None:
                keywords[arg.keyword] = arg.value
            elif position < len(LAUNCH_PARAMETERS) and not arg.value.star:
                keywords[LAUNCH_PARAMETERS[position]] = arg.value
        kernel_value = keywords.get("kernel")
        symbol = self.evaluate(frame, kernel_value).symbol if kernel_value is not None else None
        facts = self.facts_of(symbol) if symbol is not None and symbol.kind == "warp" else None
        if facts is not None and facts.kind != "kernel":
            facts = None
        inputs = self.spread_elements(frame, keywords.get("inputs"))
        outputs = self.spread_elements(frame, keywords.get("outputs"))
        params = [p.name for p in facts.params] if facts is not None else []
        if inputs is None:  # the parameters after a starred list that cannot be expanded are not known
            inputs = self.elements(frame, keywords.get("inputs"))
            params = params[:len(inputs)]
        outputs = outputs if outputs is not None else self.elements(frame, keywords.get("outputs"))
        refs = [ArrayRef(code, key, params[i] if i < len(params) else "")
                for i, (code, key) in enumerate(inputs + outputs)]
        pulls = frozenset().union(*(self.pulls_of(frame, v) for v in
                                    _displayed(keywords.get("inputs")) + _displayed(keywords.get("outputs"))))
        record = self.literal(frame, keywords.get("record_tape")) if "record_tape" in keywords else True
        # A launch wrapper (`def launch(kernel, inputs, ...): wp.launch(kernel, ...)`) launches what
        # its caller names: the launch is reported where the wrapper is called.
        wrapped = kernel_value is not None and kernel_value.plain and frame.chain and \
            kernel_value.code in {p.name for p in frame.function.params}
        where = frame.chain[-1].location if wrapped else None
        event = self.event(frame, "launch", op.loc, op.stmt, name=op.qualified, pulls=pulls, call=op, at=where)
        dim = keywords.get("dim")
        launch = Launch(event, kernel_value.code if kernel_value is not None else "", facts,
                        dim.code if dim is not None else None, [c for c, _ in inputs], [c for c, _ in outputs],
                        keywords, refs, len(inputs), symbol=symbol if facts is not None else None,
                        record_tape=record if isinstance(record, bool) else None)
        literal = self.literal(frame, dim)
        launch.dim_literal = literal if literal is not NOT_LITERAL else None
        displayed = self._aligned(frame, keywords.get("inputs")) + self._aligned(frame, keywords.get("outputs"))
        if len(displayed) == len(inputs) + len(outputs):
            for position, element in enumerate(displayed):
                literal = self.literal(frame, element)
                if literal is not NOT_LITERAL:
                    launch.argument_literals[position] = literal
        if facts is not None and facts.struct_effects:
            for ref in refs:
                for field in sorted(f for f in facts.struct_effects if f.split(".", 1)[0] == ref.param):
                    if HEAD.fullmatch(ref.code):
                        code = f"{ref.code}.{field.split('.', 1)[1]}"
                        launch.struct_refs.append(ArrayRef(code, self.key(frame, code), field))
        event.launch = launch
        event.reads = tuple(launch.reads())
        event.writes = tuple(launch.writes())
        self.launches.append(launch)
        self.launch_symbols.append((symbol, event))


def _is_shape(value: object) -> bool:
    """An int, or a tuple or list of ints: an allocation's literal shape."""
    if isinstance(value, (tuple, list)):
        return bool(value) and all(type(n) is int for n in value)
    return type(value) is int


def _displayed(value: Value | None) -> list[Value]:
    return list(value.elements or ()) if value is not None else []


def _definition_scope(function: FunctionSummary) -> str:
    """Where a function's annotations are evaluated: the scope enclosing its definition."""
    head, separator, _ = function.qualname.rpartition(".<locals>.")
    return head if separator else MODULE_SCOPE
