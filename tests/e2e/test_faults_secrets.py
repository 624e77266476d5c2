"""Fault suite, secrets: an endpoint that echoes the request's headers in its 401, 500 and mid-stream error
bodies must not make the API key appear anywhere the server writes: the protocol stream (logMessage,
showMessage, status), stderr or the log file."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fault_support import Served, assert_clean, server_env

SECRET = "sk-live-0123456789abcdefSECRET"
URI = "file:///w/a.py"


class Echo:
    mode = "401"


def _handler(echo: Echo) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _echo(self) -> str:
            return "".join(f"{name}: {value}\n" for name, value in self.headers.items())

        def do_GET(self) -> None:
            if echo.mode == "probe-401":
                self._send(401, self._echo().encode())
            else:
                self._send(200, json.dumps({"data": [{"id": "m", "max_model_len": 2048}]}).encode())

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/tokenize":
                self._send(404, b"{}")
            elif echo.mode in ("401", "probe-401"):
                # Not JSON: the plain echo of a debugging proxy
                self._send(401, ("unauthorized; you sent:\n" + self._echo()).encode(), "text/plain")
            elif echo.mode == "500":
                message = {"error": {"message": f"upstream failed for headers {dict(self.headers)}"}}
                self._send(500, json.dumps(message).encode())
            else:  # one piece, then an error event that quotes the key
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                piece = {"choices": [{"text": " = 1", "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(piece)}\n\n".encode())
                error = {"error": {"message": f"stream broke; auth was {self.headers['Authorization']}"}}
                self.wfile.write(f"data: {json.dumps(error)}\n\n".encode())
                self.wfile.write(f"error: bad token {SECRET}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

    return Handler


@pytest.fixture
def endpoint() -> Iterator[tuple[Echo, str]]:
    echo = Echo()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(echo))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield echo, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["401", "probe-401", "500", "mid-stream"])
def test_the_api_key_never_leaves_the_server(mode: str, endpoint: tuple[Echo, str], tmp_path: Path) -> None:
    echo, url = endpoint
    echo.mode = mode
    log_file = tmp_path / "specls.log"
    served = Served(
        ["--backend", "openai", "--endpoint", url, "--log-file", str(log_file), "--log-level", "DEBUG"],
        tmp_path,
        env=server_env(SPECLS_API_KEY=SECRET),
    )
    try:
        wire = served.wire
        wire.initialize()
        wire.wait_ready()
        wire.open(URI, "def f():\n    x")
        for _ in range(2):  # the first reports the failure; the second meets the outage cooldown
            wire.inline(URI, 1, 5)
        wire.request("shutdown")
        wire.notify("exit")
        code, _ = served.wait_exit()
        everything = bytes(wire.raw).decode("utf-8", "replace") + served.stderr + log_file.read_text()
        assert SECRET not in everything
        assert SECRET[:12] not in everything  # not even a cut-off start of it
        # The failure itself was reported (so this test saw the echoed bodies pass through).
        expected = {"401": "401", "probe-401": "401", "500": "500", "mid-stream": "stream"}[mode]
        assert expected in wire.text_of("window/logMessage") + log_file.read_text()
        assert code == 0
        assert_clean(served.stderr)
    finally:
        served.kill()
