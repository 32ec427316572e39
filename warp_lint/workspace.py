"""A run's project model, fed by the files' analyses, and how it finishes their findings.

The files linted bring their own analyses (summary, kernel facts, kernel findings). The other
files of their projects are indexed by name only and summarised when something needs them (an
import to resolve, a kernel launched in a recording), through the cache. Then, once per run:

- kernel findings in code no recording differentiates (*forward-only*) are dropped, unless
  ``report-forward-only``; those in differentiated code name the recording that reaches them;
- the host rules run on the recordings and report in whichever linted file the offending
  statement is written;
- each file's suppressions apply.

A file's root is the nearest folder with ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or
``.git``; outside any (an installed package, a loose folder of scripts) it is the topmost package
folder holding the file, or the file's folder. Every file there that mentions ``warp`` takes part,
whatever the command names: a file linted alone gets the answer its whole project gets.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

from warp_lint import versions
from warp_lint.engine import FileAnalysis, FileResult, FileSettings, analyse_bytes, analyse_source, finalize
from warp_lint.finding import Finding, Related
from warp_lint.host import HostScope
from warp_lint.incremental import AnalysisMemory
from warp_lint.kernel_facts import KernelFacts
from warp_lint.kernels import ImportedHelper
from warp_lint.project.index import ModuleInfo, ProjectIndex
from warp_lint.project.layout import find_root, project_files
from warp_lint.project.model import DIFFERENTIATED, ProjectModel
from warp_lint.project.summary import MODULE_SCOPE, FileSummary, FunctionSummary, Loc
from warp_lint.project_context import ProjectContext
from warp_lint.registry import all_rules
from warp_lint.source import SourceError, SourceFile, decode_source

ANALYSIS_ONLY = FileSettings((), "")


class Workspace:
    def __init__(self, files: Iterable[Path], eager: set[str], cache=None, context_digest: str = ""):
        self.cache = cache
        # What the project's other files (read, not linted) were when this workspace was made: part
        # of the key of a whole run's results.
        self.context_digest = context_digest
        self.index = ProjectIndex(list(files), self._summary_of)
        self.eager = eager  # the files whose definitions and entry points the model reads
        self._analyses: dict[str, FileAnalysis] = {}
        self._helpers_in_progress: set[str] = set()
        self._read_only: dict[tuple[str, bool], FileAnalysis] = {}  # (path, with kernels) -> its analysis
        # Linted files whose kernels followed a helper of a file that changed since: analysed
        # again before their next result (``result_of``).
        self._stale: set[str] = set()
        self.model = ProjectModel(self.index, self._facts_of, self._eager_infos)
        # Kept warm across lints of new text (an editor's buffers, a fix's re-lint): what earlier
        # analyses left, and the host findings of the current model.
        self.memory = AnalysisMemory()
        self._host_findings: tuple[ProjectModel, frozenset[str], list[Finding]] | None = None
        self._scope_findings: dict[int, tuple[HostScope, dict[str, list[Finding]]]] = {}
        self._scope_findings_inputs: tuple | None = None
        # The model of a linted file's last text that parsed, while its text does not.
        self._before_unparsable: tuple[FileAnalysis, ProjectModel] | None = None

    @classmethod
    def alone(cls, analysis: FileAnalysis, settings: FileSettings) -> Workspace:
        """A file that is its own project (a snippet, an unsaved buffer with no project)."""
        workspace = cls([Path(analysis.path)], {analysis.path})
        workspace.add(analysis)
        return workspace

    @classmethod
    def for_files(cls, linted: list[Path], cache=None) -> Workspace:
        """The projects of the linted files: every file of each one's root, and the linted files."""
        files: dict[str, Path] = {}
        eager: set[str] = set()
        roots = {}
        linted_resolved = set()
        folders_seen = set()
        for path in linted:
            files[str(path)] = path
            eager.add(str(path))
            linted_resolved.add(path.resolve())
            if path.parent not in folders_seen:  # the root is the same for a folder's files
                folders_seen.add(path.parent)
                root = find_root(path)
                roots.setdefault(root.path, root)
        digest = hashlib.blake2b(digest_size=20)
        for root in roots.values():
            for path in project_files(root):
                if path in linted_resolved or str(path) in files:
                    continue
                files[str(path)] = path
                raw = _read_bytes(path)
                if raw is not None and b"warp" in raw:
                    eager.add(str(path))
                    digest.update(f"{path}\0".encode() + hashlib.blake2b(raw, digest_size=16).digest())
        return cls(files.values(), eager, cache, digest.hexdigest())

    def add(self, analysis: FileAnalysis) -> None:
        """A linted file's analysis: its summary and kernel facts replace what the disk says."""
        read = self._read_only.get((analysis.path, True)) or self._read_only.get((analysis.path, False))
        if read is not None and read.summary is not None and (
                analysis.summary is None or analysis.summary.digest != read.summary.digest):
            self._dependents_changed(analysis.path)  # a buffer that is not what the disk holds
        self._stale.discard(analysis.path)
        self._analyses[analysis.path] = analysis
        self.eager.add(analysis.path)
        self.index.set_summary(analysis.path, analysis.summary)
        self.model = ProjectModel(self.index, self._facts_of, self._eager_infos, entries_from=self.model)
        if self._before_unparsable is not None and self._before_unparsable[0].path != analysis.path:
            self._before_unparsable = None  # another file changed since: that model is out of date

    def update(self, analysis: FileAnalysis) -> bool:
        """A linted file's new analysis (new text of it); True when the project model changed.

        The model is kept (recordings, contexts and host findings with it) when the file's summary
        and kernel facts are what they were: an edit inside a kernel that leaves its facts alone,
        a comment, a blank inside a line. Otherwise it is built again from the summaries.
        """
        previous = self._analyses.get(analysis.path)
        self._stale.discard(analysis.path)
        if previous is not None and _same_model_input(previous, analysis):
            self._analyses[analysis.path] = analysis
            self.index.by_path[analysis.path].summary = analysis.summary  # same content: caches hold
            return False
        # The file's facts may have changed: what followed its helpers is stale.
        dependents = self._dependents_changed(analysis.path) if previous is not None else set()
        if previous is not None and previous.summary is not None and analysis.summary is not None and \
                _interface(previous.summary) == _interface(analysis.summary):
            # Only the file's code changed, not the names it defines: the recordings that never
            # read the file (or a file whose kernels follow its helpers) are kept.
            self._analyses[analysis.path] = analysis
            self.index.set_summary(analysis.path, analysis.summary)
            self.model = ProjectModel(self.index, self._facts_of, self._eager_infos, previous=self.model,
                                      changed=(analysis.path, *sorted(dependents)))
            self._before_unparsable = None
            return True
        # Typing goes through text that does not parse (`x = ` before `x = y`), which takes the
        # file out of the model; back to what it was, the model from before is taken back.
        before = self._before_unparsable
        if before is not None and before[0].path == analysis.path and _same_model_input(before[0], analysis):
            self._before_unparsable = None
            self._analyses[analysis.path] = analysis
            self.index.set_summary(analysis.path, analysis.summary)
            self.model = before[1]
            return True
        stash = (previous, self.model) if previous is not None and previous.summary is not None and \
            analysis.summary is None else None
        self.add(analysis)
        if stash is not None:
            self._before_unparsable = stash
        return True

    def drop(self, path: str) -> None:
        """Forget a file's linted text (an editor closed its buffer): it is read from disk again."""
        if self._analyses.pop(path, None) is None:
            return
        self._before_unparsable = None
        self._stale.discard(path)
        for kernels in (False, True):
            self._read_only.pop((path, kernels), None)  # read before the buffer was: maybe not what is saved
        self._dependents_changed(path)
        info = self.index.by_path.get(path)
        if info is not None:
            info.loaded = False
            self.index.set_summary(path, self._summary_of(path))
        self.model = ProjectModel(self.index, self._facts_of, self._eager_infos, entries_from=self.model)

    # -- loading --------------------------------------------------------------------------
    def _eager_infos(self) -> Iterator[ModuleInfo]:
        return (info for info in self.index.infos() if info.path in self.eager)

    def _read(self, path: str) -> SourceFile | None:
        try:
            raw = Path(path).read_bytes()
            return decode_source(path, raw)
        except (OSError, SourceError):
            return None

    def _summary_of(self, path: str) -> FileSummary | None:
        analysis = self._analyses.get(path)
        if analysis is not None:
            return analysis.summary
        return self._analysis_of(path, kernels=False).summary

    def _dependents_changed(self, path: str) -> set[str]:
        """The file ``path`` changed: the analyses whose kernels followed its helpers (and, in turn,
        those that followed theirs) are out of date. Files only read are read again when asked;
        linted files are analysed again before their next result (``result_of``). Returns them."""
        stale: set[str] = set()
        pending = [path]
        while pending:
            current = pending.pop()
            found = [other for (other, kernels), analysis in self._read_only.items()
                     if kernels and current in analysis.dependencies]
            for other in found:
                del self._read_only[(other, True)]
            linted = [other for other, analysis in self._analyses.items() if current in analysis.dependencies]
            self._stale.update(linted)
            for other in {*found, *linted} - stale - {path}:
                stale.add(other)
                pending.append(other)
        return stale

    def _facts_of(self, path: str) -> dict[str, KernelFacts]:
        analysis = self._analyses.get(path)
        if analysis is not None:
            return analysis.facts
        return self._analysis_of(path, kernels=True).facts

    def imported_helpers(self, path: str, summary: FileSummary) -> HelperLookup:
        """Finds the `@wp.func` helpers of other files that the file's kernels call, by the code that
        calls them: the kernel model follows them as its own."""
        return HelperLookup(self, path, summary)

    def imported_helper(self, path: str, summary: FileSummary, code: str,
                        read: dict[str, str] | None = None) -> ImportedHelper | None:
        """The helper ``code`` names in ``path``; ``read`` notes the files whose facts were read
        (a helper with no effects there now may have some after an edit)."""
        if code.split(".", 1)[0] in summary.warp_aliases or path in self._helpers_in_progress:
            return None
        info = self.index.by_path.get(path)
        if info is not None and getattr(self.index.summary(info), "digest", None) != summary.digest:
            # New text of the file (an editor's buffer): its own imports say what `code` is.
            self.index.set_summary(path, summary)
        symbol = self.index.resolve(path, MODULE_SCOPE, code)
        # The file the name comes from is read even where it defines no helper now (it does not
        # parse, or the name is no `@wp.func` yet): an edit there may make it one.
        origin = symbol.path if symbol is not None else self.index.import_origin(path, code)
        defining = self._summary_of(origin) if origin and origin != path else None
        if read is not None and origin and origin != path:
            read[origin] = defining.digest if defining is not None else ""
        if symbol is None or symbol.kind != "warp" or symbol.path == path:
            return None
        self._helpers_in_progress.add(path)  # a helper's file calling back into this one
        try:
            facts = self._facts_of(symbol.path).get(symbol.qualname)
        finally:
            self._helpers_in_progress.discard(path)
        if facts is None or facts.kind != "func" or not (facts.effects or facts.parameter_roles):
            return None
        return ImportedHelper(code, list(facts.params), dict(facts.effects), symbol.path,
                              defining.digest if defining is not None else "", replayed=facts.replayed,
                              roles=dict(facts.parameter_roles))

    def analyse(self, source: SourceFile, settings: FileSettings) -> FileAnalysis:
        """A file's analysis with the helpers it imports followed; only the top-level statements
        that changed since ``memory`` saw the file are analysed again."""
        return analyse_source(source, settings, helpers=self.imported_helpers, memory=self.memory)

    def _analysis_of(self, path: str, kernels: bool) -> FileAnalysis:
        """A file that is not linted: its summary (and kernel facts), through the cache; once."""
        known = self._read_only.get((path, kernels)) or (self._read_only.get((path, True)) if not kernels else None)
        if known is None:
            known = self._read_only[(path, kernels)] = self._analyse_read_only(path, kernels)
        return known

    def _analyse_read_only(self, path: str, kernels: bool) -> FileAnalysis:
        source = self._read(path)
        if source is None:
            return FileAnalysis(path, [])
        kind = "facts" if kernels else "summary"
        key = self.cache.blob_key(kind, source.raw) if self.cache is not None else None
        if key is not None:
            cached = self.cache.get_blob(key)
            if isinstance(cached, FileAnalysis) and self._dependencies_unchanged(cached):
                return cached
        try:
            analysis = analyse_source(source, ANALYSIS_ONLY, kernels=kernels,
                                      helpers=self.imported_helpers if kernels else None).without_source()
        except Exception:  # a file we only read for context must never fail the run
            analysis = FileAnalysis(path, [])
        analysis.findings = []
        if key is not None:
            self.cache.put_blob(key, analysis)
        return analysis

    def _dependencies_unchanged(self, analysis: FileAnalysis) -> bool:
        """Whether the files whose helpers an analysis followed read as they did (in this project:
        an editor's buffer, else the disk)."""
        for path, digest in analysis.dependencies.items():
            summary = self._summary_of(path) if path in self.index.by_path else None
            if summary is None or summary.digest != digest:
                return False
        return True

    def lint_source(self, source: SourceFile, settings: FileSettings) -> FileResult:
        """Lint a file's (new) text in this project: a fix's re-lint, an editor's buffer."""
        return self.lint_text(source, settings)[0]

    def lint_text(self, source: SourceFile, settings: FileSettings) -> tuple[FileResult, FileAnalysis, bool]:
        """``lint_source``, with the file's analysis and whether the project model changed (the
        other files' results may have). Only the changed top-level statements are analysed again
        (``memory``), and the model is updated from the new text (see ``update``)."""
        mentions_warp = "warp" in source.text
        if not mentions_warp:
            analysis = analyse_source(source, settings, kernels=False, memory=self.memory)
            analysis.findings = []
        else:
            analysis = self.analyse(source, settings)
        changed = self.update(analysis)  # text that does not parse has no summary: the model has none for it
        if not mentions_warp:
            # The command line's cheap check: such a file reports nothing, host findings included;
            # its summary still serves the model (the command line reads it as a file it does not lint).
            return finalize(source, source.path, [], settings), analysis, changed
        return self.results([analysis], lambda _: settings)[0], analysis, changed

    def analysis_of(self, path: str) -> FileAnalysis | None:
        """The analysis of a linted file's current text (what ``update`` or ``results`` last took)."""
        return self._analyses.get(path)

    def result_of(self, path: str, settings: FileSettings) -> FileResult | None:
        """A linted file's result again, from the current model (another file changed it); its
        kernels analysed again first where a helper of another file they follow changed."""
        analysis = self._analyses.get(path)
        if analysis is None:
            return None
        if path in self._stale and analysis.source is not None:
            return self.lint_text(analysis.source, settings)[0]
        return self.results([analysis], lambda _: settings)[0]

    # -- finishing ------------------------------------------------------------------------
    def host_findings(self, codes: set[str]) -> list[Finding]:
        """What the host rules find in the model's recordings. The rules read one recording at a
        time, so each recording's findings are kept while the recording is (a model updated from
        an edit keeps most of them); where two recordings report the same place, the first wins."""
        rules = all_rules()
        selected = [code for code in rules if code in codes and rules[code].level == "project"]
        if not selected:
            return []
        model = self.model
        cached = self._host_findings
        if cached is not None and cached[0] is model and cached[1] == frozenset(selected):
            return cached[2]
        per_recording = [code for code in selected if rules[code].reads_recordings]
        inputs = (frozenset(per_recording), model.struct_names())  # what else the rules read
        if self._scope_findings_inputs != inputs:
            self._scope_findings = {}
            self._scope_findings_inputs = inputs
        by_scope: dict[int, tuple[HostScope | None, dict[str, list[Finding]]]] = {}
        for scope in model.scopes:
            kept = self._scope_findings.get(id(scope))
            if kept is None or kept[0] is not scope:
                kept = (scope, _found(model, [scope], per_recording))
            by_scope[id(scope)] = kept
        self._scope_findings = dict(by_scope)
        # the rules that read the model whole, once for this model
        by_scope[0] = (None, _found(model, [], [code for code in selected if not rules[code].reads_recordings]))
        findings: list[Finding] = []
        reported: set[tuple[str, str, int, int]] = set()
        for code in selected:
            for _, found in by_scope.values():
                for finding in found.get(code, ()):
                    marker = (finding.code, finding.path, finding.start.line, finding.start.column)
                    if marker not in reported:
                        reported.add(marker)
                        findings.append(finding)
        self._host_findings = (model, frozenset(selected), findings)
        return findings

    def results(self, analyses: list[FileAnalysis], settings_for: Callable[[Path], FileSettings]) -> list[FileResult]:
        for analysis in analyses:
            if analysis.summary is not None and self._analyses.get(analysis.path) is not analysis:
                self.update(analysis)
        settings = {a.path: settings_for(Path(a.path)) for a in analyses}
        codes = set().union(*(s.rule_codes for s in settings.values())) if settings else set()
        host: dict[str, list[Finding]] = {}
        # A file without a summary (text that does not parse) holds no recording: no host finding.
        for finding in self.host_findings(codes) if any(a.summary is not None for a in analyses) else ():
            host.setdefault(finding.path, []).append(finding)
        results = []
        for analysis in analyses:
            file_settings = settings[analysis.path]
            placed = [(f, self.in_context(f, file_settings)) for f in analysis.findings]
            findings = [f for _, f in placed if f is not None]
            hidden = [original for original, f in placed if f is None]
            findings += [f for f in host.get(analysis.path, ()) if f.code in file_settings.rule_codes
                         and versions.overlaps(f.affected_versions, file_settings.target_version)]
            source = analysis.source
            if source is None and (findings or hidden or file_settings.report_unused_noqa):
                source = self._read(analysis.path)
            results.append(finalize(source, analysis.path, findings, file_settings, hidden))
        return results

    def in_context(self, finding: Finding, settings: FileSettings) -> Finding | None:
        """A kernel finding with its differentiation context: None when the settings do not report
        its context; with the recording's notes when one differentiates it."""
        if finding.code not in all_rules():
            return finding
        definition = self.model.definition_at(finding.path, finding.start.line)
        if definition is None:
            return finding
        context = self.model.finding_context(definition, finding.data.get("origins"), finding.data.get("guards"),
                                             finding.data.get("destinations"))
        if context.state not in settings.report_contexts:
            return None
        data = {**finding.data, "context": context.state, "context_reason": context.reason}
        if definition.kind != "kernel":
            # Where a helper's code runs: `trace` checks its findings on these kernels' launches.
            data["calling_kernels"] = [{"path": caller.symbol.path, "kernel": caller.summary.name, "calls": name}
                                       for caller, name in self.model.kernels_calling(definition)]
        related = finding.related
        if context.state == DIFFERENTIATED and context.reach is not None:
            reach = context.reach
            notes = [Related((f"recorded on `{reach.tape}` here" if reach.tape else "recorded on a tape here")
                             + reach.skipped(), reach.region.path, reach.region.start, reach.region.end)]
            notes += [Related(f"through `{site.callee}`", site.location.path, site.location.start, site.location.end)
                      for site in reach.chain]
            related = related + tuple(notes)
        return dataclasses.replace(finding, data=data, related=related)


