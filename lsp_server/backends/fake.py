"""A scripted stand-in for a model, for tests and for client development (`specls serve --backend fake`).

It behaves like a model that has memorised a few snippets: each rule is a (trigger, continuation) pair, and
when the prompt ends with `trigger` followed by some start of `continuation`, the fake generates the rest of
`continuation`, one word-or-symbol "token" at a time with a controllable delay. It honours everything the
real engine honours: max_new_tokens, stop strings, the StopCheck, on_text streaming and the CancelToken
(checked before every token, i.e. within one "round"). A continuation that starts with RAISE_MARKER makes
`complete` raise, to exercise the server's fault handling.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Sequence

from engine.api import (
    BackendInfo,
    CancelToken,
    CompletionRequest,
    CompletionResult,
    EngineStats,
    FinishReason,
    OnText,
    WarmResult,
    cut_at_stop,
    refuse_forced_prefix,
)
from lsp_server.config import FakeSettings

RAISE_MARKER = "!raise "
_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def split_tokens(text: str) -> list[str]:
    """The fake's tokenizer: runs of whitespace, words, single symbols."""
    return _TOKEN.findall(text)


def continuation_for(prompt: str, rules: Sequence[tuple[str, str]]) -> str:
    """What the scripted model generates after `prompt`: the unseen rest of the first matching rule."""
    for trigger, continuation in rules:
        start = prompt.rfind(trigger)
        while start >= 0:
            tail = prompt[start + len(trigger) :]
            if continuation.startswith(tail):
                return continuation[len(tail) :]
            start = prompt.rfind(trigger, 0, start)
    return ""


class FakeBackend:
    def __init__(self, rules: Sequence[tuple[str, str]] = (), token_delay_s: float = 0.0) -> None:
        self.rules = tuple(rules)
        self.token_delay_s = token_delay_s
        self.calls: collections.deque[tuple[CompletionRequest, CompletionResult]] = collections.deque(
            maxlen=100
        )
        self._closed = threading.Event()
        self.warmed: collections.deque[str] = collections.deque(maxlen=100)

    @classmethod
    def load(cls, settings: FakeSettings) -> FakeBackend:
        """Build from settings, pretending to load for `load_delay_ms` (and failing if told to)."""
        time.sleep(settings.load_delay_ms / 1000)
        if settings.fail_load:
            raise RuntimeError(settings.fail_load)
        return cls(settings.rules, settings.token_delay_ms / 1000)

    def info(self) -> BackendInfo:
        # No FIM special tokens: the context builder falls back to a prefix-only prompt, which the rules
        # above match against.
        return BackendInfo(
            name="fake", target="fake", draft=None, special_tokens=(), context_length=1 << 20, device="cpu"
        )

    def count_tokens(self, text: str) -> int:
        return len(split_tokens(text))

    def complete(
        self,
        request: CompletionRequest,
        *,
        on_text: OnText | None = None,
        cancel: CancelToken | None = None,
    ) -> CompletionResult:
        refuse_forced_prefix(request, "fake")
        started = time.perf_counter()
        planned = continuation_for(request.prompt, self.rules)
        if planned.startswith(RAISE_MARKER):
            raise RuntimeError(planned[len(RAISE_MARKER) :] or "scripted failure")
        tokens = split_tokens(planned)
        text = ""
        forwards = 0
        finish: FinishReason = "eos"
        for token in tokens:
            if forwards >= request.max_new_tokens:
                finish = "length"
                break
            if (cancel is not None and cancel.cancelled) or self._closed.is_set():
                finish = "cancelled"
                break
            if self.token_delay_s:
                time.sleep(self.token_delay_s)
            forwards += 1
            text, stopped = cut_at_stop(text + token, request.stop_strings, request.stop_check)
            if stopped:
                finish = "stop"
            if on_text is not None and text:
                on_text(text)
            if finish == "stop":
                break
        result = CompletionResult(
            text=text,
            finish_reason=finish,
            stats=EngineStats(
                prompt_tokens=self.count_tokens(request.prompt),
                target_forwards=forwards,
                new_tokens=forwards,
                wall_s=time.perf_counter() - started,
            ),
        )
        self.calls.append((request, result))
        return result

    def warm(self, request: CompletionRequest, *, cancel: CancelToken | None = None) -> WarmResult:
        """Record the prompt a warm-up would prefill (tests see what was warmed, and when)."""
        self.warmed.append(request.prompt)
        tokens = self.count_tokens(request.prompt)
        return WarmResult(tokens, tokens)

    def close(self) -> None:
        self._closed.set()
