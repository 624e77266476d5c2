"""The documents: open, change and close go to the `DocumentStore` under `Scheduler.editing()`, then tell
the scheduler, which stops a generation the edit made stale."""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types

from lsp_server.documents import PositionError, TextChange, UnknownDocumentError
from lsp_server.handlers.guard import field, guarded
from lsp_server.language_server import SpeclsServer


@guarded(None)
def did_open(ls: SpeclsServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    with ls.scheduler.editing() as store:
        store.open(doc.uri, doc.language_id, doc.version, doc.text)
    ls.scheduler.document_changed(doc.uri)
    ls.scheduler.document_opened(doc.uri)


@guarded(None)
def did_save(ls: SpeclsServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.scheduler.document_saved(params.text_document.uri)


CURSOR_NOTIFICATION = "specls/cursor"


@guarded(None)
def cursor(ls: SpeclsServer, params: Any) -> None:
    """`specls/cursor` {textDocument: {uri}, position}: where the user is (focus, selection, visible range),
    so the server can warm its cache for the next request there."""
    document, position = field(params, "textDocument"), field(params, "position")
    uri, line, character = field(document, "uri"), field(position, "line"), field(position, "character")
    if isinstance(uri, str) and isinstance(line, int) and isinstance(character, int):
        ls.scheduler.cursor_moved(uri, line, character)


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
    except PositionError as exc:  # OutOfSyncError included
        ls.log(
            logging.ERROR,
            f"didChange for {uri} rejected; out of sync, no suggestions until its full text: {exc}",
        )
        ls.scheduler.document_closed(uri)  # stop and forget what was generated for the old copy
        return
    ls.scheduler.document_changed(uri)
    if not ls.store.get(uri).servable:  # a lone carriage return arrived
        ls.scheduler.document_closed(uri)


@guarded(None)
def did_close(ls: SpeclsServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.scheduler.document_closed(uri)
    try:
        with ls.scheduler.editing() as store:
            store.close(uri)
    except UnknownDocumentError:  # a client's slip, not a server error
        ls.log(logging.WARNING, f"didClose for {uri}, which is not open; ignored")
