"""A finding's own differentiation context: its definition's, narrowed by what the finding is about.

A kernel or func is differentiated when a recording reaches it (``ProjectModel.context_of``). A
finding inside it claims one gradient wrong: that of some array parameters (``origins``), through
code that runs only where the parameters pass some tests (``guards``: `if joint_qdd:`). Where
every recorded launch binds the origins to arrays allocated without `requires_grad`, or binds a
guarded parameter to a literal that fails its test, the gradient the finding is about does not
exist in the project: the finding is forward-only, with that reason. ``FindingContexts`` is mixed
into ``ProjectModel`` and reads its recordings, callers and kernel facts.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

from warp_lint.host import HostEvent, HostScope, Location
from warp_lint.kernel_facts import Guard, fails
from warp_lint.project.contexts import (
    DIFFERENTIATED,
    FORWARD_ONLY,
    DifferentiationContext,
)
from warp_lint.project.contexts import where as _where
from warp_lint.project.index import Symbol, WarpDefinition

# A key up to its first attribute or index: `outputs@75` of `outputs@75["log_prob"]`.
HEAD_OF_KEY = re.compile(r"[.\[]")


class FindingContexts:
    """The finding-context part of ``ProjectModel`` (see the module's docstring)."""

    def finding_context(self, definition: WarpDefinition, origins: Iterable[str] | None,
                        guards: Iterable[Guard] | None = None,
                        destinations: Iterable[str] | None = None) -> DifferentiationContext:
        """``context_of`` for a finding in the definition whose wrong gradient would be that of the
        kernel's array parameters ``origins`` (None: any), about code that runs only where the
        definition's parameters pass ``guards``, whose value reaches only the array parameters
        ``destinations`` (None: not known): forward-only where every recorded launch binds the
        origins, or the destinations, to arrays without gradients, or binds a guarded parameter to
        a literal that fails its guard (`if joint_qdd:` with `None` passed)."""
        context = self.context_of(definition)
        if context.state != DIFFERENTIATED:
            return context
        if guards:
            skipped = self._guarded_out(definition, [tuple(guard) for guard in guards])
            if skipped is not None:
                return DifferentiationContext(FORWARD_ONLY, skipped, launches=context.launches)
        if definition.kind != "kernel":
            return context
        # The value at stake reaches only its destinations, and no gradient enters an output
        # allocated without `requires_grad` (`backward()` seeds and passes none); or its gradient
        # is that of its origins, which no launch gives one.
        for params, at_stake in ((destinations, "the value at stake reaches only"),
                                 (origins, "the gradient at stake is that of")):
            free = self.without_gradients_in_every_launch(definition.symbol, params) if params else None
            if free is not None:
                where, allocations = free
                named = ", ".join(f"`{a.name}` ({_where(a.location)})" for a in allocations[:3])
                listed = ", ".join(f"`{param}`" for param in params)
                return DifferentiationContext(FORWARD_ONLY, f"{at_stake} {listed}, and every recorded launch (first"
                                                            f" at {_where(where)}) binds it to an array allocated"
                                                            f" without `requires_grad`: {named}",
                                              launches=context.launches)
        unused = self.unused_gradients_in_every_launch(definition.symbol, origins) if origins else None
        if unused is not None:
            where, names = unused
            listed = ", ".join(f"`{param}`" for param in origins)
            named = ", ".join(f"`{name}`" for name in names[:3])
            them = "it to an array" if len(origins) == 1 else "them to arrays"
            return DifferentiationContext(FORWARD_ONLY, f"the gradient at stake is that of {listed}, and every recorded"
                                                        f" launch (first at {_where(where)}) binds {them} made before"
                                                        f" the tape records, which nothing recorded writes and whose"
                                                        f" gradient nothing reads: {named}",
                                          launches=context.launches)
        return context

    def unused_gradients_in_every_launch(self, kernel: Symbol, params: Iterable[str]
                                         ) -> tuple[Location, list[str]] | None:
        """Where a finding's gradient is that of some of the kernel's array parameters (``params``):
        the first recorded launch and the arrays' names, when every recorded launch binds each of
        them to an array whose gradient nobody uses: a local made before any tape records (a target
        computed by a frozen network), that no recorded launch, copy or call under a tape writes
        (`backward()` carries its gradient no further) and whose `.grad` the recording never reads
        (measured on 1.19 by the blind judges of skrl's SAC: the critic's gradient is exact, only the
        targets' own, unused gradient is wrong). None where one may be used."""
        first, names = None, []
        for scope, event in self._recorded_launches(kernel):
            bound = {ref.param: ref for ref in event.launch.refs}
            for param in params:
                ref = bound.get(param)
                if ref is None or not ref.key or not _gradient_unused(scope, event, ref.key):
                    return None
                names.append(ref.code)
            first = first or event.location
        return (first, names) if first is not None else None

    def _recorded_launches(self, kernel: Symbol) -> Iterator[tuple[HostScope, HostEvent]]:
        """Every recorded launch that names the kernel, with its recording."""
        self._recorded  # the recordings, made once
        for recording in self._recordings.values():
            for symbol, event in recording.launch_symbols:
                if symbol == kernel and event.launch is not None and event.launch.recorded:
                    yield recording.scope, event

    def without_gradients_in_every_launch(self, kernel: Symbol, params: Iterable[str]
                                          ) -> tuple[Location, list[HostEvent]] | None:
        """Where a finding's gradient is that of some of the kernel's array parameters (``params``):
        the first recorded launch and the allocations, when every recorded launch of the kernel
        binds each of them to an array allocated without `requires_grad` (a delay counter made with
        `wp.zeros(1)`): no gradient of theirs exists to be wrong. None where one may, or where no
        recorded launch names the kernel."""
        first, allocations = None, []
        for scope, event in self._recorded_launches(kernel):
            bound = {ref.param: ref for ref in event.launch.refs}
            for param in params:
                ref = bound.get(param)
                allocation = scope.allocated_without_gradients(ref.key) if ref is not None and ref.key else None
                if allocation is None:
                    return None
                allocations.append(allocation)
            first = first or event.location
        return (first, allocations) if first is not None else None

    def _guarded_out(self, definition: WarpDefinition, guards: list[Guard]) -> str | None:
        """Why no recorded launch runs code guarded by ``guards`` (on the definition's parameters),
        in words; None where one may. A func's guards are followed to the kernels that call it
        directly and pass their own parameters on; any other caller may run it."""
        if definition.kind == "kernel":
            paths = [(definition.symbol, guards)]
        else:
            paths = []
            name = definition.summary.name
            for caller, caller_definition in self._callers(definition.symbol, name):
                facts = self.facts_of(caller)
                if caller_definition.kind != "kernel" or facts is None or name not in facts.passed_parameters:
                    return None
                for passed in facts.passed_parameters[name]:
                    paths.append((caller, [(passed[g[0]], *g[1:]) for g in guards if g[0] in passed]))
        if not paths:
            return None
        first = None
        for kernel, translated in paths:
            launches = list(self._recorded_launches(kernel))
            if not launches:
                return None  # differentiated some other way (a gradient check, a launch not named here)
            for _, event in launches:
                failing = next((g for g in translated if fails(g, event.launch.literals)), None)
                if failing is None:
                    return None
                first = first or (kernel, failing, event)
        if first is None:
            return None
        kernel, (param, test, constant, outcome), event = first
        literal = event.launch.literals[param]
        equal = (test == "==") == outcome
        need = ("true" if outcome else "false") if test == "truth" else \
            f"{'equal to' if equal else 'other than'} {constant!r}"
        return (f"the code it is about runs only where `{param}` of `{kernel.qualname}` is {need}, and every recorded"
                f" launch passes {literal!r} for it (first at {_where(event.location)})")


def _gradient_unused(scope: HostScope, launch: HostEvent, key: str) -> bool:
    """Whether the gradient of the array ``key`` that ``launch`` reads is used nowhere in the
    recording, which runs `backward()` on the launch's tape: the array is a local (not the entry
    point's, not an object's attribute) bound only outside tapes, and not by an allocation that
    asks for its gradient (`requires_grad=True` written out: a parameter the program trains), no
    other recorded launch writes it, nothing under the tape or after the launch (a copy, a call the
    recording does not follow, a seed of `backward()`, an optimizer's step) is handed it, and no
    `.grad` of it is read."""
    head = HEAD_OF_KEY.split(key, 1)[0]
    if "@" not in head or "." in head:
        return False
    region = launch.region
    if region is None or not region.key or not any(b.key == region.key and b.order > launch.order
                                                   for b in scope.backwards()):
        return False  # the recording does not differentiate the tape: what it shows of its gradients is no use
    bindings = [e for e in scope.events if e.kind == "assign" and e.key == head]
    if not bindings or any(e.region is not None for e in bindings):
        return False
    if any(e.allocation is not None and e.allocation.requires_grad is True for e in bindings):
        return False  # allocated with `requires_grad=True` written out: its gradient was asked for
    def mentions(ref_key: str) -> bool:
        return ref_key == head or ref_key.startswith((head + ".", head + "["))
    for event in scope.events:
        if event is launch:
            continue
        if event.kind == "grad" and mentions(event.key):
            return False
        if event.launch is not None:
            if event.launch.recorded and any(mentions(w.key) for w in event.launch.writes(convention=True)):
                return False
        elif (event.region is not None or event.order > launch.order) and (
                any(mentions(w.key) for w in event.writes) or any(mentions(a.key) for a in event.arguments)):
            return False  # handed on under the tape or after it: a seed of `backward()`, an optimizer's step
    return True
