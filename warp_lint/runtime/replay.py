"""Replay a host-side launch sequence to confirm or clear a tape hazard (child side: imports warp).

A WL201-style hazard lives in the *order* of launches: an array a recorded launch read is
overwritten before ``tape.backward()``, which then replays that launch's adjoint with the new
values. One kernel's gradcheck cannot show it. This module replays the whole sequence with
synthesized arrays: the tape gradient of the loss against central finite differences of the whole
sequence (the shared comparison of :mod:`warp_lint.runtime.comparison`, treating the sequence as
one launch), and the same sequence with the overwrite removed (the counterfactual: the overwriting
step writes a fresh buffer, which later steps read instead). *Confirmed* needs the disagreement in
the original and agreement in the counterfactual, with the same loss values (where the sequence
overwrites other arrays too, isolation: with the others removed the disagreement stays, and with
this one removed as well it goes); *cleared* needs agreement, a non-zero gradient, and a loss that
depends on the values overwritten; anything the replay cannot do is *inconclusive*, pointing to
``warp-lint trace``, which observes the real run.

Entry points: :func:`replay` (in a process that may import warp and the user's code; returns a
verdict dict), or, from the parent side, put the plan in a finding's ``data["replay_plan"]`` and
call :func:`warp_lint.runtime.confirm_findings`: the child process runs :func:`replay`.

The launch plan (JSON-serialisable; every key not marked optional is required)::

    {
      "version": 1,
      "kernels": {                                  # kernels by where they are defined
        "K": {"path": "sim.py",                     # file (absolute, or relative to the finding's file)
              "name": "integrate",                  # the function's name
              "line": 12}                           # optional: any line of its definition
      },
      "arrays": {
        "A": {"dtype": "float32",                   # a Warp type name: float32, float64, vec3, vec3d,
                                                    #   mat33, quat, transform, int32, ... ("float" = float32)
              "shape": [16],                        # literal sizes where the program has them, small otherwise
              "requires_grad": true,                # optional, default true for float dtypes
              "init": "random"}                     # optional: "random" (default: uniform [0.5, 1.5], rotations
                                                    #   normalised; ints in [0, 4)), "zeros", "ones",
                                                    #   {"values": [...]}, {"uniform": [lo, hi]}
      },
      "steps": [                                    # in program order
        {"op": "launch", "kernel": "K", "dim": [16],
         "args": {"x": {"array": "A"},              # every kernel parameter, by name: an array ...
                  "dt": {"value": 0.01}},           # ... or a value (number, or list for a vector)
         "record": true,                            # optional, default true: recorded on the tape
         "site": {"path": "sim.py", "line": 40}},   # optional, echoed in the evidence
        {"op": "copy", "dest": "B", "src": "A", "record": true},   # wp.copy(B, A)
        {"op": "zero", "array": "A", "record": false},             # A.zero_()
        {"op": "fill", "array": "A", "value": 1.0, "record": false}  # A.fill_(1.0)
      ],
      "loss": {"array": "L",                        # tape.backward(loss=L): L's sum (or weights . L)
               "weights": null},                    # optional: per-element seed (grads={L: weights})
      "inputs": ["A"],                              # optional: arrays whose gradient is checked
                                                    #   (default: float arrays with requires_grad but the loss;
                                                    #   the loss may be one: an array updated in place)
      "overwrite": {"step": 2, "array": "A",        # the step (index into "steps") that overwrites an array
                    "param": "x_out"},              #   an earlier recorded step read: the finding; "param"
                                                    #   (optional): the launch reads A too, and only this
                                                    #   parameter's write moves to the fresh buffer
      "other_overwrites": [...],                    # optional: the sequence's other overwrites, same form
      "seed": 0                                     # optional
    }

Steps run in order; "record": true steps run inside one ``wp.Tape`` recording, the others outside
it (a launch with "record": false inside a recording region is ``wp.launch(..., record_tape=False)``:
either way the tape does not see it), and ``tape.backward`` runs after the last step.

The verdict is a dict ``{"status", "reason", "detail", "evidence"}`` as for kernel findings, with
reason codes ``gradient-mismatch`` (confirmed), ``gradient-matches`` (cleared), and for
inconclusive ``replay-unsupported`` (the plan cannot be replayed: it says why and points to
``warp-lint trace``), ``counterfactual-disagrees``, ``non-finite``, ``fd-not-converged``,
``zero-jacobian``.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

import numpy as np
import warp as wp

from warp_lint.runtime import generated, locate
from warp_lint.runtime.comparison import (
    DEFAULT_TOLERANCES,
    ArraySlot,
    LaunchUnderTest,
    compare_launch,
    float_precision,
    scalar_type_of,
)
from warp_lint.runtime.synthesis import Fill, _normalise_rotations
from warp_lint.runtime.verdicts import Reason, Status

TRACE_HINT = "run the program under `warp-lint trace -- COMMAND` to observe the hazard in a real run"
FULL_JACOBIAN_LIMIT = 64  # scalars per input above which only the directional test runs


class ReplayUnsupported(Exception):
    """The plan cannot be replayed; ``str()`` says why."""


def _dtype(name: str) -> Any:
    name = {"float": "float32", "int": "int32", "bool": "bool"}.get(name, name).removeprefix("wp.")
    dtype = getattr(wp, name, None)
    if dtype is None:
        raise ReplayUnsupported(f"unknown dtype {name!r}")
    return dtype


@dataclasses.dataclass
class _Array:
    name: str
    dtype: Any
    shape: tuple[int, ...]
    requires_grad: bool
    initial: np.ndarray


class SequenceUnderTest(LaunchUnderTest):
    """A launch sequence as a :class:`warp_lint.runtime.comparison.LaunchUnderTest` (slots, restore,
    forward, backward), so the one comparison judges it: a sequence is one function from its
    arrays' initial values to their final values."""

    def __init__(self, arrays: dict[str, _Array], steps: list[dict[str, Any]], kernels: dict[str, Any],
                 device: str):
        self.device = device
        self.steps = steps
        self.kernels = kernels
        self.slots: dict[str, ArraySlot] = {}
        for position, (name, spec) in enumerate(arrays.items()):
            precision = float_precision(spec.dtype)
            array = wp.array(spec.initial, dtype=spec.dtype, shape=spec.shape, device=device,
                             requires_grad=spec.requires_grad and precision is not None)
            self.slots[name] = ArraySlot(name, position, array, spec.initial.copy(), precision)

    def _launch(self) -> None:
        self._run()

    def _record(self, tape: Any) -> None:
        self._run(tape)

    def _run(self, tape: Any = None) -> None:
        for step in self.steps:
            recorded = tape is not None and step.get("record", True)
            if recorded:
                with tape:
                    self._step(step, record=True)
            else:
                self._step(step, record=False)

    def _step(self, step: dict[str, Any], record: bool) -> None:
        op = step.get("op", "launch")
        if op == "launch":
            kernel = self.kernels[step["kernel"]]
            args = []
            for param in kernel.adj.args:
                binding = step["args"][param.label]
                if "array" in binding:
                    args.append(self.slots[binding["array"]].array)
                else:
                    args.append(_value(binding["value"], param.type))
            wp.launch(kernel, dim=step["dim"], inputs=args, device=self.device, record_tape=record)
        elif op == "copy":
            wp.copy(self.slots[step["dest"]].array, self.slots[step["src"]].array)
        elif op == "zero":
            self.slots[step["array"]].array.zero_()
        elif op == "fill":
            self.slots[step["array"]].array.fill_(step["value"])
        else:
            raise ReplayUnsupported(f"unknown step {op!r}")


