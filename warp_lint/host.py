"""The host model: tapes, the regions that record on them, and what happens inside, in order.

Each host scope (the module's own statements, every function or method that is not a Warp
function) becomes a list of events in program order: tape creations, recording regions, launches
(with the kernel they name and their argument lists), method calls on arrays and tapes
(``backward``, ``zero``, ``zero_``, ``fill_``, ``assign``, ``numpy``), calls of Warp functions
(``wp.copy``, ``wp.clone``, allocations), ``.grad`` reads, and assignments. Every event knows the
tape region, the loops and the ``if`` arms it sits in. Host rules read these lists; none walks the
tree itself.

Arrays are named by *keys*, not by their code: the scanner follows plain aliases (``q = state.q``,
``a, b = b, a``) and gives every rebinding a fresh key (``x = wp.zeros(...)`` twice are two arrays),
so "the same array" is a string comparison. Every event carries the arrays it reads and writes on the
device (``reads``/``writes``: a launch through its kernel's summary, ``wp.copy``, ``zero_``,
``fill_``, ``assign``), the arrays whose host copies flow into it (``pulls``: ``x.numpy()``,
``x.list()``, and names computed from them), and, for assignments, the allocation it makes.

Arrays held in ``@wp.struct`` fields count too: a launch passing a struct to a kernel that reads or
writes ``s.q[...]`` reads or writes the array under the key of ``state.q`` (``Launch.struct_refs``).
Calls of host helpers defined in the same file (a module-level function by plain name, a method of
the enclosing class through ``self.m(...)``) carry what the helper does to its arguments outside its
own tapes: ``helper_reads``, ``helper_writes`` (keys mapped to the caller's arguments) and
``helper_launches``. The ``warp.utils`` reductions, scans and sorts (not recorded on a tape) read
and write their array arguments like ``wp.copy``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterator

import libcst as cst

from warp_lint.cst_walk import children
from warp_lint.kernels import FunctionModel, KernelIndex
from warp_lint.names import WarpNames, dotted_name
from warp_lint.warp_types import INT_SCALARS, code_of

LAUNCH_FUNCTIONS = {"warp.launch", "warp.launch_tiled"}
LAUNCH_PARAMETERS = ("kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device", "stream",
                     "adjoint", "record_tape")
TAPE_CLASSES = {"warp.Tape", "warp.tape.Tape"}

# Allocations: a fresh array whose requires_grad is the keyword's value (False when absent)...
FRESH_ALLOCATIONS = {"warp.zeros", "warp.empty", "warp.full", "warp.ones", "warp.array", "warp.from_numpy"}
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
INTEGER_DTYPES = INT_SCALARS | {"int", "bool", "warp.bool", "warp.uint64", "warp.int64", "int32", "int64",
                                "warp.vec2i", "warp.vec3i", "warp.vec4i"}


@dataclasses.dataclass
class TapeRegion:
    tape: str  # the tape expression's code: "tape", "self.tape"; "" for an anonymous `with wp.Tape():`
    node: cst.With
    start_order: int
    end_order: int = 0
    parent: TapeRegion | None = None
    key: str = ""  # the tape's key ("" when anonymous)


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

    @property
    def integer(self) -> bool:
        dtype = self.dtype.split(".")[-1]
        return self.dtype in INTEGER_DTYPES or dtype in {d.split(".")[-1] for d in INTEGER_DTYPES}


@dataclasses.dataclass
class LoopSpan:
    node: cst.For | cst.While
    start_order: int
    end_order: int
    targets: frozenset[str]  # names the loop header binds (`for i, s in ...`)


@dataclasses.dataclass
class HostEvent:
    kind: str  # tape | region | launch | method | call | assign | grad
    node: cst.CSTNode
    statement: cst.CSTNode
    order: int
    region: TapeRegion | None
    loops: tuple[cst.CSTNode, ...]
    name: str = ""  # method name, qualified Warp function, or assigned target code
    receiver: str = ""  # for methods: the receiver's code ("tape", "x.grad"); for grad: the array's code
    value: cst.BaseExpression | None = None
    key: str = ""  # assign: the target's new key; method / grad: the receiver's key; tape / region: the tape's
    reads: tuple[ArrayRef, ...] = ()  # arrays whose device data this event reads (launches: by their kernel)
    writes: tuple[ArrayRef, ...] = ()  # arrays whose device data this event overwrites or accumulates into
    pulls: frozenset[str] = frozenset()  # keys of arrays whose host copy (.numpy(), .list()) flows in here
    allocation: Allocation | None = None
    branch: tuple[tuple[int, int], ...] = ()  # (id of an `if`, arm) pairs enclosing the event
    launch: Launch | None = None
    arguments: tuple[ArrayRef, ...] = ()  # method / call: its plain-name arguments (a dict's keys too), keyed
    owner: str = ""  # assign to `obj.attr`: the key of `obj` before the assignment
    # helper calls (kind "helper": `f(...)` of a function of this file; or a `self.m(...)` method event):
    helper: str = ""  # the helper's name
    helper_args: tuple[tuple[str, ArrayRef], ...] = ()  # (parameter name, or "#position", argument)
    helper_reads: tuple[ArrayRef, ...] = ()  # arrays the helper reads outside its own tapes, caller's keys
    helper_writes: tuple[ArrayRef, ...] = ()  # arrays the helper writes outside its own tapes, caller's keys
    helper_launches: int = 0  # launches the helper makes outside its own tapes (recorded on a caller's tape)
    helper_node: cst.FunctionDef | None = dataclasses.field(default=None, repr=False)

    def exclusive_with(self, other: HostEvent) -> bool:
        """Whether the two events sit in different arms of one `if` (never both run in one pass)."""
        arms = dict(self.branch)
        return any(node in arms and arms[node] != arm for node, arm in other.branch)

    def argument(self, position: int | None, keyword: str) -> cst.BaseExpression | None:
        """A call's argument by position (None: keyword only) or keyword (method and call events)."""
        return _argument(self.node, position, keyword) if isinstance(self.node, cst.Call) else None

    @property
    def line_node(self) -> cst.CSTNode:
        """What a report on this event underlines: the call, or the statement for assignments."""
        return self.node


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

    def exclusive_with(self, other: HostEvent) -> bool:
        """Whether the two events sit in different arms of one `if` (never both run in one pass)."""
        arms = dict(self.branch)
        return any(node in arms and arms[node] != arm for node, arm in other.branch)


