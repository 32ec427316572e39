"""``warp-lint trace [options] -- COMMAND ...``: the face of the tracer.

1. The static pass lints ``--paths`` (default: the current directory), as ``check`` would.
2. The kernels carrying a finding with a ``gradcheck`` strategy, and the linted files, go to the
   session's config; the command runs with the session's ``sitecustomize`` on ``PYTHONPATH``.
3. The events are matched to the findings of the files the run touched (:mod:`.matching`).
4. The report goes to stderr (or ``--output-file``) in any ``check`` output format, so the
   command's stdout stays exactly its own; ``--report FILE`` writes the JSON report. The exit
   status is the command's.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from warp_lint.options import add_context_options
from warp_lint.trace.matching import judge, runtime_problems, summarize
from warp_lint.trace.session import (
    EXIT_COMMAND_NOT_FOUND,
    CommandNotFound,
    Session,
    TraceLimits,
)

EPILOG = """\
exit status: the command's own (127 when it cannot be started; 2 for a usage error).

examples:
  warp-lint trace -- pytest tests/            trace a test run
  warp-lint trace --report trace.json -- python train.py
  warp-lint trace --output-format github -- pytest -x
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the command to run (after --), e.g. -- pytest tests/")
    trace = parser.add_argument_group("trace")
    trace.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report to FILE")
    trace.add_argument("--paths", type=Path, action="append", metavar="PATH",
                       help="files or directories whose findings are traced (repeatable; default: .)")
    trace.add_argument("--max-checks-per-kernel", type=int, default=3, metavar="N",
                       help="gradchecks of real launches per flagged kernel and process (default 3)")
    trace.add_argument("--full-jacobian-limit", type=int, default=256, metavar="N",
                       help="arrays above N scalars get the directional test only (fast mode; default 256)")
    trace.add_argument("--fast-mode", action="store_true", help="directional test only, whatever the sizes")
    trace.add_argument("--no-gradcheck", action="store_true", help="observe tapes only; no gradchecks")
    trace.add_argument("--no-overwrite-tracking", action="store_true",
                       help="leave wp.config.verify_autograd_array_access off (it makes Warp rebuild modules)")
    trace.add_argument("--keep-session", action="store_true", help="keep the session directory (events) and print it")
    selection = parser.add_argument_group("rule selection")
    selection.add_argument("--select", type=_codes, help="comma-separated codes or prefixes to enable")
    selection.add_argument("--extend-select", type=_codes, default=[], help="codes to enable on top of --select")
    selection.add_argument("--ignore", type=_codes, default=[], help="codes or prefixes to disable")
    selection.add_argument("--target-warp-version", metavar="SPEC", help="Warp versions to check for (PEP 440)")
    selection.add_argument("--config", type=Path, help="a pyproject.toml to use instead of discovering one")
    selection.add_argument("--exclude", type=_codes, help="glob patterns to exclude (replaces the defaults)")
    selection.add_argument("--extend-exclude", type=_codes, default=[], help="glob patterns to exclude as well")
    output = parser.add_argument_group("output")
    output.add_argument("--output-format", default=None,
                        help="text, concise, json, github, sarif, gitlab, junit (default: text)")
    output.add_argument("--output-file", "-o", type=Path, help="write the report there instead of stderr")
    output.add_argument("--statistics", action="store_true", help="count findings per rule")
    output.add_argument("--quiet", "-q", action="store_true", help="no summary line")
    output.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    output.add_argument("--no-cache", action="store_true", help="neither read nor write the results cache")
    # A run may differentiate what the static pass found no recording of: trace can look at those too.
    add_context_options(output)
    parser.set_defaults(force_exclude=False, report_unused_noqa=False, jobs=None, fix=False, unsafe_fixes=False,
                        diff=False, exit_zero=False)


