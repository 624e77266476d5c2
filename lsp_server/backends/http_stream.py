"""HTTP to an OpenAI-compatible server: the endpoint, server-sent events, and a stream that a cancel closes.

- `Endpoint` parses the base URL (a trailing /v1 is accepted and dropped); `redact_url` hides credentials.
- `StreamingTransport.stream` POSTs a request and hands each event to the caller. A cancel shuts the socket
  from a watcher thread, which unblocks the reader and tells the serving engine to stop generating
  (llama-server checks the connection between tokens, vLLM aborts the request). A stream that ended cleanly
  leaves its connection open for the next request.
- `StreamingTransport.get_json` is one short, non-streaming call, for probing the server.
- The API key is held so that printing the transport, its attributes or a traceback never shows it, and
  https endpoints are verified against the system trust store (set SSL_CERT_FILE for a private CA).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from engine.api import CancelToken
from lsp_server.secrets import redact, remember

StreamEnd = Literal["done", "stopped", "cancelled"]


class RemoteError(RuntimeError):
    """The endpoint answered, but not with a completion (bad request, unknown model, auth, ...). Its text
    often quotes the endpoint's answer, so it is redacted (`lsp_server.secrets`) when made."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class RemoteUnavailableError(RemoteError):
    """The endpoint cannot be reached or keeps failing; raised once per outage with a clear message."""


class RetryableError(Exception):
    """A failure worth retrying (connection refused/reset, timeout before any data, 429/5xx); redacted too."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


@dataclass(frozen=True)
class Endpoint:
    """A parsed base URL: `http://host:port[/prefix]`; a trailing /v1 is accepted and dropped."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"endpoint must be an http:// or https:// URL with a host, got {redact_url(url)!r}"
            )
        prefix = parts.path.rstrip("/")
        prefix = prefix.removesuffix("/v1")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(scheme=parts.scheme, host=parts.hostname, port=port, prefix=prefix)

    @property
    def display(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    @property
    def is_loopback(self) -> bool:
        return self.host in ("localhost", "::1") or self.host.startswith("127.")


def redact_url(url: str) -> str:
    """The URL without any user:password part, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class Secret:
    """Holds the API key so that printing its holder, its attributes or a traceback never shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        remember(value)  # and never in any text the server makes

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<hidden>"


def iter_sse_data(lines: Iterator[bytes]) -> Iterator[str]:
    """The `data:` payloads of a server-sent event stream (one JSON object per event here)."""
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line.startswith("data:"):
            yield line[5:].lstrip()
        elif line.startswith("error:"):  # llama-server reports some failures as an `error:` event
            yield json.dumps({"error": {"message": line[6:].strip()}})


def parse_event(payload: str) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise RemoteError(f"the server sent an event that is not JSON: {payload[:200]!r}") from exc
    if not isinstance(event, dict):
        raise RemoteError(f"the server sent an unexpected event: {payload[:200]!r}")
    return event


def error_detail(data: bytes) -> str:
    """The message inside an OpenAI-style error body, or the start of the body."""
    text = redact(data.decode("utf-8", errors="replace").strip())
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:300] or "(empty body)"
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and "message" in error:
        return redact(str(error["message"]))[:300]
    return text[:300]


