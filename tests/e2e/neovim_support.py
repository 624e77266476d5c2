"""Neovim binaries for the end-to-end tests: Debian's 0.7.2 (`nvim` on PATH) and a 0.12-dev build fetched
and cached by scripts/install_nvim_0_12.sh (scripts/setup.sh --dev fetches it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
