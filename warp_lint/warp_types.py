"""Warp's type vocabulary as the static pass needs it: arrays, vectors and their components."""

from __future__ import annotations

import dataclasses

import libcst as cst

from warp_lint.names import WarpNames

# Annotation constructors that make an array parameter, with their fixed dimension (0: from ndim=).
ARRAY_CONSTRUCTORS = {
    "warp.array": 0,
    "warp.types.array": 0,
    "warp.array1d": 1,
    "warp.array2d": 2,
    "warp.array3d": 3,
    "warp.array4d": 4,
    "warp.indexedarray": 0,
    "warp.indexedarray1d": 1,
    "warp.indexedarray2d": 2,
    "warp.indexedarray3d": 3,
    "warp.indexedarray4d": 4,
    "warp.fabricarray": 0,
    "warp.fabricarrayarray": 0,
    "warp.indexedfabricarray": 0,
}


@dataclasses.dataclass(frozen=True)
class CompositeType:
    """A vector-like Warp value type: how many components and how a fix spells them."""

    length: int
    shape: tuple[int, ...]  # (n,) for vectors, (rows, cols) for matrices

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return ("x", "y", "z", "w")[: self.length] if len(self.shape) == 1 and self.length <= 4 else ()


def _family(prefix: str, shape: tuple[int, ...], suffixes=("", "f", "d", "h")) -> dict[str, CompositeType]:
    length = 1
    for size in shape:
        length *= size
    return {f"warp.{prefix}{suffix}": CompositeType(length, shape) for suffix in suffixes}


COMPOSITE_TYPES: dict[str, CompositeType] = {}
for _n in (2, 3, 4):
    COMPOSITE_TYPES.update(_family(f"vec{_n}", (_n,), ("", "f", "d", "h", "i", "ui", "b", "ub", "s", "us", "l", "ul")))
    COMPOSITE_TYPES.update(_family(f"mat{_n}{_n}", (_n, _n)))
COMPOSITE_TYPES.update(_family("quat", (4,)))
COMPOSITE_TYPES.update(_family("transform", (7,)))
COMPOSITE_TYPES.update(_family("spatial_vector", (6,)))
COMPOSITE_TYPES.update(_family("spatial_matrix", (6, 6)))

INT_SCALARS = {"int", "warp.int32", "warp.int64", "warp.uint32", "warp.int16", "warp.int8", "warp.uint8",
               "warp.uint16", "warp.int", "warp.uint64"}
# Augmented operators that only apply to integers: a value updated with one carries no gradient.
BITWISE_AUGMENTED_OPERATORS = ("&=", "|=", "^=", "<<=", ">>=")
# Integer and boolean values carry no gradient: a hazard on them is no gradient hazard.
NON_DIFFERENTIABLE_DTYPES = INT_SCALARS | {"bool", "warp.bool"} | {
    name for name in COMPOSITE_TYPES if name.endswith(("i", "ui", "b", "ub", "s", "us", "l", "ul"))
    and not name.endswith("quat")
}
HANDLE_SCALARS = {"warp.uint64"}


@dataclasses.dataclass(frozen=True)
class ParamType:
    kind: str  # array | scalar | composite | struct | generic | unknown
    annotation: str  # the annotation's source text
    ndim: int = 0
    dtype: str | None = None  # qualified dtype: "warp.vec3", "float", a struct's name
    dtype_code: str | None = None  # the dtype as written, for text a fix inserts
    array_kind: str | None = None

    @property
    def is_array(self) -> bool:
        return self.kind == "array"

    @property
    def differentiable(self) -> bool:
        return self.dtype not in NON_DIFFERENTIABLE_DTYPES

    @property
    def composite(self) -> CompositeType | None:
        return COMPOSITE_TYPES.get(self.dtype or "")


