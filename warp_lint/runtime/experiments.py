"""The experiments that decide findings, run inside the child process (imports warp).

One experiment per finding. For each, :class:`FileSession` finds the flagged kernel (or wraps the
flagged ``@wp.func`` in a kernel) among what the user's module defined, builds warp-lint's copies
of it (:mod:`warp_lint.runtime.generated`), and then:

1. **inputs**: draws arguments from the kernel's real types (:mod:`warp_lint.runtime.synthesis`)
   until the forward pass is finite, the flagged statement runs (an instrumented copy counts it)
   and, for a value-dependent rule, its guarded operand reaches the singular point;
2. **determinism**: runs the forward twice; results further apart than ``nondet_tol`` end the
   experiment as ``inconclusive: nondeterministic``;
3. **gradients**: compares AD with finite differences on several draws
   (:mod:`warp_lint.runtime.comparison`, shared with the public ``gradcheck``);
4. **verdict**:

   * *confirmed* needs a disagreement at finite forward values, in a draw where the flagged
     statement ran, that goes away in the counterfactual: the same kernel with the flagged
     statement alone rewritten into the rule's safe form (:mod:`warp_lint.runtime.rewrite`), run
     on the same inputs. A pair whose disagreement survives the rewrite is not explained by the
     finding (another hazard, a non-differentiable algorithm, a race).
   * *cleared* needs agreement, the flagged statement to have run and to matter (scaling its value
     changes the outputs, and the value depends on the inputs), a Jacobian that is not all zero,
     and, for a value-dependent rule, the singular point to have been reached.
   * anything else is *inconclusive*, with the reason.

Overwrite tracking never runs during the gradient experiment (Warp rebuilds every module while it
is on); it runs afterwards, as Warp's code generation only, where it can add evidence to an
undecided verdict.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np
import warp as wp

from warp_lint.runtime import generated, locate, rewrite
from warp_lint.runtime.comparison import (
    DEFAULT_TOLERANCES,
    GradcheckResult,
    LaunchUnderTest,
    PairResult,
    allowed_error,
    compare_launch,
    flat_values,
    precision_of,
)
from warp_lint.runtime.synthesis import (
    ZEROS_LAST,
    Fill,
    KernelFacts,
    LaunchPlan,
    UnsupportedKernel,
    check_argument,
    concrete_types,
    fills_for,
    handles_through_callees,
    index_bound,
    kernel_facts,
    make_arguments,
    plan_launch,
)
from warp_lint.runtime.tracking import MessageCapture, matching_messages, parse_messages
from warp_lint.runtime.verdicts import Reason, Status

RUNS_PER_FILL = 3  # random draws that must all agree before a finding is cleared
RESAMPLES = 3  # draws per fill before moving on to the next fill
CLOSE_RESAMPLES = 4  # ... times this for a fill at a tiny literal's scale
# Draws after every fill has been tried and the flagged statement never ran: mutations of the
# draw that got furthest toward it, or fresh targeted ones; cheap launches of compiled kernels.
EXPLORATION_DRAWS = 48
# One-thread draws tried, after the first thread of the confirming draw, to check a confirmation.
ONE_THREAD_REDRAWS = 3
# ... and after one of them agrees, for one that disagrees with one thread too (judged on its own).
ONE_THREAD_CONFIRM_DRAWS = 6
# Draws tried, after agreeing ones at which the flagged statement's value moves no output, for one
# at which it does (a clamp or a branch that other values leave).
MATTER_REDRAWS = 6
HANGS_PER_KERNEL = 3  # probes that wait out their time limit before a kernel is given up as hanging
# Relative difference two identical forward (or backward) passes may show: float atomics on a GPU
# sum in no fixed order; races differ by whole values.
NONDET_TOL = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-12}
# Evaluations (launches) a full Jacobian comparison may cost before the directional test is used.
FULL_JACOBIAN_BUDGET = 1500
PROBE_STEP = 1e-2
# The share of a pair's disagreement that rewriting the flagged statement must remove, beside a
# disagreement that stays (from elsewhere), to count as this statement's part of it.
SHARE_REMOVED = 0.1
# AD with the statement rewritten "the same": the two kernels compute the same values, so a move
# beyond float rounding (relative to AD's magnitude) is the statement's doing, however small beside
# the tolerance (eig3's line 567 moves AD by 1 % of finite differences: below the tolerance, not nothing).
UNCHANGED_ADJOINT = 1e-4
# The instrumented copy's own parameters, after the kernel's: counters, then probes and taps.
_INSTRUMENT_PARAMS = [(rewrite.HITS_PARAM, wp.array(dtype=wp.int32)), (rewrite.PROBE_PARAM, wp.array(dtype=wp.float32)),
                      (rewrite.TAP_PARAM, wp.array(dtype=wp.float32))]
# A new draw runs first in a forked copy of the child (CPU only: CUDA contexts do not survive a
# fork), so a draw that crashes or hangs the kernel (an index past an array made by an offset or a
# stride, a pointer built from synthesized floats) is set aside instead of ending the experiment.
PROBE_SECONDS = 10.0
HUNG_SINGLE_THREAD = "a probe on several threads hung: one thread's draw more often takes a path that ends"


def _inconclusive(reason: str, detail: str, **evidence: Any) -> dict[str, Any]:
    return {"status": Status.INCONCLUSIVE, "reason": reason, "detail": detail, "evidence": evidence}


@dataclasses.dataclass
class Prepared:
    """Everything one finding's experiment needs, built before it runs."""

    finding: dict[str, Any]
    target: locate.Target | None = None
    early: dict[str, Any] | None = None  # a verdict reached without an experiment
    facts: KernelFacts | None = None
    overload: dict[str, Any] | None = None
    precision: str = "float32"
    pieces: list[generated.Piece] = dataclasses.field(default_factory=list)
    names: dict[str, str] = dataclasses.field(default_factory=dict)  # role -> piece name
    safe: rewrite.SafeForm | None = None
    safe_error: str | None = None
    safe_piece: generated.Piece | None = None
    safe_built: bool = False
    probed: str | None = None
    slot: int = 0  # this finding's counters and probe in its kernel's instrumented copy
    slots: int = 1
    cover_probes: bool = False  # the instrumented copy takes probe and tap arrays
    flagged: list[tuple[int, str | None]] = dataclasses.field(default_factory=list)  # its statements, by slot
    key: str = ""  # the target and precision: names the pieces
    relative: int = 0
    concrete: dict[str, Any] = dataclasses.field(default_factory=dict)
    param_names: list[str] = dataclasses.field(default_factory=list)
    signature: generated.FuncSignature | None = None
    instances: int = 1
    kernels: dict[str, Any] = dataclasses.field(default_factory=dict)  # role -> built kernel
    build_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    substituted: set[str] = dataclasses.field(default_factory=set)
    compile_s: float = 0.0

    @property
    def value_dependent(self) -> bool:
        return bool(self.finding.get("value_dependent"))


@dataclasses.dataclass
class Draw:
    fill: Fill
    args: list[Any]
    launch: LaunchUnderTest
    inputs: list[str]
    outputs: list[str]
    in_place: list[str]
    hits: list[int] | None = None  # [ran, singular] from the instrumented copy
    finite: bool = True
    result: GradcheckResult | None = None
    # Seeds the random directions of the comparison: the counterfactual is compared along the same.
    seed: int = 0
    targeted: bool = False  # integers drawn at the values the kernel's branches compare them with
    crashed: str | None = None  # how the draw ended in its probe (the draw is then never used)

    @property
    def ran(self) -> bool:
        return self.hits is None or self.hits[rewrite.HITS_RAN] > 0

    @property
    def singular(self) -> int:
        return 0 if self.hits is None else self.hits[rewrite.HITS_SINGULAR]

    @property
    def progress(self) -> int:
        """How far toward the flagged statement execution got (the instrumented copy's markers)."""
        return 0 if self.hits is None else self.hits[rewrite.HITS_PROGRESS]

    @property
    def fed(self) -> int:
        """Updates, in dynamic loops before the flagged statement, of what it reads."""
        return 0 if self.hits is None else self.hits[rewrite.HITS_FED]