def _found(model, scopes: list[HostScope], codes: list[str]) -> dict[str, list[Finding]]:
    """What the project rules ``codes`` find reading ``scopes`` (and the model), by code."""
    context = ProjectContext(model, scopes)
    rules = all_rules()
    for code in codes:
        rules[code]().check(context)
    found: dict[str, list[Finding]] = {}
    for finding in context.findings:
        found.setdefault(finding.code, []).append(finding)
    return found


def _same_model_input(before: FileAnalysis, after: FileAnalysis) -> bool:
    """Whether the project model reads the same from both analyses of one file: the same kernel
    facts and summary. Everything in the summary counts but the text's digest, the words of the
    module's own statements (their operations count, and the words only pre-select what the
    operations decide) and the columns where Warp definitions end (the model reads their lines)."""
    if before.facts != after.facts:
        return False
    if before.summary is None or after.summary is None:
        return before.summary is after.summary
    return _model_input(before.summary) == _model_input(after.summary)


def _model_input(summary: FileSummary) -> FileSummary:
    module = summary.functions.get(MODULE_SCOPE)
    functions = summary.functions
    if module is not None:
        functions = {**functions, MODULE_SCOPE: dataclasses.replace(module, words=frozenset())}
    warp_defs = {key: _lines_only(function) for key, function in summary.warp_defs.items()}
    return dataclasses.replace(summary, digest="", functions=functions, warp_defs=warp_defs)


