"""Neovim for the end-to-end tests: the binaries (Debian's 0.7.2, `nvim` on PATH, and a 0.12-dev build
fetched and cached by scripts/install_nvim_0_12.sh, which scripts/setup.sh --dev runs) and `run_driver`,
which runs one of the Lua drivers in editor_clients/neovim/tests against `specls serve`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "editor_clients" / "neovim"
SYSTEM_NVIM = shutil.which("nvim")
CHROMIUM = Path("/usr/lib/chromium/chromium")


@cache
def nvim_0_12() -> Path:
    fetched = subprocess.run(
        ["bash", str(REPO / "scripts" / "install_nvim_0_12.sh")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert fetched.returncode == 0, f"could not fetch Neovim 0.12:\n{fetched.stderr[-3000:]}"
    return Path(fetched.stdout.strip().splitlines()[-1])


def nvim_version(nvim: str | Path) -> str:
    first = subprocess.run([str(nvim), "--version"], capture_output=True, text=True, timeout=30).stdout
    return first.splitlines()[0]


def run_driver(
    nvim: str | Path,
    driver: Path,
    tmp_path: Path,
    *,
    cwd: Path,
    env: dict[str, str],
    settings: dict[str, Any],
    file_text: str,
    typed: str,
    key_delay_ms: int = 30,
    timeout_s: float = 90,
) -> dict[str, Any]:
    """Run `driver` in headless `nvim -u NONE` against this checkout's `specls serve` with `settings`, on a
    new example.py holding `file_text`, typing `typed`; return the JSON result the driver wrote, after
    checking that it finished. `env` adds the driver's own inputs to the ones every driver reads."""
    source = tmp_path / "example.py"
    source.write_text(file_text, encoding="utf-8")
    result_path = tmp_path / "result.json"
    log_file = tmp_path / "server.log"
    server_cmd = [sys.executable, "-m", "lsp_server.app.cli", "serve", "--log-file", str(log_file)]
    proc = subprocess.run(
        [str(nvim), "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {driver}"],
        cwd=cwd,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SPECLS_PLUGIN_DIR": str(PLUGIN),
            "SPECLS_E2E_CMD": json.dumps(server_cmd),
            "SPECLS_E2E_SETTINGS": json.dumps(settings),
            "SPECLS_E2E_FILE": str(source),
            "SPECLS_E2E_TYPE": typed,
            "SPECLS_E2E_KEY_DELAY_MS": str(key_delay_ms),
            "SPECLS_E2E_TIMEOUT_MS": str(int(timeout_s * 1000) - 10_000),
            "SPECLS_E2E_RESULT": str(result_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result_path.exists(), f"the driver wrote no result; nvim said:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
    server_log = log_file.read_text(encoding="utf-8") if log_file.exists() else "(no server log)"
    assert result.get("ok"), f"{result.get('error')}\nserver log:\n{server_log[-3000:]}"
    return result


def terminal_png(ansi: str, path: Path, columns: int) -> None:
    """Render a terminal capture (`tmux capture-pane -e`) to a PNG: rich turns the ANSI colours into HTML,
    Chromium draws it."""
    import io

    from playwright.sync_api import sync_playwright
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    console = Console(record=True, width=columns, file=io.StringIO(), color_system="truecolor")
    console.print(Text.from_ansi(ansi.rstrip("\n")), end="", soft_wrap=True)
    html = console.export_html(theme=MONOKAI, inline_styles=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1200, "height": 800}, device_scale_factor=1)
        page.set_content(html)
        page.add_style_tag(
            content="body { margin: 0 } pre { margin: 0; padding: 8px; display: inline-block }"
        )
        page.locator("pre").screenshot(path=str(path))
        browser.close()


def big_file(lines: int = 2420) -> str:
    """A real Python file of thousands of lines: the start of the standard library's argparse.py."""
    import sysconfig

    text = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text(encoding="utf-8")
    return "\n".join(text.split("\n")[:lines]) + "\n"


def line_of(text: str, line: str) -> int:
    """The 1-based number of the first line of `text` that is exactly `line`."""
    return text.split("\n").index(line) + 1
