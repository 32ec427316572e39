"""The language server (``warp-lint server``): diagnostics, quick fixes, hover, runtime confirmation.

One finding feeds every feature. The server keeps, per project root (found as ``warp-lint check``
finds it), the command line's ``Workspace`` in memory: its project model is fed from the results
cache and updated from the editor's unsaved buffers, so a buffer's diagnostics are what
``warp-lint check`` reports for the same text, tapes in other files included. A lint runs in one
worker thread on the buffer (never the file on disk) and analyses again only the top-level
statements that changed (``Workspace.lint_text``); only the result for the buffer's latest version
is published. When an edit changes the project model, the other open files of the project get
their results again (no new analysis). Each diagnostic carries its own edits in ``data`` (the safe
fix and the ``# noqa`` edit, already in the client's position units), so code actions never lint;
hover and code actions answer from the last lint at once, its positions moved past the edits made
since. Runtime confirmation is an explicit command (``warp-lint.confirm``) that runs
:func:`warp_lint.runtime.confirm_findings` (child processes) in its own thread, so diagnostics keep
flowing while a kernel compiles.

Diagnostics reach every client: pushed, or pulled by clients that can be asked to pull again
(``workspace/diagnostic/refresh``). A client that pulls but cannot be asked again (Neovim up to
0.12) is not offered pulling: it gets every result pushed, verdicts and configuration changes
included.

Positions: findings count 1-based lines and code points; LSP counts 0-based lines split at
``\\n``, ``\\r\\n`` and ``\\r`` only, and columns in the negotiated encoding (UTF-16 by default).
:class:`TextMap` converts with pygls's position codec over lines split the way Python's tokenizer
(and LSP) split them; ``str.splitlines`` would also split at form feeds and U+2028. For the same
reason the server asks for full-text sync: pygls applies incremental changes over ``splitlines``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import concurrent.futures
import dataclasses
import functools
import gc
import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable

import attrs
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import PositionCodec

from warp_lint import __version__, suppression
from warp_lint.cache import ResultsCache
from warp_lint.config import ConfigError, cache_directory, find_config, project_warp_requirement
from warp_lint.engine import (
    MAX_FILE_BYTES,
    FileResult,
    FileSettings,
    InternalError,
    fix_until_stable,
    input_error,
)
from warp_lint.files import PYTHON_SUFFIXES, is_excluded
from warp_lint.finding import Applicability, Confirmation, Edit, Finding, Position, Related
from warp_lint.fixer import applicable, line_starts, offset_of
from warp_lint.incremental import AnalysisMemory
from warp_lint.options import Options
from warp_lint.project.layout import find_root
from warp_lint.registry import EXTRA_CODES, all_rules
from warp_lint.runner import tune_garbage_collection
from warp_lint.source import SourceFile, common_ends, split_lines
from warp_lint.workspace import Workspace

logger = logging.getLogger("warp_lint.lsp")

SOURCE = "warp-lint"
CONFIRM_COMMAND = "warp-lint.confirm"
FIX_ALL_KIND = "source.fixAll.warp-lint"
# A change's lint takes tens of milliseconds (benchmarks/bench_lsp.py: about 20-30 ms on a
# 2,000-line file), less than the time between two keystrokes; a change that comes during a lint
# is linted right after it, only the latest one. So the server waits for nothing.
DEFAULT_DEBOUNCE = 0.0
REFINISH_DELAY = 0.25
_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}


# --- positions -----------------------------------------------------------------------------------

class TextMap:
    """One text's lines as LSP and Python's tokenizer count them, and conversion between
    warp-lint positions (1-based line, 1-based code-point column) and the client's units."""

    def __init__(self, text: str, codec: PositionCodec):
        self.text = text
        self.codec = codec
        self.starts = line_starts(text)
        ends = self.starts[1:] + [len(text)]
        self.lines = [text[start:end] for start, end in zip(self.starts, ends)]

    def content(self, index: int) -> str:
        """Line ``index`` (0-based) without its line ending."""
        return self.lines[index].rstrip("\r\n")

    def to_client(self, position: Position) -> types.Position:
        index = min(max(position.line - 1, 0), len(self.lines) - 1)
        line = self.lines[index]
        column = min(max(position.column - 1, 0), len(line))
        return types.Position(line=index, character=self.codec.client_num_units(line[:column]))

    def to_client_range(self, start: Position, end: Position) -> types.Range:
        return types.Range(start=self.to_client(start), end=self.to_client(end))

    def from_client(self, position: types.Position) -> Position:
        if position.line >= len(self.lines):
            last = len(self.lines) - 1
            return Position(last + 1, len(self.content(last)) + 1)
        content = self.content(position.line)
        units = 0
        for index, char in enumerate(content):
            if units >= position.character:
                return Position(position.line + 1, index + 1)
            units += self.codec.client_num_units(char)
        return Position(position.line + 1, len(content) + 1)

    def offset(self, position: Position) -> int:
        return offset_of(self.starts, position, self.text)

    def position_at(self, offset: int) -> Position:
        index = bisect.bisect_right(self.starts, offset) - 1
        return Position(index + 1, offset - self.starts[index] + 1)


def _range_json(value: types.Range) -> dict:
    return {"start": {"line": value.start.line, "character": value.start.character},
            "end": {"line": value.end.line, "character": value.end.character}}


def _range_from_json(value: dict) -> types.Range:
    return types.Range(start=types.Position(**value["start"]), end=types.Position(**value["end"]))


def _contains(outer: types.Range, position: types.Position) -> bool:
    start, end = (outer.start.line, outer.start.character), (outer.end.line, outer.end.character)
    return start <= (position.line, position.character) <= end


