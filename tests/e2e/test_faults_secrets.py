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
    def __init__(self) -> None:
        self.mode = "401"
        self.authorizations: list[str] = []


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
            elif echo.mode == "php-500":  # PHP's json_encode escapes "/" as "\/"
                message = {"error": {"message": f"upstream failed for headers {dict(self.headers)}"}}
                self._send(500, json.dumps(message).replace("/", "\\/").encode())
            elif echo.mode in ("echo-200", "whitespace"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                auth = str(self.headers["Authorization"])
                echo.authorizations.append(auth)
                piece = {"choices": [{"text": " = 1", "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(piece)}\n\n".encode())
                last = {
                    "choices": [{"text": "", "finish_reason": auth}],
                    "timings": {"cache_n": 3, "echo": auth, auth: 1, "draft_n": auth},
                    "usage": {"prompt_tokens": 5, "completion_tokens": auth},
                }
                self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
                self.wfile.flush()
                self.close_connection = True
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


SLASHED = "sk-proj/0123456789/abcdefSLASHED+key=="  # a key whose "/" an endpoint may escape as "\\/"


def _fragments(secret: str, size: int = 10) -> list[str]:
    return [secret[start : start + size] for start in range(len(secret) - size + 1)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "key"),
    [
        ("whitespace", SECRET + "\n"),  # a secret written with `echo`
        ("whitespace", SECRET + "\r\n"),  # a Windows .env
        ("echo-200", SECRET),  # the header echoed in finish_reason, timings and usage
        ("php-500", SLASHED),  # the header echoed with "/" escaped as "\/"
        ("mid-stream", SLASHED),
    ],
)
def test_no_form_or_fragment_of_the_key_reaches_any_output(
    mode: str, key: str, endpoint: tuple[Echo, str], tmp_path: Path
) -> None:
    echo, url = endpoint
    echo.mode = mode
    log_file = tmp_path / "specls.log"
    served = Served(
        ["--backend", "openai", "--endpoint", url, "--log-file", str(log_file), "--log-level", "DEBUG"],
        tmp_path,
        env=server_env(SPECLS_API_KEY=key),
    )
    try:
        wire = served.wire
        wire.initialize()
        wire.wait_ready()
        wire.open(URI, "def f():\n    x")
        answers = [wire.suggestion(URI, 1, 5) for _ in range(2)]
        stats = wire.request("specls/stats")["result"]
        wire.request("shutdown")
        wire.notify("exit")
        code, _ = served.wait_exit()
        everything = bytes(wire.raw).decode("utf-8", "replace") + served.stderr + log_file.read_text()
        for fragment in _fragments(key.strip()):
            assert fragment not in everything, fragment
            assert fragment.replace("/", "\\/") not in everything, fragment
        if mode == "whitespace":  # normalised with a message, and the request went out with the clean key
            assert echo.authorizations and set(echo.authorizations) == {f"Bearer {key.strip()}"}
            assert "surrounding whitespace" in log_file.read_text()
            assert answers[0] == " = 1"
            assert stats["last_error"] is None
        if mode == "echo-200":
            engine = stats["last_engine_stats"]
            assert engine["server_finish_reason"] == "other"
            timings = engine["server_timings"]  # numbers only; a name that held the key, redacted
            assert timings["cache_n"] == 3 and "echo" not in timings and "draft_n" not in timings
        if mode == "php-500":
            assert "500" in str(stats["last_error"])
        assert code == 0
        assert_clean(served.stderr)
    finally:
        served.kill()


@pytest.mark.slow
def test_a_key_that_cannot_be_a_header_is_refused_before_any_request(
    endpoint: tuple[Echo, str], tmp_path: Path
) -> None:
    echo, url = endpoint
    echo.mode = "echo-200"
    served = Served(
        ["--backend", "openai", "--endpoint", url],
        tmp_path,
        env=server_env(SPECLS_API_KEY="sk-two\nlines-0123456789"),
    )
    try:
        wire = served.wire
        wire.initialize()
        wire.wait_ready()
        shown = wire.text_of("window/showMessage")
        assert "SPECLS_API_KEY" in shown and "HTTP header" in shown
        assert echo.authorizations == []  # nothing was sent
        assert "lines-0123456789" not in bytes(wire.raw).decode("utf-8", "replace") + served.stderr
    finally:
        served.kill()
