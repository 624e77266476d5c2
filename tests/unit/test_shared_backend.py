"""TCP sessions share one loaded backend: loaded once per model, first come first served, each session's
cancel its own, closed when the last session lets go (after a grace period that a new session reuses), and a
long generation yields to another session's request and is resumed."""

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

    shared = SharedBackends(factory, grace_s=0)  # no grace: closed as soon as unused
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


def test_an_unused_model_stays_for_the_grace_period_and_the_next_session_reuses_it() -> None:
    made: list[Slow] = []

    def factory(settings: ServerSettings) -> Slow:
        made.append(Slow(0.0, []))
        return made[-1]

    shared = SharedBackends(factory, grace_s=0.3)
    for _ in range(5):  # sessions one after another: one load
        shared.factory(ServerSettings()).close()
    assert len(made) == 1 and not made[0].closed
    other = shared.factory(replace(ServerSettings(), target="elsewhere"))  # another model: the idle one goes
    assert made[0].closed and len(made) == 2
    other.close()
    time.sleep(0.6)
    assert made[1].closed and shared.loaded_count() == 0  # the grace ran out


LONG = "x = [" + ", ".join(str(i) for i in range(60)) + "]"


def test_a_long_generation_yields_to_another_sessions_request_and_resumes_whole() -> None:
    from lsp_server.backends.fake import FakeBackend

    backend = FakeBackend([("long:", LONG), ("short:", "ok")], token_delay_s=0.02)
    shared = SharedBackends(lambda settings: backend)
    a, b = shared.factory(ServerSettings()), shared.factory(ServerSettings())
    results: dict[str, CompletionResult] = {}
    finished: dict[str, float] = {}
    shown: list[str] = []

    def ask(session: object, name: str, prompt: str, max_new_tokens: int = 500) -> None:
        request = CompletionRequest(prompt=prompt, max_new_tokens=max_new_tokens)
        on_text = shown.append if name == "a" else None
        results[name] = session.complete(request, on_text=on_text)  # type: ignore[attr-defined]
        finished[name] = time.monotonic()

    long = threading.Thread(target=ask, args=(a, "a", "long:"))
    long.start()
    time.sleep(0.4)
    asked = time.monotonic()
    ask(b, "b", "short:")
    assert results["b"].text == "ok"
    assert finished["b"] - asked < 0.2 + 0.1 + 0.1  # a slice, a token step, its own two tokens
    long.join(10)
    assert results["a"].text == LONG and results["a"].finish_reason == "eos"  # resumed where it stopped
    assert finished["a"] > finished["b"]
    assert all(LONG.startswith(text) for text in shown) and shown[-1] == LONG  # one growing text
    assert len(backend.calls) >= 3  # a, b, then a resumed


def test_a_resumed_generation_keeps_its_token_budget_and_its_own_cancel() -> None:
    from lsp_server.backends.fake import FakeBackend

    backend = FakeBackend([("long:", LONG), ("short:", "ok")], token_delay_s=0.02)
    shared = SharedBackends(lambda settings: backend)
    a, b = shared.factory(ServerSettings()), shared.factory(ServerSettings())
    whole = a.complete(CompletionRequest(prompt="long:", max_new_tokens=40))
    results: list[CompletionResult] = []
    long = threading.Thread(
        target=lambda: results.append(a.complete(CompletionRequest(prompt="long:", max_new_tokens=40)))
    )
    long.start()
    time.sleep(0.3)
    b.complete(CompletionRequest(prompt="short:"))
    long.join(10)
    assert results[0].text == whole.text and results[0].finish_reason == "length"
    assert results[0].stats.new_tokens == 40
    assert len(backend.calls) >= 4  # whole, a, b, then a resumed: it did yield
