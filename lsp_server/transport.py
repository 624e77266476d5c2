"""How sessions meet their clients: stdio (one session for the process's life) or TCP (one isolated session
per authenticated connection), and how the process ends.

Framing is LSP's (`Content-Length` headers, then a JSON body), read by `framing.py` rather than by pygls'
runners so that the server decides what ends a session; each bad frame is answered with an error when its
id can be read. Ends:
- stdio: `exit` (code 0 after `shutdown`, else 1, as LSP says), the client gone (stdin at its end, or a
  broken stdout), SIGINT, SIGTERM or SIGHUP all end the session the same way;
- TCP: a connection must open with `initialize` carrying `initializationOptions.token`, the token of this
  server's 0600 token file (`auth.py`), in at most MAX_FIRST_BODY bytes (refused at the header); anything else, and anything that looks like HTTP (a web page's
  `fetch` to localhost), is refused and closed. Each connection gets its own `SpeclsServer` (protocol,
  documents, settings, engine thread); they share the loaded model (`backends/shared.py`). A disconnect or
  `exit` ends that session only; SIGINT/SIGTERM end them all.

Ending a session cancels its generations and waits (bounded) for its engine thread, which stops at the
engine's next cancel check. `exit_process` then leaves with `os._exit`: a thread still inside torch (a model
that is loading has no cancel check) must not meet interpreter teardown, which aborts the process
("terminate called without an active exception").
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from lsp_server.framing import (
    MAX_LINE,
    Frame,
    FrameReader,
    FramingError,
    HttpRequestError,
    LostFramingError,
    encode,
    read_first_message,
    readable_id,
)
from lsp_server.framing import RESYNC_LIMIT as RESYNC_LIMIT  # the framing tests' import path
from lsp_server.language_server import SpeclsServer
from lsp_server.protocol import PARSE_ERROR, SpeclsProtocol

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 1.0  # for the engine threads, so that the process is gone within 2 s even on a busy machine
AUTH_TIMEOUT_S = 10.0  # a TCP connection has this long to authenticate
_HTTP_REFUSAL = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Writer:
    """pygls' writer interface over a write function; a client that is gone ends the session."""

    def __init__(self, write: Callable[[bytes], None], on_gone: Callable[[], None]) -> None:
        self._write = write
        self._on_gone = on_gone

    def write(self, data: bytes) -> None:
        try:
            self._write(data)
        except OSError:  # broken pipe, reset connection
            self._on_gone()

    def close(self) -> None:
        pass


class Session:
    """One client's server: its protocol, documents, settings and engine thread."""

    def __init__(self, server: SpeclsServer, write: Callable[[bytes], None], name: str) -> None:
        assert isinstance(server.protocol, SpeclsProtocol)
        self.server = server
        self.protocol = server.protocol
        self.name = name
        self.ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.protocol.set_writer(_Writer(write, self.end))
        self.protocol.on_exit = self.end

    def dispatch(self, body: bytes) -> None:
        try:
            message = json.loads(body)
        except ValueError as exc:
            self.reject(Frame(bad=body, problems=[f"the message is not JSON ({exc})"]))
            return
        self.dispatch_message(message)

    def dispatch_message(self, message: Any) -> None:
        protocol = self.protocol
        try:
            protocol.handle_message(
                protocol.structure_message(message) if isinstance(message, dict) else message
            )
        except Exception:
            logger.exception("%s: a message could not be handled", self.name)

    def receive(self, frame: Frame) -> None:
        """Handle one frame: its framing problems logged once, its message dispatched, or the bytes that were
        no message answered with an error when their id can be read."""
        if frame.bad is not None:
            self.reject(frame)
            return
        if frame.problems:
            self.server.log(logging.WARNING, f"{self.name}: framing: {'; '.join(frame.problems)}; read on")
        self.dispatch_message(frame.message)

    def reject(self, frame: Frame) -> None:
        request_id = readable_id(frame.bad or b"")
        what = "; ".join(frame.problems) or "unreadable"
        answered = (
            f"answered request {request_id!r} with an error" if request_id is not None else "no id to answer"
        )
        self.server.log(logging.WARNING, f"{self.name}: a message was dropped: {what} ({answered})")
        if request_id is not None:
            self.protocol.send_error(request_id, PARSE_ERROR, f"specls: unreadable message: {what}")

    def end(self, code: int | None = None) -> None:
        """End the session with `code` (None: the LSP code, 0 when `shutdown` came first, else 1)."""
        if code is None:
            code = 0 if self.protocol.shutdown_received else 1
        if not self.ended.done():
            self.ended.set_result(code)

    def stop(self, timeout: float) -> None:
        self.server.scheduler.stop(timeout)

    def join(self, timeout: float) -> bool:
        return self.server.scheduler.join(timeout)


async def _pump(reader: asyncio.StreamReader, session: Session) -> None:
    """Feed `session` every message until the stream ends, or its framing is lost for good."""
    frames = FrameReader(reader)
    while not session.ended.done():
        try:
            frame = await frames.read()
        except LostFramingError as exc:
            session.server.log(
                logging.ERROR, f"{session.name}: ending the session: lost the LSP framing ({exc})"
            )
            session.end(1)
            return
        if frame is None:
            break
        session.receive(frame)
    session.end()


