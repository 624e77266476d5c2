"""Fault suite, TCP: one isolated, authenticated session per connection, through a real `specls serve --tcp`
(fake backend). Each attack from the issue: answers crossing clients, documents overwriting each other, one
client's initialize reloading the model for everyone, a disconnect (or a port scan) stopping the server, an
unauthenticated process switching the backend, and a web page's HTTP POST of JSON-RPC."""

from __future__ import annotations

import json
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.fault_support import Wire, assert_clean, connect_tcp, free_port, serve_command, server_env

URI = "file:///w/same.py"  # both clients open the same URI with different text
RULES = [["def alpha(", "a):\n    return 'A'"], ["def beta(", "b):\n    return 'B'"]]


class TcpServer:
    def __init__(self, tmp: Path, *extra: str) -> None:
        self.port = free_port()
        self.token_file = tmp / "token"
        rules = tmp / "rules.json"
        rules.write_text(json.dumps(RULES))
        self.stderr_path = tmp / "stderr.txt"
        self._stderr = self.stderr_path.open("wb")
        args = ["--backend", "fake", "--fake-rules", str(rules), "--tcp", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            serve_command(*args, "--token-file", str(self.token_file), *extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=server_env(),
            cwd=tmp,
        )
        self.sockets: list[socket.socket] = []
        deadline = time.monotonic() + 30
        while not (self.token_file.exists() and "listening" in self.stderr):
            assert time.monotonic() < deadline and self.proc.poll() is None, self.stderr
            time.sleep(0.05)
        self.token = self.token_file.read_text().strip()

    @property
    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def connect(self) -> tuple[socket.socket, Wire]:
        sock, wire = connect_tcp(self.port)
        self.sockets.append(sock)
        return sock, wire

    def session(self, **options: object) -> tuple[socket.socket, Wire]:
        sock, wire = self.connect()
        wire.initialize({"token": self.token, **options})
        wire.wait_ready()
        return sock, wire

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._stderr.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TcpServer]:
    running = TcpServer(tmp_path)
    try:
        yield running
    finally:
        running.close()


def _statuses(wire: Wire) -> list[str]:
    return [str(p.get("state")) for p in wire.notifications("specls/status")]


@pytest.mark.slow
def test_two_clients_get_their_own_answers_and_documents(server: TcpServer) -> None:
    _, a = server.session()
    _, b = server.session()
    a.open(URI, "def alpha(")
    b.open(URI, "def beta(")
    for _ in range(3):
        assert a.suggestion(URI, 0, 10) == "a):\n    return 'A'"
        assert b.suggestion(URI, 0, 9) == "b):\n    return 'B'"
    ids_a = {m["id"] for m in a.messages if "id" in m and "method" not in m}
    ids_b = {m["id"] for m in b.messages if "id" in m and "method" not in m}
    assert ids_a == ids_b == {1, 2, 3, 4}  # every answer came back on the connection that asked


@pytest.mark.slow
def test_a_second_initialize_does_not_reload_the_model_for_the_first(server: TcpServer) -> None:
    _, a = server.session()
    before = _statuses(a)
    server.session(maxNewTokens=8)
    server.session()
    a.open(URI, "def alpha(")
    assert a.suggestion(URI, 0, 10).startswith("a)")
    assert _statuses(a) == before  # no "loading" after the others connected


@pytest.mark.slow
def test_a_disconnect_or_a_port_scan_ends_only_that_session(server: TcpServer) -> None:
    _, a = server.session()
    b_sock, b = server.session()
    b.open(URI, "def beta(")
    b.request_async(
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": URI},
            "position": {"line": 0, "character": 9},
            "context": {"triggerKind": 2},
        },
    )
    b_sock.close()  # mid-request
    for _ in range(3):  # bare connect-and-close, as a port scanner does
        with socket.create_connection(("127.0.0.1", server.port)):
            pass
    _, c = server.session()
    c.request("shutdown")
    c.notify("exit")  # ends C's session only
    time.sleep(0.3)
    a.open(URI, "def alpha(")
    assert a.suggestion(URI, 0, 10) == "a):\n    return 'A'"
    assert server.proc.poll() is None
    assert_clean(server.stderr)


