"""Syntax-tuned draft lengths: draft far ahead where code is predictable, briefly at decision points.

`syntax_context_of` names the situation before the next token; `SyntaxDraftPolicy` maps it to a maximum
draft length. The benchmark measures acceptance per context with the same classifier, which is how the
table below is meant to be tuned (and checked against the best fixed length).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from engine.api import DraftContext
from lsp_server.context.syntax import CLOSERS, OPENERS

SYNTAX_CONTEXTS = (
    "indentation",  # right after a newline: whitespace comes next
    "closing",  # right after a closing bracket: `:`, `)`, `;` or a newline usually follow
    "known-identifier",  # inside a word that starts an identifier already in the file
    "repeated",  # the line so far starts like an earlier line (repeated structure)
    "identifier",  # inside a word that matches nothing seen
    "other",
    "after-open",  # right after an opening bracket: the first argument is a choice
    "after-operator",  # right after an operator or comma: an operand is a choice
    "statement-start",  # indentation done, a new statement begins: the biggest choice
)

DEFAULT_LENGTHS: Mapping[str, int] = MappingProxyType(
    {
        "indentation": 10,
        "closing": 8,
        "known-identifier": 10,
        "repeated": 12,
        "identifier": 6,
        "other": 5,
        "after-open": 4,
        "after-operator": 3,
        "statement-start": 3,
    }
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATOR_CHARS = set("=+-*/%<>!&|^~,.?:@")


def identifiers_in(text: str, min_length: int = 3) -> frozenset[str]:
    return frozenset(word for word in _IDENTIFIER.findall(text) if len(word) >= min_length)


def syntax_context_of(text_before: str, known_identifiers: Iterable[str] = ()) -> str:
    """Name the syntax context of the next token, given the text before it (one of SYNTAX_CONTEXTS)."""
    line_start = text_before.rfind("\n") + 1
    line = text_before[line_start:]
    if line_start > 0 and line == "":
        return "indentation"
    if line.strip() == "":
        return "statement-start" if line else "other"
    code = line.lstrip()
    if len(code) >= 4 and _starts_an_earlier_line(text_before[:line_start], code):
        return "repeated"
    last = line[-1]
    if last in CLOSERS:
        return "closing"
    if last in OPENERS:
        return "after-open"
    if last.isalnum() or last == "_":
        match = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", line)
        if match is None:
            return "other"  # digits
        word = match.group(0)
        earlier = text_before[: line_start + match.start()]
        known = set(known_identifiers) | set(_IDENTIFIER.findall(earlier))
        if any(name.startswith(word) and name != word for name in known):
            return "known-identifier"
        return "identifier"
    stripped = line.rstrip()
    if stripped and stripped[-1] in _OPERATOR_CHARS:
        return "after-operator"
    if stripped and stripped[-1] in OPENERS:
        return "after-open"
    return "other"


def _starts_an_earlier_line(earlier_text: str, code: str) -> bool:
    # Compare against stripped earlier lines (indentation may differ), in a bounded window.
    return any(
        stripped.startswith(code) and len(stripped) > len(code)
        for stripped in (line.lstrip() for line in earlier_text[-4000:].split("\n"))
    )


@dataclass
class SyntaxDraftPolicy:
    """An engine.api.DraftLengthPolicy: the maximum draft length for the next speculative round."""

    lengths: Mapping[str, int] = field(default_factory=lambda: DEFAULT_LENGTHS)
    known_identifiers: frozenset[str] = frozenset()
    lookup_length: int = 16  # a lookup drafter that found a match copies text: let it run
    max_length: int = 16

    def max_draft_tokens(self, ctx: DraftContext) -> int:
        if ctx.lookup_hit:
            return min(self.lookup_length, self.max_length)
        context = syntax_context_of(ctx.text_before, self.known_identifiers)
        return max(1, min(self.lengths.get(context, DEFAULT_LENGTHS["other"]), self.max_length))


@dataclass(frozen=True)
class FixedDraftPolicy:
    """The baseline the syntax policy is compared against: the same length everywhere."""

    length: int

    def max_draft_tokens(self, ctx: DraftContext) -> int:
        return self.length
