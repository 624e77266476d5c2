"""Pure pieces of the demo: how a person types, and how to score what the server suggested meanwhile."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Literal

from engine.sequences import common_prefix_length

MatchKind = Literal["full", "line", "partial", "miss"]
_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(cps|ms)?\s*$", re.IGNORECASE)


def parse_speed(text: str) -> float:
    """Milliseconds per character from "15" or "15cps" (characters per second) or "80ms" (per character)."""
    match = _SPEED.match(text)
    if match is None:
        raise ValueError(f"speed {text!r}: expected characters per second (15, 15cps) or ms per char (80ms)")
    value, unit = float(match.group(1)), (match.group(2) or "cps").lower()
    if value <= 0:
        raise ValueError(f"speed {text!r} must be positive")
    return value if unit == "ms" else 1000.0 / value


@dataclass(frozen=True)
class Cadence:
    """A typist: a mean pace, some irregularity, and longer pauses where people stop to think."""

    ms_per_char: float
    jitter: float = 0.35  # each gap varies uniformly by this fraction of the pace
    line_pause: float = 4.0  # after Enter, in units of the pace
    symbol_pause: float = 1.5  # after ( [ { : , =

    def delay_s(self, keystroke: str, rng: random.Random) -> float:
        """Seconds to wait after typing `keystroke` (a person pauses at the start of a new line)."""
        factor = 1.0 + rng.uniform(-self.jitter, self.jitter)
        if keystroke.startswith("\n"):
            factor += self.line_pause
        elif keystroke in "([{:,=":
            factor += self.symbol_pause
        return max(0.0, self.ms_per_char * factor / 1000.0)


def next_keystroke(source: str, cursor: int) -> str:
    """What the next key press at `cursor` inserts: one character, except that Enter also brings the next
    line's indentation (editors auto-indent)."""
    if source[cursor] != "\n":
        return source[cursor]
    end = cursor + 1
    while end < len(source) and source[end] in " \t":
        end += 1
    return source[cursor:end]


def plan_keystrokes(source: str) -> list[str]:
    """Every key press that types `source`; joining them gives `source` back."""
    keys: list[str] = []
    cursor = 0
    while cursor < len(source):
        keys.append(next_keystroke(source, cursor))
        cursor += len(keys[-1])
    return keys


def tab_accept(ghost: str, upcoming: str) -> str:
    """What one accept key takes from the ghost text for a user who means to type `upcoming`: the rest of the
    line when the ghost text's line is exactly it (Tab, or accept-line when more lines follow), or, at a line
    end, the next line when the ghost text spells exactly that line. "" when neither holds, or when it would
    save under two characters."""
    rest_of_line = upcoming.split("\n", 1)[0]
    if rest_of_line:
        taken = rest_of_line if ghost.split("\n", 1)[0] == rest_of_line else ""
    elif ghost.startswith("\n") and upcoming.startswith("\n"):
        next_line = "\n" + upcoming[1:].split("\n", 1)[0]
        taken = next_line if ghost.split("\n", 2)[:2] == next_line.split("\n", 2)[:2] else ""
    else:
        taken = ""
    return taken if len(taken.strip()) >= 3 else ""


def after_key(ghost: str | None, key: str) -> str | None:
    """The ghost text an editor still shows after the user typed `key`: its rest when it began with `key`
    (VS Code keeps a suggestion the typing agrees with), else none."""
    if ghost is None or not ghost.startswith(key):
        return None
    return ghost[len(key) :] or None


def classify_match(suggestion: str, upcoming: str) -> MatchKind:
    """full: everything suggested was typed next; line: its first line was; partial: a start of it; miss."""
    matched = common_prefix_length(suggestion, upcoming)
    if matched == len(suggestion):
        return "full"
    first_line = suggestion.split("\n", 1)[0]
    if first_line.strip() and matched > len(first_line):  # the line break typed too: the line was ended there
        return "line"
    return "partial" if matched > 0 else "miss"


def position_of(text: str, offset: int) -> tuple[int, int]:
    """LSP (line, character) of `offset` in `text`, with characters counted in UTF-16 code units."""
    before = text[:offset]
    line = before.count("\n")
    line_start = before.rfind("\n") + 1
    return line, len(before[line_start:].encode("utf-16-le")) // 2


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def tokens_per_target_forward(accepted: int, target_forwards: int) -> float | None:
    """Every verify forward yields the drafts it accepted plus one token of its own."""
    return ratio(accepted + target_forwards, target_forwards)
