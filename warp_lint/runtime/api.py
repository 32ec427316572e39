"""``warp_lint.gradcheck``: check one kernel launch's gradient, shaped like torch.autograd.gradcheck.

Imports ``warp``; ``warp_lint`` and ``warp_lint.runtime`` import this module lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from warp_lint.runtime.comparison import (
    DEFAULT_TOLERANCES,
    GradcheckResult,
    LaunchUnderTest,
    Tolerances,
    compare_launch,
    float_precision,
    precision_of,
)


class GradcheckError(RuntimeError):
    """Raised by :func:`gradcheck` when AD and finite differences disagree; the message is the table."""

    def __init__(self, result: GradcheckResult):
        super().__init__("Warp gradient check failed:\n" + result.table())
        self.result = result


def _default_device(args: Sequence[Any], device: Any) -> Any:
    if device is not None:
        return wp.get_device(device)
    for value in args:
        if isinstance(value, wp.array):
            return value.device
    return wp.get_device()


def gradcheck(
    kernel: Any,
    dim: Any,
    inputs: Sequence[Any],
    outputs: Sequence[Any] = (),
    *,
    eps: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    nondet_tol: float = 0.0,
    fast_mode: bool = False,
    raise_exception: bool = True,
    device: Any = None,
    seed: int = 0,
) -> GradcheckResult:
    """Compare a kernel launch's AD gradient (``wp.Tape``) with central finite differences.

    ``inputs`` and ``outputs`` are the launch arguments exactly as for ``wp.launch`` (together
    they are the kernel's arguments in order). Float arrays in ``inputs`` are differentiated;
    float arrays in ``outputs`` are the results. An input array whose values the launch changes
    is in place: it is also an output, measured from its value before the launch. The caller's
    arrays and ``.grad`` buffers are never modified (the check runs on clones).

    Every (input, output) pair gets a randomized directional test ``u^T J v``; unless
    ``fast_mode``, pairs of small arrays also get the full Jacobian. A pair passes when
    ``|AD - FD| <= atol + rtol * |FD|``; FD is taken at two step sizes and an entry whose FD
    changes with the step is reported as undecided ("fd-not-converged"), not as a failure.
    ``eps``, ``atol`` and ``rtol`` default per precision (see ``DEFAULT_TOLERANCES``; ``eps`` is a
    relative step ``eps * max(1, |x|)``). ``nondet_tol``: every backward runs twice and the two
    results may differ by at most this much (CUDA kernels that accumulate with float atomics need
    a small positive value).

    Returns a :class:`GradcheckResult` (truthy when every pair passes; ``.table()`` prints the
    per-pair numbers). With ``raise_exception=True`` a failure raises :class:`GradcheckError`
    whose message holds that table.
    """
    inputs, outputs = list(inputs), list(outputs)
    args = inputs + outputs
    device = _default_device(args, device)
    names = [arg.label for arg in kernel.adj.args]
    if len(names) != len(args):
        raise TypeError(f"kernel {kernel.key} takes {len(names)} arguments, {len(args)} were given")

    launch = LaunchUnderTest(kernel, dim, args, device=device)
    input_names = [n for n, v in zip(names, inputs) if isinstance(v, wp.array) and float_precision(v.dtype)]
    output_names = [n for n, v in zip(names[len(inputs):], outputs) if isinstance(v, wp.array) and float_precision(v.dtype)]
    written = set(launch.changed_arrays())
    in_place = [n for n in input_names if n in written]
    output_names = in_place + [n for n in output_names if n not in in_place]
    if not input_names or not output_names:
        raise ValueError("gradcheck needs at least one floating-point input array and one output array")

    defaults = DEFAULT_TOLERANCES[precision_of(launch, input_names + output_names)]
    tolerances = Tolerances(
        eps=defaults.eps if eps is None else eps,
        atol=defaults.atol if atol is None else atol,
        rtol=defaults.rtol if rtol is None else rtol,
    )

    # The comparison core is shared with `warp-lint check --confirm` (one place judges gradients).
    result = compare_launch(
        launch,
        input_names,
        output_names,
        tolerances=tolerances,
        rng=np.random.default_rng(seed),
        fast_mode=fast_mode,
        nondet_tol=nondet_tol,
    )
    if in_place:
        result.notes.append(f"in place (read and written by the launch): {', '.join(in_place)}")
    if raise_exception and not result.passed:
        raise GradcheckError(result)
    return result


__all__ = ["GradcheckError", "GradcheckResult", "gradcheck"]
