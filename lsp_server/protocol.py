"""The JSON-RPC side of the server: pygls' protocol with the changes specls needs, and the capability
choice made at `initialize`. Handlers never see this module; `SpeclsServer` (`language_server.py`) plugs it in."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _UnreadableRequest:
    """A request whose params do not fit its method's type; answered with an error instead of silence."""

    id: int | str
    error: JsonRpcException


class SpeclsProtocol(LanguageServerProtocol):
    """pygls' protocol with two changes. It keeps no copy of each document: `DocumentStore` is the one place
    that owns text (pygls would re-split every line of a multi-MB file on each keystroke). And a request with
    malformed params gets an error response (pygls would log it and never answer). And `exit` ends the
    session through `on_exit` (set by `transport.py`), with the LSP exit code, instead of pygls'
    `sys.exit`, which its own runner turned into status 0 either way."""

    on_exit: Callable[[int], None] | None = None

    @property
    def shutdown_received(self) -> bool:
        return bool(self._shutdown)

    def structure_message(self, data: dict[str, Any]) -> Any:
        if "method" in data and "params" not in data:  # optional in JSON-RPC; pygls' types require it
            data["params"] = None
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data and isinstance(data["id"], int | str):
                return _UnreadableRequest(data["id"], exc)
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _UnreadableRequest):
            logger.warning("request %s has malformed params: %s", message.id, message.error.__cause__)
            self._send_response(message.id, error=message.error.to_response_error())
            return
        super().handle_message(message)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        if (handler := self.fm.features.get(types.EXIT)) is not None:
            yield handler, args, None
        code = 0 if self._shutdown else 1  # the LSP exit code
        if self.on_exit is None:
            raise SystemExit(code)
        self.on_exit(code)

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Any:
        result = yield from super().lsp_initialize(params)
        if supports_inline_completion(params.capabilities):
            # One completion path per client: offered both, VS Code asks both at every keystroke and shows a
            # suggest-widget row that Tab takes instead of the ghost text.
            result.capabilities.completion_provider = None
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None


def supports_inline_completion(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client asks `textDocument/inlineCompletion` itself; `textDocument/completion` is the
    fallback for clients that do not."""
    text_document = capabilities.text_document
    return text_document is not None and text_document.inline_completion is not None


GROWN_NOTIFICATION = "specls/suggestionGrown"
REFRESH_CAPABILITY = "speclsSuggestionGrown"  # in the client's `experimental` capabilities


def refreshes_on_growth(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client asks again for a suggestion when told it grew (`specls/suggestionGrown`): then a
    request may be answered early with part of a suggestion, and the editor shows the rest when it is done."""
    experimental = capabilities.experimental
    return isinstance(experimental, dict) and experimental.get(REFRESH_CAPABILITY) is True
