"""Fault suite, documents: when the server's copy of a document may differ from the client's (a version that
goes backwards, an edit that does not apply, a lone carriage return) it suggests nothing until a full text
resyncs it; and multi-line suggestions use the document's line ending."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fault_support import Served, Wire, assert_clean

URI = "file:///w/doc.py"
RULES = [["def alpha(", "a):\n    return 'A'"]]
SUGGESTION = "a):\n    return 'A'"


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[Wire]:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    served = Served(["--backend", "fake", "--fake-rules", str(rules)], tmp_path)
    try:
        served.wire.initialize()
        served.wire.wait_ready()
        yield served.wire
        served.wire.request("shutdown")
        served.wire.notify("exit")
        assert served.wait_exit()[0] == 0
        assert_clean(served.stderr)
    finally:
        served.kill()


def _insert(line: int, character: int, text: str) -> dict[str, Any]:
    at = {"line": line, "character": character}
    return {"range": {"start": at, "end": at}, "text": text}


def _resync(wire: Wire, version: int, text: str = "def alpha(") -> None:
    wire.change(URI, version, [{"text": text}])
    assert wire.suggestion(URI, 0, 10) == SUGGESTION  # a full text brings suggestions back


@pytest.mark.slow
def test_a_version_that_goes_backwards_gets_no_suggestion_until_a_full_text(wire: Wire) -> None:
    wire.open(URI, "def alpha(", version=5)
    assert wire.suggestion(URI, 0, 10) == SUGGESTION
    wire.change(URI, 3, [_insert(0, 0, "x")])  # older than what the server has
    assert wire.suggestion(URI, 0, 10) == ""  # the client's text is not ours: nothing is suggested
    assert "does not follow" in wire.text_of("window/logMessage")
    wire.change(URI, 6, [_insert(0, 0, "y")])  # even a newer incremental edit: the copy is untrusted
    assert wire.suggestion(URI, 0, 11) == ""
    _resync(wire, 7)


@pytest.mark.slow
def test_an_edit_that_fails_to_apply_stops_suggestions_until_a_full_text(wire: Wire) -> None:
    wire.open(URI, "def alpha(")
    wire.change(URI, 2, [_insert(7, 0, "import os\n")])  # line 7 does not exist here
    assert wire.suggestion(URI, 0, 10) == ""
    assert "rejected" in wire.text_of("window/logMessage")
    _resync(wire, 3)


@pytest.mark.slow
def test_a_lone_carriage_return_is_a_line_break_the_server_will_not_guess_at(wire: Wire) -> None:
    wire.open(URI, "def alpha(\rx = 1")  # to the client (LSP), two lines
    assert wire.suggestion(URI, 0, 10) == ""
    _resync(wire, 2, "def alpha(\nx = 1")


@pytest.mark.slow
def test_multi_line_suggestions_use_the_documents_line_ending(wire: Wire) -> None:
    wire.open(URI, "import os\r\n\r\ndef alpha(")
    assert wire.suggestion(URI, 2, 10) == "a):\r\n    return 'A'"
    wire.open("file:///w/unix.py", "import os\n\ndef alpha(")
    assert wire.suggestion("file:///w/unix.py", 2, 10) == SUGGESTION
