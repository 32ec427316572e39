"""How fast warp-lint is, against the LibCST parse it is built on, ``ast``, and Fixit.

Run from the repository root after the set-up (``pip install -e .`` into a virtual environment
that also holds warp-lang):

    python benchmarks/bench_lint.py            # the full table: medians of 3 runs (about 30 min)
    python benchmarks/bench_lint.py --quick    # a sanity run on 40 files (about 1 min)
    python benchmarks/bench_lint.py --runs 5 --no-fixit --scale 0

Corpus: the examples and tests shipped in the installed warp-lang package (about 190k lines),
copied into a temporary folder (the default excludes skip ``site-packages``), and a tree ``--scale``
times that size made of renamed copies. Every measurement is its own process tree, started by a
small wrapper that reports its children's CPU time (user + system) and peak RSS from
``getrusage(RUSAGE_CHILDREN)``, and the wall time:

- warp-lint cold: ``--no-cache``, with ``--jobs 1`` and ``--jobs 2``;
- warp-lint warm: a re-run over a cache filled by one cold run (fresh cache folder);
- the floors: LibCST ``parse_module`` and ``ast.parse`` of every file, each in its own process;
- Fixit 2 with one trivial rule (installed into a scratch venv if missing; ``--no-fixit`` skips it);
  on the 1x corpus only, ``--fixit-runs`` times (default 1: one run takes minutes).

Lines per CPU-second count every line of every file. Ratios: warp-lint cold CPU / LibCST parse
CPU (goal <= 1.0), warm / cold CPU (goal <= 0.05), ``--jobs 2`` / ``--jobs 1`` wall (goal <= 0.6 on
two cores; the two run in turn, and the ratio is the median of the pairs' ratios), Fixit CPU /
warp-lint cold CPU. No assertion: the numbers are for reading. Timings on
a shared machine are noisy; the medians and the same-run ratios are what to compare.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXIT_VERSION = "2.2.1"

# Runs a command and prints its children's CPU time, peak RSS and wall time as JSON on stderr's
# last line. A wrapper per measurement, so that RUSAGE_CHILDREN covers exactly one run.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
completed = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write(completed.stderr.decode(errors="replace")[-2000:])
sys.stderr.write("\n" + json.dumps({"rc": completed.returncode, "cpu": usage.ru_utime + usage.ru_stime,
                                    "wall": wall, "rss_kb": usage.ru_maxrss}) + "\n")
"""

# Parses every file under a folder and nothing else: the floor warp-lint is measured against.
_PARSE = r"""
import os, sys
root, kind = sys.argv[1], sys.argv[2]
if kind == "libcst":
    import libcst
    parse = libcst.parse_module
else:
    import ast
    parse = ast.parse
for folder, _, names in os.walk(root):
    for name in names:
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as handle:
                parse(handle.read())
"""

# The trivial Fixit rule: visits every Name and reports nothing.
_FIXIT_RULE = '''
from fixit import LintRule
import libcst


class NoOp(LintRule):
    """Visits every name, reports nothing."""

    VALID = []
    INVALID = []

    def visit_Name(self, node: libcst.Name) -> None:
        pass
'''


def warp_sources() -> list[Path]:
    spec = importlib.util.find_spec("warp")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        sys.exit("warp-lang is not installed in this environment: pip install warp-lang")
    root = Path(list(spec.submodule_search_locations)[0])
    return sorted(p for folder in ("examples", "tests") for p in (root / folder).rglob("*.py"))


def make_tree(files: list[Path], destination: Path, copies: int) -> tuple[int, int]:
    """``copies`` renamed copies of ``files`` under ``destination``; (files, lines)."""
    common = Path(os.path.commonpath([str(f) for f in files]))
    lines = 0
    for copy in range(copies):
        for source in files:
            relative = source.relative_to(common)
            target = destination / f"copy{copy}" / relative.parent / f"{relative.stem}_c{copy}.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            if copy == 0:
                lines += source.read_bytes().count(b"\n")
    return len(files) * copies, lines * copies


def measure(command: list[str], env: dict | None = None, cwd: Path | None = None) -> dict:
    completed = subprocess.run([sys.executable, "-c", _WRAPPER, *command], capture_output=True, text=True, env=env,
                               cwd=cwd)
    *log, last = completed.stderr.rstrip("\n").split("\n")
    result = json.loads(last)
    if result["rc"] not in (0, 1):  # 1: findings
        result["error"] = "\n".join(log)[-600:]
    return result


