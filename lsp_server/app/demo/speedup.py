"""The speed-up over plain decoding: the same prompts, in the same server process, decoded plainly (drafter
"none") and speculatively (drafter "hybrid"), compared on the engine's own decode time and checked to give the
same text (greedy speculative decoding is lossless)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.words import is_word_char
from lsp_server.typist.client import ServerSession
from lsp_server.typist.keystrokes import ratio
from lsp_server.typist.replay import KeyEvent


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
    """Up to `count` cursor positions spread over the replay where the server made a suggestion. Where it made
    none (on a slow machine every key can overtake the one before), the positions after keys that end a word
    or a line, where a suggestion would have been asked for: the speed-up is measured there all the same, in
    a fresh document, and matters most on such a machine."""
    candidates = sorted({event.offset for event in events if event.suggestion})
    if not candidates:
        candidates = sorted(
            {event.offset for event in events if event.key and not is_word_char(event.key[-1])}
        )
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
    is first run once untimed to put both caches in that state; then TIMED_RUNS timed runs of each mode, in an
    order that alternates so that neither mode always goes first, each mode keeping its fastest. Times are the
    engine's decode time (after prefill).
    """
    result = Speedup()
    for number, offset in enumerate(offsets):
        await _decode(session, source, offset, drafter, language_id, file_name, f"{number}-warm")
        runs: dict[str, list[DecodedRun | None]] = {"none": [], drafter: []}
        for repeat in range(TIMED_RUNS):
            order = ("none", drafter) if (number + repeat) % 2 == 0 else (drafter, "none")
            for mode in order:
                label = f"{number}-{repeat}"  # a fresh document: no suggestion cached for it
                runs[mode].append(await _decode(session, source, offset, mode, language_id, file_name, label))
        plain, speculative = fastest_run(runs["none"]), fastest_run(runs[drafter])
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
    session.forget_settings(*WHOLE_ANSWERS)
    return result


# Each timed run must be answered with its generation's whole text, so that the texts compared are whole
# and the engine statistics read after the answer are that generation's: no early first line, no part, and
# no prefetch started after it.
WHOLE_ANSWERS = {"firstLineMs": 60_000, "partialAfterMs": 0, "prefetch": False}
FINISH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DecodedRun:
    text: str
    tokens: int
    decode_s: float
    forwards: int


# A suggestion is a few tokens, a few tenths of a second of decoding, which a machine's noise can swing by a
# third: the fastest of three runs of each mode is what the mode can do.
TIMED_RUNS = 3


def fastest_run(runs: Sequence[DecodedRun | None]) -> DecodedRun | None:
    """The fastest of one mode's runs (the first of equals); None where any had nothing to time, so that
    prompt is skipped."""
    timed = [run for run in runs if run is not None]
    if not timed or len(timed) < len(runs):
        return None
    return min(timed, key=lambda run: run.decode_s)


async def _decode(
    session: ServerSession,
    source: str,
    offset: int,
    drafter: str,
    language_id: str,
    file_name: str,
    label: int | str,
) -> DecodedRun | None:
    session.configure(drafter=drafter, **WHOLE_ANSWERS)
    uri = f"file:///specls-demo/speedup/{label}-{drafter}/{file_name}"
    session.open(uri, source[:offset], language_id)
    try:
        before = await session.stats()
        text = await session.inline_completion(uri, offset)
        after = await _when_finished(session, before)
    finally:
        session.close(uri)
    engine = after.get("last_engine_stats") or {}
    if after.get("generations", 0) != before.get("generations", 0) + 1 or "decode_s" not in engine:
        return None
    tokens = int(engine.get("new_tokens", 0))
    if tokens == 0:
        return None
    return DecodedRun(text, tokens, float(engine["decode_s"]), int(engine.get("target_forwards", 0)))


async def _when_finished(session: ServerSession, before: dict[str, Any]) -> dict[str, Any]:
    """The server's statistics once every generation started since `before` has returned."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FINISH_TIMEOUT_S
    while True:
        stats = await session.stats()
        if stats.get("finished_generations", 0) >= stats.get("generations", 0) or loop.time() > deadline:
            return stats
        await asyncio.sleep(0.02)
