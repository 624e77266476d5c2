"""The remote backend against a REAL llama-server serving a model exported by `engine.gguf_export`.

The server binary comes from `scripts/build_llama_server.sh` (cached under ~/.cache/specls); the tests
skip, saying so, only when that binary is absent. The model is the bundled target when it exists, else a
tiny random Llama with a real byte-level BPE tokenizer.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from remote_support import (
    BUILD_HINT,
    BUNDLED_TARGET,
    LlamaServer,
    build_tiny_llama,
    start_llama_server,
)

from bench.llama_peer import find_llama_server
from engine.api import CancelToken, CompletionRequest
from engine.gguf_export import export_llama_gguf
from lsp_server.backends.openai import OpenAIBackend, RemoteOptions, RemoteUnavailableError
from lsp_server.config import ServerSettings

LLAMA_SERVER = find_llama_server()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(LLAMA_SERVER is None, reason=f"llama-server binary not found: {BUILD_HINT}"),
]
ALIAS = "specls-test"

CODE_SAMPLES = [
    "def mean(values):\n    return sum(values) / len(values)\n",
    "class Stack:\n    def __init__(self):\n        self._items = []\n\n    def push(self, item):\n",
    "for i, line in enumerate(open('data.txt', encoding='utf-8')):\n\tprint(f'{i:>4} {line!r}')  # ü ∑ 😀\n",
    "import os\nPATH = os.environ.get('HOME', '/tmp')  \n\n\n    x = [1, 22, 333]\n",
]


@dataclass
class ServedModel:
    hf_dir: Path
    gguf: Path


@pytest.fixture(scope="module")
def served_model(tmp_path_factory: pytest.TempPathFactory) -> ServedModel:
    work = tmp_path_factory.mktemp("remote-model")
    hf_dir = BUNDLED_TARGET if (BUNDLED_TARGET / "config.json").is_file() else build_tiny_llama(work / "hf")
    return ServedModel(hf_dir=hf_dir, gguf=export_llama_gguf(hf_dir, work / "model.gguf").path)


@pytest.fixture(scope="module")
def llama_server(
    served_model: ServedModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    assert LLAMA_SERVER is not None
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    server = start_llama_server(LLAMA_SERVER, served_model.gguf, log_path, alias=ALIAS)
    yield server
    server.stop()


def backend_for(url: str, options: RemoteOptions | None = None) -> OpenAIBackend:
    return OpenAIBackend(ServerSettings(backend="openai", endpoint=url, remote_model=ALIAS), options)


def metric(url: str, name: str) -> float:
    """One counter from llama-server's Prometheus /metrics (started with --metrics)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(rf"^llamacpp:{name} ([0-9.e+]+)$", text, re.MULTILINE)
    assert match, f"metric {name} not in /metrics"
    return float(match.group(1))


@pytest.fixture(scope="module")
def local_engine(served_model: ServedModel) -> Iterator[Any]:
    """The in-process engine on the same weights (the bundled draft, or the tiny model as its own draft)."""
    import torch

    from engine.service import LocalEngine

    torch.set_num_threads(1)
    draft = None if served_model.hf_dir == BUNDLED_TARGET else str(served_model.hf_dir)
    engine = LocalEngine(target=str(served_model.hf_dir), draft=draft, device="cpu", keep_hf_model=True)
    yield engine
    engine.close()


def test_gguf_tokenizer_matches_the_hf_tokenizer(
    llama_server: LlamaServer, served_model: ServedModel
) -> None:
    """The explicit gpt-2 pre-tokenizer mapping: llama.cpp splits code exactly as `tokenizers` does."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(served_model.hf_dir / "tokenizer.json"))
    samples = [*CODE_SAMPLES, "<|sp_fim_suffix|>\n<|sp_fim_prefix|>def f(x):\n    return<|sp_fim_middle|>"]
    for text in samples:
        request = urllib.request.Request(
            llama_server.url + "/tokenize",
            data=json.dumps({"content": text, "add_special": False, "parse_special": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            served = json.loads(response.read())["tokens"]
        assert served == hf.encode(text, add_special_tokens=False).ids, text


def test_info_discovers_the_bundled_fim_tokens(llama_server: LlamaServer) -> None:
    info = backend_for(llama_server.url).info()
    assert {"<|sp_fim_prefix|>", "<|sp_fim_suffix|>", "<|sp_fim_middle|>", "<|sp_file_sep|>"} <= set(
        info.special_tokens
    )
    assert "<fim_prefix>" not in info.special_tokens
    assert info.context_length == 512 and info.target == ALIAS


GREEDY_PROMPTS = [
    "<|sp_fim_suffix|>\n<|sp_fim_prefix|>def mean(values):\n    return<|sp_fim_middle|>",
    "<|sp_fim_suffix|>    return result\n"
    "<|sp_fim_prefix|>def parse(path):\n    with open(path) as f:\n<|sp_fim_middle|>",
    "<|sp_fim_suffix|>\n\n<|sp_fim_prefix|>import os\n\n\nclass Config:\n"
    "    def __init__(self<|sp_fim_middle|>",
    "import os\n\nclass Config:\n    def __init__(self",
    "for index, item in enumerate(",
    "def test_",
]


NEAR_TIE = 0.02  # logit gap below which two runtimes may legitimately pick different tokens


def greedy_steps(engine: Any, prompt: str, max_new_tokens: int) -> list[tuple[int, float]]:
    """Greedy tokens of the engine's target with the gap between its best and second-best logit."""
    import torch

    model, tokenizer = engine.pair.target, engine.tokenizer
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    steps: list[tuple[int, float]] = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            top = torch.topk(model(ids).logits[0, -1].float(), 2)
            token = int(top.indices[0])
            steps.append((token, float(top.values[0] - top.values[1])))
            if token in engine.eos_ids:
                break
            ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
    return steps


