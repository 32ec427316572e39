"""AD against finite differences for one kernel launch: the one place where a gradient is judged.

Both faces of the runtime checker use this module: the public :func:`warp_lint.gradcheck` and the
child process of ``warp-lint check --confirm``. It imports ``warp``, so only child-side code and
the public ``gradcheck`` (imported lazily) may import it.

Why not ``warp.autograd.gradcheck`` / ``jacobian`` / ``gradcheck_tape``: measured on 1.19 they
report success having checked nothing when outputs precede inputs in the signature, for indexed
arrays and for struct fields; they cannot express an in-place kernel (an array both read and
written); they zero the caller's ``.grad`` buffers; and they always build full Jacobians, whose
cost grows with the array sizes. Here every launch works on private clones of the arrays, every
array is restored from a snapshot before every evaluation (so in-place kernels are measured from
the same starting values), a randomized directional test ``u^T J v`` costs a constant number of
launches whatever the size, and the full Jacobian is added only when it is small.

What "AD" means here is what a user gets: record the launch on a ``wp.Tape``, seed the output's
``.grad``, call ``tape.backward``, read the input's ``.grad``. For an in-place array ``a`` the
output is ``a`` after the launch and the input is ``a`` before it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

CRITERION = "|AD - FD| <= atol + rtol * |FD|"

# Full Jacobians are computed when both arrays of a pair hold at most this many scalars: the cost
# is one backward per output scalar and four launches per input scalar.
FULL_JACOBIAN_LIMIT = 256


@dataclasses.dataclass(frozen=True)
class Tolerances:
    """Finite-difference step and acceptance thresholds for one floating-point precision.

    The step is relative: an element ``x`` is moved by ``eps * max(1, |x|)``.
    """

    eps: float
    atol: float
    rtol: float


# Defaults chosen by measurement: `python benchmarks/bench_confirm.py --tolerances` reproduces the
# float32 table (CPU, warp-lang 1.19.0, inputs uniform in [0.5, 1.5], 3 random draws, full
# Jacobians). Cells: worst relative error |AD - FD| / max(|FD|, 1e-6) over every Jacobian entry.
#
#   pattern (float32)        | correct version            | hazardous version
#                            | eps=1e-2  eps=1e-3 eps=1e-4 | (any eps)
#   y = x*x                  | 4.2e-06   5.3e-05  3.4e-04  |   -
#   a[i] = a[i]*a[i]         | 4.2e-06   5.3e-05  3.4e-04  | 0.48
#   a[i] = a[i]*x[i]         | 6.0e-06   6.3e-05  6.6e-04  | 0.39
#   v = vel[i]; v.y = 0      | 4.5e-06   5.4e-05  5.2e-04  | AD 1 where FD 0 (abs error 1)
#   v[0]=2x; v[0]=v[0]*x     | 4.1e-06   4.2e-05  6.5e-04  | 0.97
#   s = s*x[j]+x[j], n=4     | 1.2e-05   2.3e-04  1.8e-03  | 3.3
#   sin*exp+sqrt/(1+x^2)     | 5.8e-05   7.3e-05  6.0e-04  |   -
#
# float32 FD error is round-off dominated below eps=1e-2 (it grows as the step shrinks). With
# eps=1e-3 correct kernels stay below 2.3e-4 and hazardous ones are above 0.39, so rtol=1e-2
# leaves a factor of ~40 on both sides; atol=1e-3 covers entries whose FD is near zero (FD noise
# there is ~1e-4). eps=1e-3 rather than 1e-2 keeps the truncation error of strongly curved
# kernels small; the half-step convergence check catches what remains.
# float64 (generic kernels): the sin/exp/sqrt kernel measures 1.1e-10 at eps=1e-6 (3.8e-11 at
# 1e-5, 7.9e-10 at 1e-7) and the dynamic-loop hazard 3.1, so eps=1e-6, rtol=1e-5, atol=1e-6.
DEFAULT_TOLERANCES: dict[str, Tolerances] = {
    "float16": Tolerances(eps=1e-2, atol=1e-1, rtol=1e-1),
    "float32": Tolerances(eps=1e-3, atol=1e-3, rtol=1e-2),
    "float64": Tolerances(eps=1e-6, atol=1e-6, rtol=1e-5),
}

_FLOAT_SCALARS = {wp.float16: "float16", wp.float32: "float32", wp.float64: "float64"}


def scalar_type_of(dtype: Any) -> Any:
    """The scalar type of a Warp dtype: ``wp.vec3`` -> ``wp.float32``; scalars map to themselves."""
    return getattr(dtype, "_wp_scalar_type_", dtype)


def float_precision(dtype: Any) -> str | None:
    """``"float32"`` etc. for a floating-point Warp dtype (scalar, vector, matrix, ...), else None."""
    return _FLOAT_SCALARS.get(scalar_type_of(dtype))


def flat_values(values: np.ndarray) -> np.ndarray:
    """An array's values, flattened to float64; the bytes of an array of structs (compared for
    change only: nothing differentiates them)."""
    if values.dtype.names:
        return np.frombuffer(np.ascontiguousarray(values).tobytes(), dtype=np.uint8).astype(np.float64)
    return values.astype(np.float64).ravel()


@dataclasses.dataclass
class ArraySlot:
    """One array argument of the launch under test, on a private clone of the caller's array."""

    name: str
    position: int
    array: Any  # wp.array
    snapshot: np.ndarray  # values before the launch, restored before every evaluation
    precision: str | None  # float precision name, None for integer arrays

    @property
    def size(self) -> int:
        return int(self.snapshot.size)

    def describe_element(self, flat_index: int) -> str:
        """``x[2, 1]``: the array index followed by the component index inside vectors/matrices."""
        index = np.unravel_index(int(flat_index), self.snapshot.shape)
        return f"{self.name}[{', '.join(str(int(k)) for k in index)}]"


