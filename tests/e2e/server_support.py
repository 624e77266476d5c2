"""Helpers for the server end-to-end tests: `specls serve` as a subprocess behind a pytest-lsp client."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp_server.typist.client import to_plain

REPO = Path(__file__).resolve().parents[2]


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lsp_server.app.cli", "serve", *args]


class Session:
    """A started, initialized client, with what the server has told it."""

    def __init__(self, client: LanguageClient, result: types.InitializeResult) -> None:
        self.client = client
        self.result = result
        self.statuses: list[dict[str, Any]] = client.specls_statuses  # type: ignore[attr-defined]
        self.versions: dict[str, int] = {}
        self.texts: dict[str, str] = {}

    async def wait_for_state(self, *states: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for status in self.statuses:
                if status.get("state") in states:
                    return status
            await asyncio.sleep(0.02)
        raise TimeoutError(f"no status in {states}; got {self.statuses}")

    def open(self, uri: str, text: str, language_id: str = "python") -> None:
        self.versions[uri] = 1
        self.texts[uri] = text
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, language_id, 1, text))
        )

    def end(self, uri: str) -> types.Position:
        """The position after the last character (UTF-16 units; the tests use BMP text at the end)."""
        lines = self.texts[uri].split("\n")
        return types.Position(len(lines) - 1, len(lines[-1].encode("utf-16-le")) // 2)

    def type(self, uri: str, chars: str) -> None:
        """Insert `chars` at the end of the document, incrementally, as an editor does."""
        end = self.end(uri)
        self.versions[uri] += 1
        self.texts[uri] += chars
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(self.versions[uri], uri),
                [types.TextDocumentContentChangePartial(types.Range(end, end), chars)],
            )
        )

    def backspace(self, uri: str) -> None:
        end = self.end(uri)
        self.versions[uri] += 1
        self.texts[uri] = self.texts[uri][:-1]
        start = types.Position(end.line, end.character - 1)
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(self.versions[uri], uri),
                [types.TextDocumentContentChangePartial(types.Range(start, end), "")],
            )
        )

    def inline_at(self, uri: str, position: types.Position) -> asyncio.Future[Any]:
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri),
            position=position,
        )
        return asyncio.ensure_future(self.client.text_document_inline_completion_async(params))

    def inline(self, uri: str) -> asyncio.Future[Any]:
        return self.inline_at(uri, self.end(uri))

    async def suggestion(self, uri: str, timeout: float = 30) -> str:
        """The text of the inline suggestion at the end of `uri` ("" for an empty answer)."""
        result = await asyncio.wait_for(self.inline(uri), timeout)
        return result.items[0].insert_text if result is not None and result.items else ""

    async def stats(self) -> dict[str, Any]:
        result = await asyncio.wait_for(self.client.protocol.send_request_async("specls/stats", {}), 10)
        return to_plain(result)


async def start_session(
    args: Sequence[str] = ("--backend", "fake"),
    initialization_options: dict[str, Any] | None = None,
    capabilities: types.ClientCapabilities | None = None,
    wait_ready: bool = True,
) -> Session:
    client = await ClientServerConfig(server_command=serve_command(*args)).start()
    assert isinstance(client, LanguageClient)
    statuses: list[dict[str, Any]] = []
    client.specls_statuses = statuses  # type: ignore[attr-defined]

    @client.feature("specls/status")
    def on_status(params: Any) -> None:
        statuses.append(to_plain(params))

    if capabilities is None:
        capabilities = types.ClientCapabilities(
            window=types.WindowClientCapabilities(work_done_progress=True),
            general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
        )
    result = await asyncio.wait_for(
        client.initialize_session(
            types.InitializeParams(capabilities=capabilities, initialization_options=initialization_options)
        ),
        30,
    )
    session = Session(client, result)
    if wait_ready:
        await session.wait_for_state("ready", "error")
    return session


async def stop_session(session: Session) -> None:
    try:
        await asyncio.wait_for(session.client.shutdown_session(), 15)
    finally:
        await session.client.stop()
