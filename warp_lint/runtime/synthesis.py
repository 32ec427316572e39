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
  hazards, values that reach singular points (equal elements, zeros, large magnitudes).
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from warp_lint.runtime.comparison import float_precision, scalar_type_of
from warp_lint.runtime.locate import array_type, is_special_array

# Threads per launch dimension. One-dimensional arrays get LAUNCH_EXTENT**2 elements so that
# flattened 2-D indexing (``x[i * n + j]``) stays in bounds; higher-dimensional arrays get
# LAUNCH_EXTENT per dimension. Integer values are drawn below LAUNCH_EXTENT unless they index a
# one-dimensional array directly.
LAUNCH_EXTENT = 4
LONG_EXTENT = LAUNCH_EXTENT * LAUNCH_EXTENT

_INT_SCALARS = {wp.int8, wp.int16, wp.int32, wp.int64, wp.uint8, wp.uint16, wp.uint32, int}
_FLOAT_SCALARS = {wp.float16, wp.float32, wp.float64, float}
_VECTOR_CALLS = {"length", "length_sq", "dot", "cross", "normalize", "outer"}


class UnsupportedKernel(Exception):
    """The kernel takes an argument the checker cannot make up safely; ``str()`` says which."""


# -- what the kernel does with its arguments -----------------------------------------------------
@dataclasses.dataclass
class KernelFacts:
    tid_arity: int = 0  # 0: the kernel never calls wp.tid()
    divisors: set[str] = dataclasses.field(default_factory=set)  # params (or arrays) whose values divide
    index_uses: dict[str, list[tuple[str, int, bool]]] = dataclasses.field(default_factory=dict)
    monotone: set[str] = dataclasses.field(default_factory=set)  # arrays read at `i + 1`
    subscripted: dict[str, int] = dataclasses.field(default_factory=dict)  # param -> most indices seen
    vector_like: set[str] = dataclasses.field(default_factory=set)  # params used as vectors
    struct_like: set[str] = dataclasses.field(default_factory=set)  # params whose named fields are read
    # Integer arrays compared with 0 or -1: -1 ends a chain (`while c >= 0: c = next[c]`, parents).
    sentinels: set[str] = dataclasses.field(default_factory=set)
    tiles: bool = False  # a tile kernel: needs wp.launch_tiled
    literals: list[float] = dataclasses.field(default_factory=list)  # numbers compared against