def _interface(summary: FileSummary) -> tuple:
    """What other files read of a file's summary, positions left out: its imports, the names it
    defines, its classes, its Warp definitions' decorators, its module settings and values, what
    its factories and decorators make. When only the rest changes (the code of its functions), a
    recording that never read the file is unchanged."""
    return (
        summary.warp_aliases,
        [(b.local, b.module, b.name, b.level, b.scope) for b in summary.imports],
        [(key, f.returns_code, f.returns_warp, f.applies_warp, f.local_functions) for key, f in summary.functions.items()],
        [(key, f.name, [_decorator(d) for d in f.decorators]) for key, f in summary.warp_defs.items()],
        [(key, c.bases, c.methods, c.attributes, [_decorator(d) for d in c.decorators])
         for key, c in summary.classes.items()],
        [(s.key, s.value, s.source, s.guarded) for s in summary.settings],
        [(key, v.value, v.callee, v.qualified, v.literal) for key, v in summary.values.items()],
        summary.all_names,
    )


def _decorator(decorator) -> tuple:
    return decorator.code, decorator.qualified, decorator.called, decorator.keywords, decorator.star_kwargs


def _lines_only(function: FunctionSummary) -> FunctionSummary:
    loc = function.loc
    if loc.column == loc.end_column == 0:
        return function
    return dataclasses.replace(function, loc=Loc(loc.line, 0, loc.end_line, 0))