def _on_signals(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    for signum in _SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # Windows, not main thread
            loop.add_signal_handler(signum, callback)


# --- stdio ---


def _feed_stdin(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
    """A daemon thread's loop: stdin bytes into `reader`. Daemon, so a read that never returns (the client
    keeps stdin open) cannot hold the process after the session ended."""
    fd = sys.stdin.fileno()
    try:
        while chunk := os.read(fd, 65536):
            loop.call_soon_threadsafe(reader.feed_data, chunk)
    except (OSError, RuntimeError):  # stdin closed under us, or the loop is gone
        pass
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(reader.feed_eof)


async def _serve_stdio(server: SpeclsServer) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    threading.Thread(target=_feed_stdin, args=(loop, reader), name="specls-stdin", daemon=True).start()
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    session = Session(server, write, "stdio")
    _on_signals(loop, session.end)
    pump = asyncio.ensure_future(_pump(reader, session))
    code = await session.ended
    pump.cancel()
    session.stop(STOP_TIMEOUT_S)
    return code


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run the server's loop to its end, without asyncio.run's teardown (cancelling every task, waiting for
    the default executor): `exit_process` follows at once, and the deadline is 2 s."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop.run_until_complete(main)


def serve_stdio(server: SpeclsServer) -> int:
    """Serve one session on stdin/stdout; the LSP exit code."""
    return _run(_serve_stdio(server))


# --- TCP ---


class TcpServer:
    def __init__(self, make_server: Callable[[], SpeclsServer], token: str, token_path: Path) -> None:
        self._make_server = make_server
        self._token = token
        self._token_path = token_path
        self.sessions: set[Session] = set()
        self._retired: list[Session] = []  # ended sessions whose engine thread may still be finishing
        self._stop = asyncio.Event()

    async def run(self, host: str, port: int, on_listening: Callable[[str], None]) -> int:
        listener = await asyncio.start_server(self._connection, host, port, limit=MAX_LINE)
        _on_signals(asyncio.get_running_loop(), self._stop.set)
        where = ", ".join(str(sock.getsockname()[:2]) for sock in listener.sockets)
        on_listening(where)
        await self._stop.wait()
        listener.close()
        for session in list(self.sessions):
            session.end()
            session.stop(0)
            self._retired.append(session)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for session in self._retired:
            session.join(max(0.0, deadline - time.monotonic()))
        return 0

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        name = f"tcp {peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "tcp"
        session: Session | None = None
        try:
            try:
                body = await asyncio.wait_for(read_first_message(reader), AUTH_TIMEOUT_S)
            except HttpRequestError as exc:
                logger.warning("%s: refused an HTTP request (%s)", name, exc)
                writer.write(_HTTP_REFUSAL)
                return
            except FramingError as exc:
                logger.warning("%s: closed before authenticating: %s", name, exc)
                return
            except TimeoutError:
                logger.warning(
                    "%s: closed before authenticating: no initialize with a token within %g s",
                    name,
                    AUTH_TIMEOUT_S,
                )
                return
            if body is None:  # connect and close: a port scan, or a client giving up
                return
            message = self._authenticate(body, writer, name)
            if message is None:
                return
            session = Session(self._make_server(), writer.write, name)
            self.sessions.add(session)
            logger.info("%s: session started", name)
            session.dispatch_message(message)
            pump = asyncio.ensure_future(_pump(reader, session))
            await session.ended
            pump.cancel()
            logger.info("%s: session ended", name)
        except (OSError, asyncio.IncompleteReadError) as exc:
            logger.info("%s: connection lost (%s)", name, exc)
        finally:
            if session is not None:
                self.sessions.discard(session)
                session.stop(0)  # its engine thread ends at its next cancel check; joined at exit
                self._retired = [s for s in self._retired if not s.join(0)] + [session]
            with contextlib.suppress(OSError):
                await writer.drain()
            writer.close()

    def _authenticate(self, body: bytes, writer: asyncio.StreamWriter, name: str) -> dict[str, Any] | None:
        """The `initialize` message without its token, or None (answered and logged) when it is not one
        that carries this server's token."""
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            logger.warning("%s: refused: the first message is not JSON-RPC", name)
            return None
        params = message.get("params")
        options = params.get("initializationOptions") if isinstance(params, dict) else None
        token = options.get("token") if isinstance(options, dict) else None
        if (
            message.get("method") == "initialize"
            and isinstance(token, str)
            and hmac.compare_digest(token.encode("utf-8", "replace"), self._token.encode("utf-8"))
        ):
            assert isinstance(options, dict)
            del options["token"]  # not a setting
            return message
        logger.warning("%s: refused: no valid token in the first message", name)
        if "id" in message:
            reason = (
                "specls: this TCP server accepts only an `initialize` request whose "
                f"initializationOptions.token is the token in {self._token_path}"
            )
            error = {"code": -32600, "message": reason}
            writer.write(encode({"jsonrpc": "2.0", "id": message["id"], "error": error}))
        return None


def serve_tcp(
    make_server: Callable[[], SpeclsServer],
    host: str,
    port: int,
    token: str,
    token_path: Path,
    on_listening: Callable[[str], None],
) -> int:
    """Serve TCP sessions until SIGINT/SIGTERM; OSError when the address cannot be bound."""
    return _run(TcpServer(make_server, token, token_path).run(host, port, on_listening))


def exit_process(code: int) -> None:
    """Flush what the process wrote and leave now (see the module docstring for why not `sys.exit`)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
