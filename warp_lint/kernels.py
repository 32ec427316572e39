"""The kernel model: what each ``@wp.kernel`` / ``@wp.func`` reads, writes and loops over.

Computed once per file and read by every kernel-side rule. Statements are scanned in the order the
generated forward code evaluates them (right-hand side before the store, loop bodies in order), and
every array access gets an increasing ``order``, so "written after it was read" is a comparison of
two numbers. Calls into ``@wp.func`` helpers of the same file carry the helper's effects on its
array parameters to the caller's arrays, transitively.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Callable, Iterator

import libcst as cst

from warp_lint.cst_walk import children, walk, walk_statements
from warp_lint.module_options import ModuleOptions
from warp_lint.names import WarpNames, dotted_name
from warp_lint.warp_types import INT_SCALARS, NON_DIFFERENTIABLE_DTYPES, ParamType, code_of, parse_annotation

FUNCTION_DECORATORS = {
    "warp.kernel": "kernel",
    "warp.func": "func",
    "warp.func_grad": "func_grad",
    "warp.func_replay": "func_replay",
    "warp.func_native": "func_native",
}
STRUCT_DECORATORS = {"warp.struct"}

ACCUMULATING_ATOMICS = {"warp.atomic_add", "warp.atomic_sub"}
WRITING_CALLS = {"warp.atomic_min", "warp.atomic_max", "warp.atomic_exch", "warp.atomic_cas", "warp.atomic_and",
                 "warp.atomic_or", "warp.atomic_xor", "warp.tile_store", "warp.tile_atomic_add"}
NON_READING_CALLS = {"len", "warp.len", "warp.address", "warp.array"}
ARRAY_METADATA = {"shape", "ndim", "size", "strides", "dtype", "ptr", "grad"}
ACCUMULATING_OPERATORS = (cst.AddAssign, cst.SubtractAssign)


@dataclasses.dataclass
class Param:
    name: str
    type: ParamType
    node: cst.Param


@dataclasses.dataclass
class ArrayAccess:
    array: str
    kind: str  # read | write | accumulate
    node: cst.CSTNode  # what an editor underlines
    statement: cst.CSTNode | None  # the small statement holding it
    order: int
    index: str = ""  # the index expression's code ("i", "i, j")
    component: str | None = None  # "x" / "0" for a component store: y[i].x = ...
    operator: str | None = None  # "*=" for augmented stores
    via: str | None = None  # the @wp.func through which it happens
    loops: tuple["Loop", ...] = ()  # the loops around it, outermost first
    branches: tuple["Branch", ...] = ()  # the if-arms around it, outermost first
    # The index expressions naming the element from the array itself, outermost dimension first
    # (`a[i, j]` and `a[i][j]` alike); None where they are unknown: through a row view, a call, a helper.
    element: tuple[cst.BaseExpression, ...] | None = None


@dataclasses.dataclass
class LocalBinding:
    """``v = <value>`` for a local name (whole-value assignment)."""

    name: str
    value: cst.BaseExpression | None
    node: cst.CSTNode
    order: int
    operator: str | None = None  # for augmented assignment of the whole local
    loops: tuple["Loop", ...] = ()


@dataclasses.dataclass
class ComponentWrite:
    """``v[0] = ...`` / ``v.x = ...`` / ``m[0, 1] *= ...`` on a local value."""

    name: str
    component: str
    value: cst.BaseExpression
    node: cst.CSTNode
    order: int
    operator: str | None
    is_field: bool  # ``b.pos = ...`` on a struct rather than a vector component
    loops: tuple["Loop", ...] = ()
    element: tuple[cst.BaseExpression, ...] | None = None  # ``(i, j)`` for ``m[i, j] = ...``; None for ``v.x``
    branches: tuple["Branch", ...] = ()  # the if-arms around it, outermost first

    @property
    def is_attribute(self) -> bool:
        """`v.x` or `b.mass`, not a subscript (`v[0]`, a slice `z[0, :2]`, whose element is None too)."""
        return self.element is None and self.component.isidentifier()

    @property
    def spelled(self) -> str:
        """The target as written: `v.x`, `v[0]`, `z[0, :2]`."""
        return f"{self.name}.{self.component}" if self.is_attribute else f"{self.name}[{self.component}]"


@dataclasses.dataclass
class Loop:
    node: cst.For | cst.While
    dynamic: bool
    reason: str  # why it is dynamic, in words
    affected_versions: str = ""  # "" always dynamic; "<1.17" for a `continue`
    start_order: int = 0
    end_order: int = 0
    parent: Loop | None = None
    branches: tuple["Branch", ...] = ()  # the if-arms around it, outermost first


@dataclasses.dataclass(frozen=True)
class Branch:
    """One arm of an ``if`` around a fact: ``arm`` 0 is the body, 1 the ``else``/``elif`` part."""

    node: cst.If
    arm: int

    def excludes(self, other: "Branch") -> bool:
        """Whether the two arms can never both run in one pass (same ``if``, different arms)."""
        return self.node is other.node and self.arm != other.arm


def mutually_exclusive(first: tuple[Branch, ...], second: tuple[Branch, ...]) -> bool:
    """Whether two facts sit in different arms of one ``if``, so at most one of them runs."""
    return any(a.excludes(b) for a in first for b in second)


@dataclasses.dataclass
class CallSite:
    """Any call in a body: ``wp.sqrt(x)``, ``helper(a, i)``, ``wp.grad(f)(x)``.

    ``order`` is the number of ordered facts (accesses, bindings, component writes, helper calls)
    recorded before it, so ties are possible; compare with ``Loop.start_order``/``end_order``.
    """

    name: str | None  # "warp.sqrt" for Warp names, the dotted name otherwise ("helper"), None: not a name
    node: cst.Call
    statement: cst.CSTNode | None
    order: int
    loops: tuple["Loop", ...] = ()
    branches: tuple[Branch, ...] = ()


@dataclasses.dataclass
class ConditionalExpression:
    """A Python conditional expression (``a if c else b``) in a body."""

    node: cst.IfExp
    statement: cst.CSTNode | None
    order: int
    loops: tuple["Loop", ...] = ()


@dataclasses.dataclass
class StatementSite:
    """One small statement (``x = ...``, ``return ...``, ``out[i] = ...``) in evaluation order."""

    node: cst.BaseSmallStatement
    order: int  # facts recorded before it (see CallSite.order)
    loops: tuple["Loop", ...] = ()
    branches: tuple[Branch, ...] = ()


@dataclasses.dataclass
class AdjointWrite:
    """``wp.adjoint[x] = ...`` / ``+=`` in a ``@wp.func_grad`` body."""

    name: str  # the code of the subscript: "x"
    node: cst.CSTNode  # the Assign / AugAssign
    target: cst.Subscript
    value: cst.BaseExpression
    operator: str | None  # None for `=`
    order: int


@dataclasses.dataclass
class HelperCall:
    helper: str
    node: cst.Call
    statement: cst.CSTNode | None
    arguments: dict[str, str]  # helper parameter -> caller's array name
    order: int
    loops: tuple["Loop", ...] = ()
    replayed: bool = False  # the helper has a `@wp.func_replay`


@dataclasses.dataclass
class FunctionModel:
    name: str
    kind: str  # kernel | func | func_grad | func_replay | func_native
    node: cst.FunctionDef
    decorator: cst.Decorator
    options: dict[str, object]
    params: list[Param]
    differentiable: bool
    top_level_index: int  # index of the enclosing top-level statement, for "set before" questions
    accesses: list[ArrayAccess] = dataclasses.field(default_factory=list)
    bindings: list[LocalBinding] = dataclasses.field(default_factory=list)
    component_writes: list[ComponentWrite] = dataclasses.field(default_factory=list)
    loops: list[Loop] = dataclasses.field(default_factory=list)
    helper_calls: list[HelperCall] = dataclasses.field(default_factory=list)
    tid_arity: int = 0
    calls: list[CallSite] = dataclasses.field(default_factory=list)  # every call, in evaluation order
    conditionals: list[ConditionalExpression] = dataclasses.field(default_factory=list)
    statements: list[StatementSite] = dataclasses.field(default_factory=list)  # every small statement
    adjoint_writes: list[AdjointWrite] = dataclasses.field(default_factory=list)
    # `@wp.func` helpers of this file annotated to return an integer or a bool: their values carry no
    # gradient (a count, an index, a flag).
    integer_helpers: frozenset[str] = frozenset()
    # helpers returning a tuple -> the positions of its integer elements (`-> tuple[wp.vec3, int]`: {1})
    integer_elements: dict[str, frozenset[int]] = dataclasses.field(default_factory=dict)
    # the file's `@wp.func` helpers by name (shared by every function of the file): the dataflow
    # reads what their returns carry (``dataflow.gradient_free_returns``)
    file_helpers: dict[str, list["FunctionModel"]] = dataclasses.field(default_factory=dict, repr=False,
                                                                       compare=False)
    # `@wp.func` helpers of other files this function calls -> how each uses its parameters' values
    # (``dataflow.parameter_roles``, read from their facts): by position and by name
    imported_roles: dict[str, dict] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    # A `@wp.func` given a `@wp.func_grad` in the same file: the parameters that custom adjoint
    # mentions, the only values of its arguments the backward pass can look at (None: no custom one).
    custom_adjoint_reads: frozenset[str] | None = None
    # A `@wp.func` given a `@wp.func_replay` in the same file: a kernel calling it directly runs the
    # replay in its backward pass instead of the body (a slot reserved once stays reserved).
    replayed: bool = False
    # "param.field" -> whether it holds floats: the arrays in its struct parameters' fields
    struct_arrays: dict[str, bool] = dataclasses.field(default_factory=dict)
    # Names it captures from the functions around its definition (a factory's parameters and
    # locals) -> their integer values where the file shows them: compile-time constants to Warp.
    captured: dict[str, frozenset[int] | None] = dataclasses.field(default_factory=dict)

    @property
    def decorator_args(self) -> list[cst.Arg]:
        """The decorator's arguments: ``@wp.func_native(snippet, adj_snippet=...)``, ``@wp.func_grad(f)``."""
        return list(self.decorator.decorator.args) if isinstance(self.decorator.decorator, cst.Call) else []

    @property
    def arrays(self) -> dict[str, Param]:
        """Array parameters; in a kernel, `Any`-typed ones too (a generic kernel's `dst: Any` is an
        array: a kernel's scalar or vector arguments are values it does not store into)."""
        return {p.name: p for p in self.params
                if p.type.is_array or (self.kind == "kernel" and p.type.kind == "generic")}

    @property
    def local_names(self) -> set[str]:
        return {p.name for p in self.params} | {b.name for b in self.bindings}

    def binding_before(self, name: str, order: int) -> LocalBinding | None:
        """The last plain assignment (`v = ...`, not `v += ...`) of the local ``name`` before the
        fact of the given order: the value a later in-place write starts from."""
        found = None
        for binding in self.bindings:
            if binding.name == name and binding.order < order and binding.operator is None:
                found = binding
        return found

    def reads(self, array: str) -> list[ArrayAccess]:
        return [a for a in self.accesses if a.array == array and a.kind == "read"]

    def effects(self) -> dict[str, set[str]]:
        """Array parameter -> the kinds of access this function makes to it (through helpers too)."""
        result: dict[str, set[str]] = {}
        for access in self.accesses:
            result.setdefault(access.array, set()).add(access.kind)
        return result

    def runtime_data(self) -> dict:
        effects = self.effects()
        return {
            "kernel": self.name,
            "function_kind": "kernel" if self.kind == "kernel" else "func",
            "params": [{"name": p.name, "annotation": p.type.annotation} for p in self.params],
            "reads": sorted(a for a, kinds in effects.items() if "read" in kinds),
            "writes": sorted(a for a, kinds in effects.items() if kinds & {"write", "accumulate"}),
            "index_params": sorted(self._index_params()),
        }

    def _index_params(self) -> set[str]:
        scalars = {p.name for p in self.params if p.type.dtype in INT_SCALARS}
        used = set()
        for access in self.accesses:
            used.update(name for name in scalars if name in access.index.replace(",", " ").split())
        return used


