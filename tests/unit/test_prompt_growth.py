"""A prompt grown aside (`lsp_server.scheduling.worker.GrowJob`): where the keystroke budget cuts a request's
prompt, the worker reads the full one into the engine's second cache between requests, and a later request
takes it once the engine holds it. The real context builder, and a fake engine that says what each of its two
caches holds."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from engine.api import BackendInfo, CancelToken, CompletionRequest, CompletionResult, OnText, WarmResult
from lsp_server.backends.fake import FakeBackend
from lsp_server.config import ServerSettings
from lsp_server.context import build_completion_context, finalize_completion
from lsp_server.documents import DocumentStore, TextChange
from lsp_server.jobs import Generation
from lsp_server.scheduling.reasons import EmptyReason
from lsp_server.scheduling.warmups import WarmTrigger
from lsp_server.scheduling.worker import EngineWorker, HeldCancelToken, PromptSteps, WarmJob

URI = "file:///work/values.py"
LINES = 400  # 6 fake tokens a line: 2,400 tokens, more than the configured 1,536


class TwoCacheBackend(FakeBackend):
    """The fake on a CPU that reads 150 prompt tokens/s (a request can afford ~135), with a second cache."""

    def __init__(self, aside: bool, prompt_tokens_per_s: float = 150) -> None:
        super().__init__([("", "x")])
        self.aside_supported = aside
        self.prompt_tokens_per_s = prompt_tokens_per_s
        self.hold = threading.Event()  # cleared: `complete` waits for it
        self.hold.set()
        self.served = ""  # the prompt in the cache requests are served from
        self.aside = ""  # the prompt read aside
        self.read_aside: list[str] = []

    def info(self) -> BackendInfo:
        return replace(
            super().info(),
            prompt_tokens_per_s=self.prompt_tokens_per_s,
            step_s=0.05,
            reads_prompts_aside=self.aside_supported,
        )

    def _held(self, cached: str, prompt: str) -> int:
        return self.count_tokens(os.path.commonprefix([cached, prompt]))

    def prompt_tokens_cached(self, prompt: str) -> tuple[int, int]:
        return max(self._held(self.served, prompt), self._held(self.aside, prompt)), self.count_tokens(prompt)

    def complete(
        self, request: CompletionRequest, *, on_text: OnText | None = None, cancel: CancelToken | None = None
    ) -> CompletionResult:
        if self._held(self.aside, request.prompt) > self._held(self.served, request.prompt):
            self.served, self.aside = self.aside, self.served
        self.served = request.prompt
        self.hold.wait(timeout=5)
        return super().complete(request, on_text=on_text, cancel=cancel)

    def warm_aside(self, request: CompletionRequest, *, cancel: CancelToken | None = None) -> WarmResult:
        self.read_aside.append(request.prompt)
        self.aside = request.prompt
        tokens = self.count_tokens(request.prompt)
        return WarmResult(tokens, tokens)


class Done:
    """`WorkerEvents` that keeps the generations' ends."""

    def __init__(self) -> None:
        self.ended: dict[int, asyncio.Future[str]] = {}
        self.results: dict[int, CompletionResult] = {}

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None

    def generation_done(self, generation: Generation, text: str, result: Any, error: str | None) -> None:
        self.results[generation.id] = result
        self.ended[generation.id].set_result(text)


async def run_worker(
    backend: TwoCacheBackend, settings: ServerSettings | None = None
) -> tuple[EngineWorker, DocumentStore, Done]:
    store, events = DocumentStore(), Done()
    worker = EngineWorker(
        store,
        threading.Lock(),
        lambda settings: backend,
        lambda: settings or ServerSettings(),
        PromptSteps(build_completion_context, finalize_completion),
        events=events,  # type: ignore[arg-type]
    )
    worker.start(asyncio.get_running_loop())
    worker.load(ServerSettings(backend="fake"))
    text = "".join(f"value_{n} = {n}\n" for n in range(LINES))
    store.open(URI, "python", 1, text)
    return worker, store, events


def submit(worker: EngineWorker, store: DocumentStore, events: Done, id: int, **fields: Any) -> None:
    document = store.get(URI)
    events.ended[id] = asyncio.get_running_loop().create_future()
    worker.submit(Generation(id, URI, document.version, document.text, len(document.text), "", **fields))


async def generate(worker: EngineWorker, store: DocumentStore, events: Done, id: int) -> str:
    submit(worker, store, events, id)
    return await asyncio.wait_for(events.ended[id], timeout=5)


