"""A client that behaves like llama.vim on llama-server: the peer of `specls bench keystrokes --peer llama-server`.

Its behaviour follows llama.vim's `autoload/llama.vim` (github.com/ggml-org/llama.vim, read at a1c8e6e; the
rules are restated here, no code is copied). It is an `Editor` for the typist of
`lsp_server.typist.replay.Replay`, so both clients are typed into and measured the same way.

- **Request layout** (`local_context`, `infill_body`): POST `/infill` with the `n_prefix` (256) lines above the
  cursor as `input_prefix`, the current line up to the cursor as `prompt`, the rest of the line and the
  `n_suffix` (64) lines below as `input_suffix`; on a line of only whitespace the prompt and the line's rest
  are empty and `n_indent` is 0 (else the line's indentation). `n_predict` 128, `top_k` 40, `top_p` 0.90,
  samplers `top_k, top_p, infill`, no stop strings, `cache_prompt`, `t_max_prompt_ms` 500 (the server ignores
  it), `t_max_predict_ms` 250 for a first request and 1000 for a speculative one, `response_fields` as sent.
- **One request at a time**: a cursor move while a request runs sends nothing; a timer asks again 100 ms
  later (each new call replaces the timer), for the cursor where it then is.
- **Answer cache** (`AnswerCache`, LRU of 250 contexts): each answer is stored under its context and under the
  same context with one, two and three lines cut from the top of the prefix. A request is not sent when any
  of those keys is cached. On each cursor move the exact context is looked up, else each of the 128
  positions before the cursor: a cached answer there that starts with the characters typed since is shown
  with them removed.
- **Speculative FIM**: whenever a suggestion is rendered, a request for the context as if it were accepted
  (the suggestion's lines appended to the cursor line), so the cache holds the next answer.
- **What is shown** (`render`): trailing empty lines are dropped; nothing is shown when the suggestion is empty,
  is only line breaks followed by the next lines, repeats the rest of the line, or repeats the next non-blank
  line (one line; or that line plus the start of the following one; or that line plus the following ones);
  whitespace-only suggestions cannot be accepted. On a whitespace-only line the suggestion's indentation is
  trimmed to the line's. Every cursor move hides the suggestion first; an answer that arrives is rendered at
  the cursor when nothing acceptable is on screen.

Left out: the ring buffer of extra context (`input_extra` is always empty): llama.vim moves queued chunks
into it only when the cursor has rested for 3 s, which a typist at 120 ms a key with < 1 s pauses never does;
its chunk picks on yank, buffer enter/leave and save; the statusline info; positions count characters, not
bytes (the same for ASCII). Accept is the typist's (`tab_accept`: the rest of the line, or the next line).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from bench.llama_peer import LlamaPeer, start_peer
from lsp_server.typist.replay import DRAIN_TIMEOUT_S, AnswerHook, KeyEvent

CURSOR_MARK = "Î"  # llama.vim joins prefix + middle and suffix around this character in its cache keys

# llama-server's flags for llama.vim on a CPU (`--ctx-size 0`: the model's own context is passed separately).
LLAMA_VIM_SERVER_FLAGS: tuple[str, ...] = ("-ub", "1024", "-b", "1024", "--cache-reuse", "256")


@dataclass(frozen=True)
class LlamaVimSettings:
    """llama.vim's defaults for what its completion requests carry and how its cache looks back."""

    n_prefix: int = 256  # lines above the cursor
    n_suffix: int = 64  # lines below
    n_predict: int = 128
    stop_strings: tuple[str, ...] = ()
    t_max_prompt_ms: int = 500
    t_max_predict_ms: int = 1000  # a speculative request (as if the suggestion were accepted)
    first_t_max_predict_ms: int = 250  # any other: quick, the speculative one follows once it is shown
    max_line_suffix: int = 8  # no automatic request with more characters right of the cursor
    max_cache_keys: int = 250
    retry_ms: int = 100  # a request wanted while another runs is tried again after this
    look_back: int = 128  # characters before the cursor where a cached answer may have started
    trimmed_keys: int = 3  # extra cache keys: the prefix without its first 1..3 lines


@dataclass(frozen=True)
class LocalContext:
    prefix: str  # `input_prefix`
    middle: str  # `prompt`
    suffix: str  # `input_suffix`
    indent: int  # `n_indent`
    line_cur_suffix: str  # the current line right of the cursor

    @property
    def key(self) -> str:
        return self.prefix + self.middle + CURSOR_MARK + self.suffix


