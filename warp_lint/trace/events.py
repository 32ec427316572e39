"""The events file: one JSON object per line, appended by every traced process, read afterwards.

Plain Python (no warp). Each line is written with a single ``os.write`` on a file opened with
``O_APPEND``, so lines from several processes (pytest-xdist workers, subprocesses) never
interleave, and a process that dies mid-run loses nothing it already wrote.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

CONFIG_FILE = "config.json"
EVENTS_FILE = "events.jsonl"
ENVIRONMENT_VARIABLE = "WARP_LINT_TRACE"  # the session directory, in the traced process

_LINE_LIMIT = 256 * 1024  # an event larger than this is cut down (its table survives)


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return repr(value)


class EventWriter:
    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.pid = os.getpid()
        self._sequence = 0

    def write(self, event: str, **fields: Any) -> None:
        self._sequence += 1
        record = {"event": event, "pid": self.pid, "seq": self._sequence, **fields}
        line = json.dumps(_clean(record))
        if len(line) > _LINE_LIMIT:
            record = {k: v for k, v in record.items() if k in ("event", "pid", "seq", "table", "kernel", "site")}
            record["truncated"] = True
            line = json.dumps(_clean(record))[:_LINE_LIMIT]
        os.write(self._fd, (line + "\n").encode())


def read_events(path: str) -> list[dict[str, Any]]:
    """Every complete event, in (process, sequence) order; a torn last line is skipped."""
    events = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    events.sort(key=lambda e: (e.get("pid", 0), e.get("seq", 0)))
    return events
