"""The Neovim plugin over TCP: it connects to a running `specls serve --tcp`, reads the server's token file
and sends the token in `initialize`; the ghost text then arrives as over stdio (Neovim 0.12; TCP needs 0.8+)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e import neovim_support
from tests.e2e.fault_support import free_port, serve_command, server_env
from tests.e2e.neovim_support import PLUGIN, REPO, nvim_0_12

pytestmark = pytest.mark.slow
DRIVER = PLUGIN / "tests" / "e2e_driver.lua"


@pytest.mark.parametrize("named_file", [True, False])
def test_the_plugin_connects_over_tcp_with_the_token(tmp_path: Path, named_file: bool) -> None:
    port = free_port()
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["def add(a, b):\n", "    return a + b\n"]]))
    token_file = tmp_path / "token"
    cache = tmp_path / "cache"
    args = ["--backend", "fake", "--fake-rules", str(rules), "--tcp", "--port", str(port)]
    if named_file:
        args += ["--token-file", str(token_file)]
    env = server_env(SPECLS_CACHE_DIR=str(cache), XDG_RUNTIME_DIR="")  # the default file: in the cache
    server = subprocess.Popen(
        serve_command(*args), env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    try:
        expected_file = token_file if named_file else cache / f"tcp-{port}.token"
        deadline = time.monotonic() + 30
        while not expected_file.exists():
            assert time.monotonic() < deadline and server.poll() is None, "the server wrote no token file"
            time.sleep(0.05)
        tcp = {"host": "127.0.0.1", "port": port, **({"token_file": str(token_file)} if named_file else {})}
        result = neovim_support.run_driver(
            str(nvim_0_12()),
            DRIVER,
            tmp_path,
            cwd=REPO,
            env={"SPECLS_E2E_TCP": json.dumps(tcp), "SPECLS_CACHE_DIR": str(cache), "XDG_RUNTIME_DIR": ""},
            settings={},
            file_text="def add(a, b):\n",
            typed="    ret",
        )
        assert result["ghost"] == {"row": 1, "col": 7, "text": "urn a + b"}
        assert result["lines"] == ["def add(a, b):", "    return a + b"]
        assert not (tmp_path / "server.log").exists()  # the stdio command (which logs there) never ran
        assert server.poll() is None  # the editor leaving ends its session, not the server
    finally:
        server.terminate()
        assert server.wait(10) == 0