class LaunchUnderTest:
    """A kernel launch whose outputs can be evaluated at perturbed inputs and differentiated.

    ``args`` are the launch arguments in kernel order. Arrays are cloned (the caller's arrays and
    their ``.grad`` buffers are never touched); float arrays get a ``.grad`` buffer. A struct
    argument is copied with its array fields cloned the same way: they are slots named
    ``param.field`` (the tape gives a struct's array fields their adjoints; its value fields have
    none, so they stay as given).
    """

    # Arrays put back to their snapshot between the recorded forward and the backward pass.
    rewound: tuple[str, ...] = ()

    def __init__(self, kernel: Any, dim: Any, args: Sequence[Any], device: Any = None, rewound: Sequence[str] = ()):
        self.kernel = kernel
        self.dim = dim
        self.device = device
        self.rewound = tuple(rewound)
        names = [arg.label for arg in kernel.adj.args]
        if len(names) != len(args):
            raise ValueError(f"kernel {kernel.key} takes {len(names)} arguments, {len(args)} were given")
        self.args: list[Any] = []
        self.slots: dict[str, ArraySlot] = {}
        for position, (name, value) in enumerate(zip(names, args)):
            self.args.append(self._private(name, position, value))

    def _private(self, name: str, position: int, value: Any) -> Any:
        """The launch's own copy of one argument (arrays and the arrays inside structs as slots)."""
        if isinstance(value, wp.array):
            precision = float_precision(value.dtype)
            clone = wp.clone(value, device=self.device, requires_grad=precision is not None)
            snapshot = clone.numpy().copy()  # numpy() is a view on CPU: copy it
            self.slots[name] = ArraySlot(name, position, clone, snapshot, precision)
            return clone
        struct = getattr(value, "_cls", None)
        if struct is not None and hasattr(struct, "vars"):
            copy = struct()
            for field in struct.vars:
                setattr(copy, field, self._private(f"{name}.{field}", position, getattr(value, field)))
            return copy
        return value

    def restore(self, overrides: dict[str, np.ndarray] | None = None) -> None:
        """Put every array back to its snapshot, then apply ``overrides`` (flat float64 values)."""
        for slot in self.slots.values():
            values = slot.snapshot
            if overrides and slot.name in overrides:
                values = overrides[slot.name].reshape(slot.snapshot.shape).astype(slot.snapshot.dtype)
            slot.array.assign(values)
            if slot.array.grad is not None:
                slot.array.grad.zero_()

    def _launch(self) -> None:
        wp.launch(self.kernel, dim=self.dim, inputs=self.args, device=self.device)

    def _record(self, tape: Any) -> None:
        """The launch, recorded on ``tape`` (a sequence records only some of its steps)."""
        with tape:
            self._launch()

    def forward(self, overrides: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Every array's values after one launch, flattened to float64."""
        self.restore(overrides)
        self._launch()
        wp.synchronize_device(self.device)
        return {name: flat_values(slot.array.numpy()) for name, slot in self.slots.items()}

    def backward(self, seeds: dict[str, np.ndarray], input_names: Sequence[str]) -> dict[str, np.ndarray]:
        """``.grad`` of each input after ``tape.backward`` with the given output seeds."""
        self.restore()
        tape = wp.Tape()
        self._record(tape)
        for name in self.rewound:
            self.slots[name].array.assign(self.slots[name].snapshot)
        grads = {}
        for name, seed in seeds.items():
            slot = self.slots[name]
            grads[slot.array] = wp.array(
                seed.reshape(slot.snapshot.shape).astype(slot.snapshot.dtype),
                dtype=slot.array.dtype,
                shape=slot.array.shape,
                device=slot.array.device,
            )
        tape.backward(grads=grads)
        wp.synchronize_device(self.device)
        result = {name: self.slots[name].array.grad.numpy().astype(np.float64).ravel().copy() for name in input_names}
        tape.reset()
        return result

    def changed_arrays(self) -> list[str]:
        """Names of arrays whose values differ after one launch: the arrays the kernel writes."""
        after = self.forward()
        return [
            name
            for name, slot in self.slots.items()
            if not np.array_equal(after[name], flat_values(slot.snapshot), equal_nan=True)
        ]


@dataclasses.dataclass
class PairResult:
    """The verdict for one (input, output) pair, with the numbers that decided it."""

    input: str
    output: str
    status: str  # pass | fail | fd-not-converged | non-finite | nondeterministic
    criterion: str  # the check that decided, and how it failed
    max_abs_error: float
    max_rel_error: float
    where: str | None  # "output[k] / input[j]" of the worst entry
    ad_at_worst: float
    fd_at_worst: float
    directional: dict[str, float]
    ad_identically_zero: bool
    fd_identically_zero: bool
    jacobian_checked: bool
    entries_failed: int = 0
    entries_checked: int = 0
    nondeterminism: float | None = None
    # Entries at a kink of the function (its one-sided derivatives differ) where AD lies between
    # them: there is no derivative to compare, so they neither fail nor pass the pair.
    entries_at_kink: int = 0

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _finite_or_none(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)


@dataclasses.dataclass
class GradcheckResult:
    """Every (input, output) pair of one launch compared; ``passed`` when all pairs pass."""

    pairs: list[PairResult]
    tolerances: Tolerances
    precision: str
    fast_mode: bool
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(pair.passed for pair in self.pairs)

    def __bool__(self) -> bool:
        return self.passed

    def table(self) -> str:
        tol = self.tolerances
        lines = [
            f"criterion: {CRITERION}  (atol={tol.atol:g}, rtol={tol.rtol:g}, eps={tol.eps:g}, {self.precision}"
            + (", fast_mode: directional test only" if self.fast_mode else "")
            + ")",
            f"{'input':<12} {'output':<12} {'status':<17} {'max|AD-FD|':>11} {'max rel':>9} "
            f"{'AD':>11} {'FD':>11}  where",
        ]
        for pair in self.pairs:
            lines.append(
                f"{pair.input:<12} {pair.output:<12} {pair.status:<17} {pair.max_abs_error:>11.3g} "
                f"{pair.max_rel_error:>9.3g} {pair.ad_at_worst:>11.4g} {pair.fd_at_worst:>11.4g}  {pair.where or '-'}"
            )
            if pair.status != "pass":
                lines.append(f"    {pair.criterion}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "criterion": CRITERION,
            "precision": self.precision,
            "tolerances": dataclasses.asdict(self.tolerances),
            "fast_mode": self.fast_mode,
            "pairs": [pair.to_dict() for pair in self.pairs],
            "notes": list(self.notes),
        }


def precision_of(launch: LaunchUnderTest, names: Sequence[str]) -> str:
    """The precision a check runs at: float64 only when every array involved is float64."""
    precisions = {launch.slots[name].precision for name in names}
    if precisions == {"float64"}:
        return "float64"
    return "float16" if "float16" in precisions else "float32"


def allowed_error(fd: np.ndarray | float, tol: Tolerances) -> np.ndarray | float:
    """How far AD may be from ``fd`` and still agree with it."""
    return tol.atol + tol.rtol * np.abs(fd)


def _step_sizes(values: np.ndarray, eps: float) -> np.ndarray:
    return eps * np.maximum(1.0, np.abs(values))


def _at_kink(ad: np.ndarray | float, one_sided: Sequence[tuple[Any, Any]], tol: Tolerances) -> np.ndarray | bool:
    """Where the function has a kink and AD takes a derivative it allows.

    ``one_sided`` holds (forward, backward) difference quotients at the step and at half of it.
    At a kink (``max(a, b)`` with ``a == b``, ``abs(x)`` at 0) they differ by the same amount at
    both steps, and the central difference converges to their mean, which is no derivative of
    the function: AD there may take either side or anything between. On a smooth function they
    differ by about ``h * f''``, which halves with the step."""
    (forward, backward), (forward_half, backward_half) = (tuple(np.asarray(v, dtype=np.float64) for v in pair)
                                                          for pair in one_sided)
    with np.errstate(invalid="ignore"):
        gap, gap_half = np.abs(forward - backward), np.abs(forward_half - backward_half)
        bound = allowed_error(np.maximum(np.abs(forward), np.abs(backward)), tol)
        kink = (gap > bound) & (gap_half > 0.75 * gap)
        low = np.minimum(np.minimum(forward, backward), np.minimum(forward_half, backward_half)) - bound
        high = np.maximum(np.maximum(forward, backward), np.maximum(forward_half, backward_half)) + bound
        between = np.isfinite(ad) & (ad >= low) & (ad <= high)
    return kink & between


def compare_launch(
    launch: LaunchUnderTest,
    input_names: Sequence[str],
    output_names: Sequence[str],
    *,
    tolerances: Tolerances,
    rng: np.random.Generator,
    fast_mode: bool = False,
    nondet_tol: float | None = 0.0,
    full_jacobian_limit: int = FULL_JACOBIAN_LIMIT,
) -> GradcheckResult:
    """Compare AD with central finite differences for every (input, output) pair of a launch.

    The directional test draws unit vectors ``u`` (output) and ``v`` (input) and compares
    ``u . (vJp(u)) . v`` from one backward per output with ``u . (f(x+tv) - f(x-tv)) / 2t`` from two
    launches per input: a constant number of launches whatever the array sizes. The relative
    error reported is ``|AD - FD| / max(|FD|, atol)``. ``nondet_tol`` runs every backward twice
    and fails a pair whose two results differ by more (None skips the second run). Unless
    ``fast_mode``, pairs whose arrays are small also get the full Jacobian compared entry by
    entry. Finite differences are taken at two step sizes; an entry only counts as a
    disagreement when FD agrees with itself across the steps (it has converged) and AD is outside
    the tolerance of both.
    """
    slots = launch.slots
    precision = precision_of(launch, [*input_names, *output_names])
    notes: list[str] = []

    base = launch.forward()
    base_inputs = {name: slots[name].snapshot.astype(np.float64).ravel() for name in input_names}
    nonfinite_base = [name for name in output_names if not np.all(np.isfinite(base[name]))]
    if nonfinite_base:
        notes.append(f"outputs not finite at the starting point: {', '.join(nonfinite_base)}")

    # Random unit directions, one per array.
    def unit(n: int) -> np.ndarray:
        vector = rng.standard_normal(n)
        return vector / max(np.linalg.norm(vector), 1e-30)

    out_dirs = {name: unit(slots[name].size) for name in output_names}
    in_dirs = {name: unit(slots[name].size) for name in input_names}

    # AD directional: one backward per output, seeded with u (other outputs seeded with zero).
    ad_vjp: dict[str, dict[str, np.ndarray]] = {}
    nondeterminism: dict[str, float] = {}
    for out in output_names:
        seeds = {o: (out_dirs[o] if o == out else np.zeros(slots[o].size)) for o in output_names}
        ad_vjp[out] = launch.backward(seeds, input_names)
        if nondet_tol is not None:
            again = launch.backward(seeds, input_names)
            nondeterminism[out] = max(
                (float(np.max(np.abs(again[i] - ad_vjp[out][i]), initial=0.0)) for i in input_names), default=0.0
            )

    # FD directional: two launches per input per step size; the one-sided quotients tell a kink.
    fd_dir: dict[str, dict[str, tuple[float, float]]] = {}
    one_sided: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for inp in input_names:
        x = base_inputs[inp]
        t = tolerances.eps * max(1.0, float(np.max(np.abs(x), initial=0.0)))
        estimates = []
        one_sided[inp] = {out: [] for out in output_names}
        for step in (t, t / 2):
            plus = launch.forward({inp: x + step * in_dirs[inp]})
            minus = launch.forward({inp: x - step * in_dirs[inp]})
            estimates.append({out: float(out_dirs[out] @ (plus[out] - minus[out])) / (2 * step) for out in output_names})
            for out in output_names:
                one_sided[inp][out].append((float(out_dirs[out] @ (plus[out] - base[out])) / step,
                                            float(out_dirs[out] @ (base[out] - minus[out])) / step))
        fd_dir[inp] = {out: (estimates[0][out], estimates[1][out]) for out in output_names}

    pairs: list[PairResult] = []
    for inp in input_names:
        for out in output_names:
            ad_d = float(ad_vjp[out][inp] @ in_dirs[inp])
            fd_d, fd_d_half = fd_dir[inp][out]
            directional = {"ad": _finite_or_none(ad_d), "fd": _finite_or_none(fd_d), "fd_half_step": _finite_or_none(fd_d_half)}
            small = slots[inp].size <= full_jacobian_limit and slots[out].size <= full_jacobian_limit
            if not fast_mode and small:
                pair = _compare_full_jacobian(launch, inp, out, base_inputs[inp], tolerances, directional)
            else:
                pair = _judge_directional(inp, out, ad_d, fd_d, fd_d_half, tolerances, directional,
                                          kink=bool(_at_kink(ad_d, one_sided[inp][out], tolerances)))
                pair.ad_identically_zero = bool(np.all(ad_vjp[out][inp] == 0.0))
            if out in nondeterminism:
                pair.nondeterminism = nondeterminism[out]
                if nondet_tol is not None and nondeterminism[out] > nondet_tol:
                    # Not a wrong gradient: an unstable one (races, unordered float atomics).
                    pair.status = "nondeterministic"
                    pair.criterion = (
                        f"nondeterministic backward: two identical backward passes differ by "
                        f"{nondeterminism[out]:.3g} > nondet_tol={nondet_tol:g}"
                    )
            pairs.append(pair)
    return GradcheckResult(pairs=pairs, tolerances=tolerances, precision=precision, fast_mode=fast_mode, notes=notes)


def _judge_directional(
    inp: str, out: str, ad: float, fd: float, fd_half: float, tol: Tolerances, directional: dict[str, Any],
    kink: bool = False,
) -> PairResult:
    error = abs(ad - fd)
    rel = error / max(abs(fd), tol.atol)
    fd_converged = abs(fd - fd_half) <= allowed_error(fd, tol)
    outside = error > allowed_error(fd, tol)
    status, criterion = "pass", f"directional u^T J v: {CRITERION}"
    if not (math.isfinite(fd) and math.isfinite(fd_half)):
        status, criterion = "non-finite", "finite differences are not finite"
    elif not math.isfinite(ad):
        status, criterion = "fail", f"AD directional derivative is {ad!r} while FD is {fd:.6g}"
    elif outside and kink:
        status = "fd-not-converged"
        criterion = (f"directional: the function has a kink along the direction (its one-sided derivatives "
                     f"differ) and AD ({ad:.6g}) lies between them: no derivative to compare")
    elif outside:
        if fd_converged and abs(ad - fd_half) > allowed_error(fd_half, tol):
            status = "fail"
            criterion = (
                f"directional u^T J v: {CRITERION} fails: |{ad:.6g} - {fd:.6g}| = {error:.3g} > "
                f"{allowed_error(fd, tol):.3g}"
            )
        else:
            status = "fd-not-converged"
            criterion = f"directional FD changes with the step ({fd:.6g} vs {fd_half:.6g} at half step)"
    return PairResult(
        input=inp,
        output=out,
        status=status,
        criterion=criterion,
        max_abs_error=error if math.isfinite(error) else float("inf"),
        max_rel_error=rel if math.isfinite(rel) else float("inf"),
        where="u^T J v (random unit directions)",
        ad_at_worst=ad,
        fd_at_worst=fd,
        directional=directional,
        ad_identically_zero=ad == 0.0,
        fd_identically_zero=fd == 0.0,
        jacobian_checked=False,
        entries_failed=int(status == "fail"),
        entries_checked=1,
        entries_at_kink=int(kink and outside),
    )


def _compare_full_jacobian(
    launch: LaunchUnderTest, inp: str, out: str, x: np.ndarray, tol: Tolerances, directional: dict[str, Any]
) -> PairResult:
    slots = launch.slots
    n_in, n_out = slots[inp].size, slots[out].size

    # AD: row k of the Jacobian from a one-hot seed on output element k.
    ad = np.zeros((n_out, n_in))
    for k in range(n_out):
        seed = np.zeros(n_out)
        seed[k] = 1.0
        ad[k] = launch.backward({out: seed}, [inp])[inp]

    # FD: column j from central differences at two step sizes; the one-sided quotients tell a kink.
    steps = _step_sizes(x, tol.eps)
    at_base = launch.forward()[out]
    fd = np.zeros((n_out, n_in))
    fd_half = np.zeros((n_out, n_in))
    one_sided = [tuple(np.zeros((n_out, n_in)) for _ in range(2)) for _ in range(2)]
    for j in range(n_in):
        for target, (forward, backward), h in ((fd, one_sided[0], steps[j]), (fd_half, one_sided[1], steps[j] / 2)):
            plus, minus = x.copy(), x.copy()
            plus[j] += h
            minus[j] -= h
            up, down = launch.forward({inp: plus})[out], launch.forward({inp: minus})[out]
            target[:, j] = (up - down) / (2 * h)
            forward[:, j], backward[:, j] = (up - at_base) / h, (at_base - down) / h

    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(ad - fd)
        bound = allowed_error(fd, tol)
        outside = ~(error <= bound)  # NaN counts as outside
        converged = np.abs(fd - fd_half) <= bound
        outside_half = ~(np.abs(ad - fd_half) <= allowed_error(fd_half, tol))
        kink = outside & _at_kink(ad, one_sided, tol)
        decisive = outside & converged & outside_half & np.isfinite(fd) & ~kink
        outside &= ~kink
        error = np.where(kink, 0.0, error)  # reported errors are of entries compared
        rel = error / np.maximum(np.abs(fd), tol.atol)

    fd_finite = bool(np.all(np.isfinite(fd)) and np.all(np.isfinite(fd_half)))
    ad_nonfinite = ~np.isfinite(ad) & np.isfinite(fd)
    if np.any(ad_nonfinite):
        worst = np.unravel_index(int(np.argmax(ad_nonfinite)), ad.shape)
    elif np.any(decisive):
        worst = np.unravel_index(int(np.nanargmax(np.where(decisive, error, -1.0))), ad.shape)
    else:
        worst = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(error), error, -1.0))), ad.shape)

    status, criterion = "pass", f"full Jacobian: {CRITERION}"
    entries_failed = int(np.count_nonzero(decisive | ad_nonfinite))
    entries_at_kink = int(np.count_nonzero(kink))
    if np.any(ad_nonfinite):
        status = "fail"
        criterion = f"AD is not finite at {int(np.count_nonzero(ad_nonfinite))} entries where FD is finite"
    elif np.any(decisive):
        status = "fail"
        criterion = (
            f"full Jacobian: {CRITERION} fails at {entries_failed} of {ad.size} entries "
            f"(FD converged there: same result at half the step)"
        )
    elif not fd_finite:
        status, criterion = "non-finite", "finite differences are not finite"
    elif np.any(outside):
        status = "fd-not-converged"
        criterion = (
            f"{int(np.count_nonzero(outside))} entries disagree but FD changes with the step there "
            f"(non-smooth or badly scaled function): undecided"
        )

    max_abs = float(np.nanmax(np.where(np.isfinite(error), error, np.nan), initial=0.0)) if error.size else 0.0
    finite_rel = rel[np.isfinite(rel)]
    ad_zero = bool(np.all(ad == 0.0))
    fd_zero = bool(np.all(np.abs(fd) <= tol.atol))
    if status == "fail" and ad_zero and not fd_zero:
        criterion += "; AD is identically zero while FD is not (the gradient is dropped)"
    if entries_at_kink:
        criterion += (f"; {entries_at_kink} entries at a kink (one-sided derivatives differ, AD between them) "
                      "not compared")
    return PairResult(
        input=inp,
        output=out,
        status=status,
        criterion=criterion,
        max_abs_error=max_abs,
        max_rel_error=float(finite_rel.max()) if finite_rel.size else 0.0,
        where=f"d {slots[out].describe_element(worst[0])} / d {slots[inp].describe_element(worst[1])}",
        ad_at_worst=float(ad[worst]),
        fd_at_worst=float(fd[worst]),
        directional=directional,
        ad_identically_zero=ad_zero,
        fd_identically_zero=fd_zero,
        jacobian_checked=True,
        entries_failed=entries_failed,
        entries_checked=int(ad.size),
        entries_at_kink=entries_at_kink,
    )
