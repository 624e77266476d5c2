"""The engine worker's owner on the event loop: the backend's lifecycle (loading it, its state, starting and
stopping the engine thread), the warm-ups that `warmups.py`'s triggers decide, and the worker's reports
(`WorkerEvents`; a generation's own go to its `Generations`, which alone queues and withdraws generations
on the worker). The coordinator decides when; this carries it out."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from engine.api import BackendInfo, CompletionBackend, CompletionResult, WarmResult
from lsp_server.config import ServerSettings
from lsp_server.documents import DocumentStore, UnknownDocumentError
from lsp_server.jobs import Generation
from lsp_server.scheduling.document_state import DocumentState
from lsp_server.scheduling.generations import Generations
from lsp_server.scheduling.reasons import BackendState
from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.scheduling.warmups import WarmTrigger, idle_delay_s, idle_warm_due, may_warm
from lsp_server.scheduling.worker import EngineWorker, PromptSteps, WarmJob
from lsp_server.statistics import Statistics


class BackendLink:
    def __init__(
        self,
        store: DocumentStore,
        store_lock: threading.Lock,
        backend_factory: Callable[[ServerSettings], CompletionBackend],
        settings: Callable[[], ServerSettings],
        prompts: PromptSteps,
        policy: Callable[[], SchedulingSettings],
        stats: Statistics,
        on_state: Callable[[BackendState, str], None],
        on_ready: Callable[[], None],
        on_warmed: Callable[[], None],
        on_log: Callable[[int, str], None],
        on_ended: Callable[[Generation], None],
    ) -> None:
        self.state: BackendState = "idle"
        self.info: BackendInfo | None = None
        self._store = store
        self._policy = policy
        self._stats = stats
        self._on_state, self._on_ready, self._on_warmed = on_state, on_ready, on_warmed
        self._worker = EngineWorker(store, store_lock, backend_factory, settings, prompts, self)
        self.generations = Generations(self._worker, stats, on_log, on_ended=on_ended)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def busy(self) -> bool:
        """A generation is queued (a hint, not a promise)."""
        return self._worker.busy

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._worker.start(loop)

    def load(self, settings: ServerSettings, cancel_everything: Callable[[], None]) -> None:
        """(Re)load the backend on the worker; requests are answered empty until it is ready."""
        self._set_state("loading", f"loading {settings.backend} backend")
        cancel_everything()
        self._worker.load(settings)

    def stop(self, timeout: float) -> None:
        self._worker.stop(timeout)

    def join(self, timeout: float) -> bool:
        return self._worker.join(timeout)

    # --- warm-ups (the triggers are `warmups`') ---

    def warm(self, uri: str, offset: int | None, trigger: WarmTrigger) -> None:
        if not may_warm(self._policy(), self.ready):
            return
        try:
            version = self._store.get(uri).version
        except UnknownDocumentError:
            return
        self._worker.warm(WarmJob(uri, version, offset, trigger))

    def warm_when_idle(self, state: DocumentState, current: Callable[[], bool]) -> None:
        """Warm at the document's cursor `warmIdleMs` after its latest request, if nothing happened since
        (`current`: the document is still open with this state)."""
        delay = idle_delay_s(self._policy())
        if delay is None:
            return
        asked = state.requests

        def when_idle() -> None:
            if idle_warm_due(state, asked, current=current(), engine_busy=self.busy):
                self.warm(state.uri, state.cursor, WarmTrigger.IDLE)

        asyncio.get_running_loop().call_later(delay, when_idle)

    # --- the worker's reports (`WorkerEvents`), on the event loop ---

    def backend_loaded(self, info: BackendInfo | None, error: str | None, epoch: int) -> None:
        if epoch != self._worker.load_epoch:  # a newer load superseded this one
            return
        self.info = info
        if info is None:
            self._set_state("error", f"model failed to load: {error}")
            return
        self._set_state("ready", f"{info.name} backend ready: {info.target}")
        self._on_ready()

    def generation_started(self) -> None:
        self._stats.record_generation_started()

    def generation_text(self, generation: Generation, text: str) -> None:
        self.generations.stream(generation, text)

    def generation_done(
        self, generation: Generation, text: str, result: CompletionResult | None, error: str | None
    ) -> None:
        self.generations.done(generation, text, result, error)

    def cancelled_to_idle(self, ms: float) -> None:
        self._stats.record_cancel_to_idle(ms)

    def cache_warmed(self, job: WarmJob, result: WarmResult) -> None:
        self._stats.record_warm(job.reason, result.cached_tokens, result.prompt_tokens)
        self._on_warmed()  # a status update: "warming, x% cached"

    def _set_state(self, state: BackendState, message: str) -> None:
        self.state = state
        self._on_state(state, message)
