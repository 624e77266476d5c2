"""Neovim plugin end to end: headless `nvim -u NONE` loads editor_clients/neovim, starts the real
`specls serve`, types into a buffer key by key, sees ghost text (an extmark) and accepts it.

Every test runs on Debian's Neovim 0.7.2 and on Neovim 0.12-dev. On 0.12 the plugin's own ghost text is
tested (`use_builtin = false`); `test_builtin_mode_*` tests its default there, Neovim's own inline
completion.

The driver (editor_clients/neovim/tests/e2e_driver.lua) writes what happened as JSON; the assertions are
here. The fake backend makes the expected text exact; the bundled model run checks that whatever it
suggests is what lands in the buffer. Skips only when `nvim` is not installed (CI installs it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.catalog import is_pulled
from tests.e2e import neovim_support
from tests.e2e.neovim_support import PLUGIN, REPO, SYSTEM_NVIM, nvim_0_12, nvim_version

DRIVER = PLUGIN / "tests" / "e2e_driver.lua"
BUNDLED_TARGET = REPO / "engine" / "bundled" / "target"

pytestmark = pytest.mark.slow


@pytest.fixture(params=["0.7", "0.12"])
def nvim(request: pytest.FixtureRequest) -> str:
    if request.param == "0.12":
        return str(nvim_0_12())
    if SYSTEM_NVIM is None:
        pytest.skip("nvim not installed (apt-get install -y neovim)")
    assert "v0.7" in nvim_version(SYSTEM_NVIM), nvim_version(SYSTEM_NVIM)
    return SYSTEM_NVIM


ADD_RULES = [["def add(a, b):\n", "    return a + b\n"]]
# Keys come every 30 ms here. With warm-ups on, the request at the new empty line was sometimes overtaken by
# the next key on this loaded machine; the suggestion then made inside the indentation is rejected by the
# next space (the cause is not found yet). These tests are about accept and dismiss: no warm-ups.
FAKE = {"backend": "fake", "fake": {"rules": ADD_RULES}, "warm": False}


def run_driver(
    tmp_path: Path,
    nvim: str,
    *,
    use_builtin: bool = False,
    scenario: str = "accept",
    line: int | None = None,
    pause_ms: int = 0,
    ghost_timeout_ms: int = 30_000,
    expect_ghost: str | None = None,
    **common: Any,
) -> dict[str, Any]:
    """The plugin's driver; `common` holds what every driver takes (`neovim_support.run_driver`). The new
    line opens under `line` (default: the last one), after `pause_ms` with the cursor there."""
    env = {
        "SPECLS_E2E_SCENARIO": scenario,
        "SPECLS_E2E_USE_BUILTIN": "true" if use_builtin else "false",
        "SPECLS_E2E_PAUSE_MS": str(pause_ms),
        "SPECLS_E2E_GHOST_TIMEOUT_MS": str(ghost_timeout_ms),
    }
    if line is not None:
        env["SPECLS_E2E_LINE"] = str(line)
    if expect_ghost is not None:
        env["SPECLS_E2E_EXPECT_GHOST"] = expect_ghost
    return neovim_support.run_driver(nvim, DRIVER, tmp_path, cwd=REPO, env=env, **common)


# A real file of thousands of lines: the first 2,420 lines of the standard library's argparse.py. The new
# line opens inside `ArgumentParser.parse_args`, under its first statement.
BIG_FILE = neovim_support.big_file()
IN_A_METHOD = neovim_support.line_of(BIG_FILE, "        args, argv = self.parse_known_args(args, namespace)")


def test_a_file_of_thousands_of_lines_gets_ghost_text_inside_a_method(tmp_path: Path, nvim: str) -> None:
    settings = {"backend": "fake", "fake": {"rules": [["        re", "turn args, argv"]]}}
    result = run_driver(tmp_path, nvim, settings=settings, file_text=BIG_FILE, typed="re", line=IN_A_METHOD)
    assert result["ghost"] == {"row": IN_A_METHOD, "col": len("        re"), "text": "turn args, argv"}
    assert result["lines"][IN_A_METHOD] == "        return args, argv"
    assert len(result["lines"]) == BIG_FILE.count("\n") + 1


@pytest.mark.skipif(
    not (BUNDLED_TARGET / "config.json").exists(),
    reason="the bundled model is not trained yet (specls train)",
)
def test_a_big_file_opened_a_moment_ago_shows_ghost_text_within_a_second_of_the_first_key(
    tmp_path: Path, nvim: str
) -> None:
    # The user opens the file, rests on the line for 3 s (the server warms its cache for that cursor),
    # then opens a line and types: the bundled pair answers within a second of the first key. (Pinned to
    # it: the default Qwen2.5-Coder-0.5B in fp32 takes longer than that per answer on a 2-core CPU.)
    result = run_driver(
        tmp_path,
        nvim,
        settings={"target": str(BUNDLED_TARGET)},
        file_text=BIG_FILE,
        typed="re",
        line=IN_A_METHOD,
        pause_ms=3000,
        key_delay_ms=120,
        ghost_timeout_ms=10_000,
        timeout_s=240,
    )
    assert result["ghost"]["text"].strip()
    assert result["ghost_ms_after_first_key"] <= 1000, result["steps"]
    assert result["stats"]["warmups"], "the server never warmed its cache"


def test_ghost_text_appears_and_tab_accepts_it(tmp_path: Path, nvim: str) -> None:
    result = run_driver(tmp_path, nvim, settings=FAKE, file_text="def add(a, b):\n", typed="    ret")
    assert result["mode_after_typing"] == "i"
    assert result["ghost"] == {"row": 1, "col": 7, "text": "urn a + b"}
    assert result["lines"] == ["def add(a, b):", "    return a + b"]
    assert result["cursor_after"] == [2, len("    return a + b")]
    assert result["ghost_after"] is None
    stats = result["stats"]
    assert stats["accepted"] == 1
    assert stats["shown"] >= 1
    assert stats["rejected"] == 0


def test_at_the_imports_the_workspace_says_where_a_used_name_is_defined(tmp_path: Path, nvim: str) -> None:
    # Neovim names its working directory as the workspace folder; the server finds there where the name the
    # file uses is defined and puts that definition in the prompt. The fake's rule needs the definition's line
    # right before the file's text, so the ghost text shows only if the prompt held it (with
    # importDefinitions false no ghost text came).
    (tmp_path / "matrices.py").write_text("def scale_rows(matrix, factor):\n    return matrix\n")
    rules = [["def scale_rows(matrix, factor):\nimport os\n", "from matrices import scale_rows\n"]]
    settings = {"backend": "fake", "fake": {"rules": rules}, "warm": False}
    file_text = "import os\n\n\nrows = scale_rows([[1]], 2)\n"
    result = neovim_support.run_driver(
        nvim,
        DRIVER,
        tmp_path,
        cwd=tmp_path,
        env={"SPECLS_E2E_LINE": "1", "SPECLS_E2E_USE_BUILTIN": "false"},
        settings=settings,
        file_text=file_text,
        typed="f",
    )
    assert result["ghost"]["text"] == "rom matrices import scale_rows"
    assert result["lines"][:2] == ["import os", "from matrices import scale_rows"]
    assert result["stats"]["accepted"] == 1


# The missing import with the default model: app/agents.py defines LlmAgent, the file calls it without importing
# it, and the user types `from app.` under its imports. Pinned to fp32 so the text is the same on every CPU, and
# without the definitions in the prompt (importDefinitions), so steering alone names the module: unsteered, the
# 0.5B wrote `from app.actors import LlmAgent` here (fp32, an AVX512 Xeon).
AGENTS = "class LlmAgent:\n    def __init__(self, name):\n        self.name = name\n\n    def run(self):\n        return 1\n"
USES_AGENT = '"""Runs the agent."""\n\nimport os\n\n\ndef main():\n    agent = LlmAgent(os.environ["NAME"])\n    agent.run()\n'


@pytest.mark.skipif(not is_pulled("qwen2.5-coder-0.5b"), reason="not pulled: specls pull qwen2.5-coder-0.5b")
@pytest.mark.parametrize("steer", [True, False])
def test_the_missing_import_is_suggested_and_lands_through_real_neovim(tmp_path: Path, steer: bool) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "agents.py").write_text(AGENTS)
    settings = {
        "backend": "local",
        "target": "qwen2.5-coder-0.5b",
        "draft": "none",
        "device": "cpu",
        "dtype": "fp32",
        "warm": False,
        "partialAfterMs": 0,  # the first line whole, not a part of it
        "minFirstLineProbability": 0,  # whatever the model is sure of: the control run must show something
        "importDefinitions": False,
        "steerImports": steer,
    }
    result = neovim_support.run_driver(
        nvim_0_12(),
        DRIVER,
        tmp_path,
        cwd=tmp_path,
        env={
            "SPECLS_E2E_LINE": "3",
            "SPECLS_E2E_USE_BUILTIN": "false",
            "SPECLS_E2E_GHOST_TIMEOUT_MS": "60000",
        },
        settings=settings,
        file_text=USES_AGENT,
        typed="from app.",
        key_delay_ms=120,
        timeout_s=240,
    )
    steered_rows = result["stats"]["engine_totals"]["steered_import_rows"]
    if not steer:
        assert steered_rows == 0
        return
    assert steered_rows > 0
    assert result["ghost"]["text"].split("\n")[0] == "agents import LlmAgent"
    assert result["lines"][3] == "from app.agents import LlmAgent"
    assert result["stats"]["accepted"] == 1


def test_accept_word_takes_one_word_and_keeps_the_rest(tmp_path: Path, nvim: str) -> None:
    result = run_driver(
        tmp_path, nvim, settings=FAKE, file_text="def add(a, b):\n", typed="    ret", scenario="accept_word"
    )
    assert result["ghost"]["text"] == "urn a + b"
    assert result["lines"] == ["def add(a, b):", "    return"]
    assert result["ghost_after"] == {"row": 1, "col": len("    return"), "text": " a + b"}
    assert result["stats"]["partially_accepted"] == 1
    assert result["stats"]["accepted"] == 0


def test_dismiss_removes_the_ghost_and_reports_a_reject(tmp_path: Path, nvim: str) -> None:
    result = run_driver(
        tmp_path, nvim, settings=FAKE, file_text="def add(a, b):\n", typed="    ret", scenario="dismiss"
    )
    assert result["ghost_after"] is None
    assert result["lines"] == ["def add(a, b):", "    ret"]
    assert result["stats"]["rejected"] == 1
    assert result["stats"]["accepted"] == 0


def test_multi_line_suggestion_is_drawn_as_virtual_lines_and_inserted_whole(
    tmp_path: Path, nvim: str
) -> None:
    body = "        self.x = x\n        self.y = y\n"
    settings = {
        "backend": "fake",
        "fake": {"rules": [["class Point:\n    def __init__(self, x, y):\n", body]]},
    }
    # Neovim's default 'autoindent' gives the new line 4 spaces; typing 4 more reaches the body's indent,
    # where the server asks for a multi-line block.
    result = run_driver(
        tmp_path,
        nvim,
        settings=settings,
        file_text="class Point:\n    def __init__(self, x, y):\n",
        typed="    ",
    )
    assert result["ghost"] == {"row": 2, "col": 8, "text": "self.x = x\n        self.y = y"}
    assert result["lines"] == [
        "class Point:",
        "    def __init__(self, x, y):",
        "        self.x = x",
        "        self.y = y",
    ]
    assert result["cursor_after"] == [4, len("        self.y = y")]
    assert result["stats"]["accepted"] == 1


def test_typing_cancels_the_request_in_flight(tmp_path: Path, nvim: str) -> None:
    # Each fake token takes 150 ms, keys come every 30 ms: every keystroke finds a request in flight.
    slow = {**FAKE, "fake": {"rules": ADD_RULES, "tokenDelayMs": 150}}
    result = run_driver(
        tmp_path,
        nvim,
        settings=slow,
        file_text="def add(a, b):\n",
        typed="    retur",
        key_delay_ms=30,
        expect_ghost="n a + b",
    )
    assert result["cancel_requests"] >= 3
    assert result["ghost"]["text"] == "n a + b"
    assert result["lines"] == ["def add(a, b):", "    return a + b"]


def test_a_part_shown_mid_line_grows_into_the_whole_suggestion(tmp_path: Path, nvim: str) -> None:
    # 300 ms a fake token: after 80 ms mid-line (partialAfterMs) the server answers with the part it has,
    # and tells the plugin when the suggestion is whole (specls/suggestionGrown); the plugin asks again.
    slow = {**FAKE, "fake": {"rules": ADD_RULES, "tokenDelayMs": 300}, "partialAfterMs": 80}
    result = run_driver(
        tmp_path,
        nvim,
        settings=slow,
        file_text="def add(a, b):\n",
        typed="    ret",
        key_delay_ms=30,
        expect_ghost="urn a + b",
    )
    first, whole = result["first_ghost"]["text"], result["ghost"]["text"]
    assert whole == "urn a + b" and first != whole and whole.startswith(first), (first, whole)
    assert result["lines"] == ["def add(a, b):", "    return a + b"]


# Brisk typing against a real engine: typing overtakes a running generation, whose tokens then disagree with
# what was typed; the scheduler must start again rather than answer empty (a bug these tests once caught).
def test_real_engine_on_a_tiny_pair_suggestion_lands_in_the_buffer(tmp_path: Path, nvim: str) -> None:
    # The local backend with its speculative engine, on test_server_local's hand-set pair whose target
    # always says "x": the text is known without a trained model.
    from tests.e2e.test_server_local import _save_pair

    target, draft = _save_pair(tmp_path / "pair")
    settings = {
        "backend": "local",
        "target": str(target),
        "draft": str(draft),
        "device": "cpu",
        # The indentation and "ret" leave the prompt and are re-spelled first (token healing); this
        # tokenizer may spell them a character a token, so they take up to 7 of the new tokens.
        "maxNewTokens": 12,
    }
    result = run_driver(
        tmp_path,
        nvim,
        settings=settings,
        file_text="def add(a, b):\n",
        typed="    ret",
        key_delay_ms=120,
        timeout_s=180,
    )
    ghost = result["ghost"]["text"]
    assert ghost and set(ghost) == {"x"}
    assert result["lines"] == ["def add(a, b):", "    ret" + ghost]
    assert result["stats"]["accepted"] == 1


@pytest.mark.skipif(
    not (BUNDLED_TARGET / "config.json").exists(),
    reason="the bundled model is not trained yet (specls train)",
)
def test_bundled_model_suggestion_lands_in_the_buffer(tmp_path: Path, nvim: str) -> None:
    file_text = "import os\n\n\ndef read_lines(path):\n"
    typed = "    with open("
    result = run_driver(
        tmp_path,
        nvim,
        settings={"backend": "local", "device": "cpu", "maxNewTokens": 24},
        file_text=file_text,
        typed=typed,
        timeout_s=240,
    )
    ghost_lines = result["ghost"]["text"].split("\n")
    assert result["ghost"]["text"].strip(), "the model suggested only whitespace"
    expected = [typed + ghost_lines[0], *ghost_lines[1:]]
    assert result["lines"][4 : 4 + len(expected)] == expected
    assert result["stats"]["accepted"] == 1


def test_builtin_mode_on_0_12_shows_and_accepts_through_neovims_own_inline_completion(tmp_path: Path) -> None:
    # The plugin's default on 0.12: Neovim draws the ghost text and the plugin's Tab accepts it.
    result = run_driver(
        tmp_path,
        str(nvim_0_12()),
        use_builtin=True,
        settings=FAKE,
        file_text="def add(a, b):\n",
        typed="    ret",
    )
    assert result["ghost"] == {"row": 1, "col": 7, "text": "urn a + b"}
    assert result["lines"] == ["def add(a, b):", "    return a + b"]
    assert result["cursor_after"] == [2, len("    return a + b")]
    assert result["stats"]["accepted"] == 1
