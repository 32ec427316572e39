"""What host code needs to know about a kernel, digested from the kernel model.

A launch reads and writes the arrays it is given according to its kernel: which parameters the
kernel reads, stores into or accumulates into (through its ``@wp.func`` helpers too), which fields
of struct parameters it touches, whether it stores an element twice. These facts are plain data,
so they travel between processes and into the cache with the file's summary, and host rules in
any file can read the facts of a kernel defined in another.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from warp_lint.cst_walk import walk
from warp_lint.dataflow import INDEX, LINEAR, agreed_parameter_roles, dataflow_of
from warp_lint.kernels import FunctionModel, KernelIndex, bound_arguments, mutually_exclusive, struct_field_effects
from warp_lint.names import WarpNames


@dataclasses.dataclass(frozen=True)
class ParamFacts:
    name: str
    kind: str  # array | scalar | composite | struct | generic | unknown
    dtype: str | None
    differentiable: bool
    ndim: int = 0  # arrays: their number of dimensions

    @property
    def is_array(self) -> bool:
        return self.kind == "array"


@dataclasses.dataclass(frozen=True)
class KernelFacts:
    name: str
    kind: str  # kernel | func | ...
    params: tuple[ParamFacts, ...]
    effects: dict[str, frozenset[str]]  # array parameter -> read / write / accumulate
    struct_effects: dict[str, frozenset[str]]  # "param.field" -> read / write / accumulate
    stores_twice: frozenset[str]  # array parameters stored into twice in one pass, unconditionally
    options: dict  # the decorator's literal keywords
    runtime: dict  # what the runtime checker needs to run it (``FunctionModel.runtime_data``)
    value_reads: frozenset[str] = frozenset()  # array parameters whose read values its adjoint needs
    gradient_reads: frozenset[str] = frozenset()  # array parameters its adjoint passes a gradient back to
    integer_fields: frozenset[str] = frozenset()  # "param.field" struct arrays of integer dtypes: no gradient
    differentiable: bool = True  # False: backward disabled (decorator, module options, wp.config)
    gradient_writes: frozenset[str] | None = None  # array parameters it stores a value carrying a gradient
    # into (None: all it writes; counts and flags built from constants carry none)
    replayed: bool = False  # a `@wp.func` with a `@wp.func_replay`
    # value_reads read only as a factor of a product: parameter -> the array parameters whose
    # gradients the adjoint reads the value for (`z = x * w` reads `x` for `w`'s gradient only)
    value_partners: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    # Array parameter -> (kind, guards) for each of its accesses, where one of them sits in an arm
    # of an `if` on a parameter (`if emit_large:`): a launch that binds the parameter to a literal
    # failing a guard never makes that access.
    effect_guards: dict[str, tuple[tuple[str, tuple[Guard, ...]], ...]] = dataclasses.field(default_factory=dict)
    # Helper (a `@wp.func` of this file) -> for each call of it, its parameters this function passes
    # its own parameters to, as they are (`compute(..., joint_qdd, ...)`): helper -> own parameter.
    passed_parameters: dict[str, tuple[dict[str, str], ...]] = dataclasses.field(default_factory=dict)
    # value_reads and gradient_reads hold struct fields ("param.field") too: a field not in them
    # is read only linearly, or only in comparisons and indices
    field_reads_known: bool = False
    # A `@wp.func`'s parameters whose value reaches none of its results, by position and by name
    # (``dataflow.parameter_roles``, every overload agreeing): "branch" (only compared), "index"
    parameter_roles: dict = dataclasses.field(default_factory=dict)

    def param(self, name: str) -> ParamFacts | None:
        return next((p for p in self.params if p.name == name), None)

    def effects_with(self, literals: dict[str, object]) -> dict[str, frozenset[str]]:
        """``effects`` of a launch that binds parameters to these literal values: an access in an
        arm whose guard the literals fail is not made (`if emit_large:` with `False` passed, `if
        joint_qdd:` with `None`). Warp branches on a kernel argument at run time; the access
        skipped there leaves the array untouched, and its adjoint is skipped too."""
        if not self.effect_guards or not literals:
            return self.effects
        effects = dict(self.effects)
        for array, accesses in self.effect_guards.items():
            effects[array] = frozenset(kind for kind, guards in accesses
                                       if not any(fails(guard, literals) for guard in guards))
        return effects


# What an `if` around an access needs of a kernel parameter: (parameter, test, constant, outcome),
# the test being "truth" (`if p:`), "==" or "!=" against the constant (`if mode == 1:`).
Guard = tuple[str, str, object, bool]


def guards_of(function: FunctionModel, branches) -> tuple[Guard, ...]:
    """What the `if` arms ``branches`` (a fact's, outermost first) need of the function's parameters."""
    tested = {p.name for p in function.params} - {b.name for b in function.bindings}
    return tuple(guard for branch in branches for guard in _conditions(branch.node.test, branch.arm == 0, tested))


def guard_data(function: FunctionModel, branches) -> dict:
    """A finding's ``guards`` (data): what the arms around the code it is about need of the
    function's parameters, so that the project model can tell whether any recorded launch runs it."""
    guards = guards_of(function, branches)
    return {"guards": [list(guard) for guard in guards]} if guards else {}


def destination_data(function: FunctionModel, flow, names) -> dict:
    """A kernel finding's ``destinations`` (data): the array parameters the value at stake
    (``names``) can reach (``Dataflow.destinations``), so that the project model can tell whether
    every recorded launch binds them to arrays without gradients, where no gradient enters the
    kernel's adjoint to be made wrong. Nothing for a func (its callers decide) or where not known."""
    if function.kind != "kernel":
        return {}
    found = flow.destinations(names)
    return {"destinations": sorted(found)} if found else {}


def origin_data(function: FunctionModel, flow, statement) -> dict:
    """A kernel finding's ``origins`` (data) where its wrong adjoint is that of one statement: the
    array parameters whose gradient that adjoint gives, those the statement reads and those its
    locals are computed from, so that the project model can tell whether any recorded launch binds
    one of them to an array whose gradient is used. Nothing for a func (its callers decide)."""
    if function.kind != "kernel":
        return {}
    found: set[str] = set()
    for use in flow.uses:
        if use.statement is statement:
            found |= {use.name[1:]} if use.name.startswith("@") else set(flow.origins(use.name))
    return {"origins": sorted(found)} if found else {}


# Kernel-local arrays and tiles (`wp.zeros(shape=8, dtype=float)`, `wp.tile_zeros(...)`): stores into
# them are element stores, not vector component overwrites.
LOCAL_CONTAINER_FACTORIES = {"warp.zeros", "warp.empty", "warp.full", "warp.ones", "warp.array"}


def local_containers(names: WarpNames, function: FunctionModel, tiles: bool = True) -> set[str]:
    """The locals a kernel or func binds to an array or tile of its own (``tiles``: tiles too)."""
    found = set()
    for binding in function.bindings:
        if isinstance(binding.value, cst.Call):
            callee = names.qualify(binding.value.func) or ""
            if callee in LOCAL_CONTAINER_FACTORIES or (tiles and callee.startswith("warp.tile")):
                found.add(binding.name)
    return found


def fails(guard: Guard, literals: dict[str, object]) -> bool:
    """Whether the literals bound to the kernel's parameters make the guard's test come out the
    other way (`if joint_qdd:` with `None` passed)."""
    param, test, constant, outcome = guard
    if param not in literals:
        return False
    value = literals[param]
    try:
        held = bool(value) if test == "truth" else (value == constant) == (test == "==")
    except Exception:  # a literal that does not compare: the guard may hold
        return False
    return held != outcome


def effect_guards(function: FunctionModel) -> dict[str, tuple[tuple[str, tuple[Guard, ...]], ...]]:
    """For each array parameter with an access inside an arm of an `if` on a parameter the
    function never rebinds, every access's kind with the guards around it."""
    found: dict[str, list[tuple[str, tuple[Guard, ...]]]] = {}
    for access in function.accesses:
        found.setdefault(access.array, []).append((access.kind, guards_of(function, access.branches)))
    return {array: tuple(accesses) for array, accesses in found.items() if any(g for _, g in accesses)}


def passed_parameters(function: FunctionModel, index: KernelIndex) -> dict[str, tuple[dict[str, str], ...]]:
    """For each call of a helper of this file: the helper's parameters bound to this function's own
    parameters, passed as they are (the name of a parameter the function never rebinds)."""
    own = {p.name for p in function.params} - {b.name for b in function.bindings}
    found: dict[str, list[dict[str, str]]] = {}
    for site in function.calls:
        call = site.node
        if not isinstance(call.func, cst.Name):
            continue
        helpers = index.by_name(call.func.value)
        if len(helpers) != 1:
            continue
        passed = bound_arguments(call, [p.name for p in helpers[0].params]) or {}
        found.setdefault(call.func.value, []).append(
            {name: value.value for name, value in passed.items() if isinstance(value, cst.Name) and value.value in own})
    return {helper: tuple(calls) for helper, calls in found.items()}


def _conditions(test: cst.BaseExpression, outcome: bool, tested: set[str]) -> tuple[Guard, ...]:
    """What ``test`` having ``outcome`` says of parameters: `a and b` true says both are, `a or b`
    false says neither is; other combinations say nothing."""
    if isinstance(test, cst.Name) and test.value in tested:
        return ((test.value, "truth", None, outcome),)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _conditions(test.expression, not outcome, tested)
    if isinstance(test, cst.BooleanOperation):
        if isinstance(test.operator, cst.And) == outcome:
            return _conditions(test.left, outcome, tested) + _conditions(test.right, outcome, tested)
        return ()
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name) \
            and test.left.value in tested:
        operator, constant = test.comparisons[0].operator, _constant(test.comparisons[0].comparator)
        if constant is not _NOT_CONSTANT:
            if isinstance(operator, (cst.Equal, cst.Is)):
                return ((test.left.value, "==", constant, outcome),)
            if isinstance(operator, (cst.NotEqual, cst.IsNot)):
                return ((test.left.value, "!=", constant, outcome),)
    return ()


