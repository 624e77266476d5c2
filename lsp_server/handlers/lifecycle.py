"""The server's lifecycle: initialize (position encoding, client settings), initialized (start the
scheduler, load the backend), settings changes, shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder

from lsp_server.config import SettingsReport, settings_section
from lsp_server.context.workspace import WorkspaceFiles
from lsp_server.handlers.guard import guarded
from lsp_server.language_server import SpeclsServer
from lsp_server.protocol import refreshes_on_growth


@guarded(None)
def initialize(ls: SpeclsServer, params: types.InitializeParams) -> None:
    encoding = ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities)
    ls.store.position_encoding = (
        encoding.value if isinstance(encoding, types.PositionEncodingKind) else encoding
    )
    ls.scheduler.client_refreshes = refreshes_on_growth(params.capabilities)
    ls.store.workspace = WorkspaceFiles.from_uris(workspace_uris(params))
    options = params.initialization_options
    if isinstance(options, Mapping):
        ls.client_settings = dict(settings_section(options))
    elif options is not None:
        ls.pending_report.invalid.append("initializationOptions must be an object; ignored")
    ls.settings, report = ls.resolve_settings()
    ls.pending_report.invalid += report.invalid
    ls.pending_report.unknown += report.unknown
    ls.scheduler.update_settings(ls.settings)


def workspace_uris(params: types.InitializeParams) -> list[str]:
    """The workspace folders the client opened: `workspaceFolders`, else the deprecated root URI or path."""
    if params.workspace_folders:
        return [folder.uri for folder in params.workspace_folders]
    if params.root_uri:
        return [params.root_uri]
    return (
        [Path(params.root_path).as_uri()] if params.root_path and Path(params.root_path).is_absolute() else []
    )


@guarded(None)
async def initialized(ls: SpeclsServer, params: types.InitializedParams) -> None:
    ls.report_settings(ls.pending_report)
    ls.pending_report = SettingsReport()
    ls.scheduler.start(asyncio.get_running_loop())
    await load_with_progress(ls)


async def load_with_progress(ls: SpeclsServer) -> None:
    """Start loading the backend in the background, with $/progress when the client supports it (the
    progress ends in `SpeclsServer.on_backend_state`)."""
    window = ls.client_capabilities.window
    if window is not None and window.work_done_progress and ls.progress_token is None:
        ls.progress_count += 1
        token = f"specls-load-{ls.progress_count}"
        try:
            await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=5)
            ls.work_done_progress.begin(
                token,
                types.WorkDoneProgressBegin(title="specls", message=f"loading {ls.settings.backend} model"),
            )
            ls.progress_token = token
        except Exception as exc:  # progress is a nicety; loading goes on without it
            ls.log(logging.INFO, f"no progress reporting: {exc}")
    ls.scheduler.load(ls.settings)


@guarded(None)
def shutdown(ls: SpeclsServer, params: None) -> None:
    ls.scheduler.stop()


@guarded(None)
def did_change_configuration(ls: SpeclsServer, params: types.DidChangeConfigurationParams) -> None:
    section = settings_section(params.settings)
    if section is None:
        return
    ls.client_settings = dict(section) if isinstance(section, Mapping) else section
    previous = ls.settings
    ls.settings, report = ls.resolve_settings()
    ls.report_settings(report)
    if ls.settings.model_key() != previous.model_key():
        ls.reload_task = asyncio.ensure_future(load_with_progress(ls))
    else:
        ls.fit_settings_to_model()  # within the loaded model's window (and update the scheduler)
        if ls.scheduler.info is None:
            ls.scheduler.update_settings(ls.settings)