def _overlaps(a: types.Range, b: types.Range) -> bool:
    a0, a1 = (a.start.line, a.start.character), (a.end.line, a.end.character)
    b0, b1 = (b.start.line, b.start.character), (b.end.line, b.end.character)
    return a0 <= b1 and b0 <= a1


# --- linting buffers (the lint thread alone touches this) -----------------------------------------

class Projects:
    """The project model of every project with an open file, kept in memory between lints.

    One ``Workspace`` per project root, made as ``warp-lint check`` makes it (the root's files,
    their summaries read through the results cache) and updated from the open buffers: a buffer's
    text replaces its file's in the model, until the buffer is closed. Not thread-safe: the server
    calls it from its one lint thread.
    """

    def __init__(self, cache_for: Callable[[Path], ResultsCache | None]):
        self._cache_for = cache_for
        self._workspaces: dict[Path, Workspace] = {}
        self._roots: dict[str, Path] = {}  # an open buffer's path -> its project's root
        self.memory = AnalysisMemory()  # shared by the projects: it is keyed by text (and path)

    def workspace_of(self, path: str) -> Workspace:
        root = self._roots.get(path)
        if root is None:
            root = self._roots[path] = find_root(Path(path)).path
        workspace = self._workspaces.get(root)
        if workspace is None:
            workspace = self._workspaces[root] = Workspace.for_files([Path(path)], self._cache_for(root))
            workspace.memory = self.memory
        return workspace

    def lint(self, path: str, text: str, settings: FileSettings) -> tuple[FileResult, bool]:
        """Lint a buffer in its project: its result, and whether the project model changed.
        ``text`` is already decoded, whatever the file's coding cookie says."""
        source = SourceFile(path=path, raw=text.encode("utf-8", "surrogatepass"), text=text, encoding="utf-8",
                            bom=False)
        if len(source.raw) > MAX_FILE_BYTES:
            message = f"file is larger than the {MAX_FILE_BYTES // 1024 // 1024} MB limit; not linted"
            return FileResult(path, [input_error(path, "E902", message)], source), False
        projects = len(self._workspaces)
        result, _, changed = self.workspace_of(path).lint_text(source, settings)
        if len(self._workspaces) > projects:
            # The project just read (its summaries, index and model: millions of objects in a big
            # one) lives as long as its workspace: the cyclic collector no longer scans it. Its
            # scans held the lint thread, and the GIL with it, for seconds while hovers waited
            # (a 4.3 s collection measured on newton's model).
            gc.freeze()
        return result, changed

    def results(self, path: str, settings: FileSettings) -> FileResult | None:
        """A linted buffer's result again, from the current model (another file changed it; its
        kernels are analysed again where they follow a helper of the changed file)."""
        return self.workspace_of(path).result_of(path, settings)

    def fixed_text(self, path: str, text: str, settings: FileSettings) -> str | None:
        """What ``warp-lint check --fix`` would make of the buffer (safe fixes, until none is left)."""
        result, _ = self.lint(path, text, settings)
        if result.source is None or not applicable(result.findings, False):
            return None
        workspace = self.workspace_of(path)
        fixed, count = fix_until_stable(result, unsafe=False,
                                        relint=lambda source: workspace.lint_source(source, settings))
        self.lint(path, text, settings)  # the model holds the buffer, not the fixed text nobody applied yet
        return fixed.source.text if count and fixed.source.text != text else None

    def close(self, path: str) -> bool:
        """The buffer is closed: its file counts as it is on disk again. Whether the model changed."""
        root = self._roots.pop(path, None)
        workspace = self._workspaces.get(root) if root is not None else None
        if workspace is None or workspace.analysis_of(path) is None:
            return False
        workspace.drop(path)
        return True

    def files_changed(self, paths: list[Path]) -> set[Path]:
        """Files changed on disk (not through a buffer): the projects holding them are read again.
        Returns the roots of those projects."""
        roots = {find_root(path).path for path in paths}
        if roots & self._workspaces.keys():
            gc.unfreeze()  # what the dropped projects leave is collectable again; the next read freezes
        for root in roots:
            self._workspaces.pop(root, None)  # the next lint makes it again
        return roots


def noqa_edit(text_map: TextMap, directives: dict[int, suppression.Directive], line: int, code: str) -> Edit | None:
    """The edit that makes line ``line`` (1-based) suppress ``code``: extend its ``# noqa: ...``
    or append one. None where no comment can go (a line continued with a backslash)."""
    if not 1 <= line <= len(text_map.lines):
        return None
    directive = directives.get(line)
    if directive is not None:
        if directive.codes is None or code in directive.codes:
            return None
        codes = ", ".join([*directive.codes, code])
        return Edit(Position(line, directive.column), Position(line, directive.end_column), f"# noqa: {codes}")
    content = text_map.content(line - 1)
    kept = content.rstrip()
    if kept.endswith("\\"):
        return None
    return Edit(Position(line, len(kept) + 1), Position(line, len(content) + 1), f"  # noqa: {code}")


def verdict_key(finding: Finding, text_map: TextMap) -> tuple:
    """Identifies a finding across edits elsewhere in the file: its code, message and flagged text."""
    first, last = finding.start.line - 1, finding.end.line - 1
    flagged = "\n".join(text_map.content(i).strip() for i in range(max(first, 0), min(last, len(text_map.lines) - 1) + 1))
    return (finding.code, finding.message, flagged)


def describe_verdict(confirmation: Confirmation) -> str:
    where = ", ".join(x for x in (f"Warp {confirmation.warp_version}" if confirmation.warp_version else "",
                                  confirmation.device or "") if x)
    return f"runtime: {confirmation.status}: {confirmation.reason}" + (f" ({where})" if where else "")


