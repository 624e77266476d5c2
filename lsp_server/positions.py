"""Positions in a document's text: LSP's code units (utf-8, utf-16, utf-32) to character indices, and a
per-line offset index in characters and UTF-8 bytes whose lazily applied shift keeps a keystroke in a
multi-megabyte file from costing O(lines). `DocumentStore` (`documents.py`) is their one user."""

from __future__ import annotations


class PositionError(ValueError):
    """A position that does not address a character boundary of the document."""


class LineIndex:
    """Start offset of every line, in characters and in UTF-8 bytes.

    Entries from `shift_from` on are stored without a pending (char, byte) shift, which is added on read
    and folded in lazily: consecutive edits near one place touch only the entries between them.
    """

    def __init__(self, text: str) -> None:
        self.chars = [0]
        self.bytes = [0]
        byte_pos = 0
        char_pos = 0
        for line in text.split("\n")[:-1]:
            char_pos += len(line) + 1
            byte_pos += utf8_len(line) + 1
            self.chars.append(char_pos)
            self.bytes.append(byte_pos)
        self.shift_from = len(self.chars)
        self.char_shift = 0
        self.byte_shift = 0

    def __len__(self) -> int:
        return len(self.chars)

    def copy(self) -> LineIndex:
        clone = LineIndex("")
        clone.chars, clone.bytes = list(self.chars), list(self.bytes)
        clone.shift_from, clone.char_shift, clone.byte_shift = (
            self.shift_from,
            self.char_shift,
            self.byte_shift,
        )
        return clone

    def char_start(self, line: int) -> int:
        return self.chars[line] + (self.char_shift if line >= self.shift_from else 0)

    def byte_start(self, line: int) -> int:
        return self.bytes[line] + (self.byte_shift if line >= self.shift_from else 0)

    def _fold(self, start: int, stop: int, char_delta: int, byte_delta: int) -> None:
        for i in range(start, stop):
            self.chars[i] += char_delta
            self.bytes[i] += byte_delta

    def line_of_char(self, offset: int) -> int:
        """The line containing character `offset` (binary search over the lazily shifted starts)."""
        lo, hi = 0, len(self.chars) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.char_start(mid) <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def replace(
        self, first: int, last: int, new_text: str, start_char: int, start_byte: int, deltas: tuple[int, int]
    ) -> None:
        """Text from a point on line `first` to a point on line `last` was replaced by `new_text`, which
        starts at (start_char, start_byte); later lines move by `deltas` (characters, bytes)."""
        # Entries up to `last` become exact, so the pending shift covers only lines after the edit.
        if self.shift_from <= last:
            self._fold(self.shift_from, last + 1, self.char_shift, self.byte_shift)
            self.shift_from = last + 1
        # Exact entries between the edit and the pending region join it (cost: the distance between them),
        # then the whole region from the edit on moves by the deltas, lazily.
        if self.char_shift or self.byte_shift:
            self._fold(last + 1, self.shift_from, -self.char_shift, -self.byte_shift)
        self.shift_from = last + 1
        self.char_shift += deltas[0]
        self.byte_shift += deltas[1]
        new_chars: list[int] = []
        new_bytes: list[int] = []
        pos = new_text.find("\n")
        while pos != -1:
            new_chars.append(start_char + pos + 1)
            new_bytes.append(start_byte + utf8_len(new_text[: pos + 1]))
            pos = new_text.find("\n", pos + 1)
        self.chars[first + 1 : last + 1] = new_chars
        self.bytes[first + 1 : last + 1] = new_bytes
        self.shift_from += len(new_chars) - (last - first)


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def units(text: str, encoding: str) -> int:
    """Length of `text` in the code units of `encoding`."""
    if encoding == "utf-32" or text.isascii():
        return len(text)
    if encoding == "utf-16":
        return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
    return utf8_len(text)


def char_index(line_text: str, units: int, encoding: str) -> int:
    """Index into `line_text` of the character starting `units` code units in; PositionError otherwise."""
    if units < 0:
        raise PositionError(f"negative character offset {units}")
    if encoding == "utf-32" or line_text.isascii():
        if units > len(line_text):
            raise PositionError(f"character {units} is past the end of a line of length {len(line_text)}")
        return units
    count = 0
    for index, ch in enumerate(line_text):
        if count == units:
            return index
        code = ord(ch)
        if encoding == "utf-16":
            width = 2 if code > 0xFFFF else 1
        else:
            width = 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
        count += width
        if count > units:
            raise PositionError(f"character {units} ({encoding}) falls inside the character {ch!r}")
    if count == units:
        return len(line_text)
    raise PositionError(f"character {units} ({encoding}) is past the end of a line of length {count}")
