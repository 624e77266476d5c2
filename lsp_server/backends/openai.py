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
- the API key comes from the environment variable the settings name (`apiKeyEnv`) and is never logged.

The HTTP and event-stream plumbing is in `http_stream.py`, the questions asked of the server at start in
`server_probe.py`. Only the constructor and `complete` touch the network (both run on the server's engine worker thread), so
`info` and `count_tokens`, which the context builder may call on any thread, never block on I/O.
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from engine.api import (
    BackendInfo,
    CancelToken,
    CompletionRequest,
    CompletionResult,
    EngineStats,
    FinishReason,
    OnText,
    cut_at_stop,
    refuse_forced_prefix,
)
from lsp_server.backends.http_stream import (
    Endpoint,
    RemoteError,
    RemoteUnavailableError,
    RetryableError,
    StreamingTransport,
    describe_failure,
)
from lsp_server.backends.server_probe import (
    DEFAULT_CHARS_PER_TOKEN,
    estimate_tokens,
    fallback_info,
    probe_server,
)
from lsp_server.config import ServerSettings
from lsp_server.secrets import normalise_key, redact

log = logging.getLogger(__name__)


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


@dataclass
class _StreamState:
    text: str = ""
    finish: FinishReason | None = None
    server_finish: str | None = None
    first_text_s: float | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)  # when this attempt began


