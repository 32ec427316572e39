"""The wheel, not only the editable install, carries the rule catalogue; the installed warp-lang's
own examples and tests lint without a crash."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_into_a_fresh_venv_and_lints(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(ROOT)],
                   check=True, timeout=300)
    wheel = next(wheels.glob("warp_lint-*.whl"))
    environment = tmp_path / "fresh"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True, timeout=600)
    work = tmp_path / "work"
    work.mkdir()
    (work / "sim.py").write_text(
        "import warp as wp\n\n@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    i = wp.tid()\n    a[i] = a[i] * a[i]\n")
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([str(environment / "bin" / "warp-lint"), "check", "--no-cache", "sim.py"], cwd=work,
                            capture_output=True, text=True, env=clean_env, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "sim.py:6:5: WL102" in result.stdout
    probe = subprocess.run(
        [str(python), "-c", "import warp_lint, warp_lint.registry as r; print(warp_lint.__file__, len(r.all_rules()))"],
        cwd=work, capture_output=True, text=True, env=clean_env, check=True)
    location, count = probe.stdout.split()
    assert str(environment) in location, "the wheel's copy is used, not the checkout"
    assert int(count) == len(list((ROOT / "rules").glob("wl*.py")))


def _warp_package() -> Path | None:
    spec = importlib.util.find_spec("warp")  # locating it does not import it
    return Path(spec.origin).parent if spec and spec.origin else None


@pytest.mark.skipif(_warp_package() is None, reason="warp-lang is not installed")
def test_installed_warp_examples_and_tests_lint_without_a_crash():
    package = _warp_package()
    result = subprocess.run(
        [sys.executable, "-m", "warp_lint", "check", "--no-cache", "--exit-zero", "--output-format", "json",
         "--target-warp-version", ">=0", str(package / "examples"), str(package / "tests")],
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "internal error" not in result.stderr
    findings = json.loads(result.stdout)
    assert not [f for f in findings if f["code"] in ("E999", "E902")], "warp's own files all parse"


def test_a_source_checkout_without_an_install_says_in_one_line_to_install_it():
    """`python -m warp_lint` in the checkout finds `warp_lint/` but not `warp_lint.rules`, which only
    the install maps onto the top-level `rules/` folder. `-S` keeps the editable install's finder
    out; PYTHONPATH keeps the dependencies in."""
    dependencies = os.pathsep.join(p for p in sys.path if p.endswith("site-packages"))
    environment = {**os.environ, "PYTHONPATH": dependencies}
    result = subprocess.run([sys.executable, "-S", "-m", "warp_lint", "check", "--no-cache", "examples"], cwd=ROOT,
                            capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "pip install -e ." in result.stderr and "rules/" in result.stderr and "warp_lint.rules" in result.stderr