_CODEGEN = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    """The source text of ``node``. Plain names and dotted names, most of what the models ask
    for, are spelled directly: LibCST's code generation costs a context manager per node."""
    kind = type(node)
    if kind is cst.Name and not node.lpar:
        return node.value
    if kind is cst.Attribute and not node.lpar and _tight(node.dot):
        base = code_of(node.value) if type(node.value) in (cst.Name, cst.Attribute) else None
        if base is not None:
            return f"{base}.{node.attr.value}"
    return _CODEGEN.code_for_node(node)


def _tight(dot: cst.Dot) -> bool:
    before, after = dot.whitespace_before, dot.whitespace_after
    return (type(before) is cst.SimpleWhitespace and not before.value
            and type(after) is cst.SimpleWhitespace and not after.value)


def parse_annotation(annotation: cst.Annotation | None, names: WarpNames, structs: set[str]) -> ParamType:
    if annotation is None:
        return ParamType("unknown", "")
    expression = annotation.annotation
    text = code_of(expression)
    if isinstance(expression, cst.Call):
        constructor = names.qualify(expression.func)
        if constructor in ARRAY_CONSTRUCTORS:
            dtype_node, ndim = None, ARRAY_CONSTRUCTORS[constructor]
            for position, argument in enumerate(expression.args):
                keyword = argument.keyword.value if argument.keyword else ("dtype", "ndim")[min(position, 1)]
                if keyword == "dtype":
                    dtype_node = argument.value
                elif keyword == "ndim" and isinstance(argument.value, cst.Integer):
                    ndim = int(argument.value.value)
            dtype, dtype_code = _dtype(dtype_node, names, structs)
            return ParamType("array", text, ndim or 1, dtype, dtype_code, constructor.rsplit(".", 1)[1])
    if isinstance(expression, cst.Subscript):  # Warp 1.19's subscript style: wp.array[float, Literal[2]]
        constructor = names.qualify(expression.value)
        if constructor in ARRAY_CONSTRUCTORS:
            elements = [e.slice.value for e in expression.slice if isinstance(e.slice, cst.Index)]
            ndim = ARRAY_CONSTRUCTORS[constructor]
            if len(elements) > 1:
                ndim = _literal_int(elements[1]) or ndim
            dtype, dtype_code = _dtype(elements[0] if elements else None, names, structs)
            return ParamType("array", text, ndim or 1, dtype, dtype_code, constructor.rsplit(".", 1)[1])
    dtype, dtype_code = _dtype(expression, names, structs)
    if dtype in COMPOSITE_TYPES:
        return ParamType("composite", text, 0, dtype, dtype_code)
    if dtype in structs:
        return ParamType("struct", text, 0, dtype, dtype_code)
    if dtype in ("typing.Any", "Any", "warp.types.Any"):
        return ParamType("generic", text, 0, dtype, dtype_code)
    if dtype is not None:
        return ParamType("scalar", text, 0, dtype, dtype_code)
    return ParamType("unknown", text)


def _dtype(node: cst.BaseExpression | None, names: WarpNames, structs: set[str]) -> tuple[str | None, str | None]:
    if node is None:
        return "float", None
    code = code_of(node)
    qualified = names.qualify(node)
    if qualified:
        return qualified, code
    if isinstance(node, cst.Name):
        return node.value, code
    if isinstance(node, cst.Attribute):
        return code, code
    return None, code


def _literal_int(node: cst.BaseExpression) -> int | None:
    """``2`` or ``Literal[2]``."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        node = node.slice[0].slice.value
    return int(node.value) if isinstance(node, cst.Integer) else None


INTEGER_CONSTRUCTORS = {"int", "bool"} | {f"warp.{t}" for t in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                                               "uint32", "uint64", "bool")}


def is_integer_expression(node: cst.BaseExpression | None, names: WarpNames) -> bool:
    """``int(0)``, ``wp.int32(1)``, ``3``: a local initialised like this holds no gradient."""
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.Call):
        callee = node.func.value if isinstance(node.func, cst.Name) and node.func.value in ("int", "bool") else (
            names.qualify(node.func))
        return callee in INTEGER_CONSTRUCTORS
    return False
