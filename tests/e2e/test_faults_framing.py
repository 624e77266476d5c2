"""Fault suite, framing and protocol: one mis-sized frame must not make a stdio server deaf. After any single
bad frame (a Content-Length short or long by 10 bytes, counted in characters instead of UTF-8 bytes, not a
number, absurd, missing, or bytes that are not JSON) the next well-formed request is answered and `exit`
exits; the bad frame is answered with an error when its id can be read and logged once. Then the JSON-RPC
details: no "jsonrpc", requests after shutdown, a second initialize, an object id, didClose of an unknown
document. Through a real `specls serve` on the fake backend."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fault_support import Served, Wire, assert_clean

URI = "file:///w/a.py"
TEXT = "s = 'café 日本語 😀'\ndef alpha("


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["def alpha(", "a):\n    return 'A'"]]))
    running = Served(["--backend", "fake", "--fake-rules", str(rules)], tmp_path)
    try:
        running.wire.initialize()
        running.wire.wait_ready()
        yield running
    finally:
        running.kill()


def _did_open(text: str = TEXT) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "method": "textDocument/didOpen",
        "params": {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": text}},
    }
    return json.dumps(message, ensure_ascii=False).encode("utf-8")


def _request(request_id: int) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "specls/stats", "params": {"x": "日本語 😀"}}
    return json.dumps(message, ensure_ascii=False).encode("utf-8")


def _header(length: object) -> bytes:
    return b"Content-Length: %s\r\n\r\n" % str(length).encode()


BAD_FRAMES: dict[str, Callable[[bytes], bytes]] = {
    "10-short": lambda body: _header(len(body) - 10) + body,
    "10-long": lambda body: _header(len(body) + 10) + body,
    "characters": lambda body: _header(len(body.decode("utf-8"))) + body,
    "not-a-number": lambda body: _header("12x") + body,
    "absurd": lambda body: _header(10**18) + body,
    "missing": lambda body: b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + body,
    "not-json": lambda body: _header(len(body)) + body.replace(b"{", b"[", 1),
}


def _end(served: Served) -> None:
    wire = served.wire
    assert "result" in wire.request("shutdown", timeout=10)
    wire.notify("exit")
    code, seconds = served.wait_exit()
    assert code == 0 and seconds < 3
    assert_clean(served.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("bad", sorted(BAD_FRAMES))
@pytest.mark.parametrize("carrying", ["request", "didOpen"])
def test_after_one_bad_frame_the_next_requests_are_answered_and_exit_exits(
    served: Served, bad: str, carrying: str
) -> None:
    wire = served.wire
    body = _request(100) if carrying == "request" else _did_open()
    wire.send_raw(BAD_FRAMES[bad](body))
    if carrying == "request":
        reply = wire.response(100, timeout=10)  # its own answer when it could be read, else an error
        assert ("result" in reply) != (bad == "not-json"), reply
    for _ in range(5):
        assert "result" in wire.request("specls/stats", timeout=10)
    wire.send_raw(_header(len(_did_open())) + _did_open())
    assert wire.suggestion(URI, 1, 10, timeout=10) == "a):\n    return 'A'"
    logged = [
        line
        for line in wire.text_of("window/logMessage").splitlines()
        if "framing" in line or "dropped" in line
    ]
    assert len(logged) == 1, logged  # once, with what was wrong
    if bad != "not-json":
        assert "Content-Length" in logged[0]
    _end(served)


@pytest.mark.slow
def test_a_bad_frame_carrying_exit_still_exits(served: Served) -> None:
    wire = served.wire
    wire.request("shutdown")
    body = b'{"jsonrpc": "2.0", "method": "exit"}'
    wire.send_raw(_header(len(body) + 10) + body)  # and nothing after it: the stall shows where it ends
    code, seconds = served.wait_exit()
    assert code == 0 and seconds < 3


@pytest.mark.slow
def test_a_stream_that_cannot_be_resynchronised_ends_with_a_message(served: Served) -> None:
    with contextlib.suppress(BrokenPipeError):  # the server may give up at 64 MB before reading the rest
        served.wire.send_raw(b"\x00no header here " * (5 * 1024 * 1024))  # 80 MB without a Content-Length
    code, _ = served.wait_exit(timeout=60)
    assert code == 1
    assert "lost the LSP framing" in served.stderr


def _send(wire: Wire, message: dict[str, Any]) -> None:
    wire.send_raw(_header(len(json.dumps(message).encode())) + json.dumps(message).encode())


@pytest.mark.slow
def test_json_rpc_details(served: Served) -> None:
    wire = served.wire
    _send(wire, {"id": 50, "method": "specls/stats", "params": {}})  # no "jsonrpc"
    assert wire.response(50, timeout=10)["error"]["code"] == -32600
    again = wire.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    assert again["error"]["code"] == -32600 and "already initialized" in again["error"]["message"]
    _send(wire, {"jsonrpc": "2.0", "id": {"an": "object"}, "method": "specls/stats", "params": {}})
    invalid = wire.wait_for(lambda m: m.get("id") is None and "error" in m, timeout=10)
    assert invalid["error"]["code"] == -32600
    wire.notify("textDocument/didClose", {"textDocument": {"uri": "file:///w/never-opened.py"}})
    assert "result" in wire.request("specls/stats", timeout=10)  # still answering
    closes = [p for p in wire.notifications("window/logMessage") if "never-opened" in str(p.get("message"))]
    assert closes and all(p["type"] != 1 for p in closes)  # 1: Error
    assert "result" in wire.request("shutdown")
    after = wire.request("specls/stats", timeout=10)  # LSP: requests after shutdown error
    assert after["error"]["code"] == -32600
    wire.notify("exit")
    code, _ = served.wait_exit()
    assert code == 0
    assert_clean(served.stderr)  # no traceback for the object id
