"""Scheduler: the typed-ahead arithmetic, then newest-wins, the cancel bridge, typed-ahead reuse,
first-line-first and faults, driven in-process against the FakeBackend (no LSP transport)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from types import SimpleNamespace

import pytest

from lsp_server.backends.fake import FakeBackend, continuation_for, split_tokens
from lsp_server.config import FakeSettings, ServerSettings
from lsp_server.context import build_completion_context, finalize_completion
from lsp_server.context.builder import ContextSettings
from lsp_server.documents import DocumentStore, TextChange
from lsp_server.scheduler import PREFETCH_MAX_CHARS, Scheduler
from lsp_server.typed_ahead import (
    complete_first_line,
    part_typed,
    remainder_after,
    still_agrees,
    typed_since,
)

URI = "file:///work/a.py"
OTHER = "file:///work/b.py"


# --- pure helpers ---


@pytest.mark.parametrize(
    ("old", "anchor", "new", "expected"),
    [
        ("ab|cd".replace("|", ""), 2, "abXYcd", "XY"),
        ("abcd", 2, "abcd", ""),
        ("abcd", 4, "abcdef", "ef"),
        ("abcd", 2, "aXbcd", None),  # inserted before the anchor
        ("abcd", 2, "abcXd", None),  # inserted after the anchor
        ("abcd", 2, "abd", None),  # deletion
        ("abcd", 2, "zbXcd", None),  # same length growth but text before changed
        ("ab", 5, "abcdefg", None),  # anchor beyond the old text
    ],
)
def test_typed_since(old: str, anchor: int, new: str, expected: str | None) -> None:
    assert typed_since(old, anchor, new) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ab|cd", 0),  # nothing of it typed yet
        ("abXcd", 1),
        ("abXYcd", 2),  # all of it: accepted
        ("abXZcd", None),  # typed something else
        ("abXYZcd", None),  # past it
        ("aXbcd", None),  # elsewhere
    ],
)
def test_part_typed_of_an_assumed_insertion(text: str, expected: int | None) -> None:
    assert part_typed("abXYcd", 2, "XY", text.replace("|", "")) == expected


def test_remainder_and_agreement() -> None:
    assert remainder_after("print(x)", "pri") == "nt(x)"
    assert remainder_after("print(x)", "print(x)") == ""
    assert remainder_after("print(x)", "pra") is None
    assert still_agrees("print", "pri")  # the model is ahead of the user
    assert still_agrees("pr", "print")  # the user is ahead of the model
    assert not still_agrees("pri", "pra")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("foo()", None),
        ("foo()\nbar()", "foo()"),
        ("\n    bar()\nbaz", "\n    bar()"),  # a leading line break does not end an empty first line
        ("\n   ", None),
    ],
)
def test_complete_first_line(text: str, expected: str | None) -> None:
    assert complete_first_line(text) == expected


def test_fake_backend_follows_its_script() -> None:
    rules = [("def add(a, b):", "\n    return a + b\n")]
    assert continuation_for("x = 1\ndef add(a, b):", rules) == "\n    return a + b\n"
    assert continuation_for("def add(a, b):\n    ret", rules) == "urn a + b\n"
    assert continuation_for("def add(a, b):\n    x", rules) == ""
    assert "".join(split_tokens("a +  b\n")) == "a +  b\n"


# --- the scheduler, in-process ---


def prefix_only_context(store, uri, offset, info, settings, count_tokens):  # type: ignore[no-untyped-def]
    """Stands in for build_completion_context: the prompt is the text before the cursor."""
    text = store.get(uri).text
    return SimpleNamespace(
        prompt=text[:offset],
        prefix=text[:offset],
        suffix=text[offset:],
        mode="multi-line",
        stop_check=None,
        lookup_snippets=(),
        stop_strings=(),
        forced_prefix="",
        stop_rules=None,
        import_names=None,
        blank_line=True,
    )


class Harness:
    def __init__(self, backend: FakeBackend, settings: ServerSettings, server_context: bool = False) -> None:
        self.backend = backend
        self.store = DocumentStore()
        self.states: list[str] = []
        self.logs: list[str] = []
        self.ready = asyncio.Event()
        self.scheduler = Scheduler(
            self.store,
            settings,
            lambda s: backend,
            build_context=build_completion_context if server_context else prefix_only_context,
            finalize=finalize_completion if server_context else lambda text, ctx: text,
            on_state=self._on_state,
            on_log=lambda level, message: self.logs.append(message),
            on_grown=lambda generation: self.grown.append(generation.id),
        )
        self.scheduler.client_refreshes = True  # a client that asks again on specls/suggestionGrown
        self.grown: list[int] = []
        self.versions: dict[str, int] = {}

    def _on_state(self, state: str, message: str) -> None:
        self.states.append(state)
        if state in ("ready", "error"):
            self.ready.set()

    def open(self, uri: str, text: str) -> None:
        self.versions[uri] = 1
        self.store.open(uri, "python", 1, text)
        self.scheduler.document_changed(uri)

    def type(self, uri: str, chars: str) -> None:
        """Insert `chars` at the end of the document, as an editor would."""
        line, character = self.end(uri)
        self.versions[uri] += 1
        self.store.change(uri, self.versions[uri], [TextChange((line, character, line, character), chars)])
        self.scheduler.document_changed(uri)

    def backspace(self, uri: str, count: int = 1) -> None:
        """Delete `count` characters at the end of the document, one edit each, as an editor would."""
        for _ in range(count):
            line, character = self.end(uri)
            before = self.store.position_at(uri, len(self.store.get(uri).text) - 1)
            self.versions[uri] += 1
            self.store.change(uri, self.versions[uri], [TextChange((*before, line, character), "")])
            self.scheduler.document_changed(uri)

    def end(self, uri: str) -> tuple[int, int]:
        return self.store.position_at(uri, len(self.store.get(uri).text))

    def complete_at_end(self, uri: str) -> asyncio.Task:
        return asyncio.ensure_future(self.scheduler.complete(uri, *self.end(uri)))

    async def answer(self, uri: str) -> str:
        suggestion = await asyncio.wait_for(self.complete_at_end(uri), timeout=10)
        return suggestion.text if suggestion is not None else ""


# The scheduling tests wait for whole suggestions unless they say otherwise: no first-line deadline, no
# mid-line partial answers, no warm-ups, no prefetch (their own tests set them).
WHOLE_ANSWERS = {"first_line_ms": 60_000, "partial_after_ms": 0, "warm": False, "prefetch": False}


@pytest.fixture
async def make_harness() -> AsyncIterator:
    harnesses: list[Harness] = []

    async def make(rules, token_delay_s: float = 0.0, server_context: bool = False, **settings) -> Harness:  # type: ignore[no-untyped-def]
        harness = Harness(
            FakeBackend(rules, token_delay_s),
            replace(ServerSettings(backend="fake"), **(WHOLE_ANSWERS | settings)),
            server_context=server_context,
        )
        harnesses.append(harness)
        harness.scheduler.start(asyncio.get_running_loop())
        harness.scheduler.load(harness.scheduler.settings)
        await asyncio.wait_for(harness.ready.wait(), timeout=10)
        return harness

    yield make
    for harness in harnesses:
        harness.scheduler.stop()


RULES = [("def greet(", "name):\n    return 'hello ' + name\n")]


async def test_the_statistics_count_completions_the_degeneration_guard_cut(make_harness) -> None:
    script = [("def run():\n    ", "step()\n    step()\n    step()\n")]
    h = await make_harness(script, server_context=True)  # the server's own context and stop rules
    h.open(URI, "def run():\n    ")
    assert await h.answer(URI) == "step()"
    assert h.scheduler.stats.as_dict()["stop_rules_fired"] == {"repetition": 1}


async def test_answers_from_the_model(make_harness) -> None:
    h = await make_harness(RULES)
    h.open(URI, "def greet(")
    assert await h.answer(URI) == "name):\n    return 'hello ' + name\n"
    assert len(h.backend.calls) == 1


async def test_requests_before_ready_and_unknown_positions_answer_empty_at_once(make_harness) -> None:
    backend = FakeBackend(RULES)
    h = Harness(backend, ServerSettings(backend="fake"))
    h.open(URI, "def greet(")
    assert await h.answer(URI) == ""  # never loaded: empty, without waiting
    h = await make_harness(RULES)
    h.open(URI, "def greet(")
    assert await h.scheduler.complete("file:///nowhere.py", 0, 0) is None
    assert await h.scheduler.complete(URI, 5, 0) is None
    assert await h.scheduler.complete(URI, 0, 99) is None
    assert len(h.logs) == 3 and not h.backend.calls


async def test_newer_request_cancels_the_running_generation_and_both_are_answered(make_harness) -> None:
    rules = [("x = ", "1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11 + 12 + 13 + 14"), ("y = ", "42")]
    h = await make_harness(rules, token_delay_s=0.02)
    h.open(URI, "x = ")
    first = h.complete_at_end(URI)
    await asyncio.sleep(0.1)  # the generation is running
    h.type(URI, "0\ny = ")  # an edit the suggestion does not agree with
    second = h.complete_at_end(URI)
    assert await asyncio.wait_for(first, timeout=5) is None  # answered, empty
    assert (await asyncio.wait_for(second, timeout=5)).text == "42"
    cancelled = h.backend.calls[0][1]
    assert cancelled.finish_reason == "cancelled"
    assert cancelled.stats.target_forwards < len(split_tokens(rules[0][1]))
    assert h.scheduler.stats.cancelled_generations == 1


async def test_every_request_is_answered_in_an_edit_storm(make_harness) -> None:
    h = await make_harness([("total = ", "compute(values)")], token_delay_s=0.005)
    h.open(URI, "")
    tasks = []
    for char in "total = ":
        h.type(URI, char)
        tasks.append(h.complete_at_end(URI))
    for _ in range(200):  # type and delete a character, 200 times, requesting after each edit
        h.type(URI, "z")
        tasks.append(h.complete_at_end(URI))
        line, character = h.end(URI)
        h.versions[URI] += 1
        h.store.change(URI, h.versions[URI], [TextChange((line, character - 1, line, character), "")])
        h.scheduler.document_changed(URI)
        tasks.append(h.complete_at_end(URI))
    answers = await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    assert len(answers) == len(tasks)
    assert answers[-1] is not None and answers[-1].text == "compute(values)"
    # Stale requests were not all run: newest-wins kept the worker on the newest only.
    assert len(h.backend.calls) < len(tasks) / 2


async def test_backspace_shows_the_suggestion_made_there_again_without_the_model(make_harness) -> None:
    h = await make_harness([("def greet(", "name):"), ("def greet(x", ", y):")])
    h.open(URI, "def greet(")
    assert await h.answer(URI) == "name):"
    h.type(URI, "x")  # disagrees: a new generation
    assert await h.answer(URI) == ", y):"
    h.backspace(URI)
    assert await h.answer(URI) == "name):"  # from the cache
    h.type(URI, "n")  # agrees with the cached suggestion
    assert await h.answer(URI) == "ame):"
    assert len(h.backend.calls) == 2 and h.scheduler.stats.cache_hits == 2


async def test_coming_back_to_a_spot_shows_its_suggestion_again(make_harness) -> None:
    h = await make_harness([("def greet(", "name):"), ("x = ", "1")])
    h.open(URI, "def greet(")
    assert await h.answer(URI) == "name):"
    h.open(OTHER, "x = ")
    assert await h.answer(OTHER) == "1"
    h.type(OTHER, "2")  # typing elsewhere
    h.backspace(OTHER)
    assert await h.answer(URI) == "name):" and await h.answer(OTHER) == "1"
    assert len(h.backend.calls) == 2


async def test_new_settings_or_a_closed_document_drop_cached_suggestions(make_harness) -> None:
    h = await make_harness([("def greet(", "name):"), ("def greet(x", ", y):")])
    h.open(URI, "def greet(")
    await h.answer(URI)
    h.type(URI, "x")
    await h.answer(URI)
    h.scheduler.update_settings(replace(h.scheduler.settings, max_new_tokens=7))
    h.backspace(URI)
    assert await h.answer(URI) == "name):" and len(h.backend.calls) == 3  # made again
    h.store.close(URI)
    h.scheduler.document_closed(URI)
    h.open(URI, "def greet(")
    assert await h.answer(URI) == "name):" and len(h.backend.calls) == 4


async def _until(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


# The fake model takes the first rule that matches: each line's rule before the one that leads to it.
PREFETCH_RULES = [
    ("    b = 2\n", "    c = 3\n"),
    ("    a = 1\n", "    b = 2\n"),
    ("def f():\n", "    a = 1\n"),
]


async def test_accepting_a_suggestion_is_answered_from_the_prefetch_made_meanwhile(make_harness) -> None:
    h = await make_harness(PREFETCH_RULES, prefetch=True)
    h.open(URI, "def f():\n")
    assert await h.answer(URI) == "    a = 1\n"
    await _until(lambda: len(h.backend.calls) == 2)  # the prefetch, as if "    a = 1\n" were accepted
    assert h.backend.calls[1][0].prompt == "def f():\n    a = 1\n"
    h.type(URI, "    a = 1\n")  # Tab
    assert await h.answer(URI) == "    b = 2\n"
    stats = h.scheduler.stats
    assert stats.prefetches >= 1 and stats.prefetch_hits == 1
    await _until(lambda: len(h.backend.calls) == 3)  # Tab after Tab: the next one is prefetched too
    h.type(URI, "    b = 2\n")
    assert await h.answer(URI) == "    c = 3\n"
    assert stats.prefetch_hits == 2
    prompts = [request.prompt for request, _ in h.backend.calls]
    assert len(prompts) == len(set(prompts))  # no request made the model redo a prefetch's work


async def test_a_request_taken_by_a_running_prefetch_waits_for_it(make_harness) -> None:
    h = await make_harness(PREFETCH_RULES, token_delay_s=0.05, prefetch=True)
    h.open(URI, "def f():\n")
    assert await h.answer(URI) == "    a = 1\n"
    await _until(lambda: h.scheduler.stats.generations == 2)  # the prefetch started
    h.type(URI, "    a = 1\n")  # accepted while the prefetch is still generating
    assert len(h.backend.calls) == 1
    assert await h.answer(URI) == "    b = 2\n"
    assert len(h.backend.calls) == 2 and h.scheduler.stats.prefetch_hits == 1


async def test_typing_something_else_cancels_the_prefetch(make_harness) -> None:
    rules = [*PREFETCH_RULES, ("def f():\n    x", " = 0\n")]
    h = await make_harness(rules, token_delay_s=0.05, prefetch=True)
    h.open(URI, "def f():\n")
    assert await h.answer(URI) == "    a = 1\n"
    await _until(lambda: h.scheduler.stats.generations == 2)  # the prefetch started
    h.type(URI, "    ")  # agrees with the suggestion: the prefetch goes on
    await asyncio.sleep(0.02)
    assert h.scheduler.stats.cancelled_generations == 0
    h.type(URI, "x")  # does not
    await _until(lambda: h.scheduler.stats.cancelled_generations == 1)
    assert await h.answer(URI) == " = 0\n"
    assert h.scheduler.stats.prefetch_hits == 0


async def test_no_prefetch_in_a_file_too_big_to_re_parse_at_once(make_harness) -> None:
    big = "x = 1\n" * (PREFETCH_MAX_CHARS // 6 + 1) + "def f():\n"
    h = await make_harness(PREFETCH_RULES, prefetch=True)
    h.open(URI, big)
    assert await h.answer(URI) == "    a = 1\n"
    await asyncio.sleep(0.1)
    assert len(h.backend.calls) == 1 and h.scheduler.stats.prefetches == 0


async def test_prefetch_off_computes_nothing_ahead(make_harness) -> None:
    h = await make_harness(PREFETCH_RULES, prefetch=False)
    h.open(URI, "def f():\n")
    await h.answer(URI)
    await asyncio.sleep(0.1)
    assert len(h.backend.calls) == 1 and h.scheduler.stats.prefetches == 0


async def test_typing_that_matches_a_finished_suggestion_is_answered_without_the_model(make_harness) -> None:
    h = await make_harness(RULES)
    h.open(URI, "def greet(")
    suggestion = await h.answer(URI)
    h.type(URI, "na")
    assert await h.answer(URI) == suggestion[2:]
    h.type(URI, "me)")
    assert await h.answer(URI) == suggestion[5:]
    assert len(h.backend.calls) == 1
    assert h.scheduler.stats.typed_ahead_hits == 2


async def test_typing_that_matches_a_running_generation_keeps_it_going(make_harness) -> None:
    h = await make_harness(RULES, token_delay_s=0.03)
    h.open(URI, "def greet(")
    first = h.complete_at_end(URI)
    await asyncio.sleep(0.05)
    h.type(URI, "name")  # agrees with what is being generated
    second = h.complete_at_end(URI)
    assert (await asyncio.wait_for(second, timeout=5)).text == "):\n    return 'hello ' + name\n"
    assert (await asyncio.wait_for(first, timeout=5)).text == "name):\n    return 'hello ' + name\n"
    assert len(h.backend.calls) == 1
    assert h.backend.calls[0][1].finish_reason == "eos"


async def test_divergent_typing_starts_again_with_the_old_suggestion_as_previous_completion(
    make_harness,
) -> None:
    h = await make_harness(RULES + [("def greet(t", "itle):\n    pass\n")])
    h.open(URI, "def greet(")
    old = await h.answer(URI)
    h.type(URI, "t")
    assert await h.answer(URI) == "itle):\n    pass\n"
    assert len(h.backend.calls) == 2
    assert h.backend.calls[1][0].previous_completion == old


async def test_first_line_first_answers_early_and_serves_the_rest_from_the_same_generation(
    make_harness,
) -> None:
    h = await make_harness(RULES, token_delay_s=0.03, first_line_first=True)
    h.open(URI, "def greet(")
    assert await h.answer(URI) == "name):"
    assert not h.backend.calls  # answered while the generation was still running
    h.type(URI, "name):")  # the user accepts the first line
    assert await h.answer(URI) == "\n    return 'hello ' + name"
    await asyncio.sleep(0.3)
    assert len(h.backend.calls) == 1 and h.backend.calls[0][1].finish_reason == "eos"


async def test_cancelled_request_propagates_and_a_waiting_queue_entry_is_dropped(make_harness) -> None:
    h = await make_harness([("a", "1 2 3 4 5 6 7 8 9"), ("b", "ok")], token_delay_s=0.02)
    h.open(URI, "a")
    h.open(OTHER, "b")
    running = h.complete_at_end(URI)
    await asyncio.sleep(0.05)
    queued = h.complete_at_end(OTHER)
    await asyncio.sleep(0)
    queued.cancel()  # what pygls does on $/cancelRequest
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert (await asyncio.wait_for(running, timeout=5)).text == "1 2 3 4 5 6 7 8 9"
    assert len(h.backend.calls) == 1  # the cancelled request never reached the model


async def test_documents_are_served_fairly(make_harness) -> None:
    h = await make_harness([("a", "1 2 3 4 5 6 7 8"), ("b", "4 5 6")], token_delay_s=0.02)
    h.open(URI, "a")
    h.open(OTHER, "b")
    first = h.complete_at_end(URI)
    await asyncio.sleep(0.05)  # running
    other = h.complete_at_end(OTHER)  # queued behind the running generation
    later = []
    for char in "QRS":  # the first document keeps typing and asking: each request replaces the last
        h.type(URI, char)
        later.append(h.complete_at_end(URI))
    answers = await asyncio.wait_for(asyncio.gather(first, other, *later), timeout=5)
    assert [request.prompt for request, _ in h.backend.calls] == ["a", "b", "aQRS"]
    assert answers[1].text == "4 5 6"
    assert answers[0] is None and answers[2] is None and answers[3] is None  # stale ones: empty


async def test_a_backend_that_fails_to_load_is_reported_and_requests_answer_empty(make_harness) -> None:
    store = DocumentStore()
    states: list[tuple[str, str]] = []
    done = asyncio.Event()

    def on_state(state: str, message: str) -> None:
        states.append((state, message))
        if state == "error":
            done.set()

    scheduler = Scheduler(
        store,
        ServerSettings(backend="fake"),
        lambda s: FakeBackend.load(FakeSettings(fail_load="weights are corrupt")),
        build_context=prefix_only_context,
        finalize=lambda t, c: t,
        on_state=on_state,
    )
    scheduler.start(asyncio.get_running_loop())
    scheduler.load(scheduler.settings)
    await asyncio.wait_for(done.wait(), timeout=5)
    store.open(URI, "python", 1, "def greet(")
    assert await scheduler.complete(URI, 0, 10) is None
    assert states[-1][0] == "error" and "weights are corrupt" in states[-1][1]
    scheduler.stop()


async def test_an_exception_in_the_backend_is_logged_and_the_next_request_works(make_harness) -> None:
    h = await make_harness([("boom", "!raise kaboom"), ("fine", " = 1")])
    h.open(URI, "boom")
    assert await h.answer(URI) == ""
    assert any("kaboom" in line for line in h.logs)
    h.type(URI, "\nfine")
    assert await h.answer(URI) == " = 1"
    assert h.scheduler.stats.failed_generations == 1


async def test_closing_a_document_stops_its_generation(make_harness) -> None:
    h = await make_harness([("x", " ".join(str(i) for i in range(100)))], token_delay_s=0.01)
    h.open(URI, "x")
    pending = h.complete_at_end(URI)
    await asyncio.sleep(0.05)
    h.scheduler.document_closed(URI)
    h.store.close(URI)
    assert await asyncio.wait_for(pending, timeout=2) is None
    await asyncio.sleep(0.1)
    assert h.backend.calls[0][1].finish_reason == "cancelled"


def test_the_worker_is_the_only_thread_that_calls_the_backend() -> None:
    seen: set[str] = set()

    class Recording(FakeBackend):
        def complete(self, request, *, on_text=None, cancel=None):  # type: ignore[no-untyped-def]
            seen.add(threading.current_thread().name)
            return super().complete(request, on_text=on_text, cancel=cancel)

    async def scenario() -> None:
        h = Harness(Recording(RULES), ServerSettings(backend="fake"))
        h.scheduler.start(asyncio.get_running_loop())
        h.scheduler.load(h.scheduler.settings)
        await asyncio.wait_for(h.ready.wait(), timeout=5)
        h.open(URI, "def greet(")
        await h.answer(URI)
        h.scheduler.stop()

    asyncio.run(scenario())
    assert seen == {"specls-engine"}


async def test_typing_before_the_first_token_is_checked_once_tokens_arrive(make_harness) -> None:
    h = await make_harness([("x = 9", " + 1"), ("x = ", "1 + 2 + 3 + 4 + 5 + 6 + 7 + 8")], token_delay_s=0.05)
    h.open(URI, "x = ")
    first = h.complete_at_end(URI)
    await asyncio.sleep(0.01)  # the generation has started but produced nothing yet
    h.type(URI, "9")  # cannot be judged yet: the generation keeps going
    second = h.complete_at_end(URI)  # waits on it
    assert await asyncio.wait_for(first, timeout=5) is None  # the first token disagrees: stale, empty
    assert (await asyncio.wait_for(second, timeout=5)).text == " + 1"  # the newest request starts again
    assert h.backend.calls[0][1].finish_reason == "cancelled"
    assert h.backend.calls[0][1].stats.target_forwards <= 2
    assert h.backend.calls[1][0].prompt == "x = 9"


async def test_debounce_lets_only_the_last_of_a_quick_burst_reach_the_model(make_harness) -> None:
    h = await make_harness([("x = ", "1")], debounce_ms=80)
    h.open(URI, "x")
    burst = []
    for char in " = ":
        h.type(URI, char)
        burst.append(h.complete_at_end(URI))
        await asyncio.sleep(0.01)
    answers = await asyncio.wait_for(asyncio.gather(*burst), timeout=5)
    assert [a.text if a else None for a in answers] == [None, None, "1"]
    assert [request.prompt for request, _ in h.backend.calls] == ["x = "]


async def test_no_request_carries_draft_length_state(make_harness) -> None:
    # Draft lengths are learned in the engine, per loaded model: the server sends no policy.
    h = await make_harness(RULES)
    h.open(URI, "def greet(")
    await h.answer(URI)
    request = h.backend.calls[-1][0]
    assert request.draft_policy is None


async def test_mid_line_a_slow_generation_answers_with_what_it_has_after_the_deadline(make_harness) -> None:
    h = await make_harness([("total = ", "compute(values) + 1")], token_delay_s=0.03, partial_after_ms=50)
    h.open(URI, "total = ")
    early = await h.answer(URI)
    assert early and "compute(values) + 1".startswith(early) and early != "compute(values) + 1"
    h.type(URI, early)  # the typing agrees: served from the same, still running generation
    rest = await h.answer(URI)
    assert early + rest == "compute(values) + 1"[: len(early + rest)] and rest
    assert h.scheduler.stats.generations == 1


async def test_a_part_answered_early_is_announced_when_whole_and_then_served_whole(make_harness) -> None:
    h = await make_harness([("total = ", "compute(values) + 1")], token_delay_s=0.03, partial_after_ms=50)
    h.open(URI, "total = ")
    early = await h.answer(URI)
    assert early != "compute(values) + 1" and not h.grown
    for _ in range(200):
        if h.grown:
            break
        await asyncio.sleep(0.01)
    assert h.grown == [1]  # specls/suggestionGrown for generation 1, once it finished
    assert await h.answer(URI) == "compute(values) + 1"  # the client's new request: the whole suggestion
    assert h.scheduler.stats.generations == 1


async def test_a_client_that_never_asks_again_gets_no_mid_line_part(make_harness) -> None:
    h = await make_harness([("total = ", "compute(values) + 1")], token_delay_s=0.03, partial_after_ms=10)
    h.scheduler.client_refreshes = False  # e.g. Neovim's built-in client: it would keep showing the part
    h.open(URI, "total = ")
    assert await h.answer(URI) == "compute(values) + 1"
    assert not h.grown


async def test_a_whole_answer_is_not_announced_again(make_harness) -> None:
    h = await make_harness(RULES)
    h.open(URI, "def greet(")
    await h.answer(URI)
    await asyncio.sleep(0.05)
    assert not h.grown


async def test_at_a_line_start_the_partial_deadline_does_not_apply(make_harness) -> None:
    h = await make_harness([("def f():\n    ", "return 1\n")], token_delay_s=0.03, partial_after_ms=10)
    h.open(URI, "def f():\n    ")
    assert await h.answer(URI) == "return 1\n"  # a whole suggestion, not its first token


async def test_the_first_line_deadline_answers_with_a_ready_first_line(make_harness) -> None:
    rules = [("def greet(", "name):\n    a = 1\n    b = 2\n    c = 3\n    return a + b + c\n")]
    h = await make_harness(rules, token_delay_s=0.03, first_line_ms=60)
    h.open(URI, "def greet(")
    assert await h.answer(URI) == "name):"
    h = await make_harness(rules, token_delay_s=0.001, first_line_ms=5_000)
    h.open(URI, "def greet(")
    assert await h.answer(URI) == rules[0][1]  # fast enough: the whole suggestion


async def test_empty_answers_are_counted_by_why(make_harness) -> None:
    h = await make_harness([("x = ", "1")], token_delay_s=0.05)
    h.open(URI, "x = ")
    first = h.complete_at_end(URI)
    await asyncio.sleep(0.02)
    h.type(URI, "9")  # diverges from the running generation
    second = h.complete_at_end(URI)
    assert (await first) is None and (await second) is None  # "x = 9" has no rule
    reasons = dict(h.scheduler.stats.as_dict()["empty_reasons"])
    assert reasons.get("edited", 0) + reasons.get("diverged", 0) + reasons.get("superseded", 0) == 1
    assert reasons.get("generated-nothing") == 1


async def test_a_file_is_warmed_when_opened_and_after_an_idle_pause(make_harness) -> None:
    h = await make_harness([("x = ", "1")], server_context=True, warm=True, warm_idle_ms=20)
    backend = h.backend
    h.open(URI, "import os\nx = ")
    h.scheduler.document_opened(URI)
    for _ in range(100):
        if backend.warmed:
            break
        await asyncio.sleep(0.01)
    assert list(backend.warmed) == ["import os\nx = "]  # the whole file: it fits the budget
    assert await h.answer(URI) == "1"
    warmed = len(backend.warmed)
    await asyncio.sleep(0.2)
    assert len(backend.warmed) == warmed + 1  # the idle pause after the request
    assert h.scheduler.stats.as_dict()["warmups"] == {"open": 1, "idle": 1}


class _RecordingWorkspace:
    """Stands in for `context.workspace.WorkspaceFiles`: records which documents it was asked to prepare."""

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def imported_documents(self, current, open_uris):  # type: ignore[no-untyped-def]
        return []

    def definition_snippets(self, current, offset):  # type: ignore[no-untyped-def]
        return "", []

    def prepare(self, current) -> None:  # type: ignore[no-untyped-def]
        self.prepared.append(current.uri)


async def test_opening_a_python_file_in_a_workspace_starts_its_index(make_harness) -> None:
    h = await make_harness(RULES)
    workspace = h.store.workspace = _RecordingWorkspace()
    h.open(URI, "import os\n")
    h.scheduler.document_opened(URI)
    h.store.open("file:///work/notes.md", "markdown", 1, "# notes\n")
    h.scheduler.document_opened("file:///work/notes.md")
    assert workspace.prepared == [URI]
    off = await make_harness(RULES, context=replace(ContextSettings(), import_definitions=False))
    workspace = off.store.workspace = _RecordingWorkspace()
    off.open(URI, "import os\n")
    off.scheduler.document_opened(URI)
    assert workspace.prepared == []