class OpenAIBackend:
    def __init__(self, settings: ServerSettings, options: RemoteOptions | None = None) -> None:
        if not settings.endpoint:
            raise ValueError("the openai backend needs an endpoint: pass --endpoint URL or set 'endpoint'")
        self.options = options or RemoteOptions()
        self.endpoint = Endpoint.parse(settings.endpoint)
        self._model = settings.remote_model
        api_key, note = normalise_key(os.environ.get(settings.api_key_env), f"${settings.api_key_env}")
        if note:
            log.warning("%s", note)
        self.transport = StreamingTransport(
            self.endpoint,
            api_key=api_key,
            api_key_env=settings.api_key_env,
            connect_timeout_s=self.options.connect_timeout_s,
            read_timeout_s=self.options.read_timeout_s,
            probe_timeout_s=self.options.probe_timeout_s,
        )
        if self.transport.api_key and self.endpoint.scheme == "http" and not self.endpoint.is_loopback:
            log.warning(
                "sending the API key from $%s over plain http to %s",
                settings.api_key_env,
                self.endpoint.display,
            )
        # Outage bookkeeping: while down, `complete` answers empty until `_retry_at`.
        self._down = False
        self._retry_at = 0.0
        self._cooldown_s = self.options.cooldown_s
        self._chars_per_token = DEFAULT_CHARS_PER_TOKEN
        self._info_complete = False
        self._info = fallback_info(self._model, self.options.special_tokens, self.endpoint.display)
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
        return estimate_tokens(text, self._chars_per_token)

    def complete(
        self,
        request: CompletionRequest,
        *,
        on_text: OnText | None = None,
        cancel: CancelToken | None = None,
    ) -> CompletionResult:
        refuse_forced_prefix(request, "openai")
        started = time.monotonic()
        if self.transport.closed.is_set():
            return self._empty("cancelled", started)
        if self._down and started < self._retry_at:
            return self._empty("error", started, error=f"endpoint {self.endpoint.display} is unavailable")
        retries = 0 if self._down else self.options.retries  # while down, one probe per cooldown
        try:
            if not self._info_complete:
                self._refresh_info()
            state = self._stream_with_retries(request, on_text, cancel, retries)
        except (RetryableError, RemoteUnavailableError, OSError, http.client.HTTPException) as exc:
            return self._mark_down(exc, started)
        except RemoteError as exc:  # this request was bad (e.g. too long); the endpoint itself is fine
            log.warning("completion request failed: %s", exc)
            return self._empty("error", started, error=redact(str(exc)))
        if self._down:
            log.info("endpoint %s is reachable again", self.endpoint.display)
            self._down = False
            self._cooldown_s = self.options.cooldown_s
        return self._result(state, started)

    def close(self) -> None:
        self.transport.close()

    # --- streaming ---

    def _stream_with_retries(
        self, request: CompletionRequest, on_text: OnText | None, cancel: CancelToken | None, retries: int
    ) -> _StreamState:
        body = self._completion_body(request)
        not_found_hint = f" (is the model name {self._model!r} right?)"
        attempt = 0
        while True:
            state = _StreamState()
            reused = self.transport.has_connection
            try:
                end = self.transport.stream(
                    "/v1/completions",
                    body,
                    functools.partial(self._apply_event, request, state, on_text),
                    cancel=cancel,
                    not_found_hint=not_found_hint,
                )
                if state.finish is None:
                    if end == "cancelled":
                        state.finish = "cancelled"
                    else:
                        state.finish = "length" if state.server_finish == "length" else "eos"
                return state
            except (RetryableError, http.client.HTTPException, OSError) as exc:
                if (cancel is not None and cancel.cancelled) or self.transport.closed.is_set():
                    state.finish = "cancelled"
                    return state
                if reused and not state.text and not isinstance(exc, RetryableError):
                    continue  # the server closed our idle kept-alive connection: reconnect at once
                if state.text or attempt == retries:
                    raise RetryableError(str(exc) or type(exc).__name__) from exc
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

    def _apply_event(
        self,
        request: CompletionRequest,
        state: _StreamState,
        on_text: OnText | None,
        event: dict[str, Any],
    ) -> bool:
        """Fold one streamed event into `state`; True when our stop rules ended the completion."""
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise RemoteError(f"the server reported an error while streaming: {message}")
        if isinstance(event.get("usage"), dict):
            state.usage = _numbers(event["usage"])
        if isinstance(event.get("timings"), dict):
            state.timings = _numbers(event["timings"])
        for choice in event.get("choices") or []:
            piece = choice.get("text") or ""
            if choice.get("finish_reason"):
                state.server_finish = _finish_reason(choice["finish_reason"])
            if not piece:
                continue
            if state.first_text_s is None:
                state.first_text_s = time.monotonic() - state.started
            text, stopped = cut_at_stop(state.text + piece, request.stop_strings, request.stop_check)
            if stopped:
                state.finish = "stop"
            if text != state.text:
                state.text = text
                if on_text is not None and text:
                    on_text(text)
            if state.finish is not None:
                return True
        return False

    # --- outage handling ---

    def _mark_down(self, exc: BaseException, started: float) -> CompletionResult:
        self.transport.drop_connection()
        reason = describe_failure(exc)
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

    def _refresh_info(self) -> None:
        facts = probe_server(
            self.transport, self._model, self.options.special_tokens, self._info.context_length
        )
        self._model, self._info, self._chars_per_token = facts.model, facts.info, facts.chars_per_token
        self._info_complete = True

    # --- results ---

    def _empty(self, finish: FinishReason, started: float, error: str | None = None) -> CompletionResult:
        stats = EngineStats(
            wall_s=time.monotonic() - started, remote=self.endpoint.display, error=error or ""
        )
        return CompletionResult(text="", finish_reason=finish, stats=stats)

    def _result(self, state: _StreamState, started: float) -> CompletionResult:
        timings = state.timings
        stats = EngineStats(
            prompt_tokens=int(state.usage.get("prompt_tokens", 0)),
            reused_prompt_tokens=int(timings.get("cache_n", 0)),
            # llama-server's own speculation, when it runs one
            drafted=int(timings.get("draft_n", 0)),
            accepted=int(timings.get("draft_n_accepted", 0)),
            new_tokens=int(state.usage.get("completion_tokens", 0)),
            wall_s=time.monotonic() - started,
            remote=self.endpoint.display,
            first_text_s=state.first_text_s,
            server_finish_reason=state.server_finish or "",
            server_timings=dict(timings),
        )
        return CompletionResult(text=state.text, finish_reason=state.finish or "eos", stats=stats)

    def _sleep_unless_cancelled(self, delay: float, cancel: CancelToken | None) -> bool:
        deadline = time.monotonic() + delay
        while (left := deadline - time.monotonic()) > 0:
            if (cancel is not None and cancel.cancelled) or self.transport.closed.is_set():
                return True
            time.sleep(min(left, 0.01))
        return False


_FINISH_REASON = re.compile(r"[a-z_]{1,24}")


def _finish_reason(value: object) -> str:
    """The server's finish_reason when it is one word ("stop", "length"), else "other": a server-supplied
    field is never copied into the statistics as it came."""
    return value if isinstance(value, str) and _FINISH_REASON.fullmatch(value) else "other"


def _numbers(fields: dict[Any, Any]) -> dict[str, int | float]:
    """The numeric fields of a server-supplied object (usage, timings); its text never reaches the statistics."""
    return {
        redact(str(name))[:40]: value
        for name, value in fields.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
