"""The llama.vim-style peer client (bench/llama_vim_client.py): its request layout, what it shows, its cache
look-back and speculative requests, one request at a time; against a fake `/infill` server, no model."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bench.llama_vim_client import (
    AnswerCache,
    LlamaVimClient,
    LlamaVimSettings,
    cache_keys,
    document_lines,
    local_context,
    render,
)
from lsp_server.typist.keystrokes import Cadence
from lsp_server.typist.replay import KeyEvent, Replay

SOURCE = "import os\n\n\ndef f(values):\n    total = compute(values) + 1\n    return total\n"
START = SOURCE.index("total = ") + len("total = ")
END = SOURCE.index("\n", START)


# --- pure rules ---


def test_the_request_splits_lines_above_the_line_up_to_the_cursor_and_the_rest() -> None:
    lines = [f"line {i}" for i in range(10)]
    settings = LlamaVimSettings(n_prefix=3, n_suffix=2)
    context = local_context(lines, 5, 3, (), settings)
    assert context.prefix == "line 2\nline 3\nline 4\n"  # n_prefix lines above
    assert context.middle == "lin"  # the line up to the cursor: llama-server's `prompt`
    assert context.suffix == "e 5\nline 6\nline 7\n"  # the rest of the line, then n_suffix lines below
    assert context.indent == 0
    indented = local_context(["def f():", "    ", "x = 1"], 1, 4, (), settings)
    assert (indented.middle, indented.suffix, indented.indent) == ("", "\nx = 1\n", 0)  # a whitespace line
    assert local_context(["def f():", "    return x"], 1, 6, (), settings).indent == 4


def test_a_speculative_context_is_the_suggestion_accepted() -> None:
    lines = document_lines("a = 1\nb = \nc = 3\n")
    assert lines == ["a = 1", "b = ", "c = 3"]
    one = local_context(lines, 1, 4, ["2"], indent_last=0)
    assert (one.prefix, one.middle, one.suffix) == ("a = 1\n", "b = 2", "\nc = 3\n")
    two = local_context(lines, 1, 4, ["2", "d = 4"], indent_last=0)
    assert (two.prefix, two.middle, two.suffix) == ("a = 1\nb = 2\n", "d = 4", "\nc = 3\n")
    # What it caches under is what the cursor finds once the suggestion was typed.
    typed = local_context(document_lines("a = 1\nb = 2\nd = 4\nc = 3\n"), 2, 5)
    assert typed.key == two.key


def test_answers_are_cached_under_the_context_and_with_up_to_three_top_lines_cut() -> None:
    context = local_context(["a", "b", "c", "d", "e"], 4, 0)
    keys = cache_keys(context)
    assert len(keys) == 4 and keys[0] == context.key
    assert keys[1].startswith("b\nc\nd\n") and keys[3].startswith("d\n")


def test_the_look_back_serves_an_earlier_answer_minus_what_was_typed() -> None:
    cache = AnswerCache()
    lines = ["x = 1", "total = c"]
    cache.insert(local_context(lines, 1, 9).key, "ompute(values) + 1")
    assert cache.lookup(local_context(lines, 1, 9)) == ("ompute(values) + 1", "exact")
    later = ["x = 1", "total = comp"]
    assert cache.lookup(local_context(later, 1, 12)) == ("ute(values) + 1", "look-back")
    assert cache.lookup(local_context(["x = 1", "total = cx"], 1, 10)) == (None, "")  # typed elsewhere
    assert cache.lookup(local_context(later, 1, 12), look_back=2) == (None, "")  # too far back


def test_the_cache_drops_the_least_recently_used() -> None:
    cache = AnswerCache(max_keys=2)
    cache.insert("a", "1")
    cache.insert("b", "2")
    assert cache.get("a") == "1"  # now b is the oldest
    cache.insert("c", "3")
    assert cache.get("b") is None and cache.get("a") == "1" and cache.get("c") == "3"


def test_what_is_shown_and_what_is_dropped() -> None:
    lines = ["def f():", "    total = ", "", "    return total"]
    shown = render("compute()\n\n", lines, 1, 12)
    assert shown.ghost == "compute()" and shown.can_accept  # trailing empty lines dropped
    assert render("", lines, 1, 12).ghost is None
    assert render("   ", lines, 1, 12).can_accept is False  # whitespace only
    # A suggestion that only repeats the next non-blank line (blank lines skipped) is dropped.
    assert render("", ["    x = 1", "    ", "", "    return x"], 1, 4).ghost is None
    assert render("return x", ["    x = 1", "    ", "", "    return x", ""], 1, 4).ghost is None
    assert render("\n    return total", ["    total = 1", "    return total"], 0, 13).ghost is None
    # ... and one that repeats the rest of the line.
    assert render(")", ["print(x)"], 0, 7).ghost is None
    # On a whitespace line the suggestion's indentation is trimmed to the line's.
    assert render("        y = 2", ["def f():", "    ", "z"], 1, 4).ghost == "    y = 2"
    narrower = render("y = 2", ["def f():", "    ", "z"], 1, 4)
    assert narrower.ghost is None and narrower.changes_indent  # accepting would dedent: not an insertion


# --- against a fake /infill server ---


class FakeInfill:
    """A scripted `/infill`: the answer for each request's `prompt` (the line up to the cursor)."""

    def __init__(self, answer: Callable[[dict[str, Any]], str], delay_s: float) -> None:
        self.answer, self.delay_s = answer, delay_s
        self.bodies: list[dict[str, Any]] = []
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()


