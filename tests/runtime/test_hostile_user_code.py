"""User code that raises, exhausts memory or floods the output during a confirmation gives an
inconclusive verdict with the reason (or a verdict despite the noise); the checker never writes
into the user's Warp kernel cache."""

from __future__ import annotations

import os
import time

import pytest
from runtime_helpers import FIXTURES, make_finding
from warp_devices import DEVICES

from warp_lint.runtime import confirm_findings

pytest.importorskip("warp")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("behaviour, status, reason", [
    ("memory", "inconclusive", "import-error"),
    ("raise", "inconclusive", "import-error"),
    ("print", "confirmed", "gradient-mismatch"),
])
def test_hostile_module(monkeypatch, kernel_cache_dir, behaviour, status, reason, device):
    monkeypatch.setenv("WARP_LINT_TEST_HOSTILE", behaviour)
    finding = make_finding(FIXTURES / "hostile_imports.py", "square_in_place", "WL102", reads=["a"], writes=["a"])
    started = time.monotonic()
    confirm_findings([finding], device=device, timeout=120, cache_dir=kernel_cache_dir)
    assert time.monotonic() - started < 300
    assert finding.confirmation.status == status
    assert finding.confirmation.reason.startswith(reason), finding.confirmation.reason


@pytest.mark.parametrize("device", DEVICES)
def test_the_users_warp_kernel_cache_is_never_written(monkeypatch, tmp_path, kernel_cache_dir, device):
    users_cache = tmp_path / "users-warp-cache"
    users_cache.mkdir()
    monkeypatch.setenv("WARP_CACHE_PATH", str(users_cache))
    finding = make_finding(FIXTURES / "hazards.py", "square_in_place", "WL102", reads=["a"], writes=["a"])
    confirm_findings([finding], device=device, timeout=120, cache_dir=kernel_cache_dir)
    assert finding.confirmation.status == "confirmed"
    assert list(users_cache.iterdir()) == []
    assert not [p for p in FIXTURES.iterdir() if p.name.startswith(".warp-lint")]
    assert os.listdir(kernel_cache_dir), "compiled modules went to warp-lint's own cache"
