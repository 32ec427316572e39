"""Incremental kernel analysis: after an edit, only the top-level statements whose text changed
are parsed by LibCST and run through the kernel rules again.

The triage cuts a file into the top-level statements LibCST sees: the module's *context* (imports,
module settings, integer constants) and the *units* that hold Warp definitions (a kernel, a func,
a struct, a class or an ``if`` with kernels inside). What the kernel rules find in a unit, and its
kernels' facts, depend on the unit's own text, on the definitions it names (funcs, structs,
overloads, found by the identifiers in its text, and theirs in turn), on the module's context and
on the Warp names the file's imports make. That is the unit's *key*: those texts, in file order.
A unit whose key is unchanged is not analysed again; the units that missed are analysed together
in one LibCST parse of just them, their dependencies and the context, the way the whole file
would be (same regions, same statement order), and their results are stored under their keys.

Positions move without a new analysis: every line number an analysis produces (a finding's place,
its fix, its related places, its data, and its message, such as "read on line 12") is a *line
mark*, an integer naming the part of the key it falls in and its line within that part, which
prints as a token no Python file holds; a stored result is read back with the marks turned into
the lines where those parts are now.

Anything unusual (a finding outside a unit, a result that reaches outside its key, a parse error,
a bug) makes :meth:`KernelUnits.analyse` answer None, and the engine analyses the file whole: the
result is always what a full analysis gives.
"""

from __future__ import annotations

import ast
import bisect
import collections
import dataclasses
import hashlib
import re
import unicodedata
from typing import Any, Callable

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.finding import Edit, Finding, Fix, Position, Related
from warp_lint.kernel_facts import KernelFacts
from warp_lint.names import import_skeleton
from warp_lint.project.summary import WARP_DECORATOR_KINDS, FileSummary, StatementMemo
from warp_lint.registry import all_rules
from warp_lint.source import SourceFile, common_ends, split_lines
from warp_lint.triage import Triage, first_line, is_setup_hook, synthesize

# A line mark is MARK_BASE + part * PART_SPAN + (line within the part, from 1).
MARK_BASE = 7 * 10 ** 15
PART_SPAN = 10 ** 6
_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters: what a mark prints as, between them
_TOKEN = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
# A mark that lost its type (arithmetic on a line) prints as plain digits: then the unit is not stored.
_LEAKED = re.compile(r"(?<!\d)7000\d{12}(?!\d)")


class LineMark(int):
    """A line number of an incremental analysis; prints as a token that the text decoding finds."""

    __slots__ = ()

    def __str__(self) -> str:
        return f"{_OPEN}{int(self)}{_CLOSE}"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return str(self)
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
_DEFINED = re.compile(r"\b(?:def|class)\s+([^\W\d]\w*)")
_SIMPLE_STATEMENTS = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)


@dataclasses.dataclass
class Part:
    """A top-level statement LibCST sees: module context, or a unit holding Warp definitions."""

    first: int  # its first line in the file (decorators included)
    last: int
    regions: list[tuple[int, int, int]]  # the triage's regions inside it: start, end, indentation
    text: str
    context: bool
    digest: bytes
    words: frozenset[str] = frozenset()  # units: the identifiers in it
    defines: frozenset[str] = frozenset()  # units: the names it defines


@dataclasses.dataclass
class UnitResult:
    """A unit's findings (line marks relative to its key's parts, path left empty), its
    definitions' kernel facts, in the order of their first lines, and the helpers of other files
    its analysis may have looked up: the code calling each, and what the lookup gave then (see
    ``_imported``). The result holds while every lookup gives the same."""

    findings: list[Finding]
    facts: list[KernelFacts | None]
    imported: tuple[tuple[str, tuple | None], ...] = ()


class AnalysisMemory:
    """What earlier analyses leave for the next analysis of a changed text (an editor session, a
    fix's re-lint): each file's last ``ast`` tree, what each top-level statement defined (its
    summary), and each unit's kernel results. One per session; it only makes analyses faster,
    never different."""

    def __init__(self):
        self.trees = LastTrees()
        self.statements = StatementMemo()
        self.units = KernelUnits()


