"""Small launch arguments synthesized from a kernel's real argument types (child side: imports warp).

Types come from the loaded kernel (``kernel.adj.args``, or a ``@wp.func``'s ``input_types``), not
from annotation text: they are what Warp itself launches with, aliases, subscript annotations
(``wp.array[float]``) and ``from __future__ import annotations`` included. Generic parameters get
concrete types first (:func:`concrete_types`).

Values respect what the kernel does with them (:func:`kernel_facts` reads its source):

* a kernel that never calls ``wp.tid()`` runs one thread (several would all do the same work,
  racing on the same elements on a GPU);
* integers used as divisors or strides are never zero (an integer division by zero kills the
  process); integer arrays whose values index other arrays hold in-range, distinct indices (no
  degenerate triangle, no two threads scattering into one element); an array read at ``i + 1``
  (offsets of a CSR layout) is non-decreasing;
* quaternions and the rotations of transforms are normalised;
* floating-point values come from a :class:`Fill`: tame values first, then, for value-dependent
  hazards, values that reach singular points (equal elements, zeros, large magnitudes);
* integers that decide branches (``if joint_type[j] == JointType.FREE``, ``if total <= MAX``,
  ``if not flag``) are drawn, in a *targeted* draw, among the constants the kernel compares them
  with and their neighbours (names resolved in the kernel's own namespace: enum members, module
  constants), so the code behind the branch runs; offsets take longer strides there.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import warp as wp

from warp_lint.runtime import generated
from warp_lint.runtime.comparison import float_precision, scalar_type_of
from warp_lint.runtime.locate import array_type, attribute_path, function_namespace, function_source, is_special_array

# Threads per launch dimension. One-dimensional arrays get LAUNCH_EXTENT**2 elements so that
# flattened 2-D indexing (``x[i * n + j]``) stays in bounds; higher-dimensional arrays get as many
# in their first dimension and LAUNCH_EXTENT in the others. Integer values are drawn below
# LAUNCH_EXTENT unless they index a one-dimensional array directly.
LAUNCH_EXTENT = 4
LONG_EXTENT = LAUNCH_EXTENT * LAUNCH_EXTENT

_INT_SCALARS = {wp.int8, wp.int16, wp.int32, wp.int64, wp.uint8, wp.uint16, wp.uint32, int}
_FLOAT_SCALARS = {wp.float16, wp.float32, wp.float64, float}
_VECTOR_CALLS = {"length", "length_sq", "dot", "cross", "normalize", "outer"}
CALLEE_DEPTH = 6  # how many calls deep a generic parameter's type is looked for
_MATRIX_CALLS = {"transpose", "determinant", "inverse", "trace", "svd3", "qr3", "eig3", "ddot"}


class UnsupportedKernel(Exception):
    """The kernel takes an argument the checker cannot make up safely; ``str()`` says which."""


# -- what the kernel does with its arguments -----------------------------------------------------
@dataclasses.dataclass
class KernelFacts:
    tid_arity: int = 0  # 0: the kernel never calls wp.tid()
    # Why every thread would do the same work (the launch then runs one): a kernel that never
    # calls wp.tid(), or a @wp.func writing an array it is given that no thread index picks into.
    same_work: str | None = None
    divisors: set[str] = dataclasses.field(default_factory=set)  # params (or arrays) whose values divide
    index_uses: dict[str, list[tuple[str, int, bool]]] = dataclasses.field(default_factory=dict)
    monotone: set[str] = dataclasses.field(default_factory=set)  # arrays read at `i + 1`
    subscripted: dict[str, int] = dataclasses.field(default_factory=dict)  # param -> most indices seen
    # param -> the largest literal index, for params only ever indexed by literals (`pos[2]`): in a
    # @wp.func those are vectors, not arrays
    literal_indices: dict[str, int | None] = dataclasses.field(default_factory=dict)
    vector_like: set[str] = dataclasses.field(default_factory=set)  # params used as vectors
    matrix_like: set[str] = dataclasses.field(default_factory=set)  # params passed to matrix builtins
    struct_like: set[str] = dataclasses.field(default_factory=set)  # params whose named fields are read
    fields_read: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # param -> those fields
    # param -> (callee, position): the calls it is passed to as it is (`helper(geom, d)`)
    passed_to: dict[str, list[tuple[str, int]]] = dataclasses.field(default_factory=dict)
    # What a uint64 (or an array of them) is a handle of: "bvh" or "mesh", from the builtins it is
    # passed to (`wp.bvh_query_ray(data.bvh_id, ...)`, `wp.mesh_query_point(meshes[k], ...)`).
    handles: dict[str, str] = dataclasses.field(default_factory=dict)
    # Integer arrays compared with 0 or -1: -1 ends a chain (`while c >= 0: c = next[c]`, parents).
    sentinels: set[str] = dataclasses.field(default_factory=set)
    tiles: bool = False  # a tile kernel: needs wp.launch_tiled
    literals: list[float] = dataclasses.field(default_factory=list)  # numbers compared against
    # Integer constants each value is compared with (params, integer arrays, ``param.field``), and
    # their neighbours: the values that take each side of the branch.
    branch_values: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    # (a, b): `range(a[i], b[j])`: b's values are the ends of ranges that start at a's.
    range_pairs: set[tuple[str, str]] = dataclasses.field(default_factory=set)


def _callee(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _indices(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def kernel_facts(source: str, namespace: Mapping[str, Any] | None = None) -> KernelFacts:
    """What the definition in ``source`` does with its parameters (a syntactic reading).
    ``namespace`` (the names the definition sees) resolves the constants branches compare with."""
    tree = ast.parse(source)
    definition = tree.body[0]
    params = {a.arg for a in definition.args.args} if isinstance(definition, ast.FunctionDef) else set()
    facts = KernelFacts(literals=comparison_literals(tree), tiles=uses_tiles(tree))
    local_sources: dict[str, set[str]] = {}
    # What a local's *value* comes from (not what its indices do): `t = types[j]` holds a value of
    # `types`, not of `j`; `geom.kind` stands for itself.
    local_values: dict[str, set[str]] = {}
    # What flows into a local's value, not counting the indices that pick elements: `a = v[2 * k]`
    # takes nothing of `k`'s value (a divisor made of `a` does not make `k` non-zero).
    local_value_sources: dict[str, set[str]] = {}
    # `ptr = unpack_mesh_ptr(geom.auxiliary)`: a local a helper of the program unpacks from a value
    # (a handle packed into floats): local -> (the handle kind's packed form, the values it reads).
    unpacked: dict[str, tuple[str, set[str]]] = {}

    def value_sources(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Subscript):
            return value_sources(node.value)
        found: set[str] = set()
        if isinstance(node, ast.Name):
            found = ({node.id} if node.id in params else set()) | local_value_sources.get(node.id, set())
        for child in ast.iter_child_nodes(node):
            found |= value_sources(child)
        return found

    def sources(node: ast.AST) -> set[str]:
        """Parameters whose values flow into ``node`` (a param itself, or an array it reads)."""
        found: set[str] = set()
        for child in ast.walk(node):
            if isinstance(child, ast.Name):
                if child.id in params:
                    found.add(child.id)
                found |= local_sources.get(child.id, set())
        return found

    def values(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Name):
            return {node.id} if node.id in params else set(local_values.get(node.id, ()))
        if isinstance(node, ast.Subscript):
            return values(node.value)
        if isinstance(node, ast.Attribute):
            path = attribute_path(node)
            if path is not None and path.split(".")[0] in params:
                return {path}
            return values(node.value)
        if isinstance(node, ast.Call):
            if _callee(node) in _INTEGER_CASTS and len(node.args) == 1:
                return values(node.args[0])
            return set()
        if isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.Add, ast.Sub)):
            return set()  # `1 << k`, `k * 3`: a value compared with a constant says nothing of k's
        found: set[str] = set()
        for child in ast.iter_child_nodes(node):
            found |= values(child)
        return found

    statements = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.For))),
                        key=lambda n: (n.lineno, n.col_offset))
    for statement in statements:
        if isinstance(statement, ast.For):
            targets, value = [statement.target], statement.iter
        elif isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        else:
            targets, value = [statement.target], statement.value
        flowing = sources(value)
        flowing_values = value_sources(value)
        held = values(value) if not isinstance(statement, ast.For) else set()
        unpacking = _unpacking(value, namespace)
        for target in targets:
            # Names bound by the statement: `a = ...`, `a, b = ...`; not the index of `out[i] = ...`.
            bound = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            for name in bound:
                if isinstance(name, ast.Name) and name.id not in params:
                    local_sources[name.id] = local_sources.get(name.id, set()) | flowing
                    local_value_sources[name.id] = local_value_sources.get(name.id, set()) | flowing_values
                    local_values[name.id] = local_values.get(name.id, set()) | held
            if isinstance(target, ast.Name) and unpacking is not None:
                unpacked[target.id] = (unpacking, values(value.args[0]))
    locals_ = set(local_sources) | params

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _callee(node.value) == "tid":
            target = node.targets[0]
            facts.tid_arity = max(facts.tid_arity, len(target.elts) if isinstance(target, (ast.Tuple, ast.List)) else 1)
        elif _callee(node) == "tid":
            facts.tid_arity = max(facts.tid_arity, 1)
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_sentinel(o) for o in operands):
                for operand in operands:
                    if not _sentinel(operand):
                        # `parent = parents[j]; if parent >= 0`: parents ends chains, not j's source.
                        facts.sentinels |= values(operand)
            for left, right in zip(operands, operands[1:]):
                for side, other in ((left, right), (right, left)):
                    constant = _integer_constant(other, namespace, locals_)
                    if constant is not None:
                        for source in values(side):
                            facts.branch_values.setdefault(source, set()).update(
                                (constant - 1, constant, constant + 1))
                    if constant is not None and isinstance(side, ast.BinOp) and isinstance(side.op, ast.BitAnd):
                        # `(flags[b] & filter) != 0`: both are bit sets; low bits on either side
                        # overlap or not, so the test takes both arms.
                        for operand in (side.left, side.right):
                            for source in values(operand):
                                facts.branch_values.setdefault(source, set()).update(BIT_CHOICES)
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) or (
                isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            test = node.operand if isinstance(node, ast.UnaryOp) else node.test
            for source in values(test) if isinstance(test, (ast.Name, ast.Subscript, ast.Attribute)) else ():
                facts.branch_values.setdefault(source, set()).update((0, 1))  # a flag: both arms
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            facts.divisors |= value_sources(node.right)
        name = _callee(node)
        if isinstance(node, ast.Call):
            handle = _handle_kind(name)
            if handle and node.args:
                first = node.args[0]
                unpacking = _unpacking(first, namespace)
                packed = ((unpacking, values(first.args[0])) if unpacking is not None
                          else unpacked.get(getattr(first, "id", None)))
                if packed is not None:
                    for source in packed[1]:
                        facts.handles[source] = f"{handle}{PACKED_BY}{packed[0]}"
                else:
                    for source in values(first):
                        facts.handles[source] = handle
            callee = attribute_path(node.func)
            for position, argument in enumerate(node.args):
                if callee and isinstance(argument, ast.Name) and argument.id in params:
                    facts.passed_to.setdefault(argument.id, []).append((callee, position))
        if name in ("div", "floordiv", "mod") and len(node.args) == 2:
            facts.divisors |= value_sources(node.args[1])
        if name == "range" and len(node.args) == 3:
            facts.divisors |= value_sources(node.args[2])
        if name == "range" and len(node.args) >= 2:
            # `range(offsets[j], offsets[j + 1])`, `range(start[i], end[i])`: ranges end after
            # they start, so such values are offsets (non-decreasing) or start/end pairs.
            starts, ends = values(node.args[0]), values(node.args[1])
            facts.monotone |= {a for a in starts & ends if a in params}
            facts.range_pairs |= {(a, b) for a in starts for b in ends if a != b and a in params and b in params}
        if name in _VECTOR_CALLS or name in _MATRIX_CALLS:
            for argument in node.args:
                base = argument.value if isinstance(argument, ast.Subscript) else argument
                if isinstance(base, ast.Name) and base.id in params:
                    (facts.vector_like if name in _VECTOR_CALLS else facts.matrix_like).add(base.id)
        if isinstance(node, ast.Attribute):
            base = node.value.value if isinstance(node.value, ast.Subscript) else node.value
            if isinstance(base, ast.Name) and base.id in params:
                if node.attr in ("x", "y", "z", "w"):
                    facts.vector_like.add(base.id)
                elif node.attr not in ("shape", "dtype", "ndim", "size", "ptr", "grad"):
                    facts.struct_like.add(base.id)
                    facts.fields_read.setdefault(base.id, set()).add(node.attr)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in params:
            array = node.value.id
            indices = _indices(node)
            facts.subscripted[array] = max(facts.subscripted.get(array, 0), len(indices))
            literal = [i.value for i in indices if isinstance(i, ast.Constant) and isinstance(i.value, int)]
            if len(literal) == len(indices) == 1 and facts.literal_indices.get(array, 0) is not None:
                facts.literal_indices[array] = max(facts.literal_indices.get(array, 0), literal[0])
            else:
                facts.literal_indices[array] = None
            for position, index in enumerate(indices):
                direct = isinstance(index, (ast.Name, ast.Subscript))
                for source in sources(index) - {array}:
                    facts.index_uses.setdefault(source, []).append((array, position, direct))
                if (isinstance(index, ast.BinOp) and isinstance(index.op, ast.Add)
                        and isinstance(index.right, ast.Constant) and index.right.value == 1):
                    facts.monotone.add(array)
    return facts


def _handle_kind(builtin: str | None) -> str | None:
    """The structure a builtin's first argument is the id of: BVH and mesh queries (volumes, hash
    grids and textures are not synthesized)."""
    if not builtin:
        return None
    if builtin.startswith("bvh_query_"):
        return "bvh"
    if builtin.startswith(("mesh_query_", "mesh_eval_", "mesh_get")):
        return "mesh"
    return None


BIT_CHOICES = (0, 1, 2, 3)  # values a bit set compared through a mask is drawn among
PACKED_BY = "@"  # "mesh@k": a mesh id packed into floats, by PACKERS[k]
# Packing functions of the program, by the key a packed handle names (one per unpacking helper).
PACKERS: dict[str, Any] = {}


def _unpacking(node: ast.AST, namespace: Mapping[str, Any] | None) -> str | None:
    """The key of the packing function for ``unpack_x(value)``: a ``@wp.func`` of the program,
    called on one value, whose module also defines ``pack_x`` (newton packs a mesh pointer into the
    three floats of a shape's ``auxiliary``); None for anything else."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords and namespace):
        return None
    path = attribute_path(node.func)
    if not path or "unpack" not in path.rsplit(".", 1)[-1]:
        return None
    unpack = namespace.get(path.split(".")[0])
    for part in path.split(".")[1:]:
        unpack = getattr(unpack, part, None)
    func = getattr(unpack, "func", None)
    if func is None:
        return None
    pack = func.__globals__.get(func.__name__.replace("unpack", "pack", 1))
    if getattr(pack, "func", None) is None:
        return None
    key = f"{func.__module__}.{pack.func.__name__}"
    PACKERS[key] = pack
    return key


_INTEGER_CASTS = {"int", "static", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


def _integer_constant(node: ast.AST, namespace: Mapping[str, Any] | None, locals_: set[str]) -> int | None:
    """The integer a compared operand stands for: a literal, an enum member or module constant
    (resolved in ``namespace``; a parameter or local is no constant), ``int(...)``/``wp.static(...)``
    of one, or a sum or difference of those."""
    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _integer_constant(node.operand, namespace, locals_)
        return None if value is None else -value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        left = _integer_constant(node.left, namespace, locals_)
        right = _integer_constant(node.right, namespace, locals_)
        if left is None or right is None:
            return None
        return left + right if isinstance(node.op, ast.Add) else left - right if isinstance(node.op, ast.Sub) \
            else left * right
    if isinstance(node, ast.Call) and _callee(node) in _INTEGER_CASTS and len(node.args) == 1:
        return _integer_constant(node.args[0], namespace, locals_)
    path = attribute_path(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if path is None or namespace is None or path.split(".")[0] in locals_:
        return None
    parts = path.split(".")
    if parts[0] not in namespace:
        return None
    value = namespace[parts[0]]
    for part in parts[1:]:
        value = getattr(value, part, None)
    # Enum members of IntEnum are ints; a wp.constant of an int is the int itself.
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def _sentinel(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value in (0, -1) and not isinstance(node.value, (bool, float)):
        return True
    return (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and node.operand.value == 1)


def comparison_literals(tree: ast.AST) -> list[float]:
    """Numeric literals compared against in the kernel: where its branches switch."""
    found: list[float] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            value = None
            if isinstance(operand, ast.Constant) and isinstance(operand.value, (int, float)) and not isinstance(operand.value, bool):
                value = float(operand.value)
            elif (
                isinstance(operand, ast.UnaryOp)
                and isinstance(operand.op, ast.USub)
                and isinstance(operand.operand, ast.Constant)
                and isinstance(operand.operand.value, (int, float))
            ):
                value = -float(operand.operand.value)
            if value is not None and value not in found:
                found.append(value)
    return found


def uses_tiles(tree: ast.AST) -> bool:
    """Tile kernels need ``wp.launch_tiled`` and block-shaped arguments: not synthesized."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("tile"):
            return True
    return False


# -- concrete types for generic parameters -------------------------------------------------------
def _vector_of(scalar: Any) -> Any:
    return {wp.float16: wp.vec3h, wp.float32: wp.vec3, wp.float64: wp.vec3d}[scalar]


def _matrix_of(scalar: Any) -> Any:
    # 4x4: loops over a matrix's rows take their count from integer parameters, which are drawn
    # as LAUNCH_EXTENT (`for i in range(n_columns): at[i]`)
    return {wp.float16: wp.mat44h, wp.float32: wp.mat44, wp.float64: wp.mat44d}[scalar]


def concrete_types(params: Sequence[tuple[str, Any]], facts: KernelFacts, scalar: Any,
                   declared: Sequence[dict[str, Any]] = (), structs: Sequence[Any] = (),
                   namespace: Mapping[str, Any] | None = None, function: bool = False) -> dict[str, Any] | None:
    """Concrete types for the generic parameters, one float precision for all of them; None when
    nothing is generic. ``declared`` are the instantiations the user's code made (``wp.overload``):
    the first of precision ``scalar`` is used as it is, else types are read from how the code
    uses each parameter: the type a ``@wp.func`` it is passed to declares for it (followed through
    generic helpers, resolved in ``namespace``); a parameter whose fields are read (here or in
    those helpers): the one struct among ``structs`` (the program's ``@wp.struct`` types) with
    every field read; in a ``@wp.func`` (``function``), one indexed only by literals: a vector of
    that length; indexed: an array; ``.x`` or ``wp.length``: a vector; ``wp.transpose``: a 4x4
    matrix; else a scalar."""
    generic = [name for name, t in params if _is_generic(t)]
    if not generic:
        return None
    as_structs: dict[str, Any] = {}
    for name in generic:
        declared_type, fields = _from_callees(name, facts, namespace or {})
        if declared_type is not None:
            as_structs[name] = declared_type  # a helper it is passed to declares its type
            continue
        if name not in facts.struct_like and not fields:
            continue
        fields |= facts.fields_read.get(name, set())
        found = struct_with_fields(fields, structs)
        if found is None:
            matching = [s.key for s in structs if fields <= set(s.vars)]
            raise UnsupportedKernel(
                f"generic parameter {name!r} is used as a struct (it reads {', '.join(sorted(fields))}): "
                + (f"{len(matching)} structs have those fields ({', '.join(sorted(matching)[:4])}...), so its type "
                   "cannot be told" if matching else "no @wp.struct of the program has those fields"))
        as_structs[name] = found
    for types in declared:
        floats = {float_precision(getattr(array_type(t), "dtype", t)) for t in types.values()} - {None}
        if floats <= {float_precision(scalar)}:
            return {name: types[name] for name in generic if name in types}
    chosen: dict[str, Any] = {}
    for name, t in params:
        if not _is_generic(t):
            continue
        if name in as_structs:
            chosen[name] = as_structs[name]
            continue
        element = (_matrix_of(scalar) if name in facts.matrix_like
                   else _vector_of(scalar) if name in facts.vector_like else scalar)
        array = array_type(t)
        if array is not None:
            chosen[name] = wp.array(dtype=element, ndim=array.ndim)
        elif function and name in facts.matrix_like:
            chosen[name] = element  # `A[i, j]` and `A[0]` of a matrix, not of an array
        elif function and facts.literal_indices.get(name) in (0, 1, 2, 3):
            chosen[name] = wp.types.vector(length=max(2, facts.literal_indices[name] + 1), dtype=scalar)
        elif name in facts.subscripted:
            chosen[name] = wp.array(dtype=element, ndim=facts.subscripted[name])
        else:
            chosen[name] = element
    return chosen


@dataclasses.dataclass
class _Callee:
    """One overload of a ``@wp.func`` a parameter is passed to: the parameter it lands in, and
    what the callee's own code does (None where its source cannot be read)."""

    label: str
    declared: Any
    facts: KernelFacts | None
    namespace: dict[str, Any]
    func: Any  # the Python function of the overload


@functools.lru_cache(maxsize=None)
def _function_facts(func: Any) -> tuple[KernelFacts | None, dict[str, Any]]:
    """The facts of a helper's own code, and the names it sees; read once per process (a helper
    is met again and again through the calls of a large file: each reading tokenizes its source)."""
    namespace = function_namespace(func)
    source = function_source(func)
    try:
        return (kernel_facts(source, namespace) if source is not None else None), namespace
    except SyntaxError:
        return None, namespace


def _callees(name: str, facts: KernelFacts, namespace: Mapping[str, Any]) -> Iterator[_Callee]:
    """The overloads of the ``@wp.func`` helpers ``name`` is passed to, as it is."""
    for callee_path, position in facts.passed_to.get(name, ()):
        parts = callee_path.split(".")
        callee = namespace.get(parts[0])
        for part in parts[1:]:
            callee = getattr(callee, part, None)
        if callee is None or not hasattr(callee, "input_types") or getattr(callee, "func", None) is None:
            continue  # a builtin, or nothing the program defines
        for overload in [callee, *getattr(callee, "user_overloads", {}).values()]:
            labels = list(overload.input_types.items())
            if position >= len(labels):
                continue
            label, declared = labels[position]
            inner, inner_namespace = _function_facts(overload.func)
            yield _Callee(label, declared, inner, inner_namespace, overload.func)


def _from_callees(name: str, facts: KernelFacts, namespace: Mapping[str, Any]) -> tuple[Any, set[str]]:
    """What the ``@wp.func`` helpers ``name`` is passed to say of its type: (a concrete type one of
    them declares for that parameter, or None; the fields generic helpers read on it). Followed
    CALLEE_DEPTH calls deep, nearest helpers first; each helper's parameter is read once (generic
    helpers of factories pass it on through many paths: newton's MPR reaches the helper declaring
    its data provider's struct five calls down)."""
    fields: set[str] = set()
    frontier = [(name, facts, namespace)]
    seen: set[tuple[Any, str]] = set()
    for _ in range(CALLEE_DEPTH):
        deeper = []
        for label, caller_facts, caller_namespace in frontier:
            for callee in _callees(label, caller_facts, caller_namespace):
                if not _is_generic(callee.declared):
                    return callee.declared, fields
                if callee.facts is None or (callee.func, callee.label) in seen:
                    continue
                seen.add((callee.func, callee.label))
                fields |= callee.facts.fields_read.get(callee.label, set())
                deeper.append((callee.label, callee.facts, callee.namespace))
        frontier = deeper
    return None, fields


def handles_through_callees(facts: KernelFacts, namespace: Mapping[str, Any], depth: int = 0) -> dict[str, str]:
    """Handles the code passes to ``@wp.func`` helpers that query them (followed three calls
    deep): ``helper(data)`` where the helper calls ``wp.bvh_query_ray(d.bvh_id, ...)`` makes
    ``data.bvh_id`` a BVH id."""
    found: dict[str, str] = {}
    if depth > 3:
        return found
    for name in facts.passed_to:
        for callee in _callees(name, facts, namespace):
            if callee.facts is None:
                continue
            handles = callee.facts.handles | _handles_of(callee.func, depth + 1)
            for path, kind in handles.items():
                if path == callee.label or path.startswith(callee.label + "."):
                    found[name + path[len(callee.label):]] = kind
    return found


@functools.lru_cache(maxsize=None)
def _handles_of(func: Any, depth: int) -> dict[str, str]:
    """:func:`handles_through_callees` of a helper's own code, worked out once per helper and depth."""
    facts, namespace = _function_facts(func)
    return handles_through_callees(facts, namespace, depth) if facts is not None else {}


def struct_with_fields(fields: set[str], structs: Sequence[Any]) -> Any | None:
    """The struct a generic parameter stands for, from the fields the code reads on it: the
    smallest structs having all of them, if they all have one layout (a struct defined twice, or
    re-registered by a factory, is one type); None when no struct, or several different ones, fit."""
    matching = [s for s in structs if fields and fields <= set(s.vars)]
    if not matching:
        return None
    fewest = min(len(s.vars) for s in matching)
    smallest = [s for s in matching if len(s.vars) == fewest]
    layouts = {tuple((field, repr(var.type)) for field, var in s.vars.items()) for s in smallest}
    return smallest[0] if len(layouts) == 1 else None


def _is_generic(t: Any) -> bool:
    if t is typing.Any:
        return True
    array = array_type(t)
    return array is not None and array.dtype is typing.Any


# -- fills -----------------------------------------------------------------------------------------
CLOSE_LITERALS_BELOW = 0.01  # literals this small also get a fill at their own scale ("close")


@dataclasses.dataclass(frozen=True)
class Fill:
    """How floating-point values are drawn."""

    kind: str  # default | small | wide | around | close | aligned | zeros | large | sparse
    center: float = 0.0

    def describe(self) -> str:
        if self.kind == "close":
            return (f"within twice the literal {self.center:g} of zero (three values in four; the rest as "
                    "for a literal of 1)")
        return {
            "default": "uniform in [0.5, 1.5]",
            "small": "uniform in [0.05, 0.45]",
            "wide": "uniform in [-3, 3]",
            "aligned": "uniform in [0.5, 1.5], the same values in every array (differences vanish)",
            "zeros": "all zero",
            "large": "magnitudes uniform in [50, 120], random signs",
            "sparse": "uniform in [-3, 3], one value in three exactly zero",
        }.get(self.kind, f"both sides of the literal {self.center:g}")

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if self.kind in ("default", "aligned"):
            # Positive values keep sqrt/log/pow defined; the magnitude keeps FD well scaled.
            return rng.uniform(0.5, 1.5, size=shape)
        if self.kind == "small":
            return rng.uniform(0.05, 0.45, size=shape)
        if self.kind == "wide":
            return rng.uniform(-3.0, 3.0, size=shape)
        if self.kind == "zeros":
            return np.zeros(shape)
        if self.kind == "large":
            return rng.uniform(50.0, 120.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        if self.kind == "sparse":
            values = rng.uniform(-3.0, 3.0, size=shape)
            return np.where(rng.random(size=shape) < 1.0 / 3.0, 0.0, values)
        offsets = rng.uniform(0.05, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        around = self.center + offsets * max(1.0, abs(self.center) * 0.1)
        if self.kind == "close":
            # `wp.abs(n[2]) <= 1e-4` needs one component that small; the others, of the usual
            # size, keep finite differences well scaled.
            near = rng.uniform(-2.0, 2.0, size=shape) * abs(self.center)
            return np.where(rng.random(size=shape) < 0.75, near, around)
        return around


def fills_for(facts: KernelFacts, value_dependent: bool) -> list[Fill]:
    """Fills to try, tamest first: the first whose forward is finite and that runs the flagged
    statement (and, for a value-dependent rule, reaches its singular point) is used."""
    fills = [Fill("default"), Fill("small")]
    if value_dependent:
        fills += [Fill("aligned"), Fill("zeros"), Fill("large")]
    fills += [Fill("around", c) for c in facts.literals]
    fills.append(Fill("wide"))
    # A threshold far below the values' scale (an epsilon) is crossed only by values as small as
    # it. Tried last, so a statement another fill runs is drawn as before.
    fills += [Fill("close", c) for c in facts.literals if 0.0 < abs(c) < CLOSE_LITERALS_BELOW]
    return fills


# Exact zeros among the values (an axis-aligned direction, a body at rest): a branch on a component
# below a tolerance of the others (`|d.x| <= 1e-6 * |d|`, the constant a module's, not a literal the
# kernel shows) is taken only at zero. Drawn only after the fills and the exploration found nothing,
# so that what they reach is drawn exactly as before.
ZEROS_LAST = Fill("sparse")


# -- the plan --------------------------------------------------------------------------------------
@dataclasses.dataclass
class ArgumentSpec:
    """What to pass for one kernel argument."""

    name: str
    # "float-array" | "int-array" | "bool-array" | "int" | "bool" | "float-value" | "int-value" | "struct"
    # | "handle" | "handle-array" | "struct-array" (fields drawn per element) | "left-zero" (a field
    # of such an element no draw stands for)
    kind: str
    warp_type: Any  # dtype for arrays, the scalar/vector/struct type otherwise
    ndim: int = 0
    is_index: bool = False
    bound: int = LAUNCH_EXTENT  # integer values stay below this
    nonzero: bool = False  # a divisor or stride
    distinct: bool = False  # indexes elements: no repeats within a row / a launch
    monotone: bool = False  # offsets: non-decreasing
    chain: bool = False  # -1 terminated links (parents, next pointers): every chain ends
    # Values that take either side of the kernel's branches on this integer (targeted draws).
    choices: tuple[int, ...] = ()
    # Integer arrays this one's values end ranges of (elementwise at least theirs) or start them.
    at_least: str | None = None
    at_most: str | None = None
    # A struct's fields, named `param.field` (what kernel sources read: `geom.scale`).
    fields: list["ArgumentSpec"] = dataclasses.field(default_factory=list)
    handle: str | None = None  # "bvh" | "mesh": a real one is built from the draw's floats


def walk_specs(specs: Sequence[ArgumentSpec]) -> list[ArgumentSpec]:
    """Every spec, a struct's fields (recursively) after the struct."""
    found: list[ArgumentSpec] = []
    for spec in specs:
        found.append(spec)
        found += walk_specs(spec.fields)
    return found


@dataclasses.dataclass
class LaunchPlan:
    """Launch dimension and argument recipe for one kernel."""

    dim: tuple[int, ...]
    arguments: list[ArgumentSpec]
    same_work: str | None = None
    # Length of every array's first dimension. Integers stay below their bounds whatever it is: a
    # longer array only leaves room for what the kernel adds to them (`x[s * 8 + k]`, `x[j + 5]`).
    length: int = LONG_EXTENT
    MAX_LENGTH = 8 * LONG_EXTENT

    def lengthen(self) -> bool:
        """Double the arrays' length for the next draws (a draw reached past them); False at the cap."""
        if self.length >= self.MAX_LENGTH:
            return False
        self.length *= 2
        return True

    def single_thread(self, why: str) -> bool:
        """Launch one thread from the next draw on; False when it already does."""
        if all(extent == 1 for extent in self.dim):
            return False
        self.dim = tuple(1 for _ in self.dim)
        self.same_work = why
        return True

    @property
    def float_arrays(self) -> list[str]:
        """Every float array, the array fields of struct arguments (``param.field``) included:
        what finite differences perturb and gradients flow into."""
        return [a.name for a in walk_specs(self.arguments) if a.kind == "float-array"]

    @property
    def left_zero(self) -> list[str]:
        """Fields of arrays of structs left at zero: a kernel using one reads a made-up id."""
        return [a.name for a in walk_specs(self.arguments) if a.kind == "left-zero"]

    @property
    def targetable(self) -> bool:
        """Whether a targeted draw differs from a plain one: some integer decides a branch, a
        flag can be off, or offsets can stride further."""
        return any(a.choices or a.kind in ("bool", "bool-array") or a.monotone for a in walk_specs(self.arguments))

    def describe_domain(self) -> list[str]:
        """The constraints the synthesized integers respect, for the evidence."""
        notes = []
        if self.dim == (1,):
            notes.append(f"one thread: {self.same_work or 'the kernel never calls wp.tid()'}")
        for spec in walk_specs(self.arguments):
            traits = [t for t, on in (("non-zero", spec.nonzero), ("distinct indices", spec.distinct),
                                      ("non-decreasing", spec.monotone),
                                      (f"at least {spec.at_least} (ranges end after they start)", spec.at_least),
                                      (f"at most {spec.at_most} (ranges start before they end)", spec.at_most),
                                      ("-1 terminated chains (each entry points to an earlier one)", spec.chain)) if on]
            if spec.kind in ("int", "int-array") and (traits or spec.is_index):
                traits.append(f"below {spec.bound}")
            if spec.choices:
                traits.append(f"in targeted draws often one of {', '.join(map(str, spec.choices))} "
                              "(the constants its branches compare with, and their neighbours)")
            if spec.kind == "left-zero":
                traits.append("left at zero in every element (an array, an id or a texture: no draw stands for it)")
            if spec.handle:
                what = "BVH of as many boxes" if spec.handle == "bvh" else "mesh of as many points and triangles"
                traits.append(f"the id of a real {what} as an array has elements, built where the draw's floats lie")
            if traits:
                notes.append(f"{spec.name}: {', '.join(traits)}")
        return notes


def index_bound(uses: Sequence[tuple[str, int, bool]], ndims: dict[str, int], monotone: bool = False) -> int:
    """The bound below which an integer argument's synthesized values stay, from its uses as an
    index (array, position, used as it is). Indices into an array's first dimension may cover it
    (every array is as long there as a 1-D one) when they are used as they are, or are offsets
    (`start[i] + k`: a longer array is made for a draw that reaches past it); others, and an
    integer that indexes nothing, stay below the launch extent."""
    direct = all(d for _, _, d in uses)
    return min((LONG_EXTENT if position == 0 and ndims.get(array, 1) >= 1 and (direct or monotone)
                else LAUNCH_EXTENT for array, position, _ in uses), default=LAUNCH_EXTENT)


def plan_launch(params: Sequence[tuple[str, Any]], facts: KernelFacts, index_params: Sequence[str] = (),
                source: str | None = None) -> LaunchPlan:
    """Decide the launch dimension and how to synthesize each argument, or raise UnsupportedKernel.
    ``params`` hold concrete types (generic ones already instantiated)."""
    if source is not None and uses_tiles(ast.parse(source)):
        raise UnsupportedKernel("tile kernel (needs wp.launch_tiled with block-shaped arguments)")
    handles = dict(facts.handles)
    for name, _ in params:  # a func wrapper's arrays of a struct's fields are those fields
        if generated.readable(name) in handles:
            handles[name] = handles[generated.readable(name)]
    arguments = [_plan_argument(name, t, name in index_params or name in facts.index_uses, handles)
                 for name, t in params]
    everything = walk_specs(arguments)
    ndims = {spec.name: spec.ndim for spec in everything}
    for spec in everything:
        if spec.kind not in ("int", "int-array"):
            continue
        uses = facts.index_uses.get(spec.name, [])
        spec.monotone = spec.name in facts.monotone and spec.kind == "int-array"
        if uses:
            spec.is_index = True
            spec.distinct = spec.kind == "int-array"
            spec.bound = index_bound(uses, ndims, spec.monotone)
        spec.nonzero = spec.name in facts.divisors
        spec.chain = spec.name in facts.sentinels and spec.kind == "int-array" and not spec.monotone
        spec.distinct = spec.distinct and not (spec.monotone or spec.chain)  # those orders win
        if not (spec.distinct or spec.monotone or spec.chain):
            low = 1 if spec.nonzero else 0
            # An index stays in range, a divisor non-zero; other signed values may be negative.
            unsigned = scalar_type_of(spec.warp_type) in (wp.uint8, wp.uint16, wp.uint32)
            spec.choices = tuple(sorted(
                v for v in facts.branch_values.get(spec.name, ())
                if abs(v) < 2**31 - 1 and not (unsigned and v < 0)
                and (low <= v < spec.bound if spec.is_index else v != 0 or not spec.nonzero)))
    by_name = {spec.name: spec for spec in everything}
    for start, end in sorted(facts.range_pairs):
        first, second = by_name.get(start), by_name.get(end)
        if (first is not None and second is not None and first.kind == second.kind == "int-array"
                and first.ndim == second.ndim and not (first.chain or second.chain)
                and first.at_most is None and second.at_least is None):
            first.at_most, second.at_least = end, start
    arity = 0 if facts.same_work else facts.tid_arity
    return LaunchPlan(dim=(LAUNCH_EXTENT,) * arity if arity else (1,), arguments=arguments, same_work=facts.same_work)


def _plan_element_field(name: str, t: Any) -> ArgumentSpec:
    """A field of the structs in an array: drawn when it is a value (a number, a vector, a flag, a
    struct of those); left as Warp makes it (zero) when it is an array, an id of a structure, a
    texture: what a draw cannot stand for in each element. A kernel that uses such a field
    crashes its probe (CPU), and the verdict says so."""
    try:
        spec = _plan_argument(name, t, False, {})
    except UnsupportedKernel:
        return ArgumentSpec(name, "left-zero", t)
    if spec.kind in ("float-value", "int", "bool", "int-value"):
        return spec
    if spec.kind == "struct":
        return dataclasses.replace(spec, fields=[_plan_element_field(f.name, f.warp_type) for f in spec.fields])
    return ArgumentSpec(name, "left-zero", t)


def check_argument(name: str, t: Any, handles: Mapping[str, str] | None = None) -> None:
    """Raise UnsupportedKernel for a value no synthesized argument can stand for: an id of no
    structure the synthesis builds, a struct holding one, a type that is still generic."""
    if t is wp.uint64 or _is_struct(t):
        _plan_argument(name, t, False, handles or {})  # raises for what cannot be synthesized
        return
    generic = getattr(wp.types, "type_is_generic", None)
    if t is typing.Any or (generic is not None and generic(t)):
        raise UnsupportedKernel(f"{name!r} has a generic type ({getattr(t, '__name__', t)}) that was not instantiated")


def _is_struct(t: Any) -> bool:
    return hasattr(t, "vars") and hasattr(t, "cls")


def _resolve_python_scalar(t: Any) -> Any:
    return {float: wp.float32, int: wp.int32, bool: wp.bool}.get(t, t)


def _plan_argument(name: str, t: Any, is_index: bool, handles: Mapping[str, str]) -> ArgumentSpec:
    if is_special_array(t):
        raise UnsupportedKernel(f"argument {name!r} is a {type(t).__name__} (fabric/indexed arrays are not synthesized)")
    array = array_type(t)
    if array is not None:
        dtype = array.dtype
        if dtype is typing.Any:
            raise UnsupportedKernel(f"argument {name!r} is a generic array the kernel was not instantiated for")
        if _is_struct(dtype):
            return ArgumentSpec(name, "struct-array", dtype, ndim=array.ndim,
                                fields=[_plan_element_field(f"{name}.{field}", var.type)
                                        for field, var in dtype.vars.items()])
        dtype = _resolve_python_scalar(dtype)
        if float_precision(dtype) and PACKED_BY in handles.get(name, ""):
            return ArgumentSpec(name, "packed-handle", dtype, ndim=array.ndim, handle=handles[name])
        if float_precision(dtype):
            return ArgumentSpec(name, "float-array", dtype, ndim=array.ndim)
        if dtype in _INT_SCALARS or scalar_type_of(dtype) in _INT_SCALARS:  # int32, vec2i, ...
            return ArgumentSpec(name, "int-array", dtype, ndim=array.ndim)
        if dtype is wp.bool:
            return ArgumentSpec(name, "bool-array", dtype, ndim=array.ndim)
        if dtype is wp.uint64 and name in handles:
            return ArgumentSpec(name, "handle-array", dtype, ndim=array.ndim, handle=handles[name])
        raise UnsupportedKernel(f"argument {name!r} is an array of {getattr(dtype, '__name__', dtype)}")
    if t is wp.uint64:
        if name in handles:
            return ArgumentSpec(name, "handle", t, handle=handles[name])
        raise UnsupportedKernel(
            f"argument {name!r} is a uint64 that no BVH or mesh query takes (a volume, hash grid or texture id, or "
            "a pointer: a made-up one crashes the process)"
        )
    if _is_struct(t):
        # Fields are synthesized like arguments: array fields are perturbed and differentiated
        # (the tape gives a struct's array fields their adjoints), value fields stay as drawn.
        fields = [_plan_argument(f"{name}.{field}", var.type, False, handles) for field, var in t.vars.items()]
        return ArgumentSpec(name, "struct", t, fields=fields)
    if t is typing.Any:
        raise UnsupportedKernel(f"argument {name!r} is generic and was not instantiated")
    t = _resolve_python_scalar(t)
    if t in _INT_SCALARS:
        return ArgumentSpec(name, "int", t, is_index=is_index)
    if t is wp.bool:
        return ArgumentSpec(name, "bool", t)
    if (t in _FLOAT_SCALARS or float_precision(t)) and PACKED_BY in handles.get(name, ""):
        return ArgumentSpec(name, "packed-handle", t, handle=handles[name])
    if t in _FLOAT_SCALARS or float_precision(t):
        return ArgumentSpec(name, "float-value", t)
    if hasattr(t, "_shape_") and scalar_type_of(t) in _INT_SCALARS:
        return ArgumentSpec(name, "int-value", t)
    raise UnsupportedKernel(f"argument {name!r} has type {getattr(t, '__name__', t)}")


class Handle(int):
    """The id of a BVH or mesh built for a draw; holds the structure, which lives while the id is used."""

    structure: Any = None


@functools.lru_cache(maxsize=None)
def _pack_kernel(pack: Any) -> tuple[Any, Any]:
    """A kernel that packs ids with the program's own packing function, and the type it packs
    them into (built once per function)."""
    packed_type = pack.func.__annotations__.get("return")

    def pack_ids(ids: Any, out: Any):
        i = wp.tid()
        out[i] = pack(ids[i])

    # Types, not the strings this module's annotations are (Warp would look them up as globals).
    pack_ids.__annotations__ = {"ids": wp.array(dtype=wp.uint64), "out": wp.array(dtype=packed_type)}
    return wp.kernel(module="unique")(pack_ids), packed_type


def _packed(pack: Any, handle: "Handle", device: Any) -> np.ndarray:
    """``handle``'s id packed into floats as the program packs it (the value its unpacking gives back)."""
    kernel, packed_type = _pack_kernel(pack)
    out = wp.zeros(1, dtype=packed_type, device=device)
    wp.launch(kernel, dim=1, inputs=[wp.array([int(handle)], dtype=wp.uint64, device=device), out], device=device)
    return np.asarray(out.numpy()[0])


def _holding(array: Any, handle: Handle) -> Any:
    """``array`` (of ids), keeping the structure they name alive as long as it lives."""
    array._wl_structure = handle
    return array


def _structure(kind: str, count: int, floats: Any, rng: np.random.Generator, device: Any) -> Handle:
    """A real BVH of ``count`` boxes, or a mesh of ``count`` points and triangles, placed where the
    draw's floats are (so queries from points drawn alike find them)."""
    points = floats((count, 3)).astype(np.float32)
    if kind == "bvh":
        extent = np.abs(floats((count, 3))).astype(np.float32) * 0.5 + 0.05
        lowers = wp.array(points - extent, dtype=wp.vec3, device=device)
        uppers = wp.array(points + extent, dtype=wp.vec3, device=device)
        structure = wp.Bvh(lowers, uppers)
        structure._wl_bounds = (lowers, uppers)
    else:
        triangles = np.array([rng.permutation(count)[:3] for _ in range(count)], dtype=np.int32).ravel()
        structure = wp.Mesh(points=wp.array(points, dtype=wp.vec3, device=device),
                            indices=wp.array(triangles, dtype=wp.int32, device=device))
    handle = Handle(int(structure.id))
    handle.structure = structure
    return handle


def _array_shape(spec: ArgumentSpec, length: int) -> tuple[int, ...]:
    # Every array's first dimension is as long as a 1-D array: arrays of one model share their
    # leading count (`n = times.shape[0]` bounds `targets[k, dof]` too).
    return (length,) + (LAUNCH_EXTENT,) * (spec.ndim - 1)


def _rotation_kind(dtype: Any) -> str | None:
    generic = getattr(dtype, "_wp_generic_type_str_", "")
    if generic == "quat_t" or dtype in (wp.quat, wp.quatf, wp.quatd, wp.quath):
        return "quat"
    if generic == "transform_t" or dtype in (wp.transform, wp.transformf, wp.transformd, wp.transformh):
        return "transform"
    return None


def _normalise_rotations(data: np.ndarray, dtype: Any) -> np.ndarray:
    """Unit quaternions (and transform rotations): rotations are what kernels expect them to be."""
    kind = _rotation_kind(dtype)
    if kind is None:
        return data
    part = data[..., -4:] if kind == "quat" else data[..., 3:7]
    norm = np.linalg.norm(part, axis=-1, keepdims=True)
    identity = np.zeros_like(part)
    identity[..., 3] = 1.0
    part[...] = np.where(norm > 1e-6, part / np.where(norm > 1e-6, norm, 1.0), identity)
    return data


def _integers(spec: ArgumentSpec, rng: np.random.Generator, shape: tuple[int, ...],
              targeted: bool = False) -> np.ndarray:
    low = 1 if spec.nonzero else 0
    bound = max(spec.bound, low + 1)
    size = int(np.prod(shape))
    if spec.chain:
        # Entry k points to an earlier entry or is -1: following the links always ends.
        values = np.array([-1 if k == 0 or rng.random() < 0.3 else int(rng.integers(0, min(k, bound)))
                           for k in range(size)])
        return values.reshape(shape)
    if spec.monotone:
        # Targeted: segments up to three long, so loops over a segment's interior run.
        steps = rng.integers(0, 4 if targeted else 2, size=size)
        steps[0] = 0
        return np.minimum(np.cumsum(steps), bound - 1).clip(low).reshape(shape)
    if spec.distinct:
        if len(shape) >= 2:
            rows = int(np.prod(shape[:-1]))
            width = shape[-1]
            values = [rng.permutation(np.arange(low, bound))[:width] if width <= bound - low
                      else rng.integers(low, bound, size=width) for _ in range(rows)]
            return np.array(values).reshape(shape)
        # Every window of `bound` consecutive entries is a permutation: the threads of one launch
        # (LAUNCH_EXTENT <= bound) never share an index.
        tiles = [rng.permutation(np.arange(low, bound)) for _ in range(size // max(bound - low, 1) + 1)]
        return np.concatenate(tiles)[:size].reshape(shape)
    values = rng.integers(low, bound, size=shape)
    if targeted and spec.choices:
        picked = rng.choice(np.array(spec.choices), size=shape)
        values = np.where(rng.random(shape) < 0.5, picked, values)
    return values


def make_arguments(plan: LaunchPlan, fill: Fill, rng: np.random.Generator, device: Any,
                   targeted: bool = False) -> list[Any]:
    """Fresh argument values for one draw, in kernel order. A ``targeted`` draw takes the integers
    that decide branches among the values on either side (:attr:`ArgumentSpec.choices`), turns
    flags off as well as on, and strides offsets further."""
    aligned: np.ndarray | None = None
    if fill.kind == "aligned":
        aligned = fill.draw(rng, (plan.length * LAUNCH_EXTENT ** 3 * 16,))

    def floats(shape: tuple[int, ...]) -> np.ndarray:
        if aligned is not None:
            return aligned[: int(np.prod(shape))].reshape(shape).copy()
        return fill.draw(rng, shape)

    integer_arrays: dict[str, np.ndarray] = {}
    kept: list[Handle] = []  # structures whose packed ids are held by value

    def value(spec: ArgumentSpec) -> Any:
        if spec.kind == "float-array":
            shape = _array_shape(spec, plan.length)
            dtype_shape = tuple(getattr(spec.warp_type, "_shape_", ()))
            scalar = scalar_type_of(spec.warp_type)
            np_dtype = {wp.float16: np.float16, wp.float32: np.float32, wp.float64: np.float64}[scalar]
            data = _normalise_rotations(floats(shape + dtype_shape), spec.warp_type).astype(np_dtype)
            return wp.array(data, dtype=spec.warp_type, shape=shape, device=device)
        if spec.kind == "int-array":
            shape = _array_shape(spec, plan.length)
            dtype_shape = tuple(getattr(spec.warp_type, "_shape_", ()))
            data = _integers(spec, rng, shape + dtype_shape, targeted)
            # Range ends at or after their starts (whichever of the pair is drawn second adapts).
            if spec.at_least in integer_arrays and integer_arrays[spec.at_least].shape == data.shape:
                data = np.maximum(data, integer_arrays[spec.at_least])
            if spec.at_most in integer_arrays and integer_arrays[spec.at_most].shape == data.shape:
                data = np.minimum(data, integer_arrays[spec.at_most])
            integer_arrays[spec.name] = data
            return wp.array(data, dtype=spec.warp_type, shape=shape, device=device)
        if spec.kind == "int-value":
            return spec.warp_type(*[int(v) for v in rng.integers(0, LAUNCH_EXTENT, int(spec.warp_type._length_))])
        if spec.kind == "bool-array":
            shape = _array_shape(spec, plan.length)
            return wp.array(rng.integers(0, 2, size=shape).astype(bool), dtype=spec.warp_type, device=device)
        if spec.kind == "int":
            # Index parameters get an in-range index; other integers are counts (loop bounds) and
            # get the launch extent, which every array covers; a targeted draw mostly takes one of
            # the values the kernel's branches compare it with.
            if targeted and spec.choices and rng.random() < 0.75:
                return int(rng.choice(np.array(spec.choices)))
            if spec.is_index:
                return int(_integers(dataclasses.replace(spec, distinct=False, monotone=False), rng, (1,))[0])
            return LAUNCH_EXTENT
        if spec.kind == "bool":
            return bool(rng.random() < 0.5) if targeted else True
        if spec.kind == "packed-handle":
            kind, packer = spec.handle.split(PACKED_BY)
            built = _structure(kind, plan.length, floats, rng, device)
            packed = _packed(PACKERS[packer], built, device)
            if not spec.ndim:
                kept.append(built)  # a value holds no reference: the struct it lands in keeps it
                return spec.warp_type(*[float(v) for v in np.ravel(packed)])
            shape = _array_shape(spec, plan.length)
            data = np.broadcast_to(packed, shape + packed.shape)  # wp.array converts to the dtype's precision
            return _holding(wp.array(data, dtype=spec.warp_type, shape=shape, device=device), built)
        if spec.kind in ("handle", "handle-array"):
            built = _structure(spec.handle, plan.length, floats, rng, device)
            if spec.kind == "handle":
                return built
            shape = _array_shape(spec, plan.length)
            return _holding(wp.full(shape, int(built), dtype=wp.uint64, device=device), built)
        if spec.kind == "struct":
            instance = spec.warp_type()
            for field in spec.fields:
                if field.kind != "left-zero":
                    setattr(instance, field.name.rsplit(".", 1)[1], value(field))
            object.__setattr__(instance, "_wl_kept", list(kept))  # Warp refuses unknown fields
            return instance
        if spec.kind == "struct-array":
            shape = _array_shape(spec, plan.length)
            element = dataclasses.replace(spec, kind="struct")
            return wp.array([value(element) for _ in range(int(np.prod(shape)))], dtype=spec.warp_type, shape=shape,
                            device=device)
        # float-value: scalar, vector or matrix passed by value
        if hasattr(spec.warp_type, "_shape_"):
            drawn = _normalise_rotations(floats((int(spec.warp_type._length_),)), spec.warp_type)
            return spec.warp_type(*[float(v) for v in drawn])
        return float(floats((1,))[0])

    return [value(spec) for spec in plan.arguments]