class FileSession:
    """Every finding of one user file: one import, one build of warp-lint's copies per group."""

    def __init__(self, module: Any, request: dict[str, Any], *, device: str, capture: MessageCapture,
                 report: Any = None, imported_as: str = ""):
        self.module = module
        self.request = request
        self.device = device
        self.capture = capture
        # Called with a phase name when a slow phase ends: the parent's time limit restarts, so a
        # long compile is not mistaken for a hanging kernel.
        self.report = report or (lambda phase: None)
        self.imported_as = imported_as
        self.seed = int(request.get("seed", 0))
        self.prepared: dict[str, Prepared] | None = None
        self.directory = f"{request['cache_dir']}/generated"
        # Names the generated sources refer to: the user's functions (wrapped @wp.func) and the
        # type objects of the wrappers' parameters (one numbering for the whole file).
        self.extra_globals: dict[str, Any] = {}
        self.type_names = generated.TypeNames()
        # Pieces are shared between findings (by name); what each one is.
        self._pieces: dict[str, generated.Piece | None] = {}
        self._target_numbers: dict[int, int] = {}
        self._made: dict[tuple[str | None, str], list[locate.Target]] = {}  # (name, kind) -> made from source
        self._isolation: dict[str, list] = {}  # piece name -> [SafeForm, built kernel]
        self._isolation_errors: dict[str, str] = {}  # piece name -> why it did not build
        # (target key[, finding's line, isolation with loops static]) -> (instrumented copy with its
        # adjoint, how instrumented, why it did not build)
        self._adjoint_covers: dict[tuple, tuple[Any, rewrite.Instrumented | None, str]] = {}
        self._hung: dict[str, str] = {}  # target key -> the finding whose probe hung on it
        self._hangs: dict[str, int] = {}  # target key -> probes that hung on it
        self._hung_fills: dict[str, set[str]] = {}  # target key -> the fills a probe hung at
        self._ended: dict[str, tuple] = {}  # target key that hung -> (fill, targeted, args) of a draw that ended

    # -- preparing and building ----------------------------------------------------------------
    def _prepare_all(self) -> None:
        """Locate every finding's target, then build, per kernel, its verbatim copy and one
        instrumented copy serving all its flagged statements. Safe forms are built later, and
        only for findings whose gradients disagree (:meth:`_ensure_safe`)."""
        prepared = {}
        for finding in self.request["findings"]:
            if finding.get("replay_plan"):
                continue  # host sequences are replayed (warp_lint.runtime.replay), not prepared here
            try:
                prepared[finding["id"]] = self._prepare(finding, "float32")
            except Exception as error:  # noqa: BLE001 - a verdict for this finding, the others go on
                prepared[finding["id"]] = Prepared(finding, early=_inconclusive(
                    Reason.CRASH, f"preparing the experiment raised {type(error).__name__}: {error}"[:2000]))
        ready = [p for p in prepared.values() if p.early is None]
        self._add_target_pieces(ready)
        self.report("compiling")
        self._build(ready, ("orig", "cover"))
        self.report("compiled")
        self.prepared = prepared

    def _made_targets(self, line: int, name: str | None, kind: str) -> list[locate.Target]:
        """:func:`locate.nested_targets`, made once per definition: its findings share one object,
        so they are one target (one build, and each other's siblings in isolation)."""
        made = self._made.setdefault((name, kind), [])
        spanning = [t for t in made if t.first_line <= line <= t.last_line]
        if spanning:
            return spanning
        targets = locate.nested_targets(self.module, self.request["path"], line, name, f"{self.directory}/nested",
                                        kind)
        made.extend(targets)
        return targets

    def _prepare(self, finding: dict[str, Any], precision: str) -> Prepared:
        prepared = Prepared(finding, precision=precision)
        kind = finding.get("function_kind") or "kernel"
        line = int(finding["flagged_lines"][0])
        targets = locate.find_targets(self.request["path"], line, finding.get("kernel"), kind)
        if not targets:
            targets = self._made_targets(line, finding.get("kernel"), kind)
        if not targets:
            what = "@wp.func" if kind == "func" else "@wp.kernel"
            prepared.early = _inconclusive(
                Reason.NOT_IMPORTABLE,
                f"no {what} named {finding.get('kernel')!r} spanning line {line} was defined when {self.request['path']}"
                " was imported, and made from its source it did not build (it needs what only a call of the function"
                " around it provides: its arguments, where its signature offers no value for them, or values computed from them)",
                imported=self.imported_as)
            return prepared
        target = prepared.target = targets[0]
        prepared.instances = len(targets)
        if not target.first_line <= line <= target.last_line:
            line = locate.call_of_helper(target, self.request["path"], line) or line
        disabled = locate.backward_disabled(target)
        if disabled:
            prepared.early = _inconclusive(Reason.BACKWARD_DISABLED, f"no experiment: {disabled}, so no gradient "
                                           "flows through this code and the hazard cannot affect one")
            return prepared
        prepared.facts = facts = kernel_facts(target.source, target.namespace())
        facts.handles.update(handles_through_callees(facts, target.namespace()))
        if facts.tiles:
            prepared.early = _inconclusive(Reason.UNSUPPORTED_ARGUMENT, "tile kernel (needs wp.launch_tiled with "
                                           "block-shaped arguments)")
            return prepared
        if kind == "func":
            facts.tid_arity = 1  # the wrapper kernel runs one thread per element
            if finding.get("writes") and not finding.get("index_params"):
                # Array arguments pass through the wrapper: every thread would work on the same one.
                facts.same_work = (f"the function writes an array it is given ({', '.join(finding['writes'])}) and "
                                   "no thread index picks the elements: every thread would work on the same ones")
        scalar = {"float32": wp.float32, "float64": wp.float64}[precision]
        params = locate.parameters(target)
        declared = [dict(zip((a.label for a in o.adj.args), (a.type for a in o.adj.args)))
                    for _, o in sorted(getattr(target.obj, "overloads", {}).items())] if kind == "kernel" else []
        try:
            prepared.overload = concrete_types(params, facts, scalar, declared, locate.registered_structs(),
                                               target.namespace(), function=kind == "func")
        except UnsupportedKernel as error:
            prepared.early = _inconclusive(Reason.UNSUPPORTED_ARGUMENT, str(error))
            return prepared
        prepared.concrete = dict(params) | (prepared.overload or {})
        prepared.param_names = [name for name, _ in params]
        prepared.relative = target.relative(line)
        number = self._target_numbers.setdefault(id(target.obj), len(self._target_numbers))
        prepared.key = f"t{number}_{precision}"
        if kind == "func":
            try:
                self._signature(prepared)
            except UnsupportedKernel as error:
                prepared.early = _inconclusive(Reason.UNSUPPORTED_ARGUMENT, str(error))
                return prepared
        self._prepare_safe(prepared)
        return prepared

    def _signature(self, prepared: Prepared) -> None:
        """The wrapper kernel's view of a @wp.func: its concrete parameter and return types."""
        target = prepared.target
        function = target.obj
        if prepared.overload:
            try:
                function = target.obj.get_overload(tuple(prepared.concrete[n] for n in prepared.param_names), {}) \
                    or target.obj
            except Exception:  # noqa: BLE001 - fall back to the declared signature
                function = target.obj
        signature = generated.func_signature(function)
        prepared.signature = generated.FuncSignature(
            [(n, prepared.concrete.get(n, t)) for n, t in signature.params], signature.returns)
        # What the wrapper kernel cannot pass or store: the same limits as a kernel's arguments.
        for name, t in prepared.signature.params:
            if locate.array_type(t) is None and t not in (int, float, bool):
                check_argument(name, t, prepared.facts.handles)
        for k, t in enumerate(prepared.signature.returns):
            check_argument(f"return value {k}", t)
        self.extra_globals[f"_wl_target_{prepared.key}"] = target.obj

    def _wrapper(self, prepared: Prepared, callee: str, name: str, extra: list[tuple[str, Any]] = (),
                 backward: bool = True) -> str:
        return generated.func_wrapper(callee, prepared.signature, list(prepared.finding.get("index_params") or ()),
                                      name, self.type_names, extra=extra, backward=backward)

    def _add_target_pieces(self, items: list[Prepared]) -> None:
        """Per target: the verbatim copy (the user's own function registered anew; for a @wp.func,
        a wrapper kernel calling it) and one instrumented copy with a slot per flagged statement."""
        by_target: dict[str, list[Prepared]] = {}
        for item in items:
            by_target.setdefault(item.key, []).append(item)
        for key, group in by_target.items():
            first = group[0]
            target = first.target
            is_kernel = target.kind == "kernel"
            orig = f"_wl_orig_{key}"
            if orig not in self._pieces:
                if is_kernel:
                    piece = generated.Piece(orig, [], overload=first.overload,
                                            clone=(target.func, dict(target.obj.options)))
                else:
                    piece = generated.Piece(orig, [self._wrapper(first, f"_wl_target_{key}", orig)])
                self._pieces[orig] = piece
                first.pieces.append(piece)
            cover = f"_wl_cover_{key}"
            flagged = sorted({(item.relative, item.finding.get("singular")) for item in group},
                             key=lambda f: (f[0], f[1] or ""))
            # On the CPU the instrumented copy is built with bounds checks: run first on each draw, in a
            # forked probe, it turns an out-of-range index into an abort of the probe, not a silently
            # corrupted heap (a CUDA assert would poison the device instead: not there).
            checked = {"mode": "debug"} if self.device == "cpu" else None
            try:
                main, full = self._instrumented_piece(first, cover, flagged, options=checked)
                fallback, _ = self._instrumented_piece(first, cover, flagged, probe=False, options=checked)
            except rewrite.RewriteError as error:
                for item in group:
                    item.build_errors["cover"] = str(error)
                    item.names["orig"] = orig
                continue
            if full.has_probe:
                main.fallback = fallback
            self._pieces[cover] = main
            first.pieces.append(main)
            for item in group:
                item.names.update(orig=orig, cover=cover)
                item.slot = full.slots[item.relative]
                item.slots = len(set(full.slots.values()))
                item.probed = full.probed.get(item.slot)
                item.cover_probes = full.has_probe
                item.flagged = flagged

    def _instrumented_piece(self, prepared: Prepared, name: str, flagged: list[tuple[int, str | None]], *,
                            probe: bool = True, backward: bool = False, options: dict[str, Any] | None = None,
                            setting: list[tuple[str, int]] | None = None
                            ) -> tuple[generated.Piece, rewrite.Instrumented]:
        """A copy of the target with a counter slot per flagged statement (with ``probe``, a probe
        and a tap as well; for a @wp.func, a wrapper kernel calling it), built with its adjoint only
        where ``backward``; ``setting``: with these safe forms applied first (their added
        parameters come before the counters). Raises :class:`rewrite.RewriteError`."""
        target = prepared.target
        is_kernel = target.kind == "kernel"
        copy_name = name if is_kernel else name.replace("_wl_cover", "_wl_coverf", 1)
        decorator = (f"{rewrite.WARP_ALIAS}.kernel{'' if backward else '(enable_backward=False)'}" if is_kernel
                     else f"{rewrite.WARP_ALIAS}.func")
        if setting is None:
            params, constants, max_unroll = _rewrite_context(prepared)
            made = rewrite.instrument(target.source, flagged, copy_name, decorator, probe=probe, params=params,
                                      constants=constants, max_unroll=max_unroll)
        else:
            made = rewrite.instrument_in_setting(setting, target.source, flagged, copy_name, decorator,
                                                 *_rewrite_context(prepared), **_bounds(prepared))
        added = made.setting.added_params if made.setting else {}
        counters = _INSTRUMENT_PARAMS if made.has_probe else _INSTRUMENT_PARAMS[:1]
        return self._rewritten_piece(prepared, name, copy_name, made.source, added, counters, backward=backward,
                                     options=options), made

    def _rewritten_piece(self, prepared: Prepared, name: str, copy_name: str, source: str, added: dict[str, str],
                         extra: list[tuple[str, Any]] = (), *, backward: bool = True,
                         options: dict[str, Any] | None = None) -> generated.Piece:
        """The piece for a rewritten copy of the target (``source``, named ``copy_name``): a kernel
        whose overload also types the parameters a rewrite ``added`` (new -> the original it copies);
        for a @wp.func, the copy and a wrapper kernel passing those on, then ``extra``."""
        if prepared.target.kind == "kernel":
            overload = prepared.overload
            if overload is not None:
                overload = {**overload, **{new: prepared.concrete[old] for new, old in added.items()}}
            return generated.Piece(name, [source], overload=overload, options=options)
        passed = [(new, prepared.concrete[old]) for new, old in added.items()] + list(extra)
        wrapper = self._wrapper(prepared, copy_name, name, passed, backward=backward)
        return generated.Piece(name, [source, wrapper], options=options)

    def _instrument_arrays(self, prepared: Prepared, probe: float | None,
                           layout: tuple[int, int] | None = None) -> list[Any]:
        """The instrumented copy's own arguments: its counters and, unless ``probe`` is None, its
        probes (``probe`` at this finding's slot, zero elsewhere) and taps; ``layout``: (slots,
        this finding's slot) of a copy instrumented otherwise than the kernel's own."""
        slots, slot = layout or (prepared.slots, prepared.slot)
        arrays = [wp.zeros(rewrite.HITS_PER_SLOT * slots, dtype=wp.int32, device=self.device)]
        if probe is not None:
            probes = np.zeros(slots, dtype=np.float32)
            probes[slot] = probe
            arrays += [wp.array(probes, dtype=wp.float32, device=self.device),
                       wp.zeros(slots, dtype=wp.float32, device=self.device)]
        return arrays

    def _prepare_safe(self, prepared: Prepared) -> None:
        """The finding's safe form, rewritten now (cheap) and built only if it is needed."""
        safe_kind = prepared.finding.get("safe_form")
        if not safe_kind:
            return
        target = prepared.target
        is_kernel = target.kind == "kernel"
        name = f"_wl_safe_{prepared.key}_l{prepared.relative}_{safe_kind.replace('-', '_')}"
        copy_name = name if is_kernel else name.replace("_wl_safe_", "_wl_safef_")
        decorator = f"{rewrite.WARP_ALIAS}.{'kernel' if is_kernel else 'func'}"
        try:
            form = rewrite.safe_form(safe_kind, target.source, prepared.relative, copy_name, decorator,
                                     *_rewrite_context(prepared), **_bounds(prepared))
        except rewrite.RewriteError as error:
            prepared.safe_error = str(error)
            return
        prepared.safe = form
        prepared.safe_piece = self._rewritten_piece(prepared, name, copy_name, form.source, form.added_params)
        prepared.names["safe"] = name

    def _ensure_safe(self, prepared: Prepared) -> None:
        """Build the safe form of this finding, with those of the other findings of its kernel
        (a disagreement in one of them usually means a disagreement in the others)."""
        if "safe" in prepared.kernels or prepared.safe_piece is None or prepared.safe_built:
            return
        siblings = [p for p in (self.prepared or {}).values()
                    if p.key == prepared.key and p.safe_piece is not None and not p.safe_built and p is not prepared]
        siblings.insert(0, prepared)
        for item in siblings:
            item.pieces = []
        # Findings on one statement with one safe form share a piece.
        siblings[0].pieces = list({item.safe_piece.name: item.safe_piece for item in siblings}.values())
        self.report("compiling")
        self._build(siblings, ("safe",))
        self.report("compiled")
        for item in siblings:
            item.safe_built = True

    def _build(self, prepared: list[Prepared], roles: tuple[str, ...]) -> None:
        """Build the pieces the items hold: one generated module per namespace (a factory's closure
        sees other names than its module) and per module options (the bounds-checked instrumented
        copies build apart), usually two for the whole file."""
        groups: dict[tuple, tuple[Prepared, list[generated.Piece]]] = {}
        for item in prepared:
            func = item.target.func
            closure = tuple((n, id(c.cell_contents)) for n, c in zip(func.__code__.co_freevars, func.__closure__ or ())
                            if _cell_filled(c))
            options = tuple(sorted(locate.module_options(item.target).items()))
            for piece in item.pieces:
                extra_options = tuple(sorted((piece.options or {}).items()))
                _, pieces = groups.setdefault((id(func.__globals__), closure, options, extra_options), (item, []))
                pieces.append(piece)
            item.pieces = []
        extra = self.extra_globals | self.type_names.names
        kernels: dict[str, Any] = {}
        errors: dict[str, str] = {}
        substituted: set[str] = set()
        seconds = 0.0
        for (_, _, _, extra_options), (first, pieces) in groups.items():
            started = time.perf_counter()
            target = first.target
            prefix = generated.stable_name("warp_lint_generated", self.request["module_name"],
                                           *sorted(p.name for p in pieces))
            built = generated.build_pieces(prefix, pieces, target.namespace(), extra, self.directory,
                                           locate.module_options(target) | dict(extra_options), self.device)
            seconds += time.perf_counter() - started
            kernels.update(built.kernels)
            errors.update(built.errors)
            substituted |= built.substituted
        # Pieces are shared between findings (one instrumented copy per kernel): each finding takes
        # what was built under the names it uses.
        for item in prepared:
            item.compile_s += seconds
            for role in roles:
                name = item.names.get(role)
                if name is None:
                    continue
                if name in kernels:
                    item.kernels[role] = kernels[name]
                if name in errors:
                    item.build_errors[role] = errors[name]
                if name in substituted:
                    item.substituted.add(role)
            if "orig" in roles and "orig" not in item.kernels:
                item.early = _inconclusive(Reason.COMPILE_ERROR, item.build_errors.get("orig", "did not build"))

    # -- one finding -------------------------------------------------------------------------
    def confirm(self, finding: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        if self.prepared is None:
            self._prepare_all()
        prepared = self.prepared[finding["id"]]
        if prepared.early is not None:
            verdict = prepared.early
        else:
            verdict = self._experiment(prepared)
            if (prepared.overload and verdict["status"] == Status.INCONCLUSIVE
                    and verdict["reason"] in (Reason.FD_NOT_CONVERGED, Reason.NON_FINITE)):
                verdict = self._retry_in_float64(prepared, verdict)
        evidence = verdict.setdefault("evidence", {})
        evidence.setdefault("imported", self.imported_as)
        if prepared.target is not None:
            evidence["target"] = {"name": prepared.target.name, "kind": prepared.target.kind,
                                  "lines": [prepared.target.first_line, prepared.target.last_line],
                                  "instances": prepared.instances}
            if prepared.overload:
                evidence["instantiated_as"] = {k: _type_text(v) for k, v in prepared.overload.items()}
        evidence["timing"] = {"compile_s": round(prepared.compile_s, 3),
                              "total_s": round(time.perf_counter() - started, 3)}
        if "overwrite-tracking" in finding.get("strategies", ()):
            evidence["overwrite_tracking"] = self._tracking_step(prepared, verdict)
        return verdict

    def _retry_in_float64(self, prepared: Prepared, first: dict[str, Any]) -> dict[str, Any]:
        again = self._prepare(prepared.finding, "float64")
        if again.early is None:
            self._add_target_pieces([again])
            self.report("compiling")
            self._build([again], ("orig", "cover"))
            self.report("compiled")
        if again.early is not None:
            return first
        verdict = self._experiment(again)
        verdict.setdefault("evidence", {})["float32_attempt"] = f"{first['reason']}: {first['detail']}"[:500]
        return verdict

    # -- inputs --------------------------------------------------------------------------------
    def _make_draw(self, prepared: Prepared, plan: LaunchPlan, fill: Fill, rng: np.random.Generator,
                   targeted: bool = False, parent: Draw | None = None, given: list[Any] | None = None) -> Draw:
        finding = prepared.finding
        kernel = prepared.kernels["orig"]
        args = given if given is not None else make_arguments(plan, fill, rng, self.device, targeted)
        if parent is not None:
            # A mutation of the draw that got furthest: one or two arguments drawn anew, the rest kept.
            fresh = set(rng.choice(len(args), size=min(len(args), int(rng.integers(1, 3))), replace=False).tolist())
            args = [value if k in fresh else kept for k, (value, kept) in enumerate(zip(args, parent.args))]
        launch = LaunchUnderTest(kernel, plan.dim, args, device=self.device)
        seed = int(rng.integers(2**31))
        if self.device == "cpu":
            def forward_and_count() -> None:
                if "cover" in prepared.kernels:  # bounds-checked: an index out of range aborts here
                    self._run_instrumented(prepared, plan, Draw(fill, args, launch, [], [], []))
                launch.forward()
                # The backward pass too: an adjoint that replays a loop the draw never ends hangs there.
                floats = [name for name, slot in launch.slots.items() if slot.precision is not None]
                if floats:
                    launch.backward({name: np.ones(launch.slots[name].size) for name in floats}, floats)

            crashed = survives_in_fork(forward_and_count, PROBE_SECONDS)
            if crashed is not None:
                return Draw(fill=fill, args=args, launch=launch, inputs=[], outputs=[], in_place=[], finite=False,
                            hits=[0] * rewrite.HITS_PER_SLOT, seed=seed, targeted=targeted, crashed=crashed)
        after = launch.forward()
        float_arrays = plan.float_arrays
        reads = finding.get("reads")
        writes = set(finding.get("writes") or ())
        returns = [n for n in float_arrays if n.startswith(generated.RETURN_PREFIX)]
        # Inputs: every float array except pure outputs (written, never read). Differentiating a
        # pure output would test what its .grad holds after backward, which no user reads.
        inputs = [n for n in float_arrays
                  if n not in returns and not (n in writes and reads is not None and n not in reads)]
        changed = {name for name, slot in launch.slots.items()
                   if not np.array_equal(after[name], flat_values(slot.snapshot), equal_nan=True)}
        outputs = returns + [n for n in float_arrays if n not in returns and (n in writes or n in changed)]
        in_place = [n for n in outputs if n in inputs]
        outputs = in_place + [n for n in outputs if n not in in_place]
        # Finite only: very large values are often sentinels the code means (1e10 for "no contact").
        finite = all(np.all(np.isfinite(after[name])) for name in float_arrays)
        draw = Draw(fill=fill, args=args, launch=launch, inputs=inputs, outputs=outputs, in_place=in_place,
                    finite=finite, seed=seed, targeted=targeted)
        draw.hits = self._count_hits(prepared, plan, draw)
        return draw

    def _run_instrumented(self, prepared: Prepared, plan: LaunchPlan, draw: Draw, probe: float = 0.0,
                          overrides: dict[str, np.ndarray] | None = None) -> tuple[list[int], float | None]:
        """Launch the instrumented copy on the draw's arrays (restored first): (counters, tap)."""
        draw.launch.restore(overrides)
        probed = prepared.cover_probes and "cover" not in prepared.substituted
        extra = self._instrument_arrays(prepared, probe if probed else None)
        hits, tap = extra[0], (extra[2] if probed else None)
        wp.launch(prepared.kernels["cover"], dim=plan.dim, inputs=[*draw.launch.args, *extra], device=self.device)
        wp.synchronize_device(self.device)
        counters = hits.numpy()
        base = rewrite.HITS_PER_SLOT * prepared.slot
        mine = [int(counters[base + k]) for k in range(rewrite.HITS_PER_SLOT)]
        return mine, (None if tap is None else float(tap.numpy()[prepared.slot]))

    def _count_hits(self, prepared: Prepared, plan: LaunchPlan, draw: Draw) -> list[int] | None:
        if "cover" not in prepared.kernels:
            return None
        return self._run_instrumented(prepared, plan, draw)[0]

    def _search_inputs(self, prepared: Prepared, plan: LaunchPlan, rng: np.random.Generator) -> tuple[Draw | None, list]:
        """The first draw whose forward is finite, runs the flagged statement and (value-dependent
        rules) reaches the singular point; else the best draw seen, with the search log. Each fill
        is drawn plainly first; where integers decide branches, further draws of it are targeted,
        and when no fill ran the statement, targeted draws of every fill in turn explore on."""
        explored: list[dict[str, Any]] = []
        best: Draw | None = None
        seen: list[Draw] = []
        targetable = plan.targetable

        def attempt(fill: Fill, targeted: bool, parent: Draw | None = None, given: list[Any] | None = None) -> Draw:
            nonlocal best
            draw = self._make_draw(prepared, plan, fill, rng, targeted, parent, given)
            if hung_fills and not draw.crashed and draw.finite:
                self._ended.setdefault(prepared.key, (fill, targeted, draw.args))
            explored.append({"inputs": fill.describe(), "finite": draw.finite,
                             "hits": None if draw.hits is None else draw.hits[0],
                             **({"integers": "targeted"} if targeted else {}),
                             **({"progress": draw.progress} if draw.hits is not None and not draw.ran else {}),
                             **({"mutated": "from the draw that got furthest"} if parent is not None else {}),
                             **({"crashed": draw.crashed} if draw.crashed else {}),
                             **({"singular": draw.singular} if prepared.value_dependent else {})})
            if _better(draw, best, prepared.value_dependent):
                best = draw
            seen.append(draw)
            return draw

        def done(draw: Draw) -> bool:
            return draw.finite and draw.ran and (not prepared.value_dependent or draw.singular > 0)

        # Every thread must finish for a launch to: a path that never ends (a loop the backward
        # pass replays forever) taken by one thread of several hangs them all, where one thread
        # alone more often takes another. Known per kernel: its other findings start there.
        hung_fills = self._hung_fills.setdefault(prepared.key, set())
        if hung_fills:
            plan.single_thread(HUNG_SINGLE_THREAD)

        def set_back(draw: Draw) -> str | None:
            """After a draw that crashed: longer arrays where it read past one; after one that hung,
            one thread from now on ("hung"), or "give up" when the kernel has hung too often."""
            if not draw.crashed:
                return None
            if _out_of_range(draw.crashed) and plan.lengthen():
                explored[-1]["arrays_lengthened_to"] = plan.length
            if not _hung(draw.crashed):
                return None
            # Each hang waits out the probe's time limit; a branch of the kernel may hang (a walk
            # over a made-up mesh) while others end, so a few are borne, per kernel (its other
            # findings draw again), before giving up.
            self._hangs[prepared.key] = self._hangs.get(prepared.key, 0) + 1
            if self._hangs[prepared.key] >= HANGS_PER_KERNEL:
                return "give up"
            hung_fills.add(draw.fill.describe())
            if plan.single_thread(HUNG_SINGLE_THREAD):
                explored[-1]["launch_dim_from_now"] = list(plan.dim)
            return "hung"

        every_fill = fills_for(prepared.facts, prepared.value_dependent)
        fills = [f for f in every_fill if f.describe() not in hung_fills] or every_fill
        if prepared.key in self._ended:
            # Draws of a kernel that hangs wait out the probe's limit: what ended for one of its
            # findings is tried first for the next.
            fill, targeted, args = self._ended[prepared.key]
            draw = attempt(fill, targeted, given=args)
            if done(draw):
                return draw, explored
        for fill in fills:
            # A "close" fill aims at a narrow band, which one value in a few of the draw must hit
            # together with the branches' integers: it gets more draws.
            for resample in range(RESAMPLES * (CLOSE_RESAMPLES if fill.kind == "close" else 1)):
                draw = attempt(fill, targetable and resample > 0)
                if done(draw):
                    return draw, explored
                setback = set_back(draw)
                if setback == "give up":
                    return best, explored
                if setback == "hung":
                    break  # values of the same fill likely take the same path
                if draw.finite and not draw.ran and not targetable:
                    break  # another draw of the same distribution rarely takes another branch
        if draw.hits is not None and (best is None or not best.ran):
            # Exploration: mutations of the draw that got furthest toward the statement (the
            # instrumented copy marks how far each one got), or fresh targeted draws.
            furthest = max((d for d in seen if not d.crashed), key=lambda d: d.progress, default=None)
            for number in range(EXPLORATION_DRAWS):
                mutate = furthest is not None and rng.random() < 0.75
                fill = furthest.fill if mutate and rng.random() < 0.5 else fills[number % len(fills)]
                draw = attempt(fill, targetable, furthest if mutate else None)
                if done(draw):
                    return draw, explored
                if not draw.crashed and (furthest is None or draw.progress >= furthest.progress):
                    furthest = draw
                if set_back(draw) == "give up":
                    return best, explored
        if best is None or not best.ran:
            for resample in range(RESAMPLES):
                draw = attempt(ZEROS_LAST, targetable and resample > 0)
                if done(draw):
                    return draw, explored
                if set_back(draw) == "give up":
                    return best, explored
        return best, explored

    def _redraws(self, prepared: Prepared, plan: LaunchPlan, chosen: Draw, rng: np.random.Generator,
                 budget: int = RUNS_PER_FILL * RESAMPLES) -> Iterator[Draw]:
        """``budget`` more draws beside ``chosen``: fresh ones of its fill first, then mutations of
        it (one or two arguments drawn anew), which keep most of what made it run the statement
        where fresh draws miss it. The caller skips those that do not run it."""
        fresh = budget - budget // 2
        for number in range(budget):
            yield self._make_draw(prepared, plan, chosen.fill, rng, chosen.targeted,
                                  chosen if number >= fresh else None)

    # -- the experiment --------------------------------------------------------------------------
    def _experiment(self, prepared: Prepared) -> dict[str, Any]:
        if prepared.key in self._hung:  # its draws would wait out the probe's time limit again
            return _inconclusive(Reason.TIMEOUT, f"not run: the kernel or its backward pass hung in the probe of "
                                 f"{self._hung[prepared.key]} on the same {prepared.target.kind}")
        kernel = prepared.kernels["orig"]
        params = [(a.label, a.type) for a in kernel.adj.args]
        try:
            plan = plan_launch(params, prepared.facts, prepared.finding.get("index_params") or (), prepared.target.source)
        except UnsupportedKernel as error:
            return _inconclusive(Reason.UNSUPPORTED_ARGUMENT, str(error))
        if plan.left_zero and self.device != "cpu":
            # Only the CPU runs a draw first in a forked probe: elsewhere a zero id that the kernel
            # does use would take the device down, not one draw.
            return _inconclusive(Reason.UNSUPPORTED_ARGUMENT, f"{', '.join(plan.left_zero[:3])}: a field of an "
                                 "array of structs no draw stands for (an array, an id, a texture), which only the "
                                 "CPU can leave at zero safely")
        rng = np.random.default_rng(self.seed)
        chosen, explored = self._search_inputs(prepared, plan, rng)
        evidence: dict[str, Any] = {"launch_dim": list(plan.dim), "coverage_search": explored,
                                    "domain": plan.describe_domain()}
        if "cover" not in prepared.kernels:
            evidence["coverage_error"] = prepared.build_errors.get("cover", "the instrumented copy did not build")
        if chosen is not None and chosen.crashed and _hung(chosen.crashed):
            self._hung[prepared.key] = f"{prepared.finding.get('code')} at line {prepared.finding['flagged_lines'][0]}"
            return _inconclusive(Reason.TIMEOUT, f"the kernel or its backward pass hung in its probe at a "
                                 f"synthesized input ({chosen.crashed}): a loop the synthesized values never end",
                                 **evidence)
        if chosen is not None and chosen.crashed:
            return _inconclusive(Reason.CRASH, f"every synthesized input crashed the kernel in its probe "
                                 f"({chosen.crashed}): out-of-range indices or made-up handles the synthesis cannot "
                                 "avoid; no gradient can be judged", **evidence)
        if chosen is None or not chosen.finite:
            return _inconclusive(Reason.NON_FINITE, "the forward pass is not finite at any synthesized input: "
                                 "no gradient can be judged there", **evidence)
        if not chosen.inputs or not chosen.outputs:
            return _inconclusive(Reason.NO_DIFFERENTIABLE_PAIR,
                                 f"no floating-point (input, output) array pair to differentiate "
                                 f"(inputs {chosen.inputs}, outputs {chosen.outputs})", **evidence)
        evidence.update(inputs=chosen.inputs, outputs=chosen.outputs, in_place=chosen.in_place,
                        input_values=chosen.fill.describe() + (
                            "; integers targeted at the constants the kernel's branches compare them with"
                            if chosen.targeted else ""))
        if chosen.hits is None:
            return _inconclusive(Reason.NOT_EXECUTED, "whether the flagged statement runs could not be measured: "
                                 f"{evidence.get('coverage_error')}", **evidence)
        if not chosen.ran:
            tried = ", ".join(dict.fromkeys(e["inputs"] for e in explored))
            return _inconclusive(Reason.NOT_EXECUTED, f"the flagged statement never ran (inputs tried: {tried}); "
                                 "no gradient through it can be judged", flagged_statement_hits=0, **evidence)

        precision = precision_of(chosen.launch, chosen.inputs + chosen.outputs)
        nondet_tol = NONDET_TOL[precision]
        spread = _forward_spread(chosen.launch)
        evidence["forward_nondeterminism"] = spread
        if spread > nondet_tol:
            return _inconclusive(Reason.NONDETERMINISTIC, f"two identical forward passes differ by {spread:.3g} "
                                 f"(relative) > nondet_tol={nondet_tol:g}: a race or unordered accumulation; "
                                 "a gradient comparison would measure the noise", **evidence)

        chosen.result = self._compare(chosen, nondet_tol)
        draws = [chosen]
        tried = 1
        # A disagreement goes to its counterfactual at once; agreement needs more draws. A draw
        # where finite differences do not converge (a kink of the function right there) is
        # replaced by another of the same fill.
        if not any(p.status == "fail" for p in chosen.result.pairs):
            def agrees(draw: Draw) -> bool | None:
                draw.result = self._compare(draw, nondet_tol)
                draws.append(draw)
                if any(p.status == "fail" for p in draw.result.pairs):
                    return False
                return True if _smooth(draw) else None

            _, tried, _ = self._held_on_more_draws(prepared, plan, chosen, agrees, rng,
                                                   held=[chosen] if _smooth(chosen) else [])
            smooth = [d for d in draws if _smooth(d)]
            if smooth and not any(p.status == "fail" for d in draws for p in d.result.pairs):
                draws = smooth[:RUNS_PER_FILL]
        evidence.update(
            precision=chosen.result.precision,
            criterion=chosen.result.to_dict()["criterion"],
            tolerances=dataclasses.asdict(chosen.result.tolerances),
            draws=[_draw_record(prepared, d) for d in draws],
            flagged_statement_hits=sum(d.hits[0] for d in draws),
        )
        evidence["non_finite_gradient"] = any(
            p.criterion.startswith("AD is not finite") or "AD directional derivative is" in p.criterion
            for d in draws for p in d.result.pairs)
        statuses = {p.status for d in draws for p in d.result.pairs}
        if "nondeterministic" in statuses:
            pair = next(p for d in draws for p in d.result.pairs if p.status == "nondeterministic")
            return _inconclusive(Reason.NONDETERMINISTIC, f"d {pair.output} / d {pair.input}: {pair.criterion}",
                                 **evidence)
        failures = [(d, p) for d in draws for p in d.result.pairs if p.status == "fail"]
        if failures:
            return self._judge_disagreement(prepared, plan, draws, failures, nondet_tol, evidence)
        if "non-finite" in statuses:
            return _inconclusive(Reason.NON_FINITE, "finite differences are not finite at the synthesized inputs",
                                 **evidence)
        if "fd-not-converged" in statuses:
            pair = next(p for d in draws for p in d.result.pairs if p.status == "fd-not-converged")
            return _inconclusive(Reason.FD_NOT_CONVERGED, f"d {pair.output} / d {pair.input}: {pair.criterion}",
                                 **evidence)
        if len(draws) < RUNS_PER_FILL:
            # One agreeing draw is one path through the kernel: another draw that ran the statement
            # (a loop taken twice) has shown the gradient wrong where the first agreed.
            return _inconclusive(Reason.FEW_DRAWS, f"AD matches finite differences, but only {len(draws)} of "
                                 f"{tried} draws ({chosen.fill.describe()}) ran the flagged statement with a finite "
                                 f"forward pass and converging finite differences; a clear needs {RUNS_PER_FILL} "
                                 "that agree", draws_tried=tried,
                                 **evidence)
        verdict = self._judge_agreement(prepared, plan, draws, evidence)
        if verdict["reason"] == Reason.DOES_NOT_MATTER:
            verdict = self._where_it_matters(prepared, plan, chosen, draws, rng, nondet_tol, verdict)
        if verdict["status"] == Status.CLEARED:
            return self._across_thresholds(prepared, plan, chosen, draws, rng, nondet_tol, verdict)
        return verdict

    def _across_thresholds(self, prepared: Prepared, plan: LaunchPlan, chosen: Draw, draws: list[Draw],
                           rng: np.random.Generator, nondet_tol: float, verdict: dict[str, Any]) -> dict[str, Any]:
        """A clear, tried again where the kernel's branches turn: a draw on both sides of each
        literal the kernel compares values with. A path open only past 1.499 stays shut on most
        draws in [0.5, 1.5], and its hazard with it. A draw that disagrees is judged as any
        disagreement; otherwise ``verdict`` stands, with the fills compared and those no draw of
        which ran the statement in its evidence."""
        evidence = verdict["evidence"]
        crossed, missed = [], []
        for fill in fills_for(prepared.facts, prepared.value_dependent):
            if fill.kind not in ("around", "close") or fill == chosen.fill:
                continue
            missed.append(fill.describe())
            # Fresh draws first; then mutations of the draw that ran the statement (one or two
            # arguments drawn from this fill), for statements few draws reach.
            for attempt in range(2 * RESAMPLES):
                mutating = attempt >= RESAMPLES
                draw = self._make_draw(prepared, plan, fill, rng,
                                       chosen.targeted if mutating else plan.targetable and attempt > 0,
                                       parent=chosen if mutating else None)
                if not (draw.finite and draw.ran):
                    continue
                draw.result = self._compare(draw, nondet_tol)
                if any(p.status == "fail" for p in draw.result.pairs):
                    return self._judge_added_disagreement(prepared, plan, draws, draw, nondet_tol, evidence)
                crossed.append(missed.pop())
                break
        evidence["threshold_draws"] = crossed
        if missed:
            evidence["threshold_fills_not_run"] = missed  # no draw of these ran the statement
        return verdict

    def _where_it_matters(self, prepared: Prepared, plan: LaunchPlan, chosen: Draw, draws: list[Draw],
                          rng: np.random.Generator, nondet_tol: float, verdict: dict[str, Any]) -> dict[str, Any]:
        """The agreeing draws ran the flagged statement, but at none of them did its value move the
        outputs (clamped there, or passed on by a branch those values do not take): more draws,
        of the fill first, then of the others (a clamp at zero passes negative values on), until
        one that agrees and moves them. The clear then rests on three such draws of its fill
        beside the first ones. A draw that disagrees on the way is judged as any disagreement.
        Otherwise ``verdict`` stands."""
        evidence = verdict["evidence"]
        others = [f for f in fills_for(prepared.facts, prepared.value_dependent) if f != chosen.fill]

        def candidates() -> Iterator[Draw]:
            yield from self._redraws(prepared, plan, chosen, rng, MATTER_REDRAWS)
            for fill in others:
                for resample in range(RESAMPLES):
                    yield self._make_draw(prepared, plan, fill, rng, plan.targetable and resample > 0)

        def compared(draw: Draw) -> bool | None:
            draw.result = self._compare(draw, nondet_tol)
            return _agreement({p.status for p in draw.result.pairs})

        def disagreement(draw: Draw) -> dict[str, Any]:
            return self._judge_added_disagreement(prepared, plan, draws, draw, nondet_tol, evidence)

        looked = 0
        for draw in candidates():
            looked += 1
            evidence["draws_for_a_derivative"] = looked
            if not (draw.finite and draw.ran):
                continue
            agrees = compared(draw)
            if agrees is False:
                return disagreement(draw)
            if not (agrees and self._derivative_through(prepared, plan, draw,
                                                        np.random.default_rng(draw.seed)).get("matters")):
                continue
            held, _, against = self._held_on_more_draws(prepared, plan, draw, compared)
            if against is not None:
                return disagreement(against)
            if len(held) < RUNS_PER_FILL:
                continue
            for extra in held:
                _add_draw(evidence, prepared, extra)
            evidence.pop("derivative_through_statement", None)
            return self._judge_agreement(prepared, plan, [*held, *draws], evidence)
        return verdict

    def _judge_added_disagreement(self, prepared: Prepared, plan: LaunchPlan, draws: list[Draw], draw: Draw,
                                  nondet_tol: float, evidence: dict[str, Any]) -> dict[str, Any]:
        """A draw tried after ``draws`` agreed, that disagrees: recorded, then judged as any disagreement."""
        _add_draw(evidence, prepared, draw)
        failures = [(draw, p) for p in draw.result.pairs if p.status == "fail"]
        return self._judge_disagreement(prepared, plan, [*draws, draw], failures, nondet_tol, evidence)

    def _held_on_more_draws(self, prepared: Prepared, plan: LaunchPlan, first: Draw,
                            holds: Callable[[Draw], bool | None], rng: np.random.Generator | None = None,
                            held: list[Draw] | None = None) -> tuple[list[Draw], int, Draw | None]:
        """A clear rests on RUNS_PER_FILL draws, plain or in a setting (the kernel's other hazards
        set aside, or this statement beside its safe form): ``held`` (``first`` where not given)
        and further draws of ``first``'s fill that run the flagged statement and on which ``holds``
        says True. Where it says None the draw cannot be compared and is skipped; a draw where it
        says False ends the search, and is returned last. Also: the draws tried, ``first`` one."""
        held, tried = [first] if held is None else list(held), 1
        redraws = self._redraws(prepared, plan, first, rng or np.random.default_rng(first.seed))
        while len(held) < RUNS_PER_FILL:
            draw = next(redraws, None)
            if draw is None:
                break
            tried += 1
            if not (draw.finite and draw.ran):
                continue
            verdict = holds(draw)
            if verdict is False:
                return held, tried, draw
            if verdict:
                held.append(draw)
        return held, tried, None

    def _compare(self, draw: Draw, nondet_tol: float) -> GradcheckResult:
        launch = draw.launch
        tolerances = DEFAULT_TOLERANCES[precision_of(launch, draw.inputs + draw.outputs)]
        sizes = {name: launch.slots[name].size for name in draw.inputs + draw.outputs}
        cost = sum(sizes[o] + 4 * sizes[i] for i in draw.inputs for o in draw.outputs)
        scale = max((float(np.max(np.abs(launch.slots[n].snapshot), initial=0.0)) for n in draw.outputs), default=1.0)
        return compare_launch(launch, draw.inputs, draw.outputs, tolerances=tolerances,
                              rng=np.random.default_rng(draw.seed),
                              fast_mode=cost > FULL_JACOBIAN_BUDGET, nondet_tol=nondet_tol * max(1.0, scale))

    # -- confirmed? ------------------------------------------------------------------------------
    def _judge_disagreement(self, prepared: Prepared, plan: LaunchPlan, draws: list[Draw], failures: list,
                            nondet_tol: float, evidence: dict[str, Any]) -> dict[str, Any]:
        draw, pair = max(failures, key=lambda dp: dp[1].max_abs_error if np.isfinite(dp[1].max_abs_error) else np.inf)
        detail = _mismatch_sentence(pair)
        evidence["worst_pair"] = pair.to_dict()
        code = prepared.finding.get("code")
        if prepared.safe is None:
            why = prepared.safe_error or f"{code} has no safe form to rewrite the statement into"
            return _inconclusive(Reason.NO_COUNTERFACTUAL, f"{detail}; but the disagreement cannot be attributed to the "
                                 f"flagged statement: {why}", **evidence)
        self._ensure_safe(prepared)
        safe_kernel = prepared.kernels.get("safe")
        if safe_kernel is None:
            return _inconclusive(Reason.NO_COUNTERFACTUAL, f"{detail}; but the safe form ({prepared.safe.description}) "
                                 f"did not build: {prepared.build_errors.get('safe', '')[:400]}", **evidence)
        counterfactual = self._counterfactual(prepared.safe, prepared, plan, draw, safe_kernel, nondet_tol)
        evidence["counterfactual"] = counterfactual
        failing = [p for p in draw.result.pairs if p.status == "fail"]
        if not counterfactual["finite"]:
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{detail}; the safe form's forward is not finite "
                                 "on the same inputs", **evidence)
        if prepared.safe.preserves_forward and not counterfactual["same_forward"]:
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{detail}; the safe form computes different values "
                                 f"on the same inputs ({counterfactual['forward_difference']:.3g}), so it is no "
                                 "counterfactual", **evidence)
        explained = [p for p in failing if _explains(_counterpart(counterfactual, prepared.safe, p), p)]
        remaining = [p for p in failing if p not in explained]
        if not explained:
            return self._isolate(prepared, plan, draw, nondet_tol, detail, evidence)
        evidence["explained_pairs"] = [f"d {p.output} / d {p.input}" for p in explained]
        if remaining:
            evidence["unexplained_pairs"] = [f"d {p.output} / d {p.input}" for p in remaining]
        if draw.hits is not None:
            detail += f" (the flagged statement ran {draw.hits[0]} times)"
        detail += (f"; with the flagged statement alone in its safe form ({prepared.safe.description}) AD matches "
                   f"finite differences on the same inputs")
        return self._in_one_thread(prepared, plan, draw, nondet_tol, {
            "status": Status.CONFIRMED, "reason": Reason.GRADIENT_MISMATCH, "detail": detail, "evidence": evidence})

    def _in_one_thread(self, prepared: Prepared, plan: LaunchPlan, draw: Draw, nondet_tol: float,
                       verdict: dict[str, Any]) -> dict[str, Any]:
        """A confirmation on several threads, checked with one thread alone: synthesized indices
        can make threads share elements that real data keeps apart (ranges of one articulation
        running into the next), and a disagreement that needs that is no evidence for the
        finding. The first thread of the same draw is tried, then one-thread draws of their own
        (the threads of real data are each such a draw), until one runs the flagged statement
        (reaching its singular point, for a value-dependent rule) and moves the outputs that
        disagreed. Where AD then matches finite differences, more one-thread draws are tried: one
        where AD disagrees with one thread too, and the statement's safe form removes that
        disagreement on the same inputs, confirms on its own evidence. Without one the verdict is
        inconclusive; where no one-thread run could be compared, it stands."""
        if all(extent == 1 for extent in plan.dim) or "cover" not in prepared.kernels:
            return verdict
        one = tuple(1 for _ in plan.dim)
        one_plan = dataclasses.replace(plan, dim=one)
        disagreed = {(p.input, p.output) for p in draw.result.pairs if p.status == "fail"}
        record: dict[str, Any] = {"launch_dim": list(one), "tried": []}
        verdict["evidence"]["one_thread"] = record
        agreed: dict[str, Any] | None = None

        def candidates() -> Iterator[tuple[str, Draw | None]]:
            launch = LaunchUnderTest(prepared.kernels["orig"], one, draw.args, device=self.device)
            first = Draw(draw.fill, draw.args, launch, draw.inputs, draw.outputs, draw.in_place, seed=draw.seed)
            first.hits = self._run_instrumented(prepared, one_plan, first)[0]
            yield "the first thread of the same draw", first
            attempt = 0
            # read at each draw: once a one-thread draw agrees (below), more are drawn to look for one that confirms
            while attempt < ONE_THREAD_REDRAWS + (ONE_THREAD_CONFIRM_DRAWS if agreed is not None else 0):
                redrawn, _ = self._search_inputs(prepared, one_plan, np.random.default_rng(draw.seed + attempt))
                attempt += 1
                yield "a one-thread draw of its own", redrawn
            if agreed is not None and draw.fill != Fill("default"):
                # The search starts from the tamest fill; the disagreement may need the values of
                # the one that showed it (both sides of the literal a rarely open branch compares with).
                rng = np.random.default_rng(draw.seed + attempt)
                for _ in range(ONE_THREAD_CONFIRM_DRAWS):
                    yield "a one-thread draw of the fill that disagreed", self._make_draw(
                        prepared, one_plan, draw.fill, rng, draw.targeted)

        for label, single in candidates():
            tried: dict[str, Any] = {"inputs": label}
            record["tried"].append(tried)
            if (single is None or single.crashed or not single.finite or not single.ran
                    or (prepared.value_dependent and not single.singular)):
                tried["checked"] = "the flagged statement does not run (or reach its singular point)"
                continue
            result = self._compare(single, nondet_tol)
            tried.update(flagged_statement_hits=single.hits[rewrite.HITS_RAN],
                         pairs=[_pair_summary(p) for p in result.pairs])
            failing = [p for p in result.pairs if p.status == "fail"]
            if failing and agreed is None:
                record["checked"] = tried["checked"] = "the disagreement is there with one thread alone"
                return verdict
            if failing:
                if self._safe_form_explains(prepared, one_plan, single, failing, nondet_tol, tried):
                    record["checked"] = tried["checked"] = (
                        "another one-thread draw disagrees, and the safe form removes that disagreement on its "
                        "inputs")
                    verdict["detail"] += ("; with one thread alone, one draw agrees, but another disagrees and the "
                                          "flagged statement in its safe form removes that disagreement there")
                    return verdict
                tried["checked"] = "the disagreement is there with one thread, but the safe form does not remove it"
                continue
            compared = [p for p in result.pairs if (p.input, p.output) in disagreed]
            if not result.passed or all(p.ad_identically_zero and p.fd_identically_zero for p in compared):
                # Agreement at zero is no agreement: this thread's inputs do not move those outputs.
                tried["checked"] = "nothing to compare: the pairs that disagreed are zero, or undecided"
                continue
            tried["checked"] = "AD matches finite differences"
            agreed = agreed or tried
        if agreed is not None:
            record["checked"] = "AD matches finite differences with one thread, and no one-thread draw confirms"
            return _inconclusive(Reason.CROSS_THREAD, f"{verdict['detail']}; but with one thread alone, running the "
                                 "flagged statement, AD matches finite differences: the disagreement needs several "
                                 "threads on elements the synthesized indices made them share, which real data may "
                                 "keep apart", **verdict["evidence"])
        record["checked"] = ("no one-thread run both ran the flagged statement and moved the outputs that disagreed: "
                             "nothing to compare, the verdict stands")
        return verdict

    def _safe_form_explains(self, prepared: Prepared, plan: LaunchPlan, draw: Draw, failing: list,
                            nondet_tol: float, record: dict[str, Any]) -> bool:
        """Whether the flagged statement's safe form, run on ``draw``'s inputs, agrees where the
        original's ``failing`` pairs did not (its forward finite, and the same where it keeps it)."""
        counterfactual = self._counterfactual(prepared.safe, prepared, plan, draw, prepared.kernels["safe"],
                                              nondet_tol)
        record["counterfactual"] = counterfactual
        return (_comparable(counterfactual, prepared.safe)
                and all(_explains(_counterpart(counterfactual, prepared.safe, p), p) for p in failing))

    def _counterfactual(self, safe: rewrite.SafeForm, prepared: Prepared, plan: LaunchPlan, draw: Draw, kernel: Any,
                        nondet_tol: float) -> dict[str, Any]:
        """Run ``kernel`` (a rewrite of the original by ``safe``) on the draw's inputs: its forward
        against the original's, and its AD against FD along the same random directions."""
        draw.launch.restore()
        args = _rewritten_args(prepared, draw, kernel, safe.added_params)
        launch = LaunchUnderTest(kernel, plan.dim, args, device=self.device,
                                 rewound=[name for name in safe.rewound if name in draw.launch.slots])
        after = launch.forward()
        finite = all(np.all(np.isfinite(v)) for v in after.values())
        original = draw.launch.forward()
        # Each original array against the array holding its values in the safe form.
        difference = max((_relative_difference(values, after[safe.renamed_outputs.get(name, name)])
                          for name, values in original.items() if safe.renamed_outputs.get(name, name) in after),
                         default=0.0)
        record: dict[str, Any] = {"safe_form": safe.description, "finite": finite,
                                  "same_forward": difference <= 1e-4, "forward_difference": difference, "pairs": []}
        if not finite:
            return record
        # The same pairs in the same order as the original, so the comparison draws the same random
        # directions: the two kernels are compared along the same u and v.
        outputs = [safe.renamed_outputs.get(o, o) for o in draw.outputs]
        inputs = list(draw.inputs)
        in_place = [o for o in outputs if o in inputs]
        result = self._compare(Draw(draw.fill, args, launch, inputs, outputs, in_place, seed=draw.seed), nondet_tol)
        record["pairs"] = [_pair_summary(p) for p in result.pairs]
        record["passed"] = result.passed
        return record

    # -- isolation: the other flagged statements in their safe forms ---------------------------
    def _isolate(self, prepared: Prepared, plan: LaunchPlan, draw: Draw, nondet_tol: float, detail: str,
                 evidence: dict[str, Any]) -> dict[str, Any]:
        """The disagreement stays with this statement rewritten: another hazard of the kernel may
        cause it. Rewrite every other flagged statement of the kernel into its safe form, with this
        one as it is and rewritten too. A pair that agrees only when this one is rewritten as well
        is this statement's doing (confirmed); agreement with it as it is clears it; a
        disagreement that stays with every flagged statement rewritten comes from elsewhere."""
        stays = (f"{detail}; the disagreement stays when the flagged statement alone is rewritten into its safe "
                 f"form ({prepared.safe.description})")
        verdict = self._isolate_with(prepared, plan, draw, nondet_tol, detail, evidence, stays,
                                     loops=False)
        if verdict["status"] != Status.INCONCLUSIVE:
            return verdict
        # The kernel may also replay dynamic loops (flagged or not): set them aside as well (where
        # this statement's own safe form makes loops static, _own_form_taken says no isolation).
        with_loops = self._isolate_with(prepared, plan, draw, nondet_tol, detail,
                                        {k: v for k, v in evidence.items() if k != "isolation"}, stays, loops=True)
        if with_loops["status"] != Status.INCONCLUSIVE:
            return with_loops
        if "isolation" in with_loops["evidence"]:
            verdict["evidence"]["isolation_with_static_loops"] = with_loops["evidence"]["isolation"]
        if verdict["reason"] == with_loops["reason"] == Reason.COUNTERFACTUAL_DISAGREES:
            return self._judge_change(prepared, plan, draw, nondet_tol, detail, verdict, stays)
        return verdict

    def _aside(self, prepared: Prepared, loops: bool) -> str:
        """What the isolation sets aside, in words."""
        others = any(p.key == prepared.key and p.finding.get("safe_form") and _safe_spec(p) != _safe_spec(prepared)
                     for p in (self.prepared or {}).values())
        return " and ".join(part for part, on in (("the kernel's other flagged statements in their safe forms", others),
                                                  ("its dynamic loops made static" if others else
                                                   "the kernel's dynamic loops made static", loops)) if on)

    def _isolate_with(self, prepared: Prepared, plan: LaunchPlan, draw: Draw, nondet_tol: float, detail: str,
                      evidence: dict[str, Any], stays: str, loops: bool) -> dict[str, Any]:
        aside = self._aside(prepared, loops)
        chosen = self._isolation_specs(prepared, loops)
        taken = chosen and self._own_form_taken(prepared, chosen["mine"])
        if taken:
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}; with {aside} this statement is no longer "
                                 f"as written ({taken}): no isolation tells the two apart", **evidence)
        pieces = self._ensure_isolation(prepared, loops)
        if pieces is None:
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}, and no other flagged statement of the "
                                 "kernel has a safe form to set aside: it comes from elsewhere (an unflagged hazard, "
                                 "a non-differentiable algorithm, a race)", **evidence)
        (all_form, all_kernel), (others_form, others_kernel) = pieces
        if all_kernel is None or others_kernel is None:
            why = next((self._isolation_errors[n] for n in _isolation_names(prepared, loops).values()
                        if n in self._isolation_errors), "")
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}; the isolation kernels did not build"
                                 + (f": {why[:400]}" if why else ""), **evidence)
        all_safe = self._counterfactual(all_form, prepared, plan, draw, all_kernel, nondet_tol)
        others_safe = self._counterfactual(others_form, prepared, plan, draw, others_kernel, nondet_tol)
        evidence["isolation"] = {"all_flagged_safe": all_safe, "others_safe": others_safe,
                                 "dynamic_loops_static": loops}
        usable = _comparable(all_safe, all_form) and _comparable(others_safe, others_form)
        if not usable:
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}; with {aside} the forward changes or is "
                                 "not finite", **evidence)

        def mine_on(compared: Draw, every: dict[str, Any], others: dict[str, Any]) -> list:
            """The pairs that disagree with this statement as written and agree once it is
            rewritten too, everything else set aside."""
            return [p for p in compared.result.pairs if p.status == "fail"
                    and _explains(_counterpart(every, all_form, p), p)
                    and (_counterpart(others, others_form, p) or {}).get("status") == "fail"]

        def confirmed(compared: Draw, mine: list, sentence: str) -> dict[str, Any]:
            evidence["explained_pairs"] = [f"d {p.output} / d {p.input}" for p in mine]
            return self._in_one_thread(prepared, plan, compared, nondet_tol, {
                "status": Status.CONFIRMED, "reason": Reason.GRADIENT_MISMATCH,
                "detail": f"{sentence}; with {aside} the disagreement is there while this statement is as written "
                          f"and gone once it is rewritten too ({prepared.safe.description})", "evidence": evidence})

        mine = mine_on(draw, all_safe, others_safe)
        if mine:
            return confirmed(draw, mine, detail)
        if others_safe.get("passed"):
            # This statement as written, everything else set aside: AD matches FD.
            in_setting: list[dict[str, Any]] = []  # the records of the draws compared there, in order

            def agrees(other: Draw) -> bool | None:
                record = self._counterfactual(others_form, prepared, plan, other, others_kernel, nondet_tol)
                in_setting.append(record)
                if not _comparable(record, others_form):
                    return None
                return _agreement({p["status"] for p in record["pairs"]})

            held, tried, against = self._held_on_more_draws(prepared, plan, draw, agrees)
            evidence["isolation"]["draws"] = {"agreeing": len(held), "tried": tried}
            context = (f"AD matches finite differences with {aside} (the disagreement of the kernel as written is "
                       f"theirs), on {len(held)} draws ({draw.fill.describe()})")
            if against is not None:
                # There this statement as written disagrees with everything else set aside: whether
                # rewriting it too removes that is the confirmation the first draw could not give.
                against.result = self._compare(against, nondet_tol)
                every_there = self._counterfactual(all_form, prepared, plan, against, all_kernel, nondet_tol)
                others_there = in_setting[-1]  # the draw that ended the search was compared last
                evidence["isolation"]["another_draw"] = {"all_flagged_safe": every_there, "others_safe": others_there}
                mine = mine_on(against, every_there, others_there) if _comparable(every_there, all_form) else []
                if mine:
                    worst = max(mine, key=lambda p: p.max_abs_error if np.isfinite(p.max_abs_error) else np.inf)
                    evidence["worst_pair"] = worst.to_dict()
                    return confirmed(against, mine, f"{_mismatch_sentence(worst)}, on a draw after one where the "
                                                    "kernel agreed with this statement as written and everything "
                                                    "else set aside")
                return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}; {context}, but not on another draw "
                                     "of the same inputs' kind: the disagreement is there with this statement as "
                                     "written and everything else set aside", **evidence)
            if len(held) < RUNS_PER_FILL:
                return _inconclusive(Reason.FEW_DRAWS, f"{stays}; {context}, but only {len(held)} of {tried} draws "
                                     f"ran the flagged statement and could be compared; a clear needs {RUNS_PER_FILL} "
                                     "that agree", draws_tried=tried, **evidence)
            verdict = self._judge_agreement(prepared, plan, held, evidence, context=context)
            if verdict["status"] != Status.CLEARED:
                return verdict
            reached = self._reaches_in_setting(prepared, plan, held, loops)
            evidence["isolation"]["statement_reaches_outputs"] = reached
            if not reached["measured"]:
                return _inconclusive(Reason.NOT_MEASURED, f"{stays}; {context}, but whether AD carries a derivative "
                                     f"from this statement on to the outputs compared there could not be measured: "
                                     f"{reached['why']}", **evidence)
            if not reached["carries"]:
                return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}; {context}, but there AD does not "
                                     f"carry the derivative from this statement on to the outputs compared "
                                     f"({reached['why']}): the agreement says nothing of it", **evidence)
            return verdict
        evidence["isolation"]["elsewhere"] = True  # compared, and the disagreement stays with everything rewritten
        return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}, and stays with every flagged statement of "
                             "the kernel rewritten" + (" and its dynamic loops made static" if loops else "") +
                             ": it comes from elsewhere (an unflagged hazard, a non-differentiable algorithm, a race)",
                             **evidence)

    def _reaches_in_setting(self, prepared: Prepared, plan: LaunchPlan, draws: list[Draw], loops: bool
                            ) -> dict[str, Any]:
        """Whether, in the setting the isolation compared (everything else set aside), AD carries
        a derivative from this statement on to the outputs compared there, at the first of
        ``draws`` where it does. A setting may leave the statement's array out of what it compares
        (newton's ``dense_subs`` stores into `x` twice: with the other store redirected, the
        outputs compared are the redirected array's), and then an agreement there is no clear."""
        for number, draw in enumerate(draws, start=1):
            adjoint = self._adjoint_through(prepared, plan, draw, np.random.default_rng(draw.seed), loops)
            if adjoint["carries"] or not adjoint["measured"]:
                break
        return {**adjoint, "draw": number}

    def _ensure_isolation(self, prepared: Prepared, loops: bool = False) -> tuple | None:
        """(form, kernel) with every flagged statement of the kernel rewritten, and with all but
        this finding's (``loops``: and every dynamic loop made static in both); built once per
        kernel for all its findings. None when there is nothing else to set aside."""
        chosen = self._isolation_specs(prepared, loops)
        if chosen is None:
            return None
        names = _isolation_names(prepared, loops)
        if names["mine"] not in self._isolation:
            pieces = []
            for role in ("all", "mine"):
                if names[role] in self._isolation:
                    continue
                piece, form, skipped = self._rewrite_piece(prepared, names[role], chosen[role])
                self._isolation[names[role]] = [form, None]
                unrolled = next((error for spec, error in skipped if spec[0] == rewrite.STATIC_ALL_LOOPS), None)
                if unrolled is not None:
                    # Without its loops made static this copy is the isolation without loops again:
                    # not built, so nothing claims a setting it is not.
                    self._isolation_errors[names[role]] = f"its dynamic loops could not be made static: {unrolled}"
                    continue
                pieces.append(piece)
            holder = Prepared(prepared.finding, target=prepared.target, key=prepared.key, pieces=pieces,
                              names={f"iso{k}": p.name for k, p in enumerate(pieces)})
            if pieces:
                self.report("compiling")
                self._build([holder], tuple(holder.names))
                self.report("compiled")
            for role_name, piece_name in holder.names.items():
                self._isolation[piece_name][1] = holder.kernels.get(role_name)
                if role_name in holder.build_errors:
                    self._isolation_errors[piece_name] = holder.build_errors[role_name]
        return tuple(self._isolation[names["all"]]), tuple(self._isolation[names["mine"]])

    def _isolation_specs(self, prepared: Prepared, loops: bool) -> dict[str, list[tuple[str, int]]] | None:
        """The safe forms of the isolation: every flagged statement of the kernel ("all") and all
        but this finding's ("mine"), with ``loops`` the dynamic loops made static in both. None
        when there is nothing else to set aside."""
        siblings = [p for p in (self.prepared or {}).values() if p.key == prepared.key and p.finding.get("safe_form")]
        specs = sorted({_safe_spec(p) for p in siblings}, key=lambda s: (s[1], s[0]))
        # Another rule's finding on this very statement is another hazard: it is set aside too.
        others = [s for s in specs if s != _safe_spec(prepared)]
        if loops:
            if not rewrite.has_dynamic_loops(prepared.target.source, prepared.target.namespace(),
                                             _max_unroll(prepared.target)):
                return None
            specs, others = specs + [(rewrite.STATIC_ALL_LOOPS, 0)], others + [(rewrite.STATIC_ALL_LOOPS, 0)]
        elif not others:
            return None
        return {"all": specs, "mine": others}

    def _own_form_taken(self, prepared: Prepared, others: list[tuple[str, int]]) -> str | None:
        """Why this finding's safe form no longer applies once ``others`` are applied (None where it
        does): a sibling's loops made static are this statement's loops too (newton's restitution
        solve flags four statements of one loop), and the isolation's two kernels would be one."""
        own = _safe_spec(prepared)
        if own[0] not in rewrite.LOOP_FORMS:
            return None  # a form of the statement itself: the others leave it as written
        target = prepared.target
        _, skipped = rewrite.safe_forms([*others, own], target.source, "_wl_taken", f"{rewrite.WARP_ALIAS}.func",
                                        *_rewrite_context(prepared), **_bounds(prepared))
        return next((f"its safe form no longer applies: {error}" for spec, error in skipped if spec == own), None)

    def _rewrite_piece(self, prepared: Prepared, name: str, specs: list
                       ) -> tuple[generated.Piece, rewrite.SafeForm, list[tuple[tuple[str, int], rewrite.RewriteError]]]:
        target = prepared.target
        is_kernel = target.kind == "kernel"
        copy_name = name if is_kernel else name.replace("_wl_iso", "_wl_isof")
        decorator = f"{rewrite.WARP_ALIAS}.{'kernel' if is_kernel else 'func'}"
        form, skipped = rewrite.safe_forms(specs, target.source, copy_name, decorator, *_rewrite_context(prepared),
                                           **_bounds(prepared))
        return self._rewritten_piece(prepared, name, copy_name, form.source, form.added_params), form, skipped

    # -- cleared? --------------------------------------------------------------------------------
    def _judge_change(self, prepared: Prepared, plan: LaunchPlan, draw: Draw, nondet_tol: float,
                      detail: str, verdict: dict[str, Any], stays: str) -> dict[str, Any]:
        """Isolation left the disagreement standing. Where it stays with every flagged statement
        rewritten (it comes from elsewhere, at least in part), what rewriting this statement does
        to AD still decides: compared in the cleanest setting there is (everything else set aside,
        dynamic loops included; else the other flagged statements; else the kernel as written
        against the counterfactual), and only there. AD moved toward finite differences is part of
        the disagreement removed (confirmed); AD unchanged clears the statement where AD carries a
        derivative through it on to the outputs (where the gradient is cut or wrong after it, its
        safe form could not differ, whatever it does). That is measured in the setting compared (a
        derivative the kernel as written cuts after the statement, by a hazard the setting sets
        aside, says nothing of this statement). Otherwise ``verdict`` stands."""
        evidence = verdict["evidence"]
        counterfactual = evidence["counterfactual"]
        isolated = None  # the isolation whose setting was compared (its loops static or not); None: none
        # The kernels compared, AD as written first, and their records on the confirming draw.
        runs: list[tuple[rewrite.SafeForm, Any]] = [(prepared.safe, prepared.kernels.get("safe"))]
        records = [counterfactual]
        for record in (evidence.get("isolation_with_static_loops"), evidence.get("isolation")):
            if record is not None and record.get("elsewhere"):  # compared, the same values computed
                isolated = record["dynamic_loops_static"]
                every, others = self._ensure_isolation(prepared, isolated)
                runs, records = [others, every], [record["others_safe"], record["all_flagged_safe"]]
                setting = f"with {self._aside(prepared, isolated)}"
                break
        else:
            if not counterfactual.get("pairs"):
                return verdict
            setting = "on the same inputs"

        def change_on(compared: Draw, on: list[dict[str, Any]]) -> AdjointChange:
            if isolated is None:
                return _adjoint_change(compared.result.pairs, _pair_summary,
                                       lambda p: _counterpart(on[0], prepared.safe, p), compared.result.tolerances)
            return _adjoint_change(compared.result.pairs, lambda p: _counterpart(on[0], runs[0][0], p),
                                   lambda p: _counterpart(on[1], runs[1][0], p), compared.result.tolerances)

        change = change_on(draw, records)
        evidence["adjoint_change"] = {"setting": setting, "kind": change.kind, "pairs": change.moves}
        if change.kind == "closer":
            return self._in_one_thread(prepared, plan, draw, nondet_tol, {
                "status": Status.CONFIRMED, "reason": Reason.GRADIENT_MISMATCH,
                "detail": f"{detail}; {setting} the disagreement is smaller once this statement is rewritten too "
                          f"({prepared.safe.description}), the same values computed, and larger on no pair: "
                          f"{change.sentence()}; the rest of it comes from elsewhere", "evidence": evidence})
        if change.kind != "same":
            return verdict
        adjoint = self._adjoint_through(prepared, plan, draw, np.random.default_rng(draw.seed), isolated)
        evidence["adjoint_through_statement"] = {"setting": "the kernel as written" if isolated is None else setting,
                                                 **adjoint}
        unchanged = (f"the disagreement stays with every flagged statement of the kernel rewritten (it comes from "
                     f"elsewhere), and {setting} this statement as written and in its safe form "
                     f"({prepared.safe.description}) give the same AD and the same finite differences along the same "
                     "random directions, on every pair")
        if not adjoint["carries"]:
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}; {unchanged}; but AD does not carry the "
                                 f"derivative from the statement on to the outputs ({adjoint['why']}), so the two "
                                 "could not differ", **evidence)

        def unchanged_on(other: Draw) -> bool | None:
            other.result = self._compare(other, nondet_tol)
            on = [self._counterfactual(form, prepared, plan, other, kernel, nondet_tol) for form, kernel in runs]
            if not all(_comparable(r, form) for r, (form, _) in zip(on, runs)):
                return None
            kind = change_on(other, on).kind
            return True if kind == "same" else (False if kind == "closer" else None)

        held, tried, against = self._held_on_more_draws(prepared, plan, draw, unchanged_on)
        evidence["adjoint_change"]["draws"] = {"unchanged": len(held), "tried": tried}
        if against is not None:
            return _inconclusive(Reason.COUNTERFACTUAL_DISAGREES, f"{stays}; {unchanged}; but on another draw AD is "
                                 "closer to finite differences with this statement rewritten", **evidence)
        if len(held) < RUNS_PER_FILL:
            return _inconclusive(Reason.FEW_DRAWS, f"{stays}; {unchanged}; but only {len(held)} of {tried} draws ran "
                                 f"the flagged statement and could be compared so; a clear needs {RUNS_PER_FILL}",
                                 draws_tried=tried, **evidence)
        return self._judge_agreement(prepared, plan, held, evidence, context=(
            f"{detail}; {unchanged} on {len(held)} draws, and AD carries the derivative from the statement on to the "
            f"outputs ({adjoint['why']})"), reason=Reason.SAME_AS_SAFE_FORM)

    def _adjoint_through(self, prepared: Prepared, plan: LaunchPlan, draw: Draw, rng: np.random.Generator,
                         isolated: bool | None = None) -> dict[str, Any]:
        """AD against finite differences of the outputs (along a random direction) with respect to
        the probe on the flagged statement's value, in an instrumented copy built with its adjoint:
        whether AD carries the derivative from the statement on to the outputs. ``isolated``: in the
        setting that isolation (with its loops static, or not) compared in, where one probe scales
        the statement in every iteration an unrolled loop makes of it; None: in the kernel as
        written."""
        if not _has_probe(prepared):
            return {"measured": False, "carries": False, "why": _no_probe(prepared)}
        kernel, made, error = self._ensure_adjoint_cover(prepared, isolated)
        if kernel is None:
            return {"measured": False, "carries": False,
                    "why": f"the instrumented copy with its adjoint did not build: {error[:300]}"}
        slot = made.slots[prepared.relative]
        if made.probed.get(slot) is None:
            return {"measured": False, "carries": False, "why": "the flagged statement has no value to probe"}
        draw.launch.restore()
        form = made.setting
        if form is None:
            args = [*draw.launch.args, *self._instrument_arrays(prepared, 0.0)]
            outputs, rewound = list(draw.outputs), []
        else:
            own = dict(zip([name for name, _ in _INSTRUMENT_PARAMS],
                           self._instrument_arrays(prepared, 0.0, layout=(1, slot))))
            args = _rewritten_args(prepared, draw, kernel, form.added_params, own)
            outputs, rewound = [form.renamed_outputs.get(o, o) for o in draw.outputs], form.rewound
        launch = LaunchUnderTest(kernel, plan.dim, args, device=self.device,
                                 rewound=[n for n in rewound if n in draw.launch.slots])
        seeds = {name: rng.standard_normal(launch.slots[name].size) for name in outputs}
        ad = float(launch.backward(seeds, [rewrite.PROBE_PARAM])[rewrite.PROBE_PARAM][slot])

        def finite_difference(step: float) -> float:
            moved = np.zeros(len(made.probed))
            moved[slot] = step
            plus, minus = launch.forward({rewrite.PROBE_PARAM: moved}), launch.forward({rewrite.PROBE_PARAM: -moved})
            return sum(float(seeds[n] @ (plus[n] - minus[n])) for n in seeds) / (2 * step)

        fd, fd_half = finite_difference(PROBE_STEP), finite_difference(PROBE_STEP / 2)
        tolerance = DEFAULT_TOLERANCES[precision_of(draw.launch, draw.inputs + draw.outputs)]
        converged = math.isfinite(fd_half) and abs(fd - fd_half) <= allowed_error(fd_half, tolerance)
        carries = (converged and math.isfinite(ad) and abs(fd_half) > tolerance.atol
                   and abs(ad - fd_half) <= allowed_error(fd_half, tolerance))
        why = (f"d outputs / d probe along a random direction of the outputs: AD {ad:.6g}, FD {fd_half:.6g} "
               f"({fd:.6g} at twice the step)")
        return {"measured": converged, "carries": bool(carries), "ad": ad, "fd": fd_half, "why": why}

    def _ensure_adjoint_cover(self, prepared: Prepared, isolated: bool | None = None
                              ) -> tuple[Any, rewrite.Instrumented | None, str]:
        """(kernel, how it is instrumented, why it did not build): the instrumented copy, built
        with its adjoint on first use (the usual one only ever runs forward, so it is built
        without). ``isolated``: the copy of that isolation's setting (this finding's "mine", its
        loops static or not), with this finding's statement alone instrumented (the others are
        rewritten)."""
        key = (prepared.key,) if isolated is None else (prepared.key, prepared.relative, isolated)
        if key in self._adjoint_covers:
            return self._adjoint_covers[key]
        name, flagged, setting = f"_wl_coverad_{prepared.key}", prepared.flagged, None
        if isolated is not None:
            name += f"_l{prepared.relative}{'_loops' if isolated else ''}"
            flagged, setting = [(prepared.relative, None)], self._isolation_specs(prepared, isolated)["mine"]
        try:
            piece, made = self._instrumented_piece(prepared, name, flagged, backward=True, setting=setting)
        except rewrite.RewriteError as error:
            self._adjoint_covers[key] = (None, None, str(error))
            return self._adjoint_covers[key]
        holder = Prepared(prepared.finding, target=prepared.target, key=prepared.key, pieces=[piece],
                          names={"adjoint_cover": name})
        self.report("compiling")
        self._build([holder], ("adjoint_cover",))
        self.report("compiled")
        self._adjoint_covers[key] = (holder.kernels.get("adjoint_cover"), made,
                                     holder.build_errors.get("adjoint_cover", "did not build"))
        return self._adjoint_covers[key]

    def _judge_agreement(self, prepared: Prepared, plan: LaunchPlan, draws: list[Draw], evidence: dict[str, Any],
                         context: str | None = None, reason: str = Reason.GRADIENT_MATCHES) -> dict[str, Any]:
        # Draws held in a setting were compared there, not as written: they have no result of their own.
        pairs = [p for d in draws if d.result is not None for p in d.result.pairs]
        if context is None and all(p.fd_identically_zero and p.ad_identically_zero for p in pairs):
            return _inconclusive(Reason.ZERO_JACOBIAN, "AD and finite differences are both zero for every pair: "
                                 "nothing was compared", **evidence)
        # Any of the agreeing draws may show the derivative flowing through the statement: at one
        # the value may sit where the kernel clamps it, or be cut off by an untaken branch.
        for number, draw in enumerate(draws, start=1):
            through = self._derivative_through(prepared, plan, draw, np.random.default_rng(draw.seed))
            if not through["measured"] or through["matters"]:
                break
        through["draw"] = number
        evidence["derivative_through_statement"] = through
        if not through["measured"]:
            return _inconclusive(Reason.NOT_MEASURED, "AD matches finite differences, but whether a derivative flows "
                                 f"through the flagged statement could not be measured: {through['why']}", **evidence)
        if not through["matters"]:
            return _inconclusive(Reason.DOES_NOT_MATTER, "AD matches finite differences, but no derivative flows "
                                 f"through the flagged statement at these inputs ({through['why']}): the hazard was "
                                 "not exercised", **evidence)
        total_hits = evidence["flagged_statement_hits"]
        if prepared.finding.get("safe_form") == "static-feeding-loops" and all(d.hits is not None for d in draws):
            # WL107's hazard is the value a dynamic loop left: a draw whose loops never updated
            # what the flagged use reads leaves nothing stale to replay.
            evidence["feeding_loop_updates"] = fed = sum(d.fed for d in draws)
            if fed == 0:
                return _inconclusive(Reason.NOT_EXERCISED, "AD matches finite differences and the flagged use ran "
                                     f"{total_hits} times, but no dynamic loop before it updated what it reads: the "
                                     "hazard was not exercised", **evidence)
        if prepared.value_dependent:
            singular = sum(d.singular for d in draws)
            evidence["singular_point_hits"] = singular
            if singular == 0:
                return _inconclusive(Reason.SINGULAR_NOT_REACHED, "AD matches finite differences, but no input reached "
                                     f"the point where {prepared.finding.get('code')} breaks "
                                     f"({_singular_words(prepared.finding.get('singular'))}); inputs tried: "
                                     f"{', '.join(dict.fromkeys(e['inputs'] for e in evidence['coverage_search']))}",
                                     **evidence)
        worst = max((p.max_rel_error for p in pairs), default=0.0)
        detail = (
            f"AD matches finite differences on {len(draws)} random draws ({draws[0].fill.describe()}; worst relative "
            f"error {worst:.2g}); the flagged statement ran {total_hits} times and a derivative flows through it "
            f"({through['why']})"
        )
        if context is not None:
            detail = (f"{context}; the flagged statement ran {total_hits} times and a derivative flows through it "
                      f"({through['why']})")
        if prepared.value_dependent:
            detail += f", at inputs where {_singular_words(prepared.finding.get('singular'))}"
        if reason == Reason.SAME_AS_SAFE_FORM:
            detail += ": this statement does not make the gradient wrong here; the cause is elsewhere"
        else:
            detail += f": the gradient is correct on warp {wp.__version__} with this configuration"
        return {"status": Status.CLEARED, "reason": reason, "detail": detail, "evidence": evidence}

    def _derivative_through(self, prepared: Prepared, plan: LaunchPlan, draw: Draw,
                            rng: np.random.Generator) -> dict[str, Any]:
        """Scale the flagged statement's value by (1 +/- h) in the instrumented copy: the outputs
        must move (the value reaches them) and the value must move with the inputs."""
        if not _has_probe(prepared):
            return {"measured": False, "why": _no_probe(prepared)}

        def run(probe: float, overrides: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], float]:
            counters, tap = self._run_instrumented(prepared, plan, draw, probe, overrides)
            run.unprobed = counters[rewrite.HITS_UNPROBED]
            values = {n: draw.launch.slots[n].array.numpy().astype(np.float64).ravel().copy() for n in draw.outputs}
            return values, tap

        plus, tap_plus = run(PROBE_STEP)
        if run.unprobed:
            draw.launch.restore()
            return {"measured": False, "why": f"the value {prepared.probed} is of a type the probe cannot scale "
                                              "(an integer, a struct...)"}
        minus, _ = run(-PROBE_STEP)
        reach = max(float(np.max(np.abs(plus[n] - minus[n]), initial=0.0)) / (2 * PROBE_STEP) for n in draw.outputs)
        tolerance = DEFAULT_TOLERANCES[precision_of(draw.launch, draw.inputs + draw.outputs)]
        depends = 0.0
        for name in draw.inputs:
            base = draw.launch.slots[name].snapshot.astype(np.float64).ravel()
            direction = rng.standard_normal(base.size)
            direction /= max(np.linalg.norm(direction), 1e-30)
            step = tolerance.eps * max(1.0, float(np.max(np.abs(base), initial=0.0)))
            _, up = run(0.0, {name: base + step * direction})
            _, down = run(0.0, {name: base - step * direction})
            depends = max(depends, abs(up - down) / (2 * step))
        draw.launch.restore()
        matters = reach > tolerance.atol and depends > tolerance.atol
        why = (f"scaling {prepared.probed} by 1 +/- {PROBE_STEP:g} moves the outputs by {reach:.3g} per unit; "
               f"the value moves with the inputs at rate {depends:.3g}")
        return {"measured": True, "matters": bool(matters), "reach": reach, "depends": depends, "why": why}

    # -- overwrite tracking ------------------------------------------------------------------------
    def _tracking_step(self, prepared: Prepared, verdict: dict[str, Any]) -> dict[str, Any]:
        """Warp's overwrite tracking, as its own step and only where it adds evidence: the gradient
        experiment did not decide. Code generation only (no compiler, no kernel cache involved)."""
        if verdict["status"] != Status.INCONCLUSIVE:
            return {"ran": False, "why": f"not run: the gradient experiment decided ({verdict['status']}); the tracker "
                                         "would only repeat it, at the cost of a rebuild"}
        if not hasattr(wp.config, "verify_autograd_array_access"):
            return {"ran": False, "why": f"warp {wp.__version__} has no verify_autograd_array_access"}
        target = prepared.target
        if target is None or target.kind != "kernel":
            return {"ran": False, "why": "tracking covers kernels (this finding is not in one)"}
        context = wp._src.context if hasattr(wp, "_src") else wp.context
        name = generated.stable_name("warp_lint_tracking", self.request["module_name"], target.name,
                                     str(target.first_line))
        before = len(self.capture.chunks)
        previous = wp.config.verify_autograd_array_access
        try:
            module = context.Module(name, None)
            module.options.update(locate.module_options(target))
            kernel = context.Kernel(target.func, key=f"{target.name}_tracked", module=module,
                                    options=dict(target.obj.options))
            if prepared.overload:
                wp.overload(kernel, prepared.overload)
            wp.config.verify_autograd_array_access = True
            generated.codegen_only(module, self.device)
        except Exception as error:  # noqa: BLE001
            return {"ran": False, "why": f"tracking failed: {type(error).__name__}: {error}"[:500]}
        finally:
            wp.config.verify_autograd_array_access = previous
        text = "\n".join(self.capture.chunks[before:])
        first, last = (int(v) for v in prepared.finding["flagged_lines"])
        matched = matching_messages(parse_messages(text), self.request["path"], first, last,
                                    (target.first_line, target.last_line))
        return {
            "ran": True,
            "why": "run as its own step (code generation with verify_autograd_array_access on) because the gradient "
                   "experiment did not decide",
            "warned": bool(matched),
            "messages": matched,
            "note": "supporting evidence only: Warp's tracker misses left-operand reads and *= on elements, "
                    "so silence proves little",
        }


