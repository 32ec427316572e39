"""The host model: tapes, the regions that record on them, and what happens inside, in order.

Each host scope (the module's own statements, every function or method that is not a Warp
function) becomes a list of events in program order: tape creations, recording regions, launches
(with the kernel they name and their argument lists), method calls on arrays and tapes
(``backward``, ``zero``, ``zero_``, ``fill_``, ``assign``, ``numpy``), calls of Warp functions
(``wp.copy``, ``wp.clone``, allocations), and assignments. Every event knows the tape region and
the loops it sits in. Host rules read these lists; none walks the tree itself.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import libcst as cst

from warp_lint.cst_walk import children
from warp_lint.kernels import FunctionModel, KernelIndex
from warp_lint.names import WarpNames, dotted_name
from warp_lint.warp_types import code_of

LAUNCH_FUNCTIONS = {"warp.launch", "warp.launch_tiled"}
LAUNCH_PARAMETERS = ("kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device", "stream",
                     "adjoint", "record_tape")
TAPE_CLASSES = {"warp.Tape", "warp.tape.Tape"}


@dataclasses.dataclass
class TapeRegion:
    tape: str  # the tape expression's code: "tape", "self.tape"; "" for an anonymous `with wp.Tape():`
    node: cst.With
    start_order: int
    end_order: int = 0
    parent: TapeRegion | None = None


@dataclasses.dataclass
class HostEvent:
    kind: str  # tape | region | launch | method | call | assign
    node: cst.CSTNode
    statement: cst.CSTNode
    order: int
    region: TapeRegion | None
    loops: tuple[cst.CSTNode, ...]
    name: str = ""  # method name, qualified Warp function, or assigned target code
    receiver: str = ""  # for methods: the receiver's code ("tape", "x.grad")
    value: cst.BaseExpression | None = None


@dataclasses.dataclass
class Launch:
    event: HostEvent
    kernel_code: str
    kernels: list[FunctionModel]  # the kernel definitions this launch can name (same file)
    dim: cst.BaseExpression | None
    inputs: list[str]  # argument codes, in kernel parameter order
    outputs: list[str]
    keywords: dict[str, cst.BaseExpression]

    @property
    def record_tape(self) -> bool | None:
        value = self.keywords.get("record_tape")
        if value is None:
            return True
        if isinstance(value, cst.Name) and value.value in ("True", "False"):
            return value.value == "True"
        return None

    def arguments(self) -> dict[str, str]:
        """Kernel parameter -> the argument's code, where the kernel is known."""
        if not self.kernels:
            return {}
        names = [p.name for p in self.kernels[0].params]
        return dict(zip(names, self.inputs + self.outputs))


@dataclasses.dataclass
class HostScope:
    node: cst.CSTNode  # the Module or the FunctionDef
    events: list[HostEvent]
    regions: list[TapeRegion]
    launches: list[Launch]

    def events_in(self, region: TapeRegion) -> Iterator[HostEvent]:
        return (e for e in self.events if region.start_order <= e.order <= region.end_order)


def build_host_scopes(module: cst.Module, names: WarpNames, kernels: KernelIndex) -> list[HostScope]:
    warp_functions = {id(f.node) for f in kernels.functions}
    scopes = [_HostScanner(module, names, kernels).scan(module.body)]
    stack: list[cst.CSTNode] = list(module.body)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.FunctionDef):
            if id(node) in warp_functions:
                continue
            scopes.append(_HostScanner(node, names, kernels).scan(node.body.body if isinstance(
                node.body, cst.IndentedBlock) else node.body.body))
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With, cst.Try,
                             cst.IndentedBlock, cst.Else, cst.ExceptHandler, cst.Finally)):
            stack.extend(children(node))
    return [scope for scope in scopes if scope.events]


