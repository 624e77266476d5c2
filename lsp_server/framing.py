"""LSP's framing (`Content-Length` headers, then a JSON body), read so that the server decides what ends a
session (`transport.py` runs the sessions).

`FrameReader` recovers from a wrong length (short, long, counted in characters, not a number, absurd,
missing): the message ends where its JSON ends, garbage is skipped to the next `Content-Length` header, each
bad frame is logged once and answered with an error when its id can be read; only RESYNC_LIMIT bytes
without a header end the session. A TCP connection's first message is read strictly
(`read_first_message`): at most MAX_FIRST_BODY bytes, and anything that looks like HTTP is refused.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_LINE = 64 * 1024  # longest header line
MAX_BODY = 256 * 1024 * 1024  # largest message (a multi-MB file in didOpen fits easily)
MAX_FIRST_BODY = 64 * 1024  # TCP: the largest first message before authenticating (an initialize is ~10 KB)
RESYNC_LIMIT = 64 * 1024 * 1024  # bytes skipped looking for a header before the session is given up
STALL_S = 0.3  # a message whose length was wrong: how long to wait for more bytes before deciding
_CHUNK = 1 << 20
_HTTP_REQUEST_LINE = re.compile(rb"^[A-Z]{3,10} \S+ HTTP/\d")


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
