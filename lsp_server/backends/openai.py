"""Completions from a serving engine (llama.cpp's `llama-server`, vLLM, ...) over the OpenAI-compatible
streaming `/v1/completions` API, behind the same `CompletionBackend` seam as the local engine.

The server builds the FIM prompt exactly as for the local engine; this backend only moves it over HTTP:
- tokens stream back as server-sent events and pass through the request's stop rules as they arrive; a
  stop, or a cancel from a newer keystroke, closes the connection, which tells the serving engine to stop
  generating (llama-server checks the connection between tokens, vLLM aborts the request);
- connection failures and 429/5xx answers are retried with exponential backoff, but only before any text
  arrived (a retry after that would repeat text);
- when the endpoint stays unreachable the first `complete` raises `RemoteUnavailableError` with one clear
  message; later calls answer empty at once until a growing cooldown has passed, then try again;
- the API key comes from the environment variable the settings name (`apiKeyEnv`) and is never logged;
- https endpoints are verified against the system trust store (set SSL_CERT_FILE for a private CA).

Only the constructor and `complete` touch the network (both run on the server's engine worker thread), so
`info` and `count_tokens`, which the context builder may call on any thread, never block on I/O.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.api import (
    BackendInfo,
    CancelToken,
    CompletionRequest,
    CompletionResult,
    FinishReason,
    OnText,
    refuse_forced_prefix,
)
from lsp_server.config import ServerSettings
from lsp_server.context.fim import FIM_FAMILIES

log = logging.getLogger(__name__)


def fim_token_candidates() -> tuple[str, ...]:
    """Special-token strings of the FIM families the context builder knows. A server exposes no list of its
    special tokens, so the backend asks /tokenize which of these the served tokenizer keeps as one token."""
    seen: dict[str, None] = {}
    for family in FIM_FAMILIES:
        for token in (family.prefix_token, family.suffix_token, family.middle_token, family.file_sep):
            if token:
                seen[token] = None
        for stop in family.stop_strings:
            seen[stop] = None
    return tuple(seen)


# Code-like text whose server-side token count calibrates the local estimate used by `count_tokens`.
_CALIBRATION_TEXT = (
    "def parse_config(path: str) -> dict[str, int]:\n"
    '    """Read KEY=VALUE lines, skipping comments."""\n'
    "    result = {}\n"
    "    with open(path, encoding='utf-8') as handle:\n"
    "        for line in handle:\n"
    "            if line.startswith('#') or '=' not in line:\n"
    "                continue\n"
    "            key, value = line.split('=', 1)\n"
    "            result[key.strip()] = int(value)\n"
    "    return result\n"
)
_DEFAULT_CHARS_PER_TOKEN = 3.0  # a cautious guess for code until calibrated
_ESTIMATE_MARGIN = 1.1  # over-count a little: a prompt a bit short beats one past the server's context


class _Secret:
    """Holds the API key so that printing the backend, its attributes or a traceback never shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<hidden>"


class RemoteError(RuntimeError):
    """The endpoint answered, but not with a completion (bad request, unknown model, auth, ...)."""


class RemoteUnavailableError(RemoteError):
    """The endpoint cannot be reached or keeps failing; raised once per outage with a clear message."""


@dataclass(frozen=True)
class RemoteOptions:
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 30.0  # longest silence allowed between two streamed events
    retries: int = 2  # extra attempts after a failed connection or a 429/5xx answer
    backoff_s: float = 0.2  # first retry delay, doubled each time
    cooldown_s: float = 2.0  # answer empty at once for this long after an outage is detected ...
    max_cooldown_s: float = 30.0  # ... doubling while the endpoint stays down, up to this
    special_tokens: tuple[str, ...] | None = None  # None = ask the server which FIM tokens it has
    probe_timeout_s: float = 2.0  # for the one-off /v1/models, /props and /tokenize calls


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


@dataclass
class _StreamState:
    text: str = ""
    finish: FinishReason | None = None
    server_finish: str | None = None
    first_text_s: float | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)


class _Retryable(Exception):
    """A failure worth retrying (connection refused/reset, timeout before any data, 429/5xx)."""


