"""`specls serve` as a subprocess over stdio, driven by pygls' LSP client: what an editor does, scripted.

Used by `specls demo` (many keystrokes), `specls bench keystrokes` (the same replay, measured) and
`specls doctor` (one completion). Positions are UTF-16 code units, the LSP default, so any file can be
replayed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from lsp_server import __version__
from lsp_server.protocol import GROWN_NOTIFICATION, REFRESH_CAPABILITY
from lsp_server.typist.keystrokes import position_of

# The checkout: lsp_server/typist/client.py is two folders down.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ServerError(RuntimeError):
    """The server did not start, failed to load its model, or stopped answering."""


def to_plain(value: Any) -> Any:
    """pygls hands untyped results (custom requests) over as namedtuples: turn them into dicts and lists."""
    if hasattr(value, "_asdict"):
        return {key: to_plain(item) for key, item in value._asdict().items()}
    if isinstance(value, Mapping):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(item) for item in value]
    return value


def first_suggestion(result: Any) -> tuple[str, str | None]:
    """The text and id of the first item of an inline-completion answer; ("", None) when it has none."""
    if not isinstance(result, types.InlineCompletionList) or not result.items:
        return "", None
    item = result.items[0]
    text = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
    arguments = item.command.arguments if item.command is not None else None
    return text, str(arguments[0]) if arguments else None


def server_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `extra`, set to run this checkout's server: the checkout first on
    PYTHONPATH (specls need not be installed into the interpreter), and PYTHONSAFEPATH, so that `python -m` does
    not put the working directory first: a replay run inside a copy of this project (the typist's files) would
    otherwise serve that copy's code."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONSAFEPATH"] = "1"
    return env


def served_code(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """Which code a replay's server runs (`server_environment` puts `root` first): the folder, its commit where
    the folder is itself a git checkout (None otherwise: a copy, an archive), and whether tracked files differ
    from that commit. Recorded with each replay, and by the benchmarks that import this checkout's code, so a
    result says what it measured."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, check=False, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root.resolve():  # not a checkout, or a folder inside another one
        return {"root": str(root), "commit": None, "uncommitted_changes": None}
    changed = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"root": str(root), "commit": git("rev-parse", "--short", "HEAD"), "uncommitted_changes": changed}


def serve_command(server_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "lsp_server.app.cli", "serve", *server_args]


