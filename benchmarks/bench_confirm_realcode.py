"""Runtime verdicts on real packages: ``--confirm`` over the real-code corpus, cold and warm.

    python benchmarks/bench_confirm_realcode.py                     # a seeded sample of files
    python benchmarks/bench_confirm_realcode.py --files 0           # every file with kernel findings
    python benchmarks/bench_confirm_realcode.py --verdicts out.json --warm
    python benchmarks/bench_confirm_realcode.py --only /newton/_src/geometry/mpr.py    # chosen files (repeatable)

The corpus is :mod:`realcode`'s (warp-lang's examples and tests, newton, mujoco-warp, installed into
a scratch venv). The static pass runs here; the experiments run in the scratch venv's Python (the
``python`` argument of ``confirm_findings``), where the projects import. Every file's findings are
confirmed in one call, timed, first with an empty kernel cache (cold) and, with ``--warm``, again
with the same cache. Printed: the fraction of kernel findings decided (confirmed or cleared), the
wall time per file, and the reasons of what stays inconclusive; the verdicts (with their
evidence) go to the ``--verdicts`` JSON file, which ``judge_realcode.py``-style independent checks
read; it is written after every file of the cold pass too, so a run stopped part-way keeps what it
finished (several processes, each with its own ``--only`` files and ``--verdicts``, split a run).
Progress goes to stderr, and only on a terminal.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realcode  # noqa: E402

from warp_lint.cli import build_parser, lint_paths  # noqa: E402
from warp_lint.runtime import confirm_findings  # noqa: E402


def kernel_findings(python: Path) -> dict[str, list]:
    """File -> its findings that name a kernel and declare a runtime strategy (the static pass)."""
    by_file: dict[str, list] = {}
    for project in realcode.projects(python):
        arguments = build_parser().parse_args(["check", "--no-cache", "--exit-zero", "--target-warp-version",
                                               f"=={realcode.PINS['warp-lang']}", str(project.root)])
        _, _, results, _, _, _ = lint_paths(arguments, [project.root], False)
        for result in results:
            chosen = [f for f in result.findings
                      if f.code.startswith("WL1") and f.data.get("strategy") and f.data.get("kernel")]
            if chosen:
                by_file[str(result.path)] = chosen
    return by_file


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[2K" + message[:150])
        sys.stderr.flush()


def run(files: dict[str, list], python: Path, device: str, cache: str, timeout: float,
        label: str, after_each=None) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for number, (path, findings) in enumerate(sorted(files.items()), start=1):
        for finding in findings:
            finding.confirmation = None
        _progress(f"[{label}] {number}/{len(files)} {os.path.basename(path)} ({len(findings)} findings)")
        started = time.perf_counter()
        confirm_findings(findings, device=device, timeout=timeout, cache_dir=cache, python=str(python))
        seconds[path] = time.perf_counter() - started
        if after_each:
            after_each(seconds)
    _progress("")
    return seconds


def summary(files: dict[str, list]) -> dict:
    verdicts = [f.confirmation for fs in files.values() for f in fs]
    statuses = collections.Counter(v.status for v in verdicts)
    reasons = collections.Counter(v.evidence.get("reason_code", v.reason.split(":")[0]) for v in verdicts
                                  if v.status == "inconclusive")
    by_code = collections.defaultdict(collections.Counter)
    for fs in files.values():
        for f in fs:
            by_code[f.code][f.confirmation.status] += 1
    decided = statuses["confirmed"] + statuses["cleared"]
    return {"findings": len(verdicts), "files": len(files), "statuses": dict(statuses), "decided": decided,
            "decided_fraction": decided / max(len(verdicts), 1), "inconclusive_reasons": dict(reasons.most_common()),
            "by_rule": {code: dict(counts) for code, counts in sorted(by_code.items())}}


def _times(seconds: dict[str, float]) -> dict:
    values = sorted(seconds.values())
    return {"median_s": statistics.median(values), "mean_s": statistics.mean(values), "max_s": values[-1],
            "total_s": sum(values)}


def write_verdicts(target: Path, files: dict[str, list], site: str, versions: dict, arguments,
                   result: dict, cold: dict[str, float], warm: dict[str, float] | None) -> None:
    document = {
        "versions": versions, "device": arguments.device, "seed": arguments.seed, "sampled_files": len(files),
        "summary": result,
        "time_per_file": {"cold": _times(cold), **({"warm": _times(warm)} if warm else {})},
        "files": [
            {"path": os.path.relpath(path, site), "cold_s": round(cold[path], 2),
             **({"warm_s": round(warm[path], 2)} if warm else {}),
             "findings": [{"code": f.code, "line": f.start.line, "kernel": f.data.get("kernel"),
                           "function_kind": f.data.get("function_kind"), "message": f.message,
                           "confirmation": f.confirmation.to_dict()} for f in fs]}
            for path, fs in sorted(files.items())
        ],
    }
    target.write_text(json.dumps(document, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=40, help="files sampled (seeded); 0: every file (default 40)")
    parser.add_argument("--seed", type=int, default=15, help="sampling seed (default 15)")
    parser.add_argument("--only", action="append", metavar="PATH_END",
                        help="only the corpus files whose path ends with this (repeatable; replaces the sample), "
                             "e.g. to split a run over several processes")
    parser.add_argument("--timeout", type=float, default=120.0, help="per-phase time limit of an experiment")
    parser.add_argument("--warm", action="store_true", help="run a second time with the same kernel cache")
    parser.add_argument("--cache", type=Path, help="kernel cache folder (default: a fresh temporary one)")
    parser.add_argument("--static", type=Path, help="keep the static pass's findings in this pickle and reuse them")
    parser.add_argument("--verdicts", type=Path, default=Path("confirm-realcode-verdicts.json"),
                        help="where the verdicts go (JSON)")
    parser.add_argument("--device", default="cpu", help="Warp device the experiments run on (default cpu)")
    parser.add_argument("--python", type=Path,
                        help="an interpreter where the projects import (default: the scratch venv, created once); "
                             "the corpus is whichever of them it has")
    arguments = parser.parse_args(argv)

    python = arguments.python or realcode.ensure_env()
    versions = realcode.installed_versions(python)
    if arguments.static and arguments.static.exists():
        everything = pickle.loads(arguments.static.read_bytes())
    else:
        everything = kernel_findings(python)
        if arguments.static:
            arguments.static.write_bytes(pickle.dumps(everything))
    names = sorted(everything)
    if arguments.only:
        names = [name for name in names if name.endswith(tuple(arguments.only))]
    elif arguments.files:
        names = sorted(random.Random(arguments.seed).sample(names, min(arguments.files, len(names))))
    files = {name: everything[name] for name in names}
    print(f"corpus: {', '.join(f'{k} {v}' for k, v in versions.items() if v)}; {len(everything)} files with "
          f"{sum(map(len, everything.values()))} kernel findings; sampled {len(files)} files "
          f"({sum(map(len, files.values()))} findings, seed {arguments.seed})")

    packages = realcode.package_dirs(python, sorted({p.package for p in realcode.projects(python)}))
    site = os.path.commonpath([str(folder.parent) for folder in packages.values()])

    def checkpoint(cold_so_far: dict[str, float]) -> None:
        """The verdicts so far, so that a run stopped part-way keeps the files it finished."""
        done = {name: files[name] for name in cold_so_far}
        write_verdicts(arguments.verdicts, done, site, versions, arguments, summary(done), cold_so_far, None)

    cache = str(arguments.cache) if arguments.cache else tempfile.mkdtemp(prefix="warp-lint-bench-confirm-")
    if not arguments.cache:
        shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache, exist_ok=True)
    try:
        cold = run(files, python, arguments.device, cache, arguments.timeout, "cold", checkpoint)
        result = summary(files)
        warm = run(files, python, arguments.device, cache, arguments.timeout, "warm") if arguments.warm else None
    finally:
        if not arguments.cache:  # a cache folder named by the user is theirs to keep
            shutil.rmtree(cache, ignore_errors=True)
    if warm is not None:
        warm_result = summary(files)
        result["warm_same_verdicts"] = warm_result["statuses"] == result["statuses"]

    write_verdicts(arguments.verdicts, files, site, versions, arguments, result, cold, warm)

    print(f"kernel findings decided: {result['decided']}/{result['findings']} = {result['decided_fraction']:.0%}"
          f"  {result['statuses']}")
    for label, seconds in (("cold", cold), ("warm", warm)):
        if seconds:
            t = _times(seconds)
            print(f"time per file ({label}): median {t['median_s']:.1f} s, mean {t['mean_s']:.1f} s, "
                  f"max {t['max_s']:.1f} s, total {t['total_s']:.0f} s")
    if warm is not None:
        print(f"warm verdicts identical to cold: {result['warm_same_verdicts']}")
    print("inconclusive, by reason:")
    for reason, count in result["inconclusive_reasons"].items():
        print(f"  {count:4d}  {reason}")
    print("by rule:", json.dumps(result["by_rule"]))
    print(f"verdicts: {arguments.verdicts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
