"""Parent side of ``warp-lint check --confirm``: plan, run children, turn their records into verdicts.

Plain Python: nothing here imports ``warp``. Each user file's findings run in one child process
(:mod:`warp_lint.runtime.child`) so the file's module compiles once. The child lives in its own
process group (``start_new_session``) and reports through an append-only JSON-lines file, never
through stdout. Whatever it does (crash, hang, ``sys.exit``, floods of output), the parent turns it
into an ``inconclusive`` verdict for the finding in progress, kills and reaps the whole group, and
starts a fresh child for the findings still pending.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from warp_lint.finding import Confirmation, Finding
from warp_lint.runtime.verdicts import STRATEGIES, Reason, Status, strategies_of

_OUTPUT_LIMIT = 64 * 1024 * 1024  # bytes of child stdout+stderr before it is treated as runaway
_TAIL = 4000  # characters of child output kept for diagnostics
_POLL_S = 0.05
# Compiling is slow but never hangs by itself: a compile phase gets at least this long, so a big
# module on a busy machine is not reported as a hanging kernel.
COMPILE_TIME_LIMIT_FLOOR = 600.0


def default_cache_dir() -> str:
    """warp-lint's own kernel cache: never the user's Warp cache, so confirming pollutes nothing."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "warp-lint", "kernels")


def _installed_warp_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("warp-lang")
    except Exception:  # noqa: BLE001 - not installed, broken metadata
        return None


def module_name_for(path: str) -> str:
    """A stable, unique module name per file: distinct from anything the user imports, and the
    same on every run so Warp's kernel cache hits."""
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    digest = hashlib.sha1(os.path.realpath(path).encode()).hexdigest()[:8]
    return f"warp_lint_target_{stem}_{digest}"


@dataclasses.dataclass
class _Planned:
    id: str
    finding: Finding
    request: dict[str, Any]


class _OutputDrain(threading.Thread):
    """Reads a child stream to its end (a full pipe would block the child), keeping the tail."""

    def __init__(self, stream: Any):
        super().__init__(daemon=True)
        self.stream = stream
        self.tail = b""
        self.total = 0

    def run(self) -> None:
        while True:
            chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
            if not chunk:
                return
            self.total += len(chunk)
            self.tail = (self.tail + chunk)[-_TAIL:]

    def text(self) -> str:
        return self.tail.decode("utf-8", "replace")


def _request_for(finding: Finding, planned_id: str) -> dict[str, Any]:
    data = finding.data
    flagged = data.get("flagged_lines") or [finding.start.line, finding.end.line]
    return {
        "id": planned_id,
        "code": finding.code,
        "kernel": data.get("kernel"),
        "function_kind": data.get("function_kind", "kernel"),
        "params": data.get("params"),
        "reads": data.get("reads"),
        "writes": data.get("writes"),
        "index_params": data.get("index_params") or [],
        "flagged_lines": [int(flagged[0]), int(flagged[-1])],
        "strategies": [s for s in strategies_of(data) if s in STRATEGIES],
        "safe_form": data.get("safe_form"),
        "singular": data.get("singular"),
        "value_dependent": bool(data.get("value_dependent")),
        "replay_plan": data.get("replay_plan"),
    }


def _no_experiment(finding: Finding) -> dict[str, Any]:
    """The verdict on a finding that no experiment of ``--confirm`` decides, and where to turn."""
    if finding.code.startswith("WL2") or finding.data.get("host"):
        where = ("its hazard lies in what the program does across launches and tapes; run the program under"
                 " `warp-lint trace -- COMMAND` (e.g. `warp-lint trace -- pytest`), which observes it")
    else:
        where = "the rule states a practice that no gradient comparison of one kernel decides"
    return {"status": Status.INCONCLUSIVE, "reason": Reason.NO_EXPERIMENT,
            "detail": f"--confirm has no experiment for {finding.code}: {where}"}