_NOT_CONSTANT = object()


def _constant(node: cst.BaseExpression) -> object:
    """An integer, `True`/`False`/`None`, or an integer cast of one (`wp.int32(0)`)."""
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.Call) and len(node.args) == 1 and isinstance(node.args[0].value, cst.Integer):
        return int(node.args[0].value.evaluated_value)
    return _NOT_CONSTANT


def kernel_facts(function: FunctionModel, index: KernelIndex, names: WarpNames) -> KernelFacts:
    params = tuple(ParamFacts(p.name, p.type.kind, p.type.dtype, p.type.differentiable, p.type.ndim)
                   for p in function.params)
    effects = {array: frozenset(kinds) for array, kinds in function.effects().items()}
    structs = {field: frozenset(kinds) for field, kinds in struct_field_effects(function, index).items()}
    options = {k: v for k, v in function.options.items() if isinstance(v, (bool, int, float, str))}
    writes_struct_floats = _writes_struct_floats(function, index, structs)
    value_reads, gradient_reads, partners = _reads_that_matter(function, names, effects, writes_struct_floats, index)
    field_values, field_gradients = _field_reads_that_matter(function, names, effects, structs, writes_struct_floats)
    value_reads, gradient_reads = value_reads | field_values, gradient_reads | field_gradients
    return KernelFacts(function.name, function.kind, params, effects, structs, _stored_twice(function), options,
                       function.runtime_data(), value_reads, gradient_reads, _integer_fields(function, index),
                       function.differentiable, _gradient_writes(function, names, index), function.replayed,
                       partners, effect_guards(function), passed_parameters(function, index), True,
                       _agreed_roles(function, index, names))


