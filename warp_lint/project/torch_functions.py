"""PyTorch's custom autograd functions around Warp: what ``forward`` wraps, what ``backward`` hands over.

Torch runs ``Cls.apply(*inputs)`` as ``forward(ctx, *inputs)`` and, when it differentiates,
``backward(ctx, *grad_outputs)``; it adds what ``backward`` returns into the inputs' gradients.
``wp.from_torch(t)`` shares ``t``'s memory, and where ``t`` requires grad (or
``requires_grad=True`` is passed) it also takes ``t.grad`` (made when missing) as the array's
gradient. Two ownership facts follow, both measured on Warp 1.19 (``../shared/WARP_FACTS.md``):

* **a wrapped input**: ``forward`` wraps an input tensor itself (``x``, or ``x.contiguous()``,
  which is ``x`` when it is contiguous), not ``x.detach()``. The tape then accumulates the input's
  gradient straight into ``x.grad``; if ``backward`` also returns that gradient, torch adds it a
  second time.
* **a seed**: ``backward`` makes an output array's gradient the incoming gradient's own memory
  (``y.grad = wp.from_torch(grad_output)``, or ``tape.backward(grads={y: ...})`` for an array
  with no gradient array of its own). ``backward()`` zeroes that gradient in place once used
  (Warp 1.13 and later), and with it torch's tensor, which torch may be handing to another
  function's ``backward`` too.

The model reads each such class from the files' summaries: each method's bindings in program
order (a plain name or a ``ctx.attr`` holds the last value assigned to it) expand an expression
down to the parameters it is built from, and ``wp.from_torch`` calls are read off the expansion,
directly or through a project helper that returns one of its parameters wrapped.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import re
from typing import Iterator

from warp_lint.host import Location
from warp_lint.project.index import ProjectIndex, Symbol
from warp_lint.project.summary import ArmOp, AssignOp, CallOp, EndIfOp, FunctionSummary, Loc, LoopOp, ReturnOp

FROM_TORCH = "warp.from_torch"
# Tensor methods that return the tensor itself when no conversion is needed: its `.grad` is the input's.
SAME_TENSOR = frozenset({"contiguous", "to", "float", "double", "half", "type_as", "requires_grad_", "cuda", "cpu"})
# ... and those that return another tensor over the same memory (a view): writes through it reach the original.
SAME_MEMORY = SAME_TENSOR | frozenset({"view", "view_as", "reshape", "flatten", "squeeze", "unsqueeze", "detach",
                                       "expand", "expand_as", "permute", "transpose", "t", "narrow", "unflatten",
                                       "reshape_as", "ravel"})


@dataclasses.dataclass(frozen=True)
class Wrap:
    """A ``wp.from_torch`` call, as its tensor reaches it (helpers' parameters replaced by the call's
    arguments)."""

    tensor: ast.expr
    requires_grad: ast.expr | None  # the `requires_grad=` argument; None when absent
    written: str  # the call as written where it is made (the helper's call, where one wraps)
    location: Location  # the statement that calls it in the method (or calls the helper that does)

    @property
    def without_gradient(self) -> bool:
        """`requires_grad=False` written: the array takes no gradient from the tensor."""
        return isinstance(self.requires_grad, ast.Constant) and self.requires_grad.value is False


@dataclasses.dataclass(frozen=True)
class WrappedInput:
    """``forward`` keeps a Warp array that wraps one of its input tensors itself."""

    holder: str  # where it is kept: "ctx.x" (the first parameter named `ctx` whatever it is called)
    parameter: str  # the input: "x"
    location: Location  # the statement that calls from_torch


@dataclasses.dataclass(frozen=True)
class ReturnedGradient:
    """``backward`` returns a tensor built from the gradient of a Warp array."""

    holder: str  # the array's holder, when `forward` keeps it ("" otherwise)
    array: str  # the array's code, holders expanded
    code: str  # the read as written: "ctx.x.grad", "tape.gradients[x]"
    location: Location  # the statement that reads it (the return, or where a returned local is bound)
    shared: bool  # what is returned is that gradient's memory (`wp.to_torch(x.grad)`), not a copy of it
    returned: Location  # the return statement


@dataclasses.dataclass(frozen=True)
class Zeroing:
    """``backward`` zeroes gradients: `tape.zero()`/`tape.reset()` (every gradient the tape holds) or
    `x.grad.zero_()` (one)."""

    code: str  # the call as written
    array: str  # the one array for `x.grad.zero_()` (its code, holders expanded); "" for a tape's
    location: Location

    def clears(self, gradient: ReturnedGradient) -> bool:
        """Whether this zeroes ``gradient``'s memory after it is read, before it is returned."""
        if not (gradient.location.line <= self.location.line <= gradient.returned.line):
            return False
        return not self.array or self.array == gradient.array


