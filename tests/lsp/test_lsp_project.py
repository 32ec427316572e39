"""The language server with the project model: diagnostics as ``warp-lint check`` gives them for
the same text, across files; every result reaching every client; answers from the last lint while
a new one runs."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lsp_helpers import WL102_SOURCE, change_document, many_kernels, open_document, wait_for_diagnostics
from lsprotocol import types
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.asyncio

KERNELS = textwrap.dedent("""\
    import warp as wp


    @wp.kernel
    def square(a: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] * a[i]


    @wp.kernel
    def fill(a: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] + 1.0
    """)

TRAIN = textwrap.dedent("""\
    import warp as wp

    from kernels import fill, square


    def train(n: int):
        a = wp.zeros(n, dtype=float, requires_grad=True)
        wp.launch(fill, dim=n, inputs=[a])
        tape = wp.Tape()
        with tape:
            wp.launch(square, dim=n, inputs=[a])
        tape.backward(grads={a: wp.ones(n, dtype=float)})
        return a.grad
    """)


def _cli_findings(workspace: Path, *names: str) -> dict[str, list[tuple]]:
    done = subprocess.run([sys.executable, "-m", "warp_lint", "check", "--no-cache", "--output-format", "json",
                           *names], cwd=workspace, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    found: dict[str, list[tuple]] = {name: [] for name in names}
    for finding in json.loads(done.stdout):
        found[finding["filename"]].append((finding["code"], finding["location"]["row"] - 1,
                                           finding["location"]["column"] - 1, finding["message"]))
    return found


def _shown(diagnostics) -> list[tuple]:
    return sorted((d.code, d.range.start.line, d.range.start.character, d.message) for d in diagnostics)


async def test_diagnostics_follow_the_project_across_unsaved_buffers(client: LanguageClient, workspace: Path):
    kernels = open_document(client, workspace / "kernels.py", KERNELS)
    train = open_document(client, workspace / "train.py", TRAIN)
    cli = _cli_findings(workspace, "kernels.py", "train.py")
    # `square` is recorded on the tape in train.py: its WL102 counts; `fill` runs forward only: its does not.
    assert [code for code, *_ in cli["kernels.py"]] == ["WL102"]
    await wait_for_diagnostics(client, kernels, lambda d: _shown(d) == sorted(cli["kernels.py"]))
    await wait_for_diagnostics(client, train, lambda d: _shown(d) == sorted(cli["train.py"]))

    # An unsaved edit of train.py reaches kernels.py: `fill` is recorded now, `square` no longer.
    moved = TRAIN.replace("    wp.launch(fill, dim=n, inputs=[a])\n", "").replace(
        "        wp.launch(square, dim=n, inputs=[a])\n",
        "        wp.launch(fill, dim=n, inputs=[a])\n    wp.launch(square, dim=n, inputs=[a])\n")
    change_document(client, train, moved, 2)
    (diagnostic,) = await wait_for_diagnostics(client, kernels, lambda d: len(d) == 1 and d[0].range.start.line == 12)
    assert diagnostic.code == "WL102" and "`a[i]`" in diagnostic.message
    (workspace / "train.py").write_text(moved, encoding="utf-8")
    assert _shown([diagnostic]) == sorted(_cli_findings(workspace, "kernels.py")["kernels.py"])
    (workspace / "train.py").write_text(TRAIN, encoding="utf-8")

    # Closed unsaved, train.py counts as it is on disk again: `square` is recorded again.
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=train)))
    (diagnostic,) = await wait_for_diagnostics(client, kernels, lambda d: len(d) == 1 and d[0].range.start.line == 6)
    assert _shown([diagnostic]) == sorted(cli["kernels.py"])


async def test_hover_answers_from_the_last_lint_while_a_lint_runs(client: LanguageClient, workspace: Path):
    text = many_kernels(120)  # about 1,700 lines
    uri = open_document(client, workspace / "long.py", text)
    before = await wait_for_diagnostics(client, uri, lambda d: len(d) == 60, timeout=120)

    # A new import changes every kernel's context: every kernel is analysed again (a long lint).
    inserted = "import math\n" + WL102_SOURCE.split("\n", 1)[1].replace("square", "square_again")
    edited = text.replace("import warp as wp\n", "import warp as wp\n" + inserted, 1)
    change_document(client, uri, edited, 2)
    target = before[-1]  # moved down by the lines inserted above it
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(target.range.start.line + inserted.count("\n"), target.range.start.character + 1)))
    assert len(client.diagnostics[uri]) == 60, "the new lint was done before the hover: no lint was running"
    assert hover is not None and "(WL102)" in hover.contents.value.splitlines()[0]
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 61, timeout=120)


async def _pull_if_offered(client: LanguageClient, uri: str) -> None:
    """What Neovim does after opening or changing a buffer: pull, when the server offers it."""
    if client.server_capabilities.diagnostic_provider is None:
        return
    report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    client.diagnostics[uri] = report.items


async def test_a_client_that_cannot_be_asked_to_pull_again_sees_configuration_changes(
        pull_only_client: LanguageClient, workspace: Path):
    client = pull_only_client
    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    await _pull_if_offered(client, uri)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)

    config = workspace / "pyproject.toml"
    config.write_text(config.read_text(encoding="utf-8") + 'ignore = ["WL102"]\n', encoding="utf-8")
    client.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=config.as_uri())))
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 0)


async def test_a_client_that_cannot_be_asked_to_pull_again_sees_the_verdict(pull_only_client: LanguageClient,
                                                                            workspace: Path):
    if importlib.util.find_spec("warp") is None:
        pytest.skip("warp-lang is not installed")
    client = pull_only_client
    uri = open_document(client, workspace / "kernels.py", WL102_SOURCE)
    await _pull_if_offered(client, uri)
    await wait_for_diagnostics(client, uri, lambda d: len(d) == 1)

    result = await asyncio.wait_for(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="warp-lint.confirm", arguments=[uri, 5])), timeout=300)
    assert [verdict["status"] for verdict in result["results"]] == ["confirmed"], result
    (diagnostic,) = await wait_for_diagnostics(client, uri, lambda d: len(d) == 1 and "runtime:" in d[0].message)
    assert "runtime: confirmed: gradient-mismatch" in diagnostic.message


async def test_related_locations_reach_the_client(client: LanguageClient, workspace: Path):
    """The tape that records a kernel's finding, in another file, is the diagnostic's related information."""
    kernels = open_document(client, workspace / "kernels.py", KERNELS)
    open_document(client, workspace / "train.py", TRAIN)
    (diagnostic,) = await wait_for_diagnostics(client, kernels, lambda d: len(d) == 1)
    related = diagnostic.related_information or []
    tape_line = TRAIN.splitlines().index("    with tape:")
    assert any(r.location.uri == (workspace / "train.py").resolve().as_uri() and
               r.location.range.start.line == tape_line and "tape" in r.message for r in related), related
    # ... and its differentiation context is the diagnostic's data, as in JSON and SARIF.
    assert diagnostic.data["differentiationContext"]["state"] == "differentiated", diagnostic.data
    assert "recorded on `tape`" in diagnostic.data["differentiationContext"]["reason"]