def _bounds(prepared: Prepared) -> dict[str, dict[str, int]]:
    """What the synthesized inputs make of loop bounds: integer parameters stay below the bound
    the synthesis gives them (the launch extent, or the length of the array they index), arrays
    have their dimensions (see :mod:`warp_lint.runtime.synthesis`)."""
    ndims = {name: array.ndim for name, t in prepared.concrete.items()
             if (array := locate.array_type(t)) is not None}
    uses = prepared.facts.index_uses if prepared.facts is not None else {}
    ints = {name: index_bound(uses.get(name, ()), ndims) for name, t in prepared.concrete.items()
            if t in (int, wp.int32, wp.int64, wp.uint32)}
    return {"int_bounds": ints, "array_ndims": ndims}


def _draw_record(prepared: Prepared, draw: Draw) -> dict[str, Any]:
    """A compared draw in a verdict's evidence."""
    return {"inputs": draw.fill.describe(), "hits": draw.hits[0],
            "singular": draw.singular if prepared.value_dependent else None,
            "passed": draw.result.passed, "pairs": [_pair_summary(p) for p in draw.result.pairs]}


def _add_draw(evidence: dict[str, Any], prepared: Prepared, draw: Draw) -> None:
    """A draw compared after the first ones, added to a verdict's evidence with its hits."""
    evidence["draws"].append(_draw_record(prepared, draw))
    evidence["flagged_statement_hits"] += draw.hits[0]