def _agreed_roles(function: FunctionModel, index: KernelIndex, names: WarpNames) -> dict:
    """``dataflow.parameter_roles`` of a `@wp.func`, where every overload of its name agrees."""
    return agreed_parameter_roles(index.by_name(function.name), names) if function.kind == "func" else {}


def _gradient_writes(function: FunctionModel, names: WarpNames, index: KernelIndex,
                     visiting: frozenset[str] = frozenset()) -> frozenset[str] | None:
    """The array parameters that receive a value depending on a differentiable input; None where
    that is not known (a write through a helper of another file, or a recursive one).

    A write through a ``@wp.func`` helper of this file counts when the helper stores a gradient
    into the parameter the array is passed as, judged by the helper's own dataflow, in which every
    float argument carries one (newton's contact solver passes its per-body contact counts to the
    helper that adds `1.0` into them)."""
    written = {access.array for access in function.accesses if access.kind in ("write", "accumulate")}
    flow = dataflow_of(function, names)
    found = {access.array for access in function.accesses
             if access.array in written and access.via is None and flow.stores_gradient(access.array)}
    through_helpers = {access.array for access in function.accesses if access.array in written and access.via}
    for call in function.helper_calls:
        passed = {helper_param: array for helper_param, array in call.arguments.items() if array in through_helpers}
        if not passed:
            continue
        helpers = index.by_name(call.helper)
        if not helpers or call.helper in visiting:
            return None
        for helper in helpers:
            stored = _gradient_writes(helper, names, index, visiting | {function.name})
            if stored is None:
                return None
            found |= {array for helper_param, array in passed.items() if helper_param in stored}
    return frozenset(found)


