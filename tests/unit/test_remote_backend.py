"""The remote backend's protocol and fault handling, against a scripted OpenAI-compatible HTTP server on
127.0.0.1 (the behaviour against a real llama-server is in tests/e2e/test_remote_llama_server.py)."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engine.api import CancelToken, CompletionRequest
from lsp_server.backends.http_stream import Endpoint, RemoteUnavailableError, redact_url
from lsp_server.backends.openai import OpenAIBackend, RemoteOptions
from lsp_server.config import ServerSettings

SPECIAL = ("<|endoftext|>", "<|sp_fim_prefix|>", "<|sp_fim_suffix|>", "<|sp_fim_middle|>", "<|sp_file_sep|>")
FAST = RemoteOptions(connect_timeout_s=1, read_timeout_s=5, retries=2, backoff_s=0.01, cooldown_s=0.3)


@dataclass
class Script:
    """What the scripted server does with each /v1/completions request, in order (the last one repeats)."""

    replies: list[tuple[Any, ...]] = field(default_factory=lambda: [("stream", ["hello", " world"], 0.0)])
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    pieces_sent: list[int] = field(default_factory=list)  # per streamed request, events written
    client_gone: threading.Event = field(default_factory=threading.Event)

    def next_reply(self) -> tuple[Any, ...]:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def make_handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": "scripted", "max_model_len": 4096}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                text = body["content"]
                tokens = [7] if text in SPECIAL else list(range(max(2, len(text) // 4)))
                self._json(200, {"tokens": tokens})
                return
            script.bodies.append(body)
            script.headers.append(dict(self.headers))
            reply = script.next_reply()
            if reply[0] == "status":
                self._json(reply[1], {"error": {"message": reply[2]}})
            elif reply[0] == "stream":
                self._stream(reply[1], reply[2])

        def _stream(self, pieces: list[str], delay: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            try:
                for index, piece in enumerate(pieces):
                    last = index == len(pieces) - 1
                    event = {
                        "choices": [{"text": piece, "index": 0, "finish_reason": "stop" if last else None}]
                    }
                    self._chunk(f"data: {json.dumps(event)}\n\n")
                    sent += 1
                    time.sleep(delay)
                self._chunk(
                    'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n'
                )
                self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                script.client_gone.set()
            finally:
                script.pieces_sent.append(sent)

        def _chunk(self, text: str) -> None:
            data = text.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


@pytest.fixture
def scripted() -> Iterator[tuple[Script, str]]:
    script = Script()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield script, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def backend_for(url: str, options: RemoteOptions = FAST, key_env: str = "SPECLS_TEST_KEY") -> OpenAIBackend:
    return OpenAIBackend(
        ServerSettings(backend="openai", endpoint=url, remote_model="scripted", api_key_env=key_env), options
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_streams_text_with_greedy_defaults_and_stop_strings(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    backend = backend_for(url)
    seen: list[str] = []
    result = backend.complete(
        CompletionRequest(prompt="p", max_new_tokens=12, stop_strings=("\n\n",)), on_text=seen.append
    )
    assert (result.text, result.finish_reason) == ("hello world", "eos")
    assert seen == ["hello", "hello world"]
    body = script.bodies[0]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 12 and body["stream"] is True
    assert body["stop"] == ["\n\n"] and body["model"] == "scripted" and body["prompt"] == "p"
    assert result.stats.prompt_tokens == 3 and result.stats.new_tokens == 2


def test_info_reports_served_special_tokens_and_context(scripted: tuple[Script, str]) -> None:
    _, url = scripted
    info = backend_for(url).info()
    assert set(SPECIAL) <= set(info.special_tokens)
    assert "<fim_prefix>" not in info.special_tokens  # several tokens on this server: not special
    assert info.context_length == 4096 and info.target == "scripted" and info.name == "openai"


def test_a_forced_prefix_is_refused_rather_than_dropped(scripted: tuple[Script, str]) -> None:
    _, url = scripted
    backend = backend_for(url)
    assert not backend.info().token_healing  # the context builder then never asks for one
    with pytest.raises(ValueError, match="cannot force a prefix"):
        backend.complete(CompletionRequest(prompt="def f(", forced_prefix="x"))


def test_count_tokens_is_calibrated_against_the_server(scripted: tuple[Script, str]) -> None:
    _, url = scripted
    backend = backend_for(url)
    text = "x" * 400  # the scripted tokenizer gives one token per 4 characters
    assert 100 <= backend.count_tokens(text) <= 120  # a small safety margin, never an under-count
    assert backend.count_tokens("") == 0


def test_stop_check_cuts_the_text_and_closes_the_stream(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.replies = [("stream", ["a", "b", "STOP", "c"] + ["d"] * 50, 0.01)]
    backend = backend_for(url)
    result = backend.complete(
        CompletionRequest(prompt="p", stop_check=lambda text: i if (i := text.find("STOP")) >= 0 else None)
    )
    assert (result.text, result.finish_reason) == ("ab", "stop")
    assert script.client_gone.wait(5), "the server kept streaming after the stop"
    assert script.pieces_sent[0] < 54


def test_cancel_closes_the_stream_and_the_next_request_is_served(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.replies = [("stream", ["x"] * 200, 0.01), ("stream", ["next"], 0.0)]
    backend = backend_for(url)
    cancel = CancelToken()
    seen: list[str] = []

    def on_text(text: str) -> None:
        seen.append(text)
        if len(text) == 3:
            cancel.cancel()

    result = backend.complete(CompletionRequest(prompt="p"), on_text=on_text, cancel=cancel)
    assert result.finish_reason == "cancelled" and result.text.startswith("xxx")
    assert script.client_gone.wait(5), "the server kept streaming after the cancel"
    assert script.pieces_sent[0] < 200
    assert backend.complete(CompletionRequest(prompt="q")).text == "next"


def test_cancel_while_waiting_for_the_first_token(scripted: tuple[Script, str]) -> None:
    """A server still in prefill sends nothing: the cancel must not wait for the read timeout."""
    script, url = scripted
    script.replies = [("stream", ["late"], 0.0)]
    backend = backend_for(url, RemoteOptions(read_timeout_s=30))
    cancel = CancelToken()
    threading.Timer(0.2, cancel.cancel).start()
    original = script.next_reply

    def slow_reply() -> tuple[Any, ...]:
        time.sleep(2)  # the server thinks for 2 s before answering
        return original()

    script.next_reply = slow_reply  # type: ignore[method-assign]
    started = time.monotonic()
    result = backend.complete(CompletionRequest(prompt="p"), cancel=cancel)
    assert result.finish_reason == "cancelled"
    assert time.monotonic() - started < 1.5


def test_busy_server_is_retried_with_backoff(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.replies = [
        ("status", 503, "loading model"),
        ("status", 503, "loading model"),
        ("stream", ["ok"], 0),
    ]
    result = backend_for(url).complete(CompletionRequest(prompt="p"))
    assert result.text == "ok" and len(script.bodies) == 3


def test_bad_request_is_an_error_result_not_an_outage(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.replies = [("status", 400, "prompt too long"), ("stream", ["fine"], 0)]
    backend = backend_for(url)
    result = backend.complete(CompletionRequest(prompt="p"))
    assert result.finish_reason == "error" and "prompt too long" in result.stats.error
    assert backend.complete(CompletionRequest(prompt="p")).text == "fine"


def test_down_endpoint_reports_once_then_answers_empty_fast_then_recovers() -> None:
    port = closed_port()
    backend = backend_for(f"http://127.0.0.1:{port}")
    assert backend.info().special_tokens == ()  # nothing known yet
    with pytest.raises(RemoteUnavailableError, match=rf"127\.0\.0\.1:{port}.*connection refused"):
        backend.complete(CompletionRequest(prompt="p"))
    started = time.monotonic()
    quiet = backend.complete(CompletionRequest(prompt="p"))
    assert quiet.finish_reason == "error" and quiet.text == ""
    assert time.monotonic() - started < 0.05  # no connection attempt during the cooldown

    # The server comes up on that port: after the cooldown the backend finds it and learns its tokens.
    script = Script(replies=[("stream", ["back"], 0.0)])
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(script))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        time.sleep(FAST.cooldown_s + 0.05)
        assert backend.complete(CompletionRequest(prompt="p")).text == "back"
        assert "<|sp_fim_prefix|>" in backend.info().special_tokens
    finally:
        server.shutdown()
        server.server_close()


def test_api_key_is_sent_but_never_logged(
    scripted: tuple[Script, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    script, url = scripted
    secret = "sk-test-very-secret-123"
    monkeypatch.setenv("SPECLS_TEST_KEY", secret)
    script.replies = [("status", 401, "invalid api key")]
    caplog.set_level(logging.DEBUG)
    backend = backend_for(url)
    with pytest.raises(RemoteUnavailableError) as raised:
        backend.complete(CompletionRequest(prompt="p"))
    assert script.headers[0]["Authorization"] == f"Bearer {secret}"
    assert "$SPECLS_TEST_KEY" in str(raised.value)
    assert secret not in str(raised.value) and secret not in caplog.text and secret not in repr(vars(backend))


def test_endpoint_parsing_and_redaction() -> None:
    endpoint = Endpoint.parse("https://user:pw@gpu.example:8443/team/v1/")
    assert (endpoint.scheme, endpoint.host, endpoint.port, endpoint.prefix) == (
        "https",
        "gpu.example",
        8443,
        "/team",
    )
    assert "pw" not in endpoint.display
    assert redact_url("https://user:pw@gpu.example/v1") == "https://gpu.example/v1"
    with pytest.raises(ValueError, match="http:// or https://"):
        Endpoint.parse("ftp://host")
    with pytest.raises(ValueError, match="needs an endpoint"):
        OpenAIBackend(ServerSettings(backend="openai"))


def test_https_verifies_certificates_by_default() -> None:
    backend = backend_for(f"https://127.0.0.1:{closed_port()}")
    context = backend.transport.ssl_context
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