def test_short_greedy_outputs_match_the_local_engine(llama_server: LlamaServer, local_engine: Any) -> None:
    """Equal text up to the first near-tie; past one, batched kernels may sum in another order and differ."""
    backend = backend_for(llama_server.url)
    compared_tokens = total_tokens = 0
    for prompt in GREEDY_PROMPTS:
        local = local_engine.complete(CompletionRequest(prompt=prompt, max_new_tokens=12))
        steps = greedy_steps(local_engine, prompt, 12)
        ids = [token for token, _ in steps if token not in local_engine.eos_ids]
        assert local.text == local_engine.decode(ids)  # the local engine is greedy
        safe = next((i for i, (_, gap) in enumerate(steps) if gap < NEAR_TIE), len(steps))
        remote = backend.complete(CompletionRequest(prompt=prompt, max_new_tokens=12))
        if safe == len(steps):
            assert (remote.text, remote.finish_reason) == (local.text, local.finish_reason), prompt
        else:
            assert remote.text.startswith(local_engine.decode(ids[:safe])), prompt
        compared_tokens += safe
        total_tokens += len(steps)
    assert compared_tokens >= 0.75 * total_tokens, "too many near-ties for the comparison to mean much"


# Prompts a model tends to continue for a long time (a trained one keeps counting; an untrained one rambles).
LONG_PROMPTS = [
    "values = [\n    1,\n    2,\n    3,\n    4,\n",
    "import os\n\nclass Config:\n    def __init__(self",
]


def long_running_request(backend: OpenAIBackend, url: str) -> CompletionRequest:
    """A request that, left alone, decodes at least 300 steps: so a cancel has something to stop."""
    for prompt in LONG_PROMPTS:
        request = CompletionRequest(prompt=prompt, max_new_tokens=400)
        decoded_before = metric(url, "n_decode_total")
        if (
            backend.complete(request).finish_reason == "length"
            and metric(url, "n_decode_total") - decoded_before >= 300
        ):
            return request
    pytest.fail("no prompt makes the served model generate 300 tokens; add one to LONG_PROMPTS")


def test_cancel_closes_the_stream_and_the_server_stops_generating(llama_server: LlamaServer) -> None:
    backend = backend_for(llama_server.url)
    long = long_running_request(backend, llama_server.url)
    decoded_before = metric(llama_server.url, "n_decode_total")
    cancel = CancelToken()

    def on_text(text: str) -> None:
        cancel.cancel()  # a newer keystroke arrives as soon as the first text does

    result = backend.complete(long, on_text=on_text, cancel=cancel)
    assert result.finish_reason == "cancelled"
    started = time.monotonic()
    follow_up = backend.complete(CompletionRequest(prompt=long.prompt, max_new_tokens=4))
    follow_up_s = time.monotonic() - started
    assert follow_up.finish_reason in ("eos", "length")
    decoded = metric(llama_server.url, "n_decode_total") - decoded_before
    # Served at once: the single slot was free, not busy finishing 400 tokens of the cancelled request.
    assert decoded < 100, f"the server decoded {decoded} steps: it kept generating after the cancel"
    assert follow_up_s < 2.0


def test_stopped_endpoint_gives_one_clear_error_then_fast_empty_answers(
    served_model: ServedModel, tmp_path: Path
) -> None:
    assert LLAMA_SERVER is not None
    server = start_llama_server(LLAMA_SERVER, served_model.gguf, tmp_path / "server.log", alias=ALIAS)
    backend = backend_for(server.url, RemoteOptions(cooldown_s=0.5, backoff_s=0.05))
    try:
        assert backend.complete(CompletionRequest(prompt="def f(", max_new_tokens=4)).finish_reason != "error"
    finally:
        server.stop()
    with pytest.raises(RemoteUnavailableError, match=r"127\.0\.0\.1:\d+ is unavailable \(connection refused"):
        backend.complete(CompletionRequest(prompt="def f(", max_new_tokens=4))
    started = time.monotonic()
    quiet = backend.complete(CompletionRequest(prompt="def f(", max_new_tokens=4))
    assert (quiet.text, quiet.finish_reason) == ("", "error") and time.monotonic() - started < 0.1