class LastTrees:
    """Each file's last ``ast`` tree: a new text of the file is parsed again only from the top-level
    statement before its first changed line to the one after its last, when no line moved (typing
    inside a line); the other statements' nodes are the old ones, lines and columns unchanged.

    The rest of the file parses as it did: the part parsed again starts at a top-level statement
    that did not change and parses on its own, so it ends where the tokenizer is between statements
    at column 0, where the unchanged statements after it start. When it does not parse on its own,
    the whole text is parsed, as without a last tree.
    """

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._last: collections.OrderedDict[str, tuple[list[str], ast.Module, list[int]]] = collections.OrderedDict()
        self.reparsed = 0  # texts parsed in part, for tests and the benchmark

    def parse(self, path: str, text: str) -> ast.Module:
        """``ast.parse(text)``, reusing the last tree of ``path``. Raises SyntaxError as it does."""
        lines = split_lines(text)
        last = self._last.get(path)
        tree = _reparse(last, lines) if last is not None and "barry_as_FLUFL" not in text else None
        if tree is None:
            tree = ast.parse(text)
        else:
            self.reparsed += 1
        self._last[path] = (lines, tree, [first_line(statement) for statement in tree.body])
        self._last.move_to_end(path)
        while len(self._last) > self.capacity:
            self._last.popitem(last=False)
        return tree


def _reparse(last: tuple[list[str], ast.Module, list[int]], lines: list[str]) -> ast.Module | None:
    old_lines, old_tree, firsts = last
    if len(old_lines) != len(lines):
        return None  # lines moved: the nodes after the edit would need new line numbers
    count = len(lines)
    prefix, suffix = common_ends(old_lines, lines)
    if prefix == count:
        return old_tree
    first_changed, last_changed = prefix + 1, count - suffix
    before = bisect.bisect_right(firsts, first_changed) - 1  # the statement holding or before the change
    start_index = max(before, 0)
    start = firsts[start_index] if before >= 0 else 1
    end_index = bisect.bisect_right(firsts, last_changed)  # the first statement after the change
    end = firsts[end_index] - 1 if end_index < len(firsts) else count
    try:
        part = ast.parse("".join(lines[start - 1:end]))
    except (SyntaxError, ValueError):
        return None
    ast.increment_lineno(part, start - 1)
    return ast.Module(body=old_tree.body[:start_index] + part.body + old_tree.body[end_index:],
                      type_ignores=[])


class Unsupported(Exception):
    """The file or the result falls outside what units can hold: analyse the file whole."""


