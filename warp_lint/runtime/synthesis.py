"""Small launch arguments synthesized from a kernel's real argument types (child side: imports warp).

Types come from the loaded kernel (``kernel.adj.args``), not from annotation text: they are what
Warp itself will launch with, aliases and ``from __future__ import annotations`` included.
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

# Threads per launch dimension. One-dimensional arrays get LAUNCH_EXTENT**2 elements so that
# flattened 2-D indexing (``x[i * n + j]``) stays in bounds; higher-dimensional arrays get
# LAUNCH_EXTENT per dimension. Integer index values are drawn below LAUNCH_EXTENT, which is in
# range for every array.
LAUNCH_EXTENT = 4

_INT_SCALARS = {wp.int8, wp.int16, wp.int32, wp.int64, wp.uint8, wp.uint16, wp.uint32, int}
_FLOAT_SCALARS = {wp.float16, wp.float32, wp.float64, float}


class UnsupportedKernel(Exception):
    """The kernel takes an argument the checker cannot make up safely; ``str()`` says which."""


@dataclasses.dataclass(frozen=True)
class Fill:
    """How floating-point values are drawn: a named distribution, optionally around a literal."""

    kind: str  # "default" | "wide" | "around"
    center: float = 0.0

    def describe(self) -> str:
        if self.kind == "default":
            return "uniform in [0.5, 1.5]"
        if self.kind == "wide":
            return "uniform in [-3, 3]"
        return f"both sides of the literal {self.center:g} (within 1.0)"

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if self.kind == "default":
            # Positive values keep sqrt/log/pow defined; the magnitude keeps FD well scaled.
            return rng.uniform(0.5, 1.5, size=shape)
        if self.kind == "wide":
            return rng.uniform(-3.0, 3.0, size=shape)
        offsets = rng.uniform(0.05, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        return self.center + offsets * max(1.0, abs(self.center) * 0.1)


def _resolve_python_scalar(t: Any) -> Any:
    return {float: wp.float32, int: wp.int32, bool: wp.bool}.get(t, t)


@dataclasses.dataclass
class ArgumentSpec:
    """What to pass for one kernel argument."""

    name: str
    kind: str  # "float-array" | "int-array" | "bool-array" | "float" | "int" | "bool" | "float-value"
    warp_type: Any  # dtype for arrays, the scalar/vector type otherwise
    ndim: int = 0
    is_index: bool = False


@dataclasses.dataclass
class LaunchPlan:
    """Launch dimension and argument recipe for one kernel."""

    dim: tuple[int, ...]
    arguments: list[ArgumentSpec]

    @property
    def float_arrays(self) -> list[str]:
        return [a.name for a in self.arguments if a.kind == "float-array"]


def tid_arity(tree: ast.AST) -> int:
    """How many indices ``wp.tid()`` returns in this kernel (``i, j = wp.tid()`` -> 2); 1 if unused."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == "tid":
                target = node.targets[0]
                return len(target.elts) if isinstance(target, (ast.Tuple, ast.List)) else 1
    return 1


