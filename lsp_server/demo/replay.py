"""The replay: type a file into the server at a human cadence, ask for ghost text after every key press (as
editors do, without waiting for the previous answer), and record what came back and when.

Then the honest speed-up: the same prompts, in the same server process, decoded plainly (drafter "none")
and speculatively (drafter "hybrid"), compared on the engine's own decode time and checked to give the
same text (greedy speculative decoding is lossless).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lsp_server.demo.client import ServerError, ServerSession
from lsp_server.demo.keystrokes import (
    Cadence,
    MatchKind,
    accepted_length,
    classify_match,
    next_keystroke,
    plan_keystrokes,
    ratio,
    tokens_per_target_forward,
)

STATS_INTERVAL_S = 0.25
DRAIN_TIMEOUT_S = 120.0


@dataclass
class KeyEvent:
    """One key press and the inline-completion request sent right after it."""

    index: int
    offset: int  # the cursor after the key press: where the suggestion applies
    sent_at: float
    answered_at: float | None = None
    suggestion: str = ""
    suggestion_id: str | None = None
    accepted: int = 0  # characters this key press took from the ghost text (Tab / accept-word)
    superseded: bool = False  # answered empty after a newer key press: the server dropped it
    error: str | None = None
    match: MatchKind | None = None  # for a non-empty suggestion: how much of it was typed next

    @property
    def latency_ms(self) -> float | None:
        return None if self.answered_at is None else (self.answered_at - self.sent_at) * 1000


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
        )


class ReplayView(Protocol):
    def keystroke(self, text: str, cursor: int, ghost: str | None) -> None: ...

    def answer(self, event: KeyEvent, ghost: str | None, source: str) -> None: ...

    def server_stats(self, stats: LiveStats) -> None: ...


def visible_ghost(event: KeyEvent, source: str, cursor: int) -> str | None:
    """What an editor would still show of `event`'s suggestion with the cursor now at `cursor`: the rest of
    it after what was typed meanwhile, or None when the typing went elsewhere."""
    typed = source[event.offset : cursor]
    if not event.suggestion.startswith(typed):
        return None
    return event.suggestion[len(typed) :] or None


class Replay:
    def __init__(
        self,
        session: ServerSession,
        source: str,
        uri: str,
        language_id: str,
        cadence: Cadence,
        view: ReplayView,
        max_keystrokes: int | None = None,
        seed: int = 0,
        accept: bool = False,
    ) -> None:
        self.session, self.source, self.uri, self.language_id = session, source, uri, language_id
        self.cadence, self.view, self.accept = cadence, view, accept
        self.max_keystrokes = max_keystrokes if max_keystrokes is not None else len(source)
        self.planned = min(len(plan_keystrokes(source)), self.max_keystrokes)  # without accepting
        self.rng = random.Random(seed)
        self.events: list[KeyEvent] = []
        self.cursor = 0
        self.shown: KeyEvent | None = None  # whose suggestion is the ghost text now
        self.newest_answer = -1  # index of the newest request whose answer an editor would display
        self.last_stats: dict[str, Any] = {}
        self._typing_done = False
        self.stopped_early = False

    def stop_typing(self) -> None:
        """Stop after the current key press; the answers still pending are awaited and summarised."""
        self.stopped_early = True

    async def run(self) -> list[KeyEvent]:
        self.session.open(self.uri, "", self.language_id)
        poller = asyncio.create_task(self._poll_stats())
        requests: list[asyncio.Task[None]] = []
        try:
            while (
                self.cursor < len(self.source)
                and len(self.events) < self.max_keystrokes
                and not self.stopped_early
            ):
                key = next_keystroke(self.source, self.cursor)
                await asyncio.sleep(self.cadence.delay_s(key, self.rng))
                self.session.check_alive()
                accepted = self._accept() if self.accept else 0
                if accepted:
                    key = self.source[self.cursor : self.cursor + accepted]
                self.session.insert(self.uri, self.cursor, key)
                self.cursor += len(key)
                event = KeyEvent(len(self.events), self.cursor, time.monotonic(), accepted=accepted)
                self.events.append(event)
                requests.append(asyncio.create_task(self._ask(event)))
                self.view.keystroke(self.source[: self.cursor], self.cursor, self._ghost())
            try:
                await asyncio.wait_for(asyncio.gather(*requests), DRAIN_TIMEOUT_S)
            except TimeoutError as exc:
                raise ServerError(f"the server left requests unanswered for {DRAIN_TIMEOUT_S:.0f} s") from exc
        finally:
            self._typing_done = True
            for task in requests:
                task.cancel()
            await poller
        self.last_stats = await self.session.stats()
        self.view.server_stats(LiveStats.from_server(self.last_stats))
        # Closed before any measurement: an open copy of the whole file would let the lookup drafter copy
        # the answers from it.
        self.session.close(self.uri)
        return self.events

    def _accept(self) -> int:
        """Take what the ghost text offers of what comes next (as a user pressing Tab would); tell the server."""
        ghost = self._ghost()
        if ghost is None or self.shown is None or self.shown.suggestion_id is None:
            return 0
        length = accepted_length(ghost, self.source[self.cursor :])
        if length:
            self.session.accepted(self.uri, self.shown.suggestion_id, length, whole=length == len(ghost))
        return length

    def _ghost(self) -> str | None:
        return visible_ghost(self.shown, self.source, self.cursor) if self.shown is not None else None

    async def _ask(self, event: KeyEvent) -> None:
        try:
            event.suggestion, event.suggestion_id = await self.session.inline_item(self.uri, event.offset)
        except Exception as exc:  # shown in the summary; the replay goes on
            event.error = f"{type(exc).__name__}: {exc}"
        event.answered_at = time.monotonic()
        newest = self.events[-1].index
        event.superseded = not event.suggestion and event.error is None and newest > event.index
        if event.suggestion:
            event.match = classify_match(event.suggestion, self.source[event.offset :])
        # An editor shows the newest answer, and an empty one clears the ghost text, unless it only came
        # back empty because a newer request replaced it.
        if event.index >= self.newest_answer and (event.suggestion or not event.superseded):
            self.newest_answer = event.index
            self.shown = event if event.suggestion else None
        self.view.answer(event, self._ghost(), self.source)

    async def _poll_stats(self) -> None:
        while not self._typing_done:
            await asyncio.sleep(STATS_INTERVAL_S)
            try:
                stats = await asyncio.wait_for(self.session.stats(), 10)
            except Exception:  # a slow answer just skips one refresh
                continue
            self.view.server_stats(LiveStats.from_server(stats))


# --- speed-up over plain decoding ---


@dataclass(frozen=True)
class DecodeSample:
    offset: int
    plain_tokens: int
    speculative_tokens: int
    plain_decode_s: float
    speculative_decode_s: float
    plain_forwards: int
    speculative_forwards: int
    same_text: bool


@dataclass
class Speedup:
    samples: list[DecodeSample] = field(default_factory=list)
    skipped: int = 0  # points where a mode ran no generation (e.g. the cursor was in a comment)

    @property
    def plain_tokens_per_s(self) -> float | None:
        return ratio(
            sum(sample.plain_tokens for sample in self.samples),
            sum(sample.plain_decode_s for sample in self.samples),
        )

    @property
    def speculative_tokens_per_s(self) -> float | None:
        return ratio(
            sum(sample.speculative_tokens for sample in self.samples),
            sum(sample.speculative_decode_s for sample in self.samples),
        )

    @property
    def factor(self) -> float | None:
        """Speculative decode throughput over plain decode throughput, on the same prompts."""
        plain, speculative = self.plain_tokens_per_s, self.speculative_tokens_per_s
        return ratio(speculative, plain) if plain and speculative else None

    @property
    def identical(self) -> int:
        return sum(sample.same_text for sample in self.samples)


def pick_offsets(events: Sequence[KeyEvent], count: int) -> list[int]:
    """Up to `count` cursor positions spread over the replay where the server made a suggestion."""
    candidates = sorted({event.offset for event in events if event.suggestion})
    if len(candidates) <= count:
        return candidates
    step = len(candidates) / count
    return [candidates[int(step * index + step / 2)] for index in range(count)]


async def measure_speedup(
    session: ServerSession,
    source: str,
    offsets: Sequence[int],
    language_id: str,
    file_name: str,
    drafter: str = "hybrid",
    progress: Callable[[str], None] | None = None,
) -> Speedup:
    """Decode the prompt at each offset plainly and speculatively, each time in a fresh document (no cached
    suggestion, no other open file to copy from).

    While someone types, the target's and the draft's caches already hold most of the prompt, so each prompt
    is first run once untimed to put both caches in that state; then the two timed runs, in an order that
    alternates so that neither mode always goes first. Times are the engine's decode time (after prefill).
    """
    result = Speedup()
    for number, offset in enumerate(offsets):
        await _decode(session, source, offset, drafter, language_id, file_name, f"{number}-warm")
        order = ("none", drafter) if number % 2 == 0 else (drafter, "none")
        runs: dict[str, _Decoded | None] = {}
        for mode in order:
            runs[mode] = await _decode(session, source, offset, mode, language_id, file_name, number)
        plain, speculative = runs["none"], runs[drafter]
        if plain is None or speculative is None:
            result.skipped += 1
            continue
        result.samples.append(
            DecodeSample(
                offset=offset,
                plain_tokens=plain.tokens,
                speculative_tokens=speculative.tokens,
                plain_decode_s=plain.decode_s,
                speculative_decode_s=speculative.decode_s,
                plain_forwards=plain.forwards,
                speculative_forwards=speculative.forwards,
                same_text=plain.text == speculative.text,
            )
        )
        if progress is not None:
            progress(f"speed-up sample {number + 1}/{len(offsets)}: {plain.tokens} tokens")
    session.configure(drafter=drafter)
    return result


@dataclass(frozen=True)
class _Decoded:
    text: str
    tokens: int
    decode_s: float
    forwards: int


async def _decode(
    session: ServerSession,
    source: str,
    offset: int,
    drafter: str,
    language_id: str,
    file_name: str,
    label: int | str,
) -> _Decoded | None:
    session.configure(drafter=drafter)
    uri = f"file:///specls-demo/speedup/{label}-{drafter}/{file_name}"
    session.open(uri, source[:offset], language_id)
    try:
        before = await session.stats()
        text = await session.inline_completion(uri, offset)
        after = await session.stats()
    finally:
        session.close(uri)
    engine = after.get("last_engine_stats") or {}
    if after.get("generations", 0) != before.get("generations", 0) + 1 or "decode_s" not in engine:
        return None
    tokens = int(engine.get("new_tokens", 0))
    if tokens == 0:
        return None
    return _Decoded(text, tokens, float(engine["decode_s"]), int(engine.get("target_forwards", 0)))