def _comparable(record: dict[str, Any], form: rewrite.SafeForm) -> bool:
    """Whether a rewritten kernel's run (``_counterfactual``'s record) can stand beside the
    original's: a finite forward, the same values where the rewrite preserves them."""
    return record["finite"] and (not form.preserves_forward or record["same_forward"])


def _agreement(statuses: set[str]) -> bool | None:
    """A compared draw's pair statuses: False where a pair disagrees, True where every pair agrees,
    None where some could not be judged (finite differences not converged, not finite)."""
    return False if "fail" in statuses else (True if statuses == {"pass"} else None)


def _smooth(draw: Draw) -> bool:
    return draw.result is not None and not any(p.status == "fd-not-converged" for p in draw.result.pairs)


def _has_probe(prepared: Prepared) -> bool:
    return (bool(prepared.probed) and prepared.cover_probes and "cover" in prepared.kernels
            and "cover" not in prepared.substituted)


def _no_probe(prepared: Prepared) -> str:
    """Why the flagged statement's value cannot be probed."""
    if not prepared.probed:
        return "the flagged statement computes no value to probe"
    error = prepared.build_errors.get("cover", "")
    # Warp names the function and quotes the line first; the cause comes last.
    return f"the probe did not build: {error if len(error) <= 400 else error[:150] + ' ... ' + error[-250:]}"


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def survives_in_fork(action: Callable[[], None], seconds: float) -> str | None:
    """Run ``action`` in a forked copy of this process: None when it returns (or raises: the caller
    meets the exception itself), else how the copy ended (a signal, or killed after ``seconds``)."""
    if not hasattr(os, "fork"):
        return None
    pid = os.fork()
    if pid == 0:  # the copy: never returns into the caller's code, never flushes its buffers
        try:
            action()
        except BaseException:  # noqa: BLE001 - an exception is no crash
            pass
        os._exit(0)
    deadline = time.monotonic() + seconds
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return f"no result within {seconds:g} s"
        time.sleep(0.002)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return None