@dataclasses.dataclass
class StructModel:
    name: str
    node: cst.ClassDef
    fields: dict[str, ParamType]


@dataclasses.dataclass
class KernelIndex:
    functions: list[FunctionModel]
    structs: dict[str, StructModel]

    def by_name(self, name: str) -> list[FunctionModel]:
        return [f for f in self.functions if f.name == name]

    def kernels(self) -> Iterator[FunctionModel]:
        return (f for f in self.functions if f.kind == "kernel")


@dataclasses.dataclass
class ImportedHelper:
    """A ``@wp.func`` of another file, known by its facts: enough to follow a call into it."""

    name: str
    params: list  # objects with a ``name``, in order
    array_effects: dict[str, frozenset[str]]
    path: str = ""  # the file defining it, and the digest of its text: what an analysis depends on
    digest: str = ""
    helper_calls: list = dataclasses.field(default_factory=list)  # already folded into its effects
    replayed: bool = False  # it has a `@wp.func_replay`
    roles: dict = dataclasses.field(default_factory=dict)  # ``dataflow.parameter_roles``: positions and names

    def effects(self) -> dict[str, set[str]]:
        return {array: set(kinds) for array, kinds in self.array_effects.items()}


def build_kernel_index(module: cst.Module, names: WarpNames, options: ModuleOptions,
                       imported: Callable[[str], ImportedHelper | None] | None = None,
                       captured: dict[str, dict[str, frozenset[int] | None]] | None = None,
                       held: dict[str, dict[str, object]] | None = None) -> KernelIndex:
    """``imported(code)``: the ``@wp.func`` helper of another file that the code calling it here
    names (`helper`, `math_utils.helper`), or None; asked only for calls that pass arrays, so a
    kernel's effects follow calls into them. ``captured``: by definition name, the values it
    captures from the factory around it (``closure_constants``), which ``module`` does not hold;
    ``held``: by definition name, the options given to the module it names (`module=module`)."""
    structs: dict[str, StructModel] = {}
    decorated: list[tuple[cst.FunctionDef, cst.Decorator, str, int]] = []
    for index, statement in enumerate(module.body):
        for node in walk_statements(statement):
            if isinstance(node, cst.ClassDef) and any(
                names.qualify(_decorator_target(d)) in STRUCT_DECORATORS for d in node.decorators
            ):
                structs[node.name.value] = StructModel(node.name.value, node, {})
            elif isinstance(node, cst.FunctionDef):
                for decorator in node.decorators:
                    kind = FUNCTION_DECORATORS.get(names.qualify(_decorator_target(decorator)) or "")
                    if kind:
                        decorated.append((node, decorator, kind, index))
                        break
    struct_names = set(structs)
    for struct in structs.values():
        for statement in struct.node.body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        struct.fields[small.target.value] = parse_annotation(
                            cst.Annotation(small.annotation.annotation), names, struct_names
                        )
    functions = [_function_model(node, decorator, kind, index, names, options, struct_names,
                                 (held or {}).get(node.name.value, {}))
                 for node, decorator, kind, index in decorated]
    for function in functions:
        function.captured = (captured or {}).get(function.name, {})
        function.struct_arrays = {f"{p.name}.{name}": field.differentiable for p in function.params
                                  if p.type.kind == "struct" and p.type.dtype in structs
                                  for name, field in structs[p.type.dtype].fields.items() if field.is_array}
    _mark_custom_adjoints(functions)
    helpers: dict[str, list] = {}
    for function in functions:
        if function.kind == "func":
            helpers.setdefault(function.name, []).append(function)
    integer_helpers = frozenset(name for name, overloads in helpers.items()
                                if all(_returns_integer(f.node, names) for f in overloads))
    # Native code returning an integer (`_float_flip` -> wp.uint32, a sort key) is one too.
    integer_helpers |= {f.name for f in functions if f.kind == "func_native" and _returns_integer(f.node, names)
                        and f.name not in helpers}
    integer_elements = {name: frozenset.intersection(*(_integer_elements(f.node, names) for f in overloads))
                        for name, overloads in helpers.items()}
    integer_elements = {name: positions for name, positions in integer_elements.items() if positions}
    for function in functions:
        function.integer_helpers = integer_helpers
        function.integer_elements = integer_elements
        function.file_helpers = helpers
    for function in functions:
        _BodyScanner(function, names, options, helpers, struct_names, imported).scan()
    _propagate_helper_effects(functions, helpers)
    _mark_integer_results(functions, names, struct_names)
    return KernelIndex(functions, structs)


