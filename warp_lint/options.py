"""What every face shares: the options a run is given, and the static pass run with them.

Below the command line, the language server and the trace launcher, which all read these (the
command line imports the other two, so none of them may import it).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from warp_lint.config import Config, find_config, resolve_target
from warp_lint.engine import FileSettings
from warp_lint.files import discover, glob_spec
from warp_lint.output import renderers
from warp_lint.project.contexts import CONTEXTS, DEFAULT_REPORTED, parse_contexts
from warp_lint.registry import known_selector, select_rules
from warp_lint.runner import lint_project


@dataclasses.dataclass
class Options:
    arguments: argparse.Namespace
    base_config: Config | None
    # A folder's configuration and settings read once: a command-line run. The editor asks again
    # each time, since the user may edit the configuration between lints.
    remember_folders: bool = False
    _configs: dict[Path, Config] = dataclasses.field(default_factory=dict, repr=False)
    _folder_settings: dict[Path, FileSettings] = dataclasses.field(default_factory=dict, repr=False)

    def config_for(self, directory: Path) -> Config:
        if not self.remember_folders:
            return self._read_config(directory)
        config = self._configs.get(directory)
        if config is None:
            config = self._configs[directory] = self._read_config(directory)
        return config

    def _read_config(self, directory: Path) -> Config:
        config = self.base_config or find_config(directory)
        a = self.arguments
        overrides = {}
        if a.select is not None:  # a later layer, as in ruff: the command line's select resets the file's
            overrides.update(select=a.select, ignore=list(a.ignore), extend_select=list(a.extend_select))
        else:
            if a.extend_select:
                overrides["extend_select"] = config.extend_select + a.extend_select
            if a.ignore:
                overrides["ignore"] = config.ignore + a.ignore
        if a.exclude is not None:
            overrides["exclude"] = a.exclude
        if a.extend_exclude:
            overrides["extend_exclude"] = config.extend_exclude + a.extend_exclude
        if a.report_unused_noqa:
            overrides["report_unused_noqa"] = True
        if getattr(a, "report_forward_only", False):
            overrides["report_forward_only"] = True
        if getattr(a, "report_contexts", None) is not None:
            overrides["report_contexts"] = [a.report_contexts]
        return dataclasses.replace(config, **overrides) if overrides else config

    def settings_for(self, path: Path) -> FileSettings:
        settings = self._folder_settings.get(path.parent)
        if settings is not None:
            return settings
        directory = path.parent.resolve()
        config = self.config_for(directory)
        ignore = list(config.ignore)
        if config.per_file_ignores:
            try:
                relative = path.resolve().relative_to(config.root.resolve()).as_posix()
            except ValueError:
                relative = path.as_posix()
            for pattern, codes in config.per_file_ignores.items():
                if glob_spec([pattern]).match_file(relative):
                    ignore.extend(codes)
        rules = select_rules(config.select, ignore, config.extend_select)
        target, _ = resolve_target(self.arguments.target_warp_version, config, directory)
        settings = FileSettings(tuple(r.code for r in rules), target, config.report_unused_noqa,
                                report_contexts=reported_contexts(config))
        if self.remember_folders and not config.per_file_ignores:
            self._folder_settings[path.parent] = settings
        return settings



def lint_paths(arguments: argparse.Namespace, paths: list[Path], force_exclude: bool, progress=None):
    """The static pass as the command line runs it: configuration, discovery, cache, lint.

    Returns (options, files, results, path errors, internal errors, workspace); shared by `check`,
    `confirm`, `explain` and `trace`.
    """
    base = None
    if arguments.config:
        from warp_lint.config import _load_toml, config_from_table

        table = _load_toml(arguments.config).get("tool", {}).get("warp-lint", {})
        base = config_from_table(table, arguments.config, arguments.config.resolve().parent)
    options = Options(arguments, base, remember_folders=True)
    errors: list[str] = []
    files: list[Path] = []
    for path, error in discover(paths, options.config_for, force_exclude):
        if error:
            errors.append(error)
        else:
            files.append(path)
    cache = None
    if not arguments.no_cache:
        from warp_lint.cache import ResultsCache
        from warp_lint.config import cache_directory

        cache = ResultsCache(cache_directory(options.config_for(Path.cwd().resolve())))
    results, internal_errors, workspace = lint_project(files, options.settings_for, jobs=arguments.jobs, cache=cache,
                                                       progress=progress)
    return options, files, results, errors, internal_errors, workspace


def reported_contexts(config: Config) -> frozenset[str]:
    """The differentiation contexts whose findings a file reports: every one with
    ``report-forward-only``, else ``report-contexts``, else the default."""
    if config.report_forward_only:
        return frozenset(CONTEXTS)
    return parse_contexts(config.report_contexts) if config.report_contexts is not None else DEFAULT_REPORTED


class UsageError(Exception):
    pass

def validate(arguments: argparse.Namespace) -> None:
    for option in ("select", "extend_select", "ignore"):
        for code in getattr(arguments, option) or []:
            if not known_selector(code):
                raise UsageError(f"--{option.replace('_', '-')}: unknown rule code '{code}'"
                                 " (run 'warp-lint rules' for the list)")
    if arguments.target_warp_version:
        from warp_lint.versions import validate_specifier

        error = validate_specifier(arguments.target_warp_version)
        if error:
            raise UsageError(f"--target-warp-version: {error}")
    if arguments.jobs is not None and arguments.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if getattr(arguments, "report_contexts", None) is not None:
        try:
            parse_contexts(arguments.report_contexts)
        except ValueError as error:
            raise UsageError(f"--report-contexts: {error}") from None

def chosen_format(arguments: argparse.Namespace) -> str:
    chosen = arguments.output_format or os.environ.get("WARP_LINT_OUTPUT_FORMAT") or "text"
    if chosen not in renderers():
        raise UsageError(f"unknown output format '{chosen}'; choose from {', '.join(renderers())}")
    return chosen

def use_color(choice: str, stream) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()

def progress_printer():
    """Progress on stderr when it is a terminal; nothing in CI or pipes."""
    if not sys.stderr.isatty() or os.environ.get("CI"):
        return None

    def show(message: str) -> None:
        sys.stderr.write("\r\x1b[2K" + message[: os.get_terminal_size(sys.stderr.fileno()).columns - 1])
        sys.stderr.flush()

    return show


def add_context_options(group) -> None:
    """The differentiation-context options, one definition for every face that lints."""
    group.add_argument("--report-contexts", metavar="CONTEXTS",
                       help="report kernel findings in these differentiation contexts, comma-separated:"
                            " differentiated (a recording of the project reaches it), public (only the package's"
                            " public API reaches it: users may differentiate it), unknown (the model cannot"
                            " tell), forward-only, unreachable, or all (default: differentiated,unknown)")
    group.add_argument("--report-forward-only", action="store_true",
                       help="report kernel findings in every context, forward-only and unreachable code"
                            " included (the same as --report-contexts all)")
