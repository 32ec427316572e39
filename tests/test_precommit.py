"""The pre-commit hooks, run by the real ``pre-commit`` program against a throwaway repository.

pre-commit installs the hook from a git repository: it builds a virtualenv and pip-installs the
project from the configured package index (no other network). ``try-repo`` would take this
checkout's HEAD plus changes to *tracked* files only, so a new, uncommitted file (a renderer, the
hooks file itself) would be missing; the test therefore snapshots the working tree (tracked and
untracked, minus what git ignores) into a fresh repository with one commit and installs from that.
All of pre-commit's state lives in a temporary PRE_COMMIT_HOME.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent


def _pre_commit() -> str | None:
    beside = Path(sys.executable).with_name("pre-commit")
    return str(beside) if beside.exists() else shutil.which("pre-commit")


PRE_COMMIT = _pre_commit()
pytestmark = pytest.mark.skipif(PRE_COMMIT is None, reason="the `pre-commit` executable is not installed"
                                " (pip install pre-commit, or the project's `test` extra)")

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "warp-lint tests", "GIT_AUTHOR_EMAIL": "tests@example.invalid",
                "GIT_COMMITTER_NAME": "warp-lint tests", "GIT_COMMITTER_EMAIL": "tests@example.invalid"}

HAZARD = """\
import warp as wp


@wp.kernel
def square(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] * a[i]
"""
HAZARD_FIXED = """\
import warp as wp


@wp.kernel
def square(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * a[i]
"""
# rules/wl101_array_component_write.py's first INVALID example, fixable when targeting Warp <1.14.
COMPONENTS = """\
import warp as wp


@wp.kernel
def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i].x = 2.0 * x[i]
    y[i].y = x[i]
    y[i].z = 0.0
"""
COMPONENTS_FIXED = """\
import warp as wp


@wp.kernel
def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)
"""


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _git(cwd: Path, env: dict[str, str], *arguments: str) -> str:
    result = _run(["git", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *arguments], cwd, env)
    assert result.returncode == 0, f"git {' '.join(arguments)}:\n{result.stdout}{result.stderr}"
    return result.stdout.strip()


def _snapshot_project(destination: Path, env: dict[str, str]) -> str:
    """Copy this checkout's working tree (what git does not ignore) into a new repository; return
    the commit."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], PROJECT, env)
    if listed.returncode == 0:
        names = [name for name in listed.stdout.split("\0") if name]
    else:  # not a git checkout (an unpacked sdist): everything but the usual build debris
        skip = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis", ".warp_lint_cache"}
        names = [str(p.relative_to(PROJECT)) for p in PROJECT.rglob("*")
                 if p.is_file() and not skip.intersection(p.relative_to(PROJECT).parts)
                 and not any(part.endswith(".egg-info") for part in p.parts)]
    for name in names:
        source = PROJECT / name
        if source.is_file():  # listed but deleted in the working tree: leave it out
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    assert (destination / ".pre-commit-hooks.yaml").is_file()
    _git(destination, env, "init", "-q")
    _git(destination, env, "add", "-A")
    _git(destination, env, "commit", "-q", "-m", "snapshot")
    return _git(destination, env, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    base = tmp_path_factory.mktemp("pre-commit")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PRE_COMMIT", "GIT_", "VIRTUAL_ENV", "WARP_LINT_OUTPUT_FORMAT"))}
    env.update(GIT_IDENTITY, PRE_COMMIT_HOME=str(base / "home"), PRE_COMMIT_COLOR="never", NO_COLOR="1")
    project = base / "project"
    project.mkdir()
    rev = _snapshot_project(project, env)
    return base, env, project, rev


def _user_repo(base: Path, env: dict[str, str], name: str, files: dict[str, str]) -> Path:
    repo = base / name
    repo.mkdir()
    _git(repo, env, "init", "-q")
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, env, "add", "-A")
    return repo


def test_try_repo_reports_the_hazard_then_passes_once_fixed(workspace):
    base, env, project, _ = workspace
    repo = _user_repo(base, env, "user-check", {
        "kernels.py": HAZARD,
        # Excluded by configuration: pre-commit names it explicitly, --force-exclude skips it.
        "vendored/third_party.py": HAZARD,
        "pyproject.toml": '[tool.warp-lint]\nextend-exclude = ["vendored"]\n',
    })
    command = [PRE_COMMIT, "try-repo", str(project), "warp-lint", "--all-files", "--verbose"]

    failed = _run(command, repo, env)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1, output
    assert "kernels.py:7:5: WL102" in output, output
    assert "third_party.py" not in output, output  # named by pre-commit, skipped by --force-exclude

    (repo / "kernels.py").write_text(HAZARD_FIXED)
    _git(repo, env, "add", "-A")
    passed = _run(command, repo, env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "warp-lint" in passed.stdout and "Passed" in passed.stdout


def test_fix_hook_applies_safe_fixes_and_then_passes(workspace):
    base, env, project, rev = workspace
    config = textwrap.dedent(f"""\
        repos:
          - repo: {project.as_posix()}
            rev: {rev}
            hooks:
              - id: warp-lint-fix
                args: [--target-warp-version, "<1.14"]
        """)
    repo = _user_repo(base, env, "user-fix", {"components.py": COMPONENTS, ".pre-commit-config.yaml": config})
    command = [PRE_COMMIT, "run", "warp-lint-fix", "--all-files", "--show-diff-on-failure"]

    changed = _run(command, repo, env)
    output = changed.stdout + changed.stderr
    assert changed.returncode == 1, output  # a hook that modifies files fails the run, by design
    assert "files were modified by this hook" in output, output
    assert (repo / "components.py").read_text() == COMPONENTS_FIXED

    _git(repo, env, "add", "-A")
    clean = _run(command, repo, env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