def _returns_integer(node: cst.FunctionDef, names: WarpNames) -> bool:
    returns = node.returns.annotation if node.returns is not None else None
    return returns is not None and _integer_type(returns, names)


def _integer_type(annotation: cst.BaseExpression, names: WarpNames) -> bool:
    qualified = names.qualify(annotation) or dotted_name(annotation)
    return qualified in INT_SCALARS or qualified in ("bool", "warp.bool")


def _mark_custom_adjoints(functions: list[FunctionModel]) -> None:
    """A ``@wp.func`` given a ``@wp.func_grad`` in the same file is never differentiated: Warp calls
    the custom adjoint in its backward pass instead of the adjoint of its body (Featherstone's
    in-place ``dense_cholesky`` has a no-op one), so its body cannot make a gradient wrong.
    The custom adjoint belongs to the overload whose parameters it repeats. One given a
    ``@wp.func_replay`` is marked ``replayed``."""
    for custom in functions:
        if custom.kind not in ("func_grad", "func_replay") or not custom.decorator_args:
            continue
        forward = dotted_name(custom.decorator_args[0].value)
        signature = [p.type.annotation for p in custom.params]
        for function in functions:
            if function.kind != "func" or function.name != forward:
                continue
            if custom.kind == "func_replay":
                function.replayed = True
            elif [p.type.annotation for p in function.params] == signature[:len(function.params)]:
                function.differentiable = False
                mentioned = {n.value for n in walk(custom.node.body) if isinstance(n, cst.Name)}
                function.custom_adjoint_reads = frozenset(mentioned & {p.name for p in custom.params})


