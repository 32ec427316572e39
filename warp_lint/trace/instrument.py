"""The traced process's side of ``warp-lint trace``: the only module of the tracer that imports warp.

:func:`install` runs right after ``import warp`` (see :mod:`.bootstrap`) and, before any user
module can load a kernel:

* switches on ``wp.config.verify_autograd_array_access`` and routes Warp's logger through
  :class:`_TraceLogger`, which records the overwrite-tracking messages (with the launch site of
  the launch that caused them) and keeps them off the user's terminal;
* wraps ``wp.launch``: before the launch (``Tape.record_launch`` only runs after the kernel
  executed) it notes the site and the active tape and, for a kernel that carries a static finding,
  copies the launch's real inputs; after it, it records which arrays the launch read and wrote, to
  see an array read on a tape being overwritten before that tape's ``backward()`` (WL201), a
  launch on one tape reading what a launch on another pending tape wrote (WL202), and an
  unrecorded launch feeding a recorded one (WL205);
* wraps ``Tape.__enter__`` (nested recording), ``backward`` (repeated without zeroing: WL204; and
  the moment to run the pending gradchecks), ``zero`` and ``reset``, plus ``wp.copy`` and the
  array writers ``zero_``/``fill_``/``assign`` (writes Warp's tracker does not always see);
* at each ``Tape.backward`` runs, for each copied launch recorded on that tape, the shared AD-vs-FD
  comparison (:mod:`warp_lint.runtime.comparison`) on private arrays rebuilt from the copy: the
  user's arrays and gradients are never touched, and the active tape is set aside meanwhile.

Everything is written as events (:mod:`.events`) as it happens. Every wrapper falls through to
Warp's own function when anything in warp-lint's part fails: the program's behaviour, output and
exit status are the program's own.
"""

from __future__ import annotations

import ast
import atexit
import dataclasses
import inspect
import os
import re
import sys
import textwrap
import threading
import time
import traceback
import weakref
from typing import Any

from warp_lint.runtime.tracking import parse_messages
from warp_lint.trace.events import EventWriter
from warp_lint.trace.observe import UTILITY_OUTPUTS, HostObserver
from warp_lint.trace.observe import _describe as _describe_array
from warp_lint.trace.observe import _key

# "Array [...] is being written to by an array copy at FILE:LINE but has already been read from
#  in a previous launch." (wp.copy while a tape records; 1.19)
_OPERATION_MESSAGE = re.compile(
    r"is being written to by (?P<operation>.+?) at (?P<file>.+?):(?P<line>\d+) but has already been read from",
    re.DOTALL,
)
_TRACKER_HINT = "being written to"
_ARRAY_VALUES = re.compile(r"^Array \[.*?\] (passed|is being)", re.DOTALL)

_tracer: Tracer | None = None


@dataclasses.dataclass
class TapeInfo:
    serial: int
    epoch: int = 0  # bumped by backward() and reset(): reads and writes of earlier epochs are consumed
    backwards_since_zero: int = 0
    snapshots: list = dataclasses.field(default_factory=list)
    keys: set = dataclasses.field(default_factory=set)  # arrays read or written on it, for clean-up
    site: dict | None = None
    backward_ran: bool = False  # since the last reset(): entering it again keeps the old launches
    resets: int = 0
    backwards_total: int = 0
    launched_since_backward: bool = False
    carried: list = dataclasses.field(default_factory=list)  # reads of state another tape wrote


@dataclasses.dataclass
class Access:
    """One recorded launch's read or write of one array."""

    tape: Any  # weakref to the Tape
    serial: int
    epoch: int
    kernel: str
    param: str
    site: dict
    launch: int  # launch number in this process
    stack: list = dataclasses.field(default_factory=list)

    def pending(self) -> bool:
        tape = self.tape()
        info = getattr(tape, "_wl_trace", None) if tape is not None else None
        return info is not None and info.epoch == self.epoch


@dataclasses.dataclass
class Snapshot:
    """A flagged launch's arguments as they were just before it ran."""

    kernel: Any
    dim: Any
    device: Any
    args: list  # ("array", values, dtype, shape, device) | ("value", v)
    site: dict
    tape_serial: int
    file: str
    name: str


def _realpath(path: str, cache: dict[str, str] = {}) -> str:  # noqa: B006 - a deliberate memo
    found = cache.get(path)
    if found is None:
        found = cache[path] = os.path.realpath(path) if path and not path.startswith("<") else path
    return found


class _TraceLogger:
    """Warp's logger (1.14+), with overwrite-tracking messages recorded and kept off the terminal."""

    def __init__(self, previous: Any, tracer: Tracer):
        self._previous = previous
        self._tracer = tracer

    def debug(self, message: str) -> None:
        if not self._tracer.on_message(message):
            self._previous.debug(message)

    def info(self, message: str) -> None:
        if not self._tracer.on_message(message):
            self._previous.info(message)

    def warning(self, message: str, category: Any = None, stacklevel: int = 1) -> None:
        if not self._tracer.on_message(message):
            self._previous.warning(message, category, stacklevel + 1)

    def error(self, message: str) -> None:
        self._previous.error(message)


class _StreamSink:
    """Before 1.14 the tracker prints to stdout: a tee (from :mod:`warp_lint.runtime.tracking`)
    feeds each write here. Those messages are recorded but still printed."""

    def __init__(self, tracer: Tracer):
        self._tracer = tracer

    def record(self, text: str) -> None:
        if _TRACKER_HINT in text:
            self._tracer.on_message(text, swallow=False)