class HelperLookup:
    """``lookup(code)``: the imported helper a file's kernel calls by ``code``; remembers what it
    found (an analysis depends on those files)."""

    def __init__(self, workspace: Workspace, path: str, summary: FileSummary):
        self._workspace = workspace
        self._path = path
        self._summary = summary
        self.found: dict[str, ImportedHelper] = {}
        self.read: dict[str, str] = {}  # the files whose facts it read -> their digests: dependencies

    def __call__(self, code: str) -> ImportedHelper | None:
        helper = self._workspace.imported_helper(self._path, self._summary, code, self.read)
        if helper is not None:
            self.found[code] = helper
        return helper


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def lint_source(source: SourceFile, settings: FileSettings) -> FileResult:
    """Lint one file on its own: the file is its whole project (snippets, tests, a fix's re-lint)."""
    analysis = analyse_source(source, settings)  # alone: no other file's helpers to follow
    return Workspace.alone(analysis, settings).results([analysis], lambda _: settings)[0]


def lint_bytes(path: str, raw: bytes, settings: FileSettings) -> FileResult:
    """Lint one file's bytes on its own (decoded as Python decodes them; bad input is a finding)."""
    analysis = analyse_bytes(path, raw, settings)
    if analysis.summary is None:
        return finalize(analysis.source, path, analysis.findings, settings)
    return Workspace.alone(analysis, settings).results([analysis], lambda _: settings)[0]
