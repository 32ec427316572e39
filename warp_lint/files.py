"""Which files a run lints: recursion, excludes (configured and .gitignore), explicit paths."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Iterator

import pathspec

from warp_lint.config import Config

PYTHON_SUFFIXES = (".py", ".pyi")


def _gitignore_style() -> str:
    """pathspec 1.1 deprecates "gitwildmatch" for "gitignore"; older releases know only the former."""
    try:
        pathspec.PathSpec.from_lines("gitignore", [])
    except (KeyError, LookupError):
        return "gitwildmatch"
    return "gitignore"


_GITIGNORE_STYLE = _gitignore_style()


@functools.lru_cache(maxsize=64)
def _spec_for(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines(_GITIGNORE_STYLE, patterns)


def glob_spec(patterns) -> pathspec.PathSpec:
    """Patterns with .gitignore semantics, compiled once per distinct list."""
    return _spec_for(tuple(patterns))


def is_excluded(path: Path, config: Config) -> bool:
    """ruff's semantics: a pattern matches the path relative to the config root, or any part's name."""
    patterns = config.exclude + config.extend_exclude
    spec = glob_spec(patterns)
    try:
        relative = path.resolve().relative_to(config.root.resolve()).as_posix()
    except ValueError:
        relative = path.as_posix()
    if spec.match_file(relative):
        return True
    return any(spec.match_file(part) for part in Path(relative).parts)


def _gitignore(directory: Path) -> pathspec.PathSpec | None:
    candidate = directory / ".gitignore"
    try:
        lines = candidate.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return glob_spec(lines)


def discover(paths: list[Path], config_for, force_exclude: bool = False) -> Iterator[tuple[Path, str | None]]:
    """Yield (file, error). Explicit files are always linted unless ``force_exclude``; an error is
    a message for a path that cannot be walked (missing, unreadable)."""
    seen: set[Path] = set()
    for path in paths:
        if not path.exists() and not path.is_symlink():
            yield path, f"{path}: no such file or directory"
            continue
        if path.is_file() or (path.is_symlink() and not path.is_dir()):
            if force_exclude and is_excluded(path, config_for(path.parent.resolve())):
                continue
            if path not in seen:
                seen.add(path)
                yield path, None
            continue
        yield from _walk(path, config_for, seen)


def _walk(root: Path, config_for, seen: set[Path]) -> Iterator[tuple[Path, str | None]]:
    ignores: list[tuple[Path, pathspec.PathSpec]] = []

    def on_error(error: OSError) -> None:
        errors.append(error)

    errors: list[OSError] = []
    for directory, dirnames, filenames in os.walk(root, onerror=on_error):  # never follows symlinked dirs
        folder = Path(directory)
        config = config_for(folder.resolve())
        if config.respect_gitignore:
            spec = _gitignore(folder)
            if spec is not None:
                ignores.append((folder, spec))
        kept = []
        for name in sorted(dirnames):
            candidate = folder / name
            if candidate.is_symlink() or is_excluded(candidate, config) or _ignored(candidate, ignores, True):
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            candidate = folder / name
            if not name.endswith(PYTHON_SUFFIXES) or is_excluded(candidate, config):
                continue
            if config.respect_gitignore and _ignored(candidate, ignores, False):
                continue
            if candidate not in seen:
                seen.add(candidate)
                yield candidate, None
    for error in errors:
        yield Path(error.filename or root), f"{error.filename}: cannot read directory: {error.strerror}"


def _ignored(path: Path, ignores, is_dir: bool) -> bool:
    for base, spec in ignores:
        try:
            relative = path.relative_to(base).as_posix()
        except ValueError:
            continue
        if spec.match_file(relative + ("/" if is_dir else "")):
            return True
    return False
