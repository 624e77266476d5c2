"""The open-file probe behaves like the VS Code extension: it reports the resting cursor CURSOR_REST_S after
a file opens (when the pause is longer), and asks at once without a pause."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from lsp_server.typist.measures import CURSOR_REST_S, probe_after_open

ROOT = Path(__file__).resolve().parents[2]


class FakeSession:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.started = 0.0

    def open(self, uri: str, text: str, language_id: str) -> None:
        self.started = asyncio.get_running_loop().time()
        self.calls.append(("open", 0.0))

    def close(self, uri: str) -> None:
        self.calls.append(("close", self._since()))

    def cursor_rests(self, uri: str, offset: int) -> None:
        self.calls.append((f"cursor {offset}", self._since()))

    async def inline_completion(self, uri: str, offset: int) -> str:
        self.calls.append(("ask", self._since()))
        return "x"

    def _since(self) -> float:
        return asyncio.get_running_loop().time() - self.started


async def test_the_cursor_is_reported_during_a_pause_and_the_question_comes_after_it() -> None:
    session = FakeSession()
    probe = await probe_after_open(session, "f.py", "file:///f.py", "a = 1\n", 6, "python", 0.5)
    names = [name for name, _ in session.calls]
    assert names == ["open", "cursor 6", "ask", "close"] and probe.suggestion == "x"
    assert probe.pause_s == 0.5  # the whole pause is what the probe reports
    times = dict(session.calls)
    assert CURSOR_REST_S <= times["cursor 6"] < 0.45 and times["ask"] >= 0.5


async def test_without_a_pause_the_question_comes_at_once() -> None:
    session = FakeSession()
    await probe_after_open(session, "f.py", "file:///f.py", "a = 1\n", 6, "python", 0.0)
    assert [name for name, _ in session.calls] == ["open", "ask", "close"]


def test_the_rest_time_is_the_vs_code_extensions() -> None:
    source = (ROOT / "editor_clients/vscode/src/server.ts").read_text(encoding="utf-8")
    found = re.search(r"const CURSOR_REST_MS = (\d+);", source)
    assert found is not None and int(found.group(1)) == round(CURSOR_REST_S * 1000)