def describe_failure(exc: BaseException) -> str:
    """A short, human reason for a failed request (what the outage message says)."""
    cause = exc.__cause__ or exc
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused: is the server running?"
    if isinstance(cause, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {cause.verify_message}"
    if isinstance(cause, socket.gaierror):
        return f"host not found: {cause}"
    return redact(str(exc)) or type(exc).__name__


def _is_cancelled(cancel: CancelToken | None) -> bool:
    return cancel is not None and cancel.cancelled


class StreamingTransport:
    """One endpoint's connections: a kept-alive one for streams, a fresh short one per probe."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        api_key: str | None,
        api_key_env: str,
        connect_timeout_s: float,
        read_timeout_s: float,
        probe_timeout_s: float,
    ) -> None:
        self.endpoint = endpoint
        self.api_key = Secret(api_key) if api_key else None  # never logged, never in messages
        self.api_key_env = api_key_env
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s  # longest silence allowed between two streamed events
        self.probe_timeout_s = probe_timeout_s
        self.ssl_context = ssl.create_default_context() if endpoint.scheme == "https" else None
        self.closed = threading.Event()  # set by `close`: every stream ends as if cancelled
        self._connection: http.client.HTTPConnection | None = None  # kept alive between requests

    def stream(
        self,
        path: str,
        body: bytes,
        on_event: Callable[[dict[str, Any]], bool],
        *,
        cancel: CancelToken | None = None,
        not_found_hint: str = "",
    ) -> StreamEnd:
        """POST `body` and pass each event to `on_event` until it returns True ("stopped"), the server sends
        [DONE] ("done") or `cancel` fires ("cancelled"). Stopping early closes the connection, so the server
        stops generating too. Raises RetryableError when the stream ended before the server finished."""
        connection = self._open_connection()
        watching = threading.Event()
        watcher = None
        if cancel is not None:
            watcher = threading.Thread(
                target=self._close_on_cancel, args=(connection, cancel, watching), daemon=True
            )
            watcher.start()
        keep_alive = False
        end: StreamEnd | None = None
        try:
            connection.request("POST", self.endpoint.prefix + path, body=body, headers=self._headers())
            response = connection.getresponse()
            self._check_status(response, not_found_hint)
            for payload in iter_sse_data(iter(response.readline, b"")):
                if payload == "[DONE]":
                    end = "done"
                    response.read()  # drain the chunked terminator so the connection can be reused
                    keep_alive = not response.will_close
                    break
                if on_event(parse_event(payload)):
                    end = "stopped"
                    break
                if _is_cancelled(cancel):
                    break
        except (OSError, http.client.HTTPException):
            if _is_cancelled(cancel):
                return "cancelled"  # the watcher shut the socket under us
            raise
        finally:
            watching.set()
            if watcher is not None:
                watcher.join()
            if keep_alive and not _is_cancelled(cancel):
                self._connection = connection
            else:
                connection.close()  # mid-stream, this is what makes the server stop generating
        if end == "stopped":
            return end
        if _is_cancelled(cancel):
            return "cancelled"
        if end is None:
            raise RetryableError("the stream ended before the server finished")
        return end

    def get_json(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """One short, non-streaming call (probing); raises on any failure."""
        connection = self._new_connection(self.probe_timeout_s)
        try:
            body = json.dumps(payload).encode("utf-8") if payload is not None else None
            connection.request(method, self.endpoint.prefix + path, body=body, headers=self._headers())
            response = connection.getresponse()
            data = response.read()
            if response.status != 200:
                raise RemoteError(f"{path} answered {response.status}: {error_detail(data)}")
            try:
                parsed = json.loads(data)
            except ValueError as exc:
                raise RemoteError(f"{path} did not answer JSON") from exc
            if not isinstance(parsed, dict):
                raise RemoteError(f"{path} answered {type(parsed).__name__}, expected an object")
            return parsed
        finally:
            connection.close()

    def drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    @property
    def has_connection(self) -> bool:
        return self._connection is not None

    def close(self) -> None:
        self.closed.set()
        self.drop_connection()

    def _close_on_cancel(
        self, connection: http.client.HTTPConnection, cancel: CancelToken, watching: threading.Event
    ) -> None:
        """Runs beside a stream: a cancel shuts the socket, which unblocks the reader and ends the request."""
        while not watching.wait(0.005):
            if cancel.cancelled or self.closed.is_set():
                sock = connection.sock
                if sock is not None:
                    with contextlib.suppress(OSError):  # already closed
                        sock.shutdown(socket.SHUT_RDWR)
                return

    def _open_connection(self) -> http.client.HTTPConnection:
        connection, self._connection = self._connection, None
        if connection is not None and connection.sock is not None:
            return connection  # a kept-alive connection; a stale one fails fast and is retried
        connection = self._new_connection(self.connect_timeout_s)
        connection.connect()
        assert connection.sock is not None
        connection.sock.settimeout(self.read_timeout_s)
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.ssl_context is not None:
            return http.client.HTTPSConnection(
                self.endpoint.host, self.endpoint.port, timeout=timeout, context=self.ssl_context
            )
        return http.client.HTTPConnection(self.endpoint.host, self.endpoint.port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key.reveal()}"
        return headers

    def _check_status(self, response: http.client.HTTPResponse, not_found_hint: str) -> None:
        if response.status == 200:
            return
        detail = error_detail(response.read(4096))
        where = f"{self.endpoint.display} answered {response.status}"
        if response.status in (429, 500, 502, 503, 504):
            raise RetryableError(f"{where}: {detail}")
        if response.status in (401, 403):
            hint = (
                f"check the API key in ${self.api_key_env}"
                if self.api_key
                else f"the server wants an API key: put it in ${self.api_key_env}"
            )
            raise RemoteUnavailableError(f"{where} ({hint}): {detail}")
        if response.status == 404:
            raise RemoteUnavailableError(f"{where}: {detail}{not_found_hint}")
        raise RemoteError(f"{where}: {detail}")
