"""Two ways to show a replay: a live terminal view (the line being typed, its ghost text in grey, a status
line under it) and plain line output for pipes, logs and CI (one line per fresh suggestion, one per typed
source line)."""

from __future__ import annotations

import shutil
from typing import TextIO

from lsp_server.typist.keystrokes import position_of
from lsp_server.typist.replay import KeyEvent, LiveStats, visible_ghost

DIM, RESET, CLEAR_LINE, UP = "\x1b[2m", "\x1b[0m", "\x1b[2K", "\x1b[1A"


def one_line(text: str, width: int) -> str:
    """`text` on one line for display: line breaks shown as ⏎, other control characters (which would move
    the terminal's cursor) as ·, cut to `width` with an ellipsis."""
    flat = "".join(
        "⏎"
        if char == "\n"
        else "    "
        if char == "\t"
        else "·"
        if char < " " or "\x7f" <= char <= "\x9f"
        else char
        for char in text
    )
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def status_text(last: KeyEvent | None, stats: LiveStats | None) -> str:
    parts = []
    if last is not None and last.latency_ms is not None:
        parts.append(f"{last.latency_ms:4.0f} ms")
        if last.match is not None:
            parts.append(f"typed next: {last.match}")
    if stats is not None:
        if stats.draft_acceptance is not None:
            parts.append(f"drafts accepted {100 * stats.draft_acceptance:.0f}%")
        if stats.tokens_per_forward is not None:
            parts.append(f"{stats.tokens_per_forward:.2f} tok/fwd")
        parts.append(f"cancels {stats.cancelled_generations}")
        parts.append(f"typed-ahead {stats.typed_ahead_hits}")
    return " | ".join(parts)


class LineView:
    """Plain lines: a fresh suggestion (not just the rest of the previous one) and each finished line."""

    def __init__(self, out: TextIO, width: int = 100) -> None:
        self.out, self.width = out, width
        self.printed: KeyEvent | None = None
        self.stats: LiveStats | None = None
        self.lines_done = 0
        self.text = ""

    def keystroke(self, text: str, cursor: int, ghost: str | None) -> None:
        self.text = text
        lines = text.split("\n")
        while self.lines_done < len(lines) - 1:
            self.out.write(f"  {self.lines_done + 1:4d} | {lines[self.lines_done]}\n")
            self.lines_done += 1
        self.out.flush()

    def answer(self, event: KeyEvent, ghost: str | None, source: str) -> None:
        if not event.suggestion or event.latency_ms is None:
            return
        previous = self.printed
        if previous is not None and event.suggestion in (
            previous.suggestion,  # the same text again one key later: nothing new to see
            visible_ghost(previous, source, event.offset),  # the rest of it, served as the user typed on
        ):
            return
        self.printed = event
        line, character = position_of(source, event.offset)
        ghost_text = one_line(event.suggestion, self.width - 40)
        self.out.write(
            f"       ghost @{line + 1}:{character + 1} {event.latency_ms:5.0f} ms  {ghost_text!s}"
            f"  -> typed next: {event.match}\n"
        )
        self.out.flush()

    def server_stats(self, stats: LiveStats) -> None:
        self.stats = stats

    def finish(self) -> None:
        lines = self.text.split("\n")
        if self.lines_done < len(lines) and lines[self.lines_done]:
            self.out.write(f"  {self.lines_done + 1:4d} | {lines[self.lines_done]}\n")
        if self.stats is not None:
            self.out.write(f"  server: {status_text(None, self.stats)}\n")
        self.out.flush()


class LiveView:
    """Redraws the line being typed with its ghost text, and a status line below; finished lines scroll up."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.width = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
        self.stats: LiveStats | None = None
        self.last: KeyEvent | None = None
        self.text = ""
        self.ghost: str | None = None
        self.lines_done = 0
        self.out.write("\n")  # the status line's row

    def keystroke(self, text: str, cursor: int, ghost: str | None) -> None:
        self.text, self.ghost = text, ghost
        self._draw()

    def answer(self, event: KeyEvent, ghost: str | None, source: str) -> None:
        if event.latency_ms is not None and (self.last is None or event.index >= self.last.index):
            self.last = event
        self.ghost = ghost
        self._draw()

    def server_stats(self, stats: LiveStats) -> None:
        self.stats = stats
        self._draw()

    def _draw(self) -> None:
        lines = self.text.split("\n")
        write = self.out.write
        write(UP)  # to the code row, above the status row
        while self.lines_done < len(lines) - 1:  # finished lines scroll up for good
            write(f"\r{CLEAR_LINE}{one_line(lines[self.lines_done], self.width)}\n{CLEAR_LINE}\n{UP}")
            self.lines_done += 1
        current = one_line(lines[-1], self.width)
        ghost = one_line(self.ghost or "", max(0, self.width - len(current)))
        write(f"\r{CLEAR_LINE}{current}{DIM}{ghost}{RESET}\n")
        write(f"\r{CLEAR_LINE}{DIM}{one_line(status_text(self.last, self.stats), self.width)}{RESET}")
        self.out.flush()

    def finish(self) -> None:
        self.ghost = None
        self._draw()
        self.out.write("\n")
        self.out.flush()
