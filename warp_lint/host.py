"""The host model: what the host rules read, one *recording* at a time.

A recording (``HostScope``) is the events of one entry point of the program in program order,
with every call into the project's own functions, methods and constructors followed (the
project model's ``recordings`` builds it from the files' summaries): tape creations, recording
regions, launches (with the kernel they name and their argument lists), method calls on arrays
and tapes (``backward``, ``zero``, ``zero_``, ``fill_``, ``assign``, ``numpy``), calls of Warp
functions (``wp.copy``, ``wp.clone``, allocations), ``.grad`` reads, and assignments. Every event
knows its place in the files (``location``), the call path that led to it (``chain``), the tape
region, the loops and the ``if`` arms it sits in.

Arrays are named by *keys*, not by their code: aliases are followed (``q = state.q``,
``a, b = b, a``, a callee's parameter is its caller's argument, ``self`` is the object) and every
rebinding gets a fresh key (``x = wp.zeros(...)`` twice are two arrays), so "the same array" is a
string comparison. A key ends in ``@N`` where it was bound by the event of order ``N``. Every event
carries the arrays it reads and writes on the device (``reads``/``writes``: a launch through its
kernel's facts, ``wp.copy``, ``zero_``, ``fill_``, ``assign``), the arrays whose host copies flow
into it (``pulls``: ``x.numpy()``, ``x.list()``, and names computed from them), and, for
assignments, the allocation it makes. Arrays held in ``@wp.struct`` fields count too
(``Launch.struct_refs``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Callable, Iterator

from warp_lint.finding import Position
from warp_lint.kernel_facts import KernelFacts
from warp_lint.project.summary import CallOp, Loc, Value

if TYPE_CHECKING:
    from warp_lint.project.index import Symbol

LAUNCH_FUNCTIONS = {"warp.launch", "warp.launch_tiled"}
LAUNCH_PARAMETERS = ("kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device", "stream",
                     "adjoint", "record_tape")
TAPE_CLASSES = {"warp.Tape", "warp.tape.Tape"}

# Allocations: a fresh array whose requires_grad is the keyword's value (False when absent)...
FRESH_ALLOCATIONS = {"warp.zeros", "warp.empty", "warp.full", "warp.ones", "warp.array", "warp.from_numpy",
                     "warp.array1d", "warp.array2d", "warp.array3d", "warp.array4d"}
# ...or one that inherits requires_grad from its first argument unless the keyword says otherwise.
INHERITING_ALLOCATIONS = {"warp.zeros_like", "warp.empty_like", "warp.full_like", "warp.ones_like", "warp.clone"}
# Methods that overwrite their receiver's data on the device.
WRITING_METHODS = {"zero_", "fill_", "assign"}
# Methods that copy an array's data to the host.
HOST_COPY_METHODS = {"numpy", "list"}
# `warp.utils` operations that run natively, never recorded on a tape: parameter -> (position, effect).
UTILITY_OPS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "array_sum": (("values", 0, "read"), ("out", 1, "write")),
    "array_inner": (("a", 0, "read"), ("b", 1, "read"), ("out", 2, "write")),
    "array_scan": (("in_array", 0, "read"), ("out_array", 1, "write")),
    "radix_sort_pairs": (("keys", 0, "read"), ("values", 1, "read"), ("keys", 0, "write"), ("values", 1, "write")),
    "segmented_sort_pairs": (("keys", 0, "read"), ("values", 1, "read"), ("keys", 0, "write"),
                             ("values", 1, "write")),
    "runlength_encode": (("values", 0, "read"), ("run_values", 1, "write"), ("run_lengths", 2, "write"),
                         ("run_count", 3, "write")),
}
UTILITY_MODULES = ("warp.utils.", "warp._src.utils.")
AUTOGRAD_CHECKS = {"warp.autograd.gradcheck", "warp.autograd.gradcheck_tape", "warp.autograd.jacobian",
                   "warp.autograd.jacobian_fd"}
INTEGER_DTYPES = {"int", "bool", "warp.bool", "warp.uint64", "warp.int64", "int32", "int64", "warp.int32",
                  "warp.uint32", "warp.int16", "warp.int8", "warp.uint8", "warp.uint16", "warp.int",
                  "warp.vec2i", "warp.vec3i", "warp.vec4i"}
# Warp's integer vector types: vec3i (int32), vec2ui, vec4l (int64), vec2ul, vec3s (int16), vec2us, vec2b
# (int8), vec2ub; vec3h is float16.
INTEGER_VECTOR = re.compile(r"^vec\d(?:i|ui|l|ul|s|us|b|ub)$")


def integer_dtype(dtype: str | None) -> bool:
    """Whether a dtype as written (`wp.int32`, `int`, `warp.vec3i`) holds integers: no gradient."""
    if not dtype:
        return False
    last = dtype.rsplit(".", 1)[-1]
    return dtype in INTEGER_DTYPES or last in {d.rsplit(".", 1)[-1] for d in INTEGER_DTYPES} or bool(
        INTEGER_VECTOR.match(last))

TAPE_NAME = re.compile(r"(?:^|_)tape\d*(?:$|_)")
KEY_ORDER = re.compile(r"@(\d+)")
HEAD = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*")


def mentions(code: str, names: frozenset[str] | set[str]) -> bool:
    """Whether any of ``names`` occurs in ``code`` as a whole identifier."""
    return any(re.search(rf"\b{re.escape(name)}\b", code) for name in names)


def looks_like_tape(code: str) -> bool:
    """A name that says it holds a tape: `tape`, `self.tape`, `fwd_tape2`."""
    return bool(TAPE_NAME.search(code.rsplit(".", 1)[-1].lower()))


@dataclasses.dataclass(frozen=True)
class Location:
    """A range in a file: 1-based lines and columns (code points), end exclusive."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def of(cls, path: str, loc: Loc) -> Location:
        return cls(path, loc.line, loc.column, loc.end_line, loc.end_column)

    @property
    def start(self) -> Position:
        return Position(self.line, self.column)

    @property
    def end(self) -> Position:
        return Position(self.end_line, self.end_column)