def to_diagnostic(finding: Finding, text_map: TextMap, newline: str, directives: dict[int, suppression.Directive],
                  version: int | None, confirmation: Confirmation | None = None) -> types.Diagnostic:
    """The LSP form of a finding; ``data`` holds its edits (for the buffer's ``version``)."""
    message = finding.message
    if confirmation is not None:
        message = f"{message}\n{describe_verdict(confirmation)}"
    data: dict[str, Any] = {"version": version}
    if finding.fix is not None:
        data["fix"] = {
            "title": finding.fix.message,
            "safe": finding.fix.applicability is Applicability.SAFE,
            "edits": [{"range": _range_json(text_map.to_client_range(e.start, e.end)),
                       "newText": e.content.replace("\n", newline)} for e in finding.fix.edits],
        }
    if finding.code in all_rules():  # input errors (E9xx) and WL900 cannot be suppressed
        edit = noqa_edit(text_map, directives, finding.noqa_row or finding.start.line, finding.code)
        if edit is not None:
            data["noqa"] = {"range": _range_json(text_map.to_client_range(edit.start, edit.end)),
                            "newText": edit.content}
    if finding.data.get("strategy"):
        data["confirmable"] = True
    if finding.data.get("context"):
        data["differentiationContext"] = {"state": finding.data["context"],
                                          "reason": finding.data.get("context_reason", "")}
    return types.Diagnostic(
        range=text_map.to_client_range(finding.start, finding.end),
        message=message,
        severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Error),
        code=finding.code,
        # LSP requires an href in a codeDescription: none at all where there is no page to link.
        code_description=types.CodeDescription(href=finding.url) if finding.url else None,
        source=SOURCE,
        tags=[types.DiagnosticTag.Unnecessary] if finding.code == "WL900" else None,
        related_information=[_related_information(finding, related, text_map) for related in finding.related] or None,
        data=data,
    )


def _related_information(finding: Finding, related: Related, text_map: TextMap) -> types.DiagnosticRelatedInformation:
    """The tape, the earlier read or a call on the way, as the client's related location. Places in
    the linted buffer go through its text map; places in other files are counted in code points."""
    if os.path.abspath(related.path) == os.path.abspath(finding.path):
        where = text_map.to_client_range(related.start, related.end)
    else:
        where = types.Range(start=types.Position(related.start.line - 1, related.start.column - 1),
                            end=types.Position(related.end.line - 1, related.end.column - 1))
    return types.DiagnosticRelatedInformation(
        location=types.Location(uri=Path(related.path).resolve().as_uri(), range=where), message=related.message)


@dataclasses.dataclass
class Linted:
    """One lint of one version of one buffer."""

    version: int | None
    text: str
    path: str
    findings: list[Finding]
    text_map: TextMap
    newline: str
    directives: dict[int, suppression.Directive]
    diagnostics: list[types.Diagnostic] = dataclasses.field(default_factory=list)
    generation: int = 0  # the server's configuration generation it was linted under

    def render(self, verdicts: dict[tuple, Confirmation]) -> None:
        self.diagnostics = [to_diagnostic(f, self.text_map, self.newline, self.directives, self.version,
                                          verdicts.get(verdict_key(f, self.text_map))) for f in self.findings]


def render_lint(path: str, text: str, version: int | None, findings: list[Finding], codec: PositionCodec,
                verdicts: dict[tuple, Confirmation], generation: int = 0) -> Linted:
    text_map = TextMap(text, codec)
    newline = "\r\n" if text.count("\r\n") > text.count("\n") - text.count("\r\n") else "\n"
    directives = suppression.parse_directives(text) if findings else {}
    linted = Linted(version, text, path, findings, text_map, newline, directives, generation=generation)
    linted.render(verdicts)
    return linted


def moved_diagnostics(linted: Linted, text: str, version: int | None) -> list[types.Diagnostic]:
    """The last lint's diagnostics on the buffer's newer ``text``: those on lines the edits since
    left alone, moved with them (their edits too); those on edited lines are left out."""
    if linted.text == text:
        return linted.diagnostics
    old = split_lines(linted.text)
    new = split_lines(text)
    prefix, suffix = common_ends(old, new)
    first_moved, shift = len(old) - suffix, len(new) - len(old)

    def moved(value: dict) -> dict | None:  # a range in LSP's JSON form; None when it was edited
        start, end = value["start"]["line"], value["end"]["line"]
        if end < prefix:
            return value
        if start >= first_moved:
            return {"start": {**value["start"], "line": start + shift}, "end": {**value["end"], "line": end + shift}}
        return None

    kept = []
    for diagnostic in linted.diagnostics:
        where = moved(_range_json(diagnostic.range))
        if where is None:
            continue
        data = dict(diagnostic.data or {}, version=version)
        for name, edits in (("fix", (data.get("fix") or {}).get("edits")), ("noqa", [data["noqa"]] if data.get("noqa")
                                                                          else None)):
            if edits is None:
                continue
            ranges = [moved(edit["range"]) for edit in edits]
            if any(r is None for r in ranges):
                del data[name]
            elif name == "fix":
                data["fix"] = {**data["fix"], "edits": [{**e, "range": r} for e, r in zip(edits, ranges)]}
            else:
                data["noqa"] = {**data["noqa"], "range": ranges[0]}
        kept.append(attrs.evolve(diagnostic, range=_range_from_json(where), data=data))
    return kept


# --- server ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class DocState:
    uri: str
    debounce: asyncio.Task | None = None
    running: bool = False
    rerun: bool = False
    linted: Linted | None = None  # the latest lint, of the version it names
    done: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    verdicts: dict[tuple, Confirmation] = dataclasses.field(default_factory=dict)
    refinish: asyncio.Task | None = None  # its results again from a model another file changed


