"""Launch plans for host findings: the recorded launch sequence of a tape, as the replay executor runs it.

A tape overwrite (WL201) or a write between a tape block and its ``backward()`` (WL211) lives in
the order of launches, so the runtime checker confirms it by replaying the sequence
(:mod:`warp_lint.runtime.replay`, whose docstring defines the plan). This module builds that plan
from a recording of the project model (:class:`warp_lint.host.HostScope`), without importing
Warp:

- kernels by file, name and the first line of their definition;
- one array per key the sequence touches, its dtype from the kernel parameter it is bound to (or
  its allocation), its shape from a literal allocation, else ``SLACK`` times the literal launch
  dimension (or ``SMALL``) it is bound in, so strided indices stay in range; arrays allocated inside
  the sequence start as their allocation says; a launch without a literal dim runs ``SMALL`` threads;
- the steps in program order, each launch's arguments bound by parameter name (scalars from their
  literal, else a small synthesized value, said in the plan's ``synthesized`` notes); a loop
  inside the tape block runs twice, so a write that overwrites what the previous pass read is in
  the sequence, with per-pass buffers (``states[t + 1]``, arrays made in the loop) distinct per pass;
- the loss: what ``backward()`` starts from, else the last array the sequence writes and never reads;
- the overwrite step: the first step made by the flagged event that writes an array an earlier
  recorded step read (or that it reads itself); and the sequence's other overwrites, so the replay
  can judge this one with the others removed.

``launch_plan`` returns ``(plan, None)`` or ``(None, why)`` where the recording cannot be replayed.
"""

from __future__ import annotations

import ast
import os
import re
from typing import TYPE_CHECKING, Any

from warp_lint.host import HostEvent, HostScope, Launch, TapeRegion, backward_seeds, integer_dtype
from warp_lint.project.summary import NOT_LITERAL
from warp_lint.warp_types import COMPOSITE_TYPES

if TYPE_CHECKING:
    from warp_lint.project_context import ProjectContext

SMALL = 8  # elements per dimension of an array whose size the program does not write as a literal
# An array whose size is not written as a literal is this many times longer (first dimension) than the
# launches it is bound in: kernels index with strides (`indices[tid * 2 + 1]`), and a read past the
# end crashes the process.
SLACK = 4
MAX_STEPS = 64
PASSES = 2  # a loop inside the tape block runs this often in the replay
SCALAR_DEFAULTS = {"float": 0.1, "int": 1, "bool": False}
_INDEX = re.compile(r"\[([^\[\]]*)\]")
_ARITHMETIC = re.compile(r"^[\d\s+\-*/()]+$")


def host_confirmation_data(context: ProjectContext, scope: HostScope, region: TapeRegion, writer: HostEvent,
                           array_key: str, **span: int) -> dict[str, Any]:
    """What a host finding's ``data`` carries for ``check --confirm``: the launch plan, or why there is none."""
    plan, why = launch_plan(context, scope, region, writer, array_key, **span)
    return {"replay_plan": plan} if plan is not None else {"replay_unplannable": why}


class Unplannable(Exception):
    """The recording cannot be replayed; ``str()`` says why."""


def launch_plan(context: ProjectContext, scope: HostScope, region: TapeRegion, writer: HostEvent,
                array_key: str, *, start: int | None = None, end: int | None = None) -> tuple[dict | None, str | None]:
    """The plan replaying ``scope``'s events from ``start`` (default: the region's start) to ``end``
    (default: the region's end, or ``writer`` when it comes later), with ``writer``'s write of
    ``array_key`` as the overwrite; or ``(None, why)``."""
    try:
        return _Builder(context, scope, region).build(writer, array_key, start, end), None
    except Unplannable as error:
        return None, str(error)


