"""`specls bench lines-imports` counts the suggested `from` lines that name what the workspace lacks."""

from __future__ import annotations

from pathlib import Path

from bench.lines_imports import judge_result


def _outcome(position: str, suggestion: str) -> dict[str, object]:
    return {"position": position, "suggestion": suggestion}


def test_from_lines_are_judged_against_the_folders_the_run_read(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "agent.py").write_text("class LlmAgent:\n    pass\n")
    (package / "main.py").write_text("from .agent import LlmAgent\n")
    result = {
        "config": {"folders": [str(package)]},
        "models": [
            {
                "outcomes": [
                    _outcome("pkg/main.py:1", "from .agent import LlmAgent\nmore\nfrom .agent import Nope"),
                    _outcome("pkg/main.py:1", "from .agent import LLMAgent"),
                    _outcome("pkg/main.py:1", "from .agents import LlmAgent"),
                    _outcome("pkg/main.py:1", "from typing import Anything"),  # not the workspace's
                    _outcome("pkg/main.py:1", "x = 1"),
                    _outcome("pkg/gone.py:3", "from .agent import Nothing"),  # a file no longer there
                ]
            }
        ],
    }
    first, later = judge_result(result)
    assert first.judged == 3
    assert first.lacking == [
        ("pkg/main.py:1", "from .agent import LLMAgent"),
        ("pkg/main.py:1", "from .agents import LlmAgent"),
    ]
    assert later.judged == 1
    assert later.lacking == [("pkg/main.py:1", "from .agent import Nope")]
