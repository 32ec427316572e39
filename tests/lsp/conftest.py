"""End-to-end fixtures: the real ``warp-lint server`` over stdio, driven by pytest-lsp."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from lsp_helpers import SERVER, capabilities
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.warp-lint]\ntarget-warp-version = "<1.14"\n', encoding="utf-8")
    return root


async def _start(client: LanguageClient, workspace: Path, pull: bool, refresh: bool | None = None) -> None:
    result = await client.initialize_session(types.InitializeParams(
        capabilities=capabilities(pull, refresh),
        root_uri=workspace.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="project")],
        initialization_options={"confirm": {"device": "cpu", "cacheDir": str(workspace.parent / "kernels"),
                                            "timeout": 300}},
    ))
    client.server_capabilities = result.capabilities


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient, workspace: Path):
    await _start(lsp_client, workspace, pull=False)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def pull_client(lsp_client: LanguageClient, workspace: Path):
    await _start(lsp_client, workspace, pull=True)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def pull_only_client(lsp_client: LanguageClient, workspace: Path):
    """A client that pulls diagnostics but cannot be asked to pull again (Neovim up to 0.12)."""
    await _start(lsp_client, workspace, pull=True, refresh=False)
    yield
    await lsp_client.shutdown_session()
