"""The one typist that `specls demo` and `specls bench keystrokes` share, and the editor it types into.

`Replay` is the person: a fixed pace (`Cadence`), Enter brings the indentation (auto-indent) and is followed by
a pause (a new line is where people stop to think), and with `accept` Tab when the ghost text is exactly the
rest of the line and accept-line for each further line that is right (`tab_accept`). It types into an
`Editor`: an editor with its completion client, which applies each key press, asks for suggestions its own
way and says what ghost text is on screen. Every key press records what was on screen when it came
(`ghost_before`): that, not latency alone, says what the user got. Two editors exist:

- `LspEditor`: VS Code on `specls serve`. A key press is an incremental `didChange`, then a
  `textDocument/inlineCompletion` request; a request still unanswered when the next key comes is cancelled
  (`$/cancelRequest`) and its answer is never shown. Ghost text stays on screen while the typed characters
  agree with it (VS Code reuses a suggestion the typing still matches, even when the newer request comes back
  empty); a key that disagrees clears it, and the answer to the newest request replaces it. When the server
  says a suggestion answered in part is whole (`specls/suggestionGrown`) and its part is still on screen, the
  client asks again at the cursor, as the VS Code extension does, and shows the answer. Accepting tells the
  server (`specls.accept` or `specls/didPartiallyAccept`).
- `bench.llama_vim_client.LlamaVimEditor`: llama.vim on llama-server (`specls bench keystrokes --peer`).
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from lsp_server.jobs import generation_of
from lsp_server.typist.client import ServerSession, first_suggestion
from lsp_server.typist.keystrokes import (
    Cadence,
    MatchKind,
    after_key,
    classify_match,
    next_keystroke,
    plan_keystrokes,
    ratio,
    tab_accept,
    tokens_per_target_forward,
)

STATS_INTERVAL_S = 0.25
DRAIN_TIMEOUT_S = 120.0
Outcome = Literal["pending", "suggestion", "empty", "cancelled", "error"]
CANCELLED_CODE = -32800


@dataclass
class KeyEvent:
    """One key press and the inline-completion request sent right after it."""

    index: int
    offset: int  # the cursor after the key press: where the suggestion applies
    sent_at: float
    key: str = ""  # what the key press inserted
    accepted: int = 0  # > 0: an accept key (Tab / accept-line) that took this many characters of ghost text
    ghost_before: str | None = None  # the ghost text on screen when this key came
    answered_at: float | None = None
    outcome: Outcome = "pending"
    suggestion: str = ""
    suggestion_id: str | None = None
    superseded: bool = False  # the next key came first: the client cancelled the request
    error: str | None = None
    match: MatchKind | None = None  # for a non-empty suggestion: how much of it was typed next

    @property
    def latency_ms(self) -> float | None:
        return None if self.answered_at is None else (self.answered_at - self.sent_at) * 1000

    @property
    def ghost_was_right(self) -> bool:
        """Ghost text was on screen when this key came, and the key agreed with it."""
        return self.ghost_before is not None and (self.accepted > 0 or self.ghost_before.startswith(self.key))


@dataclass(frozen=True)
class LiveStats:
    """The server's counters (from `specls/stats`) as the demo shows them."""

    draft_acceptance: float | None
    tokens_per_forward: float | None
    cancelled_generations: int
    generations: int
    typed_ahead_hits: int
    requests: int
    accepted: int = 0  # suggestions the server counted as accepted (whole) ...
    partially_accepted: int = 0  # ... and in part
    engine: str = ""  # what decodes, on which CPU class, and why (`engine.hardware`)

    @classmethod
    def from_server(cls, stats: dict[str, Any]) -> LiveStats:
        totals = stats.get("engine_totals") or {}
        drafted, accepted = int(totals.get("drafted", 0)), int(totals.get("accepted", 0))
        forwards = int(totals.get("target_forwards", 0))
        return cls(
            draft_acceptance=ratio(accepted, drafted),
            tokens_per_forward=tokens_per_target_forward(accepted, forwards),
            cancelled_generations=int(stats.get("cancelled_generations", 0)),
            generations=int(stats.get("generations", 0)),
            typed_ahead_hits=int(stats.get("typed_ahead_hits", 0)),
            requests=int(stats.get("requests", 0)),
            accepted=int(stats.get("accepted", 0)),
            partially_accepted=int(stats.get("partially_accepted", 0)),
            engine=str(stats.get("engine", "")),
        )


class ReplayView(Protocol):
    def keystroke(self, text: str, cursor: int, ghost: str | None) -> None: ...

    def answer(self, event: KeyEvent, ghost: str | None, source: str) -> None: ...

    def server_stats(self, stats: LiveStats) -> None: ...


class QuietView:
    """A view that shows nothing (the benchmark)."""

    def keystroke(self, text: str, cursor: int, ghost: str | None) -> None:
        pass

    def answer(self, event: KeyEvent, ghost: str | None, source: str) -> None:
        pass

    def server_stats(self, stats: LiveStats) -> None:
        pass