def median_of(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r] or runs
    return {key: statistics.median(r[key] for r in ok) for key in ("cpu", "wall", "rss_kb")} | {
        "runs": len(ok), "error": next((r["error"] for r in runs if "error" in r), None)}


def fixit_python(venv: Path) -> Path | None:
    """The scratch venv's python with Fixit installed, installing it on first use; None if that fails."""
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if python.exists() and subprocess.run([str(python), "-c", "import fixit"], capture_output=True).returncode == 0:
        return python
    print(f"installing fixit=={FIXIT_VERSION} into {venv} ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"fixit=={FIXIT_VERSION}"], check=True,
                       capture_output=True, text=True)
    except (subprocess.CalledProcessError, OSError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        print(f"Fixit skipped: could not install it ({detail.strip()[-400:]})", flush=True)
        return None
    return python


class Bench:
    def __init__(self, arguments: argparse.Namespace, work: Path):
        self.arguments = arguments
        self.work = work
        self.rows: list[tuple[str, str, dict, int]] = []  # corpus, what, medians, lines
        self.env = dict(os.environ)
        self.env.pop("WARP_LINT_CACHE_DIR", None)

    def run(self, corpus: str, what: str, command: list[str], lines: int, runs: int, env=None, cwd=None,
            before=None) -> dict:
        results = []
        for _ in range(runs):
            if before:
                before()
            results.append(measure(command, env or self.env, cwd))
        return self.record(corpus, what, results, lines)

    def run_pairs(self, corpus: str, first: tuple[str, list[str]], second: tuple[str, list[str]], lines: int,
                  runs: int) -> tuple[dict, dict, float]:
        """Both commands in turn, first then second, ``runs`` times: their medians, and the median
        of the second's wall time over the first's, pair by pair. A shared machine's speed drifts
        over minutes; within a pair both runs see nearly the same machine."""
        pairs = [(measure(first[1], self.env), measure(second[1], self.env)) for _ in range(runs)]
        ratio = statistics.median(b["wall"] / a["wall"] for a, b in pairs)
        return (self.record(corpus, first[0], [a for a, _ in pairs], lines),
                self.record(corpus, second[0], [b for _, b in pairs], lines), ratio)

    def record(self, corpus: str, what: str, results: list[dict], lines: int) -> dict:
        medians = median_of(results)
        self.rows.append((corpus, what, medians, lines))
        cpu = medians["cpu"]
        print(f"  {corpus:<5} {what:<38} cpu {cpu:7.2f} s  wall {medians['wall']:7.2f} s"
              f"  rss {medians['rss_kb'] / 1024:6.0f} MB" + (f"  ERROR: {medians['error']}" if medians["error"] else ""),
              flush=True)
        return medians

    def lint(self, tree: Path, *options: str, env=None) -> list[str]:
        return [sys.executable, "-m", "warp_lint", "check", "--quiet", "--exit-zero", "--output-format", "concise",
                *options, str(tree)]

    def corpus(self, name: str, tree: Path, lines: int, runs: int, fixit: Path | None) -> dict:
        out = {}
        out["parse"] = self.run(name, "LibCST parse_module (floor)",
                                [sys.executable, "-c", _PARSE, str(tree), "libcst"], lines, runs)
        out["ast"] = self.run(name, "ast.parse", [sys.executable, "-c", _PARSE, str(tree), "ast"], lines, runs)
        out["cold1"], out["cold2"], out["jobs_ratio"] = self.run_pairs(
            name, ("warp-lint cold --no-cache --jobs 1", self.lint(tree, "--no-cache", "--jobs", "1")),
            ("warp-lint cold --no-cache --jobs 2", self.lint(tree, "--no-cache", "--jobs", "2")), lines, runs)
        cache = self.work / f"cache-{name}"
        env = dict(self.env, WARP_LINT_CACHE_DIR=str(cache))
        shutil.rmtree(cache, ignore_errors=True)
        out["fill"] = self.run(name, "warp-lint cold, fresh cache --jobs 1", self.lint(tree, "--jobs", "1"), lines, 1,
                               env=env)
        out["warm"] = self.run(name, "warp-lint warm (all cached)", self.lint(tree, "--jobs", "1"), lines, runs, env=env)
        if fixit is not None:
            out["fixit"] = self.run(name, "Fixit 2, one no-op rule", [str(fixit), "-m", "fixit", "--rules",
                                    "bench_noop_rule", "lint", str(tree)], lines, self.arguments.fixit_runs,
                                    env=dict(self.env, PYTHONPATH=str(self.work)), cwd=self.work)
        return out

    def table(self, ratios: list[tuple[str, float | None, str]]) -> str:
        lines = [f"{'corpus':<6} {'measurement':<38} {'CPU s':>8} {'wall s':>8} {'peak RSS MB':>12} {'lines/CPU-s':>12}",
                 "-" * 89]
        for corpus, what, medians, count in self.rows:
            rate = count / medians["cpu"] if medians["cpu"] else 0
            lines.append(f"{corpus:<6} {what:<38} {medians['cpu']:8.2f} {medians['wall']:8.2f}"
                         f" {medians['rss_kb'] / 1024:12.0f} {rate:12,.0f}")
        lines += ["", f"{'ratio':<58} {'value':>8}  goal", "-" * 80]
        for name, value, goal in ratios:
            lines.append(f"{name:<58} {('%.3f' % value) if value is not None else 'n/a':>8}  {goal}")
        return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is shown (default 3)")
    parser.add_argument("--scale", type=int, default=5, help="size of the big tree in copies of the corpus"
                        " (default 5; 0 skips it)")
    parser.add_argument("--quick", action="store_true", help="40 files, one run, no big tree, no Fixit")
    parser.add_argument("--no-fixit", action="store_true", help="skip Fixit")
    parser.add_argument("--fixit-runs", type=int, default=1, help="runs of Fixit (default 1)")
    parser.add_argument("--fixit-venv", type=Path, default=Path(tempfile.gettempdir()) / "warp-lint-bench-fixit",
                        help="scratch venv for Fixit (default: %(default)s)")
    parser.add_argument("--keep", type=Path, help="build the trees in this folder and keep them")
    arguments = parser.parse_args(argv)
    if arguments.quick:
        arguments.runs, arguments.scale, arguments.no_fixit = 1, 0, True

    files = warp_sources()
    if arguments.quick:
        files = files[:: max(1, len(files) // 40)][:40]
    work = arguments.keep or Path(tempfile.mkdtemp(prefix="warp-lint-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        bench = Bench(arguments, work)
        (work / "bench_noop_rule.py").write_text(_FIXIT_RULE)
        fixit = None if arguments.no_fixit else fixit_python(arguments.fixit_venv)
        small = work / "tree-1x"
        shutil.rmtree(small, ignore_errors=True)
        count, lines = make_tree(files, small, 1)
        print(f"corpus 1x: {count} files, {lines:,} lines ({small}); {os.cpu_count()} CPUs,"
              f" python {sys.version.split()[0]}", flush=True)
        results = {"1x": bench.corpus("1x", small, lines, arguments.runs, fixit)}
        if arguments.scale > 1:
            big = work / f"tree-{arguments.scale}x"
            shutil.rmtree(big, ignore_errors=True)
            count, big_lines = make_tree(files, big, arguments.scale)
            print(f"corpus {arguments.scale}x: {count} files, {big_lines:,} lines", flush=True)
            results[f"{arguments.scale}x"] = bench.corpus(f"{arguments.scale}x", big, big_lines, arguments.runs, None)

        ratios = []
        for name, out in results.items():
            ratios += [
                (f"{name}: warp-lint cold CPU (--jobs 1) / LibCST parse CPU", out["cold1"]["cpu"] / out["parse"]["cpu"],
                 "<= 1.0"),
                (f"{name}: warp-lint warm CPU / cold CPU (fresh cache)", out["warm"]["cpu"] / out["fill"]["cpu"],
                 "<= 0.05"),
                (f"{name}: wall --jobs 2 / --jobs 1 (median of pairs)", out["jobs_ratio"], "<= 0.6 (2 cores)"),
                (f"{name}: LibCST parse CPU / ast.parse CPU", out["parse"]["cpu"] / out["ast"]["cpu"], "(context)"),
            ]
            if "fixit" in out and not out["fixit"]["error"]:
                ratios.append((f"{name}: Fixit (one no-op rule) CPU / warp-lint cold CPU",
                               out["fixit"]["cpu"] / out["cold1"]["cpu"], ">= 6"))
        if len(results) > 1:
            one, big = results["1x"], results[f"{arguments.scale}x"]
            ratios.append((f"peak RSS, --jobs 1 cold: {arguments.scale}x / 1x", big["cold1"]["rss_kb"] / one["cold1"]["rss_kb"],
                           "~1 (bounded)"))
        print()
        print(bench.table(ratios))
    finally:
        if not arguments.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