@dataclasses.dataclass(frozen=True)
class Seed:
    """``backward`` makes an array's gradient the memory of an incoming gradient tensor."""

    array: str  # the array's code as written: "ctx.y"
    holder: str  # its holder, when it is one forward keeps ("" otherwise)
    gradient: str  # the incoming gradient it aliases: "`grad_y`", "`grad_outputs[0]`", "an element of `grads`"
    wrap: str  # the `wp.from_torch(...)` call as written (or the helper's call that makes one)
    wrapped_at: Location  # the statement that makes it
    written: str  # the seeding as written: "ctx.y.grad = seed", "ctx.tape.backward(grads=grads)"
    how: str  # "assign" (`y.grad = ...`) or "grads" (`tape.backward(grads={y: ...})`)
    location: Location  # the assignment or the backward call
    via: tuple[Location, ...] = ()  # the calls from `backward` into the helper that seeds, outermost first
    # where, after that call, its arm of `backward` replays a captured CUDA graph (`wp.capture_launch`)
    # instead of running the tape: the graph reads the gradient arrays it was captured with
    replayed_at: Location | None = None


@dataclasses.dataclass(frozen=True)
class TorchFunction:
    """One class deriving from ``torch.autograd.Function``, with its two methods read."""

    symbol: Symbol
    forward: FunctionSummary
    backward: FunctionSummary | None
    wrapped_inputs: tuple[WrappedInput, ...]
    kept: dict[str, tuple[ast.expr, Location]]  # holder -> what forward assigned it, expanded
    returned_gradients: tuple[ReturnedGradient, ...]
    seeds: tuple[Seed, ...]
    zeroings: tuple[Zeroing, ...] = ()

    @property
    def name(self) -> str:
        """The class's own name (`Square`, also for one defined inside a function)."""
        return self.symbol.qualname.rsplit(".", 1)[-1]

    def own_gradient(self, holder: str, index: ProjectIndex) -> bool | None:
        """Whether the array ``forward`` keeps in ``holder`` has a gradient array of its own: True for
        an allocation with `requires_grad=True`, False for one without (or a `from_torch` with
        `requires_grad=False`), None where the model cannot tell."""
        kept = self.kept.get(holder)
        if kept is None:
            return None
        value = kept[0]
        if not isinstance(value, ast.Call):
            return None
        qualified = _qualified(index, self.symbol.path, self.forward.qualname, value.func)
        flag = _keyword(value, "requires_grad")
        if qualified in ALLOCATIONS:
            if flag is None:
                return False
            return flag.value if isinstance(flag, ast.Constant) and isinstance(flag.value, bool) else None
        if qualified == FROM_TORCH and isinstance(flag, ast.Constant) and isinstance(flag.value, bool):
            return flag.value
        return None


ALLOCATIONS = frozenset({"warp.zeros", "warp.empty", "warp.full", "warp.ones", "warp.array", "warp.zeros_like",
                         "warp.empty_like", "warp.ones_like", "warp.full_like"})