class Tracer:
    def __init__(self, wp: Any, config: dict[str, Any]):
        self.wp = wp
        self.config = config
        self.context = wp._src.context if hasattr(wp, "_src") else wp.context
        self.events = EventWriter(config["events"])
        self.kernels: dict[str, dict[str, Any]] = config.get("kernels") or {}
        self.max_checks = int(config.get("max_checks_per_kernel", 3))
        self.full_jacobian_limit = int(config.get("full_jacobian_limit", 256))
        self.fast_mode = bool(config.get("fast_mode", False))
        self.gradcheck = bool(config.get("gradcheck", True))
        self.snapshot_limit = int(config.get("snapshot_limit", 16_000_000))  # scalars per launch
        self.local = threading.local()
        self.skip_prefixes = tuple(
            os.path.dirname(os.path.realpath(m.__file__)) + os.sep
            for m in (wp, sys.modules["warp_lint"])
        )
        self.seen: set = set()  # event de-duplication keys
        self.launch_counts: dict[str, int] = {}
        self.launch_number = 0
        self.tape_serial = 0
        self.reads: dict[tuple, list[Access]] = {}
        self.writes: dict[tuple, Access] = {}
        self.unrecorded: dict[tuple, Access] = {}
        self.effects: dict[int, tuple[frozenset, frozenset]] = {}
        self.checks_taken: dict[tuple[str, str], int] = {}
        self.coverage_kernels: dict[tuple, Any] = {}
        self.originals: dict[str, Any] = {}
        self.stores: dict[int, frozenset] = {}
        self.backward_sites: dict[tuple, int] = {}
        self.host = HostObserver(self)

    # -- plumbing ------------------------------------------------------------------------------
    @property
    def busy(self) -> int:
        return getattr(self.local, "busy", 0)

    def _enter_busy(self) -> None:
        self.local.busy = self.busy + 1

    def _leave_busy(self) -> None:
        self.local.busy = self.busy - 1

    @property
    def current_sites(self) -> list:
        stack = getattr(self.local, "sites", None)
        if stack is None:
            stack = self.local.sites = []
        return stack

    @property
    def current_launches(self) -> list:
        """The bound arguments of the launches running now (innermost last), beside their sites."""
        stack = getattr(self.local, "launches", None)
        if stack is None:
            stack = self.local.launches = []
        return stack

    def read_is_stale(self, item: dict) -> bool:
        """Whether Warp's warning that an argument "has already been read" speaks of a read no tape will
        replay. Warp marks an array read when a recorded launch reads it and clears the mark only on
        that tape's backward() or reset(): a tape dropped without either leaves the mark, and the next
        write warns although no backward() will ever replay the read. The tracer keeps each read with
        its tape; when it saw the written array and none of its reads is pending, the warning is stale."""
        launches = self.current_launches
        if item.get("kind") != "across-launches" or not item.get("argument") or not launches:
            return False
        bound = launches[-1]
        values = list(bound.get("inputs") or []) + list(bound.get("outputs") or [])
        params = [a.label for a in getattr(getattr(bound.get("kernel"), "adj", None), "args", [])]
        if len(params) != len(values) or item["argument"] not in params:
            return False
        key = _key(values[params.index(item["argument"])])
        return key is not None and not any(a.pending() for a in self.reads.get(key, ()))

    def internal_error(self, where: str) -> None:
        key = ("internal-error", where)
        if key in self.seen:
            return
        self.seen.add(key)
        try:
            self.events.write("instrument-error", detail=where, traceback=traceback.format_exc()[-3000:])
        except OSError:
            pass

    def user_site(self, depth: int = 2) -> dict:
        """The innermost frame outside Warp and warp-lint: where the user's code made the call."""
        frame = _frame(depth + 1)
        first = frame
        while frame is not None:
            filename = _realpath(frame.f_code.co_filename)
            if not filename.startswith(self.skip_prefixes):
                return {"file": filename, "line": frame.f_lineno, "function": frame.f_code.co_name}
            frame = frame.f_back
        return {"file": _realpath(first.f_code.co_filename), "line": first.f_lineno, "function": first.f_code.co_name}

    def user_stack(self, depth: int = 2, limit: int = 12) -> list[dict]:
        """The user's frames (outside Warp and warp-lint), innermost first: a finding flagged on a
        helper call matches what happens inside the helper."""
        frame = _frame(depth + 1)
        stack = []
        while frame is not None and len(stack) < limit:
            filename = _realpath(frame.f_code.co_filename)
            if not filename.startswith(self.skip_prefixes) and not filename.startswith("<"):
                stack.append({"file": filename, "line": frame.f_lineno})
            frame = frame.f_back
        return stack

    def called_from_warp(self, depth: int = 2) -> bool:
        try:
            return _realpath(sys._getframe(depth).f_code.co_filename).startswith(self.skip_prefixes)
        except ValueError:  # a shallower stack than the wrapper expects
            return False

    def note_site(self, kind: str, site: dict) -> None:
        key = ("site", kind, site["file"], site["line"])
        if key not in self.seen:
            self.seen.add(key)
            self.events.write("site", kind=kind, site=site)

    def active_tape(self) -> Any:
        runtime = getattr(self.context, "runtime", None)
        return getattr(runtime, "tape", None) if runtime is not None else None

    def tape_info(self, tape: Any) -> TapeInfo:
        info = getattr(tape, "_wl_trace", None)
        if info is None:
            self.tape_serial += 1
            info = TapeInfo(serial=self.tape_serial)
            try:
                tape._wl_trace = info
            except AttributeError:
                pass
        return info

    # -- install -------------------------------------------------------------------------------
    def install(self) -> None:
        wp = self.wp
        self.originals["launch"] = original_launch = wp.launch
        self.launch_signature = inspect.signature(original_launch)
        tracer = self

        def launch(*args, **kwargs):
            return tracer.on_launch(original_launch, args, kwargs)

        wp.launch = _stands_for(launch, original_launch)

        original_copy = wp.copy

        def copy(dest, *args, **kwargs):
            tracer.on_array_write(dest, "wp.copy()", 3)
            tracer.on_host_event(tracer.host.on_copy, args[0] if args else kwargs.get("src"), "wp.copy()", 4)
            return original_copy(dest, *args, **kwargs)

        wp.copy = _stands_for(copy, original_copy)

        original_clone = wp.clone

        def clone(src, *args, **kwargs):
            tracer.on_host_event(tracer.host.on_copy, src, "wp.clone()", 4)
            return original_clone(src, *args, **kwargs)

        wp.clone = _stands_for(clone, original_clone)

        array_class = wp.array
        for method in ("zero_", "fill_", "assign"):
            original = getattr(array_class, method, None)
            if original is not None:
                setattr(array_class, method, self._array_writer(original, method))
        for method in ("numpy", "list"):
            original = getattr(array_class, method, None)
            if original is not None:
                setattr(array_class, method, self._array_reader(original, method))
        original_init = array_class.__init__

        def init(array, *args, **kwargs):
            original_init(array, *args, **kwargs)
            if not tracer.busy:
                data = args[0] if args else kwargs.get("data")
                # wp.zeros and friends are Warp's code: the user's frame is found further out.
                tracer.on_host_event(tracer.host.on_allocation, array, data, 4, from_warp_too=True)

        array_class.__init__ = _stands_for(init, original_init)
        utils = getattr(wp, "utils", None)
        for name in UTILITY_OUTPUTS:
            original = getattr(utils, name, None)
            if original is not None:
                setattr(utils, name, self._utility(original, name))

        tape_class = wp.Tape
        self._wrap_method(tape_class, "__enter__", self.on_tape_enter)
        self._wrap_method(tape_class, "backward", self.on_backward)
        self._wrap_method(tape_class, "zero", self.on_tape_zero)
        self._wrap_method(tape_class, "reset", self.on_tape_reset)

        if hasattr(wp, "set_logger") and hasattr(wp, "get_logger"):
            wp.set_logger(_TraceLogger(wp.get_logger(), self))
        else:  # before 1.14 the tracker prints to stdout
            from warp_lint.runtime.tracking import _Tee

            sys.stdout = _Tee(sys.stdout, _StreamSink(self))

    def on_host_event(self, handler: Any, *args: Any, from_warp_too: bool = False) -> None:
        """Call a :class:`HostObserver` hook (its last argument: the depth of the user's frame as the
        hook sees it) for user code, not for Warp's own calls unless ``from_warp_too``, never while
        a check of ours runs; a failure in it is recorded, never raised."""
        if self.busy:
            return
        try:
            if not from_warp_too and self.called_from_warp(args[-1] - 1):
                return
            handler(*args)
        except Exception:  # noqa: BLE001
            self.internal_error(getattr(handler, "__name__", "host observer"))

    def _array_reader(self, original: Any, method: str) -> Any:
        tracer = self

        def reader(array, *args, **kwargs):
            tracer.on_host_event(tracer.host.on_readback, array, f".{method}()", 4)
            return original(array, *args, **kwargs)

        return _stands_for(reader, original, method)

    def _utility(self, original: Any, name: str) -> Any:
        tracer = self
        signature = inspect.signature(original)

        def utility(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs).arguments
            except TypeError:
                bound = {}
            tracer.on_host_event(tracer.host.on_utility, name, bound, 4)
            return original(*args, **kwargs)

        return _stands_for(utility, original, name)

    def _array_writer(self, original: Any, method: str) -> Any:
        tracer = self

        def writer(array, *args, **kwargs):
            tracer.on_array_write(array, f".{method}()", 3)
            if method == "assign":
                source = args[0] if args else kwargs.get("src")
                if isinstance(source, tracer.wp.array):
                    tracer.on_host_event(tracer.host.on_copy, source, ".assign()", 4)
                else:
                    tracer.on_host_event(tracer.host.on_host_assign, array, source, 4)
            return original(array, *args, **kwargs)

        return _stands_for(writer, original, method)

    def _wrap_method(self, cls: Any, name: str, handler: Any) -> None:
        original = getattr(cls, name)

        def method(tape, *args, **kwargs):
            return handler(original, tape, args, kwargs)

        setattr(cls, name, _stands_for(method, original, name))

    # -- tracker messages ----------------------------------------------------------------------
    def on_message(self, message: str, swallow: bool = True) -> bool:
        """Record an overwrite-tracking message; True when it must not reach the terminal."""
        if not isinstance(message, str) or _TRACKER_HINT not in message:
            return False
        try:
            parsed = parse_messages(message)
            for match in _OPERATION_MESSAGE.finditer(message):
                parsed.append({"argument": None, "kernel": None, "operation": match["operation"],
                               "file": match["file"].strip(), "line": int(match["line"]), "kind": "operation"})
            if not parsed:
                return False
            if self.busy:
                return swallow  # caused by warp-lint's own check on its private copies
            sites = self.current_sites
            site = sites[-1] if sites else self.user_site(3)
            text = _ARRAY_VALUES.sub(lambda m: f"Array [...] {m.group(1)}", message.strip())
            for item in parsed:
                item["file"] = _realpath(item["file"])
                if self.read_is_stale(item):
                    continue
                key = ("tracker", item["kind"], item["file"], item["line"], item.get("argument"), site["file"], site["line"])
                if key in self.seen:
                    continue
                self.seen.add(key)
                self.events.write("tracker", message=text[:1500], site=site, **item)
            return swallow
        except Exception:  # noqa: BLE001
            self.internal_error("on_message")
            return False

    # -- launches ------------------------------------------------------------------------------
    def on_launch(self, original: Any, args: tuple, kwargs: dict) -> Any:
        if self.busy:
            return original(*args, **kwargs)
        try:
            bound = self.launch_signature.bind(*args, **kwargs).arguments
        except TypeError:
            return original(*args, **kwargs)
        if bound.get("adjoint") or bound.get("record_cmd"):
            return original(*args, **kwargs)
        before = None
        try:
            before = self.before_launch(bound)
        except Exception:  # noqa: BLE001
            self.internal_error("before_launch")
        sites, launches = self.current_sites, self.current_launches
        sites.append(before["site"] if before else self.user_site(3))
        launches.append(bound)
        try:
            result = original(*args, **kwargs)
        finally:
            sites.pop()
            launches.pop()
        if before is not None:
            try:
                self.after_launch(before, bound)
            except Exception:  # noqa: BLE001
                self.internal_error("after_launch")
        return result

    def kernel_identity(self, kernel: Any) -> tuple[str, str, int]:
        func = getattr(kernel, "func", None)
        code = getattr(func, "__code__", None)
        if code is None:
            return "<unknown>", str(getattr(kernel, "key", kernel)), 0
        return _realpath(code.co_filename), func.__name__, code.co_firstlineno

    def before_launch(self, bound: dict) -> dict:
        kernel = bound["kernel"]
        site = self.user_site(4)
        tape = self.active_tape()
        recorded = tape is not None and bound.get("record_tape", True)
        file, name, first_line = self.kernel_identity(kernel)
        self.launch_number += 1
        before = {"site": site, "tape": tape, "recorded": recorded, "file": file, "name": name,
                  "first_line": first_line, "number": self.launch_number, "stack": self.user_stack(4)}
        flagged = self.kernels.get(file, {}).get(name)
        if flagged and recorded and self.gradcheck:
            self.maybe_snapshot(kernel, bound, before, flagged)
        return before

    def maybe_snapshot(self, kernel: Any, bound: dict, before: dict, flagged: dict) -> None:
        key = (before["file"], before["name"])
        taken = self.checks_taken.get(key, 0)
        if taken >= self.max_checks:
            return
        wp = self.wp
        values = list(bound.get("inputs") or []) + list(bound.get("outputs") or [])
        params = getattr(getattr(kernel, "adj", None), "args", None)
        reason = None
        spec: list = []
        if params is None or len(params) != len(values):
            reason = "the launch's arguments do not match the kernel's parameters"
        else:
            scalars = 0
            for value, param in zip(values, params):
                if isinstance(value, wp.array):
                    if _precision_kind(wp, value.dtype) is None:
                        reason = f"argument `{param.label}` has dtype {getattr(value.dtype, '__name__', value.dtype)}"
                        break
                    scalars += value.size
                    spec.append(("array", None, value, param.label))
                elif _is_value(wp, value, param):
                    spec.append(("value", value, None, param.label))
                else:
                    reason = (f"argument `{param.label}` ({type(value).__name__}) cannot be copied safely"
                              " (structs, indexed arrays and object ids are not checked)")
                    break
            if reason is None and scalars > self.snapshot_limit:
                reason = f"the launch's arrays hold {scalars} values, more than the copy limit {self.snapshot_limit}"
        if reason is not None:
            marker = ("check-skipped", key, reason)
            if marker not in self.seen:
                self.seen.add(marker)
                self.events.write("check-skipped", file=before["file"], kernel=before["name"], site=before["site"],
                                  reason=reason)
            return
        args = []
        for kind, value, array, _label in spec:
            if kind == "array":
                args.append(("array", array.numpy().copy(), array.dtype, array.shape, array.device))
            else:
                args.append(("value", value))
        info = self.tape_info(before["tape"])
        info.snapshots.append(Snapshot(kernel, bound.get("dim"), bound.get("device"), args, before["site"],
                                       info.serial, before["file"], before["name"]))
        self.checks_taken[key] = taken + 1

    def kernel_effects(self, kernel: Any, file: str, name: str) -> tuple[frozenset, frozenset]:
        """(parameters read, parameters written): Warp's own flags, a syntactic pass over the body
        (Warp does not mark a read on the left of a binary operator), and the static pass's."""
        cached = self.effects.get(id(kernel))
        if cached is not None:
            return cached
        adj = getattr(kernel, "adj", None)
        params = [a.label for a in getattr(adj, "args", [])]
        reads = {a.label for a in getattr(adj, "args", []) if getattr(a, "is_read", False)}
        writes = {a.label for a in getattr(adj, "args", []) if getattr(a, "is_write", False)}
        try:
            more_reads, more_writes = _syntactic_effects(kernel.func, set(params))
            reads |= more_reads
            writes |= more_writes
        except Exception:  # noqa: BLE001 - source not available
            pass
        flagged = self.kernels.get(file, {}).get(name) or {}
        reads |= set(flagged.get("reads") or ())
        writes |= set(flagged.get("writes") or ())
        result = self.effects[id(kernel)] = (frozenset(reads), frozenset(writes))
        return result

    def kernel_stores(self, kernel: Any, params: set[str]) -> frozenset:
        """Parameters the kernel stores into (``a[i] = ...``), as opposed to accumulating."""
        cached = self.stores.get(id(kernel))
        if cached is None:
            try:
                cached = frozenset(_syntactic_stores(kernel.func, params))
            except Exception:  # noqa: BLE001 - source not available
                cached = frozenset()
            self.stores[id(kernel)] = cached
        return cached

    def after_launch(self, before: dict, bound: dict) -> None:
        wp = self.wp
        kernel = bound["kernel"]
        site, tape, recorded = before["site"], before["tape"], before["recorded"]
        file, name = before["file"], before["name"]
        kernel_key = f"{file}::{name}"
        self.launch_counts[kernel_key] = self.launch_counts.get(kernel_key, 0) + 1
        info = self.tape_info(tape) if tape is not None else None
        marker = ("launch", kernel_key, site["file"], site["line"], recorded)
        if marker not in self.seen:
            self.seen.add(marker)
            self.events.write("launch", file=file, kernel=name, kernel_line=before["first_line"], site=site,
                              recorded=recorded, tape=info.serial if info and recorded else None,
                              tape_active=tape is not None, stack=before["stack"],
                              epoch=info.epoch if info else None)
        self.note_site("launch", site)

        values = list(bound.get("inputs") or []) + list(bound.get("outputs") or [])
        params = [a.label for a in getattr(getattr(kernel, "adj", None), "args", [])]
        if len(params) != len(values):
            return
        reads, writes = self.kernel_effects(kernel, file, name)
        arrays = [(p, v, _key(v)) for p, v in zip(params, values) if isinstance(v, wp.array) and _key(v)]
        label = f"kernel `{name}`"
        try:
            self.host.on_launch(before, arrays, reads, writes, self.kernel_stores(kernel, set(params)))
        except Exception:  # noqa: BLE001
            self.internal_error("host.on_launch")

        # Writes first: Warp allows a write then a read of one array inside one launch.
        read_keys = {k: p for p, v, k in arrays if p in reads}
        for param, value, key in arrays:
            if param not in writes:
                continue
            self.check_overwrite(key, value, f"{label} (parameter `{param}`)", site, before["number"],
                                 before["stack"])
            if key in read_keys and read_keys[key] != param and recorded:
                self.report_overwrite(
                    "same-launch", key, value, writer=f"{label} (parameter `{param}`)", writer_site=site,
                    reader={"kernel": name, "param": read_keys[key], "site": site, "tape": info.serial},
                    writer_stack=before["stack"])
        if tape is not None and not recorded:
            for param, value, key in arrays:
                if param in writes:
                    self.unrecorded[key] = Access(weakref.ref(tape), info.serial, info.epoch, name, param, site,
                                                  before["number"], before["stack"])
        if not recorded:
            return
        for param, value, key in arrays:
            if param in reads:
                self.reads.setdefault(key, []).append(
                    Access(weakref.ref(tape), info.serial, info.epoch, name, param, site, before["number"]))
                info.keys.add(key)
                writer = self.writes.get(key)
                if writer is not None and writer.serial != info.serial and writer.pending():
                    self.report_crossing(key, value, writer, name, param, site, info)
                hidden = self.unrecorded.get(key)
                if hidden is not None and hidden.serial == info.serial and hidden.pending():
                    self.report_unrecorded(key, value, hidden, name, param, site, info)
        for param, value, key in arrays:
            if param in writes:
                self.writes[key] = Access(weakref.ref(tape), info.serial, info.epoch, name, param, site,
                                          before["number"])
                info.keys.add(key)

    def check_overwrite(self, key: tuple, value: Any, writer: str, site: dict, number: int | None,
                        stack: list | None = None) -> None:
        for access in self.reads.get(key, ()):
            if access.launch == number or not access.pending():
                continue
            self.report_overwrite("overwrite", key, value, writer=writer, writer_site=site,
                                  reader={"kernel": access.kernel, "param": access.param, "site": access.site,
                                          "tape": access.serial}, writer_stack=stack)

    def report_overwrite(self, how: str, key: tuple, value: Any, *, writer: str, writer_site: dict,
                         reader: dict, writer_stack: list | None = None) -> None:
        marker = ("overwrite", how, writer_site["file"], writer_site["line"], reader["site"]["file"],
                  reader["site"]["line"], reader["param"])
        if marker in self.seen:
            return
        self.seen.add(marker)
        # `recording: false`: the overwrite happened between the tape block and backward() (WL211).
        self.events.write("overwrite", how=how, writer=writer, site=writer_site, reader=reader,
                          array=_describe_array(value), stack=writer_stack or [writer_site],
                          recording=self.active_tape() is not None)

    def report_crossing(self, key, value, writer: Access, reader_kernel, reader_param, site, info) -> None:
        marker = ("crossing", writer.site["file"], writer.site["line"], site["file"], site["line"])
        if marker in self.seen:
            return
        self.seen.add(marker)
        self.events.write("crossing", array=_describe_array(value),
                          writer={"kernel": writer.kernel, "param": writer.param, "site": writer.site,
                                  "tape": writer.serial},
                          reader={"kernel": reader_kernel, "param": reader_param, "site": site, "tape": info.serial})

    def report_unrecorded(self, key, value, hidden: Access, reader_kernel, reader_param, site, info) -> None:
        marker = ("unrecorded", hidden.site["file"], hidden.site["line"], site["file"], site["line"])
        if marker in self.seen:
            return
        self.seen.add(marker)
        self.events.write("unrecorded-feeds", array=_describe_array(value),
                          writer={"kernel": hidden.kernel, "param": hidden.param, "site": hidden.site,
                                  "stack": hidden.stack},
                          reader={"kernel": reader_kernel, "param": reader_param, "site": site, "tape": info.serial})

    def on_array_write(self, array: Any, what: str, depth: int) -> None:
        if self.busy:
            return
        try:
            if self.called_from_warp(depth):
                return
            key = _key(array)
            if key is None:
                return
            site = self.user_site(depth)
            self.note_site(what.strip(".()").replace("wp.", ""), site)
            self.check_overwrite(key, array, f"`{what}`", site, None, self.user_stack(depth))
        except Exception:  # noqa: BLE001
            self.internal_error("on_array_write")

    # -- tapes ---------------------------------------------------------------------------------
    def on_tape_enter(self, original: Any, tape: Any, args: tuple, kwargs: dict) -> Any:
        if not self.busy:
            try:
                site = self.user_site(3)
                info = self.tape_info(tape)
                info.site = site
                self.note_site("enter", site)
                self.host.on_enter(tape, info, site, self.user_stack(3))
                outer = self.active_tape()
                if outer is not None and outer is not tape:
                    outer_info = self.tape_info(outer)
                    self.events.write("nested-tape", site=site, tape=info.serial, outer=outer_info.serial,
                                      outer_site=outer_info.site)
            except Exception:  # noqa: BLE001
                self.internal_error("on_tape_enter")
        return original(tape, *args, **kwargs)

    def on_tape_zero(self, original: Any, tape: Any, args: tuple, kwargs: dict) -> Any:
        if not self.busy:
            try:
                self.tape_info(tape).backwards_since_zero = 0
                if not self.called_from_warp(3):
                    self.note_site("tape-zero", self.user_site(3))
            except Exception:  # noqa: BLE001
                self.internal_error("on_tape_zero")
        return original(tape, *args, **kwargs)

    def on_tape_reset(self, original: Any, tape: Any, args: tuple, kwargs: dict) -> Any:
        if not self.busy:
            try:
                info = self.tape_info(tape)
                info.backwards_since_zero = 0
                info.backward_ran = False
                info.resets += 1
                info.carried = []
                self._consume(info)
                info.snapshots.clear()
                self.note_site("tape-reset", self.user_site(3))
            except Exception:  # noqa: BLE001
                self.internal_error("on_tape_reset")
        return original(tape, *args, **kwargs)

    def _consume(self, info: TapeInfo) -> None:
        info.epoch += 1
        for key in info.keys:
            kept = [a for a in self.reads.get(key, ()) if a.pending()]
            if kept:
                self.reads[key] = kept
            else:
                self.reads.pop(key, None)
            writer = self.writes.get(key)
            if writer is not None and not writer.pending():
                del self.writes[key]
        info.keys.clear()

    def on_backward(self, original: Any, tape: Any, args: tuple, kwargs: dict) -> Any:
        if self.busy:
            return original(tape, *args, **kwargs)
        info = site = None
        accumulated: list[str] = []
        observed: dict[str, Any] = {}
        try:
            info = self.tape_info(tape)
            site = self.user_site(3)
            self.note_site("backward", site)
            info.backwards_since_zero += 1
            loss = args[0] if args else kwargs.get("loss")
            here = (site["file"], site["line"])
            self.backward_sites[here] = self.backward_sites.get(here, 0) + 1
            # Again on this tape, or again at this line (a loop recording a fresh tape each pass into
            # the same arrays): gradients that are non-zero already add up.
            if info.backwards_since_zero >= 2 or self.backward_sites[here] >= 2:
                accumulated = self.nonzero_input_gradients(tape, loss)
            grads = args[1] if len(args) > 1 else kwargs.get("grads")
            observed = self.host.before_backward(tape, info, loss, grads, site, self.user_stack(3))
        except Exception:  # noqa: BLE001
            self.internal_error("on_backward")
        result = original(tape, *args, **kwargs)
        if info is None:
            return result
        try:
            info.backward_ran = True
            info.backwards_total += 1
            self.events.write("backward", tape=info.serial, site=site, count=info.backwards_since_zero,
                              accumulated=accumulated, launches=sum(1 for l in tape.launches if not callable(l)),
                              **observed)
            self._consume(info)
            snapshots, info.snapshots = info.snapshots, []
            for snapshot in snapshots:
                self.run_check(snapshot, site)
        except Exception:  # noqa: BLE001
            self.internal_error("after backward")
        return result

    def nonzero_input_gradients(self, tape: Any, loss: Any) -> list[str]:
        """Arrays the tape reads (and does not write) whose ``.grad`` is already non-zero."""
        import numpy as np

        written, candidates = set(), {}
        for launch in tape.launches:
            if callable(launch):
                continue
            kernel = launch[0]
            file, name, _ = self.kernel_identity(kernel)
            reads, writes = self.kernel_effects(kernel, file, name)
            params = [a.label for a in getattr(kernel.adj, "args", [])]
            for param, value in zip(params, list(launch[3]) + list(launch[4])):
                if isinstance(value, self.wp.array):
                    if param in writes:
                        written.add(id(value))
                    elif value.grad is not None and value is not loss:
                        candidates[id(value)] = (value, f"`{param}` of kernel `{name}`")
        found = []
        for key, (value, label) in candidates.items():
            if key not in written and np.any(value.grad.numpy() != 0):
                found.append(label)
        return found

    # -- gradchecks ----------------------------------------------------------------------------
    def run_check(self, snapshot: Snapshot, backward_site: dict) -> None:
        started = time.perf_counter()
        self._enter_busy()
        runtime = self.context.runtime
        saved_tape = runtime.tape
        runtime.tape = None  # nothing of ours is recorded on the user's tape
        try:
            record = self._check(snapshot)
        except Exception as error:  # noqa: BLE001
            record = {"status": "error", "detail": f"{type(error).__name__}: {error}"[:2000],
                      "traceback": traceback.format_exc()[-3000:]}
        finally:
            runtime.tape = saved_tape
            self._leave_busy()
        record["seconds"] = round(time.perf_counter() - started, 4)
        self.events.write("gradcheck", file=snapshot.file, kernel=snapshot.name, site=snapshot.site,
                          tape=snapshot.tape_serial, backward_site=backward_site, **record)

    def _check(self, snapshot: Snapshot) -> dict[str, Any]:
        import numpy as np

        from warp_lint.runtime.comparison import (
            DEFAULT_TOLERANCES,
            LaunchUnderTest,
            compare_launch,
            precision_of,
        )

        wp = self.wp
        kernel = snapshot.kernel
        args = []
        for item in snapshot.args:
            if item[0] == "array":
                _, values, dtype, shape, device = item
                args.append(wp.array(values, dtype=dtype, shape=shape, device=device))
            else:
                args.append(item[1])
        device = snapshot.device
        if device is None:
            device = next((a.device for a in args if isinstance(a, wp.array)), None)
        launch = LaunchUnderTest(kernel, snapshot.dim, args, device=device)
        reads, writes = self.kernel_effects(kernel, snapshot.file, snapshot.name)
        floats = [name for name, slot in launch.slots.items() if slot.precision is not None]
        # Inputs: every float array but pure outputs; outputs: what the kernel writes or changes.
        inputs = [n for n in floats if not (n in writes and n not in reads)]
        changed = set(launch.changed_arrays())
        outputs = [n for n in floats if n in writes or n in changed]
        in_place = [n for n in outputs if n in inputs]
        outputs = in_place + [n for n in outputs if n not in in_place]
        dim = snapshot.dim
        record: dict[str, Any] = {"dim": list(dim) if isinstance(dim, (tuple, list)) else dim,
                                  "device": str(device), "inputs": inputs, "outputs": outputs}
        record["hits"] = self.coverage(snapshot, launch)
        if not inputs or not outputs:
            record.update(status="no-pair", detail=f"no floating-point (input, output) pair (inputs {inputs},"
                                                   f" outputs {outputs})")
            return record
        sizes = [launch.slots[n].size for n in inputs + outputs]
        fast = self.fast_mode or max(sizes) > self.full_jacobian_limit
        tolerances = DEFAULT_TOLERANCES[precision_of(launch, inputs + outputs)]
        result = compare_launch(launch, inputs, outputs, tolerances=tolerances,
                                rng=np.random.default_rng(int(self.config.get("seed", 0))), fast_mode=fast,
                                nondet_tol=None, full_jacobian_limit=self.full_jacobian_limit)
        record.update(status="pass" if result.passed else "fail", result=result.to_dict(), table=result.table())
        return record

    def coverage(self, snapshot: Snapshot, launch: Any) -> dict[str, Any]:
        """For each flagged line of the kernel: how many threads ran it on these inputs."""
        flagged = self.kernels.get(snapshot.file, {}).get(snapshot.name) or {}
        threads = _thread_count(snapshot.dim)
        hits: dict[str, Any] = {}
        for line in sorted({int(f["line"]) for f in flagged.get("findings", [])}):
            try:
                if _unconditional(snapshot.kernel.func, line):
                    hits[str(line)] = threads
                    continue
                coverage_kernel = self._coverage_kernel(snapshot, line)
                launch.restore()
                counter = self.wp.zeros(1, dtype=self.wp.int32, device=launch.device)
                self.wp.launch(coverage_kernel, dim=snapshot.dim, inputs=[*launch.args, counter], device=launch.device)
                hits[str(line)] = int(counter.numpy()[0])
            except Exception as error:  # noqa: BLE001
                hits[str(line)] = f"unknown: {type(error).__name__}: {error}"[:300]
        return hits

    def _coverage_kernel(self, snapshot: Snapshot, line: int) -> Any:
        key = (snapshot.file, snapshot.name, line)
        found = self.coverage_kernels.get(key)
        if found is not None:
            return found
        from warp_lint.runtime import generated

        module_name = generated.stable_name("warp_lint_trace_cover", snapshot.file, snapshot.name, str(line))
        kernel_name = f"_wl_trace_cover_{snapshot.name}_{line}"
        source = generated.coverage_copy(snapshot.kernel.func, line, kernel_name, is_kernel=True)
        directory = os.path.join(self.config.get("session_dir", "."), "generated")
        module = generated.load_generated_module(module_name, [source], snapshot.kernel.func.__globals__, {}, directory)
        found = self.coverage_kernels[key] = getattr(module, kernel_name)
        return found

    # -- exit ----------------------------------------------------------------------------------
    def at_exit(self) -> None:
        try:
            watched = set(self.config.get("files") or ())
            imported = set()
            for module in list(sys.modules.values()):
                path = getattr(module, "__file__", None)
                if path and _realpath(path) in watched:
                    imported.add(_realpath(path))
            self.events.write("exit", imported=sorted(imported), launches=self.launch_counts)
        except Exception:  # noqa: BLE001
            pass


