"""Linting many files: each file's analysis (cache first, then one process for small runs, a pool
for large ones), then the project model over all of them, once.

Memory stays bounded on large trees: the files are read one at a time (by the process that
analyses them), and an analysis keeps its summary and kernel facts, not the file's text; the text
is read again for the files that end up with findings (the renderers and ``--fix`` need it).
"""

from __future__ import annotations

import concurrent.futures
import gc
import os
from pathlib import Path
from typing import Callable

from warp_lint.cache import ResultsCache
from warp_lint.engine import FileAnalysis, FileResult, FileSettings, InternalError, analyse_bytes, input_error
from warp_lint.workspace import Workspace

# Below this many files to lint, a pool's start-up (about 0.1-0.2 s) costs more than it saves:
# one file from pre-commit or the editor never pays it.
PARALLEL_MIN_FILES = 16


def _analyse_one(item: tuple[str, FileSettings, str | None]) -> tuple[FileAnalysis | str, str | None]:
    """Read and analyse one file: (analysis or internal error message, cache key of what was read).

    ``item`` holds the cache key the main process computed from the bytes it read; when the file
    changed since, the analysis is of the new bytes and comes back with their key instead.
    """
    path, settings, key = item
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        return FileAnalysis(path, [input_error(path, "E902", f"cannot read: {error.strerror or error}")]), None
    if key is not None:
        key = ResultsCache.key(path, raw, settings)
    try:
        analysis = analyse_bytes(path, raw, settings)
    except InternalError as error:
        return f"{error}\n{error.detail}", None
    return analysis.without_source(), key


def tune_garbage_collection() -> None:
    """Collect young objects rarely: a run holds every file's summary (hundreds of thousands of
    small objects that live to the end), and with Python's default thresholds the collector
    re-traverses them so often that it took more than half of a cold run (measured: 21.9 s of
    analysis with the defaults, 9.8 s with these)."""
    gc.set_threshold(200_000, 50, 100)


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def analyse_files(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
                  cache: ResultsCache | None = None, progress: Callable[[str], None] | None = None
                  ) -> tuple[list[FileAnalysis], list[str]]:
    analyses: dict[int, FileAnalysis] = {}
    internal_errors: list[str] = []
    pending: list[tuple[int, str, FileSettings, str | None, int]] = []  # index, path, settings, key, size
    for index, path in enumerate(files):
        name = str(path)
        settings = settings_for(path)
        if cache is None:
            pending.append((index, name, settings, None, 0))
            continue
        try:
            raw = path.read_bytes()
        except OSError as error:
            analyses[index] = FileAnalysis(name, [input_error(name, "E902", f"cannot read: {error.strerror or error}")])
            continue
        key = cache.key(name, raw, settings)
        cached = cache.get(key)
        if cached is not None:
            analyses[index] = cached
            continue
        pending.append((index, name, settings, key, len(raw)))  # the bytes are read again by the analysis

    jobs = jobs or default_jobs()
    if jobs > 1 and len(pending) >= PARALLEL_MIN_FILES:
        # Largest files first, in small chunks, so that no process is left with a big file at the end.
        pending.sort(key=lambda item: -item[4] if item[4] else -_size(item[1]))
        items = [(name, settings, key) for _, name, settings, key, _ in pending]
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, initializer=tune_garbage_collection) as pool:
            outcomes = pool.map(_analyse_one, items, chunksize=max(1, min(8, len(items) // (jobs * 16))))
            _collect(pending, outcomes, analyses, internal_errors, cache, progress)
    else:
        items = [(name, settings, key) for _, name, settings, key, _ in pending]
        _collect(pending, map(_analyse_one, items), analyses, internal_errors, cache, progress)
    return [analyses[i] for i in sorted(analyses)], internal_errors


def lint_files(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
               cache: ResultsCache | None = None, progress: Callable[[str], None] | None = None
               ) -> tuple[list[FileResult], list[str]]:
    results, internal_errors, _ = lint_project(files, settings_for, jobs, cache, progress)
    return results, internal_errors


def lint_project(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
                 cache: ResultsCache | None = None, progress: Callable[[str], None] | None = None
                 ) -> tuple[list[FileResult], list[str], Workspace]:
    """Analyse the files, then finish their findings with their projects' model."""
    tune_garbage_collection()
    analyses, internal_errors = analyse_files(files, settings_for, jobs, cache, progress)
    workspace = Workspace.for_files(files, cache)
    if progress and len(files) > 50:
        progress(f"following recordings across {len(files)} files")
    return workspace.results(analyses, settings_for), internal_errors, workspace


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _collect(pending, outcomes, analyses, internal_errors, cache, progress) -> None:
    total = len(pending)
    for number, ((index, _, _, _, _), (outcome, key)) in enumerate(zip(pending, outcomes), start=1):
        if progress and total > 50 and number % 25 == 0:
            progress(f"linted {number}/{total} files")
        if isinstance(outcome, str):
            internal_errors.append(outcome)
            continue
        analyses[index] = outcome
        if cache is not None and key is not None:
            cache.put(key, outcome)
