"""The results cache and the process pool: same findings whether computed, cached or parallel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warp_lint import cache as cache_module
from warp_lint import runner
from warp_lint.cache import ResultsCache
from warp_lint.engine import FileSettings
from warp_lint.finding import finding_to_dict
from warp_lint.registry import all_rules

READ_THEN_WRITE = """import warp as wp


@wp.kernel
def square_{n}(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] * a[i]
"""

COMPONENT_WRITE = """import warp as wp


@wp.kernel
def scale_{n}(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i].x = 2.0 * x[i]
"""

CLEAN = """import warp as wp


@wp.kernel
def copy_{n}(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = a[i]
"""

TEMPLATES = (READ_THEN_WRITE, COMPONENT_WRITE, CLEAN, "import numpy as np\nx = np.zeros(3)\n")


def settings_for(path: Path, target: str = "") -> FileSettings:
    return FileSettings(tuple(all_rules()), target)


@pytest.fixture
def tree(tmp_path: Path) -> list[Path]:
    """More files than PARALLEL_MIN_FILES, in nested folders, with and without findings."""
    count = runner.PARALLEL_MIN_FILES + 8
    files = []
    for n in range(count):
        path = tmp_path / "src" / f"part{n % 3}" / f"module_{n:02d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TEMPLATES[n % len(TEMPLATES)].format(n=n))
        files.append(path)
    return sorted(files)


def flat(results) -> list[tuple[str, list[dict]]]:
    return [(r.path, [finding_to_dict(f) for f in r.findings]) for r in results]


def test_a_cache_hit_gives_the_same_findings_without_linting(tree, tmp_path, monkeypatch):
    cache = ResultsCache(tmp_path / "cache")
    first, errors = runner.lint_files(tree, settings_for, jobs=1, cache=cache)
    assert errors == [] and any(r.findings for r in first)

    def no_linting(*args, **kwargs):
        raise AssertionError("a cached file was linted again")

    monkeypatch.setattr(runner, "analyse_bytes", no_linting)
    second, errors = runner.lint_files(tree, settings_for, jobs=1, cache=ResultsCache(tmp_path / "cache"))
    assert errors == []
    assert flat(second) == flat(first)
    for result in second:  # the renderers and --fix need the text of files with findings
        assert (result.source is not None) == bool(result.findings)
        if result.source is not None:
            assert result.source.raw == Path(result.path).read_bytes()


def test_changed_content_settings_version_or_code_make_a_new_key(tmp_path, monkeypatch):
    settings = settings_for(tmp_path)
    raw = READ_THEN_WRITE.format(n=0).encode()
    key = ResultsCache.key("a.py", raw, settings)
    assert ResultsCache.key("a.py", raw, settings) == key
    assert ResultsCache.key("a.py", raw + b"\n", settings) != key  # content
    assert ResultsCache.key("b.py", raw, settings) != key  # path: findings name it
    assert ResultsCache.key("a.py", raw, FileSettings(settings.rule_codes[:1], "")) != key  # rule selection
    assert ResultsCache.key("a.py", raw, FileSettings(settings.rule_codes, ">=1.10")) != key  # target Warp version
    assert ResultsCache.key("a.py", raw, FileSettings(settings.rule_codes, "", report_unused_noqa=True)) != key
    monkeypatch.setattr(cache_module, "__version__", "999.0")
    assert ResultsCache.key("a.py", raw, settings) != key  # warp-lint version
    monkeypatch.undo()
    monkeypatch.setattr(cache_module, "code_fingerprint", lambda: b"edited rule")
    assert ResultsCache.key("a.py", raw, settings) != key  # an edited rule in a development checkout


def test_changed_content_is_linted_again(tree, tmp_path):
    cache = ResultsCache(tmp_path / "cache")
    target = next(p for p in tree if "square_" in p.read_text())
    before, _ = runner.lint_files([target], settings_for, cache=cache)
    assert before[0].findings
    target.write_text(CLEAN.format(n=99))
    after, _ = runner.lint_files([target], settings_for, cache=cache)
    assert after[0].findings == []


def test_changed_settings_are_linted_again(tree, tmp_path):
    cache = ResultsCache(tmp_path / "cache")
    target = next(p for p in tree if "square_" in p.read_text())
    everything, _ = runner.lint_files([target], settings_for, cache=cache)
    assert {f.code for f in everything[0].findings} == {"WL102"}
    only_wl101, _ = runner.lint_files([target], lambda p: FileSettings(("WL101",), ""), cache=cache)
    assert only_wl101[0].findings == []


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"{}", b"[1, 2]", b"[[1]]", b'[{"code": "WL102"}]',
                                     b"\xff\xfe\x00"])
def test_a_corrupt_cache_entry_is_a_miss_and_is_rewritten(tree, tmp_path, garbage):
    cache = ResultsCache(tmp_path / "cache")
    target = next(p for p in tree if "square_" in p.read_text())
    expected, _ = runner.lint_files([target], settings_for, cache=cache)
    key = cache.key(str(target), target.read_bytes(), settings_for(target))
    entry = cache._entry(key)
    assert entry.exists()
    for stored in cache.directory.rglob("*.pickle"):  # the file's entry and the whole run's
        stored.write_bytes(garbage)
    assert cache.get(key) is None
    again, errors = runner.lint_files([target], settings_for, cache=cache)
    assert errors == [] and flat(again) == flat(expected)
    assert cache.get(key) is not None  # rewritten


def test_a_file_changed_between_the_cache_check_and_the_lint_is_cached_under_what_was_linted(tmp_path, monkeypatch):
    target = tmp_path / "moving.py"
    target.write_text(CLEAN.format(n=1))
    first_bytes = target.read_bytes()
    second_bytes = READ_THEN_WRITE.format(n=1).encode()
    reads = []
    real = Path.read_bytes

    def changing(path: Path) -> bytes:
        if path == target:
            reads.append(path)
            return first_bytes if len(reads) == 1 else second_bytes
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", changing)
    cache = ResultsCache(tmp_path / "cache")
    results, _ = runner.lint_files([target], settings_for, jobs=1, cache=cache)
    assert [f.code for f in results[0].findings] == ["WL102"]
    assert cache.get(cache.key(str(target), first_bytes, settings_for(target))) is None
    assert [f.code for f in cache.get(cache.key(str(target), second_bytes, settings_for(target))).findings] == ["WL102"]


def test_jobs_2_gives_the_same_findings_in_the_same_order_as_jobs_1(tree):
    assert len(tree) > runner.PARALLEL_MIN_FILES
    serial, serial_errors = runner.lint_files(tree, settings_for, jobs=1)
    parallel, parallel_errors = runner.lint_files(tree, settings_for, jobs=2)
    assert serial_errors == parallel_errors == []
    assert [r.path for r in serial] == [str(p) for p in tree]
    assert flat(parallel) == flat(serial)
    assert sum(len(r.findings) for r in serial) >= len(tree) // 2
    for result in parallel:  # only files with findings keep their text
        assert (result.source is not None) == bool(result.findings)


def test_a_small_run_starts_no_pool(tree, monkeypatch):
    class NoPool:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a pool was started for a small run")

    monkeypatch.setattr(runner.concurrent.futures, "ProcessPoolExecutor", NoPool)
    results, errors = runner.lint_files(tree[: runner.PARALLEL_MIN_FILES - 1], settings_for, jobs=8)
    assert errors == [] and len(results) == runner.PARALLEL_MIN_FILES - 1


def test_a_fully_cached_large_run_starts_no_pool(tree, tmp_path, monkeypatch):
    runner.lint_files(tree, settings_for, jobs=1, cache=ResultsCache(tmp_path / "cache"))

    class NoPool:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a pool was started with nothing to lint")

    monkeypatch.setattr(runner.concurrent.futures, "ProcessPoolExecutor", NoPool)
    results, _ = runner.lint_files(tree, settings_for, jobs=2, cache=ResultsCache(tmp_path / "cache"))
    assert len(results) == len(tree)


# -- the command line, as separate processes ------------------------------------------------------

def _check(root: Path, cache_dir: Path, *options: str) -> subprocess.Popen:
    environment = {**os.environ, "WARP_LINT_CACHE_DIR": str(cache_dir), "NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "warp_lint", "check", "--output-format", "json", *options, "src"],
                            cwd=root, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen) -> tuple[int, list[dict], str]:
    out, err = process.communicate(timeout=180)
    return process.returncode, json.loads(out), err


def test_two_concurrent_runs_on_one_cache_directory_both_succeed(tree, tmp_path):
    cache_dir = tmp_path / "shared-cache"
    first, second = _check(tmp_path, cache_dir, "--jobs", "2"), _check(tmp_path, cache_dir, "--jobs", "1")
    (code1, findings1, err1), (code2, findings2, err2) = _finish(first), _finish(second)
    assert (code1, code2) == (1, 1), err1 + err2
    assert findings1 == findings2 and findings1
    assert not list(cache_dir.rglob("*.tmp"))  # no half-written entry left behind
    code3, findings3, err3 = _finish(_check(tmp_path, cache_dir))  # served from the cache they wrote
    assert code3 == 1 and findings3 == findings1, err3


def test_jobs_2_and_jobs_1_print_the_same_report(tree, tmp_path):
    _, serial, _ = _finish(_check(tmp_path, tmp_path / "unused", "--no-cache", "--jobs", "1"))
    _, parallel, _ = _finish(_check(tmp_path, tmp_path / "unused", "--no-cache", "--jobs", "2"))
    assert parallel == serial and serial


def test_no_cache_writes_nothing(tree, tmp_path):
    cache_dir = tmp_path / "cache-dir"
    code, findings, err = _finish(_check(tmp_path, cache_dir, "--no-cache"))
    assert code == 1 and findings, err
    assert not cache_dir.exists()
    assert not (tmp_path / ".warp_lint_cache").exists()
    code, _, err = _finish(_check(tmp_path, cache_dir))  # and the cache is written without it
    assert code == 1, err
    assert list(cache_dir.rglob("*.pickle")) and (cache_dir / "CACHEDIR.TAG").exists()


KERNEL_FILE = """
import warp as wp

@wp.kernel
def square_in_place(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] * a[i]
"""

DRIVER_FORWARD = """
import warp as wp
from kernels import square_in_place

def run(a):
    wp.launch(square_in_place, 3, inputs=[a])
"""

DRIVER_RECORDED = """
import warp as wp
from kernels import square_in_place

def run(a, loss):
    tape = wp.Tape()
    with tape:
        wp.launch(square_in_place, 3, inputs=[a])
    tape.backward(loss)
"""


def test_a_change_to_a_file_the_linted_file_depends_on_reaches_it_through_the_cache(tmp_path):
    """The driver is not linted, only read: whether it records the kernel decides the finding."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'sim'\n")
    kernels, driver = tmp_path / "kernels.py", tmp_path / "driver.py"
    kernels.write_text(KERNEL_FILE)
    driver.write_text(DRIVER_FORWARD)
    cache = ResultsCache(tmp_path / "cache")
    forward, _ = runner.lint_files([kernels], settings_for, cache=cache)
    assert forward[0].findings == []  # launched outside any tape: forward-only
    driver.write_text(DRIVER_RECORDED)
    recorded, _ = runner.lint_files([kernels], settings_for, cache=cache)
    assert [f.code for f in recorded[0].findings] == ["WL102"]
    assert "recorded on `tape`" in recorded[0].findings[0].related[0].message
    driver.write_text(DRIVER_FORWARD)
    again, _ = runner.lint_files([kernels], settings_for, cache=cache)
    assert again[0].findings == []


