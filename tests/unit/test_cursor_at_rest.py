"""A cursor at rest (`specls/cursor`) starts its suggestion while the user is idle: the pure decision
(`warmups.suggest_at_rest`) table-tested, and the request that follows answered from that generation."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from test_scheduler import RULES, URI, make_harness  # noqa: F401  (the fixture)

from lsp_server.documents import DocumentStore
from lsp_server.jobs import Generation
from lsp_server.scheduling.document_state import DocumentState
from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.scheduling.warmups import suggest_at_rest
from lsp_server.suggestion_cache import SuggestionCache

TEXT = "x = 1\ndef greet("


def document(version: int = 1) -> tuple[DocumentStore, DocumentState]:
    store = DocumentStore()
    store.open(URI, "python", version, TEXT)
    return store, DocumentState(URI, cursor=len(TEXT))


def made_at(version: int, anchor: int, failed: bool = False) -> Generation:
    return Generation(
        id=1, uri=URI, version=version, doc_text=TEXT, anchor=anchor, previous_completion="", failed=failed
    )


@pytest.mark.parametrize(
    ("warm", "made", "cached", "expected"),
    [
        (True, None, False, True),  # nothing there yet: make it
        (False, None, False, False),  # warm-ups off: idle time is not spent
        (True, None, True, False),  # a suggestion for this cursor is cached
        (True, made_at(1, len(TEXT)), False, False),  # being made (typing asked for it)
        (True, made_at(1, len(TEXT), failed=True), False, True),  # it failed: try again
        (True, made_at(1, 3), False, True),  # made elsewhere: the cursor moved
        (True, made_at(0, len(TEXT)), False, True),  # for an older text
    ],
)
def test_a_resting_cursor_starts_its_suggestion_unless_one_is_there(
    warm: bool, made: Generation | None, cached: bool, expected: bool
) -> None:
    store, state = document()
    state.generation = made
    cache = SuggestionCache()
    if cached:
        cache.put(URI, TEXT, len(TEXT), "name):", 7, prefetched=False)
    settings = replace(SchedulingSettings(), warm=warm)
    assert suggest_at_rest(settings, state, store.get(URI), cache) is expected


def test_no_suggestion_at_rest_without_a_known_cursor() -> None:
    store, state = document()
    state.cursor = None
    assert not suggest_at_rest(SchedulingSettings(), state, store.get(URI), SuggestionCache())


async def test_the_request_after_a_pause_is_served_by_the_generation_the_resting_cursor_started(
    make_harness,  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    harness = await make_harness(RULES, token_delay_s=0.01, warm=True)
    harness.open(URI, TEXT)
    harness.scheduler.cursor_moved(URI, *harness.end(URI))
    made = harness.scheduler._documents.of(URI).generation
    assert made is not None and made.at_rest  # the worker gives it the tighter at-rest budget
    await asyncio.sleep(0.5)  # the user pauses; the suggestion is made meanwhile
    started = harness.scheduler.stats.generations
    assert started == 1
    assert await harness.answer(URI) == "name):\n    return 'hello ' + name\n"
    assert harness.scheduler.stats.generations == started  # no second model call


async def test_a_resting_cursor_with_nothing_sure_to_say_answers_at_once_without_a_second_call(
    make_harness,  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    harness = await make_harness([("something else", "x")], token_delay_s=0.01, warm=True)  # nothing here
    harness.open(URI, TEXT)
    harness.scheduler.cursor_moved(URI, *harness.end(URI))
    await asyncio.sleep(0.5)  # the user pauses; the generation at rest finds nothing to show
    started = harness.scheduler.stats.generations
    assert started == 1
    assert await harness.answer(URI) == ""
    assert harness.scheduler.stats.generations == started  # the same nothing, without asking the model again
    harness.type(URI, "n")
    await harness.answer(URI)
    assert harness.scheduler.stats.generations == started + 1  # a new cursor is asked about again