def stop_index(text: str, request: CompletionRequest) -> int | None:
    """Where the request's stop strings or StopCheck end `text`, or None to keep going."""
    cuts = [index for s in request.stop_strings if s and (index := text.find(s)) >= 0]
    checked = request.stop_check(text) if request.stop_check is not None else None
    if checked is not None:
        cuts.append(checked)
    return min(cuts) if cuts else None


def iter_sse_data(lines: Iterator[bytes]) -> Iterator[str]:
    """The `data:` payloads of a server-sent event stream (one JSON object per event here)."""
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line.startswith("data:"):
            yield line[5:].lstrip()
        elif line.startswith("error:"):  # llama-server reports some failures as an `error:` event
            yield json.dumps({"error": {"message": line[6:].strip()}})


class OpenAIBackend:
    def __init__(self, settings: ServerSettings, options: RemoteOptions | None = None) -> None:
        if not settings.endpoint:
            raise ValueError("the openai backend needs an endpoint: pass --endpoint URL or set 'endpoint'")
        self.options = options or RemoteOptions()
        self.endpoint = Endpoint.parse(settings.endpoint)
        self._model = settings.remote_model
        self._api_key_env = settings.api_key_env
        key = os.environ.get(settings.api_key_env)
        self._api_key = _Secret(key) if key else None  # never logged, never in messages
        if self._api_key and self.endpoint.scheme == "http" and not self.endpoint.is_loopback:
            log.warning(
                "sending the API key from $%s over plain http to %s",
                settings.api_key_env,
                self.endpoint.display,
            )
        self._ssl_context = ssl.create_default_context() if self.endpoint.scheme == "https" else None
        self._connection: http.client.HTTPConnection | None = None  # kept alive between requests
        self._closed = threading.Event()
        # Outage bookkeeping: while down, `complete` answers empty until `_retry_at`.
        self._down = False
        self._retry_at = 0.0
        self._cooldown_s = self.options.cooldown_s
        self._chars_per_token = _DEFAULT_CHARS_PER_TOKEN
        self._info_complete = False
        self._info = self._fallback_info()
        try:
            self._refresh_info()
        except (OSError, RemoteError, http.client.HTTPException, ValueError) as exc:
            # Not fatal: the endpoint may come up later, and the first completion reports the outage.
            log.warning(
                "endpoint %s not reachable yet (%s); will retry on the first completion",
                self.endpoint.display,
                exc,
            )

    # --- CompletionBackend ---

    def info(self) -> BackendInfo:
        return self._info

    def count_tokens(self, text: str) -> int:
        """A local estimate calibrated against the server's tokenizer: no round trip per keystroke."""
        if not text:
            return 0
        return math.ceil(len(text) / self._chars_per_token * _ESTIMATE_MARGIN)

    def complete(
        self,
        request: CompletionRequest,
        *,
        on_text: OnText | None = None,
        cancel: CancelToken | None = None,
    ) -> CompletionResult:
        refuse_forced_prefix(request, "openai")
        started = time.monotonic()
        if self._closed.is_set():
            return self._empty("cancelled", started)
        if self._down and started < self._retry_at:
            return self._empty("error", started, error=f"endpoint {self.endpoint.display} is unavailable")
        retries = 0 if self._down else self.options.retries  # while down, one probe per cooldown
        try:
            if not self._info_complete:
                self._refresh_info()
            state = self._stream_with_retries(request, on_text, cancel, retries)
        except (_Retryable, RemoteUnavailableError, OSError, http.client.HTTPException) as exc:
            return self._mark_down(exc, started)
        except RemoteError as exc:  # this request was bad (e.g. too long); the endpoint itself is fine
            log.warning("completion request failed: %s", exc)
            return self._empty("error", started, error=str(exc))
        if self._down:
            log.info("endpoint %s is reachable again", self.endpoint.display)
            self._down = False
            self._cooldown_s = self.options.cooldown_s
        return self._result(state, started)

    def close(self) -> None:
        self._closed.set()
        self._drop_connection()

    # --- streaming ---

    def _stream_with_retries(
        self, request: CompletionRequest, on_text: OnText | None, cancel: CancelToken | None, retries: int
    ) -> _StreamState:
        body = self._completion_body(request)
        attempt = 0
        while True:
            state = _StreamState()
            reused = self._connection is not None
            try:
                self._stream(body, request, state, on_text, cancel)
                return state
            except (_Retryable, http.client.HTTPException, OSError) as exc:
                if (cancel is not None and cancel.cancelled) or self._closed.is_set():
                    state.finish = "cancelled"
                    return state
                if reused and not state.text and not isinstance(exc, _Retryable):
                    continue  # the server closed our idle kept-alive connection: reconnect at once
                if state.text or attempt == retries:
                    raise _Retryable(str(exc) or type(exc).__name__) from exc
                delay = self.options.backoff_s * (2**attempt)
                log.info("request to %s failed (%s); retrying in %.2f s", self.endpoint.display, exc, delay)
                if self._sleep_unless_cancelled(delay, cancel):
                    state.finish = "cancelled"
                    return state
                attempt += 1

    def _completion_body(self, request: CompletionRequest) -> bytes:
        body: dict[str, Any] = {
            "prompt": request.prompt,
            "max_tokens": request.max_new_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self._model:
            body["model"] = self._model
        if request.top_k > 0:
            body["top_k"] = request.top_k  # an extension both llama-server and vLLM accept
        if request.seed is not None:
            body["seed"] = request.seed
        if request.stop_strings:
            body["stop"] = list(request.stop_strings)
        return json.dumps(body).encode("utf-8")

    def _stream(
        self,
        body: bytes,
        request: CompletionRequest,
        state: _StreamState,
        on_text: OnText | None,
        cancel: CancelToken | None,
    ) -> None:
        """POST the request and fold its events into `state`; a stop or cancel closes the connection."""
        connection = self._open_connection()
        done = threading.Event()
        watcher = None
        if cancel is not None:
            watcher = threading.Thread(
                target=self._close_on_cancel, args=(connection, cancel, done), daemon=True
            )
            watcher.start()
        keep_alive = False
        saw_done = False
        try:
            connection.request(
                "POST", self.endpoint.prefix + "/v1/completions", body=body, headers=self._headers()
            )
            response = connection.getresponse()
            self._check_status(response)
            started = time.monotonic()
            for payload in iter_sse_data(iter(response.readline, b"")):
                if payload == "[DONE]":
                    saw_done = True
                    response.read()  # drain the chunked terminator so the connection can be reused
                    keep_alive = not response.will_close
                    break
                self._apply_event(_parse_event(payload), request, state, on_text, started)
                if state.finish is not None:  # our stop rules ended it: close so the server stops too
                    break
                if cancel is not None and cancel.cancelled:
                    break
        except (OSError, http.client.HTTPException):
            if cancel is not None and cancel.cancelled:
                state.finish = "cancelled"  # the watcher shut the socket under us
                return
            raise
        finally:
            done.set()
            if watcher is not None:
                watcher.join()
            if keep_alive and not (cancel is not None and cancel.cancelled):
                self._connection = connection
            else:
                connection.close()  # mid-stream, this is what makes the server stop generating
        if state.finish is not None:
            return
        if cancel is not None and cancel.cancelled:
            state.finish = "cancelled"
        elif not saw_done:
            raise _Retryable("the stream ended before the server finished")
        else:
            state.finish = "length" if state.server_finish == "length" else "eos"

    def _apply_event(
        self,
        event: dict[str, Any],
        request: CompletionRequest,
        state: _StreamState,
        on_text: OnText | None,
        started: float,
    ) -> None:
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise RemoteError(f"the server reported an error while streaming: {message}")
        if isinstance(event.get("usage"), dict):
            state.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            state.timings = event["timings"]
        for choice in event.get("choices") or []:
            piece = choice.get("text") or ""
            if choice.get("finish_reason"):
                state.server_finish = str(choice["finish_reason"])
            if not piece:
                continue
            if state.first_text_s is None:
                state.first_text_s = time.monotonic() - started
            text = state.text + piece
            cut = stop_index(text, request)
            if cut is not None:
                text = text[:cut]
                state.finish = "stop"
            if text != state.text:
                state.text = text
                if on_text is not None and text:
                    on_text(text)
            if state.finish is not None:
                return

    def _close_on_cancel(
        self, connection: http.client.HTTPConnection, cancel: CancelToken, done: threading.Event
    ) -> None:
        """Runs beside a stream: a cancel shuts the socket, which unblocks the reader and ends the request."""
        while not done.wait(0.005):
            if cancel.cancelled or self._closed.is_set():
                sock = connection.sock
                if sock is not None:
                    with contextlib.suppress(OSError):  # already closed
                        sock.shutdown(socket.SHUT_RDWR)
                return

    # --- HTTP plumbing ---

    def _open_connection(self) -> http.client.HTTPConnection:
        connection, self._connection = self._connection, None
        if connection is not None and connection.sock is not None:
            return connection  # a kept-alive connection; a stale one fails fast and is retried
        connection = self._new_connection(self.options.connect_timeout_s)
        connection.connect()
        assert connection.sock is not None
        connection.sock.settimeout(self.options.read_timeout_s)
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._ssl_context is not None:
            return http.client.HTTPSConnection(
                self.endpoint.host, self.endpoint.port, timeout=timeout, context=self._ssl_context
            )
        return http.client.HTTPConnection(self.endpoint.host, self.endpoint.port, timeout=timeout)

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key.reveal()}"
        return headers

    def _check_status(self, response: http.client.HTTPResponse) -> None:
        if response.status == 200:
            return
        detail = _error_detail(response.read(4096))
        where = f"{self.endpoint.display} answered {response.status}"
        if response.status in (429, 500, 502, 503, 504):
            raise _Retryable(f"{where}: {detail}")
        if response.status in (401, 403):
            hint = (
                f"check the API key in ${self._api_key_env}"
                if self._api_key
                else (f"the server wants an API key: put it in ${self._api_key_env}")
            )
            raise RemoteUnavailableError(f"{where} ({hint}): {detail}")
        if response.status == 404:
            raise RemoteUnavailableError(f"{where}: {detail} (is the model name {self._model!r} right?)")
        raise RemoteError(f"{where}: {detail}")

    def _get_json(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """One short, non-streaming call (probing); raises on any failure."""
        connection = self._new_connection(self.options.probe_timeout_s)
        try:
            body = json.dumps(payload).encode("utf-8") if payload is not None else None
            connection.request(method, self.endpoint.prefix + path, body=body, headers=self._headers())
            response = connection.getresponse()
            data = response.read()
            if response.status != 200:
                raise RemoteError(f"{path} answered {response.status}: {_error_detail(data)}")
            try:
                parsed = json.loads(data)
            except ValueError as exc:
                raise RemoteError(f"{path} did not answer JSON") from exc
            if not isinstance(parsed, dict):
                raise RemoteError(f"{path} answered {type(parsed).__name__}, expected an object")
            return parsed
        finally:
            connection.close()

    # --- outage handling ---

    def _mark_down(self, exc: BaseException, started: float) -> CompletionResult:
        self._drop_connection()
        reason = _describe_failure(exc)
        message = (
            f"the completion endpoint {self.endpoint.display} is unavailable ({reason}); "
            f"answering empty and retrying in {self._cooldown_s:g} s"
        )
        self._retry_at = time.monotonic() + self._cooldown_s
        self._cooldown_s = min(self._cooldown_s * 2, self.options.max_cooldown_s)
        if self._down:
            log.debug("endpoint still down: %s", reason)
            return self._empty("error", started, error=message)
        self._down = True
        log.error("%s", message)
        raise RemoteUnavailableError(message) from exc

    # --- server facts ---

    def _fallback_info(self) -> BackendInfo:
        return BackendInfo(
            name="openai",
            target=self._model or "(server default)",
            draft=None,
            special_tokens=self.options.special_tokens or (),
            context_length=2048,
            device=self.endpoint.display,
        )

    def _refresh_info(self) -> None:
        """Ask the server for its model, context size and FIM tokens, and calibrate token counting."""
        model = self._model
        context_length = self._info.context_length
        try:
            models = self._get_json("GET", "/v1/models").get("data") or []
        except RemoteError as exc:  # it answered, so it is up; the completion call will say what is wrong
            log.warning("could not list the server's models: %s", exc)
            models = []
        if models:
            entry = next((m for m in models if m.get("id") == model), models[0])
            model = model or entry.get("id")
            if isinstance(entry.get("max_model_len"), int):  # vLLM
                context_length = entry["max_model_len"]
            meta = entry.get("meta") or {}
            if isinstance(meta.get("n_ctx_train"), int):  # llama-server
                context_length = meta["n_ctx_train"]
        try:  # llama-server: the context actually allocated per slot
            props = self._get_json("GET", "/props")
            n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
            if isinstance(n_ctx, int) and n_ctx > 0:
                context_length = n_ctx
        except RemoteError:
            pass  # not llama-server
        self._model = model
        special = self.options.special_tokens
        try:
            if special is None:
                special = tuple(t for t in fim_token_candidates() if len(self._tokenize(t)) == 1)
            self._chars_per_token = len(_CALIBRATION_TEXT) / max(1, len(self._tokenize(_CALIBRATION_TEXT)))
        except RemoteError as exc:
            log.info("server has no usable /tokenize (%s); special tokens must be configured", exc)
        self._info = BackendInfo(
            name="openai",
            target=model or "(server default)",
            draft=None,
            special_tokens=tuple(special or ()),
            context_length=context_length,
            device=self.endpoint.display,
        )
        self._info_complete = True
        log.info(
            "remote model %s at %s: context %d, special tokens %s",
            self._info.target,
            self.endpoint.display,
            context_length,
            ", ".join(self._info.special_tokens) or "none",
        )

    def _tokenize(self, text: str) -> list[Any]:
        # llama-server reads "content" (+ parse_special), vLLM reads "prompt" (+ add_special_tokens).
        payload: dict[str, Any] = {
            "content": text,
            "prompt": text,
            "add_special": False,
            "add_special_tokens": False,
            "parse_special": True,
        }
        if self._model:
            payload["model"] = self._model
        tokens = self._get_json("POST", "/tokenize", payload).get("tokens")
        if not isinstance(tokens, list):
            raise RemoteError("/tokenize returned no token list")
        return tokens

    # --- results ---

    def _empty(self, finish: FinishReason, started: float, error: str | None = None) -> CompletionResult:
        stats: dict[str, Any] = {"wall_s": time.monotonic() - started, "remote": self.endpoint.display}
        if error:
            stats["error"] = error
        return CompletionResult(text="", finish_reason=finish, stats=stats)

    def _result(self, state: _StreamState, started: float) -> CompletionResult:
        timings = state.timings
        stats: dict[str, Any] = {
            "wall_s": time.monotonic() - started,
            "first_text_s": state.first_text_s,
            "remote": self.endpoint.display,
            "server_finish_reason": state.server_finish,
        }
        if "prompt_tokens" in state.usage:
            stats["prompt_tokens"] = state.usage["prompt_tokens"]
        if "completion_tokens" in state.usage:
            stats["new_tokens"] = state.usage["completion_tokens"]  # same name as the local engine
        if timings:
            stats["server_timings"] = timings
            if "cache_n" in timings:
                stats["reused_prompt_tokens"] = timings["cache_n"]
            if "draft_n" in timings:  # llama-server's own speculation, when it runs one
                stats["drafted"] = timings["draft_n"]
                stats["accepted"] = timings.get("draft_n_accepted", 0)
        return CompletionResult(text=state.text, finish_reason=state.finish or "eos", stats=stats)

    def _sleep_unless_cancelled(self, delay: float, cancel: CancelToken | None) -> bool:
        deadline = time.monotonic() + delay
        while (left := deadline - time.monotonic()) > 0:
            if (cancel is not None and cancel.cancelled) or self._closed.is_set():
                return True
            time.sleep(min(left, 0.01))
        return False


def _parse_event(payload: str) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise RemoteError(f"the server sent an event that is not JSON: {payload[:200]!r}") from exc
    if not isinstance(event, dict):
        raise RemoteError(f"the server sent an unexpected event: {payload[:200]!r}")
    return event


def _error_detail(data: bytes) -> str:
    """The message inside an OpenAI-style error body, or the start of the body."""
    text = data.decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:300] or "(empty body)"
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])[:300]
    return text[:300]


def _describe_failure(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused: is the server running?"
    if isinstance(cause, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {cause.verify_message}"
    if isinstance(cause, socket.gaierror):
        return f"host not found: {cause}"
    return str(exc) or type(exc).__name__
