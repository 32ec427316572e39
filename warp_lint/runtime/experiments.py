"""The experiments that decide findings, run inside the child process (imports warp).

For each finding: take the flagged kernel from the imported module (or wrap the flagged
``@wp.func`` in a kernel), synthesize small inputs from its real argument types, measure with a
coverage copy that the flagged statement runs (widening the inputs towards the literals the
kernel compares against when it does not), then compare AD with finite differences on several
random draws (:mod:`warp_lint.runtime.comparison`, shared with the public ``gradcheck``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import time
from typing import Any

import numpy as np
import warp as wp

from warp_lint.runtime import generated
from warp_lint.runtime.comparison import (
    DEFAULT_TOLERANCES,
    GradcheckResult,
    LaunchUnderTest,
    PairResult,
    compare_launch,
    precision_of,
)
from warp_lint.runtime.synthesis import (
    Fill,
    LaunchPlan,
    UnsupportedKernel,
    comparison_literals,
    make_arguments,
    plan_launch,
)
from warp_lint.runtime.tracking import MessageCapture, matching_messages, parse_messages
from warp_lint.runtime.verdicts import Reason, Status

RUNS_PER_FILL = 3  # random draws that must all agree before a finding is cleared

_KERNEL_TYPE = getattr(wp, "Kernel", None) or wp.context.Kernel
_FUNCTION_TYPE = getattr(wp, "Function", None) or wp.context.Function


def _inconclusive(reason: str, detail: str, **evidence: Any) -> dict[str, Any]:
    return {"status": Status.INCONCLUSIVE, "reason": reason, "detail": detail, "evidence": evidence}


@dataclasses.dataclass
class GeneratedKernels:
    """warp-lint's own kernels for one finding: the func wrapper (if any) and the coverage copy."""

    wrapper: Any = None
    coverage: Any = None
    error: str | None = None


@dataclasses.dataclass
class Draw:
    fill: Fill
    launch: LaunchUnderTest
    inputs: list[str]
    outputs: list[str]
    in_place: list[str]
    hits: int | None = None
    result: GradcheckResult | None = None


def _safe_identifier(text: str) -> str:
    return re.sub(r"\W", "_", text)