def document_lines(text: str) -> list[str]:
    """The buffer's lines, as an editor has them (a final line break ends the last line, it adds none)."""
    lines = text.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def _line(lines: Sequence[str], y: int) -> str:
    return lines[y] if 0 <= y < len(lines) else ""  # Vim's getline() of a line that does not exist is ""


def _blank(line: str) -> bool:
    return line.strip(" \t") == ""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def local_context(
    lines: Sequence[str],
    y: int,
    x: int,
    prev: Sequence[str] = (),
    settings: LlamaVimSettings = LlamaVimSettings(),
    indent_last: int = -1,
) -> LocalContext:
    """The request's text around (line `y`, column `x`, both from 0); with `prev` (a rendered suggestion's
    lines), as if it had been accepted there."""
    below = list(lines[y + 1 : y + 1 + settings.n_suffix])
    if not prev:
        line_cur = _line(lines, y)
        middle, rest = line_cur[:x], line_cur[x:]
        above = list(lines[max(0, y - settings.n_prefix) : y])
        indent = _indent(line_cur)
        if _blank(line_cur):  # a line of whitespace: ask from its start
            middle, rest, indent = "", "", 0
    else:
        line_cur = _line(lines, y) + prev[0] if len(prev) == 1 else prev[-1]
        middle, rest, indent = line_cur, "", indent_last
        above = list(lines[max(0, y - settings.n_prefix + len(prev) - 1) : y])
        if len(prev) > 1:
            above += [_line(lines, y) + prev[0], *prev[1:-1]]
    return LocalContext(
        prefix="\n".join(above) + "\n",
        middle=middle,
        suffix=rest + "\n" + "\n".join(below) + "\n",
        indent=indent,
        line_cur_suffix=rest,
    )


def cache_keys(context: LocalContext, trimmed: int = 3) -> list[str]:
    """The context's key, then the same with the first 1..`trimmed` lines of the prefix cut (an answer then
    still serves after the window scrolled down a few lines)."""
    keys = [context.key]
    prefix = context.prefix
    for _ in range(trimmed):
        prefix = prefix.split("\n", 1)[1] if "\n" in prefix else ""
        if not prefix:
            break
        keys.append(prefix + context.middle + CURSOR_MARK + context.suffix)
    return keys


def infill_body(context: LocalContext, settings: LlamaVimSettings, speculative: bool) -> dict[str, Any]:
    """The JSON llama.vim posts to `/infill`."""
    return {
        "id_slot": 0,
        "input_prefix": context.prefix,
        "input_suffix": context.suffix,
        "input_extra": [],  # the ring buffer of other chunks: see the module docstring
        "prompt": context.middle,
        "n_predict": settings.n_predict,
        "stop": list(settings.stop_strings),
        "n_indent": context.indent,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": settings.t_max_prompt_ms,
        "t_max_predict_ms": settings.t_max_predict_ms if speculative else settings.first_t_max_predict_ms,
        "response_fields": [
            "content",
            "timings/prompt_n",
            "timings/prompt_ms",
            "timings/prompt_per_token_ms",
            "timings/prompt_per_second",
            "timings/predicted_n",
            "timings/predicted_ms",
            "timings/predicted_per_token_ms",
            "timings/predicted_per_second",
            "truncated",
            "tokens_cached",
        ],
    }


class AnswerCache:
    """Answers (the suggestion's text) by context key, least recently used dropped first."""

    def __init__(self, max_keys: int = 250) -> None:
        self.max_keys = max_keys
        self.entries: OrderedDict[str, str] = OrderedDict()

    def insert(self, key: str, content: str) -> None:
        if key not in self.entries and len(self.entries) >= self.max_keys:
            self.entries.popitem(last=False)
        self.entries[key] = content
        self.entries.move_to_end(key)

    def get(self, key: str) -> str | None:
        if key not in self.entries:
            return None
        self.entries.move_to_end(key)
        return self.entries[key]

    def lookup(self, context: LocalContext, look_back: int = 128) -> tuple[str | None, str]:
        """(the answer to show here, "exact" or "look-back") or (None, ""): the exact context, else an answer
        cached up to `look_back` characters earlier that starts with what was typed since, with that removed.
        As llama.vim does it: the first found wins, unless a later one found is longer than the best so far
        after it."""
        exact = self.get(context.key)
        if exact is not None:
            return exact, "exact"
        before = context.prefix + context.middle
        found: str | None = None
        best = 0
        for i in range(min(look_back, len(before))):
            typed = before[len(before) - (i + 1) :]
            cached = self.get(before[: len(before) - (i + 1)] + CURSOR_MARK + context.suffix)
            if not cached or not cached.startswith(typed):
                continue
            rest = cached[i + 1 :]
            if not rest:
                continue
            if found is None:
                found = rest
            elif len(rest) > best:
                best, found = len(rest), rest
        return (found, "look-back") if found is not None else (None, "")


