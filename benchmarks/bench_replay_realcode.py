"""Host findings replayed on real packages: how many WL201/WL211 findings carry a launch plan, and what it gives.

    python benchmarks/bench_replay_realcode.py [--out replay-realcode.json]

The corpus is :mod:`realcode`'s (warp-lang's examples and tests, newton, mujoco-warp, installed into a
scratch venv). The static pass runs here; every finding with a plan is confirmed with the scratch
venv's Python, where the projects import. Printed: findings with and without a plan (the reasons
why not, counted), and the verdicts of the replays (status and reason code, counted).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realcode  # noqa: E402

from warp_lint.cli import build_parser, lint_paths  # noqa: E402
from warp_lint.runtime import confirm_findings  # noqa: E402

CODES = "WL201,WL211"


def host_findings(python: Path) -> list:
    found = []
    for project in realcode.projects(python):
        arguments = build_parser().parse_args(["check", "--no-cache", "--exit-zero", "--select", CODES,
                                               "--target-warp-version", f"=={realcode.PINS['warp-lang']}",
                                               str(project.root)])
        _, _, results, _, _, _ = lint_paths(arguments, [project.root], False)
        found += [f for result in results for f in result.findings]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("replay-realcode.json"))
    arguments = parser.parse_args(argv)
    python = realcode.ensure_env()
    site = str(realcode.site_packages(python))
    findings = host_findings(python)
    planned = [f for f in findings if f.data.get("replay_plan")]
    why_not = collections.Counter(str(f.data.get("replay_unplannable", "no plan")).split(":")[0].split("`")[0].strip()
                                  for f in findings if not f.data.get("replay_plan"))
    print(f"{len(findings)} host findings ({CODES}); {len(planned)} with a launch plan")
    for reason, count in why_not.most_common():
        print(f"  {count:4d}  no plan: {reason}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="warp-lint-replay-") as cache:
        confirm_findings(planned, timeout=arguments.timeout, cache_dir=cache, python=str(python))
    seconds = time.perf_counter() - started
    verdicts = collections.Counter((f.confirmation.status, f.confirmation.reason.split(":")[0]) for f in planned)
    print(f"replayed {len(planned)} in {seconds:.0f} s:")
    for (status, reason), count in verdicts.most_common():
        print(f"  {count:4d}  {status}: {reason}")
    arguments.out.write_text(json.dumps([
        {"path": os.path.relpath(f.path, site), "line": f.start.line, "code": f.code, "message": f.message,
         "unplannable": f.data.get("replay_unplannable"),
         "confirmation": f.confirmation.to_dict() if f.confirmation else None}
        for f in findings], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
