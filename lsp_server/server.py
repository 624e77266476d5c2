"""The language server: thin handlers, one per LSP method. Scheduling lives in scheduler.py, documents in
documents.py, prompts in context/, settings in config.py; this module only translates between LSP and those.

Every handler is guarded: an exception is logged to the client (window/logMessage) and the request gets an
empty answer, so the server stays up whatever a client sends.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from lsp_server import __version__
from lsp_server.backends import create_backend
from lsp_server.config import ServerSettings, SettingsReport, apply_settings, settings_section
from lsp_server.documents import DocumentStore, PositionError, TextChange, UnknownDocumentError
from lsp_server.scheduler import BackendState, Scheduler, Suggestion

logger = logging.getLogger(__name__)

ACCEPT_COMMAND = "specls.accept"
STATUS_NOTIFICATION = "specls/status"
STATS_REQUEST = "specls/stats"
STATUS_INTERVAL_S = 0.5  # at most two status notifications per second after completions
_LOG_LEVELS = {
    logging.ERROR: types.MessageType.Error,
    logging.WARNING: types.MessageType.Warning,
    logging.INFO: types.MessageType.Info,
}


@dataclass(frozen=True)
class _UnreadableRequest:
    """A request whose params do not fit its method's type; answered with an error instead of silence."""

    id: int | str
    error: JsonRpcException


class SpeclsProtocol(LanguageServerProtocol):
    """pygls' protocol with two changes. It keeps no copy of each document: `DocumentStore` is the one place
    that owns text (pygls would re-split every line of a multi-MB file on each keystroke). And a request with
    malformed params gets an error response (pygls would log it and never answer)."""

    def structure_message(self, data: dict[str, Any]) -> Any:
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


class SpeclsServer(LanguageServer):
    def __init__(self, cli_settings: Mapping[str, Any] | None = None) -> None:
        super().__init__("specls", __version__, protocol_cls=SpeclsProtocol)
        self.cli_settings = dict(cli_settings or {})  # applied last: the command line wins
        self.client_settings: dict[str, Any] = {}
        self.settings, report = self.resolve_settings()
        self.pending_report = report
        self.store = DocumentStore()
        self.scheduler = Scheduler(
            self.store,
            self.settings,
            create_backend,
            on_state=self.on_backend_state,
            on_log=self.log,
            on_completion=self.schedule_status,
        )
        self.progress_token: str | None = None
        self.progress_count = 0
        self.reload_task: asyncio.Future[None] | None = None  # held so the task is not collected mid-way
        self.accepted_ids: set[str] = set()
        self._last_status = 0.0
        self._status_pending = False

    # --- settings ---

    def resolve_settings(self) -> tuple[ServerSettings, SettingsReport]:
        settings, report = apply_settings(self.client_settings, ServerSettings())
        settings, cli_report = apply_settings(self.cli_settings, settings)
        report.invalid += cli_report.invalid
        report.unknown += cli_report.unknown
        return settings, report

    def report_settings(self, report: SettingsReport) -> None:
        for problem in report.invalid:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"specls: {problem}"))
            self.log(logging.WARNING, problem)
        for note in report.unknown:
            self.log(logging.INFO, note)

    # --- messages to the client ---

    def log(self, level: int, message: str) -> None:
        logger.log(level, message)
        try:
            self.window_log_message(
                types.LogMessageParams(_LOG_LEVELS.get(level, types.MessageType.Log), message)
            )
        except Exception:  # the client is gone; the local log has it
            logger.debug("could not send a log message", exc_info=True)

    def on_backend_state(self, state: BackendState, message: str) -> None:
        if state == "error":
            self.log(logging.ERROR, message)
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"specls: {message}"))
        elif state == "ready":
            self.log(logging.INFO, message)
        if state != "loading" and self.progress_token is not None:
            self.work_done_progress.end(self.progress_token, types.WorkDoneProgressEnd(message=message))
            self.progress_token = None
        self.send_status(message)

    def send_status(self, message: str = "") -> None:
        stats = self.scheduler.stats
        info = self.scheduler.info
        self._last_status = time.monotonic()
        self.protocol.notify(
            STATUS_NOTIFICATION,
            {
                "state": self.scheduler.state,
                "message": message,
                "model": info.target if info is not None else None,
                "lastLatencyMs": round(stats.latencies_ms[-1], 2) if stats.latencies_ms else None,
                "acceptanceRate": stats.acceptance_rate(),
            },
        )

    def schedule_status(self) -> None:
        """Send a status after a completion, at most every STATUS_INTERVAL_S (the last one always arrives)."""
        wait = self._last_status + STATUS_INTERVAL_S - time.monotonic()
        if wait <= 0:
            self.send_status()
        elif not self._status_pending:
            self._status_pending = True

            def send_later() -> None:
                self._status_pending = False
                self.send_status()

            asyncio.get_running_loop().call_later(wait, send_later)


# --- guards ---

Handler = TypeVar("Handler", bound=Callable[..., Any])