@dataclasses.dataclass(frozen=True)
class CallSite:
    """One step of the path from a recording's entry point to an event: a call that was followed."""

    location: Location  # the call
    callee: str  # what was called, for messages: "Model.forward", "simulate"


@dataclasses.dataclass
class TapeRegion:
    tape: str  # the tape expression's code: "tape", "self.tape"; "" for an anonymous `with wp.Tape():`
    location: Location  # the `with` statement's header
    start_order: int
    end_order: int = 0
    parent: TapeRegion | None = None
    key: str = ""  # the tape's key ("" when anonymous)
    chain: tuple[CallSite, ...] = ()

    def same_tape(self, other: TapeRegion | None) -> bool:
        """Whether ``other`` records on this region's tape: this very region, or another region of
        the same named tape (an anonymous `with wp.Tape():` is only itself)."""
        return other is self or (bool(self.key) and other is not None and other.key == self.key)


@dataclasses.dataclass(frozen=True)
class ArrayRef:
    """One mention of an array: its code as written, its key, and the kernel parameter it binds."""

    code: str
    key: str
    param: str = ""


@dataclasses.dataclass
class Allocation:
    """What an assignment's call allocates."""

    function: str  # qualified: "warp.zeros", "warp.zeros_like", ...
    requires_grad: bool | None  # the keyword's literal value; None when not a literal
    explicit: bool  # requires_grad= was written
    inherits_from: ArrayRef | None  # *_like / clone: the source whose flag is inherited
    dtype: str  # the dtype keyword's code ("" when absent)
    retain_grad: bool = False  # retain_grad=True was written
    shape: object = None  # the shape argument's literal value (an int or a tuple), when it is one

    @property
    def integer(self) -> bool:
        return integer_dtype(self.dtype)