def torch_functions(index: ProjectIndex) -> Iterator[TorchFunction]:
    """Every class of the project deriving from ``torch.autograd.Function`` whose ``forward`` is
    its own code, read."""
    for info in index.infos():
        summary = index.summary(info)
        if summary is None or "from_torch" not in _file_words(summary):
            continue
        for qualname in summary.classes:
            symbol = Symbol("class", info.name, qualname, info.path)
            forward_symbol = index.autograd_forward(symbol)
            forward = index.function(forward_symbol) if forward_symbol is not None else None
            if forward is None or forward.owner != qualname:
                continue  # inherited: read once, on the class that writes it
            backward_symbol = index.method(symbol, "backward")
            backward = index.function(backward_symbol) if backward_symbol is not None else None
            yield _read(index, symbol, forward, backward)


def _file_words(summary) -> frozenset[str]:
    words: set[str] = set()
    for function in summary.functions.values():
        words |= function.words
    return frozenset(words)


def _read(index: ProjectIndex, symbol: Symbol, forward: FunctionSummary,
          backward: FunctionSummary | None) -> TorchFunction:
    path = symbol.path
    inputs = {p.name for p in forward.params[1:] if p.kind in ("positional", "keyword_only")}
    kept: dict[str, tuple[ast.expr, Location]] = {}
    wrapped: list[WrappedInput] = []
    for target, value, statement in _bindings(forward):
        if not target.startswith("ctx."):
            continue
        where = Location.of(path, statement)
        parts = [(target, value)]
        if isinstance(value, (ast.Tuple, ast.List)):  # `ctx.arrays = (x, k)`: read back as `ctx.arrays[0]`
            parts = [(f"{target}[{position}]", element) for position, element in enumerate(value.elts)]
        for holder, part in parts:
            kept[holder] = (part, where)
            for wrap in _wraps(index, path, forward, part, where):
                parameter = _same_tensor_of(wrap.tensor, inputs)
                if parameter is not None and not wrap.without_gradient:
                    wrapped.append(WrappedInput(holder, parameter, wrap.location))
    if backward is None:
        return TorchFunction(symbol, forward, backward, tuple(wrapped), kept, (), ())
    reader = _read_backward(index, path, backward, kept)
    return TorchFunction(symbol, forward, backward, tuple(wrapped), kept, tuple(reader.returned),
                         tuple(reader.found), tuple(reader.zeroings))


def _read_backward(index: ProjectIndex, path: str, backward: FunctionSummary, kept: dict) -> _BackwardReader:
    incoming = {}
    for parameter in backward.params[1:]:
        kind = GRADIENTS if parameter.kind == "vararg" else GRADIENT
        incoming[parameter.name] = (kind, f"`{parameter.name}`")
    reader = _BackwardReader(index, kept)
    reader.found = reader.seeds(path, backward, incoming, depth=0)
    return reader


# What an expression holds of the incoming gradients: one tensor sharing an incoming gradient's
# memory, or a collection of such tensors (`*grad_outputs`, `[g.contiguous() for g in grads]`).
GRADIENT, GRADIENTS = "gradient", "gradients"
MAX_HELPER_DEPTH = 2


