"""The real-code corpus: public Warp projects installed from the package index into a scratch venv.

Shared by the real-code benchmarks (``bench_realcode.py`` for findings and judged precision,
``bench_confirm_realcode.py`` for runtime verdicts). Nothing of these projects is ever copied into
this repository: the code stays in the scratch environment.

    python benchmarks/realcode.py            # create (or reuse) the scratch venv, print the corpus

The venv lives in ``$WARP_LINT_REALCODE_DIR`` (default ``~/.cache/warp-lint-realcode``). The pins
are the releases the figures in the closing notes were measured on; ``--latest`` takes the newest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

PINS = {"warp-lang": "1.19.0", "newton": "1.8.0", "mujoco-warp": "4.0.0"}
# Projects linted as source only: installed without their dependencies, because they pin other
# releases of what ``PINS`` installs (rewarped pins warp-lang 1.3.3) or pull in PyTorch, which
# nothing here runs. rewarped, nvalchemi-toolkit-ops and warpsphcore differentiate through Warp
# with tapes inside ``torch.autograd.Function``; gswarp and body-models hand torch kernels of their
# own backward passes; warp-nn is a library whose users record its layers on their tapes;
# warp-jsb and warp-simdata run Warp forward; skrl trains its Warp agents (PPO, SAC, DDPG) with tapes
# of its own.
SOURCE_ONLY = {"rewarped": "1.3.3", "nvalchemi-toolkit-ops": "0.5.0", "warpsphcore": "0.6.0", "gswarp": "1.1.0",
               "body-models": "0.26.2", "warp-nn": "0.4.1", "warp-jsb": "0.1.0", "warp-simdata": "0.2.0",
               "skrl": "2.1.1"}


@dataclasses.dataclass(frozen=True)
class Project:
    name: str  # how tables name it
    root: Path  # the folder linted as one project
    package: str  # the import package it belongs to


def scratch_dir() -> Path:
    return Path(os.environ.get("WARP_LINT_REALCODE_DIR", Path.home() / ".cache" / "warp-lint-realcode"))


def python_of(directory: Path) -> Path:
    return directory / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"


def ensure_env(latest: bool = False, quiet: bool = True) -> Path:
    """Create the scratch venv with the pinned projects (once); return its Python."""
    directory = scratch_dir()
    python = python_of(directory)
    pins = {**PINS, **SOURCE_ONLY}
    marker = directory / ("installed-latest" if latest else "installed-" + "-".join(f"{k}{v}" for k, v in pins.items()))
    if python.exists() and marker.exists():
        return python
    directory.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        venv.create(directory / "venv", with_pip=True)
    def requirements(pinned: dict[str, str]) -> list[str]:
        return list(pinned) if latest else [f"{name}=={version}" for name, version in pinned.items()]

    quiet_flag = ["--quiet"] if quiet else []
    subprocess.run([str(python), "-m", "pip", "install", *quiet_flag, *requirements(PINS)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", *quiet_flag, "--no-deps", *requirements(SOURCE_ONLY)],
                   check=True)
    marker.write_text("\n".join(requirements(PINS) + requirements(SOURCE_ONLY)) + "\n")
    return python


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def package_dirs(python: Path, packages: list[str]) -> dict[str, Path]:
    """Where each package that ``python`` can import lives (``PYTHONPATH`` counts); missing ones are left out."""
    code = ("import importlib.util, json, sys; specs = {n: importlib.util.find_spec(n) for n in sys.argv[1:]}; "
            "print(json.dumps({n: list(s.submodule_search_locations)[0] for n, s in specs.items() if s}))")
    out = subprocess.run([str(python), "-c", code, *packages], check=True, capture_output=True, text=True)
    return {name: Path(folder) for name, folder in json.loads(out.stdout).items()}


def projects(python: Path) -> list[Project]:
    """The corpus: warp-lang's examples and tests, newton, mujoco-warp and the source-only projects
    (those ``python`` has installed)."""
    found = package_dirs(python, ["warp", "newton", "mujoco_warp", "rewarped", "nvalchemiops", "warpSPHCore",
                                  "gswarp", "body_models", "warp_nn", "warp_jsb", "warp_simdata", "skrl"])
    wanted = [
        Project("warp-lang examples", Path("examples"), "warp"),
        Project("warp-lang tests", Path("tests"), "warp"),
        Project("newton", Path(), "newton"),
        Project("mujoco-warp", Path(), "mujoco_warp"),
        Project("rewarped", Path(), "rewarped"),
        Project("nvalchemi-toolkit-ops", Path(), "nvalchemiops"),
        Project("warpsphcore", Path(), "warpSPHCore"),
        Project("gswarp", Path(), "gswarp"),
        Project("body-models", Path(), "body_models"),
        Project("warp-nn", Path(), "warp_nn"),
        Project("warp-jsb", Path(), "warp_jsb"),
        Project("warp-simdata", Path(), "warp_simdata"),
        Project("skrl", Path(), "skrl"),
    ]
    return [dataclasses.replace(p, root=found[p.package] / p.root) for p in wanted if p.package in found]


def installed_versions(python: Path) -> dict[str, str | None]:
    code = ("import importlib.metadata as m, json\n"
            "def version(n):\n"
            "    try:\n"
            "        return m.version(n)\n"
            "    except m.PackageNotFoundError:\n"
            "        return None\n"
            "print(json.dumps({n: version(n) for n in " + repr([*PINS, *SOURCE_ONLY]) + "}))")
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latest", action="store_true", help="install the newest releases instead of the pins")
    args = parser.parse_args(argv)
    python = ensure_env(args.latest, quiet=False)
    print(f"python: {python}")
    for name, version in installed_versions(python).items():
        print(f"{name} {version}")
    for project in projects(python):
        files = list(project.root.rglob("*.py"))
        lines = sum(len(f.read_bytes().splitlines()) for f in files)
        print(f"{project.name}: {project.root} ({len(files)} files, {lines} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
