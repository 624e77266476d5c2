"""The demo's pure parts: typing cadence and plan, suggestion matching, summary and display."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.sequences import common_prefix_length
from lsp_server.app.demo.speedup import DecodedRun, DecodeSample, Speedup, fastest_run, pick_offsets
from lsp_server.app.demo.summary import build_summary, format_summary
from lsp_server.app.demo.view import LineView, one_line
from lsp_server.typist.keystrokes import (
    Cadence,
    after_key,
    classify_match,
    parse_speed,
    plan_keystrokes,
    position_of,
    tab_accept,
    tokens_per_target_forward,
)
from lsp_server.typist.measures import OpenProbe, Typed, probe_measures, user_measures
from lsp_server.typist.replay import KeyEvent, LiveStats, visible_ghost


@pytest.mark.parametrize(
    ("text", "ms"), [("20", 50.0), ("20cps", 50.0), ("4 CPS", 250.0), ("80ms", 80.0), ("12.5ms", 12.5)]
)
def test_parse_speed(text: str, ms: float) -> None:
    assert parse_speed(text) == pytest.approx(ms)


@pytest.mark.parametrize("text", ["", "fast", "0", "-3", "10 wpm", "ms"])
def test_parse_speed_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="speed"):
        parse_speed(text)


def test_plan_keystrokes_joins_back_and_enter_brings_indentation() -> None:
    source = "def f(x):\n    return x\n\nprint(f(1))\n"
    keys = plan_keystrokes(source)
    assert "".join(keys) == source
    assert "\n    " in keys  # Enter plus the auto-indent of the next line
    assert all(len(key) == 1 for key in keys if not key.startswith("\n"))
    assert keys.count("\n") == 3  # end of "return x", the blank line, the last line


@pytest.mark.parametrize(
    ("ghost", "upcoming", "taken"),
    [
        ("items.get(name)", "items.get(name)\nnext", "items.get(name)"),  # exactly the rest of the line: Tab
        ("items.get(name)\n    y", "items.get(name)\n    z", "items.get(name)"),  # accept-line, first line
        ("items.get(name)", "items.get(key)\n", ""),  # not the rest of the line
        ("items.get", "items.get(name)\n", ""),  # only a start of the line: typing goes on
        ("\n    return x\n", "\n    return x\nfoo", "\n    return x"),  # at a line end: the next line
        ("\n    return x", "\n    return y\n", ""),
        ("\n  return x", "\n    return x", ""),  # indented differently
        ("x)", "x)\n", ""),  # two characters for one key: not worth it
    ],
)
def test_tab_accept_takes_only_whole_right_lines(ghost: str, upcoming: str, taken: str) -> None:
    assert tab_accept(ghost, upcoming) == taken


def test_ghost_text_stays_while_the_typing_agrees() -> None:
    assert after_key("return x", "r") == "eturn x"
    assert after_key("\n    return x", "\n    ") == "return x"  # Enter and its auto-indent
    assert after_key("return x", "p") is None
    assert after_key("x", "x") is None  # all typed
    assert after_key(None, "a") is None


def _press(index: int, key: str, ghost: str | None, accepted: int = 0) -> KeyEvent:
    return KeyEvent(index, index + 1, 0.0, key=key, accepted=accepted, ghost_before=ghost)


def test_user_measures_count_ghost_text_at_the_next_key_and_chars_saved() -> None:
    events = [
        _press(0, "a", None),  # the first press of a replay is not counted
        _press(1, "b", "bc"),  # on screen and right
        _press(2, "x", "c"),  # on screen, wrong
        _press(3, "cdef", "cdef", accepted=4),  # Tab: 4 characters for one key
        _press(4, "g", None),
    ]
    measures = user_measures([Typed(events, chars=10)])
    assert measures["ghost_on_screen"] == 0.75 and measures["ghost_right"] == 0.5
    assert measures["chars_saved"] == pytest.approx(0.3)  # (4 - 1) / 10
    assert measures["accept_keys"] == 1


def test_probe_measures_group_by_pause() -> None:
    probes = [
        OpenProbe("a", 0.0, 900.0, "x"),
        OpenProbe("b", 1.0, 200.0, ""),
        OpenProbe("c", 1.0, 400.0, "y"),
    ]
    measures = probe_measures(probes)
    assert measures["0s"]["p50"] == 900.0 and measures["0s"]["with_suggestion"] == 1.0
    assert measures["1s"]["p50"] == 300.0 and measures["1s"]["with_suggestion"] == 0.5


def test_cadence_pauses_after_enter_and_is_seeded() -> None:
    cadence = Cadence(ms_per_char=100.0, jitter=0.2)
    letter = cadence.delay_s("a", random.Random(1))
    enter = cadence.delay_s("\n  ", random.Random(1))
    assert 0.08 <= letter <= 0.12
    assert enter > 0.4  # thinking time at the end of a line
    assert cadence.delay_s("a", random.Random(7)) == cadence.delay_s("a", random.Random(7))


@pytest.mark.parametrize(
    ("suggestion", "upcoming", "kind", "matched"),
    [
        ("items)", "items)\n", "full", 6),
        ("return x\n    y = 2", "return x\n    y = 3\n", "line", 17),
        ("return y", "return x", "partial", 7),
        ("pass", "return", "miss", 0),
        ("x\n", "x", "partial", 1),  # the line break was never typed
    ],
)
def test_classify_match(suggestion: str, upcoming: str, kind: str, matched: int) -> None:
    assert common_prefix_length(suggestion, upcoming) == matched
    assert classify_match(suggestion, upcoming) == kind


def test_position_of_counts_utf16_units() -> None:
    text = "a = 1\nb = '😀'x"
    assert position_of(text, 0) == (0, 0)
    assert position_of(text, len("a = 1\n")) == (1, 0)
    assert position_of(text, len(text)) == (1, 8 + 1)  # the emoji is two UTF-16 units


def test_tokens_per_target_forward() -> None:
    assert tokens_per_target_forward(accepted=0, target_forwards=10) == 1.0  # plain decoding
    assert tokens_per_target_forward(accepted=30, target_forwards=10) == 4.0
    assert tokens_per_target_forward(accepted=0, target_forwards=0) is None


def test_visible_ghost_follows_typing() -> None:
    source = "value = compute(x)\n"
    event = KeyEvent(index=0, offset=8, sent_at=0.0, suggestion="compute(x)")
    assert visible_ghost(event, source, 8) == "compute(x)"
    assert visible_ghost(event, source, 11) == "pute(x)"
    assert visible_ghost(event, source, 18) is None  # all typed: nothing left to show
    other = KeyEvent(index=0, offset=8, sent_at=0.0, suggestion="combine(x)")
    assert visible_ghost(other, source, 12) is None  # the typing went elsewhere


def _event(
    index: int, offset: int, latency_ms: float, suggestion: str = "", match: str | None = None
) -> KeyEvent:
    event = KeyEvent(index=index, offset=offset, sent_at=10.0, suggestion=suggestion)
    event.answered_at = 10.0 + latency_ms / 1000
    event.match = match  # type: ignore[assignment]
    return event


def test_summary_numbers() -> None:
    events = [
        _event(0, 1, 10.0),
        _event(1, 2, 20.0, "abc", "full"),
        _event(2, 3, 30.0, "abd\nx", "line"),
        _event(3, 4, 40.0, "zzz", "miss"),
    ]
    events[0].superseded = True
    server = LiveStats(
        draft_acceptance=0.5,
        tokens_per_forward=2.5,
        cancelled_generations=1,
        generations=3,
        typed_ahead_hits=1,
        requests=4,
    )
    speedup = Speedup(
        [
            DecodeSample(1, 10, 10, 1.0, 0.5, 10, 4, True),
            DecodeSample(2, 20, 20, 1.0, 1.5, 20, 9, True),
        ]
    )
    summary = build_summary(events, server, speedup)
    assert summary["keystrokes"] == 4 and summary["answered"] == 4 and summary["suggestions"] == 3
    # Percentiles interpolate between ranks (20, 30, 40 ms: p95 = 30 + 0.9 * 10); the superseded 10 ms
    # answer is left out.
    assert summary["latency_ms"] == {"p50": 30.0, "p95": 39.0}
    assert summary["suggestion_latency_ms"] == {"p50": 30.0, "p95": 39.0}
    assert summary["typed_ahead_hit_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert summary["superseded"] == 1
    assert summary["server"]["typed_ahead_rate"] == 0.25
    assert summary["speedup"]["plain_tokens_per_s"] == 15.0  # 30 tokens in 2 s
    assert summary["speedup"]["speculative_tokens_per_s"] == 15.0  # 30 tokens in 2 s
    assert summary["speedup"]["factor"] == 1.0
    assert summary["speedup"]["plain_target_forwards"] == 30
    assert summary["speedup"]["speculative_target_forwards"] == 13
    assert summary["speedup"]["plain_tokens"] == 30
    text = "\n".join(format_summary(summary))
    assert (
        "p50 30 ms, p95 39 ms per key press" in text and "1.00x over plain decoding" in text and "67%" in text
    )
    assert "15 vs 15 tokens/s on 30 tokens, fastest of 3 runs each" in text  # a tiny sample says so


def test_each_mode_keeps_its_fastest_run_and_a_run_with_nothing_to_time_skips_the_prompt() -> None:
    slow, fast = DecodedRun("x", 4, 0.4, 4), DecodedRun("x", 4, 0.3, 4)
    assert fastest_run([slow, fast]) is fast and fastest_run([fast, slow]) is fast
    assert fastest_run([fast, None]) is None and fastest_run([None, fast]) is None


def test_pick_offsets_spreads_over_suggestions() -> None:
    events = [_event(i, i, 5.0, "s" if i % 2 else "") for i in range(40)]
    offsets = pick_offsets(events, 4)
    assert len(offsets) == 4 and offsets == sorted(offsets)
    assert all(offset % 2 == 1 for offset in offsets)  # only where there was a suggestion
    assert offsets[0] < 10 and offsets[-1] > 30


def test_pick_offsets_without_suggestions_takes_word_and_line_ends() -> None:
    # Every key overtaken (a slow machine): no suggestion anywhere, yet the speed-up still gets its prompts.
    keys = "def f(a):\n    return a\n"
    events = [_event(i, i + 1, 5.0, "") for i in range(len(keys))]
    for event, key in zip(events, keys, strict=True):
        event.key = key
    offsets = pick_offsets(events, 2)
    assert len(offsets) == 2 and all(not keys[offset - 1].isalnum() for offset in offsets)
    assert pick_offsets([], 2) == []


def test_one_line_hides_control_characters() -> None:
    assert one_line("a\nb\x1b[2Jc\x08", 50) == "a⏎b·[2Jc·"
    assert one_line("abcdefgh", 5) == "abcd…"


def test_line_view_prints_fresh_suggestions_once() -> None:
    import io

    out = io.StringIO()
    view = LineView(out)
    source = "x = compute(1)\n"
    first = _event(0, 4, 12.0, "compute(1)", "full")
    continued = _event(1, 6, 3.0, "mpute(1)", "full")  # the rest of the same suggestion after typing "co"
    fresh = _event(2, 7, 9.0, "pare()", "miss")
    for event in (first, continued, fresh):
        view.answer(event, None, source)
    view.keystroke(source, len(source), None)
    printed = out.getvalue()
    assert printed.count("ghost @") == 2 and "compute(1)" in printed and "pare()" in printed
    assert "   1 | x = compute(1)" in printed


def _screen(stream: str, rows: int = 12) -> list[str]:
    """The visible text after `stream`, for the few escape codes the live view uses (a tiny terminal)."""
    import re

    screen = [""] * rows
    row = col = 0
    for token in re.findall(r"\x1b\[[0-9;]*[A-Za-z]|.", stream, re.DOTALL):
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            if row == rows:  # scroll
                screen, row = [*screen[1:], ""], rows - 1
        elif token == "\x1b[2K":
            screen[row] = ""
        elif token == "\x1b[1A":
            row = max(0, row - 1)
        elif token.startswith("\x1b["):
            continue  # colours
        else:
            line = screen[row].ljust(col)
            screen[row] = line[:col] + token + line[col + 1 :]
            col += 1
    return [line.rstrip() for line in screen]


def test_live_view_redraws_the_line_ghost_and_status_in_place() -> None:
    import io

    from lsp_server.app.demo.view import LiveView

    out = io.StringIO()
    view = LiveView(out)
    source = "import os\nvalue = os.getcwd()\n"
    for cursor in range(1, len("import os\nvalue = os.") + 1):
        view.keystroke(source[:cursor], cursor, None)
    event = _event(5, cursor, 42.0, "getcwd()\nprint(value)", "line")
    view.server_stats(
        LiveStats(
            draft_acceptance=0.75,
            tokens_per_forward=3.0,
            cancelled_generations=2,
            generations=9,
            typed_ahead_hits=4,
            requests=20,
        )
    )
    view.answer(event, "getcwd()\nprint(value)", source)
    screen = [line for line in _screen(out.getvalue()) if line]
    assert screen[0] == "import os"  # finished lines stay, once
    assert screen[1] == "value = os.getcwd()⏎print(value)"  # the ghost after the cursor
    assert screen[2].startswith("  42 ms | typed next: line | drafts accepted 75% | 3.00 tok/fwd | cancels 2")
    assert len(screen) == 3
    view.finish()
    assert [line for line in _screen(out.getvalue()) if line][1] == "value = os."


def test_the_summary_says_which_engine_ran_on_which_cpu_class() -> None:
    engine = "lean (fp32 + w8a8 weights): AVX2-only CPU; no native bf16: int8 weights and activations"
    stats = {"engine": engine, "requests": 2, "generations": 1}
    summary = build_summary([_event(0, 1, 10.0, "abc", "full")], LiveStats.from_server(stats), None)
    lines = format_summary(summary)
    assert lines[1] == f"  engine                {engine}"
    without = format_summary(build_summary([_event(0, 1, 10.0)], LiveStats.from_server({}), None))
    assert not any(line.startswith("  engine") for line in without)  # a remote or fake server says nothing


def test_the_replayed_server_is_this_checkouts_code_whatever_the_working_directory(tmp_path: Path) -> None:
    """A replay run inside a copy of the project (the typist's files) must not serve that copy's code."""
    from lsp_server.typist.client import PROJECT_ROOT, server_environment

    assert (PROJECT_ROOT / "lsp_server" / "typist" / "client.py").is_file()
    (tmp_path / "lsp_server").mkdir()
    (tmp_path / "lsp_server" / "__init__.py").write_text("")  # a decoy in the working directory
    found = subprocess.run(
        [sys.executable, "-c", "import lsp_server; print(lsp_server.__file__)"],
        cwd=tmp_path,
        env=server_environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found).resolve().is_relative_to(PROJECT_ROOT)


def test_a_replay_records_which_code_its_server_ran(tmp_path: Path) -> None:
    """The commit of the checkout a replay serves, or none for a folder that is not a checkout of its own (a copy
    of the project inside another git repository included)."""
    from bench.keystrokes import served_note
    from lsp_server.typist.client import PROJECT_ROOT, served_code

    served = served_code()
    assert served["root"] == str(PROJECT_ROOT)
    if (PROJECT_ROOT / ".git").exists():
        head = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert served["commit"] == head
        assert served["uncommitted_changes"] in (True, False)
        assert f"at {head}" in served_note(served)
    copy = tmp_path / "copy"
    copy.mkdir()
    assert served_code(copy) == {"root": str(copy), "commit": None, "uncommitted_changes": None}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    inside = served_code(copy)  # the copy sits in a repository whose commit would not be its own
    assert inside["commit"] is None
    assert "not a git checkout" in served_note(inside)
    assert served_note(None) == ""