@dataclasses.dataclass
class LoopSpan:
    id: int
    location: Location
    start_order: int
    end_order: int
    targets: frozenset[str]  # names the loop header binds (`for i, s in ...`)
    single_pass: bool  # its body ends in `break`/`return`/`raise`: it runs once
    target_keys: frozenset[str] = frozenset()  # their keys, as element keys name them (`states[t@12]`)
    truths: tuple[bool, ...] | None = None  # `for flag in (False, True):`: the target's truth per pass
    # (id of an `if`, arm) -> in how many passes that arm runs, for arms that test the loop's target
    arm_passes: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class HostEvent:
    kind: str  # tape | region | launch | method | call | assign | grad
    location: Location  # what a report on this event underlines: the call, or the statement
    statement: Location  # the statement holding it
    order: int
    region: TapeRegion | None
    loops: tuple[int, ...]  # ids of the loops around it, outermost first
    name: str = ""  # method name, qualified Warp function, or assigned target code
    receiver: str = ""  # for methods: the receiver's code ("tape", "x.grad"); for grad: the array's code
    value: Value | None = None  # assignments: the assigned value
    key: str = ""  # assign: the target's new key; method / grad: the receiver's key; tape / region: the tape's
    reads: tuple[ArrayRef, ...] = ()  # arrays whose device data this event reads (launches: by their kernel)
    writes: tuple[ArrayRef, ...] = ()  # arrays whose device data this event overwrites or accumulates into
    pulls: frozenset[str] = frozenset()  # keys of arrays whose host copy (.numpy(), .list()) flows in here
    allocation: Allocation | None = None
    branch: tuple[tuple[int, int], ...] = ()  # (id of an `if`, arm) pairs enclosing the event
    launch: Launch | None = None
    arguments: tuple[ArrayRef, ...] = ()  # method / call: its plain-name arguments (a dict's keys too), keyed
    owner: str = ""  # assign to `obj.attr`: the key of `obj` before the assignment
    augmented: str = ""  # assign: the operator of an augmented assignment ("+=")
    target: Symbol | None = None  # gradient checks: the definition checked (a kernel or a host function)
    call: CallOp | None = dataclasses.field(default=None, repr=False)  # the call, for its arguments
    chain: tuple[CallSite, ...] = ()  # the calls followed from the recording's entry point to here
    captured: bool = False  # made while a CUDA graph is captured: it runs when the graph is launched
    # In an arm the recorded call's own literal skips: (parameter, literal, function); what other
    # callers of that function reach, not this one
    skipped_by: tuple | None = None

    def exclusive_with(self, other: HostEvent) -> bool:
        """Whether the two events sit in different arms of one `if` (never both run in one pass)."""
        arms = dict(self.branch)
        return any(node in arms and arms[node] != arm for node, arm in other.branch)

    def argument(self, position: int | None, keyword: str) -> Value | None:
        """A call's argument by position (None: keyword only) or keyword."""
        return self.call.argument(position, keyword) if self.call is not None else None

    @property
    def path(self) -> str:
        return self.location.path


def zeroes_gradients(event: HostEvent, tape_key: str) -> bool:
    """Whether ``event`` resets gradients: `tape.zero()`/`tape.reset()` on that tape, or a write to a `.grad`."""
    if event.kind == "method" and event.name in ("zero", "reset") and event.key == tape_key:
        return True
    if event.kind == "assign" and event.name.endswith(".grad"):
        return True
    return any(ref.code.endswith(".grad") or ref.key.endswith(".grad") for ref in event.writes)


def backward_seeds(event: HostEvent) -> list[ArrayRef]:
    """The arrays a `tape.backward(loss)` / `tape.backward(grads={y: g})` starts from."""
    return list(event.arguments)