def _default_arguments() -> argparse.Namespace:
    return argparse.Namespace(select=None, extend_select=[], ignore=[], exclude=None, extend_exclude=[],
                              report_unused_noqa=False, target_warp_version=None)


class WarpLintServer(LanguageServer):
    def __init__(self, debounce: float = DEFAULT_DEBOUNCE):
        # Full sync: see the module docstring.
        super().__init__("warp-lint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self.debounce = debounce
        self.docs: dict[str, DocState] = {}
        self.options = Options(_default_arguments(), None)
        self.init_options: dict[str, Any] = {}
        # One lint thread: the projects' models live in it, and a lint of a change is short.
        self.lint_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="warp-lint-lint")
        self.confirm_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                                  thread_name_prefix="warp-lint-confirm")
        self.projects = Projects(self.cache_for)
        self.generation = 0  # bumped when the configuration changes: every lint before is stale
        self.shown_errors: set[str] = set()
        self._refresh_pending = False

    # -- client facts
    @property
    def pull_mode(self) -> bool:
        """Whether the client pulls diagnostics (offered only to clients that can be asked to pull again)."""
        capabilities = self.client_capabilities
        return bool(capabilities and capabilities.text_document and capabilities.text_document.diagnostic
                    and self._supports(lambda c: c.workspace.diagnostics.refresh_support))

    def _supports(self, getter: Callable[[types.ClientCapabilities], Any]) -> bool:
        try:
            return bool(getter(self.client_capabilities))
        except AttributeError:
            return False

    def show(self, message: str, kind: types.MessageType = types.MessageType.Error, once: bool = True) -> None:
        if once:
            if message in self.shown_errors:
                return
            self.shown_errors.add(message)
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    # -- documents and settings
    def path_of(self, uri: str) -> Path:
        document = self.workspace.get_text_document(uri)
        if uri.startswith("file:") and document.path:
            return Path(document.path)
        root = self.workspace.root_path or os.getcwd()
        return Path(root) / (document.filename or "untitled.py")

    def settings_for(self, uri: str) -> FileSettings | None:
        """The CLI's settings for this file (config discovered from its folder); None when the file
        is excluded or the configuration is broken (then the user is told once)."""
        document = self.workspace.get_text_document(uri)
        path = self.path_of(uri)
        python = path.suffix in PYTHON_SUFFIXES or document.language_id == "python"
        if not python:
            return None
        try:
            config = self.options.config_for(path.parent.resolve())
            if uri.startswith("file:") and is_excluded(path, config):
                return None
            return self.options.settings_for(path)
        except ConfigError as error:
            self.show(f"warp-lint: {error}")
            return None

    def cache_for(self, root: Path) -> ResultsCache | None:
        """The results cache ``warp-lint check`` run in ``root`` uses (None when its configuration is broken)."""
        try:
            return ResultsCache(cache_directory(self.options.config_for(root)))
        except (ConfigError, OSError):
            return None

    def reload_configuration(self) -> None:
        find_config.cache_clear()
        project_warp_requirement.cache_clear()
        self.shown_errors.clear()
        self.generation += 1
        for uri in list(self.docs):
            self.schedule(uri, 0, deliver=True)

    def files_changed(self, paths: list[Path]) -> None:
        """Python files changed on disk (a checkout, another program): their projects are read
        again, and the open files there linted again. An open file's own buffer is what counts."""
        open_paths = {str(self.path_of(uri)) for uri in self.docs if uri in self.workspace.text_documents}
        changed = [path for path in paths if str(path) not in open_paths]
        if not changed:
            return

        def forget() -> set[Path]:
            return self.projects.files_changed(changed)

        async def relint() -> None:
            roots = await asyncio.get_running_loop().run_in_executor(self.lint_pool, forget)
            for uri in list(self.docs):
                if uri in self.workspace.text_documents and find_root(self.path_of(uri)).path in roots:
                    self.schedule(uri, 0, deliver=True)

        asyncio.ensure_future(relint())

    def refresh_pull(self) -> None:
        """Ask a pulling client to pull every open file again (once, however many results changed)."""
        if self._refresh_pending:
            return
        self._refresh_pending = True

        def send() -> None:
            self._refresh_pending = False
            self.workspace_diagnostic_refresh(None)

        asyncio.get_running_loop().call_soon(send)

    def deliver(self, uri: str, linted: Linted) -> None:
        """Show a result the client did not ask for (a verdict, a configuration change, another
        file's edit): pushed, or pulled again after a refresh request."""
        if self.pull_mode:
            self.refresh_pull()
        elif self.latest(uri) is linted:
            self.publish(uri, linted)

    # -- linting
    def schedule(self, uri: str, delay: float, deliver: bool = False) -> None:
        """Lint the buffer after ``delay`` seconds (a newer change restarts the wait). ``deliver``:
        the client does not expect this result (see ``deliver``)."""
        state = self.docs.setdefault(uri, DocState(uri))
        if state.debounce is not None:
            state.debounce.cancel()
            state.debounce = None
        if delay <= 0:
            asyncio.ensure_future(self.refresh(uri, deliver))
        else:
            state.debounce = asyncio.ensure_future(self._debounced(state, delay, deliver))

    async def _debounced(self, state: DocState, delay: float, deliver: bool) -> None:
        await asyncio.sleep(delay)
        state.debounce = None  # from here on nothing cancels this lint
        await self.refresh(state.uri, deliver)

    async def refresh(self, uri: str, deliver: bool = False) -> None:
        """Lint the buffer's current version (again, if it changed while linting) and publish."""
        state = self.docs.get(uri)
        if state is None:
            return
        if state.running:
            state.rerun = True
            return
        state.running = True
        loop = asyncio.get_running_loop()
        try:
            while True:
                state.rerun = False
                if uri not in self.workspace.text_documents:
                    return
                document = self.workspace.get_text_document(uri)
                version, text, generation = document.version, document.source, self.generation
                settings = self.settings_for(uri)
                path = str(self.path_of(uri))
                try:
                    linted, changed = await loop.run_in_executor(
                        self.lint_pool, self._lint, path, text, version, settings, dict(state.verdicts), generation)
                except InternalError as error:
                    logger.error("%s\n%s", error, error.detail)
                    self.show(f"warp-lint: {error} (details in the server log)")
                    linted, changed = render_lint(path, text, version, [], self.workspace.position_codec, {},
                                                  generation), False
                if self.docs.get(uri) is not state:
                    return  # closed meanwhile
                current = self.workspace.get_text_document(uri)
                if current.version == version and current.source == text:
                    state.linted = linted
                    if not self.pull_mode:
                        self.publish(uri, linted)
                    elif deliver:
                        self.refresh_pull()
                if changed:
                    self.refinish_others(uri)
                if not state.rerun:
                    return
        finally:
            state.running = False
            state.done.set()
            state.done = asyncio.Event()

    def _lint(self, path: str, text: str, version: int | None, settings: FileSettings | None,
              verdicts: dict[tuple, Confirmation], generation: int) -> tuple[Linted, bool]:
        """In the lint thread: lint the buffer in its project; whether the project model changed."""
        findings: list[Finding] = []
        changed = False
        if settings is not None:
            result, changed = self.projects.lint(path, text, settings)
            findings = result.findings
        return render_lint(path, text, version, findings, self.workspace.position_codec, verdicts, generation), changed

    def refinish_others(self, uri: str) -> None:
        """The project model changed with ``uri``'s text: the other open files of its project get
        their results again from the new model (no new analysis), shown where they changed. Once
        the model stops changing for ``REFINISH_DELAY`` seconds: the file being typed in comes first."""
        root = find_root(self.path_of(uri)).path
        for other, state in list(self.docs.items()):
            if other != uri and other in self.workspace.text_documents and \
                    find_root(self.path_of(other)).path == root:
                if state.refinish is not None:
                    state.refinish.cancel()
                state.refinish = asyncio.ensure_future(self._refinish(other, state))

    async def _refinish(self, uri: str, state: DocState) -> None:
        await asyncio.sleep(REFINISH_DELAY)
        state.refinish = None
        linted = state.linted
        if linted is None or state.running or state.debounce is not None or self.latest(uri) is not linted:
            return  # a lint of its current text is on its way, and reads the new model
        settings = self.settings_for(uri)
        if settings is None:
            return
        path = str(self.path_of(uri))

        def finish() -> Linted | None:
            result = self.projects.results(path, settings)
            if result is None:
                return None
            return render_lint(path, linted.text, linted.version, result.findings, self.workspace.position_codec,
                               dict(state.verdicts), linted.generation)

        try:
            again = await asyncio.get_running_loop().run_in_executor(self.lint_pool, finish)
        except InternalError as error:
            logger.error("%s\n%s", error, error.detail)
            return
        if again is None or self.docs.get(uri) is not state or state.linted is not linted or \
                _result_id(again.diagnostics) == _result_id(linted.diagnostics):
            return
        state.linted = again
        self.deliver(uri, again)

    def publish(self, uri: str, linted: Linted) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=linted.diagnostics, version=linted.version))

    def _is_current(self, linted: Linted | None, document) -> bool:
        return linted is not None and linted.version == document.version and linted.text == document.source \
            and linted.generation == self.generation

    async def current(self, uri: str) -> Linted | None:
        """The lint of the buffer's current version, linting now if it is not there yet."""
        for _ in range(100):
            state = self.docs.get(uri)
            if state is None or uri not in self.workspace.text_documents:
                return None
            document = self.workspace.get_text_document(uri)
            if self._is_current(state.linted, document):
                return state.linted
            if state.debounce is not None:
                state.debounce.cancel()
                state.debounce = None
            if state.running:
                state.rerun = True
                await state.done.wait()
            else:
                await self.refresh(uri)
        return None

    def latest(self, uri: str) -> Linted | None:
        """The lint of the current version if it is done; never waits."""
        state = self.docs.get(uri)
        if state is None or uri not in self.workspace.text_documents:
            return None
        return state.linted if self._is_current(state.linted, self.workspace.get_text_document(uri)) else None

    def last_diagnostics(self, uri: str) -> tuple[Linted | None, list[types.Diagnostic]]:
        """The last lint and its diagnostics on the buffer's current text, at once: while a newer
        lint runs (or waits for typing to stop), those the edits since left alone, moved with them."""
        state = self.docs.get(uri)
        if state is None or state.linted is None or uri not in self.workspace.text_documents:
            return None, []
        document = self.workspace.get_text_document(uri)
        return state.linted, moved_diagnostics(state.linted, document.source, document.version)

    # -- edits
    def workspace_edit(self, uri: str, version: int | None, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
        if self._supports(lambda c: c.workspace.workspace_edit.document_changes):
            identifier = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
            return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=identifier, edits=edits)])
        return types.WorkspaceEdit(changes={uri: edits})

    async def fix_all_edit(self, uri: str) -> types.WorkspaceEdit | None:
        if uri not in self.workspace.text_documents:
            return None
        document = self.workspace.get_text_document(uri)
        version, text = document.version, document.source
        settings = self.settings_for(uri)
        if settings is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            fixed = await loop.run_in_executor(self.lint_pool, self.projects.fixed_text, str(self.path_of(uri)),
                                               text, settings)
        except InternalError as error:
            logger.error("%s\n%s", error, error.detail)
            return None
        if fixed is None:
            return None
        edit = minimal_edit(text, fixed, TextMap(text, self.workspace.position_codec))
        return self.workspace_edit(uri, version, [edit])

    # -- runtime confirmation
    async def confirm(self, arguments: list[Any]) -> dict[str, Any]:
        uri, line, code = parse_confirm_arguments(arguments)
        # The findings the user saw (the latest lint), not a lint of keystrokes typed since.
        state = self.docs.get(uri)
        linted = state.linted if state is not None and state.linted is not None else await self.current(uri)
        if linted is None:
            return {"uri": uri, "line": line, "results": [], "message": f"{uri} is not open"}
        chosen = [f for f in linted.findings if f.start.line <= line + 1 <= f.end.line and f.data.get("strategy")
                  and (code is None or f.code == code)]
        if not chosen:
            message = f"warp-lint: nothing to confirm on line {line + 1}" + (f" for {code}" if code else "")
            self.show(message, types.MessageType.Info, once=False)
            return {"uri": uri, "line": line, "results": [], "message": message}
        try:
            on_disk = Path(linted.path).read_bytes()
        except OSError:
            on_disk = None
        if on_disk is None or _decoded(linted.path, on_disk) != linted.text:
            message = "warp-lint: save the file before confirming: the runtime checker imports it from disk"
            self.show(message, types.MessageType.Warning, once=False)
            return {"uri": uri, "line": line, "results": [], "message": message}

        copies = [dataclasses.replace(f, confirmation=None, data=dict(f.data)) for f in chosen]
        token = f"warp-lint-confirm-{id(copies)}"
        progress = None
        if self._supports(lambda c: c.window.work_done_progress):
            try:
                await self.work_done_progress.create_async(token)
                self.work_done_progress.begin(token, types.WorkDoneProgressBegin(
                    title="warp-lint: confirming", message=f"{chosen[0].code} on line {line + 1}"))
                loop = asyncio.get_running_loop()

                def progress(message: str) -> None:
                    loop.call_soon_threadsafe(self.work_done_progress.report, token,
                                              types.WorkDoneProgressReport(message=message))
            except Exception:  # noqa: BLE001 - a client that refuses progress still gets the verdict
                progress = None
        options = self.init_options.get("confirm") or {}
        try:
            from warp_lint.runtime import confirm_findings

            run = functools.partial(confirm_findings, copies, device=options.get("device"),
                                    timeout=float(options.get("timeout", 120.0)), progress=progress,
                                    cache_dir=options.get("cacheDir"))
            await asyncio.get_running_loop().run_in_executor(self.confirm_pool, run)
        except ImportError as error:
            message = (f"warp-lint: runtime confirmation needs warp-lang and numpy ({error.name} is missing):"
                       " pip install 'warp-lint[runtime]'")
            self.show(message, once=False)
            return {"uri": uri, "line": line, "results": [], "message": message}
        finally:
            if progress is not None:
                self.work_done_progress.end(token, types.WorkDoneProgressEnd())

        state = self.docs.get(uri)
        results = []
        for finding in copies:
            confirmation = finding.confirmation
            if confirmation is None:
                continue
            if state is not None:
                state.verdicts[verdict_key(finding, linted.text_map)] = confirmation
            results.append({"code": finding.code, "line": finding.start.line - 1, "status": confirmation.status,
                            "reason": confirmation.reason, "message": describe_verdict(confirmation),
                            "confirmation": confirmation.to_dict()})
        if state is not None and state.linted is not None:
            current = state.linted
            current.render(state.verdicts)
            self.deliver(uri, current)
        return {"uri": uri, "line": line, "results": results}


