"""Benchmark ``warp-lint check --confirm`` against a hand-written ``warp.autograd.gradcheck``.

    python benchmarks/bench_confirm.py               # timing table (cold and warm kernel cache)
    python benchmarks/bench_confirm.py --tolerances  # FD error of correct vs hazardous kernels

The timing run writes a module with three flagged kernels to a temporary directory and measures:

* warp-lint: ``confirm_findings`` on the three findings (one child process: import, compile,
  coverage kernels, three experiments); compile and check times come from the verdicts' evidence.
* hand-written: a fresh Python process that imports warp and the module, compiles it
  (``wp.load_module``) and calls ``warp.autograd.gradcheck`` once per kernel on arrays of the
  same size. It cannot express the in-place kernel (an array that is both input and output):
  listing the array as input only raises "A list of output arguments must be provided"; the
  table shows that as its verdict.

Cold means an empty kernel cache directory; warm means the same directory again.
Plain Python, public tools only (warp, numpy, warp_lint).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from warp_lint.finding import Finding, Position  # noqa: E402
from warp_lint.runtime import confirm_findings  # noqa: E402

MODULE = textwrap.dedent(
    '''
    import warp as wp


    @wp.kernel
    def square_in_place(a: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] * a[i]  # flag: square_in_place


    @wp.kernel
    def zero_vertical_velocity(vel: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        v = vel[i]
        v.y = 0.0  # flag: zero_vertical_velocity
        out[i] = v


    @wp.kernel
    def horner_dynamic_loop(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
        i = wp.tid()
        s = float(0.0)
        for j in range(n):
            s = s * x[j] + x[j]  # flag: horner_dynamic_loop
        out[i] = s
    '''
)

FLAGGED = {  # kernel -> (code, reads, writes)
    "square_in_place": ("WL102", ["a"], ["a"]),
    "zero_vertical_velocity": ("WL103", ["vel"], ["out"]),
    "horner_dynamic_loop": ("WL104", ["x"], ["out"]),
}

HAND_WRITTEN = textwrap.dedent(
    '''
    import json, sys, time, importlib.util
    started = time.perf_counter()
    import numpy as np
    import warp as wp
    import warp.autograd
    wp.config.kernel_cache_dir = sys.argv[2]
    wp.config.quiet = True
    wp.init()
    spec = importlib.util.spec_from_file_location("bench_kernels", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    t = time.perf_counter(); wp.load_module(m, device="cpu"); compile_s = time.perf_counter() - t
    rng = np.random.default_rng(0)
    def arr(shape, dtype=float):
        return wp.array(rng.uniform(0.5, 1.5, shape).astype(np.float32), dtype=dtype, requires_grad=True)
    def check(kernel, inputs, outputs):
        try:
            ok = warp.autograd.gradcheck(kernel, 4, inputs, outputs, raise_exception=False, show_summary=False)
            return "passed" if ok else "failed"
        except Exception as error:
            return "error: " + type(error).__name__
    t = time.perf_counter()
    verdicts = {
        "square_in_place": check(m.square_in_place, [arr(16)], []),
        "zero_vertical_velocity": check(m.zero_vertical_velocity, [arr((16, 3), wp.vec3)], [arr((16, 3), wp.vec3)]),
        "horner_dynamic_loop": check(m.horner_dynamic_loop, [arr(16), 4], [arr(16)]),
    }
    check_s = time.perf_counter() - t
    print("RESULT " + json.dumps({"compile_s": compile_s, "check_s": check_s, "verdicts": verdicts}))
    '''
)


def _findings(path: str) -> list[Finding]:
    lines = open(path, encoding="utf-8").read().splitlines()
    findings = []
    for kernel, (code, reads, writes) in FLAGGED.items():
        line = next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# flag: {kernel}"))
        findings.append(
            Finding(
                code=code, name=code, message=code, path=path, start=Position(line, 1), end=Position(line, 2),
                data={"strategy": "gradcheck", "kernel": kernel, "function_kind": "kernel", "reads": reads,
                      "writes": writes, "index_params": [], "flagged_lines": [line, line]},
            )
        )
    return findings


def _warp_lint_run(path: str, cache_dir: str) -> dict:
    findings = _findings(path)
    started = time.perf_counter()
    confirm_findings(findings, device="cpu", cache_dir=cache_dir)
    total = time.perf_counter() - started
    timings = [f.confirmation.evidence.get("timing", {}) for f in findings]
    return {
        "total_s": total,
        "compile_s": sum(t.get("compile_s", 0.0) for t in timings) + max((t.get("generated_compile_s", 0.0) for t in timings), default=0.0),
        "check_s": sum(t.get("check_s", 0.0) for t in timings),
        "verdicts": {f.data["kernel"]: f.confirmation.status for f in findings},
    }


def _hand_written_run(path: str, cache_dir: str, script: str) -> dict:
    started = time.perf_counter()
    output = subprocess.run([sys.executable, script, path, cache_dir], capture_output=True, text=True, check=True).stdout
    total = time.perf_counter() - started
    result = json.loads(next(line for line in output.splitlines() if line.startswith("RESULT "))[7:])
    return {"total_s": total, "compile_s": result["compile_s"], "check_s": result["check_s"], "verdicts": result["verdicts"]}


def timing_table() -> None:
    with tempfile.TemporaryDirectory(prefix="warp-lint-bench-") as workdir:
        path = os.path.join(workdir, "bench_kernels.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(MODULE)
        script = os.path.join(workdir, "hand_written.py")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(HAND_WRITTEN)
        rows = []
        lint_cache, hand_cache = os.path.join(workdir, "lint-cache"), os.path.join(workdir, "hand-cache")
        for label in ("cold", "warm"):
            rows.append(("warp-lint --confirm", label, _warp_lint_run(path, lint_cache)))
        for label in ("cold", "warm"):
            rows.append(("warp.autograd.gradcheck", label, _hand_written_run(path, hand_cache, script)))

    print(f"3 flagged kernels, CPU, python {sys.version.split()[0]}")
    print(f"{'method':<24} {'cache':<5} {'total s':>8} {'compile s':>10} {'check s':>8}  verdicts (square / vec-overwrite / loop)")
    for method, label, row in rows:
        verdicts = " / ".join(row["verdicts"][k] for k in FLAGGED)
        print(f"{method:<24} {label:<5} {row['total_s']:>8.2f} {row['compile_s']:>10.2f} {row['check_s']:>8.3f}  {verdicts}")
    print("total includes starting Python and importing warp; compile includes warp-lint's coverage kernels.")


TOLERANCE_MODULE = textwrap.dedent(
    '''
    import warp as wp


    @wp.kernel
    def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = x[i] * x[i]


    @wp.kernel
    def square_in_place(a: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] * a[i]


    @wp.kernel
    def scale_to_output(a: wp.array(dtype=float), x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] * x[i]


    @wp.kernel
    def scale_in_place(a: wp.array(dtype=float), x: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] * x[i]


    @wp.kernel
    def zero_vy_rebuilt(vel: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        v = vel[i]
        out[i] = wp.vec3(v[0], 0.0, v[2])


    @wp.kernel
    def zero_vy(vel: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        v = vel[i]
        v.y = 0.0
        out[i] = v


    @wp.kernel
    def assigned_once(x: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        v = wp.vec3(0.0, 1.0, 2.0)
        t = x[i] * 2.0
        v[0] = t * x[i]
        out[i] = v


    @wp.kernel
    def assigned_twice(x: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        v = wp.vec3(0.0, 1.0, 2.0)
        v[0] = x[i] * 2.0
        v[0] = v[0] * x[i]
        out[i] = v


    @wp.kernel
    def horner_unrolled(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        s = float(0.0)
        for j in range(4):
            s = s * x[j] + x[j]
        out[i] = s


    @wp.kernel
    def horner_dynamic(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
        i = wp.tid()
        s = float(0.0)
        for j in range(n):
            s = s * x[j] + x[j]
        out[i] = s


    @wp.kernel
    def transcendental(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = wp.sin(x[i]) * wp.exp(x[i]) + wp.sqrt(x[i]) / (1.0 + x[i] * x[i])
    '''
)

# (label, correct kernel, hazardous kernel or None, reads, writes of each)
TOLERANCE_CASES = [
    ("y = x*x", ("square", ["x"], ["y"]), None),
    ("a[i] = a[i]*a[i]", ("square", ["x"], ["y"]), ("square_in_place", ["a"], ["a"])),
    ("a[i] = a[i]*x[i]", ("scale_to_output", ["a", "x"], ["out"]), ("scale_in_place", ["a", "x"], ["a"])),
    ("v = vel[i]; v.y = 0", ("zero_vy_rebuilt", ["vel"], ["out"]), ("zero_vy", ["vel"], ["out"])),
    ("v[0]=2x; v[0]=v[0]*x", ("assigned_once", ["x"], ["out"]), ("assigned_twice", ["x"], ["out"])),
    ("s = s*x[j]+x[j], n=4", ("horner_unrolled", ["x"], ["out"]), ("horner_dynamic", ["x"], ["out"])),
    ("sin*exp+sqrt/(1+x^2)", ("transcendental", ["x"], ["y"]), None),
]


def tolerance_table(steps: list[float], draws: int) -> None:
    """Worst |AD - FD| / max(|FD|, 1e-6) over every Jacobian entry, float32, per FD step."""
    import importlib.util

    import numpy as np
    import warp as wp

    from warp_lint.runtime.comparison import LaunchUnderTest, Tolerances, compare_launch
    from warp_lint.runtime.synthesis import Fill, make_arguments, plan_launch

    with tempfile.TemporaryDirectory(prefix="warp-lint-tol-") as workdir:
        wp.config.kernel_cache_dir = os.path.join(workdir, "cache")
        wp.config.quiet = True
        wp.init()
        path = os.path.join(workdir, "tolerance_kernels.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(TOLERANCE_MODULE)
        spec = importlib.util.spec_from_file_location("tolerance_kernels", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        def worst_relative_error(name: str, reads: list[str], writes: list[str], eps: float) -> float:
            kernel = getattr(module, name)
            plan = plan_launch(kernel)
            rng = np.random.default_rng(0)
            worst = 0.0
            for _ in range(draws):
                launch = LaunchUnderTest(kernel, plan.dim, make_arguments(plan, Fill("default"), rng, "cpu"), device="cpu")
                inputs = [n for n in plan.float_arrays if n in reads]
                outputs = [n for n in plan.float_arrays if n in writes]
                result = compare_launch(launch, inputs, outputs, tolerances=Tolerances(eps, 1e-6, 0.0), rng=rng,
                                        nondet_tol=None)
                worst = max([worst, *(p.max_rel_error for p in result.pairs)])
            return worst

        header = f"{'pattern (float32)':<24}" + "".join(f" {'ok eps=' + format(e, 'g'):>14} {'bad eps=' + format(e, 'g'):>14}" for e in steps)
        print(header)
        for label, correct, hazardous in TOLERANCE_CASES:
            cells = []
            for eps in steps:
                cells.append(f"{worst_relative_error(*correct, eps):>14.2g}")
                cells.append(f"{worst_relative_error(*hazardous, eps):>14.2g}" if hazardous else f"{'-':>14}")
            print(f"{label:<24}" + "".join(f" {a} {b}" for a, b in zip(cells[::2], cells[1::2])))
        print(f"worst relative error |AD-FD|/max(|FD|,1e-6) over full Jacobians, {draws} draws, inputs uniform in [0.5, 1.5]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tolerances", action="store_true", help="measure FD error of correct and hazardous kernels")
    parser.add_argument("--draws", type=int, default=3)
    args = parser.parse_args()
    if args.tolerances:
        tolerance_table([1e-2, 1e-3, 1e-4], args.draws)
    else:
        timing_table()


if __name__ == "__main__":
    main()