def _mark_integer_results(functions: list[FunctionModel], names: WarpNames, structs: set[str]) -> None:
    """A ``@wp.func`` whose results are all integers or flags (an index, a count, ``wp.vec4i``) and
    that writes no array passes no gradient on: its adjoint gets nothing to propagate, so nothing
    in it can make a gradient wrong (newton's ``approx_max_quadrilateral_area_with_calipers``
    picks four hull indices). Native code it calls may write arrays unseen: such a function is
    left as it is."""
    natives = {f.name for f in functions if f.kind == "func_native"}
    for function in functions:
        returns = function.node.returns
        if function.kind != "func" or not function.differentiable or returns is None:
            continue
        elements = _tuple_elements(returns.annotation)
        elements = [returns.annotation] if elements is None else elements
        if not elements or any(parse_annotation(cst.Annotation(e), names, structs).dtype
                               not in NON_DIFFERENTIABLE_DTYPES for e in elements):
            continue
        if any(a.kind != "read" for a in function.accesses) or any(c.name in natives for c in function.calls):
            continue
        function.differentiable = False


def _tuple_elements(annotation: cst.BaseExpression | None) -> list[cst.BaseExpression] | None:
    """The element annotations of ``tuple[...]`` (``typing.Tuple`` too); None for anything else."""
    if not isinstance(annotation, cst.Subscript) or dotted_name(annotation.value) not in ("tuple", "typing.Tuple",
                                                                                          "Tuple"):
        return None
    return [element.slice.value for element in annotation.slice if isinstance(element.slice, cst.Index)]


def _integer_elements(node: cst.FunctionDef, names: WarpNames) -> frozenset[int]:
    """`-> tuple[wp.vec3, wp.vec4, wp.uint32]`: the positions of the integer elements ({2})."""
    elements = _tuple_elements(node.returns.annotation if node.returns is not None else None) or []
    return frozenset(position for position, element in enumerate(elements) if _integer_type(element, names))


def _decorator_target(decorator: cst.Decorator) -> cst.BaseExpression:
    expression = decorator.decorator
    return expression.func if isinstance(expression, cst.Call) else expression


def _literal(node: cst.BaseExpression) -> object:
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    return code_of(node)


def _decorator_module_options(decorator: cst.Decorator) -> dict[str, object]:
    """`@wp.kernel(module_options={"enable_backward": False})`: the literal options it gives."""
    if not isinstance(decorator.decorator, cst.Call):
        return {}
    for argument in decorator.decorator.args:
        if argument.keyword is not None and argument.keyword.value == "module_options" and \
                isinstance(argument.value, cst.Dict):
            return {element.key.evaluated_value: _literal(element.value) for element in argument.value.elements
                    if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)}
    return {}


def _module_argument(decorator: cst.Decorator) -> cst.BaseExpression | None:
    if isinstance(decorator.decorator, cst.Call):
        return next((a.value for a in decorator.decorator.args if a.keyword and a.keyword.value == "module"), None)
    return None


def _function_model(node, decorator, kind, index, names, options, structs,
                    held_options: dict[str, object] | None = None) -> FunctionModel:
    decorator_options: dict[str, object] = {}
    if isinstance(decorator.decorator, cst.Call):
        for argument in decorator.decorator.args:
            if argument.keyword:
                decorator_options[argument.keyword.value] = _literal(argument.value)
    params = [Param(p.name.value, parse_annotation(p.annotation, names, structs), p) for p in node.params.params]
    # A @wp.func_grad body is an adjoint: it runs in the backward pass, and nothing differentiates it.
    # A module's `enable_backward` is its kernels': a @wp.func is built into each calling kernel's
    # module with that module's options (measured on 1.19: a func of a backward-disabled module called
    # by a differentiated kernel elsewhere gets the right gradient), so its callers decide (the
    # project model's contexts).
    # `module="fwd"`: a named module, with its own options; `module=held` (a name holding a module):
    # the options given to it in that statement, and the file's as before for anything else.
    argument = _module_argument(decorator)
    module = argument.evaluated_value if isinstance(argument, cst.SimpleString) else None
    own_options = {**_decorator_module_options(decorator),
                   **((held_options or {}) if isinstance(argument, cst.Name) else {})}
    differentiable = kind != "func_grad" and decorator_options.get("enable_backward", True) is not False and \
        own_options.get("enable_backward", True) is not False and \
        (kind != "kernel" or options.value("enable_backward", index, True, module) is not False)
    return FunctionModel(node.name.value, kind, node, decorator, decorator_options, params, differentiable, index)