def _rewritten_args(prepared: Prepared, draw: Draw, kernel: Any, added: dict[str, str],
                    own: dict[str, Any] | None = None) -> list[Any]:
    """Arguments of a rewritten copy (``kernel``), by name: the draw's own, a fresh copy of the
    original's for each parameter a rewrite ``added`` (new -> original), and ``own`` (an instrumented
    copy's counters, probes and taps)."""
    by_name = dict(zip([a.label for a in prepared.kernels["orig"].adj.args], draw.launch.args))
    own = own or {}
    return [own[n] if n in own else wp.clone(by_name[added[n]]) if n in added else by_name[n]
            for n in (a.label for a in kernel.adj.args)]


def _max_unroll(target: locate.Target) -> int:
    """The module's unroll limit: Warp keeps constant loops up to it static already."""
    return int(locate.module_options(target).get("max_unroll") or 16)


def _rewrite_context(prepared: Prepared) -> tuple[list[str], dict[str, Any], int]:
    """What a rewrite of the target needs beside its source: parameter names, the names it
    sees, the module's unroll limit."""
    return prepared.param_names, prepared.target.namespace(), _max_unroll(prepared.target)


def _safe_spec(prepared: Prepared) -> tuple[str, int]:
    """(safe form, relative line): what a rewrite of this finding's statement is asked for."""
    return prepared.finding.get("safe_form"), prepared.relative


