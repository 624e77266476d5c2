"""Syntax contexts and the draft lengths the syntax policy gives them."""

from __future__ import annotations

import pytest

from engine.api import DraftContext
from lsp_server.context.policy import (
    DEFAULT_LENGTHS,
    SYNTAX_CONTEXTS,
    FixedDraftPolicy,
    SyntaxDraftPolicy,
    syntax_context_of,
)


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


def _ctx(text_before: str, lookup_hit: bool = False) -> DraftContext:
    return DraftContext(text_before=text_before, generated="", drafter="model", lookup_hit=lookup_hit)


def test_policy_drafts_longer_where_code_is_predictable() -> None:
    policy = SyntaxDraftPolicy()
    predictable = policy.max_draft_tokens(_ctx("def f(x):\n"))
    decision = policy.max_draft_tokens(_ctx("def f(x):\n    "))
    after_operator = policy.max_draft_tokens(_ctx("y = x + "))
    assert predictable == DEFAULT_LENGTHS["indentation"]
    assert predictable > decision
    assert predictable > after_operator
    assert policy.max_draft_tokens(_ctx("y = x + ", lookup_hit=True)) == policy.lookup_length
    capped = SyntaxDraftPolicy(max_length=2)
    assert capped.max_draft_tokens(_ctx("def f(x):\n")) == 2
    assert FixedDraftPolicy(5).max_draft_tokens(_ctx("anything")) == 5
