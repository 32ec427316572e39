"""Fixtures for the runtime checker tests: a per-run kernel cache, Warp in the test process, the API kernels."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from runtime_helpers import FIXTURES


@pytest.fixture(scope="session")
def kernel_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One warp-lint kernel cache per test run: compiled modules are shared across tests."""
    return str(tmp_path_factory.mktemp("warp-lint-kernels"))


@pytest.fixture(scope="session")
def warp_in_process(kernel_cache_dir: str):
    """``warp`` initialized in the test process with the per-run cache (for the gradcheck API)."""
    import warp as wp

    wp.config.kernel_cache_dir = kernel_cache_dir
    wp.config.quiet = True
    wp.init()
    return wp


@pytest.fixture(scope="session")
def api_kernels(warp_in_process):
    spec = importlib.util.spec_from_file_location("warp_lint_test_api_kernels", FIXTURES / "api_kernels.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # keep fixtures/ clean
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module
