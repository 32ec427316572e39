"""Small multi-file programs for the whole-program tests: written to a folder, linted, and run.

Imported by name (``from programs import write_program``): the tests folder is on ``sys.path``.
``findings`` lints a program with the real command line; ``expected`` reads its ``# expect: CODE``
markers.
``measure`` runs ``tests/measured/measure_programs.py`` on programs whose ``train.main(values)``
returns (loss, gradient), in one child process: it compares the gradient with central differences.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from warp_lint.cli import main as warp_lint

MEASURE_PROGRAMS = Path(__file__).parent / "measured" / "measure_programs.py"
VALUES = [0.3, 0.7, 1.1, 0.9]


def write_program(folder: Path, files: dict[str, str]) -> Path:
    """The files (dedented) in ``folder``, with a pyproject.toml that makes it a project of its own."""
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(f"[project]\nname = '{folder.name}'\n")
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    return folder


def measure(folders: dict[str, Path], names, manifest_dir: Path) -> dict[str, dict]:
    """Each named program's measurement (``measure_programs.py``'s JSON object), by name."""
    manifest = manifest_dir / "programs.json"
    manifest.write_text(json.dumps([{"id": name, "folder": str(folders[name]), "entry": "train", "values": VALUES}
                                    for name in names]))
    run = subprocess.run([sys.executable, str(MEASURE_PROGRAMS), str(manifest)], capture_output=True, text=True,
                         check=False, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    results = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return {result["id"]: result for result in results if "id" in result}


def report(target: Path, tmp_path: Path, *options: str) -> list[dict]:
    """``check --output-format json`` of ``target`` for Warp 1.19, with ``options``."""
    output = tmp_path / "report.json"
    warp_lint(["check", "--output-format", "json", "--no-cache", "--exit-zero", "--quiet",
               "--target-warp-version", "1.19.0", "--output-file", str(output), *options, str(target)])
    return json.loads(output.read_text())


def findings(target: Path, tmp_path: Path, *options: str) -> list[tuple[str, int, str]]:
    """(file relative to the program, row, code) of each finding, sorted."""
    return sorted((Path(f["filename"]).relative_to(target).as_posix(), f["location"]["row"], f["code"])
                  for f in report(target, tmp_path, *options))


def expected(folder: Path) -> list[tuple[str, int, str]]:
    """(file, row, code) of each `# expect: CODE` marker in the program, sorted."""
    return sorted((path.relative_to(folder).as_posix(), number, line.rsplit("# expect: ", 1)[1].strip())
                  for path in folder.rglob("*.py")
                  for number, line in enumerate(path.read_text().splitlines(), 1) if "# expect: " in line)


def line_of(path: Path, text: str) -> int:
    """The number of the first line of ``path`` that holds ``text``."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def explain(path: Path, text: str, capsys) -> str:
    """What `warp-lint explain` prints for the first line of ``path`` that holds ``text``."""
    warp_lint(["explain", "--no-cache", f"{path}:{line_of(path, text)}"])
    return capsys.readouterr().out


def load_module(text: str, name: str, folder: Path):
    """``text`` written to ``folder/name.py`` and imported as the module ``name``: a program a test runs."""
    path = folder / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