def _confirmation(record: dict[str, Any], *, warp_version: str | None, device: str | None) -> Confirmation:
    reason = record.get("reason", Reason.CRASH)
    detail = record.get("detail", "")
    evidence = dict(record.get("evidence") or {})
    evidence["reason_code"] = reason
    return Confirmation(
        status=record.get("status", Status.INCONCLUSIVE),
        reason=f"{reason}: {detail}" if detail else reason,
        warp_version=record.get("warp_version") or warp_version,
        device=record.get("device") or device,
        config=dict(record.get("config") or {}),
        evidence=evidence,
    )


class _FileRun:
    """All findings of one file: as many children as it takes to give each a verdict."""

    def __init__(self, path: str, planned: list[_Planned], *, device: str | None, timeout: float, cache_dir: str,
                 on_start: Callable[[_Planned], None], python: str | None = None):
        self.path = os.path.abspath(path)
        self.python = python or sys.executable
        self.planned = planned
        self.device = device
        self.timeout = timeout
        self.cache_dir = cache_dir
        self.on_start = on_start
        self.warp_version = _installed_warp_version()
        self.verdicts: dict[str, Confirmation] = {}
        self.started: set[str] = set()
        self.child_device: str | None = device

    def run(self) -> None:
        pending = list(self.planned)
        while pending:
            self._run_child(pending)
            remaining = [p for p in pending if p.id not in self.verdicts]
            if len(remaining) == len(pending):
                # The child died outside any finding and settled nothing: blame the next finding
                # so every restart makes progress.
                self._settle(remaining[0], Status.INCONCLUSIVE, Reason.CRASH,
                             "the child process exited before running this experiment")
                remaining = remaining[1:]
            pending = remaining

    def _settle(self, planned: _Planned, status: str, reason: str, detail: str, **evidence: Any) -> None:
        record = {"status": status, "reason": reason, "detail": detail, "evidence": evidence}
        self.verdicts[planned.id] = _confirmation(record, warp_version=self.warp_version, device=self.child_device)

    def _run_child(self, pending: list[_Planned]) -> None:
        by_id = {p.id: p for p in pending}
        with tempfile.TemporaryDirectory(prefix="warp-lint-confirm-") as workdir:
            request_path = os.path.join(workdir, "request.json")
            results_path = os.path.join(workdir, "results.jsonl")
            request = {
                "path": self.path,
                "module_name": module_name_for(self.path),
                "device": self.device,
                "cache_dir": self.cache_dir,
                "seed": 0,
                "findings": [p.request for p in pending],
            }
            with open(request_path, "w", encoding="utf-8") as handle:
                json.dump(request, handle)
            open(results_path, "w").close()

            env = dict(os.environ)
            package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            env.setdefault("PYTHONUNBUFFERED", "1")
            # Importing the user's file must not write __pycache__ next to it.
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            process = subprocess.Popen(
                [self.python, "-m", "warp_lint.runtime.child", request_path, results_path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: killed as a whole, never signals us
                env=env,
            )
            drains = [_OutputDrain(process.stdout), _OutputDrain(process.stderr)]
            for drain in drains:
                drain.start()
            try:
                self._watch(process, results_path, by_id, drains)
            finally:
                _kill_group(process)
                for drain in drains:
                    drain.join(timeout=5)

    def _watch(self, process: subprocess.Popen, results_path: str, by_id: dict[str, _Planned],
               drains: list[_OutputDrain]) -> None:
        deadline = time.monotonic() + self.timeout
        current: str | None = None
        imported = False
        offset = 0
        buffer = ""

        def output_tail() -> str:
            return (drains[1].text() or drains[0].text())[-1500:]

        while True:
            exited = process.poll() is not None
            with open(results_path, encoding="utf-8") as handle:
                handle.seek(offset)
                chunk = handle.read()
                offset = handle.tell()
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = event.get("event")
                if kind == "import-failed":
                    for planned in by_id.values():
                        self._settle(planned, Status.INCONCLUSIVE, Reason.IMPORT_ERROR,
                                     f"importing {self.path} failed: {event.get('detail')}")
                    return
                if kind == "imported":
                    imported = True
                    self.child_device = event.get("device") or self.child_device
                    deadline = time.monotonic() + self.timeout
                elif kind == "start":
                    current = event["id"]
                    self.on_start(by_id[current])
                    deadline = time.monotonic() + self.timeout
                elif kind == "phase":
                    # Each phase gets its own time limit; a compile at least COMPILE_TIME_LIMIT_FLOOR.
                    limit = max(self.timeout, COMPILE_TIME_LIMIT_FLOOR) if event.get("phase") == "compiling" else self.timeout
                    deadline = time.monotonic() + limit
                elif kind == "result":
                    confirmation = _confirmation(event["confirmation"], warp_version=self.warp_version,
                                                 device=self.child_device)
                    self.verdicts[event["id"]] = confirmation
                    current = None
                    deadline = time.monotonic() + self.timeout
            if exited and not chunk:
                break
            if time.monotonic() > deadline:
                _kill_group(process)
                where = f"confirming {by_id[current].finding.code} in {by_id[current].request['kernel']}" if current else (
                    "importing the module" if not imported else "between findings")
                detail = f"no result within {self.timeout:g} s ({where}); the child process group was killed"
                self._fail_current(current, by_id, imported, Reason.TIMEOUT, detail, output_tail())
                return
            if sum(d.total for d in drains) > _OUTPUT_LIMIT:
                _kill_group(process)
                detail = f"the child printed more than {_OUTPUT_LIMIT // (1024 * 1024)} MiB; it was stopped"
                self._fail_current(current, by_id, imported, Reason.CRASH, detail, output_tail())
                return
            if not exited:
                time.sleep(_POLL_S)

        # The child exited: anything started without a result died with it.
        returncode = process.wait()
        for drain in drains:
            drain.join(timeout=5)
        how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0
               else f"exited with status {returncode}")
        if not imported:
            detail = f"the child {how} while importing {self.path}"
            for planned in by_id.values():
                if planned.id not in self.verdicts:
                    self._settle(planned, Status.INCONCLUSIVE, Reason.IMPORT_ERROR, detail, output_tail=output_tail())
            return
        if current is not None and current not in self.verdicts:
            crashed = by_id[current]
            self._settle(crashed, Status.INCONCLUSIVE, Reason.CRASH,
                         f"the child {how} while running this experiment (segfault, abort or os._exit)",
                         output_tail=output_tail(), returncode=returncode)
            self._settle_siblings(crashed, by_id, Reason.CRASH, how, returncode=returncode)

    def _settle_siblings(self, failed: _Planned, by_id: dict[str, _Planned], reason: str, how: str,
                         **evidence: Any) -> None:
        """The same kernel on the same synthesized inputs would crash or hang again: each retry
        costs a fresh child (an import and a load) and, for a hang, the whole time limit, so the
        kernel's other pending findings are settled with it."""
        for planned in by_id.values():
            if planned.id not in self.verdicts and planned.request["kernel"] == failed.request["kernel"] \
                    and planned.request["function_kind"] == failed.request["function_kind"]:
                self._settle(planned, Status.INCONCLUSIVE, reason,
                             f"not run: an experiment on the same {failed.request['function_kind']} "
                             f"({failed.finding.code} at line {failed.finding.start.line}) {how}", **evidence)

    def _fail_current(self, current: str | None, by_id: dict[str, _Planned], imported: bool, reason: str,
                      detail: str, tail: str) -> None:
        if current is not None:
            self._settle(by_id[current], Status.INCONCLUSIVE, reason, detail, output_tail=tail)
            if reason == Reason.TIMEOUT:
                self._settle_siblings(by_id[current], by_id, reason, f"ran past the time limit ({self.timeout:g} s)")
        elif not imported:
            for planned in by_id.values():
                if planned.id not in self.verdicts:
                    self._settle(planned, Status.INCONCLUSIVE, reason if reason != Reason.CRASH else Reason.IMPORT_ERROR,
                                 detail, output_tail=tail)
        else:
            # Stuck between findings (e.g. building warp-lint's generated kernels): blame the next one.
            for planned in by_id.values():
                if planned.id not in self.verdicts:
                    self._settle(planned, Status.INCONCLUSIVE, reason, detail, output_tail=tail)
                    break


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the child's whole process group (compilers it spawned included) and reap the child."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def confirm_findings(
    findings: list[Finding],
    *,
    device: str | None = None,
    timeout: float = 120.0,
    progress: Callable[[str], None] | None = None,
    cache_dir: str | None = None,
    python: str | None = None,
) -> None:
    """Set ``finding.confirmation`` on every finding whose ``finding.data`` declares a ``strategy``,
    and an inconclusive ``no-experiment`` verdict, saying where to turn, on every other one.

    Findings are grouped by file; each file's experiments run in one child process (one import,
    one compile). ``timeout`` limits each phase: the import and each experiment (a compile gets
    at least ``COMPILE_TIME_LIMIT_FLOOR`` seconds: it is slow but does not hang); a phase that
    overruns ends its finding (or, during the import, the file's findings) as ``inconclusive``
    with reason ``timeout``. ``device`` defaults
    to the first CUDA device Warp sees, else ``"cpu"``. ``cache_dir`` is warp-lint's kernel cache
    (default ``~/.cache/warp-lint/kernels``). ``progress`` is called with
    ``"confirming CODE in KERNEL (i/n)"`` before each finding runs. ``python`` is the interpreter the
    children run in (default: this one): the environment where the user's project imports, with
    ``warp`` and ``numpy`` installed; warp-lint's own package is put on its path.
    """
    for finding in findings:
        if not strategies_of(finding.data):
            finding.confirmation = _confirmation(_no_experiment(finding), warp_version=_installed_warp_version(),
                                                 device=device)
    selected = [f for f in findings if strategies_of(f.data)]
    total = len(selected)
    cache_dir = os.path.abspath(cache_dir or default_cache_dir())
    os.makedirs(cache_dir, exist_ok=True)
    counter = {"n": 0}

    def on_start(planned: _Planned) -> None:
        counter["n"] += 1
        if progress is not None:
            where = planned.request["kernel"] or "the host launch sequence"
            progress(f"confirming {planned.finding.code} in {where} ({counter['n']}/{total})")

    by_file: dict[str, list[_Planned]] = {}
    for index, finding in enumerate(selected):
        request = _request_for(finding, str(index))
        planned = _Planned(id=str(index), finding=finding, request=request)
        if not request["strategies"]:
            finding.confirmation = _confirmation(
                {"status": Status.INCONCLUSIVE, "reason": Reason.UNKNOWN_STRATEGY,
                 "detail": f"no runtime strategy warp-lint knows in {finding.data.get('strategy')!r}"},
                warp_version=_installed_warp_version(), device=device)
            continue
        # A host finding (its hazard lies in the order of launches) names the kernel it launches,
        # but one kernel's experiment says nothing of it: it needs its launch sequence replayed.
        if (finding.data.get("host") or not request["kernel"]) and not request["replay_plan"]:
            why = finding.data.get("replay_unplannable")
            finding.confirmation = _confirmation(
                {"status": Status.INCONCLUSIVE,
                 "reason": Reason.REPLAY_UNSUPPORTED if why else Reason.NOT_IMPORTABLE,
                 "detail": (f"the recorded launch sequence cannot be replayed: {why}" if why else
                            "a host-side hazard lives in the order of launches, and the finding carries no launch "
                            "plan to replay (data['replay_plan'])")
                 + "; run the program under `warp-lint trace -- COMMAND` to observe it"},
                warp_version=_installed_warp_version(), device=device)
            continue
        by_file.setdefault(os.path.realpath(finding.path), []).append(planned)

    for path, planned in by_file.items():
        run = _FileRun(path, planned, device=device, timeout=timeout, cache_dir=cache_dir, on_start=on_start,
                       python=python)
        run.run()
        for item in planned:
            item.finding.confirmation = run.verdicts[item.id]
