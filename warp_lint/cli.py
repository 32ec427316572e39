"""The command line: ``warp-lint check``, ``rule``, ``rules``, ``confirm``, ``trace``."""

from __future__ import annotations

import argparse
import difflib
import gc
import sys
from pathlib import Path
from typing import Sequence

from warp_lint import __version__
from warp_lint.config import ConfigError
from warp_lint.engine import FileResult, fix_until_stable
from warp_lint.fixer import ConcurrentModification, applicable, write_atomically
from warp_lint.options import (
    UsageError,
    add_context_options,
    chosen_format,
    lint_paths,
    progress_printer,
    use_color,
    validate,
)
from warp_lint.output import RunReport, renderers
from warp_lint.registry import RulesNotInstalled, all_rules

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

DESCRIPTION = """\
Find silent gradient hazards in NVIDIA Warp code before they run, and confirm them when they do.

Static rules read @wp.kernel / @wp.func code and the host code that records launches on a
wp.Tape. Any finding can be confirmed or cleared at run time with --confirm (needs
warp-lint[runtime]: your own warp-lang and numpy).
"""

EPILOG = """\
exit status: 0 no findings, 1 findings, 2 usage, configuration or internal error.

examples:
  warp-lint check src/                      lint a tree
  warp-lint check --fix src/                apply safe fixes
  warp-lint check --output-format json .    machine-readable findings
  warp-lint check --confirm sim.py          confirm findings with a targeted gradcheck
  warp-lint explain sim.py:42               why line 42's findings are (or are not) reported
  warp-lint rule WL102                      explain a rule
"""