def visible_ghost(event: KeyEvent, source: str, cursor: int) -> str | None:
    """What an editor would still show of `event`'s suggestion with the cursor now at `cursor`: the rest of
    it after what was typed meanwhile, or None when the typing went elsewhere."""
    typed = source[event.offset : cursor]
    if not event.suggestion.startswith(typed):
        return None
    return event.suggestion[len(typed) :] or None


AnswerHook = Callable[[KeyEvent, str | None], None]


class Editor(Protocol):
    """An editor with its completion client, as the typist sees it.

    `press` applies one key press: `event.key` was typed (or, with `event.accepted`, taken from the ghost text)
    with the cursor at `event.offset - len(event.key)`. The editor then asks for suggestions its own way and
    fills in the event as answers come: `answered_at`, `outcome`, `suggestion` (what it showed for this key),
    `superseded` (the next key came before any answer). It calls `on_answer(event, ghost)` on each answer, with
    the ghost text then on screen for that event (None when it is no longer the newest)."""

    on_answer: AnswerHook | None

    @property
    def ghost(self) -> str | None: ...  # the ghost text on screen at the cursor now: what accepting inserts

    def open(self, text: str) -> None: ...  # the document as it is before typing

    def press(self, event: KeyEvent) -> None: ...

    async def finish(self) -> int: ...  # wait for the answers still due; return how many never came

    async def close(self) -> None: ...  # always called last, also when typing failed


class Replay:
    """Type `text[start:end]` into an editor whose document holds the rest of `text`, one key press at a time."""

    def __init__(
        self,
        editor: Editor,
        text: str,
        cadence: Cadence,
        view: ReplayView | None = None,
        *,
        start: int = 0,
        end: int | None = None,
        max_keystrokes: int | None = None,
        rng: random.Random | None = None,
        seed: int = 0,
        accept: bool = False,
    ) -> None:
        self.editor, self.text = editor, text
        self.start, self.end = start, len(text) if end is None else end
        self.cadence, self.view, self.accept = cadence, view or QuietView(), accept
        self.max_keystrokes = max_keystrokes if max_keystrokes is not None else len(text)
        self.planned = min(len(plan_keystrokes(text[self.start : self.end])), self.max_keystrokes)
        self.rng = rng if rng is not None else random.Random(seed)
        self.events: list[KeyEvent] = []
        self.cursor = self.start
        self.unanswered = 0  # requests with no answer at all when the drain timed out
        self.stopped_early = False

    @property
    def source(self) -> str:
        """The text as it is once typed (the view's frame of reference)."""
        return self.text

    def stop_typing(self) -> None:
        """Stop after the current key press; the answers still pending are awaited and summarised."""
        self.stopped_early = True

    async def run(self) -> list[KeyEvent]:
        self.editor.on_answer = self._answered
        typed = self.text[: self.end]
        previous_key: str | None = None
        try:
            self.editor.open(self.text[: self.start] + self.text[self.end :])
            while (
                self.cursor < self.end and len(self.events) < self.max_keystrokes and not self.stopped_early
            ):
                if previous_key is not None:
                    await asyncio.sleep(self.cadence.delay_s(previous_key, self.rng))
                ghost = self.editor.ghost
                taken = tab_accept(ghost, typed[self.cursor :]) if self.accept and ghost else ""
                key = taken or next_keystroke(typed, self.cursor)
                self.cursor += len(key)
                event = KeyEvent(len(self.events), self.cursor, time.monotonic(), key, len(taken), ghost)
                self.events.append(event)
                self.editor.press(event)
                self.view.keystroke(self.text[: self.cursor], self.cursor, self.editor.ghost)
                previous_key = key
            self.unanswered = await self.editor.finish()
        finally:
            await self.editor.close()
        return self.events

    def _answered(self, event: KeyEvent, ghost: str | None) -> None:
        if event.suggestion:
            event.match = classify_match(event.suggestion, self.text[event.offset : self.end])
        self.view.answer(event, ghost, self.text)