def _fs_path(uri: str) -> str | None:
    from pygls.uris import to_fs_path

    return to_fs_path(uri) if uri.startswith("file:") else None


def _decoded(path: str, raw: bytes) -> str | None:
    from warp_lint.source import SourceError, decode_source

    try:
        return decode_source(path, raw).text
    except SourceError:
        return None


def parse_confirm_arguments(arguments: list[Any]) -> tuple[str, int, str | None]:
    """``[uri, line]``, ``[uri, diagnostic]``, ``[{"uri", "line"}]`` or ``[{"uri", "diagnostic"}]``;
    lines are 0-based like every LSP position. Returns (uri, line, code or None)."""
    arguments = list(arguments or [])
    if len(arguments) == 1 and isinstance(arguments[0], dict):
        given = arguments[0]
        arguments = [given.get("uri"), given.get("diagnostic", given.get("line"))]
        if given.get("code") and not isinstance(arguments[1], dict):
            arguments[1] = {"line": arguments[1], "code": given["code"]}
    if len(arguments) < 2 or not isinstance(arguments[0], str):
        raise ValueError(f"{CONFIRM_COMMAND} takes [uri, line] or [uri, diagnostic], got {arguments!r}")
    uri, where = arguments[0], arguments[1]
    code = None
    if isinstance(where, dict):
        code = where.get("code")
        if "range" in where:
            where = where["range"]["start"]["line"]
        else:
            where = where.get("line")
    if isinstance(where, bool) or not isinstance(where, int):
        raise ValueError(f"{CONFIRM_COMMAND}: no line in {arguments[1]!r}")
    return uri, where, str(code) if code is not None else None


