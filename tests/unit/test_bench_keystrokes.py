"""The keystroke replay: pure helpers, and a short replay through `specls serve --backend fake`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.keystrokes import (
    KeystrokeConfig,
    Region,
    cadence_of,
    region_uri,
    run_keystrokes,
    server_deltas,
    write_report,
)
from lsp_server.typist.keystrokes import plan_keystrokes


def test_the_benchmark_types_at_a_fixed_pace_and_pauses_after_enter() -> None:
    cadence = cadence_of(KeystrokeConfig(pace_ms=120, line_pause_ms=600))
    rng = random.Random(1)
    assert {cadence.delay_s(key, rng) for key in "abc(,=:"} == {0.12}
    assert cadence.delay_s("\n    ", rng) == pytest.approx(0.72)


def test_server_deltas_count_the_run_only() -> None:
    before = {
        "requests": 2,
        "engine_totals": {"prompt_tokens": 10, "reused_prompt_tokens": 0},
        "empty_reasons": [["superseded", 1]],
        "cancel_to_idle_ms": [100.0],
    }
    after = {
        "requests": 6,
        "answered_empty": 2,
        "typed_ahead_hits": 1,
        "engine_totals": {"prompt_tokens": 110, "reused_prompt_tokens": 80, "new_tokens": 7},
        "empty_reasons": [["mode-none:in-literal", 1], ["superseded", 3]],
        "cancel_to_idle_ms": [100.0, 5.0, 7.0],
    }
    server = server_deltas(before, after)
    assert server["requests"] == 4 and server["typed_ahead_hit_rate"] == 0.25
    assert server["kv_prefix_reuse"] == pytest.approx(0.8)
    assert server["generated_tokens"] == 7
    assert server["empty_reasons"] == {"superseded": 2, "mode-none:in-literal": 1}
    assert server["cancel_to_idle_ms"]["max"] == 7.0 and server["cancel_to_idle_ms"]["count"] == 2


@pytest.mark.slow  # a real `specls serve` subprocess behind a pygls client
def test_replay_through_the_real_server_with_the_fake_backend(tmp_path: Path) -> None:
    lines = [f"x{i} = {i}" for i in range(30)] + ["def add(a, b):", "    return a + b"] + ["y = 1"] * 12
    source = tmp_path / "sample.py"
    source.write_text("\n".join(lines) + "\n")
    config = KeystrokeConfig(
        files=(source,),
        chars=55,
        backend="fake",
        pace_ms=30,
        line_pause_ms=60,
        settings={"fake": {"rules": [["def add(", "a, b):\n    return a + b"]]}},
        out=tmp_path,
        tag="fake",
        timeout_s=60,
        workspace=tmp_path,  # as in an editor with the project open: the server indexes it aside
        server_log_level="INFO",
    )
    result = run_keystrokes(config, progress=False)
    assert result["config"]["workspace"] == str(tmp_path)
    assert f"indexed 1 files under {tmp_path.resolve()}" in Path(result["server_log"]).read_text()
    summary = result["summary"]
    region = result["regions"][0]
    typed = source.read_text()[region["start"] :][: region["chars"]]
    assert typed.endswith("return a + b") and len(typed) >= 55  # whole lines, up to the next line end
    # The rule's suggestion after "def add(" is exactly the rest: the person takes the line with Tab and
    # the next one with accept-line instead of typing them.
    assert summary["accept_keys"] == 2 and summary["chars_accepted"] == len("a, b):\n    return a + b")
    assert summary["key_presses"] == len(plan_keystrokes(typed[: typed.index("def add(") + 8])) + 2
    assert summary["chars_saved"] == pytest.approx((summary["chars_accepted"] - 2) / summary["chars_typed"])
    assert summary["ghost_on_screen"] > 0 and summary["errors"] == 0
    assert summary["server"]["requests"] == summary["key_presses"]
    assert sum(summary["outcomes"].values()) == summary["key_presses"]  # every request answered
    paths = write_report(result, tmp_path, "fake")
    assert json.loads(paths[0].read_text())["summary"]["key_presses"] == summary["key_presses"]
    assert "ghost text on screen when the next key came" in paths[1].read_text()
    assert paths[2].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # a real `specls serve` subprocess behind a pygls client
def test_the_replay_asks_again_when_a_part_answered_mid_line_is_whole() -> None:
    import asyncio
    import random

    from lsp_server.typist.client import ServerSession
    from lsp_server.typist.keystrokes import Cadence
    from lsp_server.typist.replay import LspEditor, Replay

    text = "total = compute(values) + 1\n"
    start = len("total = ")

    async def replay() -> tuple[Replay, LspEditor]:
        session = ServerSession("specls-test")
        # 100 ms a fake token: after "c" the server answers with a part at 80 ms, and says when it is whole.
        fake = {"rules": [["total = ", "compute(values) + 1"]], "tokenDelayMs": 100}
        await session.start(
            ["--backend", "fake"], initialization_options={"fake": fake, "partialAfterMs": 80}
        )
        await session.wait_ready(30)
        try:
            editor = LspEditor(session, "file:///project/total.py", "python", poll_stats=False)
            run = Replay(
                editor,
                text,
                Cadence(ms_per_char=2500, jitter=0),  # the second key comes long after the whole answer
                start=start,
                max_keystrokes=2,
                rng=random.Random(0),
            )
            await run.run()
            return run, editor
        finally:
            await session.stop()

    run, editor = asyncio.run(replay())
    first, second = run.events
    assert editor.refreshes == 1
    assert first.suggestion == "ompute(values) + 1"  # the part, grown into the whole suggestion
    assert second.ghost_before == "ompute(values) + 1" and second.ghost_was_right


def test_a_file_in_the_workspace_is_typed_under_its_own_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    region = Region("pkg/mod.py", "x = 1\n", 0, 5)
    assert region_uri(region, tmp_path) == (tmp_path / "pkg" / "mod.py").resolve().as_uri()
    assert region_uri(region, None) == "file:///bench/pkg/mod.py"
    assert region_uri(region, tmp_path / "pkg" / "other") == "file:///bench/pkg/mod.py"  # outside the folder
    assert region_uri(Region("asyncio/events.py", "", 0, 0), tmp_path) == "file:///bench/asyncio/events.py"