@dataclass(frozen=True)
class Rendered:
    """A suggestion as llama.vim renders it at the cursor."""

    content: list[str]  # its lines, the rest of the cursor line appended to the last (what `prev` carries)
    can_accept: bool
    ghost: str | None  # what accepting inserts at the cursor; None: nothing acceptable, or not an insertion
    changes_indent: bool = False  # on a whitespace line, accepting would shorten its indentation


def render(answer: str, lines: Sequence[str], y: int, x: int) -> Rendered:
    """What llama.vim shows for `answer` at (line `y`, column `x`): its rules for dropping suggestions that
    repeat the text around the cursor (see the module docstring)."""
    content = answer.split("\n")
    while content and content[-1] == "":
        content.pop()
    can_accept = bool(content)
    content = content or [""]
    line_cur = _line(lines, y)
    changes_indent = False
    if _blank(line_cur):  # trim the suggestion's indentation to the line's
        lead = min(_indent(content[0]), len(line_cur))
        changes_indent = lead < x
        line_cur, content[0] = content[0][:lead], content[0][lead:]
    before, rest = line_cur[:x], line_cur[x:]
    if len(content) == 1 and content[0] == "":
        content = [""]
    if len(content) > 1 and content[0] == "" and content[1:] == list(lines[y + 1 : y + len(content)]):
        content = [""]  # line breaks, then the lines that follow anyway
    if len(content) == 1 and content[0] == rest:
        content = [""]  # the rest of the line again
    next_y = y + 1
    while next_y < len(lines) - 1 and _blank(_line(lines, next_y)):
        next_y += 1
    if before + content[0] == _line(lines, next_y):  # the next non-blank line again ...
        following = _line(lines, next_y + 1)
        if len(content) == 1:
            content = [""]
        if len(content) == 2 and content[-1] == (following[: len(content[-1])] if content[-1] else following):
            content = [""]
        if len(content) > 2 and content[1:] == [
            _line(lines, i) for i in range(next_y + 1, next_y + len(content))
        ]:
            content = [""]
    inserted = "\n".join(content)
    content[-1] += rest
    if "\n".join(content).strip() == "":
        can_accept = False
    ghost = inserted if can_accept and inserted and not changes_indent else None
    return Rendered(content, can_accept, ghost, changes_indent and can_accept and bool(inserted))


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        payload = json.loads(response.read())
    return payload if isinstance(payload, dict) else {}


@dataclass
class ClientStats:
    """What the client did: requests sent (speculative among them), answers served from its own cache, and the
    server's timings of each answer."""

    requests: int = 0
    speculative_requests: int = 0
    answers: int = 0
    failures: int = 0
    retries: int = 0  # a request wanted while another ran: tried again 100 ms later
    skipped_cached: int = 0  # not sent: the context (or it with 1-3 lines cut from the top) was cached
    skipped_line_suffix: int = 0  # not sent: more than 8 characters right of the cursor
    shown_exact: int = 0  # suggestions rendered from the cache, the same context
    shown_look_back: int = 0  # ... a context up to 128 characters back, typed characters removed
    shown_from_answer: int = 0  # ... when an answer arrived
    indent_changed: int = (
        0  # rendered, but accepting would shorten the line's indentation (not counted as ghost)
    )
    prompt_tokens: int = 0  # the server's timings: prompt tokens computed (not reused)
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    generated_ms: float = 0.0
    truncated: int = 0
    round_trip_ms: list[float] = field(default_factory=list)


