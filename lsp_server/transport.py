"""How sessions meet their clients: stdio (one session for the process's life) or TCP (one isolated session
per authenticated connection), and how the process ends.

Framing is LSP's (`Content-Length` headers, then a JSON body), read here rather than by pygls' runners so
that the server decides what ends a session. `FrameReader` recovers from a wrong length (short, long,
counted in characters, not a number, absurd, missing): the message ends where its JSON ends, garbage is
skipped to the next `Content-Length` header, each bad frame is logged once and answered with an error when
its id can be read; only RESYNC_LIMIT bytes without a header end the session. Ends:
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
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsp_server.language_server import SpeclsServer
from lsp_server.protocol import PARSE_ERROR, SpeclsProtocol

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 1.0  # for the engine threads, so that the process is gone within 2 s even on a busy machine
AUTH_TIMEOUT_S = 10.0  # a TCP connection has this long to authenticate
MAX_LINE = 64 * 1024  # longest header line
MAX_BODY = 256 * 1024 * 1024  # largest message (a multi-MB file in didOpen fits easily)
MAX_FIRST_BODY = 64 * 1024  # TCP: the largest first message before authenticating (an initialize is ~10 KB)
RESYNC_LIMIT = 64 * 1024 * 1024  # bytes skipped looking for a header before the session is given up
STALL_S = 0.3  # a message whose length was wrong: how long to wait for more bytes before deciding
_CHUNK = 1 << 20
_HTTP_REQUEST_LINE = re.compile(rb"^[A-Z]{3,10} \S+ HTTP/\d")
_HTTP_REFUSAL = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class FramingError(ValueError):
    """Bytes that are not an LSP message."""


class HttpRequestError(FramingError):
    """An HTTP request where an LSP message should be."""


class LostFramingError(FramingError):
    """A stream in which no `Content-Length` header can be found again: the session cannot go on."""


_CONTENT_LENGTH = re.compile(rb"(?i)content-length[ \t]*:")
_HEADER_LINE = re.compile(rb"^[A-Za-z][A-Za-z0-9-]*[ \t]*:")
_HEADERS_END = re.compile(rb"\r?\n\r?\n")
_READ_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,15}(?![\d.eE])|"(?:[^"\\\r\n]|\\.){0,200}")')
_WHITESPACE = b" \t\r\n"


@dataclass
class Frame:
    """One message off the wire: its decoded JSON (`message`), or the bytes that were not one (`bad`,
    answered with an error when an id can be read); `problems` say what was wrong with its framing."""

    message: Any = None
    bad: bytes | None = None
    problems: list[str] = field(default_factory=list)


def readable_id(data: bytes) -> int | str | None:
    """The JSON-RPC id of a message that could not be decoded, when one can be read off its bytes."""
    match = _READ_ID.search(data[:4096])
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, int | str) else None


class FrameReader:
    """LSP framing that recovers. `Content-Length` is trusted while the bytes agree with it; when they do not
    (a length that is short, long, not a number, absurd or missing, e.g. a client that counted characters
    instead of UTF-8 bytes), the message's real end is where its JSON ends, and bytes that are no message at
    all are skipped up to the next `Content-Length` header. Each frame reports what was wrong, once.
    `LostFramingError` when RESYNC_LIMIT bytes pass without a header: the stream cannot be read any more."""

    def __init__(self, reader: asyncio.StreamReader, *, stall_s: float = STALL_S) -> None:
        self._reader = reader
        self._buf = bytearray()
        self._eof = False
        self._stall_s = stall_s

    async def _fill(self, timeout: float | None = None) -> bool:
        """Append what the stream has; False at its end, or when `timeout` passed with nothing new."""
        if self._eof:
            return False
        try:
            chunk = await asyncio.wait_for(self._reader.read(_CHUNK), timeout)
        except TimeoutError:
            return False
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    async def read(self) -> Frame | None:
        """The next frame, or None at the end of the stream."""
        problems: list[str] = []
        skipped = 0
        while True:
            start = _skip_whitespace(self._buf, 0)
            if start == len(self._buf):
                self._buf.clear()
                if not await self._fill():
                    return None
                continue
            if self._buf[start : start + 1] == b"{":  # a body without headers
                problems.append("a message without a Content-Length header")
                return await self._unsized(start, problems)
            ends = _HEADERS_END.search(self._buf, start, start + MAX_LINE)
            if ends is None or not _HEADER_LINE.match(self._buf, start):
                if _HEADER_LINE.match(self._buf, start) and len(self._buf) - start <= MAX_LINE:
                    if not await self._fill():
                        return None
                    continue
                found = _CONTENT_LENGTH.search(self._buf, start + 1)
                if found is None:  # keep a tail that may hold the start of a header
                    keep = max(start, len(self._buf) - 32)
                    skipped += keep
                    del self._buf[:keep]
                    if skipped > RESYNC_LIMIT:
                        raise LostFramingError(
                            f"no Content-Length header in the last {skipped // (1 << 20)} MB of input"
                        )
                    if not await self._fill():
                        return None
                    continue
                skipped += found.start()
                problems.append(f"skipped {found.start() - start} bytes that were not a message")
                del self._buf[: found.start()]
                continue
            length, header_problem = _content_length(bytes(self._buf[start : ends.start()]))
            body = ends.end()
            if header_problem:
                problems.append(header_problem)
            if length is None:
                return await self._unsized(body, problems)
            return await self._sized(body, length, problems)

    async def _sized(self, body: int, length: int, problems: list[str]) -> Frame | None:
        """A body whose length the header gives, checked against where its JSON ends."""
        while len(self._buf) < body + length:
            if not await self._fill(self._stall_s):
                # Nothing more for a while: a whole message with a length that is too long?
                whole = self._json_end(body, final=True)
                if isinstance(whole, int):
                    problems.append(f"Content-Length {length}, but the message is {whole - body} bytes")
                    return self._take(body, whole, problems)
                if self._eof:  # the stream ended inside a message
                    return None
        try:
            message = json.loads(self._buf[body : body + length])
        except ValueError:
            end = await self._find_end(body)
            if end is not None and end != body + length:
                problems.append(f"Content-Length {length}, but the message is {end - body} bytes")
                return self._take(body, end, problems)
            return self._bad(body, body + length, problems)
        del self._buf[: body + length]
        return Frame(message, problems=problems)

    async def _unsized(self, body: int, problems: list[str]) -> Frame:
        end = await self._find_end(body)
        if end is None:
            return self._bad(body, body, problems)
        return self._take(body, end, problems)

    async def _find_end(self, body: int) -> int | None:
        """Where the JSON value starting at `body` ends, reading on while it is incomplete (until the stream
        stalls); None when it is not JSON."""
        tried = 0
        while True:
            size = len(self._buf)
            if size >= 2 * tried or size < _CHUNK or self._eof:
                tried = size
                end = self._json_end(body, final=False)
                if isinstance(end, int):
                    return end
                if end == "bad" or size - body > MAX_BODY:
                    return None
            if not await self._fill(self._stall_s):
                end = self._json_end(body, final=True)
                return end if isinstance(end, int) else None

    def _json_end(self, body: int, *, final: bool) -> int | str:
        """The byte offset where the JSON value at `body` ends, "partial" when it may go on, "bad" if not."""
        text = self._buf[body:].decode("utf-8", "surrogateescape")
        try:
            _, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError as exc:
            stripped = len(text.rstrip())
            partial = exc.msg.startswith("Unterminated string") or exc.pos >= stripped
            return "partial" if partial and not final else "bad"
        return body + len(text[:end].encode("utf-8", "surrogateescape"))

    def _take(self, body: int, end: int, problems: list[str]) -> Frame:
        data = bytes(self._buf[body:end])
        del self._buf[:end]
        return Frame(json.loads(data), problems=problems)

    def _bad(self, body: int, end: int, problems: list[str]) -> Frame:
        """Bytes that are not JSON: reported, and dropped up to `end`; the next read looks for a header after
        them (a body whose length was wrong may hide the next message's header)."""
        data = bytes(self._buf[body : end if end > body else body + 4096])
        if (header := _CONTENT_LENGTH.search(data)) is not None:  # the next message's id is not this one's
            data = data[: header.start()]
        del self._buf[: max(end, body)]
        if end == body:  # drop at least the bytes the search cannot take for a header
            del self._buf[:1]
        return Frame(bad=data, problems=problems + ["the message is not JSON"])


_DECODER = json.JSONDecoder()


def _skip_whitespace(buf: bytearray, start: int) -> int:
    while start < len(buf) and buf[start] in _WHITESPACE:
        start += 1
    return start


def _content_length(headers: bytes) -> tuple[int | None, str]:
    """The Content-Length of a header block, or None with what is wrong with it."""
    for line in headers.splitlines():
        name, _, value = line.partition(b":")
        if name.strip().lower() != b"content-length":
            continue
        text = value.strip()[:24].decode("ascii", "replace")
        try:
            length = int(text)
        except ValueError:
            return None, f"Content-Length {text!r} is not a number"
        if not 0 <= length <= MAX_BODY:
            return None, f"Content-Length {length} is out of range"
        return length, ""
    return None, "no Content-Length header"


async def read_first_message(reader: asyncio.StreamReader) -> bytes | None:
    """A TCP connection's first message (strict: Content-Length and Content-Type only, at most MAX_FIRST_BODY
    bytes, refused at the header when it says more), or None at the end of the stream."""
    length: int | None = None
    first = True
    while True:
        try:
            line = await reader.readline()
        except ValueError as exc:  # longer than MAX_LINE
            raise FramingError("header line too long") from exc
        if not line:
            return None
        if first and _HTTP_REQUEST_LINE.match(line):
            raise HttpRequestError(line[:80].decode("ascii", "replace").strip())
        stripped = line.strip()
        if not stripped:
            if length is not None:
                break
            if not first:
                raise FramingError("headers without Content-Length")
            continue
        first = False
        name, colon, value = stripped.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise FramingError(f"bad Content-Length {value[:20]!r}") from None
            if not 0 <= length <= MAX_FIRST_BODY:
                raise FramingError(
                    f"the first message would be {length} bytes; at most {MAX_FIRST_BODY} before authenticating"
                )
        elif not colon or key != b"content-type":
            raise FramingError(f"unexpected header {stripped[:40]!r}")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        return None


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


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