class FileSession:
    """Every finding of one user file, sharing one import and one compile of each module."""

    def __init__(
        self,
        module: Any,
        request: dict[str, Any],
        *,
        device: str,
        capture: MessageCapture,
        tracking: bool,
        report: Any = None,
    ):
        self.module = module
        # Called with a phase name when a slow phase ends: the parent's time limit restarts, so
        # a long compile is not mistaken for a hanging kernel.
        self.report = report or (lambda phase: None)
        self.request = request
        self.device = device
        self.capture = capture
        self.tracking = tracking
        self.seed = int(request.get("seed", 0))
        self._generated: dict[str, GeneratedKernels] | None = None
        self._generated_compile_s = 0.0
        self._loaded: set[int] = set()

    # -- one finding -------------------------------------------------------------------------
    def confirm(self, finding: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        name = finding.get("kernel")
        kind = finding.get("function_kind") or "kernel"
        target = getattr(self.module, name, None) if name else None
        expected = _FUNCTION_TYPE if kind == "func" else _KERNEL_TYPE
        if not isinstance(target, expected):
            what = "@wp.func" if kind == "func" else "@wp.kernel"
            return _inconclusive(
                Reason.NOT_IMPORTABLE,
                f"no module-level {what} named {name!r} in {self.request['path']} "
                "(kernels defined inside functions cannot be imported)",
            )

        plan = None
        if kind == "kernel":
            try:
                # Before compiling anything: an argument that cannot be synthesized costs nothing.
                plan = plan_launch(target, finding.get("index_params") or ())
            except UnsupportedKernel as error:
                return _inconclusive(Reason.UNSUPPORTED_ARGUMENT, str(error))

        compile_started = time.perf_counter()
        self.report("compiling")
        try:
            # The user's module compiles once for all its findings (a cache hit when warm).
            self._load(target.module)
        except Exception as error:  # noqa: BLE001 - any codegen/compiler failure
            return _inconclusive(Reason.COMPILE_ERROR, f"{type(error).__name__}: {error}"[:2000])
        compile_s = time.perf_counter() - compile_started
        self.report("compiled")

        # warp-lint's own kernels (coverage copies, func wrappers) only once the user's compile.
        self.report("compiling")
        kernels = self._generated_for(finding)
        self.report("generated")
        launch_kernel = target
        if kind == "func":
            launch_kernel = kernels.wrapper
            if launch_kernel is None:
                return _inconclusive(
                    Reason.UNSUPPORTED_ARGUMENT, f"could not wrap @wp.func {name!r} in a kernel: {kernels.error}"
                )
            try:
                plan = plan_launch(launch_kernel, finding.get("index_params") or ())
            except UnsupportedKernel as error:
                return _inconclusive(Reason.UNSUPPORTED_ARGUMENT, str(error))

        check_started = time.perf_counter()
        verdict = self._gradient_experiment(finding, target, launch_kernel, plan, kernels)
        evidence = verdict.setdefault("evidence", {})
        evidence["timing"] = {
            "compile_s": round(compile_s, 3),
            "generated_compile_s": round(self._generated_compile_s, 3),
            "check_s": round(time.perf_counter() - check_started, 3),
            "total_s": round(time.perf_counter() - started, 3),
        }
        if "overwrite-tracking" in finding.get("strategies", ()):
            evidence["overwrite_tracking"] = self._tracking_evidence(finding, target)
        return verdict

    # -- compile ------------------------------------------------------------------------------
    def _load(self, warp_module: Any) -> None:
        if id(warp_module) in self._loaded:
            return
        # wp.load_module builds the same variant an ordinary launch uses. Module.load(device) does
        # not on 1.19 CPU (block_dim 256 there, 1 for a launch): the module would compile twice.
        try:
            wp.load_module(warp_module, device=self.device)
        except TypeError:  # releases whose load_module takes only Python modules / names
            result = warp_module.load(self.device)
            if result is None or result is False:
                raise RuntimeError(f"Warp could not build module {warp_module.name}") from None
        self._loaded.add(id(warp_module))

    def _generated_for(self, finding: dict[str, Any]) -> GeneratedKernels:
        if self._generated is None:
            started = time.perf_counter()
            self._generated = self._build_generated()
            self._generated_compile_s = time.perf_counter() - started
        return self._generated.get(finding["id"], GeneratedKernels(error="finding not prepared"))

    def _definitions(self, finding: dict[str, Any], index: int, type_names: dict[str, Any]) -> dict[str, str]:
        """Generated sources for one finding: {"wrapper"|"coverage": kernel name} -> definitions."""
        target = getattr(self.module, finding.get("kernel") or "", None)
        line = int(finding["flagged_lines"][0])
        if finding.get("function_kind") == "func":
            if not isinstance(target, _FUNCTION_TYPE):
                raise generated.InstrumentationError("not importable")
            signature = generated.func_signature(target)
            index_params = list(finding.get("index_params") or ())
            cover = f"_wl_cover_func_{index}"
            return {
                f"_wl_wrap_{index}": generated.func_wrapper(finding["kernel"], signature, index_params, f"_wl_wrap_{index}", type_names),
                cover: generated.coverage_copy(target.func, line, cover, is_kernel=False),
                f"_wl_cover_{index}": generated.func_wrapper(
                    cover, signature, index_params, f"_wl_cover_{index}", type_names, hits=True
                ),
            }
        if not isinstance(target, _KERNEL_TYPE):
            raise generated.InstrumentationError("not importable")
        return {f"_wl_cover_{index}": generated.coverage_copy(target.func, line, f"_wl_cover_{index}", is_kernel=True)}

    def _build_generated(self) -> dict[str, GeneratedKernels]:
        """Coverage copies and func wrappers for every finding of the file, compiled together once.

        If the combined module fails to build, each finding's kernels are rebuilt in a module of
        their own so one bad instrumentation costs only its own finding.
        """
        directory = f"{self.request['cache_dir']}/generated"
        type_names: dict[str, Any] = {}
        per_finding: dict[str, dict[str, str]] = {}
        kernels: dict[str, GeneratedKernels] = {}
        for index, finding in enumerate(self.request["findings"]):
            try:
                per_finding[finding["id"]] = self._definitions(finding, index, type_names)
            except Exception as error:  # noqa: BLE001 - source not found, statement not found, ...
                kernels[finding["id"]] = GeneratedKernels(error=f"{type(error).__name__}: {error}")
        if not per_finding:
            return kernels

        def build(module_name: str, groups: dict[str, dict[str, str]]) -> dict[str, GeneratedKernels]:
            sources = [source for group in groups.values() for source in group.values()]
            module = generated.load_generated_module(
                module_name, sources, self.module.__dict__, type_names, directory
            )
            built = {}
            for finding_id, group in groups.items():
                names = list(group)
                wrapper = getattr(module, names[0]) if len(names) == 3 else None
                built[finding_id] = GeneratedKernels(wrapper=wrapper, coverage=getattr(module, names[-1]))
            any_kernel = next(iter(built.values())).coverage
            self._load(any_kernel.module)
            return built

        base_name = generated.stable_name("warp_lint_generated", self.request["module_name"])
        try:
            kernels.update(build(base_name, per_finding))
        except Exception:  # noqa: BLE001 - fall back to one module per finding
            for finding_id, group in per_finding.items():
                try:
                    kernels.update(build(f"{base_name}_{_safe_identifier(finding_id)}", {finding_id: group}))
                except Exception as error:  # noqa: BLE001
                    kernels[finding_id] = GeneratedKernels(error=f"{type(error).__name__}: {error}"[:1000])
        return kernels

    # -- the gradient experiment ---------------------------------------------------------------
    def _make_draw(self, finding: dict[str, Any], kernel: Any, plan: LaunchPlan, fill: Fill, rng: np.random.Generator) -> Draw:
        args = make_arguments(plan, fill, rng, self.device)
        launch = LaunchUnderTest(kernel, plan.dim, args, device=self.device)
        float_arrays = plan.float_arrays
        reads = finding.get("reads")
        writes = set(finding.get("writes") or ())
        returns = [n for n in float_arrays if n.startswith(generated.RETURN_PREFIX)]
        # Inputs: every float array except pure outputs (written, never read). Differentiating a
        # pure output would test what its .grad holds after backward, which no user reads.
        inputs = [
            n for n in float_arrays
            if n not in returns and not (n in writes and reads is not None and n not in reads)
        ]
        changed = set(launch.changed_arrays())
        outputs = returns + [n for n in float_arrays if n not in returns and (n in writes or n in changed)]
        in_place = [n for n in outputs if n in inputs]
        outputs = in_place + [n for n in outputs if n not in in_place]
        return Draw(fill=fill, launch=launch, inputs=inputs, outputs=outputs, in_place=in_place)

    def _count_hits(self, coverage_kernel: Any, plan: LaunchPlan, draw: Draw) -> int:
        draw.launch.restore()
        hits = wp.zeros(1, dtype=wp.int32, device=self.device)
        wp.launch(coverage_kernel, dim=plan.dim, inputs=[*draw.launch.args, hits], device=self.device)
        return int(hits.numpy()[0])

    def _gradient_experiment(
        self, finding: dict[str, Any], target: Any, kernel: Any, plan: LaunchPlan, kernels: GeneratedKernels
    ) -> dict[str, Any]:
        rng = np.random.default_rng(self.seed)
        coverage = kernels.coverage
        fills = [Fill("default")]
        fills += [Fill("around", c) for c in comparison_literals(target.adj.tree)]
        fills.append(Fill("wide"))

        # 1. Find inputs that execute the flagged statement (a launch each: cheap).
        first = self._make_draw(finding, kernel, plan, fills[0], rng)
        explored = []
        chosen = first
        if coverage is not None:
            first.hits = self._count_hits(coverage, plan, first)
            explored.append({"inputs": first.fill.describe(), "hits": first.hits})
            if first.hits == 0:
                for fill in fills[1:]:
                    candidate = self._make_draw(finding, kernel, plan, fill, rng)
                    candidate.hits = self._count_hits(coverage, plan, candidate)
                    explored.append({"inputs": fill.describe(), "hits": candidate.hits})
                    if candidate.hits > 0:
                        chosen = candidate
                        break
        if not chosen.inputs or not chosen.outputs:
            return _inconclusive(
                Reason.NO_DIFFERENTIABLE_PAIR,
                f"no floating-point (input, output) array pair to differentiate "
                f"(inputs {chosen.inputs}, outputs {chosen.outputs})",
            )

        # 2. Compare AD with FD on several draws of those inputs.
        draws = [chosen]
        for _ in range(RUNS_PER_FILL - 1):
            draw = self._make_draw(finding, kernel, plan, chosen.fill, rng)
            if coverage is not None:
                draw.hits = self._count_hits(coverage, plan, draw)
            draws.append(draw)
        for draw in draws:
            tolerances = DEFAULT_TOLERANCES[precision_of(draw.launch, draw.inputs + draw.outputs)]
            # nondet_tol=None: CUDA float atomics legitimately reorder sums; determinism is not the question.
            draw.result = compare_launch(
                draw.launch, draw.inputs, draw.outputs, tolerances=tolerances, rng=rng, nondet_tol=None
            )
        return self._verdict(finding, plan, draws, explored, coverage_error=None if coverage else kernels.error)

    def _verdict(
        self, finding: dict[str, Any], plan: LaunchPlan, draws: list[Draw], explored: list[dict], coverage_error: str | None
    ) -> dict[str, Any]:
        version = wp.__version__
        executed = [d for d in draws if d.hits is None or d.hits > 0]
        total_hits = sum(d.hits or 0 for d in draws)
        first = draws[0]
        evidence: dict[str, Any] = {
            "launch_dim": list(plan.dim),
            "inputs": first.inputs,
            "outputs": first.outputs,
            "in_place": first.in_place,
            "input_values": first.fill.describe(),
            "criterion": draws[0].result.to_dict()["criterion"],
            "tolerances": dataclasses.asdict(first.result.tolerances),
            "precision": first.result.precision,
            "draws": [
                {"hits": d.hits, "passed": d.result.passed, "pairs": [_pair_summary(p) for p in d.result.pairs]}
                for d in draws
            ],
            "flagged_statement_hits": None if coverage_error else total_hits,
        }
        if explored:
            evidence["coverage_search"] = explored
        if coverage_error:
            evidence["coverage_error"] = coverage_error
        if self.tracking:
            evidence["config_note"] = "verify_autograd_array_access was switched on by warp-lint for overwrite tracking"
        # Value-dependent rules (NaN/inf from sqrt, division, normalize...): name it when AD is not finite.
        evidence["non_finite_gradient"] = any(
            p.criterion.startswith("AD is not finite") or "AD directional derivative is" in p.criterion
            for d in draws for p in d.result.pairs
        )

        failures = [(d, p) for d in executed for p in d.result.pairs if p.status == "fail"]
        if failures:
            draw, pair = max(failures, key=lambda dp: dp[1].max_abs_error)
            detail = _mismatch_sentence(pair)
            evidence["worst_pair"] = pair.to_dict()
            if coverage_error:
                detail += f" (whether the flagged statement ran could not be measured: {coverage_error})"
            return {"status": Status.CONFIRMED, "reason": Reason.GRADIENT_MISMATCH, "detail": detail, "evidence": evidence}

        statuses = {p.status for d in draws for p in d.result.pairs}
        if "non-finite" in statuses:
            return _inconclusive(Reason.NON_FINITE, "finite differences are not finite at the synthesized inputs", **evidence)
        if "fd-not-converged" in statuses:
            pair = next(p for d in draws for p in d.result.pairs if p.status == "fd-not-converged")
            return _inconclusive(Reason.FD_NOT_CONVERGED, f"d {pair.output} / d {pair.input}: {pair.criterion}", **evidence)
        if coverage_error:
            return _inconclusive(
                Reason.NOT_EXECUTED,
                f"AD matches FD, but whether the flagged statement ran could not be measured: {coverage_error}",
                **evidence,
            )
        if not executed:
            tried = ", ".join(e["inputs"] for e in explored)
            return _inconclusive(
                Reason.NOT_EXECUTED,
                f"the flagged statement never ran (inputs tried: {tried}); matching gradients there prove nothing",
                **evidence,
            )
        if any(p.status == "fail" for d in draws for p in d.result.pairs):
            return _inconclusive(
                Reason.NOT_EXECUTED,
                "the gradient is wrong only on draws where the flagged statement did not run",
                **evidence,
            )
        worst = max((p.max_rel_error for d in draws for p in d.result.pairs), default=0.0)
        detail = (
            f"AD matches finite differences on {len(draws)} random draws ({first.fill.describe()}; worst relative "
            f"error {worst:.2g}) and the flagged statement ran {total_hits} times: the gradient is correct on "
            f"warp {version} with this configuration"
        )
        return {"status": Status.CLEARED, "reason": Reason.GRADIENT_MATCHES, "detail": detail, "evidence": evidence}

    # -- overwrite tracking --------------------------------------------------------------------
    def _tracking_evidence(self, finding: dict[str, Any], target: Any) -> dict[str, Any]:
        if not hasattr(wp.config, "verify_autograd_array_access"):
            return {"available": False, "note": f"warp {wp.__version__} has no verify_autograd_array_access"}
        try:
            lines, first = inspect.getsourcelines(target.func)
            kernel_lines = (first, first + len(lines) - 1)
        except (OSError, TypeError):
            kernel_lines = None
        first_line, last_line = (int(v) for v in finding["flagged_lines"])
        messages = parse_messages(self.capture.text())
        matched = matching_messages(messages, self.request["path"], first_line, last_line, kernel_lines)
        return {
            "available": True,
            "warned": bool(matched),
            "messages": matched,
            "note": "supporting evidence only: Warp's tracker misses left-operand reads and *= on elements, "
            "so silence proves little",
        }


def _pair_summary(pair: PairResult) -> dict[str, Any]:
    return {
        "input": pair.input,
        "output": pair.output,
        "status": pair.status,
        "max_abs_error": pair.max_abs_error,
        "max_rel_error": pair.max_rel_error,
        "where": pair.where,
        "ad": pair.ad_at_worst,
        "fd": pair.fd_at_worst,
        "ad_identically_zero": pair.ad_identically_zero,
    }


def _mismatch_sentence(pair: PairResult) -> str:
    # Wrapper kernels of @wp.func helpers store the return value in _wl_ret0, _wl_ret1, ...
    def readable(name: str | None) -> str | None:
        return name.replace(generated.RETURN_PREFIX, "return") if name else name

    pair = dataclasses.replace(pair, output=readable(pair.output), where=readable(pair.where))
    sentence = (
        f"AD and finite differences disagree for d {pair.output} / d {pair.input}: max |AD - FD| = "
        f"{pair.max_abs_error:.3g} at {pair.where} (AD {pair.ad_at_worst:.6g}, FD {pair.fd_at_worst:.6g}), "
        f"max relative error {pair.max_rel_error:.3g}; failed: {pair.criterion}"
    )
    if pair.ad_identically_zero and not pair.fd_identically_zero and "identically zero" not in sentence:
        sentence += "; AD is identically zero while FD is not (the gradient is dropped)"
    return sentence
