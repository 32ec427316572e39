"""The results cache: a re-run over unchanged files reads their analyses instead of computing them.

A linted file's entry (its analysis: summary, kernel facts, kernel findings) is keyed on the
file's bytes, warp-lint's version, the file's settings (rule selection, target Warp version,
options) and the path (findings name it). Files the project model only reads (an import, a kernel
launched from a linted file) have entries keyed on their bytes alone. What depends on other files
(differentiation contexts, host findings) is never cached: it is recomputed from the summaries,
so a change to one file reaches every file that depends on it. The version alone would not notice
an edited rule in a development checkout, so every key also holds the size and modification time
of every module that decides findings (``code_fingerprint``). One pickle per entry, written to a
temporary file and renamed, so concurrent runs never see a half-written entry; a corrupt or
unreadable entry is a miss.

Entries are pickles, signed with a key kept in the user's own cache folder: an entry that was not
written by this user (a cache folder committed to a repository, say) fails the check and is never
unpickled.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import pickle
import tempfile
from pathlib import Path

from warp_lint import __version__

CACHEDIR_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This directory is a cache created by warp-lint.\n"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> bytes:
    """Size and modification time of the analysis code: warp_lint's top-level modules and the rules.

    The output and runtime subpackages do not decide findings and are left out. A few dozen
    ``stat`` calls, once per process.
    """
    import warp_lint
    import warp_lint.project
    import warp_lint.rules

    digest = hashlib.blake2b(digest_size=16)
    for folder in (*warp_lint.__path__, *warp_lint.project.__path__, *warp_lint.rules.__path__):
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py") and entry.is_file():
                stat = entry.stat()
                digest.update(f"{entry.path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.digest()


SIGNATURE_BYTES = 32


@functools.lru_cache(maxsize=1)
def _signing_key() -> bytes:
    """This user's key for signing entries, made once (``$XDG_CACHE_HOME/warp-lint/signing-key``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "warp-lint", "signing-key")
    try:
        with open(path, "rb") as handle:
            key = handle.read()
        if len(key) == SIGNATURE_BYTES:
            return key
    except OSError:
        pass
    key = os.urandom(SIGNATURE_BYTES)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        descriptor = os.open(path + f".{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key)
        os.replace(path + f".{os.getpid()}", path)
        with open(path, "rb") as handle:  # another process may have won the race: use its key
            return handle.read()
    except OSError:
        return key  # nowhere to keep it: entries are good for this process only


def _sign(payload: bytes) -> bytes:
    return hmac.new(_signing_key(), payload, hashlib.sha256).digest()


class ResultsCache:
    def __init__(self, directory: Path):
        self.directory = Path(directory) / __version__
        self._ready = False

    @classmethod
    def at(cls, versioned: str) -> ResultsCache:
        """The cache whose ``directory`` is ``versioned`` (a worker process reopening its parent's)."""
        cache = cls(Path(versioned).parent)
        cache.directory = Path(versioned)
        return cache

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

    @staticmethod
    def run_key(file_keys: list, context: str) -> str:
        """The key of a whole run: every linted file's key, in order, and the project around them."""
        digest = hashlib.blake2b(digest_size=20)
        digest.update(b"run\0")
        digest.update(repr(file_keys).encode())
        digest.update(context.encode())
        return digest.hexdigest()

    @staticmethod
    def blob_key(kind: str, raw: bytes) -> str:
        """The key of what a file's bytes alone decide (its summary, its kernels' facts)."""
        digest = hashlib.blake2b(digest_size=20)
        digest.update(__version__.encode())
        digest.update(code_fingerprint())
        digest.update(kind.encode())
        digest.update(b"\0")
        digest.update(raw)
        return digest.hexdigest()

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.pickle"

    def get(self, key: str):
        """The analysis stored under ``key``, or None (missing, unreadable, or not ours)."""
        from warp_lint.engine import FileAnalysis

        entry = self.get_blob(key)
        return entry if isinstance(entry, FileAnalysis) else None

    def put(self, key: str, analysis) -> None:
        self.put_blob(key, analysis.without_source())

    def get_blob(self, key: str):
        try:
            with open(self._entry(key), "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        signature, payload = data[:SIGNATURE_BYTES], data[SIGNATURE_BYTES:]
        if not hmac.compare_digest(signature, _sign(payload)):
            return None  # not written by this user's warp-lint: never unpickled
        try:
            return pickle.loads(payload)
        except Exception:  # written by another version of the classes
            return None

    def put_blob(self, key: str, value) -> None:
        entry = self._entry(key)
        try:
            self._prepare(entry.parent)
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            descriptor, temporary = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(_sign(payload) + payload)
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
