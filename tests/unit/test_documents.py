"""DocumentStore: position encodings, strict validation, incremental edits vs a fresh parse."""

from __future__ import annotations

import random

import pytest

from lsp_server.documents import (
    DocumentStore,
    OutOfSyncError,
    PositionError,
    TextChange,
    UnknownDocumentError,
)
from lsp_server.languages import new_parser

URI = "file:///w/a.py"
SOURCE = 'def 函数(x):\n    s = "😀 emoji"\n    return x  # 注释 🎉\n\nclass K:\n    pass\n'


def _units_before(text: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-16":
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def _sexp(tree) -> str:  # type: ignore[no-untyped-def]
    return str(tree.root_node)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_offset_and_position_round_trip_on_non_ascii(encoding: str) -> None:
    store = DocumentStore(encoding)
    store.open(URI, "python", 1, SOURCE)
    for offset in range(len(SOURCE) + 1):
        line = SOURCE.count("\n", 0, offset)
        line_start = SOURCE.rfind("\n", 0, offset) + 1
        character = _units_before(SOURCE[line_start:offset], encoding)
        assert store.position_at(URI, offset) == (line, character)
        assert store.offset_at(URI, line, character) == offset


@pytest.mark.parametrize(
    ("encoding", "line", "character", "why"),
    [
        ("utf-16", 1, 10, "inside the surrogate pair of 😀"),
        ("utf-8", 0, 5, "inside the UTF-8 bytes of 函"),
        ("utf-16", 0, 99, "past the end of the line"),
        ("utf-16", 99, 0, "past the last line"),
        ("utf-32", -1, 0, "negative line"),
        ("utf-8", 0, -1, "negative character"),
    ],
)
def test_bad_positions_raise(encoding: str, line: int, character: int, why: str) -> None:
    store = DocumentStore(encoding)
    store.open(URI, "python", 1, SOURCE)
    with pytest.raises(PositionError):
        store.offset_at(URI, line, character)


def test_bad_change_leaves_document_untouched() -> None:
    store = DocumentStore("utf-16")
    store.open(URI, "python", 1, SOURCE)
    tree_before = _sexp(store.get(URI).tree)
    good = TextChange((0, 0, 0, 0), "# hi\n")
    bad = TextChange((2, 10, 2, 11), "x")  # after `good`, line 2 is `    s = "😀...`: col 10 splits 😀
    with pytest.raises(PositionError):
        store.change(URI, 2, [good, bad])
    doc = store.get(URI)
    assert doc.text == SOURCE
    assert doc.version == 1
    assert _sexp(doc.tree) == tree_before
    assert store.offset_at(URI, 4, 0) == SOURCE.index("class")
    # The client applied what we could not, so our copy is out of sync until a full text resyncs it.
    with pytest.raises(OutOfSyncError):
        store.servable(URI)
    with pytest.raises(OutOfSyncError):
        store.change(URI, 3, [good])  # an incremental edit cannot apply to an untrusted copy
    store.change(URI, 4, [TextChange(None, "# hi\n" + SOURCE)])
    assert store.servable(URI).text == "# hi\n" + SOURCE


def test_a_version_that_does_not_go_up_is_refused_until_a_full_text() -> None:
    store = DocumentStore("utf-16")
    store.open(URI, "python", 5, "a = 1\n")
    with pytest.raises(OutOfSyncError, match="version 5 does not follow 5"):
        store.change(URI, 5, [TextChange((0, 0, 0, 0), "b")])
    assert store.get(URI).text == "a = 1\n" and store.get(URI).version == 5
    with pytest.raises(OutOfSyncError):
        store.servable(URI)
    store.change(URI, 3, [TextChange(None, "c = 3\n")])  # a full text resyncs; the version never goes back
    assert store.servable(URI).text == "c = 3\n" and store.get(URI).version == 5


def test_a_lone_carriage_return_makes_a_document_unservable_until_it_is_gone() -> None:
    store = DocumentStore("utf-16")
    store.open(URI, "python", 1, "a = 1\r\nb = 2\r\n")
    assert store.servable(URI).line_ending_at(0) == "\r\n"
    store.change(URI, 2, [TextChange((0, 5, 1, 0), "\r")])  # the "\r\n" becomes a lone "\r"
    with pytest.raises(OutOfSyncError, match="lone carriage return"):
        store.servable(URI)
    store.change(URI, 3, [TextChange(None, "a = 1\nb = 2\n")])
    assert store.servable(URI).line_ending_at(1) == "\n"
    store.change(URI, 4, [TextChange((1, 5, 1, 5), "\rx")])  # a new one, typed
    assert not store.get(URI).servable


def test_unknown_document() -> None:
    store = DocumentStore()
    with pytest.raises(UnknownDocumentError):
        store.get("file:///nope.py")
    with pytest.raises(ValueError):
        store.position_encoding = "utf-7"


def test_crlf_terminator_is_not_part_of_the_line() -> None:
    store = DocumentStore()
    store.open(URI, "python", 1, "a = 1\r\nb = 2\r\n")
    assert store.offset_at(URI, 1, 5) == 12
    with pytest.raises(PositionError):
        store.offset_at(URI, 0, 6)  # would address the "\r"


@pytest.mark.parametrize(
    ("language_id", "uri", "text"),
    [
        ("python", "file:///w/a.py", SOURCE),
        ("javascript", "file:///w/a.js", 'function 名(a) {\n  const s = "🎉";\n  return a + s;\n}\n'),
        ("typescript", "file:///w/a.ts", "let x: string = '中文 😀';\nfunction f(): number { return 1 }\n"),
        ("typescriptreact", "file:///w/a.tsx", "const A = () => <div>日本 😀</div>;\n"),
        ("go", "file:///w/a.go", 'package main\n\nfunc 名() string {\n\treturn "😀 中"\n}\n'),
        ("rust", "file:///w/a.rs", 'fn main() {\n    let s = "🦀 中文";\n    println!("{}", s);\n}\n'),
    ],
)
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_random_incremental_edits_equal_fresh_parse(
    language_id: str, uri: str, text: str, encoding: str
) -> None:
    rng = random.Random(f"{language_id}-{encoding}")
    store = DocumentStore(encoding)
    store.open(uri, language_id, 0, text)
    doc = store.get(uri)
    assert doc.tree is not None
    inserts = [
        "x",
        "😀",
        "中文",
        "\n",
        "\r\n",
        "{",
        "}",
        "(",
        ")",
        '"',
        "  ",
        "é",
        "def g():\n    pass\n",
        "",
    ]
    expected = text
    for version in range(1, 120):
        a, b = sorted(rng.randrange(len(expected) + 1) for _ in range(2))
        if rng.random() < 0.5:
            b = min(len(expected), a + rng.randrange(3))
        # Never split a CRLF pair, which would move a character onto a terminator position.
        while 0 < a < len(expected) and expected[a - 1] == "\r" and expected[a] == "\n":
            a -= 1
        while 0 < b < len(expected) and expected[b - 1] == "\r" and expected[b] == "\n":
            b += 1
        a = min(a, b)
        new = rng.choice(inserts)
        start = store.position_at(uri, a)
        end = store.position_at(uri, b)
        store.change(uri, version, [TextChange((*start, *end), new)])
        expected = expected[:a] + new + expected[b:]
        assert doc.text == expected
        if version % 7 == 0:
            assert doc.tree is not None  # reparse now and then, so later edits apply to a reparsed tree
    fresh = new_parser(doc.language)
    assert fresh is not None
    assert _sexp(doc.tree) == _sexp(fresh.parse(expected.encode("utf-8")))
    assert doc.data == expected.encode("utf-8")
    # The line index agrees with a rebuilt one after all those lazy shifts.
    for line, line_text in enumerate(expected.split("\n")):
        start = sum(len(entry) + 1 for entry in expected.split("\n")[:line])
        assert store.offset_at(uri, line, 0) == start
        assert doc.line_text(line) == line_text.removesuffix("\r")


def test_full_replacement_and_multiple_changes_in_order() -> None:
    store = DocumentStore("utf-16")
    store.open(URI, "python", 1, "a\nb\n")
    store.change(URI, 2, [TextChange(None, "x = 1\ny = 2\n"), TextChange((1, 0, 1, 1), "zz")])
    doc = store.get(URI)
    assert doc.text == "x = 1\nzz = 2\n"
    assert doc.version == 2
    assert "assignment" in _sexp(doc.tree)


def test_unsupported_language_has_no_tree_but_edits_work() -> None:
    store = DocumentStore()
    store.open("file:///w/a.lua", "lua", 1, "local x = 1\n")
    store.change("file:///w/a.lua", 2, [TextChange((0, 6, 0, 7), "y")])
    doc = store.get("file:///w/a.lua")
    assert doc.tree is None
    assert doc.text == "local y = 1\n"
