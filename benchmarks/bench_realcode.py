"""warp-lint on public Warp projects: findings per rule, before and after, and judged precision.

    python benchmarks/bench_realcode.py                         # counts and timings (sets up the corpus once)
    python benchmarks/bench_realcode.py --baseline 'OTHER'      # ... against another warp-lint ("before")
    python benchmarks/bench_realcode.py --sample 60 --seed 21   # a seeded sample to judge, with context
    python benchmarks/bench_realcode.py --sample 60 --seed 21 --judgements benchmarks/judgements/realcode.json

The corpus is ``benchmarks/realcode.py``'s: warp-lang's examples and tests, newton and
mujoco-warp, installed from the package index into a scratch venv (never copied here). Each
project is linted as a whole (``check --no-cache``), for the Warp version installed there.

A judgement file maps a finding's key (``project:path:line:code``, paths relative to the project)
to ``{"verdict": "true" | "false" | "debatable", "why": "..."}``: would the gradient really be wrong
in a program that differentiates this code, on that Warp version? Precision is true / (true +
false); debatable ones are counted apart. The sample is the findings whose keys hash lowest under
the seed: the same code and seed give the same sample, a judgement file keeps its meaning, and a
change that removes or adds findings leaves the rest of the sample where it was.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import realcode  # noqa: E402

CONTEXT_LINES = 3


def lint(command: list[str], project: realcode.Project, target: str, extra: list[str]) -> tuple[list[dict], float]:
    start = time.perf_counter()
    completed = subprocess.run([*command, "check", "--no-cache", "--exit-zero", "--output-format", "json",
                                "--target-warp-version", target, *extra, str(project.root)],
                               capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"warp-lint failed on {project.name}:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout), elapsed


def consistent_sample(findings: list[tuple[realcode.Project, dict]], size: int, seed: int
                      ) -> list[tuple[realcode.Project, dict]]:
    """The ``size`` findings whose keys hash lowest under ``seed``: a uniform random sample in which
    a finding, once drawn, stays drawn while it is reported (another change adds or removes others
    without reshuffling the rest), so judgements accumulate instead of starting over."""
    def rank(item: tuple[realcode.Project, dict]) -> bytes:
        return hashlib.blake2b(f"{seed}:{key_of(*item)}".encode(), digest_size=8).digest()

    return sorted(findings, key=rank)[:size]


def key_of(project: realcode.Project, finding: dict) -> str:
    relative = Path(finding["filename"]).resolve().relative_to(project.root.resolve()).as_posix()
    return f"{project.name}:{relative}:{finding['location']['row']}:{finding['code']}"


def counts_table(runs: dict[str, dict[str, list[dict]]], codes: list[str]) -> str:
    labels = list(runs)
    lines = ["| rule | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for code in codes:
        cells = [str(sum(1 for findings in runs[label].values() for f in findings if f["code"] == code))
                 for label in labels]
        lines.append(f"| {code} | " + " | ".join(cells) + " |")
    lines.append("| total | " + " | ".join(str(sum(len(f) for f in runs[label].values())) for label in labels) + " |")
    return "\n".join(lines)


def show(project: realcode.Project, finding: dict) -> str:
    path = Path(finding["filename"])
    row = finding["location"]["row"]
    lines = path.read_text(errors="replace").splitlines()
    first, last = max(1, row - CONTEXT_LINES), min(len(lines), row + CONTEXT_LINES)
    body = "\n".join(f"{'>' if n == row else ' '} {n:5d} | {lines[n - 1]}" for n in range(first, last + 1))
    related = "".join(f"\n    note: {r['message']} ({Path(r['filename']).name}:{r['location']['row']})"
                      for r in finding.get("related", []))
    context = finding.get("differentiation_context")
    where = f"\n    context: {context['state']}: {context['reason']}" if context else ""
    return f"{key_of(project, finding)}\n    {finding['message']}{where}{related}\n{body}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warp-lint", default=f"{shlex.quote(sys.executable)} -m warp_lint",
                        help="the warp-lint to measure (default: this checkout's, through this Python)")
    parser.add_argument("--baseline", help="another warp-lint command to compare with (\"before\")")
    parser.add_argument("--sample", type=int, default=0, help="draw this many findings to judge")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--judgements", type=Path, help="a judgement file for the sample (see above)")
    parser.add_argument("--project", action="append", help="only these projects (by name)")
    parser.add_argument("--report-forward-only", action="store_true", help="also count forward-only findings")
    parser.add_argument("--save", type=Path, help="write every finding (after) to this JSON file")
    args = parser.parse_args(argv)

    python = realcode.ensure_env()
    versions = realcode.installed_versions(python)
    target = f"=={versions['warp-lang']}"
    projects = [p for p in realcode.projects(python) if not args.project or p.name in args.project]
    commands = {"after": shlex.split(args.warp_lint)}
    if args.baseline:
        commands = {"before": shlex.split(args.baseline), **commands}
    extra = ["--report-forward-only"] if args.report_forward_only else []
    runs: dict[str, dict[str, list[dict]]] = {label: {} for label in commands}
    print(f"corpus: {', '.join(f'{k} {v}' for k, v in versions.items())}; target {target}")
    for project in projects:
        for label, command in commands.items():
            findings, elapsed = lint(command, project, target, extra if label == "after" else [])
            runs[label][project.name] = findings
            print(f"{project.name:<20} {label:<7} {len(findings):5d} findings  {elapsed:7.1f} s")
    codes = sorted({f["code"] for run in runs.values() for findings in run.values() for f in findings})
    print()
    print(counts_table(runs, codes))
    after = [(project, f) for project in projects for f in runs["after"][project.name]]
    if args.save:
        args.save.write_text(json.dumps([{"key": key_of(p, f), **f} for p, f in after], indent=1))
    if args.sample:
        sample = consistent_sample(after, args.sample, args.seed)
        judgements = json.loads(args.judgements.read_text()) if args.judgements and args.judgements.exists() else {}
        verdicts = collections.Counter()
        unjudged = []
        print(f"\nsample of {len(sample)} (seed {args.seed}):\n")
        for project, finding in sample:
            key = key_of(project, finding)
            judged = judgements.get(key)
            if judged is None:
                unjudged.append((project, finding))
                continue
            verdicts[judged["verdict"]] += 1
            print(f"[{judged['verdict']}] {key}: {judged['why']}")
        for project, finding in unjudged:
            print("\n[unjudged] " + show(project, finding))
        decided = verdicts["true"] + verdicts["false"]
        if decided:
            print(f"\njudged: {verdicts['true']} true, {verdicts['false']} false, {verdicts['debatable']} debatable,"
                  f" {len(unjudged)} unjudged; precision {verdicts['true'] / decided:.1%} ({verdicts['true']}/{decided})")
        reported = {key_of(p, f) for p, f in after}
        kept = collections.Counter(v["verdict"] for k, v in judgements.items() if k in reported)
        gone = collections.Counter(v["verdict"] for k, v in judgements.items() if k not in reported)
        if kept["true"] + kept["false"]:
            print(f"every judged finding still reported: {kept['true']} true, {kept['false']} false,"
                  f" {kept['debatable']} debatable; precision {kept['true'] / (kept['true'] + kept['false']):.1%};"
                  f" judged and no longer reported: {dict(gone)} (true ones lost: {gone['true']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
