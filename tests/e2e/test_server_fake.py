"""`specls serve --backend fake` through a real LSP client (pytest-lsp): protocol, scheduling and faults.

The fake backend generates scripted continuations with a controllable delay per token, so these tests can
hold a generation open and check what the scheduler does with it, without timing anything.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.e2e.server_support import REPO, serve_command, start_session, stop_session

pytestmark = pytest.mark.slow

URI = "file:///project/app.py"
OTHER = "file:///project/util.py"
GREET = ("def greet(", "name):\n    return 'hello ' + name")
COUNT = ("numbers = [", ", ".join(str(i) for i in range(15)) + "]")  # 45 fake tokens


def texts(result: types.InlineCompletionList | None) -> list[str]:
    return [item.insert_text for item in result.items] if result is not None else []


# These tests are about scheduling with slow scripted generations: they wait for whole suggestions unless
# they say otherwise (no mid-line partial answer, no first-line deadline, no prefetch that would add a
# generation; tests/unit/test_scheduler.py covers those).
WHOLE_ANSWERS = {"partialAfterMs": 0, "firstLineMs": 60_000, "prefetch": False}


def fake_options(*rules: tuple[str, str], delay_ms: float = 0, **settings: Any) -> dict[str, Any]:
    fake = {"rules": [list(rule) for rule in rules], "tokenDelayMs": delay_ms}
    return {"fake": fake, **WHOLE_ANSWERS, **settings}


async def test_capabilities_progress_and_a_first_suggestion() -> None:
    session = await start_session(
        initialization_options={"fake": {"rules": [list(GREET)], "loadDelayMs": 300}, "prefetch": False},
        wait_ready=False,
    )
    try:
        caps = session.result.capabilities
        assert caps.inline_completion_provider is not None
        assert caps.completion_provider is not None
        assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
        assert list(caps.execute_command_provider.commands) == ["specls.accept"]
        assert caps.position_encoding == types.PositionEncodingKind.Utf16

        session.open(URI, "import os\n\ndef greet(")
        early = await asyncio.wait_for(session.inline(URI), 5)  # still loading: answered empty at once
        assert texts(early) == []

        await session.wait_for_state("ready")
        reports = session.client.progress_reports["specls-load-1"]
        assert [type(r).__name__ for r in reports] == ["WorkDoneProgressBegin", "WorkDoneProgressEnd"]

        result = await asyncio.wait_for(session.inline(URI), 10)
        (item,) = result.items
        assert item.insert_text == GREET[1]
        assert item.range == types.Range(session.end(URI), session.end(URI))
        assert item.command.command == "specls.accept" and item.command.arguments
        await session.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="specls.accept", arguments=item.command.arguments)
        )
        suggestion_id = item.command.arguments[0]
        notify = session.client.protocol.notify
        notify("specls/didShow", {"uri": URI, "suggestionId": suggestion_id})
        notify("specls/didAccept", {"uri": URI, "suggestionId": suggestion_id})  # same accept as the command
        notify("specls/didPartiallyAccept", {"uri": URI, "suggestionId": "other", "acceptedLength": 3})
        notify("specls/didReject", {"uri": URI, "suggestionId": "another"})
        stats = await session.stats()
        assert stats["generations"] == 1
        assert (stats["shown"], stats["accepted"], stats["partially_accepted"], stats["rejected"]) == (
            1,
            1,
            1,
            1,
        )
        assert stats["acceptance_rate"] == 0.5
        statuses = [s for s in session.statuses if s["state"] == "ready"]
        assert statuses[-1]["model"] == "fake"
    finally:
        await stop_session(session)


async def test_completion_fallback_replaces_the_word_before_the_cursor() -> None:
    session = await start_session(initialization_options=fake_options(("x = compu", "te(values)")))
    try:
        session.open(URI, "x = compu")
        result = await asyncio.wait_for(
            session.client.text_document_completion_async(
                types.CompletionParams(types.TextDocumentIdentifier(URI), session.end(URI))
            ),
            10,
        )
        (item,) = result.items
        assert item.text_edit.new_text == "compute(values)"
        assert item.text_edit.range == types.Range(types.Position(0, 4), types.Position(0, 9))
        assert item.filter_text.startswith("compu")
    finally:
        await stop_session(session)


async def test_a_client_with_inline_completion_is_not_offered_completion() -> None:
    # One completion path per client: VS Code asks every provider it is offered, and Tab would take the
    # suggest widget's row instead of the ghost text.
    capabilities = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()
        )
    )
    session = await start_session(capabilities=capabilities)
    try:
        assert session.result.capabilities.inline_completion_provider is not None
        assert session.result.capabilities.completion_provider is None
    finally:
        await stop_session(session)


async def test_completion_label_shows_what_is_inserted() -> None:
    session = await start_session(
        initialization_options=fake_options(("    if", " n < 2:\n        return n"))
    )
    try:
        session.open(URI, "def fib(n):\n    if")
        result = await asyncio.wait_for(
            session.client.text_document_completion_async(
                types.CompletionParams(types.TextDocumentIdentifier(URI), session.end(URI))
            ),
            10,
        )
        (item,) = result.items
        assert item.text_edit.new_text == "if n < 2:"  # the server keeps it to the line after text
        assert item.label == "if n < 2:"
    finally:
        await stop_session(session)


async def test_with_the_suggest_widget_open_the_item_extends_the_selected_entry() -> None:
    session = await start_session(initialization_options=fake_options(("    if", " n < 2:")))
    try:
        session.open(URI, "def fib(n):\n    if")
        end = session.end(URI)
        widget_range = types.Range(types.Position(1, 4), end)

        async def inline_with(selected_text: str) -> types.InlineCompletionList:
            context = types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind.Automatic,
                selected_completion_info=types.SelectedCompletionInfo(range=widget_range, text=selected_text),
            )
            params = types.InlineCompletionParams(
                context=context, text_document=types.TextDocumentIdentifier(URI), position=end
            )
            return await asyncio.wait_for(session.client.text_document_inline_completion_async(params), 10)

        (item,) = (await inline_with("if")).items
        assert (item.insert_text, item.range) == ("if n < 2:", widget_range)
        # A selected entry the suggestion does not extend: the plain item (the client will not preview it).
        (item,) = (await inline_with("isinstance")).items
        assert (item.insert_text, item.range) == (" n < 2:", types.Range(end, end))
    finally:
        await stop_session(session)


async def test_serve_accepts_stdio_as_clients_add_it() -> None:
    session = await start_session(
        args=("--stdio", "--backend", "fake"), initialization_options=fake_options(GREET)
    )
    try:
        session.open(URI, "def greet(")
        assert texts(await asyncio.wait_for(session.inline(URI), 10)) == [GREET[1]]
    finally:
        await stop_session(session)


@pytest.mark.parametrize("offered", [["utf-8", "utf-16"], ["utf-32"]])
async def test_position_encoding_follows_the_client(offered: list[str]) -> None:
    capabilities = types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=offered)
    )
    session = await start_session(
        initialization_options=fake_options(("é = ", "1")), capabilities=capabilities
    )
    try:
        assert session.result.capabilities.position_encoding == offered[0]
        text = "😀 é = "  # the emoji is 4 UTF-8 bytes, 2 UTF-16 units, 1 UTF-32 unit
        session.open(URI, text)
        units = len(text.encode("utf-8")) if offered[0] == "utf-8" else len(text)
        result = await asyncio.wait_for(session.inline_at(URI, types.Position(0, units)), 10)
        assert texts(result) == ["1"]
        assert (await session.stats())["settings"]["positionEncoding"] == offered[0]
    finally:
        await stop_session(session)


async def test_newest_request_wins_and_the_old_one_is_answered_empty() -> None:
    session = await start_session(
        initialization_options=fake_options(COUNT, ("total = ", "sum(numbers)"), delay_ms=30)
    )
    try:
        session.open(URI, "numbers = [")
        first = session.inline(URI)
        await asyncio.sleep(0.3)  # the slow generation is running
        session.type(URI, "]\ntotal = ")  # disagrees with it
        second = session.inline(URI)
        assert texts(await asyncio.wait_for(first, 10)) == []
        assert texts(await asyncio.wait_for(second, 10)) == ["sum(numbers)"]
        stats = await session.stats()
        assert stats["cancelled_generations"] == 1
    finally:
        await stop_session(session)


async def test_cancel_request_is_answered_with_request_cancelled() -> None:
    session = await start_session(initialization_options=fake_options(COUNT, GREET, delay_ms=30))
    try:
        session.open(URI, "numbers = [")
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Invoked),
            text_document=types.TextDocumentIdentifier(URI),
            position=session.end(URI),
        )
        pending = asyncio.ensure_future(  # pytest-lsp sends the request when the coroutine first runs
            session.client.protocol.send_request_async(
                types.TEXT_DOCUMENT_INLINE_COMPLETION, params, "to-cancel"
            )
        )
        await asyncio.sleep(0.2)
        session.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="to-cancel"))
        with pytest.raises(JsonRpcException) as caught:
            await asyncio.wait_for(pending, 10)
        assert caught.value.code == -32800
        # Nobody waits for the running generation now; it stops as soon as other work arrives.
        session.open(OTHER, "def greet(")
        assert await session.suggestion(OTHER) == GREET[1]
        assert (await session.stats())["cancelled_generations"] == 1
    finally:
        await stop_session(session)


async def test_every_request_is_answered_in_a_storm_of_edits() -> None:
    session = await start_session(
        initialization_options=fake_options(("result = ", "compute(values)"), delay_ms=2)
    )
    try:
        session.open(URI, "")
        pending = []
        for char in "result = ":
            session.type(URI, char)
        for index in range(300):
            session.type(URI, "z")
            session.backspace(URI)
            if index % 3 == 0:
                pending.append(session.inline(URI))
        pending.append(session.inline(URI))
        answers = await asyncio.wait_for(asyncio.gather(*pending), 60)
        assert len(answers) == len(pending) and all(a is not None for a in answers)
        assert texts(answers[-1]) == ["compute(values)"]
        stats = await session.stats()
        assert stats["requests"] == len(pending)
        assert stats["generations"] < len(pending)  # stale requests never reached the model
    finally:
        await stop_session(session)


async def test_typed_ahead_is_served_from_the_suggestion_without_a_new_generation() -> None:
    session = await start_session(initialization_options=fake_options(GREET))
    try:
        session.open(URI, "def greet(")
        assert await session.suggestion(URI) == GREET[1]
        session.type(URI, "na")
        assert await session.suggestion(URI) == GREET[1][2:]
        session.type(URI, "me):")
        assert await session.suggestion(URI) == GREET[1][6:]
        stats = await session.stats()
        assert stats["generations"] == 1 and stats["typed_ahead_hits"] == 2
    finally:
        await stop_session(session)


async def test_typing_along_a_running_generation_keeps_it_going() -> None:
    session = await start_session(initialization_options=fake_options(GREET, delay_ms=40))
    try:
        session.open(URI, "def greet(")
        first = session.inline(URI)
        await asyncio.sleep(0.15)
        session.type(URI, "name")
        second = session.inline(URI)
        assert texts(await asyncio.wait_for(second, 10)) == [GREET[1][4:]]
        await asyncio.wait_for(first, 10)
        stats = await session.stats()
        assert stats["generations"] == 1 and stats["cancelled_generations"] == 0
    finally:
        await stop_session(session)


async def test_first_line_first_answers_with_the_first_line_and_serves_the_rest_from_cache() -> None:
    session = await start_session(
        initialization_options=fake_options(GREET, delay_ms=80, firstLineFirst=True)
    )
    try:
        session.open(URI, "def greet(")
        assert await session.suggestion(URI) == "name):"
        assert (await session.stats())["last_finish_reason"] is None  # the generation is still running
        session.type(URI, "name):")
        rest = await session.suggestion(URI)  # the next line, or all the rest if the generation has ended
        assert rest.startswith("\n    return 'hello ' + name")
        stats = await session.stats()
        assert stats["generations"] == 1
    finally:
        await stop_session(session)


async def test_bad_input_is_answered_and_the_server_stays_up() -> None:
    session = await start_session(
        initialization_options=fake_options(GREET, ("boom", "!raise scripted fault"))
    )
    try:
        client = session.client
        # Unknown document, out-of-range position, a position inside a surrogate pair.
        nowhere = session.inline_at("file:///nowhere.py", types.Position(0, 0))
        assert texts(await asyncio.wait_for(nowhere, 10)) == []
        session.open(URI, "a😀b\ndef greet(")
        for position in (types.Position(7, 0), types.Position(0, 99), types.Position(0, 2)):
            assert texts(await asyncio.wait_for(session.inline_at(URI, position), 10)) == []
        # An edit with a range outside the document, and text with a lone surrogate and a NUL.
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(2, URI),
                [
                    types.TextDocumentContentChangePartial(
                        types.Range(types.Position(50, 0), types.Position(50, 0)), "x"
                    )
                ],
            )
        )
        session.open(OTHER, "s = '\ud800\x00'\n")
        assert texts(await asyncio.wait_for(session.inline(OTHER), 10)) == []
        # Garbage in custom notifications and an unknown command argument shape.
        client.protocol.notify("specls/didPartiallyAccept", {"uri": 5, "acceptedLength": "many"})
        client.protocol.notify("specls/didShow", None)
        # A client's slip: closing a document that was never opened (a warning, not an error).
        client.text_document_did_close(
            types.DidCloseTextDocumentParams(types.TextDocumentIdentifier("file:///x.py"))
        )
        # A backend exception during generation.
        session.open("file:///project/boom.py", "boom")
        assert texts(await asyncio.wait_for(session.inline("file:///project/boom.py"), 10)) == []
        await asyncio.sleep(0.1)
        messages = [m.message for m in client.log_messages]
        assert any("scripted fault" in m for m in messages)
        assert any("out of sync" in m for m in messages)
        assert any("nowhere.py" in m for m in messages)
        assert any("didClose for file:///x.py, which is not open; ignored" in m for m in messages)
        # After all of that, the document that was edited badly gets nothing until the client's full text
        # resyncs it (the client applied the edit; our copy no longer matches), then it completes.
        assert await session.suggestion(URI) == ""
        session.versions[URI] = 3
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(3, URI),
                [types.TextDocumentContentChangeWholeDocument(session.texts[URI])],
            )
        )
        assert await session.suggestion(URI) == GREET[1]
        stats = await session.stats()
        assert stats["failed_generations"] == 1
    finally:
        await stop_session(session)


async def test_a_multi_megabyte_document_is_served() -> None:
    session = await start_session(initialization_options=fake_options(GREET))
    try:
        big = "".join(f"value_{i} = {i}  # ünïcödé 😀\n" for i in range(120_000))  # ~4 MB
        assert len(big.encode()) > 3_000_000
        session.open(URI, big + "def greet(")
        for char in "na":
            session.type(URI, char)
        suggestion = await session.suggestion(URI, timeout=60)
        assert suggestion and GREET[1][2:].startswith(suggestion)
    finally:
        await stop_session(session)


async def test_invalid_settings_fall_back_and_are_shown() -> None:
    options = {**fake_options(COUNT), "maxNewTokens": "lots", "temperature": -3, "noSuchSetting": 1}
    session = await start_session(initialization_options=options)
    try:
        shown = [m.message for m in session.client.messages]
        assert any("maxNewTokens" in m for m in shown) and any("temperature" in m for m in shown)
        session.open(URI, "numbers = [")
        assert await session.suggestion(URI) == COUNT[1]  # default maxNewTokens (64) covers it
        session.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams({"specls": {**fake_options(COUNT), "maxNewTokens": 4}})
        )
        assert await session.suggestion(URI) == "0, 1"  # four fake tokens: "0" "," " " "1"
    finally:
        await stop_session(session)


async def test_a_model_change_reloads_the_backend_with_progress() -> None:
    session = await start_session(initialization_options=fake_options(("x = ", "1")))
    try:
        session.open(URI, "x = ")
        assert await session.suggestion(URI) == "1"
        session.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams({"specls": fake_options(("x = ", "2"))})
        )
        for _ in range(200):
            reports = session.client.progress_reports.get("specls-load-2", [])
            if len(reports) == 2:
                break
            await asyncio.sleep(0.05)
        assert [type(r).__name__ for r in reports] == ["WorkDoneProgressBegin", "WorkDoneProgressEnd"]
        assert await session.suggestion(URI) == "2"
    finally:
        await stop_session(session)


async def test_a_model_that_fails_to_load_is_reported_and_requests_are_answered_empty() -> None:
    session = await start_session(initialization_options={"fake": {"failLoad": "weights are corrupt"}})
    try:
        status = await session.wait_for_state("error")
        assert "weights are corrupt" in status["message"]
        assert any("weights are corrupt" in m.message for m in session.client.messages)
        session.open(URI, "x = ")
        assert texts(await asyncio.wait_for(session.inline(URI), 5)) == []
    finally:
        await stop_session(session)


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def test_a_client_that_disconnects_mid_request_does_not_hang_the_server() -> None:
    process = await asyncio.create_subprocess_exec(
        *serve_command("--backend", "fake"),
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    options = fake_options(COUNT, delay_ms=50)
    for message in (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"capabilities": {}, "initializationOptions": options},
        },
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didOpen",
            "params": {
                "textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": "numbers = ["}
            },
        },
    ):
        process.stdin.write(_frame(message))
    await asyncio.sleep(1.0)
    process.stdin.write(
        _frame(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "textDocument/inlineCompletion",
                "params": {
                    "textDocument": {"uri": URI},
                    "position": {"line": 0, "character": 11},
                    "context": {"triggerKind": 1},
                },
            }
        )
    )
    await process.stdin.drain()
    await asyncio.sleep(0.2)
    process.stdin.close()  # the editor crashed
    await asyncio.wait_for(process.wait(), 20)
    stderr = (await process.stderr.read()).decode() if process.stderr else ""
    assert "Traceback" not in stderr


async def _read_response(stdout: asyncio.StreamReader, request_id: int) -> dict[str, Any]:
    while True:
        header = await asyncio.wait_for(stdout.readuntil(b"\r\n\r\n"), 20)
        length = int(header.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        message = json.loads(await stdout.readexactly(length))
        if message.get("id") == request_id:
            return dict(message)


async def test_malformed_messages_do_not_stop_the_server() -> None:
    process = await asyncio.create_subprocess_exec(
        *serve_command("--backend", "fake"),
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(
            _frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
        )
        await _read_response(process.stdout, 1)
        garbage = b"\xff\xfe{ not json"
        process.stdin.write(
            b"Content-Length: %d\r\n\r\n" % len(garbage) + garbage
        )  # invalid UTF-8, invalid JSON
        process.stdin.write(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "textDocument/inlineCompletion",
                    "params": {"textDocument": {"uri": URI}, "position": {"line": -1}},
                }
            )
        )
        process.stdin.write(_frame({"jsonrpc": "2.0", "id": 3, "method": "specls/stats", "params": None}))
        await process.stdin.drain()
        invalid = await _read_response(process.stdout, 2)
        assert "error" in invalid  # invalid params get an error response, not silence
        stats = await _read_response(process.stdout, 3)
        assert stats["result"]["state"] in ("idle", "loading", "ready")
        # a Python process with pygls loaded holds tens of MB; the number is the server's own, not a constant
        assert 10 < stats["result"]["peak_rss_mb"] < 4096
    finally:
        process.kill()
        await process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_tcp_transport_binds_localhost(tmp_path: Path) -> None:
    port = _free_port()
    token_file = tmp_path / "token"
    process = subprocess.Popen(
        serve_command("--backend", "fake", "--tcp", "--port", str(port), "--token-file", str(token_file)),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            pytest.fail("the server did not listen on 127.0.0.1")
        # The port accepts connections before the server writes its token (only once the port is its own).
        for _ in range(100):
            if token_file.is_file() and token_file.read_text().strip():
                break
            await asyncio.sleep(0.1)
        options = {"token": token_file.read_text().strip()}
        params = {"capabilities": {}, "initializationOptions": options}
        writer.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}))
        await writer.drain()
        response: dict[str, Any] = {}
        while response.get("id") != 1:  # log messages may come first
            header = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
            length = int(header.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            response = json.loads(await reader.readexactly(length))
        assert response["id"] == 1 and "inlineCompletionProvider" in response["result"]["capabilities"]
        writer.close()
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_serve_defaults_to_localhost() -> None:
    from lsp_server.app.cli import build_parser

    args = build_parser().parse_args(["serve", "--tcp"])
    assert args.host == "127.0.0.1" and args.tcp