def _codes(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _static_pass(arguments: argparse.Namespace, paths: list[Path]):
    from warp_lint.options import lint_paths

    _, files, results, warnings, internal_errors, _ = lint_paths(arguments, paths, force_exclude=False)
    return files, results, warnings + internal_errors


def kernel_plan(findings) -> dict[str, dict[str, Any]]:
    """Flagged kernels for the traced process: realpath -> kernel name -> findings, reads, writes."""
    from warp_lint.runtime.verdicts import strategies_of

    plan: dict[str, dict[str, Any]] = {}

    def flag(path: str, kernel: str, code: str, line: int) -> dict[str, Any]:
        entry = plan.setdefault(path, {}).setdefault(kernel, {"findings": [], "reads": [], "writes": []})
        entry["findings"].append({"code": code, "line": line})
        return entry

    for finding in findings:
        data = finding.data
        if finding.code.startswith("WL2") or data.get("host") or not data.get("kernel"):
            continue
        if "gradcheck" not in strategies_of(data):
            continue
        if data.get("function_kind", "kernel") != "kernel":
            # A helper's code runs in the kernels that call it: check their launches where the call ran.
            data["traced_through"] = _call_sites(data.get("calling_kernels") or ())
            for site in data["traced_through"]:
                flag(site["path"], site["kernel"], finding.code, site["line"])
            continue
        flagged = data.get("flagged_lines") or [finding.start.line]
        entry = flag(os.path.realpath(finding.path), data["kernel"], finding.code, int(flagged[0]))
        entry["reads"] = sorted(set(entry["reads"]) | set(data.get("reads") or ()))
        entry["writes"] = sorted(set(entry["writes"]) | set(data.get("writes") or ()))
    return plan


def _call_sites(calling_kernels) -> list[dict[str, Any]]:
    """For each kernel that runs a helper (the static pass's ``calling_kernels``: its file, its
    name, the name its body calls), the first line of its body that makes that call."""
    sites, trees = [], {}
    for caller in calling_kernels:
        path = os.path.realpath(caller["path"])
        if path not in trees:
            try:
                with open(path, "rb") as handle:
                    trees[path] = ast.parse(handle.read())
            except (OSError, SyntaxError, ValueError):
                trees[path] = None
        kernel = next((node for node in ast.walk(trees[path]) if isinstance(node, ast.FunctionDef)
                       and node.name == caller["kernel"]), None) if trees[path] is not None else None
        lines = sorted(node.lineno for node in ast.walk(kernel) if isinstance(node, ast.Call)
                       and _called_name(node.func) == caller["calls"]) if kernel is not None else []
        if lines:
            sites.append({"path": path, "kernel": caller["kernel"], "line": lines[0]})
    return sites


def _called_name(func) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Call):  # `wp.static(helper)(...)`
        return _called_name(func.args[0]) if func.args else None
    return None