FUNCS_READ = """
import warp as wp

@wp.func
def store(a: wp.array(dtype=float), i: int, v: float):
    wp.atomic_add(a, i, v)
"""

KERNEL_THROUGH_HELPER = """
import warp as wp
from funcs import store

@wp.kernel
def through_helper(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = a[i] * a[i]
    store(a, i, 1.0)
"""


def test_a_change_to_an_imported_helper_reaches_the_cached_analysis_of_its_caller(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'sim'\n")
    funcs, kernels = tmp_path / "funcs.py", tmp_path / "kernels.py"
    funcs.write_text(FUNCS_READ)
    kernels.write_text(KERNEL_THROUGH_HELPER)
    cache = ResultsCache(tmp_path / "cache")
    settings = lambda p: FileSettings(("WL102",), "")  # noqa: E731
    accumulates, _ = runner.lint_files([kernels], settings, cache=cache)
    assert accumulates[0].findings == []  # the helper accumulates: fine
    funcs.write_text(FUNCS_READ.replace("wp.atomic_add(a, i, v)", "a[i] = v"))
    stores, _ = runner.lint_files([kernels], settings, cache=cache)
    assert [f.code for f in stores[0].findings] == ["WL102"]  # now it stores after the read


def test_a_summary_sent_between_processes_still_tells_literals_from_code(tmp_path):
    """Pool workers and the cache pickle summaries: `n = 16` stays a literal, `dim = a.shape[0]`
    and a parameter without a default stay not literal, checked by identity as the model does."""
    import pickle

    from warp_lint.engine import analyse_source
    from warp_lint.project.summary import NOT_LITERAL
    from warp_lint.source import decode_source

    text = "import warp as wp\n\nN = 16\nDIM = compute()\n\ndef run(a, n=8):\n    pass\n"
    summary = analyse_source(decode_source(str(tmp_path / "m.py"), text.encode()), FileSettings((), "")).summary
    received = pickle.loads(pickle.dumps(summary))
    assert received.values["N"].literal == 16
    assert received.values["DIM"].literal is NOT_LITERAL
    assert [p.default for p in received.functions["run"].params] == [NOT_LITERAL, 8]
    assert received.functions["run"].params[0].default is NOT_LITERAL
