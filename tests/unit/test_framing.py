"""The LSP frame reader recovers from every wrong Content-Length: each bad frame is reported once, the
message it carried is read when its JSON can be found, and the next well-formed message is always read."""

from __future__ import annotations

import asyncio
import json

import pytest

from lsp_server.transport import RESYNC_LIMIT, Frame, FrameReader, LostFramingError, readable_id

TEXT = "x = 'café 日本語 😀'"


def _body(request_id: int, text: str = TEXT) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "test/echo", "params": {"text": text}}
    return json.dumps(message, ensure_ascii=False).encode("utf-8")


def _frame(body: bytes, length: int | str | None = None) -> bytes:
    if length is None:
        length = len(body)
    return b"Content-Length: %s\r\n\r\n" % str(length).encode() + body


async def _read_all(chunks: list[bytes], *, pause_after_first: float = 0.0) -> list[Frame]:
    reader = asyncio.StreamReader()
    frames = FrameReader(reader, stall_s=0.05)

    async def feed() -> None:
        for index, chunk in enumerate(chunks):
            reader.feed_data(chunk)
            if index == 0 and pause_after_first:
                await asyncio.sleep(pause_after_first)
        reader.feed_eof()

    feeder = asyncio.ensure_future(feed())
    out: list[Frame] = []
    while (frame := await frames.read()) is not None:
        out.append(frame)
    await feeder
    return out


def _ids(frames: list[Frame]) -> list[object]:
    return [f.message.get("id") if isinstance(f.message, dict) else None for f in frames]


def _char_length(body: bytes) -> int:
    return len(body.decode("utf-8"))  # the client bug: characters, not UTF-8 bytes


@pytest.mark.parametrize(
    ("name", "length"),
    [
        ("short", lambda b: len(b) - 10),
        ("long", lambda b: len(b) + 10),
        ("characters", _char_length),
        ("not a number", lambda b: "ten"),
        ("absurd", lambda b: 10**15),
        ("negative", lambda b: -5),
    ],
)
def test_a_wrong_length_is_reported_and_the_message_and_the_next_are_read(name: str, length: object) -> None:
    bad = _body(1)
    assert callable(length)
    frames = asyncio.run(_read_all([_frame(bad, length(bad)) + _frame(_body(2)) + _frame(_body(3))]))
    assert _ids(frames) == [1, 2, 3], name
    assert frames[0].problems and not frames[1].problems and not frames[2].problems
    assert frames[0].message["params"]["text"] == TEXT


def test_a_length_too_long_with_nothing_after_it_is_read_when_the_stream_stalls() -> None:
    bad = _body(1)
    frames = asyncio.run(_read_all([_frame(bad, len(bad) + 10), _frame(_body(2))], pause_after_first=0.3))
    assert _ids(frames) == [1, 2]
    assert "Content-Length" in frames[0].problems[0]


def test_missing_headers_garbage_and_bad_json_are_skipped_to_the_next_header() -> None:
    stream = (
        b"Content-Type: text/plain\r\n\r\n"
        + _body(1)  # no Content-Length
        + _body(2)  # no headers at all
        + b"\x00\xffgarbage that is no message"
        + _frame(b'{"jsonrpc": "2.0", "id": 3, "method": nope}')  # not JSON: reported with its id
        + _frame(_body(4))
    )
    frames = asyncio.run(_read_all([stream]))
    assert [f.bad is not None for f in frames] == [False, False, True, False]
    assert _ids(frames) == [1, 2, None, 4]
    assert readable_id(frames[2].bad or b"") == 3
    assert any("skipped" in p for p in frames[2].problems)  # the garbage, reported with the next frame


def test_a_message_in_many_small_pieces_is_read_whole() -> None:
    data = _frame(_body(1, "y" * 100_000)) + _frame(_body(2))
    chunks = [data[i : i + 777] for i in range(0, len(data), 777)]
    frames = asyncio.run(_read_all(chunks))
    assert _ids(frames) == [1, 2] and not frames[0].problems


def test_a_stream_without_any_header_is_given_up() -> None:
    async def run() -> None:
        reader = asyncio.StreamReader()
        frames = FrameReader(reader, stall_s=0.05)
        chunk = b"z" * (1 << 20)
        for _ in range(RESYNC_LIMIT // len(chunk) + 2):
            reader.feed_data(chunk)
        reader.feed_eof()
        with pytest.raises(LostFramingError, match="no Content-Length header"):
            await frames.read()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"id": 7, "x', 7),
        (b'{"method": "a", "id": "r-1"', "r-1"),
        (b'{"id": {"a": 1}}', None),
        (b"{", None),
    ],
)
def test_readable_id(data: bytes, expected: object) -> None:
    assert readable_id(data) == expected