@dataclasses.dataclass
class Launch:
    event: HostEvent
    kernel_code: str
    kernel: KernelFacts | None  # the kernel the launch names, when the project defines it
    dim: str | None
    inputs: list[str]  # argument codes, in kernel parameter order
    outputs: list[str]
    keywords: dict[str, Value]
    refs: list[ArrayRef] = dataclasses.field(default_factory=list)  # inputs + outputs, keyed, with parameters
    input_count: int = 0
    # arrays in the fields of struct arguments the kernel reads or writes: param "s.q", key of `state.q`
    struct_refs: list[ArrayRef] = dataclasses.field(default_factory=list)
    symbol: Symbol | None = None  # the kernel's definition in the project index
    record_tape: bool | None = True  # the `record_tape=` argument (None: not a literal)
    # literal values, where the recording knows them (written there, or a caller's or a default's):
    dim_literal: object = None  # `dim=`
    argument_literals: dict[int, object] = dataclasses.field(default_factory=dict)  # position in inputs + outputs

    @property
    def recorded(self) -> bool:
        """Recorded on the active tape: inside a region and not `record_tape=False`."""
        return self.event.region is not None and self.record_tape is not False

    def param_dtype(self, ref: ArrayRef) -> str | None:
        """The dtype of the kernel array parameter ``ref`` binds, when known."""
        if self.kernel is None or not ref.param:
            return None
        param = self.kernel.param(ref.param)
        return param.dtype if param is not None and param.is_array else None

    def arguments(self) -> dict[str, str]:
        """Kernel parameter -> the argument's code, where the kernel is known."""
        if self.kernel is None:
            return {}
        return dict(zip([p.name for p in self.kernel.params], self.inputs + self.outputs))

    @property
    def literals(self) -> dict[str, object]:
        """Kernel parameter -> the literal this launch binds it to, where it binds one."""
        return {self.refs[position].param: value for position, value in self.argument_literals.items()
                if position < len(self.refs) and self.refs[position].param}

    @property
    def effects(self) -> dict[str, frozenset[str]]:
        """The kernel's effects on its array parameters in this launch: an access guarded by an `if`
        on a parameter this launch binds to a literal that fails it is not made."""
        if not self.kernel.effect_guards:  # the common case, on every read and write asked
            return self.kernel.effects
        return self.kernel.effects_with(self.literals)

    def reads(self, convention: bool = False) -> list[ArrayRef]:
        """The array arguments the kernel reads. Unknown kernel: `inputs=` with ``convention``, else none."""
        if self.kernel is None:
            return list(self.refs[: self.input_count]) if convention else []
        effects, structs = self.effects, self.kernel.struct_effects
        return [r for r in self.refs if "read" in effects.get(r.param, ())] + [
            r for r in self.struct_refs if "read" in structs.get(r.param, ())]

    def needs_value(self, ref: ArrayRef, without_gradient: Callable[[str], bool] | None = None) -> bool:
        """Whether ``backward()``, replaying this launch, reads the values of ``ref`` again: True
        unless the kernel's model shows every read of that parameter linear, so that overwriting
        the array in between changes no gradient. ``without_gradient(key)``: whether the array of
        that key can hold no gradient; a value read only as a factor of products is then needed
        only when one of the other factors' arrays can."""
        kernel = self.kernel
        if kernel is None:
            return True
        if not kernel.differentiable:
            return False  # backward disabled: its adjoint never runs, struct fields included
        if not self._listed(ref, kernel.value_reads):
            return False
        if without_gradient is not None and self.receives_no_gradient(without_gradient):
            return False
        partners = kernel.value_partners.get(ref.param) if ref in self.refs else None
        if partners is None or without_gradient is None:
            return True
        bound = {r.param: r for r in self.refs}
        return any(p not in bound or not bound[p].key or not without_gradient(bound[p].key) for p in partners)

    def receives_no_gradient(self, without_gradient: Callable[[str], bool]) -> bool:
        """Whether ``backward()`` passes this launch's adjoint no gradient at all: every array the
        kernel writes a gradient-carrying value into is bound to an array that can hold none
        (``without_gradient(key)``: allocated without `requires_grad`), so its adjoint reads zeros
        from every output, and what it read is multiplied by them (a diagnostic written beside the
        simulation: `contact_impulse`). False where a written array is not known."""
        kernel = self.kernel
        if kernel is None:
            return False
        written = [r for r in self.writes() if self.writes_gradient(r) and (
            r in self.struct_refs or (self.kernel.param(r.param) is not None and
                                      self.kernel.param(r.param).differentiable))]
        return bool(written) and all(r.key and without_gradient(r.key) for r in written)

    @property
    def differentiable(self) -> bool:
        """False when the kernel's backward is disabled (an unknown kernel is taken to have one)."""
        return self.kernel is None or self.kernel.differentiable

    def passes_gradient(self, ref: ArrayRef) -> bool:
        """Whether ``backward()`` of this launch passes a gradient back into ``ref``: True unless the
        kernel's model shows its values reach no differentiable output (read only in comparisons
        and indices, or the kernel writes no float array)."""
        kernel = self.kernel
        if kernel is None:
            return True
        if ref in self.struct_refs:
            return ref.param not in kernel.integer_fields and self._listed(ref, kernel.gradient_reads)
        return self._listed(ref, kernel.gradient_reads)

    def writes_gradient(self, ref: ArrayRef) -> bool:
        """Whether the kernel stores a value that carries a gradient into ``ref``: True unless its
        model shows every value written there built from constants, counts and indices."""
        kernel = self.kernel
        if kernel is None or kernel.gradient_writes is None or ref in self.struct_refs:
            return True
        return self._listed(ref, kernel.gradient_writes)

    def _listed(self, ref: ArrayRef, params: frozenset[str]) -> bool:
        """Whether the array parameter (or struct field) ``ref`` binds is in ``params``, one of the
        kernel's fact sets; True where the facts cannot say (a parameter without recorded effects,
        a field of facts that do not know fields)."""
        if ref in self.struct_refs:
            return not self.kernel.field_reads_known or ref.param not in self.kernel.struct_effects or \
                ref.param in params
        return ref not in self.refs or ref.param not in self.kernel.effects or ref.param in params

    def writes(self, convention: bool = False) -> list[ArrayRef]:
        """The array arguments the kernel writes or accumulates into (``convention``: `outputs=`)."""
        if self.kernel is None:
            return list(self.refs[self.input_count:]) if convention else []
        effects, structs = self.effects, self.kernel.struct_effects
        return [r for r in self.refs if effects.get(r.param, frozenset()) & {"write", "accumulate"}] + [
            r for r in self.struct_refs if structs.get(r.param, frozenset()) & {"write", "accumulate"}]

    def stores(self) -> list[ArrayRef]:
        """The array arguments the kernel stores into (``y[i] = ...``), not only accumulates into."""
        if self.kernel is None:
            return []
        effects, structs = self.effects, self.kernel.struct_effects
        return [r for r in self.refs if "write" in effects.get(r.param, ())] + [
            r for r in self.struct_refs if "write" in structs.get(r.param, ())]