def minimal_edit(before: str, after: str, text_map: TextMap) -> types.TextEdit:
    """One edit turning ``before`` into ``after`` that spans only what changed (keeps the cursor)."""
    prefix, suffix = common_ends(before, after)
    if prefix and before[prefix - 1] == "\r":  # never split a \r\n
        prefix -= 1
    if suffix and len(before) - suffix > 0 and before[len(before) - suffix - 1] == "\r" and \
            before[len(before) - suffix] == "\n":
        suffix -= 1
    start = text_map.position_at(prefix)
    end = text_map.position_at(len(before) - suffix)
    return types.TextEdit(range=text_map.to_client_range(start, end), new_text=after[prefix:len(after) - suffix])


def _result_id(diagnostics: list[types.Diagnostic]) -> str:
    """Same diagnostics, same id: a pull client then gets an 'unchanged' report."""
    digest = hashlib.sha1()
    for d in diagnostics:
        digest.update(json.dumps([_range_json(d.range), d.code, d.message, int(d.severity or 0), d.data],
                                 sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def _hover_docs(code: str) -> str:
    rule = all_rules().get(code)
    if rule is not None:
        return rule.docs()
    if code in EXTRA_CODES:
        return f"# {EXTRA_CODES[code]} ({code})\n\nReported by warp-lint itself, not by a rule."
    return ""


def noqa_code_at(line_text: str, column: int, directive: suppression.Directive | None) -> list[str]:
    """The codes a hover at ``column`` (1-based, code points) on a ``# noqa: ...`` comment names:
    the code under the cursor, or all of them when the cursor is on ``noqa`` itself."""
    if directive is None or directive.codes is None:
        return []
    if not directive.column <= column <= directive.end_column:
        return []
    segment = line_text[directive.column - 1:directive.end_column - 1]
    offset = directive.column
    for code in directive.codes:
        found = segment.upper().find(code, 0)
        while found != -1:
            start = offset + found
            if start <= column <= start + len(code):
                return [code]
            found = segment.upper().find(code, found + 1)
    return list(directive.codes)


def build_server(debounce: float = DEFAULT_DEBOUNCE) -> WarpLintServer:
    server = WarpLintServer(debounce)

    @server.feature(types.INITIALIZE)
    def initialize(ls: WarpLintServer, params: types.InitializeParams) -> None:
        ls.init_options = params.initialization_options if isinstance(params.initialization_options, dict) else {}
        if "debounce" in ls.init_options:
            ls.debounce = float(ls.init_options["debounce"])
        if not ls.pull_mode:
            # A client that pulls but cannot be asked to pull again would never see a result it did
            # not ask for (a verdict, a configuration change, another file's edit) and would show
            # pushed ones next to its pulled ones: offer it no pulling, push everything. pygls
            # builds the server's capabilities from its features after this handler.
            ls.protocol.fm.features.pop(types.TEXT_DOCUMENT_DIAGNOSTIC, None)

    @server.feature(types.INITIALIZED)
    def initialized(ls: WarpLintServer, params: types.InitializedParams) -> None:
        if ls._supports(lambda c: c.workspace.did_change_watched_files.dynamic_registration):
            watchers = [types.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
                        types.FileSystemWatcher(glob_pattern="**/*.py")]
            registration = types.Registration(
                id="warp-lint-config", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers))
            ls.client_register_capability(types.RegistrationParams(registrations=[registration]))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: WarpLintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.docs[params.text_document.uri] = DocState(params.text_document.uri)
        ls.schedule(params.text_document.uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: WarpLintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, ls.debounce)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: WarpLintServer, params: types.DidSaveTextDocumentParams) -> None:
        if params.text_document.uri.endswith("pyproject.toml"):
            ls.reload_configuration()
        elif params.text_document.uri in ls.docs:
            ls.schedule(params.text_document.uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    async def did_close(ls: WarpLintServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = ls.docs.pop(uri, None)
        for task in (state.debounce, state.refinish) if state is not None else ():
            if task is not None:
                task.cancel()
        if not ls.pull_mode:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        path = str(ls.path_of(uri)) if uri.startswith("file:") else None
        # Its unsaved text no longer counts: the project reads the file from disk again.
        if path is not None and await asyncio.get_running_loop().run_in_executor(ls.lint_pool, ls.projects.close,
                                                                                 path):
            ls.refinish_others(uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files(ls: WarpLintServer, params: types.DidChangeWatchedFilesParams) -> None:
        paths = [Path(ls_path) for change in params.changes
                 if (ls_path := _fs_path(change.uri)) is not None]
        if any(path.name == "pyproject.toml" for path in paths):
            ls.reload_configuration()
        ls.files_changed([path for path in paths if path.suffix in PYTHON_SUFFIXES])

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def configuration(ls: WarpLintServer, params: types.DidChangeConfigurationParams) -> None:
        ls.reload_configuration()

    @server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC,
                    types.DiagnosticOptions(identifier=SOURCE, inter_file_dependencies=False,
                                            workspace_diagnostics=False))
    async def pull(ls: WarpLintServer, params: types.DocumentDiagnosticParams):
        uri = params.text_document.uri
        if uri not in ls.docs:
            ls.docs[uri] = DocState(uri)
        linted = await ls.current(uri)
        diagnostics = linted.diagnostics if linted is not None else []
        result_id = _result_id(diagnostics)
        if params.previous_result_id == result_id:
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        return types.RelatedFullDocumentDiagnosticReport(items=diagnostics, result_id=result_id)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: WarpLintServer, params: types.HoverParams) -> types.Hover | None:
        uri = params.text_document.uri
        if uri not in ls.workspace.text_documents:
            return None
        document = ls.workspace.get_text_document(uri)
        linted, diagnostics = ls.last_diagnostics(uri)
        text_map = linted.text_map if linted is not None and linted.text == document.source else \
            TextMap(document.source, ls.workspace.position_codec)
        codes: list[str] = []
        span: types.Range | None = None
        # A code in a `# noqa: ...` comment.
        if params.position.line < len(text_map.lines):
            line_text = text_map.content(params.position.line)
            if "noqa" in line_text.lower():
                directives = suppression.parse_directives(line_text + "\n")
                where = text_map.from_client(params.position)
                codes = noqa_code_at(line_text, where.column, directives.get(1))
                if codes:
                    directive = directives[1]
                    span = text_map.to_client_range(Position(where.line, directive.column),
                                                    Position(where.line, directive.end_column))
        # A finding under the cursor.
        if not codes:
            for diagnostic in diagnostics:
                if _contains(diagnostic.range, params.position) and diagnostic.code not in codes:
                    codes.append(str(diagnostic.code))
                    span = span or diagnostic.range
        docs = [text for text in (_hover_docs(code) for code in codes) if text]
        if not docs:
            return None
        markdown = ls._supports(lambda c: types.MarkupKind.Markdown in (c.text_document.hover.content_format or []))
        kind = types.MarkupKind.Markdown if markdown or not ls._supports(lambda c: c.text_document.hover) \
            else types.MarkupKind.PlainText
        return types.Hover(contents=types.MarkupContent(kind=kind, value="\n\n---\n\n".join(docs)), range=span)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.SourceFixAll, FIX_ALL_KIND],
        resolve_provider=True))
    async def code_action(ls: WarpLintServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        uri = params.text_document.uri
        if uri not in ls.workspace.text_documents:
            return None
        only = params.context.only

        def wanted(kind: str) -> bool:
            return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)

        actions: list[types.CodeAction] = []
        if wanted(types.CodeActionKind.QuickFix):
            diagnostics = [d for d in params.context.diagnostics if d.source == SOURCE]
            _, last = ls.last_diagnostics(uri)
            # Ours for the same place where we have them: their edits are for the current text even
            # while a newer lint runs (the client's may be for an older one), and clients that drop
            # `data` still get actions.
            ours = {(str(d.code), d.range.start.line, d.range.start.character): d for d in last}
            diagnostics = [ours.get((str(d.code), d.range.start.line, d.range.start.character), d)
                           for d in diagnostics]
            if not diagnostics:
                diagnostics = [d for d in last if _overlaps(d.range, params.range)]
            version = ls.workspace.get_text_document(uri).version
            for diagnostic in diagnostics:
                actions.extend(quick_fixes(ls, uri, version, diagnostic))
        if only and (wanted(FIX_ALL_KIND)):
            edit = await ls.fix_all_edit(uri)
            if edit is not None:
                actions.append(types.CodeAction(title="warp-lint: fix all safe fixes", kind=FIX_ALL_KIND, edit=edit))
        elif not only:
            linted, _ = ls.last_diagnostics(uri)
            if linted is not None and applicable(linted.findings, False):
                actions.append(types.CodeAction(title="warp-lint: fix all safe fixes", kind=FIX_ALL_KIND,
                                                data={"uri": uri, "fixAll": True}))
        return actions

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve(ls: WarpLintServer, action: types.CodeAction) -> types.CodeAction:
        if isinstance(action.data, dict) and action.data.get("fixAll") and action.edit is None:
            action.edit = await ls.fix_all_edit(action.data["uri"]) or types.WorkspaceEdit(changes={})
        return action

    @server.command(CONFIRM_COMMAND)
    async def confirm(ls: WarpLintServer, *arguments: Any) -> dict[str, Any]:
        return await ls.confirm(list(arguments))

    return server