def guarded(default: Any) -> Callable[[Handler], Handler]:
    """Turn an exception in a handler (plain or coroutine) into a logged error and `default`.
    Cancellation ($/cancelRequest) still propagates to pygls: CancelledError is not an Exception."""

    def fail(ls: SpeclsServer, handler: Callable[..., Any], exc: Exception) -> Any:
        logger.exception("%s failed", handler.__name__)
        ls.log(logging.ERROR, f"{handler.__name__} failed: {type(exc).__name__}: {exc}")
        return default

    def decorate(handler: Handler) -> Handler:
        if inspect.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def run_async(ls: SpeclsServer, params: Any) -> Any:
                try:
                    return await handler(ls, params)
                except Exception as exc:
                    return fail(ls, handler, exc)

            return cast(Handler, run_async)

        @functools.wraps(handler)
        def run(ls: SpeclsServer, params: Any) -> Any:
            try:
                return handler(ls, params)
            except Exception as exc:
                return fail(ls, handler, exc)

        return cast(Handler, run)

    return decorate


def _field(params: Any, name: str) -> Any:
    """Read a field of a custom notification's params (pygls passes them through as a dict)."""
    return params.get(name) if isinstance(params, Mapping) else getattr(params, name, None)


# --- lifecycle ---


@guarded(None)
def initialize(ls: SpeclsServer, params: types.InitializeParams) -> None:
    encoding = ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities)
    ls.store.position_encoding = (
        encoding.value if isinstance(encoding, types.PositionEncodingKind) else encoding
    )
    options = params.initialization_options
    if isinstance(options, Mapping):
        ls.client_settings = dict(settings_section(options))
    elif options is not None:
        ls.pending_report.invalid.append("initializationOptions must be an object; ignored")
    ls.settings, report = ls.resolve_settings()
    ls.pending_report.invalid += report.invalid
    ls.pending_report.unknown += report.unknown
    ls.scheduler.update_settings(ls.settings)


@guarded(None)
async def initialized(ls: SpeclsServer, params: types.InitializedParams) -> None:
    ls.report_settings(ls.pending_report)
    ls.pending_report = SettingsReport()
    ls.scheduler.start(asyncio.get_running_loop())
    await load_with_progress(ls)


async def load_with_progress(ls: SpeclsServer) -> None:
    """Start loading the backend in the background, with $/progress when the client supports it (the
    progress ends in `on_backend_state`)."""
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
        ls.scheduler.update_settings(ls.settings)


# --- documents ---