@dataclasses.dataclass
class Launch:
    event: HostEvent
    kernel_code: str
    kernels: list[FunctionModel]  # the kernel definitions this launch can name (same file)
    dim: cst.BaseExpression | None
    inputs: list[str]  # argument codes, in kernel parameter order
    outputs: list[str]
    keywords: dict[str, cst.BaseExpression]
    refs: list[ArrayRef] = dataclasses.field(default_factory=list)  # inputs + outputs, keyed, with parameters
    input_count: int = 0
    # arrays in the fields of struct arguments the kernel reads or writes: param "s.q", key of `state.q`
    struct_refs: list[ArrayRef] = dataclasses.field(default_factory=list)
    struct_effects: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # "s.q" -> effects

    @property
    def record_tape(self) -> bool | None:
        value = self.keywords.get("record_tape")
        if value is None:
            return True
        if isinstance(value, cst.Name) and value.value in ("True", "False"):
            return value.value == "True"
        return None

    @property
    def kernel(self) -> FunctionModel | None:
        """The kernel when the launch names exactly one definition of this file."""
        return self.kernels[0] if len(self.kernels) == 1 else None

    @property
    def recorded(self) -> bool:
        """Recorded on the active tape: inside a region and not `record_tape=False`."""
        return self.event.region is not None and self.record_tape is not False

    def param_dtype(self, ref: ArrayRef) -> str | None:
        """The dtype of the kernel array parameter ``ref`` binds, when known."""
        kernel = self.kernel
        if kernel is None or not ref.param:
            return None
        param = kernel.arrays.get(ref.param)
        return param.type.dtype if param is not None else None

    def arguments(self) -> dict[str, str]:
        """Kernel parameter -> the argument's code, where the kernel is known."""
        if not self.kernels:
            return {}
        names = [p.name for p in self.kernels[0].params]
        return dict(zip(names, self.inputs + self.outputs))

    def reads(self, convention: bool = False) -> list[ArrayRef]:
        """The array arguments the kernel reads. Unknown kernel: `inputs=` with ``convention``, else none."""
        if self.kernel is None:
            return list(self.refs[: self.input_count]) if convention else []
        return [r for r in self.refs if "read" in self._effects().get(r.param, ())] + [
            r for r in self.struct_refs if "read" in self.struct_effects.get(r.param, ())]

    def writes(self, convention: bool = False) -> list[ArrayRef]:
        """The array arguments the kernel writes or accumulates into (``convention``: `outputs=`)."""
        if self.kernel is None:
            return list(self.refs[self.input_count:]) if convention else []
        return [r for r in self.refs if self._effects().get(r.param, set()) & {"write", "accumulate"}] + [
            r for r in self.struct_refs if self.struct_effects.get(r.param, set()) & {"write", "accumulate"}]

    def stores(self) -> list[ArrayRef]:
        """The array arguments the kernel stores into (``y[i] = ...``), not only accumulates into."""
        if self.kernel is None:
            return []
        return [r for r in self.refs if "write" in self._effects().get(r.param, ())] + [
            r for r in self.struct_refs if "write" in self.struct_effects.get(r.param, ())]

    def _effects(self) -> dict[str, set[str]]:
        kernel = self.kernel
        if kernel is None:
            return {}
        cached = getattr(self, "_effects_cache", None)
        if cached is None:
            cached = kernel.effects()
            self._effects_cache = cached
        return cached