def _value(value: Any, t: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return t(*value)
    return value


def _initial(name: str, spec: dict[str, Any], dtype: Any, shape: tuple[int, ...],
             rng: np.random.Generator) -> np.ndarray:
    full = shape + tuple(getattr(dtype, "_shape_", ()))
    scalar = scalar_type_of(dtype)
    np_dtype = {wp.float16: np.float16, wp.float32: np.float32, wp.float64: np.float64}.get(scalar, np.int32)
    if scalar is wp.bool:
        np_dtype = np.bool_
    init = spec.get("init", "random")
    if init == "zeros":
        values = np.zeros(full)
    elif init == "ones":
        values = np.ones(full)
    elif isinstance(init, dict) and "values" in init:
        values = np.asarray(init["values"], dtype=np.float64).reshape(full)
    elif isinstance(init, dict) and "uniform" in init:
        low, high = init["uniform"]
        values = rng.uniform(low, high, size=full)
    elif init == "random":
        values = Fill("default").draw(rng, full) if float_precision(dtype) else rng.integers(0, 4, size=full)
    else:
        raise ReplayUnsupported(f"array {name!r}: unknown init {init!r}")
    if float_precision(dtype):
        values = _normalise_rotations(values.astype(np.float64), dtype)
    return values.astype(np_dtype)


def _load_kernels(plan: dict[str, Any], base_path: str, module_name: str, cache_dir: str,
                  device: str) -> dict[str, Any]:
    """The plan's kernels, found by location and compiled as copies in one generated module."""
    pieces, found = [], {}
    for key, where in plan["kernels"].items():
        path = os.path.join(os.path.dirname(base_path), where["path"])  # an absolute path stays as it is
        if os.path.realpath(path) not in _loaded_files():
            try:
                locate.import_user_module(path, generated.stable_name("warp_lint_target_replay", path))
            except Exception as error:  # noqa: BLE001 - the user's code raised at import
                raise ReplayUnsupported(f"importing {path} failed: {type(error).__name__}: {error}"[:500]) from None
        targets = _find(path, where)
        if not targets:
            raise ReplayUnsupported(f"kernel {where['name']!r} not found in {path} at import (defined inside a "
                                    "function that import does not call?)")
        target = targets[0]
        if any(locate.is_generic(t) for _, t in locate.parameters(target)):
            raise ReplayUnsupported(f"kernel {where['name']!r} is generic: the plan does not say which overload runs")
        found[key] = target
        pieces.append(generated.Piece(f"_wl_replay_{key}", [], clone=(target.func, dict(target.obj.options))))
    if not pieces:
        return {}
    first = next(iter(found.values()))
    built = generated.build_pieces(generated.stable_name("warp_lint_generated_replay", module_name), pieces,
                                   first.namespace(), {}, os.path.join(cache_dir, "generated"),
                                   locate.module_options(first), device)
    missing = [name for name in (p.name for p in pieces) if name not in built.kernels]
    if missing:
        raise ReplayUnsupported(f"kernel copies did not build: {built.errors.get(missing[0], '')[:500]}")
    return {key: built.kernels[f"_wl_replay_{key}"] for key in found}


def _loaded_files() -> set[str]:
    import sys

    return {os.path.realpath(m.__file__) for m in list(sys.modules.values()) if getattr(m, "__file__", None)}


def _find(path: str, where: dict[str, Any]) -> list[locate.Target]:
    name = where["name"]
    if "line" in where:
        return locate.find_targets(path, int(where["line"]), name, "kernel")
    kernels, _ = locate.registered_functions()
    found = []
    for kernel in kernels:
        func = kernel.func
        if func.__name__ == name and os.path.realpath(func.__code__.co_filename) == os.path.realpath(path):
            found.extend(locate.find_targets(path, func.__code__.co_firstlineno, name, "kernel"))
    return found[:1]


def _counterfactual_steps(steps: list[dict[str, Any]], overwrites: list[dict[str, Any]], loss: str
                          ) -> tuple[list[dict[str, Any]], dict[str, str], str]:
    """The steps with ``overwrites`` removed: from each overwriting step on, the overwritten array is
    a fresh buffer (a launch that may read it first gets a copy of its current values, recorded like
    the launch). Removed from the last to the first, so each step index still holds when it is
    removed. Returns (steps, fresh name -> the array it replaces, the loss's name)."""
    steps = copy.deepcopy(steps)
    fresh_of: dict[str, str] = {}
    for overwrite in sorted(overwrites, key=lambda o: int(o["step"]), reverse=True):
        index, array = int(overwrite["step"]), overwrite["array"]
        fresh = f"{array}__wl_fresh{index}"
        fresh_of[fresh] = fresh_of.get(array, array)
        head, tail = steps[:index], steps[index:]
        overwriting = tail[0]
        prelude = []
        if overwriting.get("op", "launch") == "launch":
            prelude.append({"op": "copy", "dest": fresh, "src": array, "record": overwriting.get("record", True)})
        written_param = overwrite.get("param")  # one launch reading and writing the array: only the write moves
        for position, step in enumerate(tail):
            for param, binding in step.get("args", {}).items():
                if binding.get("array") == array and (position > 0 or written_param in (None, param)):
                    binding["array"] = fresh
            for key in ("array", "dest", "src"):
                if step.get(key) == array:
                    step[key] = fresh
        steps = head + prelude + tail
        if loss == array:  # the overwritten array is the loss itself: the fresh buffer ends as the loss
            loss = fresh
    return steps, fresh_of, loss


def replay(plan: dict[str, Any], *, base_path: str = "", module_name: str = "replay", device: str = "cpu",
           cache_dir: str = "", seed: int | None = None) -> dict[str, Any]:
    """Replay ``plan`` (see the module docstring) and return a verdict dict."""
    try:
        return _replay(plan, base_path, module_name, device, cache_dir, seed)
    except ReplayUnsupported as error:
        return {"status": Status.INCONCLUSIVE, "reason": Reason.REPLAY_UNSUPPORTED,
                "detail": f"the sequence cannot be replayed: {error}; {TRACE_HINT}", "evidence": {}}


def _replay(plan: dict[str, Any], base_path: str, module_name: str, device: str, cache_dir: str,
            seed: int | None) -> dict[str, Any]:
    for key in ("kernels", "arrays", "steps", "loss", "overwrite"):
        if key not in plan:
            raise ReplayUnsupported(f"the plan has no {key!r}")
    kernels = _load_kernels(plan, base_path, module_name, cache_dir or os.getcwd(), device)
    rng = np.random.default_rng(plan.get("seed", 0) if seed is None else seed)
    arrays: dict[str, _Array] = {}
    for name, spec in plan["arrays"].items():
        dtype = _dtype(spec["dtype"])
        shape = tuple(int(n) for n in spec["shape"])
        requires_grad = bool(spec.get("requires_grad", float_precision(dtype) is not None))
        arrays[name] = _Array(name, dtype, shape, requires_grad, _initial(name, spec, dtype, shape, rng))
    for step in plan["steps"]:
        if step.get("op", "launch") == "launch":
            kernel = kernels.get(step.get("kernel"))
            if kernel is None:
                raise ReplayUnsupported(f"step names unknown kernel {step.get('kernel')!r}")
            missing = [a.label for a in kernel.adj.args if a.label not in step.get("args", {})]
            if missing:
                raise ReplayUnsupported(f"launch of {step['kernel']!r} binds no value to {', '.join(missing)}")
            for param in kernel.adj.args:
                if getattr(param.type, "vars", None) is not None and hasattr(param.type, "cls"):
                    raise ReplayUnsupported(f"parameter {param.label!r} of {step['kernel']!r} is a struct")
    loss = plan["loss"]["array"]
    if loss not in arrays:
        raise ReplayUnsupported(f"the loss array {loss!r} is not among the arrays")
    inputs = plan.get("inputs") or [n for n, a in arrays.items()
                                    if a.requires_grad and float_precision(a.dtype) and n != loss]
    overwrite = plan["overwrite"]
    original = overwrite["array"]
    others = [o for o in plan.get("other_overwrites", ()) if int(o["step"]) != int(overwrite["step"])]
    sequence = SequenceUnderTest(arrays, plan["steps"], kernels, device)
    tolerances = DEFAULT_TOLERANCES[_precision(sequence, inputs + [loss])]
    weights = plan["loss"].get("weights")

    def variant(removed: list[dict[str, Any]]) -> tuple[SequenceUnderTest, str, list[dict[str, Any]]]:
        """The sequence with ``removed`` overwrites writing fresh buffers: (it, its loss, its steps)."""
        steps, fresh_of, loss_name = _counterfactual_steps(plan["steps"], removed, loss)
        extended = dict(arrays)
        for fresh, source in fresh_of.items():
            extended[fresh] = dataclasses.replace(arrays[source], name=fresh, initial=arrays[source].initial.copy())
        return SequenceUnderTest(extended, steps, kernels, device), loss_name, steps

    def judge(under_test: SequenceUnderTest, loss_name: str) -> Any:
        if weights is not None:
            raise ReplayUnsupported("per-element loss weights are not supported yet: use a scalar loss")
        fast = max(under_test.slots[n].size for n in inputs) > FULL_JACOBIAN_LIMIT
        return compare_launch(under_test, inputs, [loss_name], tolerances=tolerances,
                              rng=np.random.default_rng(0), fast_mode=fast, nondet_tol=None)

    counterfactual, fresh_loss, fresh_steps = variant([overwrite])
    before = sequence.forward()
    after = counterfactual.forward()
    evidence: dict[str, Any] = {
        "steps": [_describe(step) for step in plan["steps"]],
        "overwrite": overwrite,
        "counterfactual_steps": [_describe(step) for step in fresh_steps],
        "loss": {"original": _finite_list(before[loss]), "counterfactual": _finite_list(after[fresh_loss])},
    }
    if not np.all(np.isfinite(before[loss])):
        return _verdict(Status.INCONCLUSIVE, Reason.NON_FINITE, "the loss is not finite at the synthesized arrays",
                        evidence)
    result = judge(sequence, loss)
    evidence["original"] = result.to_dict()
    evidence["table"] = result.table()
    failing = [p for p in result.pairs if p.status == "fail"]
    if failing:
        pair = max(failing, key=lambda p: p.max_abs_error)
        detail = (f"the tape gradient of the loss disagrees with finite differences of the whole sequence for "
                  f"d {loss} / d {pair.input}: max |AD - FD| = {pair.max_abs_error:.3g} at {pair.where} "
                  f"(AD {pair.ad_at_worst:.6g}, FD {pair.fd_at_worst:.6g})")
        other = judge(counterfactual, fresh_loss)
        evidence["counterfactual"] = other.to_dict()
        evidence["counterfactual_table"] = other.table()
        same_loss = _same(before[loss], after[fresh_loss])
        if same_loss and _explains(failing, other):
            return _verdict(Status.CONFIRMED, Reason.GRADIENT_MISMATCH,
                            f"{detail}; with {_step_name(plan, overwrite)} writing a fresh buffer instead of "
                            f"`{original}` the same loss has the right gradient", evidence)
        if same_loss and others:
            # Isolation: the sequence has other overwrites. With all of them removed the gradient
            # must be right, and with all but this one removed, wrong again.
            clean, clean_loss, _ = variant(others + [overwrite])
            alone, alone_loss, alone_steps = variant(others)
            clean_result, alone_result = judge(clean, clean_loss), judge(alone, alone_loss)
            evidence["isolation"] = {"others": others, "steps_with_only_this": [_describe(s) for s in alone_steps],
                                     "all_removed_table": clean_result.table(),
                                     "only_this_table": alone_result.table()}
            alone_failing = [p for p in alone_result.pairs if p.status == "fail"]
            same_losses = _same(clean.forward()[clean_loss], before[loss]) and \
                _same(alone.forward()[alone_loss], before[loss])
            if alone_failing and _explains(alone_failing, clean_result) and same_losses:
                worst = max(alone_failing, key=lambda p: p.max_abs_error)
                return _verdict(Status.CONFIRMED, Reason.GRADIENT_MISMATCH, (
                    f"{detail}. The sequence overwrites {len(others)} more array(s) "
                    f"({', '.join(_step_name(plan, o) for o in others)}): with those writing fresh buffers the "
                    f"gradient is still wrong (d {loss} / d {worst.input}: AD {worst.ad_at_worst:.6g}, FD "
                    f"{worst.fd_at_worst:.6g}), and with {_step_name(plan, overwrite)} writing one too it is right"),
                    evidence)
            passing = all(q.status == "pass" for q in alone_result.pairs + clean_result.pairs)
            if passing and same_losses and not all(q.fd_identically_zero for q in alone_result.pairs):
                return _verdict(Status.CLEARED, Reason.GRADIENT_MATCHES, (
                    f"{detail}, but not because of this overwrite: with the sequence's other overwrites "
                    f"({', '.join(_step_name(plan, o) for o in others)}) writing fresh buffers, the gradient "
                    f"matches finite differences with {_step_name(plan, overwrite)} still overwriting `{original}`"),
                    evidence)
        why = "the loss changes" if not same_loss else "the disagreement stays"
        return _verdict(Status.INCONCLUSIVE, Reason.COUNTERFACTUAL_DISAGREES,
                        f"{detail}; but with the overwrite removed {why}, so it is not the overwrite's doing", evidence)
    statuses = {p.status for p in result.pairs}
    if "non-finite" in statuses:
        return _verdict(Status.INCONCLUSIVE, Reason.NON_FINITE, "finite differences are not finite", evidence)
    if "fd-not-converged" in statuses:
        return _verdict(Status.INCONCLUSIVE, Reason.FD_NOT_CONVERGED, "finite differences did not converge", evidence)
    if all(p.fd_identically_zero and p.ad_identically_zero for p in result.pairs):
        return _verdict(Status.INCONCLUSIVE, Reason.ZERO_JACOBIAN, "the loss does not depend on the inputs checked",
                        evidence)
    if any(p.input == original and p.fd_identically_zero for p in result.pairs):
        return _verdict(Status.INCONCLUSIVE, Reason.DOES_NOT_MATTER,
                        f"the loss does not depend on the values of `{original}` the overwrite replaces: the "
                        "agreement says nothing of the overwrite", evidence)
    shift = _gradient_shift(sequence, loss, counterfactual, fresh_loss, inputs, np.ones_like(before[loss]))
    if shift is not None:
        # Finite differences resolve a gradient only to their tolerance; the two tape gradients
        # are exact up to rounding, and the sequences differ in nothing but the overwrite.
        evidence["gradient_shift"] = shift
        return _verdict(Status.CONFIRMED, Reason.GRADIENT_MISMATCH, (
            f"the tape gradient of the loss changes when {_step_name(plan, overwrite)} writes a fresh buffer "
            f"instead of `{original}`, although the loss does not: d {loss} / d {shift['input']}[{shift['index']}] "
            f"is {shift['ad']:.6g} with the overwrite and {shift['ad_without']:.6g} without it (relative "
            f"difference {shift['relative']:.2g}); at these inputs both lie within the finite-difference "
            f"tolerance, so only the tape gradients tell them apart"), evidence)
    return _verdict(Status.CLEARED, Reason.GRADIENT_MATCHES,
                    f"the tape gradient of the loss matches finite differences of the whole sequence for "
                    f"{', '.join(inputs)}: the overwrite by {_step_name(plan, overwrite)} does not change it",
                    evidence)


GRADIENT_SHIFT_RTOL = 1e-3  # far above float32 rounding of a short launch sequence


def _gradient_shift(sequence: SequenceUnderTest, loss: str, counterfactual: SequenceUnderTest, fresh_loss: str,
                    inputs: list[str], seed: np.ndarray) -> dict[str, Any] | None:
    """Where the tape gradients of the sequence and of its overwrite-free twin differ beyond rounding
    (``seed`` on the loss of both), else None."""
    with_overwrite = sequence.backward({loss: seed}, inputs)
    without = counterfactual.backward({fresh_loss: seed}, inputs)
    worst = None
    for name in inputs:
        difference = np.abs(with_overwrite[name] - without[name])
        scale = max(float(np.max(np.abs(without[name]), initial=0.0)), 1e-6)
        index = int(np.argmax(difference)) if difference.size else 0
        relative = float(difference[index]) / scale if difference.size else 0.0
        if relative > GRADIENT_SHIFT_RTOL and (worst is None or relative > worst["relative"]):
            worst = {"input": name, "index": index, "ad": float(with_overwrite[name][index]),
                     "ad_without": float(without[name][index]), "relative": relative}
    return worst


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-5, atol=1e-6))