class _BodyScanner:
    """Walks one function body in forward evaluation order and fills its model."""

    def __init__(self, model: FunctionModel, names: WarpNames, options, helpers, structs, imported=None):
        self.model = model
        self.imported = imported  # finds another file's @wp.func by the code calling it
        self.names = names
        self.helpers = helpers
        self.structs = structs
        self.order = 0
        self.loops: list[Loop] = []
        self.arrays = model.arrays
        self.views: dict[str, str] = {}  # local name -> the array it is a view of (row = a2d[i])
        self.shadowed = {p.name for p in model.params}
        self.options = options
        self.statement_now: cst.CSTNode | None = None
        self.branches: list[Branch] = []
        self.local_constants = _local_constants(model.node)

    # -- helpers --------------------------------------------------------------------------
    def next_order(self) -> int:
        self.order += 1
        return self.order

    def qualify(self, node) -> str | None:
        return self.names.qualify(node, self.shadowed)

    def array_of(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Name):
            if node.value in self.arrays:
                return node.value
            return self.views.get(node.value)
        return None

    def scan(self) -> None:
        for statement in self.model.node.body.body:
            self.statement(statement)

    # -- statements -----------------------------------------------------------------------
    def block(self, body: cst.BaseSuite) -> None:
        if isinstance(body, cst.IndentedBlock):
            for statement in body.body:
                self.statement(statement)
        else:  # SimpleStatementSuite: `if c: x = 1`
            for small in body.body:
                self.small(small)

    def statement(self, statement: cst.CSTNode) -> None:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self.small(small)
        elif isinstance(statement, cst.If):
            self.expression(statement.test)
            self.branches.append(Branch(statement, 0))
            self.block(statement.body)
            self.branches.pop()
            if statement.orelse is not None:
                self.branches.append(Branch(statement, 1))
                if isinstance(statement.orelse, cst.If):
                    self.statement(statement.orelse)
                else:
                    self.block(statement.orelse.body)
                self.branches.pop()
        elif isinstance(statement, cst.For):
            self.expression(statement.iter)
            self.loop(statement)
        elif isinstance(statement, cst.While):
            self.expression(statement.test)
            self.loop(statement)
        elif isinstance(statement, (cst.With, cst.Try)):
            self.block(statement.body)

    def loop(self, node: cst.For | cst.While) -> None:
        dynamic, reason, affected = self._loop_kind(node)
        loop = Loop(node, dynamic, reason, affected, self.order + 1, parent=self.loops[-1] if self.loops else None,
                    branches=tuple(self.branches))
        self.model.loops.append(loop)
        if isinstance(node, cst.For):
            for target in walk(node.target):
                if isinstance(target, cst.Name):
                    self.shadowed.add(target.value)
        self.loops.append(loop)
        self.block(node.body)
        self.loops.pop()
        loop.end_order = self.order

    def small(self, small: cst.BaseSmallStatement) -> None:
        self.statement_now = small
        self.model.statements.append(StatementSite(small, self.order, tuple(self.loops), tuple(self.branches)))
        if isinstance(small, cst.Assign):
            self.expression(small.value)
            if isinstance(small.value, cst.Call) and self.qualify(small.value.func) == "warp.tid":
                target = small.targets[0].target
                self.model.tid_arity = len(target.elements) if isinstance(target, cst.Tuple) else 1
            for target in small.targets:
                self.target(target.target, small.value, small, None)
        elif isinstance(small, cst.AnnAssign):
            if small.value is not None:
                self.expression(small.value)
                self.target(small.target, small.value, small, None)
        elif isinstance(small, cst.AugAssign):
            self.expression(small.value)
            operator = code_of(small.operator).strip()
            self.target(small.target, small.value, small, operator)
        elif isinstance(small, (cst.Expr, cst.Return, cst.Assert)):
            value = small.value if not isinstance(small, cst.Assert) else small.test
            if value is not None:
                self.expression(value)

    def target(self, target, value, statement, operator: str | None) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.target(element.value, value, statement, operator)
            return
        if isinstance(target, cst.Name):
            self.bind(target.value, value, statement, operator)
            return
        if isinstance(target, cst.Subscript):
            array = self.array_of(target.value)
            if array is not None:
                self.array_store(array, target, value, statement, operator, component=None)
                return
            if isinstance(target.value, cst.Subscript) and self.array_of(target.value.value):
                inner = target.value
                array = self.array_of(inner.value)
                if len(inner.slice) >= self.arrays.get(array, _ONE_DIM).type.ndim:
                    self.array_store(array, inner, value, statement, operator, component=index_code(target))
                else:  # a[i][j] on a 2-d array: an element store written as two subscripts
                    self.array_store(array, target, value, statement, operator, component=None)
                return
            if isinstance(target.value, cst.Name):
                self.component_write(target.value.value, index_code(target), value, statement, operator, False,
                                     _subscript_element(target))
                return
            if self.qualify(target.value) == "warp.adjoint":
                for element in target.slice:
                    self.expression(element.slice)
                self.model.adjoint_writes.append(
                    AdjointWrite(index_code(target), statement, target, value, operator, self.order))
                return
        if isinstance(target, cst.Attribute):
            base = target.value
            if isinstance(base, cst.Subscript) and self.array_of(base.value):
                self.array_store(self.array_of(base.value), base, value, statement, operator, target.attr.value)
                return
            if isinstance(base, cst.Name) and base.value not in self.arrays:
                is_field = target.attr.value not in ("x", "y", "z", "w")
                self.component_write(base.value, target.attr.value, value, statement, operator, is_field)
                return
        self.expression(target)

    def array_store(self, array, subscript: cst.Subscript, value, statement, operator, component) -> None:
        index = index_code(subscript)
        element = self.element_of(subscript)
        for part in subscript.slice:
            self.expression(part.slice)
        if operator in ("+=", "-="):
            self.access(array, "accumulate", statement, statement, index, component, operator, element=element)
            return
        if operator:  # *=, /=, ...: a read-modify-write of the element
            self.access(array, "read", subscript, statement, index, component, operator, element=element)
        self.access(array, "write", statement, statement, index, component, operator, element=element)

    def element_of(self, subscript: cst.Subscript) -> tuple[cst.BaseExpression, ...] | None:
        """The index expressions of ``a[i, j]`` / ``a[i][j]`` on an array parameter; None through a row
        view (``row = a[i]; row[j]``: its index counts from the row) or with a slice."""
        parts: list[cst.SubscriptElement] = []
        node: cst.BaseExpression = subscript
        while type(node) is cst.Subscript:  # exact type checks: this runs for every array read
            parts[:0] = node.slice
            node = node.value
        if type(node) is not cst.Name or node.value not in self.arrays:
            return None
        return _subscript_element(parts)

    def access(self, array, kind, node, statement, index="", component=None, operator=None, via=None,
               element=None) -> None:
        self.model.accesses.append(
            ArrayAccess(array, kind, node, statement, self.next_order(), index, component, operator, via,
                        tuple(self.loops), tuple(self.branches), element)
        )

    def bind(self, name: str, value, statement, operator) -> None:
        self.shadowed.add(name)
        if operator is None and isinstance(value, cst.Subscript):
            array = self.array_of(value.value)
            if array is not None and (len(value.slice) < self.arrays[array].type.ndim or any(
                    isinstance(element.slice, cst.Slice) for element in value.slice)):
                self.views[name] = array  # `row = a2d[i]`, `column = a2d[:, 1]`
        self.model.bindings.append(LocalBinding(name, value, statement, self.next_order(), operator, tuple(self.loops)))

    def component_write(self, name, component, value, statement, operator, is_field, element=None) -> None:
        if name in self.views:  # row[j] = v where row = a2d[i]: a store into the array
            self.access(self.views[name], "accumulate" if operator in ("+=", "-=") else "write", statement,
                        statement, component, None, operator)
            return
        self.model.component_writes.append(
            ComponentWrite(name, component, value, statement, self.next_order(), operator, is_field,
                           tuple(self.loops), element, tuple(self.branches))
        )

    # -- expressions ----------------------------------------------------------------------
    def expression(self, node: cst.CSTNode | None) -> None:
        if node is None:
            return
        stack = [node]
        # Exact type checks: LibCST's node classes are ABCs, whose isinstance is several times slower,
        # and this loop sees every node of every kernel.
        while stack:
            current = stack.pop()
            kind = type(current)
            if kind is cst.Name or kind is cst.Integer or kind is cst.Float:
                continue  # leaves
            if kind is cst.Subscript:
                array = self.array_of(current.value)
                if array is not None:
                    self.access(array, "read", current, self.statement_now, index_code(current),
                                element=self.element_of(current))
                    stack.extend(reversed([e.slice for e in current.slice]))
                    continue
            elif kind is cst.Attribute:
                if self.array_of(current.value) and current.attr.value in ARRAY_METADATA:
                    continue
                stack.append(current.value)
                continue
            elif kind is cst.Call:
                self.model.calls.append(CallSite(self.call_name(current.func), current, self.statement_now, self.order,
                                                 tuple(self.loops), tuple(self.branches)))
                self.imported_roles(current)
                if self.call(current):
                    continue
            elif kind is cst.IfExp:
                self.model.conditionals.append(
                    ConditionalExpression(current, self.statement_now, self.order, tuple(self.loops)))
            elif kind in _OPAQUE_EXPRESSIONS:
                continue
            stack.extend(reversed(list(children(current))))

    def call_name(self, func: cst.BaseExpression) -> str | None:
        return self.qualify(func) or dotted_name(func)

    def imported_roles(self, call: cst.Call) -> None:
        """Note how a `@wp.func` of another file uses its parameters' values (its facts' roles), so
        the dataflow knows an argument it only compares or never uses (`zero_like(x[i])`)."""
        name = dotted_name(call.func)
        if self.imported is None or name is None or name in self.helpers or name in self.model.imported_roles or \
                name.split(".", 1)[0] in self.shadowed or self.qualify(call.func) is not None:
            return
        # Asked only where the answer can change a finding, since another file's facts are costly to
        # compute for every call: an argument that reads an array's element (`zero_like(y[i])`: may
        # the element be overwritten after?), or a local passed in a dynamic loop (`f(out, ...)`:
        # does the helper need the value the loop carries?).
        in_dynamic_loop = any(loop.dynamic for loop in self.loops)
        if not any((isinstance(node, cst.Subscript) and self.array_of(node.value) is not None)
                   or (in_dynamic_loop and isinstance(node, cst.Name))
                   for argument in call.args for node in walk(argument.value)):
            return
        helper = self.imported(name)
        if helper is not None and helper.roles:
            self.model.imported_roles[name] = helper.roles

    def call(self, call: cst.Call) -> bool:
        """Record the call's effect on arrays; True when its arguments were handled here."""
        callee = self.qualify(call.func)
        arrays = [(i, a, self.array_of(a.value)) for i, a in enumerate(call.args)]
        if not any(array for _, _, array in arrays):
            return False
        name = dotted_name(call.func)
        if name is not None and name not in self.helpers and callee is None and self.imported is not None and \
                name.split(".", 1)[0] not in self.shadowed:
            helper = self.imported(name)
            if helper is not None and helper.array_effects:
                self.helpers[name] = [helper]
        if name in self.helpers and name.split(".", 1)[0] not in self.shadowed:
            mapping = {}
            helper_params = [p.name for p in self.helpers[name][0].params]
            for position, argument, array in arrays:
                if array is None:
                    self.expression(argument.value)
                    continue
                parameter = argument.keyword.value if argument.keyword else (
                    helper_params[position] if position < len(helper_params) else None)
                if parameter:
                    mapping[parameter] = array
            self.model.helper_calls.append(
                HelperCall(name, call, self.statement_now, mapping, self.next_order(), tuple(self.loops),
                           any(helper.replayed for helper in self.helpers[name])))
            return True

        for _, argument, array in arrays:
            if array is None:
                self.expression(argument.value)
        first = arrays[0][2]
        statement = self.statement_now
        if callee in ACCUMULATING_ATOMICS and first:
            self.access(first, "accumulate", call, statement, _call_index(call))
        elif callee in WRITING_CALLS and first:
            self.access(first, "write", call, statement, _call_index(call))
        elif callee not in NON_READING_CALLS and not (isinstance(call.func, cst.Name) and call.func.value == "len"):
            for _, _, array in arrays:
                if array:
                    self.access(array, "read", call, statement)
        return True

    # -- loops ----------------------------------------------------------------------------
    def _loop_kind(self, node) -> tuple[bool, str, str]:
        if isinstance(node, cst.While):
            return True, "a `while` loop is always dynamic", ""
        max_unroll = self.options.value("max_unroll", self.model.top_level_index, 16)
        iterator = node.iter
        if (
            isinstance(iterator, cst.Call)
            and isinstance(iterator.func, cst.Name)
            and iterator.func.value == "range"
            and "range" not in self.shadowed
        ):
            if any(isinstance(a.value, cst.Call) and self.qualify(a.value.func) == "warp.static" for a in iterator.args):
                return self._loop_exits(node, False, "")
            bounds = [self._bound_values(a.value) for a in iterator.args]
            if any(b is None for b in bounds) or math.prod(len(b) for b in bounds) > 4096:
                if all(b is not None or self._captured(a.value) for a, b in zip(iterator.args, bounds)):
                    # A captured constant of a value the file does not show: unrolled when it is
                    # small, and nothing here says it is not.
                    return self._loop_exits(node, False, "")
                names = ", ".join(code_of(a.value) for a in iterator.args)
                return True, f"its trip count `range({names})` is not a compile-time constant", ""
            trips = max(_trip_count(combination) for combination in itertools.product(*bounds))
            if isinstance(max_unroll, int) and trips > max_unroll:
                captured = [code_of(a.value) for a in iterator.args if self._captured(a.value)]
                if captured:
                    code = ", ".join(code_of(a.value) for a in iterator.args)
                    values = "; ".join(f"`{name}` is captured as {', '.join(map(str, sorted(self.model.captured[name])))}"
                                       for name in captured)
                    return True, (f"`range({code})` runs up to {trips} times ({values} by the function that"
                                  f" makes it), which exceeds the unroll limit max_unroll={max_unroll}"), ""
                return True, f"`range({trips})` exceeds the unroll limit max_unroll={max_unroll}", ""
            return self._loop_exits(node, False, "")
        return self._loop_exits(node, False, "")

    def _bound_values(self, expression: cst.BaseExpression) -> tuple[int, ...] | None:
        """The values a `range()` bound can have: a local or module constant, or a value captured
        from the factory that makes the kernel; None where they are not known."""
        if isinstance(expression, cst.Name) and expression.value in self.local_constants:
            return (self.local_constants[expression.value],)
        if self._captured(expression):
            values = self.model.captured[expression.value]
            return tuple(sorted(values)) if values else None
        constant = self.options.constant(expression)
        return (constant,) if constant is not None else None

    def _captured(self, expression: cst.BaseExpression) -> bool:
        return isinstance(expression, cst.Name) and expression.value in self.model.captured and \
            expression.value not in self.model.local_names

    def _loop_exits(self, node, dynamic, reason) -> tuple[bool, str, str]:
        exits = {type(n) for n in _own_loop_statements(node.body)}
        if cst.Break in exits:
            return True, "its body has a `break`", ""
        if cst.Continue in exits:
            return True, "its body has a `continue` (unrolled from Warp 1.17)", "<1.17"
        return dynamic, reason, ""


