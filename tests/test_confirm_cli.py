"""`warp-lint check --confirm` end to end: static findings, then verdicts from real kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("warp")

from warp_devices import DEVICES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("device", DEVICES)
def test_bundled_example_hazards_are_confirmed_with_evidence(tmp_path, device):
    """The same verdicts on every device."""
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "warp_lint", "check", "--no-cache", "--confirm", "--select", "WL1",
         "--device", device, "--output-format", "json", "examples/particles.py"],
        cwd=ROOT, capture_output=True, text=True, env=environment, timeout=900)
    assert result.returncode == 1, result.stderr[-2000:]
    verdicts = {f["code"]: f["confirmation"] for f in json.loads(result.stdout)}
    assert set(verdicts) == {"WL102", "WL103", "WL104"}
    for code, confirmation in verdicts.items():
        assert confirmation["status"] == "confirmed", (code, confirmation["reason"])
        assert confirmation["warp_version"] and confirmation["device"] == device
        assert confirmation["evidence"], "a verdict carries its numbers"


def test_confirm_one_line(tmp_path):
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    line = next(n for n, text in enumerate((ROOT / "examples/particles.py").read_text().splitlines(), 1)
                if "# WL103" in text)
    result = subprocess.run([sys.executable, "-m", "warp_lint", "confirm", f"examples/particles.py:{line}",
                             "--no-cache", "--device", "cpu"], cwd=ROOT, capture_output=True, text=True,
                            env=environment, timeout=900)
    assert f"examples/particles.py:{line}:5: WL103" in result.stdout
    assert "= confirmed: " in result.stdout
    assert "WL102" not in result.stdout