class LlamaVimClient:
    """llama.vim's completion state (one job slot, one retry timer, one answer cache for all buffers) over
    llama-server at `url`. `editor()` gives the typist's `Editor`; `open`/`close`/`inline_completion` make it an
    `Asker` for the first-suggestion probes."""

    def __init__(
        self, url: str, settings: LlamaVimSettings = LlamaVimSettings(), timeout_s: float = 600
    ) -> None:
        self.url, self.settings, self.timeout_s = url.rstrip("/") + "/infill", settings, timeout_s
        self.cache = AnswerCache(settings.max_cache_keys)
        self.stats = ClientStats()
        self.bodies: list[dict[str, Any]] = []  # every request sent, in order
        self.ghost: str | None = None
        self.on_answer: AnswerHook | None = None
        self.text: str | None = None  # the open buffer (None: none)
        self.cursor = 0
        self.newest: KeyEvent | None = None
        self.shown: Rendered | None = None
        self.indent_last = -1
        self._job: asyncio.Future[dict[str, Any]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="llama-vim")

    def editor(self) -> LlamaVimEditor:
        return LlamaVimEditor(self)

    # --- buffer and cursor ---

    def enter(self, text: str) -> None:
        self.text, self.cursor, self.newest, self.shown, self.ghost = text, 0, None, None, None

    def leave(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.text, self.newest, self.shown, self.ghost = None, None, None, None

    def _yx(self) -> tuple[int, int]:
        text = self.text or ""
        line_start = text.rfind("\n", 0, self.cursor) + 1
        return text.count("\n", 0, self.cursor), self.cursor - line_start

    def press(self, event: KeyEvent) -> None:
        """A key press (or an accept) put the cursor at `event.offset`: hide, try the cache, ask."""
        if self.text is None:
            raise RuntimeError("no buffer is open")
        previous = self.newest
        if previous is not None and previous.outcome == "pending":
            previous.superseded, previous.outcome = True, "cancelled"
        at = event.offset - len(event.key)
        self.text = self.text[:at] + event.key + self.text[at:]
        self.newest = event
        self.moved(event.offset)

    def moved(self, cursor: int) -> None:
        """CursorMovedI: llama.vim hides the suggestion, shows one from its cache if it can, and asks."""
        self.cursor = cursor
        self.shown, self.ghost = None, None
        self._try_hint()
        self._fim(None, ())

    # --- llama.vim's steps ---

    def _try_hint(self, on_answer: bool = False) -> None:
        """Show a cached answer at the cursor (and request the speculative one for it)."""
        assert self.text is not None
        lines = document_lines(self.text)
        y, x = self._yx()
        answer, how = self.cache.lookup(
            local_context(lines, y, x, (), self.settings), self.settings.look_back
        )
        if answer is None:
            return
        if on_answer:
            self.stats.shown_from_answer += 1
        elif how == "exact":
            self.stats.shown_exact += 1
        else:
            self.stats.shown_look_back += 1
        self._render(answer, lines, y, x)

    def _render(self, answer: str, lines: Sequence[str], y: int, x: int) -> None:
        self.shown = render(answer, lines, y, x)
        self.ghost = self.shown.ghost
        self.stats.indent_changed += self.shown.changes_indent
        if self.ghost is not None:
            self._answered("suggestion")
        self._fim((y, x), self.shown.content)  # speculative: as if it were accepted

    def _fim(self, at: tuple[int, int] | None, prev: Sequence[str]) -> None:
        """Ask for a suggestion at `at` (None: the cursor, whenever this runs), as if `prev` were accepted."""
        if self._job is not None:  # one at a time: try again shortly
            if self._timer is not None:
                self._timer.cancel()
            self.stats.retries += 1
            delay = self.settings.retry_ms / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._retry, at, tuple(prev))
            return
        if self.text is None:
            return
        y, x = at if at is not None else self._yx()
        own = not prev and (y, x) == self._yx()  # the request for the newest key press's own position
        context = local_context(document_lines(self.text), y, x, prev, self.settings, self.indent_last)
        if len(context.line_cur_suffix) > self.settings.max_line_suffix:
            self.stats.skipped_line_suffix += 1
            if own:
                self._answered("empty")
            return
        keys = cache_keys(context, self.settings.trimmed_keys)
        if any(self.cache.get(key) is not None for key in keys):
            self.stats.skipped_cached += 1
            if own:
                self._answered("empty")  # what the cache held is all this position gets
            return
        self.indent_last = context.indent
        body = infill_body(context, self.settings, speculative=bool(prev))
        self.bodies.append(body)
        self.stats.requests += 1
        self.stats.speculative_requests += bool(prev)
        started = time.monotonic()
        self._job = asyncio.get_running_loop().run_in_executor(
            self._executor, post_json, self.url, body, self.timeout_s
        )
        self._job.add_done_callback(partial(self._on_exit, keys, (y, x) if own else None, started))

    def _retry(self, at: tuple[int, int] | None, prev: tuple[str, ...]) -> None:
        self._timer = None
        self._fim(at, prev)

    def _on_exit(
        self,
        keys: list[str],
        own: tuple[int, int] | None,
        started: float,
        job: asyncio.Future[dict[str, Any]],
    ) -> None:
        self.stats.round_trip_ms.append((time.monotonic() - started) * 1000)
        try:
            self._on_response(keys, own, job.result())
        except Exception as exc:  # a failed request (llama.vim prints it and carries on)
            self.stats.failures += 1
            if own is not None and own == self._yx():
                self._answered("error", f"{type(exc).__name__}: {exc}")
        finally:
            self._job = None

    def _on_response(self, keys: list[str], own: tuple[int, int] | None, payload: dict[str, Any]) -> None:
        content = payload.get("content")
        if not isinstance(content, str):
            raise ValueError("an answer without content")
        self.stats.answers += 1
        self.stats.prompt_tokens += int(payload.get("timings/prompt_n", 0) or 0)
        self.stats.prompt_ms += float(payload.get("timings/prompt_ms", 0.0) or 0.0)
        self.stats.generated_tokens += int(payload.get("timings/predicted_n", 0) or 0)
        self.stats.generated_ms += float(payload.get("timings/predicted_ms", 0.0) or 0.0)
        self.stats.truncated += bool(payload.get("truncated"))
        for key in keys:
            self.cache.insert(key, content)
        if self.text is None:
            return
        if self.shown is None or not self.shown.can_accept:  # nothing acceptable on screen: show it
            self._try_hint(on_answer=True)
        if own is not None and own == self._yx() and self.ghost is None:
            self._answered("empty")

    def _answered(self, outcome: Literal["suggestion", "empty", "error"], error: str | None = None) -> None:
        """The newest key press got its answer: a suggestion on screen (which an empty answer before it
        does not stop), nothing, or a failed request."""
        event = self.newest
        if (
            event is None
            or event.outcome == "suggestion"
            or (outcome != "suggestion" and event.outcome != "pending")
        ):
            return
        event.answered_at = time.monotonic()
        event.outcome, event.error = outcome, error
        if outcome == "suggestion":
            event.suggestion = self.ghost or ""
        if self.on_answer is not None:
            self.on_answer(event, self.ghost)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- waiting ---

    async def settle(self, timeout_s: float = DRAIN_TIMEOUT_S) -> int:
        """Wait until no request runs or waits; 1 when the newest key press still had no answer then."""
        deadline = time.monotonic() + timeout_s
        while (self._job is not None or self._timer is not None) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return int(self.newest is not None and self.newest.outcome == "pending")

    async def idle(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Wait for the running request (another buffer's, say) to end, so a new buffer starts alone."""
        deadline = time.monotonic() + timeout_s
        while self._job is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def shutdown(self) -> None:
        self.leave()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- Asker: the first-suggestion probes ---

    def open(self, uri: str, text: str, language_id: str) -> None:
        self.enter(text)

    def close(self, uri: str) -> None:
        self.leave()

    async def inline_completion(self, uri: str, offset: int) -> str:
        """The cursor arrives at `offset`: what llama.vim shows there once it has an answer ("" for none)."""
        event = KeyEvent(-1, offset, time.monotonic())
        self.newest = event
        self._waiter = asyncio.get_running_loop().create_future()
        self.moved(offset)
        if event.outcome == "pending":
            await self._waiter
        self._waiter = None
        return event.suggestion

    def report(self) -> dict[str, Any]:
        from bench.metrics import percentile

        stats = asdict(self.stats)
        trips = stats.pop("round_trip_ms")
        return stats | {
            "round_trip_ms": {f"p{p}": percentile(trips, p) for p in (50, 95, 99)} | {"count": len(trips)},
            "prompt_tokens_per_s": 1000 * self.stats.prompt_tokens / self.stats.prompt_ms
            if self.stats.prompt_ms
            else None,
            "generated_tokens_per_s": 1000 * self.stats.generated_tokens / self.stats.generated_ms
            if self.stats.generated_ms
            else None,
        }


class LlamaVimEditor:
    """The typist's `Editor` over a `LlamaVimClient`: one buffer."""

    def __init__(self, client: LlamaVimClient) -> None:
        self.client = client

    @property
    def ghost(self) -> str | None:
        return self.client.ghost

    @property
    def on_answer(self) -> AnswerHook | None:
        return self.client.on_answer

    @on_answer.setter
    def on_answer(self, hook: AnswerHook | None) -> None:
        self.client.on_answer = hook

    def open(self, text: str) -> None:
        self.client.enter(text)

    def press(self, event: KeyEvent) -> None:
        self.client.press(event)

    async def finish(self) -> int:
        return await self.client.settle()

    async def close(self) -> None:
        self.client.leave()
        self.client.on_answer = None


def start_llama_vim_server(binary: Path, gguf: Path, threads: int, log: Path) -> LlamaPeer:
    """llama-server on `gguf` with llama.vim's CPU flags (`-ub 1024 -b 1024 --ctx-size 0 --cache-reuse 256`)
    and what this machine needs (`bench.llama_peer`: flash attention off, no weight repacking where it
    crashes), with `threads` threads."""
    return start_peer(binary, gguf, "llama-server", threads, 0, log, extra_flags=LLAMA_VIM_SERVER_FLAGS)
