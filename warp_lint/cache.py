"""The results cache: a re-run over unchanged files reads findings instead of computing them.

Keyed on the file's bytes, warp-lint's version, the file's settings (rule selection, target Warp
version, options) and the path (findings name it). The version alone would not notice an edited
rule in a development checkout, so the key also holds the size and modification time of every
module that decides findings (``code_fingerprint``). One JSON file per entry, written to a
temporary file and renamed, so concurrent runs never see a half-written entry; a corrupt or
unreadable entry is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from warp_lint import __version__
from warp_lint.finding import Finding, finding_from_dict, finding_to_dict

CACHEDIR_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This directory is a cache created by warp-lint.\n"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> bytes:
    """Size and modification time of the analysis code: warp_lint's top-level modules and the rules.

    The output and runtime subpackages do not decide findings and are left out. A few dozen
    ``stat`` calls, once per process.
    """
    import warp_lint
    import warp_lint.rules

    digest = hashlib.blake2b(digest_size=16)
    for folder in (*warp_lint.__path__, *warp_lint.rules.__path__):
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py") and entry.is_file():
                stat = entry.stat()
                digest.update(f"{entry.path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.digest()


class ResultsCache:
    def __init__(self, directory: Path):
        self.directory = Path(directory) / __version__
        self._ready = False

    @staticmethod
    def key(path: str, raw: bytes, settings) -> str:
        digest = hashlib.blake2b(digest_size=20)
        digest.update(__version__.encode())
        digest.update(code_fingerprint())
        digest.update(repr(settings).encode())
        digest.update(os.fsencode(path))
        digest.update(b"\0")
        digest.update(raw)
        return digest.hexdigest()

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> list[Finding] | None:
        try:
            with open(self._entry(key), encoding="utf-8") as handle:
                entry = json.load(handle)
            if not isinstance(entry, list):  # `{}` would read as "no findings"
                return None
            return [finding_from_dict(item) for item in entry]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # unreadable, or not our format
            return None

    def put(self, key: str, findings: list[Finding]) -> None:
        entry = self._entry(key)
        try:
            self._prepare(entry.parent)
            descriptor, temporary = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump([finding_to_dict(f) for f in findings], handle)
            os.replace(temporary, entry)
        except OSError:
            pass  # a read-only or full disk costs speed, never a result

    def _prepare(self, folder: Path) -> None:
        if not self._ready:
            root = self.directory.parent
            root.mkdir(parents=True, exist_ok=True)
            tag = root / "CACHEDIR.TAG"
            if not tag.exists():
                tag.write_text(CACHEDIR_TAG)
            gitignore = root / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("*\n")
            self._ready = True
        folder.mkdir(parents=True, exist_ok=True)
