"""A line among the names of a parenthesized `from M import (` block, or of an `__all__` list: which names it
may import, or list.

Package `__init__.py` files re-export a module's names one per line, often sorted by a formatter (ruff's and
isort's order: constants, then classes, then the rest, each alphabetically). At such a line the 0.5B wrote a
plausible name the module does not define (`E2BSandboxSessionOptions` for `E2BSandboxSessionState`), one the
block already lists, or the next line again: of 17 such line starts of recent code it wrote 2 exactly, the 1.5B 9
of 10 (docs/line-starts.md). The module's names are known to the workspace (`context.workspace`); these pure
functions find the block around the cursor and narrow those names to the ones the line can still be:
not listed yet, and, where the block is sorted, between the names around it. A package's `__all__` lists the
names it re-exports, one string a line, as often sorted (ruff's RUF022): its lines are narrowed the same way,
to the names the file binds and the package's submodules (the 0.5B missed 8 of 28 such line starts, 4 with it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

_BLOCK_START = re.compile(r"[ \t]*from[ \t]+(?P<module>[\w.]+)[ \t]+import[ \t]*\((?P<names>[^)#]*)(?:#.*)?")
_NAMES_LINE = re.compile(r"[ \t]*(?P<names>[\w \t,]*?)[ \t]*(?P<close>\))?[ \t]*,?[ \t]*(?:#.*)?")
_PARTIAL_NAME = re.compile(r"[ \t]*\w*")
MAX_BLOCK_LINES = 400  # a longer run of name lines is no import block a formatter wrote
_ALL_START = re.compile(r"[ \t]*__all__[ \t]*(?::[^=]*)?\+?=[ \t]*[\[(](?P<entries>[^\])#]*)(?:#.*)?")
_ENTRIES_LINE = re.compile(
    r"[ \t]*(?P<entries>(?:[\"']\w+[\"'][ \t]*,?[ \t]*)*)(?P<close>[\])])?[ \t]*,?[ \t]*(?:#.*)?"
)
_PARTIAL_ENTRY = re.compile(r"[ \t]*(?:[\"']\w*)?")
_QUOTED = re.compile(r"([\"'])(\w+)\1")


@dataclass(frozen=True)
class ImportBlock:
    """The `from M import (` block whose names the cursor's line is among."""

    module: str  # as spelled after `from`: ".events", "agents.tracing"
    above: tuple[str, ...]  # the names listed before the cursor's line, in order
    below: tuple[str, ...]  # the names listed after it, up to the block's `)`


def import_block_at(text: str, offset: int) -> ImportBlock | None:
    """The parenthesized `from` import whose names the cursor's line starts, or None: the text before the
    cursor on its line is indentation and at most the start of a name, nothing follows it on that line, every
    line between the block's `from` line and the cursor lists names (or is blank, or a comment), and the block
    is not closed above the cursor."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end == -1 else line_end
    if not _PARTIAL_NAME.fullmatch(text[line_start:offset]) or text[offset:line_end].strip():
        return None
    above: list[str] = []
    module = None
    for line in _lines_before(text, line_start):
        start = _BLOCK_START.fullmatch(line)
        if start is not None:
            module = start["module"]
            above[:0] = _names(start["names"])
            break
        listed = _NAMES_LINE.fullmatch(line)
        if listed is None or listed["close"]:
            return None
        above[:0] = _names(listed["names"])
    if module is None:
        return None
    below: list[str] = []
    for line in _lines_after(text, line_end):
        listed = _NAMES_LINE.fullmatch(line)
        if listed is None:
            break  # the block's `)` is missing: the cursor's line may be where it goes
        below.extend(_names(listed["names"]))
        if listed["close"]:
            break
    return ImportBlock(module, tuple(above), tuple(below))


@dataclass(frozen=True)
class ExportList:
    """The `__all__` list whose strings the cursor's line is among."""

    above: tuple[str, ...]  # the names listed before the cursor's line, in order
    below: tuple[str, ...]  # the names listed after it, up to the list's closing bracket
    quote: str  # the quote its strings are written with
    # Each line above that lists names ends with a comma: a formatter's one name a line, whose last name has its
    # comma too (the 0.5B left it out at 2 of 28 such line starts).
    commas: bool = False