def quick_fixes(ls: WarpLintServer, uri: str, version: int | None, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    data = diagnostic.data if isinstance(diagnostic.data, dict) else {}
    code = str(diagnostic.code)
    actions = []
    if data.get("version", version) != version:
        return actions  # edits for an older text: the client asks again once the new diagnostics arrive
    fix = data.get("fix")
    if fix and fix.get("safe"):
        edits = [types.TextEdit(range=_range_from_json(e["range"]), new_text=e["newText"]) for e in fix["edits"]]
        actions.append(types.CodeAction(title=f"{fix['title']} ({code})", kind=types.CodeActionKind.QuickFix,
                                        diagnostics=[diagnostic], is_preferred=True,
                                        edit=ls.workspace_edit(uri, version, edits)))
    noqa = data.get("noqa")
    if noqa:
        edit = types.TextEdit(range=_range_from_json(noqa["range"]), new_text=noqa["newText"])
        actions.append(types.CodeAction(title=f"Disable {code} for this line", kind=types.CodeActionKind.QuickFix,
                                        diagnostics=[diagnostic], edit=ls.workspace_edit(uri, version, [edit])))
    if data.get("confirmable"):
        argument = {"uri": uri, "line": diagnostic.range.start.line, "code": code}
        actions.append(types.CodeAction(
            title=f"Confirm {code} at run time (runs the kernel)", kind=types.CodeActionKind.QuickFix,
            diagnostics=[diagnostic],
            command=types.Command(title=f"Confirm {code} at run time", command=CONFIRM_COMMAND, arguments=[argument])))
    return actions


def serve(debounce: float | None = None) -> int:
    """Run the server over stdio until the client says exit; 0 after a clean shutdown, else 1."""
    level = getattr(logging, os.environ.get("WARP_LINT_LOG_LEVEL", "WARNING").upper(), logging.WARNING)
    logging.basicConfig(stream=sys.stderr, level=level if isinstance(level, int) else logging.WARNING,
                        format="warp-lint server %(levelname)s %(name)s: %(message)s")
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() must never corrupt the protocol stream
    # The projects' summaries live as long as the server: with Python's default thresholds the
    # collector walks them every few lints (tens of milliseconds each time).
    tune_garbage_collection()
    server = build_server(DEFAULT_DEBOUNCE if debounce is None else debounce)
    try:
        server.start_io(stdin, stdout)
    finally:
        server.lint_pool.shutdown(wait=False, cancel_futures=True)
        server.confirm_pool.shutdown(wait=False, cancel_futures=True)
    return 0 if getattr(server.protocol, "_shutdown", False) else 1