def _explains(failing: list[Any], counterfactual: Any) -> bool:
    """Whether the counterfactual passes on an input that failed (the disagreement goes away)."""
    return any(q.input == p.input and q.status == "pass" for p in failing for q in counterfactual.pairs)


def _step_name(plan: dict[str, Any], overwrite: dict[str, Any]) -> str:
    """An overwriting step, in words: "step 2 (`advance`, sim.py:40)"."""
    index = int(overwrite["step"])
    step = plan["steps"][index]
    what = plan["kernels"].get(step.get("kernel"), {}).get("name") if step.get("op", "launch") == "launch" else \
        step.get("op")
    site = step.get("site")
    where = f", {os.path.basename(site['path'])}:{site['line']}" if site else ""
    return f"step {index} (`{what}`{where})"


def _precision(sequence: SequenceUnderTest, names: list[str]) -> str:
    precisions = {sequence.slots[n].precision for n in names}
    return "float64" if precisions == {"float64"} else "float32"


def _finite_list(values: np.ndarray) -> list:
    return [float(v) if np.isfinite(v) else repr(float(v)) for v in values[:8]]


def _describe(step: dict[str, Any]) -> str:
    op = step.get("op", "launch")
    record = "" if step.get("record", True) else " (not recorded)"
    if op == "launch":
        bound = ", ".join(f"{k}={v['array'] if 'array' in v else v['value']}" for k, v in step.get("args", {}).items())
        return f"launch {step['kernel']}({bound}){record}"
    if op == "copy":
        return f"copy {step['src']} -> {step['dest']}{record}"
    return f"{op} {step.get('array')}{record}"


def _verdict(status: str, reason: str, detail: str, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"status": status, "reason": reason, "detail": detail, "evidence": evidence}
