"""Linting many files: cache first, then one process for small runs, a pool for large ones.

Memory stays bounded on large trees: the files are read one at a time (by the process that lints
them), and a result keeps its file's text only when it has findings (the renderers and ``--fix``
need it). The main process holds one small record per file to lint, never the files' contents.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path
from typing import Callable

from warp_lint.cache import ResultsCache
from warp_lint.engine import FileResult, FileSettings, InternalError, input_error, lint_bytes
from warp_lint.source import decode_source

# Below this many files to lint, a pool's start-up (about 0.1-0.2 s) costs more than it saves:
# one file from pre-commit or the editor never pays it.
PARALLEL_MIN_FILES = 16


def _lint_one(item: tuple[str, FileSettings, str | None]) -> tuple[FileResult | str, str | None]:
    """Read and lint one file: (result or internal error message, cache key of what was linted).

    ``item`` holds the cache key the main process computed from the bytes it read; when the file
    changed since, the result is for the new bytes and comes back with their key instead.
    """
    path, settings, key = item
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        return FileResult(path, [input_error(path, "E902", f"cannot read: {error.strerror or error}")]), None
    if key is not None:
        key = ResultsCache.key(path, raw, settings)
    try:
        result = lint_bytes(path, raw, settings)
    except InternalError as error:
        return f"{error}\n{error.detail}", None
    if result.findings and result.source is None:
        result.source = _source_for(path, raw)
    if not result.findings:
        result.source = None  # keep memory bounded: only files with findings keep their text
    return result, key


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def lint_files(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
               cache=None, progress: Callable[[str], None] | None = None) -> tuple[list[FileResult], list[str]]:
    results: dict[int, FileResult] = {}
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
            results[index] = FileResult(name, [input_error(name, "E902", f"cannot read: {error.strerror or error}")])
            continue
        key = cache.key(name, raw, settings)
        cached = cache.get(key)
        if cached is not None:
            results[index] = FileResult(name, cached, _source_for(name, raw) if cached else None)
            continue
        pending.append((index, name, settings, key, len(raw)))  # the bytes are read again by the linter

    jobs = jobs or default_jobs()
    if jobs > 1 and len(pending) >= PARALLEL_MIN_FILES:
        # Largest files first, in small chunks, so that no process is left with a big file at the end.
        pending.sort(key=lambda item: -item[4] if item[4] else -_size(item[1]))
        items = [(name, settings, key) for _, name, settings, key, _ in pending]
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            outcomes = pool.map(_lint_one, items, chunksize=max(1, min(8, len(items) // (jobs * 16))))
            _collect(pending, outcomes, results, internal_errors, cache, progress)
    else:
        items = [(name, settings, key) for _, name, settings, key, _ in pending]
        _collect(pending, map(_lint_one, items), results, internal_errors, cache, progress)
    return [results[i] for i in sorted(results)], internal_errors


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _collect(pending, outcomes, results, internal_errors, cache, progress) -> None:
    total = len(pending)
    for number, ((index, _, _, _, _), (outcome, key)) in enumerate(zip(pending, outcomes), start=1):
        if progress and total > 50 and number % 25 == 0:
            progress(f"linted {number}/{total} files")
        if isinstance(outcome, str):
            internal_errors.append(outcome)
            continue
        results[index] = outcome
        if cache is not None and key is not None:
            cache.put(key, outcome.findings)


def _source_for(path: str, raw: bytes):
    try:
        return decode_source(path, raw)
    except Exception:
        return None