class KernelUnits:
    """Unit results by key, the least recently used dropped past ``capacity``: one per editor
    session or command-line run, shared by its files (a unit's key holds no path)."""

    def __init__(self, capacity: int = 20_000):
        self.capacity = capacity
        self._results: collections.OrderedDict[bytes, UnitResult] = collections.OrderedDict()
        # What happened, for tests and the benchmark: units analysed, units reused, files analysed whole.
        self.analysed = 0
        self.reused = 0
        self.whole = 0

    def __len__(self) -> int:
        return len(self._results)

    def analyse(self, source: SourceFile, triaged: Triage, summary: FileSummary, target_version: str,
                rule_codes: tuple[str, ...], lookup: Callable[[str], Any] | None = None
                ) -> tuple[list[Finding], dict[str, KernelFacts]] | None:
        """The file's kernel findings and facts, as a whole-file analysis gives them; None when the
        file must be analysed whole. ``lookup`` finds the ``@wp.func`` helpers of other files (see
        ``build_kernel_index``); every code a reused result looked up is asked again, so what the
        lookup notes is what a whole-file analysis would have."""
        try:
            return self._analyse(source, triaged, summary, target_version, rule_codes, lookup)
        except Exception:  # noqa: BLE001 - Unsupported, a parse error, a bug: the whole-file analysis
            self.whole += 1  # gives the result, or reports the error properly
            return None

    def _analyse(self, source: SourceFile, triaged: Triage, summary: FileSummary, target_version: str,
                 rule_codes: tuple[str, ...], lookup: Callable[[str], Any] | None
                 ) -> tuple[list[Finding], dict[str, KernelFacts]]:
        text = source.text
        if triaged.line_map is None or _OPEN in text or _CLOSE in text:
            raise Unsupported("a whole-file parse, or a file holding the characters a line mark prints as")
        lines = split_lines(text)
        parts = _parts(triaged, lines)
        units = [index for index, part in enumerate(parts) if not part.context]
        names = hashlib.blake2b(import_skeleton(triaged).encode("utf-8", "surrogatepass"), digest_size=16)
        # With a lookup the kernel model follows other files' helpers: results without one differ.
        names.update(f"\0{target_version}\0{','.join(rule_codes)}\0{lookup is not None}".encode())
        # What kernels capture from their factories is read from the whole file: a call's new value
        # changes the loops of a unit whose own text did not change.
        names.update(repr(sorted((name, sorted((k, sorted(v) if v is not None else None) for k, v in values.items()))
                                 for name, values in triaged.captured.items())).encode())
        names.update(repr(sorted((name, sorted(options.items())) for name, options in triaged.held_options.items())).encode())
        settings = names.digest()
        keys: dict[int, tuple[bytes, list[int]]] = {}
        defined_by = _defined_by(parts, units)
        for unit in units:
            members = _key_parts(parts, unit, defined_by)
            digest = hashlib.blake2b(settings, digest_size=20)
            for member in members:
                digest.update(b"S" if member == unit else b"C" if parts[member].context else b"D")
                digest.update(parts[member].digest)
            keys[unit] = (digest.digest(), members)

        results: dict[int, UnitResult] = {}
        missing = []
        asked = _Lookups(lookup)
        for unit in units:
            stored = self._results.get(keys[unit][0])
            if stored is None or not asked.same(stored.imported):
                missing.append(unit)
            else:
                self._results.move_to_end(keys[unit][0])
                results[unit] = stored
        if missing:
            results.update(self._run(source, triaged, summary, lines, parts, missing, keys, target_version,
                                     rule_codes, asked))
            self.analysed += len(missing)
        self.reused += len(units) - len(missing)

        findings_by_code: dict[str, list[Finding]] = {}
        facts: dict[str, KernelFacts] = {}
        definitions = _definitions_by_unit(summary, parts, units)
        for unit in units:
            result = results[unit]
            firsts = [parts[member].first for member in keys[unit][1]]
            for finding in result.findings:
                placed = _with_path(_map_marks(finding, lambda mark: _line_of(mark, firsts)), "", source.path)
                findings_by_code.setdefault(placed.code, []).append(placed)
            for key, unit_facts in zip(definitions.get(unit, []), result.facts):
                if unit_facts is not None:
                    facts[key] = unit_facts
        # The whole-file analysis reports rule by rule, each rule in file order.
        findings = [finding for code in rule_codes for finding in findings_by_code.get(code, ())]
        return findings, facts

    def _run(self, source: SourceFile, triaged: Triage, summary: FileSummary, lines: list[str], parts: list[Part],
             missing: list[int], keys: dict[int, tuple[bytes, list[int]]], target_version: str,
             rule_codes: tuple[str, ...], asked: _Lookups) -> dict[int, UnitResult]:
        """Analyse the missing units in one parse with their keys' parts; store their results."""
        batch = sorted({member for unit in missing for member in keys[unit][1]})
        regions = [region for member in batch for region in parts[member].regions]
        synthetic, line_map, statement_lines = synthesize(lines, regions)
        firsts = [parts[member].first for member in batch]
        lasts = [parts[member].last for member in batch]

        def mark(line: int) -> int:
            slot = bisect.bisect_right(firsts, line) - 1
            if slot < 0 or line > lasts[slot]:
                raise Unsupported(f"line {line} lies outside the parts analysed")
            return LineMark(MARK_BASE + slot * PART_SPAN + line - firsts[slot] + 1)

        subset = dataclasses.replace(triaged, regions=[(start, end) for start, end, _ in regions],
                                     synthetic=synthetic, line_map=[mark(line) for line in line_map],
                                     statement_lines=statement_lines)
        module = cst.parse_module(synthetic)
        batch_asked = _Lookups(asked.lookup)
        context = FileContext(source, subset, module, target_version,
                              batch_asked if asked.lookup is not None else None)
        for code in rule_codes:
            all_rules()[code]().check(context)
        found = context.findings()
        batch_definitions = {key for member in batch
                             for key in _definitions_by_unit(summary, parts, [member]).get(member, [])}
        batch_facts = context.kernel_facts(summary, within=batch_definitions.__contains__)

        by_unit: dict[int, list[Finding]] = {}
        for finding in found:
            owner = batch[_slot_of(finding.start.line)]
            if parts[owner].context:
                raise Unsupported("a kernel finding outside every unit")
            by_unit.setdefault(owner, []).append(finding)
        definitions = _definitions_by_unit(summary, parts, missing)
        asked.merge(batch_asked)
        # A lookup belongs to the units whose key's text names the code's first name; one that
        # none names (it should not happen) to every unit analysed.
        claimed = {code for code in batch_asked.asked
                   if any(_identifiers([code.split(".", 1)[0]]) <= parts[member].words
                          for unit in missing for member in keys[unit][1])}
        results = {}
        slot_of_part = {member: slot for slot, member in enumerate(batch)}
        for unit in missing:
            key, members = keys[unit]
            slot_in_key = {slot_of_part[member]: position for position, member in enumerate(members)}

            def relative(mark: int) -> int:
                slot = _slot_of(mark)
                if slot not in slot_in_key:
                    raise Unsupported("a result that reaches outside its unit's key")
                return LineMark(mark + (slot_in_key[slot] - slot) * PART_SPAN)

            findings = [_map_marks(_with_path(f, source.path, ""), relative) for f in by_unit.get(unit, ())]
            words = frozenset().union(*(parts[member].words for member in members))
            result = UnitResult(findings, [batch_facts.get(key) for key in definitions.get(unit, [])],
                                batch_asked.read_by(words, claimed))
            results[unit] = result
            self._store(key, result)
        return results

    def _store(self, key: bytes, result: UnitResult) -> None:
        self._results[key] = result
        self._results.move_to_end(key)
        while len(self._results) > self.capacity:
            self._results.popitem(last=False)


