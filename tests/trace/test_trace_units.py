"""Parent-side pieces of ``warp-lint trace`` on hand-made events: no process, no warp."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from trace_helpers import REPO

from warp_lint.finding import Finding, Position
from warp_lint.trace.bootstrap import SITECUSTOMIZE
from warp_lint.trace.matching import RunFacts, judge, runtime_problems
from warp_lint.trace.session import Session, TraceLimits

CONFIG = {"gradcheck": True}


def _finding(path, code, line, **data) -> Finding:
    return Finding(code=code, name=code.lower(), message="m", path=str(path), start=Position(line, 5),
                   end=Position(line, 30), data=data)


def _site(path, line):
    return {"file": os.path.realpath(path), "line": line, "function": "f"}


def _events(path):
    w = {"kernel": "step", "param": "x_out", "site": _site(path, 10), "tape": 1}
    r = {"kernel": "loss", "param": "x", "site": _site(path, 12), "tape": 2}
    return [
        {"event": "start", "pid": 1, "seq": 1, "warp_version": "1.19.0", "tracking": True},
        {"event": "crossing", "pid": 1, "seq": 2, "writer": w, "reader": r, "array": {}},
        {"event": "backward", "pid": 1, "seq": 3, "tape": 2, "site": _site(path, 13), "count": 1, "accumulated": []},
    ]


def test_crossing_is_harmful_only_without_the_first_tapes_backward(tmp_path):
    path = tmp_path / "sim.py"
    path.write_text("\n" * 20)
    facts = RunFacts.from_events(_events(path))
    wl202 = _finding(path, "WL202", 13)
    assert judge(wl202, facts, CONFIG).status == "confirmed"

    carried = _events(path) + [{"event": "backward", "pid": 1, "seq": 4, "tape": 1, "site": _site(path, 14),
                                "count": 1, "accumulated": []}]
    facts = RunFacts.from_events(carried)
    assert judge(wl202, facts, CONFIG).status == "cleared"  # tape1.backward() carried the gradient on
    assert runtime_problems([wl202], facts, CONFIG, {}) == []


def test_unpredicted_crossing_becomes_a_runtime_only_problem(tmp_path):
    path = tmp_path / "sim.py"
    path.write_text("\n" * 12 + "    loss_tape.backward(loss)\n")
    facts = RunFacts.from_events(_events(path))
    (problem,) = runtime_problems([], facts, CONFIG, {})
    assert problem.code == "WR202" and problem.start == Position(13, 5)
    assert problem.confirmation.status == "confirmed"


def test_kernel_finding_verdicts(tmp_path):
    path = tmp_path / "k.py"
    path.write_text("\n" * 20)
    real = os.path.realpath(path)
    finding = _finding(path, "WL104", 7, kernel="k", function_kind="kernel", flagged_lines=[7, 7])
    launch = {"event": "launch", "pid": 1, "seq": 2, "file": real, "kernel": "k", "site": _site(path, 15),
              "recorded": True, "tape": 1}
    assert judge(finding, RunFacts.from_events([]), CONFIG).status == "not_exercised"
    facts = RunFacts.from_events([launch])
    verdict = judge(finding, facts, CONFIG)
    assert verdict.status == "not_exercised" and "not-differentiated" in verdict.reason  # launched, never differentiated

    def check(status, hits):
        pair = {"input": "x", "output": "y", "status": status, "criterion": "c", "max_abs_error": 1.0,
                "max_rel_error": 0.5}
        return {"event": "gradcheck", "pid": 1, "seq": 3, "file": real, "kernel": "k", "site": _site(path, 15),
                "status": status, "hits": {"7": hits}, "result": {"pairs": [pair]}, "table": "t"}

    assert judge(finding, RunFacts.from_events([launch, check("fail", 4)]), CONFIG).status == "confirmed"
    assert judge(finding, RunFacts.from_events([launch, check("pass", 4)]), CONFIG).status == "cleared"
    unexecuted = judge(finding, RunFacts.from_events([launch, check("fail", 0)]), CONFIG)
    assert unexecuted.status == "inconclusive" and unexecuted.reason.startswith("not-executed")


def test_sitecustomize_chains_to_the_one_it_shadows(tmp_path):
    """The session's sitecustomize runs first, then the one that was on the path already."""
    original = tmp_path / "site_original"
    original.mkdir()
    (original / "sitecustomize.py").write_text("import os\nos.environ['ORIGINAL_SITECUSTOMIZE'] = 'ran'\n")
    session = Session({}, [], TraceLimits())
    try:
        env = session.environment(dict(os.environ, PYTHONPATH=str(original)))
        env["PYTHONPATH"] += os.pathsep + str(REPO)
        probe = textwrap.dedent("""
            import os, sys
            print(os.environ.get('ORIGINAL_SITECUSTOMIZE'), any(type(f).__name__ == '_WarpImportHook' for f in sys.meta_path))
        """)
        result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert result.stdout.split() == ["ran", "True"], result.stderr
    finally:
        session.close()
    assert "bootstrap.install()" in SITECUSTOMIZE


def test_every_output_format_renders_verdicts_and_runtime_only_problems(tmp_path):
    import io

    from warp_lint.output import RunReport, renderers
    from warp_lint.registry import all_rules

    path = tmp_path / "sim.py"
    path.write_text("\n" * 12 + "    loss_tape.backward(loss)\n")
    facts = RunFacts.from_events(_events(path))
    finding = _finding(path, "WL201", 10)
    finding.confirmation = judge(finding, facts, CONFIG)
    problems = runtime_problems([], facts, CONFIG, {})
    report = RunReport(findings=[finding, *problems], sources={}, files_checked=1, root=str(tmp_path),
                       rules=all_rules())
    for name, render in renderers().items():
        stream = io.StringIO()
        render(report, stream)
        assert "WR202" in stream.getvalue(), name
