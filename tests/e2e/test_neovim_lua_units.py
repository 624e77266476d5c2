"""The Neovim plugin's Lua unit tests (editor_clients/neovim/tests/unit_spec.lua) in headless nvim:
pure helpers (word/line split, answer parsing, UTF-16 columns, config fallback) and extmark drawing.
Fast; needs only `nvim` and skips without it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "editor_clients" / "neovim"
NVIM = shutil.which("nvim")


@pytest.mark.skipif(NVIM is None, reason="nvim not installed (apt-get install -y neovim)")
def test_lua_unit_spec(tmp_path: Path) -> None:
    assert NVIM is not None
    result_path = tmp_path / "units.json"
    env = {**os.environ, "SPECLS_PLUGIN_DIR": str(PLUGIN), "SPECLS_UNIT_RESULT": str(result_path)}
    spec = PLUGIN / "tests" / "unit_spec.lua"
    proc = subprocess.run(
        [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {spec}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result_path.exists(), f"the spec wrote no result:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(result_path.read_text(encoding="utf-8"))
    assert result["failures"] == []
    assert result["passed"] == 8
