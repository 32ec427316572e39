"""Mutants of real PyTorch interop code: do WL401, WL402 and WL403 find the hazard, and is it real at run time?

    python benchmarks/bench_torch_mutants.py            # sets up the corpus once (benchmarks/realcode.py)

Each mutant is one edit of a public project's file, as installed in the real-code scratch venv,
that turns the project's safe gradient ownership into the hazard a rule names (the safe form is
often written beside it, in a comment or a test). Nothing of these projects is copied into this
repository: the edit is applied to a copy in a temporary folder.

For each mutant the project's package is copied (its `.py` files) and linted twice with
`--select WL401,WL402,WL403`: the original must give no finding of the rule, the mutant must give one
more. Where the project's own test of the edited code runs on the CPU, it runs too, in the
scratch venv (torch 2.13.0 installed there once), and so does a use of it checked against central
differences (two calls in one loss, `.backward()`): on the original everything must pass, and on
the mutant a check must find a wrong gradient (an exception instead is not the silent hazard),
or the hazard is "not observed". Prints one row per mutant and the totals: detected, and shown
at run time. `--keep DIR` leaves the mutated copies and their findings for blind judging; the
verdicts and message reviews are in `judgements/torch_mutants.json` (two judges each).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import realcode  # noqa: E402

CODES = ("WL401", "WL402", "WL403")


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    package: str  # the import package whose files are linted together
    file: str  # relative to the package folder
    rule: str
    edits: tuple[tuple[str, str], ...]  # (text replaced, exactly once in the file; its replacement)
    tests: tuple[str, ...] = ()  # the file's own test functions `f(test, device)` that exercise the edit
    use: str = ""  # a use of the edited code run as `use(module)`: torch's gradient against central differences
    # "flag": the edit makes the hazard; "silent": it looks like it and is not (the rule must stay quiet,
    # and at run time nothing must go wrong)
    expect: str = "flag"

    def applied(self, text: str) -> str:
        for before, after in self.edits:
            if text.count(before) != 1:
                raise SystemExit(f"{self.name}: an edit's text is not in {self.file} exactly once")
            text = text.replace(before, after)
        return text


WARP_TORCH_TESTS = ("test_torch_tape_autograd_gradcheck_reentrant", "test_torch_tape_autograd_reused_grad_outputs")
# The tape-backed square function of warp's tests, used as a model would: two calls, one loss, `.backward()`.
TAPE_SQUARE_USE = "two_calls_one_loss"

MUTANTS = [
    Mutant("warp tests: tape square wraps `x` itself and keeps the gradient", "warp", "tests/interop/test_torch.py",
           "WL401", (("wp.from_torch(x.detach(), dtype=wp_dtype, requires_grad=True)",
                      "wp.from_torch(x, dtype=wp_dtype, requires_grad=True)"),
                     ("                ctx.tape.zero()\n\n            return adj_x", "\n            return adj_x")),
           WARP_TORCH_TESTS, TAPE_SQUARE_USE),
    Mutant("warp tests: tape square wraps `x` itself, then zeroes the tape (a copy returned)", "warp",
           "tests/interop/test_torch.py", "WL401", (("wp.from_torch(x.detach(), dtype=wp_dtype, requires_grad=True)",
                                                    "wp.from_torch(x, dtype=wp_dtype, requires_grad=True)"),),
           WARP_TORCH_TESTS, TAPE_SQUARE_USE, expect="silent"),
    Mutant("warp tests: tape square's output has no gradient of its own", "warp", "tests/interop/test_torch.py",
           "WL402", (("device=x_warp.device, requires_grad=True)", "device=x_warp.device, requires_grad=False)"),),
           WARP_TORCH_TESTS, TAPE_SQUARE_USE),
    Mutant("warp tests: tape square seeds `y.grad` with torch's tensor", "warp", "tests/interop/test_torch.py",
           "WL402", (("ctx.tape.backward(grads={ctx.y_warp: wp_adj_y})",
                      "ctx.y_warp.grad = wp_adj_y\n                ctx.tape.backward()"),),
           WARP_TORCH_TESTS, TAPE_SQUARE_USE),
    Mutant("warp tests: tape square returns a view of the gradient it then zeroes", "warp",
           "tests/interop/test_torch.py", "WL403",
           (("adj_x = wp.to_torch(ctx.x_warp.grad, requires_grad=False).clone()",
             "adj_x = wp.to_torch(ctx.x_warp.grad, requires_grad=False)"),), WARP_TORCH_TESTS, TAPE_SQUARE_USE),
    Mutant("warpsphcore: stateless wrapper returns views of the gradients it then zeroes", "warpSPHCore",
           "autograd/stateLessWarpFunction.py", "WL403",
           (("input_grads.append(grad_torch.clone())", "input_grads.append(grad_torch)"),)),
    Mutant("warpsphcore: stateless wrapper assigns the seed (its comment's alternative)", "warpSPHCore",
           "autograd/stateLessWarpFunction.py", "WL402",
           (("grads[outputs_warp] = castTorchToWarpAsBuiltins(grad_outputs[0].contiguous())",
             "outputs_warp.grad = castTorchToWarpAsBuiltins(grad_outputs[0].contiguous())"),)),
    Mutant("warpsphcore: stateless wrapper wraps the input itself", "warpSPHCore",
           "autograd/stateLessWarpFunction.py", "WL401", (("detached_arg = arg.detach()", "detached_arg = arg"),
                                                           ("ctx.tape.zero()  # Clear", "pass  # Clear"))),
    Mutant("rewarped: assign_adjoints assigns the seed (its commented-out line)", "rewarped", "autograd.py", "WL402",
           (("wp_array.grad.assign(wp.from_torch(adj_tensor, dtype=wp_array.dtype))",
             "wp_array.grad = wp.from_torch(adj_tensor, dtype=wp_array.dtype)"),)),
]

RUN_TESTS = textwrap.dedent("""
    import importlib.util, json, sys, unittest
    import warp as wp
    wp.config.quiet = True
    wp.init()
    spec = importlib.util.spec_from_file_location("mutated_module", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def two_calls_one_loss(module):
        # the loss sums two calls' outputs, so torch hands both backward calls one gradient tensor
        torch = module._import_torch()
        function = module._make_tape_square_function(wp.float64)
        weights = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)

        def loss(a, b):
            return ((function.apply(a) + function.apply(b)) * weights).sum()

        values = [torch.tensor([0.5, 1.5, -2.0], dtype=torch.float64), torch.tensor([1.0, -0.5, 2.5], dtype=torch.float64)]
        inputs = [v.clone().requires_grad_(True) for v in values]
        loss(*inputs).backward()
        step = 1e-4
        for k, value in enumerate(values):
            central = torch.zeros_like(value)
            for i in range(value.numel()):
                plus = [v.clone() for v in values]; minus = [v.clone() for v in values]
                plus[k][i] += step; minus[k][i] -= step
                with torch.no_grad():
                    central[i] = (loss(*plus) - loss(*minus)) / (2 * step)
            got = inputs[k].grad
            assert torch.allclose(got, central, rtol=1e-5, atol=1e-8), f"input {k}: torch {got.tolist()}, central differences {central.tolist()}"

    def outcome(run):
        try:
            run()
            return "pass"
        except Exception as error:
            text = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
            if isinstance(error, AssertionError) or type(error).__name__ == "GradcheckError":
                return "wrong: " + text  # the check itself: a wrong gradient
            return "error: " + text  # an error is not the silent hazard

    use, tests = sys.argv[2], sys.argv[3:]
    results = {name: outcome(lambda: getattr(module, name)(unittest.TestCase(), "cpu")) for name in tests}
    if use:
        results["use"] = outcome(lambda: globals()[use](module))
    print(json.dumps(results))