@dataclasses.dataclass
class HostScope:
    node: cst.CSTNode  # the Module or the FunctionDef
    events: list[HostEvent]
    regions: list[TapeRegion]
    launches: list[Launch]
    loops: dict[int, LoopSpan] = dataclasses.field(default_factory=dict)  # id(loop node) -> its span

    @property
    def name(self) -> str:
        """The function's name ("" for the module's own statements)."""
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else ""

    def parameter_effects(self) -> dict[str, set[str]]:
        """Parameter -> "read"/"write": what this function's launches, copies and methods do to the
        arrays passed to it (helpers it calls included; `params.x` counts as `params`)."""
        if not isinstance(self.node, cst.FunctionDef):
            return {}
        params = {p.name.value for p in self.node.params.params}
        effects: dict[str, set[str]] = {}
        reads, writes, _ = _helper_summary(self, own_tapes=True)
        for refs, effect in ((reads, "read"), (writes, "write")):
            for ref in refs:
                match = _HEAD.match(ref.key)
                root = match.group(0).split(".")[0] if match else ""
                if root in params and "@" not in ref.key.split(".")[0]:
                    effects.setdefault(root, set()).add(effect)
        return effects

    def events_in(self, region: TapeRegion) -> Iterator[HostEvent]:
        return (e for e in self.events if region.start_order <= e.order <= region.end_order)

    def loop(self, node: cst.CSTNode) -> LoopSpan:
        return self.loops[id(node)]

    def events_between(self, start: int, end: int) -> Iterator[HostEvent]:
        """Events with start <= order <= end."""
        return (e for e in self.events if start <= e.order <= end)

    def created_in(self, key: str, start: int, end: int) -> bool:
        """Whether any part of ``key`` was bound by an assignment with start <= order <= end."""
        return any(start <= int(order) <= end for order in _KEY_ORDER.findall(key))

    def tape_keys(self) -> set[str]:
        return {r.key for r in self.regions if r.key} | {e.key for e in self.events if e.kind == "tape"}

    def is_tape(self, event: HostEvent) -> bool:
        """Whether a method event's receiver is a tape: made or recorded on here, or named like one."""
        if not event.key:
            return False
        return event.key in self.tape_keys() or bool(_TAPE_NAME.search(event.receiver.rsplit(".", 1)[-1].lower()))

    def backwards(self) -> list[HostEvent]:
        """The `tape.backward(...)` calls of this scope, on receivers known to be tapes."""
        return [e for e in self.events if e.kind == "method" and e.name == "backward" and self.is_tape(e)]


_TAPE_NAME = re.compile(r"(?:^|_)tape\d*(?:$|_)")
_KEY_ORDER = re.compile(r"@(\d+)")
_HEAD = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*")


def build_host_scopes(module: cst.Module, names: WarpNames, kernels: KernelIndex) -> list[HostScope]:
    warp_functions = {id(f.node) for f in kernels.functions}
    functions = {node.name.value: node for node in _top_functions(module.body) if id(node) not in warp_functions}
    scopes = [_HostScanner(module, names, kernels, functions).scan(module.body)]
    stack: list[tuple[cst.CSTNode, cst.ClassDef | None]] = [(node, None) for node in module.body]
    while stack:
        node, owner = stack.pop()
        if isinstance(node, cst.FunctionDef):
            if id(node) in warp_functions:
                continue
            methods = {}
            if owner is not None:
                methods = {m.name.value: m for m in _top_functions(owner.body.body) if id(m) not in warp_functions}
            scopes.append(_HostScanner(node, names, kernels, functions, methods).scan(node.body.body if isinstance(
                node.body, cst.IndentedBlock) else node.body.body))
            owner = None  # a class nested in a function starts over; a function's own body has no `self` class
        if isinstance(node, cst.ClassDef):
            owner = node
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With, cst.Try,
                             cst.IndentedBlock, cst.Else, cst.ExceptHandler, cst.Finally)):
            stack.extend((child, owner) for child in children(node))
    scopes = [scope for scope in scopes if scope.events]
    _resolve_helpers(scopes)
    return scopes


def _top_functions(body) -> list[cst.FunctionDef]:
    """The functions a block defines at its own level (through `if`/`try` at that level too)."""
    found = []
    for statement in body:
        if isinstance(statement, cst.FunctionDef):
            found.append(statement)
        elif isinstance(statement, (cst.If, cst.Try)):
            blocks = [statement.body]
            if isinstance(statement, cst.If) and statement.orelse is not None and not isinstance(statement.orelse, cst.If):
                blocks.append(statement.orelse.body)
            if isinstance(statement, cst.Try):
                blocks += [h.body for h in statement.handlers]
            for block in blocks:
                found += _top_functions(getattr(block, "body", ()))
    return found


