"""The engine worker (`lsp_server/scheduling/worker.py`) on its own, with a recording `WorkerEvents` and the
fake backend: one prompt path for generations and warm-ups, what it reports and why, its queue. Also the
job types it shares with the coordinator (`lsp_server/jobs.py`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from engine.api import BackendInfo, CompletionResult, WarmResult
from lsp_server.backends.fake import FakeBackend
from lsp_server.config import ServerSettings
from lsp_server.documents import DocumentStore, TextChange
from lsp_server.jobs import FairQueue, Generation, generation_of, is_current, suggestion_id
from lsp_server.scheduling.warmups import WarmTrigger
from lsp_server.scheduling.worker import EngineWorker, PromptSteps, WarmJob

URI = "file:///work/a.py"


def prefix_only_context(store, uri, offset, info, settings, count_tokens):  # type: ignore[no-untyped-def]
    """The prompt is the text before the cursor; a cursor after "#" wants no completion."""
    text = store.get(uri).text
    return SimpleNamespace(
        prompt=text[:offset],
        prefix=text[:offset],
        suffix=text[offset:],
        mode="none" if text[:offset].endswith("#") else "multi-line",
        why_none="in-comment",
        stop_check=None,
        lookup_snippets=(),
        stop_strings=(),
        forced_prefix="",
        stop_rules=None,
        import_names=None,
        blank_line=True,
    )


class Recorder:
    """`WorkerEvents` that keeps every report, with the thread it arrived on."""

    def __init__(self) -> None:
        self.reports: list[tuple[Any, ...]] = []
        self.threads: set[str] = set()
        self._arrived = asyncio.Event()

    def _add(self, *report: Any) -> None:
        self.reports.append(report)
        self.threads.add(threading.current_thread().name)
        self._arrived.set()

    def backend_loaded(self, info: BackendInfo | None, error: str | None, epoch: int) -> None:
        self._add("loaded", info, error, epoch)

    def generation_started(self) -> None:
        self._add("started")

    def generation_text(self, generation: Generation, text: str) -> None:
        self._add("text", generation.id, text)

    def generation_done(
        self, generation: Generation, text: str, result: CompletionResult | None, error: str | None
    ) -> None:
        self._add("done", generation.id, text, result, error)

    def cancelled_to_idle(self, ms: float) -> None:
        self._add("cancelled_to_idle", ms)

    def cache_warmed(self, job: WarmJob, result: WarmResult) -> None:
        self._add("warmed", job.reason, result)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [report for report in self.reports if report[0] == kind]

    async def until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self._arrived.clear()
            await asyncio.wait_for(self._arrived.wait(), timeout=5)


class Rig:
    def __init__(
        self, backend: FakeBackend, finalize: Callable[[str, Any], str] = lambda text, ctx: text
    ) -> None:
        self.backend = backend
        self.store = DocumentStore()
        self.events = Recorder()
        self.worker = EngineWorker(
            self.store,
            threading.Lock(),
            lambda settings: backend,
            ServerSettings,
            PromptSteps(prefix_only_context, finalize),  # type: ignore[arg-type]
            events=self.events,
        )

    def generation(self, id: int, text: str, **fields: Any) -> Generation:
        return Generation(id, URI, self.store.get(URI).version, text, len(text), "", **fields)

    async def done(self, id: int) -> tuple[Any, ...]:
        await self.events.until(lambda: any(report[1] == id for report in self.events.of("done")))
        return next(report for report in self.events.of("done") if report[1] == id)


@pytest.fixture
async def rig() -> AsyncIterator[Callable[..., Any]]:
    rigs: list[Rig] = []

    async def make(rules: list[tuple[str, str]], **kwargs: Any) -> Rig:
        made = Rig(FakeBackend(rules), **kwargs)
        rigs.append(made)
        made.worker.start(asyncio.get_running_loop())
        made.worker.load(ServerSettings(backend="fake"))
        await made.events.until(lambda: bool(made.events.of("loaded")))
        return made

    yield make
    for made in rigs:
        made.worker.stop()


async def test_a_generation_streams_and_ends_with_the_finalized_text_reported_on_the_loop(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("x = ", "1 + 2")], finalize=lambda text, ctx: text + "!")
    r.store.open(URI, "python", 1, "x = ")
    r.worker.submit(r.generation(1, "x = "))
    _, _, text, result, error = await r.done(1)
    assert (text, result.finish_reason, error) == ("1 + 2!", "eos", None)
    assert r.events.of("started") and r.events.of("text")[-1] == ("text", 1, "1 + 2")
    assert r.events.threads == {threading.current_thread().name}  # never on the engine thread


async def test_a_document_edited_before_the_prompt_is_built_is_a_stale_context(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("x = ", "1")])
    r.store.open(URI, "python", 1, "x = ")
    stale = r.generation(1, "x = ")
    r.store.change(URI, 2, [TextChange((0, 4, 0, 4), "9")])
    r.worker.submit(stale)
    _, _, text, result, _ = await r.done(1)
    assert (text, result.finish_reason, result.stats.empty_reason) == ("", "cancelled", "stale-context")
    assert not r.backend.calls and not r.events.of("started")


async def test_a_cursor_that_wants_no_completion_ends_without_the_model_and_says_why(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("x = ", "1")])
    r.store.open(URI, "python", 1, "x = 1  #")
    r.worker.submit(r.generation(1, "x = 1  #"))
    _, _, _, result, _ = await r.done(1)
    assert (result.finish_reason, result.stats.empty_reason) == ("stop", "mode-none:in-comment")
    assert not r.backend.calls


async def test_a_cancelled_generation_never_reaches_the_model(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("x = ", "1")])
    r.store.open(URI, "python", 1, "x = ")
    cancelled = r.generation(1, "x = ")
    cancelled.cancel.cancel()
    r.worker.submit(cancelled)
    _, _, _, result, _ = await r.done(1)
    assert result.stats.empty_reason == "cancelled-before-start" and not r.backend.calls


async def test_a_prefetch_prompt_holds_the_part_of_its_suggestion_not_typed_yet(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("    a = 1\n", "    b = 2\n")])
    r.store.open(URI, "python", 1, "def f():\n    a")  # "    a" of the suggestion typed so far
    assumed = "def f():\n    a = 1\n"
    r.worker.submit(Generation(1, URI, -1, assumed, len(assumed), "", assumed_accepted="    a = 1\n"))
    _, _, text, _, _ = await r.done(1)
    assert text == "    b = 2\n" and r.backend.calls[0][0].prompt == assumed
    assert r.store.get(URI).text == "def f():\n    a"  # the client's document is untouched


async def test_a_warm_up_builds_its_prompt_the_way_a_generation_does(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("x = ", "1")])
    r.store.open(URI, "python", 1, "import os\nx = ")
    r.worker.warm(WarmJob(URI, 1, None, WarmTrigger.OPEN))  # the cursor unknown: the start that fits
    await r.events.until(lambda: bool(r.events.of("warmed")))
    r.worker.warm(WarmJob(URI, 1, 10, WarmTrigger.CURSOR))
    await r.events.until(lambda: len(r.events.of("warmed")) == 2)
    assert list(r.backend.warmed) == ["import os\nx = ", "import os\n"]
    assert [report[1] for report in r.events.of("warmed")] == ["open", "cursor"]
    r.worker.submit(r.generation(1, "import os\nx = "))
    await r.done(1)
    assert r.backend.calls[0][0].prompt == r.backend.warmed[0]  # the same prompt: its prefix is cached


async def test_a_stale_warm_up_is_skipped(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("x = ", "1")])
    r.store.open(URI, "python", 2, "x = ")
    r.worker.warm(WarmJob(URI, 1, 4, WarmTrigger.SAVE))  # made for version 1: skipped, or replaced below
    r.worker.submit(r.generation(1, "x = "))
    await r.done(1)
    r.worker.warm(WarmJob(URI, 2, 4, WarmTrigger.IDLE))
    await r.events.until(lambda: bool(r.events.of("warmed")))
    assert list(r.backend.warmed) == ["x = "] and [report[1] for report in r.events.of("warmed")] == ["idle"]


async def test_a_fault_in_the_backend_is_reported_and_the_worker_goes_on(rig) -> None:  # type: ignore[no-untyped-def]
    r = await rig([("boom", "!raise kaboom"), ("fine", " = 1")])
    r.store.open(URI, "python", 1, "boom")
    r.worker.submit(r.generation(1, "boom"))
    _, _, _, result, error = await r.done(1)
    assert result is None and "kaboom" in error
    r.store.change(URI, 2, [TextChange((0, 4, 0, 4), "\nfine")])
    r.worker.submit(r.generation(2, "boom\nfine"))
    assert (await r.done(2))[2] == " = 1"


async def test_a_backend_that_fails_to_load_is_reported_with_its_epoch() -> None:
    events = Recorder()

    def failing(settings: ServerSettings) -> FakeBackend:
        raise RuntimeError("weights are corrupt")

    worker = EngineWorker(
        DocumentStore(),
        threading.Lock(),
        failing,
        ServerSettings,
        PromptSteps(prefix_only_context, lambda t, c: t),
        events,
    )  # type: ignore[arg-type]
    worker.start(asyncio.get_running_loop())
    worker.load(ServerSettings())
    await events.until(lambda: bool(events.of("loaded")))
    assert events.of("loaded") == [("loaded", None, "RuntimeError: weights are corrupt", 1)]
    worker.stop()


def test_the_queue_keeps_one_job_per_document_in_order_of_arrival_without_a_thread() -> None:
    worker = EngineWorker(
        DocumentStore(),
        threading.Lock(),
        FakeBackend,
        ServerSettings,
        PromptSteps(prefix_only_context, lambda t, c: t),
        Recorder(),
    )  # type: ignore[arg-type]
    a1, b1, a2 = (Generation(i, uri, 1, "", 0, "") for i, uri in ((1, "a"), (2, "b"), (3, "a")))
    assert worker.submit(a1) is None and worker.submit(b1) is None and worker.busy
    assert worker.submit(a2) is a1  # replaced, to be answered empty by the caller
    assert worker.withdraw_if_queued(a1) is None and worker.withdraw("b") is b1
    assert worker.drain() == [a2] and not worker.busy


# --- jobs.py ---


def test_the_fair_queue_serves_documents_in_the_order_they_first_asked() -> None:
    queue = FairQueue()
    a1, b1, a2 = (Generation(i, uri, 1, "", 0, "") for i, uri in ((1, "a"), (2, "b"), (3, "a")))
    queue.put(a1)
    queue.put(b1)
    assert queue.put(a2) is a1 and queue.holds(a2) and not queue.holds(a1)
    assert [queue.pop(), queue.pop(), queue.pop()] == [a2, b1, None]


def test_suggestion_ids_name_their_generation_and_the_typing_since() -> None:
    assert suggestion_id(7) == "7" and suggestion_id(7, "abc") == "7+3"
    assert generation_of("7+3") == "7" and generation_of("7") == "7"


def test_a_document_is_current_while_open_in_sync_and_at_its_version() -> None:
    store = DocumentStore()
    assert not is_current(store, URI, 1)
    store.open(URI, "python", 1, "x")
    assert is_current(store, URI, 1) and not is_current(store, URI, 2)


def test_how_much_of_a_prefetch_assumed_suggestion_the_document_holds() -> None:
    prefetch = Generation(1, URI, -1, "abXYcd", 4, "", assumed_accepted="XY")
    assert [prefetch.assumed_part_typed(text) for text in ("abcd", "abXcd", "abXYcd", "abZcd")] == [
        0,
        1,
        2,
        None,
    ]