""")


def copy_package(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=lambda folder, names: [
        n for n in names if not n.endswith(".py") and not (Path(folder) / n).is_dir() or n == "__pycache__"])


def lint(folder: Path) -> list[dict]:
    completed = subprocess.run([sys.executable, "-m", "warp_lint", "check", "--no-cache", "--exit-zero", "--quiet",
                                "--output-format", "json", "--select", ",".join(CODES), "--target-warp-version",
                                "1.19.0", str(folder)], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"warp-lint failed on {folder}:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


def run_tests(python: Path, file: Path, use: str, tests: tuple[str, ...]) -> dict[str, str]:
    completed = subprocess.run([str(python), "-c", RUN_TESTS, str(file), use, *tests], capture_output=True, text=True,
                               env={**os.environ, "WARP_CACHE_PATH": str(file.parent / "warp-cache")})
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {test: "error: " + completed.stderr.strip().splitlines()[-1][:200] for test in tests}
    return json.loads(lines[-1])


def ensure_torch(python: Path) -> None:
    if subprocess.run([str(python), "-c", "import torch"], capture_output=True, check=False).returncode != 0:
        print("installing torch 2.13.0 into the scratch venv ...", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0"], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", metavar="DIR", help="keep the mutated copies in DIR, with their findings in"
                                                       " DIR/findings.json (for judging them blind)")
    args = parser.parse_args(argv)
    python = realcode.ensure_env()
    ensure_torch(python)
    folders = realcode.package_dirs(python, sorted({m.package for m in MUTANTS}))
    flagged = [m for m in MUTANTS if m.expect == "flag"]
    detected = verified = runnable = kept_quiet = 0
    kept_findings = []
    with tempfile.TemporaryDirectory(prefix="warp-lint-torch-mutants-") as temporary:
        scratch = args.keep or temporary
        if args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        for number, mutant in enumerate(MUTANTS):
            source = folders[mutant.package]
            original, mutated = Path(scratch) / f"{number}-original", Path(scratch) / f"{number}-mutant"
            for copy in (original, mutated):
                copy_package(source, copy / mutant.package)
            edited = mutated / mutant.package / mutant.file
            edited.write_text(mutant.applied(edited.read_text()))
            before = [f for f in lint(original) if f["code"] == mutant.rule]
            after = [f for f in lint(mutated) if f["code"] == mutant.rule]
            found = len(after) > len(before)
            if mutant.expect == "flag":
                detected += found
                status = "detected" if found else "missed"
            else:
                kept_quiet += not found
                status = "flagged (wrong)" if found else "silent (right)"
            if before:
                status += f" ({len(before)} on the original)"
            runtime = "-"
            if mutant.tests or mutant.use:
                clean = run_tests(python, original / mutant.package / mutant.file, mutant.use, mutant.tests)
                broken = run_tests(python, edited, mutant.use, mutant.tests)
                # shown: everything passes on the original, and on the mutant a check finds a wrong
                # gradient (an error raised instead is not the silent hazard)
                real = all(v == "pass" for v in clean.values()) and any(v.startswith("wrong") for v in broken.values())
                if mutant.expect == "flag":
                    runnable += 1
                    verified += real
                runtime = "hazard shown" if real else "no wrong gradient"
                runtime += ": " + "; ".join(f"{t.removeprefix('test_torch_tape_autograd_')}: {v}"
                                            for t, v in broken.items())
                if not all(v == "pass" for v in clean.values()):
                    runtime += f" (the original fails: {clean})"
            where = [f"{Path(f['filename']).name}:{f['location']['row']}" for f in after]
            kept_findings += [{"mutant": mutant.name, "file": f["filename"], "row": f["location"]["row"],
                               "code": f["code"], "message": f["message"]} for f in after]
            print(f"- {mutant.name} [{mutant.rule}, expect {mutant.expect}]: {status}; {', '.join(where) or 'no finding'};"
                  f" {runtime}", flush=True)
        if args.keep:
            (Path(scratch) / "findings.json").write_text(json.dumps(kept_findings, indent=1) + "\n")
    print(f"\ndetected {detected} of {len(flagged)} hazardous mutants; {kept_quiet} of {len(MUTANTS) - len(flagged)}"
          f" look-alikes kept silent; hazard shown at run time for {verified} of the {runnable} hazardous ones that run"
          f" on the CPU here (the project's own tests, and a use checked against central differences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