def _resolve_helpers(scopes: list[HostScope], rounds: int = 3) -> None:
    """Fill the helper_* facts of helper-call events from the helpers' own scopes (helpers of helpers too)."""
    by_node = {id(scope.node): scope for scope in scopes if isinstance(scope.node, cst.FunctionDef)}
    calls = [(scope, e) for scope in scopes for e in scope.events if e.helper]
    if not calls:
        return
    for _ in range(rounds):
        changed = False
        summaries: dict[int, tuple[list[ArrayRef], list[ArrayRef], int]] = {}
        for _scope, event in calls:
            target = by_node.get(id(event.helper_node))
            if target is None:
                continue
            if id(target.node) not in summaries:
                summaries[id(target.node)] = _helper_summary(target)
            reads, writes, launches = summaries[id(target.node)]
            params = [p.name.value for p in target.node.params.params]
            mapped_reads = _map_refs(reads, params, event)
            mapped_writes = _map_refs(writes, params, event)
            if (mapped_reads, mapped_writes, launches) != (event.helper_reads, event.helper_writes,
                                                           event.helper_launches):
                event.helper_reads, event.helper_writes, event.helper_launches = mapped_reads, mapped_writes, launches
                changed = True
        if not changed:
            return


def _helper_summary(scope: HostScope, own_tapes: bool = False) -> tuple[list[ArrayRef], list[ArrayRef], int]:
    reads: list[ArrayRef] = []
    writes: list[ArrayRef] = []
    launches = 0
    for event in scope.events:
        if event.region is not None and not own_tapes:
            continue  # recorded on the helper's own tape
        if event.launch is not None:
            reads += event.launch.reads(convention=True)
            writes += event.launch.writes(convention=True)
            launches += event.launch.record_tape is not False
        else:
            reads += event.reads
            writes += event.writes
        reads += event.helper_reads
        writes += event.helper_writes
        launches += event.helper_launches
    return reads, writes, launches


def _map_refs(refs: list[ArrayRef], params: list[str], event: HostEvent) -> tuple[ArrayRef, ...]:
    """The helper's refs rooted at its parameters, as the caller's arrays."""
    arguments = dict(event.helper_args)
    mapped: list[ArrayRef] = []
    seen: set[str] = set()
    for ref in refs:
        match = _HEAD.match(ref.key)
        if match is None or "@" in ref.key.split(".")[0]:
            continue
        root = match.group(0).split(".")[0]
        if root not in params:
            continue
        position = params.index(root)
        argument = arguments.get(root) or arguments.get(f"#{position}")
        if argument is None:
            continue
        key = argument.key + ref.key[len(root):]
        if key not in seen:
            seen.add(key)
            mapped.append(ArrayRef(argument.code + ref.code[len(root):] if ref.code.startswith(root) else
                                   argument.code, key, ref.param))
    return tuple(mapped)