def _integer_fields(function: FunctionModel, index: KernelIndex) -> frozenset[str]:
    found = set()
    for param in function.params:
        struct = index.structs.get(param.type.dtype) if param.type.kind == "struct" else None
        if struct is not None:
            found |= {f"{param.name}.{name}" for name, field in struct.fields.items()
                      if field.is_array and not field.differentiable}
    return frozenset(found)


def _writes_struct_floats(function: FunctionModel, index: KernelIndex, structs: dict[str, frozenset[str]]) -> bool:
    """Whether the kernel may store a float through a struct parameter: a written field of a float
    dtype, or a struct parameter whose definition this file does not hold (so its fields are not
    known)."""
    for param in function.params:
        if param.type.kind != "struct":
            continue
        struct = index.structs.get(param.type.dtype)
        if struct is None:
            return True
        for field, kinds in structs.items():
            owner, _, name = field.partition(".")
            if owner == param.name and kinds & {"write", "accumulate"} and name in struct.fields and \
                    struct.fields[name].differentiable:
                return True
    return False


def _reads_that_matter(function: FunctionModel, names: WarpNames, effects: dict[str, frozenset[str]],
                       writes_struct_fields: bool, index: KernelIndex | None = None
                       ) -> tuple[frozenset[str], frozenset[str], dict[str, frozenset[str]]]:
    """The array parameters whose read values the adjoint reads again when ``backward()`` replays
    the kernel (``value_reads``), and those whose values flow into a differentiable output, so that
    a gradient flows back into them (``gradient_reads``).

    A value read is one used nonlinearly, in a comparison or as an index, read through a helper,
    or the array passed whole (to a call, a tile load). A parameter read only linearly (`z[i] = 3.0
    * y[i]`, `z[i] = y[i] + x[i]`) is not one: overwriting it before `backward()` changes no
    gradient (measured on Warp 1.19 for `z = 3 y` and `z = y + x`), while `z[i] = y[i] * y[i]` is
    wrong. A parameter read only in comparisons or indices passes no gradient back. A kernel that
    writes no float array nor struct field (contact matching, flags, counts) needs none and passes
    none. An array handed only to helpers of ``index`` whose custom adjoint
    (``FunctionModel.custom_adjoint_reads``) never looks at the parameter it binds has no value
    read there: Warp runs that adjoint in the helper's place (Featherstone's `dense_cholesky`,
    whose adjoint is a no-op). A parameter read only as a factor of products (`z[i] = x[i] * w[i]`)
    has its value read only for the other factors' gradients: ``partners`` names the arrays those
    come from, so that a launch binding them to arrays without gradients needs none (measured on
    Warp 1.19: overwriting `x` before `backward()` leaves `x`'s gradient right, `w`'s wrong)."""
    arrays = function.arrays
    if _writes_no_float(function, effects, writes_struct_fields):
        return frozenset(), frozenset(), {}
    flow = dataflow_of(function, names)
    passed_whole = {use.name for use in flow.uses if use.name in arrays and use.position != INDEX}
    values, gradients, partners = set(), set(), {}
    for param, kinds in effects.items():
        if "read" not in kinds:
            continue
        reads = function.reads(param)
        opaque = param in passed_whole and _whole_value_needed(flow, param) or any(read.via for read in reads)
        unseen = index is not None and _seen_by_no_adjoint(function, flow, param, index)
        needing = [] if opaque else list(flow.needing_uses_of_reads(param, {id(read.node) for read in reads},
                                                                     indices=True))
        if function.differentiable and not unseen and (opaque or needing):
            values.add(param)  # with backward disabled its adjoint never runs: it needs nothing
            factors = [flow.partner_arrays(use) for use in needing]
            if needing and all(factor is not None for factor in factors):
                partners[param] = frozenset().union(*factors)
        if param in arrays and not arrays[param].type.differentiable:
            continue  # an integer array: no gradient flows back into it
        if opaque or "@" + param in flow.useful:
            gradients.add(param)
    return frozenset(values), frozenset(gradients), partners