def _codes(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="warp-lint", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"warp-lint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser(
        "check", help="lint files and directories", description="Lint Python files for Warp gradient hazards.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("paths", nargs="*", type=Path, help="files or directories (default: .)")
    _add_lint_options(check)
    check.add_argument("--confirm", action="store_true",
                       help="confirm or clear each finding at run time (gradcheck / overwrite tracking)")

    confirm = commands.add_parser(
        "confirm", help="confirm the findings of a file (or one line) at run time",
        description="Run the runtime checker on the findings of PATH, or only those on LINE.")
    confirm.add_argument("target", help="PATH or PATH:LINE")
    _add_lint_options(confirm)

    explain = commands.add_parser(
        "explain", help="say why a line's findings are (or are not) reported",
        description="For the kernel or @wp.func holding LINE: its differentiation context (differentiated,"
                    " forward-only or unknown) and the recording that decides it (the tape, the calls from the"
                    " entry point). For each finding on LINE, forward-only ones included: the places that"
                    " explain it.")
    explain.add_argument("target", help="PATH:LINE")
    _add_lint_options(explain)

    rule = commands.add_parser("rule", help="print a rule's documentation")
    rule.add_argument("code", help="a rule code, e.g. WL101, or --all")
    rule.add_argument("--output-format", choices=["text", "json"], default="text")

    rules = commands.add_parser("rules", help="list every rule")
    rules.add_argument("--output-format", choices=["text", "json"], default="text")

    trace = commands.add_parser(
        "trace", help="run a command with instrumentation and confirm findings from what happened",
        description="Run COMMAND (e.g. pytest) with Warp's overwrite tracking, tape observation and gradchecks"
                    " of real launches switched on, then give each static finding of the files it ran a verdict:"
                    " confirmed, cleared, not exercised or inconclusive. The report goes to stderr; the"
                    " command's output and exit status pass through unchanged.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    from warp_lint.trace.command import EPILOG as TRACE_EPILOG
    from warp_lint.trace.command import add_arguments as add_trace_arguments

    trace.epilog = TRACE_EPILOG
    add_trace_arguments(trace)

    server = commands.add_parser("server", help="run the language server over stdio (needs warp-lint[lsp])")
    server.add_argument("--debounce", type=float, default=None,
                        help="seconds to wait after a change before linting (default 0: a change's lint is short)")
    return parser


def _add_lint_options(parser: argparse.ArgumentParser) -> None:
    selection = parser.add_argument_group("rule selection")
    selection.add_argument("--select", type=_codes, help="comma-separated codes or prefixes to enable, in place of the default selection"
                           " (every rule but the opt-in advice rules marked in `warp-lint rules`; ALL: every rule)")
    selection.add_argument("--extend-select", type=_codes, default=[], help="codes to enable on top of --select")
    selection.add_argument("--ignore", type=_codes, default=[], help="codes or prefixes to disable")
    selection.add_argument("--target-warp-version", metavar="SPEC",
                           help="Warp versions to check for, a PEP 440 specifier such as '>=1.10' (default: the"
                                " project's warp-lang requirement, else the installed warp-lang, else all)")
    files = parser.add_argument_group("file selection")
    files.add_argument("--exclude", type=_codes, help="glob patterns to exclude (replaces the defaults)")
    files.add_argument("--extend-exclude", type=_codes, default=[], help="glob patterns to exclude as well")
    files.add_argument("--force-exclude", action="store_true",
                       help="apply excludes to files named on the command line too (for pre-commit)")
    files.add_argument("--config", type=Path, help="a pyproject.toml to use instead of discovering one")
    output = parser.add_argument_group("output")
    output.add_argument("--output-format", default=None,
                        help="text, concise, json, github, sarif, gitlab, junit (default: text, or"
                             " $WARP_LINT_OUTPUT_FORMAT)")
    output.add_argument("--output-file", "-o", type=Path, help="write the report to a file")
    output.add_argument("--statistics", action="store_true", help="count findings per rule")
    output.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    output.add_argument("--quiet", "-q", action="store_true", help="print findings only, no summary when clean")
    output.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="colour the text output (auto: only on a terminal, and never with NO_COLOR)")
    output.add_argument("--report-unused-noqa", action="store_true", help="report '# noqa' that suppress nothing")
    add_context_options(output)
    fixes = parser.add_argument_group("fixes")
    fixes.add_argument("--fix", action="store_true", help="apply safe fixes, writing files atomically")
    fixes.add_argument("--unsafe-fixes", action="store_true", help="also apply (or show) unsafe fixes")
    fixes.add_argument("--diff", action="store_true", help="show the fixes as a diff and write nothing")
    speed = parser.add_argument_group("speed")
    speed.add_argument("--jobs", "-j", type=int, default=None, help="processes for large runs (default: cores)")
    speed.add_argument("--no-cache", action="store_true", help="neither read nor write the results cache")
    runtime = parser.add_argument_group("runtime confirmation")
    runtime.add_argument("--device", help="Warp device for confirmation (default: first CUDA device, else cpu)")
    runtime.add_argument("--confirm-timeout", type=float, default=120.0,
                         help="seconds allowed for importing a module and for each experiment (default 120;"
                              " compiling a module always gets at least 600)")


def run_lint(arguments: argparse.Namespace, paths: list[Path], only_line: int | None = None,
             confirm: bool = False) -> int:
    validate(arguments)
    output_format = chosen_format(arguments)
    options, files, results, errors, internal_errors, workspace = lint_paths(
        arguments, paths, arguments.force_exclude, progress=progress_printer())
    for error in errors:
        from warp_lint.engine import input_error

        path, _, message = error.partition(": ")
        results.append(FileResult(path, [input_error(path, "E902", message)]))

    fixed = 0
    diffs: list[str] = []
    if arguments.fix or arguments.diff:
        for index, result in enumerate(results):
            if result.source is None or not applicable(result.findings, arguments.unsafe_fixes):
                continue
            settings = options.settings_for(Path(result.path))
            new_result, count = fix_until_stable(result, arguments.unsafe_fixes,
                                                 relint=lambda source, s=settings: workspace.lint_source(source, s))
            if not count:
                continue
            if arguments.diff:
                diffs.append(_diff(result.source.text, new_result.source.text, result.path))
                continue
            try:
                write_atomically(result.source, new_result.source.text)
            except (ConcurrentModification, OSError) as error:
                errors.append(str(error))
                continue
            fixed += count
            results[index] = new_result

    findings = sorted((f for r in results for f in r.findings), key=lambda f: f.sort_key())
    if only_line is not None:
        findings = [f for f in findings if f.start.line <= only_line <= f.end.line]
    if confirm:
        _confirm(findings, arguments)

    if arguments.diff:
        sys.stdout.write("".join(diffs))
        if diffs:
            sys.stderr.write(f"Would fix {len(diffs)} file{'s' if len(diffs) != 1 else ''}.\n")
        for message in internal_errors:
            sys.stderr.write(f"error: {message}\n")
        return EXIT_ERROR if internal_errors else (EXIT_FINDINGS if diffs else EXIT_CLEAN)

    stream = open(arguments.output_file, "w", encoding="utf-8") if arguments.output_file else sys.stdout
    try:
        report = RunReport(
            findings=findings,
            sources={r.path: r.source.text for r in results if r.findings and r.source is not None},
            files_checked=len(files), fixed=fixed, fix_mode=arguments.fix, unsafe_fixes=arguments.unsafe_fixes,
            color=use_color(arguments.color, stream) and output_format in ("text", "concise"),
            statistics=arguments.statistics, root=str(Path.cwd()), quiet=arguments.quiet, rules=all_rules(),
            hidden_by_context=sum(r.hidden_by_context for r in results),
        )
        renderers()[output_format](report, stream)
    finally:
        if stream is not sys.stdout:
            stream.close()
    for message in errors:
        sys.stderr.write(f"warning: {message}\n")
    for message in internal_errors:
        sys.stderr.write(f"error: {message}\n")
    if internal_errors:
        return EXIT_ERROR
    # A finding the runtime checker cleared keeps its place in the report, not in the exit status.
    if any(f.confirmation is None or f.confirmation.status != "cleared" for f in findings) and not arguments.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def run_explain(arguments: argparse.Namespace) -> int:
    from warp_lint.explain import explain

    path, _, line = arguments.target.rpartition(":")
    if not path or not line.isdigit():
        raise UsageError(f"explain needs PATH:LINE, got '{arguments.target}'")
    validate(arguments)
    arguments.report_forward_only = True  # a forward-only finding is what one asks about
    _, files, results, errors, internal_errors, workspace = lint_paths(arguments, [Path(path)], force_exclude=False)
    for message in errors + internal_errors:
        sys.stderr.write(f"error: {message}\n")
    if not files:
        return EXIT_ERROR
    findings = [f for r in results for f in r.findings]
    sys.stdout.write(explain(workspace, str(files[0]), int(line), findings, root=str(Path.cwd())))
    return EXIT_ERROR if internal_errors else EXIT_CLEAN


def _diff(before: str, after: str, path: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))