# -- helpers -----------------------------------------------------------------------------------
def _frame(depth: int) -> Any:
    """``sys._getframe(depth)`` (counted from the caller), or the outermost frame of a shallower stack."""
    frame = sys._getframe(1)
    for _ in range(depth - 1):
        if frame.f_back is None:
            break
        frame = frame.f_back
    return frame


def _syntactic_stores(func: Any, params: set[str]) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    return {node.value.id for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name) and node.value.id in params}


def _precision_kind(wp: Any, dtype: Any) -> str | None:
    """A name for dtypes a check can copy: float (any precision, vectors...) or integer."""
    scalar = getattr(dtype, "_wp_scalar_type_", dtype)
    if scalar in (wp.float16, wp.float32, wp.float64):
        return "float"
    if scalar in (wp.int8, wp.uint8, wp.int16, wp.uint16, wp.int32, wp.uint32, wp.int64, wp.bool):
        return "int"
    return None


def _is_value(wp: Any, value: Any, param: Any) -> bool:
    """A by-value argument a check can pass as is: numbers and Warp vectors/matrices, never ids."""
    if getattr(param, "type", None) is wp.uint64:
        return False  # mesh / volume / BVH ids: a stale id crashes the process
    if isinstance(value, (bool, int, float)):
        return True
    kind = type(value)
    if hasattr(kind, "_wp_scalar_type_"):  # vectors, matrices, quaternions, transforms
        return True
    return kind in (wp.float16, wp.float32, wp.float64, wp.int8, wp.uint8, wp.int16, wp.uint16, wp.int32,
                    wp.uint32, wp.int64, wp.bool)


