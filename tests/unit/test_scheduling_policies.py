"""The scheduling policies, table-tested as the pure functions they are: no threads, no sleeps, no event loop.
`test_scheduler.py` drives the same rules through the coordinator and a real engine thread."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lsp_server.config import ServerSettings
from lsp_server.jobs import Generation
from lsp_server.scheduling import answers, prefetch, waiting, warmups
from lsp_server.scheduling.answers import Source
from lsp_server.scheduling.document_state import DocumentState, DocumentStates
from lsp_server.scheduling.reasons import EmptyReason, mode_none
from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.suggestion_cache import SuggestionCache

URI = "file:///a.py"


def generation(
    doc_text: str = "x = ", anchor: int | None = None, text: str = "", *, done: bool = False, **fields: object
) -> Generation:
    made = Generation(1, URI, 1, doc_text, len(doc_text) if anchor is None else anchor, "", **fields)  # type: ignore[arg-type]
    made.text, made.done = text, done
    return made


# --- settings ---


def test_the_seven_policy_settings_are_read_once_into_a_frozen_value() -> None:
    server = replace(ServerSettings(), debounce_ms=5, first_line_first=True, prefetch=False, warm_idle_ms=9)
    settings = SchedulingSettings.of(server, client_refreshes=True)
    assert (settings.debounce_ms, settings.first_line_first, settings.prefetch, settings.warm_idle_ms) == (
        5,
        True,
        False,
        9,
    )
    assert settings.client_refreshes
    with pytest.raises(AttributeError):
        settings.warm = False  # type: ignore[misc]
    assert SchedulingSettings.of(ServerSettings(), client_refreshes=False) == SchedulingSettings()


# --- answers without a model call ---


@pytest.mark.parametrize(
    ("text", "version", "offset", "expected"),
    [
        ("x = ", 1, 4, ("", True)),  # same version: nothing typed, wait on it
        ("x = 1", 2, 5, ("1", True)),  # typed what it is generating
        ("x = 9", 2, 5, None),  # typed elsewhere than it generates: diverged, not waited on
        ("x = 1", 2, 4, None),  # the cursor is not after the typing
        ("y = 1", 2, 5, None),  # an edit before the anchor
    ],
)
def test_typed_ahead_of_the_running_generation(
    text: str, version: int, offset: int, expected: tuple[str, bool] | None
) -> None:
    state = DocumentState(URI, generation=generation(text="1 + 2"))
    found = answers.typed_ahead(state, text, version, offset)
    if expected is None:
        assert all(not ahead.wait for ahead in found)
        assert text != "x = 9" or found[0].typed == "9"  # found, but it no longer agrees
    else:
        assert [(ahead.typed, ahead.wait) for ahead in found] == [expected]


def test_a_finished_generation_is_not_waited_on_and_a_reached_prefetch_is_taken() -> None:
    latest = generation(text="a = 1\n", done=True)
    ahead = Generation(2, URI, -1, "x = a = 1\n", 10, "", assumed_accepted="a = 1\n")
    state = DocumentState(URI, generation=latest, prefetch=ahead)
    found = answers.typed_ahead(state, "x = a = 1\n", 2, 10)  # the user accepted the suggestion
    # The finished one is typed out (nothing left to serve); the prefetch is taken and waited on.
    assert [(f.generation.id, f.takes_prefetch, f.wait) for f in found] == [
        (1, False, False),
        (2, True, True),
    ]
    found = answers.typed_ahead(state, "x = a", 2, 5)  # typing along the finished one
    assert [(f.generation.id, f.typed, f.takes_prefetch, f.wait) for f in found] == [(1, "a", False, False)]


@pytest.mark.parametrize(
    ("cached_id", "prefetched", "typed", "source", "prefetch_next"),
    [
        (1, False, "na", Source.TYPED_AHEAD, False),  # the latest generation, typed along
        (1, False, "", Source.TYPED_AHEAD, False),
        (7, False, "", Source.CACHED, True),  # found again at its own cursor: Tab after Tab
        (7, False, "n", Source.CACHED, False),
        (7, True, "", Source.CACHED_PREFETCH, True),
    ],
)
def test_a_finished_suggestion_is_served_from_the_cache_and_says_whose_it_was(
    cached_id: int, prefetched: bool, typed: str, source: Source, prefetch_next: bool
) -> None:
    cache = SuggestionCache()
    cache.put(URI, "def greet(", 10, "name):", cached_id, prefetched=prefetched)
    text = "def greet(" + typed
    latest = generation("def greet(", text="name):", done=True)
    found = answers.typed_ahead(DocumentState(URI, generation=latest), text, 2, len(text))
    served = answers.serve_finished(cache.find(URI, text, len(text)), found if cached_id == 1 else [])
    assert served is not None
    assert (served.text, served.source, served.prefetch_next) == (
        "name):"[len(typed) :],
        source,
        prefetch_next,
    )
    assert served.suggestion_id == f"{cached_id}+{len(typed)}"
    assert answers.serve_finished(None, found) is None


# --- waiting ---

REFRESHING = SchedulingSettings(client_refreshes=True, partial_after_ms=80, first_line_ms=100)


@pytest.mark.parametrize(
    ("settings", "text", "offset", "typed", "expected"),
    [
        (REFRESHING, "x = ", 4, "", 0.08),  # mid-line
        (REFRESHING, "def f():\n    ", 13, "", None),  # a line start: people wait for a whole line
        (REFRESHING, "def f():\n", 9, "ret", 0.08),  # typed into the line since
        (REFRESHING, "x = ", 4, "1\n", None),  # typed a line break
        (replace(REFRESHING, client_refreshes=False), "x = ", 4, "", None),  # it would keep showing the part
        (replace(REFRESHING, partial_after_ms=0), "x = ", 4, "", None),
    ],
)
def test_partial_answers_only_mid_line_and_only_for_a_client_that_asks_again(
    settings: SchedulingSettings, text: str, offset: int, typed: str, expected: float | None
) -> None:
    assert waiting.partial_after(settings, text, offset, typed) == expected


@pytest.mark.parametrize(
    ("settings", "partial", "expected"),
    [
        (REFRESHING, None, waiting.WaitPlan(False, 0.1, False, None)),
        (REFRESHING, 0.08, waiting.WaitPlan(False, 0.1, False, 0.08)),
        (REFRESHING, 0.0, waiting.WaitPlan(False, 0.1, True, None)),  # typed ahead mid-line: due at once
        (replace(REFRESHING, first_line_first=True), None, waiting.WaitPlan(True, None, False, None)),
        (replace(REFRESHING, first_line_ms=0), None, waiting.WaitPlan(True, None, False, None)),
    ],
)
def test_wait_plans(settings: SchedulingSettings, partial: float | None, expected: waiting.WaitPlan) -> None:
    assert waiting.plan_wait(settings, partial) == expected


def test_a_request_typed_ahead_mid_line_may_take_a_part_at_once() -> None:
    assert waiting.plan_typed_ahead(REFRESHING, "x = ", 4, "1").partial_now
    assert not waiting.plan_typed_ahead(REFRESHING, "def f():\n", 9, "").partial_now
    assert waiting.plan_new_request(REFRESHING, "x = ", 4).partial_after_s == 0.08


@pytest.mark.parametrize(
    ("text", "done", "failed", "typed", "first_line_only", "partial_due", "expected"),
    [
        ("name):\n    pass\n", True, False, "", False, False, waiting.Resolution("name):\n    pass\n")),
        ("name):", True, False, "na", False, False, waiting.Resolution("me):")),
        ("name):", True, True, "", False, False, waiting.Resolution("")),  # cut off: not served
        ("name):", True, False, "x", False, False, waiting.Resolution(None)),  # finished elsewhere
        ("nam", False, False, "nx", False, False, waiting.Resolution(None)),  # diverged: start again
        ("nam", False, False, "", False, False, None),  # keep waiting
        ("na", False, False, "name", False, False, None),  # the user is ahead: wait for the model
        ("name):\n    a", False, False, "", True, False, waiting.Resolution("name):", short=True)),
        ("name):", False, False, "", True, False, None),  # no complete first line yet
        ("compute(va", False, False, "", False, True, waiting.Resolution("compute(va", short=True)),
        ("c()\n  d", False, False, "", False, True, waiting.Resolution("c()", short=True)),
        ("   ", False, False, "", False, True, None),  # nothing but blanks: nothing to show
    ],
)
def test_what_a_waiting_request_gets(
    text: str,
    done: bool,
    failed: bool,
    typed: str,
    first_line_only: bool,
    partial_due: bool,
    expected: waiting.Resolution | None,
) -> None:
    assert waiting.resolve(text, done, failed, typed, first_line_only, partial_due) == expected


def test_a_running_generation_keeps_going_while_the_typing_agrees() -> None:
    assert waiting.keeps_going("print(x)", "pri") and waiting.keeps_going("pr", "print")
    assert not waiting.keeps_going("pri", "pra")


# --- prefetch ---

ON = SchedulingSettings(prefetch=True)


@pytest.mark.parametrize(
    ("settings", "doc_text", "suggestion", "flags", "planned"),
    [
        (ON, "def f():\n", "    a = 1\n", {}, True),
        (replace(ON, prefetch=False), "def f():\n", "    a = 1\n", {}, False),
        (ON, "def f():\n", "", {}, False),
        (ON, "def f():\n", "    a = 1\n", {"ready": False}, False),
        (ON, "def f():\n", "    a = 1\n", {"engine_busy": True}, False),
        (ON, "def f():\n", "    a = 1\n", {"prefetch_running": True}, False),
        (ON, "x\n" * (prefetch.PREFETCH_MAX_CHARS // 2 + 1), "y", {}, False),  # too big to re-parse at once
    ],
)
def test_when_to_prefetch(
    settings: SchedulingSettings, doc_text: str, suggestion: str, flags: dict[str, bool], planned: bool
) -> None:
    given = {"ready": True, "engine_busy": False, "prefetch_running": False} | flags
    plan = prefetch.plan_prefetch(settings, doc_text, len(doc_text), suggestion, **given)
    assert (plan is not None) == planned
    if plan is not None:
        assert plan == prefetch.PrefetchPlan(doc_text + suggestion, len(doc_text + suggestion), suggestion)


ASSUMED = Generation(3, URI, -1, "abXYcd", 4, "", assumed_accepted="XY")


@pytest.mark.parametrize(
    ("text", "fits", "rest"),
    [
        ("abcd", True, (2, "XY")),  # nothing of it typed yet: insert all of it
        ("abXcd", True, (3, "Y")),
        ("abXYcd", True, (4, "")),  # accepted
        ("abXZcd", False, None),  # typed something else
        ("aXbcd", False, None),
        (None, False, None),  # closed
    ],
)
def test_a_prefetch_fits_the_document_on_the_way_to_what_it_assumed(
    text: str | None, fits: bool, rest: tuple[int, str] | None
) -> None:
    assert prefetch.still_fits(ASSUMED, text) == fits
    if text is not None:
        assert prefetch.untyped_rest(ASSUMED, text) == rest


def test_a_prefetch_still_fits_typing_past_it_that_its_own_text_agrees_with() -> None:
    ahead = Generation(3, URI, -1, "abXYcd", 4, "", assumed_accepted="XY")
    ahead.text = "zz"
    assert prefetch.still_fits(ahead, "abXYzcd") and not prefetch.still_fits(ahead, "abXYqcd")


# --- warm-ups ---


def test_warm_ups_follow_the_setting_and_the_backend() -> None:
    assert warmups.may_warm(SchedulingSettings(warm=True), ready=True)
    assert not warmups.may_warm(SchedulingSettings(warm=True), ready=False)
    assert not warmups.may_warm(SchedulingSettings(warm=False), ready=True)
    assert warmups.idle_delay_s(SchedulingSettings(warm=True, warm_idle_ms=300)) == 0.3
    assert warmups.idle_delay_s(SchedulingSettings(warm=False)) is None
    assert [trigger.value for trigger in warmups.WarmTrigger] == ["open", "cursor", "save", "idle"]


@pytest.mark.parametrize(
    ("requests", "running", "current", "busy", "cursor", "due"),
    [
        (3, False, True, False, 10, True),
        (4, False, True, False, 10, False),  # a newer request came
        (3, True, True, False, 10, False),  # the engine is still on this document's generation
        (3, False, False, False, 10, False),  # closed since
        (3, False, True, True, 10, False),  # other work queued
        (3, False, True, False, None, False),  # nowhere to warm
    ],
)
def test_the_idle_warm_up(
    requests: int, running: bool, current: bool, busy: bool, cursor: int | None, due: bool
) -> None:
    state = DocumentState(URI, generation=generation(done=not running), cursor=cursor, requests=requests)
    assert warmups.idle_warm_due(state, 3, current=current, engine_busy=busy) == due


@pytest.mark.parametrize(
    ("text", "budget", "expected"),
    [
        ("a\nb\nc\n", 100, 6),  # the whole file fits
        ("aaaa\nbbbb\ncccc\n", 12, 10),  # one character a token: the whole lines that fit in 90%
        ("aaaaaaaaaaaaaaaa", 4, 0),  # not even a line
    ],
)
def test_where_to_warm_a_file_whose_cursor_is_unknown(text: str, budget: int, expected: int) -> None:
    assert warmups.warm_offset(text, budget, len) == expected


# --- per-document state and reasons ---


def test_one_state_per_document_forgotten_as_a_whole_and_old_generations_let_go() -> None:
    states = DocumentStates(keep_generations=2)
    a, b, c = states.of("a"), states.of("b"), states.of("c")
    assert states.of("a") is a
    for state in (a, b, c):
        states.set_generation(state, Generation(1, state.uri, 1, "", 0, ""))
    assert a.generation is None and b.generation is not None and c.generation is not None
    states.set_generation(b, Generation(2, "b", 1, "", 0, ""))  # b is now the newest
    states.set_generation(a, Generation(3, "a", 1, "", 0, ""))
    assert c.generation is None and [g.id for g in states.generations()] == [2, 3]
    a.cursor, a.requests = 5, 2
    assert states.forget("a") is a and states.get("a") is None
    assert states.of("a").requests == 0  # a reopened document starts afresh


def test_empty_reasons_keep_their_reported_values() -> None:
    assert EmptyReason.SUPERSEDED == "superseded" and str(EmptyReason.DIVERGED) == "diverged"
    assert EmptyReason.backend_not_ready("loading") is EmptyReason.BACKEND_LOADING
    assert mode_none("mid-word") == "mode-none:mid-word"
