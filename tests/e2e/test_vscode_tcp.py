"""The VS Code extension's TCP path (editor_clients/vscode/src/tcp.ts, what `specls.tcp` runs): its own code
finds the server's token file, connects and sends the token; a vscode-jsonrpc client (VS Code's transport)
then completes over the socket against a real `specls serve --tcp`. (The extension inside code-server is
tested over stdio by test_vscode_e2e.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.fault_support import free_port, serve_command, server_env

REPO = Path(__file__).resolve().parents[2]
VSCODE = REPO / "editor_clients" / "vscode"
NODE = shutil.which("node")
NPM = shutil.which("npm")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NODE is None or NPM is None, reason="node/npm not installed (CI installs node 20)"),
]

CLIENT = """
const rpc = require(require.resolve("vscode-jsonrpc/node", { paths: [process.env.VSCODE] }));
const tcp = require(process.env.VSCODE + "/out/tcp.js");
(async () => {
  const target = tcp.tcpTarget(process.env.SPECLS_TCP, process.env.SPECLS_TCP_TOKEN_FILE);
  const token = tcp.readToken(target.tokenFile);
  const { reader, writer } = await tcp.connect(target);
  const conn = rpc.createMessageConnection(new rpc.StreamMessageReader(reader), new rpc.StreamMessageWriter(writer));
  const ready = new Promise((resolve) => conn.onNotification("specls/status", (p) => p.state === "ready" && resolve()));
  conn.listen();
  const caps = { textDocument: { inlineCompletion: {} }, general: { positionEncodings: ["utf-16"] } };
  const init = await conn.sendRequest("initialize", { processId: null, rootUri: null, capabilities: caps,
    initializationOptions: { token } });
  conn.sendNotification("initialized", {});
  await ready;
  const uri = "file:///w/add.py";
  conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "python", version: 1,
    text: "def add(a, b):\\n    ret" } });
  const answer = await conn.sendRequest("textDocument/inlineCompletion", { textDocument: { uri },
    position: { line: 1, character: 7 }, context: { triggerKind: 2 } });
  await conn.sendRequest("shutdown");
  conn.sendNotification("exit");
  console.log(JSON.stringify({ inline: "inlineCompletionProvider" in init.capabilities, items: answer.items }));
  setTimeout(() => process.exit(0), 100);
})().catch((error) => { console.error(error.message); process.exit(3); });
"""


@pytest.fixture(scope="module")
def built() -> None:
    assert NPM is not None
    out = VSCODE / "out" / "tcp.js"
    if not out.exists() or (VSCODE / "src" / "tcp.ts").stat().st_mtime > out.stat().st_mtime:
        subprocess.run([NPM, "run", "compile"], cwd=VSCODE, check=True, timeout=300)


def _client(address: str, token_file: str, cache: Path) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    env = {**server_env(), "VSCODE": str(VSCODE), "SPECLS_CACHE_DIR": str(cache), "XDG_RUNTIME_DIR": ""}
    env.update(SPECLS_TCP=address, SPECLS_TCP_TOKEN_FILE=token_file)  # the two settings
    return subprocess.run([NODE, "-e", CLIENT], capture_output=True, text=True, timeout=60, env=env)


def test_the_extension_connects_with_the_servers_token(built: None, tmp_path: Path) -> None:
    port = free_port()
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["def add(a, b):\n", "    return a + b\n"]]))
    cache = tmp_path / "cache"
    server = subprocess.Popen(
        serve_command("--backend", "fake", "--fake-rules", str(rules), "--tcp", "--port", str(port)),
        env=server_env(SPECLS_CACHE_DIR=str(cache), XDG_RUNTIME_DIR=""),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (cache / f"tcp-{port}.token").exists():  # the default file, which the extension finds
            assert time.monotonic() < deadline and server.poll() is None
            time.sleep(0.05)
        done = _client(f"127.0.0.1:{port}", "", cache)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["inline"] and summary["items"][0]["insertText"] == "urn a + b"
        wrong = tmp_path / "wrong-token"
        wrong.write_text("not-the-token-0123456789")
        refused = _client(f"127.0.0.1:{port}", str(wrong), cache)
        assert refused.returncode == 3 and "token" in refused.stderr  # the server's refusal, passed on
        missing = _client(f"127.0.0.1:{port}", str(tmp_path / "nope"), cache)
        assert missing.returncode == 3 and "cannot read the specls token file" in missing.stderr
        assert server.poll() is None
    finally:
        server.terminate()
        assert server.wait(10) == 0