def _thread_count(dim: Any) -> int:
    if isinstance(dim, (tuple, list)):
        total = 1
        for d in dim:
            total *= int(d)
        return total
    return int(dim)


def _syntactic_effects(func: Any, params: set[str]) -> tuple[set[str], set[str]]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    reads, writes = set(), set()
    stored: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            inner = node.value
            if isinstance(node, ast.Subscript) and isinstance(inner, ast.Name) and inner.id in params:
                writes.add(inner.id)
            elif isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name) and inner.value.id in params:
                writes.add(inner.value.id)  # a[i].x = ... / a[i][0] = ...
                stored.add(id(inner))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript) and \
                isinstance(node.target.value, ast.Name) and node.target.value.id in params:
            if not isinstance(node.op, (ast.Add, ast.Sub)):
                reads.add(node.target.value.id)  # *= and /= read the old value; += is an atomic add
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for position, arg in enumerate(node.args):
                if isinstance(arg, ast.Name) and arg.id in params:
                    if position == 0 and (callee.startswith("atomic_") or callee in ("array_store", "store")):
                        writes.add(arg.id)
                    else:
                        reads.add(arg.id)  # passed to a helper: counted as read
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and id(node) not in stored and \
                isinstance(node.value, ast.Name) and node.value.id in params:
            reads.add(node.value.id)
    return reads, writes


