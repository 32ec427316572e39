"""Linting many files: each file's analysis (cache first, then one process for small runs, a pool
for large ones), then the project model over all of them, once.

Memory stays bounded on large trees: the files are read one at a time (by the process that
analyses them), and an analysis keeps its summary and kernel facts, not the file's text; the text
is read again for the files that end up with findings (the renderers and ``--fix`` need it).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os
from pathlib import Path
from typing import Callable

from warp_lint.cache import ResultsCache
from warp_lint.engine import FileAnalysis, FileResult, FileSettings, InternalError, analyse_bytes, input_error
from warp_lint.project.summary import text_digest
from warp_lint.source import SourceError, decode_source
from warp_lint.workspace import Workspace

# Below this many files to lint, a pool's start-up (about 0.1-0.2 s) costs more than it saves:
# one file from pre-commit or the editor never pays it.
PARALLEL_MIN_FILES = 16


# The project a pool worker analyses files of: built once per worker by the pool's initializer.
_WORKSPACE: Workspace | None = None


def _start_worker(files: list[str], eager: set[str], cache_directory: str | None) -> None:
    global _WORKSPACE
    tune_garbage_collection()
    cache = ResultsCache.at(cache_directory) if cache_directory else None
    _WORKSPACE = Workspace([Path(f) for f in files], eager, cache)


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
        analysis = analyse_bytes(path, raw, settings, _WORKSPACE.imported_helpers if _WORKSPACE else None)
    except InternalError as error:
        return f"{error}\n{error.detail}", None
    return analysis.without_source(), key


def tune_garbage_collection() -> None:
    """Collect young objects rarely: a run holds every file's summary (hundreds of thousands of
    small objects that live to the end), and with Python's default thresholds the collector
    re-traverses them so often that it took more than half of a cold run (measured: 21.9 s of
    analysis with the defaults, 9.8 s with these)."""
    gc.set_threshold(200_000, 50, 100)


@contextlib.contextmanager
def _collector_paused():
    """The workers' analyses arrive as a million unpickled objects with no cycles among them: the
    cyclic collector's scans of them while they arrive took half of the unpickling (0.5 of 1.1 s
    on the benchmark's corpus), on a core the workers need."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def _analyses_frozen():
    """The analyses live to the end of the run: the collections the project model's allocations
    trigger leave them out (they took 0.3 of its 1.9 s on the benchmark's corpus). Unfrozen after,
    so a long-lived process (the editor's) can still collect them."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def file_keys(files: list[Path], settings_for: Callable[[Path], FileSettings]
              ) -> list[tuple[str, int] | OSError]:
    """Each file's cache key (and size), or the error reading it."""
    keys: list[tuple[str, int] | OSError] = []
    for path in files:
        try:
            raw = path.read_bytes()
        except OSError as error:
            keys.append(error)
            continue
        keys.append((ResultsCache.key(str(path), raw, settings_for(path)), len(raw)))
    return keys