@guarded(None)
def did_open(ls: SpeclsServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    with ls.scheduler.editing() as store:
        store.open(doc.uri, doc.language_id, doc.version, doc.text)
    ls.scheduler.document_changed(doc.uri)


@guarded(None)
def did_change(ls: SpeclsServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    changes = [
        TextChange(
            (c.range.start.line, c.range.start.character, c.range.end.line, c.range.end.character)
            if isinstance(c, types.TextDocumentContentChangePartial)
            else None,
            c.text,
        )
        for c in params.content_changes
    ]
    try:
        with ls.scheduler.editing() as store:
            store.change(uri, params.text_document.version, changes)
    except UnknownDocumentError:
        ls.log(logging.WARNING, f"didChange for {uri}, which is not open; ignored")
        return
    except PositionError as exc:
        ls.log(logging.ERROR, f"didChange for {uri} rejected, the document is now out of sync: {exc}")
    ls.scheduler.document_changed(uri)


@guarded(None)
def did_close(ls: SpeclsServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.scheduler.document_closed(uri)
    with ls.scheduler.editing() as store:
        store.close(uri)


# --- completions ---


def _accept_command(suggestion_id: str) -> types.Command:
    return types.Command(title="specls accepted", command=ACCEPT_COMMAND, arguments=[suggestion_id])


@guarded(None)
async def inline_completion(
    ls: SpeclsServer, params: types.InlineCompletionParams
) -> types.InlineCompletionList | None:
    uri, position = params.text_document.uri, params.position
    suggestion = await ls.scheduler.complete(uri, position.line, position.character)
    if suggestion is None:
        return types.InlineCompletionList(items=[])
    item = types.InlineCompletionItem(
        insert_text=suggestion.text,
        range=types.Range(position, position),
        command=_accept_command(suggestion.suggestion_id),
    )
    selected = params.context.selected_completion_info if params.context is not None else None
    if selected is not None:
        item = _extending_the_selected_item(ls, uri, position, item, selected) or item
    return types.InlineCompletionList(items=[item])


def _extending_the_selected_item(
    ls: SpeclsServer,
    uri: str,
    position: types.Position,
    item: types.InlineCompletionItem,
    selected: types.SelectedCompletionInfo,
) -> types.InlineCompletionItem | None:
    """While the client's suggest widget is open, the spec lets it show only an item that uses the selected
    entry's range and extends its text (VS Code drops any other). The same suggestion, re-anchored at that
    range, qualifies when it starts with the selected entry's text; None when it does not."""
    start, end = selected.range.start, selected.range.end
    if start.line != position.line or end != position or start.character > position.character:
        return None
    try:
        begin = ls.store.offset_at(uri, start.line, start.character)
        cursor = ls.store.offset_at(uri, position.line, position.character)
        typed = ls.store.get(uri).text[begin:cursor]
    except (UnknownDocumentError, PositionError):
        return None
    extended = typed + str(item.insert_text)
    if not extended.startswith(selected.text):
        return None
    return types.InlineCompletionItem(insert_text=extended, range=selected.range, command=item.command)


@guarded(None)
async def completion(ls: SpeclsServer, params: types.CompletionParams) -> types.CompletionList | None:
    uri, position = params.text_document.uri, params.position
    suggestion = await ls.scheduler.complete(uri, position.line, position.character)
    empty = types.CompletionList(is_incomplete=True, items=[])
    if suggestion is None:
        return empty
    item = _completion_item(ls, uri, position, suggestion)
    return types.CompletionList(is_incomplete=True, items=[item]) if item is not None else empty


def _completion_item(
    ls: SpeclsServer, uri: str, position: types.Position, suggestion: Suggestion
) -> types.CompletionItem | None:
    """One item whose edit replaces the word before the cursor with that word plus the suggestion, so that
    clients filtering by the typed word keep it."""
    try:
        document = ls.store.get(uri)
        cursor = ls.store.offset_at(uri, position.line, position.character)
        word_start = cursor
        while word_start > 0 and (
            document.text[word_start - 1].isalnum() or document.text[word_start - 1] == "_"
        ):
            word_start -= 1
        start_line, start_character = ls.store.position_at(uri, word_start)
    except (UnknownDocumentError, PositionError):
        return None  # the document changed while we generated; the client asks again
    word = document.text[word_start:cursor]
    return types.CompletionItem(
        label=completion_label(word + suggestion.text),
        kind=types.CompletionItemKind.Text,
        detail="specls",
        filter_text=word + suggestion.text,
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(
            range=types.Range(types.Position(start_line, start_character), position),
            new_text=word + suggestion.text,
        ),
        command=_accept_command(suggestion.suggestion_id),
    )


def completion_label(inserted: str, width: int = 80) -> str:
    """The row's label shows what the item inserts, spaces included: its first line, with `⏎` for each line
    break before it and `…` when it is cut short or more lines follow."""
    breaks = len(inserted) - len(inserted.lstrip("\r\n"))
    lines = inserted.lstrip("\r\n").splitlines() or [""]
    label = "⏎" * inserted[:breaks].count("\n") + lines[0].rstrip()
    more = len(lines) > 1 or len(label) > width
    return label[: width - 1] + "…" if more else label


# --- statistics (local only) ---


def accept_command(ls: SpeclsServer, *arguments: Any) -> None:
    """`specls.accept`, the command every suggestion carries: the client runs it when the user accepts."""
    _count_accept(ls, arguments[0] if arguments else None)


def _count_accept(ls: SpeclsServer, suggestion_id: Any) -> None:
    key = str(suggestion_id)
    if key in ls.accepted_ids:  # the command and specls/didAccept may both report one accept
        return
    if len(ls.accepted_ids) > 10_000:
        ls.accepted_ids.clear()
    ls.accepted_ids.add(key)
    ls.scheduler.stats.accepted += 1
    ls.schedule_status()


@guarded(None)
def did_show(ls: SpeclsServer, params: Any) -> None:
    ls.scheduler.stats.shown += 1


@guarded(None)
def did_accept(ls: SpeclsServer, params: Any) -> None:
    _count_accept(ls, _field(params, "suggestionId"))


@guarded(None)
def did_partially_accept(ls: SpeclsServer, params: Any) -> None:
    ls.scheduler.stats.partially_accepted += 1


@guarded(None)
def did_reject(ls: SpeclsServer, params: Any) -> None:
    ls.scheduler.stats.rejected += 1
    ls.schedule_status()


@guarded({})
def stats_request(ls: SpeclsServer, params: Any) -> dict[str, Any]:
    result = ls.scheduler.stats.as_dict()
    result["state"] = ls.scheduler.state
    result["settings"] = {
        "backend": ls.settings.backend,
        "firstLineFirst": ls.settings.first_line_first,
        "positionEncoding": ls.store.position_encoding,
    }
    return result


def create_server(cli_settings: Mapping[str, Any] | None = None) -> SpeclsServer:
    server = SpeclsServer(cli_settings)
    server.feature(types.INITIALIZE)(initialize)
    server.feature(types.INITIALIZED)(initialized)
    server.feature(types.SHUTDOWN)(shutdown)
    server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(did_change_configuration)
    server.feature(types.TEXT_DOCUMENT_DID_OPEN)(did_open)
    server.feature(types.TEXT_DOCUMENT_DID_CHANGE)(did_change)
    server.feature(types.TEXT_DOCUMENT_DID_CLOSE)(did_close)
    server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())(inline_completion)
    server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions())(completion)
    server.command(ACCEPT_COMMAND)(accept_command)
    server.feature("specls/didShow")(did_show)
    server.feature("specls/didAccept")(did_accept)
    server.feature("specls/didPartiallyAccept")(did_partially_accept)
    server.feature("specls/didReject")(did_reject)
    server.feature(STATS_REQUEST)(stats_request)
    return server