@contextmanager
def fake_server(fake: FakeInfill) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with fake.lock:
                fake.bodies.append(body)
                fake.running += 1
                fake.most_at_once = max(fake.most_at_once, fake.running)
            time.sleep(fake.delay_s)
            payload = json.dumps(
                {"content": fake.answer(body), "timings/prompt_n": 7, "timings/predicted_n": 3}
            ).encode()
            with fake.lock:
                fake.running -= 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def compute_answers(body: dict[str, Any]) -> str:
    if body["prompt"] == "    total = c":
        return "ompute(values) + 1"
    if body["prompt"] == "    total = compute(values) + 1":  # the speculative request, as if accepted
        return "\n    print(total)"
    return ""


def type_keys(url: str, ms_per_key: float, keys: int, accept: bool) -> tuple[list[KeyEvent], LlamaVimClient]:
    async def run() -> tuple[list[KeyEvent], LlamaVimClient]:
        client = LlamaVimClient(url)
        try:
            replay = Replay(
                client.editor(),
                SOURCE,
                Cadence(ms_per_key, jitter=0.0, line_pause=0.0, symbol_pause=0.0),
                start=START,
                end=END,
                max_keystrokes=keys,
                accept=accept,
            )
            return await replay.run(), client
        finally:
            client.shutdown()

    return asyncio.run(run())


def test_request_layout_speculative_request_and_tab_on_the_cached_answer() -> None:
    fake = FakeInfill(compute_answers, delay_s=0.02)
    with fake_server(fake) as url:
        events, client = type_keys(url, 600, keys=5, accept=True)
    first = fake.bodies[0]
    assert first["input_prefix"] == "import os\n\n\ndef f(values):\n"
    assert first["prompt"] == "    total = c"
    assert first["input_suffix"] == "\n    return total\n"
    assert first["n_indent"] == 4 and first["t_max_predict_ms"] == 250 and first["input_extra"] == []
    assert first["samplers"] == ["top_k", "top_p", "infill"] and first["cache_prompt"] is True
    # Once "ompute(values) + 1" was shown, a speculative request as if it had been accepted.
    speculative = fake.bodies[1]
    assert speculative["prompt"] == "    total = compute(values) + 1"
    assert speculative["input_suffix"] == "\n    return total\n"
    assert speculative["t_max_predict_ms"] == 1000
    # The typist pressed Tab on the whole rest of the line; the answer there came from the cache at once.
    assert [e.key for e in events] == ["c", "ompute(values) + 1"]
    assert events[1].accepted == len("ompute(values) + 1") and events[1].ghost_before == "ompute(values) + 1"
    assert events[1].outcome == "suggestion" and events[1].suggestion == "\n    print(total)"
    assert events[1].latency_ms is not None and events[1].latency_ms < 50
    assert client.stats.shown_exact == 1 and client.stats.speculative_requests >= 1
    assert client.stats.failures == 0


def test_typing_through_a_suggestion_is_served_by_the_look_back() -> None:
    fake = FakeInfill(compute_answers, delay_s=0.02)
    with fake_server(fake) as url:
        events, client = type_keys(url, 500, keys=4, accept=False)
    assert [e.key for e in events] == ["c", "o", "m", "p"]
    assert events[0].outcome == "suggestion" and events[0].suggestion == "ompute(values) + 1"
    for event, rest in zip(
        events[1:], ("ompute(values) + 1", "mpute(values) + 1", "pute(values) + 1"), strict=True
    ):
        assert event.ghost_before == rest  # on screen when the key came
    assert [e.suggestion for e in events[1:]] == ["mpute(values) + 1", "pute(values) + 1", "ute(values) + 1"]
    assert all(e.latency_ms is not None and e.latency_ms < 50 for e in events[1:])  # from the cache
    assert client.stats.shown_look_back == 3
    # Every typed position was still asked about (nothing cached there), never while another request ran.
    assert [b["prompt"] for b in fake.bodies if b["t_max_predict_ms"] == 250] == [
        "    total = c",
        "    total = co",
        "    total = com",
        "    total = comp",
    ]