class LspEditor:
    """VS Code on `specls serve` (the module docstring says how it behaves)."""

    def __init__(
        self,
        session: ServerSession,
        uri: str,
        language_id: str,
        *,
        poll_stats: bool = True,
        on_stats: Callable[[LiveStats], None] | None = None,
    ) -> None:
        self.session, self.uri, self.language_id = session, uri, language_id
        self.poll_stats, self.on_stats = poll_stats, on_stats
        self.ghost: str | None = None
        self.on_answer: AnswerHook | None = None
        self.events: list[KeyEvent] = []
        self.answers: list[asyncio.Future[Any]] = []
        self.pending: tuple[str, asyncio.Future[Any], KeyEvent] | None = None
        self.last_stats: dict[str, Any] = {}
        self.refreshes = 0
        self._refresh: asyncio.Future[Any] | None = None  # the request made on specls/suggestionGrown
        self._poller: asyncio.Task[None] | None = None
        self._typing_done = False

    def open(self, text: str) -> None:
        self.session.open(self.uri, text, self.language_id)
        self.session.on_grown = self._grown
        if self.poll_stats:
            self._poller = asyncio.create_task(self._poll_stats())

    def press(self, event: KeyEvent) -> None:
        self.session.check_alive()
        if self.pending is not None and not self.pending[1].done():
            self.pending[2].superseded = True
            self.session.cancel(self.pending[0])  # VS Code cancels the superseded request
        if self._refresh is not None:
            self._refresh.cancel()  # its answer would be for the cursor before this key
            self._refresh = None
        if event.accepted:
            self._tell_accepted(event.key)
        self.session.insert(self.uri, event.offset - len(event.key), event.key)
        self.ghost = after_key(self.ghost, event.key)
        self.events.append(event)
        request_id, answer = self.session.request_inline(self.uri, event.offset)
        answer.add_done_callback(functools.partial(self._answered, event))
        self.answers.append(answer)
        self.pending = (request_id, answer, event)

    async def finish(self) -> int:
        unanswered = 0
        if self.answers:
            _, left = await asyncio.wait(self.answers, timeout=DRAIN_TIMEOUT_S)
            unanswered = len(left)  # every request must get an answer: the summaries count these
        await self._stop()
        self.last_stats = await self.session.stats()
        if self.on_stats is not None:
            self.on_stats(LiveStats.from_server(self.last_stats))
        # Closed before any measurement: an open copy of the whole file would let the lookup drafter copy
        # the answers from it.
        self.session.close(self.uri)
        return unanswered

    async def close(self) -> None:
        await self._stop()

    async def _stop(self) -> None:
        self._typing_done = True
        self.session.on_grown = None
        for answer in [*self.answers, *([self._refresh] if self._refresh is not None else [])]:
            answer.cancel()
        if self._poller is not None:
            poller, self._poller = self._poller, None
            await poller

    def _grown(self, uri: str, generation_id: str) -> None:
        """The suggestion whose part is on screen is whole now: ask again at the cursor, if nothing moved."""
        newest = self.events[-1] if self.events else None
        if uri != self.uri or self._typing_done or newest is None or self.ghost is None:
            return
        if newest.outcome != "suggestion" or generation_of(newest.suggestion_id or "") != generation_id:
            return
        if self._refresh is not None:
            return
        _, answer = self.session.request_inline(self.uri, newest.offset)
        self._refresh = answer
        answer.add_done_callback(functools.partial(self._refreshed, newest))

    def _refreshed(self, event: KeyEvent, answer: asyncio.Future[Any]) -> None:
        if answer is self._refresh:
            self._refresh = None
        if answer.cancelled() or answer.exception() is not None or self.events[-1] is not event:
            return
        suggestion, suggestion_id = first_suggestion(answer.result())
        if not suggestion or not suggestion.startswith(event.suggestion):
            return
        self.refreshes += 1
        event.suggestion, event.suggestion_id = suggestion, suggestion_id
        self.ghost = suggestion
        if self.on_answer is not None:
            self.on_answer(event, self.ghost)

    def _tell_accepted(self, taken: str) -> None:
        shown = next((e for e in reversed(self.events) if e.suggestion_id), None)
        if shown is not None and shown.suggestion_id is not None:
            whole = self.ghost == taken
            self.session.accepted(self.uri, shown.suggestion_id, len(taken), whole=whole)

    def _answered(self, event: KeyEvent, answer: asyncio.Future[Any]) -> None:
        event.answered_at = time.monotonic()
        if answer.cancelled():
            event.outcome = "cancelled"
        elif answer.exception() is not None:
            error = answer.exception()
            code = getattr(error, "code", None)
            event.outcome = (
                "cancelled" if code == CANCELLED_CODE or "cancel" in str(error).lower() else "error"
            )
            if event.outcome == "error":
                event.error = f"{type(error).__name__}: {error}"
        else:
            event.suggestion, event.suggestion_id = first_suggestion(answer.result())
            event.outcome = "suggestion" if event.suggestion else "empty"
        newest = self.events[-1] is event
        if newest and event.suggestion:
            self.ghost = event.suggestion  # an empty answer leaves a ghost text the typing agrees with
        if self.on_answer is not None:
            self.on_answer(event, self.ghost if newest else None)

    async def _poll_stats(self) -> None:
        while not self._typing_done:
            await asyncio.sleep(STATS_INTERVAL_S)
            try:
                stats = await asyncio.wait_for(self.session.stats(), 10)
            except Exception:  # a slow answer just skips one refresh
                continue
            if self.on_stats is not None:
                self.on_stats(LiveStats.from_server(stats))
