"""The model calls in flight, seen from the event loop: queueing a `Generation` on the engine worker,
streaming its text, ending it (once), cancelling it, and answering the requests that wait on it.

Together with `coordinator.py` this is the only code that changes scheduling state or calls the worker: the
coordinator decides which generation to start or stop and what follows its end (`on_ended`); this module
carries that out. What a waiting request gets is `waiting.resolve`'s decision."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable

from engine.api import CompletionResult
from lsp_server.jobs import Generation, Waiter
from lsp_server.scheduling.reasons import EmptyReason
from lsp_server.scheduling.waiting import WaitPlan, keeps_going, resolve
from lsp_server.scheduling.worker import EngineWorker
from lsp_server.statistics import Statistics


class Generations:
    def __init__(
        self,
        worker: EngineWorker,
        stats: Statistics,
        on_log: Callable[[int, str], None],
        on_ended: Callable[[Generation], None],
    ) -> None:
        self._worker = worker
        self._stats = stats
        self._on_log = on_log
        self._on_ended = on_ended  # after a generation ended and its waiters were answered
        self._ids = itertools.count(1)

    def new(
        self,
        uri: str,
        version: int,
        doc_text: str,
        anchor: int,
        previous: str,
        assumed_accepted: str = "",
        *,
        at_rest: bool = False,
    ) -> Generation:
        return Generation(
            next(self._ids), uri, version, doc_text, anchor, previous, assumed_accepted=assumed_accepted,
            at_rest=at_rest,
        )  # fmt: skip

    def queue(self, generation: Generation) -> None:
        """Queue on the worker; the document's older queued one is replaced, and answered empty."""
        replaced = self._worker.submit(generation)
        if replaced is not None:
            self.finish(replaced, cancelled=True, reason=EmptyReason.SUPERSEDED)

    def cancel(self, generation: Generation, reason: str) -> None:
        """Stop a generation (the engine sees the cancel within one round) and answer its waiters now."""
        generation.cancel.cancel()
        self.finish(generation, cancelled=True, reason=reason)

    def drop(self, generation: Generation, reason: str) -> None:
        """End a generation nobody needs: off the queue if it has not started, else cancelled."""
        if generation.done:
            return
        queued = self._worker.withdraw_if_queued(generation)
        if queued is not None:
            self.finish(queued, cancelled=True, reason=reason)
        else:
            self.cancel(generation, reason)

    def withdraw(self, uri: str, reason: str) -> bool:
        """End the document's queued generation, if one waits to start."""
        queued = self._worker.withdraw(uri)
        if queued is not None:
            self.finish(queued, cancelled=True, reason=reason)
        return queued is not None

    def cancel_all(self, running: Iterable[Generation], reason: str) -> None:
        for queued in self._worker.drain():
            self.finish(queued, cancelled=True, reason=reason)
        for generation in running:
            self.cancel(generation, reason)

    def finish(
        self, generation: Generation, *, cancelled: bool = False, failed: bool = False, reason: str = ""
    ) -> None:
        if generation.done:
            return
        generation.done = True
        generation.end_reason = generation.end_reason or reason
        generation.failed = failed or cancelled  # a cut-off suggestion is not served from the cache
        _evaluate_all(generation)
        self._on_ended(generation)

    # --- the requests waiting on a generation ---

    async def wait(self, generation: Generation, typed: str, plan: WaitPlan) -> str | None:
        """The answer for a request that had typed `typed` when it asked (None: diverged, start again)."""
        loop = asyncio.get_running_loop()
        waiter = Waiter(typed, plan.first_line_now, loop.create_future(), partial_due=plan.partial_now)
        generation.waiters.append(waiter)

        def due(flag: str) -> None:
            setattr(waiter, flag, True)
            if waiter in generation.waiters:
                _evaluate(generation, waiter)

        if plan.first_line_after_s is not None:
            loop.call_later(plan.first_line_after_s, due, "first_line_only")
        if plan.partial_after_s is not None:
            loop.call_later(plan.partial_after_s, due, "partial_due")
        _evaluate(generation, waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:  # $/cancelRequest: pygls answers -32800
            if waiter in generation.waiters:
                generation.waiters.remove(waiter)
            if not generation.waiters and not generation.done:
                # A running one may still serve typed-ahead, so it keeps going until other work arrives;
                # one not started yet leaves the queue.
                queued = self._worker.withdraw_if_queued(generation)
                if queued is not None:
                    self.finish(queued, cancelled=True, reason=EmptyReason.CLIENT_CANCELLED)
            raise

    # --- the worker's reports (through the coordinator, which is the worker's `WorkerEvents`) ---

    def stream(self, generation: Generation, text: str) -> None:
        if generation.done:
            return
        generation.text = text
        if not keeps_going(text, generation.agreed_typing):
            # The user typed something else meanwhile (we could not tell while nothing was generated yet).
            # The request made after that typing starts again; the older ones are stale and get empty answers.
            for waiter in list(generation.waiters):
                if waiter.typed_when_asked == generation.agreed_typing:
                    waiter.future.set_result(None)
                    generation.waiters.remove(waiter)
            self.cancel(generation, EmptyReason.DIVERGED)
            return
        _evaluate_all(generation)

    def done(
        self, generation: Generation, text: str, result: CompletionResult | None, error: str | None
    ) -> None:
        self._stats.record_generation_done(result, error)
        if error is not None:
            self._on_log(logging.ERROR, f"completion failed: {error}")
        why = result.stats.empty_reason if result is not None else EmptyReason.FAILED
        if error is not None or (result is not None and result.finish_reason == "cancelled"):
            self.finish(
                generation, cancelled=True, failed=error is not None, reason=why or EmptyReason.CANCELLED
            )
        else:
            generation.text = text
            self.finish(generation, reason=why or ("" if text else EmptyReason.GENERATED_NOTHING))


def _evaluate(generation: Generation, waiter: Waiter) -> None:
    """Answer `waiter` if the generation already has what it needs."""
    if waiter.future.done():
        return
    done, failed, typed = generation.done, generation.failed, waiter.typed_when_asked
    resolution = resolve(generation.text, done, failed, typed, waiter.first_line_only, waiter.partial_due)
    if resolution is not None:
        waiter.future.set_result(resolution.answer)
        generation.answered_short = generation.answered_short or resolution.short
        generation.waiters.remove(waiter)


def _evaluate_all(generation: Generation) -> None:
    for waiter in list(generation.waiters):
        _evaluate(generation, waiter)