class _BackwardReader:
    """Reads ``backward`` (and the project helpers it hands incoming gradients to) for seeds, and
    ``backward`` itself for the gradients it returns."""

    def __init__(self, index: ProjectIndex, kept: dict):
        self.index = index
        self.kept = kept
        self.returned: list[ReturnedGradient] = []
        self.zeroings: list[Zeroing] = []
        self.found: list[Seed] = []

    def seeds(self, path: str, function: FunctionSummary, incoming: dict[str, tuple[str, str]],
              depth: int, via: tuple[Location, ...] = ()) -> list[Seed]:
        """``incoming``: the names that hold incoming gradients on entry -> (kind, how to show it);
        ``via``: the calls that led here from ``backward``."""
        context = function.params[0].name if function.params and depth == 0 else "ctx"
        kinds = dict(incoming)
        env: dict[str, ast.expr] = {}
        seeds: list[Seed] = []
        for position, op in enumerate(function.ops):
            if isinstance(op, AssignOp):
                self._assign(path, function, op, env, kinds, context, seeds, via)
            elif isinstance(op, LoopOp):
                self._loop(op, env, kinds, context)
            elif isinstance(op, CallOp) and op.role != "other" and op.method == "backward":
                self._backward_call(path, function, op, env, kinds, context, seeds, via)
            elif isinstance(op, CallOp) and op.role == "discard" and op.method in ZEROING_METHODS and depth == 0:
                self._zeroing(path, op, env, context)
            elif isinstance(op, CallOp) and op.role == "discard" and op.method == "append" and \
                    isinstance(env.get(op.receiver or ""), ast.List) and len(op.args) == 1:
                # `grads.append(g)` into `grads = []`: the list a later return hands torch
                element = _parse(op.args[0].value.code, op.stmt)
                if element is not None:
                    built = env[op.receiver]
                    env[op.receiver] = ast.List(built.elts + [_expand(_renamed_tree(element, context), env)], ast.Load())
            elif isinstance(op, CallOp) and depth < MAX_HELPER_DEPTH:
                found = self._helper_call(path, function, op, env, kinds, context, depth, via)
                replay = _graph_replay_after(self.index, path, function, position) if found else None
                if replay is not None:
                    found = [dataclasses.replace(seed, replayed_at=Location.of(path, replay.loc)) for seed in found]
                seeds += found
            elif isinstance(op, ReturnOp) and op.value is not None and depth == 0:
                self._return(path, op, env, context)
        return seeds

    def _assign(self, path, function, op: AssignOp, env, kinds, context, seeds, via) -> None:
        if _unpacks(op):  # `x, k = ctx.arrays`: each name holds its element
            whole = _parse(op.pairs[0][1].code)
            whole = _expand(_renamed_tree(whole, context), env) if whole is not None else None
            holder = _holder_code(whole) if whole is not None else None
            held = _provenance(whole, kinds) if whole is not None else None
            for position, (target, _) in enumerate(op.pairs):
                kinds.pop(target, None)
                env.pop(target, None)
                if held is not None and held[0] == GRADIENTS:
                    kinds[target] = (GRADIENT, f"an element of {held[1]}")
                elif holder is not None and _is_binding(target):
                    env[target] = _parse(f"{holder}[{position}]")
            return
        for target, value in op.pairs:
            parsed = _parse(value.code, op.stmt) if value is not None else None
            expanded = _expand(_renamed_tree(parsed, context), env) if parsed is not None else None
            target = _renamed(target, context)
            if target.endswith(".grad") and expanded is not None and op.augmented is None:
                array = target[: -len(".grad")]
                for wrap in _wraps(self.index, path, function, expanded, Location.of(path, op.stmt)):
                    held = _provenance(wrap.tensor, kinds)
                    if held is not None and held[0] == GRADIENT:
                        written = f"{_spelled(target, context)} = {value.code}"
                        seeds.append(Seed(_spelled(array, context), _holder(array, env, self.kept), held[1],
                                          wrap.written, wrap.location, written, "assign", Location.of(path, op.stmt),
                                          via))
            stored = _parse(target)
            if isinstance(stored, ast.Subscript) and isinstance(stored.value, ast.Name) and expanded is not None \
                    and isinstance(env.get(stored.value.id), ast.Dict):
                # `grads[y] = seed` into `grads = {}`: the dict a later `backward(grads=grads)` passes
                built = env[stored.value.id]
                env[stored.value.id] = ast.Dict(built.keys + [_expand(stored.slice, env)], built.values + [expanded])
                continue
            # what the value holds of the incoming gradients is read before the target is rebound
            # (`grads = [g.contiguous() for g in grads]`)
            held = _provenance(expanded, kinds) if expanded is not None else None
            kinds.pop(target, None)
            env.pop(target, None)
            if held is not None:
                kinds[target] = held
            elif expanded is not None and _is_binding(target):
                env[target] = expanded

    def _loop(self, op: LoopOp, env, kinds, context) -> None:
        """`for g in grads`, `for name, g in zip(names, grads)`, `for i, g in enumerate(grads)`:
        the target bound to an element of a collection of incoming gradients holds one."""
        for target in op.targets:
            kinds.pop(target, None)
            env.pop(target, None)
        iterable = _parse(op.iterable.code) if op.kind == "for" and op.iterable is not None else None
        if iterable is None:
            return
        iterable = _expand(_renamed_tree(iterable, context), env)
        sources: list[ast.expr | None] = [iterable]
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name):
            if iterable.func.id == "zip":
                sources = list(iterable.args)
            elif iterable.func.id == "enumerate" and iterable.args:
                sources = [None, iterable.args[0]]
        if len(sources) != len(op.targets):
            return
        for target, source in zip(op.targets, sources):
            held = _provenance(source, kinds) if source is not None else None
            if held is not None and held[0] == GRADIENTS:
                kinds[target] = (GRADIENT, f"an element of {held[1]}")

    def _backward_call(self, path, function, op: CallOp, env, kinds, context, seeds, via) -> None:
        grads = op.argument(None, "grads")
        parsed = _parse(grads.code, op.stmt) if grads is not None else None
        parsed = _expand(_renamed_tree(parsed, context), env) if parsed is not None else None
        if not isinstance(parsed, ast.Dict):
            return
        for key, value in zip(parsed.keys, parsed.values):
            if key is None:
                continue
            for wrap in _wraps(self.index, path, function, value, Location.of(path, op.loc)):
                held = _provenance(wrap.tensor, kinds)
                if held is not None and held[0] == GRADIENT:
                    array = _renamed(ast.unparse(key), context)
                    written = f"{op.func}(grads={grads.code})"
                    seeds.append(Seed(_spelled(array, context), _holder(array, env, self.kept), held[1],
                                      wrap.written, wrap.location, written, "grads", Location.of(path, op.loc), via))

    def _helper_call(self, path, function, op: CallOp, env, kinds, context, depth, via) -> list[Seed]:
        """A project function handed incoming gradients: its seeds, read with its parameters bound."""
        if not op.dotted:
            return []
        symbol = self.index.resolve(path, function.qualname, op.func)
        helper = self.index.function(symbol) if symbol is not None and symbol.kind == "function" else None
        if helper is None:
            return []
        given = [a for a in op.args if not a.value.star]
        bound: dict[str, tuple[str, str]] = {}
        for name, value in _arguments(helper, [a.value for a in given if a.keyword is None],
                                      [(a.keyword, a.value) for a in given if a.keyword is not None]).items():
            parsed = _parse(value.code)
            held = _provenance(_expand(_renamed_tree(parsed, context), env), kinds) if parsed is not None else None
            if held is not None:
                bound[name] = held
        if not bound:
            return []
        return self.seeds(symbol.path, helper, bound, depth + 1, via + (Location.of(path, op.loc),))

    def _zeroing(self, path, op: CallOp, env, context) -> None:
        receiver = _parse(op.receiver) if op.receiver else None
        if receiver is None:
            return
        receiver = _expand(_renamed_tree(receiver, context), env)
        code = _spelled(f"{op.func}()", context) if context != "ctx" else f"{op.func}()"
        if op.method in ("zero", "reset") and not _reads_gradient(receiver):
            self.zeroings.append(Zeroing(code, "", Location.of(path, op.loc)))
        elif op.method == "zero_":
            for _, array in _gradient_reads(receiver):
                self.zeroings.append(Zeroing(code, array, Location.of(path, op.loc)))

    def _return(self, path, op: ReturnOp, env, context) -> None:
        parsed = _parse(op.value.code, op.loc)
        if parsed is None:
            return
        expanded = _expand(_renamed_tree(parsed, context), env)
        shared = {id(read) for read in _shared_reads(expanded)}
        for read, array in _gradient_reads(expanded):
            written = getattr(read, "written", None) or _spelled(ast.unparse(read), context)
            statement = getattr(read, "statement", op.loc)
            self.returned.append(ReturnedGradient(array if array in self.kept else "", array, written,
                                                  Location.of(path, statement), id(read) in shared,
                                                  Location.of(path, op.loc)))


