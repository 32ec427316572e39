"""Warp's own overwrite tracking (``wp.config.verify_autograd_array_access``) as supporting evidence.

Where Warp's messages go depends on the release: up to 1.13 ``print("Warning: ...")`` to stdout;
from 1.14 through Warp's logger as ``Warp UserWarning: ...`` on stderr, which
``warnings.catch_warnings(record=True)`` does not capture. So the child installs a recording
logger with ``wp.set_logger`` where it exists and also tees ``sys.stdout``/``sys.stderr``.

The tracker misses reads on the left of a binary operator (``a[i] = a[i] * g[i]`` is never
reported) and ``*=`` on array elements, so a silent tracker proves little: this is evidence
attached to a verdict, never the verdict.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, TextIO

# "Array passed to argument a in kernel K at FILE:LINE is being written to after it has been read
#  from within the same kernel." (in-kernel, location = the write statement) and
# "Array [...] passed to argument a in kernel K at FILE:LINE is being written to but has already
#  been read from in a previous launch." (across launches, location = the kernel's decorator line).
_MESSAGE = re.compile(
    r"passed to argument (?P<argument>\w+) in kernel (?P<kernel>\S+) at (?P<file>.+?):(?P<line>\d+) "
    r"is being written to (?P<what>after it has been read from within the same kernel|but has already been read from in a previous launch)",
    re.DOTALL,
)

_CAPTURE_LIMIT = 1_000_000  # characters kept: user code may print a lot


class _Tee:
    """Forwards writes to the real stream and keeps a bounded copy."""

    def __init__(self, stream: TextIO, capture: MessageCapture):
        self._stream = stream
        self._capture = capture

    def write(self, text: str) -> int:
        self._capture.record(text)
        try:
            return self._stream.write(text)
        except Exception:
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except Exception:
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _RecordingLogger:
    """A Warp logger (1.14+) that records every message and forwards to the previous logger."""

    def __init__(self, previous: Any, capture: MessageCapture):
        self._previous = previous
        self._sink = capture

    def debug(self, message: str) -> None:
        self._sink.record(message)
        self._previous.debug(message)

    def info(self, message: str) -> None:
        self._sink.record(message)
        self._previous.info(message)

    def warning(self, message: str, category: Any = None, stacklevel: int = 1) -> None:
        self._sink.record(message)
        self._previous.warning(message, category, stacklevel)

    def error(self, message: str) -> None:
        self._sink.record(message)
        self._previous.error(message)


class MessageCapture:
    """Everything Warp and the user's code print in this process, kept for matching."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.size = 0

    def record(self, text: str) -> None:
        if self.size < _CAPTURE_LIMIT:
            self.chunks.append(text)
            self.size += len(text)

    def install(self) -> None:
        sys.stdout = _Tee(sys.stdout, self)
        sys.stderr = _Tee(sys.stderr, self)
        import warp as wp

        set_logger = getattr(wp, "set_logger", None)
        get_logger = getattr(wp, "get_logger", None)
        if set_logger is not None and get_logger is not None:
            set_logger(_RecordingLogger(get_logger(), self))

    def text(self) -> str:
        # Logger messages carry no newline; tee chunks do. Joining with newlines keeps both parseable.
        return "\n".join(self.chunks)


def parse_messages(text: str) -> list[dict[str, Any]]:
    """Every overwrite-tracking message in ``text`` as {argument, kernel, file, line, kind}."""
    found: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for match in _MESSAGE.finditer(text):
        key = (match["argument"], match["kernel"], match["file"], int(match["line"]), match["what"])
        if key in seen:
            continue  # the logger and the tee both saw it
        seen.add(key)
        found.append(
            {
                "argument": match["argument"],
                "kernel": match["kernel"],
                "file": match["file"].strip(),
                "line": int(match["line"]),
                "kind": "in-kernel" if "same kernel" in match["what"] else "across-launches",
            }
        )
    return found


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return a == b


def matching_messages(
    messages: list[dict[str, Any]], path: str, first_line: int, last_line: int, kernel_lines: tuple[int, int] | None
) -> list[dict[str, Any]]:
    """Messages located at the flagged statement, or (across launches) at the flagged kernel."""
    matched = []
    for message in messages:
        if not _same_file(message["file"], path):
            continue
        if first_line <= message["line"] <= last_line:
            matched.append(message)
        elif message["kind"] == "across-launches" and kernel_lines and kernel_lines[0] <= message["line"] <= kernel_lines[1]:
            matched.append(message)
    return matched
