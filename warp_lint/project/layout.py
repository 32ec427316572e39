"""Where a project starts, which files belong to it, and the module name of each file.

The root is the nearest folder holding ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or
``.git``. A file outside any such folder (an installed package, a loose script) belongs to the
package it sits in: the folder above its topmost ``__init__.py``, with only that package's files.

A module's name follows Python's import system: the dotted path from the folder above the topmost
package (``src/`` layouts included); a file outside a package is a top-level module named after
the file, as when its folder is on ``sys.path`` (scripts, pytest's rootdir-relative tests).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from warp_lint.config import DEFAULT_EXCLUDE

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# A project larger than this is indexed only where the linted files and their imports lead.
MAX_PROJECT_FILES = 20_000


@dataclasses.dataclass(frozen=True)
class ProjectRoot:
    path: Path  # the folder the project's files are found under
    marked: bool  # found by a marker file (else: the package folder of an unmarked file)


def find_root(file: Path) -> ProjectRoot:
    folder = file.parent.resolve()
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return ProjectRoot(candidate, True)
    return ProjectRoot(package_top(folder), False)


def package_top(folder: Path) -> Path:
    """The topmost package folder holding ``folder`` (``folder`` itself when it is no package).

    A folder without ``__init__.py`` between two packages is a namespace package (PEP 420), as
    newton's ``newton/_src``: the climb goes on through it, and stops at two non-packages in a row.
    """
    top = folder if (folder / "__init__.py").exists() else None
    current = folder
    while current.parent != current:
        parent = current.parent
        if (parent / "__init__.py").exists():
            top = parent
        elif not (current / "__init__.py").exists():
            break
        current = parent
    return top or folder


def module_name(file: Path, tops: dict[Path, tuple[Path, bool]] | None = None) -> str:
    """``pkg.sub.mod`` for ``.../pkg/sub/mod.py`` (``pkg.sub`` for its ``__init__.py``). ``tops``
    remembers each folder's topmost package across the calls of one index (a project's thousand
    files sit in a hundred folders)."""
    file = file.resolve()
    found = tops.get(file.parent) if tops is not None else None
    if found is None:
        top = package_top(file.parent)
        found = (top, (top / "__init__.py").exists())
        if tops is not None:
            tops[file.parent] = found
    top, is_package = found
    if not is_package:
        return file.stem
    parts = list(file.relative_to(top.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package_init(file: Path) -> bool:
    return file.name == "__init__.py"


def project_files(root: ProjectRoot) -> list[Path]:
    """Every Python file of the project, in a stable order, skipping the default excludes
    (virtual environments, build output, caches) and hidden folders. A loose folder (no marker,
    no package) holds what a script there can import: its own files and the packages below it,
    not every folder below (a script in ``/tmp`` does not make ``/tmp`` a project)."""
    excluded = set(DEFAULT_EXCLUDE)
    loose = not root.marked and not (root.path / "__init__.py").exists()
    found: list[Path] = []
    for directory, dirnames, filenames in os.walk(root.path):
        dirnames[:] = sorted(d for d in dirnames if d not in excluded and not d.startswith(".")
                             and not os.path.islink(os.path.join(directory, d))
                             and not (loose and not os.path.exists(os.path.join(directory, d, "__init__.py"))))
        for name in sorted(filenames):
            if name.endswith(".py"):
                found.append(Path(directory) / name)
                if len(found) >= MAX_PROJECT_FILES:
                    return found
    return found


def resolve_relative(importer_module: str, importer_is_package: bool, level: int, module: str) -> str:
    """The absolute module of ``from {'.' * level}{module} import ...`` in ``importer_module``."""
    if level == 0:
        return module
    parts = importer_module.split(".")
    if not importer_is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    base = ".".join(parts)
    return f"{base}.{module}" if base and module else (base or module)