class _HostScanner:
    def __init__(self, scope_node, names: WarpNames, kernels: KernelIndex,
                 functions: dict[str, cst.FunctionDef] | None = None, methods: dict[str, cst.FunctionDef] | None = None):
        self.scope_node = scope_node
        self.functions = functions or {}  # module-level host functions by name
        self.methods = methods or {}  # the enclosing class's methods, for `self.m(...)`
        self.names = names
        self.kernels = kernels
        self.order = 0
        self.regions: list[TapeRegion] = []
        self.region_stack: list[TapeRegion] = []
        self.loops: list[cst.CSTNode] = []
        self.loop_spans: dict[int, LoopSpan] = {}
        self.branch: list[tuple[int, int]] = []
        self.events: list[HostEvent] = []
        self.launches: list[Launch] = []
        self.statement: cst.CSTNode | None = None
        self.shadowed: set[str] = set()
        self.aliases: dict[str, str] = {}  # dotted code -> key
        self.host_values: dict[str, frozenset[str]] = {}  # local name -> keys of arrays its host data came from
        self.lists: dict[str, cst.BaseExpression] = {}  # local name -> the list/tuple literal bound to it
        self.kernel_aliases: dict[str, str] = {}  # `k = integrate` -> "integrate"
        self.host_copies = False  # whether the scope has called .numpy()/.list() yet (skips pulls_of)
        self.receiver_name = ""  # `self` in a method: `self.m(...)` calls a helper of the class
        if isinstance(scope_node, cst.FunctionDef):
            self.shadowed = {p.name.value for p in scope_node.params.params}
            if self.methods and scope_node.params.params:
                self.receiver_name = scope_node.params.params[0].name.value

    def scan(self, body) -> HostScope:
        for statement in body:
            self.visit_statement(statement)
        return HostScope(self.scope_node, self.events, self.regions, self.launches, self.loop_spans)

    def event(self, kind, node, name="", receiver="", value=None, **fields) -> HostEvent:
        self.order += 1
        event = HostEvent(kind, node, self.statement or node, self.order,
                          self.region_stack[-1] if self.region_stack else None, tuple(self.loops), name, receiver,
                          value, branch=tuple(self.branch), **fields)
        self.events.append(event)
        return event

    def qualify(self, node) -> str | None:
        return self.names.qualify(node, self.shadowed)

    # -- array keys -----------------------------------------------------------------------
    def key(self, code: str) -> str:
        """The key of the array ``code`` names now: aliases followed, rebindings distinguished."""
        match = _HEAD.match(code)
        if match is None:
            return code
        dotted = match.group(0)
        parts = dotted.split(".")
        for length in range(len(parts), 0, -1):
            prefix = ".".join(parts[:length])
            if prefix in self.aliases:
                return self.aliases[prefix] + code[len(prefix):]
        return code

    def key_of(self, node: cst.BaseExpression) -> str:
        return self.key(code_of(node))

    def bind(self, target: cst.BaseExpression, alias: str | None) -> str:
        """Bind ``target`` to the array ``alias`` names (a key) or to a fresh value; return its key."""
        code = code_of(target)
        if _HEAD.fullmatch(code) is None:
            return self.key(code)  # x[i] = ..., f(x).y = ...: no new binding
        for name in [n for n in self.aliases if n.startswith(code + ".")]:
            del self.aliases[name]
        new = alias if alias is not None else f"{code}@{self.order}"
        self.aliases[code] = new
        return new

    def aliased(self, value: cst.BaseExpression | None) -> str | None:
        """The key of an array a plain expression names (`state.q`, `states[i]`), else None."""
        if value is None:
            return None
        node = value
        while isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        if isinstance(node, cst.Name) and not any(isinstance(n, cst.Call) for n in _walk(value)):
            return self.key_of(value)
        return None

    # -- statements -----------------------------------------------------------------------
    def visit_block(self, body) -> None:
        for statement in getattr(body, "body", ()):
            if isinstance(statement, cst.BaseSmallStatement):
                self.visit_small(statement)
            else:
                self.visit_statement(statement)

    def visit_statement(self, statement) -> None:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self.visit_small(small)
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            return  # their own scopes
        elif isinstance(statement, cst.With):
            self.visit_with(statement)
        elif isinstance(statement, (cst.For, cst.While)):
            self.statement = statement
            self.visit_expression(statement.iter if isinstance(statement, cst.For) else statement.test)
            targets: set[str] = set()
            if isinstance(statement, cst.For):
                targets = {n.value for n in _walk(statement.target) if isinstance(n, cst.Name)}
                for name in targets:
                    self.bind(cst.Name(name), None)
                    self.host_values.pop(name, None)
            span = LoopSpan(statement, self.order + 1, 0, frozenset(targets))
            self.loop_spans[id(statement)] = span
            self.loops.append(statement)
            self.visit_block(statement.body)
            self.loops.pop()
            span.end_order = self.order
            if statement.orelse:
                self.visit_block(statement.orelse.body)
        elif isinstance(statement, cst.If):
            self.statement = statement
            self.visit_expression(statement.test)
            self.branch.append((id(statement), 0))
            self.visit_block(statement.body)
            self.branch[-1] = (id(statement), 1)
            if isinstance(statement.orelse, cst.If):
                self.visit_statement(statement.orelse)
            elif statement.orelse is not None:
                self.visit_block(statement.orelse.body)
            self.branch.pop()
        elif isinstance(statement, cst.Try):
            self.visit_block(statement.body)
            for handler in statement.handlers:
                self.visit_block(handler.body)
            if statement.orelse:
                self.visit_block(statement.orelse.body)
            if statement.finalbody:
                self.visit_block(statement.finalbody.body)

    def visit_with(self, statement: cst.With) -> None:
        self.statement = statement
        opened: list[TapeRegion] = []
        for item in statement.items:
            self.visit_expression(item.item)
            tape = self.tape_of(item)
            if tape is not None:
                key = ""
                if tape:
                    key = self.bind(item.asname.name, None) if item.asname is not None else self.key(tape)
                self.event("region", statement, name=tape, key=key)
                region = TapeRegion(tape, statement, self.order + 1,
                                    parent=self.region_stack[-1] if self.region_stack else None, key=key)
                self.regions.append(region)
                self.region_stack.append(region)
                opened.append(region)
        self.visit_block(statement.body)
        for region in reversed(opened):
            region.end_order = self.order
            self.region_stack.pop()

    def tape_of(self, item: cst.WithItem) -> str | None:
        expression = item.item
        if isinstance(expression, cst.Call) and self.qualify(expression.func) in TAPE_CLASSES:
            if item.asname is not None:
                return code_of(item.asname.name)
            return ""
        code = dotted_name(expression)
        if code is None:
            return None
        if code in self.tapes() or _TAPE_NAME.search(code.rsplit(".", 1)[-1].lower()):
            # A tape made here, or one passed in or kept on an object under a tape-like name.
            return code
        return None

    def tapes(self) -> set[str]:
        return {e.name for e in self.events if e.kind == "tape"}

    def visit_small(self, small) -> None:
        self.statement = small
        if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            value = small.value
            pulls = frozenset()
            if value is not None:
                self.visit_expression(value)
                pulls = self.pulls_of(value)
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            for target in targets:
                if isinstance(small, cst.AugAssign):
                    self.event("assign", small, name=code_of(target), value=value, key=self.key_of(target),
                               pulls=pulls)
                    continue
                self.assign(small, target, value, pulls)
        elif isinstance(small, (cst.Expr, cst.Return)):
            if small.value is not None:
                self.visit_expression(small.value)
        elif isinstance(small, cst.Assert):  # `assert gradcheck(...)`
            self.visit_expression(small.test)

    def assign(self, small, target, value, pulls) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = [e.value for e in target.elements]
            values = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) and len(
                value.elements) == len(elements) else [None] * len(elements)
            aliases = [self.aliased(v) for v in values]  # evaluated before any target is bound: a, b = b, a
            for element, element_value, alias in zip(elements, values, aliases):
                element_pulls = self.pulls_of(element_value) if element_value is not None else pulls
                self.bind_event(small, element, element_value, alias, element_pulls)
            return
        self.bind_event(small, target, value, self.aliased(value), pulls)

    def bind_event(self, small, target, value, alias, pulls) -> None:
        code = code_of(target)
        if isinstance(value, cst.Call) and self.qualify(value.func) in TAPE_CLASSES:
            self.event("tape", small, name=code, value=value, key=self.bind(target, None))
            return
        allocation = self.allocation(value) if isinstance(value, cst.Call) else None
        owner = self.key_of(target.value) if isinstance(target, cst.Attribute) else ""
        key = self.bind(target, alias)
        if isinstance(target, cst.Name):
            self.shadowed.add(target.value)
            device = allocation is not None or (isinstance(value, cst.Call) and (self.qualify(value.func) or "")
                                                    .startswith("warp."))
            if pulls and not device:  # a host value; an array built from host data lives on the device
                self.host_values[target.value] = pulls
            else:
                self.host_values.pop(target.value, None)
            if isinstance(value, (cst.List, cst.Tuple)):
                self.lists[target.value] = value
            else:
                self.lists.pop(target.value, None)
            if isinstance(value, cst.Name) and self.kernels.by_name(self.kernel_aliases.get(value.value, value.value)):
                self.kernel_aliases[target.value] = self.kernel_aliases.get(value.value, value.value)
            else:
                self.kernel_aliases.pop(target.value, None)
        self.event("assign", small, name=code, value=value, key=key, pulls=pulls, allocation=allocation, owner=owner)

    def allocation(self, call: cst.Call) -> Allocation | None:
        function = self.qualify(call.func)
        if function not in FRESH_ALLOCATIONS and function not in INHERITING_ALLOCATIONS:
            return None
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        value = keywords.get("requires_grad")
        requires_grad: bool | None = False
        if value is not None:
            requires_grad = value.value == "True" if isinstance(value, cst.Name) and value.value in (
                "True", "False") else None
        source = None
        if function in INHERITING_ALLOCATIONS:
            first = call.args[0].value if call.args and call.args[0].keyword is None else keywords.get(
                "a", keywords.get("src"))
            if first is not None:
                source = ArrayRef(code_of(first), self.key_of(first))
            if value is None:
                requires_grad = None
        dtype = keywords.get("dtype")
        if dtype is None and function in ("warp.zeros", "warp.empty", "warp.ones", "warp.full") and len(
                call.args) > 1 and call.args[1].keyword is None and function != "warp.full":
            dtype = call.args[1].value
        retain = keywords.get("retain_grad")
        return Allocation(function, requires_grad, value is not None, source,
                          code_of(dtype) if dtype is not None else "",
                          retain_grad=isinstance(retain, cst.Name) and retain.value == "True")

    def pulls_of(self, expression: cst.BaseExpression | None) -> frozenset[str]:
        """Keys of the arrays whose host copies flow into ``expression``."""
        if expression is None or not (self.host_copies or self.host_values):
            return frozenset()  # nothing in this statement left the device
        found: set[str] = set()
        for node in _walk(expression):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                    node.func.attr.value in HOST_COPY_METHODS and not node.args:
                found.add(self.key_of(node.func.value))
            elif isinstance(node, cst.Name) and node.value in self.host_values:
                found |= self.host_values[node.value]
        return frozenset(found)

    def visit_expression(self, expression) -> None:
        calls: list[cst.Call] = []
        grads: list[cst.Attribute] = []
        stack = [expression]
        # Exact type checks: LibCST's node classes are ABCs, whose isinstance is several times slower,
        # and this loop sees every node of every host statement.
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is cst.Lambda or kind is cst.FunctionDef:
                continue
            if kind is cst.Call:
                calls.append(node)
                if type(node.func) is cst.Attribute and node.func.attr.value in HOST_COPY_METHODS:
                    self.host_copies = True
            elif kind is cst.Attribute:
                if node.attr.value == "grad":
                    grads.append(node.value)
            elif kind is cst.Subscript and type(node.value) is cst.Attribute and \
                    node.value.attr.value == "gradients" and len(node.slice) == 1 and \
                    type(node.slice[0].slice) is cst.Index:
                grads.append(node.slice[0].slice.value)  # tape.gradients[x]
            elif kind is cst.Name or kind is cst.Integer or kind is cst.Float or kind is cst.SimpleString:
                continue  # leaves
            stack.extend(children(node))
        for array in grads:
            self.event("grad", array, receiver=code_of(array), key=self.key_of(array))
        # Inner calls run first: `wp.launch(k, n, inputs=[wp.clone(x)])` clones before launching.
        for call in reversed(calls):
            self.visit_call(call)

    def visit_call(self, call: cst.Call) -> None:
        qualified = self.qualify(call.func)
        if qualified in LAUNCH_FUNCTIONS:
            self.launches.append(self.launch(call, qualified))
        elif qualified:
            reads: tuple[ArrayRef, ...] = ()
            writes: tuple[ArrayRef, ...] = ()
            if qualified == "warp.copy":
                dest = _argument(call, 0, "dest")
                src = _argument(call, 1, "src")
                writes = (ArrayRef(code_of(dest), self.key_of(dest)),) if dest is not None else ()
                reads = (ArrayRef(code_of(src), self.key_of(src)),) if src is not None else ()
            elif qualified == "warp.clone":
                src = _argument(call, 0, "src")
                reads = (ArrayRef(code_of(src), self.key_of(src)),) if src is not None else ()
            elif qualified.startswith(UTILITY_MODULES) and qualified.rsplit(".", 1)[1] in UTILITY_OPS:
                effects = {"read": [], "write": []}
                for param, position, effect in UTILITY_OPS[qualified.rsplit(".", 1)[1]]:
                    node = _argument(call, position, param)
                    if node is not None and self.aliased(node) is not None:
                        effects[effect].append(ArrayRef(code_of(node), self.key_of(node), param))
                reads, writes = tuple(effects["read"]), tuple(effects["write"])
            self.event("call", call, name=qualified, reads=reads, writes=writes,
                       pulls=frozenset().union(*(self.pulls_of(a.value) for a in call.args)),
                       arguments=self.argument_refs(call))
        elif isinstance(call.func, cst.Attribute):
            receiver = code_of(call.func.value)
            key = self.key(receiver)
            method = call.func.attr.value
            writes = (ArrayRef(receiver, key),) if method in WRITING_METHODS else ()
            helper = {}
            if self.receiver_name and receiver == self.receiver_name and method in self.methods:
                # `self.m(...)`: the method's first parameter is the receiver
                helper = {"helper": method, "helper_node": self.methods[method],
                          "helper_args": (("#0", ArrayRef(receiver, key)),) + self.helper_args(call, 1)}
            self.event("method", call, name=method, receiver=receiver, key=key, writes=writes,
                       pulls=frozenset().union(*(self.pulls_of(a.value) for a in call.args)),
                       arguments=self.argument_refs(call), **helper)
        elif isinstance(call.func, cst.Name) and call.func.value in self.functions and \
                call.func.value not in self.shadowed:
            name = call.func.value
            self.event("helper", call, name=name, helper=name, helper_node=self.functions[name],
                       helper_args=self.helper_args(call, 0), arguments=self.argument_refs(call),
                       pulls=frozenset().union(*(self.pulls_of(a.value) for a in call.args)))

    def launch(self, call: cst.Call, qualified: str) -> Launch:
        keywords: dict[str, cst.BaseExpression] = {}
        for position, argument in enumerate(call.args):
            if argument.keyword is not None:
                keywords[argument.keyword.value] = argument.value
            elif position < len(LAUNCH_PARAMETERS) and argument.star == "":
                keywords[LAUNCH_PARAMETERS[position]] = argument.value
        kernel = keywords.get("kernel")
        kernel_code = code_of(kernel) if kernel is not None else ""
        models: list[FunctionModel] = []
        if isinstance(kernel, cst.Name):
            models = self.kernels.by_name(self.kernel_aliases.get(kernel.value, kernel.value))
        models = [m for m in models if m.kind == "kernel"]
        inputs_node = self.literal_list(keywords.get("inputs"))
        outputs_node = self.literal_list(keywords.get("outputs"))
        inputs = _element_nodes(inputs_node)
        outputs = _element_nodes(outputs_node)
        params = [p.name for p in models[0].params] if len(models) == 1 else []
        refs = [ArrayRef(code_of(node), self.key_of(node), params[i] if i < len(params) else "")
                for i, node in enumerate(inputs + outputs)]
        pulls = frozenset().union(*(self.pulls_of(node) for node in inputs + outputs))
        event = self.event("launch", call, name=qualified, pulls=pulls)
        launch = Launch(event, kernel_code, models, keywords.get("dim"), [code_of(n) for n in inputs],
                        [code_of(n) for n in outputs], keywords, refs, len(inputs))
        if len(models) == 1 and self.kernels.structs:
            effects = struct_field_effects(models[0], self.kernels)
            for ref in refs:
                for field in sorted(f for f in effects if f.split(".", 1)[0] == ref.param):
                    if _HEAD.fullmatch(ref.code):
                        launch.struct_refs.append(ArrayRef(f"{ref.code}.{field.split('.', 1)[1]}",
                                                           self.key(f"{ref.code}.{field.split('.', 1)[1]}"), field))
            launch.struct_effects = effects
        event.launch = launch
        event.reads = tuple(launch.reads())
        event.writes = tuple(launch.writes())
        return launch

    def argument_refs(self, call: cst.Call) -> tuple[ArrayRef, ...]:
        refs = []
        for argument in call.args:
            values = [argument.value]
            if isinstance(argument.value, cst.Dict):
                values = [e.key for e in argument.value.elements if isinstance(e, cst.DictElement)]
            for value in values:
                if self.aliased(value) is not None:
                    refs.append(ArrayRef(code_of(value), self.key_of(value), argument.keyword.value
                                         if argument.keyword is not None else ""))
        return tuple(refs)

    def helper_args(self, call: cst.Call, offset: int) -> tuple[tuple[str, ArrayRef], ...]:
        """A helper call's array-like arguments: ("#position" or the keyword, the argument keyed)."""
        found = []
        position = offset
        for argument in call.args:
            if argument.star:
                break  # positions after `*args` are unknown
            name = argument.keyword.value if argument.keyword is not None else f"#{position}"
            if argument.keyword is None:
                position += 1
            if self.aliased(argument.value) is not None:
                found.append((name, ArrayRef(code_of(argument.value), self.key_of(argument.value), name)))
        return tuple(found)

    def literal_list(self, node: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """`inputs=[a, b]`, or `inputs=args` where `args = [a, b]` earlier in the scope."""
        if isinstance(node, cst.Name) and node.value in self.lists:
            return self.lists[node.value]
        return node


def _argument(call: cst.Call, position: int | None, keyword: str) -> cst.BaseExpression | None:
    for argument in call.args:
        if argument.keyword is not None and argument.keyword.value == keyword:
            return argument.value
    if position is None:
        return None
    positional = [a for a in call.args if a.keyword is None and a.star == ""]
    return positional[position].value if position < len(positional) else None


def _element_nodes(node: cst.BaseExpression | None) -> list[cst.BaseExpression]:
    if isinstance(node, (cst.List, cst.Tuple)):
        nodes = []
        for element in node.elements:
            if isinstance(element, cst.StarredElement):
                break  # `*rest`: the parameters of what follows are unknown
            nodes.append(element.value)
        return nodes
    return []


def _element_codes(node: cst.BaseExpression | None) -> list[str]:
    return [code_of(n) for n in _element_nodes(node)]


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if not isinstance(current, (cst.Lambda, cst.BaseComp)):
            stack.extend(children(current))


ATOMIC_FUNCTIONS = {"atomic_add", "atomic_sub", "atomic_min", "atomic_max"}


def struct_field_effects(kernel: FunctionModel, index: KernelIndex) -> dict[str, set[str]]:
    """"param.field" -> the accesses a kernel makes to the array in a struct parameter's field.

    `s.q[i]` read, `s.q[i] = v` write, `s.q[i] += v` / `wp.atomic_add(s.q, ...)` accumulate. The kernel
    model tracks array parameters only; Warp's own overwrite tracking does not look into structs.
    """
    cached = getattr(kernel, "_struct_effects_cache", None)
    if cached is not None:
        return cached
    params = {p.name: p.type.dtype for p in kernel.params if p.type.kind == "struct"}
    fields = {name: {f for f, t in index.structs[dtype].fields.items() if t.is_array}
              for name, dtype in params.items() if dtype in index.structs}
    effects: dict[str, set[str]] = {}

    def field_of(node) -> str | None:
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and \
                node.attr.value in fields.get(node.value.value, ()):
            return f"{node.value.value}.{node.attr.value}"
        return None

    if fields:
        stored: set[int] = set()
        for node in _walk(kernel.node.body):
            if isinstance(node, (cst.Assign, cst.AugAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, cst.Subscript) and field_of(target.value):
                        effect = "write" if isinstance(node, cst.Assign) else "accumulate"
                        effects.setdefault(field_of(target.value), set()).add(effect)
                        stored.add(id(target.value))
            elif isinstance(node, cst.Call) and isinstance(node.func, (cst.Attribute, cst.Name)) and node.args:
                name = node.func.attr.value if isinstance(node.func, cst.Attribute) else node.func.value
                if name in ATOMIC_FUNCTIONS and field_of(node.args[0].value):
                    effects.setdefault(field_of(node.args[0].value), set()).add("accumulate")
                    stored.add(id(node.args[0].value))
        for node in _walk(kernel.node.body):
            if isinstance(node, cst.Subscript) and id(node.value) not in stored and field_of(node.value):
                effects.setdefault(field_of(node.value), set()).add("read")
    kernel._struct_effects_cache = effects
    return effects