def _confirm(findings, arguments) -> None:
    try:
        from warp_lint.runtime import confirm_findings
    except ImportError as error:
        raise UsageError(f"--confirm needs the runtime checker's dependencies ({error.name} is missing):"
                         " pip install 'warp-lint[runtime]'") from None
    progress = progress_printer()
    rules = all_rules()
    confirm_findings([f for f in findings if f.code in rules], device=arguments.device,
                     timeout=arguments.confirm_timeout, progress=progress)
    if progress:
        sys.stderr.write("\r\x1b[2K")


def print_rule(code: str, output_format: str) -> int:
    rules = all_rules()
    chosen = list(rules.values()) if code == "--all" else [rules.get(code.upper())]
    if chosen == [None]:
        raise UsageError(f"unknown rule code '{code}' (run 'warp-lint rules' for the list)")
    if output_format == "json":
        import json

        json.dump([_rule_json(rule) for rule in chosen], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("\n\n".join(rule.docs() for rule in chosen))
    return EXIT_CLEAN


def _rule_json(rule) -> dict:
    return {"code": rule.code, "name": rule.name, "summary": rule.summary(), "fixable": rule.fixable(),
            "affected_warp_versions": rule.affected_versions or None, "default": rule.default, "runtime_strategy": list(rule.runtime_strategy),
            "explanation": rule.docs()}


def print_rules(output_format: str) -> int:
    rules = all_rules()
    if output_format == "json":
        import json

        json.dump([_rule_json(rule) for rule in rules.values()], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_CLEAN
    for rule in rules.values():
        flags = ("fix" if rule.fixable() else "   ") + " " + (rule.affected_versions or "all").ljust(8)
        selection = "       " if rule.default else "opt-in "
        sys.stdout.write(f"{rule.code}  {rule.name:<32} {flags} {selection} {rule.summary()}\n")
    return EXIT_CLEAN


def console_main() -> int:
    """The ``warp-lint`` command. A run's project model is a million small objects in reference
    cycles; collecting them when the interpreter exits took 2-6 s of a 10 s run. Frozen, they are
    left to the operating system, which frees a process's memory at once."""
    code = main()
    gc.freeze()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "check":
            return run_lint(arguments, arguments.paths or [Path(".")], confirm=arguments.confirm)
        if arguments.command == "confirm":
            path, _, line = arguments.target.rpartition(":")
            if not path or not line.isdigit():
                path, line = arguments.target, ""
            return run_lint(arguments, [Path(path)], int(line) if line else None, confirm=True)
        if arguments.command == "explain":
            return run_explain(arguments)
        if arguments.command == "trace":
            from warp_lint.trace.command import run_trace

            return run_trace(arguments)
        if arguments.command == "rule":
            return print_rule(arguments.code, arguments.output_format)
        if arguments.command == "rules":
            return print_rules(arguments.output_format)
        if arguments.command == "server":
            try:
                from warp_lint.lsp import serve
            except ImportError as error:
                raise UsageError(f"the language server needs pygls ({error.name} is missing):"
                                 " pip install 'warp-lint[lsp]'") from None
            return serve(debounce=arguments.debounce)
        parser.print_help()
        return EXIT_ERROR
    except (UsageError, ConfigError, RulesNotInstalled) as error:
        sys.stderr.write(f"warp-lint: error: {error}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `warp-lint check | head`: the reader left, which is not our error
        sys.stdout = None
        return EXIT_CLEAN
