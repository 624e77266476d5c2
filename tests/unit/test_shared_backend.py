"""TCP sessions share one loaded backend: loaded once per model, first come first served, each session's
cancel its own, closed when the last session lets go."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from engine.api import BackendInfo, CancelToken, CompletionRequest, CompletionResult, OnText
from lsp_server.backends.shared import SharedBackends
from lsp_server.config import ServerSettings


class Slow:
    """A backend whose completions take `seconds` and record their order."""

    loads = 0

    def __init__(self, seconds: float, order: list[str]) -> None:
        Slow.loads += 1
        self.seconds = seconds
        self.order = order
        self.closed = False
        self.running = 0

    def info(self) -> BackendInfo:
        return BackendInfo("slow", "t", None, (), 512, "cpu")

    def count_tokens(self, text: str) -> int:
        return len(text)

    def complete(
        self, request: CompletionRequest, *, on_text: OnText | None = None, cancel: CancelToken | None = None
    ) -> CompletionResult:
        self.running += 1
        assert self.running == 1, "two completions at once on one model"
        self.order.append(request.prompt)
        time.sleep(self.seconds)
        self.running -= 1
        return CompletionResult(request.prompt, "eos")

    def close(self) -> None:
        self.closed = True


def test_one_load_per_model_and_close_after_the_last_session() -> None:
    order: list[str] = []
    made: list[Slow] = []

    def factory(settings: ServerSettings) -> Slow:
        made.append(Slow(0.0, order))
        return made[-1]

    shared = SharedBackends(factory)
    a, b = shared.factory(ServerSettings()), shared.factory(ServerSettings(max_new_tokens=8))
    other = shared.factory(replace(ServerSettings(), target="elsewhere"))
    assert len(made) == 2 and shared.loaded_count() == 2  # same model key shared; another model its own
    a.close()
    a.close()  # twice is once
    assert not made[0].closed
    b.close()
    assert made[0].closed and not made[1].closed
    other.close()
    assert made[1].closed and shared.loaded_count() == 0


def test_sessions_take_turns_in_arrival_order_and_cancel_only_their_own() -> None:
    order: list[str] = []
    shared = SharedBackends(lambda settings: Slow(0.2, order))
    sessions = [shared.factory(ServerSettings()) for _ in range(3)]
    results: dict[str, CompletionResult] = {}
    cancel_c = CancelToken()

    def ask(index: int, name: str, cancel: CancelToken | None = None) -> None:
        results[name] = sessions[index].complete(CompletionRequest(prompt=name), cancel=cancel)

    threads = [
        threading.Thread(target=ask, args=(0, "a")),
        threading.Thread(target=ask, args=(1, "b")),
        threading.Thread(target=ask, args=(2, "c", cancel_c)),
    ]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # a, then b, then c arrive
    started = time.monotonic()
    cancel_c.cancel()  # c gives up while waiting: at once, and a and b are untouched
    threads[2].join(1.0)
    assert not threads[2].is_alive() and time.monotonic() - started < 0.1
    for thread in threads[:2]:
        thread.join(2.0)
    assert order == ["a", "b"]
    assert results["a"].text == "a" and results["b"].text == "b"
    assert results["c"].finish_reason == "cancelled" and results["c"].text == ""