class ServerSession:
    """One running server and the client connected to it; documents are tracked as full text."""

    def __init__(self, name: str = "specls-demo") -> None:
        self.client = LanguageClient(name, __version__)
        self.statuses: list[dict[str, Any]] = []
        self.messages: collections.deque[str] = collections.deque(maxlen=20)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.texts: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        self.settings: dict[str, Any] = {}  # what configure() has sent so far
        # Called with (uri, generation id) on specls/suggestionGrown: a suggestion answered in part is whole.
        self.on_grown: Callable[[str, str], None] | None = None
        self._stderr_task: asyncio.Task[None] | None = None

        # pygls registers plain functions only (it sets attributes on them), so bound methods get a wrapper.
        def on_status(params: Any) -> None:
            self._on_status(params)

        def on_show_message(params: types.ShowMessageParams) -> None:
            self._on_show_message(params)

        def on_log_message(params: types.LogMessageParams) -> None:
            self._on_log_message(params)

        def on_grown(params: Any) -> None:
            plain = to_plain(params)
            if self.on_grown is not None and isinstance(plain, dict):
                self.on_grown(str(plain.get("uri")), str(plain.get("suggestionId")))

        self.client.feature("specls/status")(on_status)
        self.client.feature(types.WINDOW_SHOW_MESSAGE)(on_show_message)
        self.client.feature(types.WINDOW_LOG_MESSAGE)(on_log_message)
        self.client.feature(GROWN_NOTIFICATION)(on_grown)

    def _on_status(self, params: Any) -> None:
        self.statuses.append(to_plain(params))

    def _on_show_message(self, params: types.ShowMessageParams) -> None:
        self.messages.append(params.message)

    def _on_log_message(self, params: types.LogMessageParams) -> None:
        if params.type in (types.MessageType.Error, types.MessageType.Warning):
            self.messages.append(params.message)

    # --- lifecycle ---

    async def start(
        self,
        server_args: Sequence[str],
        timeout_s: float = 60.0,
        *,
        env: Mapping[str, str] | None = None,
        initialization_options: Any = None,
        workspace: Path | None = None,
    ) -> None:
        """Start the server with `server_args` (after `specls serve`) and initialize it; `env` adds to this
        process's environment; `workspace` is the folder named as the client's workspace folder."""
        command = serve_command(server_args)
        # Its own session: a Ctrl-C in the terminal goes to the demo, which then shuts the server down itself.
        await self.client.start_io(
            command[0], *command[1:], env=server_environment(env), start_new_session=True
        )
        process = self.client._server
        if process is not None and process.stderr is not None:  # drain it, or a chatty server blocks
            self._stderr_task = asyncio.create_task(self._drain(process.stderr))
        capabilities = types.ClientCapabilities(
            general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
            # As the VS Code extension does: it asks again when a suggestion answered in part is whole.
            experimental={REFRESH_CAPABILITY: True},
        )
        try:
            await asyncio.wait_for(
                self.client.initialize_async(
                    types.InitializeParams(
                        capabilities=capabilities,
                        initialization_options=initialization_options,
                        workspace_folders=[
                            types.WorkspaceFolder(workspace.resolve().as_uri(), workspace.name)
                        ]
                        if workspace is not None
                        else None,
                    )
                ),
                timeout_s,
            )
        except (TimeoutError, RuntimeError) as exc:
            raise ServerError(f"the server did not answer initialize: {exc}{self.stderr_note()}") from exc
        self.client.initialized(types.InitializedParams())

    async def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the model to load; raise ServerError with the server's own message when it fails."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for status in self.statuses:
                if status.get("state") == "ready":
                    return status
                if status.get("state") == "error":
                    raise ServerError(str(status.get("message")))
            self.check_alive()
            await asyncio.sleep(0.05)
        raise ServerError(f"the model did not load within {timeout_s:.0f} s{self.stderr_note()}")

    def check_alive(self) -> None:
        process = self.client._server
        if process is not None and process.returncode is not None:
            raise ServerError(f"the server exited with status {process.returncode}{self.stderr_note()}")

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.stop(), 10)
        process = self.client._server
        if process is not None and process.returncode is None:
            process.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 5)
        if self._stderr_task is not None:
            self._stderr_task.cancel()

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.stderr_tail.append(line.decode("utf-8", errors="replace").rstrip())

    def stderr_note(self) -> str:
        lines = [line for line in self.stderr_tail if line.strip()][-5:]
        return ("; server stderr:\n  " + "\n  ".join(lines)) if lines else ""

    # --- documents ---

    def open(self, uri: str, text: str, language_id: str) -> None:
        self.texts[uri], self.versions[uri] = text, 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, language_id, 1, text))
        )

    def insert(self, uri: str, offset: int, chars: str) -> None:
        """Insert `chars` at `offset` as one incremental edit, as an editor sends a key press."""
        text = self.texts[uri]
        line, character = position_of(text, offset)
        at = types.Position(line, character)
        self.texts[uri] = text[:offset] + chars + text[offset:]
        self.versions[uri] += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(self.versions[uri], uri),
                [types.TextDocumentContentChangePartial(types.Range(at, at), chars)],
            )
        )

    def close(self, uri: str) -> None:
        self.texts.pop(uri, None)
        self.versions.pop(uri, None)
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri))
        )

    # --- requests ---

    async def inline_completion(self, uri: str, offset: int) -> str:
        """The ghost text the server suggests at `offset` ("" for an empty answer)."""
        text, _ = await self.inline_item(uri, offset)
        return text

    async def inline_item(self, uri: str, offset: int) -> tuple[str, str | None]:
        """The suggestion at `offset` and its id (the argument of its `specls.accept` command)."""
        _, answer = self.request_inline(uri, offset)
        return first_suggestion(await answer)

    def request_inline(self, uri: str, offset: int) -> tuple[str, asyncio.Future[Any]]:
        """Ask for a suggestion at `offset` without waiting: (request id for `cancel`, the answer)."""
        line, character = position_of(self.texts[uri], offset)
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri),
            position=types.Position(line, character),
        )
        request_id = str(uuid.uuid4())
        sent = self.client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=request_id
        )
        # Shielded: a caller that stops waiting (the next key) must not cancel pygls's own future, which pygls
        # still resolves when the late answer comes, raising InvalidStateError in its reader.
        return request_id, asyncio.shield(asyncio.wrap_future(sent))

    def cursor_rests(self, uri: str, offset: int) -> None:
        """`specls/cursor`, as the VS Code extension sends it once the cursor has rested 200 ms (a file
        opened or focused, a click, a pause in typing), so the server can start the suggestion there."""
        line, character = position_of(self.texts[uri], offset)
        self.client.protocol.notify(
            "specls/cursor",
            {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}},
        )

    def cancel(self, request_id: str) -> None:
        """`$/cancelRequest`, as an editor sends for the previous request on every keystroke."""
        self.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=request_id))

    def accepted(self, uri: str, suggestion_id: str, length: int, whole: bool) -> None:
        """Tell the server the user took the suggestion (all of it: its command; a part: a notification)."""
        if whole:
            self.client.protocol.send_request(
                types.WORKSPACE_EXECUTE_COMMAND,
                types.ExecuteCommandParams(command="specls.accept", arguments=[suggestion_id]),
            )
        else:
            self.client.protocol.notify(
                "specls/didPartiallyAccept",
                {"uri": uri, "suggestionId": suggestion_id, "acceptedLength": length},
            )

    async def stats(self) -> dict[str, Any]:
        result = await self.client.protocol.send_request_async("specls/stats", {})
        plain = to_plain(result)
        return plain if isinstance(plain, dict) else {}

    def configure(self, **settings: Any) -> None:
        """Change settings the way an editor does (no reload unless a model setting changes). The server
        replaces its editor settings with each message, so every setting sent so far is sent again."""
        self.settings.update(settings)
        self._send_settings()

    def forget_settings(self, *names: str) -> None:
        """Stop sending these settings: the server goes back to their defaults (or the command line's)."""
        for name in names:
            self.settings.pop(name, None)
        self._send_settings()

    def _send_settings(self) -> None:
        self.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams({"specls": dict(self.settings)})
        )