class _Builder:
    def __init__(self, context: ProjectContext, scope: HostScope, region: TapeRegion):
        self.context = context
        self.scope = scope
        self.region = region
        self.kernels: dict[str, dict[str, Any]] = {}
        self.kernel_names: dict[tuple[str, str], str] = {}
        self.arrays: dict[str, dict[str, Any]] = {}  # plan name -> spec
        self.names: dict[str, str] = {}  # array key (per pass) -> plan name
        self.codes: dict[str, str] = {}  # plan name -> the code that names it in the program
        self.origins_of: dict[str, set[str]] = {}  # plan name -> the recording's keys it stands for
        self.sized: dict[str, list[int]] = {}  # plan name -> shapes launches imply
        self.steps: list[dict[str, Any]] = []
        self.origins: list[HostEvent] = []  # the event each step comes from
        self.notes: list[str] = []

    # -- the sequence ---------------------------------------------------------------------
    def build(self, writer: HostEvent, array_key: str, start: int | None, end: int | None) -> dict:
        first = self.region.start_order if start is None else start
        last = max(self.region.end_order, writer.order) if end is None else end
        events = [e for e in self.scope.events_between(first, last) if not writer.exclusive_with(e)]
        for event, renames in self._unrolled(events, first, last):
            self._add(event, renames)
            if len(self.steps) > MAX_STEPS:
                raise Unplannable(f"the sequence has more than {MAX_STEPS} steps")
        overwrite, others = self._overwrite(writer, array_key)
        loss = self._loss(last)
        self._allocated_before(first)
        for name in self.arrays:
            self._shape_of(name)
        for spec in self.arrays.values():
            spec.pop("like", None)
            spec.pop("ndim", None)
        for step in self.steps:
            source = step.pop("dim_from", None)
            if source is not None:  # no literal dim: as many threads as a small array has elements
                step["dim"] = [SMALL] * len(self.arrays[source]["shape"])
        inputs = self._inputs(loss)
        if not inputs:
            raise Unplannable("no float array is read before it is written: the sequence has no input to "
                              "differentiate")
        plan = {"version": 1, "kernels": self.kernels, "arrays": self.arrays, "steps": self.steps,
                "loss": {"array": loss}, "inputs": inputs, "overwrite": overwrite, "other_overwrites": others,
                "seed": 0,
                "codes": self.codes}
        if self.notes:
            plan["synthesized"] = sorted(set(self.notes))
        return plan

    def _unrolled(self, events: list[HostEvent], first: int, last: int):
        """``(event, key renames)`` in the order a run makes them: every loop that starts inside
        the span runs ``PASSES`` times (once when its body always leaves after one pass)."""
        spans = sorted((s for s in self.scope.loops.values() if first <= s.start_order and s.end_order <= last),
                       key=lambda s: s.start_order)
        yield from self._expand(events, spans, {})

    def _expand(self, events: list[HostEvent], spans, renames: dict[str, str]):
        position = 0
        while position < len(events):
            event = events[position]
            span = next((s for s in spans if s.start_order <= event.order <= s.end_order), None)
            if span is None:
                yield event, renames
                position += 1
                continue
            body = [e for e in events[position:] if span.start_order <= e.order <= span.end_order]
            inner = [s for s in spans if s is not span and span.start_order <= s.start_order and
                     s.end_order <= span.end_order]
            for number in range(1 if span.single_pass else PASSES):
                yield from self._expand(body, inner, {**renames, **{key: str(number) for key in span.target_keys},
                                                      f"#loop{span.id}": str(number)})
            position += len(body)

    def _key(self, key: str, renames: dict[str, str]) -> str:
        """The key of one pass: loop counters replaced by the pass number, arrays made in a loop
        suffixed with the pass."""
        for counter, number in renames.items():
            if not counter.startswith("#"):
                key = re.sub(rf"(?<![\w@]){re.escape(counter)}(?![\w@])", number, key)
        key = _INDEX.sub(lambda m: f"[{_arithmetic(m.group(1))}]", key)
        for span in self.scope.loops.values():
            marker = f"#loop{span.id}"
            if marker in renames and self.scope.created_in(key, span.start_order, span.end_order):
                key += f"#{renames[marker]}"
        return key

    def _array(self, key: str, code: str, renames: dict[str, str]) -> str:
        """The plan's name for the array ``key`` names in the pass ``renames`` describes."""
        renamed = self._key(key, renames)
        name = self.names.get(renamed)
        if name is None:
            # The program's own name for it (`states[1]` for `states[t + 1]` in the first pass); a
            # second array under one name (a buffer made in a loop, a rebinding) gets a number.
            if renamed != key:
                code = re.sub(r"@\d+|#\d+$", "", renamed)
            taken = set(self.arrays)
            name = code if code not in taken else next(f"{code}~{n}" for n in range(2, 10_000)
                                                       if f"{code}~{n}" not in taken)
            self.names[renamed] = name
            self.arrays[name] = {}
            self.codes[name] = code
        self.origins_of.setdefault(name, set()).add(key)
        return name

    # -- steps ----------------------------------------------------------------------------
    def _add(self, event: HostEvent, renames: dict[str, str]) -> None:
        record = event.region is not None and self._on_tape(event.region)
        if event.launch is not None:
            self._launch(event, event.launch, renames, record)
        elif event.kind == "method" and event.name in ("zero_", "fill_", "assign") and event.writes:
            ref = event.writes[0]
            if ref.code.endswith(".grad"):
                return
            name = self._array(ref.key, ref.code, renames)
            step: dict[str, Any] = {"op": "zero" if event.name == "zero_" else "fill", "array": name}
            if event.name == "fill_":
                value = event.argument(0, "value")
                step["value"] = value.literal if value is not None and _number(value.literal) else 0.5
            elif event.name == "assign":
                step["value"] = 0.7  # new values from the host: one constant stands for them
                self.notes.append("assign(): the new values are a constant (0.7)")
            self._append(step, event, record)
        elif event.kind == "call" and event.name == "warp.copy":
            if not (event.writes and event.reads):
                raise Unplannable("a wp.copy() whose arrays are not plain names")
            dest = self._array(event.writes[0].key, event.writes[0].code, renames)
            src = self._array(event.reads[0].key, event.reads[0].code, renames)
            self._append({"op": "copy", "dest": dest, "src": src}, event, record)
        elif event.kind == "call" and event.writes:
            raise Unplannable(f"`{event.name.replace('warp.', 'wp.')}()` has no replay step")
        elif event.kind == "assign" and event.allocation is not None:
            self._allocation(event, renames, record)

    def _on_tape(self, region: TapeRegion) -> bool:
        return region is self.region or (bool(self.region.key) and region.key == self.region.key)

    def _append(self, step: dict[str, Any], event: HostEvent, record: bool) -> None:
        step["record"] = record
        step["site"] = {"path": os.path.abspath(event.location.path), "line": event.location.line}
        self.steps.append(step)
        self.origins.append(event)

    def _allocation(self, event: HostEvent, renames: dict[str, str], record: bool) -> None:
        allocation = event.allocation
        name = self._array(event.key, event.name, renames)
        spec = self.arrays[name]
        source = allocation.inherits_from
        if source is not None:
            origin = self._array(source.key, source.code, renames)
            spec["like"] = origin
            if allocation.function == "warp.clone":
                self._append({"op": "copy", "dest": name, "src": origin}, event, record)
                return
        if allocation.dtype:
            spec.setdefault("dtype", _dtype(allocation.dtype))
        if allocation.shape is not None:
            spec["shape"] = _shape_list(allocation.shape)
        spec["init"] = "ones" if allocation.function in ("warp.ones", "warp.ones_like") else (
            "random" if allocation.function in ("warp.array", "warp.from_numpy", "warp.full", "warp.full_like")
            else "zeros")

    def _launch(self, event: HostEvent, launch: Launch, renames: dict[str, str], record: bool) -> None:
        facts = launch.kernel
        if facts is None or launch.symbol is None:
            raise Unplannable(f"kernel `{launch.kernel_code}` is not one the project defines")
        if event.name == "warp.launch_tiled":
            raise Unplannable(f"`{launch.kernel_code}` is launched tiled")
        if launch.record_tape is None:
            raise Unplannable(f"whether `{launch.kernel_code}` is recorded (record_tape=) is not a literal")
        kernel = self._kernel(launch)
        values = _argument_values(launch)
        args: dict[str, Any] = {}
        dims: list[int] | None = _dims(launch.dim_literal)
        refs = {ref.param: ref for ref in launch.refs}
        for position, param in enumerate(facts.params):
            ref = refs.get(param.name)
            if param.kind == "array":
                if ref is None:
                    raise Unplannable(f"no argument of `{launch.kernel_code}` binds its array `{param.name}`")
                name = self._array(ref.key, ref.code, renames)
                spec = self.arrays[name]
                dtype = _dtype(param.dtype)
                if dtype is None:
                    raise Unplannable(f"`{launch.kernel_code}`'s array `{param.name}` has no concrete dtype "
                                      f"({param.dtype or 'generic'})")
                spec.setdefault("dtype", dtype)
                spec.setdefault("ndim", max(param.ndim, 1))
                args[param.name] = {"array": name}
                if dims is not None and len(dims) == spec["ndim"]:
                    self.sized.setdefault(name, []).append(dims)
            elif param.dtype in ("warp.uint64", "uint64"):
                raise Unplannable(f"`{launch.kernel_code}`'s parameter `{param.name}` is a uint64 (a mesh, volume or "
                                  "BVH id: a made-up one crashes the process)")
            elif param.kind in ("scalar", "composite"):
                args[param.name] = {"value": self._scalar(launch, param, values.get(position))}
            else:
                raise Unplannable(f"`{launch.kernel_code}`'s parameter `{param.name}` is a {param.kind} "
                                  f"({param.dtype or 'untyped'})")
        step = {"op": "launch", "kernel": kernel, "args": args}
        if dims is not None:
            step["dim"] = dims
        else:
            step["dim_from"] = next((a["array"] for a in args.values() if "array" in a), None)
            if step["dim_from"] is None:
                step["dim"] = [1]
                del step["dim_from"]
        self._append(step, event, bool(record and launch.record_tape))

    def _kernel(self, launch: Launch) -> str:
        symbol = launch.symbol
        marker = (symbol.path, symbol.qualname)
        if marker not in self.kernel_names:
            key = self.kernel_names[marker] = f"k{len(self.kernel_names)}"
            where: dict[str, Any] = {"path": os.path.abspath(symbol.path), "name": symbol.qualname.rsplit(".", 1)[-1]}
            definition = self.context.definition(launch)
            if definition is not None:
                where["line"] = definition.summary.first_line
            self.kernels[key] = where
        return self.kernel_names[marker]

    def _scalar(self, launch: Launch, param, value) -> Any:
        composite = COMPOSITE_TYPES.get(param.dtype or "")
        if value is not None and value is not NOT_LITERAL:
            if composite is None and _number(value):
                return value
            if composite is not None and isinstance(value, (list, tuple)) and len(value) == composite.length:
                return list(value)
        if composite is not None:
            self.notes.append(f"`{launch.kernel_code}`.{param.name}: {composite.length} components of 0.5")
            return [0.5] * composite.length
        kind = "bool" if param.dtype in ("bool", "warp.bool") else (
            "int" if integer_dtype(param.dtype) else "float")
        self.notes.append(f"`{launch.kernel_code}`.{param.name} = {SCALAR_DEFAULTS[kind]}")
        return SCALAR_DEFAULTS[kind]

    # -- what the plan checks ---------------------------------------------------------------
    def _overwrite(self, writer: HostEvent, array_key: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The flagged overwrite (the first step of ``writer`` writing ``array_key``'s array after a
        recorded step read it, or reading it itself), and every other overwrite of the sequence."""
        found: list[tuple[HostEvent, dict[str, Any]]] = []
        read: set[str] = set()
        for index, (step, event) in enumerate(zip(self.steps, self.origins)):
            own = _read(step, event, self.names)
            for name in _written(step, event, self.names):
                param = _written_param(step, event, name)
                if name in own and param is not None:  # read and written by the one launch
                    found.append((event, {"step": index, "array": name, "param": param}))
                elif name in read:
                    found.append((event, {"step": index, "array": name}))
            if step["record"]:
                read |= own
        flagged = next((o for e, o in found if e is writer and array_key in self.origins_of[o["array"]]), None)
        if flagged is None:
            raise Unplannable("the overwrite is not in the replayed sequence (the read and the write are not both "
                              "in one pass of it)")
        return flagged, [o for _, o in found if o is not flagged]

    def _loss(self, last: int) -> str:
        for event in self.scope.backwards():
            if event.order > last and (event.key == self.region.key or not self.region.key):
                seeds = backward_seeds(event)
                for ref in seeds:
                    found = [name for name, keys in self.origins_of.items() if ref.key in keys]
                    if found:
                        return self._loss_array(found[-1])
                break
        read: set[str] = set()
        for step, event in zip(reversed(self.steps), reversed(self.origins)):
            written = [n for n in _written(step, event, self.names) if n not in read]
            if written and step["record"] and step["op"] == "launch":
                return self._loss_array(written[-1])
            read |= _read(step, event, self.names)
        raise Unplannable("no loss: no backward() follows, and no recorded launch writes an array nothing reads")

    def _loss_array(self, name: str) -> str:
        dtype = self.arrays[name].get("dtype", "float32")
        if dtype not in ("float32", "float64", "float16"):
            raise Unplannable(f"the loss `{self.codes[name]}` is not an array of float scalars ({dtype})")
        return name

    def _inputs(self, loss: str) -> list[str]:
        """Float arrays read before anything writes them: the sequence's inputs (the loss too, when
        the sequence updates it in place: its gradient is what the program reads from its `.grad`)."""
        first_access: dict[str, str] = {}
        for step, event in zip(self.steps, self.origins):
            for name in _read(step, event, self.names):
                first_access.setdefault(name, "read")
            for name in _written(step, event, self.names):
                first_access.setdefault(name, "write")
        return [name for name, access in first_access.items() if access == "read" and
                self.arrays[name].get("dtype", "float32") in _FLOAT_DTYPES]

    def _allocated_before(self, first: int) -> None:
        """Shapes and dtypes of the arrays allocated before the sequence, where they are literal."""
        allocations = {e.key: e.allocation for e in self.scope.events
                       if e.order < first and e.kind == "assign" and e.allocation is not None}
        for name, spec in self.arrays.items():
            for key in sorted(self.origins_of.get(name, ())):
                allocation = allocations.get(key)
                if allocation is None:
                    continue
                if allocation.shape is not None and "shape" not in spec:
                    spec["shape"] = _shape_list(allocation.shape)
                if allocation.dtype and "dtype" not in spec and _dtype(allocation.dtype):
                    spec["dtype"] = _dtype(allocation.dtype)

    def _shape_of(self, name: str, seen: frozenset[str] = frozenset()) -> list[int]:
        """An array's shape: its literal allocation, or as made like another array, or the largest
        literal launch dimension it is bound in, or ``SMALL`` per dimension."""
        spec = self.arrays[name]
        if "shape" not in spec:
            like = spec.get("like")
            if like is not None and like not in seen | {name}:
                spec["shape"] = list(self._shape_of(like, seen | {name}))
                spec.setdefault("dtype", self.arrays[like].get("dtype", "float32"))
            else:
                ndim = spec.get("ndim", 1)
                implied = self.sized.get(name)
                shape = [max(d[k] for d in implied) for k in range(ndim)] if implied else [SMALL] * ndim
                spec["shape"] = [shape[0] * SLACK, *shape[1:]]
        spec.setdefault("dtype", "float32")
        return spec["shape"]


_FLOAT_DTYPES = {"float16", "float32", "float64"} | {name.removeprefix("warp.") for name in COMPOSITE_TYPES
                                                      if not name.endswith(("i", "ui", "b", "ub", "s", "us", "l",
                                                                            "ul")) or name.endswith("quat")}


def _dtype(dtype: str | None) -> str | None:
    """The Warp type name the replay allocates for a dtype as the kernel model writes it."""
    if not dtype:
        return None
    name = dtype.removeprefix("warp.").removeprefix("wp.").removeprefix("types.")
    name = {"float": "float32", "int": "int32"}.get(name, name)
    if name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "bool") or f"warp.{name}" in COMPOSITE_TYPES:
        return name
    return None


def _shape_list(shape: object) -> list[int]:
    return list(shape) if isinstance(shape, (list, tuple)) else [shape]


def _dims(literal: object) -> list[int] | None:
    if type(literal) is int and literal > 0:
        return [literal]
    if isinstance(literal, (tuple, list)) and literal and all(type(n) is int and n > 0 for n in literal):
        return list(literal)
    return None


def _argument_values(launch: Launch) -> dict[int, Any]:
    """Kernel parameter position -> the literal written for it in ``inputs=[...]``/``outputs=[...]``."""
    values: dict[int, Any] = {}
    position = 0
    for keyword in ("inputs", "outputs"):
        value = launch.keywords.get(keyword)
        elements = value.elements if value is not None else None
        if elements is None:
            position += len(launch.inputs if keyword == "inputs" else launch.outputs)
            continue
        for element in elements:
            literal = launch.argument_literals.get(position, NOT_LITERAL)
            if literal is NOT_LITERAL and element.code.startswith(("wp.vec", "wp.quat", "warp.vec")):
                literal = _vector_literal(element.code)
            values[position] = literal
            position += 1
    return values


def _vector_literal(code: str) -> Any:
    try:
        call = ast.parse(code, mode="eval").body
    except SyntaxError:
        return NOT_LITERAL
    if isinstance(call, ast.Call) and not call.keywords:
        try:
            return [float(ast.literal_eval(arg)) for arg in call.args]
        except (ValueError, TypeError, SyntaxError):
            return NOT_LITERAL
    return NOT_LITERAL


def _number(value: Any) -> bool:
    return type(value) in (int, float, bool)


def _arithmetic(index: str) -> str:
    """``0 + 1`` -> ``1``: an index whose loop counters were replaced by a pass number."""
    if _ARITHMETIC.match(index):
        try:
            return str(eval(index, {"__builtins__": {}}, {}))  # noqa: S307 - digits and operators only
        except (SyntaxError, ZeroDivisionError):
            return index
    return index


def _read(step: dict[str, Any], event: HostEvent, names: dict[str, str]) -> set[str]:
    if step["op"] == "copy":
        return {step["src"]}
    if step["op"] != "launch" or event.launch is None:
        return set()
    effects = event.launch.effects
    return {a["array"] for p, a in step["args"].items() if "array" in a and "read" in effects.get(p, ())}


def _written(step: dict[str, Any], event: HostEvent, names: dict[str, str]) -> list[str]:
    if step["op"] == "copy":
        return [step["dest"]]
    if step["op"] in ("zero", "fill"):
        return [step["array"]]
    effects = event.launch.effects
    return [a["array"] for p, a in step["args"].items()
            if "array" in a and effects.get(p, frozenset()) & {"write", "accumulate"}]


def _written_param(step: dict[str, Any], event: HostEvent, name: str) -> str | None:
    if step["op"] != "launch":
        return None
    effects = event.launch.effects
    return next((p for p, a in step["args"].items() if a.get("array") == name and
                 effects.get(p, frozenset()) & {"write", "accumulate"}), None)
