"""A raw JSON-RPC client for the fault suite: `specls serve` as a real subprocess (stdio or TCP), driven
byte by byte so that a test can send what no well-behaved client would (bad JSON numbers, lone surrogates,
HTTP, exit without shutdown) and see every message, the exit code and stderr."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parents[2]
CAPS: dict[str, Any] = {
    "general": {"positionEncodings": ["utf-16"]},
    "textDocument": {"inlineCompletion": {}},
}


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lsp_server.app.cli", "serve", *args]


def server_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Wire:
    """One JSON-RPC connection: a reader thread collects every message the server sends."""

    def __init__(self, reader: BinaryIO, write: Callable[[bytes], None]) -> None:
        self._reader = reader
        self._write = write
        self.messages: list[dict[str, Any]] = []
        self.raw = bytearray()  # every byte received, for leak checks
        self.closed = threading.Event()
        self._cond = threading.Condition()
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                length = None
                while True:
                    line = self._reader.readline()
                    if not line:
                        return
                    self.raw += line
                    if line in (b"\r\n", b"\n"):
                        break
                    name, _, value = line.decode("ascii", "replace").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                if length is None:
                    continue
                body = self._reader.read(length)
                self.raw += body
                with self._cond:
                    self.messages.append(json.loads(body))
                    self._cond.notify_all()
        except (OSError, ValueError):
            return
        finally:
            self.closed.set()
            with self._cond:
                self._cond.notify_all()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(encode(message))

    def send_raw(self, data: bytes) -> None:
        self._write(data)

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request_async(self, method: str, params: Any = None) -> int:
        self._ids += 1
        self.send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return self._ids

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for message in self.messages:
                    if predicate(message):
                        return message
                left = deadline - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    raise TimeoutError(f"no such message; got {self.messages[-5:]}")
                self._cond.wait(min(left, 0.1))

    def response(self, request_id: int, timeout: float = 30) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("id") == request_id and "method" not in m, timeout)

    def request(self, method: str, params: Any = None, timeout: float = 30) -> dict[str, Any]:
        return self.response(self.request_async(method, params), timeout)

    def notifications(self, method: str) -> list[dict[str, Any]]:
        with self._cond:
            return [m.get("params") for m in self.messages if m.get("method") == method]

    def text_of(self, method: str) -> str:
        return "\n".join(str((p or {}).get("message", "")) for p in self.notifications(method))

    # --- LSP conveniences ---

    def initialize(self, options: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        params: dict[str, Any] = {"processId": None, "rootUri": None, "capabilities": CAPS}
        if options is not None:
            params["initializationOptions"] = options
        reply = self.request("initialize", params, timeout)
        self.notify("initialized", {})
        return reply

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait_for(
            lambda m: m.get("method") == "specls/status" and m["params"].get("state") in ("ready", "error"),
            timeout,
        )

    def open(self, uri: str, text: str, version: int = 1, language: str = "python") -> None:
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": language, "version": version, "text": text}},
        )

    def change(self, uri: str, version: int, changes: list[dict[str, Any]]) -> None:
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes},
        )

    def inline(self, uri: str, line: int, character: int, timeout: float = 30) -> dict[str, Any]:
        return self.request(
            "textDocument/inlineCompletion",
            {
                "textDocument": {"uri": uri},
                "position": {"line": line, "character": character},
                "context": {"triggerKind": 2},
            },
            timeout,
        )

    def suggestion(self, uri: str, line: int, character: int, timeout: float = 30) -> str:
        result = self.inline(uri, line, character, timeout).get("result") or {}
        items = result.get("items") or []
        return str(items[0]["insertText"]) if items else ""


class Served:
    """`specls serve ARGS` on stdio; stderr goes to a file so that nothing blocks."""

    def __init__(self, args: Sequence[str], tmp: Path, env: dict[str, str] | None = None) -> None:
        self.stderr_path = tmp / f"stderr-{time.monotonic_ns()}.txt"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            serve_command(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env or server_env(),
            cwd=tmp,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        stdin = self.proc.stdin

        def write(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        self.wire = Wire(self.proc.stdout, write)

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def signal(self, signum: signal.Signals) -> None:
        self.proc.send_signal(signum)

    def wait_exit(self, timeout: float = 10) -> tuple[int, float]:
        """(exit code, seconds it took)."""
        started = time.monotonic()
        code = self.proc.wait(timeout)
        return code, time.monotonic() - started

    @property
    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._stderr.close()


def connect_tcp(port: int, timeout: float = 10) -> tuple[socket.socket, Wire]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.settimeout(None)
    return sock, Wire(sock.makefile("rb"), sock.sendall)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_clean(stderr: str) -> None:
    """No traceback and no C++ abort in what the server wrote to stderr."""
    assert "Traceback" not in stderr, stderr
    assert "terminate called" not in stderr, stderr