class _HostScanner:
    def __init__(self, scope_node, names: WarpNames, kernels: KernelIndex):
        self.scope_node = scope_node
        self.names = names
        self.kernels = kernels
        self.order = 0
        self.regions: list[TapeRegion] = []
        self.region_stack: list[TapeRegion] = []
        self.loops: list[cst.CSTNode] = []
        self.events: list[HostEvent] = []
        self.launches: list[Launch] = []
        self.statement: cst.CSTNode | None = None
        self.shadowed: set[str] = set()
        if isinstance(scope_node, cst.FunctionDef):
            self.shadowed = {p.name.value for p in scope_node.params.params}

    def scan(self, body) -> HostScope:
        for statement in body:
            self.visit_statement(statement)
        return HostScope(self.scope_node, self.events, self.regions, self.launches)

    def event(self, kind, node, name="", receiver="", value=None) -> HostEvent:
        self.order += 1
        event = HostEvent(kind, node, self.statement or node, self.order,
                          self.region_stack[-1] if self.region_stack else None, tuple(self.loops), name, receiver, value)
        self.events.append(event)
        return event

    def qualify(self, node) -> str | None:
        return self.names.qualify(node, self.shadowed)

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
            self.loops.append(statement)
            self.visit_block(statement.body)
            self.loops.pop()
            if statement.orelse:
                self.visit_block(statement.orelse.body)
        elif isinstance(statement, cst.If):
            self.statement = statement
            self.visit_expression(statement.test)
            self.visit_block(statement.body)
            if isinstance(statement.orelse, cst.If):
                self.visit_statement(statement.orelse)
            elif statement.orelse is not None:
                self.visit_block(statement.orelse.body)
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
                self.event("region", statement, name=tape)
                region = TapeRegion(tape, statement, self.order + 1,
                                    parent=self.region_stack[-1] if self.region_stack else None)
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
        if code is not None and code in self.tapes():
            return code
        return None

    def tapes(self) -> set[str]:
        return {e.name for e in self.events if e.kind == "tape"}

    def visit_small(self, small) -> None:
        self.statement = small
        if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            value = small.value
            if value is not None:
                self.visit_expression(value)
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            for target in targets:
                code = code_of(target)
                if isinstance(value, cst.Call) and self.qualify(value.func) in TAPE_CLASSES:
                    self.event("tape", small, name=code, value=value)
                else:
                    self.event("assign", small, name=code, value=value)
                if isinstance(target, cst.Name):
                    self.shadowed.add(target.value)
        elif isinstance(small, (cst.Expr, cst.Return)):
            if small.value is not None:
                self.visit_expression(small.value)

    def visit_expression(self, expression) -> None:
        calls: list[cst.Call] = []
        stack = [expression]
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.Lambda, cst.FunctionDef)):
                continue
            if isinstance(node, cst.Call):
                calls.append(node)
            stack.extend(children(node))
        # Inner calls run first: `wp.launch(k, n, inputs=[wp.clone(x)])` clones before launching.
        for call in reversed(calls):
            self.visit_call(call)

    def visit_call(self, call: cst.Call) -> None:
        qualified = self.qualify(call.func)
        if qualified in LAUNCH_FUNCTIONS:
            self.launches.append(self.launch(call, qualified))
        elif qualified:
            self.event("call", call, name=qualified)
        elif isinstance(call.func, cst.Attribute):
            self.event("method", call, name=call.func.attr.value, receiver=code_of(call.func.value))

    def launch(self, call: cst.Call, qualified: str) -> Launch:
        event = self.event("launch", call, name=qualified)
        keywords: dict[str, cst.BaseExpression] = {}
        for position, argument in enumerate(call.args):
            if argument.keyword is not None:
                keywords[argument.keyword.value] = argument.value
            elif position < len(LAUNCH_PARAMETERS):
                keywords[LAUNCH_PARAMETERS[position]] = argument.value
        kernel = keywords.get("kernel")
        kernel_code = code_of(kernel) if kernel is not None else ""
        models = self.kernels.by_name(kernel.value) if isinstance(kernel, cst.Name) else []
        return Launch(event, kernel_code, [m for m in models if m.kind == "kernel"], keywords.get("dim"),
                      _element_codes(keywords.get("inputs")), _element_codes(keywords.get("outputs")), keywords)


def _element_codes(node: cst.BaseExpression | None) -> list[str]:
    if isinstance(node, (cst.List, cst.Tuple)):
        return [code_of(element.value) for element in node.elements]
    return []