def test_one_request_at_a_time_and_the_next_key_waits() -> None:
    fake = FakeInfill(lambda body: "", delay_s=0.3)
    with fake_server(fake) as url:
        events, client = type_keys(url, 40, keys=6, accept=False)
    assert fake.most_at_once == 1
    assert client.stats.retries > 0 and len(fake.bodies) < len(events)
    assert all(e.superseded for e in events[:-1]) and events[-1].outcome == "empty"
    assert (
        fake.bodies[-1]["prompt"] == SOURCE[: START + 6].rsplit("\n", 1)[1]
    )  # the last position, asked last


@pytest.mark.slow  # a real llama-server on the default model's GGUF
def test_a_few_keys_end_to_end_on_llama_server(tmp_path: Any) -> None:
    from bench.keystrokes import KeystrokeConfig, peer_gguf
    from bench.llama_peer import find_llama_server
    from bench.llama_vim_client import start_llama_vim_server

    binary = find_llama_server()
    try:
        gguf = peer_gguf(KeystrokeConfig())
    except Exception:
        gguf = None
    if binary is None or not binary.exists() or gguf is None:
        pytest.skip("needs llama-server (scripts/build_llama_server.sh) and the default model's GGUF")
    server = start_llama_vim_server(binary, gguf, 1, tmp_path / "llama-server.log")
    try:
        events, client = type_keys(server.url, 400, keys=5, accept=True)
    finally:
        server.stop()
    assert len(events) >= 2 and client.stats.requests >= 1
    assert client.stats.failures == 0 and client.stats.answers == client.stats.requests
    assert client.stats.prompt_tokens > 0
    assert all(e.outcome in ("suggestion", "empty", "cancelled") for e in events)


@pytest.mark.slow  # a real `specls serve --backend fake` subprocess, then the peer on a fake /infill
def test_both_rows_side_by_side_in_one_report(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path
    from types import SimpleNamespace

    import bench.keystrokes as keystrokes
    import bench.llama_peer as llama_peer
    import bench.llama_vim_client as llama_vim_client

    source = tmp_path / "sample.py"
    source.write_text("\n".join([f"x{i} = {i}" for i in range(40)] + [SOURCE] + ["y = 1"] * 12))
    fake = FakeInfill(compute_answers, delay_s=0.02)
    with fake_server(fake) as url:
        stopped: list[bool] = []
        server = SimpleNamespace(
            url=url, process=SimpleNamespace(args=["llama-server", "-ub", "1024"]), repack=False,
            stop=lambda: stopped.append(True),
        )  # fmt: skip
        monkeypatch.setattr(llama_peer, "find_llama_server", lambda: Path("/fake/llama-server"))
        monkeypatch.setattr(keystrokes, "peer_gguf", lambda config: Path("/fake/model.gguf"))
        monkeypatch.setattr(llama_vim_client, "start_llama_vim_server", lambda *args: server)
        config = keystrokes.KeystrokeConfig(
            files=(source,), chars=40, backend="fake", pace_ms=30, line_pause_ms=60, probes=2,
            out=tmp_path, tag="peer", timeout_s=60, peer="llama-server",
        )  # fmt: skip
        result = keystrokes.run_keystrokes(config, progress=False)
    peer = result["peers"]["llama-server"]
    assert stopped == [True]
    ours, theirs = result["summary"], peer["summary"]
    # The same typist: the same keys typed into both (no accept differs here: neither suggested the text).
    assert [k["key"] for k in result["keystrokes"]] == [k["key"] for k in peer["keystrokes"]]
    assert ours["chars_typed"] == theirs["chars_typed"] and theirs["errors"] == 0
    assert theirs["client"]["requests"] == len(fake.bodies) > 0
    assert set(theirs["open_to_first_suggestion_ms"]) == {"0s", "1s"}
    paths = keystrokes.write_report(result, tmp_path, "peer")
    markdown = paths[1].read_text()
    assert "## Side by side" in markdown and "llama.vim-style client on llama-server" in markdown
    assert markdown.count("| ghost text on screen when the next key came |") == 2  # its own table, then both
