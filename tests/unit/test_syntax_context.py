"""The syntax context classifier: which situation the next token is in."""

from __future__ import annotations

import pytest

from lsp_server.context.syntax_context import SYNTAX_CONTEXTS, syntax_classifier, syntax_context_of


@pytest.mark.parametrize(
    ("text_before", "expected"),
    [
        ("def f(x):\n", "indentation"),
        ("def f(x):\n    ", "statement-start"),
        ("    y = foo(x)", "closing"),
        ("    y = foo(", "after-open"),
        ("    y = x +", "after-operator"),
        ("    y = x + ", "after-operator"),
        ("    y = f(a, ", "after-operator"),
        ("total_count = 0\nprint(total_c", "known-identifier"),
        ("print(zzz", "identifier"),
        ("    self.assertEqual(a, 1)\n    self.assertEqual(b, 2)\n    self.assert", "repeated"),
        ("x = 12", "other"),
    ],
)
def test_syntax_context_of(text_before: str, expected: str) -> None:
    assert syntax_context_of(text_before) == expected
    assert expected in SYNTAX_CONTEXTS


def test_known_identifiers_from_the_file_count() -> None:
    assert syntax_context_of("print(total_c") == "identifier"
    assert syntax_context_of("print(total_c", known_identifiers={"total_count"}) == "known-identifier"


def test_a_classifier_binds_the_files_identifiers() -> None:
    classify = syntax_classifier({"total_count"})
    assert classify("print(total_c") == "known-identifier"
    assert syntax_classifier()("print(total_c") == "identifier"