# --- through the LSP server: `specls serve --backend openai --endpoint URL --model NAME` ---

DOC_URI = "file:///workspace/stats.py"
DOC = (
    "import math\n\n\ndef mean(values):\n    total = 0\n    for value in values:\n        total += value\n"
    "    return "
)


def expected_suggestion(url: str, text: str) -> str:
    """What the LSP server should answer: the same context builder and backend, called directly."""
    from lsp_server.context import ContextSettings
    from lsp_server.context.builder import build_completion_context, finalize_completion
    from lsp_server.documents import DocumentStore

    backend = backend_for(url)
    store = DocumentStore()
    store.open(DOC_URI, "python", 1, text)
    ctx = build_completion_context(
        store, DOC_URI, len(text), backend.info(), ContextSettings(), backend.count_tokens
    )
    request = CompletionRequest(
        prompt=ctx.prompt, max_new_tokens=64, stop_strings=ctx.stop_strings, stop_check=ctx.stop_check
    )
    return finalize_completion(backend.complete(request).text, ctx)


def close(session: Any, uri: str) -> None:
    from lsprotocol import types

    session.client.text_document_did_close(
        types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri))
    )


def serve_args(url: str) -> tuple[str, ...]:
    return ("--backend", "openai", "--endpoint", url, "--model", ALIAS)


async def test_completions_arrive_through_the_lsp_server(llama_server: LlamaServer) -> None:
    from server_support import start_session, stop_session

    expected = expected_suggestion(llama_server.url, DOC)
    assert expected, "precondition: the served model completes this document with some text"
    session = await start_session(serve_args(llama_server.url))
    try:
        assert session.statuses[-1]["state"] == "ready"
        session.open(DOC_URI, DOC)
        assert await session.suggestion(DOC_URI) == expected
    finally:
        await stop_session(session)


async def test_newest_request_wins_and_is_served_at_once(llama_server: LlamaServer) -> None:
    from server_support import start_session, stop_session

    session = await start_session(serve_args(llama_server.url))
    try:
        session.open(DOC_URI, DOC)
        older = session.inline(DOC_URI)
        session.type(DOC_URI, "t")  # a keystroke: the older request is cancelled, still answered
        started = time.monotonic()
        newest = await session.suggestion(DOC_URI)
        assert time.monotonic() - started < 5
        assert newest == expected_suggestion(llama_server.url, DOC + "t")
        await older  # answered (possibly empty), never dropped
    finally:
        await stop_session(session)


async def test_stopped_endpoint_is_reported_and_the_lsp_server_stays_alive(
    served_model: ServedModel, tmp_path: Path
) -> None:
    from server_support import start_session, stop_session

    assert LLAMA_SERVER is not None
    server = start_llama_server(LLAMA_SERVER, served_model.gguf, tmp_path / "first.log", alias=ALIAS)
    port = int(server.url.rsplit(":", 1)[1])
    session = await start_session(serve_args(server.url))
    # A fresh document per phase, so no cached or typed-ahead suggestion can stand in for the server.
    docs = {name: f"file:///workspace/{name}.py" for name in ("up", "down", "back")}
    try:
        session.open(docs["up"], DOC)
        assert await session.suggestion(docs["up"]) == expected_suggestion(server.url, DOC)
        close(session, docs["up"])  # an open file would become a snippet in the next prompts
        server.stop()

        session.open(docs["down"], DOC)
        assert await session.suggestion(docs["down"]) == ""  # answered, empty
        errors = [m.message for m in session.client.log_messages if "unavailable" in m.message]
        assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "connection refused" in errors[0]
        session.type(docs["down"], "x")
        assert await session.suggestion(docs["down"]) == ""  # during the cooldown: empty, no new message
        assert len([m for m in session.client.log_messages if "unavailable" in m.message]) == 1
        assert (await session.stats())["shown"] >= 0  # the LSP server still answers requests
        close(session, docs["down"])

        # The endpoint comes back on the same address: completions resume after the cooldown.
        server = start_llama_server(
            LLAMA_SERVER, served_model.gguf, tmp_path / "second.log", alias=ALIAS, port=port
        )
        time.sleep(RemoteOptions().cooldown_s + 0.2)
        expected = expected_suggestion(server.url, DOC)
        decoded_before = metric(server.url, "n_decode_total")
        session.open(docs["back"], DOC)
        assert await session.suggestion(docs["back"]) == expected
        assert metric(server.url, "n_decode_total") > decoded_before  # it really came from the server
    finally:
        await stop_session(session)
        server.stop()
