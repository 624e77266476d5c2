"""The Neovim 0.12 set-up in the README is the file the end-to-end tests run, word for word."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_readme_shows_the_tested_builtin_client_setup() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tested = (REPO / "editor_clients" / "neovim" / "builtin_client.lua").read_text(encoding="utf-8")
    blocks = [textwrap.dedent(block) for block in re.findall(r"```lua\n(.*?)```", readme, flags=re.S)]
    shown = next(block for block in blocks if "vim.lsp.inline_completion.enable()" in block)
    assert tested.endswith(shown)