def export_list_at(text: str, offset: int) -> ExportList | None:
    """The `__all__ = [` list whose strings the cursor's line starts, or None: the text before the cursor on its
    line is indentation and at most the start of a string, nothing follows it on that line, every line between
    `__all__ = [` and the cursor lists strings of names (or is blank, or a comment), and the list closes below
    the cursor (an unclosed list's line may be its end)."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end == -1 else line_end
    if not _PARTIAL_ENTRY.fullmatch(text[line_start:offset]) or text[offset:line_end].strip():
        return None
    above: list[tuple[str, str]] = []
    commas = True
    for line in _lines_before(text, line_start):
        start = _ALL_START.fullmatch(line)
        listed = start or _ENTRIES_LINE.fullmatch(line)
        if listed is None or (start is None and listed["close"]):
            return None
        entries = listed["entries"].rstrip(" \t")
        above[:0] = _QUOTED.findall(entries)
        commas = commas and (not entries or entries.endswith(","))
        if start is not None:
            break
    else:
        return None
    below: list[tuple[str, str]] = []
    for line in _lines_after(text, line_end):
        listed = _ENTRIES_LINE.fullmatch(line)
        if listed is None:
            return None
        below.extend(_QUOTED.findall(listed["entries"]))
        if listed["close"]:
            quotes = [quote for quote, _ in above + below]
            quote = max("\"'", key=quotes.count)  # the double quote where none is written, or on a tie
            return ExportList(
                tuple(name for _, name in above),
                tuple(name for _, name in below),
                quote,
                commas and bool(above),
            )
    return None


def _lines_before(text: str, line_start: int) -> Iterator[str]:
    """The lines above the one starting at `line_start`, nearest first, MAX_BLOCK_LINES at most (this runs at
    every request: a large file is not split whole)."""
    end = line_start - 1
    for _ in range(MAX_BLOCK_LINES):
        if end < 0:
            return
        start = text.rfind("\n", 0, end) + 1
        yield text[start:end]
        end = start - 1


def _lines_after(text: str, line_end: int) -> Iterator[str]:
    """The lines below the one ending at `line_end`, MAX_BLOCK_LINES at most."""
    start = line_end + 1
    for _ in range(MAX_BLOCK_LINES):
        if start > len(text):
            return
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        yield text[start:end]
        start = end + 1


def _names(listed: str) -> list[str]:
    """The names a line of a block imports (`A, B as b,` gives A and B)."""
    return [words[0] for item in listed.split(",") if (words := item.split()) and words[0].isidentifier()]


SortKey = Callable[[str], tuple[Any, ...]]


def member_type_key(name: str) -> tuple[int, str, str]:
    """The order of ruff's and isort's `order-by-type`: CONSTANTS, then Classes, then the rest; each
    alphabetically, case aside, then by case."""
    if len(name) > 1 and name.isupper():
        kind = 0
    elif name[:1].isupper():
        kind = 1
    else:
        kind = 2
    return kind, name.lower(), name


def _case_blind_key(name: str) -> tuple[str, str]:
    return name.lower(), name


def _plain_key(name: str) -> tuple[str]:
    return (name,)


SORT_KEYS: tuple[SortKey, ...] = (member_type_key, _case_blind_key, _plain_key)


def block_order(names: Iterable[str]) -> SortKey | None:
    """The first of SORT_KEYS the names are in order by; None where they are fewer than three (too few to
    tell an order from chance) or in none of those orders."""
    listed = list(names)
    if len(listed) < 3:
        return None
    for key in SORT_KEYS:
        keys = [key(name) for name in listed]
        if all(a <= b for a, b in zip(keys, keys[1:], strict=False)):
            return key
    return None


def names_for_line(bound: frozenset[str], block: ImportBlock | ExportList) -> frozenset[str]:
    """Of the names the block's module binds (or the module of an `__all__` list), those the cursor's line may
    import (or list): not listed in the block, and where the block's names are sorted, between the name above
    and the name below in that order."""
    listed = set(block.above) | set(block.below)
    fitting = {name for name in bound if name not in listed}
    key = block_order(block.above + block.below)
    if key is None:
        return frozenset(fitting)
    low = key(block.above[-1]) if block.above else None
    high = key(block.below[0]) if block.below else None
    return frozenset(
        name for name in fitting if (low is None or low < key(name)) and (high is None or key(name) < high)
    )