@dataclasses.dataclass
class HostScope:
    """One recording: the events of one entry point, calls followed."""

    entry: str  # the entry point, for messages: "Example.step", "<module>"
    location: Location  # the entry point's definition
    events: list[HostEvent]
    regions: list[TapeRegion]
    launches: list[Launch]
    loops: dict[int, LoopSpan] = dataclasses.field(default_factory=dict)  # loop id -> its span
    parameters: tuple[str, ...] = ()  # the entry point's parameters (their keys are their names)

    @property
    def name(self) -> str:
        """The entry function's name ("" for a module's own statements)."""
        return "" if self.entry == "<module>" else self.entry.rsplit(".", 1)[-1]

    def parameter_effects(self) -> dict[str, set[str]]:
        """Parameter -> "read"/"write": what the entry point's launches, copies and methods do to the
        arrays passed to it (calls it makes followed; `params.x` counts as `params`)."""
        params = set(self.parameters)
        effects: dict[str, set[str]] = {}
        for event in self.events:
            reads = event.launch.reads(convention=True) if event.launch is not None else event.reads
            writes = event.launch.writes(convention=True) if event.launch is not None else event.writes
            for refs, effect in ((reads, "read"), (writes, "write")):
                for ref in refs:
                    match = HEAD.match(ref.key)
                    root = match.group(0).split(".")[0] if match else ""
                    if root in params and "@" not in ref.key.split(".")[0]:
                        effects.setdefault(root, set()).add(effect)
        return effects

    def allocated_without_gradients(self, key: str) -> HostEvent | None:
        """The allocation that gives the array ``key`` its value, when every assignment of that key
        is an allocation without `requires_grad` (not a `*_like` copy, not a value from elsewhere;
        `x = None` and aliases aside)
        and nothing sets its `.requires_grad` or `.grad` afterwards: no gradient can reach it. None
        where one may (a parameter, an attribute set elsewhere, a flag that is not a literal)."""
        # `x = None` holds no array; `self.x = x` names the same array again (keys are arrays)
        assigns = [e for e in self.events if e.kind == "assign" and e.key == key
                   and not (e.value is not None and (e.value.literal is None or e.value.plain))]
        if not assigns or any(e.allocation is None or e.allocation.requires_grad is not False or
                              e.allocation.inherits_from is not None for e in assigns):
            return None
        if any(e.kind == "assign" and e.owner == key and e.name.endswith((".requires_grad", ".grad"))
               for e in self.events):
            return None
        return assigns[0]

    def without_gradient(self, key: str) -> bool:
        """Whether the array ``key`` can hold no gradient (``allocated_without_gradients``)."""
        return self.allocated_without_gradients(key) is not None

    def gradient_free(self, launch: Launch) -> list[HostEvent] | None:
        """The allocations of every float array a launch binds, when none can carry a gradient: its
        adjoint then changes no gradient whatever the kernel does. None when one may, or when an
        array parameter is bound to something the recording does not key (a struct, an expression)."""
        kernel = launch.kernel
        if kernel is None or launch.struct_refs or any(p.kind in ("struct", "generic", "unknown")
                                                       for p in kernel.params):
            return None
        bound = {ref.param: ref for ref in launch.refs}
        allocations = []
        for param in kernel.params:
            if not param.is_array or not param.differentiable:
                continue
            ref = bound.get(param.name)
            allocation = self.allocated_without_gradients(ref.key) if ref is not None and ref.key else None
            if allocation is None:
                return None
            allocations.append(allocation)
        return allocations

    def events_in(self, region: TapeRegion) -> Iterator[HostEvent]:
        return (e for e in self.events if region.start_order <= e.order <= region.end_order)

    def loop(self, loop_id: int) -> LoopSpan:
        return self.loops[loop_id]

    def events_between(self, start: int, end: int) -> Iterator[HostEvent]:
        """Events with start <= order <= end."""
        return (e for e in self.events if start <= e.order <= end)

    def created_in(self, key: str, start: int, end: int) -> bool:
        """Whether any part of ``key`` was bound by an assignment with start <= order <= end."""
        return any(start <= int(order) <= end for order in KEY_ORDER.findall(key))

    def per_iteration(self, ref: ArrayRef, span: LoopSpan) -> bool:
        """Whether the loop picks the array anew each pass: bound inside the loop, or an element
        picked by the loop's counter (`states[t + 1]`, also when a callee knows it as `x_next`)."""
        return self.created_in(ref.key, span.start_order, span.end_order) or mentions(
            ref.key[ref.key.find("["):] if "[" in ref.key else "", span.targets | span.target_keys)

    def tape_keys(self) -> set[str]:
        return {r.key for r in self.regions if r.key} | {e.key for e in self.events if e.kind == "tape"}

    def is_tape(self, event: HostEvent) -> bool:
        """Whether a method event's receiver is a tape: made or recorded on here, or named like one."""
        if not event.key:
            return False
        return event.key in self.tape_keys() or looks_like_tape(event.receiver)

    def backwards(self) -> list[HostEvent]:
        """The `tape.backward(...)` calls of this recording, on receivers known to be tapes."""
        return [e for e in self.events if e.kind == "method" and e.name == "backward" and self.is_tape(e)]
