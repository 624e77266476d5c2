"""`specls doctor`'s last check: a real `specls serve` that loads the pair and answers one completion, timed
the way an editor would see it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from lsp_server.app.commands.doctor_environment import Check

PROBE_PREFIX = "def greet(name):\n    message = "


def check_server(
    target: str | None, draft: str | None, device: str, timeout_s: float, dtype: str = "auto"
) -> list[Check]:
    server_args = ["--backend", "local", "--device", device, "--dtype", dtype]
    server_args += [
        part for flag, value in (("--target", target), ("--draft", draft)) if value for part in (flag, value)
    ]
    try:
        probe = asyncio.run(_probe_server(server_args, timeout_s))
    except Exception as exc:
        return [
            Check(
                "server",
                "fail",
                f"{type(exc).__name__}: {exc}",
                "run `specls serve --log-file specls.log --log-level DEBUG` and read the log",
            )
        ]
    detail = (
        f"started and loaded in {probe.load_s:.1f} s; first completion in {probe.first_ms:.0f} ms, "
        f"the next in {probe.warm_ms:.0f} ms"
    )
    if not probe.answer.strip():
        empty = Check(
            "server", "warn", f"{detail}, but the suggestion was empty", "try `specls demo` to see more"
        )
        return [empty, *check_budget(probe.stats)]
    last_line = PROBE_PREFIX.splitlines()[-1].strip()
    answered = Check("server", "ok", f"{detail}; after {last_line!r} it suggested {_short(probe.answer)!r}")
    return [answered, *check_budget(probe.stats)]


def check_budget(stats: dict[str, Any]) -> list[Check]:
    """Whether the loaded model's own measured costs fit the keystroke budget (`specls/stats`)."""
    budget = stats.get("keystroke_budget") or {}
    if budget.get("fits") is None:
        return []
    prompt, suffix = stats.get("prompt_tokens"), stats.get("suffix_tokens")
    detail = budget["detail"]
    if prompt:
        detail += f"; prompts hold up to {prompt} tokens"
    if suffix:
        detail += f"; a line start re-reads up to {suffix} tokens after the cursor"
    below = stats.get("lines_below_tokens")
    if below:
        detail += f" and keeps up to {below} tokens of the lines below cached ahead of the file"
    gate = stats.get("first_line_gate")
    if gate:
        detail += (
            f"; a suggestion shows only where the model gives its first line probability {gate:g} or more"
        )
    if budget["fits"]:
        return [Check("keystroke budget", "ok", detail)]
    fix = "a smaller model answers sooner: name one with --target (the `target` setting in an editor)"
    return [Check("keystroke budget", "warn", detail, fix)]


def _short(text: str, width: int = 40) -> str:
    from lsp_server.app.demo.view import one_line

    return one_line(text, width)


@dataclass(frozen=True)
class _Probe:
    answer: str
    load_s: float
    first_ms: float  # includes one-time costs of the first forward passes
    warm_ms: float  # the same prompt in a second document: what a keystroke costs once running
    stats: dict[str, Any]  # `specls/stats` after both completions


async def _probe_server(server_args: list[str], timeout_s: float) -> _Probe:
    from lsp_server.typist.client import ServerSession

    session = ServerSession()
    started = time.monotonic()
    try:
        await session.start(server_args)
        await session.wait_ready(timeout_s)
        loaded = time.monotonic() - started
        answers, latencies = [], []
        for name in ("probe.py", "probe_again.py"):
            uri = f"file:///specls-doctor/{name}"
            session.open(uri, PROBE_PREFIX, "python")
            asked = time.monotonic()
            answers.append(
                await asyncio.wait_for(session.inline_completion(uri, len(PROBE_PREFIX)), timeout_s)
            )
            latencies.append((time.monotonic() - asked) * 1000)
            session.close(uri)
        return _Probe(answers[0], loaded, latencies[0], latencies[1], await session.stats())
    finally:
        await session.stop()
