"""The completion fallback's row label reads as the text it inserts."""

from __future__ import annotations

import pytest

from lsp_server.handlers.completions import completion_label


@pytest.mark.parametrize(
    ("inserted", "label"),
    [
        ("if n < 2:", "if n < 2:"),
        ("if n < 2:\n        return n", "if n < 2:…"),
        ("\n    return n", "⏎    return n"),
        ("x" * 100, "x" * 79 + "…"),
        ("", ""),
    ],
)
def test_label_is_the_first_inserted_line_spaces_kept(inserted: str, label: str) -> None:
    assert completion_label(inserted) == label
