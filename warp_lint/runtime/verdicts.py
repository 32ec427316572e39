"""Verdict statuses and reason codes of runtime confirmation (plain Python: no warp import)."""

from __future__ import annotations


class Status:
    CONFIRMED = "confirmed"  # AD and finite differences disagree at the flagged kernel
    CLEARED = "cleared"  # they agree on several draws and the flagged statement ran
    INCONCLUSIVE = "inconclusive"  # the experiment could not decide; ``reason`` says why


class Reason:
    """Machine-readable reason codes. Every verdict's ``reason`` starts with one of them."""

    GRADIENT_MISMATCH = "gradient-mismatch"  # confirmed
    GRADIENT_MATCHES = "gradient-matches"  # cleared
    # cleared: the kernel's gradient is wrong elsewhere, but not because of this statement (its
    # adjoint is that of its safe form, and carries the derivative through it)
    SAME_AS_SAFE_FORM = "same-as-safe-form"
    UNSUPPORTED_ARGUMENT = "unsupported-argument"
    IMPORT_ERROR = "import-error"
    COMPILE_ERROR = "compile-error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    NON_FINITE = "non-finite"
    FD_NOT_CONVERGED = "fd-not-converged"
    NOT_EXECUTED = "not-executed"
    NOT_IMPORTABLE = "not-importable"
    NO_DIFFERENTIABLE_PAIR = "no-differentiable-pair"
    UNKNOWN_STRATEGY = "unknown-strategy"
    BACKWARD_DISABLED = "backward-disabled"  # the code has no adjoint: no experiment
    NONDETERMINISTIC = "nondeterministic"  # two identical runs differ beyond nondet_tol
    NO_COUNTERFACTUAL = "no-counterfactual"  # a disagreement, but no safe form to attribute it
    COUNTERFACTUAL_DISAGREES = "counterfactual-disagrees"  # the safe form does not remove it
    CROSS_THREAD = "cross-thread"  # the disagreement needs threads sharing elements the data made them share
    ZERO_JACOBIAN = "zero-jacobian"  # AD and FD both all zero: nothing compared
    NOT_MEASURED = "not-measured"  # whether a derivative flows through the statement is unknown
    DOES_NOT_MATTER = "does-not-matter"  # no derivative flows through the statement
    NOT_EXERCISED = "not-exercised"  # the statement ran, but the loops whose values it reuses did not
    SINGULAR_NOT_REACHED = "singular-not-reached"  # value-dependent hazard never triggered
    FEW_DRAWS = "few-draws"  # AD agreed, but fewer draws than a clear needs ran the statement
    REPLAY_UNSUPPORTED = "replay-unsupported"  # a host launch sequence that cannot be replayed
    NO_EXPERIMENT = "no-experiment"  # the rule has no run-time experiment: trace observes host rules on real runs


STRATEGIES = ("gradcheck", "overwrite-tracking", "replay")


def strategies_of(data: dict) -> list[str]:
    """The runtime strategies a finding declares in ``finding.data['strategy']`` (str or list)."""
    declared = data.get("strategy")
    if not declared:
        return []
    if isinstance(declared, str):
        return [declared]
    return [str(s) for s in declared]