def _isolation_names(prepared: Prepared, loops: bool) -> dict[str, str]:
    """The isolation pieces' names: every flagged statement of the kernel rewritten ("all", one
    per kernel), and all but this finding's ("mine"); ``loops``: with its dynamic loops static."""
    tag = "L" if loops else ""
    form = str(prepared.finding.get("safe_form") or "").replace("-", "_")
    return {"all": f"_wl_isoall{tag}_{prepared.key}",
            "mine": f"_wl_iso{tag}_{prepared.key}_l{prepared.relative}_{form}"}


def _hung(crash: str) -> bool:
    return crash.startswith("no result within")


def _out_of_range(crash: str) -> bool:
    """A probe ended by the bounds check of the instrumented copy (an assertion: SIGILL or SIGABRT)."""
    return "SIGILL" in crash or "SIGABRT" in crash


def _better(draw: Draw, best: Draw | None, value_dependent: bool) -> bool:
    def score(d: Draw) -> tuple:
        return (d.crashed is None, d.finite, d.ran, d.singular > 0 if value_dependent else True)

    return best is None or score(draw) > score(best)


def _forward_spread(launch: LaunchUnderTest) -> float:
    """Largest relative difference between two identical forward passes."""
    first = {k: v.copy() for k, v in launch.forward().items()}
    second = launch.forward()
    return max((_relative_difference(first[k], second[k]) for k in first), default=0.0)


