"""Parent side of ``warp-lint trace``: events + static findings -> verdicts and runtime-only problems.

Plain Python (no warp). Every static finding of a traced file gets a :class:`Confirmation`:

* ``confirmed``: the run showed the hazard at the finding's place: Warp's overwrite-tracking
  warning or warp-lint's own overwrite / cross-tape / accumulation observation at its line, or
  AD and finite differences disagreeing on a real launch of its kernel (with the table);
* ``cleared``: the flagged code ran, was checked and was fine (AD matched FD on real launches in
  which the flagged statement ran; the flagged host call ran without the hazard happening);
* ``not_exercised``: the run never reached it (kernel never launched, or never differentiated;
  host call never made);
* ``inconclusive``: it ran but the run could not decide (unsupported arguments, FD not converged,
  no runtime observation exists for the rule).

What the run showed that no static finding predicted becomes a runtime-only problem with a code
of its own (``WR2xx``, listed in :data:`PROBLEM_CODES` and docs/trace.md).
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from typing import Any

from warp_lint.finding import Confirmation, Finding, Position
from warp_lint.links import documentation_page
from warp_lint.source import source_line as line_of
from warp_lint.runtime.tracking import matching_messages

PROBLEM_CODES = {
    "WR201": ("tape-overwrite-observed", "an array read by a launch recorded on a tape was overwritten before that"
                                         " tape's backward()"),
    "WR202": ("cross-tape-gradient-observed", "backward() ran on a tape whose launches read what a launch on"
                                              " another tape wrote, and that other tape's backward() never"
                                              " followed"),
    "WR203": ("nested-tape-observed", "a tape was entered while another one was recording"),
    "WR204": ("grad-accumulation-observed", "backward() ran again on a tape without zeroing: input gradients"
                                            " were already non-zero"),
    "WR205": ("unrecorded-launch-observed", "a launch not recorded on the active tape wrote an array that a"
                                            " recorded launch then read"),
    "WR206": ("overwrite-warning-unpredicted", "Warp's overwrite tracking warned where no static finding is"),
    "WR207": ("tape-reuse-observed", "a tape was entered again after its backward() without reset(): its old"
                                     " launches are replayed again"),
    "WR209": ("untaped-utility-observed", "a wp.utils reduction, scan or sort ran while a tape recorded, and a"
                                          " recorded launch (or the loss) used its output"),
    "WR210": ("loss-outside-tape-observed", "backward() started from a loss last written by a launch the tape did"
                                            " not record"),
    "WR211": ("host-roundtrip-observed", "an array the tape computed was read to the host and host data was"
                                         " written back into an array in the same recording"),
    "WR212": ("retained-grad-rewrite-observed", "a recorded launch stored into a retain_grad=True array that"
                                                " another launch on the same tape had written"),
    "WR213": ("gradient-chain-cut-observed", "a recorded launch read an array without requires_grad that an"
                                             " earlier launch on the same tape wrote (or backward() started from"
                                             " such a loss)"),
}

CONFIRMED, CLEARED, NOT_EXERCISED, INCONCLUSIVE = "confirmed", "cleared", "not_exercised", "inconclusive"


@dataclasses.dataclass
class RuntimeProblem(Finding):
    """A runtime-only problem: shaped like a finding, documented in docs/trace.md."""

    @property
    def url(self) -> str | None:
        # docs/trace.md gives each code's row an anchor named after the code, lowercased.
        return documentation_page(f"trace.md#{self.code.lower()}")


def _real(path: str) -> str:
    return os.path.realpath(path)


def _in_range(site: dict | None, path: str, first: int, last: int) -> bool:
    return bool(site) and site.get("file") == path and first <= int(site.get("line", 0)) <= last


def _hit(where: dict | None, path: str, first: int, last: int) -> bool:
    """Whether an event's place (its site, or any frame of its user call stack) is the flagged code:
    a finding on a helper call matches what the helper did."""
    if not where:
        return False
    return _in_range(where.get("site"), path, first, last) or any(
        _in_range(frame, path, first, last) for frame in where.get("stack") or ())


@dataclasses.dataclass
class RunFacts:
    """The events of one traced run, indexed."""

    events: list[dict[str, Any]]
    warp_version: str | None = None
    tracking: bool | None = None
    launches: dict[tuple[str, str], list[dict]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    launch_counts: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))
    gradchecks: dict[tuple[str, str], list[dict]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    skipped: dict[tuple[str, str], list[dict]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    sites: list[dict] = dataclasses.field(default_factory=list)
    by_kind: dict[str, list[dict]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    touched: set[str] = dataclasses.field(default_factory=set)
    harmful_crossings: list[dict] = dataclasses.field(default_factory=list)
    instrument_errors: list[str] = dataclasses.field(default_factory=list)
    processes: int = 0

    @classmethod
    def from_events(cls, events: list[dict[str, Any]]) -> RunFacts:
        facts = cls(events)
        for event in events:
            kind = event.get("event")
            facts.by_kind[kind].append(event)
            site = event.get("site")
            if isinstance(site, dict) and site.get("file"):
                facts.touched.add(site["file"])
                if kind in ("site", "launch", "backward", "nested-tape"):
                    facts.sites.append(site)
                    facts.sites.extend(event.get("stack") or ())
            if kind == "start":
                facts.processes += 1
                facts.warp_version = facts.warp_version or event.get("warp_version")
                facts.tracking = bool(event.get("tracking")) if facts.tracking is None else facts.tracking
            elif kind == "launch":
                facts.launches[(event["file"], event["kernel"])].append(event)
                facts.touched.add(event["file"])
            elif kind == "gradcheck":
                facts.gradchecks[(event["file"], event["kernel"])].append(event)
            elif kind == "check-skipped":
                facts.skipped[(event["file"], event["kernel"])].append(event)
            elif kind == "exit":
                facts.touched.update(event.get("imported") or ())
                for key, count in (event.get("launches") or {}).items():
                    facts.launch_counts[key] += int(count)
            elif kind == "instrument-error":
                facts.instrument_errors.append(str(event.get("detail")))
        facts.harmful_crossings = _harmful_crossings(events)
        facts.by_kind["overwrite"] = _harmful_overwrites(events)
        return facts

    def site_ran(self, path: str, first: int, last: int) -> bool:
        return any(_in_range(site, path, first, last) for site in self.sites)

    def launch_count(self, path: str, kernel: str) -> int:
        counted = self.launch_counts.get(f"{path}::{kernel}")
        return counted if counted else len(self.launches.get((path, kernel), ()))


def _harmful_overwrites(events: list[dict[str, Any]]) -> list[dict]:
    """Overwrites after which the reading tape's backward() ran: one whose tape is never
    differentiated changes no gradient."""
    later: dict[tuple, int] = {}
    for event in events:
        if event.get("event") == "backward":
            key = (event.get("pid", 0), event.get("tape"))
            later[key] = max(later.get(key, 0), event.get("seq", 0))
    return [e for e in events if e.get("event") == "overwrite"
            and later.get((e.get("pid", 0), (e.get("reader") or {}).get("tape")), -1) > e.get("seq", 0)]


def _harmful_crossings(events: list[dict[str, Any]]) -> list[dict]:
    """Crossings after which the reading tape's backward() ran and the writing tape's never followed."""
    by_pid: dict[int, list[dict]] = defaultdict(list)
    for event in events:
        by_pid[event.get("pid", 0)].append(event)
    harmful = []
    for process_events in by_pid.values():
        backwards = [e for e in process_events if e.get("event") == "backward"]
        for crossing in (e for e in process_events if e.get("event") == "crossing"):
            reader_tape, writer_tape = crossing["reader"]["tape"], crossing["writer"]["tape"]
            first = next((b for b in backwards if b["tape"] == reader_tape and b["seq"] > crossing["seq"]), None)
            if first is None:
                continue
            carried = any(b["tape"] == writer_tape and b["seq"] > first["seq"] for b in backwards)
            if not carried:
                harmful.append({**crossing, "backward_site": first["site"]})
    return harmful


def _confirmation(status: str, reason: str, facts: RunFacts, config: dict[str, Any], **evidence: Any) -> Confirmation:
    return Confirmation(status=status, reason=reason, warp_version=facts.warp_version, device=evidence.pop("device", None),
                        config=dict(config), evidence={k: v for k, v in evidence.items() if v not in (None, [], {})})


def _where(site: dict | None) -> str:
    if not site:
        return "?"
    return f"{os.path.relpath(site['file']) if os.path.isabs(site['file']) else site['file']}:{site['line']}"


def _tracker_text(events: list[dict]) -> list[str]:
    return [e.get("message", "") for e in events]


# -- static findings -----------------------------------------------------------------------------
def judge(finding: Finding, facts: RunFacts, config: dict[str, Any]) -> Confirmation:
    path = _real(finding.path)
    flagged = finding.data.get("flagged_lines") or [finding.start.line, finding.end.line]
    first, last = int(flagged[0]), int(flagged[-1])
    first, last = min(first, finding.start.line), max(last, finding.end.line)
    if finding.code.startswith("WL2") or finding.data.get("host"):
        return _judge_host(finding, path, first, last, facts, config)
    if finding.data.get("kernel"):
        return _judge_kernel(finding, path, first, last, facts, config)
    ran = facts.site_ran(path, first, last)
    return _confirmation(INCONCLUSIVE, "no-runtime-check: trace has no runtime observation for "
                         f"{finding.code}" + (" (the line ran)" if ran else ""), facts, config)


def _judge_host(finding, path, first, last, facts: RunFacts, config) -> Confirmation:
    code = finding.code
    ran = facts.site_ran(path, first, last)
    if code == "WL201":
        overwrites = [e for e in facts.by_kind["overwrite"] if _hit(e, path, first, last)]
        warnings = [e for e in facts.by_kind["tracker"] if e.get("kind") in ("across-launches", "operation")
                    and _in_range(e.get("site"), path, first, last)]
        if overwrites or warnings:
            sample = overwrites[0] if overwrites else None
            if sample:
                detail = (f"{sample['writer']} at {_where(sample['site'])} overwrote `{sample['reader']['param']}`,"
                          f" which kernel `{sample['reader']['kernel']}` read at {_where(sample['reader']['site'])}"
                          f" on a tape whose backward() had not run")
            else:
                detail = f"Warp's overwrite tracking warned at this launch: {warnings[0]['message'][:300]}"
            return _confirmation(CONFIRMED, f"overwrite-observed: {detail}", facts, config,
                                 warp_warnings=_tracker_text(warnings), overwrites=overwrites)
        if ran:
            return _confirmation(CLEARED, "write-ran-harmlessly: the flagged write ran, and no array that a launch"
                                 " on a still-pending tape had read was overwritten by it", facts, config)
        return _confirmation(NOT_EXERCISED, "not-reached: the flagged write never ran", facts, config)
    if code == "WL202":
        crossings = [c for c in facts.harmful_crossings if _in_range(c["backward_site"], path, first, last)]
        nested = [e for e in facts.by_kind["nested-tape"] if _in_range(e["site"], path, first, last)]
        if crossings:
            c = crossings[0]
            detail = (f"this backward() ran, but kernel `{c['reader']['kernel']}` ({_where(c['reader']['site'])}) on its"
                      f" tape read (as `{c['reader']['param']}`) the array kernel `{c['writer']['kernel']}`"
                      f" ({_where(c['writer']['site'])}) wrote (as `{c['writer']['param']}`) on another tape, whose"
                      " backward() never ran after it: the gradient stops between the tapes")
            return _confirmation(CONFIRMED, f"cross-tape-observed: {detail}", facts, config, crossings=crossings)
        if nested:
            return _confirmation(CONFIRMED, f"nested-tape-observed: a tape was entered at {_where(nested[0]['site'])}"
                                 " while another was recording", facts, config, nested=nested)
        if ran:
            return _confirmation(CLEARED, "tapes-independent: the flagged code ran and no launch read across tapes"
                                 " without the other tape's backward() following", facts, config)
        return _confirmation(NOT_EXERCISED, "not-reached: the flagged code never ran", facts, config)
    if code == "WL204":
        repeated = [e for e in facts.by_kind["backward"] if _hit(e, path, first, last)]
        accumulating = [e for e in repeated if e.get("accumulated")]
        if accumulating:
            e = accumulating[0]
            return _confirmation(CONFIRMED, f"accumulation-observed: backward() call {e['count']} since the last zero()"
                                 f" added into non-zero gradients of {', '.join(e['accumulated'][:5])}", facts, config,
                                 backwards=accumulating)
        if repeated:
            return _confirmation(CLEARED, "no-accumulation: backward() ran here, never into non-zero input"
                                 " gradients", facts, config)
        return _confirmation(NOT_EXERCISED, "not-reached: the flagged backward() never ran", facts, config)
    if code == "WL205":
        feeds = [e for e in facts.by_kind["unrecorded-feeds"] if _hit(e["writer"], path, first, last)]
        if feeds:
            e = feeds[0]
            return _confirmation(CONFIRMED, f"unrecorded-observed: kernel `{e['writer']['kernel']}` was not recorded and"
                                 f" kernel `{e['reader']['kernel']}` ({_where(e['reader']['site'])}) read what it"
                                 " wrote on the tape", facts, config, feeds=feeds)
        if ran:
            return _confirmation(CLEARED, "unrecorded-harmless: the launch ran, and no recorded launch read what it"
                                 " wrote", facts, config)
        return _confirmation(NOT_EXERCISED, "not-reached: the flagged launch never ran", facts, config)
    observe = _HOST_OBSERVATIONS.get(code)
    if observe is not None:
        return observe(path, first, last, facts, config, ran)
    return _confirmation(INCONCLUSIVE, f"no-runtime-check: trace has no runtime observation for {code}"
                         + (" (the line ran)" if ran else ""), facts, config)


def _where_of(place: dict | None) -> str:
    return _where((place or {}).get("site") or ((place or {}).get("stack") or [None])[0])


def _observed(facts: RunFacts, config, ran: bool, found: list, *, confirm: str, clear: str, not_reached: str,
              detail, evidence_key: str, status: str = CONFIRMED) -> Confirmation:
    if found:
        return _confirmation(status, f"{confirm}: {detail(found[0])}", facts, config, **{evidence_key: found[:5]})
    if ran:
        return _confirmation(CLEARED, clear, facts, config)
    return _confirmation(NOT_EXERCISED, f"not-reached: {not_reached}", facts, config)


def _judge_wl203(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    readbacks = facts.by_kind["readback"]
    writes = [e for e in facts.by_kind["host-write"] + facts.by_kind["launch"] if _hit(e, path, first, last)
              and e.get("tape") is not None]
    found = []
    for write in writes:
        earlier = [r for r in readbacks if r.get("pid") == write.get("pid") and r["tape"] == write["tape"]
                   and r.get("epoch") == write.get("epoch") and r["seq"] < write["seq"]]
        if earlier:
            found.append({"readback": earlier[-1], "write": write})
    return _observed(
        facts, config, ran or bool(writes), found, confirm="roundtrip-observed",
        detail=lambda f: (f"`{f['readback']['how']}` at {_where_of(f['readback'])} read an array the tape computed"
                          f" to the host while it recorded, and this line then fed host data back into the"
                          f" recording: the tape cannot see through the copy"),
        clear="no-roundtrip: the flagged code ran while a tape recorded, with no host read of a computed array"
              " before it", not_reached="the flagged code never ran while a tape recorded",
        evidence_key="roundtrips")


def _judge_wl206(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    found = [e for e in facts.by_kind["grad-cut"] if _hit(e.get("allocation"), path, first, last)]
    return _observed(
        facts, config, ran, found, confirm="chain-cut-observed",
        detail=lambda e: (f"the array allocated here (no requires_grad) was written by kernel"
                          f" `{e['writer']['kernel']}` ({_where_of(e['writer'])}) and read by kernel"
                          f" `{e['reader']['kernel']}` ({_where_of(e['reader'])}) on the same tape: no gradient"
                          f" passes it" if e["how"] == "read" else
                          f"backward() at {_where_of(e['backward'])} started from this loss, allocated without"
                          f" requires_grad"),
        clear="grad-ok: the allocation ran and no recorded launch chain passed through it without a gradient",
        not_reached="the allocation never ran", evidence_key="cuts")


def _judge_wl207(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    found = [e for e in facts.by_kind["tape-reentered"] if _hit(e, path, first, last)]
    return _observed(
        facts, config, ran, found, confirm="reuse-observed",
        detail=lambda e: (f"the tape was entered here holding {e['held']} launch(es) that backward() had already"
                          f" replayed {e['backwards']} time(s), with no reset() between: they are replayed again"),
        clear="fresh-tape: the tape was entered here with no launches left from an earlier backward()",
        not_reached="the `with` never ran", evidence_key="reentries")


def _judge_wl208(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    backwards = [e for e in facts.by_kind["backward"] if _hit(e, path, first, last)]
    found = [e for e in backwards if e.get("carried")]
    return _observed(
        facts, config, ran or bool(backwards), found, confirm="truncation-observed",
        detail=lambda e: (f"this backward() ran on a tape whose kernel `{e['carried'][0]['reader']['kernel']}`"
                          f" read state kernel `{e['carried'][0]['writer']['kernel']}`"
                          f" ({_where_of(e['carried'][0]['writer'])}) wrote on an earlier tape whose backward()"
                          f" had already run: the gradient stops at the carried state"),
        clear="no-carried-state: backward() ran here on tapes that read no state another tape wrote",
        not_reached="the flagged backward() never ran", evidence_key="truncations")


def _judge_wl209(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    calls = [e for e in facts.by_kind["utility"] if _hit(e, path, first, last)]
    found = [e for e in facts.by_kind["untaped-feeds"] if _hit(e.get("call"), path, first, last)]
    return _observed(
        facts, config, ran or bool(calls), found, confirm="untaped-observed",
        detail=lambda e: (f"`{e['call']['function']}` ran while the tape recorded and its output was then used"
                          f" by " + (f"kernel `{e['reader']['kernel']}`" if e["reader"].get("kernel")
                                     else "the loss of backward()") + ": the tape never saw it"),
        clear="untaped-harmless: the call ran while a tape recorded, but nothing recorded used its output",
        not_reached="the call never ran while a tape recorded", evidence_key="feeds")


def _judge_wl210(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    found = [e for e in facts.by_kind["loss-outside"] if _hit(e.get("writer"), path, first, last)]
    return _observed(
        facts, config, ran, found, confirm="loss-outside-observed",
        detail=lambda e: (f"kernel `{e['writer']['kernel']}` wrote the loss here without the tape recording it,"
                          f" and backward() at {_where_of(e['backward'])} started from it: the seed reaches nothing"),
        clear="loss-recorded: the flagged code ran, and every backward() started from a loss its tape wrote",
        not_reached="the flagged code never ran", evidence_key="losses")


def _judge_wl211(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    found = [e for e in facts.by_kind["overwrite"] if not e.get("recording", True) and _hit(e, path, first, last)]
    return _observed(
        facts, config, ran, found, confirm="overwrite-observed",
        detail=lambda e: (f"{e['writer']} overwrote `{e['reader']['param']}` after the tape block, before"
                          f" backward(): kernel `{e['reader']['kernel']}` ({_where(e['reader']['site'])}) read it"
                          f" on that tape and its adjoint replays the new values"),
        clear="write-ran-harmlessly: the flagged write ran, and no array a pending tape had read was overwritten",
        not_reached="the flagged write never ran", evidence_key="overwrites")


def _judge_wl212(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    found = [e for e in facts.by_kind["retained-rewrite"] if _hit(e.get("allocation"), path, first, last)]
    return _observed(
        facts, config, ran, found, confirm="retained-rewrite-observed",
        detail=lambda e: (f"kernel `{e['second']['kernel']}` ({_where_of(e['second'])}) stored into this"
                          f" retain_grad=True array after kernel `{e['first']['kernel']}` ({_where_of(e['first'])})"
                          f" wrote it on the same tape: the overwritten store's adjoint reads the retained gradient"),
        clear="no-rewrite: the allocation ran and no recorded launch stored into it twice on one tape",
        not_reached="the allocation never ran", evidence_key="rewrites")


def _judge_wl213(path, first, last, facts: RunFacts, config, ran) -> Confirmation:
    found = [e for e in facts.by_kind["copy-source-read"] if _hit(e.get("copy"), path, first, last)]
    version = facts.warp_version or ""
    affected = versions_overlap("<1.17", version)
    if found and not affected:
        e = found[0]
        return _confirmation(CLEARED, f"not-affected: {e['copy']['what']} ran on the tape and kernel"
                             f" `{e['reader']['kernel']}` read its source later, but on warp {version} the copy's"
                             " adjoint adds to the source's gradient (fixed in 1.17)", facts, config, copies=found[:5])
    return _observed(
        facts, config, ran, found, confirm="copy-adjoint-observed",
        detail=lambda e: (f"{e['copy']['what']} ran on the tape and kernel `{e['reader']['kernel']}`"
                          f" ({_where_of(e['reader'])}) read its source later: on warp {version} the copy's"
                          " adjoint overwrites that source's gradient"),
        clear="copy-harmless: the copy ran, and no later recorded launch read its source",
        not_reached="the copy never ran", evidence_key="copies")


_HOST_OBSERVATIONS = {"WL203": _judge_wl203, "WL206": _judge_wl206, "WL207": _judge_wl207, "WL208": _judge_wl208,
                      "WL209": _judge_wl209, "WL210": _judge_wl210, "WL211": _judge_wl211, "WL212": _judge_wl212,
                      "WL213": _judge_wl213}


def versions_overlap(specifier: str, version: str) -> bool:
    from warp_lint.versions import overlaps

    return bool(version) and overlaps(specifier, f"=={version}")


def _hits(check: dict, line: int) -> int | None:
    value = (check.get("hits") or {}).get(str(line))
    return value if isinstance(value, int) else None


def _judge_kernel(finding, path, first, last, facts: RunFacts, config) -> Confirmation:
    messages = [e for e in facts.by_kind["tracker"] if e.get("kind") == "in-kernel"]
    warned = matching_messages(messages, path, first, last, None) if messages else []
    if finding.data.get("function_kind") == "func":
        return _judge_helper(finding, warned, facts, config)
    return _kernel_verdict((path, finding.data["kernel"]), first, warned, facts, config)


# The order in which a helper's verdicts through its calling kernels decide: evidence first.
_DECISIVE = (CONFIRMED, CLEARED, INCONCLUSIVE, NOT_EXERCISED)


def _judge_helper(finding, warned: list[dict], facts: RunFacts, config) -> Confirmation:
    """A ``@wp.func``'s code runs inside the kernels that call it (``traced_through``: each
    calling kernel with the line of its body that makes the call, from the static pass): its
    finding is judged on their launches as a kernel finding at that line, the most decisive
    verdict first (a gradient mismatch in a launch where the call ran confirms, as a mismatch
    where a kernel's flagged line ran does)."""
    if warned:
        return _confirmation(CONFIRMED, f"overwrite-warning: {warned[0].get('message', '')[:300]}", facts, config,
                             warp_warnings=_tracker_text(warned))
    verdicts = []
    for site in finding.data.get("traced_through") or ():
        verdict = _kernel_verdict((site["path"], site["kernel"]), int(site["line"]), [], facts, config)
        verdict.reason = (f"{verdict.reason} (through kernel `{site['kernel']}`, whose call at"
                          f" {_where({'file': site['path'], 'line': site['line']})} runs this helper)")
        verdicts.append(verdict)
    if verdicts:
        return min(verdicts, key=lambda v: _DECISIVE.index(v.status))
    return _confirmation(NOT_EXERCISED, "not-reached: the static pass found no kernel that calls this helper",
                         facts, config)


def _kernel_verdict(key: tuple[str, str], line: int, warned: list[dict], facts: RunFacts, config) -> Confirmation:
    """The verdict on a kernel's line from the gradchecks of its real launches (``key``: its file
    and name)."""
    launched = facts.launch_count(*key)
    checks = facts.gradchecks.get(key, [])
    executed = [c for c in checks if (_hits(c, line) or 0) > 0]
    fails = [c for c in executed if c.get("status") == "fail"]
    summary = [{"site": c.get("site"), "status": c.get("status"), "hits": _hits(c, line), "dim": c.get("dim"),
                "seconds": c.get("seconds")} for c in checks]
    if fails:
        worst = max(fails, key=lambda c: max((p.get("max_abs_error") or 0) if isinstance(p.get("max_abs_error"), (int, float))
                                             else float("inf") for p in c["result"]["pairs"]))
        pair = next(p for p in worst["result"]["pairs"] if p["status"] == "fail")
        detail = (f"AD and finite differences disagree for d {pair['output']} / d {pair['input']} on the real launch at"
                  f" {_where(worst['site'])} ({_hits(worst, line)} threads ran the flagged statement): {pair['criterion']}")
        return _confirmation(CONFIRMED, f"gradient-mismatch: {detail}", facts, config, device=worst.get("device"),
                             table=worst.get("table"), launch_site=worst.get("site"), checks=summary,
                             worst_pair=pair, warp_warnings=_tracker_text(warned))
    passes = [c for c in executed if c.get("status") == "pass"]
    if passes and len(passes) == len(executed):
        best = passes[0]
        worst_rel = max((p.get("max_rel_error") or 0) for c in passes for p in c["result"]["pairs"]
                        if isinstance(p.get("max_rel_error"), (int, float)))
        detail = (f"AD matches finite differences on {len(passes)} real launch{'es' if len(passes) != 1 else ''}"
                  f" (first at {_where(best['site'])}; worst relative error {worst_rel:.2g}) in which the flagged"
                  f" statement ran {sum(_hits(c, line) or 0 for c in passes)} times")
        if warned:
            detail += "; Warp's overwrite tracking warned here (supporting evidence only)"
        return _confirmation(CLEARED, f"gradient-matches: {detail}", facts, config, device=best.get("device"),
                             table=best.get("table"), launch_site=best.get("site"), checks=summary,
                             warp_warnings=_tracker_text(warned))
    if warned and launched:
        return _confirmation(CONFIRMED, f"overwrite-warning: Warp's overwrite tracking warned at this statement:"
                             f" {warned[0].get('message', '')[:300]}", facts, config,
                             warp_warnings=_tracker_text(warned), checks=summary)
    if checks:
        statuses = sorted({c.get("status") for c in checks})
        if not executed:
            hits = [c.get("hits", {}).get(str(line)) for c in checks]
            if all(h == 0 for h in hits):
                reason = (f"not-executed: {len(checks)} real launch(es) were checked but the flagged statement ran in"
                          " none of them: matching gradients there prove nothing")
            else:
                reason = f"not-executed: whether the flagged statement ran could not be measured ({hits[0]})"
        elif "error" in statuses:
            reason = f"check-error: {next(c for c in checks if c.get('status') == 'error').get('detail')}"
        elif "no-pair" in statuses:
            reason = f"no-differentiable-pair: {next(c for c in checks if c.get('status') == 'no-pair').get('detail')}"
        else:
            pair_states = sorted({p["status"] for c in executed for p in (c.get("result") or {}).get("pairs", [])})
            reason = f"undecided: pair statuses {', '.join(pair_states) or statuses}"
        return _confirmation(INCONCLUSIVE, reason, facts, config, checks=summary,
                             table=(checks[0].get("table") if checks else None))
    skipped = facts.skipped.get(key, [])
    if skipped:
        return _confirmation(INCONCLUSIVE, f"unsupported-argument: {skipped[0]['reason']}", facts, config,
                             launch_site=skipped[0].get("site"))
    if launched:
        if not config.get("gradcheck", True):
            return _confirmation(INCONCLUSIVE, f"gradcheck-disabled: launched {launched} times; gradchecks were"
                                 " switched off", facts, config)
        recorded = any(e.get("recorded") for e in facts.launches.get(key, []))
        where = ("recorded on a tape whose backward() never ran" if recorded
                 else "never recorded on a tape")
        return _confirmation(NOT_EXERCISED, f"not-differentiated: launched {launched} time{'s' if launched != 1 else ''},"
                             f" {where}: no gradient of it was computed", facts, config)
    # Warp checks a whole module when it compiles it: a warning about a kernel that never ran is
    # kept as evidence, but the run did not reach the hazard.
    return _confirmation(NOT_EXERCISED, "not-reached: the kernel was never launched", facts, config,
                         warp_warnings=_tracker_text(warned))


# -- runtime-only problems -----------------------------------------------------------------------
def _covered(findings: list[Finding], code: str, site: dict | None) -> bool:
    for finding in findings:
        if finding.code != code or not site:
            continue
        flagged = finding.data.get("flagged_lines") or [finding.start.line, finding.end.line]
        first = min(int(flagged[0]), finding.start.line)
        last = max(int(flagged[-1]), finding.end.line)
        if _in_range(site, _real(finding.path), first, last):
            return True
    return False


def _display_path(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def _problem(code: str, site: dict, message: str, facts: RunFacts, config, sources: dict[str, str], **evidence) -> RuntimeProblem:
    name = PROBLEM_CODES[code][0]
    path = _display_path(site["file"])
    line = int(site["line"])
    text = sources.get(path)
    if text is None:
        try:
            with open(site["file"], encoding="utf-8") as handle:
                text = sources[path] = handle.read()
        except OSError:
            text = ""
    source_line = line_of(text, line) or ""
    indent = len(source_line) - len(source_line.lstrip())
    confirmation = _confirmation(CONFIRMED, f"runtime-only: {message}", facts, config, **evidence)
    return RuntimeProblem(code=code, name=name, message=message, path=path, start=Position(line, indent + 1),
                          end=Position(line, max(len(source_line), indent + 1) + 1), severity="error",
                          data={"runtime_only": True}, confirmation=confirmation)


def runtime_problems(findings: list[Finding], facts: RunFacts, config: dict[str, Any],
                     sources: dict[str, str]) -> list[RuntimeProblem]:
    problems: list[RuntimeProblem] = []
    seen: set = set()

    def add(code, site, message, **evidence):
        if not site:
            return
        key = (code, site.get("file"), site.get("line"))
        if key in seen or "site-packages" in str(site.get("file")):
            return
        seen.add(key)
        problems.append(_problem(code, site, message, facts, config, sources, **evidence))

    for e in facts.by_kind["overwrite"]:
        if not _covered_by_stack(findings, "WL201", e) and not _covered_by_stack(findings, "WL211", e):
            how = ("passes one array to a parameter it reads and to one it writes" if e["how"] == "same-launch"
                   else "overwrites an array")
            add("WR201", e["site"], f"{e['writer']} {how} that kernel `{e['reader']['kernel']}` read (parameter"
                f" `{e['reader']['param']}`, {_where(e['reader']['site'])}) on a tape whose backward() had not run:"
                " backward() replays that kernel with the new values", overwrite=e)
    for e in facts.by_kind["tracker"]:
        if e.get("kind") in ("across-launches", "operation"):
            site = e.get("site")
            if site and not _covered(findings, "WL201", site) and ("WR201", site["file"], site["line"]) not in seen:
                add("WR201", site, f"Warp's overwrite tracking: {e.get('message', '')[:400]}", warp_warnings=[e.get("message")])
        elif e.get("kind") == "in-kernel":
            location = {"file": e["file"], "line": e["line"]}
            if not any(_covered(findings, f.code, location) for f in findings if f.data.get("kernel")):
                add("WR206", location, f"Warp's overwrite tracking: {e.get('message', '')[:400]}",
                    warp_warnings=[e.get("message")])
    for c in facts.harmful_crossings:
        if not _covered(findings, "WL202", c["backward_site"]):
            add("WR202", c["backward_site"], f"this backward() does not reach kernel `{c['writer']['kernel']}`"
                f" ({_where(c['writer']['site'])}): its output `{c['writer']['param']}` was read by kernel"
                f" `{c['reader']['kernel']}` ({_where(c['reader']['site'])}) on this tape, and the other tape's"
                " backward() never ran afterwards: the gradients of its inputs stay zero", crossing=c)
    for e in facts.by_kind["nested-tape"]:
        if not _covered(findings, "WL202", e["site"]):
            add("WR203", e["site"], "a tape was entered while another tape was recording (Warp raises RuntimeError)",
                nested=e)
    for e in facts.by_kind["backward"]:
        if e.get("accumulated") and not _covered(findings, "WL204", e["site"]):
            add("WR204", e["site"], f"backward() call {e['count']} on this tape since its last zero()/reset() added into"
                f" non-zero gradients ({', '.join(e['accumulated'][:5])}): they add up", backward=e)
    for e in facts.by_kind["unrecorded-feeds"]:
        if not _covered_by_stack(findings, "WL205", e["writer"]):
            add("WR205", e["writer"]["site"], f"kernel `{e['writer']['kernel']}` ran while a tape was recording but was"
                f" not recorded, and kernel `{e['reader']['kernel']}` ({_where(e['reader']['site'])}) read what it wrote"
                " on that tape: backward() stops there", feed=e)
    _host_problems(findings, facts, add)
    return sorted(problems, key=lambda p: p.sort_key())


def _covered_by_stack(findings: list[Finding], code: str, place: dict | None) -> bool:
    if not place:
        return False
    frames = [place.get("site"), *(place.get("stack") or ())]
    return any(_covered(findings, code, frame) for frame in frames if frame)


def _host_problems(findings: list[Finding], facts: RunFacts, add) -> None:
    """Runtime-only problems of the host observations no static finding predicted."""
    def at(place: dict | None) -> dict | None:
        return (place or {}).get("site") or ((place or {}).get("stack") or [None])[0]

    for e in facts.by_kind["tape-reentered"]:
        if not _covered_by_stack(findings, "WL207", e):
            add("WR207", at(e), f"the tape is entered again holding {e['held']} launch(es) that backward() already"
                f" replayed, with no reset() between: backward() replays them again and the gradients add up",
                reentry=e)
    for e in facts.by_kind["untaped-feeds"]:
        if not _covered_by_stack(findings, "WL209", e.get("call")):
            add("WR209", at(e.get("call")), f"`{e['call']['function']}` runs while the tape records and its output"
                " is used on the tape: backward() passes no gradient through it", feed=e)
    for e in facts.by_kind["loss-outside"]:
        if not _covered_by_stack(findings, "WL210", e.get("writer")):
            add("WR210", at(e.get("writer")), f"kernel `{e['writer']['kernel']}` writes the loss outside the tape"
                f" that backward() ({_where_of(e['backward'])}) starts from: every gradient is zero", loss=e)
    for e in facts.by_kind["host-write"]:
        earlier = [r for r in facts.by_kind["readback"] if r.get("pid") == e.get("pid") and r["tape"] == e["tape"]
                   and r.get("epoch") == e.get("epoch") and r["seq"] < e["seq"]]
        if earlier and not _covered_by_stack(findings, "WL203", e):
            add("WR211", at(e), f"host data is written back into the recording ({e['what']}) after"
                f" `{earlier[-1]['how']}` ({_where_of(earlier[-1])}) read an array the tape computed: the tape"
                " cannot see through the round trip", roundtrip={"readback": earlier[-1], "write": e})
    for e in facts.by_kind["retained-rewrite"]:
        if not _covered_by_stack(findings, "WL212", e.get("allocation")):
            add("WR212", at(e.get("allocation")) or at(e.get("second")), "a retain_grad=True array allocated here"
                f" is stored into again by kernel `{e['second']['kernel']}` on the tape that already wrote it:"
                " the gradient double counts", rewrite=e)
    for e in facts.by_kind["grad-cut"]:
        if not _covered_by_stack(findings, "WL206", e.get("allocation")):
            place = at(e.get("allocation")) or at(e.get("reader")) or at(e.get("backward"))
            add("WR213", place, "an array without requires_grad (allocated here) is on the tape's path to the"
                " loss: no gradient passes it", cut=e)


def summarize(findings: list[Finding], problems: list[Finding]) -> dict[str, int]:
    counts = {CONFIRMED: 0, CLEARED: 0, NOT_EXERCISED: 0, INCONCLUSIVE: 0}
    for finding in findings:
        if finding.confirmation is not None:
            counts[finding.confirmation.status] = counts.get(finding.confirmation.status, 0) + 1
    counts["runtime_only"] = len(problems)
    return counts
