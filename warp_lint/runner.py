"""Linting many files: cache first, then one process for small runs, a pool for large ones."""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path
from typing import Callable

from warp_lint.engine import FileResult, FileSettings, InternalError, input_error, lint_bytes
from warp_lint.source import decode_source

# Below this many files to lint, a pool's start-up (about 0.1-0.2 s) costs more than it saves:
# one file from pre-commit or the editor never pays it.
PARALLEL_MIN_FILES = 16


def _lint_one(item: tuple[str, bytes, FileSettings]) -> FileResult | str:
    path, raw, settings = item
    try:
        result = lint_bytes(path, raw, settings)
    except InternalError as error:
        return f"{error}\n{error.detail}"
    if not result.findings:
        result.source = None  # keep memory bounded: only files with findings keep their text
    return result


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def lint_files(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
               cache=None, progress: Callable[[str], None] | None = None) -> tuple[list[FileResult], list[str]]:
    results: dict[int, FileResult] = {}
    internal_errors: list[str] = []
    pending: list[tuple[int, str, bytes, FileSettings, str | None]] = []
    for index, path in enumerate(files):
        name = str(path)
        try:
            raw = path.read_bytes()
        except OSError as error:
            results[index] = FileResult(name, [input_error(name, "E902", f"cannot read: {error.strerror or error}")])
            continue
        settings = settings_for(path)
        key = cache.key(name, raw, settings) if cache is not None else None
        cached = cache.get(key) if key is not None else None
        if cached is not None:
            results[index] = FileResult(name, cached, _source_for(name, raw) if cached else None)
            continue
        pending.append((index, name, raw, settings, key))

    jobs = jobs or default_jobs()
    items = [(name, raw, settings) for _, name, raw, settings, _ in pending]
    if jobs > 1 and len(pending) >= PARALLEL_MIN_FILES:
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            outcomes = pool.map(_lint_one, items, chunksize=max(1, len(items) // (jobs * 8)))
            _collect(pending, outcomes, results, internal_errors, cache, progress)
    else:
        _collect(pending, map(_lint_one, items), results, internal_errors, cache, progress)
    return [results[i] for i in sorted(results)], internal_errors


def _collect(pending, outcomes, results, internal_errors, cache, progress) -> None:
    total = len(pending)
    for number, ((index, name, raw, _, key), outcome) in enumerate(zip(pending, outcomes), start=1):
        if progress and total > 50 and number % 25 == 0:
            progress(f"linted {number}/{total} files")
        if isinstance(outcome, str):
            internal_errors.append(outcome)
            continue
        results[index] = outcome
        if outcome.findings and outcome.source is None:
            outcome.source = _source_for(name, raw)
        if cache is not None and key is not None:
            cache.put(key, outcome.findings)


def _source_for(path: str, raw: bytes):
    try:
        return decode_source(path, raw)
    except Exception:
        return None