def _relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    with np.errstate(invalid="ignore"):
        both_nan = np.isnan(a) & np.isnan(b)
        diff = np.where(both_nan, 0.0, np.abs(a - b))
    scale = max(1.0, float(np.max(np.abs(np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)), initial=0.0)))
    value = float(np.max(diff, initial=0.0)) / scale
    return value if np.isfinite(value) else float("inf")


def _singular_words(kind: str | None) -> str:
    return {"sqrt-zero": "the square root's argument is exactly zero",
            "unselected-nonfinite": "the operand wp.where does not select is not finite"}.get(kind or "", "its singular point")


def _type_text(t: Any) -> str:
    if hasattr(t, "vars") and hasattr(t, "cls"):  # a @wp.struct
        return t.cls.__name__
    array = locate.array_type(t)
    if array is not None:
        return f"array(dtype={getattr(array.dtype, '__name__', array.dtype)}, ndim={array.ndim})"
    return getattr(t, "__name__", str(t))


def _pair_summary(pair: PairResult | dict) -> dict[str, Any]:
    pair = pair if isinstance(pair, dict) else pair.to_dict()
    return {key: pair.get(key) for key in ("input", "output", "status", "max_abs_error", "max_rel_error", "where",
                                           "directional")} | {
        "ad": pair.get("ad_at_worst"), "fd": pair.get("fd_at_worst"),
        "ad_identically_zero": pair.get("ad_identically_zero"), "fd_identically_zero": pair.get("fd_identically_zero")}