class _Lookups:
    """The helper lookups of one analysis, each asked once: what each code gave (the helper and
    its fingerprint), for the analysis's dependencies and to check stored results."""

    def __init__(self, lookup: Callable[[str], Any] | None):
        self.lookup = lookup
        self.asked: dict[str, tuple[Any, tuple | None]] = {}

    def __call__(self, code: str):
        known = self.asked.get(code)
        if known is None:
            helper = self.lookup(code) if self.lookup is not None else None
            known = self.asked[code] = (helper, _fingerprint(helper))
        return known[0]

    def same(self, imported: tuple[tuple[str, tuple | None], ...]) -> bool:
        """Whether every lookup a stored result made gives what it gave then."""
        for code, fingerprint in imported:
            self(code)
            if self.asked[code][1] != fingerprint:
                return False
        return True

    def merge(self, other: _Lookups) -> None:
        for code, known in other.asked.items():
            self.asked.setdefault(code, known)

    def read_by(self, words: frozenset[str], claimed: set[str]) -> tuple[tuple[str, tuple | None], ...]:
        return tuple((code, fingerprint) for code, (_, fingerprint) in self.asked.items()
                     if code not in claimed or _identifiers([code.split(".", 1)[0]]) <= words)


def _fingerprint(helper) -> tuple | None:
    """What the kernel model reads of an imported helper (its file's digest aside: the file may
    change elsewhere)."""
    if helper is None:
        return None
    return (helper.name, helper.path, tuple(helper.params), tuple(sorted(helper.array_effects.items())))


# -- parts and keys ---------------------------------------------------------------------------

