"""A third-party LSP client, not VS Code: editor_clients/vscode's smoke client (vscode-jsonrpc over stdio,
the transport VS Code's language client uses) runs a real LSP session against `specls serve`: initialize,
open, inline completion, accept through the item's command, statistics, shutdown. The extension in a real
VS Code is tested by tests/e2e/test_vscode_e2e.py.

Needs node; builds the client with npm (ci + compile) when it is not built yet. Skips only without node.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VSCODE = REPO / "editor_clients" / "vscode"
SMOKE = VSCODE / "out" / "smoke" / "lspSmoke.js"
NODE = shutil.which("node")
NPM = shutil.which("npm")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NODE is None or NPM is None, reason="node/npm not installed (CI installs node 20)"),
]

ADD_RULES = [["def add(a, b):\n", "    return a + b\n"]]


@pytest.fixture(scope="module")
def smoke_client() -> Path:
    assert NPM is not None
    if not (VSCODE / "node_modules" / "vscode-jsonrpc").exists():
        subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=VSCODE, check=True, timeout=600)
    sources = list((VSCODE / "src").rglob("*.ts"))
    if not SMOKE.exists() or any(src.stat().st_mtime > SMOKE.stat().st_mtime for src in sources):
        subprocess.run([NPM, "run", "compile"], cwd=VSCODE, check=True, timeout=300)
    return SMOKE


def run_session(smoke: Path, text: str, init_options: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
    assert NODE is not None
    server = [sys.executable, "-m", "lsp_server.app.cli", "serve"]
    proc = subprocess.run(
        [NODE, str(smoke), "--text", text, "--init-options", json.dumps(init_options), "--", *server],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, summary, proc.stderr


def test_inline_completion_accept_and_stats_over_jsonrpc(smoke_client: Path) -> None:
    code, summary, stderr = run_session(
        smoke_client, "def add(a, b):\n    ", {"backend": "fake", "fake": {"rules": ADD_RULES}}
    )
    assert code == 0, stderr
    assert summary["capabilities"]["inlineCompletionProvider"] is not None
    assert summary["capabilities"]["executeCommandProvider"]["commands"] == ["specls.accept"]
    [item] = summary["items"]
    assert item["insertText"] == "return a + b"
    assert item["range"]["start"] == {"line": 1, "character": 4}
    assert item["command"]["command"] == "specls.accept"
    stats = summary["stats"]
    assert (stats["shown"], stats["accepted"], stats["rejected"]) == (1, 1, 0)
    assert [status["state"] for status in summary["statuses"]][-1] == "ready"
    assert summary["serverExitCode"] == 0


def test_a_bad_setting_is_reported_and_completion_still_works(smoke_client: Path) -> None:
    code, summary, stderr = run_session(
        smoke_client,
        "def add(a, b):\n    ",
        {"backend": "fake", "maxNewTokens": -3, "fake": {"rules": ADD_RULES}},
    )
    assert code == 0, stderr
    assert any("maxNewTokens" in message["message"] for message in summary["messages"])
    assert summary["items"][0]["insertText"] == "return a + b"


def test_no_suggestion_is_an_empty_answer_not_an_error(smoke_client: Path) -> None:
    code, summary, _ = run_session(smoke_client, "x = ", {"backend": "fake", "fake": {"rules": ADD_RULES}})
    assert code == 1  # the smoke client exits 1 when there is nothing to accept
    assert summary["items"] == []
    assert summary["serverExitCode"] == 0