def _field_reads_that_matter(function: FunctionModel, names: WarpNames, effects: dict[str, frozenset[str]],
                             structs: dict[str, frozenset[str]], writes_struct_floats: bool
                             ) -> tuple[frozenset[str], frozenset[str]]:
    """``_reads_that_matter`` for the arrays in struct parameters' fields ("param.field"), read
    the same way: a field read only in comparisons and indices passes no gradient back (a
    matching kernel that transforms body poses only to compare gaps); one read only linearly
    has no value read. A struct passed whole (to a helper) leaves every field of it needed."""
    read = {field for field, kinds in structs.items() if "read" in kinds and field in function.struct_arrays}
    if not read or _writes_no_float(function, effects, writes_struct_floats):
        return frozenset(), frozenset()
    flow = dataflow_of(function, names, fields=True)
    params = {p.name for p in function.params}
    whole = {use.name for use in flow.uses if use.name in params and use.member is None}
    reads_of: dict[str, set[int]] = {}  # field -> the subscripts that read it
    for node in walk(function.node.body):
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) and \
                isinstance(node.value.value, cst.Name):
            reads_of.setdefault(f"{node.value.value.value}.{node.value.attr.value}", set()).add(id(node))
    values, gradients = set(), set()
    for field in read:
        owner = field.split(".", 1)[0]
        passed = any(use.name == field and use.position != INDEX for use in flow.uses)
        nodes = reads_of.get(field, set())
        opaque = owner in whole or passed and _whole_value_needed(flow, field)
        needing = [] if opaque else list(flow.needing_uses_of_reads(field, nodes, indices=True))
        if function.differentiable and (opaque or needing):
            values.add(field)
        if function.struct_arrays[field] and (opaque or "@" + field in flow.useful):
            gradients.add(field)
    return frozenset(values), frozenset(gradients)


def _writes_no_float(function: FunctionModel, effects: dict[str, frozenset[str]], writes_struct_floats: bool) -> bool:
    """A kernel that stores no float, in an array parameter or a struct field (contact matching,
    flags, counts): its adjoint needs no value and passes no gradient."""
    arrays = function.arrays
    return function.kind == "kernel" and not writes_struct_floats and not any(
        kinds & {"write", "accumulate"} and name in arrays and arrays[name].type.differentiable
        for name, kinds in effects.items())


def _seen_by_no_adjoint(function: FunctionModel, flow, param: str, index: KernelIndex) -> bool:
    """Whether every use of the array ``param`` is as an argument of helpers whose custom adjoint
    never mentions the parameter it binds: then no adjoint reads its values."""
    calls = [call for call in function.helper_calls if param in call.arguments.values()]

    def looked_at(call) -> bool:
        helpers = index.by_name(call.helper)
        return not helpers or any(helper.custom_adjoint_reads is None or any(
            array == param and helper_param in helper.custom_adjoint_reads
            for helper_param, array in call.arguments.items()) for helper in helpers)

    if not calls or any(looked_at(call) for call in calls):
        return False
    inside = {id(node) for call in calls for node in walk(call.node)}
    if any(read.via is None and id(read.node) not in inside or read.via not in {c.helper for c in calls} | {None}
           for read in function.reads(param)):
        return False
    return all(id(use.node) in inside for use in flow.uses if use.name in (param, "@" + param))


def _whole_value_needed(flow, param: str) -> bool:
    """Whether an array passed whole (to a call, a tile load) has its values needed by the adjoint:
    passed to anything but a linear builtin, or loaded (`t = wp.tile_load(x, ...)`) into a value
    that is then used nonlinearly, compared or used as an index. A tile loaded, transposed and
    stored (measured on Warp 1.19: overwriting its input before `backward()` leaves the gradient
    right, where `tile_map(wp.sin, t)` is wrong) needs none."""
    whole = [use for use in flow.uses if use.name == param and use.position != INDEX]
    if any(use.position != LINEAR for use in whole):
        return True
    derived = flow.linear_derivatives({param}) - {param}
    return any(True for _ in flow.needing_uses(derived, indices=True))


def _stored_twice(function: FunctionModel) -> frozenset[str]:
    """Array parameters with two plain stores that can both run in one pass, outside loops."""
    found = set()
    for param in function.arrays:
        stores = [a for a in function.accesses if a.array == param and a.kind == "write" and a.operator is None
                  and a.via is None and not a.loops]
        if any(not mutually_exclusive(first.branches, second.branches)
               for position, second in enumerate(stores) for first in stores[:position]):
            found.add(param)
    return frozenset(found)
