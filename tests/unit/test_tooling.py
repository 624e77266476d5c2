"""The pre-commit hooks run what CI runs: each hook's command is one that scripts/test.sh runs too, so a
commit that passes them does not fail CI on lint, format or types."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def hook_commands() -> dict[str, str]:
    """Hook id -> the command it runs (a `bash -c 'cd DIR && COMMAND'` wrapper unwrapped to COMMAND)."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    commands: dict[str, str] = {}
    for repo in config["repos"]:
        for hook in repo["hooks"]:
            entry = hook["entry"]
            if entry.startswith("bash -c "):
                entry = shlex.split(entry)[2]
            commands[hook["id"]] = re.sub(r"^cd \S+ && ", "", entry)
    return commands


def test_every_pre_commit_hook_runs_a_ci_command() -> None:
    ci = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    commands = hook_commands()
    assert {"ruff", "ruff-format", "mypy", "stylua", "luacheck"} <= commands.keys()
    assert {hook: command for hook, command in commands.items() if command not in ci} == {}


def test_every_ci_check_has_a_hook() -> None:
    ci = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    checks = re.findall(r"^\.venv/bin/(?:ruff|mypy)\b.*$", ci, flags=re.MULTILINE)
    assert len(checks) == 3
    hooked = set(hook_commands().values())
    assert {check for check in checks if check not in hooked} == set()