def uses_tiles(tree: ast.AST) -> bool:
    """Tile kernels need ``wp.launch_tiled`` and block-shaped arguments: not synthesized."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("tile"):
            return True
    return False


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


def plan_launch(kernel: Any, index_params: Sequence[str] = (), arity: int | None = None) -> LaunchPlan:
    """Decide the launch dimension and how to synthesize each argument, or raise UnsupportedKernel."""
    tree = kernel.adj.tree
    if uses_tiles(tree):
        raise UnsupportedKernel("tile kernel (needs wp.launch_tiled with block-shaped arguments)")
    arity = arity or tid_arity(tree)
    arguments = []
    for arg in kernel.adj.args:
        arguments.append(_plan_argument(arg.label, arg.type, arg.label in index_params))
    return LaunchPlan(dim=(LAUNCH_EXTENT,) * arity, arguments=arguments)


def _plan_argument(name: str, t: Any, is_index: bool) -> ArgumentSpec:
    fabric = getattr(wp, "fabricarray", None)
    indexed = getattr(wp, "indexedarray", None)
    if (fabric is not None and isinstance(t, fabric)) or (indexed is not None and isinstance(t, indexed)):
        raise UnsupportedKernel(f"argument {name!r} is a {type(t).__name__} (fabric/indexed arrays are not synthesized)")
    if isinstance(t, wp.array):
        dtype = t.dtype
        if dtype is typing.Any:
            # Generic kernels run in float64: the finite differences are then far more precise.
            return ArgumentSpec(name, "float-array", wp.float64, ndim=t.ndim)
        if hasattr(dtype, "vars") and hasattr(dtype, "cls"):
            raise UnsupportedKernel(f"argument {name!r} is an array of structs ({dtype.key})")
        if float_precision(dtype):
            return ArgumentSpec(name, "float-array", dtype, ndim=t.ndim)
        if dtype in _INT_SCALARS:
            return ArgumentSpec(name, "int-array", dtype, ndim=t.ndim)
        if dtype is wp.bool:
            return ArgumentSpec(name, "bool-array", dtype, ndim=t.ndim)
        raise UnsupportedKernel(f"argument {name!r} is an array of {getattr(dtype, '__name__', dtype)}")
    if t is wp.uint64:
        raise UnsupportedKernel(
            f"argument {name!r} is a uint64 (a mesh/volume/BVH id: a made-up id crashes the process)"
        )
    if hasattr(t, "vars") and hasattr(t, "cls"):
        raise UnsupportedKernel(f"argument {name!r} is a struct ({t.key})")
    if t is typing.Any:
        return ArgumentSpec(name, "float-value", wp.float64)
    t = _resolve_python_scalar(t)
    if t in _INT_SCALARS:
        return ArgumentSpec(name, "int", t, is_index=is_index)
    if t is wp.bool:
        return ArgumentSpec(name, "bool", t)
    if t in _FLOAT_SCALARS or float_precision(t):
        return ArgumentSpec(name, "float-value", t)
    raise UnsupportedKernel(f"argument {name!r} has type {getattr(t, '__name__', t)}")


def _array_shape(spec: ArgumentSpec) -> tuple[int, ...]:
    if spec.ndim == 1:
        return (LAUNCH_EXTENT * LAUNCH_EXTENT,)
    return (LAUNCH_EXTENT,) * spec.ndim


def make_arguments(plan: LaunchPlan, fill: Fill, rng: np.random.Generator, device: Any) -> list[Any]:
    """Fresh argument values for one draw, in kernel order."""
    values: list[Any] = []
    for spec in plan.arguments:
        if spec.kind == "float-array":
            shape = _array_shape(spec)
            dtype_shape = tuple(getattr(spec.warp_type, "_shape_", ()))
            scalar = scalar_type_of(spec.warp_type)
            np_dtype = {wp.float16: np.float16, wp.float32: np.float32, wp.float64: np.float64}[scalar]
            data = fill.draw(rng, shape + dtype_shape).astype(np_dtype)
            if spec.warp_type in (wp.quat, wp.quatf, wp.quatd, wp.quath) or getattr(spec.warp_type, "_wp_generic_type_str_", "") == "quat_t":
                # Unit quaternions: rotations are what kernels expect them to be.
                data = data / np.linalg.norm(data, axis=-1, keepdims=True)
            values.append(wp.array(data, dtype=spec.warp_type, shape=shape, device=device))
        elif spec.kind == "int-array":
            shape = _array_shape(spec)
            values.append(wp.array(rng.integers(0, LAUNCH_EXTENT, size=shape), dtype=spec.warp_type, device=device))
        elif spec.kind == "bool-array":
            shape = _array_shape(spec)
            values.append(wp.array(rng.integers(0, 2, size=shape).astype(bool), dtype=spec.warp_type, device=device))
        elif spec.kind == "int":
            # Index parameters get an in-range index; other integers are counts (loop bounds) and
            # get the launch extent, which every array covers.
            values.append(int(rng.integers(0, LAUNCH_EXTENT)) if spec.is_index else LAUNCH_EXTENT)
        elif spec.kind == "bool":
            values.append(True)
        else:  # float-value: scalar, vector or matrix passed by value
            if hasattr(spec.warp_type, "_shape_"):
                drawn = fill.draw(rng, (int(spec.warp_type._length_),))
                values.append(spec.warp_type(*[float(v) for v in drawn]))
            else:
                values.append(float(fill.draw(rng, (1,))[0]))
    return values