def run_trace(arguments: argparse.Namespace) -> int:
    from warp_lint.options import UsageError, chosen_format, use_color, validate
    from warp_lint.output import RunReport, renderers
    from warp_lint.output.json_format import finding_to_json
    from warp_lint.registry import all_rules

    command = list(arguments.argv or [])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("trace needs a command after --, e.g. warp-lint trace -- pytest tests/")
    for name, value in (("--max-checks-per-kernel", arguments.max_checks_per_kernel),
                        ("--full-jacobian-limit", arguments.full_jacobian_limit)):
        if value < 0:
            raise UsageError(f"{name} must not be negative")
    validate(arguments)
    output_format = chosen_format(arguments)

    paths = arguments.paths or [Path(".")]
    files, results, warnings = _static_pass(arguments, paths)
    findings = sorted((f for r in results for f in r.findings if not f.code.startswith("E")),
                      key=lambda f: f.sort_key())
    limits = TraceLimits(
        max_checks_per_kernel=arguments.max_checks_per_kernel, full_jacobian_limit=arguments.full_jacobian_limit,
        fast_mode=arguments.fast_mode, gradcheck=not arguments.no_gradcheck,
        overwrite_tracking=not arguments.no_overwrite_tracking)
    session = Session(kernel_plan(findings), sorted({os.path.realpath(p) for p in files}), limits,
                      keep=arguments.keep_session)
    started = time.perf_counter()
    try:
        try:
            exit_code = session.run(command)
        except CommandNotFound as error:
            sys.stderr.write(f"warp-lint: error: cannot run {error}\n")
            return EXIT_COMMAND_NOT_FOUND
        duration = time.perf_counter() - started
        events = session.events()
    finally:
        session.close()

    from warp_lint.trace.matching import RunFacts

    facts = RunFacts.from_events(events)
    config = {"max_checks_per_kernel": limits.max_checks_per_kernel, "full_jacobian_limit": limits.full_jacobian_limit,
              "fast_mode": limits.fast_mode, "gradcheck": limits.gradcheck,
              "verify_autograd_array_access": facts.tracking}
    traced = [f for f in findings if os.path.realpath(f.path) in facts.touched]
    for finding in traced:
        finding.confirmation = judge(finding, facts, config)
    sources = {r.path: r.source.text for r in results if r.source is not None and r.findings}
    problems = runtime_problems(findings, facts, config, sources)
    everything = sorted([*traced, *problems], key=lambda f: f.sort_key())
    counts = summarize(traced, problems)

    stream = open(arguments.output_file, "w", encoding="utf-8") if arguments.output_file else sys.stderr
    try:
        report = RunReport(
            findings=everything, sources=sources, files_checked=len({f.path for f in traced}),
            color=use_color(arguments.color, stream) and output_format in ("text", "concise"),
            statistics=arguments.statistics, root=str(Path.cwd()), quiet=arguments.quiet, rules=all_rules(),
            hidden_by_context=sum(r.hidden_by_context for r in results if os.path.realpath(r.path) in facts.touched))
        renderers()[output_format](report, stream)
        if output_format in ("text", "concise") and not arguments.quiet:
            stream.write(_summary_line(counts, facts, len(traced)) + "\n")
    finally:
        if stream is not sys.stderr:
            stream.close()
    if arguments.report:
        document = {
            "tool": "warp-lint trace",
            "command": command,
            "exit_code": exit_code,
            "duration_s": round(duration, 3),
            "warp_version": facts.warp_version,
            "processes": facts.processes,
            "verify_autograd_array_access": facts.tracking,
            "limits": config,
            "files": sorted({f.path for f in traced}),
            "summary": counts,
            "findings": [finding_to_json(f) for f in traced],
            "runtime_problems": [finding_to_json(p) for p in problems],
            "instrumentation_errors": facts.instrument_errors,
        }
        with open(arguments.report, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
    for message in warnings:
        sys.stderr.write(f"warning: {message}\n")
    if facts.processes == 0:
        sys.stderr.write("warp-lint trace: no traced process imported warp (is the command a Python program run"
                         " without -I/-S?)\n")
    for detail in facts.instrument_errors[:5]:
        sys.stderr.write(f"warp-lint trace: instrumentation error: {detail}\n")
    if arguments.keep_session:
        sys.stderr.write(f"warp-lint trace: session kept in {session.directory}\n")
    return exit_code


def _summary_line(counts: dict[str, int], facts, traced: int) -> str:
    parts = [f"{counts['confirmed']} confirmed", f"{counts['cleared']} cleared",
             f"{counts['not_exercised']} not exercised", f"{counts['inconclusive']} inconclusive"]
    return (f"warp-lint trace: {traced} finding{'s' if traced != 1 else ''} in traced files: {', '.join(parts)};"
            f" {counts['runtime_only']} runtime-only problem{'s' if counts['runtime_only'] != 1 else ''}"
            f" ({facts.processes} process{'es' if facts.processes != 1 else ''} traced)")
