"""Helpers for the language-server tests: documents, waiting, applying edits in UTF-16 units."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

SERVER = [sys.executable, "-m", "warp_lint", "server", "--debounce", "0.05"]

# A kernel with WL102 (fires on every Warp version): `a[i] = a[i] * a[i]` on line 6 (0-based 5).
WL102_SOURCE = textwrap.dedent("""\
    import warp as wp

    @wp.kernel
    def square(a: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] * a[i]
    """)

# WL101 with a safe fix (needs target-warp-version <1.14, see the workspace's pyproject.toml).
WL101_SOURCE = textwrap.dedent("""\
    import warp as wp

    @wp.kernel
    def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        y[i].x = 2.0 * x[i]
        y[i].y = x[i]
        y[i].z = 0.0
    """)

WL101_FIXED = textwrap.dedent("""\
    import warp as wp

    @wp.kernel
    def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)
    """)


def capabilities(pull: bool = False, refresh: bool | None = None) -> types.ClientCapabilities:
    """A modern client (VS Code-like): markdown hover, code action literals with data, versioned edits.
    ``pull``: it pulls diagnostics, and (unless ``refresh`` is False) can be asked to pull again."""
    refresh = pull if refresh is None else refresh
    text_document = types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(
            version_support=True, code_description_support=True, data_support=True,
            tag_support=types.ClientDiagnosticsTagOptions(value_set=[types.DiagnosticTag.Unnecessary])),
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown, types.MarkupKind.PlainText]),
        code_action=types.CodeActionClientCapabilities(
            code_action_literal_support=types.ClientCodeActionLiteralOptions(
                code_action_kind=types.ClientCodeActionKindOptions(value_set=[
                    types.CodeActionKind.QuickFix, types.CodeActionKind.Source, types.CodeActionKind.SourceFixAll])),
            data_support=True, is_preferred_support=True,
            resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"])),
        diagnostic=types.DiagnosticClientCapabilities(related_document_support=False) if pull else None,
    )
    workspace = types.WorkspaceClientCapabilities(
        workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
        diagnostics=types.DiagnosticWorkspaceClientCapabilities(refresh_support=True) if refresh else None,
    )
    return types.ClientCapabilities(text_document=text_document, workspace=workspace,
                                    window=types.WindowClientCapabilities(work_done_progress=True))


def open_document(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    path.write_text(text, encoding="utf-8", newline="")
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
    return uri


def change_document(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


async def wait_for_diagnostics(client: LanguageClient, uri: str, predicate, timeout: float = 30.0):
    """Poll the diagnostics the client holds for ``uri`` until ``predicate`` accepts them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        diagnostics = client.diagnostics.get(uri)
        if diagnostics is not None and predicate(diagnostics):
            return list(diagnostics)
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for diagnostics on {uri}; last: {diagnostics!r}")
        await asyncio.sleep(0.02)


def utf16_offset(text: str, position: types.Position) -> int:
    """An LSP position (UTF-16 columns) as an index into ``text``, computed independently of the server."""
    lines = text.splitlines(keepends=True)  # the tests' texts hold no form feeds
    offset = sum(len(line) for line in lines[:position.line])
    line = lines[position.line] if position.line < len(lines) else ""
    units = 0
    for index, char in enumerate(line):
        if units >= position.character:
            return offset + index
        units += 2 if ord(char) > 0xFFFF else 1
    return offset + len(line.rstrip("\r\n")) if units >= position.character else offset + len(line)


def apply_edits(text: str, edits) -> str:
    spans = sorted(((utf16_offset(text, e.range.start), utf16_offset(text, e.range.end), e.new_text) for e in edits),
                   reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def edits_for(edit: types.WorkspaceEdit, uri: str) -> list:
    if edit.document_changes:
        return [e for change in edit.document_changes if change.text_document.uri == uri for e in change.edits]
    return list((edit.changes or {}).get(uri, []))


def many_kernels(count: int) -> str:
    """A long Warp module: ``count`` kernels, every other one with a WL102 finding."""
    parts = ["import warp as wp\n"]
    for number in range(count):
        hazard = "x[i] = x[i] * 2.0" if number % 2 else "y = x[i] * 2.0"
        parts.append(textwrap.dedent(f"""\


            @wp.kernel
            def step_{number}(x: wp.array(dtype=float), v: wp.array(dtype=float), out: wp.array(dtype=float),
                              dt: float):
                i = wp.tid()
                a = v[i] * dt
                b = a + x[i]
                for k in range(3):
                    b = b + 0.1 * float(k)
                out[i] = b
                {hazard}
            """))
    return "".join(parts)
