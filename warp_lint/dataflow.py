"""Which values of a kernel carry a gradient, and which uses of them need their value backward.

The analysis automatic-differentiation tools run before they differentiate (Tapenade, Enzyme):

- **Activity.** A value is *active* when it depends on a differentiable input (an element of a
  float array, or a ``@wp.func``'s float argument) and reaches a differentiable output (a store or
  an atomic add into a float array, a func's return value). Integers, booleans, indices, counters,
  values built from literals or from a kernel's scalar arguments (whose adjoints are never
  returned), and values that only feed comparisons or indices carry no gradient: a hazard on them
  is no hazard.
- **Linearity.** A use of a value needs the value itself in the backward pass only when the
  adjoint of the operation reads it: a product with another active value, a division by it, a
  nonlinear builtin (``wp.sqrt``, ``wp.sin``, ``wp.min``), a helper call, or a comparison that
  decides a branch. Sums, differences, copies, casts, component reads, vector constructors and
  scalings by inactive values do not. Measured on Warp 1.19 (CPU, tape against finite
  differences): ``v = a[i]; a[i] = v + e`` and ``a[i] = 0.5 * a[i] - b[i]`` are right, ``a[i] =
  a[i] * b[i]`` and a branch on ``a[i]`` before overwriting it are wrong.

The analysis is flow-insensitive over a function's locals (a name is active if any assignment to
it is), which errs towards reporting.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Iterable, Iterator

import libcst as cst

from warp_lint.cst_walk import children, walk
from warp_lint.names import WarpNames, dotted_name
from warp_lint.warp_builtins_table import NOT_DIFFERENTIABLE
from warp_lint.warp_types import COMPOSITE_TYPES, INTEGER_CONSTRUCTORS

if TYPE_CHECKING:
    from warp_lint.kernels import FunctionModel, Loop

SINK = "<output>"
LINEAR, NONLINEAR, BRANCH, INDEX = "linear", "nonlinear", "branch", "index"

FLOAT_CASTS = {"float", "warp.float16", "warp.float32", "warp.float64"}
# Calls whose value is linear in each argument.
LINEAR_CALLS = FLOAT_CASTS | {"warp.add", "warp.sub", "warp.neg", "warp.pos", "warp.vector", "warp.matrix",
                              "warp.transpose", "warp.spatial_top", "warp.spatial_bottom", "warp.spatial_vector",
                              "warp.transform", "warp.quaternion", "warp.matrix_from_cols", "warp.matrix_from_rows",
                              "warp.vec", "warp.mat", "warp.copy", "warp.tile_load", "warp.untile", "warp.tile",
                              "warp.transform_get_translation", *COMPOSITE_TYPES,
                              # Tile operations that move, sum or transform values linearly: their
                              # adjoints never read the forward values (measured on 1.19 for
                              # tile_transpose: an overwritten input leaves the gradient right).
                              "warp.tile_transpose", "warp.tile_fft", "warp.tile_ifft", "warp.tile_sum",
                              "warp.tile_broadcast", "warp.tile_reshape", "warp.tile_squeeze", "warp.tile_astype",
                              "warp.tile_view"}
# Calls linear in each argument when the others carry no gradient.
BILINEAR_CALLS = {"warp.mul", "warp.dot", "warp.cross", "warp.cw_mul", "warp.outer", "warp.ddot", "warp.tile_matmul",
                  "warp.quat_rotate", "warp.quat_rotate_inv", "warp.transform_point", "warp.transform_vector"}
# Calls whose arguments' values decide which argument is passed on: branches.
SELECTIONS = {"warp.where", "warp.select"}
# Calls with no adjoint that reads the arguments: assertions, printing.
NO_ADJOINT = {"warp.expect_eq", "warp.expect_neq", "warp.expect_near", "warp.printf", "warp.print", "print",
              "warp.tid", "len", "warp.len", "warp.address", "type"}
INTEGER_CALLS = INTEGER_CONSTRUCTORS | {"warp.tid", "len", "warp.len", "warp.hash_grid_point_id",
                                       "warp.mesh_query_point", "warp.bvh_query_next", "warp.hash_grid_query_next",
                                       "warp.lower_bound", "warp.argmin", "warp.argmax", "warp.isnan", "warp.isinf",
                                       "warp.isfinite", "warp.rand_init", "warp.randi"}
TILE_LOADS = {"warp.tile_load", "warp.tile_load_indexed"}
ACCUMULATING = {"warp.atomic_add", "warp.atomic_sub", "warp.tile_atomic_add"}
STORING = {"warp.atomic_min", "warp.atomic_max", "warp.atomic_exch", "warp.tile_store", "warp.store"}
# Builtins no release of the table differentiates (read from Warp's registry: warp_builtins_table):
# Warp generates no adjoint for them, so their result carries no gradient and no adjoint reads their
# arguments (`wp.atomic_cas(a, i, old, new)`, `wp.floor(x)`, `wp.tile_max(t)`: WL117 reports the
# gradient lost through those whose derivative is not zero). Left out: the language's own forms
# (tuples, ranges, static expressions, loads and views) and the stores and loads whose flow the
# sets here model.
_LANGUAGE_FORMS = {"tuple", "range", "static", "slice", "array", "zeros", "iter_next", "reversed", "load",
                   "index", "indexref", "extract", "tile_view", "tile_from_thread", "tile_stack", "tile_stack_push",
                   "tile_stack_pop", "tile_stack_clear", "tile_stack_count"}
_NEVER_DIFFERENTIATED = set.intersection(*({name for name, entry in entries.items() if entry == "all"}
                                           for entries in NOT_DIFFERENTIABLE.values())) if NOT_DIFFERENTIABLE else set()
WITHOUT_ADJOINT = frozenset(f"warp.{name}" for name in _NEVER_DIFFERENTIATED
                            if name not in _LANGUAGE_FORMS) - ACCUMULATING - STORING - TILE_LOADS
# Stores whose value is kept as it is: the adjoint reads the stored gradient, not the value.
PLAIN_STORES = {"warp.tile_store", "warp.store"}
ARRAY_METADATA = {"shape", "ndim", "size", "strides", "dtype", "ptr"}


@dataclasses.dataclass(frozen=True)
class Use:
    """One occurrence of a local (or, as ``@name``, an element read of an array) in an expression."""

    name: str
    position: str  # linear | nonlinear | branch | index
    node: cst.CSTNode
    statement: cst.CSTNode  # the small statement, or the `if`/`while` whose test holds it
    sequence: int  # the statement's place in evaluation order
    loops: tuple  # the Loop objects around it, outermost first
    how: str = ""  # for messages: "multiplied by `w`", "divided by", "passed to `wp.sqrt`"
    indexes: str | None = None  # an index of an element of this (differentiable) array
    member: str | None = None  # the field or component read from it right there: `pos` of `p.pos`
    # A nonlinear use that is one only because the value is multiplied by (or divided by) these
    # expressions: the adjoint reads the value only to give them their gradient (None: it needs
    # the value for its own, `wp.sin(x)`, or that is not known).
    partners: tuple | None = None


class Dataflow:
    def __init__(self, function: FunctionModel, names: WarpNames, helpers: set[str] = frozenset(),
                 fields: bool = False):
        """``fields``: the arrays in a struct parameter's fields (`data.body_q`) are arrays too,
        named "param.field" (what host code needs to know of a kernel's struct arguments)."""
        self.function = function
        self.names = names
        self.helpers = set(helpers)
        self.params = {p.name: p for p in function.params}
        self.shadowed = set(self.params)
        self.arrays = {p.name for p in function.params if p.type.is_array or p.type.kind == "generic"}
        self.fields = dict(function.struct_arrays) if fields else {}
        self.arrays |= set(self.fields)
        self.views: dict[str, str] = {}
        self.edges: dict[str, set[str]] = {}  # source name -> names its value flows into (SINK included)
        self.stores: dict[str, set[str]] = {}  # array -> names whose value is stored or added into it
        self.uses: list[Use] = []
        self.sequence: dict[int, int] = {}  # id(statement) -> its place in evaluation order
        self._loops = {id(loop.node): loop for loop in function.loops}
        self._stack: list = []
        self._count = 0
        self._active_names: set[str] | None = None
        self._partners: tuple | None = ()  # see Use.partners: where the walk is now
        self._exposed_reads: dict[tuple[str, int], frozenset[int]] = {}  # (local, loop) -> see _exposed
        # Twice: which names are active decides whether a product is linear (`x * w` is when `w`
        # carries no gradient), and which names are active is only known after a first pass.
        self._scan(function.node.body)
        self.active = self._closure()
        self._active_names = self.active
        self.edges, self.stores, self.uses, self.sequence, self._count = {}, {}, [], {}, 0
        self.shadowed = set(self.params)
        self._scan(function.node.body)

    # -- building ---------------------------------------------------------------------------
    def _scan(self, body) -> None:
        for statement in getattr(body, "body", ()):
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    self._small(small)
            elif isinstance(statement, cst.BaseSmallStatement):
                self._small(statement)
            elif isinstance(statement, cst.If):
                self._test(statement, statement.test)
                self._scan(statement.body)
                if statement.orelse is not None:
                    if isinstance(statement.orelse, cst.If):
                        self._scan(cst.IndentedBlock(body=[statement.orelse]))
                    else:
                        self._scan(statement.orelse.body)
            elif isinstance(statement, (cst.For, cst.While)):
                loop = self._loops.get(id(statement))
                if isinstance(statement, cst.For):  # the iterable is read once, before the loop
                    self._test(statement, statement.iter, INDEX)
                    for node in _names_in(statement.target):
                        self.shadowed.add(node)
                if loop is not None:
                    self._stack.append(loop)
                if isinstance(statement, cst.While):  # the condition is read every pass
                    self._test(statement, statement.test)
                self._scan(statement.body)
                if loop is not None:
                    self._stack.pop()
                if statement.orelse is not None:
                    self._scan(statement.orelse.body)
            elif isinstance(statement, (cst.With, cst.Try)):
                self._scan(statement.body)

    def _place(self, statement) -> int:
        self._count += 1
        self.sequence[id(statement)] = self._count
        return self._count

    def _test(self, statement, expression, position: str = BRANCH) -> None:
        sequence = self._place(statement)
        for use in self._walk(expression, position, "compared", statement, sequence):
            self.uses.append(use)

    def _small(self, small) -> None:
        sequence = self._place(small)
        if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            value = small.value
            if value is None:
                return
            found = list(self._walk(value, LINEAR, "", small, sequence))
            self.uses.extend(found)
            targets = _targets(small)
            for target in targets:
                receivers = self._receivers(target, value, small)
                for receiver in receivers:
                    for use in found:
                        if use.position in (LINEAR, NONLINEAR):
                            self.edges.setdefault(use.name, set()).add(receiver)
                    if isinstance(small, cst.AugAssign) and receiver != SINK:
                        self.edges.setdefault(receiver, set()).add(receiver)
                if receivers == [SINK]:
                    self._store(self._target_array(target), found)
            if isinstance(small, cst.AugAssign) and not isinstance(small.operator, (cst.AddAssign, cst.SubtractAssign)):
                # `s *= w`: the target's own value is used nonlinearly
                for target in targets:
                    name = _root(target)
                    if name:
                        self.uses.append(Use(name, NONLINEAR, target, small, sequence, tuple(self._stack),
                                             f"updated with `{cst.Module([]).code_for_node(small.operator).strip()}`"))
            for target in targets:
                for use in self._walk_target_indices(target, small, sequence):
                    self.uses.append(use)
        elif isinstance(small, cst.Return) and small.value is not None:
            for use in self._walk(small.value, LINEAR, "", small, sequence):
                self.uses.append(use)
                if use.position in (LINEAR, NONLINEAR):
                    self.edges.setdefault(use.name, set()).add(SINK)
        elif isinstance(small, cst.Expr):
            found = list(self._walk(small.value, LINEAR, "", small, sequence))
            self.uses.extend(found)
            if isinstance(small.value, cst.Call) and self._writes_arrays(small.value):
                for use in found:
                    if use.position in (LINEAR, NONLINEAR):
                        self.edges.setdefault(use.name, set()).add(SINK)
                arguments = small.value.args
                self._store(self._array(arguments[0].value) if arguments else None, found)

    def _store(self, array: str | None, found: list[Use]) -> None:
        names = self.stores.setdefault(array or "", set())
        names.update(use.name for use in found if use.position in (LINEAR, NONLINEAR))

    def _receivers(self, target, value, small) -> list[str]:
        """Where an assignment's value goes: a local, a local's component, or an output (SINK)."""
        if isinstance(target, cst.Name):
            name = target.value
            self.shadowed.add(name)
            if isinstance(value, cst.Subscript) and self._array(value.value) and (
                    any(isinstance(e.slice, cst.Slice) for e in value.slice) or
                    len(value.slice) < self._ndim(self._array(value.value))):
                self.views[name] = self._array(value.value)
            return [name]
        if isinstance(target, (cst.Tuple, cst.List)):
            integers = self._integer_elements(value)
            found = []
            for position, element in enumerate(target.elements):
                receivers = self._receivers(element.value, value, small)
                if position not in integers:
                    found.extend(receivers)
            return found
        root = _root(target)
        if root is None:
            return []
        array = self._target_array(target)
        if array is not None:
            return [SINK] if self._differentiable(array) else []
        return [root]

    def _target_array(self, target) -> str | None:
        """The array an assignment target stores into (`a[i]`, `data.q[i]`), or None."""
        node = target
        while isinstance(node, cst.Subscript):
            node = node.value
        if isinstance(node, cst.Attribute) and self.fields:
            array = self._array(node)
            if array is not None:
                return array
        root = _root(target)
        return self._array(cst.Name(root)) if root in self.arrays or root in self.views else None

    def _walk_target_indices(self, target, statement, sequence) -> Iterator[Use]:
        node = target
        while isinstance(node, (cst.Subscript, cst.Attribute)):
            if isinstance(node, cst.Subscript):
                yield from self._indices(node, self._array(node.value), statement, sequence)
            node = node.value

    def _indices(self, node: cst.Subscript, array: str | None, statement, sequence) -> Iterator[Use]:
        """The index expressions of an element access; tagged with the array when it carries gradient."""
        tag = array if array is not None and self._differentiable(array) else None
        how = f"used as an index of `{array}`" if array else "used as an index"
        for element in node.slice:
            slice_ = element.slice
            parts = [slice_.value] if isinstance(slice_, cst.Index) else [
                p for p in (getattr(slice_, "lower", None), getattr(slice_, "upper", None),
                            getattr(slice_, "step", None)) if p is not None]
            for part in parts:
                for use in self._walk(part, INDEX, how, statement, sequence):
                    yield dataclasses.replace(use, indexes=tag) if use.position == INDEX and tag else use

    def _integer_helper(self, name: str | None) -> bool:
        """`int(...)`, `bool(...)`, or a helper of this file annotated to return an integer."""
        return name is not None and name not in self.shadowed and (
            name in ("int", "bool") or name in self.function.integer_helpers)

    def _integer_elements(self, value) -> frozenset[int]:
        """Positions of the elements of what a helper call returns that carry no gradient: its
        integer elements, and those its body computes from constants alone (a line search's step
        built from its bounds: `u = 0.5 * (lo + hi)`)."""
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value not in self.shadowed:
            name = value.func.value
            # The file's own helpers (another file's, known only by their facts, say nothing here).
            overloads = self.function.file_helpers.get(name, ())
            free = [gradient_free_returns(helper, self.names) for helper in overloads
                    if getattr(helper, "node", None) is not None]  # not an ImportedHelper
            known = free and len(free) == len(overloads)
            return self.function.integer_elements.get(name, frozenset()) | (
                frozenset.intersection(*free) if known else frozenset())
        return frozenset()

    def _writes_arrays(self, call: cst.Call) -> bool:
        callee = self.qualify(call.func)
        if callee in ACCUMULATING or callee in STORING:
            first = call.args[0].value if call.args else None
            array = self._array(first) if first is not None else None
            return array is not None and self._differentiable(array)
        name = dotted_name(call.func)
        return callee is None and name in self.helpers

    def qualify(self, node) -> str | None:
        return self.names.qualify(node, self.shadowed)

    def _array(self, node) -> str | None:
        if isinstance(node, cst.Name):
            if node.value in self.arrays:
                return node.value
            return self.views.get(node.value)
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and self.fields and \
                node.value.value not in self.shadowed - set(self.params):
            field = f"{node.value.value}.{node.attr.value}"
            return field if field in self.fields else None
        return None

    def _ndim(self, array: str) -> int:
        param = self.params.get(array)
        return param.type.ndim if param is not None and param.type.is_array else 1

    def _differentiable(self, array: str) -> bool:
        if array in self.fields:
            return self.fields[array]
        param = self.params.get(array)
        return param is None or param.type.kind == "generic" or param.type.differentiable

    # -- positions --------------------------------------------------------------------------
    def _walk(self, node, position: str, how: str, statement, sequence) -> Iterator[Use]:
        """Every occurrence in ``node`` with its position: how the value reaches the result."""
        loops = tuple(self._stack)
        kind = type(node)
        partners = self._partners if position == NONLINEAR else None
        if kind is cst.Name:
            if node.value not in ("True", "False", "None"):
                yield Use(node.value, position, node, statement, sequence, loops, how, partners=partners)
            return
        if kind in (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
            return
        if kind is cst.Subscript:
            array = self._array(node.value)
            if array is not None:
                yield Use("@" + array, position, node, statement, sequence, loops, how, partners=partners)
            else:
                yield from self._walk(node.value, position, how, statement, sequence)
            yield from self._indices(node, array, statement, sequence)
            return
        if kind is cst.Attribute:
            if node.attr.value in ARRAY_METADATA:
                yield from self._walk(node.value, INDEX, "", statement, sequence)
                return
            field = self._array(node) if self.fields else None
            if field is not None:  # a struct's array field used whole (passed to a call)
                yield Use(field, position, node, statement, sequence, loops, how, partners=partners)
                return
            for use in self._walk(node.value, position, how, statement, sequence):
                yield dataclasses.replace(use, member=node.attr.value) if use.node is node.value else use
            return
        if kind is cst.BinaryOperation:
            yield from self._binary(node, position, how, statement, sequence)
            return
        if kind is cst.UnaryOperation:
            inner = position if isinstance(node.operator, (cst.Minus, cst.Plus)) else BRANCH
            yield from self._walk(node.expression, inner, how, statement, sequence)
            return
        if kind is cst.Comparison:
            yield from self._compared(node.left, node, statement, sequence)
            for target in node.comparisons:
                yield from self._compared(target.comparator, node, statement, sequence)
            return
        if kind is cst.BooleanOperation:
            yield from self._compared(node.left, node, statement, sequence)
            yield from self._compared(node.right, node, statement, sequence)
            return
        if kind is cst.IfExp:
            yield from self._compared(node.test, node.test, statement, sequence)
            yield from self._walk(node.body, position, how, statement, sequence)
            yield from self._walk(node.orelse, position, how, statement, sequence)
            return
        if kind is cst.Call:
            yield from self._call(node, position, how, statement, sequence)
            return
        if kind in (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp):
            return
        for child in children(node):
            yield from self._walk(child, position, how, statement, sequence)

    def _compared(self, node, test, statement, sequence) -> Iterator[Use]:
        """The uses in an operand of a comparison: a value that reaches the test only through
        other operations (`wp.dot(v, n) < 0.0`) is needed for the branch, not for those operations'
        adjoints (the test passes no gradient back), so it is told as compared in the test."""
        for use in self._walk(node, BRANCH, "compared", statement, sequence):
            if use.position == BRANCH and use.node is not node:
                use = dataclasses.replace(use, how=f"compared in `{_code(test)}`")
            yield use

    def _binary(self, node: cst.BinaryOperation, position, how, statement, sequence) -> Iterator[Use]:
        operator = node.operator
        if isinstance(operator, (cst.Add, cst.Subtract)):
            yield from self._walk(node.left, position, how, statement, sequence)
            yield from self._walk(node.right, position, how, statement, sequence)
        elif isinstance(operator, (cst.Multiply, cst.MatrixMultiply)):
            for this, other in ((node.left, node.right), (node.right, node.left)):
                if self.free(other):
                    yield from self._walk(this, position, how, statement, sequence)
                else:
                    yield from self._walk_with(self._joined(position, (other,)), this, _nonlinear(position),
                                               f"multiplied by `{_code(other)}`", statement, sequence)
        elif isinstance(operator, cst.Divide):
            if self.free(node.right):
                yield from self._walk(node.left, position, how, statement, sequence)
            else:  # d(x / y)/dx = 1 / y: the value of `x` is read for `y`'s gradient only
                yield from self._walk_with(self._joined(position, (node.right,)), node.left, _nonlinear(position),
                                           f"divided by `{_code(node.right)}`", statement, sequence)
            yield from self._walk_with(None, node.right, _nonlinear(position), "a divisor", statement, sequence)
        elif isinstance(operator, (cst.BitAnd, cst.BitOr, cst.BitXor, cst.LeftShift, cst.RightShift,
                                   cst.FloorDivide)):
            yield from self._walk(node.left, INDEX, "", statement, sequence)
            yield from self._walk(node.right, INDEX, "", statement, sequence)
        else:  # **, %
            yield from self._walk_with(None, node.left, _nonlinear(position), "raised to a power", statement, sequence)
            yield from self._walk_with(None, node.right, _nonlinear(position), "an exponent", statement, sequence)

    def _joined(self, position: str, others: tuple) -> tuple | None:
        """The partners of a value multiplied by ``others`` where it stands at ``position``."""
        base = () if position == LINEAR else self._partners if position == NONLINEAR else None
        return None if base is None else base + others

    def _walk_with(self, partners: tuple | None, node, position, how, statement, sequence) -> Iterator[Use]:
        saved, self._partners = self._partners, partners
        try:
            yield from self._walk(node, position, how, statement, sequence)
        finally:
            self._partners = saved

    def _call(self, node: cst.Call, position, how, statement, sequence) -> Iterator[Use]:
        callee = self.qualify(node.func)
        name = callee or dotted_name(node.func)
        arguments = [a.value for a in node.args]
        if callee in NO_ADJOINT or callee in INTEGER_CALLS or callee in WITHOUT_ADJOINT or self._integer_helper(name):
            for argument in arguments:
                yield from self._walk(argument, INDEX, "", statement, sequence)
            return
        if callee in ACCUMULATING or callee in STORING:
            target = self._array(arguments[0]) if arguments else None
            tag = target if target is not None and self._differentiable(target) else None
            value = _stored_value(callee, node)
            for index, argument in enumerate(arguments):
                if index == 0 and target is not None:
                    continue  # the array written, not read
                if argument is value:
                    if callee in STORING and callee not in PLAIN_STORES:
                        yield from self._walk_with(None, argument, _nonlinear(position), how, statement, sequence)
                    else:
                        yield from self._walk(argument, position, how, statement, sequence)
                    continue
                for use in self._walk(argument, INDEX, f"used as an index of `{target}`", statement, sequence):
                    yield dataclasses.replace(use, indexes=tag) if use.position == INDEX and tag else use
            return
        if callee in TILE_LOADS and arguments and self._array(arguments[0]) is not None:
            # A tile loaded from an array holds its elements: the same as reading them one by one.
            # (The array's own name is walked too: the facts follow a whole array by its name.)
            yield Use("@" + self._array(arguments[0]), position, arguments[0], statement, sequence,
                      tuple(self._stack), how, partners=self._partners if position == NONLINEAR else None)
            yield from self._walk(arguments[0], position, how, statement, sequence)
            for argument in arguments[1:]:
                yield from self._walk(argument, INDEX, "", statement, sequence)
            return
        if callee in SELECTIONS and arguments:
            yield from self._walk(arguments[0], BRANCH, "compared", statement, sequence)
            for argument in arguments[1:]:
                yield from self._walk(argument, position, how, statement, sequence)
            return
        if name in LINEAR_CALLS or callee in LINEAR_CALLS:
            for argument in arguments:
                yield from self._walk(argument, position, how, statement, sequence)
            return
        if callee in BILINEAR_CALLS:
            for index, argument in enumerate(arguments):
                others = arguments[:index] + arguments[index + 1:]
                active = tuple(other for other in others if not self.free(other))
                if not active:
                    yield from self._walk(argument, position, how, statement, sequence)
                else:
                    yield from self._walk_with(self._joined(position, active), argument, _nonlinear(position),
                                               f"passed to `{_short(name)}` with another active argument",
                                               statement, sequence)
            return
        roles = self._helper_parameter_roles(name) if callee is None else {}
        for index, argument in enumerate(node.args):  # nonlinear builtins, helpers, anything else
            role = roles.get(argument.keyword.value if argument.keyword else index)
            if role == BRANCH:  # the helper only compares it (`if d >= best:`): it picks, it passes nothing on
                yield from self._walk(argument.value, BRANCH, f"compared in `{_short(name)}`", statement, sequence)
            elif role == INDEX:  # the helper never uses its value on the way to what it returns
                yield from self._walk(argument.value, INDEX, "", statement, sequence)
            else:  # the value is needed
                yield from self._walk_with(None, argument.value, _nonlinear(position),
                                           f"passed to `{_short(name) if name else 'a call'}`", statement, sequence)

    def _helper_parameter_roles(self, name: str | None) -> dict[int | str, str]:
        """For a `@wp.func` of this file (every overload agreeing), its scalar and vector parameters
        whose value reaches none of its results, by position and by name: BRANCH where it decides
        a branch there, INDEX where it is not used on the way to any result at all."""
        if not name or name.split(".", 1)[0] in self.shadowed:
            return {}
        overloads = self.function.file_helpers.get(name, ())
        if not overloads:
            return self.function.imported_roles.get(name, {})  # another file's, by its facts
        if any(getattr(helper, "node", None) is None for helper in overloads):
            return {}  # one known only by its effects
        return agreed_parameter_roles(overloads, self.names)

    # -- activity ---------------------------------------------------------------------------
    def free(self, node) -> bool:
        """Whether the expression carries no gradient: no active local or array element flows
        into its value (computed before the closure, from the sources: a conservative guess)."""
        active = self._active_names if self._active_names is not None else self._sources_and_locals()
        stack = [node]
        while stack:
            current = stack.pop()
            kind = type(current)
            if kind is cst.Name:
                if current.value in active:
                    return False
                continue
            if kind is cst.Subscript:
                array = self._array(current.value)
                if array is not None and self._differentiable(array):
                    return False
                stack.append(current.value)
                continue  # indices carry no gradient
            if kind is cst.Attribute:
                if current.attr.value not in ARRAY_METADATA:
                    stack.append(current.value)
                continue
            if kind is cst.Call:
                callee = self.qualify(current.func)
                if callee in INTEGER_CALLS or callee in NO_ADJOINT or callee in WITHOUT_ADJOINT or self._integer_helper(
                        callee or dotted_name(current.func)):
                    continue
                loaded = self._array(current.args[0].value) if callee in TILE_LOADS and current.args else None
                if loaded is not None and self._differentiable(loaded):
                    return False  # a tile of a differentiable array's elements
                stack.extend(a.value for a in current.args)
                continue
            if kind is cst.Comparison or kind is cst.BooleanOperation:
                continue
            stack.extend(children(current))
        return True

    def _sources_and_locals(self) -> set[str]:
        """Before the closure is known: every local and func argument may be active."""
        return {n for n in self.shadowed if n not in self.params or self._source_param(n)} | {
            "@" + a for a in self.arrays}

    def _source_param(self, name: str) -> bool:
        param = self.params.get(name)
        if param is None or param.type.is_array:
            return False
        if self.function.kind == "kernel":
            return False  # a kernel's scalar arguments: their adjoints are never returned
        return param.type.kind in ("scalar", "composite", "struct", "generic", "unknown") and \
            param.type.differentiable

    def _closure(self) -> set[str]:
        """Names (and ``@array`` reads) whose value depends on a differentiable input."""
        sources = ["@" + a for a in self.arrays if self._differentiable(a)]
        sources += [p for p in self.params if self._source_param(p)]
        return self.reached_from(sources)

    def reached_from(self, names: Iterable[str]) -> set[str]:
        """``names`` and every name their values flow into (SINK where one reaches an output)."""
        found = set(names)
        pending = list(found)
        while pending:
            for target in self.edges.get(pending.pop(), ()):
                if target not in found:
                    found.add(target)
                    pending.append(target)
        return found

    @functools.cached_property
    def useful(self) -> set[str]:
        """Names whose value reaches a differentiable output."""
        backward = self._sources_of
        found = {SINK}
        pending = [SINK]
        while pending:
            name = pending.pop()
            for source in backward.get(name, ()):
                if source not in found:
                    found.add(source)
                    pending.append(source)
        return found

    def stores_gradient(self, array: str) -> bool:
        """Whether a value that carries a gradient is stored or added into ``array`` (a helper's
        writes, under the key "", count for every array)."""
        return any(name in self.active for name in self.stores.get(array, set()) | self.stores.get("", set()))

    def carries_gradient(self, name: str) -> bool:
        return name in self.active and name in self.useful

    def origin(self, name: str, preferred: Iterable[str] = ()) -> str | None:
        """An input whose gradient ``name`` carries, for messages: one of the ``preferred`` locals'
        inputs where it has any (the value it starts from: `v = v0` with `v0 = body_qd[i]`, not an
        array that reaches it through an update), an array before a func argument, then by name."""
        found = self.origins(name, every_array=True)
        preferred = set(preferred)
        first = found & (preferred | frozenset().union(*(self.origins(local, every_array=True) for local in preferred)))
        return min(first or found, key=lambda source: (source not in self.arrays, source)) if found else None

    def origins(self, name: str, every_array: bool = False) -> frozenset[str]:
        """Every input whose gradient ``name`` carries: float array parameters (``every_array``:
        integer ones too) by name, and a func's float arguments."""
        sources = {"@" + a for a in self.arrays if every_array or self._differentiable(a)} | {
            p for p in self.params if self._source_param(p)}
        found = set()
        for source in sources:
            seen, pending = {source}, [source]
            while pending:
                current = pending.pop()
                if current == name:
                    found.add(source.lstrip("@"))
                    break
                for target in self.edges.get(current, ()):
                    if target not in seen:
                        seen.add(target)
                        pending.append(target)
        return frozenset(found)

    def destinations(self, names: Iterable[str]) -> frozenset[str] | None:
        """The array parameters the value of ``names`` can reach: those it (or a local computed
        from it) is stored or added into, and, where it decides a branch, every array the function
        stores into, since the branch picks what is stored. None where that is not known here: it
        is passed to a helper that writes arrays, or returned (a func's caller decides)."""
        reached = self.reached_from(names)
        if self.stores.get("", set()) & reached or (SINK in reached and self.function.kind != "kernel"):
            return None
        if any(use.name in reached and use.position == BRANCH for use in self.uses):
            if "" in self.stores:
                return None
            return frozenset(self.stores)
        return frozenset(array for array, stored in self.stores.items() if stored & reached)

    def linear_derivatives(self, names: set[str]) -> set[str]:
        """``names`` and every local computed from them by linear operations only."""
        found = set(names)
        changed = True
        while changed:
            changed = False
            for use in self.uses:
                if use.name in found and use.position == LINEAR and isinstance(use.statement, (
                        cst.Assign, cst.AnnAssign, cst.AugAssign)):
                    for target in _targets(use.statement):
                        root = _root(target)
                        if root and root not in found and root not in self.arrays and root not in self.views:
                            found.add(root)
                            changed = True
        return found

    def needing_uses(self, names: set[str], branches: bool = True, indices: bool = False) -> Iterator[Use]:
        """Uses of ``names`` whose adjoint reads the value: nonlinear ones, (with ``branches``)
        comparisons that decide a branch, and (with ``indices``) indices, whose replayed value picks
        the element the adjoint touches."""
        wanted = {NONLINEAR, BRANCH} if branches else {NONLINEAR}
        if indices:
            wanted.add(INDEX)
        for use in self.uses:
            if use.name in names and use.position in wanted:
                yield use


    def needing_use_of_reads(self, array: str, read_nodes: set[int], component: str | None = None,
                             indices: bool = False) -> Use | None:
        """The first use whose adjoint needs the value those element reads of ``array`` returned: the
        read used nonlinearly or in a comparison (with ``indices``, as an index too), or a local
        computed linearly from it used so. With ``component`` (a store into one field, `a[i].vel =
        ...`), uses of other named fields do not count: that memory is not overwritten."""
        return next(self.needing_uses_of_reads(array, read_nodes, component, indices), None)

    def needing_uses_of_reads(self, array: str, read_nodes: set[int], component: str | None = None,
                              indices: bool = False) -> Iterator[Use]:
        """Every use ``needing_use_of_reads`` looks at, the direct ones first."""
        def overwritten(use: Use) -> bool:
            return component is None or use.member is None or not component.isidentifier() or \
                use.member == component

        wanted = (NONLINEAR, BRANCH, INDEX) if indices else (NONLINEAR, BRANCH)
        direct = [u for u in self.uses if u.name == "@" + array and id(u.node) in read_nodes]
        yield from (u for u in direct if u.position in wanted and overwritten(u))
        bound = _assigned_linearly(direct)
        if bound:
            yield from (u for u in self.needing_uses(self.linear_derivatives(bound), indices=indices)
                        if u.name not in bound or overwritten(u))

    def partner_arrays(self, use: Use) -> frozenset[str] | None:
        """The array parameters whose gradients the value of a product's operand is read for (its
        ``partners``, traced back to the arrays they are computed from); None where the value is
        needed for its own gradient, or where a partner comes from anything but arrays."""
        if use.partners is None:
            return None
        found: set[str] = set()
        pending: list[str] = []
        for partner in use.partners:
            for node in walk(partner):
                if isinstance(node, cst.Subscript) and self._array(node.value) is not None:
                    pending.append("@" + self._array(node.value))
                elif isinstance(node, cst.Name):
                    pending.append(node.value)
        seen = set(pending)
        while pending:
            name = pending.pop()
            if name.startswith("@"):
                found.add(name[1:])
                continue
            if name in self.params and not self.params[name].type.is_array and self._source_param(name):
                return None  # a func's argument: its gradient goes to the caller
            for source in self._sources_of.get(name, ()):
                if source not in seen:
                    seen.add(source)
                    pending.append(source)
        return frozenset(found)

    @functools.cached_property
    def _sources_of(self) -> dict[str, set[str]]:
        backward: dict[str, set[str]] = {}
        for source, targets in self.edges.items():
            for target in targets:
                backward.setdefault(target, set()).add(source)
        return backward

    def carried(self, name: str, loop: Loop) -> bool:
        """Whether ``name``'s value flows from one pass of ``loop`` into the next: some path through
        a pass reads it before the pass assigns it (a definite-assignment walk of the body: both arms
        of an `if` must assign it; a nested loop may not run). A local each pass assigns before
        reading it is a fresh temporary (measured right on Warp 1.19: `k = x[j]; out[j] = k * k`,
        and `C` assigned in both arms of an `if` before `acc += C * C`, in `range(n)` loops)."""
        return bool(self._exposed(name, loop))

    def _exposed(self, name: str, loop: Loop) -> frozenset[int]:
        """id() of the statements of ``loop`` that read ``name``'s value from the previous pass."""
        key = (name, id(loop.node))
        found = self._exposed_reads.get(key)
        if found is None:
            node = loop.node
            if isinstance(node, cst.For) and name in _bound_names(node.target):
                found = frozenset()
            else:
                walk = _ExposedRead(name, self._reads)
                if isinstance(node, cst.While) and name in self._reads.get(id(node), ()):
                    walk.found.append(id(node))
                walk.block(node.body, False)
                found = frozenset(walk.found)
            self._exposed_reads[key] = found
        return found

    @functools.cached_property
    def _reads(self) -> dict[int, set[str]]:
        """id(statement) -> the locals it reads (an `if`/`while`'s test, a `for`'s iterable)."""
        reads: dict[int, set[str]] = {}
        for use in self.uses:
            reads.setdefault(id(use.statement), set()).add(use.name)
        return reads

    def needing_uses_in(self, names: set[str], loop: Loop) -> Iterator[Use]:
        """The uses inside ``loop`` of ``names`` (or of locals computed linearly from them) whose
        adjoint needs the value: a nonlinear one, a comparison deciding a branch (measured wrong on
        Warp 1.19: a running maximum `if x[j] > best: best = x[j]` in a `range(n)` loop sends the
        gradient to the last element), or an index into an array whose values reach an output (the
        replayed access would touch another element: measured wrong for `s += x[j]; j += 1` in a
        `while` loop; an array only compared passes no gradient)."""
        exposed = set().union(*(self._exposed(name, loop) for name in names))
        carried = [u for u in self.uses if u.name in names and id(u.statement) in exposed and loop in u.loops]
        bound = _assigned_linearly(carried) - names
        derived = self.linear_derivatives(bound) if bound else set()
        for use in carried:
            if use.position in (NONLINEAR, BRANCH) or (use.indexes is not None and "@" + use.indexes in self.useful):
                yield use
        for use in self.uses:
            if loop in use.loops and use.name in derived and use.position in (NONLINEAR, BRANCH):
                yield use


def gradient_free_returns(helper: FunctionModel, names: WarpNames) -> frozenset[int]:
    """The positions of a `@wp.func`'s returned values (0 for a single value, k for the k-th of a
    tuple) that no argument's gradient reaches: computed from constants, counts and comparisons
    only. Every `return` must agree on the arity; a helper that calls itself back says nothing."""
    cached = getattr(helper, "_gradient_free_returns", None)
    if cached is not None:
        return cached
    helper._gradient_free_returns = frozenset()  # a recursion, or a cycle through other helpers
    flow = Dataflow(helper, names)
    returns = [statement.node.value for statement in helper.statements
               if isinstance(statement.node, cst.Return) and statement.node.value is not None]
    arities = {len(value.elements) if isinstance(value, cst.Tuple) else 1 for value in returns}
    free: frozenset[int] = frozenset()
    if len(arities) == 1:
        elements = [list(value.elements) if isinstance(value, cst.Tuple) else [value] for value in returns]
        free = frozenset(position for position in range(arities.pop()) if all(
            flow.free(row[position].value if isinstance(row[position], cst.Element) else row[position])
            for row in elements))
    helper._gradient_free_returns = free
    return free


def parameter_roles(helper: FunctionModel, names: WarpNames) -> dict[int | str, str]:
    """The `@wp.func`'s non-array parameters whose value reaches none of its results (by position
    and by name): BRANCH where the value (or a local computed from it) decides a branch, so a
    caller's argument there only picks what is returned (`if -wp.length(x - y) >= best: return
    1.0e10`); INDEX where it is not used on the way to any result. A helper that calls itself back
    says nothing."""
    cached = getattr(helper, "_parameter_roles", None)
    if cached is not None:
        return cached
    helper._parameter_roles = {}  # a recursion, or a cycle through other helpers
    flow = dataflow_of(helper, names)  # the one the rules read too: computed once
    roles: dict[int | str, str] = {}
    for position, param in enumerate(helper.params):
        # A parameter whose value the helper never uses (an overload that takes only its type: an
        # array's elements read only for `type(a[0])`) is unused, whatever its type. Otherwise only
        # scalars, vectors and generic (`Any`) values are told: a generic one may be bound to an
        # array too, but if its value, elements included, reaches no result, what it is bound to
        # does not matter.
        uses = [use for use in flow.uses if use.name in (param.name, "@" + param.name)]
        touched = any(access.array == param.name and (access.kind != "read" or param.type.kind in ("struct", "unknown"))
                      for access in helper.accesses)
        if not touched and all(use.position == INDEX for use in uses) and \
                not {param.name, "@" + param.name} & flow.useful:
            roles[position] = roles[param.name] = INDEX
            continue
        if param.type.is_array or param.type.kind in ("struct", "unknown") or param.name in flow.useful:
            continue
        reached = flow.reached_from([param.name])
        role = BRANCH if any(use.name in reached and use.position == BRANCH for use in flow.uses) else INDEX
        roles[position] = roles[param.name] = role
    helper._parameter_roles = roles
    return roles


def agreed_parameter_roles(overloads: list[FunctionModel], names: WarpNames) -> dict[int | str, str]:
    """``parameter_roles`` of a `@wp.func`'s overloads, where every one of them agrees."""
    found = [parameter_roles(overload, names) for overload in overloads]
    return {key: role for key, role in found[0].items() if all(other.get(key) == role for other in found[1:])}


def dataflow_of(function: FunctionModel, names: WarpNames, fields: bool = False) -> Dataflow:
    """The function's dataflow, computed once per function model. Helpers it calls that write or
    accumulate into arrays make their other arguments flow into an output. ``fields``: struct
    parameters' array fields count as arrays (``Dataflow``); the same as without where there are
    none."""
    fields = fields and bool(function.struct_arrays)
    attribute = "_dataflow_fields" if fields else "_dataflow"
    cached = getattr(function, attribute, None)
    if cached is None:
        writing = {a.via for a in function.accesses if a.via and a.kind in ("write", "accumulate")}
        cached = Dataflow(function, names, writing, fields)
        setattr(function, attribute, cached)
    return cached


def _targets(statement) -> list:
    """What an assignment (`=`, annotated, augmented) assigns to; nothing for other statements."""
    if isinstance(statement, cst.Assign):
        return [t.target for t in statement.targets]
    if isinstance(statement, (cst.AnnAssign, cst.AugAssign)):
        return [statement.target]
    return []


def _assigned_linearly(uses) -> set[str]:
    """The locals that plain (not augmented) assignments bind to a value in which these uses are linear."""
    return {target.value for use in uses if use.position == LINEAR and isinstance(use.statement, (
        cst.Assign, cst.AnnAssign)) for target in _targets(use.statement) if isinstance(target, cst.Name)}


def _nonlinear(position: str) -> str:
    return NONLINEAR if position in (LINEAR, NONLINEAR) else position


def _root(target) -> str | None:
    node = target
    while isinstance(node, (cst.Subscript, cst.Attribute)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def _names_in(target) -> Iterator[str]:
    stack = [target]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            yield node.value
        else:
            stack.extend(children(node))


def _bound_names(target) -> set[str]:
    """The locals an assignment target binds: `a` and `b` of `a, (b, c[i]) = ...`, not `c`."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for element in target.elements for n in _bound_names(element.value)}
    return set()


def _code(node) -> str:
    return cst.Module([]).code_for_node(node).strip()


def _short(name: str | None) -> str:
    return (name or "").replace("warp.", "wp.")


class _ExposedRead:
    """Walks a loop body once, tracking whether ``name`` is definitely assigned on every path so far;
    collects the statements that read it on some path before any assignment (upward-exposed uses:
    the value from the previous pass)."""

    def __init__(self, name: str, reads: dict[int, set[str]]):
        self.name = name
        self.reads = reads
        self.found: list[int] = []  # id() of the statements with an exposed read

    def block(self, block, defined: bool) -> tuple[bool, bool]:
        """(defined after, falls through to the next statement)."""
        for statement in getattr(block, "body", ()):
            defined, falls = self.statement(statement, defined)
            if not falls:
                return defined, falls
        return defined, True

    def statement(self, statement, defined: bool) -> tuple[bool, bool]:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if not defined and self._reads_name(small):
                    self.found.append(id(small))
                defined = defined or self._assigns(small)
                if isinstance(small, (cst.Break, cst.Continue, cst.Return, cst.Raise)):
                    return defined, False
            return defined, True
        if not defined and self.name in self.reads.get(id(statement), ()):
            self.found.append(id(statement))
        if isinstance(statement, cst.If):
            after_body, body_falls = self.block(statement.body, defined)
            orelse = statement.orelse
            if orelse is None:
                after_else, else_falls = defined, True
            else:
                inner = cst.IndentedBlock(body=[orelse]) if isinstance(orelse, cst.If) else orelse.body
                after_else, else_falls = self.block(inner, defined)
            if not body_falls and not else_falls:
                return defined, False
            return (after_body or not body_falls) and (after_else or not else_falls), True
        if isinstance(statement, (cst.For, cst.While)):
            inner_defined = defined or (isinstance(statement, cst.For) and self.name in _bound_names(statement.target))
            self.block(statement.body, inner_defined)
            if statement.orelse is not None:
                self.block(statement.orelse.body, defined)
            return defined, True
        if isinstance(statement, (cst.With, cst.Try)):
            return self.block(statement.body, defined)
        return defined, True

    def _reads_name(self, small) -> bool:
        if self.name in self.reads.get(id(small), ()):
            return True
        for target in _targets(small):
            if isinstance(small, cst.AugAssign) and _root(target) == self.name:
                return True  # `s += x` reads `s`
            if isinstance(target, (cst.Subscript, cst.Attribute)) and _root(target) == self.name:
                return True  # `v[0] = x` keeps the other components
        return False

    def _assigns(self, small) -> bool:
        if isinstance(small, cst.Assign):
            return any(self.name in _bound_names(t.target) for t in small.targets)
        if isinstance(small, (cst.AnnAssign, cst.AugAssign)):
            return isinstance(small.target, cst.Name) and small.target.value == self.name
        return False


def _stored_value(callee: str | None, node: cst.Call) -> cst.BaseExpression | None:
    """The value an atomic or a store writes: `value=` / `t=`, else the last positional argument;
    for `wp.tile_store(a, t, offset=...)` (and `(a, t, (i, j))`) the tile, which comes second."""
    for argument in node.args:
        if argument.keyword is not None and argument.keyword.value in ("value", "t"):
            return argument.value
    positional = [a.value for a in node.args if a.keyword is None]
    if not positional:
        return None
    if callee == "warp.tile_store" and len(positional) >= 2 and (
            len(positional) == 2 or isinstance(positional[2], cst.Tuple)):
        return positional[1]
    return positional[-1]


def gradient_free(function: FunctionModel, node: cst.CSTNode, names: WarpNames) -> bool:
    """Whether ``node`` carries no gradient anyone can observe: nothing active flows into its value
    (literals, module constants, loop counters, a kernel's scalar arguments, shapes, integers, and
    locals computed only from these)."""
    return dataflow_of(function, names).free(node)
