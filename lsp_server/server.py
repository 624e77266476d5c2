"""The language server: which handler answers which LSP method. The handlers are thin, one per method
(`handlers/`); the state they share is `SpeclsServer` (`language_server.py`), the wire-level changes are
`SpeclsProtocol` (`protocol.py`). Scheduling lives in scheduling/, documents in documents.py, prompts in
context/, settings in config.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lsprotocol import types

from engine.api import CompletionBackend
from lsp_server.backends import create_backend
from lsp_server.config import ServerSettings
from lsp_server.handlers import completions, documents, feedback, lifecycle
from lsp_server.language_server import SpeclsServer


def create_server(
    cli_settings: Mapping[str, Any] | None = None,
    backend_factory: Callable[[ServerSettings], CompletionBackend] = create_backend,
) -> SpeclsServer:
    server = SpeclsServer(cli_settings, backend_factory)
    server.feature(types.INITIALIZE)(lifecycle.initialize)
    server.feature(types.INITIALIZED)(lifecycle.initialized)
    server.feature(types.SHUTDOWN)(lifecycle.shutdown)
    server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(lifecycle.did_change_configuration)
    server.feature(types.TEXT_DOCUMENT_DID_OPEN)(documents.did_open)
    server.feature(types.TEXT_DOCUMENT_DID_CHANGE)(documents.did_change)
    server.feature(types.TEXT_DOCUMENT_DID_CLOSE)(documents.did_close)
    server.feature(types.TEXT_DOCUMENT_DID_SAVE)(documents.did_save)
    server.feature(documents.CURSOR_NOTIFICATION)(documents.cursor)
    server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())(
        completions.inline_completion
    )
    server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions())(completions.completion)
    server.command(completions.ACCEPT_COMMAND)(feedback.accept_command)
    server.feature("specls/didShow")(feedback.did_show)
    server.feature("specls/didAccept")(feedback.did_accept)
    server.feature("specls/didPartiallyAccept")(feedback.did_partially_accept)
    server.feature("specls/didReject")(feedback.did_reject)
    server.feature(feedback.STATS_REQUEST)(feedback.stats_request)
    return server