ZEROING_METHODS = frozenset({"zero", "reset", "zero_"})
GRAPH_REPLAYS = frozenset({"warp.capture_launch"})


def _graph_replay_after(index: ProjectIndex, path: str, function: FunctionSummary, position: int) -> CallOp | None:
    """A `wp.capture_launch(...)` after op ``position`` in the same arm of ``function`` (up to the end
    of the `if` arm that holds it, or of the function)."""
    depth = 0
    for op in function.ops[position + 1:]:
        if isinstance(op, ArmOp):
            if op.arm == 0:
                depth += 1
            elif depth == 0:
                return None  # the other arm of the `if` that holds the call
        elif isinstance(op, EndIfOp):
            if depth == 0:
                return None
            depth -= 1
        elif isinstance(op, CallOp) and op.dotted and depth == 0:
            symbol = index.resolve(path, function.qualname, op.func)
            if symbol is not None and symbol.kind == "external" and symbol.module in GRAPH_REPLAYS:
                return op
    return None
# Calls that give torch a view of a Warp array's memory (`wp.to_torch`), or of a tensor's.
SHARING_CALLS = frozenset({"to_torch"})


def _shared_reads(node: ast.expr) -> Iterator[ast.expr]:
    """The gradient reads whose memory ``node`` is (a returned tuple's elements, `wp.to_torch(x.grad)`,
    views of it), not a copy of (`.clone()`, `wp.clone`, arithmetic)."""
    if _reads_gradient(node):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from _shared_reads(element)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # `(None,) + tuple(grads)`
        yield from _shared_reads(node.left)
        yield from _shared_reads(node.right)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tuple", "list") \
            and len(node.args) == 1:  # a new container of the same tensors
        yield from _shared_reads(node.args[0])
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SAME_MEMORY:
        yield from _shared_reads(node.func.value)
    elif isinstance(node, ast.Call) and node.args and (_dotted(node.func) or "").rsplit(".", 1)[-1] in SHARING_CALLS:
        yield from _shared_reads(node.args[0])