async def until(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_a_prompt_cut_by_the_budget_grows_aside_and_takes_over_once_read() -> None:
    backend = TwoCacheBackend(aside=True)
    worker, store, events = await run_worker(backend)
    try:
        await generate(worker, store, events, 1)
        first = backend.calls[0][0].prompt
        assert backend.count_tokens(first) <= 160  # cut to what 150 tokens/s reads in time

        await until(lambda: URI in worker._grown)  # read aside while nothing else waited
        (grown,) = backend.read_aside
        assert backend.count_tokens(grown) > 1000 and grown.endswith("\n")  # the full prompt, to a line start
        assert backend.served == first  # the served cache kept its prompt meanwhile

        store.change(URI, 2, [TextChange((LINES, 0, LINES, 0), "val")])  # the user typed on
        await generate(worker, store, events, 2)
        taken = backend.calls[1][0].prompt
        assert taken.startswith(grown) and taken.endswith("val")  # the grown prompt, and what was typed
        assert store.get(URI).prompt_start_line == store.get(URI).grow_start_line  # its start is kept

        store.change(URI, 3, [TextChange((LINES, 3, LINES, 3), "u")])
        await generate(worker, store, events, 3)
        assert backend.calls[2][0].prompt.startswith(grown)  # it stays: no second growth is planned
        await asyncio.sleep(0.05)
        assert len(backend.read_aside) == 1
    finally:
        worker.stop()


@pytest.mark.parametrize(
    ("aside", "settings", "prompt_tokens_per_s", "cut_to"),
    [(False, None, 150, 160), (True, ServerSettings(warm=False), 150, 160), (True, None, 600, 600)],
    ids=["no-second-cache", "warm-off", "shallow-cut"],
)
async def test_the_cut_prompt_stays_without_a_second_cache_or_warm_ups_or_where_the_cut_is_shallow(
    aside: bool, settings: ServerSettings | None, prompt_tokens_per_s: float, cut_to: int
) -> None:
    # 600 tokens/s affords ~540 of the 1,536 configured: more than a third, not worth a growth.
    backend = TwoCacheBackend(aside=aside, prompt_tokens_per_s=prompt_tokens_per_s)
    worker, store, events = await run_worker(backend, settings)
    try:
        await generate(worker, store, events, 1)
        store.change(URI, 2, [TextChange((LINES, 0, LINES, 0), "v")])
        await generate(worker, store, events, 2)
        await asyncio.sleep(0.05)
        assert not backend.read_aside and not worker._grown
        assert all(backend.count_tokens(call[0].prompt) <= cut_to for call in backend.calls)
    finally:
        worker.stop()


async def test_a_suggestion_started_at_rest_reads_a_shorter_prompt_than_a_request() -> None:
    """Started where the cursor rests (0.2 s after a file opens), it must be ready when the user asks after a
    pause of about a second: AT_REST_SUGGESTION_S, not FIRST_SUGGESTION_S, sizes its prompt."""
    from lsp_server.scheduling.budget import AT_REST_SUGGESTION_S, affordable_prompt_tokens

    backend = TwoCacheBackend(aside=False, prompt_tokens_per_s=600)  # a request affords ~540 tokens
    worker, store, events = await run_worker(backend)
    try:
        submit(worker, store, events, 1, at_rest=True)
        await asyncio.wait_for(events.ended[1], timeout=5)
        backend.served = ""  # the next request finds nothing cached, as in another file
        await generate(worker, store, events, 2)
        at_rest, request = (backend.count_tokens(call[0].prompt) for call in backend.calls)
        most_at_rest = affordable_prompt_tokens(backend.info(), 1536, AT_REST_SUGGESTION_S)  # 240
        assert at_rest <= most_at_rest < request  # its own start: the one cut at rest did not stick
    finally:
        worker.stop()


async def test_a_prefetch_waiting_behind_a_growth_is_dropped_for_it() -> None:
    backend = TwoCacheBackend(aside=True)
    worker, store, events = await run_worker(backend)
    try:
        backend.hold.clear()
        submit(worker, store, events, 1)  # its prompt is cut: a growth is planned, then it waits in the model
        await until(lambda: backend.served != "")
        submit(worker, store, events, 2, assumed_accepted="x")  # a prefetch queued behind it
        backend.hold.set()
        await asyncio.wait_for(events.ended[2], timeout=5)
        assert events.results[2].stats.empty_reason == EmptyReason.PREFETCH_DROPPED
        await until(lambda: URI in worker._grown)  # the growth ran in its place
        assert len(backend.calls) == 1
    finally:
        worker.stop()


def test_a_held_cancel_lets_a_started_job_keep_the_engine_for_its_hold() -> None:
    token = HeldCancelToken(hold_s=0.05)
    token.cancel()
    assert not token.cancelled  # not started: a job asked to yield at once still gets its hold
    token.start()
    assert not token.cancelled
    time.sleep(0.06)
    assert token.cancelled
    running = HeldCancelToken(hold_s=0.05)
    running.start()
    time.sleep(0.06)
    assert not running.cancelled  # the hold alone cancels nothing
    running.cancel()
    assert running.cancelled


async def test_a_warm_up_where_the_budget_cuts_deep_is_read_aside_and_leaves_the_served_cache() -> None:
    backend = TwoCacheBackend(aside=True)
    warmed: list[str] = []

    def warm(request: CompletionRequest, *, cancel: CancelToken | None = None) -> WarmResult:
        warmed.append(request.prompt)
        return WarmResult(0, 0)

    backend.warm = warm  # type: ignore[method-assign]
    worker, store, events = await run_worker(backend)
    try:
        await generate(worker, store, events, 1)
        served = backend.served
        await until(lambda: URI in worker._grown)
        worker._grown.clear()
        backend.read_aside.clear()

        store.change(URI, 2, [TextChange((LINES, 0, LINES, 0), "v = 1\n")])  # a new line: a new growth is due
        document = store.get(URI)
        worker.warm(WarmJob(URI, document.version, len(document.text), WarmTrigger.IDLE))
        await until(lambda: URI in worker._grown)
        (grown,) = backend.read_aside
        assert backend.count_tokens(grown) > 1000 and grown.endswith(
            "v = 1\n"
        )  # the full prompt at the cursor
        assert not warmed and backend.served == served  # the cache requests are served from was left alone
    finally:
        worker.stop()


def test_a_growth_standing_for_a_warm_up_stops_when_the_warm_up_is_cancelled() -> None:
    warm_up = CancelToken()
    token = HeldCancelToken(hold_s=0.0, linked=warm_up)
    token.start()
    assert not token.cancelled
    warm_up.cancel()
    assert token.cancelled


class QwenLayoutBackend(TwoCacheBackend):
    """The same fake with Qwen's fill-in-the-middle tokens, so prompts carry the text after the cursor."""

    def info(self) -> BackendInfo:
        special = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>")
        return replace(super().info(), special_tokens=special)


@pytest.mark.parametrize(
    ("prompt_tokens_per_s", "suffix_tokens", "fewest"),
    # Trimmed at 8-line blocks of 6 tokens a line: within one block of the share. The laptop's prompt, read
    # from scratch, is also cut to what it reads in time (~135 tokens, a quarter of them the suffix's).
    [(150, 64, 1), (1500, 150, 150 - 6 * 8), (5000, 384, 384 - 6 * 8)],
    ids=["laptop", "fast-cpu", "gpu"],
)
async def test_a_request_carries_the_suffix_its_machine_rereads_in_time(
    prompt_tokens_per_s: float, suffix_tokens: int, fewest: int
) -> None:
    """`affordable_suffix_tokens` reaches the prompt: at 150 tokens/s the floor of 64, at 1,500 what 0.1 s
    reads (150), at 5,000 the most, 384."""
    from lsp_server.context.builder import affordable_suffix_tokens

    backend = QwenLayoutBackend(aside=False, prompt_tokens_per_s=prompt_tokens_per_s)
    assert (
        affordable_suffix_tokens(backend.info(), ServerSettings().context.max_suffix_tokens) == suffix_tokens
    )
    worker, store, events = await run_worker(backend)
    try:
        document = store.get(URI)
        middle = document.text.index("value_200 =")
        events.ended[1] = asyncio.get_running_loop().create_future()
        worker.submit(Generation(1, URI, document.version, document.text, middle, ""))
        await asyncio.wait_for(events.ended[1], timeout=5)
        prompt = backend.calls[0][0].prompt
        suffix = prompt.split("<|fim_suffix|>")[1].split("<|fim_middle|>")[0]
        assert fewest <= backend.count_tokens(suffix) <= suffix_tokens
    finally:
        worker.stop()


@pytest.mark.parametrize(("context_tokens", "most"), [(None, 4096), (1536, 1536)], ids=["machine", "user"])
async def test_a_machine_that_reads_fast_gets_the_larger_prompt_unless_the_user_says(
    context_tokens: int | None, most: int
) -> None:
    """`full_prompt_tokens` reaches the prompt: at 20,000 tokens/s the whole 2,400-token file above the
    cursor fits the machine's 4,096; with `contextTokens` 1536 set, 1,536 bound it, as on any CPU."""
    from lsp_server.context import full_prompt_tokens

    backend = QwenLayoutBackend(aside=False, prompt_tokens_per_s=20_000)
    settings = ServerSettings()
    settings.context.max_prompt_tokens = context_tokens
    assert full_prompt_tokens(backend.info(), context_tokens) == most
    worker, store, events = await run_worker(backend, settings)
    try:
        document = store.get(URI)
        end = len(document.text)
        events.ended[1] = asyncio.get_running_loop().create_future()
        worker.submit(Generation(1, URI, document.version, document.text, end, ""))
        await asyncio.wait_for(events.ended[1], timeout=5)
        prompt_tokens = backend.count_tokens(backend.calls[0][0].prompt)
        assert prompt_tokens <= most
        assert prompt_tokens > 2_000 if context_tokens is None else prompt_tokens > 1_000
    finally:
        worker.stop()
