"""The completions: `textDocument/inlineCompletion` (ghost text) and `textDocument/completion` (a one-item
list, for clients without inline completion). Both ask `Scheduler.complete` and shape its suggestion into
the item the client can show; every item carries the `specls.accept` command."""

from __future__ import annotations

from lsprotocol import types

from engine.words import word_start
from lsp_server.documents import PositionError, UnknownDocumentError
from lsp_server.handlers.guard import guarded
from lsp_server.language_server import SpeclsServer
from lsp_server.scheduling import Suggestion

ACCEPT_COMMAND = "specls.accept"


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
        insert_text=_in_line_endings_of(ls, uri, position.line, suggestion.text),
        range=types.Range(position, position),
        command=_accept_command(suggestion.suggestion_id),
    )
    selected = params.context.selected_completion_info if params.context is not None else None
    if selected is not None:
        item = _extending_the_selected_item(ls, uri, position, item, selected) or item
    return types.InlineCompletionList(items=[item])


def _in_line_endings_of(ls: SpeclsServer, uri: str, line: int, text: str) -> str:
    """`text` with the document's line breaks: a CRLF file gets CRLF suggestions (the model's text has the
    prompt's mix, the scheduler's comparisons use plain "\n")."""
    if "\n" not in text:
        return text
    try:
        ending = ls.store.get(uri).line_ending_at(line)
    except UnknownDocumentError:
        return text
    plain = text.replace("\r\n", "\n")
    return plain.replace("\n", ending) if ending != "\n" else plain


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
        start = word_start(document.text, cursor)
        start_line, start_character = ls.store.position_at(uri, start)
    except (UnknownDocumentError, PositionError):
        return None  # the document changed while we generated; the client asks again
    word = document.text[start:cursor]
    suggestion = Suggestion(
        _in_line_endings_of(ls, uri, position.line, suggestion.text), suggestion.suggestion_id
    )
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