@pytest.mark.slow
@pytest.mark.parametrize(
    "first",
    [
        {"method": "initialize", "params": {"capabilities": {}}},  # no token
        {"method": "initialize", "params": {"capabilities": {}, "initializationOptions": {"token": "guess"}}},
        {"method": "specls/stats", "params": {}},  # anything before initialize
    ],
)
def test_a_connection_without_the_token_is_refused_and_closed(
    server: TcpServer, first: dict[str, object]
) -> None:
    _, user = server.session()
    _, intruder = server.connect()
    reply = intruder.request(str(first["method"]), first["params"], timeout=10)
    assert "error" in reply and "token" in reply["error"]["message"]
    assert intruder.closed.wait(5)
    # The intruder's settings went nowhere: the user's session still answers from the fake backend.
    user.open(URI, "def alpha(")
    assert user.suggestion(URI, 0, 10) == "a):\n    return 'A'"


@pytest.mark.slow
def test_an_unauthenticated_process_cannot_switch_the_backend(server: TcpServer, tmp_path: Path) -> None:
    _, user = server.session()
    _, intruder = server.connect()
    hostile = {"backend": "openai", "endpoint": "http://127.0.0.1:9", "apiKeyEnv": "HOME"}
    intruder.notify("workspace/didChangeConfiguration", {"settings": {"specls": hostile}})
    intruder.request_async("initialize", {"capabilities": {}, "initializationOptions": hostile})
    assert intruder.closed.wait(5)
    user.open(URI, "def alpha(")
    assert user.suggestion(URI, 0, 10) == "a):\n    return 'A'"
    stats = user.request("specls/stats")["result"]
    assert stats["settings"]["backend"] == "fake"


@pytest.mark.slow
def test_http_is_refused(server: TcpServer) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"initializationOptions": {"token": server.token}},
        }
    ).encode()
    request = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nOrigin: http://evil.example\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request)
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 403")
        assert b"capabilities" not in answer  # initialize did not run
        assert sock.recv(4096) == b""  # closed
    _, user = server.session()
    user.open(URI, "def alpha(")
    assert user.suggestion(URI, 0, 10) == "a):\n    return 'A'"


@pytest.mark.slow
def test_the_token_file_is_private_and_sigterm_ends_cleanly(server: TcpServer) -> None:
    mode = stat.S_IMODE(server.token_file.stat().st_mode)
    assert mode == 0o600
    assert len(server.token) >= 32
    _, a = server.session()
    a.open(URI, "def alpha(")
    a.suggestion(URI, 0, 10)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 0
    assert time.monotonic() - started < 2.0
    assert not server.token_file.exists()  # made by this server, removed with it
    assert_clean(server.stderr)


@pytest.mark.slow
def test_a_shared_token_file_must_be_private(tmp_path: Path) -> None:
    token_file = tmp_path / "shared-token"
    token_file.write_text("x" * 40)
    token_file.chmod(0o644)
    done = subprocess.run(
        serve_command(
            "--backend", "fake", "--tcp", "--port", str(free_port()), "--token-file", str(token_file)
        ),
        capture_output=True,
        text=True,
        timeout=30,
        env=server_env(),
    )
    assert done.returncode == 2 and "chmod 600" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_concurrent_sessions_share_the_model_fairly_and_cancel_only_their_own(tmp_path: Path) -> None:
    server = TcpServer(tmp_path, "--fake-token-delay-ms", "40")  # ~0.3 s per answer
    try:
        whole = {"partialAfterMs": 0, "firstLineMs": 60_000}  # wait for whole answers, not early parts
        _, a = server.session(**whole)
        b_sock, b = server.session(**whole)
        _, c = server.session(**whole)
        a.open(URI, "def alpha(")
        b.open(URI, "def beta(")
        c.open(URI, "def beta(")
        inline = {"position": {"line": 0, "character": 9}, "context": {"triggerKind": 2}}
        b.request_async("textDocument/inlineCompletion", {"textDocument": {"uri": URI}, **inline})
        ask_c = c.request_async("textDocument/inlineCompletion", {"textDocument": {"uri": URI}, **inline})
        b_sock.close()  # B leaves mid-generation: its work stops, nobody else's does
        assert a.suggestion(URI, 0, 10) == "a):\n    return 'A'"  # waits its turn, then whole
        assert c.response(ask_c)["result"]["items"][0]["insertText"] == "b):\n    return 'B'"
        assert server.proc.poll() is None
        assert_clean(server.stderr)
    finally:
        server.close()
