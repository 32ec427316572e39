"""Every run gets its own Warp kernel cache and warp-lint results cache, so no test depends on a
warm cache left by an earlier run (and none writes into the user's caches)."""

import os
import shutil
import tempfile

import pytest

_RUN_DIRECTORY = tempfile.mkdtemp(prefix="warp-lint-tests-")
os.environ["WARP_CACHE_PATH"] = os.path.join(_RUN_DIRECTORY, "warp-kernels")
os.environ["WARP_LINT_CACHE_DIR"] = os.path.join(_RUN_DIRECTORY, "warp-lint-cache")
os.environ["XDG_CACHE_HOME"] = os.path.join(_RUN_DIRECTORY, "xdg-cache")


def pytest_unconfigure(config):
    # Each run's caches are a few hundred MB of compiled kernels: they go with the run.
    shutil.rmtree(_RUN_DIRECTORY, ignore_errors=True)


@pytest.fixture
def declare_project_urls(monkeypatch):
    """Replace the package metadata's ``Project-URL`` entries for one test."""
    from warp_lint import links

    def declare(*entries: str) -> None:
        monkeypatch.setattr(links, "_declared_project_urls", lambda: list(entries))
        links.project_urls.cache_clear()

    yield declare
    links.project_urls.cache_clear()  # later tests read the installed metadata again