_ONE_DIM = Param("", ParamType("array", "", 1), None)  # type: ignore[arg-type]


_OPAQUE_EXPRESSIONS = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def index_code(subscript: cst.Subscript) -> str:
    return ", ".join(code_of(element.slice) for element in subscript.slice)


def _subscript_element(subscript: cst.Subscript | list[cst.SubscriptElement]
                       ) -> tuple[cst.BaseExpression, ...] | None:
    """The index expressions of a subscript, or None when one is a slice (``a[i, :]``)."""
    parts = subscript.slice if isinstance(subscript, cst.Subscript) else subscript
    if any(not isinstance(part.slice, cst.Index) for part in parts):
        return None
    return tuple(part.slice.value for part in parts)


def _call_index(call: cst.Call) -> str:
    return code_of(call.args[1].value) if len(call.args) > 1 else ""


def _own_loop_statements(body: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Break/continue statements that belong to this loop, not to a nested one."""
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Break, cst.Continue)):
            yield node
        elif isinstance(node, (cst.For, cst.While)):
            continue
        else:
            stack.extend(children(node))


def _propagate_helper_effects(functions: list[FunctionModel], helpers: dict[str, list[FunctionModel]]) -> None:
    """Turn each helper call into accesses of the caller's arrays, following helpers transitively."""
    resolved: dict[int, dict[str, set[str]]] = {}

    def effects(function: FunctionModel, visiting: set[int]) -> dict[str, set[str]]:
        key = id(function)
        if key in resolved:
            return resolved[key]
        if key in visiting:
            return {}
        visiting.add(key)
        result = {array: set(kinds) for array, kinds in function.effects().items()}
        for call in function.helper_calls:
            for parameter, kinds in _call_effects(call, visiting).items():
                result.setdefault(parameter, set()).update(kinds)
        visiting.discard(key)
        resolved[key] = result
        return result

    def _call_effects(call: HelperCall, visiting) -> dict[str, set[str]]:
        combined: dict[str, set[str]] = {}
        for helper in helpers.get(call.helper, []):
            for parameter, kinds in effects(helper, visiting).items():
                if parameter in call.arguments:
                    combined.setdefault(call.arguments[parameter], set()).update(kinds)
        return combined

    for function in functions:
        for call in function.helper_calls:
            elements = _elements_through(call, helpers.get(call.helper, []), _call_effects)
            for array, kinds in _call_effects(call, set()).items():
                # Reads come before writes within one call: the helper itself owns an
                # internal read-then-write, so both share the call's order here.
                for kind in ("read", "accumulate", "write"):
                    if kind in kinds:
                        for element in elements.get((array, kind), [None]):
                            function.accesses.append(
                                ArrayAccess(array, kind, call.node, call.statement, call.order, via=call.helper,
                                            loops=call.loops, element=element)
                            )
        function.accesses.sort(key=lambda access: access.order)


def _elements_through(call: HelperCall, overloads: list[FunctionModel], call_effects
                      ) -> dict[tuple[str, str], list[tuple[cst.BaseExpression, ...]]]:
    """(caller's array, kind) -> the elements a helper's own accesses touch, in the caller's terms:
    `body_qd[parent]` in a helper called as `child_state(..., parent, ..., body_qd)` reads
    `body_qd[parent]` of the caller's `parent`. Only where every access of that kind is the
    helper's own (not a nested helper's), each index a literal or a parameter of the helper, and
    the helper has one definition."""
    if len(overloads) != 1 or not isinstance(overloads[0], FunctionModel):
        return {}  # several definitions, or a helper of another file (its effects only)
    helper = overloads[0]
    passed = bound_arguments(call.node, [p.name for p in helper.params])
    if passed is None:
        return {}
    rebound = {b.name for b in helper.bindings}
    nested: set[tuple[str, str]] = set()
    for inner in helper.helper_calls:
        for parameter, kinds in call_effects(inner, set()).items():
            nested |= {(parameter, kind) for kind in kinds}
    found: dict[tuple[str, str], list[tuple[cst.BaseExpression, ...]]] = {}
    unknown: set[tuple[str, str]] = set()
    for access in helper.accesses:
        if access.via is not None or access.array not in call.arguments:
            continue
        key = (call.arguments[access.array], access.kind)
        element = None
        if access.element is not None and (access.array, access.kind) not in nested:
            parts = [passed.get(part.value) if isinstance(part, cst.Name) and part.value not in rebound else
                     part if isinstance(part, cst.Integer) else None for part in access.element]
            element = tuple(parts) if all(part is not None for part in parts) else None
        if element is None:
            unknown.add(key)
        elif all(not _element_equal(element, other) for other in found.get(key, [])):
            found.setdefault(key, []).append(element)
    return {key: elements for key, elements in found.items() if key not in unknown}


def bound_arguments(call: cst.Call, params: list[str]) -> dict[str, cst.BaseExpression] | None:
    """Parameter name -> the argument a call of a function with ``params`` passes for it (by
    position or keyword); None where a starred argument makes the positions unknown."""
    passed: dict[str, cst.BaseExpression] = {}
    for position, argument in enumerate(call.args):
        if argument.star:
            return None
        name = argument.keyword.value if argument.keyword is not None else (
            params[position] if position < len(params) else None)
        if name is not None:
            passed[name] = argument.value
    return passed


def _element_equal(first: tuple[cst.BaseExpression, ...], second: tuple[cst.BaseExpression, ...]) -> bool:
    return len(first) == len(second) and all(a.deep_equals(b) for a, b in zip(first, second))


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
        for node in walk(kernel.node.body):
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
        for node in walk(kernel.node.body):
            if isinstance(node, cst.Subscript) and id(node.value) not in stored and field_of(node.value):
                effects.setdefault(field_of(node.value), set()).add("read")
    kernel._struct_effects_cache = effects
    return effects


def _trip_count(bounds: tuple[int, ...]) -> int:
    start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (list(bounds) + [1])[:3]
    return len(range(start, stop, step or 1))


def _local_constants(function: cst.FunctionDef) -> dict[str, int]:
    """Locals a function assigns once, at its top level, an integer literal (`num_terms = 2`): Warp
    binds the name to a constant, so `range(num_terms)` is unrolled like `range(2)` (measured on
    1.19: a product carried through `for i in range(0, n)` with `n = 3` has the right gradient,
    with `n` a kernel argument it does not)."""
    candidates: dict[str, int] = {}
    for statement in function.body.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                value = small.value
                negative = isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus)
                literal = value.expression if negative else value
                if isinstance(literal, cst.Integer):
                    number = int(literal.value, 0)
                    candidates[small.targets[0].target.value] = -number if negative else number
    if not candidates:
        return {}
    assigned: dict[str, int] = {}
    for node in walk(function.body):
        targets = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        for target in targets:
            for name in (n for n in walk(target) if isinstance(n, cst.Name)):
                assigned[name.value] = assigned.get(name.value, 0) + 1
    return {name: value for name, value in candidates.items() if assigned.get(name) == 1}
