"""A real VS Code: code-server 4.100.3 (VS Code 1.100.3) in headless Chromium, driven by playwright.

The extension is packaged as a user would (`npm run package`) and installed with
`code-server --install-extension`. VS Code starts `specls serve` itself, asks for inline completions on its
own as keys are typed, draws the ghost text and applies it on Tab; the test only presses keys, reads the
screen and reads the saved file. code-server comes from scripts/install_code_server.sh (cached, see
scripts/setup.sh --dev); the browser is Debian's chromium.

Set SPECLS_UPDATE_SCREENSHOTS=1 to write the ghost-text screenshot to docs/images/ for the README.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTENSION = REPO / "editor_clients" / "vscode"
CHROMIUM = Path("/usr/lib/chromium/chromium")
SCREENSHOT = REPO / "docs" / "images" / "vscode-ghost-text.png"
SPECLS = Path(sys.executable).with_name("specls")  # the entry point a user's venv has

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npm") is None, reason="node 20 + npm not installed"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed (scripts/setup.sh --dev)"),
]
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright not installed (pip install -e '.[dev]')"
)

GHOST = ".monaco-editor .ghost-text-decoration"
SUGGEST_ROWS = ".suggest-widget.visible .monaco-list-row"
READY_TIMEOUT_MS = 120_000
# VS Code's own partial-accept commands; accept-line has no default key, so the test binds one.
KEYBINDINGS = [
    {
        "key": "ctrl+alt+l",
        "command": "editor.action.inlineSuggest.acceptNextLine",
        "when": "inlineSuggestionVisible",
    }
]
FIB_RULES = [["def fib(n):\n", "    if n < 2:\n"], ["    if n < 2:\n", "        return n\n"]]


@pytest.fixture(scope="module")
def code_server() -> Path:
    installed = subprocess.run(
        ["bash", str(REPO / "scripts" / "install_code_server.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return Path(installed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def extensions_dir(code_server: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extension packaged with `npm run package` and installed by code-server's own installer."""
    if not (EXTENSION / "node_modules").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=EXTENSION, check=True, timeout=600)
    packaged = subprocess.run(
        ["npm", "run", "package"], cwd=EXTENSION, capture_output=True, text=True, timeout=600
    )
    assert packaged.returncode == 0, packaged.stdout[-3000:] + packaged.stderr[-3000:]
    home = tmp_path_factory.mktemp("vscode-extensions")
    installed = subprocess.run(
        [
            str(code_server),
            "--user-data-dir",
            str(home / "user-data"),
            "--extensions-dir",
            str(home / "extensions"),
            "--install-extension",
            str(EXTENSION / "specls.vsix"),
        ],
        env=_isolated_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "successfully installed" in installed.stdout, installed.stdout + installed.stderr
    return home / "extensions"


def _isolated_env(home: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data")}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class VSCode:
    """One code-server process (in its own process group) and one browser page on a project folder."""

    def __init__(self, page: Any, project: Path) -> None:
        self.page = page
        self.project = project

    def open_file(self, name: str) -> None:
        self.page.keyboard.press("Control+P")
        self.page.wait_for_selector(".quick-input-widget input", state="visible")
        self.page.keyboard.type(name)
        self.page.wait_for_selector(f'.quick-input-list .monaco-list-row[aria-label*="{name}"]')
        self.page.keyboard.press("Enter")
        self.page.wait_for_selector(f'.tab.active[aria-label*="{name}"]')
        self.page.wait_for_selector(".monaco-editor.focused")
        # VS Code creates some editor contributions (inline suggestions among them) when it is next idle;
        # on a busy machine that is a moment after the editor shows.
        self.page.wait_for_timeout(2_000)

    def ghost_text(self) -> str:
        """The ghost text drawn on the cursor's line (VS Code splits it into one span per token)."""
        spans = self.page.locator(GHOST).all_inner_texts()
        return "".join(spans).replace("\xa0", " ")

    def wait_for_ghost(self, timeout_ms: int, previous: str | None = None) -> str:
        """Wait until ghost text is drawn (and differs from `previous`) and has stopped changing."""
        deadline = time.monotonic() + timeout_ms / 1000
        seen = ""
        while time.monotonic() < deadline:
            text = self.ghost_text()
            if text and text != previous and text == seen:
                return text
            seen = text
            self.page.wait_for_timeout(150)
        self.page.screenshot(path=str(self.project.parent / "no-ghost.png"))
        raise AssertionError(
            f"no ghost text within {timeout_ms} ms (last seen {seen!r}); see no-ghost.png; "
            f"{self.inline_requests_sent()} inline completion requests sent by VS Code"
        )

    def inline_requests_sent(self) -> int:
        """How many textDocument/inlineCompletion requests the extension's LSP trace shows."""
        logs = self.project.parent.glob("user-data/logs/*/exthost*/specls.specls/specls.log")
        return sum(
            log.read_text(encoding="utf-8").count("Sending request 'textDocument/inlineCompletion")
            for log in logs
        )

    def wait_for_typed_ghost(self, timeout_ms: int) -> str:
        """The ghost text VS Code asks for by itself after typing; if none shows within 5 s, VS Code's own
        Trigger Inline Suggestion (Alt+\\) asks again, as a user would. Seen here: in some code-server
        sessions VS Code sends no inline completion request at all, even on Alt+\\; the failure message
        counts the requests so that such a run is told apart from a server that answered nothing."""
        try:
            return self.wait_for_ghost(5_000)
        except AssertionError:
            print("no ghost text after typing; asking with Alt+\\")
            self.page.keyboard.press("Alt+Backslash")
            return self.wait_for_ghost(timeout_ms)

    def suggest_rows(self) -> list[str]:
        rows: list[str] = self.page.locator(SUGGEST_ROWS).all_inner_texts()
        return rows

    def saved_text(
        self,
        name: str,
        expected: str | None = None,
        timeout_s: float = 5,
        until: Callable[[str], bool] | None = None,
    ) -> str:
        """Save the editor (Ctrl+S) and read the file once VS Code has finished writing it. With `expected`
        (or a predicate `until`), save again until the file holds it or `timeout_s` passes (an accept lands
        a moment after its key); the caller's assertion judges the text returned."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.page.keyboard.press("Control+S")
            self.page.wait_for_selector(f'.tab.active:not(.dirty)[aria-label*="{name}"]')
            text = (self.project / name).read_text(encoding="utf-8")
            done = (until is None or until(text)) and (expected is None or text == expected)
            if done or time.monotonic() > deadline:
                return text
            self.page.wait_for_timeout(200)


@pytest.fixture
def start_vscode(code_server: Path, extensions_dir: Path, tmp_path: Path) -> Iterator[Any]:
    processes: list[subprocess.Popen[bytes]] = []
    browsers: list[Any] = []
    playwright = sync_api.sync_playwright().start()

    def start(files: dict[str, str], server_args: list[str]) -> VSCode:
        project = tmp_path / "project"
        project.mkdir()
        for name, text in files.items():
            (project / name).write_text(text, encoding="utf-8")
        user = tmp_path / "user-data" / "User"
        user.mkdir(parents=True)
        settings = {
            "specls.serverCommand": str(SPECLS),
            "specls.serverArgs": [*server_args, "--log-file", str(tmp_path / "server.log")],
            "specls.trace.server": "verbose",
            "files.hotExit": "off",
            # VS Code's own word list would open the suggest widget over the ghost text at random; the
            # widget still opens for any completion provider, so "no specls row" stays a real check.
            "editor.wordBasedSuggestions": "off",
            "workbench.startupEditor": "none",
            "telemetry.telemetryLevel": "off",
            "extensions.autoCheckUpdates": False,
            "extensions.autoUpdate": False,
        }
        (user / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
        (user / "keybindings.json").write_text(json.dumps(KEYBINDINGS), encoding="utf-8")
        port = _free_port()
        log = (tmp_path / "code-server.log").open("wb")
        process = subprocess.Popen(
            [
                str(code_server),
                "--bind-addr",
                f"127.0.0.1:{port}",
                "--auth",
                "none",
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--disable-getting-started-override",
                "--log",
                "trace",  # the LSP traffic goes to the extension's log, for a failure's diagnosis
                "--user-data-dir",
                str(tmp_path / "user-data"),
                "--extensions-dir",
                str(extensions_dir),
                str(project),
            ],
            env=_isolated_env(tmp_path),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: every session leaves an extension host behind
        )
        processes.append(process)
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        browsers.append(browser)
        page = browser.new_page(viewport={"width": 900, "height": 420})
        page.set_default_timeout(60_000)
        deadline = time.monotonic() + 60
        while True:  # code-server takes a moment to listen
            try:
                page.goto(f"http://127.0.0.1:{port}/?folder={project}")
                break
            except sync_api.Error:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.5)
        page.wait_for_selector('[id="specls.specls"]', timeout=READY_TIMEOUT_MS)
        try:
            page.wait_for_selector(
                '[id="specls.specls"][aria-label*="specls: ready"]', timeout=READY_TIMEOUT_MS
            )
        except sync_api.Error as exc:
            label = page.locator('[id="specls.specls"]').get_attribute("aria-label")
            raise AssertionError(f"specls never became ready: {label}\n{_server_log(tmp_path)}") from exc
        return VSCode(page, project)

    yield start
    for browser in browsers:
        for page in browser.contexts[0].pages if browser.contexts else []:
            page.screenshot(path=str(tmp_path / "last.png"))  # what the editor showed at the end
        browser.close()
    playwright.stop()
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _server_log(tmp_path: Path) -> str:
    log = tmp_path / "server.log"
    return log.read_text(encoding="utf-8")[-3000:] if log.exists() else "(no server log)"


def _open_line_under_def(vscode: VSCode, line: int) -> None:
    """Put the cursor at the end of `line` (0-based) and press Enter: VS Code indents the new line."""
    vscode.page.keyboard.press("Control+Home")
    for _ in range(line):
        vscode.page.keyboard.press("ArrowDown")
    vscode.page.keyboard.press("End")
    vscode.page.keyboard.press("Enter")


def _assert_no_specls_row(vscode: VSCode, ghost: str) -> None:
    rows = vscode.suggest_rows()
    assert not [row for row in rows if "specls" in row or ghost.strip() in row], rows


def test_fake_backend_exact_text_and_partial_accepts(start_vscode: Any, tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(FIB_RULES), encoding="utf-8")
    vscode = start_vscode({"fib.py": "def fib(n):\n"}, ["--backend", "fake", "--fake-rules", str(rules)])
    vscode.open_file("fib.py")
    _open_line_under_def(vscode, 0)
    vscode.page.keyboard.type("if", delay=60)

    ghost = vscode.wait_for_typed_ghost(15_000)
    assert ghost == " n < 2:"
    _assert_no_specls_row(vscode, ghost)

    # editor.action.inlineSuggest.acceptNextWord: VS Code takes the leading space as a step of its own.
    vscode.page.keyboard.press("Control+ArrowRight")
    ghost = vscode.wait_for_ghost(5_000, previous=ghost)
    assert ghost == "n < 2:"
    vscode.page.keyboard.press("Control+ArrowRight")
    assert vscode.wait_for_ghost(5_000, previous=ghost) == " < 2:"
    expected = "def fib(n):\n    if n\n"
    assert vscode.saved_text("fib.py", expected) == expected
    vscode.page.keyboard.press("Control+Alt+L")  # editor.action.inlineSuggest.acceptNextLine
    vscode.page.wait_for_timeout(300)  # (the next suggestion, for the end of this line, may show at once)
    expected = "def fib(n):\n    if n < 2:\n"
    assert vscode.saved_text("fib.py", expected) == expected

    # Enter indents one level deeper; the suggestion is the if's body line, and Tab takes it.
    vscode.page.keyboard.press("End")
    vscode.page.keyboard.press("Enter")
    ghost = vscode.wait_for_ghost(15_000)
    assert ghost == "return n"
    _assert_no_specls_row(vscode, ghost)
    vscode.page.keyboard.press("Tab")
    vscode.page.wait_for_timeout(300)
    expected = "def fib(n):\n    if n < 2:\n        return n\n"
    assert vscode.saved_text("fib.py", expected) == expected


def test_a_comment_after_the_code_is_not_suggested(start_vscode: Any, tmp_path: Path) -> None:
    # Stop rule 10: a tool directive the model invents after the code on its line ends the suggestion; the
    # ghost text and what Tab inserts are the code alone.
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps([["def fib(n):\n", "    if n < 2:  # noqa: E501\n        return n\n"]]), encoding="utf-8"
    )
    vscode = start_vscode({"fib.py": "def fib(n):\n"}, ["--backend", "fake", "--fake-rules", str(rules)])
    vscode.open_file("fib.py")
    _open_line_under_def(vscode, 0)
    vscode.page.keyboard.type("if", delay=60)
    ghost = vscode.wait_for_typed_ghost(15_000)
    assert ghost == " n < 2:", _server_log(tmp_path)
    vscode.page.keyboard.press("Tab")
    vscode.page.wait_for_timeout(300)
    expected = "def fib(n):\n    if n < 2:\n"
    assert vscode.saved_text("fib.py", expected) == expected


def test_at_the_imports_the_workspace_says_where_a_used_name_is_defined(
    start_vscode: Any, tmp_path: Path
) -> None:
    # VS Code names the opened folder as the workspace folder; the server finds there where the name the file
    # uses is defined and puts that definition in the prompt. The fake's rule needs the definition's line
    # right before the file's text, so the ghost text shows only if the prompt held it (with the user setting
    # "specls.importDefinitions": false no ghost text came within 5 s).
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps([["def scale_rows(matrix, factor):\nimport os\n", "from matrices import scale_rows\n"]]),
        encoding="utf-8",
    )
    files = {
        "main.py": "import os\n\n\nrows = scale_rows([[1]], 2)\n",
        "matrices.py": "def scale_rows(matrix, factor):\n    return matrix\n",
    }
    vscode = start_vscode(files, ["--backend", "fake", "--fake-rules", str(rules)])
    vscode.open_file("main.py")
    _open_line_under_def(vscode, 0)
    vscode.page.keyboard.type("f", delay=60)
    ghost = vscode.wait_for_typed_ghost(15_000)
    assert ghost == "rom matrices import scale_rows"
    vscode.page.keyboard.press("Tab")
    vscode.page.wait_for_timeout(300)
    expected = "import os\nfrom matrices import scale_rows\n\n\nrows = scale_rows([[1]], 2)\n"
    assert vscode.saved_text("main.py", expected) == expected


def _second_line_holds_code(text: str) -> bool:
    lines = text.split("\n")
    return len(lines) > 1 and lines[1].strip() != ""


def test_bundled_model_ghost_text_at_a_line_start_is_accepted_with_tab(
    start_vscode: Any, tmp_path: Path
) -> None:
    source = "def add(a, b):\n\n\ndef sub(a, b):\n    return a - b\n"
    vscode = start_vscode({"add.py": source}, ["--device", "cpu"])
    vscode.open_file("add.py")
    _open_line_under_def(vscode, 0)  # the cursor sits after the new line's indentation, nothing typed

    ghost = vscode.wait_for_ghost(60_000)
    _assert_no_specls_row(vscode, ghost)
    shot = SCREENSHOT if os.environ.get("SPECLS_UPDATE_SCREENSHOTS") == "1" else tmp_path / SCREENSHOT.name
    shot.parent.mkdir(parents=True, exist_ok=True)
    vscode.page.screenshot(path=str(shot))

    vscode.page.keyboard.press("Tab")
    vscode.page.wait_for_timeout(300)
    # (A read can land while VS Code is still writing the file, and see it empty: save and read again.)
    lines = vscode.saved_text("add.py", until=_second_line_holds_code).split("\n")
    assert lines[0] == "def add(a, b):"
    # The new line holds the indentation VS Code gave it followed by exactly the ghost text: one level
    # (four spaces) and then code, not doubled indentation.
    assert lines[1] == "    " + ghost, _server_log(tmp_path)
    assert re.match(r"^    \S", lines[1]), lines[1]


def test_fake_backend_in_a_file_of_thousands_of_lines(start_vscode: Any, tmp_path: Path) -> None:
    # A real file (2,420 lines of the standard library's argparse.py): a new line inside a method.
    from tests.e2e.neovim_support import big_file, line_of

    text = big_file()
    line = line_of(text, "        args, argv = self.parse_known_args(args, namespace)")
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["        re", "turn args, argv"]]), encoding="utf-8")
    vscode = start_vscode({"big.py": text}, ["--backend", "fake", "--fake-rules", str(rules)])
    vscode.open_file("big.py")
    vscode.page.keyboard.press("Control+G")  # Go to Line
    vscode.page.wait_for_timeout(300)
    vscode.page.keyboard.type(str(line))
    vscode.page.keyboard.press("Enter")
    vscode.page.keyboard.press("End")
    vscode.page.keyboard.press("Enter")  # VS Code indents the new line as the method's body
    vscode.page.keyboard.type("re", delay=60)
    ghost = vscode.wait_for_typed_ghost(15_000)
    assert ghost == "turn args, argv", _server_log(tmp_path)
    vscode.page.keyboard.press("Tab")
    vscode.page.wait_for_timeout(300)
    saved = vscode.saved_text("big.py", until=lambda saved: "return args, argv" in saved)
    assert saved.split("\n")[line] == "        return args, argv"
    assert saved.count("\n") == text.count("\n") + 1