def _parts(triaged: Triage, lines: list[str]) -> list[Part]:
    statements = [(first_line(s), s.end_lineno or s.lineno, s) for s in triaged.tree.body]
    starts = [first for first, _, _ in statements]
    parts: list[Part] = []
    owner: dict[int, Part] = {}
    for start, end in triaged.regions:
        index = bisect.bisect_right(starts, start) - 1
        first, last, statement = statements[index]
        if end > last:
            raise Unsupported("a region across top-level statements")
        part = owner.get(index)
        if part is None:
            text = "".join(lines[first - 1:last])
            context = isinstance(statement, _SIMPLE_STATEMENTS) or is_setup_hook(statement)
            part = Part(first, last, [], text, context,
                        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
            if not context:
                part.words = _identifiers(_IDENTIFIER.findall(text))
                part.defines = _identifiers(_DEFINED.findall(text))
            owner[index] = part
            parts.append(part)
        part.regions.append((start, end, 0 if start == first else 1))
    return parts


def _identifiers(found: list[str]) -> frozenset[str]:
    # Python reads identifiers NFKC-normalised: `ﬁ` in the text is the name `fi`.
    return frozenset(unicodedata.normalize("NFKC", word) if not word.isascii() else word for word in found)


def _defined_by(parts: list[Part], units: list[int]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for unit in units:
        for name in parts[unit].defines:
            found.setdefault(name, []).append(unit)
    return found


def _key_parts(parts: list[Part], unit: int, defined_by: dict[str, list[int]]) -> list[int]:
    """The parts a unit's analysis reads: the context, the unit, and the units defining a name it
    mentions (and, in turn, the names those mention)."""
    members = {unit}
    pending = [unit]
    while pending:
        current = pending.pop()
        for word in parts[current].words:
            for other in defined_by.get(word, ()):
                if other not in members:
                    members.add(other)
                    pending.append(other)
    return sorted(members | {index for index, part in enumerate(parts) if part.context})


def _definitions_by_unit(summary: FileSummary, parts: list[Part], units: list[int]) -> dict[int, list[str]]:
    """The summary keys of the Warp definitions in each unit, in the order of their first lines."""
    spans = [(parts[unit].first, parts[unit].last, unit) for unit in units]
    found: dict[int, list[tuple[int, str]]] = {}
    for key, function in summary.warp_defs.items():
        if not any(d.qualified in WARP_DECORATOR_KINDS for d in function.decorators):
            continue
        for first, last, unit in spans:
            if first <= function.first_line <= last:
                found.setdefault(unit, []).append((function.first_line, key))
                break
    return {unit: [key for _, key in sorted(keys)] for unit, keys in found.items()}


def _with_path(finding: Finding, old: str, new: str) -> Finding:
    """A stored result names no file (the same unit in two files is one result)."""
    related = tuple(dataclasses.replace(r, path=new) if r.path == old else r for r in finding.related)
    return dataclasses.replace(finding, path=new, related=related)


# -- line marks -------------------------------------------------------------------------------

def _slot_of(mark: int) -> int:
    if mark < MARK_BASE:
        raise Unsupported(f"a line number that is not a line mark: {mark}")
    return (mark - MARK_BASE) // PART_SPAN


def _line_of(mark: int, firsts: list[int]) -> int:
    slot = _slot_of(mark)
    return firsts[slot] + (mark - MARK_BASE) % PART_SPAN - 1


def _map_marks(finding: Finding, change: Callable[[int], int]) -> Finding:
    """The finding with every line mark in it passed through ``change``: positions, fix, related
    places, data and text."""

    def position(value: Position) -> Position:
        return Position(change(value.line), value.column)

    def text(value: str) -> str:
        if _LEAKED.search(_TOKEN.sub("", value) if _OPEN in value else value):
            raise Unsupported("a line mark printed without its type")
        return _TOKEN.sub(lambda match: str(change(int(match.group(1)))), value) if _OPEN in value else value

    fix = finding.fix
    if fix is not None:
        fix = Fix(text(fix.message), tuple(Edit(position(e.start), position(e.end), text(e.content)) for e in fix.edits),
                  fix.applicability)
    related = tuple(Related(text(r.message), r.path, position(r.start), position(r.end)) for r in finding.related)
    return dataclasses.replace(finding, message=text(finding.message), start=position(finding.start),
                               end=position(finding.end), fix=fix, related=related,
                               noqa_row=change(finding.noqa_row) if finding.noqa_row else finding.noqa_row,
                               data=_map_data(finding.data, change, text))


def _map_data(value: Any, change: Callable[[int], int], text: Callable[[str], str]) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return change(value) if value >= MARK_BASE else value
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {key: _map_data(item, change, text) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_data(item, change, text) for item in value)
    return value
