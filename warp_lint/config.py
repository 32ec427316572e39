"""``[tool.warp-lint]`` in the nearest ``pyproject.toml``, validated, and the target Warp version."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from pathlib import Path
from typing import Any

from warp_lint import versions
from warp_lint.project.contexts import parse_contexts

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_EXCLUDE = [
    ".bzr", ".direnv", ".eggs", ".git", ".hg", ".mypy_cache", ".nox", ".pants.d", ".pytype", ".ruff_cache",
    ".svn", ".tox", ".venv", "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules",
    "site-packages", "venv", ".warp_lint_cache",
]


class ConfigError(Exception):
    """A configuration the user must correct; the message names the file and the key."""


@dataclasses.dataclass
class Config:
    select: list[str] | None = None
    extend_select: list[str] = dataclasses.field(default_factory=list)
    ignore: list[str] = dataclasses.field(default_factory=list)
    exclude: list[str] = dataclasses.field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: list[str] = dataclasses.field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    target_warp_version: str | None = None
    respect_gitignore: bool = True
    report_unused_noqa: bool = False
    report_forward_only: bool = False  # every context: report-contexts = ["all"]
    report_contexts: list[str] | None = None  # the differentiation contexts reported (None: the default)
    cache_dir: str | None = None
    root: Path = dataclasses.field(default_factory=Path.cwd)  # the folder holding the pyproject.toml
    source: Path | None = None  # the pyproject.toml this came from


_KEYS: dict[str, tuple[type, str]] = {
    "select": (list, "select"),
    "extend-select": (list, "extend_select"),
    "ignore": (list, "ignore"),
    "exclude": (list, "exclude"),
    "extend-exclude": (list, "extend_exclude"),
    "per-file-ignores": (dict, "per_file_ignores"),
    "target-warp-version": (str, "target_warp_version"),
    "respect-gitignore": (bool, "respect_gitignore"),
    "report-unused-noqa": (bool, "report_unused_noqa"),
    "report-forward-only": (bool, "report_forward_only"),
    "report-contexts": (list, "report_contexts"),
    "cache-dir": (str, "cache_dir"),
}


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None


def config_from_table(table: dict[str, Any], source: Path | None, root: Path) -> Config:
    from warp_lint.registry import known_selector

    config = Config(root=root, source=source)
    where = f"{source}: [tool.warp-lint]" if source else "[tool.warp-lint]"
    for key, value in table.items():
        if key not in _KEYS:
            suggestion = next((k for k in _KEYS if k.replace("-", "_") == key.replace("-", "_")), None)
            hint = f" (did you mean '{suggestion}'?)" if suggestion else f"; known keys: {', '.join(_KEYS)}"
            raise ConfigError(f"{where}: unknown key '{key}'{hint}")
        expected, attribute = _KEYS[key]
        if not isinstance(value, expected):
            raise ConfigError(f"{where}: '{key}' must be a {expected.__name__}, got {type(value).__name__}")
        if expected is list and not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{where}: '{key}' must be a list of strings")
        if key in ("select", "extend-select", "ignore"):
            for code in value:
                if not known_selector(code):
                    raise ConfigError(f"{where}: '{key}' names unknown rule code '{code}'"
                                      " (run 'warp-lint rules' for the list)")
        if key == "per-file-ignores":
            for pattern, codes in value.items():
                if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
                    raise ConfigError(f"{where}: 'per-file-ignores.\"{pattern}\"' must be a list of rule codes")
                for code in codes:
                    if not known_selector(code):
                        raise ConfigError(f"{where}: 'per-file-ignores.\"{pattern}\"' names unknown rule code '{code}'")
        if key == "report-contexts":
            try:
                parse_contexts(value)
            except ValueError as error:
                raise ConfigError(f"{where}: 'report-contexts': {error}") from None
        if key == "target-warp-version":
            error = versions.validate_specifier(value)
            if error:
                raise ConfigError(f"{where}: 'target-warp-version' is not a version specifier: {error}")
        setattr(config, attribute, value)
    return config


@functools.lru_cache(maxsize=256)
def find_config(directory: Path) -> Config:
    """The configuration for files in ``directory``: the closest pyproject.toml with [tool.warp-lint]."""
    for folder in [directory, *directory.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            data = _load_toml(candidate)
            table = data.get("tool", {}).get("warp-lint")
            if table is not None:
                if not isinstance(table, dict):
                    raise ConfigError(f"{candidate}: [tool.warp-lint] must be a table")
                return config_from_table(table, candidate, folder)
    return Config(root=directory)


@functools.lru_cache(maxsize=256)
def project_warp_requirement(directory: Path) -> str | None:
    """The ``warp-lang`` specifier the linted project declares in its own pyproject.toml."""
    from packaging.requirements import InvalidRequirement, Requirement

    for folder in [directory, *directory.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = _load_toml(candidate)
            except ConfigError:
                return None
            project = data.get("project", {})
            requirements = list(project.get("dependencies", []))
            for extra in project.get("optional-dependencies", {}).values():
                requirements.extend(extra)
            for text in requirements:
                try:
                    requirement = Requirement(text)
                except InvalidRequirement:
                    continue
                if requirement.name.lower().replace("_", "-") == "warp-lang":
                    return str(requirement.specifier)
            if project:
                return None
    return None


@functools.lru_cache(maxsize=1)
def installed_warp_version() -> str | None:
    """The installed warp-lang's version, from package metadata: warp itself is never imported."""
    from importlib import metadata

    try:
        return metadata.version("warp-lang")
    except metadata.PackageNotFoundError:
        return None


def resolve_target(explicit: str | None, config: Config, directory: Path) -> tuple[str, str]:
    """The target Warp specifier and where it came from, in the documented order of precedence."""
    if explicit:
        return versions.normalize_specifier(explicit), "--target-warp-version"
    if config.target_warp_version:
        return versions.normalize_specifier(config.target_warp_version), f"{config.source}"
    declared = project_warp_requirement(directory)
    if declared:
        return declared, "the project's warp-lang requirement"
    installed = installed_warp_version()
    if installed:
        return f"=={installed}", "the installed warp-lang"
    return "", "every Warp version"


def cache_directory(config: Config) -> Path:
    if config.cache_dir:
        return (config.root / config.cache_dir).resolve()
    env = os.environ.get("WARP_LINT_CACHE_DIR")
    return Path(env) if env else config.root / ".warp_lint_cache"
