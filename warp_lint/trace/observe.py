"""Host hazards a traced run shows although Warp reports none of them (traced process side).

:class:`HostObserver` is owned by the :class:`~warp_lint.trace.instrument.Tracer` and fed by its
wrappers. It writes one event per observation, with the user's call stack (innermost first), so a
finding flagged on a helper call or on a wrapper around ``wp.launch`` matches a launch made deeper
down:

* ``readback`` / ``host-write``: ``.numpy()`` / ``.list()`` of an array the tape computed (or that
  requires grad) while a tape records, then host data written into an array (``assign``,
  ``wp.array(data)``) in the same recording: the tape cannot see through the round trip (WL203);
* ``grad-cut``: a recorded launch reads an array without ``requires_grad`` that an earlier launch
  on the same tape wrote, or ``backward()`` starts from such a loss: the chain stops there (WL206);
* ``tape-reentered``: a tape entered again after its ``backward()`` without ``reset()``: the old
  launches stay and are replayed again (WL207);
* ``carried``: (on the ``backward`` event) a launch on this tape read state written on another
  tape whose ``backward()`` already ran: the gradient stops at the carried state (WL208);
* ``utility`` / ``untaped-feeds``: a ``wp.utils`` reduction, scan or sort ran while a tape recorded
  and a recorded launch (or the loss) then used its output: the tape never saw it (WL209);
* ``loss-outside``: ``backward()`` starts from a loss last written by a launch the tape did not
  record (WL210);
* ``retained-rewrite``: a recorded launch stores into a ``retain_grad=True`` array another
  launch on the same tape wrote (WL212);
* ``copy-source-read``: a recorded copy (``wp.copy``, ``wp.clone``, ``assign``) of an array that
  a later recorded launch reads too (WL213: its adjoint overwrote the source's gradient before 1.17).

Overwrites between the tape block and ``backward()`` (WL211) are the tracer's own ``overwrite``
events, marked ``recording: false``.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

UTILITY_OUTPUTS = {  # wp.utils function -> the parameters it writes
    "array_sum": ("out",),
    "array_inner": ("out",),
    "array_scan": ("out_array",),
    "radix_sort_pairs": ("keys", "values"),
    "segmented_sort_pairs": ("keys", "values"),
    "runlength_encode": ("run_values", "run_lengths", "run_count"),
}


@dataclasses.dataclass
class Write:
    """The latest launch that wrote an array, recorded or not."""

    tape: Any  # weakref to the tape it was recorded on, or None
    serial: int
    epoch: int
    recorded: bool
    kernel: str
    param: str
    site: dict
    stack: list
    # Keys are device pointers, which a new allocation reuses once an array is freed: an entry is
    # only valid while the array it was made for lives.
    array: Any = None
    resets: int = 0  # the tape's reset() count when recorded: the tape still holds the launch if equal

    def alive(self) -> bool:
        return self.array is None or self.array() is not None

    def pending(self) -> bool:
        tape = self.tape() if self.tape is not None else None
        info = getattr(tape, "_wl_trace", None) if tape is not None else None
        return info is not None and info.epoch == self.epoch

    def describe(self) -> dict:
        return {"kernel": self.kernel, "param": self.param, "site": self.site, "stack": self.stack,
                "tape": self.serial if self.recorded else None, "recorded": self.recorded}


class HostObserver:
    def __init__(self, tracer: Any):
        self.tracer = tracer
        self.allocations: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # array -> (site, stack)
        self.last_writer: dict[tuple, Write] = {}
        self.untaped: dict[tuple, tuple[dict, Any]] = {}  # key -> (the wp.utils call that wrote it, array ref)
        self.copies: dict[tuple, tuple[dict, Any]] = {}  # key -> (the recorded copy that read it, array ref)

    # -- helpers -------------------------------------------------------------------------------
    def _recording(self) -> tuple[Any, Any] | tuple[None, None]:
        tape = self.tracer.active_tape()
        return (tape, self.tracer.tape_info(tape)) if tape is not None else (None, None)

    def _write(self, event: str, **fields: Any) -> None:
        self.tracer.events.write(event, **fields)

    def _writer(self, key: tuple | None) -> Write | None:
        found = self.last_writer.get(key)
        if found is not None and not found.alive():
            del self.last_writer[key]
            return None
        return found

    @staticmethod
    def _live(table: dict, key: tuple | None) -> dict | None:
        found = table.get(key)
        if found is None:
            return None
        if found[1]() is None:
            del table[key]
            return None
        return found[0]

    def _float(self, array: Any) -> bool:
        wp = self.tracer.wp
        scalar = getattr(array.dtype, "_wp_scalar_type_", array.dtype)
        return scalar in (wp.float16, wp.float32, wp.float64)

    # -- allocations ---------------------------------------------------------------------------
    def on_allocation(self, array: Any, data: Any, depth: int) -> None:
        """Remember where float arrays without gradient (or with ``retain_grad``) were made, and
        note an array made from host data while a tape records."""
        tape, info = self._recording()
        from_host = tape is not None and data is not None and not isinstance(data, self.tracer.wp.array)
        tracked = self._float(array) and (not array.requires_grad or getattr(array, "retain_grad", False))
        if not (tracked or from_host):
            return
        site = self.tracer.user_site(depth)
        stack = self.tracer.user_stack(depth)
        if tracked:
            self.allocations[array] = (site, stack)
            self.tracer.note_site("allocation", site)
        if from_host:
            self._write("host-write", what="wp.array(host data)", site=site, stack=stack, tape=info.serial,
                        epoch=info.epoch)

    def allocation_of(self, array: Any) -> dict | None:
        found = self.allocations.get(array)
        return {"site": found[0], "stack": found[1]} if found else None

    # -- host round trips ------------------------------------------------------------------------
    def on_readback(self, array: Any, how: str, depth: int) -> None:
        tape, info = self._recording()
        if tape is None:
            return
        key = _key(array)
        writer = self._writer(key)
        computed = writer is not None and writer.recorded and writer.serial == info.serial and writer.pending()
        if not (computed or array.requires_grad):
            return
        self._write("readback", how=how, site=self.tracer.user_site(depth), stack=self.tracer.user_stack(depth),
                    tape=info.serial, epoch=info.epoch, array=_describe(array),
                    computed_by=writer.describe() if computed else None)

    def on_host_assign(self, array: Any, source: Any, depth: int) -> None:
        tape, info = self._recording()
        if tape is None or isinstance(source, self.tracer.wp.array):
            return
        self._write("host-write", what=".assign(host data)", site=self.tracer.user_site(depth),
                    stack=self.tracer.user_stack(depth), tape=info.serial, epoch=info.epoch, array=_describe(array))

    # -- wp.utils ----------------------------------------------------------------------------------
    def on_utility(self, name: str, bound: dict, depth: int) -> None:
        tape, info = self._recording()
        if tape is None:
            return
        site, stack = self.tracer.user_site(depth), self.tracer.user_stack(depth)
        call = {"function": f"wp.utils.{name}", "site": site, "stack": stack, "tape": info.serial,
                "epoch": info.epoch}
        self._write("utility", **call)
        for param in UTILITY_OUTPUTS.get(name, ()):
            value = bound.get(param)
            if isinstance(value, self.tracer.wp.array) and _key(value):
                self.untaped[_key(value)] = (call, weakref.ref(value))

    # -- copies ------------------------------------------------------------------------------------
    def on_copy(self, source: Any, what: str, depth: int) -> None:
        tape, info = self._recording()
        if tape is None or not isinstance(source, self.tracer.wp.array) or not _key(source):
            return
        self.copies[_key(source)] = ({"what": what, "site": self.tracer.user_site(depth),
                                      "stack": self.tracer.user_stack(depth), "tape": info.serial,
                                      "epoch": info.epoch}, weakref.ref(source))

    # -- launches ----------------------------------------------------------------------------------
    def on_launch(self, before: dict, arrays: list[tuple[str, Any, tuple]], reads: frozenset, writes: frozenset,
                  stores: frozenset) -> None:
        tracer = self.tracer
        tape, recorded = before["tape"], before["recorded"]
        info = tracer.tape_info(tape) if tape is not None else None
        site, stack, name = before["site"], before["stack"], before["name"]
        reader = {"kernel": name, "site": site, "stack": stack, "tape": info.serial if info else None}
        if recorded:
            for param, value, key in arrays:
                if param not in reads:
                    continue
                last = self._writer(key)
                same_recording = last is not None and last.recorded and last.serial == info.serial and last.pending()
                if same_recording and self._float(value) and not value.requires_grad:
                    self._write("grad-cut", how="read", array=_describe(value), allocation=self.allocation_of(value),
                                writer=last.describe(), reader={**reader, "param": param})
                if last is not None and last.recorded and last.serial != info.serial and not last.pending():
                    info.carried.append({"array": _describe(value), "writer": last.describe(),
                                         "reader": {**reader, "param": param}})
                call = self._live(self.untaped, key)
                if call is not None and call["tape"] == info.serial and call["epoch"] == info.epoch:
                    self._write("untaped-feeds", call=call, reader={**reader, "param": param}, array=_describe(value))
                copy = self._live(self.copies, key)
                if copy is not None and copy["tape"] == info.serial and copy["epoch"] == info.epoch:
                    self._write("copy-source-read", copy=copy, reader={**reader, "param": param},
                                array=_describe(value))
            for param, value, key in arrays:
                if param in stores and getattr(value, "retain_grad", False):
                    last = self._writer(key)
                    if last is not None and last.recorded and last.serial == info.serial and last.pending():
                        self._write("retained-rewrite", array=_describe(value), allocation=self.allocation_of(value),
                                    first=last.describe(), second={**reader, "param": param})
            info.launched_since_backward = True
        for param, value, key in arrays:
            if param in writes:
                self.last_writer[key] = Write(weakref.ref(tape) if recorded else None, info.serial if recorded else 0,
                                              info.epoch if recorded else -1, recorded, name, param, site, stack,
                                              weakref.ref(value), info.resets if recorded else 0)
                self.untaped.pop(key, None)

    # -- tapes -------------------------------------------------------------------------------------
    def on_enter(self, tape: Any, info: Any, site: dict, stack: list) -> None:
        held = sum(1 for launch in tape.launches if not callable(launch))
        if info.backward_ran and held:
            self._write("tape-reentered", site=site, stack=stack, tape=info.serial, held=held,
                        backwards=info.backwards_total)

    def before_backward(self, tape: Any, info: Any, loss: Any, grads: Any, site: dict, stack: list) -> dict:
        """Observations at ``backward()``: what the event records besides the tracer's own."""
        wp = self.tracer.wp
        fields: dict[str, Any] = {"stack": stack}
        seeds = [loss] if isinstance(loss, wp.array) else []
        seeds += [a for a in (grads or {}) if isinstance(a, wp.array)]
        for array in seeds:
            key = _key(array)
            if isinstance(loss, wp.array) and array is loss and self._float(array) and not array.requires_grad:
                self._write("grad-cut", how="loss", array=_describe(array), allocation=self.allocation_of(array),
                            backward={"site": site, "stack": stack, "tape": info.serial})
            last = self._writer(key)
            held = last is not None and last.recorded and last.serial == info.serial and last.resets == info.resets
            if last is not None and not held:
                self._write("loss-outside", array=_describe(array), writer=last.describe(),
                            backward={"site": site, "stack": stack, "tape": info.serial})
            call = self._live(self.untaped, key)
            if call is not None and call["tape"] == info.serial and call["epoch"] == info.epoch:
                self._write("untaped-feeds", call=call, reader={"backward": site, "stack": stack},
                            array=_describe(array))
        if info.carried:
            fields["carried"] = info.carried[:5]
            info.carried = []
        return fields


def _key(array: Any) -> tuple | None:
    ptr = getattr(array, "ptr", None)
    if not ptr:
        return None
    return (str(array.device), int(ptr))


def _describe(array: Any) -> dict[str, Any]:
    try:
        return {"shape": list(array.shape), "dtype": getattr(array.dtype, "__name__", str(array.dtype)),
                "requires_grad": bool(array.requires_grad)}
    except Exception:  # noqa: BLE001
        return {}