def _counterpart(record: dict[str, Any], form: rewrite.SafeForm, pair: PairResult) -> dict[str, Any] | None:
    """The summarized pair of a rewritten kernel's run (``record``) that stands for ``pair`` of
    the original: the same input, and the array that now holds what its output held."""
    output = form.renamed_outputs.get(pair.output, pair.output)
    return next((p for p in record["pairs"] if p["input"] == pair.input and p["output"] == output), None)


def _explains(rewritten: dict[str, Any] | None, failing: PairResult) -> bool:
    """Whether the rewritten kernel's pair (summarized) agrees where ``failing`` did not. Agreement
    at zero where the original's outputs moved with that input (a shadow array's entries may not)
    compares another function and explains nothing."""
    return (rewritten is not None and rewritten["status"] == "pass"
            and not (rewritten.get("ad_identically_zero") and rewritten.get("fd_identically_zero")
                     and not failing.fd_identically_zero))


@dataclasses.dataclass
class AdjointChange:
    """How rewriting the flagged statement into its safe form moves AD, pair by pair, between two
    kernels that compute the same values (one with the statement as written, one rewritten),
    along the same random directions: ``same`` (closer than any disagreement the comparison
    reports, on every pair), ``closer`` (toward finite differences on some pair that disagreed,
    by more than that and by a share of its disagreement, and farther on none: a safe form that
    makes some pair worse is no counterfactual in this kernel), or ``other`` (farther somewhere,
    or the finite differences differ: not the same function)."""

    kind: str
    moves: list[dict[str, Any]]

    def sentence(self) -> str:
        return "; ".join(f"d {generated.readable(m['output'])} / d {generated.readable(m['input'])} along the same "
                         f"random directions: AD {m['ad']:.6g} -> {m['ad_safe']:.6g} (FD {m['fd']:.6g}: "
                         f"{m['share_removed']:.0%} of the disagreement removed)" for m in self.moves if m["closer"])


def _adjoint_change(pairs: list[PairResult], as_written: Callable[[PairResult], dict[str, Any] | None],
                    rewritten: Callable[[PairResult], dict[str, Any] | None], tolerances: Any) -> AdjointChange:
    moves: list[dict[str, Any]] = []
    for pair in pairs:
        summaries = as_written(pair), rewritten(pair)
        if any(summary is None for summary in summaries):
            return AdjointChange("other", moves)
        try:
            (ad, fd), (ad_safe, fd_safe) = ((float(s["directional"]["ad"]), float(s["directional"]["fd"]))
                                            for s in summaries)
        except (KeyError, TypeError, ValueError):
            return AdjointChange("other", moves)
        allowed = allowed_error(fd, tolerances)
        if not all(math.isfinite(v) for v in (ad, fd, ad_safe, fd_safe)):
            return AdjointChange("other", moves)
        if abs(fd - fd_safe) > allowed:
            # The rewrite changed what this pair measures (a store redirected to its own array no
            # longer passes the untouched elements through). Where AD agrees with finite
            # differences in both, the statement made neither wrong; otherwise nothing is decided.
            if abs(ad - fd) > allowed or abs(ad_safe - fd_safe) > allowed_error(fd_safe, tolerances):
                return AdjointChange("other", moves)
            moves.append({"input": pair.input, "output": pair.output, "ad": ad, "ad_safe": ad_safe, "fd": fd,
                          "fd_safe": fd_safe, "same": True, "closer": False, "farther": False, "share_removed": 0.0})
            continue
        gained = abs(ad - fd) - abs(ad_safe - fd)
        # Closer by a share of the disagreement, not only by more than the noise: beside a large
        # disagreement from elsewhere, a small move could go either way.
        closer = pair.status == "fail" and gained > max(allowed, SHARE_REMOVED * abs(ad - fd))
        moves.append({"input": pair.input, "output": pair.output, "ad": ad, "ad_safe": ad_safe, "fd": fd,
                      "same": abs(ad - ad_safe) <= UNCHANGED_ADJOINT * max(abs(ad), abs(ad_safe), tolerances.atol),
                      "closer": bool(closer), "farther": gained < -allowed,
                      "share_removed": gained / abs(ad - fd) if ad != fd else 0.0})
    if not moves or any(m["farther"] for m in moves):
        return AdjointChange("other", moves)
    if all(m["same"] for m in moves):
        return AdjointChange("same", moves)
    return AdjointChange("closer" if any(m["closer"] for m in moves) else "other", moves)


def _mismatch_sentence(pair: PairResult) -> str:
    pair = dataclasses.replace(pair, input=generated.readable(pair.input), output=generated.readable(pair.output),
                               where=generated.readable(pair.where))
    sentence = (
        f"AD and finite differences disagree for d {pair.output} / d {pair.input}: max |AD - FD| = "
        f"{pair.max_abs_error:.3g} at {pair.where} (AD {pair.ad_at_worst:.6g}, FD {pair.fd_at_worst:.6g}), "
        f"max relative error {pair.max_rel_error:.3g}; failed: {pair.criterion}"
    )
    if pair.ad_identically_zero and not pair.fd_identically_zero and "identically zero" not in sentence:
        sentence += "; AD is identically zero while FD is not (the gradient is dropped)"
    return sentence


__all__ = ["FileSession"]
