"""The language server end to end: ``python -m warp_lint server`` over stdio, driven by pytest-lsp."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
from lsp_helpers import (
    WL101_FIXED,
    WL101_SOURCE,
    WL102_SOURCE,
    apply_edits,
    change_document,
    edits_for,
    open_document,
    utf16_offset,
    wait_for_diagnostics,
)
from lsprotocol import types
from pytest_lsp import LanguageClient

from warp_lint.finding import rule_url

pytestmark = pytest.mark.asyncio


def _codes(diagnostics) -> list[str]:
    return [d.code for d in diagnostics]


def _href(diagnostic) -> str | None:
    """The rule page a diagnostic links to; it has no codeDescription where the package metadata
    names no documentation (``rule_url`` is then None)."""
    return diagnostic.code_description.href if diagnostic.code_description else None


async def _code_actions(client: LanguageClient, uri: str, diagnostics, only=None) -> list[types.CodeAction]:
    first = diagnostics[0].range if diagnostics else types.Range(types.Position(0, 0), types.Position(0, 0))
    result = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=first,
        context=types.CodeActionContext(diagnostics=list(diagnostics), only=only)))
    actions = []
    for item in result or []:
        if isinstance(item, types.Command) and item.command.startswith("{"):
            # lsprotocol's client-side converter reads any object with a "command" key as a Command,
            # even a CodeAction whose "command" is an object: rebuild the CodeAction it was.
            command = types.Command(**ast.literal_eval(item.command))
            item = types.CodeAction(title=item.title, kind=types.CodeActionKind.QuickFix, command=command)
        if isinstance(item, types.CodeAction):
            actions.append(item)
    return actions


async def test_diagnostics_on_open_and_after_change(client: LanguageClient, workspace: Path):
    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    diagnostics = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    (diagnostic,) = diagnostics
    assert diagnostic.code == "WL102"
    assert diagnostic.source == "warp-lint"
    assert diagnostic.severity == types.DiagnosticSeverity.Error
    assert _href(diagnostic) == rule_url("WL102")
    assert diagnostic.range == types.Range(types.Position(5, 4), types.Position(5, 22))
    assert "`a[i]`" in diagnostic.message

    clean = WL102_SOURCE.replace("a[i] = a[i] * a[i]", "b = a[i] * a[i]")
    change_document(client, uri, clean, 2)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 0)

    # The buffer is linted, not the file: the file on disk still holds the hazard.
    assert "a[i] = a[i] * a[i]" in (workspace / "kernels.py").read_text()
    change_document(client, uri, "\n\n" + WL102_SOURCE, 3)
    diagnostics = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    assert diagnostics[0].range.start.line == 7


async def test_only_the_latest_version_is_published(client: LanguageClient, workspace: Path):
    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    clean = WL102_SOURCE.replace("a[i] = a[i] * a[i]", "b = a[i] * a[i]")
    for version in range(2, 30):  # faster than the debounce: only the last one matters
        change_document(client, uri, WL102_SOURCE if version % 2 else clean, version)
    change_document(client, uri, WL102_SOURCE + "\n" + WL102_SOURCE.split("\n", 2)[2].replace("square", "cube"), 30)
    diagnostics = await wait_for_diagnostics(client, uri, lambda d: len(d) == 2)
    assert [d.range.start.line for d in diagnostics] == [5, 10]
    await asyncio.sleep(0.3)
    assert len(client.diagnostics[uri]) == 2


async def test_safe_fix_is_a_quick_fix_and_clears_the_diagnostic(client: LanguageClient, workspace: Path):
    uri = open_document(client, workspace / "scale.py", WL101_SOURCE)
    diagnostics = await wait_for_diagnostics(client, uri, lambda d: len(d) == 3)
    assert set(_codes(diagnostics)) == {"WL101"}
    assert all(d.data and d.data["fix"]["safe"] for d in diagnostics)

    actions = await _code_actions(client, uri, diagnostics[:1])
    fixes = [a for a in actions if a.is_preferred]
    assert len(fixes) == 1 and fixes[0].kind == types.CodeActionKind.QuickFix
    # Versioned edits: a client refuses them if the buffer changed meanwhile.
    assert fixes[0].edit.document_changes[0].text_document.version == 1
    fixed = apply_edits(WL101_SOURCE, edits_for(fixes[0].edit, uri))
    assert fixed == WL101_FIXED

    change_document(client, uri, fixed, 2)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 0)


async def test_fix_all_source_action(client: LanguageClient, workspace: Path):
    text = WL101_SOURCE + "\n\n" + WL101_SOURCE.split("\n", 2)[2].replace("scale", "scale2")
    uri = open_document(client, workspace / "scale.py", text)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 6)

    actions = await _code_actions(client, uri, [], only=[types.CodeActionKind.SourceFixAll])
    (fix_all,) = actions
    assert fix_all.kind == "source.fixAll.warp-lint"
    fixed = apply_edits(text, edits_for(fix_all.edit, uri))
    assert fixed.count("y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)") == 2 and ".x =" not in fixed

    # Offered lazily (resolved on demand) in a plain code-action request.
    actions = await _code_actions(client, uri, [])
    (lazy,) = [a for a in actions if a.kind == "source.fixAll.warp-lint"]
    assert lazy.edit is None
    resolved = await client.code_action_resolve_async(lazy)
    assert apply_edits(text, edits_for(resolved.edit, uri)) == fixed


async def test_disable_for_this_line(client: LanguageClient, workspace: Path):
    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    diagnostics = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    actions = await _code_actions(client, uri, diagnostics)
    (noqa,) = [a for a in actions if a.title == "Disable WL102 for this line"]
    text = apply_edits(WL102_SOURCE, edits_for(noqa.edit, uri))
    assert text.splitlines()[5] == "    a[i] = a[i] * a[i]  # noqa: WL102"
    change_document(client, uri, text, 2)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 0)

    # An existing `# noqa: ...` for another code is extended, not duplicated.
    other = WL102_SOURCE.replace("a[i] * a[i]\n", "a[i] * a[i]  # keep # noqa: WL101\n")
    change_document(client, uri, other, 3)
    diagnostics = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    actions = await _code_actions(client, uri, diagnostics)
    (noqa,) = [a for a in actions if a.title == "Disable WL102 for this line"]
    text = apply_edits(other, edits_for(noqa.edit, uri))
    assert text.splitlines()[5] == "    a[i] = a[i] * a[i]  # keep # noqa: WL101, WL102"


async def test_hover_shows_rule_docs(client: LanguageClient, workspace: Path):
    text = WL102_SOURCE + "x = 1  # noqa: WL101, WL104\n"
    uri = open_document(client, workspace / "kernels.py", text)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(5, 10)))
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value.startswith("# array-read-then-write (WL102)")
    assert "## Why is this bad?" in hover.contents.value

    line = text.splitlines()[6]
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(6, line.index("WL104") + 2)))
    assert hover.contents.value.startswith("# ") and "(WL104)" in hover.contents.value.splitlines()[0]

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(0, 3)))
    assert hover is None


async def test_positions_in_utf16_past_non_ascii_text(client: LanguageClient, workspace: Path):
    prefix = '    s = "é😀"; '
    text = WL102_SOURCE.replace("    a[i] = a[i] * a[i]\n", prefix + "a[i] = a[i] * a[i]  # ça 😀\n")
    uri = open_document(client, workspace / "kernels.py", text)
    (diagnostic,) = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    start = len(prefix.encode("utf-16-le")) // 2
    assert start == len(prefix) + 1  # the emoji is two UTF-16 units
    assert diagnostic.range == types.Range(types.Position(5, start), types.Position(5, start + 18))
    assert text[utf16_offset(text, diagnostic.range.start):utf16_offset(text, diagnostic.range.end)] == \
        "a[i] = a[i] * a[i]"

    actions = await _code_actions(client, uri, [diagnostic])
    (noqa,) = [a for a in actions if a.title == "Disable WL102 for this line"]
    fixed = apply_edits(text, edits_for(noqa.edit, uri))
    assert fixed.splitlines()[5] == prefix + "a[i] = a[i] * a[i]  # ça 😀  # noqa: WL102"

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(5, start + 1)))
    assert hover is not None and "(WL102)" in hover.contents.value


async def test_pull_diagnostics(pull_client: LanguageClient, workspace: Path):
    client = pull_client
    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert report.kind == "full"
    assert _codes(report.items) == ["WL102"]
    assert _href(report.items[0]) == rule_url("WL102")

    again = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=uri), previous_result_id=report.result_id))
    assert again.kind == "unchanged" and again.result_id == report.result_id

    change_document(client, uri, WL102_SOURCE.replace("a[i] = a[i] * a[i]", "b = a[i] * a[i]"), 2)
    report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=uri), previous_result_id=report.result_id))
    assert report.kind == "full" and len(report.items) == 0
    await asyncio.sleep(0.2)
    assert uri not in client.diagnostics  # a pull client gets no pushed diagnostics as well


async def test_configuration_per_folder(client: LanguageClient, workspace: Path):
    sub = workspace / "vendored"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[tool.warp-lint]\nignore = ["WL102"]\n', encoding="utf-8")
    inner = open_document(client, sub / "kernels.py", WL102_SOURCE)
    outer = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    await wait_for_diagnostics(client, outer, lambda d: len(d) == 1)
    await wait_for_diagnostics(client, inner, lambda d: len(d) == 0)

    # The root's target-warp-version (<1.14) applies: WL101 fires there.
    scale = open_document(client, workspace / "scale.py", WL101_SOURCE)
    await wait_for_diagnostics(client, scale, lambda d: len(d) == 3)


async def test_broken_configuration_is_a_message_not_a_crash(client: LanguageClient, workspace: Path):
    broken = workspace / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text('[tool.warp-lint]\nselct = ["WL1"]\n', encoding="utf-8")
    uri = open_document(client, broken / "kernels.py", WL102_SOURCE)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not client.messages and loop.time() < deadline:
        await asyncio.sleep(0.02)
    (message,) = client.messages
    assert message.type == types.MessageType.Error and "selct" in message.message and "select" in message.message

    # Still serving, and the same error is not repeated on every keystroke.
    good = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    await wait_for_diagnostics(client, good, lambda d: len(d) == 1)
    change_document(client, uri, WL102_SOURCE + "\n", 2)
    await asyncio.sleep(0.3)
    assert len(client.messages) == 1


async def test_confirm_command_returns_a_verdict_without_blocking_diagnostics(client: LanguageClient,
                                                                             workspace: Path):
    if importlib.util.find_spec("warp_lint.runtime") is None:
        pytest.skip("warp_lint.runtime (the runtime checker) is not importable")
    try:
        import warp_lint.runtime  # noqa: F401
    except ImportError as error:
        pytest.skip(f"warp_lint.runtime is not importable: {error}")
    if importlib.util.find_spec("warp") is None:
        pytest.skip("warp-lang is not installed")

    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    (diagnostic,) = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    actions = await _code_actions(client, uri, [diagnostic])
    (action,) = [a for a in actions if a.command and a.command.command == "warp-lint.confirm"]

    confirm = asyncio.ensure_future(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=action.command.command, arguments=action.command.arguments)))
    # Diagnostics keep flowing while the kernel compiles in a child process.
    clean = WL102_SOURCE.replace("a[i] = a[i] * a[i]", "b = a[i] * a[i]")
    change_document(client, uri, clean, 2)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 0)
    assert not confirm.done(), "the confirmation finished before a lint of the buffer: diagnostics were blocked?"

    result = await asyncio.wait_for(confirm, timeout=300)
    (verdict,) = result["results"]
    assert verdict["code"] == "WL102" and verdict["line"] == 5
    assert verdict["status"] == "confirmed", verdict
    assert "gradient-mismatch" in verdict["reason"] and "max |AD - FD|" in verdict["reason"]

    # The verdict shows in the diagnostic's message once the finding is back.
    change_document(client, uri, WL102_SOURCE, 3)
    (diagnostic,) = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    assert "runtime: confirmed: gradient-mismatch" in diagnostic.message

    # The `[uri, line]` form: nothing to confirm on a line without a finding.
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="warp-lint.confirm", arguments=[uri, 0]))
    assert result["results"] == [] and "nothing to confirm" in result["message"]


async def test_confirm_refuses_an_unsaved_buffer(client: LanguageClient, workspace: Path):
    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)
    change_document(client, uri, "# edited\n" + WL102_SOURCE, 2)
    (diagnostic,) = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1 and d[0].range.start.line == 6)
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="warp-lint.confirm", arguments=[uri, json.loads(json.dumps(
            client.protocol._converter.unstructure(diagnostic)))]))
    assert result["results"] == [] and "save the file" in result["message"]
