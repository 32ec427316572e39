"""Overhead of ``warp-lint trace``: the traced run's wall time against the plain run's.

    python benchmarks/bench_trace.py              # the bundled example project, 3 repetitions
    python benchmarks/bench_trace.py --repeat 5   # more repetitions (the table shows the fastest)
    python benchmarks/bench_trace.py --steps 200  # also a longer rollout script (many launches)

Each row runs one command in a fresh copy of examples/trace_project with one shared Warp kernel
cache that a first plain run warmed (so "plain" is what a user's second run costs):

* plain: the command alone (``python -m pytest -q`` in the project; ``python rollout.py``);
* trace: ``warp-lint trace -- COMMAND`` with the defaults (overwrite tracking on: Warp then
  rebuilds every module it loads, which is most of the cost; gradchecks of flagged launches);
* trace --no-overwrite-tracking: tapes and launches observed, gradchecks, kernel cache used;
* trace --no-gradcheck --no-overwrite-tracking: the wrappers alone.

The static pass of warp-lint itself is included in the trace rows (``--no-cache``).
Plain Python, public tools only (warp, warp_lint).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "trace_project")

ROLLOUT = textwrap.dedent(
    '''
    """Many launches on one tape per step: what the wrappers cost per launch."""
    import sys

    import warp as wp

    import sim

    wp.config.log_level = wp.LOG_WARNING
    steps = int(sys.argv[1])
    for _ in range(steps):
        x, v = sim.make_state(64)
        sim.one_tape_loss(x, v)
    print("done", steps)
    '''
)

VARIANTS = [
    ("plain", None),
    ("trace", []),
    ("trace --no-overwrite-tracking", ["--no-overwrite-tracking"]),
    ("trace --no-gradcheck --no-overwrite-tracking", ["--no-gradcheck", "--no-overwrite-tracking"]),
]


def timed(command: list[str], cwd: str, env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, result.returncode


def measure(name: str, command: list[str], workdir: str, env: dict[str, str], repeat: int) -> list[tuple]:
    """Fastest of ``repeat`` runs per variant; the variants take turns, so drift hits all alike."""
    timed(command, workdir, env)  # warm the kernel cache for the plain run
    best = {label: (float("inf"), None) for label, _ in VARIANTS}
    for _ in range(repeat):
        for label, options in VARIANTS:
            full = command if options is None else [
                sys.executable, "-m", "warp_lint", "trace", "--no-cache", "-q", "-o", os.devnull, *options, "--",
                *command]
            seconds, code = timed(full, workdir, env)
            if seconds < best[label][0]:
                best[label] = (seconds, code)
    return [(name, label, *best[label]) for label, _ in VARIANTS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=0, help="also time a rollout script of this many steps")
    arguments = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-trace-") as root:
        workdir = os.path.join(root, "trace_project")
        shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        env = dict(os.environ, WARP_CACHE_PATH=os.path.join(root, "kernels"))
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        rows = measure("example: pytest (4 tests)", [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"],
                       workdir, env, arguments.repeat)
        if arguments.steps:
            with open(os.path.join(workdir, "rollout.py"), "w", encoding="utf-8") as handle:
                handle.write(ROLLOUT)
            rows += measure(f"rollout.py ({arguments.steps} steps, {2 * arguments.steps} launches)",
                            [sys.executable, "rollout.py", str(arguments.steps)], workdir, env, arguments.repeat)

    import platform

    print(f"warp-lint trace overhead (fastest of {arguments.repeat}; {platform.machine()}, {os.cpu_count()} cores,"
          f" Python {platform.python_version()})")
    print(f"{'command':<34} {'variant':<46} {'wall s':>8} {'x plain':>8} {'exit':>5}")
    plain = {}
    for name, label, seconds, code in rows:
        if label == "plain":
            plain[name] = seconds
        print(f"{name:<34} {label:<46} {seconds:>8.2f} {seconds / plain[name]:>8.2f} {code:>5}")


if __name__ == "__main__":
    main()