def analyse_files(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
                  cache: ResultsCache | None = None, progress: Callable[[str], None] | None = None,
                  keys: list[tuple[str, int] | OSError] | None = None, workspace: Workspace | None = None
                  ) -> tuple[list[FileAnalysis], list[str]]:
    """Each file's analysis; with ``workspace``, the helpers files import from their project are
    followed (each pool worker builds the same project from its file list)."""
    global _WORKSPACE
    analyses: dict[int, FileAnalysis] = {}
    internal_errors: list[str] = []
    pending: list[tuple[int, str, FileSettings, str | None, int]] = []  # index, path, settings, key, size
    if cache is not None and keys is None:
        keys = file_keys(files, settings_for)
    for index, path in enumerate(files):
        name = str(path)
        settings = settings_for(path)
        if cache is None:
            pending.append((index, name, settings, None, 0))
            continue
        if isinstance(keys[index], OSError):
            error = keys[index]
            analyses[index] = FileAnalysis(name, [input_error(name, "E902", f"cannot read: {error.strerror or error}")])
            continue
        key, size = keys[index]
        cached = cache.get(key)
        if cached is not None and _dependencies_unchanged(cached):
            analyses[index] = cached
            continue
        pending.append((index, name, settings, key, size))  # the bytes are read again by the analysis

    jobs = jobs or default_jobs()
    if jobs > 1 and len(pending) >= PARALLEL_MIN_FILES:
        # Largest files first, in small chunks, so that no process is left with a big file at the end.
        pending.sort(key=lambda item: -item[4] if item[4] else -_size(item[1]))
        items = [(name, settings, key) for _, name, settings, key, _ in pending]
        start = (_start_worker, ([i.path for i in workspace.index.infos()], workspace.eager,
                                 str(cache.directory) if cache is not None else None)) if workspace else (
            tune_garbage_collection, ())
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, initializer=start[0], initargs=start[1]) as pool, \
                _collector_paused():
            outcomes = pool.map(_analyse_one, items, chunksize=max(1, min(8, len(items) // (jobs * 16))))
            _collect(pending, outcomes, analyses, internal_errors, cache, progress)
    else:
        items = [(name, settings, key) for _, name, settings, key, _ in pending]
        previous, _WORKSPACE = _WORKSPACE, workspace
        try:
            _collect(pending, map(_analyse_one, items), analyses, internal_errors, cache, progress)
        finally:
            _WORKSPACE = previous
    return [analyses[i] for i in sorted(analyses)], internal_errors


def lint_files(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
               cache: ResultsCache | None = None, progress: Callable[[str], None] | None = None
               ) -> tuple[list[FileResult], list[str]]:
    results, internal_errors, _ = lint_project(files, settings_for, jobs, cache, progress)
    return results, internal_errors


def lint_project(files: list[Path], settings_for: Callable[[Path], FileSettings], jobs: int | None = None,
                 cache: ResultsCache | None = None, progress: Callable[[str], None] | None = None
                 ) -> tuple[list[FileResult], list[str], Workspace]:
    """Analyse the files, then finish their findings with their projects' model.

    With a cache, a run over exactly the same files, settings and project reads its results whole:
    the project model (recordings, contexts) depends on every file, so it is cached per run.
    """
    tune_garbage_collection()
    workspace = Workspace.for_files(files, cache)
    keys = run_key = None
    if cache is not None:
        keys = file_keys(files, settings_for)
        run_key = ResultsCache.run_key([k if isinstance(k, tuple) else repr(k) for k in keys],
                                       workspace.context_digest)
        cached = cache.get_blob(run_key)
        if isinstance(cached, list) and len(cached) == len(files) and all(len(entry) == 3 for entry in cached):
            return [_result(*entry) for entry in cached], [], workspace
    analyses, internal_errors = analyse_files(files, settings_for, jobs, cache, progress, keys, workspace)
    if progress and len(files) > 50:
        progress(f"following recordings across {len(files)} files")
    with _analyses_frozen():
        results = workspace.results(analyses, settings_for)
    if run_key is not None and not internal_errors and len(results) == len(files):
        cache.put_blob(run_key, [(r.path, r.findings, r.hidden_by_context) for r in results])
    return results, internal_errors, workspace


def _result(path: str, findings: list, hidden_by_context: int) -> FileResult:
    """A result read from the cache: the text is read again only where there are findings to show."""
    source = None
    if findings:
        try:
            source = decode_source(path, Path(path).read_bytes())
        except (OSError, SourceError):
            source = None
    return FileResult(path, findings, source, hidden_by_context=hidden_by_context)


def _dependencies_unchanged(analysis: FileAnalysis) -> bool:
    """Whether the files whose helpers a cached analysis followed still read as they did."""
    for path, digest in analysis.dependencies.items():
        try:
            if text_digest(decode_source(path, Path(path).read_bytes()).text) != digest:
                return False
        except (OSError, SourceError):
            return False
    return True


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
