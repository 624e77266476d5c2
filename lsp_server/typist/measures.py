"""What the user got from a replay, as numbers: ghost text on screen when the next key came, characters saved
by Tab, latencies, and the time from opening a file to its first suggestion. Pure functions over the
replay's `KeyEvent`s; the demo summary and `specls bench keystrokes` report the same ones."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lsp_server.statistics import percentile
from lsp_server.typist.keystrokes import ratio
from lsp_server.typist.replay import KeyEvent


@dataclass(frozen=True)
class Typed:
    """One replay: its key presses and how many characters it typed."""

    events: Sequence[KeyEvent]
    chars: int


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    return {f"p{p}": percentile(list(values), p) for p in (50, 95, 99)} | {"count": len(values)}


def user_measures(replays: Sequence[Typed]) -> dict[str, Any]:
    """The user's view of one or more replays.

    - ghost_on_screen: of the key presses after the first of each replay, the share at which ghost text was
      shown when the key came; ghost_right: ... and the key agreed with it (or accepted it).
    - chars_saved: (characters inserted by accept keys - accept keys pressed) / characters typed.
    - latency: key press -> answer of the requests the next key did not overtake, and -> non-empty answer.
    """
    presses = [event for replay in replays for event in replay.events[1:]]
    events = [event for replay in replays for event in replay.events]
    chars = sum(replay.chars for replay in replays)
    accepts = [event for event in events if event.accepted]
    accepted_chars = sum(event.accepted for event in accepts)
    answered = [e for e in events if e.outcome in ("suggestion", "empty") and not e.superseded]
    with_text = [e for e in events if e.outcome == "suggestion"]
    outcomes = Counter(
        "superseded" if e.superseded and e.outcome != "suggestion" else e.outcome for e in events
    )
    return {
        "key_presses": len(events),
        "accept_keys": len(accepts),
        "chars_typed": chars,
        "ghost_on_screen": ratio(sum(e.ghost_before is not None for e in presses), len(presses)),
        "ghost_right": ratio(sum(e.ghost_was_right for e in presses), len(presses)),
        "chars_accepted": accepted_chars,
        "chars_saved": ratio(accepted_chars - len(accepts), chars),
        "outcomes": dict(sorted(outcomes.items())),
        "answer_latency_ms": _pcts([e.latency_ms for e in answered if e.latency_ms is not None]),
        "suggestion_latency_ms": _pcts([e.latency_ms for e in with_text if e.latency_ms is not None]),
        "errors": sum(e.outcome == "error" for e in events),
    }


@dataclass(frozen=True)
class OpenProbe:
    """A file opened, `pause_s` waited, then one request at a line start: how long its answer took."""

    name: str
    pause_s: float
    latency_ms: float
    suggestion: str


CURSOR_REST_S = 0.2  # editor_clients/vscode/src/server.ts CURSOR_REST_MS


class Asker(Protocol):
    """A client that opens a document and asks for one suggestion (`ServerSession`; the llama.vim-style
    client of `bench.llama_vim_client`)."""

    def open(self, uri: str, text: str, language_id: str) -> None: ...

    def close(self, uri: str) -> None: ...

    async def inline_completion(self, uri: str, offset: int) -> str: ...


async def probe_after_open(
    session: Asker,
    name: str,
    uri: str,
    text: str,
    offset: int,
    language_id: str,
    pause_s: float,
    timeout_s: float = 120.0,
) -> OpenProbe:
    """Open `text`, wait `pause_s`, ask at `offset`; the document is closed again afterwards. A client that
    reports a resting cursor (`cursor_rests`, as the VS Code extension does CURSOR_REST_S after a file
    opens) does so during the pause."""
    session.open(uri, text, language_id)
    try:
        rests, left = getattr(session, "cursor_rests", None), pause_s
        if rests is not None and pause_s > CURSOR_REST_S:
            await asyncio.sleep(CURSOR_REST_S)
            rests(uri, offset)
            left -= CURSOR_REST_S
        if left > 0:
            await asyncio.sleep(left)
        started = time.monotonic()
        suggestion = await asyncio.wait_for(session.inline_completion(uri, offset), timeout_s)
        return OpenProbe(name, pause_s, (time.monotonic() - started) * 1000, suggestion)
    finally:
        session.close(uri)


def probe_measures(probes: Sequence[OpenProbe]) -> dict[str, Any]:
    """Per pause: latency percentiles of the first request and the share that brought a suggestion."""
    by_pause: dict[str, Any] = {}
    for pause in sorted({probe.pause_s for probe in probes}):
        group = [probe for probe in probes if probe.pause_s == pause]
        by_pause[f"{pause:g}s"] = _pcts([probe.latency_ms for probe in group]) | {
            "with_suggestion": ratio(sum(bool(probe.suggestion) for probe in group), len(group))
        }
    return by_pause