def _callee(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _indices(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def kernel_facts(source: str) -> KernelFacts:
    """What the definition in ``source`` does with its parameters (a syntactic reading)."""
    tree = ast.parse(source)
    definition = tree.body[0]
    params = {a.arg for a in definition.args.args} if isinstance(definition, ast.FunctionDef) else set()
    facts = KernelFacts(literals=comparison_literals(tree), tiles=uses_tiles(tree))
    local_sources: dict[str, set[str]] = {}

    def sources(node: ast.AST) -> set[str]:
        """Parameters whose values flow into ``node`` (a param itself, or an array it reads)."""
        found: set[str] = set()
        for child in ast.walk(node):
            if isinstance(child, ast.Name):
                if child.id in params:
                    found.add(child.id)
                found |= local_sources.get(child.id, set())
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
        for target in targets:
            # Names bound by the statement: `a = ...`, `a, b = ...`; not the index of `out[i] = ...`.
            bound = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            for name in bound:
                if isinstance(name, ast.Name) and name.id not in params:
                    local_sources[name.id] = local_sources.get(name.id, set()) | flowing

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
                        facts.sentinels |= sources(operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            facts.divisors |= sources(node.right)
        name = _callee(node)
        if name in ("div", "floordiv", "mod") and len(node.args) == 2:
            facts.divisors |= sources(node.args[1])
        if name == "range" and len(node.args) == 3:
            facts.divisors |= sources(node.args[2])
        if name in _VECTOR_CALLS:
            for argument in node.args:
                base = argument.value if isinstance(argument, ast.Subscript) else argument
                if isinstance(base, ast.Name) and base.id in params:
                    facts.vector_like.add(base.id)
        if isinstance(node, ast.Attribute):
            base = node.value.value if isinstance(node.value, ast.Subscript) else node.value
            if isinstance(base, ast.Name) and base.id in params:
                if node.attr in ("x", "y", "z", "w"):
                    facts.vector_like.add(base.id)
                elif node.attr not in ("shape", "dtype", "ndim", "size", "ptr", "grad"):
                    facts.struct_like.add(base.id)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in params:
            array = node.value.id
            indices = _indices(node)
            facts.subscripted[array] = max(facts.subscripted.get(array, 0), len(indices))
            for position, index in enumerate(indices):
                direct = isinstance(index, (ast.Name, ast.Subscript))
                for source in sources(index) - {array}:
                    facts.index_uses.setdefault(source, []).append((array, position, direct))
                if (isinstance(index, ast.BinOp) and isinstance(index.op, ast.Add)
                        and isinstance(index.right, ast.Constant) and index.right.value == 1):
                    facts.monotone.add(array)
    return facts


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


def concrete_types(params: Sequence[tuple[str, Any]], facts: KernelFacts, scalar: Any,
                   declared: Sequence[dict[str, Any]] = ()) -> dict[str, Any] | None:
    """Concrete types for the generic parameters, one float precision for all of them; None when
    nothing is generic. ``declared`` are the instantiations the user's code made (``wp.overload``):
    the first of precision ``scalar`` is used as it is, else types are read from how the kernel
    uses each parameter (indexed: an array; ``.x`` or ``wp.length``: a vector; else a scalar)."""
    generic = [name for name, t in params if _is_generic(t)]
    if not generic:
        return None
    structs = sorted(set(generic) & facts.struct_like)
    if structs:
        raise UnsupportedKernel(f"generic parameter {structs[0]!r} is used as a struct (its fields are read): "
                                "its type cannot be guessed")
    for types in declared:
        floats = {float_precision(getattr(array_type(t), "dtype", t)) for t in types.values()} - {None}
        if floats <= {float_precision(scalar)}:
            return {name: types[name] for name in generic if name in types}
    chosen: dict[str, Any] = {}
    for name, t in params:
        if not _is_generic(t):
            continue
        element = _vector_of(scalar) if name in facts.vector_like else scalar
        array = array_type(t)
        if array is not None:
            chosen[name] = wp.array(dtype=element, ndim=array.ndim)
        elif name in facts.subscripted:
            chosen[name] = wp.array(dtype=element, ndim=facts.subscripted[name])
        else:
            chosen[name] = element
    return chosen


def _is_generic(t: Any) -> bool:
    if t is typing.Any:
        return True
    array = array_type(t)
    return array is not None and array.dtype is typing.Any


# -- fills -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Fill:
    """How floating-point values are drawn."""

    kind: str  # default | small | wide | around | aligned | zeros | large
    center: float = 0.0

    def describe(self) -> str:
        return {
            "default": "uniform in [0.5, 1.5]",
            "small": "uniform in [0.05, 0.45]",
            "wide": "uniform in [-3, 3]",
            "aligned": "uniform in [0.5, 1.5], the same values in every array (differences vanish)",
            "zeros": "all zero",
            "large": "magnitudes uniform in [50, 120], random signs",
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
        offsets = rng.uniform(0.05, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        return self.center + offsets * max(1.0, abs(self.center) * 0.1)


def fills_for(facts: KernelFacts, value_dependent: bool) -> list[Fill]:
    """Fills to try, tamest first: the first whose forward is finite and that runs the flagged
    statement (and, for a value-dependent rule, reaches its singular point) is used."""
    fills = [Fill("default"), Fill("small")]
    if value_dependent:
        fills += [Fill("aligned"), Fill("zeros"), Fill("large")]
    fills += [Fill("around", c) for c in facts.literals]
    fills.append(Fill("wide"))
    return fills


# -- the plan --------------------------------------------------------------------------------------
@dataclasses.dataclass
class ArgumentSpec:
    """What to pass for one kernel argument."""

    name: str
    kind: str  # "float-array" | "int-array" | "bool-array" | "int" | "bool" | "float-value" | "int-value"
    warp_type: Any  # dtype for arrays, the scalar/vector type otherwise
    ndim: int = 0
    is_index: bool = False
    bound: int = LAUNCH_EXTENT  # integer values stay below this
    nonzero: bool = False  # a divisor or stride
    distinct: bool = False  # indexes elements: no repeats within a row / a launch
    monotone: bool = False  # offsets: non-decreasing
    chain: bool = False  # -1 terminated links (parents, next pointers): every chain ends


@dataclasses.dataclass
class LaunchPlan:
    """Launch dimension and argument recipe for one kernel."""

    dim: tuple[int, ...]
    arguments: list[ArgumentSpec]

    @property
    def float_arrays(self) -> list[str]:
        return [a.name for a in self.arguments if a.kind == "float-array"]

    def describe_domain(self) -> list[str]:
        """The constraints the synthesized integers respect, for the evidence."""
        notes = []
        if self.dim == (1,):
            notes.append("one thread: the kernel never calls wp.tid()")
        for spec in self.arguments:
            traits = [t for t, on in (("non-zero", spec.nonzero), ("distinct indices", spec.distinct),
                                      ("non-decreasing", spec.monotone),
                                      ("-1 terminated chains (each entry points to an earlier one)", spec.chain)) if on]
            if spec.kind in ("int", "int-array") and (traits or spec.is_index):
                traits.append(f"below {spec.bound}")
                notes.append(f"{spec.name}: {', '.join(traits)}")
        return notes


def plan_launch(params: Sequence[tuple[str, Any]], facts: KernelFacts, index_params: Sequence[str] = (),
                source: str | None = None) -> LaunchPlan:
    """Decide the launch dimension and how to synthesize each argument, or raise UnsupportedKernel.
    ``params`` hold concrete types (generic ones already instantiated)."""
    if source is not None and uses_tiles(ast.parse(source)):
        raise UnsupportedKernel("tile kernel (needs wp.launch_tiled with block-shaped arguments)")
    arguments = [_plan_argument(name, t, name in index_params or name in facts.index_uses) for name, t in params]
    ndims = {spec.name: spec.ndim for spec in arguments}
    for spec in arguments:
        if spec.kind not in ("int", "int-array"):
            continue
        uses = facts.index_uses.get(spec.name, [])
        if uses:
            spec.is_index = True
            spec.distinct = spec.kind == "int-array"
            direct = all(d for _, _, d in uses)
            extents = [LONG_EXTENT if ndims.get(array) == 1 and direct else LAUNCH_EXTENT for array, _, _ in uses]
            spec.bound = min(extents)
        spec.nonzero = spec.name in facts.divisors
        spec.monotone = spec.name in facts.monotone and spec.kind == "int-array"
        spec.chain = spec.name in facts.sentinels and spec.kind == "int-array" and not spec.monotone
    arity = facts.tid_arity
    return LaunchPlan(dim=(LAUNCH_EXTENT,) * arity if arity else (1,), arguments=arguments)


def check_argument(name: str, t: Any) -> None:
    """Raise UnsupportedKernel for a value no synthesized argument can stand for: a struct, an id,
    a type that is still generic."""
    if t is wp.uint64:
        raise UnsupportedKernel(f"{name!r} is a uint64 (a mesh/volume/BVH id: a made-up id crashes the process)")
    if hasattr(t, "vars") and hasattr(t, "cls"):
        raise UnsupportedKernel(f"{name!r} is a struct ({t.key})")
    generic = getattr(wp.types, "type_is_generic", None)
    if t is typing.Any or (generic is not None and generic(t)):
        raise UnsupportedKernel(f"{name!r} has a generic type ({getattr(t, '__name__', t)}) that was not instantiated")


def _resolve_python_scalar(t: Any) -> Any:
    return {float: wp.float32, int: wp.int32, bool: wp.bool}.get(t, t)


def _plan_argument(name: str, t: Any, is_index: bool) -> ArgumentSpec:
    if is_special_array(t):
        raise UnsupportedKernel(f"argument {name!r} is a {type(t).__name__} (fabric/indexed arrays are not synthesized)")
    array = array_type(t)
    if array is not None:
        dtype = array.dtype
        if dtype is typing.Any:
            raise UnsupportedKernel(f"argument {name!r} is a generic array the kernel was not instantiated for")
        if hasattr(dtype, "vars") and hasattr(dtype, "cls"):
            raise UnsupportedKernel(f"argument {name!r} is an array of structs ({dtype.key})")
        dtype = _resolve_python_scalar(dtype)
        if float_precision(dtype):
            return ArgumentSpec(name, "float-array", dtype, ndim=array.ndim)
        if dtype in _INT_SCALARS or scalar_type_of(dtype) in _INT_SCALARS:  # int32, vec2i, ...
            return ArgumentSpec(name, "int-array", dtype, ndim=array.ndim)
        if dtype is wp.bool:
            return ArgumentSpec(name, "bool-array", dtype, ndim=array.ndim)
        raise UnsupportedKernel(f"argument {name!r} is an array of {getattr(dtype, '__name__', dtype)}")
    if t is wp.uint64:
        raise UnsupportedKernel(
            f"argument {name!r} is a uint64 (a mesh/volume/BVH id: a made-up id crashes the process)"
        )
    if hasattr(t, "vars") and hasattr(t, "cls"):
        raise UnsupportedKernel(f"argument {name!r} is a struct ({t.key})")
    if t is typing.Any:
        raise UnsupportedKernel(f"argument {name!r} is generic and was not instantiated")
    t = _resolve_python_scalar(t)
    if t in _INT_SCALARS:
        return ArgumentSpec(name, "int", t, is_index=is_index)
    if t is wp.bool:
        return ArgumentSpec(name, "bool", t)
    if t in _FLOAT_SCALARS or float_precision(t):
        return ArgumentSpec(name, "float-value", t)
    if hasattr(t, "_shape_") and scalar_type_of(t) in _INT_SCALARS:
        return ArgumentSpec(name, "int-value", t)
    raise UnsupportedKernel(f"argument {name!r} has type {getattr(t, '__name__', t)}")


def _array_shape(spec: ArgumentSpec) -> tuple[int, ...]:
    if spec.ndim == 1:
        return (LONG_EXTENT,)
    return (LAUNCH_EXTENT,) * spec.ndim


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


def _integers(spec: ArgumentSpec, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    low = 1 if spec.nonzero else 0
    bound = max(spec.bound, low + 1)
    size = int(np.prod(shape))
    if spec.chain:
        # Entry k points to an earlier entry or is -1: following the links always ends.
        values = np.array([-1 if k == 0 or rng.random() < 0.3 else int(rng.integers(0, min(k, bound)))
                           for k in range(size)])
        return values.reshape(shape)
    if spec.monotone:
        steps = rng.integers(0, 2, size=size)
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
    return rng.integers(low, bound, size=shape)


def make_arguments(plan: LaunchPlan, fill: Fill, rng: np.random.Generator, device: Any) -> list[Any]:
    """Fresh argument values for one draw, in kernel order."""
    values: list[Any] = []
    aligned: np.ndarray | None = None
    if fill.kind == "aligned":
        aligned = fill.draw(rng, (LONG_EXTENT * LAUNCH_EXTENT ** 3 * 16,))

    def floats(shape: tuple[int, ...]) -> np.ndarray:
        if aligned is not None:
            return aligned[: int(np.prod(shape))].reshape(shape).copy()
        return fill.draw(rng, shape)

    for spec in plan.arguments:
        if spec.kind == "float-array":
            shape = _array_shape(spec)
            dtype_shape = tuple(getattr(spec.warp_type, "_shape_", ()))
            scalar = scalar_type_of(spec.warp_type)
            np_dtype = {wp.float16: np.float16, wp.float32: np.float32, wp.float64: np.float64}[scalar]
            data = _normalise_rotations(floats(shape + dtype_shape), spec.warp_type).astype(np_dtype)
            values.append(wp.array(data, dtype=spec.warp_type, shape=shape, device=device))
        elif spec.kind == "int-array":
            shape = _array_shape(spec)
            dtype_shape = tuple(getattr(spec.warp_type, "_shape_", ()))
            values.append(wp.array(_integers(spec, rng, shape + dtype_shape), dtype=spec.warp_type, shape=shape,
                                   device=device))
        elif spec.kind == "int-value":
            values.append(spec.warp_type(*[int(v) for v in rng.integers(0, LAUNCH_EXTENT, int(spec.warp_type._length_))]))
        elif spec.kind == "bool-array":
            shape = _array_shape(spec)
            values.append(wp.array(rng.integers(0, 2, size=shape).astype(bool), dtype=spec.warp_type, device=device))
        elif spec.kind == "int":
            # Index parameters get an in-range index; other integers are counts (loop bounds) and
            # get the launch extent, which every array covers.
            if spec.is_index:
                values.append(int(_integers(dataclasses.replace(spec, distinct=False, monotone=False), rng, (1,))[0]))
            else:
                values.append(LAUNCH_EXTENT)
        elif spec.kind == "bool":
            values.append(True)
        else:  # float-value: scalar, vector or matrix passed by value
            if hasattr(spec.warp_type, "_shape_"):
                drawn = _normalise_rotations(floats((int(spec.warp_type._length_),)), spec.warp_type)
                values.append(spec.warp_type(*[float(v) for v in drawn]))
            else:
                values.append(float(floats((1,))[0]))
    return values