def _arguments(helper: FunctionSummary, positional: list, keywords: list[tuple[str | None, object]]) -> dict:
    """Parameter -> argument for a call of ``helper`` with these positional arguments (starred ones
    left out by the caller) and (keyword, argument) pairs; a method's `self`/`cls` is not passed."""
    names = [p.name for p in helper.params if p.kind == "positional"]
    if helper.owner is not None and names and not any(d.code == "staticmethod" for d in helper.decorators):
        names = names[1:]
    bound = dict(zip(names, positional))
    parameters = {p.name for p in helper.params}
    bound.update((keyword, value) for keyword, value in keywords if keyword in parameters)
    return bound


def _provenance(node: ast.expr | None, kinds: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """What ``node`` holds of the incoming gradients, (GRADIENT or GRADIENTS, how to show it), or
    None: a view, a slice, `.contiguous()`, `.detach()` share the memory; an element of a
    collection is one; a copy (`.clone()`, arithmetic, `torch.cat`) is none of them."""
    if node is None:
        return None
    if isinstance(node, ast.Name):
        return kinds.get(node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SAME_MEMORY:
        return _provenance(node.func.value, kinds)
    if isinstance(node, ast.Subscript):
        held = _provenance(node.value, kinds)
        if held is None:
            return None
        if held[0] == GRADIENTS and not isinstance(node.slice, ast.Slice):
            shown = f"`{ast.unparse(node)}`" if isinstance(node.value, ast.Name) else f"an element of {held[1]}"
            return GRADIENT, shown
        return held
    if isinstance(node, (ast.List, ast.Tuple)):
        if any((_provenance(element, kinds) or ("",))[0] == GRADIENT for element in node.elts):
            return GRADIENTS, f"`{ast.unparse(node)}`"
        return None
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
        generator = node.generators[0]
        source = _provenance(generator.iter, kinds)
        if source is None or source[0] != GRADIENTS or not isinstance(generator.target, ast.Name):
            return None
        inner = dict(kinds)
        inner[generator.target.id] = (GRADIENT, "")
        element = _provenance(node.elt, inner)
        return (GRADIENTS, source[1]) if element is not None and element[0] == GRADIENT else None
    return None


# -- bindings and expansion ------------------------------------------------------------------

def _bindings(function: FunctionSummary) -> Iterator[tuple[str, ast.expr, Loc]]:
    """(target, its value expanded through the earlier bindings, the statement) for each plain or
    attribute target assigned in ``function``, in program order; the first parameter reads `ctx`."""
    context = function.params[0].name if function.params else "ctx"
    env: dict[str, ast.expr] = {}
    for op in function.ops:
        if not isinstance(op, AssignOp) or op.augmented is not None:
            continue
        for target, value in op.pairs:
            target = _renamed(target, context)
            parsed = _parse(value.code, op.stmt) if value is not None else None
            if parsed is None or not _is_binding(target):
                env.pop(target, None)
                continue
            expanded = _expand(_renamed_tree(parsed, context), env)
            env[target] = expanded
            yield target, expanded, op.stmt


def _unpacks(op: AssignOp) -> bool:
    """`a, b = value` with a value that is not a display: every pair holds the whole value."""
    values = [value for _, value in op.pairs]
    return len(values) > 1 and all(v is not None and v.code == values[0].code for v in values) and \
        op.value is not None and op.value.elements is None


def _holder_code(node: ast.expr) -> str | None:
    """A holder's code: `ctx.x`, `ctx.arrays[0]`; None for anything else."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
            isinstance(node.slice.value, int):
        head = _dotted(node.value)
        return f"{head}[{node.slice.value}]" if head is not None else None
    return _dotted(node)


def _is_binding(target: str) -> bool:
    """A plain name or a dotted attribute chain: what later code reads back by the same text."""
    return all(part.isidentifier() for part in target.split("."))


def _renamed(code: str, context: str) -> str:
    """``code`` with the method's first parameter spelled `ctx`."""
    if context == "ctx" or not (code == context or code.startswith(context + ".")):
        return code
    return "ctx" + code[len(context):]


def _spelled(code: str, context: str) -> str:
    """``code`` with `ctx` spelled as the method's first parameter again, for messages."""
    return code if context == "ctx" else re.sub(r"\bctx\b", context, code)


def _renamed_tree(node: ast.expr, context: str) -> ast.expr:
    if context == "ctx":
        return node

    class Rename(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.expr:
            return ast.Name("ctx", name.ctx) if name.id == context else name

    return Rename().visit(node)


def _parse(code: str, statement: Loc | None = None) -> ast.expr | None:
    """``code`` parsed; each call in it remembers ``statement``, the statement that makes it, which
    stays with it through expansion (findings point at the `from_torch` where it is written)."""
    try:
        node = ast.parse(code, mode="eval").body
    except SyntaxError:
        return None
    if statement is not None:
        for part in ast.walk(node):
            if isinstance(part, ast.Call) or _reads_gradient(part):
                part.statement = statement
                part.written = ast.unparse(part)
    return node


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head is not None else None
    return None


def _expand(node: ast.expr, env: dict[str, ast.expr]) -> ast.expr:
    """``node`` with every name or attribute chain that ``env`` binds replaced by its value (the
    values are expanded when bound, so one pass is enough)."""
    if not env:
        return node

    class Expand(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.expr:
            return env.get(name.id, name)

        def visit_Attribute(self, attribute: ast.Attribute) -> ast.expr:
            code = _dotted(attribute)
            if code is not None and code in env:
                return env[code]
            self.generic_visit(attribute)
            return attribute

    return Expand().visit(copy.deepcopy(node))


def _holder(array: str, env: dict[str, ast.expr], kept: dict) -> str:
    """The ``forward`` holder an array's code in ``backward`` names (through a local alias)."""
    if array in kept:
        return array
    value = env.get(array)
    code = _holder_code(value) if value is not None else None
    return code if code in kept else ""


# -- what the expressions say ----------------------------------------------------------------

def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _qualified(index: ProjectIndex, path: str, scope: str, func: ast.expr) -> str | None:
    code = _dotted(func)
    symbol = index.resolve(path, scope, code) if code is not None else None
    return symbol.module if symbol is not None and symbol.kind == "external" else None


def _wraps(index: ProjectIndex, path: str, function: FunctionSummary, node: ast.expr,
           location: Location) -> Iterator[Wrap]:
    """The ``wp.from_torch`` calls in ``node``, directly or through a project helper that returns
    one of its parameters wrapped."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        code = _dotted(call.func)
        if code is None:
            continue
        symbol = index.resolve(path, function.qualname, code)
        if symbol is None:
            continue
        written = getattr(call, "statement", None)
        where = Location.of(path, written) if written is not None else location
        if symbol.kind == "external" and symbol.module == FROM_TORCH and call.args:
            yield Wrap(call.args[0], _keyword(call, "requires_grad"), getattr(call, "written", ""), where)
        elif symbol.kind == "function":
            helper = index.function(symbol)
            if helper is not None:
                yield from _helper_wraps(index, symbol, helper, call, where)


def _helper_wraps(index: ProjectIndex, symbol: Symbol, helper: FunctionSummary, call: ast.Call,
                  location: Location) -> Iterator[Wrap]:
    """A helper whose every return wraps one of its parameters: the wrap with the call's arguments."""
    arguments = _arguments(helper, [a for a in call.args if not isinstance(a, ast.Starred)],
                           [(k.arg, k.value) for k in call.keywords])
    parameters = {p.name: p for p in helper.params}
    for tensor, flag in _returned_wraps(index, symbol, helper):
        if isinstance(flag, ast.Name) and flag.id in parameters:
            default = parameters[flag.id].default if parameters[flag.id].has_default else None
            flag = arguments.get(flag.id, ast.Constant(default) if isinstance(default, bool) else None)
        yield Wrap(_substituted(tensor, arguments), flag, getattr(call, "written", ""), location)


def _returned_wraps(index: ProjectIndex, symbol: Symbol,
                    helper: FunctionSummary) -> list[tuple[ast.expr, ast.expr | None]]:
    """(tensor, requires_grad) of each distinct return of ``helper``, its locals expanded, when every
    return is a `wp.from_torch` (of the same tensor reshaped or converted per branch, say); empty
    when one returns anything else."""
    env: dict[str, ast.expr] = {}
    wraps: dict[str, tuple[ast.expr, ast.expr | None]] = {}
    for op in helper.ops:
        if isinstance(op, AssignOp) and op.augmented is None:
            for target, value in op.pairs:
                parsed = _parse(value.code) if value is not None else None
                env.pop(target, None)
                if parsed is not None and target.isidentifier():
                    env[target] = _expand(parsed, env)
        elif isinstance(op, ReturnOp):
            returned = _expand(_parse(op.value.code), env) if op.value is not None else None
            code = _dotted(returned.func) if isinstance(returned, ast.Call) else None
            found = index.resolve(symbol.path, helper.qualname, code) if code is not None else None
            if found is None or found.kind != "external" or found.module != FROM_TORCH or not returned.args:
                return []
            flag = _keyword(returned, "requires_grad")
            wraps.setdefault(ast.dump(returned.args[0]) + ast.dump(flag) if flag else ast.dump(returned.args[0]),
                             (returned.args[0], flag))
    return list(wraps.values())


def _substituted(node: ast.expr, arguments: dict[str, ast.expr]) -> ast.expr:
    class Substitute(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.expr:
            return arguments.get(name.id, ast.Name(f"<{name.id}>", name.ctx))  # a parameter not passed here

    return Substitute().visit(copy.deepcopy(node))


def _same_tensor_of(node: ast.expr, parameters: set[str]) -> str | None:
    """The parameter ``node`` is the very tensor object of (through `.contiguous()`, `.to(...)`...);
    None where it is a detached, viewed or computed one."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SAME_TENSOR:
        node = node.func.value
    return node.id if isinstance(node, ast.Name) and node.id in parameters else None


def _reads_gradient(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "grad") or (
        isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "gradients")


def _gradient_reads(node: ast.expr) -> Iterator[tuple[ast.expr, str]]:
    """(the read, array) for each `array.grad` and `tape.gradients[array]` in ``node``."""
    for part in ast.walk(node):
        if _reads_gradient(part):
            array = part.value if isinstance(part, ast.Attribute) else part.slice
            yield part, _holder_code(array) or ast.unparse(array)
