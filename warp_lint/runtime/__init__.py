"""Runtime confirmation of warp-lint findings, and the public ``gradcheck``.

Importing this package does not import ``warp``. The parent side (:mod:`.runner`: planning, child
processes, verdicts) is plain Python; everything that imports ``warp`` lives in the child-side
modules (:mod:`.child`, :mod:`.experiments`, :mod:`.synthesis`, :mod:`.generated`) and in
:mod:`.comparison` / :mod:`.api`, which ``gradcheck`` loads on first use.
"""

from __future__ import annotations

from typing import Any

from warp_lint.runtime.runner import confirm_findings, default_cache_dir
from warp_lint.runtime.verdicts import Reason, Status


def gradcheck(
    kernel: Any,
    dim: Any,
    inputs: Any,
    outputs: Any = (),
    *,
    eps: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    nondet_tol: float = 0.0,
    fast_mode: bool = False,
    raise_exception: bool = True,
    device: Any = None,
    seed: int = 0,
) -> Any:
    """Compare a kernel launch's AD gradient (``wp.Tape``) with central finite differences.

    Shaped like ``torch.autograd.gradcheck``; ``inputs``/``outputs`` are the ``wp.launch``
    arguments. Returns a ``GradcheckResult`` (truthy when every (input, output) pair passes
    ``|AD - FD| <= atol + rtol * |FD|``); with ``raise_exception=True`` a failure raises
    ``GradcheckError`` whose message holds the per-pair table. Full documentation:
    :func:`warp_lint.runtime.api.gradcheck`.
    """
    from warp_lint.runtime.api import gradcheck as _gradcheck

    return _gradcheck(
        kernel, dim, inputs, outputs, eps=eps, atol=atol, rtol=rtol, nondet_tol=nondet_tol,
        fast_mode=fast_mode, raise_exception=raise_exception, device=device, seed=seed,
    )


def __getattr__(name: str) -> Any:
    # The result and error types live with the warp-importing code: load them on first access.
    if name in ("GradcheckResult", "GradcheckError"):
        from warp_lint.runtime import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Reason", "Status", "confirm_findings", "default_cache_dir", "gradcheck"]
