"""The JSON-RPC side of the server: pygls' protocol with the changes specls needs, and the capability
choice made at `initialize`. Handlers never see this module; `SpeclsServer` (`language_server.py`) plugs it in."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from lsp_server.secrets import redact, redact_secrets

logger = logging.getLogger(__name__)


PARSE_ERROR = -32700
INVALID_REQUEST = -32600


@dataclass(frozen=True)
class _InvalidRequest:
    """A message that is not a JSON-RPC 2.0 request or notification (no "jsonrpc", an id that is an object);
    answered with InvalidRequest, its id null when the id itself is what is wrong."""

    id: int | str | None
    reason: str
    method: str


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

    _initialize_received = False

    def structure_message(self, data: dict[str, Any]) -> Any:
        method = data.get("method")
        if isinstance(method, str) and (
            isinstance(data.get("id"), bool) or not isinstance(data.get("id"), int | str | None)
        ):
            kind = type(data["id"]).__name__
            return _InvalidRequest(None, f"an id must be a number or a string, not {kind}", str(method))
        if data.get("jsonrpc") != "2.0" and isinstance(method, str):
            request_id = data.get("id")
            return _InvalidRequest(request_id, 'not a JSON-RPC 2.0 message (no "jsonrpc": "2.0")', method)
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
        if isinstance(message, _InvalidRequest):
            logger.warning("invalid request %r (%s): %s", message.id, message.method[:80], message.reason)
            self.send_error(message.id, INVALID_REQUEST, f"specls: {message.reason}")
            return
        if not hasattr(message, "jsonrpc"):  # a JSON value that is no message at all (a number, a list)
            logger.warning("not a JSON-RPC message: %.80r", message)
            if not isinstance(message, dict):  # a response without "jsonrpc" is dropped, not answered
                self.send_error(None, INVALID_REQUEST, "specls: not a JSON-RPC message")
            return
        method = getattr(message, "method", None)
        request_id = getattr(message, "id", None) if method is not None else None
        if request_id is not None and self._shutdown and method != types.EXIT:
            # LSP: requests after shutdown error with InvalidRequest (pygls would drop them unanswered).
            logger.warning("request %r (%s) after shutdown refused", request_id, method)
            self.send_error(request_id, INVALID_REQUEST, "specls: the server is shutting down")
            return
        if method == types.INITIALIZE and request_id is not None:
            if self._initialize_received:
                logger.warning("a second initialize (%r) refused", request_id)
                self.send_error(request_id, INVALID_REQUEST, "specls: the server is already initialized")
                return
            self._initialize_received = True
        super().handle_message(message)

    def _send_data(self, data: Any) -> None:
        """pygls' sender, with every message passing `redact_secrets` on its way out: logMessage, showMessage,
        `specls/status`, `specls/stats` and every response (a key never leaves, whichever path it took)."""
        if not data:
            return
        if self.writer is None:
            logger.error("unable to send data: no transport")
            return
        try:
            body = redact_secrets(json.dumps(data, default=self._serialize_message))  # ASCII: len is bytes
            header = f"Content-Length: {len(body)}\r\nContent-Type: {self.CONTENT_TYPE}; charset={self.CHARSET}\r\n\r\n"
            self.writer.write((header + body).encode(self.CHARSET))
        except BrokenPipeError:
            raise
        except Exception as error:
            logger.exception("error sending data")
            self._server._report_server_error(error, JsonRpcInternalError)

    def send_error(self, request_id: int | str | None, code: int, message: str) -> None:
        """Answer `request_id` (null: an id that could not be read) with a JSON-RPC error."""
        error = {"code": code, "message": redact(message)}
        self._send_data({"jsonrpc": "2.0", "id": request_id, "error": error})

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