def _unconditional(func: Any, line: int) -> bool:
    """True when the statement on ``line`` runs in every thread: it sits directly in the kernel's
    body, is not itself a compound statement, and no statement before it can return early."""
    lines, first = inspect.getsourcelines(func)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        return False
    for statement in definition.body:
        start = first + statement.lineno - 1
        end = first + getattr(statement, "end_lineno", statement.lineno) - 1
        if start <= line <= end:
            simple = not isinstance(statement, (ast.If, ast.For, ast.While, ast.With, ast.Try))
            return simple and start == line
        if any(isinstance(node, ast.Return) for node in ast.walk(statement)):
            return False
    return False


def install(warp_module: Any, config: dict[str, Any]) -> None:
    global _tracer
    if _tracer is not None:
        return
    wp = warp_module
    if config.get("overwrite_tracking", True) and hasattr(wp.config, "verify_autograd_array_access"):
        # Before any module loads: switched on later, Warp emits nothing for already-built modules.
        wp.config.verify_autograd_array_access = True
    tracer = Tracer(wp, config)
    tracer.install()
    _tracer = tracer
    atexit.register(tracer.at_exit)
    tracer.events.write("start", argv=list(sys.argv), warp_version=getattr(wp, "__version__", None),
                        python=sys.version.split()[0],
                        tracking=bool(getattr(wp.config, "verify_autograd_array_access", False)))


def _stands_for(wrapper: Any, original: Any, name: str | None = None) -> Any:
    """``wrapper``, dressed as the Warp function or method it replaces while tracing (``inspect``
    and ``help()`` see the original)."""
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    if name is not None:
        wrapper.__name__ = name
    return wrapper
